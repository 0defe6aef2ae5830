"""Question selection: which bank question to ask, given the trigger and what worked before.

Rules (issue 4):
- candidates are the questions that fit the trigger (all questions for a general question);
- never the same question twice in a row within a campaign;
- prefer layers not asked recently (bonus :data:`LAYER_BONUS` for a layer absent from the last
  ``recent_layers`` questions of the campaign) and questions not yet asked in this campaign
  (penalty :data:`REPEAT_PENALTY` per earlier ask);
- rank by measured effectiveness with exploration: Thompson sampling from
  Beta(1 + improved, 1 + resolved - improved), where a question *improved* when one of the next
  ``horizon`` (default 3) attempts of its campaign beat the best geomean before it, like with like
  (questions/compare.py), by >= ``min_gain`` (default ``Settings.stall_min_gain``, 1 %). Effectiveness pools all campaigns.
Deterministic for a given ``random.Random``; :func:`rng_for` seeds it from ``Settings.seed``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import BaseModel, Field

from harness.config import Settings
from harness.errors import QuestionBankError
from harness.store import AskedQuestion, AttemptRecord, CampaignStore
from questions.bank import Bank, Question
from questions.compare import best_comparable, value
from questions.triggers import best_and_measure, verified

DEFAULT_HORIZON = 3
LAYER_BONUS = 0.25
REPEAT_PENALTY = 0.15


class QuestionStats(BaseModel):
    """Measured effectiveness of one question over every campaign in the store."""

    question_id: str
    layer: str
    asked: int = 0
    resolved: int = Field(default=0, description="asks whose outcome is known (horizon elapsed or improved)")
    improved: int = Field(default=0, description="asks followed by a new best within the horizon")
    rate: float | None = Field(default=None, description="improved / resolved")
    posterior_mean: float = Field(default=0.5, description="(1 + improved) / (2 + resolved)")


class Selection(BaseModel):
    """The chosen question and why (scores are for the chosen one)."""

    question: Question
    score: float
    sampled: float = Field(description="Thompson sample of the success rate")
    layer_bonus: float
    repeat_penalty: float
    candidates: int


def ask_outcome(attempts: Sequence[AttemptRecord], attempt_seq: int, *, horizon: int = DEFAULT_HORIZON,
                min_gain: float = 0.01) -> tuple[bool | None, float, float | None]:
    """Outcome of a question asked after attempt ``attempt_seq``: (improved or None if pending, best before, best after).

    Like with like (questions/compare.py): each verified attempt among the next ``horizon`` is compared with
    the best earlier verified attempt that compares with it (one measure, the scenarios both ran); an
    attempt on scenarios no earlier attempt ran says nothing. ``best before`` is that earlier attempt's
    geomean on the measure (1.0, the original kernel, when nothing was verified before: then the later
    attempt's geomean vs the original counts); ``best after`` is ``best before`` times the best like-with-like
    ratio, so ``best after / best before - 1`` is the gain on the common scenarios.
    """
    earlier = verified([a for a in attempts if a.seq <= attempt_seq])
    found = best_and_measure(earlier)
    best_before = (value(found[0], found[1]) or 1.0) if found else 1.0
    nxt = [a for a in attempts if attempt_seq < a.seq <= attempt_seq + horizon]
    best_after: float | None = None
    best_ratio: float | None = None
    for n in verified(nxt):
        if not earlier:
            before, ratio = 1.0, n.geomean_speedup or 0.0
        else:
            hit = best_comparable(earlier, n)
            if hit is None or not hit[1].ratio:
                continue  # other scenarios than any earlier attempt: no comparison
            before, ratio = value(hit[0], hit[1].measure) or 1.0, 1 / hit[1].ratio
        if best_ratio is None or ratio > best_ratio:
            best_ratio, best_before, best_after = ratio, before, before * ratio
    if best_ratio is not None and best_ratio >= 1 + min_gain:
        return True, best_before, best_after
    if len(nxt) >= horizon:
        return False, best_before, best_after
    return None, best_before, best_after


def effectiveness(store: CampaignStore, bank: Bank | None = None, *, horizon: int = DEFAULT_HORIZON,
                  min_gain: float = 0.01) -> dict[str, QuestionStats]:
    """Per question id: asks, resolved asks and asks followed by an improvement, over all campaigns.

    Every question of ``bank`` appears (with zero counts when never asked), plus any asked id.
    """
    out: dict[str, QuestionStats] = {}
    for q in bank.questions if bank else []:
        out[q.id] = QuestionStats(question_id=q.id, layer=q.layer)
    attempts_by_campaign: dict[str, list[AttemptRecord]] = {}
    for ask in store.questions_asked(all_campaigns=True):
        if ask.campaign_id not in attempts_by_campaign:
            attempts_by_campaign[ask.campaign_id] = store.attempts(ask.campaign_id, with_source=False)
        st = out.setdefault(ask.question_id, QuestionStats(question_id=ask.question_id, layer=ask.layer))
        st.asked += 1
        improved, _, _ = ask_outcome(attempts_by_campaign[ask.campaign_id], ask.attempt_seq,
                                     horizon=horizon, min_gain=min_gain)
        if improved is not None:
            st.resolved += 1
            st.improved += int(improved)
    for st in out.values():
        st.rate = st.improved / st.resolved if st.resolved else None
        st.posterior_mean = (1 + st.improved) / (2 + st.resolved)
    return out


def rank(stats: dict[str, QuestionStats]) -> list[QuestionStats]:
    """Stats by posterior mean (best first), then by resolved asks, then id."""
    return sorted(stats.values(), key=lambda s: (-s.posterior_mean, -s.resolved, s.question_id))


def select_question(bank: Bank, trigger: str | None, *, history: Sequence[AskedQuestion],
                    stats: dict[str, QuestionStats], rng: random.Random,
                    recent_layers: int = 3, pool: Sequence[Question] | None = None) -> Selection:
    """Pick one question for ``trigger`` (None: any question). See the module docstring for the rules.

    Args:
        history: this campaign's asked questions, oldest first.
        stats: from :func:`effectiveness`; missing ids count as untried.
        rng: the source of randomness (seed it for reproducible picks).
        pool: candidate questions instead of ``bank.for_trigger(trigger)`` (general questions).

    Raises:
        QuestionBankError: no question other than the last one asked is available.
    """
    last_id = history[-1].question_id if history else None
    cands = [q for q in (pool if pool is not None else bank.for_trigger(trigger)) if q.id != last_id]
    if not cands:
        cands = [q for q in bank.questions if q.id != last_id]
    if not cands:
        raise QuestionBankError(f"no question available for trigger {trigger!r}")
    recent = {a.layer for a in list(history)[-recent_layers:]} if recent_layers > 0 else set()
    times = {}
    for a in history:
        times[a.question_id] = times.get(a.question_id, 0) + 1
    best: Selection | None = None
    for q in cands:  # bank order: deterministic sampling order
        st = stats.get(q.id)
        imp, res = (st.improved, st.resolved) if st else (0, 0)
        sampled = rng.betavariate(1 + imp, 1 + res - imp)
        bonus = LAYER_BONUS if q.layer not in recent else 0.0
        penalty = REPEAT_PENALTY * times.get(q.id, 0)
        score = sampled + bonus - penalty
        if best is None or score > best.score:
            best = Selection(question=q, score=score, sampled=sampled, layer_bonus=bonus,
                             repeat_penalty=penalty, candidates=len(cands))
    assert best is not None
    return best


def rng_for(settings: Settings, store: CampaignStore) -> random.Random:
    """A ``random.Random`` for the next pick: seeded by ``Settings.seed``, the campaign and its ask count.

    With ``seed=None`` it is unseeded (system entropy).
    """
    if settings.seed is None:
        return random.Random()
    n = len(store.questions_asked())
    return random.Random(f"{settings.seed}:{store.campaign_id}:{n}")
