"""Peer-test tools: peer_test, get_peer_test (FlashAttention's own tests against a kernel).

Thin adapters over :func:`harness.export.peer.peer_test`. A run takes minutes, so it goes on in a
thread of its own; the call waits at most ``Limits.inline_s`` (progress notifications meanwhile) and
then answers ``state=running`` with a job id for ``get_peer_test``. Runs live in memory, per server.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from harness.errors import AttnqError, InputError
from harness.export.package import default_name
from harness.export.peer import DEFAULT_SELECT, PeerProgress, PeerReport, peer_test
from harness.logging import get_logger
from mcp_server.edge import format_error
from mcp_server.state import ServerState

log = get_logger("attnq.mcp.export")

#: Runs tests and writes the export under the state directory; the same input gives the same answer.
RUNS_TESTS = ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False,
                             open_world_hint=False)
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, destructive_hint=False, open_world_hint=False)


class PeerTestStatus(BaseModel):
    """A peer-test run: ``state`` running (done of total tests so far) or finished (with ``report``)."""

    job_id: str
    state: Literal["running", "finished"]
    kernel: str
    elapsed_s: float
    done: int = 0
    total: int | None = None
    message: str = ""
    report: PeerReport | None = None
    next_step: str = ""


class _Run:
    """One peer-test run in its own thread; fields guarded by ``lock``."""

    def __init__(self, kernel: str) -> None:
        self.job_id = uuid.uuid4().hex[:12]
        self.kernel = kernel
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.done_event = threading.Event()
        self.cancel = threading.Event()
        self.progress = PeerProgress(done=0, total=None, message="starting")
        self.report: PeerReport | None = None
        self.error: dict[str, Any] | None = None
        self.version = 0

    def on_progress(self, ev: PeerProgress) -> None:
        with self.lock:
            self.progress, self.version = ev, self.version + 1

    def status(self) -> PeerTestStatus:
        with self.lock:
            finished = self.done_event.is_set()
            st = PeerTestStatus(job_id=self.job_id, state="finished" if finished else "running", kernel=self.kernel,
                                elapsed_s=round(time.monotonic() - self.started, 2), done=self.progress.done,
                                total=self.progress.total, message=self.progress.message, report=self.report)
        if self.error is not None:
            raise ToolError(format_error(self.error))
        st.next_step = (f"still running: call get_peer_test(job_id='{self.job_id}')" if not finished else
                        "read report.failures and report.skip_reasons" if st.report and st.report.status != "pass"
                        else "every reachable test passed")
        return st


async def _wait(run: _Run, budget_s: float, ctx: Context | None, heartbeat_s: float) -> None:
    """Wait for ``run`` up to ``budget_s``, with a progress notification per change or heartbeat."""
    deadline = time.monotonic() + budget_s
    sent_version, sent_at, value = -1, 0.0, -1.0
    while not run.done_event.is_set() and time.monotonic() < deadline:
        with run.lock:
            version, ev = run.version, run.progress
        now = time.monotonic()
        if ctx is not None and (version != sent_version or now - sent_at >= heartbeat_s):
            value = max(float(ev.done), value + 1e-3)
            try:
                await ctx.report_progress(value, float(ev.total) if ev.total else None, ev.message)
            except Exception as exc:  # noqa: BLE001 - a lost notification must not fail the call
                log.debug("progress_not_sent", error=str(exc))
            sent_version, sent_at = version, now
        await anyio.sleep(0.25)


def register_export_tools(server: MCPServer, state: ServerState, *, edge: Callable[[str], Any]) -> None:
    """Register peer_test and get_peer_test."""
    runs: dict[str, _Run] = {}
    limits = state.jobs.limits

    @server.tool(name="peer_test", annotations=RUNS_TESTS)
    @edge("peer_test")
    async def peer_test_tool(
        path: Annotated[str, Field(description="the kernel .cu file, relative to the workspace")],
        fa_tests: Annotated[str, Field(description="FlashAttention's pytest file inside the workspace, e.g. "
                                                   "flash-attention/hopper/test_flash_attn.py")],
        ctx: Context,
        select: Annotated[str, Field(min_length=1, max_length=500, description="pytest -k expression; default "
                                     "the dense forward output test")] = DEFAULT_SELECT,
    ) -> PeerTestStatus:
        """Run FlashAttention's own forward tests against your kernel: it is exported as a package with
        FlashAttention-3's flash_attn_func and the test file's `import flash_attn_interface` gets it. The report
        reads like a verdict: status pass / fail / error, tests passed, skipped (grouped by reason: arguments the
        kernel does not take, like qv or softcap) and failed (with the assertion), and the calls that ran the
        kernel. Needs a GPU and what the test file imports (einops). Takes minutes: after ~45 s the answer is
        state=running with a job_id; poll get_peer_test(job_id)."""
        kernel = state.resolve_file(path)
        tests_file = state.resolve_file(fa_tests, suffix=".py")
        settings = state.settings
        run = _Run(state.rel(kernel))
        runs[run.job_id] = run

        def work() -> None:
            try:
                report = peer_test(kernel, tests_file, select=select, arch=settings.arch,
                                   work_dir=settings.state_dir / "peer" / default_name(Path(kernel)),
                                   cache_dir=settings.state_dir / "build", progress=run.on_progress, cancel=run.cancel)
                with run.lock:
                    run.report = report
            except AttnqError as err:
                run.error = err.to_dict()
            except BaseException:
                log.exception("peer_test_crashed", job_id=run.job_id)
                run.error = {"error": "internal_error", "message": "peer-test crashed; the server log has details"}
            finally:
                run.done_event.set()

        threading.Thread(target=work, name=f"attnq-peer-{run.job_id}", daemon=True).start()
        await _wait(run, limits.inline_s, ctx, limits.heartbeat_s)
        return run.status()

    @server.tool(annotations=READ_ONLY)
    @edge("get_peer_test")
    async def get_peer_test(
        job_id: Annotated[str, Field(description="job_id returned by peer_test")],
        ctx: Context,
        wait_s: Annotated[float, Field(ge=0, le=45, description="wait up to this many seconds for the run to "
                                                               "finish before answering (0: at once)")] = 30,
    ) -> PeerTestStatus:
        """Poll a peer-test run started by peer_test: waits up to wait_s seconds, then answers its state (running:
        tests done so far of those collected; finished: the report). A run that could not start (no GPU, compile
        error, missing test file import) is a tool error with the reason."""
        run = runs.get(job_id.strip())
        if run is None:
            raise InputError(f"no peer-test run {job_id!r} in this server; runs do not survive a restart")
        await _wait(run, min(wait_s, limits.inline_s), ctx, limits.heartbeat_s)
        return run.status()
