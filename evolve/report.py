"""What a run did: its status, the report (best per generation, lineage of the best, per-question and
per-layer child improvement, duplicate rate, ablation arms compared) and the export of the best program.

The best program is the fittest on the ``full`` stage (the stage the goal is judged on); before any
child reached ``full``, the fittest on ``quick``, marked so.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from evolve.bandit import ArmStats, arm_stats, layer_stats
from evolve.config import EvolveConfig
from evolve.db import EvolveDB, ProgramRecord, RunRecord
from evolve.engine import Search
from evolve.select import archive, island_members
from harness.errors import InputError


class BestProgram(BaseModel):
    """The run's best program so far."""

    id: int
    generation: int
    stage: str = Field(description="full, or quick when no program reached full yet")
    fitness: float
    fitness_quick: float | None = None
    fitness_full: float | None = None
    goal_met: bool | None = None
    question_id: str | None = None
    path: str


class IslandStatus(BaseModel):
    """One island's population."""

    island: int
    size: int
    best_id: int | None = None
    best_fitness_quick: float | None = None


class RunStatus(BaseModel):
    """Where a run stands (``attnq evolve status``; MCP ``campaign_status``)."""

    run_id: str
    campaign_id: str
    arm: str
    mutator: str
    evaluator: str
    state: str
    stop_reason: str | None = None
    generation: int
    programs: int
    correct: int
    failed: int = Field(description="failed_compile, incorrect or error")
    rejected: int = Field(description="near duplicates rejected before evaluation")
    pending: int
    tickets_open: int = Field(description="tickets of the current generation not done yet")
    evaluations: dict[str, int] = Field(default_factory=dict, description="stage -> evaluations")
    gpu_hours: float
    elapsed_s: float
    evaluations_per_hour: float | None = Field(default=None, description="GPU-stage evaluations per wall hour")
    gpu_s_per_evaluation: float | None = None
    best: BestProgram | None = None
    islands: list[IslandStatus] = Field(default_factory=list)
    archive_cells: int = 0


class GenerationRow(BaseModel):
    """One generation: its children and the best fitness so far."""

    generation: int
    children: int
    correct: int
    improved: int
    rejected: int
    best_quick: float | None = Field(default=None, description="best quick fitness among this generation")
    best_so_far_quick: float | None = None
    best_so_far_full: float | None = None


class LineageRow(BaseModel):
    """One ancestor of the best program (seed first)."""

    id: int
    generation: int
    question_id: str | None = None
    question: str | None = None
    fitness_quick: float | None = None
    fitness_full: float | None = None
    improvement: float | None = None
    change: str | None = Field(default=None, description="the mutator's note on its change (a knob's old -> new)")


class DuplicateStats(BaseModel):
    """Near-duplicate rejection: how many children were rejected and how many added lines re-add removed ones."""

    children: int
    rejected: int
    rate: float | None
    by_reason: dict[str, int] = Field(default_factory=dict)
    added_lines: int = 0
    readded_lines: int = 0
    readded_fraction: float | None = None


class ArmSummary(BaseModel):
    """One ablation arm of a group: best fitness against evaluations spent, improving-child rate."""

    run_id: str
    arm: str
    evaluations: int
    best_quick: float | None
    best_full: float | None
    improving_rate: float | None
    best_vs_evaluations: list[tuple[int, float]] = Field(default_factory=list,
                                                         description="(GPU evaluations so far, best quick fitness)")


class Report(BaseModel):
    """``attnq evolve report`` (and the MCP resource attnq://evolve/report)."""

    status: RunStatus
    generations: list[GenerationRow]
    lineage: list[LineageRow]
    per_question: list[ArmStats]
    per_layer: list[ArmStats]
    duplicates: DuplicateStats
    arms: list[ArmSummary] = Field(default_factory=list, description="runs of the same ablation group")


def best_program(programs: list[ProgramRecord]) -> BestProgram | None:
    """The fittest program on full, else on quick (see the module docstring)."""
    ok = [p for p in programs if p.status == "correct"]
    full = [p for p in ok if p.fitness_full is not None]
    if full:
        p = max(full, key=lambda p: (p.fitness_full, -p.id))
        stage, fit = "full", p.fitness_full
    elif (quick := [p for p in ok if p.fitness_quick is not None]):
        p = max(quick, key=lambda p: (p.fitness_quick, -p.id))
        stage, fit = "quick", p.fitness_quick
    else:
        return None
    return BestProgram(id=p.id, generation=p.generation, stage=stage, fitness=fit or 0.0,
                       fitness_quick=p.fitness_quick, fitness_full=p.fitness_full, goal_met=p.goal_met,
                       question_id=p.question_id, path=p.path)


def run_status(db: EvolveDB, run: RunRecord) -> RunStatus:
    """The status of ``run`` from its tables."""
    cfg = EvolveConfig(**run.config)
    programs = db.programs(run.run_id)
    evals = db.evaluations(run.run_id)
    migrations = db.migrations(run.run_id)
    counts: dict[str, int] = {}
    for e in evals:
        counts[e.stage] = counts.get(e.stage, 0) + 1
    gpu_evals = [e for e in evals if e.stage != "compile"]
    gpu_s = sum(e.gpu_s or 0.0 for e in gpu_evals)
    islands = []
    for i in range(cfg.islands):
        members = island_members(programs, migrations, i, cfg.island_size)
        islands.append(IslandStatus(island=i, size=len(members), best_id=members[0].id if members else None,
                                    best_fitness_quick=members[0].fitness_quick if members else None))
    open_tickets = [t for t in db.tickets(run.run_id, run.generation) if t.state not in ("done", "failed")]
    return RunStatus(
        run_id=run.run_id, campaign_id=run.campaign_id, arm=run.arm, mutator=cfg.mutator, evaluator=cfg.evaluator,
        state=run.state, stop_reason=run.stop_reason, generation=run.generation, programs=len(programs),
        correct=sum(p.status == "correct" for p in programs),
        failed=sum(p.status in ("failed_compile", "incorrect", "error") for p in programs),
        rejected=sum(p.status == "rejected" for p in programs), pending=sum(p.status == "pending" for p in programs),
        tickets_open=len(open_tickets), evaluations=counts, gpu_hours=round(gpu_s / 3600, 5),
        elapsed_s=round(run.elapsed_s, 2),
        evaluations_per_hour=round(len(gpu_evals) / (run.elapsed_s / 3600), 2) if run.elapsed_s > 0 and gpu_evals else None,
        gpu_s_per_evaluation=round(gpu_s / len(gpu_evals), 3) if gpu_evals else None,
        best=best_program(programs), islands=islands, archive_cells=len(archive(programs)))


def _generations(programs: list[ProgramRecord], min_gain: float) -> list[GenerationRow]:
    rows = []
    best_q: float | None = None
    best_f: float | None = None
    for g in sorted({p.generation for p in programs}):
        gen = [p for p in programs if p.generation == g]
        ok = [p for p in gen if p.status == "correct" and p.fitness_quick is not None]
        bq = max((p.fitness_quick for p in ok), default=None)  # type: ignore[type-var]
        if bq is not None:
            best_q = bq if best_q is None else max(best_q, bq)
        bf = max((p.fitness_full for p in ok if p.fitness_full is not None), default=None)
        if bf is not None:
            best_f = bf if best_f is None else max(best_f, bf)
        rows.append(GenerationRow(generation=g, children=len(gen), correct=len(ok),
                                  improved=sum(1 for p in ok if (p.improvement or 0) >= min_gain and p.parent_id),
                                  rejected=sum(p.status == "rejected" for p in gen), best_quick=bq,
                                  best_so_far_quick=best_q, best_so_far_full=best_f))
    return rows


def _lineage(db: EvolveDB, best: BestProgram | None) -> list[LineageRow]:
    rows = []
    pid = best.id if best else None
    while pid is not None:
        p = db.program(pid)
        note = db.ticket(p.ticket_id).note if p.ticket_id is not None else None
        rows.append(LineageRow(id=p.id, generation=p.generation, question_id=p.question_id, question=p.question_text,
                               fitness_quick=p.fitness_quick, fitness_full=p.fitness_full, improvement=p.improvement,
                               change=note))
        pid = p.parent_id
    return rows[::-1]


def _duplicates(programs: list[ProgramRecord]) -> DuplicateStats:
    children = [p for p in programs if p.parent_id is not None]
    rejected = [p for p in children if p.status == "rejected"]
    reasons: dict[str, int] = {}
    for p in rejected:
        key = (p.reject_reason or "?").split(":")[0]
        reasons[key] = reasons.get(key, 0) + 1
    added = sum(p.added_lines or 0 for p in children)
    readded = sum(p.readded_lines or 0 for p in children)
    return DuplicateStats(children=len(children), rejected=len(rejected),
                          rate=round(len(rejected) / len(children), 4) if children else None, by_reason=reasons,
                          added_lines=added, readded_lines=readded,
                          readded_fraction=round(readded / added, 4) if added else None)


def arm_summary(db: EvolveDB, run: RunRecord) -> ArmSummary:
    """Best fitness against evaluations spent and the improving-child rate of one run."""
    cfg = EvolveConfig(**run.config)
    programs = {p.id: p for p in db.programs(run.run_id)}
    curve: list[tuple[int, float]] = []
    n, best = 0, None
    for e in db.evaluations(run.run_id):
        if e.stage != "quick":
            n += e.stage == "full"
            continue
        n += 1
        if e.status == "correct" and e.fitness is not None and (best is None or e.fitness > best):
            best = e.fitness
            curve.append((n, round(best, 6)))
    kids = [p for p in programs.values() if p.parent_id is not None and p.status != "pending"]
    improving = [p for p in kids if p.status == "correct" and (p.improvement or 0) >= cfg.bandit_min_gain]
    full = [p.fitness_full for p in programs.values() if p.fitness_full is not None]
    return ArmSummary(run_id=run.run_id, arm=run.arm, evaluations=n, best_quick=best,
                      best_full=max(full) if full else None,
                      improving_rate=round(len(improving) / len(kids), 4) if kids else None, best_vs_evaluations=curve)


def build_report(db: EvolveDB, run: RunRecord) -> Report:
    """The full report of ``run`` (and of its ablation group's other arms)."""
    cfg = EvolveConfig(**run.config)
    programs = db.programs(run.run_id)
    status = run_status(db, run)
    pulls = Search.pulls(programs, cfg.bandit_min_gain)
    group = [r for r in db.runs(run.campaign_id) if cfg.group and EvolveConfig(**r.config).group == cfg.group]
    return Report(status=status, generations=_generations(programs, cfg.bandit_min_gain),
                  lineage=_lineage(db, status.best),
                  per_question=sorted(arm_stats(pulls).values(), key=lambda s: (-(s.rate or 0), -s.children, s.id)),
                  per_layer=sorted(layer_stats(pulls).values(), key=lambda s: (-(s.rate or 0), -s.children, s.id)),
                  duplicates=_duplicates(programs), arms=[arm_summary(db, r) for r in group])


def _fx(x: float | None, evaluator: str = "harness") -> str:
    """A fitness: a geomean speedup (``1.0312x``) from the harness evaluator; the compile_facts evaluator's CPU
    stand-in is a score, not a speedup, and says so (``0.8678 score``)."""
    if x is None:
        return "-"
    return f"{x:.4f}x" if evaluator == "harness" else f"{x:.4f} score"


def render_status(st: RunStatus) -> str:
    """The status as a few lines of text."""
    lines = [f"evolve run {st.run_id} (campaign {st.campaign_id}): {st.state}"
             + (f" — {st.stop_reason}" if st.stop_reason else ""),
             f"  arm {st.arm}, mutator {st.mutator}, evaluator {st.evaluator}; generation {st.generation}",
             (f"  programs {st.programs}: {st.correct} correct, {st.failed} failed, {st.rejected} rejected as "
             f"duplicates, {st.pending} pending; open tickets {st.tickets_open}"),
             f"  evaluations {dict(sorted(st.evaluations.items()))}; GPU {st.gpu_hours:.4f} h; wall {st.elapsed_s:.0f} s"
             + (f"; {st.evaluations_per_hour:.0f} evaluations/h" if st.evaluations_per_hour else "")
             + (f"; {st.gpu_s_per_evaluation:.1f} GPU s/evaluation" if st.gpu_s_per_evaluation else "")]
    if st.best:
        fit = _fx(st.best.fitness, st.evaluator)
        lines.append(f"  best #{st.best.id} (generation {st.best.generation}): {fit} on {st.best.stage}"
                     + (", goal met" if st.best.goal_met else "") + f"  {st.best.path}")
    lines.append("  islands: " + ", ".join(f"{i.island}: {i.size} programs, "
                                           f"best {_fx(i.best_fitness_quick, st.evaluator)}"
                                           for i in st.islands) + f"; archive cells {st.archive_cells}")
    return "\n".join(lines)


def render_report(rep: Report) -> str:
    """The report as text (markdown tables)."""
    ev = rep.status.evaluator
    lines = [render_status(rep.status), "", "## Best per generation", "",
             "| gen | children | correct | improved | rejected | best quick | best so far (quick) | best so far (full) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for g in rep.generations:
        lines.append(f"| {g.generation} | {g.children} | {g.correct} | {g.improved} | {g.rejected} | {_fx(g.best_quick, ev)} "
                     f"| {_fx(g.best_so_far_quick, ev)} | {_fx(g.best_so_far_full, ev)} |")
    lines += ["", "## Lineage of the best", ""]
    for r in rep.lineage:
        imp = f" ({r.improvement:+.2%})" if r.improvement is not None else ""
        lines.append(f"- #{r.id} gen {r.generation}: quick {_fx(r.fitness_quick, ev)}{imp}, full {_fx(r.fitness_full, ev)}"
                     + (f" — {r.question_id}: {r.question}" if r.question_id else " — seed")
                     + (f" ({r.change})" if r.change else ""))
    for title, rows in (("per question", rep.per_question), ("per layer", rep.per_layer)):
        lines += ["", f"## Child improvement {title}", "", "| id | layer | children | improved | rate | mean gain | best gain |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for s in rows:
            pct = (lambda x: f"{x:+.2%}" if x is not None else "-")
            lines.append(f"| {s.id} | {s.layer} | {s.children} | {s.improved} | "
                         f"{(f'{s.rate:.0%}' if s.rate is not None else '-')} | {pct(s.mean_improvement)} | "
                         f"{pct(s.best_improvement)} |")
    d = rep.duplicates
    lines += ["", "## Near duplicates", "",
              f"{d.rejected} of {d.children} children rejected ({(d.rate or 0):.0%}): {d.by_reason or 'none'}; "
              f"{d.readded_lines} of {d.added_lines} added lines re-add lines an ancestor removed"
              + (f" ({d.readded_fraction:.0%})" if d.readded_fraction is not None else "")]
    if rep.arms:
        lines += ["", "## Ablation arms", "", "| run | arm | evaluations | best quick | best full | improving children |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for a in rep.arms:
            rate = f"{a.improving_rate:.0%}" if a.improving_rate is not None else "-"
            lines.append(f"| {a.run_id} | {a.arm} | {a.evaluations} | {_fx(a.best_quick, ev)} | {_fx(a.best_full, ev)} | {rate} |")
    return "\n".join(lines)


def export_best(db: EvolveDB, run: RunRecord, dest: Path, *, program_id: int | None = None) -> ProgramRecord:
    """Write the best program (or ``program_id``) of ``run`` to ``dest`` unchanged: a normal candidate
    file (``attnq verify dest`` accepts it). Raises InputError when there is no correct program."""
    if program_id is None:
        best = best_program(db.programs(run.run_id))
        if best is None:
            raise InputError(f"evolve run {run.run_id!r} has no correct program to export yet")
        program_id = best.id
    prog = db.program(program_id)
    if prog.run_id != run.run_id:
        raise InputError(f"program #{program_id} belongs to run {prog.run_id!r}")
    if dest.suffix != ".cu":
        raise InputError(f"{dest}: a candidate file must end in .cu")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(prog.source_text, encoding="utf-8")
    return prog


def trace_rows(db: EvolveDB, run: RunRecord) -> list[dict[str, Any]]:
    """Every row of the run (run, programs with sources, tickets, evaluations, migrations) as records
    ``{"record": ..., ...}`` for a JSON-lines trace."""
    rows: list[dict[str, Any]] = [{"record": "run", **run.model_dump(mode="json")}]
    rows += [{"record": "program", **p.model_dump(mode="json")} for p in db.programs(run.run_id)]
    rows += [{"record": "ticket", **t.model_dump(mode="json")} for t in db.tickets(run.run_id)]
    rows += [{"record": "evaluation", **e.model_dump(mode="json")} for e in db.evaluations(run.run_id)]
    rows += [{"record": "migration", **m} for m in db.migrations(run.run_id)]
    return rows


def evolve_data(rep: Report, *, fitness_against: str = "original",
                medians: dict[int, float | None] | None = None) -> dict[str, Any]:
    """A run's report as the evolve data ``attnq report`` draws (report/data.py: format ``attnq-evolve-report``,
    version 1): per generation the best quick fitness so far, the median of its correct children (``medians``,
    generation -> value, when known), the children evaluated (rejected near-duplicates are not) and the correct
    ones; the lineage of the best program, root first, each with its parent and the question that made it (its full
    fitness where it has one, else its quick one); the ablation arms' best quick fitness against evaluations.
    Fitness is a geomean speedup against ``fitness_against``."""
    lineage, parent = [], None
    for row in rep.lineage:
        lineage.append({"program_id": str(row.id), "generation": row.generation, "parent_id": parent,
                        "fitness": row.fitness_full if row.fitness_full is not None else row.fitness_quick,
                        "question_id": row.question_id})
        parent = str(row.id)
    return {"format": "attnq-evolve-report", "version": 1, "fitness_against": fitness_against,
            "generations": [{"generation": g.generation, "best_fitness": g.best_so_far_quick,
                             "median_fitness": (medians or {}).get(g.generation),
                             "evaluated": g.children - g.rejected, "correct": g.correct} for g in rep.generations],
            "lineage": lineage,
            "arms": {a.arm: [list(x) for x in a.best_vs_evaluations] for a in rep.arms if a.best_vs_evaluations}}


def report_data(db: EvolveDB, run: RunRecord) -> dict[str, Any]:
    """:func:`evolve_data` of ``run`` with the medians of its generations' correct children (quick fitness)."""
    fits: dict[int, list[float]] = {}
    for p in db.programs(run.run_id):
        if p.status == "correct" and p.fitness_quick is not None:
            fits.setdefault(p.generation, []).append(p.fitness_quick)
    medians: dict[int, float | None] = {g: statistics.median(v) for g, v in fits.items()}
    return evolve_data(build_report(db, run), fitness_against=EvolveConfig(**run.config).goal_against, medians=medians)
