"""The bug scenarios of `full` on CPU, through the checker's own checks (harness.checker.Runner on the CPU,
tests/checker_support.py: checked draws and timed calls): a correct kernel (the fp32 reference, rounded to the
dtype) passes every small one, and Python re-creations of the reported bugs fail the scenarios written
for them. The CUDA variants of the same bugs run on the H200 (scripts/gpu_run.sh step `bugs`)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from harness.checker import Fail as _Fail
from harness.scenarios import Scenario, load_suite
from tests.checker_support import check_scenario
from tests.checker_support import honest as _honest

FULL = load_suite("full").scenarios
SMALL = [s for s in FULL if s.group in ("bugs", "layouts", "values")
         and s.batch * max(s.seqlen_q, s.seqlen_k) * s.num_heads_q * s.head_dim <= 600_000]


def _by_name(name: str, **shape: int) -> Scenario:
    return next(s for s in FULL if s.name == name and all(getattr(s, k) == v for k, v in shape.items()))


def _check(sc: Scenario, cand: Any) -> Any:
    return check_scenario(sc, cand, seed=11)


def _naive(p: Any, *, k: Any = None, v: Any = None, kv_head: Any = None, scale: float | None = None,
           top_left: bool = False, base2_lse: bool = False, acc_dtype: Any = torch.float32,
           round_p: bool = False) -> None:
    """A plain attention 'kernel' on p's tensors with one bug switched on; writes p.o and p.lse. ``round_p``:
    P rounded to the inputs' dtype before P V while the denominator stays fp32, as FlashAttention and the
    original kernel do (correct, a little less precise than the reference)."""
    q = p.q.float()
    k = (p.k if k is None else k).float()
    v = (p.v if v is None else v).float()
    sq, hq = q.shape[1], q.shape[2]
    sk, hk = k.shape[1], k.shape[2]
    heads = torch.arange(hq) // (hq // hk) if kv_head is None else kv_head(torch.arange(hq), hq, hk)
    s = torch.einsum("bihd,bjhd->bhij", q, k[:, :, heads]) * (p.scale if scale is None else scale)
    i = torch.arange(sq).view(-1, 1)
    j = torch.arange(sk).view(1, -1)
    visible = j < p.k.shape[1]  # keys past seqlen_k (an over-read tile) are masked, as a kernel does
    if p.causal:
        visible = visible & (j <= (i if top_left else i + p.k.shape[1] - sq))
    s = s.masked_fill(~visible, float("-inf"))
    m = s.amax(-1, keepdim=True)
    pr = torch.exp(s - m.nan_to_num(neginf=0.0))
    pr = torch.where(visible, pr, 0.0)  # P = 0 on masked keys, but 0 * NaN is NaN in P V
    den = pr.sum(-1, keepdim=True)
    pv = pr.to(p.q.dtype).float() if round_p else pr
    o = torch.einsum("bhij,bjhd->bihd", pv, v[:, :, heads]).to(acc_dtype).float()  # the un-normalised sum
    o = (o / den.transpose(1, 2).clamp(min=1e-30)).masked_fill(den.transpose(1, 2) == 0, 0.0)
    lse = (m + den.log()).squeeze(-1).masked_fill(den.squeeze(-1) == 0, float("inf"))
    if base2_lse:
        lse = lse / math.log(2)
    p.o.copy_(o.to(p.o.dtype))
    p.lse.copy_(lse)


@pytest.mark.parametrize("sc", SMALL, ids=lambda s: s.id)
def test_a_correct_kernel_passes_every_small_bug_layout_and_value_scenario(sc: Scenario) -> None:
    stats = _check(sc, _honest)
    assert stats.max_abs_err_o <= stats.tol_o
    _check(sc, lambda p: _naive(p, round_p=True))  # P rounded to the dtype: within the tolerance and exact


def _fails(sc: Scenario, body: Any, check: str) -> str:
    with pytest.raises(_Fail) as info:
        _check(sc, body)
    assert info.value.check == check, str(info.value)
    return str(info.value)


def test_wrong_gqa_mapping_fails_the_gqa_decode_scenarios() -> None:
    def wrong(p: Any) -> None:
        _naive(p, kv_head=lambda h, hq, hk: h % hk)

    for sc in (s for s in FULL if s.name == "b22-gqa-decode"):
        _fails(sc, wrong, "reference_tolerance")


def test_a_hard_coded_scale_fails_the_softmax_scale_scenarios() -> None:
    def hard_coded(p: Any) -> None:
        _naive(p, scale=1 / math.sqrt(p.q.shape[-1]))

    for sc in (s for s in FULL if s.name == "b26-softmax-scale" and s.seqlen_q == 32):
        _fails(sc, hard_coded, "reference_tolerance")


def test_a_base_2_lse_fails_the_lse_scenarios() -> None:
    _fails(_by_name("b25-lse-base", seqlen_q=256), lambda p: _naive(p, base2_lse=True), "reference_tolerance")


def test_top_left_causal_fails_the_alignment_scenarios() -> None:
    for sc in (s for s in FULL if s.name == "b02-causal-align" and s.seqlen_q != s.seqlen_k):
        with pytest.raises(_Fail):
            _check(sc, lambda p: _naive(p, top_left=True))


def test_an_fp16_accumulator_overflows_on_the_constant_values() -> None:
    msg = _fails(_by_name("b07-fp16-acc", seqlen_k=4096), lambda p: _naive(p, acc_dtype=torch.float16), "finite_output")
    assert "NaN/Inf" in msg


def test_dense_kv_strides_fail_the_cache_and_strided_layouts() -> None:
    def dense_strides(p: Any) -> None:
        _, sk, hk, d = p.k.shape
        dense = (sk * hk * d, hk * d, d, 1)
        k = torch.as_strided(p.k, p.k.shape, dense, p.k.storage_offset())
        v = torch.as_strided(p.v, p.v.shape, dense, p.v.storage_offset())
        _naive(p, k=k, v=v)

    for name in ("b19-kv-pad-nan", "b27-k-strided", "b27-k-head-major"):
        for sc in (s for s in FULL if s.name == name):
            with pytest.raises(_Fail):
                _check(sc, dense_strides)


def test_an_unguarded_tail_reads_the_nan_slack() -> None:
    def whole_tiles(p: Any) -> None:
        b, sk, hk, d = p.k.shape
        rows = -(-sk // 64) * 64
        k = torch.as_strided(p.k, (b, rows, hk, d), p.k.stride(), p.k.storage_offset())
        v = torch.as_strided(p.v, (b, rows, hk, d), p.v.stride(), p.v.storage_offset())
        _naive(p, k=k, v=v)

    for sc in (s for s in FULL if s.name == "b19-kv-pad-nan"):
        msg = _fails(sc, whole_tiles, "finite_output")
        assert "NaN/Inf" in msg
