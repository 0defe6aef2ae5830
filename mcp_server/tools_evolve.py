"""Evolve tools: any MCP client becomes the mutation operator of an ``attnq evolve`` run.

- ``evolve_next``: the next mutation ticket of the campaign's run: a brief (parent source, verdict
  summary, maybe an inspiration program, ONE question) and the workspace path where the child goes
  (primed with the parent's source, to edit in place). Starts a run from ``seed_path`` when the
  campaign has none (the seed's evaluation then answers as a job).
- ``evolve_submit``: evaluates the child written for a ticket (near-duplicate checks, then the cascade
  compile -> quick -> full) and answers its fitness against its parent's and the next ticket. An
  evaluation longer than the call budget answers ``state="running"`` with a ``job_id``, like
  verify_kernel: call ``evolve_submit`` again with the same ticket to wait for it.
- resource ``attnq://evolve/report``: the report of the campaign's latest run (markdown).

Thin adapters over evolve.driver / evolve.engine / evolve.report; jobs reuse mcp_server.jobs' waiting.
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
from mcp.server.mcpserver.exceptions import ResourceError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from evolve.config import EvolveConfig
from evolve.db import EvolveDB, ProgramRecord
from evolve.driver import issue_ticket, latest_run, start_or_resume, submit_child
from evolve.engine import Budget, Search
from evolve.pool import LocalPool
from evolve.report import RunStatus, build_report, render_report, run_status
from harness.errors import AttnqError, InputError, NoGpuError
from harness.logging import get_logger
from mcp_server.edge import format_error, progress_sink
from mcp_server.state import ServerState

log = get_logger("attnq.mcp.evolve")

EVOLVE_REPORT_URI = "attnq://evolve/report"
RECORDING = ToolAnnotations(read_only_hint=False, idempotent_hint=False, destructive_hint=False,
                            open_world_hint=False)
MAX_CHILD_BYTES = 1024 * 1024


class EvolveNext(BaseModel):
    """A mutation to write (state ready), or why there is none yet."""

    run_id: str
    state: Literal["ready", "evaluating_seed", "waiting", "finished"] = Field(
        description="ready: write the child and call evolve_submit; evaluating_seed: call evolve_next again; "
                    "waiting: every ticket of the generation is out, submit yours; finished: the run is over")
    ticket_id: int | None = None
    child_path: str | None = Field(default=None, description="workspace path of the child (holds the parent's source)")
    generation: int | None = None
    question_id: str | None = None
    layer: str | None = None
    question: str | None = Field(default=None, description="the ONE question to answer with your change")
    arm: str | None = None
    parent_id: int | None = None
    parent_fitness_quick: float | None = None
    inspiration_id: int | None = None
    brief: str = Field(default="", description="the full brief: task, question, numbers, sources")
    job_id: str | None = None
    message: str = ""


class EvolveSubmitted(BaseModel):
    """The evaluation of one child (state finished) or its progress (state running)."""

    run_id: str
    ticket_id: int
    state: Literal["running", "finished", "failed"]
    job_id: str | None = None
    elapsed_s: float = 0.0
    message: str = ""
    program_id: int | None = None
    status: str | None = Field(default=None, description="correct, incorrect, error, failed_compile, rejected, pending")
    stage: str | None = Field(default=None, description="last stage evaluated: compile, quick or full")
    failure_kind: str | None = None
    reject_reason: str | None = None
    fitness_quick: float | None = None
    fitness_full: float | None = None
    parent_fitness_quick: float | None = None
    improvement: float | None = Field(default=None, description="fitness_quick / parent's - 1")
    improved: bool | None = Field(default=None, description="improvement >= the run's min gain")
    goal_met: bool | None = None
    best_fitness: float | None = Field(default=None, description="the run's best fitness so far")
    next: EvolveNext | None = Field(default=None, description="the next mutation, once this one is finished")


class _Job:
    """One evaluation in a thread; duck-types mcp_server.jobs.Job for JobManager.wait."""

    def __init__(self, kind: str, run_id: str, ticket_id: int | None) -> None:
        self.job_id = uuid.uuid4().hex[:12]
        self.kind, self.run_id, self.ticket_id = kind, run_id, ticket_id
        self.started_at = time.monotonic()
        self.cancel = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self.version, self.stages, self.message = 0, 0, "starting"
        self.program: ProgramRecord | None = None
        self.error: str | None = None
        self.exc: AttnqError | None = None  # what stopped the evaluation (no GPU, ...): re-raised at the edge

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def progress_snapshot(self) -> tuple[int, int, int | None, str]:
        with self._lock:
            return self.version, self.stages, 3, self.message

    def note(self, message: str, *, stage_done: bool = False) -> None:
        with self._lock:
            self.message = message
            self.stages += int(stage_done)
            self.version += 1

    def start(self, work: Callable[[], ProgramRecord]) -> None:
        def body() -> None:
            try:
                self.program = work()
            except AttnqError as err:
                self.error, self.exc = f"[{err.code}] {err.message}", err
            except Exception as exc:
                log.exception("evolve_job_crashed", job_id=self.job_id)
                self.error = f"[internal_error] evaluation crashed: {type(exc).__name__}"
            finally:
                self._done.set()
        threading.Thread(target=body, name=f"attnq-evolve-{self.job_id}", daemon=True).start()


class _TrackedPool:
    """A pool that tells a job which stage runs."""

    def __init__(self, pool: LocalPool, job: _Job) -> None:
        self.pool, self.job = pool, job
        self.gpu_count, self.description = pool.gpu_count, pool.description

    def run(self, spec: Any, source_text: str, name: str, stage: Any) -> Any:
        self.job.note(f"{name}: {stage}")
        res = self.pool.run(spec, source_text, name, stage)
        self.job.note(f"{name}: {stage} {res.status}" + (f" {res.fitness:.4f}x" if res.fitness else ""),
                      stage_done=True)
        return res

    def close(self) -> None:
        pass


class _Evolve:
    """Per-server evolve state: the DB handle, one Search and one pool per run, the jobs."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._db: EvolveDB | None = None
        self.searches: dict[str, Search] = {}
        self.pools: dict[str, LocalPool] = {}
        self.jobs: dict[tuple[str, str], _Job] = {}  # (run_id, "seed" | ticket id) -> job
        self.next_for: dict[tuple[str, int], int] = {}  # (run_id, ticket id) -> the ticket handed out after it
        self.lock = threading.RLock()

    def db(self) -> EvolveDB:
        with self.lock:
            if self._db is None:
                self._db = EvolveDB.for_state_dir(self.state.settings.state_dir)
            return self._db

    def campaign(self) -> str:
        return str(self.state.store().campaign_id)

    def search(self, run_id: str | None, seed_path: str | None) -> Search:
        db, st = self.db(), self.state
        if run_id is None:
            rec = latest_run(db, self.campaign())
            if rec is None and seed_path is None:
                raise InputError(f"campaign {self.campaign()!r} has no evolve run: call evolve_next(seed_path=...) "
                                 "with a seed kernel (e.g. the original kernel's path from get_task), or start one "
                                 "with `attnq evolve --mutator mcp --from FILE`")
            # a seed_path starts a new run when the campaign has none running
            run_id = rec.run_id if rec is not None and (seed_path is None or rec.state == "running") else None
        with self.lock:
            if run_id is not None:
                rec = db.run(run_id)  # StoreError naming the known runs
                if run_id not in self.searches:
                    if rec.campaign_id != self.campaign():
                        raise InputError(f"evolve run {run_id!r} belongs to campaign {rec.campaign_id!r}")
                    self.searches[run_id] = Search(db, run_id, state_dir=st.settings.state_dir)
                search = self.searches[run_id]
                # `attnq evolve --run NAME` (the GPU host) may have changed the run's budgets since: planning and
                # stopping must read them, not this server's first copy (that ended a run the host had extended)
                search.cfg = EvolveConfig(**rec.config)
                search.bank = st.bank()
                return search
            cfg = EvolveConfig(mutator="mcp", gpus=[st.settings.gpu], goal_speedup=st.settings.goal_speedup,
                               goal_against=st.settings.goal_anchor or "original", arch=st.settings.arch)
            seed = st.resolve_file(seed_path or "")
            try:
                search, _ = start_or_resume(db, campaign_id=self.campaign(), state_dir=st.settings.state_dir,
                                            cfg=cfg, run_id=None, seed_path=seed, bank=st.bank())
            except NoGpuError as err:  # the offline loop: the run starts where the GPU is, mutations come from here
                raise NoGpuError(
                    f"{err.message}. Without a GPU here, start the run on a machine with the GPU (with a copy "
                    f"of this state directory): `attnq evolve --mutator mcp --from {st.rel(seed)} --run NAME` evaluates the seed; then "
                    "call evolve_next(run=NAME) here, and the children you submit wait there for "
                    "`attnq evolve --run NAME`") from None
            self.searches[search.run_id] = search
            return search

    def pool(self, search: Search) -> LocalPool:
        with self.lock:
            if search.run_id not in self.pools:
                self.pools[search.run_id] = LocalPool(search.cfg.gpus, compile_workers=search.cfg.compile_workers)
            return self.pools[search.run_id]

    def start_job(self, search: Search, key: str, prog: ProgramRecord) -> _Job:
        with self.lock:
            job = self.jobs.get((search.run_id, key))
            if job is not None:
                return job
            job = _Job("seed" if key == "seed" else "child", search.run_id, None if key == "seed" else int(key))
            pool = _TrackedPool(self.pool(search), job)

            def work() -> ProgramRecord:
                budget = Budget(search.cfg, search.db, search.run)
                out = search.evaluate_one(prog, pool, budget)  # type: ignore[arg-type]
                search.db.update_run(search.run_id, elapsed_s=round(budget.elapsed_s(), 3))
                if key == "seed" and out.status == "correct":
                    search.close_generation(0)
                return out

            self.jobs[(search.run_id, key)] = job
            job.start(work)
            return job


def _next(ev: _Evolve, search: Search, after: int | None = None) -> EvolveNext:
    """Blocking: the next ticket (or why none) as the tool answers it. ``after``: the ticket whose result
    carries this answer; asking again for the same result hands out the same next ticket while it is open."""
    key = (search.run_id, after) if after is not None else None
    if key is not None and key in ev.next_for:
        prior = search.db.ticket(ev.next_for[key])
        if prior.state == "issued":
            return _ready(ev, search, prior)
    out = issue_ticket(search, ev.state.workspace / "evolve" / search.run_id)
    if isinstance(out, str):
        if out == "seed":
            job = ev.start_job(search, "seed", search.seed_program())
            return EvolveNext(run_id=search.run_id, state="evaluating_seed", job_id=job.job_id,
                              message=f"the seed is being evaluated ({job.message}); call evolve_next again")
        if out == "evaluating":
            idle = [p.id for p in search.db.programs(search.run_id, status="pending")
                    if p.parent_id is not None and (search.run_id, str(p.ticket_id)) not in ev.jobs]
            return EvolveNext(run_id=search.run_id, state="waiting",
                              message=_waits_for_gpu(search) if idle else
                              "every mutation of this generation is handed out or being evaluated: "
                              "call evolve_submit for yours")
        return EvolveNext(run_id=search.run_id, state="finished",
                          message=f"the run is over: {out}. `attnq evolve export --run {search.run_id} -o best.cu` "
                                  "writes the best program")
    if key is not None:
        ev.next_for[key] = out.id
    return _ready(ev, search, out)


def _waits_for_gpu(search: Search) -> str:
    """What to do about children that were accepted but not evaluated (submitted where no GPU was at hand)."""
    ids = [p.id for p in search.db.programs(search.run_id, status="pending") if p.parent_id is not None]
    spent = Budget(search.cfg, search.db, search.run).exhausted()
    host = (f"{spent}, so on a machine with the GPU, `attnq evolve --run {search.run_id} "
            "--max-evals N` (or --max-gpu-hours / --max-wall-s; with this state directory copied there) raises it and" if spent else
            f"on a machine with the GPU, `attnq evolve --run {search.run_id}` (with this state directory copied there and back)")
    return (f"The submitted children ({', '.join(f'#{i}' for i in ids)}) are stored and wait for an evaluation "
            f"(pending): {host} evaluates them all in one batch; then call evolve_next here for the next "
            "generation's mutations")


def _ready(ev: _Evolve, search: Search, out: Any) -> EvolveNext:
    """The answer for an issued ticket."""
    brief = search.brief(out, child_path=ev.state.rel(out.child_path or ""))
    return EvolveNext(run_id=search.run_id, state="ready", ticket_id=out.id, child_path=brief.child_path,
                      generation=out.generation, question_id=brief.question_id, layer=brief.layer,
                      question=brief.question or None, arm=brief.arm, parent_id=out.parent_id,
                      parent_fitness_quick=brief.parent.fitness_quick, inspiration_id=out.inspiration_id,
                      brief=brief.text, message="edit the child file (it holds the parent), then call "
                                                f"evolve_submit(ticket_id={out.id})")


def _answer(ev: _Evolve, search: Search, ticket_id: int, prog: ProgramRecord | None, job: _Job | None) -> EvolveSubmitted:
    base: dict[str, Any] = {"run_id": search.run_id, "ticket_id": ticket_id}
    if job is not None:
        base.update(job_id=job.job_id, elapsed_s=round(time.monotonic() - job.started_at, 2), message=job.message)
        if not job.finished:
            base["message"] = f"{job.message}; call evolve_submit(ticket_id={ticket_id}) again to wait for the rest"
            return EvolveSubmitted(state="running", **base)
        if job.error is not None:
            return EvolveSubmitted(state="failed", **{**base, "message": job.error})
        prog = job.program
    assert prog is not None
    prog = search.db.program(prog.id)
    best = max((p.fitness_full or p.fitness_quick or 0.0 for p in search.db.programs(search.run_id, status="correct")),
               default=None)
    improved = None if prog.status in ("pending", "rejected") else (
        prog.status == "correct" and (prog.improvement or 0.0) >= search.cfg.bandit_min_gain)
    return EvolveSubmitted(state="finished", **base, program_id=prog.id, status=prog.status, stage=prog.stage,
                           failure_kind=prog.failure_kind, reject_reason=prog.reject_reason if prog.status == "rejected"
                           else None, fitness_quick=prog.fitness_quick, fitness_full=prog.fitness_full,
                           parent_fitness_quick=prog.parent_fitness_quick, improvement=prog.improvement,
                           improved=improved, goal_met=prog.goal_met, best_fitness=best,
                           next=_next(ev, search, after=ticket_id))


def evolve_status_of(state: ServerState) -> list[RunStatus]:
    """The status of every evolve run of the active campaign (for campaign_status; never raises)."""
    try:
        with EvolveDB.for_state_dir(state.settings.state_dir) as db:
            return [run_status(db, r) for r in db.runs(str(state.store().campaign_id))]
    except Exception as exc:  # noqa: BLE001 - status is best effort
        log.warning("evolve_status_unavailable", error=str(exc))
        return []


def register_evolve_tools(server: MCPServer, state: ServerState, *, edge: Callable[[str], Any]) -> None:
    """Register evolve_next, evolve_submit and the evolve report resource."""
    ev = _Evolve(state)

    @server.tool(annotations=RECORDING)
    @edge("evolve_next")
    async def evolve_next(
        ctx: Context,
        run: Annotated[str | None, Field(description="evolve run name; default: the campaign's latest")] = None,
        seed_path: Annotated[str | None, Field(description="only to start a run when the campaign has none: the "
                                                           "seed .cu (e.g. the original kernel's path)")] = None,
    ) -> EvolveNext:
        """Get the next mutation of the evolutionary search (you are its mutation operator). The answer holds a
        brief with the parent program's source, its fitness and weakest scenario groups, compile facts, sometimes
        an inspiration program from another island, and ONE question: answer it with a change to the parent.
        Edit the file at child_path (it holds the parent's source), then call evolve_submit(ticket_id). State
        evaluating_seed: the seed is being measured, call again; finished: the run met its goal or budget."""
        search = await anyio.to_thread.run_sync(ev.search, run, seed_path)
        out = await anyio.to_thread.run_sync(_next, ev, search)
        if out.state == "evaluating_seed" and out.job_id:
            job = ev.jobs[(search.run_id, "seed")]
            await state.jobs.wait(job, state.jobs.limits.inline_s, progress_sink(ctx), cancel_on_abort=False)  # type: ignore[arg-type]
            if job.finished:
                if job.exc is not None:
                    ev.jobs.pop((search.run_id, "seed"), None)  # the next call tries again
                    raise job.exc
                if job.error:
                    raise InputError(f"the seed's evaluation failed: {job.error}")
                out = await anyio.to_thread.run_sync(_next, ev, search)
        return out

    @server.tool(annotations=RECORDING)
    @edge("evolve_submit")
    async def evolve_submit(
        ticket_id: Annotated[int, Field(description="ticket_id from evolve_next")],
        ctx: Context,
        run: Annotated[str | None, Field(description="evolve run name; default: the campaign's latest")] = None,
    ) -> EvolveSubmitted:
        """Evaluate the child you wrote for a ticket: near-duplicate checks (a child nearly identical to a known
        program, or re-adding lines an ancestor removed, is rejected and counted), then compile, the quick suite,
        and the full suite only when it beats its parent on quick. Answers its fitness (geomean speedup) next to
        its parent's, whether it improved, and the next mutation (next). A long evaluation answers
        state=running with a job_id: call evolve_submit with the same ticket_id again to wait for it."""
        search = await anyio.to_thread.run_sync(ev.search, run, None)
        job = ev.jobs.get((search.run_id, str(ticket_id)))
        if job is None:
            def accept() -> ProgramRecord:
                ticket = submit_child_ticket(search, ticket_id)
                return submit_child(search, ticket_id, _read_child(state, ticket))

            prog = await anyio.to_thread.run_sync(accept)
            if prog.status != "pending":
                return await anyio.to_thread.run_sync(_answer, ev, search, ticket_id, prog, None)
            job = ev.start_job(search, str(ticket_id), prog)
        await state.jobs.wait(job, state.jobs.limits.inline_s, progress_sink(ctx), cancel_on_abort=False)  # type: ignore[arg-type]
        if job.finished and job.exc is not None:  # e.g. no GPU: the child stays pending, a new submit retries
            ev.jobs.pop((search.run_id, str(ticket_id)), None)
            if isinstance(job.exc, NoGpuError):
                raise NoGpuError(f"{job.exc.message}. {_waits_for_gpu(search)}") from None
            raise job.exc
        return await anyio.to_thread.run_sync(_answer, ev, search, ticket_id, None, job)

    @server.resource(EVOLVE_REPORT_URI, name="evolve_report", title="Evolve report", mime_type="text/markdown",
                     description="the campaign's latest evolve run: best per generation, lineage of the best, "
                                 "per-question and per-layer child improvement, duplicate rate")
    def evolve_report() -> str:
        try:
            rec = latest_run(ev.db(), ev.campaign())
            if rec is None:
                return "No evolve run in this campaign yet (evolve_next(seed_path=...) or `attnq evolve`)."
            return render_report(build_report(ev.db(), rec))
        except AttnqError as err:
            raise ResourceError(format_error(err)) from None


def submit_child_ticket(search: Search, ticket_id: int) -> Any:
    """The ticket, checked to be of this run (InputError otherwise)."""
    try:
        ticket = search.db.ticket(ticket_id)
    except AttnqError:
        raise InputError(f"no evolve ticket {ticket_id}: call evolve_next for one") from None
    if ticket.run_id != search.run_id:
        raise InputError(f"ticket {ticket_id} belongs to run {ticket.run_id!r}, not {search.run_id!r}")
    return ticket


def _read_child(state: ServerState, ticket: Any) -> str:
    if ticket.program_id is not None:  # already accepted: the stored source is what counts
        return ""
    if not ticket.child_path:
        raise InputError(f"ticket {ticket.id} was not handed out yet: call evolve_next")
    path = Path(ticket.child_path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the child {state.rel(path)}: {exc.strerror}") from None
    if len(data) > MAX_CHILD_BYTES:
        raise InputError(f"{state.rel(path)} is larger than 1 MiB")
    return data.decode("utf-8", errors="replace")
