"""Campaign traces: export the whole store for publication, and summarize it.

Export (``attnq trace export``): ``json`` is one object ``{"format": "attnq-trace", "version": 1,
"exported_at", "campaigns": [{"campaign", "attempts", "questions", "claims", "events",
"human_questions"}]}``; ``jsonl`` is one record per line, each ``{"type": "campaign" | "attempt" |
"question" | "claim" | "event" | "human_question", "campaign_id", ...}``, preceded by a header line
``{"type": "header", "format": "attnq-trace", "version": 1}``. Attempts carry the archived source,
compile facts and the full verdict.

Import (``attnq trace import``, questions/trace_import.py) reads either form back into a store: each campaign
with its records, timestamps, ``seq`` and ``attempt_seq`` as exported (row ids are the store's own), all
or nothing; a campaign id that already holds records is refused (``rename_to`` imports one under another id).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Literal, TextIO

from pydantic import BaseModel, Field

from harness.store import CampaignStore, utc_now
from questions.compare import ORIGINAL, describe, measure_name, value
from questions.policy import DEFAULT_HORIZON, ask_outcome
from questions.triggers import best_and_measure, is_failure, verified

TRACE_FORMAT = "attnq-trace"
TRACE_VERSION = 1


class BestPoint(BaseModel):
    """Best so far after attempt ``seq``, like with like (None until a verified attempt): among the attempts up to
    ``seq`` that compare with the latest verified one (questions/compare.py), on ``measure``."""

    seq: int
    created_at: str
    status: str
    geomean_speedup: float | None = None
    best_geomean: float | None = Field(default=None, description="the best attempt's geomean on ``measure``")
    best_seq: int | None = None
    measure: str | None = Field(default=None, description="'original' or the goal anchor (fa3, cudnn, flash)")
    suite: str | None = Field(default=None, description="the best attempt's suite")


class QuestionOutcome(BaseModel):
    """A question asked and what followed within the horizon."""

    question_id: str
    trigger: str | None
    attempt_seq: int
    evidence: str
    best_before: float
    best_after: float | None = None
    improved: bool | None = Field(default=None, description="None while fewer than horizon attempts followed")


class CampaignSummary(BaseModel):
    """One campaign in numbers."""

    campaign_id: str
    active: bool
    attempts: int
    verified: int
    failed: int
    best_geomean: float | None = Field(default=None, description="the best attempt's geomean vs the original")
    best_seq: int | None = None
    best: str | None = Field(default=None, description="the best in words, like with like: '0.938x FA3 on full (#15)'")
    best_over_time: list[BestPoint] = Field(default_factory=list)
    triggers: dict[str, int] = Field(default_factory=dict, description="fired trigger -> questions asked")
    questions: list[QuestionOutcome] = Field(default_factory=list)
    claims: list[dict[str, Any]] = Field(default_factory=list)
    events: int = 0


class TraceSummary(BaseModel):
    """Summary of the store: every campaign (or one)."""

    campaigns: list[CampaignSummary]
    horizon: int


def _campaign_ids(store: CampaignStore, campaign_id: str | None) -> list[str]:
    ids = [c.campaign_id for c in store.list_campaigns()]
    return [campaign_id] if campaign_id else ids


def export_trace(store: CampaignStore, *, campaign_id: str | None = None) -> dict[str, Any]:
    """The whole store (or one campaign) as one JSON-ready dict (see the module docstring)."""
    infos = {c.campaign_id: c for c in store.list_campaigns()}
    out = []
    for cid in _campaign_ids(store, campaign_id):
        info = infos.get(cid)
        out.append({
            "campaign": info.model_dump(mode="json") if info else {"campaign_id": cid},
            "attempts": [a.model_dump(mode="json") for a in store.attempts(cid)],
            "questions": [q.model_dump(mode="json") for q in store.questions_asked(cid)],
            "claims": [c.model_dump(mode="json") for c in store.claims(cid)],
            "events": [e.model_dump(mode="json") for e in store.events(cid)],
            "human_questions": [h.model_dump(mode="json") for h in store.human_questions() if h.campaign_id == cid],
        })
    return {"format": TRACE_FORMAT, "version": TRACE_VERSION, "exported_at": utc_now(), "campaigns": out}


def write_trace(store: CampaignStore, out: TextIO, *, fmt: Literal["json", "jsonl"] = "jsonl",
                campaign_id: str | None = None) -> int:
    """Write the trace to ``out`` as ``json`` or ``jsonl``; returns the number of records written."""
    data = export_trace(store, campaign_id=campaign_id)
    if fmt == "json":
        out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        return sum(len(c[k]) for c in data["campaigns"] for k in ("attempts", "questions", "claims", "events"))
    n = 0
    out.write(json.dumps({"type": "header", "format": TRACE_FORMAT, "version": TRACE_VERSION,
                          "exported_at": data["exported_at"]}) + "\n")
    kinds = {"attempts": "attempt", "questions": "question", "claims": "claim", "events": "event",
             "human_questions": "human_question"}
    for c in data["campaigns"]:
        out.write(json.dumps({"type": "campaign", **c["campaign"]}) + "\n")
        for key, kind in kinds.items():
            for rec in c[key]:
                out.write(json.dumps({"type": kind, **rec}, ensure_ascii=False) + "\n")
                n += 1
    return n


def summarize(store: CampaignStore, *, campaign_id: str | None = None, horizon: int = DEFAULT_HORIZON,
              min_gain: float = 0.01) -> TraceSummary:
    """Attempts, best geomean over time, triggers, questions asked and what followed (per campaign)."""
    active = store.active_campaign()
    out = []
    for cid in _campaign_ids(store, campaign_id):
        attempts = store.attempts(cid, with_source=False)
        points = []
        for i, a in enumerate(attempts):
            found = best_and_measure(attempts[: i + 1])
            b, m = found if found is not None else (None, None)
            points.append(BestPoint(seq=a.seq, created_at=a.created_at, status=a.status,
                                    geomean_speedup=a.geomean_speedup,
                                    best_geomean=value(b, m) if b is not None and m else None,
                                    best_seq=b.seq if b else None, measure=m,
                                    suite=b.verdict.suite if b is not None and b.verdict else None))
        asked = store.questions_asked(cid)
        outcomes = []
        for q in asked:
            imp, before, after = ask_outcome(attempts, q.attempt_seq, horizon=horizon, min_gain=min_gain)
            outcomes.append(QuestionOutcome(question_id=q.question_id, trigger=q.trigger, attempt_seq=q.attempt_seq,
                                            evidence=q.evidence, best_before=before, best_after=after, improved=imp))
        found = best_and_measure(attempts)
        best = found[0] if found else None
        out.append(CampaignSummary(
            campaign_id=cid, active=cid == active, attempts=len(attempts), verified=len(verified(attempts)),
            failed=sum(1 for a in attempts if is_failure(a)),
            best_geomean=best.geomean_speedup if best else None, best_seq=best.seq if best else None,
            best=describe(*found) if found else None, best_over_time=points, triggers=dict(Counter(q.trigger for q in asked if q.fired and q.trigger)),
            questions=outcomes,
            claims=[{"kind": c.kind, "text": c.text, "attempt_seq": c.attempt_seq, "goal_met": c.goal_met}
                    for c in store.claims(cid)],
            events=len(store.events(cid))))
    return TraceSummary(campaigns=out, horizon=horizon)


def _digits(v: float | None) -> int:
    return 3 if v is not None and v < 10 else 2


def _best_over_time(points: list[BestPoint]) -> str:
    out, where = [], None
    for p in points:
        if p.best_geomean is None or p.measure is None:
            out.append(f"#{p.seq}:-")
            continue
        here = f"[{measure_name(p.measure)} on {p.suite}]"
        digits = 2 if p.measure == ORIGINAL else 3
        out.append((f"{here} " if here != where else "") + f"#{p.seq}:{p.best_geomean:.{digits}f}"
                   + (f"(#{p.best_seq})" if p.best_seq != p.seq else ""))
        where = here
    return " ".join(out)


def render_summary(summary: TraceSummary) -> str:
    """Plain-text rendering of :func:`summarize` for ``attnq trace show``."""
    lines: list[str] = []
    for c in summary.campaigns:
        best = c.best or (f"{c.best_geomean:.2f}x (#{c.best_seq})" if c.best_geomean else "-")
        lines.append(f"campaign {c.campaign_id}{' (active)' if c.active else ''}: {c.attempts} attempts, "
                     f"{c.verified} verified, {c.failed} failed; best {best}; {c.events} events")
        if c.best_over_time:
            lines.append("  best over time (like with like; the measure and suite named where they change): "
                         + _best_over_time(c.best_over_time))
        if c.triggers:
            lines.append("  triggers: " + ", ".join(f"{k} x{v}" for k, v in sorted(c.triggers.items())))
        for q in c.questions:
            follow = ("pending" if q.improved is None else
                      f"improved to {q.best_after:.{_digits(q.best_after)}f}x" if q.improved else "no improvement")
            known = any(p.best_geomean for p in c.best_over_time if p.seq <= q.attempt_seq)
            before = f"{q.best_before:.{_digits(q.best_before)}f}x" if known else "-"
            lines.append(f"  after #{q.attempt_seq} [{q.trigger or 'general'}] {q.question_id}: "
                         f"best {before} -> {follow} (next {summary.horizon})")
        for cl in c.claims:
            lines.append(f"  claim {cl['kind']} after #{cl['attempt_seq']}: {cl['text']!r} (goal met: {cl['goal_met']})")
    return "\n".join(lines) if lines else "no campaigns"
