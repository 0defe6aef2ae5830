"""Resources (ABI header, original kernel, suites, question bank, campaign report) and the prompt
that starts a campaign."""

from __future__ import annotations

import json
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError

from harness import ABI_HEADER, ORIGINAL_KERNEL
from harness.errors import AttnqError
from mcp_server.edge import format_error
from mcp_server.state import ServerState, need
from mcp_server.task import ABI_URI, BANK_URI, ORIGINAL_URI, REPORT_URI, SUITES_URI, goal, suites
from mcp_server.tools_questions import campaign_status_of


def _read(path: Any) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResourceError(f"{path} cannot be read: {exc.strerror}") from None


def _guard(fn: Any) -> Any:
    """Run a resource body; AttnqError / ToolError become a ResourceError with the tools' text (``[code] message``)."""
    try:
        return fn()
    except AttnqError as err:
        raise ResourceError(format_error(err)) from None
    except ToolError as err:
        raise ResourceError(str(err)) from None


def report_markdown(state: ServerState) -> str:
    """The campaign report: goal, best, recent attempts, triggers, questions and claims (markdown)."""
    st = campaign_status_of(state)
    lines = [f"# attnq campaign `{st.campaign_id}`", "", f"Workspace: `{st.workspace}`", f"Goal: {st.goal.text}", ""]
    if st.best:
        speed = st.best.described or f"{st.best.geomean_speedup:.3f}x"
        lines.append(f"Best: #{st.best.seq} `{st.best.source_path}` {speed} "
                     f"({st.best.num_correct}/{st.best.num_scenarios} correct, goal met: {st.best.goal_met})")
    else:
        lines.append("Best: no correct attempt yet")
    lines += ["", f"## Attempts ({st.attempts}; last {len(st.recent_attempts)})", "",
              "| # | kernel | status | geomean | correct |", "| --- | --- | --- | --- | --- |"]
    for a in st.recent_attempts:
        speed = f"{a.geomean_speedup:.3f}x" if a.geomean_speedup is not None else "-"
        status = a.status + (f" ({a.error_code})" if a.error_code else "")
        lines.append(f"| {a.seq} | `{a.source_path}` | {status} | {speed} | {a.num_correct}/{a.num_scenarios} |")
    lines += ["", f"## Questions asked ({st.questions_asked})", ""]
    for q in st.recent_questions:
        lines.append(f"- after #{q.attempt_seq} [{q.trigger or 'on demand'}] {q.question}  \n  evidence: {q.evidence}")
    if st.claims:
        lines += ["", "## Claims", ""]
        lines += [f"- after #{c.attempt_seq} {c.kind}: {c.text} (goal met: {c.goal_met})" for c in st.claims]
    if st.running_jobs:
        lines += ["", f"Running verifications: {', '.join(st.running_jobs)}"]
    return "\n".join(lines) + "\n"


def register_resources(server: MCPServer, state: ServerState) -> None:
    """Register the resources and the start_campaign prompt."""

    @server.resource(ABI_URI, name="attn_abi.h", title="Kernel ABI header", mime_type="text/x-c",
                     description="kernels/attn_abi.h: the contract a candidate implements (shapes, semantics)")
    def abi_header() -> str:
        return _read(ABI_HEADER)

    @server.resource(ORIGINAL_URI, name="attn_original.cu", title="Original kernel", mime_type="text/x-c",
                     description="the original kernel every speedup is measured against; copy it to start")
    def original_kernel() -> str:
        return _read(ORIGINAL_KERNEL)

    @server.resource(SUITES_URI, name="suites", title="Scenario suites", mime_type="application/json",
                     description="suite names, sizes and groups; attnq://suites/{name} lists the scenarios")
    def suite_list() -> str:
        return json.dumps([s.model_dump(mode="json") for s in suites(state)], indent=2)

    @server.resource(SUITES_URI + "/{name}", name="suite", title="One suite's scenarios", mime_type="application/json",
                     description="the scenarios of a suite (a built-in name, or a .toml file in the workspace, e.g. "
                                 "attnq://suites/mine.toml: checks your own suite without a GPU): id, group, shapes, "
                                 "causal, dtype, declared fields, FLOPs per call; a suite that does not load gives "
                                 "the file, line and reason")
    def suite_detail(name: str) -> str:
        mod = need("harness.scenarios")
        if name.endswith(".toml"):  # the user's own suite, as verify_kernel takes it: a file inside the workspace
            suite = _guard(lambda: mod.load_suite(state.resolve_file(name, suffix=".toml")))
        elif name not in mod.list_suites():
            raise ResourceNotFoundError(f"no suite named {name!r}; suites: {', '.join(mod.list_suites())}, "
                                        "or a .toml file in the workspace (attnq://suites/mine.toml)")
        else:
            suite = _guard(lambda: mod.load_suite(name))
        rows = [{**sc.model_dump(mode="json"), "id": sc.id, "flops": sc.flops} for sc in suite.scenarios]
        return json.dumps({"name": suite.name, "description": suite.description, "scenarios": rows}, indent=2)

    @server.resource(BANK_URI, name="question_bank", title="Question bank", mime_type="application/json",
                     description="every question the server can ask (built-in, promoted, team banks) with triggers")
    def question_bank() -> str:
        bank = _guard(state.bank)
        return json.dumps({"sources": list(bank.sources), "coverage": bank.coverage(),
                           "questions": [q.model_dump(mode="json") for q in bank.questions]}, indent=2)

    @server.resource(REPORT_URI, name="campaign_report", title="Campaign report", mime_type="text/markdown",
                     description="attempts, best, triggers, questions and claims of the active campaign")
    def campaign_report() -> str:
        return _guard(lambda: report_markdown(state))

    @server.prompt(name="start_campaign", title="Start an attnq optimization campaign")
    def start_campaign(kernel: str = "", suite: str = "") -> str:
        """Start a questioned optimization campaign on the attention kernel: goal, loop, when to reflect."""
        g = goal(state)
        target = kernel or "a copy of the original kernel (get_task says where it is) inside the workspace"
        suite_name = suite or state.settings.suite
        return f"""You are optimizing a CUDA attention forward kernel for NVIDIA H100/H200 (sm_90a) with the attnq tools.

Goal: {g.text}. Verify on the `{suite_name}` suite while you iterate.

1. Call get_task. Read the ABI (resource {ABI_URI}) and the rules; they are enforced.
2. Work on ONE file: {target}. Never edit the original.
3. After EVERY change: compile_kernel(path) (fix errors, watch registers/spills/SASS mix), then
   verify_kernel(path, suite="{suite_name}"). If it answers state=running, poll
   get_verification(job_id) until finished. Correctness comes first: a fast wrong kernel is worth nothing.
4. When an answer carries a question, stop and answer it in writing (what the evidence says, what you
   will change) before the next edit. Call reflect() yourself after 3 attempts without gain, before a
   rewrite, and whenever a result looks too good to be true.
5. When you believe you are at a limit, call declare(kind="limit", text=<why, with numbers>); when the
   goal is met, declare(kind="done", text=<evidence>). Answer the question each declaration returns.
6. campaign_status and the resource {REPORT_URI} show where you stand.
"""
