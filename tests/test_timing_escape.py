"""The stream-timing escape check (harness/timing_escape.py) and the timing diagnostics' settings.

Run 20 (H200, 2026-12-01): an A/A on ``bugs`` gave geomean 0.484x because the wall-clock check flagged
41/85 tiny scenarios: the candidate's launcher woke ~80 us slower than the original's, so its round trip
less its event time exceeded the original's by more than the 0.05 ms threshold, and the noisy wall clock
replaced its event times. The numbers below have that shape (event 11-12 us, wall overheads 0.30 vs 0.38 ms).
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from harness.config import Settings
from harness.endpoints import CallResult
from harness.timing_escape import WALL_BACKSTOP_MS, escape_evidence, escape_threshold_ms, judge_escape
from harness.worker import WorkerJob
from tests.checker_support import SC, PyKernel, honest, make_runner, tensors


def _samples(n: int = 30, *, wake_c_ms: float = 0.38, wake_o_ms: float = 0.30, seed: int = 0):
    """A/A samples of a ~11.5 us kernel: event times, wall round trips with per-process overheads
    (jittered like host wake-ups), and device tails of ~7 us."""
    rng = random.Random(seed)
    t_c = [0.0115 + rng.uniform(-3e-4, 3e-4) for _ in range(n)]
    t_o = [0.0113 + rng.uniform(-3e-4, 3e-4) for _ in range(n)]
    w_c = [e + wake_c_ms + rng.uniform(-0.06, 0.2) for e in t_c]
    w_o = [e + wake_o_ms + rng.uniform(-0.02, 0.02) for e in t_o]
    tail_c = [0.007 + rng.uniform(-1e-3, 1e-3) for _ in range(n)]
    tail_o = [0.007 + rng.uniform(-1e-3, 1e-3) for _ in range(n)]
    return t_c, t_o, w_c, w_o, tail_c, tail_o


def test_the_wall_check_flags_an_honest_tiny_kernel_whose_launcher_wakes_late() -> None:
    """The run-20 symptom: a slower wake-up alone makes the candidate 'escape' and ~8x slower."""
    t_c, t_o, w_c, w_o, _, _ = _samples()
    times, msg = judge_escape("wall", t_c, t_o, w_c, w_o)
    assert msg is not None and msg.startswith("stream_timing") and "host wall-clock" in msg
    assert statistics.median(t_o) / statistics.median(times) < 0.25


def test_the_tail_check_keeps_the_event_times_of_the_same_kernel() -> None:
    t_c, t_o, w_c, w_o, tail_c, tail_o = _samples()
    times, msg = judge_escape("tail", t_c, t_o, w_c, w_o, tail_c, tail_o)
    assert msg is None and times == t_c
    assert abs(statistics.median(t_o) / statistics.median(times) - 1) < 0.05


def test_the_tail_check_times_work_left_on_another_stream_to_the_devices_idle() -> None:
    """A kernel whose 0.4 ms of work runs after the end event: flagged, timed event + tail - the original's."""
    t_c, t_o, w_c, w_o, _, tail_o = _samples(wake_c_ms=0.30)
    tail_c = [0.4 + 0.007] * len(t_c)
    times, msg = judge_escape("tail", t_c, t_o, w_c, w_o, tail_c, tail_o)
    assert msg is not None and "on the device" in msg
    assert statistics.median(times) == pytest.approx(statistics.median(t_c) + 0.4, abs=2e-3)


def test_under_the_tail_check_the_wall_clock_stays_a_coarse_backstop() -> None:
    t_c, t_o, w_c, w_o, tail_c, tail_o = _samples()
    assert judge_escape("tail", t_c, t_o, w_c, w_o, tail_c, tail_o)[1] is None  # 80 us of wake-up: not flagged
    w_far = [w + WALL_BACKSTOP_MS + 0.2 for w in w_c]  # events the wall clock does not bear out at all
    times, msg = judge_escape("tail", t_c, t_o, w_far, w_o, tail_c, tail_o)
    assert msg is not None and "host wall-clock" in msg and min(times) > WALL_BACKSTOP_MS


def test_the_threshold_and_bad_arguments() -> None:
    assert escape_threshold_ms([0.01, 0.012]) == 0.05
    assert escape_threshold_ms([2.0, 2.0, 2.0]) == 0.5
    t_c, t_o, w_c, w_o, tail_c, _ = _samples(4)
    with pytest.raises(ValueError, match="tail"):
        judge_escape("tail", t_c, t_o, w_c, w_o)
    with pytest.raises(ValueError, match="tail"):
        judge_escape("tail", t_c, t_o, w_c, w_o, tail_c, tail_c[:2])
    with pytest.raises(ValueError, match="wall"):
        judge_escape("both", t_c, t_o, w_c, w_o)  # type: ignore[arg-type]


def test_the_settings_are_parsed_and_default_to_todays_behaviour(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    base = WorkerJob(candidate_lib="c", original_lib="o", scenarios=[], seed=1)
    job = WorkerJob(candidate_lib="c", original_lib="o", scenarios=[], seed=1, **Settings().timing_fields())
    assert job == base  # nothing set: the job a verification always had
    assert job.stream_escape_check == "tail"  # the default since run 23's A/A (0/85 flagged)
    monkeypatch.setenv("ATTNQ_STREAM_ESCAPE_CHECK", "wall")
    monkeypatch.setenv("ATTNQ_DIAG_ORDER", "alternate")
    monkeypatch.setenv("ATTNQ_DIAG_TIMING_LOG", str(tmp_path / "t.jsonl"))
    monkeypatch.setenv("ATTNQ_DIAG_SINGLE_CANDIDATE_LAUNCHER", "1")
    monkeypatch.setenv("ATTNQ_DIAG_PROFILE", str(tmp_path / "w.prof"))
    fields = Settings().timing_fields()
    assert fields == {"host_cover_all": False, "stream_escape_check": "wall", "diag_order": "alternate",
                      "diag_timing_log": str(tmp_path / "t.jsonl"), "diag_profile": str(tmp_path / "w.prof"),
                      "repeat_process": False}
    WorkerJob(candidate_lib="c", original_lib="o", scenarios=[], seed=1, **fields)
    for name, bad in (("ATTNQ_STREAM_ESCAPE_CHECK", "host"), ("ATTNQ_DIAG_ORDER", "random")):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ValidationError, match=name.removeprefix("ATTNQ_").lower()):
            Settings()
        monkeypatch.delenv(name)


@pytest.mark.parametrize("order", ["candidate_first", "original_first", "alternate"])
def test_the_order_and_the_tail_reach_the_timed_calls_and_the_log(tmp_path: Path, order: str) -> None:
    """The checker (CPU kernels) asks each timed call for its tail, orders the two calls of a sample as
    set, and writes every sample to the timing log; the verdict stays correct."""
    cand, orig = PyKernel(honest), PyKernel(honest, "original")
    log = tmp_path / "timing.jsonl"
    runner = make_runner(cand, orig, min_samples=4, max_samples=4, repeats=1, stream_escape_check="tail",
                         diag_order=order, diag_timing_log=str(log))
    res = runner.run(SC, 0)
    assert res.correct, res.message
    n = len(orig.timed)  # 4, or more until 3 fresh dense calls were timed
    assert len(cand.timed) == n + 2 and n >= 4  # the candidate's 2 checked draws take the timed path too
    loop = cand.timed[2:]
    assert all(t for _, t in cand.timed + orig.timed)
    orig_first = [o[0] < c[0] for c, o in zip(loop, orig.timed, strict=True)]
    assert orig_first == {"candidate_first": [False] * n, "original_first": [True] * n,
                          "alternate": [i % 2 == 1 for i in range(n)]}[order]
    (rec,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert rec["id"] == SC.id and rec["order"] == order and rec["escape_check"] == "tail" and rec["escaped"] is None
    assert [s["orig_first"] for s in rec["samples"]] == orig_first
    assert all(s["tail_c"] == 0.0 and s["tail_o"] == 0.0 and s["e_c"] > 0 for s in rec["samples"])


def test_by_default_every_timed_call_is_asked_for_its_tail_and_wall_asks_none() -> None:
    """The tail check is the default (run 23's A/A: 0/85 flagged); ``wall`` asks no timed call for a tail."""
    cand = PyKernel(honest)
    res = make_runner(cand, min_samples=3, max_samples=3, repeats=1).run(SC, 0)
    assert res.correct and cand.timed and all(t for _, t in cand.timed)
    cand = PyKernel(honest)
    res = make_runner(cand, min_samples=3, max_samples=3, repeats=1, stream_escape_check="wall").run(SC, 0)
    assert res.correct and cand.timed and not any(t for _, t in cand.timed)


class _HostBurst(PyKernel):
    """An honest 7 us kernel as a launcher reports it: event 0.007 ms, round trip event + 0.6 ms, device tail
    0.007 ms; the first ``burst`` dense calls' round trips are ``extra_ms`` longer (``every``: all dense calls):
    the host wake-up bursts of run 42 (H100, #18's tail-sweep rows convicted with 0.97 and 1.94 ms)."""

    def __init__(self, name: str, burst: int = 0, extra_ms: float = 2.0, every: bool = False) -> None:
        super().__init__(honest, name)
        self.burst, self.extra_ms, self.every, self.dense = burst, extra_ms, every, 0

    def timed_call(self, params: Any, tail: bool = False) -> CallResult:
        status = self._run(params)
        t = tensors(params)
        dense = all(x.stride(2) == x.shape[-1] for x in (t.q, t.k, t.v, t.o))
        extra = 0.0
        if dense:
            self.dense += 1
            extra = self.extra_ms if (self.every or self.dense <= self.burst) else 0.0
        self.timed.append((0, tail))
        return CallResult(status, event_ms=0.007, wall_ms=0.607 + extra, tail_ms=0.007 if tail else None)


def _burst_run(cand: _HostBurst, seed: int, log: Path):
    return make_runner(cand, _HostBurst("original"), min_samples=10, max_samples=10, repeats=1, seed=seed,
                       stream_escape_check="tail", diag_timing_log=str(log)).run(SC, 0)


def test_a_wake_up_burst_in_the_first_samples_takes_more_samples_not_a_conviction(tmp_path: Path) -> None:
    """Three of the first dense calls' round trips 2 ms late and the device tails clean: the wall clock alone
    would convict (escape_evidence 'wall'); the loop takes WALL_MORE times its calls more and judges over all
    of them: not flagged, timed by its events. Run 42's #18 had two such rows at 0.005-0.01x FA3."""
    extended = 0
    for seed in range(1, 9):
        log = tmp_path / f"t{seed}.jsonl"
        cand = _HostBurst("candidate", burst=3)
        res = _burst_run(cand, seed, log)
        assert res.correct and res.message is None, (seed, res.message)
        assert res.candidate.median_ms == pytest.approx(0.007) and res.speedup == pytest.approx(1.0)
        (rec,) = [json.loads(line) for line in log.read_text().splitlines()]
        extended += rec["wall_more_to"] > 0
        assert res.candidate.resampled == (rec["wall_more_to"] > 0)  # the verdict says so (flag resampled_timing)
        assert rec["escaped"] is None
    assert extended >= 4  # most seeds' first 5-6 dense calls had the burst at their median


def test_round_trips_late_on_every_call_stay_convicted_after_the_extra_samples(tmp_path: Path) -> None:
    """Work the events miss on every dense call (the wall clock 2 ms late each time, the device tails clean):
    the extra samples change nothing; flagged and timed by the wall clock."""
    for seed in (1, 2, 3):
        log = tmp_path / f"e{seed}.jsonl"
        res = _burst_run(_HostBurst("candidate", every=True), seed, log)
        assert res.correct and res.message and "host wall-clock" in res.message, (seed, res.message)
        assert res.candidate.median_ms == pytest.approx(2.007, abs=1e-3)
        (rec,) = [json.loads(line) for line in log.read_text().splitlines()]
        fresh = sum(not smp["repeat"] for smp in rec["samples"])  # the loop went on to exactly wall_more_to
        assert rec["wall_more_to"] == fresh and fresh > 10 + 5 and rec["escaped"] == res.message


def test_the_evidence_names_what_would_convict() -> None:
    t_c, t_o, w_c, w_o, tail_c, tail_o = _samples()
    assert escape_evidence("tail", t_c, t_o, w_c, w_o, tail_c, tail_o) is None
    assert escape_evidence("wall", t_c, t_o, w_c, w_o) == "wall"  # run 20's wake-up: the wall check convicts
    assert escape_evidence("tail", t_c, t_o, w_c, w_o, [0.5] * len(t_c), tail_o) == "tail"
    assert escape_evidence("tail", t_c, t_o, [w + 1.0 for w in w_c], w_o, tail_c, tail_o) == "wall"
