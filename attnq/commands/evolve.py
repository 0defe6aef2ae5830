"""``attnq evolve [run|status|report|export|trace]``: the evolutionary search (package ``evolve/``).

``attnq evolve --from kernel.cu [flags]`` starts a run (or resumes ``--run NAME``) and loops until the
goal is met on ``full`` or a budget is spent; ``--mutator mcp`` only evaluates the seed and leaves the
mutations to an MCP client (tools ``evolve_next`` / ``evolve_submit``); resumed (``--run NAME``), it also
evaluates the children MCP clients submitted on a machine without a GPU, which wait as ``pending``.
``--arms question,plain,none`` runs the ablation: one run per arm, same seed and budget. Exit codes:
attnq.cli.EXIT_CODES["evolve"] (0 ended or waits for an MCP client, 1 the seed is not correct, 2 an error you
can fix, 3 no GPU).
"""

from __future__ import annotations

#: ``attnq evolve --help``'s text (plain: the module docstring above is for the code's readers).
DESCRIPTION = """\
The evolutionary search over one kernel whose mutations are questions (package evolve/).

attnq evolve --from kernel.cu [flags] starts a run (or resumes --run NAME) and loops until the goal is met
on the full suite or a budget is spent: --max-evals, --max-gpu-hours, --max-wall-s, --generations (with none
of them it runs until the goal is met, or the knob mutator has tried every setting). --mutator mcp only
evaluates the seed and leaves the mutations to an MCP client (tools evolve_next / evolve_submit); resumed, it
also evaluates the children MCP clients submitted on a machine without a GPU, which wait as pending. --arms question,plain,none runs the ablation: one run per
arm, same seed and budget. status, report, export (-o best.cu) and trace (-o run.jsonl) read a run."""

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from attnq.commands.reflect import add_common_args, open_bank, open_store
from harness import ORIGINAL_KERNEL
from harness.anchors import GOAL_TARGETS
from harness.errors import InputError, NoGpuError

ACTIONS = ("run", "status", "report", "export", "trace")

#: flag dest -> EvolveConfig field (None values are left to the config's defaults / ATTNQ_EVOLVE_*); attnq/cli.py
#: also reads it to name a refused field by its flag (``--max-evals``, not ``max_evaluations``)
FLAG_FIELDS = {
    "seed": "seed", "arm": "arm", "mutator": "mutator", "mutator_cmd": "mutator_cmd", "parallel": "parallel_mutators",
    "mutator_timeout": "mutator_timeout_s", "islands": "islands", "island_size": "island_size",
    "children": "children_per_generation", "migration_interval": "migration_interval",
    "migration_count": "migration_count", "exploit": "exploit_ratio", "explore": "explore_ratio",
    "elite": "elite_ratio", "inspiration_rate": "inspiration_rate", "crossover_rate": "crossover_rate",
    "min_gain": "bandit_min_gain", "duplicate_similarity": "duplicate_similarity", "quick_suite": "quick_suite",
    "full_suite": "full_suite", "full_min_gain": "full_min_gain", "goal": "goal_speedup",
    "goal_against": "goal_against", "max_evals": "max_evaluations", "max_gpu_hours": "max_gpu_hours",
    "max_wall_s": "max_wall_s", "generations": "max_generations", "evaluator": "evaluator", "arch": "arch",
    "backend": "backend", "scheduler": "scheduler", "scheduler_timeout": "scheduler_timeout_s",
    "compile_workers": "compile_workers",
}


def _config(args: argparse.Namespace, settings: Any) -> Any:
    from evolve.config import EvolveConfig, parse_knob

    values: dict[str, Any] = {f: getattr(args, d) for d, f in FLAG_FIELDS.items() if getattr(args, d, None) is not None}
    given = set(values) | ({"gpus"} if args.gpus is not None else set()) | ({"knobs"} if args.knob else set())
    if args.no_full:
        values["full_stage"] = False
    if args.gpus is not None:
        try:
            values["gpus"] = [int(g) for g in args.gpus.split(",") if g.strip()]
        except ValueError:
            raise InputError(f"--gpus takes device indexes like 0,1, got {args.gpus!r}") from None
    elif "gpus" not in values:
        values["gpus"] = [settings.gpu]
    values.setdefault("goal_speedup", settings.goal_speedup)
    if settings.goal_anchor:
        values.setdefault("goal_against", settings.goal_anchor)
    values.setdefault("arch", settings.arch)
    if args.knob:
        try:
            values["knobs"] = [parse_knob(k) for k in args.knob]
        except ValueError as exc:
            raise InputError(str(exc)) from None
    if args.mutator_cmd and "mutator" not in values:
        values["mutator"] = "command"
    cfg = EvolveConfig(**values)
    # the settings' goal, anchor, arch and GPU fill what the flags leave out, but they are not "given": a resume
    # keeps the run's own values for them and does not report them as dropped flags
    filled = {k for k in ("goal_speedup", "goal_against", "arch", "gpus") if k not in given}
    return EvolveConfig.model_construct(_fields_set=cfg.model_fields_set - filled, **dict(cfg))


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _run(args: argparse.Namespace) -> int:
    from evolve.db import EvolveDB
    from evolve.driver import kept_on_resume, run_lock, run_search, start_or_resume
    from evolve.mutators import CommandMutator, KnobMutator
    from evolve.pool import check_scheduler_address, make_pool
    from evolve.report import build_report, render_report, render_status, run_status

    settings, store = open_store(args)
    with store:
        cfg = _config(args, settings)
        bank = open_bank(settings, store)
        campaign = store.campaign_id
    if cfg.scheduler:
        check_scheduler_address(cfg.scheduler)  # before a run is created: a typo leaves no run behind
    arms = [a.strip() for a in args.arms.split(",") if a.strip()] if args.arms else [None]
    bad = [a for a in arms if a is not None and a not in ("question", "plain", "none")]
    if bad:  # before any arm runs: a typo in the last arm must not cost the earlier arms' GPU time first
        raise InputError(f"--arms takes question, plain and none; got {', '.join(map(repr, bad))}")
    seed_path = Path(args.source) if args.source else None
    if seed_path is None and args.run is None:
        seed_path = ORIGINAL_KERNEL
    code = 0
    with EvolveDB.for_state_dir(settings.state_dir) as db:
        runs = []
        for arm in arms:
            acfg = cfg if arm is None else cfg.model_copy(update={"arm": arm, "group": args.run or cfg.group or "ablation"})
            rid = f"{args.run or 'ablation'}-{arm}" if arm is not None else args.run
            with run_lock(settings.state_dir, rid) if rid is not None else contextlib.nullcontext():
                prior = db.run_or_none(rid) if rid is not None else None
                try:
                    search, created = start_or_resume(db, campaign_id=campaign, state_dir=settings.state_dir, cfg=acfg,
                                                      run_id=rid, seed_path=seed_path, bank=bank, resume=not args.new)
                except NoGpuError as exc:  # what the command line offers without a GPU here
                    raise NoGpuError(f"{exc.message}. Instead: evaluate on a Dask cluster's GPU workers (--scheduler), "
                                     "or try the search with --evaluator compile_facts (a CPU stand-in score from the "
                                     "build's facts, not a speedup)", details=exc.details) from None
                _say(f"{'started' if created else 'resumed'} evolve run {search.run_id} (arm {search.cfg.arm}, "
                     f"mutator {search.cfg.mutator}, evaluator {search.cfg.evaluator})")
                if not created and prior is not None and (kept := kept_on_resume(dict(prior.config), acfg)):
                    _say("   kept as the run started (a resume changes budgets, GPUs, the scheduler and the mutator command "
                         "only; start a new --run for the rest): " + ", ".join(
                             f"{k} {json.dumps(a)} (given {json.dumps(b)})" for k, (a, b) in kept.items()))
                try:
                    pool = make_pool(search.cfg.gpus, backend=search.cfg.backend, scheduler=search.cfg.scheduler,
                                     compile_workers=search.cfg.compile_workers,
                                     connect_timeout_s=search.cfg.scheduler_timeout_s)
                except BaseException as exc:  # an unreachable scheduler, Ctrl-C while connecting: the run is not left "running"
                    search.finish("failed", f"the evaluation pool could not be started: {str(exc) or type(exc).__name__}")
                    raise
                try:
                    if search.cfg.mutator == "mcp":
                        rec = _seed_only(search, pool)
                    else:
                        mutator: Any = (KnobMutator(search.cfg.knobs) if search.cfg.mutator == "knob" else
                                        CommandMutator(search.cfg.mutator_cmd or "", parallel=search.cfg.parallel_mutators,
                                                       timeout_s=search.cfg.mutator_timeout_s,
                                                       workdir=settings.state_dir / "evolve" / search.run_id / "briefs"))
                        rec = run_search(search, pool, mutator, progress=None if args.quiet else _say)
                finally:
                    pool.close()
                code = max(code, 1 if rec.state == "failed" else 0)
                runs.append(rec)
        last = runs[-1]
        rep = build_report(db, last)
        if args.report:
            Path(args.report).write_text(rep.model_dump_json(indent=1) if args.report.endswith(".json")
                                         else render_report(rep) + "\n", encoding="utf-8")
        if args.json:
            print(json.dumps([run_status(db, r).model_dump(mode="json") for r in runs], indent=2))
        else:
            print("\n".join(render_status(run_status(db, r)) for r in runs))
            if rep.arms:
                print("\n" + render_report(rep).split("## Ablation arms", 1)[1].strip())
    return code


def _seed_only(search: Any, pool: Any) -> Any:
    """``--mutator mcp``: evaluate the seed and every child that MCP clients submitted where no GPU was at hand
    (they wait as ``pending``), then hand the run to MCP clients for the next mutations."""
    from evolve.engine import Budget

    budget = Budget(search.cfg, search.db, search.run)
    seed = search.seed_program()
    if seed.status == "pending":
        _say(f"evaluating the seed #{seed.id} ({pool.description})")
        seed = search.evaluate_one(seed, pool, budget, _say)
        search.db.update_run(search.run_id, elapsed_s=round(budget.elapsed_s(), 3))
    if seed.status != "correct":
        return search.finish("failed", f"the seed #{seed.id} is {seed.status}: the search needs a correct seed")
    search.close_generation(0)
    waiting = [p for p in search.db.programs(search.run_id, status="pending") if p.parent_id is not None]
    if waiting:
        _say(f"evaluating {len(waiting)} submitted children ({', '.join(f'#{p.id}' for p in waiting)}; "
             f"{pool.description})")
        search.evaluate(waiting, pool, budget, _say)
        search.db.update_run(search.run_id, elapsed_s=round(budget.elapsed_s(), 3))
        left = [p.id for p in search.db.programs(search.run_id, status="pending") if p.parent_id is not None]
        if left:
            _say(f"children {left} still wait: {budget.exhausted() or 'the budget was spent'} before their GPU "
                 f"stage; raise it to evaluate them (`attnq evolve --run {search.run_id} --max-evals N`, or "
                 "--max-gpu-hours / --max-wall-s)")
    _say(f"run {search.run_id} waits for an MCP client: tools evolve_next and evolve_submit (attnq serve)")
    return search.run


def _pick_run(db: Any, campaign: str, run_id: str | None, state_dir: Path) -> Any:
    from evolve.driver import latest_run

    if run_id is not None:
        rec = db.run(run_id)
        if rec.campaign_id != campaign:
            raise InputError(f"evolve run {run_id!r} belongs to campaign {rec.campaign_id!r}")
        return rec
    rec = latest_run(db, campaign, state_dir)
    if rec is None:
        raise InputError(f"campaign {campaign!r} has no evolve run yet: start one with `attnq evolve --from FILE`")
    return rec


def _orphan_note(state_dir: Path, st: Any) -> str:
    """A line for a run recorded as running that no ``attnq evolve`` process drives (its driver was killed,
    SIGTERM or SIGKILL, before it could record the stop); ``""`` otherwise. MCP runs are driven by the server."""
    from evolve.driver import driven_now

    if st.state != "running" or st.mutator == "mcp" or driven_now(state_dir, st.run_id):
        return ""
    return (f"\n  no attnq evolve process drives it now (its driver ended without recording a stop): resume it with "
            f"attnq evolve --run {st.run_id}")


def _read(args: argparse.Namespace) -> int:
    from evolve.db import EvolveDB
    from evolve.report import build_report, export_best, render_report, render_status, run_status, trace_rows

    settings, store = open_store(args, create=False)
    with store, EvolveDB.for_state_dir(settings.state_dir) as db:
        campaign = store.campaign_id
        if args.action == "status":
            runs = [db.run(args.run)] if args.run else db.runs(campaign)
            if not runs:
                raise InputError(f"campaign {campaign!r} has no evolve run yet: "
                                 "start one with `attnq evolve --from FILE`")
            sts = [run_status(db, r) for r in runs]
            print(json.dumps([s.model_dump(mode="json") for s in sts], indent=2) if args.json
                  else "\n\n".join(render_status(s) + _orphan_note(settings.state_dir, s) for s in sts))
            return 0
        rec = _pick_run(db, campaign, args.run, settings.state_dir)
        if args.action == "report":
            rep = build_report(db, rec)
            print(rep.model_dump_json(indent=2) if args.json else render_report(rep))
        elif args.action == "export":
            if not args.output:
                raise InputError("export needs -o FILE.cu")
            prog = export_best(db, rec, Path(args.output), program_id=args.program)
            fit = f"quick {prog.fitness_quick}, full {prog.fitness_full}"
            _say(f"wrote program #{prog.id} of run {rec.run_id} ({fit}) to {args.output}; "
                 f"check it with: attnq verify {args.output} --suite full")
        else:  # trace
            rows = trace_rows(db, rec)
            text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
            if args.output and args.output != "-":
                Path(args.output).write_text(text, encoding="utf-8")
                _say(f"wrote {len(rows)} records of run {rec.run_id} to {args.output}")
            else:
                sys.stdout.write(text)
    return 0


def _handler(args: argparse.Namespace) -> int:
    return _run(args) if args.action == "run" else _read(args)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``attnq evolve``."""
    p = subparsers.add_parser("evolve", help="evolutionary search whose mutations are questions",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", nargs="?", choices=ACTIONS, default="run",
                   help="run (default): start or resume; status; report; export (-o best.cu); trace (-o run.jsonl)")
    p.add_argument("--run", default=None, help="run name (default: a new evolve-N, or the latest for reading)")
    p.add_argument("--from", dest="source", default=None, help="seed program (default: kernels/attn_original.cu)")
    p.add_argument("--new", action="store_true", help="refuse to resume an existing --run")
    p.add_argument("-o", "--output", default=None, help="export/trace: where to write")
    p.add_argument("--program", type=int, default=None, help="export this program id instead of the best")
    p.add_argument("--report", default=None, help="run: also write the report here (.json or text)")
    p.add_argument("--quiet", action="store_true", help="run: no progress lines on stderr")
    g = p.add_argument_group("mutation")
    g.add_argument("--mutator", choices=("knob", "command", "mcp"), default=None)
    g.add_argument("--mutator-cmd", default=None, help="headless mutator: brief on stdin, child source on stdout")
    g.add_argument("--parallel", type=int, default=None, help="mutator commands at once (default 2)")
    g.add_argument("--mutator-timeout", type=float, default=None, help="seconds per mutator command")
    g.add_argument("--knob", action="append", default=None,
                   help="knob domain NAME=v1,v2,... or tied A,B=a1:b1,a2:b2 (repeatable; default: found in the seed)")
    g.add_argument("--arm", choices=("question", "plain", "none"), default=None)
    g.add_argument("--arms", default=None, help="ablation: comma list of arms, one run each (same seed and budget)")
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--min-gain", type=float, default=None, help="child improved: quick fitness >= parent x (1+this)")
    g.add_argument("--duplicate-similarity", type=float, default=None)
    g = p.add_argument_group("population")
    for flag, typ in (("--islands", int), ("--island-size", int), ("--children", int), ("--migration-interval", int),
                      ("--migration-count", int), ("--exploit", float), ("--explore", float), ("--elite", float),
                      ("--inspiration-rate", float), ("--crossover-rate", float)):
        g.add_argument(flag, type=typ, default=None)
    g = p.add_argument_group("cascade, goal and budget")
    g.add_argument("--quick-suite", default=None)
    g.add_argument("--full-suite", default=None)
    g.add_argument("--no-full", action="store_true", help="quick stage only (the goal cannot be met)")
    g.add_argument("--full-min-gain", type=float, default=None)
    g.add_argument("--goal", type=float, default=None, help="goal geomean speedup on full (default ATTNQ_GOAL_SPEEDUP)")
    g.add_argument("--goal-against", choices=GOAL_TARGETS, default=None,
                   help="what the goal's geomean is measured against (default: ATTNQ_GOAL_ANCHOR or original)")
    g.add_argument("--max-evals", type=int, default=None, help="GPU-stage evaluations (quick + full)")
    g.add_argument("--max-gpu-hours", type=float, default=None)
    g.add_argument("--max-wall-s", type=float, default=None)
    g.add_argument("--generations", type=int, default=None)
    g = p.add_argument_group("evaluation")
    g.add_argument("--evaluator", choices=("harness", "compile_facts"), default=None,
                   help="harness (GPU, default) or compile_facts (CPU stand-in: scores ptxas facts, not speed)")
    g.add_argument("--gpus", default=None, help="device indexes, e.g. 0,1 (default ATTNQ_GPU)")
    g.add_argument("--backend", choices=("local", "dask"), default=None)
    g.add_argument("--scheduler", default=None, help="Dask scheduler address tcp://host:8786 (implies --backend dask)")
    g.add_argument("--scheduler-timeout", type=float, default=None, help="seconds to try to reach --scheduler (30)")
    g.add_argument("--compile-workers", type=int, default=None)
    g.add_argument("--arch", default=None, help="nvcc arch (default: ATTNQ_ARCH or sm_90a)")
    add_common_args(p)
    p.set_defaults(handler=_handler)
