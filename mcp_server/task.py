"""``get_task``'s answer: ABI, rules, suites, goal, the original kernel and the best attempt so far."""

from __future__ import annotations

from pathlib import Path

from harness import ABI_HEADER, ORIGINAL_KERNEL
from harness.abi import ABI_VERSION
from harness.anchors import ANCHOR_DESCRIPTIONS, ANCHORS, anchor_unavailable_reason
from harness.logging import get_logger
from mcp_server.models import (
    AbiInfo,
    AnchorInfo,
    BestAttempt,
    GoalInfo,
    Rules,
    SuiteInfo,
    TaskInfo,
)
from mcp_server.state import ServerState, have

log = get_logger("attnq.mcp.task")

ABI_URI = "attnq://abi/attn_abi.h"
ORIGINAL_URI = "attnq://kernels/original"
SUITES_URI = "attnq://suites"
BANK_URI = "attnq://questions/bank"
REPORT_URI = "attnq://campaign/report"

ABI_SUMMARY = (
    'One .cu file, #include "attn_abi.h", exporting with C linkage: '
    "int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) (0 = launched, nonzero = unsupported; "
    "never allocate device memory or synchronize) and optionally "
    "size_t attn_fwd_workspace_bytes(const attn_fwd_params* p). "
    "q, o: [batch, seqlen_q, num_heads_q, head_dim]; k, v: [batch, seqlen_k, num_heads_kv, head_dim] "
    "(bf16 or fp16, last dim contiguous, strides in elements); lse: [batch, num_heads_q, seqlen_q] fp32. "
    "GQA/MQA: query head h reads kv head h / (num_heads_q / num_heads_kv). "
    "lse = ln(sum_j exp(softmax_scale * q.k_j)); causal is bottom-right aligned "
    "(query i sees key j iff j <= i + seqlen_k - seqlen_q); a row that sees no key has o = 0, lse = +inf."
)

def rules() -> Rules:
    """The candidate rules; forbidden headers and allow-listed symbols come from harness.policy."""
    forbidden: list[str] = []
    allowed_libraries: list[str] = []
    allowed: dict[str, list[str]] = {}
    if have("harness.policy"):
        import harness.policy as hp

        forbidden += [f"{name}/ (any header under it): {why}" for name, why in hp.FORBIDDEN_LIBRARY_DIRS.items()]
        forbidden += [f"{name}*.h: {why}" for name, why in hp.FORBIDDEN_LIBRARY_PREFIXES.items()]
        forbidden += [f"<{name}>: {why}" for name, why in hp.FORBIDDEN_HOST_HEADERS.items()]
        allowed_libraries = list(hp.ALLOWED_LIBRARIES)
        for purpose, patterns in hp.ALLOWED_SYMBOLS.items():
            if purpose.startswith("libm"):  # ~300 names: say what they are instead
                allowed[purpose] = ["the C math functions (exp, log, sqrt, pow, fma, sin, ... and their f/l forms)"]
            else:
                allowed[purpose] = list(patterns)
    return Rules(
        one_file="A candidate is exactly one .cu file inside the workspace that includes attn_abi.h; "
                 "the harness compiles it alone (nvcc, sm_90a by default). CUB and the CUDA headers are fine.",
        forbidden=forbidden,
        allowed_libraries=allowed_libraries,
        allowed_symbols=allowed,
        notes=[
            ("attn_fwd never allocates, frees or copies device memory and never synchronizes; ask for scratch "
             "through attn_fwd_workspace_bytes (the harness passes p->workspace)."),
            "Do not modify q, k or v; write every element of o and lse.",
            ("Every scenario is checked against an fp32 reference (FlashAttention's tolerance rule) before "
             "any timing counts; a violation of these rules is a compile_kernel error naming the rule."),
        ],
    )


def suites(state: ServerState) -> list[SuiteInfo]:
    """Built-in suites with sizes and groups (harness.scenarios)."""
    if not have("harness.scenarios"):
        return []
    from harness.scenarios import list_suites, load_suite

    out = []
    for name in list_suites():
        try:
            suite = load_suite(name)
        except Exception as exc:  # noqa: BLE001 - one bad suite file must not hide the others
            log.warning("suite_unreadable", suite=name, error=str(exc))
            continue
        out.append(SuiteInfo(name=name, num_scenarios=len(suite.scenarios), groups=suite.groups(),
                             resource_uri=f"{SUITES_URI}/{name}"))
    return out


def goal(state: ServerState) -> GoalInfo:
    """The goal from Settings.goal_speedup / goal_anchor."""
    s = state.settings
    against = s.goal_anchor or "original"
    return GoalInfo(
        min_speedup=s.goal_speedup, against=against,
        text=f"every scenario of the full suite correct and geomean speedup vs {against} >= {s.goal_speedup:g}x, "
             f"judged only on a complete suite='full' run with the policy on (verdict.goal.met); quick runs are "
             f"for the inner loop",
    )


def anchors() -> list[AnchorInfo]:
    """Every anchor (harness.anchors.ANCHORS) with whether its library is here (fa3: flash_attn_interface); timing
    any of them needs the GPU too (TaskInfo.notes says when there is none)."""
    out = []
    for name in ANCHORS:
        reason = anchor_unavailable_reason(name)
        out.append(AnchorInfo(name=name, description=ANCHOR_DESCRIPTIONS[name], available=reason is None,
                              reason=reason))
    return out


def best_attempt(state: ServerState) -> BestAttempt | None:
    """The active campaign's best verified attempt, like with like: among the correct attempts that compare with
    the latest one (questions/compare.py: the goal anchor's measure, the scenarios both ran), the highest;
    earliest on ties (questions.triggers.best_and_measure, the rule campaign_status uses too); None when there
    is none yet, whatever failed or errored attempts were recorded."""
    store = state.store_if_available()
    if store is None:
        return None
    from questions.compare import describe
    from questions.triggers import best_and_measure

    found = best_and_measure(store.attempts(with_source=False))
    if found is None:
        return None
    best = found[0]
    return BestAttempt(kernel=best.source_path, source_sha256=best.source_sha256,
                       geomean_speedup=best.geomean_speedup, status=best.status,
                       suite=best.verdict.suite if best.verdict is not None else None, described=describe(*found))


def build_task(state: ServerState) -> TaskInfo:
    """Assemble the TaskInfo (cheap: no compile, no GPU)."""
    notes = [f"{m} is not installed yet: tools that need it answer with an error"
             for m in ("harness.compile", "harness.verify", "harness.scenarios", "questions.reflect") if not have(m)]
    goal_anchor = state.settings.goal_anchor
    if goal_anchor and anchor_unavailable_reason(goal_anchor):
        notes.append(f"the goal is measured against {goal_anchor}, which cannot be timed here: "
                     f"{anchor_unavailable_reason(goal_anchor)}")
    if not ORIGINAL_KERNEL.exists():
        notes.append(f"the original kernel {ORIGINAL_KERNEL} is missing")
    if state.workspace in (Path("/"), Path.home().resolve()):  # every file below it is in the tools' reach
        notes.append(f"the workspace is {state.workspace} (the folder the server started in): start it in the "
                     "project's folder or set ATTNQ_WORKSPACE, so the tools reach only that folder")
    if have("harness.verify"):
        from harness.gpu import gpu_unavailable_reason

        no_gpu = gpu_unavailable_reason(state.settings.arch, state.settings.gpu)
        if no_gpu:
            notes.append(f"no GPU to verify on: {no_gpu}. compile_kernel, reflect, declare and the question tools "
                         "work; verify_kernel compiles, then answers no_gpu")
    return TaskInfo(
        workspace=str(state.workspace),
        abi=AbiInfo(version=ABI_VERSION, header_uri=ABI_URI, header_path=state.rel(ABI_HEADER), summary=ABI_SUMMARY),
        rules=rules(),
        suites=suites(state),
        default_suite=state.settings.suite,
        goal=goal(state),
        anchors=anchors(),
        original_kernel=state.rel(ORIGINAL_KERNEL),
        original_kernel_uri=ORIGINAL_URI,
        best=best_attempt(state),
        workflow=[
            "Copy the original kernel to a new .cu file inside the workspace and edit that file.",
            "compile_kernel(path) after each edit: registers, spills, shared memory, SASS mix, or errors.",
            ("verify_kernel(path) after every change; when it answers state=running, poll "
             "get_verification(job_id) until finished."),
            "Answer every question that comes back (reflect gives one on demand) before the next change.",
            "declare(kind='limit'|'done', text) when you believe you hit a limit or reached the goal.",
            ("A bug report as a scenario: a .toml suite in the workspace (docs/checks.md, 'Scenario fields'); "
             "read attnq://suites/<file>.toml to check it loads (no GPU needed), then verify_kernel(path, "
             "suite='<file>.toml')."),
        ],
        notes=notes,
    )
