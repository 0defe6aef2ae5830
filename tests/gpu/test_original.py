"""GPU test of the original kernel (kernels/attn_original.cu) and the README's naive example.

Each kernel is built once (``harness.compile.compile_kernel``), loaded with ``harness.abi.load_kernel`` and called through the ABI on the current
torch stream, on 24 scenarios that cover every head_dim in {64, 96, 128, 192, 256}, bf16 and fp16,
causal (bottom-right) and not, MHA / GQA / MQA, odd and unequal lengths (1, 17, 113, 239; seqlen_q >
seqlen_k under causal so that rows see no key; seqlen_q < seqlen_k), strided / misaligned / BHSD
layouts, an explicit softmax_scale, and large-magnitude logits (q, k ~ 6 N(0, 1)) that overflow a
softmax without max-subtraction.

What each call must satisfy, and the basis of the tolerances: tests/gpu/kernel_check.py.

Runtime: two nvcc builds (~5 s each, cached by compile_kernel) and 48 small calls: well under 60 s.
"""

from __future__ import annotations

import pytest
import torch

from harness import KERNELS_DIR, ORIGINAL_KERNEL
from harness.checks import bits_equal, count_poison, poison_
from tests.gpu.kernel_check import BF, FP, Case, assert_refuses_unknown_dtype, build, call, check_case

pytestmark = pytest.mark.gpu

NAIVE_KERNEL = KERNELS_DIR / "examples" / "attn_naive.cu"

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


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``{"original": KernelLibrary, "naive": KernelLibrary}``, each built once per module."""
    out_dir = tmp_path_factory.mktemp("kernels")
    return {"original": build(ORIGINAL_KERNEL, out_dir), "naive": build(NAIVE_KERNEL, out_dir)}


@pytest.mark.parametrize("kernel", ["original", "naive"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_matches_fp32_reference(libraries: dict, kernel: str, case: Case) -> None:
    """o and lse of the kernel match the fp32 reference (rules in tests/gpu/kernel_check.py)."""
    check_case(libraries[kernel], case)


@pytest.mark.parametrize("head_dim", [32, 80, 160])
def test_original_refuses_unsupported_head_dim(libraries: dict, head_dim: int) -> None:
    """The original returns nonzero ("unsupported") for a head_dim outside {64, 96, 128, 192, 256}, writes nothing."""
    q = torch.randn(1, 8, 2, head_dim, device="cuda", dtype=torch.bfloat16)
    o = poison_(torch.empty_like(q))
    lse = poison_(torch.empty(1, 2, 8, device="cuda", dtype=torch.float32))
    rc = call(libraries["original"], q, q, q, o, lse, softmax_scale=0.125, causal=False)
    assert rc != 0
    assert count_poison(o) == o.numel() and count_poison(lse) == lse.numel()


def test_original_refuses_unknown_dtype(libraries: dict) -> None:
    """A dtype code other than bf16 (0) / fp16 (1) is refused with a nonzero status before any launch."""
    assert_refuses_unknown_dtype(libraries["original"])


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
        assert call(libraries["original"], q, k, v, o, lse, softmax_scale=0.088, causal=True) == 0
        outs.append((o, lse))
    assert bits_equal(outs[0][0], outs[1][0]) and bits_equal(outs[0][1], outs[1][1])
