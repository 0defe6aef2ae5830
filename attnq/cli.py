"""``attnq`` entry point: argparse with one module per subcommand (see attnq/commands/).

Exit codes: 0 success (for ``verify``: all scenarios correct), 1 verified but incorrect or goal not
met, 2 error the user can fix (bad input, compile error, policy), 3 no usable GPU.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence

from harness.errors import AttnqError
from harness.logging import configure_logging

#: Subcommand modules under attnq.commands, in help order.
COMMANDS = ("compile", "scenarios", "verify", "reflect", "declare", "questions", "trace", "serve")


def build_parser() -> argparse.ArgumentParser:
    """The full parser; each command module adds its own subparser."""
    parser = argparse.ArgumentParser(
        prog="attnq",
        description="Verify, time and question agent-written CUDA attention kernels.",
    )
    parser.add_argument("--log-level", default=None, help="structlog level on stderr (default: warning)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"attnq.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"attnq.commands.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code. Errors print one plain line on stderr, never a traceback."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        return int(args.handler(args) or 0)
    except AttnqError as err:
        if getattr(args, "json", False):
            print(json.dumps(err.to_dict(), indent=2))
        else:
            print(f"attnq {args.command}: {err.message}", file=sys.stderr)
            for diag in err.details.get("diagnostics", [])[:10]:
                where = ":".join(str(x) for x in (diag.get("file"), diag.get("line"), diag.get("column")) if x is not None)
                print(f"  {where}: {diag.get('severity', 'error')}: {diag.get('message')}", file=sys.stderr)
            q = err.details.get("question")
            if isinstance(q, dict) and q.get("question"):
                print(f"question ({q.get('trigger')}): {q['question']}\n  evidence: {q.get('evidence')}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("attnq: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
