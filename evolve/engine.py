"""The search: generations of tickets (planned mutations), children, cascaded evaluations, integration.

One generation ``g``:

1. **plan** (:meth:`Search.plan_generation`): ``children_per_generation`` tickets; slot ``s`` goes to
   island ``s mod islands``, selects a parent (exploit / explore / elite), maybe an inspiration from
   another island (a crossover when the draw says so) and one question from the bandit. The generator
   of slot ``s`` is seeded with ``(seed, g, s)`` and planning reads only programs of generations
   ``< g``, so a plan is a pure function of the seed and the earlier results: the same under a
   restart, and the same for every ablation arm until their results differ;
2. **mutate**: a mutator turns each ticket's brief into a child (knob, command, or an MCP agent);
3. **accept** (:meth:`Search.accept_child`): near-duplicate checks (evolve.dedup), then the child is
   a ``pending`` program (or ``rejected``, counted);
4. **evaluate** (:meth:`Search.evaluate`): the cascade (evolve.evaluate.next_stage) for every pending
   child at once through the pool; fitness, descriptors and archive cell are written per program;
5. **close** (:meth:`Search.close_generation`): every ``migration_interval`` generations the islands'
   elites migrate.

The run stops when a program meets the goal on the full stage, or at the first exhausted budget
(evaluations, GPU-hours, wall time, generations), or when the mutator has produced nothing new for
``IDLE_GENERATIONS`` generations in a row (every child a duplicate, every mutation failed: a knob space
that is used up would otherwise loop forever, writing one rejected program per child). Everything is in evolve.db's tables; a restarted
run finishes the generation it was in (re-mutating planned tickets, re-evaluating pending children).
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from evolve.bandit import Arm, Pull, choose
from evolve.brief import MutationBrief, crossover_arms, crossover_text, program_brief, question_arms, render_brief
from evolve.config import PLAIN_INSTRUCTION, EvolveConfig, KnobSpec
from evolve.db import EvolveDB, ProgramRecord, RunRecord, TicketRecord
from evolve.dedup import check_child, norm_sha256
from evolve.evaluate import StageResult, next_stage
from evolve.mutators import knob_specs
from evolve.pool import EvalPool
from evolve.select import cell_of, descriptors, migration_plan, pick_inspiration, select_parent
from harness.errors import InputError, StoreError
from harness.logging import get_logger

log = get_logger("attnq.evolve")

#: How many ancestor edges the re-added-lines rule looks back along.
LINEAGE_DEPTH = 8
#: Generations in a row without a new program (all children rejected or no child made) that end a run.
IDLE_GENERATIONS = 8
Progress = Callable[[str], None]


class Budget:
    """Evaluations, GPU-hours and wall time left to a run (counts from the DB plus this session).

    ``take()`` reserves one GPU-stage evaluation (thread-safe); False once any budget is spent.
    """

    def __init__(self, cfg: EvolveConfig, db: EvolveDB, run: RunRecord) -> None:
        evals = [e for e in db.evaluations(run.run_id) if e.stage != "compile"]
        self.cfg = cfg
        self.evaluations = len(evals)
        self.gpu_s = sum(e.gpu_s or 0.0 for e in evals)
        self.elapsed_before_s = run.elapsed_s
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def elapsed_s(self) -> float:
        """Wall seconds of the run, earlier sessions included."""
        return self.elapsed_before_s + time.monotonic() - self.started

    def exhausted(self) -> str | None:
        """Which budget is spent, in words, or None."""
        c = self.cfg
        if c.max_evaluations is not None and self.evaluations >= c.max_evaluations:
            return f"evaluation budget spent ({self.evaluations} of {c.max_evaluations})"
        if c.max_gpu_hours is not None and self.gpu_s / 3600 >= c.max_gpu_hours:
            return f"GPU-hour budget spent ({self.gpu_s / 3600:.3f} of {c.max_gpu_hours:g} h)"
        if c.max_wall_s is not None and self.elapsed_s() >= c.max_wall_s:
            return f"wall-time budget spent ({self.elapsed_s():.0f} of {c.max_wall_s:g} s)"
        return None

    def take(self) -> bool:
        """Reserve one GPU-stage evaluation; False when a budget is spent."""
        with self._lock:
            if self.exhausted() is not None:
                return False
            self.evaluations += 1
            return True

    def spent(self, gpu_s: float) -> None:
        """Add the GPU seconds of a finished stage."""
        with self._lock:
            self.gpu_s += gpu_s


class Search:
    """One run over its tables. Thread-safe for the MCP tools (one lock around planning/accepting)."""

    def __init__(self, db: EvolveDB, run_id: str, *, bank: Any = None, state_dir: Path) -> None:
        self.db = db
        self.run_id = run_id
        self.bank = bank
        self.state_dir = Path(state_dir)
        self.lock = threading.RLock()
        self.cfg = EvolveConfig(**db.run(run_id).config)

    # -- creation -----------------------------------------------------------------------------
    @classmethod
    def create(cls, db: EvolveDB, run_id: str, campaign_id: str, cfg: EvolveConfig, seed_source: str, *,
               seed_path: str, state_dir: Path, bank: Any = None) -> Search:
        """A new run from ``seed_source`` (its seed program is ``pending`` until evaluated).

        Raises:
            InputError: an empty seed, a knob run whose knobs are not in the seed, a question run without a bank.
            StoreError: ``run_id`` exists.
        """
        if not seed_source.strip():
            raise InputError(f"{seed_path}: the seed program is empty")
        if cfg.mutator == "knob":
            cfg = cfg.model_copy(update={"knobs": knob_specs(seed_source, cfg.knobs)})
        elif cfg.arm == "question" and bank is None:
            raise InputError("a question arm needs the question bank")
        db.create_run(run_id, campaign_id, arm=cfg.arm, seed=cfg.seed, config=cfg.model_dump(mode="json"))
        search = cls(db, run_id, bank=bank, state_dir=state_dir)
        seed = search._add_program(seed_source, parent=None, island=0, generation=0, mutator="seed",
                                   status="pending", path_hint=seed_path)
        db.update_run(run_id, seed_program_id=seed.id)
        return search

    @property
    def run(self) -> RunRecord:
        """The run's row, fresh from the DB."""
        return self.db.run(self.run_id)

    def _add_program(self, source: str, *, parent: ProgramRecord | None, island: int, generation: int,
                     mutator: str, status: str, path_hint: str | None = None, **extra: Any) -> ProgramRecord:
        prog = self.db.add_program(self.run_id, source_sha256=hashlib.sha256(source.encode()).hexdigest(),
                                   norm_sha256=norm_sha256(source), source_text=source, path=path_hint or "",
                                   parent_id=parent.id if parent else None, island=island, generation=generation,
                                   mutator=mutator, status=status,
                                   parent_fitness_quick=parent.fitness_quick if parent else None, **extra)
        path = self.state_dir / "evolve" / self.run_id / "programs" / f"p{prog.id:05d}.cu"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
        return self.db.update_program(prog.id, path=str(path))

    # -- derived state ------------------------------------------------------------------------
    def seed_program(self) -> ProgramRecord:
        """The run's seed program."""
        sid = self.run.seed_program_id
        if sid is None:
            raise StoreError(f"evolve run {self.run_id!r} has no seed program")
        return self.db.program(sid)

    def arms(self, kind: str = "mutation") -> list[Arm]:
        """What the bandit chooses among for a ticket of ``kind`` (knobs for the knob mutator)."""
        if kind == "crossover":
            return crossover_arms()
        if self.cfg.mutator == "knob":
            return [Arm(id=k.key, layer="knob", text=f"tune {', '.join(k.names)}") for k in self._knobs()]
        if self.bank is None:
            raise InputError("question arms need the question bank")
        arms = question_arms(self.bank, self.cfg.question_triggers)
        if not arms:
            raise InputError(f"no bank question fits the triggers {self.cfg.question_triggers}")
        return arms

    def _knobs(self) -> list[KnobSpec]:
        return list(self.cfg.knobs)

    @staticmethod
    def pulls(programs: list[ProgramRecord], min_gain: float) -> list[Pull]:
        """Bandit data: one pull per finished child (rejected and failed children did not improve)."""
        out = []
        for p in programs:
            if p.parent_id is None or p.question_id is None or p.status == "pending":
                continue
            improved = p.status == "correct" and p.improvement is not None and p.improvement >= min_gain
            out.append(Pull(arm_id=p.question_id, layer=p.layer or "?", improved=improved,
                            improvement=p.improvement if p.status == "correct" else None))
        return out

    def lineage_pairs(self, parent: ProgramRecord) -> list[tuple[str, str]]:
        """``(grandparent source, parent source)``-style edges along ``parent``'s ancestry, nearest first."""
        out: list[tuple[str, str]] = []
        node = parent
        while node.parent_id is not None and len(out) < LINEAGE_DEPTH:
            up = self.db.program(node.parent_id)
            out.append((up.source_text, node.source_text))
            node = up
        return out

    # -- planning -----------------------------------------------------------------------------
    def plan_generation(self) -> list[TicketRecord]:
        """Plan generation ``run.generation + 1`` (or complete a half-planned one); see the module docstring.

        Raises:
            InputError: the seed is not evaluated and correct.
        """
        with self.lock:
            run = self.run
            seed = self.seed_program()
            if seed.status != "correct":
                raise InputError(f"the seed program #{seed.id} is {seed.status}: the search needs a correct seed")
            g = run.generation + 1
            have = {t.slot for t in self.db.tickets(self.run_id, g)}
            if len(have) >= self.cfg.children_per_generation:  # planned before a restart: adopt it
                self.db.update_run(self.run_id, generation=g)
                return self.db.tickets(self.run_id, g)
            earlier = [p for p in self.db.programs(self.run_id) if p.generation < g]
            moved = [m for m in self.db.migrations(self.run_id) if m["generation"] < g]
            pulls = self.pulls(earlier, self.cfg.bandit_min_gain)
            for slot in range(self.cfg.children_per_generation):
                if slot not in have:
                    self._plan_slot(g, slot, earlier, moved, pulls)
            self.db.update_run(self.run_id, generation=g)
            return self.db.tickets(self.run_id, g)

    def _plan_slot(self, g: int, slot: int, earlier: list[ProgramRecord], moved: list[dict[str, Any]],
                   pulls: list[Pull]) -> TicketRecord:
        cfg = self.cfg
        rng = random.Random(f"{cfg.seed}:{g}:{slot}")
        island = slot % cfg.islands
        parent, how = select_parent(earlier, moved, island, size=cfg.island_size, ratios=cfg.ratios(), rng=rng)
        insp = None
        if cfg.islands > 1 and rng.random() < cfg.inspiration_rate:
            insp = pick_inspiration(earlier, moved, island, parent, islands=cfg.islands, size=cfg.island_size,
                                    rng=rng)
        kind = "crossover" if insp is not None and cfg.arm == "question" and rng.random() < cfg.crossover_rate \
            else "mutation"
        if kind == "crossover" and cfg.mutator == "knob":
            qid, layer, text = "knob:crossover", "crossover", f"take knob settings of program #{insp.id}"  # type: ignore[union-attr]
        elif kind == "crossover":
            arm = choose(self.arms("crossover"), pulls, rng).arm
            qid, layer, text = arm.id, arm.layer, crossover_text(arm.id, parent, insp)  # type: ignore[arg-type]
        elif cfg.arm == "question":
            arm = choose(self.arms(), pulls, rng).arm
            qid, layer, text = arm.id, arm.layer, arm.text
        elif cfg.mutator == "knob":  # ablation arms of a knob run: a uniformly drawn knob, no bandit
            arm = rng.choice(sorted(self.arms(), key=lambda a: a.id))
            qid, layer, text = arm.id, arm.layer, arm.text
        else:
            qid, layer = cfg.arm, cfg.arm
            text = PLAIN_INSTRUCTION if cfg.arm == "plain" else ""
        return self.db.add_ticket(self.run_id, generation=g, slot=slot, island=island, parent_id=parent.id,
                                  inspiration_id=insp.id if insp else None, kind=kind, selection=how,
                                  question_id=qid, layer=layer, question_text=text, arm=cfg.arm)

    def brief(self, ticket: TicketRecord, child_path: str | None = None) -> MutationBrief:
        """The mutation brief of a ticket (see evolve.brief)."""
        parent = self.db.program(ticket.parent_id)
        insp = self.db.program(ticket.inspiration_id) if ticket.inspiration_id else None
        b = MutationBrief(run_id=self.run_id, ticket_id=ticket.id, generation=ticket.generation, island=ticket.island,
                          kind=ticket.kind, selection=ticket.selection, arm=ticket.arm,
                          question_id=ticket.question_id if ticket.arm == "question" else None,
                          layer=ticket.layer if ticket.arm == "question" else None,
                          question=ticket.question_text or "", parent=program_brief(parent),
                          parent_source=parent.source_text, inspiration=program_brief(insp) if insp else None,
                          inspiration_source=insp.source_text if insp else None, child_path=child_path)
        failed = [p for p in self.db.programs(self.run_id) if p.parent_id == parent.id
                  and p.status in ("failed_compile", "incorrect", "error")]
        b.failed_children = [f"#{p.id} {p.status} ({p.failure_kind or '-'}) after {p.question_id or 'no question'}"
                             for p in failed[-3:]]
        b.text = render_brief(b)
        return b

    # -- children -----------------------------------------------------------------------------
    def accept_child(self, ticket: TicketRecord, source: str, *, mutator: str, note: str = "") -> ProgramRecord:
        """Record the child of ``ticket``: ``rejected`` (near duplicate, counted) or ``pending``.

        Idempotent: a ticket that already has a child returns it.
        """
        with self.lock:
            ticket = self.db.ticket(ticket.id)
            if ticket.program_id is not None:
                return self.db.program(ticket.program_id)
            parent = self.db.program(ticket.parent_id)
            known = [(p.id, p.source_text) for p in self.db.programs(self.run_id)]
            model = mutator != "knob"
            check = check_child(source, parent.source_text, known, self.lineage_pairs(parent) if model else [],
                                threshold=self.cfg.duplicate_similarity if model else 1.0,
                                readd_max_fraction=self.cfg.readd_max_fraction if model else None,
                                readd_min_lines=self.cfg.readd_min_lines)
            prog = self._add_program(
                source, parent=parent, island=ticket.island, generation=ticket.generation, mutator=mutator,
                status="rejected" if check.rejected else "pending", inspiration_id=ticket.inspiration_id,
                ticket_id=ticket.id, question_id=ticket.question_id, layer=ticket.layer,
                question_text=ticket.question_text, arm=ticket.arm,
                reject_reason=f"{check.reason}: {check.message}" if check.rejected else None,
                similarity=check.similarity, added_lines=check.added_lines, readded_lines=check.readded_lines)
            self.db.update_ticket(ticket.id, program_id=prog.id, state="done" if check.rejected else "submitted",
                                  note=note or None)
            return prog

    def fail_ticket(self, ticket: TicketRecord, error: str) -> TicketRecord:
        """A mutator produced no child for ``ticket`` (its error is kept; no bandit pull is counted)."""
        return self.db.update_ticket(ticket.id, state="failed", note=error[:1000])

    # -- evaluation ---------------------------------------------------------------------------
    def evaluate(self, programs: list[ProgramRecord], pool: EvalPool, budget: Budget,
                 progress: Progress | None = None) -> list[ProgramRecord]:
        """Run the cascade for ``programs`` concurrently (compiles ahead, GPU stages as GPUs free up)."""
        if not programs:
            return []
        workers = max(1, min(len(programs), pool.gpu_count + self.cfg.compile_workers))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="attnq-evolve") as ex:
            return list(ex.map(lambda p: self.evaluate_one(p, pool, budget, progress), programs))

    def evaluate_one(self, prog: ProgramRecord, pool: EvalPool, budget: Budget,
                     progress: Progress | None = None) -> ProgramRecord:
        """The cascade for one program; its row is updated after every stage. A program whose GPU stage
        finds the budget spent stays ``pending`` (a resumed run evaluates it)."""
        cfg = self.cfg
        parent = self.db.program(prog.parent_id) if prog.parent_id is not None else None
        parent_quick = parent.fitness_quick if parent else None
        done: list[StageResult] = []
        spec = cfg.evaluator_spec(str(self.state_dir))
        while (stage := next_stage(done, parent_quick=parent_quick, full_stage=cfg.full_stage,
                                   full_min_gain=cfg.full_min_gain, is_seed=parent is None)) is not None:
            if stage != "compile" and not budget.take():
                log.info("evolve_budget_stops_program", program=prog.id, stage=stage)
                return self.db.program(prog.id)
            res = pool.run(spec, prog.source_text, f"p{prog.id}", stage)
            budget.spent(res.gpu_s)
            done.append(res)
            self.db.add_evaluation(self.run_id, prog.id, stage, status=res.status, fitness=res.fitness,
                                   goal_met=res.goal_met if stage == "full" else None, wall_s=res.wall_s,
                                   gpu_s=res.gpu_s, worker=res.worker, result=res.model_dump(mode="json"))
        return self._finish_program(prog, parent, done, progress)

    def _finish_program(self, prog: ProgramRecord, parent: ProgramRecord | None, done: list[StageResult],
                        progress: Progress | None) -> ProgramRecord:
        by = {r.stage: r for r in done}
        comp, quick, full = by.get("compile"), by.get("quick"), by.get("full")
        last = done[-1]
        status = {"compiled": "correct", "failed_compile": "failed_compile"}.get(last.status, last.status)
        fields: dict[str, Any] = {"status": status, "stage": last.stage, "failure_kind": last.failure_kind,
                                  "compile": comp.facts if comp else None,
                                  "quick": quick.model_dump(mode="json", exclude={"facts"}) if quick else None,
                                  "full": full.model_dump(mode="json", exclude={"facts"}) if full else None,
                                  "fitness_quick": quick.fitness if quick else None,
                                  "fitness_full": full.fitness if full else None,
                                  "goal_met": full.goal_met if full else None}
        if status == "correct":
            desc = descriptors(comp.facts if comp else None, quick.geomean_by_group if quick else None,
                               prog.source_text)
            fields.update(descriptors=desc, cell=cell_of(desc))
            if parent is not None and parent.fitness_quick and quick and quick.fitness is not None:
                fields["improvement"] = round(quick.fitness / parent.fitness_quick - 1, 6)
        out = self.db.update_program(prog.id, **fields)
        note = None
        if prog.ticket_id is not None:
            note = self.db.update_ticket(prog.ticket_id, state="done").note
        if progress is not None:
            progress(describe(out, note))
        return out

    # -- generations and stopping -------------------------------------------------------------
    def generation_complete(self, g: int) -> bool:
        """Every ticket of ``g`` is done or failed and no child of ``g`` waits for evaluation."""
        if g == 0:
            return self.seed_program().status != "pending"
        tickets = self.db.tickets(self.run_id, g)
        return bool(tickets) and all(t.state in ("done", "failed") for t in tickets) and not any(
            p.generation == g for p in self.db.programs(self.run_id, status="pending"))

    def close_generation(self, g: int) -> list[tuple[int, int, int]]:
        """Migrations due after generation ``g`` (idempotent); the seed joins every island after ``g = 0``."""
        cfg = self.cfg
        with self.lock:
            programs = [p for p in self.db.programs(self.run_id) if p.generation <= g]
            moved = self.db.migrations(self.run_id)
            if g == 0:
                seed = self.seed_program()
                moves = [(seed.id, 0, i) for i in range(1, cfg.islands)] if seed.status == "correct" else []
            elif g % cfg.migration_interval == 0:
                moves = migration_plan(programs, moved, islands=cfg.islands, size=cfg.island_size,
                                       count=cfg.migration_count)
            else:
                moves = []
            for pid, src, dst in moves:
                self.db.add_migration(self.run_id, g, pid, src, dst)
            return moves

    def goal_program(self) -> ProgramRecord | None:
        """The first program that met the goal on the full stage, if any."""
        return next((p for p in self.db.programs(self.run_id, status="correct") if p.goal_met), None)

    def stop_reason(self, budget: Budget) -> tuple[str, str] | None:
        """``(state, reason)`` when the run must stop: the goal met, a budget spent, the generation cap."""
        if (p := self.goal_program()) is not None:
            return "goal_met", f"program #{p.id} met the goal on the full stage ({p.fitness_full:.4f}x)"
        if (why := budget.exhausted()) is not None:
            return "budget", why
        g = self.run.generation
        if self.cfg.max_generations is not None and g >= self.cfg.max_generations and self.generation_complete(g):
            return "budget", f"generation budget spent ({g} of {self.cfg.max_generations})"
        if g >= IDLE_GENERATIONS and self.generation_complete(g) and self.idle_generations() >= IDLE_GENERATIONS:
            knob = "; every setting of the knobs that the search can reach was tried: widen --knob" \
                if self.cfg.mutator == "knob" else ""
            return "budget", (f"search exhausted: no new program in the last {IDLE_GENERATIONS} generations (every "
                              f"child a duplicate of a known program or a failed mutation){knob}")
        return None

    def idle_generations(self) -> int:
        """Complete generations in a row, counting back from the latest, that added no program to evaluate
        (every child rejected as a duplicate, or no child made)."""
        made = {p.generation for p in self.db.programs(self.run_id) if p.status != "rejected"}
        g, idle = self.run.generation, 0
        while g > 0 and g not in made:
            idle, g = idle + 1, g - 1
        return idle

    def finish(self, state: str, reason: str, budget: Budget | None = None) -> RunRecord:
        """Record the run's end (and its wall time)."""
        fields: dict[str, Any] = {"state": state, "stop_reason": reason}
        if budget is not None:
            fields["elapsed_s"] = round(budget.elapsed_s(), 3)
        log.info("evolve_stopped", run=self.run_id, state=state, reason=reason)
        return self.db.update_run(self.run_id, **fields)


def describe(p: ProgramRecord, note: str | None = None) -> str:
    """One line about a program's outcome (progress output); ``note``: the mutator's note (a knob change)."""
    q = f" [{note or p.question_id}]" if note or p.question_id else ""
    if p.status == "rejected":
        return f"gen {p.generation} #{p.id}{q}: rejected ({(p.reject_reason or '').split(':')[0]})"
    if p.status != "correct":
        return f"gen {p.generation} #{p.id}{q}: {p.status} ({p.failure_kind or p.stage})"
    full = f", full {p.fitness_full:.4f}x" if p.fitness_full is not None else ""
    imp = f" ({p.improvement:+.2%} vs parent #{p.parent_id})" if p.improvement is not None else ""
    return f"gen {p.generation} #{p.id}{q}: quick {p.fitness_quick:.4f}x{imp}{full}"
