"""Verification jobs: run ``harness.verify.verify_kernel`` off the event loop, keep partial results.

MCP clients cut long tool calls (Codex waits 60 s by default), so no tool call blocks for more than
``Limits.inline_s`` (about 45 s). A verification runs in a worker thread owned by a :class:`Job`;
the tool call waits on it, sending progress notifications at least every ``Limits.heartbeat_s``, and
when the budget runs out it hands back the job id. ``get_verification(job_id)`` polls the same job.

Why a ``threading.Thread`` and not ``anyio.to_thread``: the job must outlive the tool call that
started it (the call returns a job id while the run goes on), and anyio ties a worker thread to the
task awaiting it. The thread communicates only through the job's lock-protected fields; cancelling
sets ``cancel`` (a ``threading.Event``), which ``verify_kernel`` checks between scenarios and while
it waits on its worker process.

Jobs live in memory, per server process; finished jobs stay fetchable (the oldest finished ones
are dropped past ``max_finished``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from harness.errors import AttnqError, internal_error_text
from harness.logging import get_logger
from harness.verdict import ScenarioResult, Verdict
from mcp_server.models import JobState, JobStatus

log = get_logger("attnq.mcp.jobs")


@dataclass(frozen=True)
class Limits:
    """Timing of long calls, in seconds.

    inline_s: longest a tool call waits before answering with a job id (clients cut at ~60 s).
    heartbeat_s: longest gap between two progress notifications while work runs (<= 10 s).
    poll_s: how often the waiting call looks at the job.
    """

    inline_s: float = 45.0
    heartbeat_s: float = 5.0
    poll_s: float = 0.25


#: Runs the verification: ``(progress_callback, cancel_event) -> Verdict``; raises AttnqError.
Runner = Callable[[Callable[[Any], None], threading.Event], Verdict]
#: Called once, in the worker thread, with the verdict or the error dict (not after a cancel);
#: records the attempt and returns the question a trigger raised (or None).
OnFinish = Callable[["Verdict | None", "dict[str, Any] | None"], "dict[str, Any] | None"]
#: Sends one progress notification: ``(progress, total, message)``.
ProgressSink = Callable[[float, "float | None", str], Awaitable[None]]


@dataclass
class Job:
    """One verification run. Fields below ``cancel`` are guarded by ``_lock``."""

    job_id: str
    kernel: str
    suite: str
    started_at: float = field(default_factory=time.monotonic)
    cancel: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _done_event: threading.Event = field(default_factory=threading.Event)
    state: JobState = "running"
    done: int = 0
    total: int | None = None
    message: str = "starting (compile, then the worker process)"
    version: int = 0
    results: list[ScenarioResult] = field(default_factory=list)
    verdict: Verdict | None = None
    error: dict[str, Any] | None = None
    question: dict[str, Any] | None = None
    finished_at: float | None = None

    # -- called from the worker thread -------------------------------------------------------
    def on_progress(self, progress: Any) -> None:
        """verify_kernel's progress callback: a VerifyProgress (done, total, scenario_id, message).

        A progress object that also carries a finished ``ScenarioResult`` (attribute ``result``)
        adds it to the partial results.
        """
        with self._lock:
            self.done = int(getattr(progress, "done", self.done) or 0)
            total = getattr(progress, "total", None)
            self.total = int(total) if total is not None else self.total
            sid = getattr(progress, "scenario_id", None)
            msg = getattr(progress, "message", "") or ""
            self.message = f"{sid}: {msg}" if sid and msg and sid not in msg else (msg or sid or self.message)
            result = getattr(progress, "result", None)
            if isinstance(result, ScenarioResult) and all(r.id != result.id for r in self.results):
                self.results.append(result)
            self.version += 1

    def _finish(self, state: JobState, *, verdict: Verdict | None = None, error: dict[str, Any] | None = None,
                question: dict[str, Any] | None = None, message: str = "") -> None:
        with self._lock:
            self.state = state
            self.verdict = verdict
            self.error = error
            self.question = question
            if verdict is not None:
                self.results = list(verdict.scenarios)
                self.done = sum(1 for s in verdict.scenarios if s.failure_kind != "not_run")
                self.total = verdict.num_scenarios
            self.message = message or self.message
            self.finished_at = time.monotonic()
            self.version += 1
        self._done_event.set()

    # -- read from anywhere --------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """True once the worker thread has recorded an outcome."""
        return self._done_event.is_set()

    def status(self, next_step: str = "") -> JobStatus:
        """A consistent snapshot as the tool output model (``results`` only until the verdict holds them)."""
        with self._lock:
            end = self.finished_at if self.finished_at is not None else time.monotonic()
            return JobStatus(
                job_id=self.job_id, state=self.state, kernel=self.kernel, suite=self.suite,
                elapsed_s=round(end - self.started_at, 2), done=self.done, total=self.total,
                message=self.message, results=list(self.results) if self.verdict is None else [],
                verdict=self.verdict,
                error=self.error, question=self.question, next_step=next_step,
            )

    def progress_snapshot(self) -> tuple[int, int, int | None, str]:
        """``(version, done, total, message)`` under the lock."""
        with self._lock:
            return self.version, self.done, self.total, self.message


class JobManager:
    """Starts verification jobs in threads and lets async tool calls wait on them."""

    def __init__(self, limits: Limits | None = None, max_finished: int = 64) -> None:
        self.limits = limits or Limits()
        self.max_finished = max_finished
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def start(self, kernel: Path | str, suite: str, runner: Runner, on_finish: OnFinish | None = None) -> Job:
        """Create a job and start its worker thread (daemon; dies with the server process)."""
        job = Job(job_id=uuid.uuid4().hex[:12], kernel=str(kernel), suite=suite)
        with self._lock:
            self._prune()
            self._jobs[job.job_id] = job
        thread = threading.Thread(target=self._work, args=(job, runner, on_finish), name=f"attnq-verify-{job.job_id}",
                                  daemon=True)
        thread.start()
        log.info("job_started", job_id=job.job_id, kernel=str(kernel), suite=suite)
        return job

    def get(self, job_id: str) -> Job | None:
        """The job with this id, or None."""
        with self._lock:
            return self._jobs.get(job_id.strip())

    def jobs(self) -> list[Job]:
        """All jobs kept, oldest first."""
        with self._lock:
            return list(self._jobs.values())

    def _prune(self) -> None:
        finished = [j for j in self._jobs.values() if j.finished]
        for job in finished[: max(0, len(finished) - self.max_finished)]:
            del self._jobs[job.job_id]

    @staticmethod
    def _work(job: Job, runner: Runner, on_finish: OnFinish | None) -> None:
        verdict: Verdict | None = None
        error: dict[str, Any] | None = None
        try:
            verdict = runner(job.on_progress, job.cancel)
        except AttnqError as err:
            error = err.to_dict()
            log.info("job_failed", job_id=job.job_id, error=err.code)
        except BaseException as exc:  # noqa: BLE001 - a crash must end the job, never hang a poller
            log.exception("job_crashed", job_id=job.job_id)
            text = internal_error_text("verification", exc).removeprefix("[internal_error] ")
            job._finish("failed", error={"error": "internal_error", "message": text}, message=text)
            return
        question = None
        if on_finish is not None and not job.cancel.is_set():
            try:
                question = on_finish(verdict, error)
            except AttnqError as err:  # the verdict stands even when the campaign store fails
                log.warning("job_on_finish_failed", job_id=job.job_id, error=err.message)
            except Exception:  # noqa: BLE001
                log.exception("job_on_finish_crashed", job_id=job.job_id)
        if verdict is None:
            assert error is not None
            job._finish("cancelled" if job.cancel.is_set() else "failed", error=error, question=question,
                        message=str(error.get("message", "")))
        else:
            job._finish("cancelled" if job.cancel.is_set() else "finished", verdict=verdict, question=question,
                        message=verdict.message or f"verdict: {verdict.status}")

    async def wait(self, job: Job, budget_s: float, send: ProgressSink | None = None, *,
                   cancel_on_abort: bool = True) -> bool:
        """Wait up to ``budget_s`` for the job, sending progress at least every ``heartbeat_s``.

        Progress values increase strictly (the MCP spec requires it): ``done`` scenarios plus a
        small fraction that grows with each heartbeat between two finished scenarios.
        Returns True when the job finished. If the waiting task is cancelled (the client cancelled
        the call) and ``cancel_on_abort``, the job's cancel event is set before the cancellation
        propagates (verify_kernel's call: yes; a get_verification poll: no, a poll cut by a client
        timeout must not stop the run).
        """
        deadline = time.monotonic() + max(0.0, budget_s)
        last_sent_at = -1e9
        last_version = -1
        last_value = -1.0
        beats = 0
        try:
            while True:
                version, done, total, message = job.progress_snapshot()
                now = time.monotonic()
                if send is not None and (version != last_version or now - last_sent_at >= self.limits.heartbeat_s):
                    beats = 0 if version != last_version else beats + 1
                    value = max(float(done) + min(0.9, 0.01 * beats), last_value + 1e-3)
                    label = f"scenario {done} of {total}: {message}" if total else message
                    await send(value, float(total) if total else None, label)
                    last_sent_at, last_version, last_value = now, version, value
                if job.finished:
                    return True
                if now >= deadline:
                    return False
                await anyio.sleep(min(self.limits.poll_s, max(0.0, deadline - now)))
        except anyio.get_cancelled_exc_class():
            if cancel_on_abort:
                job.cancel.set()
                log.info("job_cancelled_by_client", job_id=job.job_id)
            raise
