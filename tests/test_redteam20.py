"""Session 20's red team of the source and symbol policy (CPU only; nvcc builds, no GPU). Four candidates were ACCEPTED
by ``compile_kernel`` with the policy on, imported nothing beyond nvcc's own registration symbols, showed no
``syscall`` in ``objdump -d`` (``policy.scan_host_code``), and read /etc/hostname through a raw system call when
``rt20_leak`` was called (no GPU needed):

1. **An immediate**: plain C++, no asm. ``x ^ 0xc3050f`` compiles to ``48 35 0f 05 c3 00``; entered one byte past the
   opcode it is ``syscall; ret``. A variadic call through that address sets %eax to its count of vector arguments
   (2 = open with two doubles, 0 = read), and %rdi, %rsi, %rdx are the call's first arguments.
2. **Data in a code section**: ``__attribute__((section(".text.rt20")))`` on a byte array: the linker puts it in .text
   (executable), and objdump prints an object symbol's bytes as data, never as instructions.
3. **Writable code**: a function in a ``.data.*`` section makes the data segment RWX; the library writes
   ``syscall; ret`` there at run time.
4. **An executable stack**: ``asm(".section .note.GNU-stack,\\"x\\"...")`` makes loading the library turn the
   process's stack executable; the library writes ``syscall; ret`` into a local array and calls it.

Closed by ``policy.scan_executable`` (called by ``check_library``): no writable and executable segment, no executable
stack, no text relocations, and no system call instruction bytes anywhere in an executable segment except inside a
displacement the linker chose (a relative branch's, a RIP-relative operand's: honest builds hold such bytes there,
``jne +0x50f`` is ``0f 85 0f 05 00 00``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.compile import compile_kernel, find_nvcc, nvcc_flags
from harness.errors import PolicyError
from harness.policy import (
    _disp_span,
    check_imports,
    check_library,
    library_imports,
    run_tool,
    scan_executable,
    scan_host_code,
)
from tests.test_policy import _nvcc_or_skip
from tests.test_redteam19 import _call

_HEAD = ('#include "attn_abi.h"\n'
         'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) { return 0; }\n'
         'typedef long (*rt20_fn)(long, long, long, long);\n')
#: ``mov %rdi,%rax; mov %rsi,%rdi; mov %rdx,%rsi; mov %rcx,%rdx``: a syscall's number and arguments from a call's.
_MOVS = "0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x48, 0x89, 0xca"
_LEAK = ('    long fd = ((rt20_fn)(void*)c)(2, (long)"/etc/hostname", 0, 0);\n'
         '    long got = fd < 0 ? fd : ((rt20_fn)(void*)c)(0, fd, (long)buf, (long)n);\n')

IMMEDIATE = ('#include "attn_abi.h"\n'
             'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) { return 0; }\n'
             'extern "C" unsigned long rt20_mix(unsigned long x) { return x ^ 0xc3050fUL; }\n'
             'typedef long (*rt20_open_t)(const char*, long, long, ...);\n'
             'typedef long (*rt20_read_t)(long, char*, unsigned long, ...);\n'
             'extern "C" long rt20_leak(char* buf, unsigned long n) {\n'
             '    const unsigned char* c = (const unsigned char*)(void*)&rt20_mix;\n'
             '    volatile unsigned char lo = 0x0e, hi = 0xc2;\n'
             '    while (!(c[0] == lo + 1 && c[1] == 5 && c[2] == hi + 1)) ++c;\n'
             '    long fd = ((rt20_open_t)(const void*)c)("/etc/hostname", 0, 0, 0.0, 0.0);\n'
             '    return fd < 0 ? fd : ((rt20_read_t)(const void*)c)(fd, buf, n);\n'
             '}\n')
TEXT_DATA = (_HEAD + '__attribute__((section(".text.rt20"), used)) static const unsigned char rt20_code[] = {\n'
             f'    {_MOVS}, 0xeb, 0x01, 0xb8, 0x0f, 0x05, 0xc3, 0x90}};\n'
             'extern "C" long rt20_leak(char* buf, unsigned long n) {\n'
             '    const unsigned char* c = rt20_code;\n' + _LEAK + '    return got;\n}\n')
WRITABLE_CODE = (_HEAD + 'extern "C" __attribute__((section(".data.rt20"), noinline)) long rt20_pad(long x) '
                 '{ return x + 1; }\n'
                 'extern "C" long rt20_leak(char* buf, unsigned long n) {\n'
                 '    volatile unsigned char* w = (unsigned char*)(void*)&rt20_pad;\n'
                 f'    const unsigned char code[] = {{{_MOVS}, 0x0e, 5, 0xc3}};\n'
                 '    for (int i = 0; i < 15; ++i) w[i] = code[i] + (i == 12);\n'
                 '    unsigned char* c = (unsigned char*)(void*)&rt20_pad;\n' + _LEAK + '    return got;\n}\n')
EXEC_STACK = (_HEAD + 'asm(".section .note.GNU-stack,\\"x\\",@progbits\\n.previous");\n'
              'extern "C" long rt20_leak(char* buf, unsigned long n) {\n'
              '    unsigned char c[16];\n'
              '    volatile unsigned char* w = c;\n'
              f'    const unsigned char code[] = {{{_MOVS}, 0x0e, 5, 0xc3}};\n'
              '    for (int i = 0; i < 15; ++i) w[i] = code[i] + (i == 12);\n' + _LEAK + '    w[0] = 0;\n'
              '    return got;\n}\n')

CASES = {"immediate": (IMMEDIATE, "bytes 0f 05 at"), "text_data": (TEXT_DATA, "bytes 0f 05 at"),
         "writable_code": (WRITABLE_CODE, "writable code"), "exec_stack": (EXEC_STACK, "executable stack")}


def test_displacements_the_linker_chose_may_hold_syscall_bytes() -> None:
    """Honest builds of the campaign's kernels hold `0f 05` in a jump's rel32 and in a RIP-relative displacement."""
    jne = (0xAA0B, bytes.fromhex("0f850f050000"), "jne    af20 <dispatch+0x570>")
    assert _disp_span(*jne) == (0xAA0D, 0xAA11)
    lea = (0x5BCA, bytes.fromhex("488d1d0f051300"), "lea    0x13050f(%rip),%rbx        # 1360e0 <x>")
    assert _disp_span(*lea) == (0x5BCD, 0x5BD1)
    store = (0x10, bytes.fromhex("c7050f05130001000000"), "movl   $0x1,0x13050f(%rip)        # 13052f <x>")
    assert _disp_span(*store) == (0x12, 0x16)  # the displacement before the immediate
    assert _disp_span(0x1173, bytes.fromhex("48350f05c300"), "xor    $0xc3050f,%rax") is None  # an immediate
    plt = (0x10, bytes.fromhex("ff25ca4f1300"), "jmp    *0x134fca(%rip)        # 134fe0 <x@libc.so.6>")
    assert _disp_span(*plt) == (0x12, 0x16)  # an indirect jump through a RIP-relative slot: its displacement
    assert _disp_span(0x10, bytes.fromhex("ffd0"), "call   *%rax") is None


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hidden_system_call_is_refused(tmp_path: Path, case: str) -> None:
    _nvcc_or_skip()
    source, name = CASES[case]
    (tmp_path / "k.cu").write_text(source)
    with pytest.raises(PolicyError) as exc:
        compile_kernel(tmp_path / "k.cu", cache_dir=tmp_path / "cache")
    names = [v["name"] for v in exc.value.details["violations"]]
    assert any(n.startswith(name) for n in names), names
    assert not list((tmp_path / "cache").glob("*/kernel.so"))
    # the hole: the same source built with the build's flags passes every check but scan_executable (imports,
    # libraries, interposition, objdump's text), and its rt20_leak reads /etc/hostname through a raw system call
    lib = tmp_path / "plain.so"
    subprocess.run([find_nvcc(), *nvcc_flags(), str(tmp_path / "k.cu"), "-o", str(lib)], check=True,
                   capture_output=True, cwd=tmp_path)
    assert check_imports(*library_imports(lib)) == []
    assert scan_host_code(run_tool(["objdump", "-d", "--no-show-raw-insn", str(lib)])) == []
    with pytest.raises(PolicyError) as exc:  # check_library refuses it through scan_executable only
        check_library(lib)
    assert [v["name"] for v in exc.value.details["violations"]] == [
        v.name for v in scan_executable(lib, run_tool(["readelf", "-d", str(lib)]))]
    hostname = Path("/etc/hostname")
    if hostname.is_file() and hostname.stat().st_size:
        assert _call(lib, "rt20_leak") == len(hostname.read_bytes()[:199])
