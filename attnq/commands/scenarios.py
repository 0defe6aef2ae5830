"""``attnq scenarios [--suite S] [--json]``: list a suite's scenarios with ids, groups, FLOPs and the
estimated peak device memory of each (the memory guard's number, harness/memory.py)."""

from __future__ import annotations

import argparse
import json

from harness.memory import estimate_peak_bytes
from harness.scenarios import load_suite, suite_choices_text


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``attnq scenarios``."""
    p = sub.add_parser("scenarios", help="list the scenarios of a suite")
    p.add_argument("--suite", default=None,
                   help=f"{suite_choices_text()} path (default: ATTNQ_SUITE or quick, as verify)")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler: print the suite (table or JSON); errors propagate as AttnqError."""
    if args.suite is None:
        from harness.config import Settings

        args.suite = Settings().suite
    suite = load_suite(args.suite)
    if args.json:
        rows = [{"id": s.id, **s.model_dump(exclude_none=True), "flops": s.flops,
                 "peak_bytes_estimate": estimate_peak_bytes(s).total} for s in suite.scenarios]
        print(json.dumps({"name": suite.name, "description": suite.description, "scenarios": rows}, indent=2))
        return 0
    n = len(suite.scenarios)
    about = f" — {suite.description}" if suite.description else ""
    print(f"suite {suite.name}: {n} scenario{'' if n == 1 else 's'}{about}")
    print("  groups: " + ", ".join(f"{g} {n}" for g, n in suite.groups().items()))
    for s in suite.scenarios:
        print(f"  {s.id:<72} {s.flops / 1e9:>10.2f} GFLOP  {estimate_peak_bytes(s).total / 2**30:>6.2f} GiB")
    return 0
