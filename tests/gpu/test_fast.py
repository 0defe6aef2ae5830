"""GPU test of the fast kernel (kernels/attn_fast.cu) against the one fp32 reference.

The kernel is built once (``harness.compile.compile_kernel``: the harness's flags and policy, no
warnings allowed), loaded with ``harness.abi.load_kernel`` and called through the ABI on the current
torch stream, on mixed scenarios that reach every code path of the kernel: every head_dim in
{64, 96, 128, 192, 256}, bf16 and fp16, causal bottom-right with seqlen_q != seqlen_k including rows
that see no key, MHA / GQA / MQA, odd lengths 1 / 17 / 113 / 239, every CTA shape (64 rows; 128 rows
as 4 warps x 32 rows or 8 warps x 16 rows), GQA
packing (seqlen_q <= 16), split-KV with its combine kernel (small grids against long caches, up to
seqlen_k = 32k), strided / misaligned layouts (the scalar fallback), and large-magnitude logits.

Checks per call (the rules and tolerances of tests/gpu/kernel_check.py): return code 0; every element of o and lse written (both poisoned first); inputs unchanged;
rows with no key have o == 0 exactly and lse == +inf; o within ``atol + rtol * |o_ref|`` (bf16
1.5e-2 / 1e-2, fp16 2e-3 / 2e-3); lse within ``1e-3 * max(1, |lse_ref|)``. Split-KV results must be
bit-identical across two calls (the harness requires determinism).
"""

from __future__ import annotations

import os

import pytest
import torch

from harness import KERNELS_DIR
from harness.checks import bits_equal, poison_
from tests.gpu.kernel_check import BF, FP, Case, assert_refuses_unknown_dtype, build, call, check_case

pytestmark = pytest.mark.gpu

# ATTNQ_FAST_KERNEL=path (absolute, or relative to the repository root) points these tests at another
# version of the fast kernel (e.g. a version from git history, see kernels/NOTES.md); default kernels/attn_fast.cu.
FAST_KERNEL = KERNELS_DIR.parent / os.environ.get("ATTNQ_FAST_KERNEL", "kernels/attn_fast.cu")

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
    # long rows with large logits in fp16: where a rescale that is not exactly 1 drifts (v2's bug)
    Case("large_logits_s16k_d128_fp16", 1, 16384, 16384, 2, 2, 128, False, FP, magnitude=6.0),
    Case("q_slice_causal_d128_bf16", 2, 113, 113, 4, 2, 128, True, BF, layout="q_slice"),
    Case("misaligned_fallback_d96_fp16", 1, 77, 91, 4, 2, 96, True, FP, layout="misaligned"),
]


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory):
    """The fast kernel's KernelLibrary, built once per module with the harness's compiler driver."""
    return build(FAST_KERNEL, tmp_path_factory.mktemp("kernels"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fast_matches_fp32_reference(library, case: Case) -> None:
    """o and lse of the fast kernel match the fp32 reference (rules in tests/gpu/kernel_check.py)."""
    check_case(library, case)


@pytest.mark.parametrize("causal", [False, True])
def test_fast_split_kv_is_deterministic(library, causal: bool) -> None:
    """A split-KV call (small grid, long cache) gives bit-identical o and lse on two calls."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    q = torch.randn(1, 4, 32, 128, generator=gen, device="cuda").to(torch.bfloat16)
    k = torch.randn(1, 16384, 8, 128, generator=gen, device="cuda").to(torch.bfloat16)
    v = torch.randn(1, 16384, 8, 128, generator=gen, device="cuda").to(torch.bfloat16)
    outs = []
    for _ in range(2):
        o = poison_(torch.empty_like(q))
        lse = poison_(torch.empty(1, 32, 4, device="cuda", dtype=torch.float32))
        assert call(library, q, k, v, o, lse, softmax_scale=0.088, causal=causal) == 0
        outs.append((o, lse))
    assert bits_equal(outs[0][0], outs[1][0]) and bits_equal(outs[0][1], outs[1][1])


def test_fast_refuses_unknown_dtype(library) -> None:
    """A dtype code other than bf16 (0) / fp16 (1) is refused with a nonzero status before any launch."""
    assert_refuses_unknown_dtype(library)
