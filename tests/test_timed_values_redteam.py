"""Red team of the timed-values rule (harness/draws.py, docs/checks.md "Timed values"), on the CPU checker.

The rule: a scenario that declares ``inputs`` gets its counted timed calls on ORDINARY values, while its first
checked draws keep the DECLARED values. Until 2026-12-01 its determinism repeats replayed draw 0 (declared
values) and were the only timed calls on declared values, so the values of a call told the kernel which of the
two it was: declared values = a determinism repeat (compared bit for bit with draw 0), ordinary values = a
fresh timed call (compared within tolerances only, never for determinism).

The hole (closed, strict xfails until then): a kernel with a fast nondeterministic path (on a GPU: a split-KV /
split-K reduction by unordered fp32 atomics, or a dropped barrier whose race stays within tolerance) took it on
every call whose values looked ordinary, and the slow deterministic path on the declared-looking ones: racy on
every timed call it was timed on, exact on every repeat, reported correct at the fast path's speed (1.73x).

The class was wider than declared inputs: determinism was only checked on replays of draw 0, so any property
draw 0 had and some fresh calls lacked told the kernel "this call is no repeat": its value kind (draw 0 is
always ``normal``), and its place (no call after the last repeat, scheduled among the first ``min_samples``
samples, was ever compared with itself). The fix (harness/repeats.py): each repeat replays a source drawn
uniformly among ALL the fresh calls of a value key (checked or timed, ordinary or declared, any layout, scale,
process or place: reservoir sampling, decided before each call runs), the source slots stratified over the
value keys, the repeats run after the last fresh call, each in the process that did not run its source. A
racy path anywhere meets a repeat; being exact on the repeats does not help, the sources stay racy.

The rule's cost to the bug scenarios (the declared values met on ``draws`` checked draws only) is closed too:
:func:`harness.draws.declared_samples` fresh timed calls on the declared values, checked, never counted.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from harness.checker import HostDevice, Runner
from harness.inputs import InputsSpec
from harness.scenarios import Scenario
from harness.worker import WorkerJob
from tests.checker_support import PyKernel, honest

#: The deterministic path's cost (ms); the racy path costs half (sleeps stand for GPU work).
WORK_MS = 4.0

#: Declared q = 0 and v constant (the shape of full's fp16-overflow rows b07); the same shape, nothing declared.
DECLARED = Scenario(group="t", batch=2, seqlen_q=24, seqlen_k=40, num_heads_q=4, num_heads_kv=2, head_dim=16,
                    causal=True, inputs=InputsSpec.model_validate({"q": {"dist": "constant", "value": 0.0},
                                                                   "v": {"dist": "constant", "value": 3.0}}))
PLAIN = Scenario(group="t", batch=2, seqlen_q=24, seqlen_k=40, num_heads_q=4, num_heads_kv=2, head_dim=16,
                 causal=True)


def _costly(t: Any) -> None:
    time.sleep(WORK_MS / 1e3)
    honest(t)


def _looks_declared(t: Any) -> bool:
    """What a GPU kernel reads from a few elements at its start: q = 0 and v constant (the declared values)."""
    return bool((t.q == 0).all()) and bool((t.v == t.v[0, 0, 0, 0]).all())


class _RacyWhereOrdinary(PyKernel):
    """Deterministic and of full cost on declared-looking values; on every other call a fast path whose lse
    bits vary from run to run (a race within tolerance: a random quarter of the lse elements one fp32 ulp up,
    as an unordered atomic reduction leaves them). ``racy_timed``: per timed call, whether the racy path ran."""

    def __init__(self, name: str = "candidate") -> None:
        super().__init__(self._body, name)
        self.racy: list[bool] = []
        self.racy_timed: list[bool] = []

    def _body(self, t: Any) -> None:
        declared = _looks_declared(t)
        self.racy.append(not declared)
        if declared:
            _costly(t)
            return
        time.sleep(WORK_MS / 2e3)
        honest(t)
        flip = torch.rand(t.lse.shape) < 0.25  # unseeded: differs on every call, like a race
        t.lse.copy_(torch.where(flip, torch.nextafter(t.lse, torch.full_like(t.lse, float("inf"))), t.lse))

    def timed_call(self, params: Any, tail: bool = False) -> Any:
        res = super().timed_call(params, tail)
        self.racy_timed.append(self.racy[-1])
        return res


def _run(sc: Scenario, split: bool, seed: int) -> tuple[Any, list[_RacyWhereOrdinary]]:
    cands = [_RacyWhereOrdinary(), _RacyWhereOrdinary("candidate-b")]
    job = WorkerJob(original_sparse_ms=0.0, candidate_lib="c.so", original_lib="o.so", scenarios=[sc], seed=seed, device="cpu", draws=2,
                    repeats=3, min_samples=8, max_samples=8, budget_ms=1e9)
    runner = Runner(job, cands[0], PyKernel(_costly, "original"), HostDevice(), cand_b=cands[1] if split else None)
    return runner.run(sc, 0), cands


@pytest.mark.parametrize("split", [False, True])
def test_control_a_racy_kernel_is_caught_where_repeats_look_like_fresh_calls(split: bool) -> None:
    """Nothing declared: the kernel cannot tell a repeat from any other call, takes its racy path on the
    repeats too and fails ``determinism`` (each seed: a repeat does not reproduce its source's bits)."""
    for seed in (1, 2, 3):
        res, _ = _run(PLAIN, split, seed)
        assert (res.correct, res.check, res.failure_kind) == (False, "determinism", "nondeterministic"), res.message


@pytest.mark.parametrize("split", [False, True])
def test_declared_inputs_do_not_tell_the_kernel_which_calls_are_determinism_repeats(split: bool) -> None:
    """The same kernel on the same shape with declared inputs: exact on the declared-looking calls (the first
    checked draws, the declared timed calls), racy on every other one. It fails ``determinism`` on every seed:
    the 3 source slots take 3 of the scenario's 4 value keys (normal and large_logits, declared or ordinary), so
    at least one repeat replays an ordinary-valued call, racy in both its runs (a strict xfail until the fix:
    then the repeats replayed declared draw 0 only and it passed at ~1.7x)."""
    for seed in range(1, 6):
        res, cands = _run(DECLARED, split, seed)
        racy = [r for c in cands for r in c.racy]
        assert any(racy) and not all(racy), racy  # the kernel told the values apart: racy on ordinary calls only
        assert (res.correct, res.check) == (False, "determinism"), (
            f"seed {seed}: reported correct with a racy path on {sum(racy)}/{len(racy)} calls, "
            f"speedup {res.speedup:.2f}x")
        assert "did not reproduce its bits" in (res.message or ""), res.message


# ----------------------------- the same class without declared inputs: the value kind (draw 0's: always normal)

def _looks_normal(t: Any) -> bool:
    """Draw 0's value kind (normal: q, k ~ N(0,1)), told from large_logits (x 6) and shifted (+ 1) by q's moments."""
    q = t.q.float()
    return float(q.std()) < 3.0 and abs(float(q.mean())) < 0.5


class _RacyUnlessNormal(_RacyWhereOrdinary):
    """The racy path on every call whose values do not look like draw 0's kind (normal)."""

    def _body(self, t: Any) -> None:
        if _looks_normal(t):
            self.racy.append(False)
            _costly(t)
            return
        self.racy.append(True)
        time.sleep(WORK_MS / 2e3)
        honest(t)
        flip = torch.rand(t.lse.shape) < 0.25
        t.lse.copy_(torch.where(flip, torch.nextafter(t.lse, torch.full_like(t.lse, float("inf"))), t.lse))


def test_the_value_kind_does_not_tell_the_kernel_which_calls_are_determinism_repeats() -> None:
    """Nothing declared; draws = 2 (normal, large_logits): a kernel racy on the large_logits calls fails
    ``determinism`` on every seed, since the 3 source slots cover both keys (a strict xfail until the fix: the
    repeats were all normal, replaying draw 0, and no large_logits call was ever compared with itself)."""
    for seed in range(1, 6):
        cands = [_RacyUnlessNormal(), _RacyUnlessNormal("candidate-b")]
        job = WorkerJob(original_sparse_ms=0.0, candidate_lib="c.so", original_lib="o.so", scenarios=[PLAIN], seed=seed, device="cpu",
                        draws=2, repeats=3, min_samples=12, max_samples=12, budget_ms=1e9)
        res = Runner(job, cands[0], PyKernel(_costly, "original"), HostDevice(), cand_b=cands[1]).run(PLAIN, 0)
        racy_timed = [r for c in cands for r in c.racy_timed]
        assert sum(racy_timed) >= 1, racy_timed  # the precondition: a racy timed call
        assert (res.correct, res.check) == (False, "determinism"), (
            f"seed {seed}: reported correct with a racy path on {sum(racy_timed)}/{len(racy_timed)} timed calls")


# ------------------------------------- the same class by place: racy only after the first calls of a process

class _RacyWhenLate(_RacyWhereOrdinary):
    """Exact on the scenario's first ``LATE`` calls, racy on every later one: tuned to the old schedule, whose
    repeats (of draw 0) all fell among the first ``min_samples`` (10) timed calls. ``seen`` counts the calls of
    both candidate processes (one count shared by the pair: a GPU kernel would estimate it from its own calls,
    about half of them under the 50/50 routing)."""

    LATE = 12  # the 2 checked draws and the first 10 timed calls

    def __init__(self, seen: list[int], name: str = "candidate") -> None:
        super().__init__(name)
        self.seen = seen

    def _body(self, t: Any) -> None:
        self.seen[0] += 1
        late = self.seen[0] > self.LATE
        self.racy.append(late)
        if not late:
            _costly(t)
            return
        time.sleep(WORK_MS / 2e3)
        honest(t)
        flip = torch.rand(t.lse.shape) < 0.25
        t.lse.copy_(torch.where(flip, torch.nextafter(t.lse, torch.full_like(t.lse, float("inf"))), t.lse))


@pytest.mark.parametrize("split", [False, True])
def test_the_place_of_a_call_does_not_tell_the_kernel_it_is_no_repeat(split: bool) -> None:
    """A kernel exact on the scenario's first 12 calls and racy on the later ones (most of a 30-sample loop, as
    the small scenarios of ``full`` run): the repeats now run after the last fresh call and replay any earlier
    call, so it fails ``determinism`` on every seed (the old schedule, 3 repeats of draw 0 among the first 10
    timed calls, reported it correct: 1.69x on seed 1 without the split)."""
    for seed in range(1, 5):
        seen = [0]
        cands = [_RacyWhenLate(seen), _RacyWhenLate(seen, "candidate-b")]
        job = WorkerJob(original_sparse_ms=0.0, candidate_lib="c.so", original_lib="o.so", scenarios=[PLAIN], seed=seed, device="cpu",
                        draws=2, repeats=3, min_samples=10, max_samples=30, budget_ms=1e9)
        res = Runner(job, cands[0], PyKernel(_costly, "original"), HostDevice(),
                     cand_b=cands[1] if split else None).run(PLAIN, 0)
        racy_timed = [r for c in cands for r in c.racy_timed]
        assert sum(racy_timed) > len(racy_timed) / 2, racy_timed  # racy on most timed calls
        assert (res.correct, res.check) == (False, "determinism"), (
            f"seed {seed}: reported correct, racy on {sum(racy_timed)}/{len(racy_timed)} timed calls, "
            f"speedup {res.speedup:.2f}x")


# ------------------------------ what the rule cost the bug scenarios: fewer calls on the declared values

def _wrong_on_some_declared_draws(t: Any) -> None:
    """Right on ordinary values; on the declared values wrong (o + 0.5) whenever k[0, 0, 0, 0] > 0.5: a
    value-dependent bug that about 31 % of the declared draws trigger (47 % of the large_logits ones: k is
    N(0, 1) or 6 N(0, 1), only q and v are declared)."""
    honest(t)
    if _looks_declared(t) and float(t.k[0, 0, 0, 0]) > 0.5:
        t.o.add_(0.5)


def _bug_run(seed: int) -> Any:
    cands = [PyKernel(_wrong_on_some_declared_draws), PyKernel(_wrong_on_some_declared_draws, "candidate-b")]
    job = WorkerJob(original_sparse_ms=0.0, candidate_lib="c.so", original_lib="o.so", scenarios=[DECLARED], seed=seed, device="cpu",
                    draws=2, repeats=3, min_samples=10, max_samples=10, budget_ms=1e9)
    return Runner(job, cands[0], PyKernel(honest, "original"), HostDevice(), cand_b=cands[1]).run(DECLARED, 0)


@pytest.mark.parametrize("seed", [5, 6])
def test_a_bug_on_a_third_of_the_declared_draws_is_caught(seed: int) -> None:
    """Seeds where it escaped (a strict xfail until the fix: the declared values were met on the 2 checked draws
    and the repeats of draw 0 only); now ``declared_samples`` (5 here) fresh timed calls on the declared values
    are checked too (whole output, sampled rows), never counted in a time."""
    res = _bug_run(seed)
    assert not res.correct and res.check in ("reference_tolerance", "timed_output"), "reported correct"


def test_a_bug_on_a_third_of_the_declared_draws_escapes_few_seeds() -> None:
    """Not luck on two seeds: over 40 seeds it escapes at most 2 (measured before the fix: 27 of 100 seeds;
    after: 0 of 100; with 7 or more declared calls at a trigger rate of 31-47 % the expected escape is < 8 %)."""
    escaped = [seed for seed in range(1, 41) if _bug_run(seed).correct]
    assert len(escaped) <= 2, escaped


def test_control_the_declared_value_bug_is_caught_on_most_seeds() -> None:
    """The same kernel is caught on most seeds by the checked draws alone (they do trigger it): the bug is real."""
    caught = sum((not res.correct) and res.check == "reference_tolerance" for res in map(_bug_run, (1, 2, 3, 4)))
    assert caught >= 3
