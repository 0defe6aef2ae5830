"""Driving a run: starting or resuming it, the loop for in-process mutators, and the ticket hand-out
that the MCP tools use (an MCP agent is the mutator there).

- :func:`start_or_resume` opens a run by name (or the campaign's latest), or creates it from a seed file;
- :func:`run_search` evaluates the seed, then loops generation by generation with the knob or the
  command mutator until the goal or a budget stops it (``KeyboardInterrupt`` leaves a resumable run);
- :func:`issue_ticket` / :func:`submit_child` hand one ticket at a time to an external mutator;
- :func:`run_lock`, :func:`driven_now`: one driving process per run and state directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evolve.config import RESUMABLE_FIELDS, EvolveConfig
from evolve.db import EvolveDB, ProgramRecord, RunRecord, TicketRecord
from evolve.engine import Budget, Progress, Search
from evolve.mutators import CommandMutator, KnobMutator
from evolve.pool import EvalPool
from harness.errors import InputError, StoreError
from harness.logging import get_logger

log = get_logger("attnq.evolve.driver")


@contextlib.contextmanager
def run_lock(state_dir: Path, run_id: str) -> Iterator[None]:
    """Hold the driver lock of ``run_id`` (an flock on ``<state_dir>/evolve/.locks/<run_id>.lock``, released
    when the process ends however it ends) while one process drives the run.

    Raises:
        InputError: another process drives the run now (its pid is named): two drivers would resume a run the
            other is still creating ("has no seed program") or plan and evaluate the same generation twice.
    """
    if not RUN_NAME.fullmatch(run_id):  # start_or_resume refuses the name, and nothing may be written for it
        yield
        return
    locks = Path(state_dir) / "evolve" / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    path = locks / f"{run_id}.lock"
    with open(path, "a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            raise InputError(f"evolve run {run_id!r} is being driven by another attnq process (pid {holder}) on this "
                             "state directory; wait for it (attnq evolve status) or stop it, then resume with "
                             f"attnq evolve --run {run_id}") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def driven_now(state_dir: Path, run_id: str) -> bool:
    """Whether an ``attnq evolve`` process holds ``run_id``'s driver lock (:func:`run_lock`) at this moment."""
    path = Path(state_dir) / "evolve" / ".locks" / f"{run_id}.lock"
    if not RUN_NAME.fullmatch(run_id) or not path.is_file():
        return False
    with open(path, encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def latest_run(db: EvolveDB, campaign_id: str, state_dir: Path | None = None) -> RunRecord | None:
    """The campaign's most recent live run, else its most recent run, else None. Live: recorded as running and,
    where ``state_dir`` is given, driven now: an MCP run (its server drives it) or one whose ``attnq evolve`` process
    holds the driver lock (:func:`driven_now`). A run whose driver died before it could record its stop is not
    preferred over a newer run (``attnq evolve export`` once wrote a killed run's best, not the finished newer one's)."""
    runs = db.runs(campaign_id)
    live = [r for r in runs if r.state == "running" and (
        state_dir is None or r.config.get("mutator") == "mcp" or driven_now(state_dir, r.run_id))]
    return (live or runs or [None])[-1]


#: An evolve run's name: also its folder under ``<state>/evolve/`` (programs), so no path separators or dots first.
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def new_run_id(db: EvolveDB, base: str = "evolve") -> str:
    """``base-N`` with the first N not taken."""
    taken = {r.run_id for r in db.runs()}
    n = 1
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def preflight(cfg: EvolveConfig) -> None:
    """Refuse, before a run is created or resumed, what would stop the seed's first evaluation: a goal
    anchor that cannot be timed here (AnchorUnavailableError, exit 2) and, for the ``harness`` evaluator
    on the local pool, a device in ``cfg.gpus`` that does not run ``cfg.arch`` (NoGpuError, exit 3).
    A Dask pool's workers bring their own GPUs; the ``compile_facts`` evaluator needs none."""
    from harness.anchors import require_anchors

    require_anchors([cfg.goal_against])
    if cfg.evaluator == "harness" and cfg.backend == "local":
        from harness.gpu import require_gpu

        for gpu in cfg.gpus:
            require_gpu(cfg.arch, gpu, what=f"attnq evolve (evaluator harness, GPU {gpu})")


def kept_on_resume(stored: dict[str, Any], cfg: EvolveConfig) -> dict[str, tuple[Any, Any]]:
    """The settings ``cfg`` gives that a resumed run does not take: ``{field: (the run's value, the given one)}``
    for every field set in ``cfg`` that is not in :data:`RESUMABLE_FIELDS` (budgets, placement and the mutator
    command are; the search itself, e.g. islands, knobs, suites, goal, is fixed at the start) and differs from
    ``stored`` (the run's config as JSON). Empty when the same flags are given again."""
    given = cfg.model_dump(mode="json")
    return {k: (stored.get(k), given[k]) for k in sorted(cfg.model_fields_set)
            if k not in RESUMABLE_FIELDS and given.get(k) != stored.get(k)}


def start_or_resume(db: EvolveDB, *, campaign_id: str, state_dir: Path, cfg: EvolveConfig, run_id: str | None,
                    seed_path: Path | None, bank: Any = None, resume: bool = True) -> tuple[Search, bool]:
    """``(search, created)``: the named run resumed (budget and placement taken from ``cfg``), or a new
    run from ``seed_path``.

    Raises:
        InputError: the seed file cannot be read; a named run belongs to another campaign; ``run_id`` is not a
            plain name (:data:`RUN_NAME`: it names a folder).
        StoreError: ``resume`` is False and the run exists.
        AnchorUnavailableError, NoGpuError: from :func:`preflight`, before anything is written.
    """
    if run_id is not None and not RUN_NAME.fullmatch(run_id):  # the name is a folder under <state>/evolve/
        raise InputError(f"evolve run name {run_id!r}: use letters, digits, '.', '_' and '-' (up to 100, "
                         "starting with a letter or digit), e.g. h200-knobs")
    if run_id is not None and (rec := db.run_or_none(run_id)) is not None:
        if not resume:
            raise StoreError(f"evolve run {run_id!r} exists: resume it (drop --new) or choose another --run")
        if rec.campaign_id != campaign_id:
            raise InputError(f"evolve run {run_id!r} belongs to campaign {rec.campaign_id!r}, not {campaign_id!r}")
        stored = dict(rec.config)
        given = cfg.model_dump(mode="json")
        if kept := kept_on_resume(stored, cfg):
            log.warning("evolve_resume_kept", run=run_id, fields={k: {"run": a, "given": b} for k, (a, b) in kept.items()})
        stored.update({k: given[k] for k in RESUMABLE_FIELDS if k in cfg.model_fields_set})
        effective = EvolveConfig(**stored)
        preflight(effective)
        db.update_run(run_id, config=effective.model_dump(mode="json"))
        if rec.state != "running":
            db.update_run(run_id, state="running", stop_reason=None)
        return Search(db, run_id, bank=bank, state_dir=state_dir), False
    if seed_path is None and run_id is not None:  # most often a mistyped name: say which runs there are
        known = ", ".join(r.run_id for r in db.runs()) or "none"
        raise InputError(f"no evolve run {run_id!r} to resume (known runs: {known}); to start it, give the seed "
                         f"program: attnq evolve --run {run_id} --from FILE")
    if seed_path is None:
        raise InputError("no evolve run to resume: give the seed program (attnq evolve --from FILE; MCP: seed_path)")
    try:
        source = Path(seed_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the seed program {seed_path}: {exc}") from None
    preflight(cfg)
    rid = run_id or new_run_id(db, cfg.group or "evolve")
    return Search.create(db, rid, campaign_id, cfg, source, seed_path=str(seed_path), state_dir=state_dir,
                         bank=bank), True


def _produce(search: Search, mutator: KnobMutator | CommandMutator, tickets: list[TicketRecord]) -> None:
    """Children for ``tickets`` (slot order), accepted into the run."""
    db, cfg = search.db, search.cfg
    if isinstance(mutator, KnobMutator):
        known = {p.norm_sha256 for p in db.programs(search.run_id)}
        for t in tickets:
            rng = random.Random(f"{cfg.seed}:{t.generation}:{t.slot}:knob")
            parent = db.program(t.parent_id)
            other = db.program(t.inspiration_id).source_text if t.kind == "crossover" and t.inspiration_id else None
            try:
                src, note = mutator.mutate(parent.source_text, t.question_id or "", rng, known=known,
                                           inspiration=other)
            except InputError as err:
                search.fail_ticket(t, err.message)
                continue
            known.add(search.accept_child(t, src, mutator="knob", note=note).norm_sha256)
        return
    outcomes = mutator.mutate_many([search.brief(t) for t in tickets])
    for t, out in zip(tickets, outcomes):
        if out.source is None:
            search.fail_ticket(t, out.error or "no source")
        else:
            search.accept_child(t, out.source, mutator="command", note=out.note)


def run_search(search: Search, pool: EvalPool, mutator: KnobMutator | CommandMutator, *,
               progress: Progress | None = None, stop: threading.Event | None = None) -> RunRecord:
    """Evaluate the seed, then run generations until the goal, a budget, or ``stop`` ends the run."""
    budget = Budget(search.cfg, search.db, search.run)
    say = progress or (lambda _msg: None)
    try:
        seed = search.seed_program()
        if seed.status == "pending":
            say(f"evaluating the seed #{seed.id} ({pool.description})")
            seed = search.evaluate_one(seed, pool, budget, progress)
            if seed.status == "pending":
                return search.finish("budget", budget.exhausted() or "budget spent before the seed", budget)
        if seed.status != "correct":
            return search.finish("failed", f"the seed #{seed.id} is {seed.status} ({seed.failure_kind or '-'}): "
                                           "the search needs a correct seed", budget)
        search.close_generation(0)
        while True:
            if stop is not None and stop.is_set():
                return search.finish("stopped", "stopped by the user", budget)
            g = search.run.generation
            if search.generation_complete(g):
                search.close_generation(g)
                if (why := search.stop_reason(budget)) is not None:
                    return search.finish(*why, budget)
                tickets = search.plan_generation()
                g += 1
                say(f"generation {g}: {len(tickets)} tickets")
            else:
                if (why := search.stop_reason(budget)) is not None:
                    return search.finish(*why, budget)
                tickets = search.db.tickets(search.run_id, g)
            _produce(search, mutator, [t for t in tickets if t.state in ("planned", "issued")])
            pending = [p for p in search.db.programs(search.run_id, status="pending") if p.generation == g]
            search.evaluate(pending, pool, budget, progress)
            search.db.update_run(search.run_id, elapsed_s=round(budget.elapsed_s(), 3))
            if not search.generation_complete(g) and budget.exhausted() is None:
                stuck = [t.id for t in search.db.tickets(search.run_id, g) if t.state not in ("done", "failed")]
                raise StoreError(f"generation {g} cannot complete: tickets {stuck} are neither done nor failed")
    except BaseException:
        search.db.update_run(search.run_id, elapsed_s=round(budget.elapsed_s(), 3))
        raise


# -- the external (MCP) mutator --------------------------------------------------------------------
def issue_ticket(search: Search, child_dir: Path) -> TicketRecord | str:
    """The next ticket for an external mutator, its child file primed with the parent's source; or why
    there is none (``"seed"``: the seed is not evaluated yet; ``"evaluating"``: every ticket of the
    generation is out or being evaluated; otherwise the run's stop reason).

    An unsubmitted ticket is handed out again once every ticket of the generation has been issued.
    """
    with search.lock:
        seed = search.seed_program()
        if seed.status == "pending":
            return "seed"
        if seed.status != "correct":
            return f"the seed #{seed.id} is {seed.status}: the search needs a correct seed"
        run = search.run
        if run.state != "running":
            return run.stop_reason or run.state
        budget = Budget(search.cfg, search.db, run)
        g = run.generation
        if search.generation_complete(g):
            search.close_generation(g)
            if (why := search.stop_reason(budget)) is not None:
                return search.finish(*why).stop_reason or why[1]
            search.plan_generation()
            g += 1
        tickets = search.db.tickets(search.run_id, g)
        ticket = next((t for t in tickets if t.state == "planned"), None) or next(
            (t for t in sorted(tickets, key=lambda t: t.updated_at) if t.state == "issued"), None)
        if ticket is None:
            return "evaluating"
        path = Path(ticket.child_path) if ticket.child_path else child_dir / f"g{g:03d}-t{ticket.id}.cu"
        if ticket.state == "planned" or not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(search.db.program(ticket.parent_id).source_text, encoding="utf-8")
        return search.db.update_ticket(ticket.id, state="issued", child_path=str(path))


def submit_child(search: Search, ticket_id: int, source: str) -> ProgramRecord:
    """Accept an external mutator's child for ``ticket_id`` (idempotent per ticket).

    Raises:
        InputError: an unknown ticket, one of another run, or one that failed.
    """
    try:
        ticket = search.db.ticket(ticket_id)
    except StoreError:
        raise InputError(f"no evolve ticket {ticket_id}: call evolve_next for one") from None
    if ticket.run_id != search.run_id:
        raise InputError(f"ticket {ticket_id} belongs to run {ticket.run_id!r}, not {search.run_id!r}")
    if ticket.state == "failed":
        raise InputError(f"ticket {ticket_id} failed ({ticket.note}); call evolve_next for another")
    if ticket.program_id is None and ticket.state == "planned":
        raise InputError(f"ticket {ticket_id} was not handed out yet: call evolve_next")
    return search.accept_child(ticket, source, mutator="mcp")
