"""Pydantic output models of the MCP tools (the ``structuredContent`` a client receives).

Harness models (``CompileResult``, ``Verdict``, ``ScenarioResult``, ``VerifyProgress``) are reused as
they are; the models here only add what the MCP edge itself knows: the task brief, job state, and the
question that a verification or a claim brings with it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from evolve.report import RunStatus
from harness.verdict import ScenarioResult, Verdict

try:  # the questions layer is another part's; fall back to a plain object in a partial install
    from questions.reflect import Reflection as QuestionModel
except ImportError:  # pragma: no cover
    QuestionModel = dict[str, Any]  # type: ignore[misc]


class AbiInfo(BaseModel):
    """The kernel ABI in brief; the full header is the resource at ``header_uri``."""

    version: int = Field(description="ATTN_ABI_VERSION the harness speaks")
    header_uri: str = Field(description="MCP resource URI of kernels/attn_abi.h")
    header_path: str = Field(description="path of attn_abi.h (relative to the workspace when inside it)")
    summary: str = Field(description="entry points, shapes and semantics in a few lines")


class Rules(BaseModel):
    """What a candidate may and may not do (enforced by harness.compile's source policy)."""

    one_file: str = Field(description="a candidate is one .cu file that includes attn_abi.h")
    forbidden: list[str] = Field(default_factory=list, description="headers/libraries a candidate may not use, with why")
    allowed_libraries: list[str] = Field(default_factory=list, description="shared libraries a build may link")
    allowed_symbols: dict[str, list[str]] = Field(
        default_factory=dict, description="imported symbols a build may use (fnmatch patterns) by purpose; "
                                          "anything else is refused")
    notes: list[str] = Field(default_factory=list, description="further rules (no device malloc, no device sync, ...)")


class SuiteInfo(BaseModel):
    """One scenario suite: its name, size and groups."""

    name: str
    num_scenarios: int
    groups: dict[str, int] = Field(default_factory=dict, description="scenario count per group")
    resource_uri: str = Field(description="MCP resource with the suite's scenarios")


class GoalInfo(BaseModel):
    """The verifiable stop condition (harness.config.Settings.goal_speedup / goal_anchor)."""

    min_speedup: float = Field(description="geomean speedup to reach, all scenarios correct")
    against: str = Field(description="original, cudnn, flash or fa3")
    text: str


class AnchorInfo(BaseModel):
    """A library kernel verify_kernel can time next to the candidate (its ``anchors`` argument)."""

    name: str = Field(description="cudnn, flash or fa3")
    description: str
    available: bool = Field(description="whether this server can time it")
    reason: str | None = Field(default=None, description="why not, and how to make it available")


class BestAttempt(BaseModel):
    """The best verified attempt so far in this workspace's campaign (None fields: unknown)."""

    kernel: str | None = None
    source_sha256: str | None = None
    geomean_speedup: float | None = None
    status: str | None = None
    suite: str | None = None
    described: str | None = Field(default=None, description="its geomean on the measure it was chosen on (the "
                                  "goal anchor where known), with its suite, e.g. '0.938x FA3 on full (#15)'")


class TaskInfo(BaseModel):
    """Everything an agent needs to start a campaign: ABI, rules, suites, goal, kernels, best so far."""

    workspace: str
    abi: AbiInfo
    rules: Rules
    suites: list[SuiteInfo]
    default_suite: str
    goal: GoalInfo
    anchors: list[AnchorInfo] = Field(default_factory=list, description="verify_kernel's anchors and "
                                      "whether each can be timed here")
    original_kernel: str = Field(description="path of the original kernel (relative to the workspace when inside it)")
    original_kernel_uri: str
    best: BestAttempt | None = Field(default=None, description="best verified attempt so far (correct, highest "
                                     "geomean; the same as campaign_status.best); None until one exists")
    workflow: list[str] = Field(description="the loop the server expects: edit, compile, verify, reflect, declare")
    notes: list[str] = Field(default_factory=list, description="what is not available on this machine, if anything")


JobState = Literal["running", "finished", "failed", "cancelled"]


class JobStatus(BaseModel):
    """A verification job: its state, progress, finished scenarios and, once done, the verdict.

    ``state``: running | finished (verdict set) | failed (error set) | cancelled. Poll a running job
    with ``get_verification(job_id)``; every finished job stays fetchable for the server's lifetime.
    """

    job_id: str
    state: JobState
    kernel: str
    suite: str
    elapsed_s: float
    done: int = Field(default=0, description="scenarios finished")
    total: int | None = Field(default=None, description="scenarios in the run, once known")
    message: str = ""
    results: list[ScenarioResult] = Field(default_factory=list, description="scenarios finished so far, while "
                                          "running (once finished they are in verdict.scenarios)")
    verdict: Verdict | None = None
    error: dict[str, Any] | None = Field(default=None, description="{error, message, ...} when state == failed")
    scenarios_omitted: int = Field(default=0, description="per-scenario results left out to keep the answer short "
                                   "(detail='summary'); ask again with detail='full' for all of them")
    question: QuestionModel | None = Field(default=None, description="the question a trigger raised, if any: answer "
                                                                    "it before your next change")
    next_step: str = ""


class CancelResult(BaseModel):
    """Answer of cancel_verification."""

    job_id: str
    state: JobState
    message: str


class AttemptSummary(BaseModel):
    """One recorded attempt (a verification), without its source or per-scenario rows."""

    seq: int = Field(description="attempt number in the campaign (#seq)")
    created_at: str
    source_path: str
    status: str = Field(description="correct | incorrect | error | failed_compile | compiled")
    error_code: str | None = None
    geomean_speedup: float | None = None
    goal_met: bool | None = None
    num_correct: int | None = None
    num_scenarios: int | None = None
    suite: str | None = Field(default=None, description="the suite it was verified on")
    described: str | None = Field(default=None, description="for the best: its geomean on the measure it was "
                                  "chosen on, with its suite, e.g. '0.938x FA3 on full (#15)'")


class AskedSummary(BaseModel):
    """A question the campaign was asked, and why."""

    created_at: str
    trigger: str | None = Field(description="stall, declared_limit, declared_done, suspicious_win, churn; None: on demand")
    fired: bool
    question_id: str
    question: str
    evidence: str
    attempt_seq: int


class ClaimSummary(BaseModel):
    """A limit/done claim and whether the goal was met when it was made."""

    created_at: str
    kind: str
    text: str
    attempt_seq: int
    goal_met: bool | None = None


class CampaignStatus(BaseModel):
    """Where the campaign stands: attempts, best, recent triggers, questions asked, claims, running jobs."""

    campaign_id: str
    workspace: str
    goal: GoalInfo
    attempts: int
    best: AttemptSummary | None = Field(default=None, description="highest geomean among correct attempts")
    recent_attempts: list[AttemptSummary] = Field(default_factory=list, description="last 5, oldest first")
    questions_asked: int
    recent_triggers: list[AskedSummary] = Field(default_factory=list, description="last 5 fired triggers")
    recent_questions: list[AskedSummary] = Field(default_factory=list, description="last 5 questions asked")
    claims: list[ClaimSummary] = Field(default_factory=list, description="last 5 claims")
    running_jobs: list[str] = Field(default_factory=list, description="job ids of verifications still running")
    evolve: list[RunStatus] = Field(default_factory=list, description="the campaign's evolve runs (attnq evolve)")


class QuestionList(BaseModel):
    """Questions of the bank (filtered), with where they came from and coverage per trigger and layer."""

    count: int
    questions: list[dict[str, Any]]
    sources: list[str] = Field(default_factory=list, description="bank files and layers merged, in order")
    coverage: dict[str, dict[str, int]] = Field(default_factory=dict, description="trigger -> layer -> count")
