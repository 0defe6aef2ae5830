"""Like-with-like comparison of two attempts, and the best attempt on the scenarios they share.

A campaign's attempts are verified on different suites (quick, full, production, a user's .toml),
suites grow between attempts, and an attempt may carry a goal anchor (``--goal-against fa3``). Raw
geomeans (vs the original kernel) of such attempts measure different scenario mixes and different
things; comparing them reads a suite change as a gain or a loss. Here two attempts compare only:

- on one *measure*: the goal anchor's speedup (anchor median / candidate median) where both attempts
  have it, else the speedup vs the original kernel;
- over the scenarios both ran correctly: the ratio is the geomean of per-scenario ratios on the
  intersection of scenario ids. When the intersection holds fewer than :data:`MIN_OVERLAP` of either
  attempt's scenarios, they do not compare (``Comparison.reason`` says why).

Verdicts without per-scenario results (older stores) compare by whole-suite geomean when both ran the
same suite, as before. "Best" (:func:`best_comparable`) is among the attempts that compare with a
reference (the latest verified attempt): the highest ratio over that reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, Field

from harness.store import AttemptRecord

ORIGINAL = "original"
#: The least share of either attempt's scenarios the two must have in common to compare.
MIN_OVERLAP = 0.5
_ANCHOR_NAMES = {"fa3": "FA3", "cudnn": "cuDNN", "flash": "flash"}


class Comparison(BaseModel):
    """Attempt ``new_seq`` against ``old_seq`` on one measure, over the scenarios both ran."""

    new_seq: int
    old_seq: int
    measure: str = Field(description="'original' or an anchor name (fa3, cudnn, flash)")
    new_suite: str | None = None
    old_suite: str | None = None
    common: int = Field(default=0, description="scenarios with a value in both attempts")
    new_count: int = 0
    old_count: int = 0
    ratio: float | None = Field(default=None, description="geomean of new/old per-scenario ratios (None: no compare)")
    comparable: bool = False
    reason: str = Field(default="", description="why they do not compare, or how they were compared")


def suite_name(a: AttemptRecord) -> str:
    """The suite an attempt was verified on ('?' without a verdict)."""
    return a.verdict.suite if a.verdict is not None else "?"


def goal_anchor(a: AttemptRecord) -> str:
    """The anchor of an attempt's goal (``Verdict.goal.against``; 'original' without a verdict)."""
    return a.verdict.goal.against if a.verdict is not None else ORIGINAL


def value(a: AttemptRecord, measure: str) -> float | None:
    """An attempt's own geomean on ``measure`` (vs the original, or vs an anchor), None when unknown."""
    if measure == ORIGINAL:
        return a.geomean_speedup
    return a.verdict.geomean_vs_anchor.get(measure) if a.verdict is not None else None


def measure_name(measure: str) -> str:
    """How messages name a measure: 'FA3', 'cuDNN', 'vs the original'."""
    return "vs the original" if measure == ORIGINAL else _ANCHOR_NAMES.get(measure, measure)


def fmt_value(v: float | None, measure: str) -> str:
    """A geomean on ``measure`` in words: '0.938x FA3', '12.41x vs the original'."""
    if v is None:
        return f"- {measure_name(measure)}"
    return f"{v:.3f}x {measure_name(measure)}" if measure != ORIGINAL else f"{v:.2f}x {measure_name(measure)}"


def describe(a: AttemptRecord, measure: str) -> str:
    """An attempt's geomean with its measure, suite and number: '0.938x FA3 on full (#15)'."""
    return f"{fmt_value(value(a, measure), measure)} on {suite_name(a)} (#{a.seq})"


def scenario_values(a: AttemptRecord, measure: str) -> dict[str, float]:
    """Per correct scenario id: its speedup on ``measure`` (positive, finite values only)."""
    out: dict[str, float] = {}
    if a.verdict is None:
        return out
    for s in a.verdict.scenarios:
        if not s.correct:
            continue
        v = s.speedup if measure == ORIGINAL else s.vs_anchor.get(measure)
        if v is not None and v > 0 and math.isfinite(v):
            out[s.id] = v
    return out


def measure_for(new: AttemptRecord, old: AttemptRecord, anchor: str | None = None) -> str:
    """The measure two attempts compare on: ``anchor`` (default: ``new``'s goal anchor) when both have it, else
    the original kernel."""
    anchor = anchor or goal_anchor(new)
    if anchor != ORIGINAL and value(new, anchor) is not None and value(old, anchor) is not None:
        return anchor
    return ORIGINAL


def compare(new: AttemptRecord, old: AttemptRecord, *, anchor: str | None = None) -> Comparison:
    """``new`` against ``old``, like with like (see the module docstring).

    Args:
        anchor: the measure wanted (default: ``new``'s goal anchor); the original kernel when either lacks it.
    """
    m = measure_for(new, old, anchor)
    base = {"new_seq": new.seq, "old_seq": old.seq, "measure": m, "new_suite": suite_name(new),
            "old_suite": suite_name(old)}
    nv, ov = scenario_values(new, m), scenario_values(old, m)
    if not nv or not ov:
        gn, go = value(new, m), value(old, m)
        if gn is None or go is None or gn <= 0 or go <= 0:
            return Comparison(**base, reason=f"no geomean {measure_name(m)} on #{new.seq} or #{old.seq}")
        if suite_name(new) != suite_name(old):
            return Comparison(**base, reason=f"no per-scenario results, and #{new.seq} ran {suite_name(new)} "
                                             f"while #{old.seq} ran {suite_name(old)}")
        return Comparison(**base, ratio=gn / go, comparable=True,
                          reason=f"whole-suite geomeans on {suite_name(new)} (no per-scenario results)")
    common = sorted(nv.keys() & ov.keys())
    base.update(common=len(common), new_count=len(nv), old_count=len(ov))
    if len(common) < MIN_OVERLAP * max(len(nv), len(ov)) or not common:
        return Comparison(**base, reason=(
            f"only {len(common)} scenarios in common between #{new.seq} ({len(nv)} on {suite_name(new)}) and "
            f"#{old.seq} ({len(ov)} on {suite_name(old)}): under {MIN_OVERLAP:.0%} of either"))
    ratio = math.exp(sum(math.log(nv[i] / ov[i]) for i in common) / len(common))
    return Comparison(**base, ratio=ratio, comparable=True,
                      reason=f"{measure_name(m)} on {len(common)} common scenarios")


def best_comparable(attempts: Sequence[AttemptRecord], ref: AttemptRecord
                    ) -> tuple[AttemptRecord, Comparison] | None:
    """Among ``attempts`` (verified ones; ``ref`` counts too if among them) those that compare with ``ref``:
    the one with the highest ratio over ``ref`` (earliest on ties) and its comparison; None when none compares."""
    best: tuple[AttemptRecord, Comparison] | None = None
    for a in attempts:
        c = compare(a, ref, anchor=goal_anchor(ref))
        if c.comparable and c.ratio is not None and (best is None or c.ratio > (best[1].ratio or 0.0)):
            best = (a, c)
    return best
