"""Determinism repeats: which earlier call each repeat replays, and the checker's store of those calls.

A repeat replays an earlier call of the same scenario (its source) with the batch or head order permuted
(harness.draws.permutation) and must reproduce the candidate's outputs of that call bit for bit. Until
2026-12-01 every repeat replayed checked draw 0, at a random place among the first timed calls: a call that
could never be a source (one of another value kind than draw 0's; one on ordinary values where the scenario
declares inputs; any call after the last repeat) could be racy unseen, and faster for it
(tests/test_timed_values_redteam.py). Now:

* a scenario has ``min(repeats, MAX_SOURCES)`` source slots; their value keys (harness.draws.CallDraw.values:
  the value kind, and whether declared inputs were set aside) are a shuffled cycle of every key the checked
  draws cover, so with at least as many slots as keys every key is replayed, and every key a timed call can
  have is among them;
* each slot holds a uniformly random call among ALL the fresh calls of its key, checked draws and timed
  calls (counted or on declared values; never a repeat), whatever their layout, scale, process or
  position: reservoir sampling (the i-th call of a key takes one of the key's m slots with probability
  m / i, the first m fill them), decided from the scenario's secret seed before each call runs, never from
  its outputs. The checker keeps a call's inputs and outputs while a slot holds it;
* the repeats run after the last fresh call of the timing loop, repeat ``j`` replaying slot ``j mod slots``,
  each in the candidate process that did not run its source (harness.draws.CallDrawer ``split``).

So no property of a fresh call tells the kernel it will never be compared with itself: every call of a key
is as likely as any other to be a source. A kernel racy on the calls with some property is caught by each
repeat whose source has it (and by each repeat it computes racily, whatever the source): on a fraction f of
a key's calls it escapes a repeat of that key with probability 1 - f. Knowing which calls are repeats (the
last ones) does not help it: being exact on the repeats leaves the sources racy. Cost: the copies of the
calls the slots take (about m (1 + ln(N / m)) per key of N calls), and the repeats' own samples as before.
"""

from __future__ import annotations

import random
from typing import Any

#: Source slots of one scenario at most (the default 3 repeats: one each); the repeats past them replay
#: the slots again. Each slot holds one call's inputs and outputs (harness/memory.py counts them).
MAX_SOURCES = 4


class SourcePlan:
    """The source slots of one scenario (pure bookkeeping, no tensors).

    Args:
        rng: the scenario's drawer's generator (the slots are part of the scenario's secret draws).
        keys: the value keys of the checked draws (every key a timed call can have is among them).
        repeats: the scenario's determinism repeats; ``min(repeats, most)`` slots.
        most: slots at most.
    """

    def __init__(self, rng: random.Random, keys: list[str], repeats: int, most: int = MAX_SOURCES) -> None:
        order = sorted(set(keys))
        rng.shuffle(order)
        self.rng = rng
        #: the value key of each slot
        self.slot_key = [order[j % len(order)] for j in range(min(repeats, most))] if order else []
        self.seen: dict[str, int] = {}
        #: the call each slot holds now (any object: harness.draws.CallDraw), None before its key's first call
        self.held: list[Any] = [None] * len(self.slot_key)

    def offer(self, key: str) -> tuple[int, ...]:
        """The slots that take the next fresh call of value key ``key`` (asked before it runs; empty: none)."""
        mine = [j for j, k in enumerate(self.slot_key) if k == key]
        if not mine:
            return ()
        i = self.seen[key] = self.seen.get(key, 0) + 1
        if i <= len(mine):
            return (mine[i - 1],)
        r = self.rng.randrange(i)
        return (mine[r],) if r < len(mine) else ()

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
