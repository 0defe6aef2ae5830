"""The attnq MCP server: tools over harness/ and questions/, resources, a campaign prompt.

``build_server(settings)`` returns an ``mcp.server.MCPServer`` (SDK 2.x). Tools answer with pydantic
models (structured output); anything the agent can act on is a tool error with a plain message
(see :mod:`mcp_server.edge`, the one place harness errors are mapped). Long verifications run as
jobs (:mod:`mcp_server.jobs`): no call blocks longer than ``Limits.inline_s``.

This module holds the task, compile and verification tools; :mod:`mcp_server.tools_questions`
the question tools; :mod:`mcp_server.tools_export` peer_test / get_peer_test; :mod:`mcp_server.resources`
the resources and the prompt.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

import harness
from harness.anchors import AnchorName, require_anchors
from harness.config import Settings
from harness.errors import InputError
from harness.logging import get_logger
from harness.scenarios import suite_choices_text
from harness.snapshot import text_if_built
from mcp_server.edge import format_error, plain_argument_errors, plain_prompt_errors, progress_sink, tool_edge
from mcp_server.jobs import Job, Limits
from mcp_server.models import CancelResult, JobStatus, TaskInfo
from mcp_server.state import ServerState, need
from mcp_server.task import build_task

try:  # the compile module is another part's; a partial install still serves the other tools
    from harness.compile import CompileResult as CompileOutput
except ModuleNotFoundError:  # pragma: no cover
    CompileOutput = dict[str, Any]  # type: ignore[misc]

log = get_logger("attnq.mcp.server")

INSTRUCTIONS = """\
attnq verifies, times and questions a CUDA attention forward kernel you write. Start with get_task
(ABI, rules, suites, goal, where the original kernel is). Work on ONE .cu file inside the workspace.
After every change: compile_kernel(path), then verify_kernel(path). A verification longer than ~45 s
answers state=running with a job_id: poll get_verification(job_id) until state is finished. When a
verification, reflect or declare hands you a question, answer it (in your reasoning and your next
change) before moving on. Call declare(kind="limit"|"done", text) when you believe you hit a limit
or met the goal; it checks the claim against the measurements.
"""

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, destructive_hint=False, open_world_hint=False)
#: Builds into the cache and records events, but changes nothing the agent owns; same input, same answer.
CACHED_WORK = ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False,
                              open_world_hint=False)
#: Records an attempt / a claim / a question in the campaign store (append-only, never deletes).
RECORDING = ToolAnnotations(read_only_hint=False, idempotent_hint=False, destructive_hint=False,
                            open_world_hint=False)

PathArg = Annotated[str, Field(description="path of the candidate .cu file, relative to the workspace (or absolute "
                                           "inside it); the original kernel's path from get_task is also accepted")]


def _resolve_suite(state: ServerState, suite: str | None, scenario_ids: list[str] | None = None) -> str:
    """A built-in suite name as is, else a suite .toml inside the workspace; validated by load_suite.

    A value that is not a path (no ``/`` and no ``.toml`` suffix) is a suite name: an unknown one gets
    harness.scenarios' own message (``unknown suite ...: use one of full, production, quick ...``), the
    same as the CLI.
    """
    scenarios = need("harness.scenarios")
    name = (suite or state.settings.suite).strip()
    looks_like_path = "/" in name or "\\" in name or name.endswith(".toml")
    if name not in scenarios.list_suites() and looks_like_path:
        name = str(state.resolve_file(name, suffix=".toml"))
    loaded = scenarios.load_suite(name)  # InputError on a bad suite, before any work starts
    unknown = [i for i in scenario_ids or [] if i not in set(loaded.ids())]
    if unknown:  # bad input, not an attempt: refused before a job (and an attempt record) exists
        raise InputError(f"scenario ids not in suite {loaded.name}: {unknown[:5]}; the suite's ids are in the "
                         f"resource attnq://suites/{loaded.name}" if name in scenarios.list_suites() else
                         f"scenario ids not in suite {loaded.name}: {unknown[:5]}")
    return name


def _question_text(question: Any) -> str:
    if not question:
        return ""
    q = question if isinstance(question, dict) else question.model_dump()
    return f"\n\nQuestion ({q.get('trigger') or 'reflect'}): {q.get('message') or q.get('question')}"


#: With detail="auto", answers for runs up to this many scenarios carry every per-scenario result.
FULL_DETAIL_MAX_SCENARIOS = 40
#: detail="summary" keeps the failed scenarios plus this many worst (and, while running, latest) ones.
SUMMARY_KEEP = 10

Detail = Literal["auto", "summary", "full"]
DetailArg = Annotated[Detail, Field(description="per-scenario results in the answer: full (all), summary (failed "
                                                "and the 10 worst or latest only), auto (full up to 40 scenarios)")]


#: With detail="auto", compile answers list every kernel up to this many (attn_fast.cu builds 66).
FULL_DETAIL_MAX_KERNELS = 20
#: detail="summary" keeps the kernels that spill plus this many with the most registers.
SUMMARY_KERNELS = 8


def _trim_compile(result: Any, detail: Detail) -> Any:
    """Keep a compile answer small: with detail=summary (auto: above FULL_DETAIL_MAX_KERNELS kernels), only the
    kernels that spill and the SUMMARY_KERNELS with the most registers, and a warning that says how many were left
    out (detail='full' lists them all). A result without kernels (no harness) passes unchanged."""
    kernels = getattr(result, "kernels", None)
    if not kernels or detail == "full" or (detail == "auto" and len(kernels) <= FULL_DETAIL_MAX_KERNELS):
        return result
    chosen = {id(k) for k in kernels if k.spill_store_bytes or k.spill_load_bytes}
    chosen |= {id(k) for k in sorted(kernels, key=lambda k: -k.registers)[:SUMMARY_KERNELS]}
    keep = [k for k in kernels if id(k) in chosen]  # in build order
    if len(keep) == len(kernels):
        return result
    from harness.compile import Diagnostic

    omitted = Diagnostic(file=result.source, severity="warning", message=(
        f"{len(kernels) - len(keep)} of {len(kernels)} kernels left out of this answer: it lists those that spill "
        f"and the {SUMMARY_KERNELS} with the most registers (detail='full' lists every kernel)"))
    return result.model_copy(update={"kernels": keep, "warnings": [*result.warnings, omitted]})


def _trim(status: JobStatus, detail: Detail) -> JobStatus:
    """Keep big answers small: with detail=summary, only failed and the worst/latest scenario results.

    A verdict of the full suite (153 scenarios) is ~100 KB of JSON; clients cap tool output (Claude
    Code: 25k tokens by default). Everything stays in the campaign store and in ``detail='full'``.
    """
    n = status.total or len(status.results)
    if detail == "full" or (detail == "auto" and n <= FULL_DETAIL_MAX_SCENARIOS):
        return status
    if status.verdict is not None:
        rows = status.verdict.scenarios
        worst = set(status.verdict.worst[:SUMMARY_KEEP])
        keep = [r for r in rows if not r.correct or r.id in worst]
        if len(keep) < len(rows):
            status.verdict = status.verdict.model_copy(update={"scenarios": keep})
            status.scenarios_omitted = len(rows) - len(keep)
    else:
        rows = status.results
        keep = [r for r in rows if not r.correct] + [r for r in rows[-SUMMARY_KEEP:] if r.correct]
        status.results, status.scenarios_omitted = keep, len(rows) - len(keep)
    return status


def _answer(job: Job, finished: bool, detail: Detail = "auto") -> JobStatus:
    """A job's answer to the agent; a failed job becomes a tool error carrying its question."""
    if not finished:
        return _trim(job.status(next_step=f"still running: call get_verification(job_id='{job.job_id}') to wait for "
                                          "the rest (finished scenarios so far are in results)"), detail)
    status = _trim(job.status(), detail)
    if status.state == "failed":
        raise ToolError(format_error(status.error or {}) + _question_text(status.question))
    if status.state == "cancelled":
        status.next_step = "cancelled: start a new verify_kernel when ready"
    elif status.question:
        status.next_step = "answer the question before your next change"
    elif status.verdict is not None and status.verdict.goal.met:
        status.next_step = "the goal is met: declare(kind='done', text=...) to have the claim checked"
    else:
        status.next_step = "read the verdict (failed, worst, flags), change the kernel, verify again"
    return status


async def _compile_bounded(state: ServerState, ctx: Context | None, full: Path) -> Any:
    """compile_kernel in a worker thread, waiting at most ``Limits.inline_s`` with heartbeats.

    A build still running at the deadline goes on in the background (a second call for the same
    source joins it, or hits the build cache once it is done); the call answers with a tool error that
    says so rather than block past the client's timeout.
    """
    hc = need("harness.compile")
    key = (str(full), hashlib.sha256(full.read_bytes()).hexdigest())
    with state.compiles_lock:
        entry = state.compiles.get(key)
        if entry is None:
            entry = {"done": threading.Event()}
            state.compiles[key] = entry

            def work() -> None:
                try:
                    entry["value"] = hc.compile_kernel(full, arch=state.settings.arch,
                                                       cache_dir=state.settings.state_dir / "build")
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting call
                    entry["error"] = exc
                finally:
                    with state.compiles_lock:
                        state.compiles.pop(key, None)
                    entry["done"].set()

            threading.Thread(target=work, name="attnq-compile", daemon=True).start()
    limits = state.jobs.limits
    send = progress_sink(ctx)
    started = time.monotonic()
    beats = 0
    while not entry["done"].is_set():
        waited = time.monotonic() - started
        if waited >= limits.inline_s:
            raise ToolError(f"[still_compiling] nvcc is still building {state.rel(full)} after {waited:.0f} s; the "
                            "build goes on in the background: call compile_kernel again with the same path")
        if send is not None and waited >= beats * limits.heartbeat_s:
            await send(float(beats), None, f"compiling {state.rel(full)} ({waited:.0f} s)")
            beats += 1
        await anyio.sleep(limits.poll_s)
    if "error" in entry:
        raise entry["error"]
    return entry["value"]


def register_core_tools(server: MCPServer, state: ServerState) -> None:
    """get_task, compile_kernel, verify_kernel, get_verification, cancel_verification."""
    settings = state.settings
    edge = functools.partial(tool_edge, sink=lambda: state.record_event)

    @server.tool(annotations=READ_ONLY)
    @edge("get_task")
    async def get_task() -> TaskInfo:
        """What you need to start: the kernel ABI (summary + resource URI attnq://abi/attn_abi.h), the rules
        (one .cu file, forbidden headers/libraries, allow-listed imported symbols), the scenario suites (names,
        sizes, groups), the goal (geomean speedup to reach with every scenario correct), where the original
        kernel is (copy it to a new file in the workspace and edit the copy) and the best attempt so far.
        Cheap; call it first and whenever you need the rules again."""
        return await anyio.to_thread.run_sync(build_task, state)

    @server.tool(annotations=CACHED_WORK)
    @edge("compile_kernel")
    async def compile_kernel(path: PathArg, ctx: Context, detail: Annotated[Detail, Field(
            description="kernels in the answer: full (all), summary (those that spill and the 8 with the most "
                        "registers), auto (full up to 20 kernels)")] = "auto") -> CompileOutput:
        """Compile one candidate .cu file with nvcc (no GPU needed) and report the facts: per kernel registers,
        shared memory, stack frame and spill bytes (ptxas) and the SASS instruction mix (HGMMA, HMMA, FFMA,
        LDL/STL), plus warnings, the build hash and whether the build cache was hit. On failure the error names
        the cause: compile_error with file:line:column diagnostics, policy_violation (forbidden header or
        imported symbol, named), abi_mismatch (no extern "C" attn_fwd or a stale attn_abi.h), or input_error
        (missing file, outside the workspace, not .cu). A build that outlasts ~45 s answers still_compiling (a
        tool error that is not a failure: the build goes on; call compile_kernel again with the same path). Run
        it after every edit, before verify_kernel."""
        return _trim_compile(await _compile_bounded(state, ctx, state.resolve_file(path)), detail)

    @server.tool(annotations=RECORDING)
    @edge("verify_kernel")
    async def verify_kernel(
        path: PathArg,
        ctx: Context,
        suite: Annotated[str | None, Field(description=f"suite: {suite_choices_text()} in the workspace; "
                                                       "default: the server's default suite")] = None,
        anchors: Annotated[list[AnchorName], Field(
            description="also time these library kernels for comparison: cudnn (cuDNN SDPA), flash "
                        "(FlashAttention-2 SDPA), fa3 (FlashAttention-3, only where the server can import "
                        "flash_attn_interface; get_task lists the anchors available)")] = [],  # noqa: B006
        scenario_ids: Annotated[list[str] | None, Field(
            description="run only these scenario ids of the suite (e.g. the failed ones); default: all")] = None,
        sanitize: Annotated[Literal["memcheck", "racecheck", "initcheck", "synccheck"] | None, Field(
            description="also run compute-sanitizer with this tool over the candidate on a few small scenarios "
                        "(out-of-bounds/misaligned accesses, shared-memory races, uninitialized reads, barrier "
                        "misuse); findings fail the scenario with check `sanitizer`. Slow: off by default")] = None,
        detail: DetailArg = "auto",
    ) -> JobStatus:
        """Verify and time a candidate on an NVIDIA GPU: compile, check every scenario of the suite against an
        fp32 reference (output and lse, FlashAttention's tolerance rule, poisoned outputs, input integrity,
        determinism), then time candidate vs the original kernel. Answers a JobStatus: state=finished with the
        verdict (status correct|incorrect|error, per-scenario results, failed ids with failure_kind,
        geomean_speedup, goal.met, flags such as suspicious speed), or state=running with a job_id when the
        run takes longer than ~45 s: then call get_verification(job_id) until it finishes (results holds the
        scenarios finished so far). Every verification is recorded as an attempt; when a trigger fires
        (stall, suspicious_win, churn) the answer carries a question: answer it before your next change.
        Errors (compile, policy, no GPU) come back as a tool error with a plain message."""
        full = state.resolve_file(path)
        require_anchors([*anchors, settings.goal_anchor or "original"])  # fa3 absent: a plain tool error
        suite_name = await anyio.to_thread.run_sync(_resolve_suite, state, suite, scenario_ids)
        hv = need("harness.verify")
        options = hv.VerifyOptions(
            suite=suite_name, anchors=list(anchors), arch=settings.arch, gpu=settings.gpu,
            goal_speedup=settings.goal_speedup, goal_against=settings.goal_anchor or "original",
            scenario_ids=scenario_ids or None, sanitize=sanitize,
        )
        source_bytes = full.read_bytes()
        rel = state.rel(full)

        def runner(progress: Any, cancel: Any) -> Any:
            return hv.verify_kernel(full, options, settings=settings, progress=progress, cancel=cancel)

        def on_finish(verdict: Any, error: dict[str, Any] | None) -> dict[str, Any] | None:
            # archived only when these bytes are the ones built (a file edited while the job ran is not)
            built = getattr(verdict, "source_sha256", None)
            return record_attempt(state, rel, text_if_built(source_bytes, built), verdict, error)

        job = state.jobs.start(rel, Path(suite_name).stem, runner, on_finish)
        finished = await state.jobs.wait(job, state.jobs.limits.inline_s, progress_sink(ctx), cancel_on_abort=True)
        return _answer(job, finished, detail)

    @server.tool(annotations=READ_ONLY)
    @edge("get_verification")
    async def get_verification(
        job_id: Annotated[str, Field(description="job_id returned by verify_kernel")],
        ctx: Context,
        wait_s: Annotated[float, Field(ge=0, le=45, description="wait up to this many seconds for the job to "
                                                               "finish before answering (0: answer at once)")] = 30,
        detail: DetailArg = "auto",
    ) -> JobStatus:
        """Poll a verification job started by verify_kernel: waits up to wait_s seconds (default 30, progress
        notifications meanwhile), then answers its JobStatus: state running (done/total scenarios, the finished
        scenarios' results so far), finished (the full verdict and any question a trigger raised), cancelled;
        a failed job (compile error, no GPU) is a tool error with the reason. Finished jobs stay fetchable for
        the life of the server. Polling does not cancel the job, even if the poll itself is cut off."""
        job = state.jobs.get(job_id)
        if job is None:
            known = ", ".join(j.job_id for j in state.jobs.jobs()[-5:]) or "none"
            raise InputError(f"no verification job {job_id!r} in this server (recent: {known}); jobs do not "
                             "survive a server restart: run verify_kernel again")
        finished = await state.jobs.wait(job, min(wait_s, state.jobs.limits.inline_s), progress_sink(ctx),
                                         cancel_on_abort=False)
        return _answer(job, finished, detail)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=True,
                                             open_world_hint=False))
    @edge("cancel_verification")
    async def cancel_verification(
        job_id: Annotated[str, Field(description="job_id of a running verification")],
    ) -> CancelResult:
        """Stop a running verification job (the worker process is killed between or during scenarios; results
        finished so far stay readable through get_verification). Cancelling a finished job changes nothing."""
        job = state.jobs.get(job_id)
        if job is None:
            raise InputError(f"no verification job {job_id!r} in this server")
        if job.finished:
            return CancelResult(job_id=job.job_id, state=job.status().state, message="already over; nothing to cancel")
        job.cancel.set()
        with anyio.move_on_after(10):
            while not job.finished:
                await anyio.sleep(0.1)
        st = job.status()
        return CancelResult(job_id=job.job_id, state=st.state,
                            message="cancelled" if job.finished else "cancel requested; the worker is stopping")


def record_attempt(state: ServerState, rel: str, source_text: str | None, verdict: Any,
                   error: dict[str, Any] | None) -> dict[str, Any] | None:
    """Record a verification as an attempt (questions.reflect.on_attempt); the question it raised, if any.

    Runs in the job's worker thread. Without the questions layer the attempt goes straight to the store.
    """
    store = state.store_if_available()
    if store is None:
        return None
    try:
        reflect_mod = need("questions.reflect")
    except ToolError:
        store.record_attempt(rel, source_text, None, verdict, error)
        return None
    bank = state.bank()
    r = reflect_mod.on_attempt(store, bank, source_path=rel, source_text=source_text, compile_result=None,
                               verdict=verdict, error=error, settings=state.settings)
    return r.model_dump(mode="json") if r is not None else None


def build_server(settings: Settings | None = None, *, limits: Limits | None = None) -> MCPServer:
    """The attnq MCP server over ``settings`` (default: ``Settings()`` from ``ATTNQ_*`` env).

    The returned server has ``attnq_state`` (a :class:`ServerState`) for the transports and tests.
    """
    from mcp_server.resources import register_resources
    from mcp_server.tools_evolve import register_evolve_tools
    from mcp_server.tools_export import register_export_tools
    from mcp_server.tools_questions import register_question_tools
    from mcp_server.tools_report import register_report_tools

    settings = settings or Settings()
    state = ServerState(settings, limits)
    server = MCPServer("attnq", title="attnq: questioned CUDA attention optimization", instructions=INSTRUCTIONS,
                       version=harness.__version__, log_level="WARNING")
    register_core_tools(server, state)
    register_question_tools(server, state, edge=functools.partial(tool_edge, sink=lambda: state.record_event))
    register_evolve_tools(server, state, edge=functools.partial(tool_edge, sink=lambda: state.record_event))
    register_export_tools(server, state, edge=functools.partial(tool_edge, sink=lambda: state.record_event))
    register_resources(server, state)
    register_report_tools(server, state, edge=functools.partial(tool_edge, sink=lambda: state.record_event))
    plain_argument_errors(server)
    plain_prompt_errors(server)
    server.attnq_state = state  # type: ignore[attr-defined]
    return server


__all__ = ["INSTRUCTIONS", "build_server", "format_error", "record_attempt"]
