"""GPU test of the fast kernel (kernels/attn_fast.cu) against the one fp32 reference.

The kernel is built once (``harness.compile.compile_kernel``: the harness's flags and policy, no
warnings allowed), loaded with ``harness.abi.load_kernel`` and called through the ABI on the current
torch stream, on mixed scenarios that reach every code path of the kernel: every head_dim in
{64, 96, 128, 192, 256}, bf16 and fp16, causal bottom-right with seqlen_q != seqlen_k including rows
that see no key, MHA / GQA / MQA, odd lengths 1 / 17 / 113 / 239, every CTA shape (64 rows; 128 rows
as 4 warps x 32 rows or 8 warps x 16 rows), GQA
packing (seqlen_q <= 16), split-KV with its combine kernel (small grids against long caches, up to
seqlen_k = 32k), strided / misaligned layouts (the scalar fallback), and large-magnitude logits.

Checks per call (same rules and tolerances as tests/gpu/test_original.py, see its docstring for the
basis): return code 0; every element of o and lse written (both poisoned first); inputs unchanged;
rows with no key have o == 0 exactly and lse == +inf; o within ``atol + rtol * |o_ref|`` (bf16
1.5e-2 / 1e-2, fp16 2e-3 / 2e-3); lse within ``1e-3 * max(1, |lse_ref|)``. Split-KV results must be
bit-identical across two calls (the harness requires determinism).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from harness import KERNELS_DIR
from harness.abi import AttnFwdParams, load_kernel, make_params
from harness.checks import bits_equal, count_poison, poison_
from harness.reference import attention_reference

pytestmark = pytest.mark.gpu

FAST_KERNEL = KERNELS_DIR / "attn_fast.cu"
TOL_O = {torch.bfloat16: (1.5e-2, 1e-2), torch.float16: (2e-3, 2e-3)}  # (atol, rtol)
LSE_REL_TOL = 1e-3
BF, FP = torch.bfloat16, torch.float16


@dataclass(frozen=True)
class Case:
    """One scenario. ``layout``: contiguous | q_slice | misaligned."""

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
    magnitude: float = 1.0


CASES = [
    Case("len1_d64_bf16", 1, 1, 1, 1, 1, 64, True, BF),
    Case("len17_causal_d96_fp16_gqa", 2, 17, 17, 8, 2, 96, True, FP),
    Case("len113_d128_bf16_mqa", 2, 113, 113, 4, 1, 128, False, BF),
    Case("len239_causal_d192_bf16", 1, 239, 239, 4, 4, 192, True, BF),
    Case("len239_causal_d256_fp16_gqa", 1, 239, 239, 4, 2, 256, True, FP),
    Case("q239_k17_causal_empty_rows_d128_bf16", 2, 239, 17, 4, 4, 128, True, BF),
    Case("q200_k70_causal_empty_tiles_d64_fp16", 1, 200, 70, 4, 2, 64, True, FP),
    Case("q113_k799_causal_chunk_d128_bf16", 2, 113, 799, 16, 16, 128, True, BF),
    Case("q128_k4096_causal_split_d128_bf16", 2, 128, 4096, 8, 2, 128, True, BF),
    Case("q1023_k1200_causal_d96_bf16_gqa", 1, 1023, 1200, 4, 1, 96, True, BF),
    Case("q799_k113_d192_fp16_gqa", 1, 799, 113, 6, 2, 192, False, FP),
    # 128-row CTAs (>= 132 of them): 4 warps x 32 rows at d64/d96/d128 (d128 as two 32-key sub-tiles
    # per 64-key tile, v2), 8 warps x 16 rows at d192/d256
    Case("len1024_causal_d64_bf16_bm128", 2, 1024, 1024, 16, 16, 64, True, BF),
    Case("len1000_causal_d96_fp16_gqa_bm128", 2, 1000, 1000, 16, 4, 96, True, FP),
    Case("len1024_causal_d128_fp16_bm128", 2, 1024, 1024, 16, 16, 128, True, FP),
    Case("q1000_k1100_causal_d128_bf16_gqa_bm128", 2, 1000, 1100, 16, 4, 128, True, BF),
    Case("q1100_k1000_causal_empty_rows_d128_fp16_bm128", 2, 1100, 1000, 16, 16, 128, True, FP),
    Case("large_logits_len1024_d128_bf16_bm128", 2, 1024, 1024, 16, 16, 128, False, BF, magnitude=6.0),
    Case("packed_q16_k600_causal_d128_bf16_gqa_bm128", 17, 16, 600, 64, 8, 128, True, BF),
    Case("q600_k650_d192_bf16_bm128", 2, 600, 650, 16, 16, 192, False, BF),
    Case("len1024_d256_bf16_bm128", 2, 1024, 1024, 16, 16, 256, False, BF),
    Case("decode_q1_k32768_d128_bf16_gqa", 1, 1, 32768, 32, 8, 128, False, BF),
    Case("decode_q4_k8192_causal_d128_bf16_gqa64", 2, 4, 8192, 64, 8, 128, True, BF),
    Case("decode_q3_k2000_causal_d64_fp16_mqa", 3, 3, 2000, 32, 1, 64, True, FP),
    Case("decode_q2_k5000_d256_bf16", 1, 2, 5000, 8, 8, 256, False, BF),
    Case("decode_q1_k512_b128_d128_bf16", 128, 1, 512, 32, 8, 128, False, BF),
    Case("large_logits_causal_d128_fp16", 1, 239, 239, 4, 2, 128, True, FP, magnitude=6.0),
    Case("large_logits_decode_d192_bf16", 1, 1, 4000, 4, 1, 192, False, BF, magnitude=6.0),
    Case("q_slice_causal_d128_bf16", 2, 113, 113, 4, 2, 128, True, BF, layout="q_slice"),
    Case("misaligned_fallback_d96_fp16", 1, 77, 91, 4, 2, 96, True, FP, layout="misaligned"),
]


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory):
    """The fast kernel's KernelLibrary, built once per module with the harness's compiler driver."""
    from harness.compile import compile_kernel

    result = compile_kernel(FAST_KERNEL, cache_dir=tmp_path_factory.mktemp("kernels"))
    assert not result.warnings, f"attn_fast.cu compiled with warnings: {result.warnings}"
    for k in result.kernels:
        assert k.spill_store_bytes == 0 and k.spill_load_bytes == 0, f"{k.name} spills"
    return load_kernel(Path(result.library))


@pytest.fixture(autouse=True)
def _fp32_reference_precision():
    """The reference must run in true fp32 (no TF32) for the tolerances to mean anything."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


def _make_inputs(case: Case, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v in the case's layout (random, never zeros)."""
    dev, dt, d = "cuda", case.dtype, case.head_dim
    b, sq, sk, hq, hk = case.batch, case.seqlen_q, case.seqlen_k, case.num_heads_q, case.num_heads_kv

    def randn(*shape: int, mag: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32) * mag).to(dt)

    mag = case.magnitude
    if case.layout == "q_slice":
        q = randn(b, sq, hq, 2 * d, mag=mag)[..., :d]
        k, v = randn(b, sk, hk, d, mag=mag), randn(b, sk, hk, d)
    elif case.layout == "misaligned":
        q = randn(b, sq, hq, d + 1, mag=mag)[..., 1:]
        k = randn(b, sk, hk, d + 1, mag=mag)[..., 1:]
        v = randn(b, sk, hk, d + 1)[..., 1:]
    else:
        q, k, v = randn(b, sq, hq, d, mag=mag), randn(b, sk, hk, d, mag=mag), randn(b, sk, hk, d)
    return q, k, v


def _call(lib, q, k, v, *, softmax_scale: float, causal: bool) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Poison fresh o / lse, call attn_fwd (with the workspace it asks for), synchronize."""
    b, sq, hq, d = q.shape
    o = poison_(torch.empty((b, sq, hq, d), device=q.device, dtype=q.dtype))
    lse = poison_(torch.empty((b, hq, sq), device=q.device, dtype=torch.float32))
    num_sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    params: AttnFwdParams = make_params(q, k, v, o, lse, softmax_scale=softmax_scale, causal=causal, num_sms=num_sms)
    ws_bytes = lib.workspace_bytes(params)
    workspace = None
    if ws_bytes:
        workspace = torch.full((ws_bytes,), 0xFF, dtype=torch.uint8, device=q.device)  # NaN as fp32
        params.workspace, params.workspace_bytes = workspace.data_ptr(), ws_bytes
    rc = lib.fwd(params, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return rc, o, lse


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fast_matches_fp32_reference(library, case: Case) -> None:
    """o and lse of the fast kernel match the fp32 reference; all written; no-key rows exact."""
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(case.name.encode()))
    q, k, v = _make_inputs(case, gen)
    scale = 1.0 / math.sqrt(case.head_dim)
    inputs_before = [t.clone() for t in (q, k, v)]

    rc, o, lse = _call(library, q, k, v, softmax_scale=scale, causal=case.causal)
    assert rc == 0, f"attn_fwd returned {rc}"
    assert count_poison(o) == 0, f"{count_poison(o)} elements of o were never written"
    assert count_poison(lse) == 0, f"{count_poison(lse)} elements of lse were never written"
    for name, before, after in zip("qkv", inputs_before, (q, k, v)):
        assert bits_equal(before, after), f"input {name} was modified"

    o_ref, lse_ref = attention_reference(q, k, v, softmax_scale=scale, causal=case.causal)
    empty = torch.isposinf(lse_ref)
    if case.causal and case.seqlen_q > case.seqlen_k:
        assert bool(empty.any()), "scenario meant to have rows with no visible key has none"
    assert torch.equal(torch.isposinf(lse), empty), "lse = +inf must mark exactly the rows that see no key"
    assert bool(torch.isfinite(lse[~empty]).all()), "lse must be finite on rows that see a key"
    assert bool((o.float()[empty.transpose(1, 2)] == 0).all()), "o must be exactly 0 on rows that see no key"

    atol, rtol = TOL_O[case.dtype]
    err_o = (o.float() - o_ref).abs()
    worst = float((err_o - (atol + rtol * o_ref.abs())).max())
    assert worst <= 0, f"o off by up to {float(err_o.max()):.3g} (atol {atol}, rtol {rtol})"
    if bool((~empty).any()):
        err_lse = (lse[~empty] - lse_ref[~empty]).abs()
        bound = LSE_REL_TOL * lse_ref[~empty].abs().clamp(min=1.0)
        assert bool((err_lse <= bound).all()), f"lse off by up to {float(err_lse.max()):.3g}"


@pytest.mark.parametrize("causal", [False, True])
def test_fast_split_kv_is_deterministic(library, causal: bool) -> None:
    """A split-KV call (small grid, long cache) gives bit-identical o and lse on two calls."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    q = torch.randn(1, 4, 32, 128, generator=gen, device="cuda").to(torch.bfloat16)
    k = torch.randn(1, 16384, 8, 128, generator=gen, device="cuda").to(torch.bfloat16)
    v = torch.randn(1, 16384, 8, 128, generator=gen, device="cuda").to(torch.bfloat16)
    runs = [_call(library, q, k, v, softmax_scale=0.088, causal=causal) for _ in range(2)]
    assert runs[0][0] == 0 and runs[1][0] == 0
    assert bits_equal(runs[0][1], runs[1][1]) and bits_equal(runs[0][2], runs[1][2])


def test_fast_refuses_unknown_dtype(library) -> None:
    """A dtype code other than bf16 (0) / fp16 (1) is refused with a nonzero status before any launch."""
    q = torch.randn(1, 8, 2, 64, device="cuda", dtype=torch.float16)
    o = torch.empty_like(q)
    lse = torch.empty(1, 2, 8, device="cuda", dtype=torch.float32)
    params = make_params(q, q, q, o, lse, softmax_scale=0.125, causal=False, num_sms=132)
    params.dtype = 7
    assert library.fwd(params, torch.cuda.current_stream().cuda_stream) != 0
