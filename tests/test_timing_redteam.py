"""Red team of the 2026-12-01 timing rules (medians over the dense calls only; ``ATTNQ_STREAM_ESCAPE_CHECK``):
a hostile kernel author's attempts at a fake speedup, on the CPU checker (harness/checker.py Runner with the
Python kernels of tests/checker_support.py). Each test is one attack and what catches it.

The kernel CAN tell which calls count: a dense call has head strides equal to head_dim (docs/checks.md says
so); what it cannot do is carry anything useful from one call to the next, since every fresh call's inputs are
new, nor be wrong on a call, since every timed call is checked.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from harness.checker import HostDevice, Runner
from harness.draws import declared_samples
from harness.endpoints import CallResult
from harness.inputs import InputsSpec
from harness.scenarios import Scenario
from harness.worker import WorkerJob
from tests.checker_support import SC, PyKernel, honest, is_dense, make_runner, run_scenario

#: The honest kernel's cost in these tests (ms): sleeps stand for the GPU work the CPU kernels do not have.
WORK_MS = 4.0


def _costly(t: Any) -> None:
    time.sleep(WORK_MS / 1e3)
    honest(t)


# -------------------------------------------------------------- 1: work escaping the timer, dense calls only

class _Reporting(PyKernel):
    """An endpoint reporting the times a launcher would for a kernel of cost WORK_MS (wall: + 0.3 ms of
    process round trip), or, with ``escape``, for one whose dense calls return after WORK_MS / 20 and leave the
    rest running on another stream: the events miss it, the device tail (``tail``) and the wall clock see it.
    The outputs are computed honestly (the checker reads them after the launcher's synchronize)."""

    def __init__(self, escape: bool, name: str = "candidate") -> None:
        super().__init__(honest, name)
        self.escape = escape

    def timed_call(self, params: Any, tail: bool = False) -> CallResult:
        status = self._run(params)
        left = WORK_MS * 0.95 if self.escape and is_dense(params) else 0.0
        event = WORK_MS - left
        return CallResult(status, event_ms=event, wall_ms=event + left + 0.3, tail_ms=(0.007 + left) if tail else None)


def _escape_run(mode: str, seed: int):
    cand, orig = _Reporting(True), _Reporting(False, "original")
    return make_runner(cand, orig, min_samples=10, max_samples=10, repeats=3, seed=seed,
                       stream_escape_check=mode).run(SC, 0)


def test_work_left_on_another_stream_by_the_dense_calls_only_is_timed() -> None:
    """The escape check used to take its medians over every timed call, the padded ones included, while the
    times are over the dense calls: a kernel escaping the timer on dense calls only (half the deck, less when
    draw 0's repeats are padded) left the medians of the escape check at the padded calls' honest values and
    got its dense event times (20x here) through. The check is now judged over the calls the times are over
    (harness.checker.timed_selection): flagged, and timed at its full cost, under both checks and any seed."""
    for mode in ("wall", "tail"):
        for seed in range(1, 9):
            res = _escape_run(mode, seed)
            assert res.correct and res.candidate.layout == "dense", res.message
            assert res.message and res.message.startswith("stream_timing"), (mode, seed, res.message)
            assert res.candidate.median_ms > 0.9 * WORK_MS and 0.8 < res.speedup < 1.2, (mode, seed, res.speedup)


# ------------------------------------------------------------ 2: replaying the determinism repeats, timed

class _SliceCache:
    """A kernel body of cost WORK_MS that caches each batch entry's output by its content (q, k, v, scale) and
    replays it, skipping the work, when every entry of a call is in the cache: a determinism repeat (an earlier
    call's values, batch reordered) hits where its source ran in the same process; ``hits`` counts the calls
    replayed."""

    def __init__(self) -> None:
        self.cache: dict[bytes, tuple[torch.Tensor, torch.Tensor]] = {}
        self.hits = 0

    def _key(self, t: Any, b: int) -> bytes:
        return b"".join(x[b].contiguous().view(torch.int16).numpy().tobytes() for x in (t.q, t.k, t.v)) + \
            repr(t.scale).encode()

    def __call__(self, t: Any) -> None:
        keys = [self._key(t, b) for b in range(t.q.shape[0])]
        if all(k in self.cache for k in keys):
            self.hits += 1
            for b, k in enumerate(keys):
                t.o[b].copy_(self.cache[k][0]), t.lse[b].copy_(self.cache[k][1])
            return
        _costly(t)
        for b, k in enumerate(keys):
            self.cache[k] = (t.o[b].clone(), t.lse[b].clone())


def _repeat_runner(seed: int, split: bool, max_samples: int = 8) -> tuple[Runner, list[_SliceCache]]:
    bodies = [_SliceCache(), _SliceCache()]
    cand = PyKernel(bodies[0])
    cand_b = PyKernel(bodies[1], "candidate-b") if split else None
    job = WorkerJob(original_sparse_ms=0.0, candidate_lib="c.so", original_lib="o.so", scenarios=[SC], seed=seed, device="cpu", draws=2,
                    repeats=3, min_samples=max_samples, max_samples=max_samples, budget_ms=1e9)
    return Runner(job, cand, PyKernel(_costly, "original"), HostDevice(),
                  cand_b=cand_b), bodies


def test_replayed_determinism_repeats_do_not_count_in_the_times() -> None:
    """The repeats replay earlier calls' values (reordered), in their layouts: a per-slice content cache replays
    them without the work where the source ran in the same process (all of them without the split; none with
    it: each of the 3 repeats replays a different call, in the process that did not run it). They are
    checked, but never timed: the medians are over counted calls only, so the cache buys nothing."""
    for split in (False, True):
        for seed in range(1, 7):
            runner, bodies = _repeat_runner(seed, split)
            res = runner.run(SC, 0)
            assert res.correct, res.message
            assert sum(b.hits for b in bodies) == (0 if split else 3)  # the cache replayed every repeat it could
            assert res.candidate.median_ms > 0.9 * WORK_MS, (split, seed, res.candidate)  # (a replay: ~0.1 ms)
            assert res.candidate.samples >= 3


def test_fresh_timed_calls_never_hit_a_content_cache() -> None:
    """Caching across calls (a padded call's work reused by a later dense call) has nothing to reuse: every
    fresh call's inputs are new, so a per-slice content cache only ever hits the determinism repeats."""
    runner, bodies = _repeat_runner(3, False, max_samples=16)
    res = runner.run(SC, 0)
    assert res.correct, res.message
    assert bodies[0].hits == 3  # exactly the three repeats


def test_the_loop_floor_is_three_fresh_dense_calls_whatever_max_samples() -> None:
    """max_samples 3 with 3 repeats: every sample of the old loop was a repeat, and with fewer than 3 dense
    calls every call counted, the replayed repeats too. The loop now goes on until 3 fresh dense calls."""
    for seed in range(1, 7):
        runner, _ = _repeat_runner(seed, False, max_samples=3)
        res = runner.run(SC, 0)
        assert res.correct, res.message
        assert res.candidate.median_ms > 0.9 * WORK_MS and res.candidate.layout == "dense", (seed, res.candidate)


# ----------------------------------------------------- 3: wrong only where the sampled rows do not look

def test_a_dense_timed_call_wrong_on_one_row_is_caught_by_the_whole_output_bound() -> None:
    """128 query rows are sampled against the fp32 reference, but the whole output is compared with the
    original's on every timed call, dense or padded: one row off by 0.25 fails ``timed_output``."""
    n = {"calls": 0}

    def off_on_one_row(t: Any) -> None:
        n["calls"] += 1
        honest(t)
        if n["calls"] > 2 and is_dense(t.params):
            t.o[1, -1, 3].add_(0.25)

    res = make_runner(PyKernel(off_on_one_row), min_samples=8, max_samples=8).run(SC, 0)
    assert (res.check, res.failure_kind) == ("timed_output", "timed_output_wrong"), res.message
    assert "max|o - original|" in res.message


# ------------------------------------------------- 4: declared inputs that give every call's answer away

CONSTANT = Scenario(group="t", batch=2, seqlen_q=24, seqlen_k=40, num_heads_q=4, num_heads_kv=2, head_dim=16,
                    causal=True, inputs=InputsSpec.model_validate({"q": {"dist": "constant", "value": 0.0},
                                                                   "v": {"dist": "constant", "value": 3.0}}))
HIGH_DIMS = Scenario(group="t", batch=2, seqlen_q=24, seqlen_k=40, num_heads_q=4, num_heads_kv=2, head_dim=32,
                     causal=False, inputs=InputsSpec.model_validate(
                         {"q": {"dist": "high_dims", "from_dim": 16, "std": 3.0},
                          "k": {"dist": "high_dims", "from_dim": 16, "std": 3.0}}))


class _Special(PyKernel):
    """A candidate whose body takes a shortcut on the inputs ``special(t)`` recognises (else the full cost,
    ``_costly``). ``fired``: per call, whether it did; ``fired_timed``: the same for the timed calls."""

    def __init__(self, special: Any, shortcut: Any, checked: int = 4) -> None:
        super().__init__(self._body)
        self.special, self.shortcut, self.checked = special, shortcut, checked  # checked: draws=2, inputs declared
        self.fired: list[bool] = []
        self.fired_timed: list[bool] = []

    def fired_counted(self, log: Any) -> list[bool]:
        """Per timed call whose time may count (the timing log's ``counted``), whether the shortcut fired."""
        samples = [json.loads(line) for line in log.read_text().splitlines()][-1]["samples"]
        assert len(samples) == len(self.fired_timed)
        return [f for f, s in zip(self.fired_timed, samples, strict=True) if s["counted"]]

    def _body(self, t: Any) -> None:
        hit = bool(self.special(t))
        self.fired.append(hit)
        (self.shortcut if hit else _costly)(t)

    def timed_call(self, params: Any, tail: bool = False) -> CallResult:
        res = super().timed_call(params, tail)
        if self.calls > self.checked:  # the checked draws take the timed path too (harness.checker._cand_call)
            self.fired_timed.append(self.fired[-1])
        return res


def _q0_v_constant(t: Any) -> bool:
    return bool((t.q == 0).all()) and bool((t.v == t.v[0, 0, 0, 0]).all())


def _answer_without_k(t: Any) -> None:
    """q = 0 and v constant: uniform weights, o = v and lse = log(keys seen), k never read."""
    sq, sk = t.q.shape[1], t.k.shape[1]
    seen = torch.arange(sq, dtype=torch.float32) + (sk - sq + 1) if t.causal else torch.full((sq,), float(sk))
    t.o.fill_(float(t.v[0, 0, 0, 0])), t.lse.copy_(seen.log().expand_as(t.lse))


def _low_dims_zero(t: Any) -> bool:
    return bool((t.q[..., : t.q.shape[-1] // 2] == 0).all())


def _half_the_products(t: Any) -> None:
    """q zero in the low half of the dims: those q.k products are zero, skipped (half the cost), exactly right."""
    time.sleep(WORK_MS / 2e3)
    honest(t)


def test_the_declared_value_shortcuts_are_right_on_the_declared_values(tmp_path: Path) -> None:
    """The control: each shortcut fires on the calls that hold the declared values (the first checked draws, the
    declared timed calls and the repeats of declared calls) and passes every check there: it is no wrong
    kernel."""
    for sc, special, shortcut in ((CONSTANT, _q0_v_constant, _answer_without_k),
                                  (HIGH_DIMS, _low_dims_zero, _half_the_products)):
        cand = _Special(special, shortcut)
        log = tmp_path / f"{sc.id.replace('/', '_')}.jsonl"
        _, res = run_scenario(sc, cand, _costly, draws=2, repeats=1, min_samples=6, max_samples=6,
                              diag_timing_log=str(log))
        assert res.correct, res.message
        assert cand.fired[:2] == [True, True] and cand.fired[2:4] == [False, False]  # declared, then ordinary
        assert sum(cand.fired_timed) >= declared_samples(6) == 3  # the declared timed calls (never counted)
        assert not any(cand.fired_counted(log))


def test_declared_constant_inputs_do_not_let_a_shortcut_be_timed(tmp_path: Path) -> None:
    """The hole that was (a strict xfail until 2026-12-01): a scenario declaring q = 0 and a constant v (full's
    fp16-overflow rows: q = 0, v = 60000) gave every call, checked and timed, one answer whatever k held, so
    a kernel returning it without the work was right and timed 'fast'. The fresh timed calls of a scenario
    with declared inputs now draw ordinary values (harness/draws.py, timed values), and so do as many extra
    checked draws, whose tolerances bound them: the shortcut never fires on a counted call and pays the full
    cost; a kernel that takes it without looking (assuming the declared values) is wrong there. The declared
    timed calls (checked, never counted) are the only timed calls it fires on, with the repeats of declared
    calls."""
    for seed in range(1, 4):
        cand = _Special(_q0_v_constant, _answer_without_k)
        log = tmp_path / f"{seed}.jsonl"
        _, res = run_scenario(CONSTANT, cand, _costly, seed=seed, min_samples=6, max_samples=6,
                              diag_timing_log=str(log))
        assert res.correct, res.message
        assert res.candidate.median_ms > 0.9 * WORK_MS, (seed, res.candidate)  # the shortcut: ~0.1 ms
        counted = cand.fired_counted(log)
        assert len(counted) >= 3 and not any(counted) and sum(cand.fired_timed) >= 3
        assert res.timed_values and "declared q, v" in res.timed_values
    _, res = run_scenario(CONSTANT, _answer_without_k, _costly, min_samples=6, max_samples=6)
    assert (res.correct, res.check) == (False, "reference_tolerance"), res.message
    assert "[draw 2: normal inputs in place of the declared q, v (timed values)" in (res.message or "")


def test_declared_high_dims_do_not_let_skipped_products_be_timed(tmp_path: Path) -> None:
    """The rule covers every declared distribution, not only the constant ones: high_dims q and k (zero below
    dim 16) let a kernel skip half the q.k products and stay exactly right; the counted timed calls' ordinary
    values have no zero dims, so it pays the full cost."""
    cand = _Special(_low_dims_zero, _half_the_products)
    log = tmp_path / "log.jsonl"
    _, res = run_scenario(HIGH_DIMS, cand, _costly, min_samples=6, max_samples=6, diag_timing_log=str(log))
    assert res.correct, res.message
    assert res.candidate.median_ms > 0.9 * WORK_MS and not any(cand.fired_counted(log)), res.candidate
