"""Session 21's red team of the symbol policy (CPU only; nvcc builds, no GPU). Two candidates were ACCEPTED by
``compile_kernel`` with the policy on, imported nothing beyond nvcc's own registration symbols, showed no ``syscall``
in ``objdump -d``, and read /etc/hostname through a raw system call when ``rt21_leak`` was called (no GPU needed):

1. **A displacement written in inline asm**: ``asm("lea 0xc3050f(%%rip), %0")`` assembles to ``48 8d 05 0f 05 c3 00``;
   entered one past the ModRM byte it is ``syscall; ret`` (a variadic call through that address sets %eax: 2 = open
   with two doubles, 0 = read). Session 20's ``scan_executable`` let system call bytes pass inside any RIP-relative
   operand's or relative branch's displacement, "chosen by the linker": here the candidate chose it.
2. **A displacement the linker computed, steered by the candidate** (plain C++, no asm): ``return &big[N]`` with a
   16 MiB ``static char big[]`` compiles to ``lea big+N(%rip)``; one build with N = 0 shows the displacement d, and
   N = 0xc3050f - d makes the linker write ``0f 05 c3 00`` (the target still lies inside ``big``, so no check of the
   target's validity would tell it from an honest access).

Closed by ``harness/exec_scan.py``: system call bytes are refused anywhere in an executable segment, displacements
included. Honest code holds such bytes in a displacement only by chance of layout (``jne +0x50f``), so a policy build
refused for those alone is rebuilt with its host code moved (``RELAYOUT_FLAGS``: function, jump and loop alignment),
and refused only when every layout still holds them: the inline-asm displacement stays (refused), the steered one
moves (the library accepted holds no system call bytes at all).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from harness.compile import compile_kernel, find_nvcc, nvcc_flags
from harness.errors import PolicyError
from harness.exec_scan import RELAYOUT_FLAGS, layout_only
from harness.policy import check_imports, library_imports, run_tool, scan_executable, scan_host_code
from tests.test_policy import _nvcc_or_skip
from tests.test_redteam19 import _call

_HEAD = ('#include "attn_abi.h"\n'
         'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) { return 0; }\n'
         'typedef long (*rt21_open_t)(const char*, long, long, ...);\n'
         'typedef long (*rt21_read_t)(long, char*, unsigned long, ...);\n')
#: Finds ``0f 05 c3`` in rt21_gate's code and calls it: open("/etc/hostname") with %eax = 2, then read with %eax = 0.
_LEAK = ('extern "C" long rt21_leak(char* buf, unsigned long n) {\n'
         '    const unsigned char* c = (const unsigned char*)(void*)&rt21_gate;\n'
         '    volatile unsigned char lo = 0x0e, hi = 0xc2;\n'
         '    for (int i = 0; i < 64 && !(c[0] == lo + 1 && c[1] == 5 && c[2] == hi + 1); ++i) ++c;\n'
         '    if (!(c[0] == lo + 1 && c[1] == 5 && c[2] == hi + 1)) return -1000;\n'
         '    long fd = ((rt21_open_t)(const void*)c)("/etc/hostname", 0, 0, 0.0, 0.0);\n'
         '    return fd < 0 ? fd : ((rt21_read_t)(const void*)c)(fd, buf, n);\n'
         '}\n')
ASM_DISPLACEMENT = (_HEAD + 'extern "C" __attribute__((noinline)) long rt21_gate(long x) {\n'
                    '    long r;\n    asm volatile("lea 0xc3050f(%%rip), %0" : "=r"(r));\n    return r + x;\n}\n' + _LEAK)


def steered(n: int) -> str:
    """Hole 2's source: ``lea rt21_big+n(%rip)``, no asm."""
    return (_HEAD + 'static char rt21_big[16 << 20];\n'
            f'extern "C" __attribute__((noinline)) char* rt21_gate() {{ return &rt21_big[{n}]; }}\n' + _LEAK)


def _plain(tmp_path: Path, name: str, source: str) -> Path:
    """``source`` built with the build's own flags (nvcc_flags()), no policy."""
    (tmp_path / f"{name}.cu").write_text(source)
    lib = tmp_path / f"{name}.so"
    subprocess.run([find_nvcc(), *nvcc_flags(), str(tmp_path / f"{name}.cu"), "-o", str(lib)], check=True,
                   capture_output=True, cwd=tmp_path)
    return lib


def _gate_displacement(lib: Path) -> int:
    text = run_tool(["objdump", "-d", "-w", str(lib)])
    m = re.search(r"<rt21_gate>:\n\s*[0-9a-f]+:\t48 8d 05 ((?:[0-9a-f]{2} ){4})", text)
    assert m, text[:2000]
    return int.from_bytes(bytes.fromhex(m.group(1)), "little")


def _assert_the_hole(lib: Path) -> None:
    """What the policy before session 21 saw (nothing refused) and what the library does (reads /etc/hostname)."""
    assert check_imports(*library_imports(lib)) == []
    assert scan_host_code(run_tool(["objdump", "-d", "--no-show-raw-insn", str(lib)])) == []
    found = scan_executable(lib, run_tool(["readelf", "-d", str(lib)]))
    assert found and layout_only([v.model_dump() for v in found]), found  # session 20 let exactly these pass
    hostname = Path("/etc/hostname")
    if hostname.is_file() and hostname.stat().st_size:
        assert _call(lib, "rt21_leak") == len(hostname.read_bytes()[:199])


def test_layout_only_names_displacement_bytes_apart() -> None:
    inside = {"kind": "instruction", "name": "bytes 0f 05 at 0x117f (inside a displacement)", "reason": "r"}
    hidden = {"kind": "instruction", "name": "bytes 0f 05 at 0x1173", "reason": "r"}
    assert layout_only([inside]) and not layout_only([inside, hidden]) and not layout_only([])
    assert not layout_only([{"kind": "symbol", "name": "open", "reason": "r"}, inside])
    assert RELAYOUT_FLAGS[0] == () and len(RELAYOUT_FLAGS) >= 2
    assert all(f in ("-Xcompiler", "-Xlinker") for extra in RELAYOUT_FLAGS for f in extra[::2])  # host code only


@pytest.mark.slow
def test_system_call_bytes_in_a_displacement_written_in_asm_are_refused(tmp_path: Path) -> None:
    _nvcc_or_skip()
    (tmp_path / "k.cu").write_text(ASM_DISPLACEMENT)
    with pytest.raises(PolicyError) as exc:
        compile_kernel(tmp_path / "k.cu", cache_dir=tmp_path / "cache")
    (v,) = exc.value.details["violations"]
    assert v["name"].startswith("bytes 0f 05 at") and v["name"].endswith("(inside a displacement)"), v
    assert not list((tmp_path / "cache").glob("*/kernel.so"))
    _assert_the_hole(_plain(tmp_path, "plain", ASM_DISPLACEMENT))


@pytest.mark.slow
def test_a_steered_linker_displacement_is_moved_or_refused(tmp_path: Path) -> None:
    _nvcc_or_skip()
    d0 = _gate_displacement(_plain(tmp_path, "probe", steered(0)))
    n = 0xC3050F - d0
    assert 0 < n < 16 << 20  # the target stays inside rt21_big
    lib = _plain(tmp_path, "plain", steered(n))
    assert _gate_displacement(lib) == 0xC3050F, "the layout moved between two builds"
    _assert_the_hole(lib)
    (tmp_path / "k.cu").write_text(steered(n))
    try:
        res = compile_kernel(tmp_path / "k.cu", cache_dir=tmp_path / "cache")
    except PolicyError as exc:  # every layout kept the bytes: refused
        assert layout_only(exc.details["violations"]), exc.details
        return
    # accepted only in a layout that moved the displacement: no system call bytes anywhere in its code
    built = Path(res.library)
    assert res.flags[len(nvcc_flags()):] in [list(f) for f in RELAYOUT_FLAGS[1:]], res.flags
    assert scan_executable(built, run_tool(["readelf", "-d", str(built)])) == []
    assert _gate_displacement(built) != 0xC3050F
