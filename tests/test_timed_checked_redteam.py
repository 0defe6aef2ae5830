"""Red team of issue 12's "timed calls are indistinguishable from checked calls, repeats from first calls", on
the CPU checker (harness/checker.py Runner, Python kernels of tests/checker_support.py). Each section is one class
of hostile kernel: how it told the calls apart, the escape rate measured before the fix, and the check that now
fails it.

1. A race on the calls of one LAYOUT (dense, the one timed): the repeats' sources were stratified by value key only,
   so all of a scenario's repeats could replay padded calls (2 of 40 seeds escaped; 1/8 expected). Now the source
   slots are stratified by key AND layout (harness/repeats.py): slot 0 holds a dense call of a counted key, and with
   the default 4 repeats every drawn layout has a slot. ``determinism`` fails it on every seed.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from harness.checker import HostDevice, Runner
from harness.draws import LAYOUTS, CallDrawer, values_key
from harness.inputs import InputsSpec
from harness.repeats import SourcePlan
from harness.scenarios import Scenario
from harness.worker import WorkerJob
from tests.checker_support import PyKernel, honest

SMALL = Scenario(group="t", batch=2, seqlen_q=24, seqlen_k=40, num_heads_q=4, num_heads_kv=2, head_dim=16, causal=True)
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
    j = WorkerJob(candidate_lib="c.so", original_lib="o.so", scenarios=[sc], seed=seed, device="cpu", **fields)
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
