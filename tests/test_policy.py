"""The source/symbol policy's decisions on real spellings, nm/readelf/objdump text and -E markers."""

from __future__ import annotations

import pytest

from harness.errors import PolicyError
from harness.policy import (
    ImportedSymbol,
    PolicyViolation,
    check_imports,
    forbidden_header_reason,
    list_includes,
    parse_needed,
    parse_nm_defined,
    parse_nm_undefined,
    raise_violations,
    scan_host_code,
    scan_preprocessed,
    scan_source_includes,
    symbol_decision,
)


def _nvcc_or_skip() -> None:
    """Skip the calling test where no nvcc is found (its message says why)."""
    from harness.compile import find_nvcc
    from harness.errors import ToolchainError

    try:
        find_nvcc()
    except ToolchainError as err:
        pytest.skip(err.message)


def _secret_and_candidate(tmp_path) -> tuple:
    """``(outside, cand)``: a folder holding secret.txt (TOPSECRET) and the candidate's own folder, both new."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("campaign_secret_value = TOPSECRET\n")
    cand = tmp_path / "cand"
    cand.mkdir()
    return outside, cand


@pytest.mark.parametrize("name", [
    "cublas_v2.h", "cublasLt.h", "cublas_api.h", "cudnn.h", "cudnn_frontend.h", "cutlass/gemm/device/gemm.h",
    "cute/tensor.hpp", "thrust/device_vector.h", "../third_party/cutlass/include/cutlass/cutlass.h",
    "dlfcn.h", "pthread.h", "sys/socket.h", "unistd.h", "fstream", "thread", "/usr/include/dlfcn.h",
    "./sys//mman.h", "spawn.h", "filesystem",
])
def test_forbidden_headers(name: str) -> None:
    assert forbidden_header_reason(name)


@pytest.mark.parametrize("name", [
    "cub/cub.cuh", "cub/block/block_reduce.cuh", "cuda_bf16.h", "cuda_fp16.h", "cuda/barrier", "cuda/pipeline",
    "mma.h", "cuda_pipeline.h", "cstdio", "cmath", "cstdint", "attn_abi.h", "my_thread_utils.h", "threadpool.h",
    "cuda.h", "cudaTypedefs.h",
])
def test_allowed_headers(name: str) -> None:
    assert forbidden_header_reason(name) is None


def test_list_includes_skips_comments_and_keeps_lines() -> None:
    text = ('#include "attn_abi.h"\n'
            "// #include <cublas_v2.h>\n"
            "/* #include <dlfcn.h>\n"
            "   #include <pthread.h> */\n"
            "  #  include <cudnn.h>\n"
            'const char* s = "#include <thread>";\n')
    assert list_includes(text) == [(1, '"', "attn_abi.h"), (5, "<", "cudnn.h")]
    (v,) = scan_source_includes(text, "k.cu")
    assert (v.name, v.file, v.line, v.kind) == ("cudnn.h", "k.cu", 5, "header")
    assert "k.cu:5" in v.describe()


MARKERS = """\
# 0 "k.cu"
# 0 "<built-in>"
# 0 "<command-line>"
# 1 "/usr/include/stdc-predef.h" 1 3 4
# 0 "<command-line>" 2
# 1 "k.cu"
# 1 "/cuda/include/cub/cub.cuh" 1
# 1 "/cuda/include/cccl/thrust/advance.h" 1
int a;
# 2 "/cuda/include/cub/cub.cuh" 2
# 1 "/usr/include/pthread.h" 1 3 4
# 3 "/cuda/include/cub/cub.cuh" 2
# 2 "k.cu" 2


# 1 "/home/me/helper.h" 1
#pragma once

int b;
# 1 "/usr/include/dlfcn.h" 1 3 4
int dlopen_decl;
# 5 "/home/me/helper.h" 2
# 5 "k.cu" 2
int main_body;
"""


def test_scan_preprocessed_only_counts_owned_includers() -> None:
    owned = {"k.cu", "/home/me/helper.h"}
    (v,) = scan_preprocessed(MARKERS, lambda p: p in owned)
    assert (v.name, v.file, v.line) == ("/usr/include/dlfcn.h", "/home/me/helper.h", 4)
    # when the toolkit dir were owned too, CUB's own includes would count
    more = scan_preprocessed(MARKERS, lambda p: not p.startswith("/usr/"))
    assert sorted((x.name, x.file, x.line) for x in more) == [
        ("/cuda/include/cccl/thrust/advance.h", "/cuda/include/cub/cub.cuh", 1),
        ("/usr/include/dlfcn.h", "/home/me/helper.h", 4),
        ("/usr/include/pthread.h", "/cuda/include/cub/cub.cuh", 2),
    ]


NM_UNDEFINED = """\
                 w _ITM_deregisterTMCloneTable
                 U _Unwind_Resume@GCC_3.0
                 U __cudaRegisterFatBinary@libcudart.so.13
                 U __cudaLaunchKernel@libcudart.so.13
                 U __cxa_atexit@GLIBC_2.2.5
                 w __cxa_finalize@GLIBC_2.2.5
                 U cudaFuncSetAttribute@libcudart.so.13
                 U memcpy@GLIBC_2.14
                 U expf@@GLIBC_2.27
                 U _Znwm@GLIBCXX_3.4
                 U dlopen@GLIBC_2.34
                 U frobnicate
"""


def test_parse_nm_and_decisions() -> None:
    syms = parse_nm_undefined(NM_UNDEFINED)
    assert ImportedSymbol(name="memcpy", version="GLIBC_2.14") in syms
    assert ImportedSymbol(name="expf", version="GLIBC_2.27") in syms
    assert ImportedSymbol(name="__cxa_finalize", version="GLIBC_2.2.5", weak=True) in syms
    bad = check_imports(syms, ["libcudart.so.13", "libstdc++.so.6", "libc.so.6"])
    assert [(v.kind, v.name) for v in bad] == [("symbol", "dlopen"), ("symbol", "frobnicate")]
    assert "allow-list" in bad[1].reason


@pytest.mark.parametrize("name", [
    "cudaLaunchKernel", "cudaLaunchKernelExC", "__cudaRegisterFunction", "__cudaPushCallConfiguration",
    "cudaFuncSetAttribute", "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cudaGetDeviceProperties_v2",
    "cudaStreamIsCapturing", "cudaMemsetAsync", "cudaGetDriverEntryPointByVersion", "cudaGetErrorString",
    "memset", "sqrtf", "exp2f", "logf", "__cxa_guard_acquire", "_ZdlPvm", "abort", "__assert_fail",
    "__stack_chk_fail",
])
def test_allowed_symbols(name: str) -> None:
    assert symbol_decision(name)[0], name


@pytest.mark.parametrize("name", [
    "dlopen", "dlsym", "dlmopen", "execve", "fork", "vfork", "system", "popen", "posix_spawn", "pthread_create",
    "_ZNSt6thread15_M_start_threadESt10unique_ptrINS_6_StateESt14default_deleteIS1_EEPFvvE", "open", "open64",
    "fopen", "read", "write", "mmap", "ioctl", "socket", "connect", "bind", "send", "recvfrom", "printf",
    "__printf_chk", "fprintf", "puts", "getenv", "_exit", "cudaMalloc", "cudaMallocAsync", "cudaFree", "cudaMemcpy",
    "cudaMemcpyAsync", "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaStreamCreate",
    "cudaStreamCreateWithFlags", "cudaEventCreate", "cudaSetDevice", "cudaDeviceReset", "cuMemAlloc_v2",
    "sigaction", "some_unknown_symbol",
])
def test_refused_symbols(name: str) -> None:
    ok, reason = symbol_decision(name)
    assert not ok and reason


def test_libraries() -> None:
    readelf = """\
 0x0000000000000001 (NEEDED)             Shared library: [libcudart.so.13]
 0x0000000000000001 (NEEDED)             Shared library: [libcublas.so.13]
 0x0000000000000001 (NEEDED)             Shared library: [libdl.so.2]
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
"""
    needed = parse_needed(readelf)
    assert needed == ["libcudart.so.13", "libcublas.so.13", "libdl.so.2", "libc.so.6"]
    assert parse_needed("  NEEDED               libm.so.6\n") == ["libm.so.6"]
    assert [v.name for v in check_imports([], needed)] == ["libcublas.so.13", "libdl.so.2"]


def test_nm_defined_and_syscall_scan() -> None:
    defined = parse_nm_defined("00000000000014d0 T attn_abi_version\n0000000000001610 T attn_fwd\n")
    assert defined == {"attn_abi_version": "T", "attn_fwd": "T"}
    objdump = ("0000000000001610 <attn_fwd>:\n    1610:\tpush   %rbp\n    1614:\tsyscall\n"
               "    1620:\tcall   1030 <cudaGetLastError@plt>\n")
    (v,) = scan_host_code(objdump)
    assert (v.kind, v.name) == ("instruction", "syscall")
    assert scan_host_code("    1620:\tcall   1030 <my_syscall_wrapper@plt>\n") == []


def test_raise_violations_names_first_and_counts() -> None:
    raise_violations([])
    vs = [PolicyViolation(kind="symbol", name="dlopen", reason="loads code"),
          PolicyViolation(kind="symbol", name="fork", reason="starts a process")]
    with pytest.raises(PolicyError) as exc:
        raise_violations(vs)
    assert "`dlopen`" in exc.value.message and "1 more" in exc.value.message
    assert [v["name"] for v in exc.value.details["violations"]] == ["dlopen", "fork"]


def _pre(body: str) -> str:
    """``body`` as nvcc -E would show a candidate's own lines (a line marker naming the file)."""
    return '# 1 "/ws/k.cu"\n' + body + "\n"


def _owned(path: str) -> bool:
    return path.startswith("/ws/")


def test_driver_entry_points_only_for_whole_literal_tensor_map_names() -> None:
    from harness.policy import scan_driver_entry_points

    for ok in ('cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &st);',
               'cudaGetDriverEntryPoint("cuTensorMap" "EncodeTiled", &fn, 0, &st);',  # concatenated: one name
               'cudaGetDriverEntryPointByVersion(\n   "cuTensorMapEncodeIm2col", &fn, 12000, 0, &st);'):
        assert scan_driver_entry_points(_pre(ok), _owned) == [], ok
    for bad in ('cudaGetDriverEntryPointByVersion("cuStreamCreate", &fn, 12000, 0, &st);',
                'cudaGetDriverEntryPoint("cuTensorMap" "EncodeTiled\\0cuStreamCreate", &fn, 0, &st);',
                'cudaGetDriverEntryPoint("cuTensorMap" "_x" "\\x00cuMemAlloc", &fn, 0, &st);',
                'cudaGetDriverEntryPoint("cuTensorMap", &fn, 0, &st); cudaGetDriverEntryPoint("cuTensorMapX" name, &fn, 0, &st);',
                'cudaGetDriverEntryPoint(u8"cuTensorMapEncodeTiled", &fn, 0, &st);',
                'cudaGetDriverEntryPoint(R"(cuTensorMapEncodeTiled)", &fn, 0, &st);',
                "cudaGetDriverEntryPoint(name, &fn, 0, &st);",
                "auto f = &cudaGetDriverEntryPoint;",
                "(cudaGetDriverEntryPoint)(\"cuTensorMapEncodeTiled\", &fn, 0, &st);"):
        got = scan_driver_entry_points(_pre("int x;\n" + bad), _owned)
        assert got and got[0].line >= 2 and got[0].file == "/ws/k.cu" and "cuTensorMap" in got[0].reason, bad
    # the old prefix rule's bypass: a literal that STARTS with cuTensorMap but names another function as a whole
    got = scan_driver_entry_points(_pre('cudaGetDriverEntryPoint("cuTensorMapX_" "cuStreamCreate" "!", &f, 0, &s);'),
                                   _owned)
    assert got and "cuTensorMapX_cuStreamCreate!" in got[0].reason


def test_driver_entry_point_rule_ignores_comments_and_toolkit_headers() -> None:
    """nvcc -E drops comments, so a comment naming the function refuses nothing; declarations in the
    toolkit's headers (not owned) are not the candidate's calls."""
    from harness.policy import scan_driver_entry_points

    pre = ('# 1 "/usr/local/cuda/include/cuda_runtime_api.h" 1 3\n'
           "extern cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long f);\n"
           '# 2 "/ws/k.cu" 2\nint attn(void) { return 0; }\n')
    assert scan_driver_entry_points(pre, _owned) == []


@pytest.mark.slow
def test_entry_point_rule_on_real_preprocessing(tmp_path) -> None:
    """End to end through nvcc -E: a comment naming the function compiles; token pasting and macro
    stringification that yield another driver function are refused."""
    from harness.compile import compile_kernel

    _nvcc_or_skip()
    body = ('#include "attn_abi.h"\n{extra}\n'
            'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) {{ {call} return 0; }}\n')
    honest = tmp_path / "honest.cu"
    honest.write_text(body.format(extra="// we never call cudaGetDriverEntryPoint(name) here", call=""))
    compile_kernel(honest, cache_dir=tmp_path / "c")  # does not raise
    pasted = tmp_path / "pasted.cu"
    pasted.write_text(body.format(
        extra="#define STR(x) #x\n#define NAME(x) STR(x)\n#define CAT(a, b) a##b",
        call='void* f; cudaDriverEntryPointQueryResult r; '
             'cudaGetDriverEntryPoint(NAME(CAT(cuStream, Create)), &f, cudaEnableDefault, &r);'))
    with pytest.raises(PolicyError, match="cuStreamCreate"):
        compile_kernel(pasted, cache_dir=tmp_path / "c")


def test_raw_scan_refuses_includes_outside_the_folder_and_disowning_directives(tmp_path) -> None:
    """Session 16's red team: `#include "/tmp/x/secret.txt"` under `#ifndef __CUDA_ARCH__` was read by the host
    compile and echoed in its error; `#line`, `# 1 "f" 3` and a local header's `#pragma GCC system_header` made
    `<dlfcn.h>` look like the toolkit's. The raw scan refuses them before the preprocessor reads anything."""
    roots = (str(tmp_path / "cand"), str(tmp_path / "kernels"))
    src = str(tmp_path / "cand" / "k.cu")

    def refused(text: str) -> list[tuple[str, str, int | None]]:
        return [(v.kind, v.name, v.line) for v in scan_source_includes(text, src, roots)]

    text = ('#include "attn_abi.h"\n#include "mine/helpers.h"\n#ifndef __CUDA_ARCH__\n#include "/tmp/x/secret.txt"\n'
            '#endif\n#include </dev/stdin>\n#include "../../etc/passwd"\n#include "../cand/ok.h"\n'
            f'#include "{tmp_path}/cand/abs_inside.h"\n')
    assert refused(text) == [("header", "/tmp/x/secret.txt", 4), ("header", "/dev/stdin", 6),
                             ("header", "../../etc/passwd", 7)]
    assert "outside the candidate's folder" in scan_source_includes(text, src, roots)[0].reason
    assert refused('#line 1 "/usr/local/cuda/include/x.h"\n') == [("directive", "#line", 1)]
    assert refused('int a;\n  # 12 "k.cu" 3\n') == [("directive", '# 12 "', 2)]
    assert refused('#pragma GCC system_header\n_Pragma("GCC system_header")\n') == [
        ("directive", "system_header", 1), ("directive", "system_header", 2)]
    assert refused('// #line 3 "x"  and system_header in a comment\nint b; /* # 1 "y" */\n') == []
    assert refused('#include "/tmp/x/secret.txt"\n'.replace("/tmp/x", str(tmp_path / "cand"))) == []
    assert scan_source_includes('#include "/etc/passwd"\n', src) == []  # no roots: the folder rule is not asked


def test_nvcc_reads_nothing_outside_the_folder_and_not_attnq_stdin(tmp_path) -> None:
    """End to end: a host-only include of a file outside the folder is refused by the policy before nvcc runs (its
    text never reaches an error), and nvcc's stdin is closed (`#include "/dev/stdin"` under policy=False reads
    nothing of attnq's input, e.g. the MCP stdio protocol)."""
    import subprocess
    import sys

    from harness.compile import compile_kernel

    _nvcc_or_skip()
    outside, cand = _secret_and_candidate(tmp_path)
    body = ('#include "attn_abi.h"\n#ifndef __CUDA_ARCH__\n#include "{inc}"\n#endif\n'
            'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) {{ return 0; }}\n')
    (cand / "k.cu").write_text(body.format(inc=outside / "secret.txt"))
    with pytest.raises(PolicyError) as info:
        compile_kernel(cand / "k.cu", cache_dir=tmp_path / "c")
    assert "outside the candidate's folder" in str(info.value) and "TOPSECRET" not in str(info.value.details)
    (cand / "s.cu").write_text(body.format(inc="/dev/stdin"))
    code = ("import sys; from harness.compile import compile_kernel; from harness.errors import AttnqError\n"
            f"try: compile_kernel({str(cand / 's.cu')!r}, cache_dir={str(tmp_path / 'c')!r}, policy=False)\n"
            "except AttnqError as e: print(type(e).__name__, e, e.details)\n")
    r = subprocess.run([sys.executable, "-c", code], input="PIPED_PROTOCOL_BYTES\n", capture_output=True, text=True,
                       timeout=300, check=False)
    assert "PIPED_PROTOCOL_BYTES" not in r.stdout + r.stderr, r.stdout[-2000:]


def test_host_pass_undefs_from_dry_runs() -> None:
    """The host pass is `nvcc -E` without the device-only macros: read from real `nvcc --dryrun` command lines
    (nvcc 13, -gencode compute_90a), and refused when either pass is missing."""
    from harness.errors import ToolchainError
    from harness.nvcc_passes import host_pass_undefs

    pre = ('#$ _NVVM_BRANCH_=nvvm\n#$ gcc -D__CUDA_ARCH__=900 -D__CUDA_ARCH_FEAT_SM90_ALL -D__CUDA_ARCH_SPECIFIC__=900 '
           '-D__CUDA_ARCH_LIST__=900 -E -x c++ -DCUDA_DOUBLE_MATH_FUNCTIONS -D__CUDACC__ -D__NVCC__ '
           '"-I/usr/local/cuda/include" -include "cuda_runtime.h" -m64 "x.cu"\n')
    build = ('#$ gcc -D__CUDA_ARCH_LIST__=900 -E -x c++ -D__CUDACC__ -D__NVCC__ "-I/usr/local/cuda/include" '
             '-include "cuda_runtime.h" -m64 "x.cu" -o "/tmp/x.cpp4.ii"\n'
             '#$ cudafe++ --c++17 --gen_c_file_name "/tmp/x.cudafe1.cpp"\n' + pre.replace('"x.cu"', '"x.cu" -o y'))
    assert host_pass_undefs(pre, build) == ("CUDA_DOUBLE_MATH_FUNCTIONS", "__CUDA_ARCH_FEAT_SM90_ALL",
                                            "__CUDA_ARCH_SPECIFIC__", "__CUDA_ARCH__")
    with pytest.raises(ToolchainError, match="host preprocessing"):
        host_pass_undefs(pre, pre)  # no host command
    with pytest.raises(ToolchainError, match="__CUDA_ARCH__"):
        host_pass_undefs(build.splitlines()[0], build)  # the -E pass given is the host one


@pytest.mark.slow
def test_host_only_code_is_scanned(tmp_path) -> None:
    """Session 16's red team hole (1): the scans read only nvcc -E's device pass, so a macro-built `<dlfcn.h>` or a
    `cuGetProcAddress` lookup under `#ifndef __CUDA_ARCH__` passed. Both passes are scanned now; honest host-only
    code (a printf under the same guard) still compiles."""
    from harness.compile import compile_kernel

    _nvcc_or_skip()
    body = ('#include "attn_abi.h"\n#ifndef __CUDA_ARCH__\n{host}\n#endif\n'
            'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) {{ {call} return 0; }}\n')
    cases = {
        "honest": ("#include <cstdio>\nstatic void note() { std::printf(\"host\\n\"); }", "", None),
        "header": ("#define H <dlfcn.h>\n#include H", "", "dlfcn.h"),
        "entry": (("static void* grab() { void* f; cudaDriverEntryPointQueryResult r; "
                   "cudaGetDriverEntryPoint(\"cuGetProcAddress\", &f, cudaEnableDefault, &r); return f; }"),
                  "", "cuGetProcAddress"),
    }
    for name, (host, call, refused) in cases.items():
        src = tmp_path / f"{name}.cu"
        src.write_text(body.format(host=host, call=call))
        if refused is None:
            compile_kernel(src, cache_dir=tmp_path / "c")  # does not raise
            continue
        with pytest.raises(PolicyError, match=refused.replace(".", r"\.")):
            compile_kernel(src, cache_dir=tmp_path / "c")


def test_raw_scan_reads_splices_digraphs_and_macro_made_directives(tmp_path) -> None:
    """Session 17's red team: a line splice (`#\\` + newline), the digraph `%:` and a `#` that a macro carries into
    the preprocessed text (`#define H # include "/secret"`: nvcc's later passes run it as an include) hid line
    markers, system_header pragmas and includes from the raw scan. It reads logical lines now (splices joined,
    digraphs spelled out) and refuses a `#` that is neither a directive's nor a macro operator's."""
    roots = (str(tmp_path),)
    src = str(tmp_path / "k.cu")

    def refused(text: str) -> list[tuple[str, str, int | None]]:
        return [(v.kind, v.name, v.line) for v in scan_source_includes(text, src, roots)]

    assert refused('int a;\n#\\\n1 "/usr/include/x.h" 3\n') == [("directive", '#1 "', 2)]
    assert refused('%:1 "/usr/include/x.h" 3\n') == [("directive", '#1 "', 1)]
    assert refused('%:include <dlfcn.h>\n') == [("header", "dlfcn.h", 1)]
    assert refused('#pragma GCC system_\\\nheader\n') == [("directive", "system_header", 1)]
    assert refused('#define H # include "/tmp/secret"\nH\n') == [("directive", "#", 1)]
    assert refused('#define F(x) x\nF(# include "/tmp/s")\n') == [("directive", "#", 2)]
    assert refused('#inc\\\nlude </etc/passwd>\n') == [("header", "/etc/passwd", 1)]
    honest = ('#define S(x) #x\n#define C(a, b) a##b\n#define V(...) #__VA_ARGS__\n#define L(a) a %:%: 1\n'
              'const char* t = "# not a directive %:";\nchar c = \'#\';  // a # in a comment\n/* # */ int x = C(1, 2);\n'
              '#pragma unroll\n#if 1 // #\n#endif\n')
    assert refused(honest) == []


@pytest.mark.slow
def test_macro_made_include_of_a_secret_is_refused_before_nvcc(tmp_path) -> None:
    """End to end: `#define H # include "/outside/secret"` then `H` compiled, read the file and echoed it in the
    compile error (red team, session 17); a pasted `_Pragma("GCC system_header")` in a local header made the
    header's `<dlfcn.h>` pass as the toolkit's. Both are refused now, and the secret never reaches an error."""
    from harness.compile import compile_kernel

    _nvcc_or_skip()
    outside, cand = _secret_and_candidate(tmp_path)
    tail = 'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) { return 0; }\n'
    (cand / "h.cu").write_text(f'#include "attn_abi.h"\n#define H # include "{outside}/secret.txt"\nH\n' + tail)
    with pytest.raises(PolicyError) as info:
        compile_kernel(cand / "h.cu", cache_dir=tmp_path / "c")
    assert "TOPSECRET" not in str(info.value) + str(info.value.details)
    (cand / "helper.h").write_text('#define CAT(a, b) a##b\n#define STR(x) #x\n#define XSTR(x) STR(x)\n'
                                   '#define PRAGMA(x) _Pragma(XSTR(x))\nPRAGMA(GCC CAT(system_, header))\n'
                                   '#define HDR <dlfcn.h>\n#include HDR\n')
    (cand / "p.cu").write_text('#include "attn_abi.h"\n#include "helper.h"\n' + tail)
    with pytest.raises(PolicyError, match="dlfcn|system_header"):
        compile_kernel(cand / "p.cu", cache_dir=tmp_path / "c")
