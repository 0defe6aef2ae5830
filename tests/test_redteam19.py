"""Session 19's red team of the source and symbol policy (CPU only; nvcc builds, no GPU). Two holes were ACCEPTED by
``compile_kernel`` with the policy on and are closed here:

1. **Interposition**: a candidate that *defines* ``extern "C" int open(...)`` (or ``dlopen``, ``dlsym``, any libc or
   driver function) as a stub and calls it imports nothing (``nm -D --undefined-only`` is empty), yet the call went
   through a PLT slot that the dynamic linker bound to the first definition in the process, libc's: the built
   library read /etc/passwd, or found any function through ``dlopen``/``dlsym``. Now the build links with
   ``-Xlinker -Bsymbolic`` and ``policy.scan_interposable`` refuses any dynamic relocation naming a symbol the
   library defines.
2. **A preprocessing switch**: ``#if __has_include("/proc/self/fd/3")`` is false in the policy's ``nvcc -E`` passes
   (output to a pipe) and true in the build (gcc writes its output to a file: fd 3), so the scans read the ``#else``
   branch and nvcc built the other one: ``.incbin "/etc/passwd"`` in the library, ``cudaGetDriverEntryPoint(
   "cuStreamCreate")``. Now the build keeps its preprocessed files (``nvcc --keep``) and a build whose text differs
   from the text scanned is refused before any of its output is shown (``nvcc_passes.built_text_mismatch``).

Also: ``#include_next`` and ``#import`` are includes to the raw scan (before, only the ``-E`` scan refused
``#include_next "/etc/hostname"``, after the compiler had read it).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.compile import compile_kernel, find_nvcc, nvcc_flags
from harness.errors import PolicyError
from harness.nvcc_passes import built_text_mismatch
from harness.policy import (
    check_library,
    list_includes,
    parse_nm_defined,
    run_tool,
    scan_interposable,
    scan_source_includes,
)
from tests.test_policy import _nvcc_or_skip

_FWD = 'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) { return 0; }\n'
#: Hole 1: stubs named like libc's functions, called: with the PLT bound to libc, rt19_leak returns passwd's bytes.
INTERPOSE = ('#include "attn_abi.h"\n'
             'extern "C" int open(const char*, int, ...) { return -7; }\n'
             'extern "C" long read(int, void*, unsigned long) { return -7; }\n'
             'extern "C" void* dlopen(const char*, int) { return 0; }\n' + _FWD +
             'extern "C" long rt19_leak(char* buf, unsigned long n) {\n'
             '    int fd = open("/etc/passwd", 0);\n'
             '    if (fd < 0) return fd;\n'
             '    return read(fd, buf, n) + (dlopen("libc.so.6", 2) != 0);\n'
             '}\n')
#: Hole 2: the branch the build takes is not the one the policy's -E passes read.
SWITCH = ('#include "attn_abi.h"\n'
          '#if __has_include("/proc/self/fd/3")\n'
          'asm(".pushsection .rodata\\n.globl rt19_blob\\nrt19_blob:\\n.incbin \\"/etc/passwd\\"\\n.byte 0\\n'
          '.popsection");\n'
          'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) {\n'
          '    void* fn = 0; cudaDriverEntryPointQueryResult q;\n'
          '    return (int)cudaGetDriverEntryPoint("cuStreamCreate", &fn, 0, &q);\n'
          '}\n'
          '#else\n' + _FWD + '#endif\n')

#: A GNU unique object named `open` (``.type`` is not refused), its address taken: bound to itself or to libc's?
UNIQUE = ('#include "attn_abi.h"\n'
          'asm(".pushsection .data\\nrt19_anchor: .quad 0\\n.globl open\\n.type open, @gnu_unique_object\\n"\n'
          '    ".size open, 8\\nopen: .quad 0\\n.popsection");\n'
          'extern "C" char open[];\n'
          'extern "C" char rt19_anchor[] __attribute__((visibility("hidden")));\n' + _FWD +
          'extern "C" long rt19_where() { return (long)(void*)open - (long)(void*)rt19_anchor; }\n')


def _call(lib: str | Path, fn: str) -> int:
    """``fn(buf, 200)`` of the library ``lib`` (a ``long`` function), called in a fresh Python with the toolkit's CUDA
    runtime loaded first (no GPU is needed to load the library)."""
    homes = [Path(find_nvcc()).resolve().parent.parent, Path("/usr/local/cuda")]
    cudart = sorted(p for h in homes for p in (h / "lib64").glob("libcudart.so.1*"))
    if not cudart:
        pytest.skip("no libcudart.so next to nvcc")
    code = ("import ctypes, sys; ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL); lib = ctypes.CDLL(sys.argv[2]); "
            "f = getattr(lib, sys.argv[3]); f.restype = ctypes.c_long; b = ctypes.create_string_buffer(200); "
            "print(f(b, 199))")
    out = subprocess.run([sys.executable, "-c", code, str(cudart[0]), str(lib), fn], capture_output=True, text=True,
                         timeout=60, check=True)
    return int(out.stdout.strip())


_RELOCS = """
Relocation section '.rela.plt' at offset 0x620 contains 3 entries:
    Offset             Info             Type               Symbol's Value  Symbol's Name + Addend
0000000000005000  0000000200000007 R_X86_64_JUMP_SLOT     0000000000000000 __cudaRegisterFatBinaryEnd@libcudart.so.13 + 0
0000000000005010  0000000900000007 R_X86_64_JUMP_SLOT     00000000000011c0 read + 0
0000000000004fe0  0000000800000006 R_X86_64_GLOB_DAT      0000000000000000 __cxa_finalize@GLIBC_2.2.5 + 0
0000000000005028  0000000b00000007 R_X86_64_JUMP_SLOT     0000000000000000 dlsym + 0
0000000000005030  0000000c00000006 R_X86_64_GLOB_DAT      0000000000000000 _ZZ4instvE1x + 0
0000000000004de0  0000000000000008 R_X86_64_RELATIVE                         1180
"""


def test_relocations_naming_a_defined_symbol_are_refused() -> None:
    defined = {"read": "T", "dlsym": "W", "_ZZ4instvE1x": "u", "attn_fwd": "T"}
    got = scan_interposable(_RELOCS, defined)
    assert [(v.kind, v.name) for v in got] == [("symbol", "read"), ("symbol", "dlsym")]  # unique objects pass
    assert "dynamic linker" in got[0].reason and "Bsymbolic" in got[0].reason
    assert [v.name for v in scan_interposable(_RELOCS, {})] == ["read"]  # a symbol with a value is defined here
    # without DT_SYMBOLIC a unique object could be bound elsewhere too (a unique `open` defined in asm)
    assert [v.name for v in scan_interposable(_RELOCS, defined, symbolic=False)] == ["read", "dlsym", "_ZZ4instvE1x"]
    assert scan_interposable(_RELOCS.replace("00000000000011c0", "0000000000000000"), {"attn_fwd": "T"}) == []
    assert "-Bsymbolic" in nvcc_flags() and nvcc_flags().index("-Bsymbolic") == nvcc_flags().index("-Xlinker") + 1


@pytest.mark.parametrize("directive", ["include_next", "import", " include_next", "  import"])
def test_include_next_and_import_are_includes_to_the_raw_scan(directive: str) -> None:
    text = f'#{directive} "/etc/hostname"\n#{directive} <dlfcn.h>\n'
    assert [n for _, _, n in list_includes(text)] == ["/etc/hostname", "dlfcn.h"]
    got = scan_source_includes(text, "/ws/k.cu", ("/ws",))
    assert [(v.name, v.line) for v in got] == [("/etc/hostname", 1), ("dlfcn.h", 2)]


def test_a_build_text_other_than_the_scanned_text_is_refused(tmp_path: Path) -> None:
    scanned = ['# 1 "/ws/k.cu"\nint a;\nint b;\n', '# 1 "/ws/k.cu"\nint a;\n']
    (tmp_path / "k.cpp1.ii").write_text(scanned[0])
    (tmp_path / "k.cpp4.ii").write_text(scanned[1])
    assert built_text_mismatch(tmp_path, "k", scanned, True) is None
    (tmp_path / "k.cpp4.ii").write_text('# 1 "/ws/k.cu"\nint a;\nasm(".incbin \\"/etc/passwd\\"");\n')
    v = built_text_mismatch(tmp_path, "k", scanned, True)
    assert v is not None and (v.kind, v.name, v.file, v.line) == ("preprocessed", "the host pass", "/ws/k.cu", 2)
    assert "passwd" not in v.describe()  # the built text is never shown
    (tmp_path / "k.cpp4.ii").unlink()  # the build's preprocessing failed where the policy's passed
    assert built_text_mismatch(tmp_path, "k", scanned, False).name == "the host pass"
    (tmp_path / "k.cpp4.ii").write_text(scanned[1])
    (tmp_path / "k.cpp1.ii").unlink()  # a host error (cudafe++) ends a failed build before the device pass
    assert built_text_mismatch(tmp_path, "k", scanned, False) is None
    assert built_text_mismatch(tmp_path, "k", scanned, True).name == "the device pass"
    (tmp_path / "k.cudafe1.cpp").write_text("")  # cudafe++ went through: the device pass ran, and failed
    assert built_text_mismatch(tmp_path, "k", scanned, False).name == "the device pass"
    (tmp_path / "k.cpp1.ii").write_text(scanned[0])
    (tmp_path / "other.ii").write_text("int c;\n")  # any other pass nvcc kept must be one of the scanned texts
    assert built_text_mismatch(tmp_path, "k", scanned, True).name == "a pass"


@pytest.mark.slow
def test_a_defined_libc_function_is_not_bound_to_libc(tmp_path: Path) -> None:
    _nvcc_or_skip()
    (tmp_path / "k.cu").write_text(INTERPOSE)
    res = compile_kernel(tmp_path / "k.cu", cache_dir=tmp_path / "cache")  # stubs are allowed: they stay stubs
    lib = res.library
    defined = parse_nm_defined(run_tool(["nm", "-D", "--defined-only", lib]))
    assert {"open", "read", "dlopen"} <= set(defined)
    assert scan_interposable(run_tool(["readelf", "-rW", "-D", lib]), defined) == []
    assert "SYMBOLIC" in run_tool(["readelf", "-d", lib])
    assert _call(lib, "rt19_leak") == -7  # the stub: nothing of libc's was reached
    # the same source built without -Bsymbolic (the flags before session 19): its calls go through the dynamic
    # linker to libc's open/read/dlopen, with nothing imported; the symbol policy refuses it now
    plain = tmp_path / "plain.so"
    flags = [f for f in nvcc_flags() if f not in ("-Xlinker", "-Bsymbolic")]
    subprocess.run([find_nvcc(), *flags, str(tmp_path / "k.cu"), "-o", str(plain)], check=True, capture_output=True)
    with pytest.raises(PolicyError) as exc:
        check_library(plain)
    names = {v["name"] for v in exc.value.details["violations"]}
    assert {"open", "read", "dlopen"} <= names, names
    assert _call(plain, "rt19_leak") > 1  # the hole: libc's open and read, passwd's bytes


@pytest.mark.slow
def test_a_unique_object_named_like_a_libc_function_binds_to_itself(tmp_path: Path) -> None:
    """-Bsymbolic leaves references to STB_GNU_UNIQUE symbols to the dynamic linker (C++ inline statics need it), so
    a unique ``open`` defined in assembler text keeps its relocation; DT_SYMBOLIC makes the dynamic linker search the
    library itself first, and the reference binds to the library's own ``open``, not libc's."""
    _nvcc_or_skip()
    (tmp_path / "k.cu").write_text(UNIQUE)
    lib = compile_kernel(tmp_path / "k.cu", cache_dir=tmp_path / "cache").library
    assert parse_nm_defined(run_tool(["nm", "-D", "--defined-only", lib]))["open"] == "u"
    assert _call(lib, "rt19_where") == 8  # `open` is the library's own, 8 bytes past its anchor


@pytest.mark.slow
def test_a_has_include_switch_between_the_scans_and_the_build_is_refused(tmp_path: Path) -> None:
    _nvcc_or_skip()
    (tmp_path / "k.cu").write_text(SWITCH)
    with pytest.raises(PolicyError) as exc:
        compile_kernel(tmp_path / "k.cu", cache_dir=tmp_path / "cache")
    (v,) = exc.value.details["violations"]
    assert v["kind"] == "preprocessed" and v["file"] == str(tmp_path / "k.cu"), v
    assert "root:" not in str(exc.value) and "root:" not in str(exc.value.details)
    assert not list((tmp_path / "cache").glob("*/kernel.so"))
