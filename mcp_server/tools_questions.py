"""Question tools: reflect, declare, add_question, list_questions, campaign_status.

Thin adapters over ``questions/`` (reflect, declare, human, bank) and ``harness.store``; see
docs/api-questions.md for the functions they call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from mcp_server.models import (
    AskedSummary,
    AttemptSummary,
    CampaignStatus,
    ClaimSummary,
    QuestionList,
)
from mcp_server.state import ServerState, need
from mcp_server.task import goal
from mcp_server.tools_evolve import evolve_status_of
from questions.compare import describe
from questions.human import MAX_QUESTION_CHARS, MIN_QUESTION_CHARS
from questions.text import MAX_CLAIM_CHARS
from questions.triggers import best_and_measure

# The questions layer is another part's; a partial install still serves the other tools, with
# plain JSON objects as structured output instead of the models.
try:
    from questions.reflect import Declaration as DeclareOutput
    from questions.reflect import Reflection as ReflectOutput
except ImportError:  # pragma: no cover
    ReflectOutput = DeclareOutput = dict[str, Any]  # type: ignore[misc,assignment]
try:
    from questions.human import HumanQuestionResult as AddedOutput
except ImportError:  # pragma: no cover
    AddedOutput = dict[str, Any]  # type: ignore[misc,assignment]


def _out(value: Any) -> Any:
    """The model's JSON form: valid both for the model output type and for the dict fallback."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value

Trigger = Literal["stall", "declared_limit", "declared_done", "suspicious_win", "churn"]
Layer = Literal["measurement", "memory_traffic", "pipelining", "parallelism_scheduling",
                "instruction_mix_registers", "numerics", "correctness_edge_cases", "search_strategy"]

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, destructive_hint=False, open_world_hint=False)
RECORDING = ToolAnnotations(read_only_hint=False, idempotent_hint=False, destructive_hint=False,
                            open_world_hint=False)


def _attempt(a: Any, described: str | None = None) -> AttemptSummary:
    return AttemptSummary(seq=a.seq, created_at=a.created_at, source_path=a.source_path, status=a.status,
                          error_code=a.error_code, geomean_speedup=a.geomean_speedup, goal_met=a.goal_met,
                          num_correct=a.num_correct, num_scenarios=a.num_scenarios,
                          suite=a.verdict.suite if a.verdict is not None else None, described=described)


def _asked(q: Any) -> AskedSummary:
    return AskedSummary(created_at=q.created_at, trigger=q.trigger, fired=q.fired, question_id=q.question_id,
                        question=q.text, evidence=q.evidence, attempt_seq=q.attempt_seq)


def campaign_status_of(state: ServerState) -> CampaignStatus:
    """Build the CampaignStatus from the store (blocking; call in a thread)."""
    store = state.store()
    attempts = store.attempts(with_source=False)
    asked = store.questions_asked()
    claims = store.claims()
    found = best_and_measure(attempts)  # the same rule as get_task.best: like with like (questions/compare.py)
    return CampaignStatus(
        campaign_id=store.campaign_id, workspace=str(state.workspace), goal=goal(state), attempts=len(attempts),
        best=_attempt(found[0], describe(*found)) if found else None, recent_attempts=[_attempt(a) for a in attempts[-5:]],
        questions_asked=len(asked), recent_triggers=[_asked(q) for q in asked if q.fired][-5:],
        recent_questions=[_asked(q) for q in asked[-5:]],
        claims=[ClaimSummary(created_at=c.created_at, kind=c.kind, text=c.text, attempt_seq=c.attempt_seq,
                             goal_met=c.goal_met) for c in claims[-5:]],
        running_jobs=[j.job_id for j in state.jobs.jobs() if not j.finished],
        evolve=evolve_status_of(state),
    )


def register_question_tools(server: MCPServer, state: ServerState, *, edge: Callable[[str], Any]) -> None:
    """Register reflect, declare, add_question, list_questions and campaign_status."""
    settings = state.settings

    @server.tool(annotations=RECORDING)
    @edge("reflect")
    async def reflect(
        trigger: Annotated[Trigger | None, Field(
            description="the moment you are in, if you know it: stall (no gain for several attempts), "
                        "declared_limit, declared_done, suspicious_win (a jump that may be a measurement "
                        "or correctness artefact), churn (many small edits); default: detected from the "
                        "campaign")] = None,
        claim: Annotated[str | None, Field(
            max_length=MAX_CLAIM_CHARS,
            description="a claim in words that you hit a limit or are done. Recorded as a claim only with trigger "
                        "declared_limit or declared_done (the kind is yours to give; or call declare); otherwise "
                        "the answer's suggested_claim says which kind the words suggest. Omit it to just ask")] = None,
    ) -> ReflectOutput:
        """Ask for a question about your optimization: the server looks at the campaign (attempts, best so far,
        what was already asked) and returns ONE question with the trigger that fired and the evidence (numbers
        from your attempts). Answer it in your reasoning and let it shape your next change. Call it when you
        are unsure what to try next, after several attempts without gain, or before a big rewrite. The
        question is recorded in the campaign."""

        def run() -> Any:
            mod = need("questions.reflect")
            return mod.reflect(state.store(), state.bank(), trigger=trigger, claim=claim, settings=settings)

        return _out(await anyio.to_thread.run_sync(run))

    @server.tool(annotations=RECORDING)
    @edge("declare")
    async def declare(
        kind: Annotated[Literal["limit", "done"], Field(
            description="limit: you believe the kernel cannot get meaningfully faster; done: you believe the "
                        "goal is met")],
        text: Annotated[str, Field(min_length=1, max_length=MAX_CLAIM_CHARS,
                                   description="the claim and its evidence in your words (what limits it, or "
                                               "why it is done)")],
    ) -> DeclareOutput:
        """Declare that you hit a limit or that you are done. The claim is recorded and checked against the
        measurements: goal_met says whether the best verified attempt meets the goal (every scenario correct and
        geomean speedup >= the goal), goal explains the gap or the failing scenarios. The answer carries the
        question for that moment (declared_limit / declared_done): answer it before you stop. A 'done' claim
        without a verified attempt that meets the goal is reported as not met."""

        def run() -> Any:
            mod = need("questions.reflect")
            return mod.declare(state.store(), state.bank(), kind, text, settings=settings)

        return _out(await anyio.to_thread.run_sync(run))

    @server.tool(annotations=RECORDING)
    @edge("add_question")
    async def add_question(
        text: Annotated[str, Field(min_length=MIN_QUESTION_CHARS, max_length=MAX_QUESTION_CHARS,
                                   description="one short question, ending in '?', that helped or would help")],
        triggers: Annotated[list[Trigger] | None, Field(
            description="moments it fits (stall, declared_limit, declared_done, suspicious_win, churn)")] = None,
        layer: Annotated[Layer | None, Field(description="what the question is about (memory_traffic, "
                                                         "pipelining, numerics, ...)")] = None,
    ) -> AddedOutput:
        """Add a question to the campaign's record of human/agent questions: ONE question ending in '?', without
        control characters. The same question twice in one campaign is recorded once. A question asked in two or
        more campaigns (the same words after normalization, or a rewording that changes no content word,
        negation or number) is promoted into the bank and can then be asked by reflect. With an HTTP server
        shared by a team, this is how the team's bank grows."""

        mod = need("questions.human")
        mod.check_question_text(text)  # the rules of `attnq questions add`, before the store is touched

        def run() -> Any:
            return mod.add_question(state.store(), text, triggers=triggers, layer=layer)

        return _out(await anyio.to_thread.run_sync(run))

    @server.tool(annotations=READ_ONLY)
    @edge("list_questions")
    async def list_questions(
        trigger: Annotated[Trigger | None, Field(description="only questions for this moment; default: all")] = None,
        layer: Annotated[Layer | None, Field(description="only questions about this layer; default: all")] = None,
    ) -> QuestionList:
        """List the question bank (built-in, promoted, team and personal banks merged), optionally filtered by
        trigger and layer, with its sources and coverage (trigger -> layer -> count)."""

        def run() -> QuestionList:
            bank = state.bank()
            qs = [q for q in bank.for_trigger(trigger) if layer is None or q.layer == layer]
            return QuestionList(count=len(qs), questions=[q.model_dump(mode="json") for q in qs],
                                sources=list(bank.sources), coverage=bank.coverage())

        return await anyio.to_thread.run_sync(run)

    @server.tool(annotations=READ_ONLY)
    @edge("campaign_status")
    async def campaign_status() -> CampaignStatus:
        """Where the campaign stands: number of attempts, the best correct attempt (geomean speedup), the last
        attempts, triggers that fired recently, questions asked, claims made and verification jobs still
        running."""
        return await anyio.to_thread.run_sync(campaign_status_of, state)
