"""GPU test of the original kernel (kernels/attn_original.cu) and the README's naive example.

Each kernel is built once (``harness.compile.compile_kernel`` when present, else plain nvcc with the
harness's flags), loaded with ``harness.abi.load_kernel`` and called through the ABI on the current
torch stream, on 24 scenarios that cover every head_dim in {64, 96, 128, 192, 256}, bf16 and fp16,
causal (bottom-right) and not, MHA / GQA / MQA, odd and unequal lengths (1, 17, 113, 239; seqlen_q >
seqlen_k under causal so that rows see no key; seqlen_q < seqlen_k), strided / misaligned / BHSD
layouts, an explicit softmax_scale, and large-magnitude logits (q, k ~ 6 N(0, 1)) that overflow a
softmax without max-subtraction.

What each call must satisfy (against ``harness.reference.attention_reference``, the one fp32 reference,
computed from the same bf16/fp16 inputs upcast to fp32):

* return code 0; every element of o and lse written (both poisoned with a NaN payload first); q, k, v
  bit-identical afterwards; elements of a wider output buffer outside the o view untouched;
* rows that see no key: o exactly 0 and lse == +inf; every other lse finite;
* o: ``|o - o_ref| <= atol + rtol * |o_ref|`` elementwise, with
  bf16 ``atol = 1.5e-2, rtol = 1e-2`` and fp16 ``atol = 2e-3, rtol = 2e-3``. Basis: the output is
  rounded to the dtype (half an ulp: 2^-9 relative for bf16, 2^-11 for fp16) and P is rounded to the
  dtype before the P V product (at most 2^-9 / 2^-11 relative per term, so at most that fraction of
  max|v| ~ 4.5 for N(0, 1) data, and much less in practice since the errors are independent);
  a few ulps at |o| scale, e.g. ~1.5e-2 for bf16 N(0, 1) data as FlashAttention's own tests allow;
* lse: ``|lse - lse_ref| <= 1e-3 * max(1, |lse_ref|)``. Basis: lse only depends on fp32 dot products
  of the (exact) upcast inputs, so the kernel differs from the reference by fp32 summation order only
  (~1e-6 relative); 1e-3 relative leaves room for exp2/log approximations while catching a wrong scale,
  a missing row max or a log2/ln mix-up (all >= 1e-1 off).

Runtime: two nvcc builds (~5 s each, cached by compile_kernel) and 48 small calls: well under 60 s.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from harness import KERNELS_DIR, ORIGINAL_KERNEL
from harness.abi import AttnFwdParams, load_kernel, make_params
from harness.checks import bits_equal, count_poison, poison_
from harness.reference import attention_reference

pytestmark = pytest.mark.gpu

NAIVE_KERNEL = KERNELS_DIR / "examples" / "attn_naive.cu"
TOL_O = {torch.bfloat16: (1.5e-2, 1e-2), torch.float16: (2e-3, 2e-3)}  # (atol, rtol)
LSE_REL_TOL = 1e-3
SENTINEL = 123.0  # value left in a wider output buffer outside the o view


@dataclass(frozen=True)
class Case:
    """One scenario. ``layout``: contiguous | q_slice | misaligned | bhsd | o_slice."""

    name: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    num_heads_q: int
    num_heads_kv: int
    head_dim: int
    causal: bool
    dtype: torch.dtype
    layout: str = "contiguous"
    magnitude: float = 1.0  # q and k are magnitude * N(0, 1)
    softmax_scale: float | None = None  # default 1/sqrt(head_dim)


BF, FP = torch.bfloat16, torch.float16
CASES = [
    Case("len1_d64_bf16", 1, 1, 1, 1, 1, 64, False, BF),
    Case("len1_causal_d128_fp16_mqa", 1, 1, 1, 2, 1, 128, True, FP),
    Case("len17_causal_d64_bf16_mha", 2, 17, 17, 4, 4, 64, True, BF),
    Case("len113_causal_d96_fp16_gqa", 1, 113, 113, 8, 2, 96, True, FP),
    Case("len239_d128_bf16_mqa", 2, 239, 239, 4, 1, 128, False, BF),
    Case("q5_k3_causal_two_empty_rows", 1, 5, 3, 2, 1, 64, True, BF),
    Case("q200_k70_causal_empty_tiles_d192_fp16", 1, 200, 70, 4, 2, 192, True, FP),
    Case("q70_k200_causal_d256_bf16", 1, 70, 200, 4, 4, 256, True, BF),
    Case("q17_k239_d256_fp16_gqa", 2, 17, 239, 6, 2, 256, False, FP),
    Case("q239_k17_d192_bf16", 1, 239, 17, 2, 2, 192, False, BF),
    Case("tile_multiple_256_causal_d128_bf16", 1, 256, 256, 4, 2, 128, True, BF),
    Case("len512_causal_d64_fp16", 1, 512, 512, 4, 4, 64, True, FP),
    Case("q128_k384_d96_bf16_mqa", 1, 128, 384, 2, 1, 96, False, BF),
    Case("large_logits_causal_d128_bf16", 1, 239, 239, 4, 2, 128, True, BF, magnitude=6.0),
    Case("large_logits_d64_fp16", 1, 113, 300, 2, 1, 64, False, FP, magnitude=6.0),
    Case("large_logits_causal_d256_bf16", 1, 100, 100, 2, 2, 256, True, BF, magnitude=6.0),
    Case("large_logits_d192_fp16_gqa", 1, 77, 129, 4, 2, 192, False, FP, magnitude=6.0),
    Case("q_slice_causal_d128_bf16", 2, 113, 113, 4, 2, 128, True, BF, layout="q_slice"),
    Case("misaligned_qkv_causal_d96_fp16", 1, 77, 91, 4, 2, 96, True, FP, layout="misaligned"),
    Case("bhsd_layout_d64_bf16", 2, 130, 130, 4, 2, 64, False, BF, layout="bhsd"),
    Case("o_slice_causal_d192_fp16", 1, 65, 65, 2, 1, 192, True, FP, layout="o_slice"),
    Case("decode_q1_k239_causal_d128_bf16", 3, 1, 239, 4, 4, 128, True, BF),
    Case("q239_k1_causal_one_row_sees_key_fp16", 1, 239, 1, 2, 1, 64, True, FP),
    Case("scale_0p3_d96_bf16", 1, 33, 45, 2, 2, 96, False, BF, softmax_scale=0.3),
]


def _build_with_nvcc(source: Path, out_dir: Path) -> Path:
    """Fallback build with the harness's flags (used only when harness.compile is absent)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.fail("nvcc is not on PATH")
    out = out_dir / (source.stem + ".so")
    cmd = [nvcc, "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
           "-cudart", "shared", "-I", str(KERNELS_DIR), "-DATTN_HARNESS_ABI_VERSION=1", "-o", str(out), str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"nvcc failed for {source}:\n{proc.stderr}"
    return out


def _build(source: Path, out_dir: Path) -> Path:
    """Path of the built .so for ``source``: harness.compile.compile_kernel when it exists, else nvcc."""
    try:
        from harness.compile import compile_kernel
    except ImportError:
        return _build_with_nvcc(source, out_dir)
    result = compile_kernel(source, cache_dir=out_dir)
    assert not result.warnings, f"{source.name} compiled with warnings: {result.warnings}"
    spills = [k.name for k in result.kernels if k.spill_store_bytes or k.spill_load_bytes]
    assert not spills, f"{source.name}: register spills in {spills}"
    return Path(result.library)


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``{"original": KernelLibrary, "naive": KernelLibrary}``, each built once per module."""
    out_dir = tmp_path_factory.mktemp("kernels")
    return {name: load_kernel(_build(src, out_dir)) for name, src in (("original", ORIGINAL_KERNEL),
                                                                       ("naive", NAIVE_KERNEL))}


@pytest.fixture(autouse=True)
def _fp32_reference_precision():
    """The reference must run in true fp32 (no TF32) for the tolerances above to mean anything."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


def _make_inputs(case: Case, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """q, k, v views in the case's layout, plus (o view, o base buffer)."""
    dev, dt, d = "cuda", case.dtype, case.head_dim
    b, sq, sk, hq, hk = case.batch, case.seqlen_q, case.seqlen_k, case.num_heads_q, case.num_heads_kv

    def randn(*shape: int, mag: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32) * mag).to(dt)

    mag = case.magnitude
    if case.layout == "q_slice":  # q is the first half of a wider last dimension: strides matter
        q = randn(b, sq, hq, 2 * d, mag=mag)[..., :d]
        k, v = randn(b, sk, hk, d, mag=mag), randn(b, sk, hk, d)
    elif case.layout == "misaligned":  # base pointers off 16 B and strides not multiples of 8
        q = randn(b, sq, hq, d + 1, mag=mag)[..., 1:]
        k = randn(b, sk, hk, d + 1, mag=mag)[..., 1:]
        v = randn(b, sk, hk, d + 1)[..., 1:]
    elif case.layout == "bhsd":  # [b, h, s, d] storage viewed as [b, s, h, d]
        q = randn(b, hq, sq, d, mag=mag).transpose(1, 2)
        k = randn(b, hk, sk, d, mag=mag).transpose(1, 2)
        v = randn(b, hk, sk, d).transpose(1, 2)
    else:
        q, k, v = randn(b, sq, hq, d, mag=mag), randn(b, sk, hk, d, mag=mag), randn(b, sk, hk, d)
    if case.layout == "o_slice":
        o_base = torch.full((b, sq, hq, 2 * d), SENTINEL, device=dev, dtype=dt)
        o = o_base[..., d:]
    elif case.layout == "bhsd":
        o_base = torch.empty((b, hq, sq, d), device=dev, dtype=dt)
        o = o_base.transpose(1, 2)
    else:
        o_base = torch.empty((b, sq, hq, d), device=dev, dtype=dt)
        o = o_base
    return q, k, v, o, o_base


def _call(lib, q, k, v, o, lse, *, softmax_scale: float, causal: bool) -> int:
    """Call attn_fwd on the current torch stream (allocating a workspace if asked); synchronize."""
    num_sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    params: AttnFwdParams = make_params(q, k, v, o, lse, softmax_scale=softmax_scale, causal=causal, num_sms=num_sms)
    ws_bytes = lib.workspace_bytes(params)
    workspace = None
    if ws_bytes:
        workspace = torch.empty(ws_bytes, dtype=torch.uint8, device=q.device)
        params.workspace, params.workspace_bytes = workspace.data_ptr(), ws_bytes
    rc = lib.fwd(params, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return rc


@pytest.mark.parametrize("kernel", ["original", "naive"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_matches_fp32_reference(libraries: dict, kernel: str, case: Case) -> None:
    """o and lse of the kernel match the fp32 reference within the tolerances in the module docstring."""
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(case.name.encode()))
    q, k, v, o, o_base = _make_inputs(case, gen)
    scale = case.softmax_scale if case.softmax_scale is not None else 1.0 / math.sqrt(case.head_dim)
    lse = torch.empty((case.batch, case.num_heads_q, case.seqlen_q), device="cuda", dtype=torch.float32)
    poison_(o)  # a view: poisons exactly the elements the kernel must write
    poison_(lse)
    o_base_before = o_base.clone()
    inputs_before = [t.clone() for t in (q, k, v)]

    rc = _call(libraries[kernel], q, k, v, o, lse, softmax_scale=scale, causal=case.causal)
    assert rc == 0, f"attn_fwd returned {rc}"

    assert count_poison(o) == 0, f"{count_poison(o)} elements of o were never written"
    assert count_poison(lse) == 0, f"{count_poison(lse)} elements of lse were never written"
    for name, before, after in zip("qkv", inputs_before, (q, k, v)):
        assert bits_equal(before, after), f"input {name} was modified"
    if case.layout == "o_slice":
        outside = o_base[..., : case.head_dim]
        assert bits_equal(outside, o_base_before[..., : case.head_dim]), "wrote outside the o view"

    o_ref, lse_ref = attention_reference(q, k, v, softmax_scale=scale, causal=case.causal)
    empty = torch.isposinf(lse_ref)  # [b, hq, sq]: rows that see no key
    if case.causal and case.seqlen_q > case.seqlen_k:
        assert bool(empty.any()), "scenario meant to have rows with no visible key has none"
    assert torch.equal(torch.isposinf(lse), empty), "lse = +inf must mark exactly the rows that see no key"
    assert bool(torch.isfinite(lse[~empty]).all()), "lse must be finite on rows that see a key"
    empty_rows_o = empty.transpose(1, 2)  # [b, sq, hq]
    assert bool((o.float()[empty_rows_o] == 0).all()), "o must be exactly 0 on rows that see no key"

    atol, rtol = TOL_O[case.dtype]
    err_o = (o.float() - o_ref).abs()
    bound_o = atol + rtol * o_ref.abs()
    worst = float((err_o - bound_o).max())
    assert worst <= 0, (f"o off by up to {float(err_o.max()):.3g} (atol {atol}, rtol {rtol}); "
                        f"max|o_ref| = {float(o_ref.abs().max()):.3g}")
    if bool((~empty).any()):
        err_lse = (lse[~empty] - lse_ref[~empty]).abs()
        bound_lse = LSE_REL_TOL * lse_ref[~empty].abs().clamp(min=1.0)
        assert bool((err_lse <= bound_lse).all()), f"lse off by up to {float(err_lse.max()):.3g}"


@pytest.mark.parametrize("head_dim", [32, 80, 160])
def test_original_refuses_unsupported_head_dim(libraries: dict, head_dim: int) -> None:
    """The original returns nonzero ("unsupported") for a head_dim outside {64, 96, 128, 192, 256}, writes nothing."""
    q = torch.randn(1, 8, 2, head_dim, device="cuda", dtype=torch.bfloat16)
    o = poison_(torch.empty_like(q))
    lse = poison_(torch.empty(1, 2, 8, device="cuda", dtype=torch.float32))
    rc = _call(libraries["original"], q, q, q, o, lse, softmax_scale=0.125, causal=False)
    assert rc != 0
    assert count_poison(o) == o.numel() and count_poison(lse) == lse.numel()


def test_original_refuses_unknown_dtype(libraries: dict) -> None:
    """A dtype code other than bf16 (0) / fp16 (1) is refused with a nonzero status before any launch."""
    q = torch.randn(1, 8, 2, 64, device="cuda", dtype=torch.float16)
    o = torch.empty_like(q)
    lse = torch.empty(1, 2, 8, device="cuda", dtype=torch.float32)
    params = make_params(q, q, q, o, lse, softmax_scale=0.125, causal=False, num_sms=1)
    params.dtype = 7
    assert libraries["original"].fwd(params, torch.cuda.current_stream().cuda_stream) != 0


def test_original_is_deterministic(libraries: dict) -> None:
    """Two calls on the same inputs give bit-identical o and lse (no atomics, no races)."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(2, 300, 8, 128, generator=gen, device="cuda").to(torch.bfloat16)
    k = torch.randn(2, 300, 2, 128, generator=gen, device="cuda").to(torch.bfloat16)
    v = torch.randn(2, 300, 2, 128, generator=gen, device="cuda").to(torch.bfloat16)
    outs = []
    for _ in range(2):
        o = poison_(torch.empty_like(q))
        lse = poison_(torch.empty(2, 8, 300, device="cuda", dtype=torch.float32))
        assert _call(libraries["original"], q, k, v, o, lse, softmax_scale=0.088, causal=True) == 0
        outs.append((o, lse))
    assert bits_equal(outs[0][0], outs[1][0]) and bits_equal(outs[0][1], outs[1][1])
