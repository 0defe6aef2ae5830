"""reflect, declare and on_attempt: one short question at the right moment, with its evidence.

- :func:`on_attempt` (called by the verify edges after every attempt) records the attempt and
  returns a question when ``stall``, ``suspicious_win`` or ``churn`` fires (with cooldown, see
  questions/triggers.py), else None.
- :func:`reflect` answers on demand: the given trigger, or the first that fires, or — when none
  fires — says so and asks the best general question for the current state.
- :func:`declare` records an explicit claim (``limit`` / ``done``), checks the goal and answers
  with the question for that moment.
Every question asked is recorded in the store (trigger, evidence, question id).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness.config import Settings
from harness.errors import InputError
from harness.logging import get_logger
from harness.store import AttemptRecord, CampaignStore
from harness.verdict import Verdict
from questions.bank import TRIGGERS, Bank, Layer, Question, Trigger
from questions.policy import effectiveness, rng_for, select_question
from questions.text import MAX_CLAIM_CHARS, clean_text
from questions.triggers import (
    NOT_ATTEMPT_CODES,
    TriggerHit,
    check_churn,
    check_goal,
    check_stall,
    check_suspicious_win,
    detect,
    limit_evidence,
    state_summary,
    verified,
)

log = get_logger(__name__)


class Reflection(BaseModel):
    """A question for the agent, the trigger that called for it and the evidence in numbers."""

    campaign_id: str
    trigger: Trigger | None = Field(description="None: no trigger fired, a general question")
    fired: bool = Field(description="True when the trigger's rule fired (or a claim was made)")
    question_id: str
    question: str
    layer: Layer
    evidence: str
    evidence_data: dict[str, Any] = Field(default_factory=dict)
    other_triggers: list[TriggerHit] = Field(default_factory=list, description="other rules that fired")
    attempt_seq: int = Field(description="attempts recorded when asked (0 = none)")
    message: str = Field(description="one line: '[trigger] evidence — question'")
    suggested_claim: Literal["limit", "done"] | None = Field(
        default=None, description="reflect(claim=...) without a declared_* trigger records no claim: the kind its "
                                  "words suggest, if any; record it with declare(kind, text)")


class Declaration(BaseModel):
    """The answer to a claim: the recorded claim, the goal check and the question."""

    kind: Literal["limit", "done"]
    text: str
    claim_id: int
    goal_met: bool | None
    goal: str = Field(description="goal check in words: met, or failing scenarios / gap to the goal")
    reflection: Reflection


#: Layers for a general question before any attempt has been verified: make the numbers trustworthy first.
EARLY_LAYERS = ("measurement", "correctness_edge_cases", "search_strategy")


def general_pool(bank: Bank, attempts: Sequence[AttemptRecord]) -> list[Question]:
    """Candidates for a general question (no trigger fired) given the campaign state.

    No verified attempt yet: questions of :data:`EARLY_LAYERS`. Otherwise the questions that fit
    ``stall`` (they look for the next bottleneck), which is what an on-track agent needs next.
    """
    if not verified(attempts):
        return [q for q in bank.questions if q.layer in EARLY_LAYERS] or list(bank.questions)
    return bank.for_trigger("stall") or list(bank.questions)


def fitting_state(pool: Sequence[Question], attempts: Sequence[AttemptRecord]) -> list[Question]:
    """Drop questions whose premise does not hold: ``requires="attempts"`` needs some recorded attempt
    (asking "which earlier attempt is this one closest to?" of an empty campaign makes no sense);
    ``requires="failures"`` needs the latest verified
    attempt to have failed scenarios (asking "what do the failing scenarios share?" of an all-correct
    run wastes the moment); ``requires="verified"`` needs a measurement, i.e. some attempt verified with
    a geomean (asking "does the gain hold?" before anything was timed does too). Falls back to the pool
    as given when nothing would be left."""
    judged = [a for a in attempts if a.status in ("correct", "incorrect")]
    holds = {"attempts": bool(attempts), "failures": bool(judged and judged[-1].failed),
             "verified": any(a.geomean_speedup is not None for a in judged)}
    kept = [q for q in pool if q.requires is None or holds[q.requires]]
    return kept or list(pool)


def _ask(store: CampaignStore, bank: Bank, settings: Settings, trigger: str | None, fired: bool,
         evidence: str, data: dict[str, Any], others: list[TriggerHit] | None = None,
         pool: list[Question] | None = None) -> Reflection:
    history = store.questions_asked()
    stats = effectiveness(store, bank, min_gain=settings.stall_min_gain)
    pool = fitting_state(pool if pool is not None else bank.for_trigger(trigger), store.attempts(with_source=False))
    sel = select_question(bank, trigger, history=history, stats=stats, rng=rng_for(settings, store), pool=pool)
    q = sel.question
    asked = store.record_question(q.id, q.text, layer=q.layer, trigger=trigger, fired=fired, evidence=evidence,
                                  evidence_data=data)
    label = trigger or "no trigger"
    log.info("question_asked", campaign=store.campaign_id, trigger=trigger, question_id=q.id)
    return Reflection(campaign_id=store.campaign_id, trigger=trigger, fired=fired,  # type: ignore[arg-type]
                      question_id=q.id, question=q.text, layer=q.layer, evidence=evidence, evidence_data=data,
                      other_triggers=others or [], attempt_seq=asked.attempt_seq,
                      message=f"[{label}] {evidence} — {q.text}")


def goal_suite_ids() -> frozenset[str]:
    """The scenario ids of the goal suite as it is now (harness.scenarios.GOAL_SUITE, ``full``): a verdict counts
    toward the goal only if it ran all of them (questions.triggers.check_goal)."""
    from harness.scenarios import GOAL_SUITE, load_suite

    return frozenset(load_suite(GOAL_SUITE).ids())


def _check(trigger: str, store: CampaignStore, settings: Settings) -> TriggerHit:
    attempts = store.attempts()
    if trigger == "stall":
        return check_stall(attempts, settings, store.questions_asked())
    if trigger == "suspicious_win":
        return check_suspicious_win(attempts, settings)
    if trigger == "churn":
        return check_churn(attempts)
    if trigger == "declared_done":
        return check_goal(attempts, settings.goal_speedup, goal_suite_ids())
    return limit_evidence(attempts)


_DONE_WORDS = re.compile(r"\b(done|finished|complete|completed|goal met|goal is met|ship it)\b", re.IGNORECASE)
_LIMIT_WORDS = re.compile(r"\b(limit|limited|bound|ceiling|plateau|roofline|peak|cannot get faster|"
                          r"can't get faster|no further|as fast as)\b", re.IGNORECASE)
_NEGATED = re.compile(r"\b(not|never|no|cannot|can't|isn't|aren't|haven't|hasn't|won't|yet to)\W+(?:\w+\W+){0,2}$",
                      re.IGNORECASE)


def suggest_claim_kind(text: str) -> Literal["limit", "done"] | None:
    """The claim kind free text suggests, or None: ``done`` only when a done-word is not negated in the three
    words before it ("not done yet: I cannot complete it" suggests nothing); ``limit`` for limit words."""
    for m in _DONE_WORDS.finditer(text):
        if not _NEGATED.search(text[: m.start()]):
            return "done"
    return "limit" if _LIMIT_WORDS.search(text) else None


def reflect(store: CampaignStore, bank: Bank, *, trigger: Trigger | None = None, claim: str | None = None,
            settings: Settings) -> Reflection:
    """The question for now, with its trigger and evidence; records the question asked.

    Args:
        trigger: force this trigger's questions (its rule's evidence is reported, fired or not).
        claim: the agent's claim in words. With ``trigger`` declared_limit / declared_done it is recorded as
            that claim (like :func:`declare`); otherwise nothing is recorded as a claim (the kind is the
            caller's to give, never guessed from words) and the answer carries ``suggested_claim``.

    Raises:
        InputError: unknown trigger; a claim with control characters or over MAX_CLAIM_CHARS.
        StoreError / QuestionBankError from the store and the bank.
    """
    if trigger is not None and trigger not in TRIGGERS:
        raise InputError(f"unknown trigger {trigger!r}; one of {', '.join(TRIGGERS)}")
    if claim is not None:
        claim = clean_text(claim, what="the claim", max_chars=MAX_CLAIM_CHARS)
        if trigger in ("declared_limit", "declared_done"):
            kind: Literal["limit", "done"] = "done" if trigger == "declared_done" else "limit"
            return declare(store, bank, kind, claim, settings=settings).reflection
        refl = reflect(store, bank, trigger=trigger, settings=settings)
        refl.suggested_claim = suggest_claim_kind(claim)
        kinds = refl.suggested_claim or "limit' or 'done"
        refl.message += (f" (the claim was not recorded: call declare(kind='{kinds}', text=...) to record it)")
        return refl
    if trigger is not None:
        hit = _check(trigger, store, settings)
        fired = hit.fired or trigger in ("declared_limit", "declared_done")
        return _ask(store, bank, settings, trigger, fired, hit.evidence, hit.data)
    attempts = store.attempts()
    hits = detect(attempts, store.questions_asked(), settings, cooldown=False)
    if hits:
        top = hits[0]
        return _ask(store, bank, settings, top.trigger, True, top.evidence, top.data, hits[1:])
    evidence = f"no trigger fired: {state_summary(attempts)}"
    return _ask(store, bank, settings, None, False, evidence, {"attempts": len(attempts)},
                pool=general_pool(bank, attempts))


def declare(store: CampaignStore, bank: Bank, kind: Literal["limit", "done"], text: str, *,
            settings: Settings) -> Declaration:
    """Record the claim ``kind`` ("limit" or "done") with its ``text``, check the goal, ask the question.

    For ``done`` the goal is checked on ``Verdict.goal`` of the latest and best verified attempts; when
    not met the answer names the failing scenarios or the gap.

    Raises:
        InputError: another kind; empty text, control characters or more than MAX_CLAIM_CHARS characters.
    """
    if kind not in ("limit", "done"):
        raise InputError(f"a claim is 'limit' or 'done', got {kind!r}")
    if not isinstance(text, str) or not text.strip():
        raise InputError("a claim needs its text (what the agent claims, in its words)")
    text = clean_text(text, what="the claim", max_chars=MAX_CLAIM_CHARS)
    attempts = store.attempts(with_source=False)
    goal = check_goal(attempts, settings.goal_speedup, goal_suite_ids())
    goal_met = bool(goal.data.get("goal_met", False))
    goal_txt = goal.evidence
    trigger = "declared_done" if kind == "done" else "declared_limit"
    if kind == "done":
        hit = goal
        evidence = f'claim "done": "{text}"; {goal_txt}'
    else:
        hit = limit_evidence(attempts)
        evidence = f'claim "limit": "{text}"; {hit.evidence}; {goal_txt}'
    claim = store.record_claim(kind, text, goal_met=goal_met)
    data = {**hit.data, "claim_id": claim.id, "claim": text, "goal_met": goal_met}
    refl = _ask(store, bank, settings, trigger, True, evidence, data)
    store.update_claim_answer(claim.id, {"goal": goal_txt, "goal_met": goal_met, "question_id": refl.question_id,
                                         "question": refl.question, "evidence": evidence})
    return Declaration(kind=kind, text=text, claim_id=claim.id, goal_met=goal_met, goal=goal_txt, reflection=refl)


def on_attempt(store: CampaignStore, bank: Bank, *, source_path: str, source_text: str | None,
               compile_result: Any, verdict: Verdict | None, error: dict[str, Any] | None,
               settings: Settings) -> Reflection | None:
    """Record one attempt (see ``CampaignStore.record_attempt``); a Reflection when stall/suspicious_win/churn fires.

    Called by ``attnq verify`` and the MCP ``verify_kernel`` tool after every verification, successful or
    not. A verification that never judged the candidate (error code in
    :data:`questions.triggers.NOT_ATTEMPT_CODES`: no GPU, no toolchain, bad input) is recorded as an event
    (``verify.not_an_attempt``), not as an attempt, and asks nothing. Cooldown rules keep one stall from
    being asked about on every attempt.
    """
    code = str((error or {}).get("error", "")) if verdict is None else ""
    if code in NOT_ATTEMPT_CODES:
        store.record_event("verify.not_an_attempt", args={"source_path": source_path},
                           result={"error": code, "message": str((error or {}).get("message", ""))[:500]}, ok=False)
        return None
    store.record_attempt(source_path, source_text, compile_result, verdict, error)
    hits = detect(store.attempts(), store.questions_asked(), settings, cooldown=True)
    if not hits:
        return None
    top = hits[0]
    return _ask(store, bank, settings, top.trigger, True, top.evidence, top.data, hits[1:])


def record_verified_attempt(path: str, verdict: Verdict | None, settings: Settings, *,
                            compile_result: Any = None, error: dict[str, Any] | None = None,
                            base: Any = None) -> dict[str, Any] | None:
    """Convenience for the CLI verify edge: open the workspace store and bank, run :func:`on_attempt`.

    Reads the source text from ``path`` (a relative one resolved in ``base``, default the workspace: the CLI passes
    the folder it compiled in, so a workspace elsewhere cannot lend another file's text (red team, session 24); None
    when unreadable or when its bytes are not the ones built: harness.snapshot.text_if_built). Returns the
    Reflection as a JSON dict (keys ``trigger``, ``question``, ``evidence``, ``message`` ...) or None.
    """
    from pathlib import Path

    from harness.snapshot import text_if_built
    from questions.bank import load_bank

    p = Path(path)
    full = p if p.is_absolute() else Path(settings.workspace if base is None else base) / p
    try:
        data: bytes | None = full.read_bytes()
    except OSError:
        data = None
    built = verdict.source_sha256 if verdict is not None else getattr(compile_result, "source_sha256", None)
    text = text_if_built(data, built)
    with CampaignStore.open(settings) as store:
        r = on_attempt(store, load_bank(settings=settings, store=store), source_path=str(path), source_text=text,
                       compile_result=compile_result, verdict=verdict, error=error, settings=settings)
    return None if r is None else r.model_dump(mode="json")
