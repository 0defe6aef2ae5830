"""compile_kernel end to end with the real nvcc (CPU only), plus the ptxas/SASS/diagnostic parsers.

nvcc is slow, so every real build is shared through module-scoped fixtures with one temp cache.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from attnq.cli import main as cli_main
from harness import ORIGINAL_KERNEL
from harness.abi import ABI_VERSION
from harness.compile import (
    CompileResult,
    compile_kernel,
    find_nvcc,
    nvcc_flags,
    parse_diagnostics,
)
from harness.errors import AbiError, CompileError, InputError, PolicyError, ToolchainError
from harness.policy import scan_preprocessed
from harness.sass import parse_ptxas, parse_sass

DATA = Path(__file__).parent / "data" / "compile"

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="nvcc is not installed")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("build-cache")


@pytest.fixture(scope="module")
def original(cache: Path) -> CompileResult:
    """The original kernel (our own small valid kernel until kernels/attn_original.cu exists)."""
    src = ORIGINAL_KERNEL if ORIGINAL_KERNEL.exists() else DATA / "valid.cu"
    return compile_kernel(src, cache_dir=cache)


@pytest.fixture(scope="module")
def valid(cache: Path) -> CompileResult:
    return compile_kernel(DATA / "valid.cu", cache_dir=cache)


# ------------------------------------------------------------------------------------------------
# Successful builds
# ------------------------------------------------------------------------------------------------


def test_original_builds_with_facts(original: CompileResult) -> None:
    assert not original.cache_hit
    lib = Path(original.library)
    assert lib.is_file() and lib.name == "kernel.so"
    assert original.build_hash == hashlib.sha256(lib.read_bytes()).hexdigest()
    assert original.arch == "sm_90a"
    assert "-gencode=arch=compute_90a,code=sm_90a" in original.flags
    for flag in ("-cudart", "shared", "-shared", "-lineinfo", f"-DATTN_HARNESS_ABI_VERSION={ABI_VERSION}"):
        assert flag in original.flags
    assert "release" in original.nvcc_version
    assert original.kernels, "ptxas reported no kernels"
    for k in original.kernels:
        assert k.registers > 0
        assert k.shared_mem_bytes >= 0 and k.stack_frame_bytes >= 0
        assert k.spill_store_bytes >= 0 and k.spill_load_bytes >= 0
        assert k.mangled_name.startswith("_Z") or k.name == k.mangled_name
    # the harness's own kernel passes the symbol policy with nothing but runtime + C++ basics
    assert "cudaMalloc" not in original.imported_symbols
    assert any(s.startswith("__cudaRegister") for s in original.imported_symbols)


def test_valid_kernel_facts_match_ptxas(valid: CompileResult) -> None:
    by_name = {k.name.split("(")[0].replace("void ", ""): k for k in valid.kernels}
    assert by_name["scale_kernel"].shared_mem_bytes == 256 * 4          # __shared__ float tile[256]
    assert by_name["local_array_kernel<64>"].stack_frame_bytes >= 64 * 4  # runtime-indexed float[64]
    spill = by_name["spill_kernel"]
    assert spill.registers <= 32                                          # __launch_bounds__(1024, 2)
    assert spill.spill_store_bytes > 0 and spill.spill_load_bytes > 0
    assert by_name["block_sum_kernel"].shared_mem_bytes > 0                # CUB TempStorage
    if not valid.sass_available:
        assert all(k.sass is None for k in valid.kernels)


def test_cache_hit_is_fast_and_identical(original: CompileResult, cache: Path) -> None:
    src = ORIGINAL_KERNEL if ORIGINAL_KERNEL.exists() else DATA / "valid.cu"
    t0 = time.perf_counter()
    again = compile_kernel(src, cache_dir=cache)
    elapsed = time.perf_counter() - t0
    assert again.cache_hit and elapsed <= 0.2, elapsed
    assert again.build_hash == original.build_hash and again.library == original.library
    assert again.kernels == original.kernels
    assert not list(cache.glob(".tmp-*")), "temp build dirs left behind"


def test_sm100a_compiles(cache: Path) -> None:
    res = compile_kernel(DATA / "tiny.cu", arch="sm_100a", cache_dir=cache)
    assert "-gencode=arch=compute_100a,code=sm_100a" in res.flags and res.arch == "sm_100a"
    (k,) = res.kernels
    assert k.name.startswith("fill_kernel") and k.registers > 0


def test_bad_arch_is_input_error() -> None:
    with pytest.raises(InputError, match="sm_90a"):
        nvcc_flags("hopper")


def test_a_candidate_named_like_the_device_link_object_is_refused_by_name(tmp_path: Path) -> None:
    """nvcc names the library's device-link object kernel_dlink.o (after kernel.so); a candidate kernel_dlink.cu has a
    host object of that name, and its build failed with a misleading "exports no attn_fwd" (red team, session 23)."""
    src = tmp_path / "kernel_dlink.cu"
    src.write_text(ORIGINAL_KERNEL.read_text())
    with pytest.raises(InputError, match="rename the file"):
        compile_kernel(src, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # refused before any build


def test_a_moved_candidate_folder_finds_its_build(tmp_path: Path) -> None:
    """The cache key spells paths relative to the candidate's folder (and attnq's kernels/): the same .cu and header
    in another folder hit the first folder's build (a checkout copied to the GPU box, runs 73-74, built everything
    again); a header with other bytes does not. The hit names the moved folder's files."""
    body = ('#include "attn_abi.h"\n#include "inc/mine.h"\n'
            'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) { return kValue - 1; }\n')
    results = []
    for folder, value, header in (("a", 1, "inc/mine.h"), ("b/c", 1, "inc/mine.h"), ("d", 2, "inc/mine.h")):
        d = tmp_path / folder
        (d / "inc").mkdir(parents=True)
        (d / header).write_text(f"#pragma once\nconstexpr int kValue = {value};\n")
        (d / "cand.cu").write_text(body)
        results.append(compile_kernel(d / "cand.cu", cache_dir=tmp_path / "cache"))
    first, moved, edited = results
    assert not first.cache_hit and moved.cache_hit and not edited.cache_hit
    assert moved.cache_key == first.cache_key != edited.cache_key
    assert moved.source == str(tmp_path / "b/c/cand.cu")
    assert str(tmp_path / "b/c/inc/mine.h") in moved.local_headers
    assert not [h for h in moved.local_headers if h.startswith(str(tmp_path / "a"))]


def test_concurrent_builds_and_header_in_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two compiles of a new file at once run nvcc once and share its entry; editing its own header rebuilds."""
    (tmp_path / "mine.h").write_text("#pragma once\nconstexpr int kValue = 1;\n")
    src = tmp_path / "cand.cu"
    src.write_text('#include "attn_abi.h"\n#include "mine.h"\n'
                   'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) { return kValue - 1; }\n')
    cache = tmp_path / "cache"
    import harness.compile as compile_mod

    builds: list[list[str]] = []  # nvcc runs that build (not -E): one, the other call waits for it (MCP trial:
    real = compile_mod._run_nvcc  # compile_kernel and verify_kernel on one file ran two identical nvcc side by side)

    def counted(argv: list[str], *args: object) -> subprocess.CompletedProcess[str]:
        if "-E" not in argv:
            builds.append(argv)
        return real(argv, *args)

    monkeypatch.setattr(compile_mod, "_run_nvcc", counted)
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda _: compile_kernel(src, cache_dir=cache), range(2))
    assert a.build_hash == b.build_hash and a.cache_key == b.cache_key
    assert len(builds) == 1 and sorted([a.cache_hit, b.cache_hit]) == [False, True]
    entries = [p for p in cache.iterdir() if p.is_dir()]
    assert [p.name for p in entries] == [a.cache_key]
    assert sorted(f.name for f in entries[0].iterdir()) == ["facts.json", "kernel.so"]
    assert str((tmp_path / "mine.h").resolve()) in a.local_headers
    (tmp_path / "mine.h").write_text("#pragma once\nconstexpr int kValue = 2;\n")
    c = compile_kernel(src, cache_dir=cache)
    assert not c.cache_hit and c.cache_key != a.cache_key


# ------------------------------------------------------------------------------------------------
# Policy
# ------------------------------------------------------------------------------------------------


def test_cublas_include_refused_naming_header(cache: Path) -> None:
    with pytest.raises(PolicyError) as exc:
        compile_kernel(DATA / "uses_cublas.cu", cache_dir=cache)
    assert "cublas_v2.h" in exc.value.message and "uses_cublas.cu:3" in exc.value.message
    (v,) = exc.value.details["violations"]
    assert v["kind"] == "header" and v["line"] == 3


@pytest.mark.parametrize("fixture, symbol", [("calls_dlopen.cu", "dlopen"), ("calls_fopen.cu", "fopen"),
                                             ("calls_cudamalloc.cu", "cudaMalloc")])
def test_forbidden_symbol_refused(cache: Path, fixture: str, symbol: str) -> None:
    with pytest.raises(PolicyError) as exc:
        compile_kernel(DATA / fixture, cache_dir=cache)
    assert f"`{symbol}`" in exc.value.message
    assert symbol in [v["name"] for v in exc.value.details["violations"]]


def test_policy_off_builds_what_policy_refuses(cache: Path) -> None:
    res = compile_kernel(DATA / "calls_dlopen.cu", cache_dir=cache, policy=False)
    assert "dlopen" in res.imported_symbols and res.policy is False


def test_host_syscall_refused(cache: Path) -> None:
    with pytest.raises(PolicyError, match="syscall"):
        compile_kernel(DATA / "host_syscall.cu", cache_dir=cache)


def test_indirect_include_through_own_header(cache: Path) -> None:
    with pytest.raises(PolicyError) as exc:
        compile_kernel(DATA / "indirect" / "kernel.cu", cache_dir=cache)
    (v,) = exc.value.details["violations"]
    assert v["name"].endswith("dlfcn.h") and v["file"].endswith("helper.h") and v["line"] == 4


def test_indirect_include_of_missing_forbidden_header(cache: Path) -> None:
    with pytest.raises(PolicyError) as exc:
        compile_kernel(DATA / "indirect" / "kernel_cublas.cu", cache_dir=cache)
    (v,) = exc.value.details["violations"]
    assert v["name"] == "cublas_v2.h" and v["file"].endswith("helper_cublas.h") and v["line"] == 2


@pytest.mark.parametrize("spelling", ["absolute", "macro", "dotdot"])
def test_include_outside_the_candidate_folder_is_refused_without_its_text(
        cache: Path, tmp_path: Path, spelling: str) -> None:
    """A file outside the candidate's folder (not toolkit or system) would otherwise reach nvcc, whose
    diagnostics quote its lines: an agent confined to the workspace could read any file through them."""
    secret = tmp_path / "secret" / "token.txt"
    secret.parent.mkdir()
    secret.write_text("TOPSECRET_42 = 1;\n")
    cand = tmp_path / "cand" / "k.cu"
    cand.parent.mkdir()
    include = {"absolute": f'#include "{secret}"', "macro": f'#define P "{secret}"\n#include P',
               "dotdot": '#include "../secret/token.txt"'}[spelling]
    cand.write_text(f'#include "attn_abi.h"\n{include}\n'
                    'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) { return 0; }\n')
    with pytest.raises(PolicyError) as exc:
        compile_kernel(cand, cache_dir=cache)
    assert "token.txt" in exc.value.message and "outside the candidate's folder" in exc.value.message
    assert "TOPSECRET" not in exc.value.message and "TOPSECRET" not in json.dumps(exc.value.details)
    # with the policy off (the user's explicit choice) the same file reaches nvcc
    with pytest.raises(CompileError):
        compile_kernel(cand, cache_dir=cache, policy=False)


def test_toolkit_internal_includes_pass_real_preprocessor() -> None:
    """CUB includes thrust/ and pthread.h for itself; only the candidate's own includes count."""
    from harness.nvcc_passes import owned_predicate

    nvcc = find_nvcc()
    out = subprocess.run([nvcc, "-E", *[f for f in nvcc_flags() if f not in ("-Xptxas", "-v")],
                          str(DATA / "valid.cu")], capture_output=True, text=True, timeout=120, check=True).stdout
    assert "/pthread.h" in out or "/thrust/" in out
    assert scan_preprocessed(out, owned_predicate(nvcc)) == []


# ------------------------------------------------------------------------------------------------
# ABI and structured errors
# ------------------------------------------------------------------------------------------------


def test_missing_extern_c_is_abi_error(cache: Path) -> None:
    with pytest.raises(AbiError) as exc:
        compile_kernel(DATA / "no_extern_c.cu", cache_dir=cache)
    assert 'extern "C"' in exc.value.message and exc.value.details["missing"] == ["attn_fwd"]


def test_no_abi_header_is_abi_error(cache: Path) -> None:
    with pytest.raises(AbiError) as exc:
        compile_kernel(DATA / "no_abi_header.cu", cache_dir=cache)
    assert "attn_abi.h" in exc.value.message and 'extern "C"' in exc.value.message
    assert exc.value.details["missing"] == ["attn_fwd", "attn_abi_version"]


def test_stale_header_names_both_versions(cache: Path) -> None:
    with pytest.raises(AbiError) as exc:
        compile_kernel(DATA / "stale_abi" / "kernel.cu", cache_dir=cache)
    assert exc.value.details["candidate_abi_version"] == 0
    assert exc.value.details["harness_abi_version"] == ABI_VERSION
    assert "ABI version 0" in exc.value.message and f"ABI version {ABI_VERSION}" in exc.value.message


def test_syntax_error_diagnostics_with_lines(cache: Path) -> None:
    with pytest.raises(CompileError) as exc:
        compile_kernel(DATA / "syntax_error.cu", cache_dir=cache)
    diags = exc.value.details["diagnostics"]
    assert [d["line"] for d in diags if d["severity"] == "error"] == [7, 9]
    assert "undeclared_identifier" in diags[0]["message"] and diags[0]["file"].endswith("syntax_error.cu")
    assert "syntax_error.cu:7" in exc.value.message


@pytest.mark.parametrize("name, content, match", [
    ("empty.cu", b"", "empty"),
    ("blank.cu", b"  \n\n\t\n", "empty"),
    ("kernel.txt", b"int x;\n", ".cu"),
    ("huge.cu", b"// pad\n" * (1024 * 1024 // 7 + 1), "1 MiB"),
])
def test_bad_inputs(tmp_path: Path, name: str, content: bytes, match: str) -> None:
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(InputError, match=match):
        compile_kernel(p, cache_dir=tmp_path / "cache")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        compile_kernel(tmp_path / "nope.cu", cache_dir=tmp_path)
    (tmp_path / "dir.cu").mkdir()
    with pytest.raises(InputError, match="not a regular file"):
        compile_kernel(tmp_path / "dir.cu", cache_dir=tmp_path)


def test_broken_cuda_home_is_toolchain_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    with pytest.raises(ToolchainError, match="nvcc"):
        compile_kernel(DATA / "valid.cu", cache_dir=tmp_path / "cache")


def test_nvcc_timeout_is_compile_error(tmp_path: Path) -> None:
    src = tmp_path / "slow.cu"
    src.write_text('#include "attn_abi.h"\nextern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) '
                   "{ return 0; }\n")
    with pytest.raises(CompileError, match="timed out"):
        compile_kernel(src, cache_dir=tmp_path / "cache", timeout_s=0.05)


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------


def test_cli_json_and_table(valid: CompileResult, cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["compile", str(DATA / "valid.cu"), "--cache-dir", str(cache), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cache_hit"] is True and out["build_hash"] == valid.build_hash
    assert cli_main(["compile", str(DATA / "valid.cu"), "--cache-dir", str(cache)]) == 0
    text = capsys.readouterr().out
    assert "spill_kernel" in text and "cache hit  yes" in text and valid.library in text


def test_cli_errors(cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["compile", str(DATA / "syntax_error.cu"), "--cache-dir", str(cache), "--json"]) == 2
    err = json.loads(capsys.readouterr().out)
    assert err["error"] == "compile_error" and err["diagnostics"][0]["line"] == 7
    assert cli_main(["compile", str(DATA / "uses_cublas.cu"), "--cache-dir", str(cache)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "cublas_v2.h" in captured.err
    assert cli_main(["compile", str(tmp_path / "missing.cu"), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"] == "input_error"


# ------------------------------------------------------------------------------------------------
# Parsers on captured text
# ------------------------------------------------------------------------------------------------

PTXAS_TEXT = """\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for _Z6helperf
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z3fwdILi128EEvPf' for 'sm_90a'
ptxas info    : Function properties for _Z3fwdILi128EEvPf
    96 bytes stack frame, 40 bytes spill stores, 52 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Compile time = 12.0 ms
ptxas info    : Compiling entry function 'attn_combine' for 'sm_90a'
ptxas info    : Function properties for attn_combine
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers
"""


def test_parse_ptxas_captured() -> None:
    fwd, comb = parse_ptxas(PTXAS_TEXT)
    assert (fwd.mangled_name, fwd.arch, fwd.registers, fwd.shared_mem_bytes) == ("_Z3fwdILi128EEvPf", "sm_90a", 168, 1024)
    assert (fwd.stack_frame_bytes, fwd.spill_store_bytes, fwd.spill_load_bytes) == (96, 40, 52)
    assert fwd.barriers == 1 and fwd.constant_mem_bytes == 408
    assert (comb.mangled_name, comb.registers, comb.shared_mem_bytes, comb.stack_frame_bytes) == ("attn_combine", 40, 0, 0)


SASS_TEXT = """\

Fatbin elf code:
================
arch = sm_90a
code version = [1,8]
host = linux
compile_size = 64bit

\tcode for sm_90a
\t\tFunction : _Z3fwdILi128EEvPf
\t.headerflags\t@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                          /* 0x00000a00ff017b82 */
                                                                                   /* 0x000fe40000000800 */
        /*0010*/                   WARPGROUP.ARRIVE ;                              /* 0x0000000000007990 */
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ; /* 0x0000000418187df0 */
        /*0030*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24, gsb0 ; /* 0x0000000818187df0 */
        /*0040*/                   FFMA R2, R3, R4, R2 ;                           /* 0x0000000403027223 */
        /*0050*/              @!P0 FFMA R5, R6, R7, R5 ;                           /* 0x0000000706058223 */
        /*0060*/                   STL [R1], R2 ;                                  /* 0x0000000201007387 */
        /*0070*/                   LDL R8, [R1] ;                                  /* 0x0000000001087983 */
        /*0080*/                   EXIT ;                                          /* 0x000000000000794d */
        /*0090*/                   BRA 0x90;                                       /* 0xfffffffc00fc7947 */
\t\t..........

\t\tFunction : attn_combine
\t.headerflags\t@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   HMMA.16816.F32.BF16 R8, R12, R16, R8 ;          /* 0x000000100c08723c */
        /*0010*/               @P1 LDL.64 R2, [R1+0x8] ;                           /* 0x0000080001021983 */
        /*0020*/                   NOP ;                                           /* 0x0000000000007918 */
\t\t..........
"""


def test_parse_sass_captured() -> None:
    mixes = parse_sass(SASS_TEXT)
    fwd, comb = mixes["_Z3fwdILi128EEvPf"], mixes["attn_combine"]
    assert (fwd.hgmma, fwd.hmma, fwd.ffma, fwd.ldl, fwd.stl, fwd.total) == (2, 0, 2, 1, 1, 10)
    assert (comb.hgmma, comb.hmma, comb.ffma, comb.ldl, comb.stl, comb.total) == (0, 1, 0, 1, 0, 3)


def test_parse_diagnostics_formats() -> None:
    text = """\
k.cu(12): warning #177-D: variable "x" was declared but never referenced
k.cu(20): error: identifier "foo" is undefined
helper.h:3:10: fatal error: cublas_v2.h: No such file or directory
ptxas error   : Entry function '_Z1kv' uses too much shared data (0x30000 bytes, 0xe400 max)
k.cu(20): error: identifier "foo" is undefined
"""
    d = parse_diagnostics(text)
    assert [(x.file, x.line, x.column, x.severity) for x in d] == [
        ("k.cu", 20, None, "error"), ("helper.h", 3, 10, "error"), ("ptxas", None, None, "error"),
        ("k.cu", 12, None, "warning")]
    assert "too much shared data" in d[2].message


def test_replaced_cache_library_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    """A cached library swapped after it was checked (e.g. by a build without the policy) is not
    returned as a hit: the hash is checked on every hit and the entry is rebuilt."""
    first = compile_kernel(DATA / "tiny.cu", cache_dir=tmp_path)
    lib = Path(first.library)
    lib.write_bytes(lib.read_bytes() + b"\0tampered")
    again = compile_kernel(DATA / "tiny.cu", cache_dir=tmp_path)
    assert not again.cache_hit
    assert again.build_hash == hashlib.sha256(Path(again.library).read_bytes()).hexdigest()
    assert b"tampered" not in Path(again.library).read_bytes()
    assert compile_kernel(DATA / "tiny.cu", cache_dir=tmp_path).cache_hit


def test_a_comma_in_the_file_name_is_refused_by_name_and_in_a_folder_name_builds(tmp_path: Path) -> None:
    """nvcc hands its intermediate files to fatbinary in comma-separated keyword=value lists, so a source file
    named ``a,b.cu`` failed deep inside nvcc ("'b...cubin' is not in 'keyword=value' format", found by
    tests/test_properties.py); it is refused before nvcc, naming the comma, while a comma in a folder name
    (which nvcc takes) still builds."""
    tiny = (Path(__file__).parent / "data" / "compile" / "tiny.cu").read_text()
    bad = tmp_path / "a,b.cu"
    bad.write_text(tiny)
    with pytest.raises(InputError, match=r"with ',' in it .*rename it"):
        compile_kernel(bad, cache_dir=tmp_path / "build")
    ok = tmp_path / "x,y" / "tiny.cu"
    ok.parent.mkdir()
    ok.write_text(tiny + "\n// a comma in the folder only\n")
    assert Path(compile_kernel(ok, cache_dir=tmp_path / "x,y" / "build").library).is_file()
