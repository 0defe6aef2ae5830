"""``attnq verify FILE [--suite S] [--anchors fa3,cudnn,flash] [--json]``: the verdict of one candidate.

Exit codes: 0 all scenarios correct, 1 some scenario failed, 2 error (input, compile, policy, ABI, an
anchor that cannot be timed here: fa3 without flash_attn_interface), 3 no GPU that runs the build's arch
(the build itself succeeded).
"""

from __future__ import annotations

import argparse
import sys

from harness.anchors import GOAL_TARGETS
from harness.config import Settings
from harness.scenarios import suite_choices_text
from harness.verdict import Verdict
from harness.verify import VerifyOptions, VerifyProgress, count_prior_compile, verify_kernel


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check and time a candidate kernel against the original")
    p.add_argument("file", help="candidate .cu file")
    p.add_argument("--suite", default=None,
                   help=f"{suite_choices_text()} path (default: ATTNQ_SUITE or quick)")
    p.add_argument("--anchors", default="", help="comma list of library kernels to time too: cudnn, flash (torch "
                   "SDPA backends), fa3 (FlashAttention-3; needs flash_attn_interface importable)")
    p.add_argument("--arch", default=None, help="nvcc arch (default: ATTNQ_ARCH or sm_90a)")
    p.add_argument("--gpu", type=int, default=None, help="CUDA device index (default: ATTNQ_GPU or 0)")
    p.add_argument("--goal", type=float, default=None,
                   help="goal geomean speedup, finite and > 0 (default: ATTNQ_GOAL_SPEEDUP or 1.0)")
    p.add_argument("--goal-against", choices=GOAL_TARGETS, default=None,
                   help="what the goal's geomean is measured against (default: ATTNQ_GOAL_ANCHOR or original)")
    p.add_argument("--scenario", action="append", default=None, help="run only this scenario id (repeatable)")
    p.add_argument("--scenario-timeout", type=float, default=60.0,
                   help="seconds per scenario before it counts as a hang (default 60)")
    p.add_argument("--sanitize", choices=["memcheck", "racecheck", "initcheck", "synccheck"], default=None,
                   help="also run compute-sanitizer with this tool over the candidate on a few small scenarios "
                        "(check `sanitizer`; off by default; its cost is phase_s.sanitize)")
    p.add_argument("--budget-ms", type=float, default=None,
                   help="host wall time (ms) of each scenario's timing loop after which sampling stops, once the "
                        "minimum samples are taken (default 30; more: more samples of quick scenarios, slower)")
    p.add_argument("--no-policy", action="store_true", help="skip the source/symbol policy (not for campaigns)")
    p.add_argument("--no-record", action="store_true", help="do not record the attempt in the campaign store")
    p.add_argument("--json", action="store_true", help="print the Verdict as JSON")
    p.set_defaults(handler=run)


def _progress_printer(enabled: bool):
    """A one-line progress bar on stderr (a terminal only)."""
    tty = enabled and sys.stderr.isatty()

    def show(ev: VerifyProgress) -> None:
        if not tty or not ev.total:
            return
        width = 30
        filled = int(width * ev.done / ev.total)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {ev.done}/{ev.total} {ev.message[:60]:<60}")
        sys.stderr.flush()
        if ev.done == ev.total:
            sys.stderr.write("\n")

    return show


def format_verdict(v: Verdict) -> str:
    """Human table: failed and slowest scenarios first, then the summary."""
    lines = [f"{v.kernel}  build {v.build_hash[:12]}  suite {v.suite}  {v.gpu}"]
    anchors = sorted({a for r in v.scenarios for a in r.anchors})
    head = f"{'scenario':<58} {'ok':<4} {'cand ms':>9} {'orig ms':>9} {'speedup':>8} {'TFLOP/s':>8}"
    head += "".join(f" {'vs ' + a:>9}" for a in anchors)
    lines.append(head)
    order = sorted(v.scenarios, key=lambda r: (r.correct, r.speedup or 0.0))
    for r in order:
        if not r.correct:
            lines.append(f"{r.id:<58} FAIL {r.failure_kind} [{r.check}] {r.message or ''}"[:220])
            continue
        assert r.candidate and r.original
        row = (f"{r.id:<58} {'ok':<4} {r.candidate.median_ms:>9.4f} {r.original.median_ms:>9.4f} "
               f"{r.speedup or 0:>7.3f}x {r.tflops or 0:>8.1f}")
        row += "".join(f" {r.vs_anchor[a]:>8.3f}x" if a in r.vs_anchor else f" {'-':>9}" for a in anchors)
        lines.append(row)
    gm = f"{v.geomean_speedup:.3f}x" if v.geomean_speedup else "-"
    lines.append(f"status {v.status.upper()}: {v.num_correct}/{v.num_scenarios} correct; geomean speedup {gm} vs original")
    if v.geomean_by_group:
        lines.append("  by group: " + ", ".join(f"{g} {x:.3f}x" for g, x in v.geomean_by_group.items()))
    for a, x in v.geomean_vs_anchor.items():
        groups = ", ".join(f"{g} {y:.3f}x" for g, y in v.geomean_vs_anchor_by_group.get(a, {}).items())
        lines.append(f"  geomean vs {a}: {x:.3f}x" + (f" (by group: {groups})" if groups else ""))
    lines.append(f"goal ({v.goal.against} >= {v.goal.min_speedup:g}x): {'MET' if v.goal.met else 'not met'} — {v.goal.reason}")
    for f in v.flags[:10]:
        lines.append(f"flag {f.kind}: {f.scenario_id or ''} {f.message}")
    sanitized = [r for r in v.scenarios if r.sanitizer is not None]
    if sanitized:
        counts: dict[str, int] = {}
        for r in sanitized:
            counts[r.sanitizer.status] = counts.get(r.sanitizer.status, 0) + 1  # type: ignore[union-attr]
        lines.append(f"sanitizer ({v.sanitizer_tool}) on {len(sanitized)} scenarios: "
                     + ", ".join(f"{n} {k}" for k, n in counts.items())
                     + f"; {v.phase_s.get('sanitize', 0.0):.1f} s")
        for r in sanitized:
            if r.sanitizer and r.sanitizer.status != "clean":
                first = r.sanitizer.findings[0] if r.sanitizer.findings else r.sanitizer.message
                lines.append(f"  {r.id}: {r.sanitizer.status} ({r.sanitizer.errors} errors) {first}"[:220])
    if v.message:
        lines.append(f"ended early: {v.message}")
    lines.append(f"wall {v.wall_s:.1f} s (compile {v.compile_s:.1f} s); peak (bf16 matmul, measured) {v.peak_tflops or 0:.0f} TFLOP/s; "
                 f"physical {v.physical_peak_tflops or 0:.0f} TFLOP/s")
    if v.phase_s:
        lines.append("harness time (s): " + ", ".join(f"{k} {x:.1f}" for k, x in v.phase_s.items()))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    settings = Settings()
    opts = VerifyOptions(
        suite=args.suite or settings.suite,
        anchors=[a for a in args.anchors.split(",") if a],
        arch=args.arch or settings.arch,
        gpu=settings.gpu if args.gpu is None else args.gpu,
        goal_speedup=args.goal if args.goal is not None else settings.goal_speedup,
        goal_against=args.goal_against or settings.goal_anchor or "original",
        scenario_ids=args.scenario,
        policy=not args.no_policy,
        scenario_timeout_s=args.scenario_timeout,
        sanitize=args.sanitize,
        **({"budget_ms": args.budget_ms} if args.budget_ms is not None else {}),
    )
    from harness.anchors import require_anchors
    from harness.compile import compile_kernel
    from harness.errors import AttnqError, InputError, NoGpuError

    require_anchors([*opts.anchors, opts.goal_against])  # before compiling: plain message, exit 2, no attempt
    compiled = None
    try:
        compiled = compile_kernel(args.file, arch=opts.arch, cache_dir=settings.state_dir / "build", policy=opts.policy)
        verdict = verify_kernel(args.file, opts, settings=settings, progress=_progress_printer(not args.json))
        verdict = count_prior_compile(verdict, compiled.compile_time_s)  # wall_s: the whole command's verification
    except AttnqError as err:
        # failed compiles and missing GPUs are attempts too (they feed the stall trigger); bad input is not
        if not args.no_record and not isinstance(err, InputError):
            question = _record(args.file, None, settings, compiled, err.to_dict())
            if question and not isinstance(err, NoGpuError):
                err.details["question"] = question
        raise
    question = None if args.no_record else _record(args.file, verdict, settings, compiled, None)
    if args.json:
        out = verdict.model_dump(mode="json")
        if question is not None:
            out["question"] = question
        import json

        print(json.dumps(out, indent=2))
    else:
        print(format_verdict(verdict))
        if question:
            print(f"\nquestion ({question.get('trigger')}): {question.get('question')}\n  evidence: {question.get('evidence')}")
    return {"correct": 0, "incorrect": 1}.get(verdict.status, 2)


def _record(path: str, verdict: Verdict | None, settings: Settings, compiled: object, error: dict | None) -> dict | None:
    """Record the attempt (verdict or error, with compile facts) in the campaign store; return the
    question a trigger raised, if any."""
    from pathlib import Path

    from questions.reflect import record_verified_attempt

    return record_verified_attempt(path, verdict, settings, compile_result=compiled, error=error, base=Path.cwd())
