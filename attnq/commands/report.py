"""``attnq report``: the kernel and the campaign as pictures, one self-contained HTML file (+ PNGs).

What goes in: ``--verdict`` files (each gets a speedup and a roofline figure), ``--compare BEFORE
AFTER``, and a campaign (timeline, question effectiveness): from ``--trace FILE`` (a published trace),
else from the workspace's store — the ``--campaign`` named, or the active one when no verdict or
comparison is given. Without verdicts, the campaign's best attempt stands for the kernel.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attnq.commands.reflect import add_common_args, settings_from
from harness.errors import InputError
from harness.store import STORE_FILENAME, CampaignStore

DEFAULT_OUTPUT = "attnq-report.html"


def _progress_printer(enabled: bool):  # type: ignore[no-untyped-def]
    """A one-line progress bar on stderr (a terminal only)."""
    tty = enabled and sys.stderr.isatty()

    def show(done: int, total: int, message: str) -> None:
        if not tty or not total:
            return
        width = 30
        filled = int(width * done / total)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {message[:50]:<50}")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def _inputs(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from report import (
        ReportInputs,
        campaign_from_store,
        load_evolve,
        load_trace,
        load_verdict,
    )
    from report.data import evolve_from_store

    settings = settings_from(args)
    verdicts = [load_verdict(p) for p in args.verdict or []]
    compare = (load_verdict(args.compare[0]), load_verdict(args.compare[1])) if args.compare else None
    campaign = evolve = None
    if args.trace:
        campaign = load_trace(args.trace, args.campaign)
    elif args.campaign or not (verdicts or compare):
        path = settings.state_dir / STORE_FILENAME
        if path.exists():
            with CampaignStore(path, campaign_id=args.campaign, create=False) as store:
                campaign = campaign_from_store(store)
                if not args.evolve:
                    evolve = evolve_from_store(store, campaign.campaign_id)
        elif args.campaign:
            raise InputError(f"no campaign store at {path} (set --workspace or ATTNQ_STATE, or give --trace FILE)")
    if args.evolve:
        evolve = load_evolve(args.evolve)
    return ReportInputs(verdicts=verdicts, campaign=campaign, compare=compare, evolve=evolve, horizon=args.horizon,
                        min_gain=settings.stall_min_gain, matmul_tflops=args.matmul_tflops or settings.matmul_tflops,
                        hbm_tbps=args.hbm_tbps or settings.hbm_tbps,
                        title=args.title or (f"attnq report: {campaign.campaign_id}" if campaign else "attnq report"))


def run(args: argparse.Namespace) -> int:
    from report import build_report, write_report

    inputs = _inputs(args)
    report = build_report(inputs, progress=_progress_printer(not args.json))
    written = write_report(report, args.output, args.png_dir)
    if args.json:
        print(json.dumps({"html": str(Path(args.output).resolve()), "png": [str(p.resolve()) for p in written[1:]],
                          "figures": [f.key for f in report.figures], "skipped": report.skipped,
                          "summary": report.summary}, indent=2))
    else:
        print(report.summary)
        print(f"wrote {args.output} ({len(report.figures)} figures"
              + (f"; PNGs in {args.png_dir}" if args.png_dir else "") + ")")
        for s in report.skipped:
            print(f"  not shown: {s}")
    return 0


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``attnq report``."""
    p = subparsers.add_parser("report", help="the kernel and the campaign as pictures (one HTML file, PNGs)",
                              description=__doc__.split("\n\n", 1)[1].replace("``", "`") if __doc__ else None)
    p.add_argument("--verdict", nargs="+", metavar="FILE.json", help="verdict JSON files (.json or .json.gz)")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE.json", "AFTER.json"),
                   help="two verdicts of the same suite side by side")
    p.add_argument("--trace", metavar="FILE", help="a campaign trace (attnq trace export) instead of the store")
    p.add_argument("--evolve", metavar="FILE.json", help="evolve data: what `attnq evolve report --json` or "
                   "`attnq evolve --report FILE.json` writes (format: report/data.py)")
    p.add_argument("-o", "--output", default=DEFAULT_OUTPUT, help=f"the HTML file (default: {DEFAULT_OUTPUT})")
    p.add_argument("--png-dir", metavar="DIR", default=None, help="also write every figure as DIR/<figure>.png")
    p.add_argument("--horizon", type=int, default=3, help="attempts after a question that count for it (default 3)")
    p.add_argument("--matmul-tflops", type=_positive, default=None,
                   help="compute roof, TFLOP/s (default: the verdict's measured matmul rate)")
    p.add_argument("--hbm-tbps", type=_positive, default=None, help="memory roof, TB/s (default: 4.3, measured H200)")
    p.add_argument("--title", default=None, help="page title")
    add_common_args(p)
    p.set_defaults(handler=run)
