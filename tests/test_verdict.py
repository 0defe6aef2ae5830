"""Verdict assembly: geomeans, groups, anchors, worst-first, goal and flags."""

from __future__ import annotations

import math

import pytest

from harness.verdict import ScenarioResult, TimingStats, geomean
from harness.verify import VerifyOptions, build_verdict


def _res(i: int, group: str, orig_ms: float, cand_ms: float, *, correct: bool = True, flops: float = 1e12,
         anchors: dict[str, float] | None = None, kind: str | None = None) -> ScenarioResult:
    r = ScenarioResult(id=f"{group}/s{i}", group=group, flops=flops, correct=correct)
    if not correct:
        r.failure_kind, r.check, r.message = kind or "wrong_output", "reference_tolerance", "bad"  # type: ignore[assignment]
        return r
    r.candidate = TimingStats(median_ms=cand_ms, iqr_ms=0.01 * cand_ms, samples=10)
    r.original = TimingStats(median_ms=orig_ms, iqr_ms=0.01 * orig_ms, samples=10)
    r.speedup = orig_ms / cand_ms
    r.tflops = flops / (cand_ms * 1e-3) / 1e12
    for name, ms in (anchors or {}).items():
        r.anchors[name] = TimingStats(median_ms=ms, iqr_ms=0.0, samples=10)
        r.vs_anchor[name] = ms / cand_ms
    return r


def _build(results, goal_ids=None, **kw):
    opts = VerifyOptions(**kw)
    return build_verdict(results, suite_name="t", options=opts, source="k.cu", source_sha256="a" * 64,
                         build_hash="b" * 64, original_sha256="c" * 64, peak_tflops=790.0, physical_peak_tflops=1070.0,
                         goal_ids=goal_ids if goal_ids is not None else {r.id for r in results})


def test_geomean() -> None:
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([]) is None
    with pytest.raises(ValueError):
        geomean([1.0, 0.0])


def test_all_correct_goal_met_with_groups_and_anchors() -> None:
    rs = [_res(0, "a", 4.0, 2.0, anchors={"flash": 3.0}), _res(1, "a", 1.0, 1.0, anchors={"flash": 1.5}),
          _res(2, "b", 9.0, 1.0)]
    v = _build(rs, anchors=["flash"], goal_speedup=1.5)
    assert v.status == "correct" and v.num_correct == 3 and not v.failed
    assert v.geomean_speedup == pytest.approx((2.0 * 1.0 * 9.0) ** (1 / 3))
    assert v.geomean_by_group == pytest.approx({"a": math.sqrt(2.0), "b": 9.0})
    assert v.geomean_vs_anchor["flash"] == pytest.approx(1.5)
    assert v.worst[0] == "a/s1"  # slowest first
    assert v.goal.met and "all 3 scenarios correct" in v.goal.reason


def test_a_failed_scenario_fails_the_goal_and_is_named_first() -> None:
    rs = [_res(0, "a", 4.0, 1.0), _res(1, "a", 1.0, 1.0, correct=False)]
    v = _build(rs)
    assert v.status == "incorrect" and v.failed == ["a/s1"] and v.worst[0] == "a/s1"
    assert not v.goal.met and "a/s1" in v.goal.reason
    assert v.geomean_speedup == pytest.approx(4.0)  # over correct scenarios only


def test_goal_against_an_anchor_needs_the_anchor() -> None:
    v = _build([_res(0, "a", 2.0, 1.0)], goal_against="cudnn")
    assert not v.goal.met and "--anchors cudnn" in v.goal.reason
    v = _build([_res(0, "a", 2.0, 1.0, anchors={"cudnn": 0.9})], goal_against="cudnn", anchors=["cudnn"])
    assert not v.goal.met and "0.900x" in v.goal.reason


def test_flags_above_measured_peak_and_noise() -> None:
    fast = _res(0, "a", 10.0, 1.0, flops=0.85e12)  # 850 TFLOP/s: above the measured 790, below physical
    noisy = _res(1, "a", 1.0, 1.0)
    noisy.candidate.iqr_ms = 0.3
    v = _build([fast, noisy])
    kinds = {(f.kind, f.scenario_id) for f in v.flags}
    assert ("above_measured_peak", "a/s0") in kinds and ("noisy_timing", "a/s1") in kinds
    assert not any(f.kind == "resampled_timing" for f in v.flags)
    noisy.candidate.resampled = True  # cleared after the extra samples (harness.timed_samples.WALL_MORE): named
    assert ("resampled_timing", "a/s1") in {(f.kind, f.scenario_id) for f in _build([fast, noisy]).flags}


def test_all_not_run_is_an_error() -> None:
    rs = [_res(0, "a", 1, 1, correct=False, kind="not_run")]
    assert _build(rs).status == "error"


def test_policy_off_drops_policy_checks() -> None:
    v = _build([_res(0, "a", 1, 1)], policy=False)
    assert "symbol_policy" not in v.checks and "timed_output" in v.checks


@pytest.mark.parametrize(("kw", "why"), [({"goal_ids": {"a/s0", "a/s1"}}, "1 of the 2 scenarios of the goal suite"),
                                         ({"goal_ids": {"b/s9"}}, "and 1 others"),
                                         ({"scenario_ids": ["a/s0"]}, "subset"),
                                         ({"policy": False}, "policy switched off")])
def test_goal_is_judged_only_on_a_complete_goal_suite_run(kw, why) -> None:
    v = _build([_res(0, "a", 4.0, 1.0)], **kw)
    assert v.status == "correct" and not v.goal.met and why in v.goal.reason
    assert _build([_res(0, "a", 4.0, 1.0)]).goal.met  # the same run, when it is the whole goal suite


def test_anchor_geomeans_per_group() -> None:
    rs = [_res(0, "fa3grid", 10.0, 5.0, anchors={"flash": 6.0}), _res(1, "fa3grid", 10.0, 5.0, anchors={"flash": 4.0}),
          _res(2, "odd", 1.0, 1.0, anchors={"flash": 3.0, "cudnn": 2.0})]
    v = _build(rs, anchors=["flash", "cudnn"])
    assert v.geomean_vs_anchor_by_group["flash"]["fa3grid"] == pytest.approx(math.sqrt(1.2 * 0.8))
    assert v.geomean_vs_anchor_by_group["flash"]["odd"] == pytest.approx(3.0)
    assert v.geomean_vs_anchor_by_group["cudnn"] == {"odd": pytest.approx(2.0)}  # no cudnn time on fa3grid
    assert v.geomean_vs_anchor["flash"] == pytest.approx((1.2 * 0.8 * 3.0) ** (1 / 3))


def test_phase_totals_break_the_wall_time_down() -> None:
    from harness.verdict import PhaseTimes
    from harness.verify import _phase_totals

    rs = [_res(0, "g", 2.0, 1.0), _res(1, "g", 2.0, 1.0, correct=False)]
    rs[0].phases = PhaseTimes(check_s=1.5, reference_s=1.0, timing_s=3.0, timed_gpu_s=2.5)
    rs[1].phases = PhaseTimes(check_s=0.5, reference_s=0.25)  # failed in correctness: still accounted
    v = _build(rs)
    v.wall_s, v.compile_s = 10.0, 2.0
    ph = _phase_totals(v, startup_s=1.25)
    assert ph == {"compile": 2.0, "worker_start": 1.25, "check": 2.0, "reference": 1.25, "timing": 3.0,
                  "timed_gpu": 2.5, "other": 1.75}


def test_a_build_before_the_verification_counts_in_its_wall_time() -> None:
    """The CLI builds the candidate before verify_kernel starts its clock (runs 73-74: 165-169 s per `attnq verify`
    process for a wall_s of 77-81 s); count_prior_compile puts that build into wall_s, compile_s and the compile phase,
    and leaves the other phases alone."""
    from harness.verdict import PhaseTimes
    from harness.verify import _phase_totals, count_prior_compile

    rs = [_res(0, "g", 2.0, 1.0)]
    rs[0].phases = PhaseTimes(check_s=1.5, reference_s=1.0, timing_s=3.0, timed_gpu_s=2.5)
    v = _build(rs)
    v.wall_s, v.compile_s = 10.0, 0.1
    v.phase_s = _phase_totals(v, startup_s=1.25)
    out = count_prior_compile(v, 84.9)
    assert (out.wall_s, out.compile_s) == (94.9, 85.0)
    assert out.phase_s["compile"] == 85.0
    assert {k: x for k, x in out.phase_s.items() if k != "compile"} == {k: x for k, x in v.phase_s.items() if k != "compile"}
    assert (v.wall_s, v.compile_s, v.phase_s["compile"]) == (10.0, 0.1, 0.1)  # the verdict it was given is unchanged
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="compile_s"):
            count_prior_compile(v, bad)
