"""Which question to ask next: a two-level Thompson-sampling bandit on measured child improvement.

An *arm* is one thing a brief can ask: a bank question (layer = its bank layer), a crossover question
(layer ``crossover``) or, for the knob mutator, one knob (layer ``knob``). Every evaluated or rejected
child is one pull of the arm that produced it; the pull *succeeded* when the child is correct and its
quick fitness is at least its parent's times ``1 + min_gain`` (rejected and failed children are
pulls that did not succeed).

Choice: first a layer, by the largest draw from Beta(1 + successes, 1 + failures) of each layer
(pooled over its arms), then an arm of that layer by the same rule over the arm's own pulls. Layers
learn fast (many pulls), questions refine within the layer; an untried arm draws from Beta(1, 1).
Deterministic for a given ``random.Random``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, Field


class Arm(BaseModel):
    """One question (or knob) the bandit can choose."""

    id: str
    layer: str
    text: str = ""


class Pull(BaseModel):
    """One child produced by an arm: did it improve on its parent, and by how much."""

    arm_id: str
    layer: str
    improved: bool
    improvement: float | None = Field(default=None, description="fitness ratio - 1; None when failed/rejected")


class ArmStats(BaseModel):
    """Children an arm (or a layer) produced and how many improved on their parent."""

    id: str
    layer: str
    children: int = 0
    improved: int = 0
    rate: float | None = Field(default=None, description="improved / children")
    mean_improvement: float | None = Field(default=None, description="mean fitness ratio - 1 over correct children")
    best_improvement: float | None = None


class Choice(BaseModel):
    """The chosen arm and the draws that chose it."""

    arm: Arm
    layer_draw: float
    arm_draw: float
    candidates: int


def _summarize(key: str, layer: str, pulls: Sequence[Pull]) -> ArmStats:
    imps = [p.improvement for p in pulls if p.improvement is not None]
    n, k = len(pulls), sum(p.improved for p in pulls)
    return ArmStats(id=key, layer=layer, children=n, improved=k, rate=k / n if n else None,
                    mean_improvement=sum(imps) / len(imps) if imps else None,
                    best_improvement=max(imps) if imps else None)


def arm_stats(pulls: Iterable[Pull]) -> dict[str, ArmStats]:
    """Per arm id: children, improved, rate, mean and best improvement."""
    by: dict[str, list[Pull]] = {}
    for p in pulls:
        by.setdefault(p.arm_id, []).append(p)
    return {k: _summarize(k, v[0].layer, v) for k, v in sorted(by.items())}


def layer_stats(pulls: Iterable[Pull]) -> dict[str, ArmStats]:
    """Per layer: the same numbers pooled over the layer's arms."""
    by: dict[str, list[Pull]] = {}
    for p in pulls:
        by.setdefault(p.layer, []).append(p)
    return {k: _summarize(k, k, v) for k, v in sorted(by.items())}


def choose(arms: Sequence[Arm], pulls: Sequence[Pull], rng: random.Random) -> Choice:
    """Pick an arm (see the module docstring). Arms and layers are visited in sorted order, so the
    result depends only on the arms, the pulls and the generator's state.

    Raises:
        ValueError: no arm to choose from.
    """
    if not arms:
        raise ValueError("the bandit has no arm to choose from")
    per_arm = arm_stats(pulls)
    per_layer = layer_stats(p for p in pulls if p.arm_id in {a.id for a in arms})
    layers = sorted({a.layer for a in arms})
    best_layer, best_ldraw = layers[0], -1.0
    for layer in layers:
        st = per_layer.get(layer)
        k, n = (st.improved, st.children) if st else (0, 0)
        draw = rng.betavariate(1 + k, 1 + n - k)
        if draw > best_ldraw:
            best_layer, best_ldraw = layer, draw
    pool = sorted((a for a in arms if a.layer == best_layer), key=lambda a: a.id)
    best_arm, best_adraw = pool[0], -1.0
    for arm in pool:
        st = per_arm.get(arm.id)
        k, n = (st.improved, st.children) if st else (0, 0)
        draw = rng.betavariate(1 + k, 1 + n - k)
        if draw > best_adraw:
            best_arm, best_adraw = arm, draw
    return Choice(arm=best_arm, layer_draw=best_ldraw, arm_draw=best_adraw, candidates=len(arms))
