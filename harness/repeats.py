"""Determinism repeats: which earlier call each repeat replays, and the checker's store of those calls.

A repeat replays an earlier call of the same scenario (its source) with the batch or head order permuted
(harness.draws.permutation) and must reproduce the candidate's outputs of that call bit for bit. Until
2026-12-01 every repeat replayed checked draw 0, at a random place among the first timed calls: a call that
could never be a source (one of another value kind than draw 0's; one on ordinary values where the scenario
declares inputs; any call after the last repeat) could be racy unseen, and faster for it
(tests/test_timed_values_redteam.py). Then the sources were stratified by value key only, and a kernel racy on
dense calls only (the layout the times are over) escaped when every repeat replayed a padded call: 2 of 40
seeds (tests/test_timed_checked_redteam.py). Now:

* a scenario has ``min(repeats, MAX_SOURCES)`` source slots, each with a stratum: a value key
  (harness.draws.CallDraw.values: the value kind, and whether declared inputs were set aside) and, where the
  calls draw their layout, a layout. The keys are a shuffled cycle of every key the checked draws cover (keys
  of counted calls first), the layouts a cycle that starts with the timed layout (dense) and goes on through
  the others, shuffled: slot 0 is (a counted key, dense), and with at least as many slots as keys and as
  layouts (the default 4 repeats: 4 layouts, 2 to 4 keys) every key and every layout has a slot;
* each slot holds a uniformly random call among ALL the fresh calls of its stratum, checked draws and timed
  calls (counted or on declared values; never a repeat), whatever their scale, process or position: reservoir
  sampling (the i-th call of a stratum takes one of its m slots with probability m / i, the first m fill
  them), decided from the scenario's secret seed before each call runs, never from its outputs. A slot whose
  stratum has had no call yet (few calls of a rare layout and key) holds a uniformly random call from the strata
  no slot has until its own stratum's first call: of its layout where another slot has its key (the layout
  keeps its repeat), else of its key, else of any (a slot stays empty only while every call was of a stratum
  with a slot; a call goes to one slot, and to others only while they hold nothing: two repeats replay one call
  in ~2% of 8-call scenarios, none of 26-call ones). The checker keeps a call's inputs and outputs while a slot
  holds it;
* the repeats run after the last fresh call of the timing loop, repeat ``j`` replaying slot ``j mod slots``,
  each in the candidate process that did not run its source (harness.draws.CallDrawer ``split``).

So no property of a fresh call tells the kernel it will never be compared with itself: every call of a
stratum is as likely as any other to be a source. A kernel racy on a whole layout or a whole key is caught
(when the layout or key has a slot: always with 4 repeats); one racy on the calls of another property is caught
by each repeat whose source has it (and by each repeat it computes racily, whatever the source): on a fraction
f of a stratum's calls it escapes that stratum's repeat with probability 1 - f. Knowing which calls are
repeats (the last ones) does not help it: being exact on the repeats leaves the sources racy. Cost: the
copies of the calls the slots take (about m (1 + ln(N / m)) per stratum of N calls), and the repeats' own
samples as before.
"""

from __future__ import annotations

import random
from typing import Any

#: Source slots of one scenario at most (the default 4 repeats: one each); the repeats past them replay
#: the slots again. Each slot holds one call's inputs and outputs (harness/memory.py counts them).
MAX_SOURCES = 4


class SourcePlan:
    """The source slots of one scenario (pure bookkeeping, no tensors).

    Each slot has a stratum: a value key and, where a scenario's calls draw their layout, a layout. The keys
    are a cycle over the checked draws' keys (those of counted calls first: the ordinary ones where a scenario
    declares inputs; each group shuffled), the layouts a cycle over ``layouts`` (``first`` first, the rest
    shuffled), so with at least as many slots as keys and as layouts every key and every layout has a slot, and
    ``first`` (the timed layout) always pairs with a key of counted calls. A slot holds a uniformly random call
    of its stratum (reservoir sampling; the slots of one stratum share one reservoir); while its stratum has
    had no call, a uniformly random call from the strata no slot has, of its layout where another slot has its
    key, else of its key, else of any (the module's docstring).

    Args:
        rng: the scenario's drawer's generator (the slots are part of the scenario's secret draws).
        keys: the value keys of the checked draws (every key a timed call can have is among them).
        repeats: the scenario's determinism repeats; ``min(repeats, most)`` slots.
        most: slots at most.
        layouts: the layouts the scenario's calls draw (fewer than 2: slots are by key only).
        first: the layout that gets slot 0 (the timed layout), when among ``layouts``.
        counted: the keys of calls whose time counts (None: every key); they take the first slots.
    """

    def __init__(self, rng: random.Random, keys: list[str], repeats: int, most: int = MAX_SOURCES, *,
                 layouts: tuple[str, ...] = (), first: str | None = None, counted: set[str] | None = None) -> None:
        uniq = sorted(set(keys))
        front = [k for k in uniq if counted is None or k in counted]
        back = [k for k in uniq if k not in front]
        rng.shuffle(front), rng.shuffle(back)
        order = front + back
        rest = [lay for lay in layouts if lay != first]
        rng.shuffle(rest)
        lorder = ([first] if first in layouts else []) + rest
        self.rng = rng
        n = min(repeats, most) if order else 0
        #: the value key of each slot
        self.slot_key = [order[j % len(order)] for j in range(n)]
        #: the layout of each slot (None: any layout, when the calls do not draw one)
        self.slot_layout: list[str | None] = [lorder[j % len(lorder)] if len(lorder) > 1 else None for j in range(n)]
        self.seen: dict[tuple[str, str | None], int] = {}
        self._tier = [3] * n  # the slot's reservoir: 0 calls of its stratum, 1 of its fallback, 2 any other, 3 none
        self._count = [0] * n  # calls of that tier offered to it (its reservoir's count)
        self._held_tier = [3] * n  # the tier of the call it holds (3: none)
        # a slot's fallback: calls of its layout when another slot has its key, else calls of its key
        self._by_layout = [lay is not None and self.slot_key.count(k) > 1
                           for k, lay in zip(self.slot_key, self.slot_layout, strict=True)]
        #: the call each slot holds now (any object: harness.draws.CallDraw), None before its key's first call
        self.held: list[Any] = [None] * n

    def offer(self, key: str, layout: str | None = None) -> tuple[int, ...]:
        """The slots that take the next fresh call of value key ``key`` and layout ``layout`` (asked before it
        runs; empty: none). A call of a slot's stratum goes to that stratum's reservoir only. A call of a stratum
        no slot has goes to the fallback of each slot that holds no call of its stratum yet: a reservoir over the
        best tier of calls it was offered (its layout where another slot has its key, else its key; then any)."""
        mine = [j for j, (k, lay) in enumerate(zip(self.slot_key, self.slot_layout, strict=True))
                if k == key and lay in (None, layout)]
        if mine:
            stratum = (key, self.slot_layout[mine[0]])
            i = self.seen[stratum] = self.seen.get(stratum, 0) + 1
            r = i - 1 if i <= len(mine) else self.rng.randrange(i)
            if r >= len(mine):
                return ()
            self._tier[mine[r]] = self._held_tier[mine[r]] = 0
            return (mine[r],)
        taken = []
        for j, (k, lay) in enumerate(zip(self.slot_key, self.slot_layout, strict=True)):
            tier = 1 if (lay == layout if self._by_layout[j] else k == key) else 2
            if tier < self._tier[j]:
                self._tier[j], self._count[j] = tier, 0
            if tier == self._tier[j]:
                self._count[j] += 1
                if self.rng.randrange(self._count[j]) == 0:
                    taken.append(j)
        # one slot per call where it can be (no two repeats replaying one call): the call goes to the slots that
        # took it and hold nothing or a call of a worse tier, else to one of those that took it; for the others it
        # never came
        better = [j for j in taken if self._held_tier[j] > self._tier[j]]
        keep = better or ([self.rng.choice(taken)] if taken else [])
        for j in taken:
            if j in keep:
                self._held_tier[j] = self._tier[j]
            else:
                self._count[j] -= 1
        return tuple(keep)

    def hold(self, slots: tuple[int, ...], call: Any) -> None:
        """Record that ``slots`` (from :meth:`offer`) now hold ``call``."""
        for s in slots:
            self.held[s] = call

    def slot_of(self, j: int) -> int:
        """The slot repeat ``j`` replays: ``j mod slots``, or another slot of the same key (else any) when that
        one never got a call (a key with fewer calls than slots). Raises ValueError when no slot holds a call."""
        want = j % len(self.slot_key)
        if self.held[want] is not None:
            return want
        same = [s for s, k in enumerate(self.slot_key) if k == self.slot_key[want] and self.held[s] is not None]
        other = [s for s, c in enumerate(self.held) if c is not None]
        if not (same or other):
            raise ValueError("a repeat before any call was drawn")
        return (same or other)[0]


class SourceStore:
    """The checker's copies of the calls the slots hold: per slot, the pristine inputs (dense ``[b, s, h, d]``
    copies of q, k, v in the dtype) and the candidate's ``o [b, sq, hq, d]``, ``lse [b, hq, sq]`` fp32.
    Device memory: one set of inputs and outputs per slot, one more while a slot changes hands
    (harness.memory.estimate_peak_bytes)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.kept: dict[int, tuple[tuple[Any, Any, Any], Any, Any]] = {}

    def keep(self, slots: tuple[int, ...], bufs_o: Any, bufs_c: Any) -> None:
        """``slots`` now hold the call just made: the pristine inputs of the original's buffers (``bufs_o``,
        harness.buffers.Buffers) and the candidate's outputs (``bufs_c``), right after the candidate's call.
        The call each slot held before is dropped."""
        for s in slots:
            self.kept.pop(s, None)
        if slots:
            dense = tuple(t.clone(memory_format=self.torch.contiguous_format) for t in (bufs_o.q, bufs_o.k, bufs_o.v))
            copy = (dense, bufs_c.o_c.clone(), bufs_c.lse_c.clone())
            for s in slots:
                self.kept[s] = copy  # type: ignore[assignment]

    def replay(self, sc: Any, draw: Any) -> tuple[tuple[Any, Any, Any], tuple[Any, Any]]:
        """``(inputs, expected outputs)`` of the repeat ``draw`` (harness.draws.CallDraw, ``slot`` set): its
        source's kept inputs and outputs, reordered by the draw's permutation. Raises KeyError when the slot
        holds nothing."""
        from harness.draws import permute_inputs, permute_outputs

        inputs, o, lse = self.kept[draw.slot]
        return permute_inputs(self.torch, sc, draw, *inputs), permute_outputs(self.torch, sc, draw, o, lse)
