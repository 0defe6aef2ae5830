"""The original kernel runs only where its output or time is used once it is slow (harness.timed_samples.OriginalPlan):
which samples keep it, what checks the others, and that cheats placed on the samples without it are still caught.
The kernels are Python functions on the ABI's memory (tests/checker_support.py); the original reports a fixed
event time so that the plan's switch does not depend on this machine's speed."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from harness.checker import Fail
from harness.checks import TimedBounds, judge_timed_sample, timed_sample_values
from harness.endpoints import CallResult
from harness.scenarios import Scenario, keys_seen, no_key_rows
from harness.timed_samples import OriginalPlan, timing_stats
from tests.checker_support import PyKernel, honest, is_dense, run_scenario

SC = Scenario(group="t", batch=1, seqlen_q=24, seqlen_k=16, num_heads_q=4, num_heads_kv=2, head_dim=16, causal=True)
BOUNDS = TimedBounds(base_o=1e-3, bound_lse=1e-4, tol_o=1e-2, tol_lse=1e-4, ref_o_max=1e9, mantissa_bits=60)


class SlowOriginal(PyKernel):
    """The honest original, reporting ``ms`` per timed call (event and wall), whatever the host took."""

    def __init__(self, ms: float) -> None:
        super().__init__(honest, "original")
        self.ms = ms

    def timed_call(self, params: Any, tail: bool = False) -> CallResult:
        res = super().timed_call(params, tail)
        return CallResult(res.status, event_ms=self.ms, wall_ms=self.ms, tail_ms=0.0 if tail else None)


def _log(tmp_path, body: Any, orig_ms: float, sparse_ms: float = 1.0, sc: Scenario = SC) -> tuple[Any, list[dict]]:
    path = tmp_path / "timing.jsonl"
    _, res = run_scenario(sc, body, SlowOriginal(orig_ms), repeats=4, min_samples=10, max_samples=16,
                          original_sparse_ms=sparse_ms, diag_timing_log=str(path))
    lines = path.read_text().splitlines() if path.exists() else []
    return res, json.loads(lines[-1])["samples"] if lines else []


def test_the_plan_keeps_the_original_where_its_output_or_time_is_used() -> None:
    plan = OriginalPlan(sparse_ms=2.0)
    assert plan.runs("padded_qo", False, "dense", False)  # nothing timed yet: every sample
    plan.ran(1.5)
    assert plan.runs("padded_qo", True, "dense", False)  # below the threshold: every sample
    plan.ran(3.0)
    assert plan.sparse  # median of 1.5 and 3.0: 2.25
    plan.ran(1.0)
    assert not plan.sparse  # median 1.5: a slow call among faster ones does not decide it
    plan.ran(2.5), plan.ran(2.2)
    assert plan.sparse  # median 2.2
    assert plan.runs("dense", True, "dense", False)  # counted, timed layout: its time is used
    assert plan.runs("padded_qo", False, "dense", True)  # checked whole: its error sets the tolerance
    assert plan.runs("padded_qo", True, "dense", False, declared_values=True)  # declared values: the original decides
    assert not plan.runs("padded_qo", True, "dense", False)  # another layout's fresh call
    assert not plan.runs("dense", False, "dense", False)  # a repeat
    assert plan.runs("padded_qo", True, None, False)  # no timed layout: every counted call is timed
    zero = OriginalPlan(sparse_ms=0.0)
    zero.ran(1e9)
    assert zero.runs("padded_qo", False, "dense", False)  # 0: the original in every sample


def test_a_slow_original_runs_only_in_the_samples_that_use_it(tmp_path) -> None:
    res, samples = _log(tmp_path, honest, orig_ms=5.0)
    assert res.correct, res.message
    skipped = [s for s in samples if s["e_o"] is None]
    assert skipped and samples[0]["e_o"] is not None  # the first sample times the original: the switch
    for s in samples[1:]:
        used = s["counted"] and s["layout"] == res.original.layout
        assert used <= (s["e_o"] is not None), s  # every timed sample of the original's median has it
    assert all(not s["counted"] or s["layout"] != res.original.layout for s in skipped)
    first_repeat = next(s for s in samples if s["repeat"])
    assert first_repeat["e_o"] is not None  # the first repeat is checked whole: its tolerance needs the original
    assert res.original.samples == res.candidate.samples  # the medians are over the same samples
    assert res.original.median_ms == 5.0


def test_a_fast_original_or_sparse_off_runs_in_every_sample(tmp_path) -> None:
    for orig_ms, sparse_ms in ((0.5, 1.0), (5.0, 0.0)):
        res, samples = _log(tmp_path, honest, orig_ms=orig_ms, sparse_ms=sparse_ms)
        assert res.correct and samples and all(s["e_o"] is not None for s in samples)


def _late_when_padded(cheat: Any) -> Any:
    """Honest on the dense layout (the timed one) and on the first two calls (the original runs in the first
    sample: the plan's switch); ``cheat(p)`` after ``honest`` on every later call of another layout."""
    calls = {"n": 0}

    def body(p: Any) -> None:
        calls["n"] += 1
        honest(p)
        if calls["n"] > 2 and not is_dense(p.params):
            cheat(p)

    return body


def _o_off(p: Any) -> None:
    p.o[:, no_key_rows(SC):].add_(0.05)  # the rows that see keys


def _empty_rows_finite(p: Any) -> None:
    p.lse[..., :no_key_rows(SC)] = 0.0  # o stays 0 there


def _empty_rows_o(p: Any) -> None:
    p.o[:, :no_key_rows(SC)] = 0.25  # lse stays +inf there


def _one_nan(p: Any) -> None:
    p.o[0, -1, 0, 0] = float("nan")  # a row the sampled rows rarely hold


@pytest.mark.parametrize(("body", "needle"), [
    (_o_off, "sampled rows against the fp32 reference"),
    (_empty_rows_finite, "lse is not +inf on exactly the rows that see no key"),
    (_empty_rows_o, "or o is not 0 on those rows"),
    (_one_nan, "or not finite"),
])
def test_cheats_on_the_samples_without_the_original_are_caught(body, needle) -> None:
    """The checked draws use every layout too, so these fail there first; through the timing loop alone
    (tests/test_worker_timing.py's way) the samples without the original catch them as well."""
    from harness.buffers import Buffers
    from harness.draws import CallDrawer
    from tests.checker_support import make_runner

    runner = make_runner(PyKernel(_late_when_padded(body)), orig=SlowOriginal(5.0), min_samples=10, max_samples=16,
                         original_sparse_ms=1.0)
    drawer = CallDrawer(SC, 3, draws=2, repeats=0, min_samples=10)
    drawer.full.rate = 0.0  # no whole check: only the per-sample checks
    bc, bo = Buffers(torch, SC, torch.bfloat16, "cpu"), Buffers(torch, SC, torch.bfloat16, "cpu")
    with pytest.raises(Fail) as info:
        runner._time(SC, bc, bo, torch.Generator().manual_seed(7), drawer, {"normal": BOUNDS, "large_logits": BOUNDS},
                     None)
    assert info.value.check == "timed_output" and needle in str(info.value)
    assert runner.orig.calls < runner.cand.calls  # it was caught on a sample the original skipped


def test_without_the_original_the_empty_rows_come_from_the_scenario() -> None:
    o = torch.zeros(1, 3, 4, 8, dtype=torch.bfloat16)
    lse = torch.tensor([[[float("inf"), float("inf"), 0.5, 1.0]]]).expand(1, 3, 4).contiguous()
    none = torch.zeros(0, dtype=torch.int64)
    ok = timed_sample_values(torch.tensor(True), o, lse, None, None, none, no_key_rows=2)
    assert judge_timed_sample(ok.tolist(), 0, BOUNDS, []) is None
    for bad_rows in (1, 3, 0):  # +inf on fewer rows, on more rows, where none should be
        vals = timed_sample_values(torch.tensor(True), o, lse, None, None, none, no_key_rows=bad_rows)
        kind, _, msg = judge_timed_sample(vals.tolist(), 0, BOUNDS, [])
        assert kind == "timed_output_wrong" and "rows that see no key" in msg
    nan = lse.clone()
    nan[0, 1, 3] = float("nan")
    vals = timed_sample_values(torch.tensor(True), o, nan, None, None, none, no_key_rows=2)
    assert judge_timed_sample(vals.tolist(), 0, BOUNDS, [])[0] == "timed_output_wrong"


@pytest.mark.parametrize(("sq", "sk", "causal"), [(24, 16, True), (16, 24, True), (7, 7, True), (9, 1, True),
                                                   (5, 3, False), (1, 1, True), (300, 17, True)])
def test_no_key_rows_counts_the_rows_keys_seen_says_see_nothing(sq: int, sk: int, causal: bool) -> None:
    sc = Scenario(group="t", batch=1, seqlen_q=sq, seqlen_k=sk, num_heads_q=1, num_heads_kv=1, head_dim=64,
                  causal=causal)
    assert no_key_rows(sc) == sum(keys_seen(i, sq, sk, causal) == 0 for i in range(sq))


def test_timing_statistics_refuse_a_sample_without_a_time() -> None:
    assert timing_stats([1.0, 3.0, 2.0]).median_ms == 2.0
    with pytest.raises(ValueError, match="without a time"):
        timing_stats([1.0, float("nan"), 2.0])
    with pytest.raises(ValueError):
        timing_stats([])


def test_without_the_original_the_sampled_rows_get_one_ulp_of_rounding() -> None:
    """Run 61 (H100, full, v18): an honest split-KV row was 0.00185 off the fp32 reference on a timed call the
    original skipped, against the checked draws' 0.00136 (2 x the original's error there + the floor, measured on
    other inputs): less than one bf16 ulp at the row's magnitude (0.3: 2^-9). Without the original in the sample the
    sampled rows' tolerance gets that ulp; with it, the original's error on the same rows bounds them as before."""
    bounds = TimedBounds(base_o=1e-3, bound_lse=1e-3, tol_o=0.00136, tol_lse=1e-3, ref_o_max=1.0, mantissa_bits=7)
    o = torch.zeros(1, 3, 4, 8, dtype=torch.bfloat16)
    lse = torch.ones(1, 3, 4)
    none = torch.zeros(0, dtype=torch.int64)
    ref_max = torch.tensor([0.3, 1.0])

    def judged(err_o: float, original_ran: bool) -> tuple[str, str, str] | None:
        rows_c = torch.tensor([err_o, 0.0, 0.0])
        vals = timed_sample_values(torch.tensor(True), o, lse, None, None, none, rows_c, None, ref_max)
        return judge_timed_sample(vals.tolist(), 18, bounds, [], original_ran=original_ran)

    assert judged(0.00185, original_ran=False) is None  # 0.00136 + 2^-9 = 0.00331
    assert judged(0.0034, original_ran=False)[1] == "timed_output"  # past one ulp: still caught
    assert judged(0.00185, original_ran=True)[1] == "timed_output"  # with the original: its own rows decide
