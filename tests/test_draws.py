"""Per-call draws (harness/draws.py): checked and timed calls come from one distribution, repeats are
scheduled among the timed calls, and a repeat's reordering leaves attention's result reordered alike
(so a deterministic kernel reproduces draw 0's bits exactly)."""

from __future__ import annotations

import random

import pytest
import torch

from harness.draws import (
    LAYOUTS,
    VALUE_KINDS,
    CallDrawer,
    declared_inputs,
    permutation,
    permute_inputs,
    permute_outputs,
    timed_values_note,
)
from harness.inputs import InputsSpec
from harness.reference import attention_reference
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
    drawer.checked(0)
    draw = drawer.timed(0)
    assert draw.repeat == 0 and draw.perm_axis == axis
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
    timed = [drawer.timed(n) for n in range(400)]
    fresh = [d for d in timed if d.repeat is None]
    assert len(timed) - len(fresh) == 3 and all(0 <= n < 10 for n in drawer.repeat_at)
    assert {d.layout for d in fresh} == set(LAYOUTS) and {d.kind for d in fresh} <= set(VALUE_KINDS)
    default = sum(d.scale_factor == 1.0 for d in fresh) / len(fresh)
    assert 0.35 < default < 0.65 and all(0.5 <= d.scale_factor <= 1.5 for d in fresh)
    assert drawer.pending_repeats(0) and not drawer.pending_repeats(10)


def test_every_twelve_calls_cover_every_layout_and_scale_kind_half_of_them_dense() -> None:
    drawer = CallDrawer(_sc(2, 2, 2), 5, draws=2, repeats=0, min_samples=3)
    calls = [drawer.checked(0), drawer.checked(1)] + [drawer.timed(n) for n in range(22)]
    for start in (0, 12):
        block = calls[start:start + 12]
        assert {(d.layout, d.scale_factor == 1.0) for d in block} == {(lay, dflt) for lay in LAYOUTS for dflt in (True, False)}
        assert sum(d.layout == "dense" for d in block) == 6  # the timed layout (CallDrawer.timed_layout)


def test_repeats_beyond_min_samples_are_still_scheduled() -> None:
    drawer = CallDrawer(_sc(2, 2, 2), 3, draws=2, repeats=5, min_samples=3)
    assert len(drawer.repeat_at) == 5 and max(drawer.repeat_at) < 5


def test_declared_inputs_are_checked_but_the_fresh_timed_calls_draw_ordinary_values() -> None:
    """The timed values rule: a scenario declaring inputs gets ``draws`` checked draws on them, then ``draws``
    ordinary ones of the same value kinds (the bounds of the timed calls); its fresh timed calls are ordinary,
    its repeats replay draw 0 (declared). Without declared inputs nothing changes."""
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
    assert all(d.ordinary == (d.repeat is None) for d in timed) and sum(d.repeat is not None for d in timed) == 2
    assert {d.values for d in timed if d.repeat is None} <= {d.values for d in checked[3:]}
    old = CallDrawer(plain, 9, draws=3, repeats=2, min_samples=6)
    assert old.checked_draws == 3 and not any(old.checked(i).ordinary for i in range(3))
    assert not any(old.timed(n).ordinary for n in range(20))
