"""What each call of a scenario looks like to the kernel: layout, softmax_scale, value kind, repeats.

Every call a kernel sees (checked or timed) draws its layout and scale from the same distribution, so
a kernel cannot tell a checked call from a timed one by its parameters. Determinism repeats run after the
last fresh timed call; each replays an earlier call of the scenario, its source: a uniformly random one
among all the fresh calls of a stratum, checked or timed (harness/repeats.py: source slots stratified by
value key and layout, filled by reservoir sampling), with the batch or head order permuted where the shape allows (so
neither its pointers nor its content at fixed places match the source's). With a second candidate process
(``split``), each repeat runs in the process that did not run its source, which never saw the source's
inputs or outputs: a cache in the candidate's memory, keyed by anything at all, cannot hand a repeat its
source's bits (a slot replayed more than once, past harness.repeats.MAX_SOURCES repeats, could be replayed
there from its first repeat). Checked draw 0 runs in the first process, checked draw 1 in the second, every
other fresh call in either at random, so being asked tells a process nothing. Drawn from ``random.Random``
instances seeded per scenario from the run's secret seed: no device round trip, reproducible from the seed.

The value distributions themselves (``kind``) are filled by harness.buffers.Buffers.fill_inputs; this
module only decides which one a call gets.

Timed values (:func:`declared_inputs`): the counted timed calls of a scenario that declares ``inputs`` (a
distribution for q, k or v) draw ordinary values (every tensor follows the call's value kind, as if nothing
were declared), and so do ``draws`` extra checked draws, whose tolerances bound those timed calls; the first
``draws`` checked draws keep the declared values (the bug a scenario reproduces is about them), and so do
:func:`declared_samples` fresh timed calls at random positions among the first ones, checked like every
timed call (whole output against the original, sampled rows against the fp32 reference) and never counted
in a time, like the repeats. Declared values can give every call's answer away, or most of its work: q = 0
and v constant (o = v whatever k holds), a constant q (every query row alike: one row's work), a constant k
(equal weights), head-tagged v with little noise (o is the tag within the tolerance), high_dims (half of
the q.k products are zero), rising logits (all but the last keys' weights underflow). A kernel that
special-cases such values is right on them; timed on ordinary values it is wrong or pays the full cost.
The rule covers every declared distribution, not only the degenerate ones: a per-distribution judgement of
what can be exploited is the weaker rule (tests/test_timing_redteam.py, section 4). A value-dependent bug
on the declared values meets ``draws`` + :func:`declared_samples` fresh declared calls (2 + 5 by default;
tests/test_timed_values_redteam.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from harness.scenarios import Scenario

#: Layouts a call can get (harness.buffers.Buffers.apply): dense, or a head stride of head_dim + 8
#: (poisoned padding) on q and o, on k and v, or on all four. All keep 16-byte aligned rows. A scenario
#: that declares a ``layout`` gets only that one (harness.buffers.DECLARED) on every call.
LAYOUTS = ("dense", "padded_qo", "padded_kv", "padded_all")
#: Deck copies of the dense layout when layouts are drawn: half of all calls are dense, the layout the
#: timing medians are taken over (:attr:`CallDrawer.timed_layout`): the padded ones are there for the checks.
DENSE_WEIGHT = 3
#: Value kinds of the input draws (harness.buffers.Buffers.fill_inputs).
VALUE_KINDS = ("normal", "large_logits", "shifted")
#: softmax_scale = factor x 1/sqrt(head_dim); the factor is exactly 1 half of the time, else U[0.5, 1.5]
#: (layouts and default-or-drawn scales come from a shuffled deck: CallDrawer._layout_scale).
SCALE_RANGE = (0.5, 1.5)


@dataclass(frozen=True)
class CallDraw:
    """One call's draw. ``call``: the call's index in its scenario (checked draw ``i``: ``i``; timed sample
    ``n``: the number of checked draws + ``n``; :meth:`CallDrawer.name`). ``repeat``: index of the
    determinism repeat (None for a fresh draw); a repeat replays the call ``source`` held by source slot
    ``slot`` (harness/repeats.py: its values, layout and scale) permuted by ``perm`` (see :func:`permutation`).
    ``keep``: the source slots that take this call (the checker keeps its inputs and outputs for them).
    ``process``: which candidate process runs the call (0: the one that ran checked draw 0; 1: the second).
    ``ordinary``: the call's values ignore the scenario's declared ``inputs`` (every tensor follows ``kind``;
    see the module's timed values). ``counted``: a timed call whose time may count (False: a repeat, or a
    fresh call on declared values; both are checked, never timed)."""

    layout: str
    scale_factor: float
    kind: str
    repeat: int | None = None
    perm_axis: str | None = None  # "batch" | "kv_heads" | "q_heads" | None
    perm: tuple[int, ...] = ()
    process: int = 0
    ordinary: bool = False
    call: int = 0
    source: int | None = None
    slot: int | None = None
    keep: tuple[int, ...] = ()
    counted: bool = True

    @property
    def values(self) -> str:
        """The values the call draws, as the key of the timed bounds (harness.checks.TimedBounds) and of the
        repeats' source slots: its value kind, ``", ordinary"`` added when declared inputs were set aside."""
        return values_key(self.kind, self.ordinary)


def values_key(kind: str, ordinary: bool) -> str:
    """:attr:`CallDraw.values` of a call of value kind ``kind`` (``ordinary``: declared inputs set aside)."""
    return f"{kind}, ordinary" if ordinary else kind


def declared_samples(min_samples: int) -> int:
    """Fresh timed calls on the declared values in a scenario that declares ``inputs``: half the first
    ``min_samples`` timed calls, at least 2 (the checked draws are half declared, half ordinary too)."""
    return max(2, min_samples // 2)


class CallDrawer:
    """Per-scenario source of call draws: checked draws, fresh timed draws (the scheduled declared calls among
    them), then the determinism repeats.

    Args:
        sc: the scenario (its shape decides which permutations exist; declared ``inputs``, the timed values).
        seed: per-scenario seed (from the run's secret seed).
        draws: checked draws; draw ``i`` gets value kind ``VALUE_KINDS[i % 3]`` (each kind covered). A scenario
            with declared inputs gets ``draws`` more, ordinary (:attr:`checked_draws` in all).
        repeats: determinism repeats (see :func:`repeats_of`), run after the last fresh timed call
            (:meth:`repeat`), each of a call a source slot holds (harness.repeats.SourcePlan).
        min_samples: the timing loop's floor; with declared inputs, :func:`declared_samples` of the first
            ``max(min_samples, that)`` fresh timed samples are on the declared values.
        layouts: the layouts calls draw from (default LAYOUTS; a declared layout: ``("declared",)``).
        split: a second candidate process exists: each repeat runs in the process its source did not run in.
    """

    def __init__(self, sc: Scenario, seed: int, *, draws: int, repeats: int, min_samples: int,
                 layouts: tuple[str, ...] = LAYOUTS, split: bool = False) -> None:
        from harness.full_check import FullChecks
        from harness.repeats import SourcePlan

        self.sc, self.rng, self.layouts = sc, random.Random(seed), layouts
        self.split, self.route = split, random.Random(seed ^ 0x5B117)  # routing apart from the other draws
        self.kinds = tuple(VALUE_KINDS[i % len(VALUE_KINDS)] for i in range(draws))
        #: the tensors whose declared values the counted timed calls set aside (:func:`declared_inputs`)
        self.declared = declared_inputs(sc)
        #: checked draws: ``draws`` on the declared values, then (declared inputs only) ``draws`` ordinary ones
        self.checked_draws = draws * 2 if self.declared else draws
        #: determinism repeats, after the fresh timed calls
        self.repeats = repeats
        n_declared = declared_samples(min_samples) if self.declared else 0
        #: fresh timed samples on the declared values (checked, never counted in a time)
        self.declared_at = sorted(self.rng.sample(range(max(min_samples, n_declared)), n_declared))
        #: the layout the timing statistics are taken over ("dense" when layouts are drawn; None: a declared
        #: layout, every sample counts)
        self.timed_layout: str | None = "dense" if "dense" in layouts and len(layouts) > 1 else None
        keys = [values_key(self.kinds[i % draws], i >= draws) for i in range(self.checked_draws)]
        #: the repeats' source slots (harness/repeats.py), stratified by value key and layout; the timed layout's
        #: slot (slot 0) holds calls of a key whose timed calls count (ordinary ones where inputs are declared)
        self.sources = SourcePlan(self.rng, keys, repeats, layouts=layouts, first=self.timed_layout,
                                  counted=set(keys[draws:]) if self.declared else None)
        self.deck: list[tuple[str, bool]] = []
        #: which timed calls are checked whole against the fp32 reference (harness/full_check.py)
        self.full = FullChecks(seed ^ 0xF011)
        #: fresh timed samples the loop must reach (the last scheduled declared call's, plus one)
        self.samples_needed = self.declared_at[-1] + 1 if self.declared_at else 0

    def name(self, call: int) -> str:
        """A call index for messages: ``"checked draw 2"``, ``"timed call 5"``."""
        if call < self.checked_draws:
            return f"checked draw {call}"
        return f"timed call {call - self.checked_draws}"

    def _layout_scale(self) -> tuple[str, float]:
        """From a shuffled deck of every (layout, default scale or not) pair, the dense layout
        :data:`DENSE_WEIGHT` times over, refilled when empty: each call looks random, and any run of
        len(deck) consecutive calls (12 with the four drawn layouts) covers every pair, so a kernel that
        misbehaves on one kind of call meets it within the first 12 calls of a scenario."""
        if not self.deck:
            self.deck = [(layout, default) for layout in self.layouts for default in (True, False)
                         for _ in range(DENSE_WEIGHT if layout == self.timed_layout else 1)]
            self.rng.shuffle(self.deck)
        layout, default = self.deck.pop()
        return layout, 1.0 if default else self.rng.uniform(*SCALE_RANGE)

    def _fresh(self, call: int, kind: str, process: int, ordinary: bool, counted: bool = True) -> CallDraw:
        layout, factor = self._layout_scale()
        keep = self.sources.offer(values_key(kind, ordinary), layout)
        d = CallDraw(layout=layout, scale_factor=factor, kind=kind, process=process, ordinary=ordinary, call=call,
                     keep=keep, counted=counted)
        self.sources.hold(keep, d)
        return d

    def checked(self, i: int) -> CallDraw:
        """The draw of checked call ``i`` (0-based, below :attr:`checked_draws`): past ``draws``, ordinary."""
        return self._fresh(i, self.kinds[i % len(self.kinds)], 0 if i == 0 else 1 if i == 1 else self._either(),
                           i >= len(self.kinds))

    def timed(self, n: int) -> CallDraw:
        """The draw of fresh timed sample ``n``: its value kind is one the checked draws covered (their tolerances
        apply), ordinary where inputs are declared except on the scheduled declared calls (never counted)."""
        declared = n in self.declared_at
        return self._fresh(self.checked_draws + n, self.rng.choice(self.kinds), self._either(),
                           bool(self.declared) and not declared, counted=not declared)

    def repeat(self, j: int, n: int) -> CallDraw:
        """The draw of repeat ``j`` (below :attr:`repeats`), timed sample ``n``: the call its slot holds (that
        call's values, layout and scale), permuted, in the process that did not run it. Raises ValueError
        when no call was drawn yet."""
        slot = self.sources.slot_of(j)
        s: CallDraw = self.sources.held[slot]
        axis, perm = permutation(self.sc, self.rng)
        return CallDraw(layout=s.layout, scale_factor=s.scale_factor, kind=s.kind, repeat=j, perm_axis=axis,
                        perm=perm, process=1 - s.process if self.split else 0, ordinary=s.ordinary,
                        call=self.checked_draws + n, source=s.call, slot=slot, counted=False)

    def _either(self) -> int:
        """The process of a call that is neither checked draw 0 or 1 nor a repeat: either, at random (0 without
        a split)."""
        return int(self.split and self.route.random() < 0.5)

    def pending(self, n_done: int) -> bool:
        """True while a scheduled declared call lies at or after fresh sample ``n_done`` (the loop must reach it)."""
        return n_done < self.samples_needed


def declared_inputs(sc: Scenario) -> tuple[str, ...]:
    """The tensors (of q, k, v) whose values ``sc`` declares (its ``inputs``): the values of the first checked
    draws, of the declared timed calls and of their repeats, set aside by the counted timed calls (the module's
    timed values). Empty: none declared."""
    spec = sc.inputs
    return tuple(n for n in ("q", "k", "v") if spec is not None and getattr(spec, n) is not None)


def describe_values(sc: Scenario, draw: CallDraw) -> str:
    """What ``draw``'s input values were, for messages (e.g. ``"the scenario's inputs, normal for the
    others"``; ``"normal inputs in place of the declared q, v (timed values)"``)."""
    declared = declared_inputs(sc)
    if draw.ordinary:
        return f"{draw.kind} inputs in place of the declared {', '.join(declared)} (timed values)"
    return f"the scenario's inputs, {draw.kind} for the others" if declared else f"{draw.kind} inputs"


def timed_values_note(sc: Scenario) -> str | None:
    """The scenario result's ``timed_values``: None when the timed calls drew the scenario's own values, else
    which declared values they set aside (checked on the first checked draws, on uncounted timed calls and
    their repeats, never timed)."""
    declared = declared_inputs(sc)
    if not declared:
        return None
    return (f"ordinary: the declared {', '.join(declared)} values are checked (first draws, uncounted timed calls, "
            "repeats), never timed (docs/checks.md, timed values)")


def repeats_of(sc: Scenario, job_repeats: int) -> int:
    """Determinism repeats for ``sc``: the scenario's ``repeats`` (calls on the same inputs, the first
    included) less one, at least the job's ``repeats``."""
    return max(job_repeats, sc.repeats - 1)


def permutation(sc: Scenario, rng: random.Random) -> tuple[str | None, tuple[int, ...]]:
    """A non-identity permutation that leaves attention's result permuted the same way: of the batch
    (batch > 1), else of the kv heads with their query-head groups (num_heads_kv > 1), else of the query
    heads sharing the single kv head (MQA, num_heads_q > 1); ``(None, ())`` when the shape has none."""
    for axis, n in (("batch", sc.batch), ("kv_heads", sc.num_heads_kv), ("q_heads", sc.num_heads_q)):
        if n > 1:
            perm = list(range(n))
            while perm == sorted(perm):
                rng.shuffle(perm)
            return axis, tuple(perm)
    return None, ()


def q_head_map(sc: Scenario, axis: str | None, perm: tuple[int, ...]) -> list[int]:
    """Query-head index map of a permutation: new query head ``i`` holds old head ``map[i]``."""
    hq = sc.num_heads_q
    if axis == "kv_heads":
        group = hq // sc.num_heads_kv
        return [perm[i // group] * group + i % group for i in range(hq)]
    if axis == "q_heads":
        return list(perm)
    return list(range(hq))


def permute_inputs(torch, sc: Scenario, draw: CallDraw, q, k, v):
    """``(q, k, v)`` (dense ``[b, s, h, d]``) reordered by ``draw``'s permutation (new tensors)."""
    if draw.perm_axis == "batch":
        idx = torch.tensor(draw.perm, device=q.device)
        return q.index_select(0, idx), k.index_select(0, idx), v.index_select(0, idx)
    if draw.perm_axis in ("kv_heads", "q_heads"):
        qi = torch.tensor(q_head_map(sc, draw.perm_axis, draw.perm), device=q.device)
        kv = torch.tensor(draw.perm if draw.perm_axis == "kv_heads" else range(sc.num_heads_kv), device=q.device)
        return q.index_select(2, qi), k.index_select(2, kv), v.index_select(2, kv)
    return q.clone(), k.clone(), v.clone()


def permute_outputs(torch, sc: Scenario, draw: CallDraw, o, lse):
    """A source call's outputs ``o [b, sq, hq, d]``, ``lse [b, hq, sq]`` as its repeat must reproduce them."""
    if draw.perm_axis == "batch":
        idx = torch.tensor(draw.perm, device=o.device)
        return o.index_select(0, idx), lse.index_select(0, idx)
    if draw.perm_axis in ("kv_heads", "q_heads"):
        qi = torch.tensor(q_head_map(sc, draw.perm_axis, draw.perm), device=o.device)
        return o.index_select(2, qi), lse.index_select(1, qi)
    return o.clone(), lse.clone()
