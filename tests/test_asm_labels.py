"""Session 17's red team, still open until session 18: a function declared with an asm label naming
`cudaGetDriverEntryPoint` (``extern "C" int my_fn(...) __asm__("cudaGetDriverEntryPoint");``) and called as `my_fn`
escaped the static entry-point rule. Asm labels are judged now (harness/source_scans.py, either preprocessor pass, the
whole literal: concatenated, escapes decoded), and so is any string naming the entry points (weakref, `.set`); inline
asm statements (PTX in device code) still pass, and so do the shipped kernels."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import KERNELS_DIR
from harness.errors import PolicyError
from harness.policy import asm_label_reason, scan_asm_labels, scan_driver_entry_points
from tests.test_policy import _nvcc_or_skip

_EP = "cudaError_t {name}(const char*, void**, unsigned long long, cudaDriverEntryPointQueryResult*)"


def _pre(body: str) -> str:
    """``body`` as ``nvcc -E`` shows a candidate's own lines (a line marker naming the file, then line 1 blank)."""
    return '# 1 "/ws/k.cu"\nint first_line;\n' + body + "\n"


def _owned(path: str) -> bool:
    return path.startswith("/ws/")


def _refused(body: str) -> list[tuple[str, str, int | None]]:
    pre = _pre(body)
    return [(v.kind, v.name, v.line) for v in scan_asm_labels(pre, _owned) + scan_driver_entry_points(pre, _owned)]


@pytest.mark.parametrize(("label", "named"), [
    ('__asm__("cudaGetDriverEntryPoint")', "cudaGetDriverEntryPoint"),
    ('asm("cudaGetDriverEntryPointByVersion")', "cudaGetDriverEntryPointByVersion"),
    ('__asm("cudaGetDriverEntryPoint")', "cudaGetDriverEntryPoint"),
    ('__asm__ ("cudaGetDriver" "EntryPoint")', "cudaGetDriverEntryPoint"),  # concatenated: one name
    ('asm("" "cudaGetDriver"\n   "EntryPointByVersion")', "cudaGetDriverEntryPointByVersion"),  # across lines
    ('__asm__("cudaGetDriverEntry\\x50oint")', "cudaGetDriverEntryPoint"),  # hex escape
    ('__asm__("\\143udaGetDriverEntryPoint")', "cudaGetDriverEntryPoint"),  # octal escape
    ('__asm__("cudaGetDriverEntryPoint@libcudart.so.13")', "cudaGetDriverEntryPoint@libcudart.so.13"),  # versioned
])
def test_asm_labels_naming_the_entry_points_are_refused(label: str, named: str) -> None:
    for decl in (f'extern "C" {_EP.format(name="my_fn")} {label};',  # a function: the red team's spelling
                 f"extern void* my_ptr {label};",  # a variable
                 f'extern "C" {_EP.format(name="my_fn")} noexcept {label} __attribute__((used));',
                 f'extern "C" {{ {_EP.format(name="my_fn")} [[gnu::used]] {label}; }}',  # after an attribute list
                 f'extern "C" auto my_fn(const char*, void**, int, void*) -> int {label};'):
        got = _refused(decl + '\nint use() { void* f; return my_fn("cuStreamCreate", &f, 0, 0); }')
        assert got == [("asm_label", named, 2)], (decl, got)
    (v,) = scan_asm_labels(_pre(f"int my_fn() {label};"), _owned)
    assert v.file == "/ws/k.cu" and "cudaGetDriverEntryPoint" in v.reason and "asm label" in v.describe()


@pytest.mark.parametrize(("label", "why"), [
    ('__asm__(" cudaGetDriverEntryPoint")', "plain symbol name"),  # the assembler reads the space away
    ('__asm__("*cudaGetDriverEntryPoint")', "plain symbol name"),
    ('__asm__("\\"cudaGetDriverEntryPoint\\"")', "plain symbol name"),  # a quoted symbol for the assembler
    ('__asm__("\\"cudaGetDriver\\\\x45ntryPoint\\"")', "plain symbol name"),  # an escape the assembler may decode
    ('__asm__(R"(cudaGetDriverEntryPoint)")', "plain string literal"),
    ('__asm__(u8"cudaGetDriverEntryPoint")', "plain string literal"),
])
def test_asm_labels_the_policy_cannot_read_as_one_name_are_refused(label: str, why: str) -> None:
    (v,) = scan_asm_labels(_pre(f"int my_fn(int) {label};"), _owned)
    assert v.kind == "asm_label" and why in v.reason and v.line == 2


@pytest.mark.parametrize(("name", "refused"), [
    ("dlopen", True), ("pthread_create", True), ("cuStreamCreate", True), ("cudaMalloc", True), ("open64", True),
    ("cublasLtMatmul", True), ("cudnnCreate", True), ("_ZN7cutlass4gemm6device4GemmE", True), ("_ZN4cute4copyEv", True),
    ("memcpy", False), ("attnq_helper", False), ("_Z6helperv", False), ("cudaLaunchKernel", False),
])
def test_asm_labels_naming_refused_or_forbidden_library_symbols(name: str, refused: bool) -> None:
    assert (asm_label_reason(name) is not None) == refused, name
    got = scan_asm_labels(_pre(f'extern "C" int my_fn(int) __asm__("{name}");'), _owned)
    assert [v.name for v in got] == ([name] if refused else [])


def test_other_alias_spellings_are_judged_by_the_whole_literal() -> None:
    """The asm label's siblings: a weakref/alias attribute or assembler text (`.set`, `.symver`) can name the entry
    point too; a string naming it is refused however it is spelled, and a direct call stays allowed."""
    for body in ('static int wr(void) __attribute__((weakref("cudaGetDriver" "EntryPointByVersion")));',
                 'asm(".set my_alias, cudaGetDriverEntry" "Point");',
                 'asm(".symver my_fn, cudaGetDriverEntry\\x50oint@libcudart.so.13");',
                 'const char* n = "cudaGetDriver" "EntryPoint";'):
        got = _refused(body)
        assert [(k, n[:23]) for k, n, _ in got] == [("entry_point", "cudaGetDriverEntryPoint")], (body, got)
    assert _refused('cudaGetDriverEntryPoint("cuTensorMap" "EncodeTiled", &fn, cudaEnableDefault, &st);') == []


def test_inline_asm_statements_and_honest_labels_pass() -> None:
    """PTX asm statements in device code (with qualifiers, operands, after a condition, an attribute, `else`) are
    statements, not labels; a label naming the candidate's own symbol or an allowed one passes; labels in the
    toolkit's or the system's headers (glibc's `__asm__ ("" "__isoc99_sscanf")`) are not the candidate's."""
    honest = r"""
__device__ void mma(unsigned* d, const unsigned* a) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1}, {%2}, {%3};\n"
               : "=r"(d[0]), "=r"(d[1]) : "r"(a[0]), "r"(a[1]));
  __asm__ __volatile__("bar.sync 0;" ::: "memory");
  if (d[0]) asm("trap;");
  else asm("exit;");
  for (int i = 0; i < 2; ++i) asm("nop;");
  [[likely]] asm("membar.gl;");
  asm goto("bra %l0;" :::: done);
#pragma nv_diag_suppress used_but_not_defined
  asm("membar.cta;");
done:
  asm("ld.global.nc.b32 %0, [%1];" : "=r"(d[2]) : "l"(a));
}
asm(".globl attnq_top_level");
extern "C" int helper(int) __asm__("attnq_helper");
extern "C" void* my_memcpy(void*, const void*, unsigned long) __asm__("memcpy@GLIBC_2.2.5");
int arr[4] asm("attnq_arr");
"""
    assert _refused(honest) == []
    pre = ('# 1 "/usr/include/stdio.h" 1 3 4\nextern int sscanf (const char *__s, const char *__format, ...) '
           '__asm__ ("" "__isoc99_sscanf");\nextern int f(void) __asm__("cudaGetDriverEntryPoint");\n'
           '# 2 "/ws/k.cu" 2\nint attn(void) { return 0; }\n')
    assert scan_asm_labels(pre, _owned) == [] and scan_driver_entry_points(pre, _owned) == []


def _body(host: str) -> str:
    return ('#include "attn_abi.h"\n#ifndef __CUDA_ARCH__\n' + host + "\n#endif\n"
            'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) { return 0; }\n')


@pytest.mark.slow
def test_a_macro_made_asm_label_is_refused_end_to_end(tmp_path: Path) -> None:
    """Through nvcc's host pass: the label is stringified and pasted by macros, so the name is spelled nowhere in the
    source. Without the policy the library does import `cudaGetDriverEntryPoint` (the alias is real); with it, the
    label is refused, naming the candidate's file and line."""
    from harness.compile import compile_kernel

    _nvcc_or_skip()
    host = ("#define STR(x) #x\n#define XSTR(x) STR(x)\n#define CAT(a, b) a##b\n"
            "#define LABEL(n) __asm__(XSTR(n))\n"
            f'extern "C" {_EP.format(name="my_fn")} LABEL(CAT(cudaGetDriver, EntryPoint));\n'
            'extern "C" int grab() { void* f; cudaDriverEntryPointQueryResult r; '
            'return (int)my_fn("cuStreamCreate", &f, cudaEnableDefault, &r); }')
    src = tmp_path / "alias.cu"
    src.write_text(_body(host))
    assert "cudaGetDriverEntryPoint" not in src.read_text()
    built = compile_kernel(src, cache_dir=tmp_path / "c", policy=False)
    assert "cudaGetDriverEntryPoint" in built.imported_symbols  # the alias reaches the function
    with pytest.raises(PolicyError) as info:
        compile_kernel(src, cache_dir=tmp_path / "c")
    (v,) = info.value.details["violations"]
    assert (v["kind"], v["name"], v["file"], v["line"]) == ("asm_label", "cudaGetDriverEntryPoint", str(src), 7)


@pytest.mark.slow
def test_the_shipped_kernels_pass_the_source_scans(tmp_path: Path) -> None:
    """kernels/attn_fast.cu (dozens of inline PTX asm statements) and kernels/attn_original.cu pass every source
    scan, both preprocessor passes, through the same code compile_kernel runs (the build itself is not repeated)."""
    from harness.compile import _scan, _tool_cwd, find_nvcc, nvcc_flags
    from harness.snapshot import private_copy, take_snapshot

    _nvcc_or_skip()
    fast = KERNELS_DIR / "attn_fast.cu"
    assert fast.read_text().count("asm volatile(") > 10
    for kernel in (fast, KERNELS_DIR / "attn_original.cu"):
        with private_copy(take_snapshot(kernel), tmp_path, "scan-") as tree:
            _scan(tree, find_nvcc(), nvcc_flags(), 300.0, _tool_cwd(tree))  # raises PolicyError on a refusal
    assert list(tmp_path.iterdir()) == []  # the private copies are removed
