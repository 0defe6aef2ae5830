"""Per-call draws (harness/draws.py): checked and timed calls come from one distribution; the repeats follow
the fresh calls, each replaying a call drawn uniformly among all the fresh calls of a value key, the keys
stratified (harness/repeats.py); a repeat's reordering leaves attention's result reordered alike (so a
deterministic kernel reproduces its source's bits exactly)."""

from __future__ import annotations

import random

import pytest
import torch

from harness.draws import (
    LAYOUTS,
    VALUE_KINDS,
    CallDrawer,
    declared_inputs,
    declared_samples,
    permutation,
    permute_inputs,
    permute_outputs,
    timed_values_note,
)
from harness.inputs import InputsSpec
from harness.reference import attention_reference
from harness.repeats import MAX_SOURCES, SourcePlan
from harness.scenarios import Scenario


def _sc(b: int, hq: int, hk: int, causal: bool = True) -> Scenario:
    return Scenario(group="t", batch=b, seqlen_q=12, seqlen_k=20, num_heads_q=hq, num_heads_kv=hk, head_dim=8,
                    causal=causal)


@pytest.mark.parametrize(("sc", "axis"), [(_sc(3, 4, 2), "batch"), (_sc(1, 6, 3), "kv_heads"), (_sc(1, 4, 1), "q_heads"),
                                          (_sc(1, 1, 1), None)])
def test_a_reordered_repeat_has_the_reordered_result(sc: Scenario, axis: str | None) -> None:
    rng = random.Random(4)
    got_axis, perm = permutation(sc, rng)
    assert got_axis == axis and (perm == () or list(perm) != sorted(perm))
    g = torch.Generator().manual_seed(0)
    q = torch.randn(sc.batch, sc.seqlen_q, sc.num_heads_q, sc.head_dim, generator=g).bfloat16()
    k = torch.randn(sc.batch, sc.seqlen_k, sc.num_heads_kv, sc.head_dim, generator=g).bfloat16()
    v = torch.randn(sc.batch, sc.seqlen_k, sc.num_heads_kv, sc.head_dim, generator=g).bfloat16()
    drawer = CallDrawer(sc, 1, draws=2, repeats=1, min_samples=1)
    drawer.checked(0), drawer.checked(1)
    draw = drawer.repeat(0, 0)
    assert draw.repeat == 0 and draw.perm_axis == axis and draw.source in (0, 1) and not draw.counted
    o, lse = attention_reference(q, k, v, causal=sc.causal)
    o_p, lse_p = attention_reference(*permute_inputs(torch, sc, draw, q, k, v), causal=sc.causal)
    want_o, want_lse = permute_outputs(torch, sc, draw, o, lse)
    assert torch.allclose(o_p, want_o, atol=1e-6, rtol=0) and torch.equal(torch.isinf(lse_p), torch.isinf(want_lse))
    fin = torch.isfinite(want_lse)
    assert torch.allclose(lse_p[fin], want_lse[fin], atol=1e-5, rtol=0)


def test_checked_and_timed_calls_come_from_one_distribution() -> None:
    sc = _sc(2, 4, 2)
    drawer = CallDrawer(sc, 9, draws=3, repeats=3, min_samples=10)
    checked = [drawer.checked(i) for i in range(3)]
    assert [d.kind for d in checked] == list(VALUE_KINDS)
    fresh = [drawer.timed(n) for n in range(400)]
    assert all(d.repeat is None and d.counted for d in fresh) and not drawer.pending(0)  # nothing declared
    assert {d.layout for d in fresh} == set(LAYOUTS) and {d.kind for d in fresh} <= set(VALUE_KINDS)
    default = sum(d.scale_factor == 1.0 for d in fresh) / len(fresh)
    assert 0.35 < default < 0.65 and all(0.5 <= d.scale_factor <= 1.5 for d in fresh)
    repeats = [drawer.repeat(j, 400 + j) for j in range(3)]
    assert [r.repeat for r in repeats] == [0, 1, 2] and not any(r.counted for r in repeats)
    calls = {d.call: d for d in checked + fresh}
    assert {calls[r.source].kind for r in repeats} == set(VALUE_KINDS)  # 3 slots, 3 keys: each key replayed
    for r in repeats:  # the source's layout, scale and values; a later call
        s = calls[r.source]
        assert (r.layout, r.scale_factor, r.kind, r.ordinary) == (s.layout, s.scale_factor, s.kind, s.ordinary)
        assert r.call > s.call and r.slot in s.keep


def test_every_twelve_calls_cover_every_layout_and_scale_kind_half_of_them_dense() -> None:
    drawer = CallDrawer(_sc(2, 2, 2), 5, draws=2, repeats=0, min_samples=3)
    calls = [drawer.checked(0), drawer.checked(1)] + [drawer.timed(n) for n in range(22)]
    for start in (0, 12):
        block = calls[start:start + 12]
        assert {(d.layout, d.scale_factor == 1.0) for d in block} == {(lay, dflt) for lay in LAYOUTS for dflt in (True, False)}
        assert sum(d.layout == "dense" for d in block) == 6  # the timed layout (CallDrawer.timed_layout)


def test_a_source_is_any_fresh_call_of_its_key_with_equal_chance() -> None:
    """Reservoir sampling: after N calls of a key, each of its m slots holds one of them, all N equally likely
    and the m distinct; the slots' keys cover every key before one repeats (a shuffled cycle)."""
    n_calls, trials = 12, 2400
    for m in (1, 2):
        held = [0] * n_calls
        for t in range(trials):
            plan = SourcePlan(random.Random(t), ["a"], repeats=m)
            for i in range(n_calls):
                plan.hold(plan.offer("a"), i)
            assert len(set(plan.held)) == m
            for c in plan.held:
                held[c] += 1
        expect = trials * m / n_calls
        assert all(0.75 * expect < h < 1.25 * expect for h in held), held  # late calls as likely as early ones
    for t in range(20):
        plan = SourcePlan(random.Random(t), ["a", "b", "c", "a, ordinary"], repeats=6)
        assert len(plan.slot_key) == MAX_SOURCES == 4 and set(plan.slot_key) == {"a", "b", "c", "a, ordinary"}
        assert {len(set(SourcePlan(random.Random(t), ["x", "y"], repeats=r).slot_key)) for r in (2, 3)} == {2}


def test_repeats_run_in_the_process_that_did_not_run_their_source() -> None:
    """With the split, each repeat goes to the other process than its source, whichever that was (checked draw 0
    always ran in the first, draw 1 in the second, the rest either); more repeats than slots replay the slots
    again (at most MAX_SOURCES distinct sources)."""
    for seed in range(30):
        d = CallDrawer(_sc(2, 2, 2), seed, draws=2, repeats=7, min_samples=6, split=True)
        calls = [d.checked(0), d.checked(1)] + [d.timed(n) for n in range(10)]
        assert [c.process for c in calls[:2]] == [0, 1]
        by_call = {c.call: c for c in calls}
        reps = [d.repeat(j, 10 + j) for j in range(7)]
        assert all(r.process == 1 - by_call[r.source].process for r in reps)
        assert len({r.source for r in reps}) <= MAX_SOURCES and len({r.slot for r in reps}) == MAX_SOURCES


def test_declared_inputs_are_checked_but_the_fresh_timed_calls_draw_ordinary_values() -> None:
    """The timed values rule: a scenario declaring inputs gets ``draws`` checked draws on them, then ``draws``
    ordinary ones of the same value kinds (the bounds of the timed calls); its counted timed calls are
    ordinary, and ``declared_samples(min_samples)`` timed calls at random places among the first ones are on
    the declared values, never counted. Without declared inputs nothing changes."""
    plain = _sc(2, 4, 2)
    sc = plain.model_copy(update={"inputs": InputsSpec.model_validate({"q": {"dist": "constant", "value": 0.0},
                                                                       "k": "high_dims"})})
    assert declared_inputs(plain) == () and declared_inputs(sc) == ("q", "k")
    assert timed_values_note(plain) is None and "declared q, k" in (timed_values_note(sc) or "")
    drawer = CallDrawer(sc, 9, draws=3, repeats=2, min_samples=6)
    assert drawer.checked_draws == 6
    checked = [drawer.checked(i) for i in range(6)]
    assert [d.ordinary for d in checked] == [False] * 3 + [True] * 3
    assert [d.kind for d in checked] == list(VALUE_KINDS) * 2
    assert len({d.values for d in checked}) == 6  # each its own timed bound
    timed = [drawer.timed(n) for n in range(60)]
    assert all(d.ordinary == d.counted for d in timed) and sum(not d.counted for d in timed) == declared_samples(6) == 3
    assert all(n < 6 for n in drawer.declared_at) and drawer.pending(drawer.declared_at[-1])
    assert {d.values for d in timed if d.counted} <= {d.values for d in checked[3:]}
    assert {d.values for d in timed if not d.counted} <= {d.values for d in checked[:3]}
    reps = [drawer.repeat(j, 60 + j) for j in range(2)]
    assert len({r.values for r in reps}) == 2  # 2 slots, 2 of the 6 keys
    old = CallDrawer(plain, 9, draws=3, repeats=2, min_samples=6)
    assert old.checked_draws == 3 and not any(old.checked(i).ordinary for i in range(3))
    assert not any(old.timed(n).ordinary for n in range(20)) and old.declared_at == []
