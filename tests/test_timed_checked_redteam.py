"""Red team of issue 12's "timed calls are indistinguishable from checked calls, repeats from first calls", on
the CPU checker (harness/checker.py Runner, Python kernels of tests/checker_support.py). Each section is one class
of hostile kernel: how it told the calls apart, the escape rate measured before the fix, and the check that now
fails it.

1. A race on the calls of one LAYOUT (dense, the one timed): the repeats' sources were stratified by value key only,
   so all of a scenario's repeats could replay padded calls (2 of 40 seeds escaped; 1/8 expected). Now the source
   slots are stratified by key AND layout (harness/repeats.py): slot 0 holds a dense call of a counted key, and with
   the default 4 repeats every drawn layout has a slot. ``determinism`` fails it on every seed.
2. Less precision AFTER THE CHECKED DRAWS: the first ``draws`` calls of a scenario (the first call of each candidate
   process) got the full fp32 reference, the later ones a whole comparison with the original (a looser bound) and
   128 sampled rows. One row 2 ulps off per timed call escaped on 14 of 40 seeds. Now a secret subset of the timed
   calls (harness/full_check.py: each fresh one with probability 1/8, and the first repeat, whose bits are its
   source's) gets the checked draws' rule on its whole output: ``timed_output`` fails it on every seed.
3. The CALL PATH: checked draws went through the launcher's untimed call (no L2 flush, no events), timed calls
   through its timed one. On a GPU the first loads of a checked call hit the L2 the checker had just filled with its
   inputs, a timed call's missed it (flushed): a kernel reading its own load latency (clock64) could tell. Now every
   candidate call takes the timed path (harness.checker.Runner._cand_call); a kernel wrong on that path only is
   wrong on checked draw 0 (``reference_tolerance``).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from harness.checker import HostDevice, Runner
from harness.draws import LAYOUTS, CallDraw, CallDrawer, values_key
from harness.endpoints import CallResult
from harness.full_check import FULL_CHECK_RATE, FullChecks
from harness.inputs import InputsSpec
from harness.repeats import SourcePlan
from harness.scenarios import Scenario
from harness.worker import WorkerJob
from tests.checker_support import PyKernel, honest

SMALL = Scenario(group="t", batch=2, seqlen_q=24, seqlen_k=40, num_heads_q=4, num_heads_kv=2, head_dim=16, causal=True)
#: 2048 query rows: the 128 sampled rows of a timed call miss a given row with probability 0.94
ROWS = Scenario(group="t", batch=1, seqlen_q=512, seqlen_k=16, num_heads_q=4, num_heads_kv=2, head_dim=16,
                causal=False)
DECLARED = Scenario(group="t", batch=2, seqlen_q=24, seqlen_k=40, num_heads_q=4, num_heads_kv=2, head_dim=16,
                    causal=True, inputs=InputsSpec.model_validate({"q": {"dist": "constant", "value": 0.0},
                                                                   "v": {"dist": "constant", "value": 3.0}}))


def _layout(t: Any) -> str:
    """The call's drawn layout, as a kernel reads it from the head strides (harness.buffers' padded: + 8)."""
    p = t.params
    qo = p.q_head_stride != p.head_dim or p.o_head_stride != p.head_dim
    kv = p.k_head_stride != p.head_dim or p.v_head_stride != p.head_dim
    return {(False, False): "dense", (True, False): "padded_qo", (False, True): "padded_kv"}.get((qo, kv), "padded_all")


def _racy(t: Any) -> None:
    """A race within every tolerance: a random quarter of lse one fp32 ulp up, different on every run."""
    honest(t)
    flip = torch.rand(t.lse.shape) < 0.25
    t.lse.copy_(torch.where(flip, torch.nextafter(t.lse, torch.full_like(t.lse, float("inf"))), t.lse))


def _run(sc: Scenario, make: Any, seed: int, **job: Any) -> tuple[Any, list[PyKernel]]:
    """``sc`` through the whole CPU checker, the candidate in two processes (``make(name)`` each), defaults of a
    small scenario of ``full`` (30 samples with the 4 repeats; the budget never ends the loop)."""
    cands = [make("candidate"), make("candidate-b")]
    fields = {"draws": 2, "min_samples": 10, "max_samples": 30, "budget_ms": 1e9, **job}
    j = WorkerJob(original_sparse_ms=0.0, candidate_lib="c.so", original_lib="o.so", scenarios=[sc], seed=seed, device="cpu", **fields)
    return Runner(j, cands[0], PyKernel(honest, "original"), HostDevice(), cand_b=cands[1]).run(sc, 0), cands


# ------------------------------------------------------------------------------ 1: a race on one layout

def _racy_on(layout: str) -> Any:
    def body(t: Any) -> None:
        (_racy if _layout(t) == layout else honest)(t)
    return body


def test_a_race_on_dense_calls_only_meets_a_repeat_on_every_seed() -> None:
    """Class: nondeterminism confined to a layout (the dense one, whose calls the medians are over: the one a fast
    racy path pays on). Before the fix 2 of 40 seeds escaped (all 3 repeats replayed padded calls); now slot 0
    holds a dense call, so ``determinism`` fails it on every seed."""
    for seed in range(1, 13):
        res, _ = _run(SMALL, lambda n: PyKernel(_racy_on("dense"), n), seed)
        assert (res.correct, res.check, res.failure_kind) == (False, "determinism", "nondeterministic"), (seed, res.message)


@pytest.mark.parametrize("layout", [x for x in LAYOUTS if x != "dense"])
def test_a_race_on_one_padded_layout_meets_a_repeat_with_the_default_repeats(layout: str) -> None:
    """Class: nondeterminism confined to one padded layout (a strided fallback path). With the default 4 repeats
    every drawn layout has a source slot: ``determinism`` fails it on every seed (by key only, a race on one of
    the 3 padded layouts, a sixth of the calls, escaped 4 repeats with probability (5/6)^4 ~ 0.48)."""
    assert WorkerJob(candidate_lib="c", original_lib="o", scenarios=[SMALL], seed=1).repeats == 4
    for seed in range(1, 5):
        res, _ = _run(SMALL, lambda n: PyKernel(_racy_on(layout), n), seed, repeats=4)
        assert (res.correct, res.check) == (False, "determinism"), (layout, seed, res.message)


def test_the_source_slots_cover_every_key_and_every_layout_and_slot_0_is_dense_and_counted() -> None:
    """The plan behind section 1, over many secret seeds: with 4 slots every drawn layout and every key (up to 4)
    has a slot; slot 0 is the timed layout with a key of counted calls (ordinary where inputs are declared); on a
    loop of 27 fresh calls every slot holds a call of its layout (2 slots a key) or of its key (one slot a key),
    no two the same call."""
    for t in range(200):
        for sc in (SMALL, DECLARED):
            d = CallDrawer(sc, t, draws=2, repeats=4, min_samples=10)
            plan = d.sources
            assert set(plan.slot_layout) == set(LAYOUTS) and plan.slot_layout[0] == "dense"
            assert set(plan.slot_key) == {values_key(k, o) for k in ("normal", "large_logits")
                                          for o in ((False, True) if sc is DECLARED else (False,))}
            assert plan.slot_key[0].endswith(", ordinary") == (sc is DECLARED)
            for i in range(d.checked_draws):
                d.checked(i)
            for n in range(27):
                d.timed(n)
            if sc is SMALL:  # 2 slots a key: a slot keeps its layout (its fallback: a call of its layout)
                assert [h.layout for h in plan.held] == plan.slot_layout
                assert len({h.call for h in plan.held}) == 4
            else:  # one slot a key: a slot keeps its key (its fallback: a call of its key)
                assert [h.values for h in plan.held] == plan.slot_key
    rng = random.Random(0)  # with one layout (declared) the slots are by key only, as before
    assert SourcePlan(rng, ["a", "b"], 4, layouts=("declared",)).slot_layout == [None] * 4


def test_a_slot_holds_a_uniformly_random_call_of_its_stratum() -> None:
    """Reservoir sampling within a stratum: over 4000 secret seeds each of 6 calls of the slot's (key, layout) is
    held at the end about equally often (no place in the loop is safer than another)."""
    counts = [0] * 6
    for t in range(4000):
        plan = SourcePlan(random.Random(t), ["a"], 2, layouts=("x", "y"), first="x")
        for i in range(6):
            plan.hold(plan.offer("a", "x"), i)
            plan.hold(plan.offer("a", "y"), 100 + i)
        counts[plan.held[0]] += 1
    assert all(550 < c < 800 for c in counts), counts


# ----------------------------------------------------------------- 2: less precise after the checked draws

class _Late(PyKernel):
    """Right on its process's first call (checked draw 0 in one process, 1 in the other); on every later call one
    query row is 2 ulps off: the row with the largest q[..., 0] (content-defined, so a repeat is off alike and
    ``determinism`` sees nothing). ``late``: its calls past the first."""

    def __init__(self, name: str = "candidate") -> None:
        super().__init__(self._body, name)
        self.late = 0

    def _body(self, t: Any) -> None:
        honest(t)
        if self.calls <= 1:
            return
        self.late += 1
        q0 = t.q[..., 0].float()
        b, i, h = (int(x) for x in torch.unravel_index(q0.flatten().argmax(), q0.shape))
        up = torch.full_like(t.o[b, i, h], float("inf"))
        t.o[b, i, h] = torch.nextafter(torch.nextafter(t.o[b, i, h], up), up)


def test_less_precision_after_the_checked_draws_fails_the_whole_output_check_on_every_seed() -> None:
    """Class: a kernel that is less precise on the calls it takes for timed ones (here by its call count; any tell
    alike). Before the fix 14 of 40 seeds escaped (the row missed by the 128 sampled rows, 2 ulps within the bound
    against the original); now ``timed_output`` (whole output against the fp32 reference) fails it on every seed."""
    by_whole = 0
    for seed in range(1, 11):
        res, cands = _run(ROWS, _Late, seed)
        assert sum(c.late for c in cands) >= 1
        assert not res.correct and res.check in ("timed_output", "determinism"), (seed, res.message)
        by_whole += "whole output against the fp32 reference" in (res.message or "")
    assert by_whole >= 5  # the rest: the sampled rows hit the row first, or a repeat of an honest checked draw


def test_control_the_same_kernel_escapes_without_the_whole_output_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control, the fix switched off (no timed call checked whole): the same kernel escapes on some seeds,
    so the test above tests the whole-output check, not a kernel that other checks catch anyway."""
    monkeypatch.setattr(FullChecks, "wanted", lambda self, draw: False)
    escaped = [seed for seed in range(1, 9) if _run(ROWS, _Late, seed)[0].correct]
    assert escaped, "the row was always sampled: the control needs a larger scenario"


def test_the_whole_output_checks_are_a_secret_eighth_of_the_fresh_calls_and_the_first_repeat() -> None:
    """Which timed calls get a full reference: each fresh one with probability FULL_CHECK_RATE (1/8), drawn from
    the scenario's seed whatever the call looks like, and repeat 0 always (it checks its source); ~1 + N/8 extra
    fp32 references for a scenario of N fresh timed calls."""
    fresh = CallDraw(layout="dense", scale_factor=1.0, kind="normal")
    hits = [FullChecks(s).wanted(fresh) for s in range(4000)]
    assert abs(sum(hits) / len(hits) - FULL_CHECK_RATE) < 0.02
    fc = FullChecks(5)
    assert [fc.wanted(CallDraw(layout="dense", scale_factor=1.0, kind="normal", repeat=j)) for j in range(4)] == [
        True, False, False, False]
    assert fc.count == 1


def test_an_honest_kernel_passes_the_whole_output_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """No false alarm: honest candidates (the reference itself, in both processes) pass with the whole-output
    check on EVERY timed call, on several shapes and seeds: the tolerance is never tighter than the checked
    draws' (2 x the original's error + floor)."""
    checked: list[Any] = []

    def every(self: FullChecks, draw: Any) -> bool:
        checked.append(draw)
        return True

    monkeypatch.setattr(FullChecks, "wanted", every)
    for sc in (SMALL, ROWS, DECLARED):
        for seed in (1, 2):
            checked.clear()
            res, _ = _run(sc, lambda n: PyKernel(honest, n), seed, min_samples=6, max_samples=10)
            assert res.correct, (sc.id, seed, res.message)
            assert len(checked) >= 10  # every timed call (6 fresh or more, 4 repeats)


# ------------------------------------------------------------------------------ 3: the call path

class _PathAware(PyKernel):
    """Right on the launcher's untimed path; on the timed path one row of o is 0.05 off (a GPU kernel would tell
    the two by its first loads' latency: the checker's copy of the inputs warm in L2, or flushed)."""

    def call(self, params: Any) -> CallResult:
        self.untimed = getattr(self, "untimed", 0) + 1
        return super().call(params)

    def timed_call(self, params: Any, tail: bool = False) -> CallResult:
        self.body = self._wrong
        try:
            return super().timed_call(params, tail)
        finally:
            self.body = honest

    @staticmethod
    def _wrong(t: Any) -> None:
        honest(t)
        t.o[0, t.o.shape[1] - 1].add_(0.05)


def test_checked_draws_take_the_timed_path_so_a_path_aware_kernel_fails_checked_draw_0() -> None:
    """Class: a kernel that tells a checked call from a timed one by how it is called. Every candidate call now
    takes the timed path (no call goes through the untimed one): a kernel wrong on that path fails the checked
    draws' reference check on draw 0 (before the fix: right on the checked draws, caught only by the timed
    checks, where a subtler error escapes on some seeds: section 2)."""
    for seed in range(1, 5):
        res, cands = _run(SMALL, lambda n: _PathAware(honest, n), seed)
        assert (res.check, res.failure_kind) == ("reference_tolerance", "wrong_output"), res.message
        assert "[draw 0:" in (res.message or "")
        assert all(getattr(c, "untimed", 0) == 0 for c in cands)
