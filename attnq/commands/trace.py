"""``attnq trace export|show|campaigns|use``: publish and summarize the campaign store."""

from __future__ import annotations

import argparse
import sys

from attnq.commands.reflect import add_common_args, add_output_args, open_store, output_target, positive_int
from harness.errors import InputError
from harness.store import validate_campaign_id


def _export(args: argparse.Namespace) -> int:
    from questions.trace import write_trace

    campaign = args.campaign  # None: every campaign
    target = output_target(args)
    _, store = open_store(args, create=False)
    with store:
        if target is None:
            write_trace(store, sys.stdout, fmt=args.format, campaign_id=campaign)
            return 0
        try:
            with open(target, "w", encoding="utf-8") as fh:
                n = write_trace(store, fh, fmt=args.format, campaign_id=campaign)
        except OSError as exc:
            raise InputError(f"cannot write {target}: {exc.strerror or exc}") from None
    print(f"wrote {n} records ({args.format}) to {target}", file=sys.stderr)
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
    validate_campaign_id(args.name)
    _, store = open_store(args)
    with store:
        known = store.campaign_ids()
        if args.name not in known and not args.new:
            raise InputError(f"no campaign {args.name!r} (campaigns: {', '.join(known) or 'none'}); "
                             f"to start a new one: attnq trace use --new {args.name}")
        store.set_active_campaign(args.name)
    print(f"active campaign: {args.name}" + (" (new)" if args.name not in known else ""))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``attnq trace`` and its subcommands."""
    p = subparsers.add_parser("trace", help="export or summarize the campaign store; switch campaigns")
    sub = p.add_subparsers(dest="trace_command", metavar="SUBCOMMAND", required=True)
    s = sub.add_parser("export", help="write the whole store (all campaigns) for publication")
    add_output_args(s)
    s.add_argument("--format", choices=("jsonl", "json"), default="jsonl")
    add_common_args(s, json_flag=False)
    s.set_defaults(handler=_export)
    s = sub.add_parser("show", help="attempts, best geomean over time, triggers, questions and what followed")
    s.add_argument("--horizon", type=positive_int, default=3, help="attempts after a question that count (default 3)")
    add_common_args(s)
    s.set_defaults(handler=_show)
    s = sub.add_parser("campaigns", help="list campaigns (* = active)")
    add_common_args(s)
    s.set_defaults(handler=_campaigns)
    s = sub.add_parser("use", help="make NAME the workspace's active campaign (--new to start one)")
    s.add_argument("name")
    s.add_argument("--new", action="store_true", help="start NAME as a new campaign (a name not known is refused "
                                                      "without it, so a typo does not start one)")
    add_common_args(s, json_flag=False)
    s.set_defaults(handler=_use)
