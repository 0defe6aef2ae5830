"""``attnq trace export|show|campaigns|use``: publish and summarize the campaign store."""

from __future__ import annotations

import argparse
import sys

from attnq.commands.reflect import add_common_args, open_store
from harness.errors import InputError


def _export(args: argparse.Namespace) -> int:
    from questions.trace import write_trace

    campaign = args.campaign  # None: every campaign
    _, store = open_store(args, create=False)
    with store:
        if args.output is None or str(args.output) == "-":
            write_trace(store, sys.stdout, fmt=args.format, campaign_id=campaign)
            return 0
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                n = write_trace(store, fh, fmt=args.format, campaign_id=campaign)
        except OSError as exc:
            raise InputError(f"cannot write {args.output}: {exc}") from exc
    print(f"wrote {n} records ({args.format}) to {args.output}", file=sys.stderr)
    return 0


def _show(args: argparse.Namespace) -> int:
    from questions.trace import render_summary, summarize

    _, store = open_store(args, create=False)
    with store:
        summary = summarize(store, campaign_id=args.campaign, horizon=args.horizon)
    print(summary.model_dump_json(indent=2) if args.json else render_summary(summary))
    return 0


def _campaigns(args: argparse.Namespace) -> int:
    _, store = open_store(args)
    with store:
        infos = store.list_campaigns()
    if args.json:
        print("[" + ",\n".join(i.model_dump_json(indent=2) for i in infos) + "]")
    else:
        for i in infos:
            print(f"{'*' if i.active else ' '} {i.campaign_id:30s} {i.attempts:4d} attempts {i.questions:4d} questions "
                  f"{i.claims:3d} claims {i.events:5d} events  since {i.created_at}")
    return 0


def _use(args: argparse.Namespace) -> int:
    _, store = open_store(args)
    with store:
        store.set_active_campaign(args.name)
    print(f"active campaign: {args.name}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``attnq trace`` and its subcommands."""
    p = subparsers.add_parser("trace", help="export or summarize the campaign store; switch campaigns")
    sub = p.add_subparsers(dest="trace_command", metavar="SUBCOMMAND", required=True)
    s = sub.add_parser("export", help="write the whole store (all campaigns) for publication")
    s.add_argument("--format", choices=("jsonl", "json"), default="jsonl")
    s.add_argument("-o", "--output", default=None, help="file (default: stdout)")
    add_common_args(s, json_flag=False)
    s.set_defaults(handler=_export)
    s = sub.add_parser("show", help="attempts, best geomean over time, triggers, questions and what followed")
    s.add_argument("--horizon", type=int, default=3)
    add_common_args(s)
    s.set_defaults(handler=_show)
    s = sub.add_parser("campaigns", help="list campaigns (* = active)")
    add_common_args(s)
    s.set_defaults(handler=_campaigns)
    s = sub.add_parser("use", help="make NAME the workspace's active campaign")
    s.add_argument("name")
    add_common_args(s, json_flag=False)
    s.set_defaults(handler=_use)
