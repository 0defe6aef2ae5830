"""GPU test of the ``fa3`` anchor (FlashAttention-3): its call convention matches attnq's problem (the
same output as the one fp32 reference, causal bottom-right, GQA, decode, split-KV), and a verification
with ``anchors=["fa3"]`` times it on every scenario (vs_anchor["fa3"] > 0, per-group geomeans, the goal
measured against it).

Skips with a reason without a suitable GPU (tests/conftest.py) or without flash_attn_interface (on the
GPU box scripts/gpu_run.sh unpacks .fa3/*.tgz to /tmp/fa3 and puts it on PYTHONPATH).
Runtime: a quick-suite verification (~10-20 s, two nvcc builds cached) plus four FA3 calls.
"""

from __future__ import annotations

import pytest
import torch

from harness import ORIGINAL_KERNEL
from harness.anchors import FA3_MISSING, fa3_available, fa3_runner
from harness.config import Settings
from harness.reference import attention_reference
from harness.scenarios import load_suite
from harness.verify import VerifyOptions, verify_kernel
from tests.gpu.kernel_check import TOL_O

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not fa3_available(), reason=FA3_MISSING)]

BF, FP = torch.bfloat16, torch.float16


@pytest.mark.parametrize(("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "causal", "dtype"), [
    (2, 239, 239, 8, 2, 128, True, BF),       # GQA, causal, odd length
    (1, 113, 799, 4, 4, 64, True, FP),        # causal bottom-right with seqlen_q < seqlen_k
    (16, 1, 8192, 32, 8, 128, False, BF),     # decode: FA3's split-KV heuristic (num_splits=0)
    (1, 300, 300, 4, 1, 256, False, BF),      # MQA, d256
])
def test_fa3_runner_matches_reference(batch: int, seqlen_q: int, seqlen_k: int, heads_q: int, heads_kv: int,
                                      head_dim: int, causal: bool, dtype: torch.dtype) -> None:
    gen = torch.Generator(device="cuda").manual_seed(11)
    q = torch.randn(batch, seqlen_q, heads_q, head_dim, generator=gen, device="cuda").to(dtype)
    k = torch.randn(batch, seqlen_k, heads_kv, head_dim, generator=gen, device="cuda").to(dtype)
    v = torch.randn(batch, seqlen_k, heads_kv, head_dim, generator=gen, device="cuda").to(dtype)
    scale = head_dim ** -0.5
    run = fa3_runner(torch, causal, q, k, v, scale)
    assert run is not None, "FA3 refused a shape it supports"
    o = run()
    assert o.shape == q.shape and o.dtype == dtype
    o_ref, _ = attention_reference(q, k, v, softmax_scale=scale, causal=causal)
    atol, rtol = TOL_O[dtype]
    err = (o.float() - o_ref).abs()
    assert bool(torch.isfinite(o.float()).all()) and float((err - (atol + rtol * o_ref.abs())).max()) <= 0, \
        f"FA3 output off by up to {float(err.max()):.3g}"


def test_verify_times_fa3(tmp_path) -> None:  # type: ignore[no-untyped-def]
    opts = VerifyOptions(suite="quick", anchors=["fa3", "flash"], goal_against="fa3", goal_suite="quick",
                         min_samples=5, max_samples=10)
    v = verify_kernel(ORIGINAL_KERNEL, opts, settings=Settings(workspace=tmp_path, state=tmp_path / "state"))
    assert v.status == "correct", [(r.id, r.message) for r in v.scenarios if not r.correct]
    dims = {sc.id: sc.head_dim for sc in load_suite("quick").scenarios}
    for r in v.scenarios:
        if dims[r.id] in (64, 96, 128, 192, 256):
            t = r.anchors.get("fa3")
            # the medians are over the dense calls (harness.draws: half of the deck), at least 3 of them
            assert t is not None and t.median_ms > 0 and t.samples >= 3 and t.layout == "dense", r.id
            assert r.vs_anchor["fa3"] > 0, r.id
    assert v.geomean_vs_anchor["fa3"] > 0
    assert set(v.geomean_vs_anchor_by_group["fa3"]) == {r.group for r in v.scenarios}
    assert v.goal.against == "fa3" and f"{v.geomean_vs_anchor['fa3']:.3f}x vs fa3" in v.goal.reason, v.goal.reason
