"""``attnq trace export|import|show|campaigns|use``: publish, restore and summarize the campaign store."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnq.commands.reflect import (
    add_common_args,
    add_output_args,
    open_store,
    output_target,
    positive_int,
    settings_from,
)
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


def _read_trace_file(path: Path) -> str:
    """The trace file's text (``-``: stdin). Raises InputError when it cannot be read or is not UTF-8."""
    try:
        return sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text (an attnq trace is JSON)") from None


def _import(args: argparse.Namespace) -> int:
    from harness.store import CampaignStore
    from questions.trace_import import import_trace

    if args.rename_to is not None:
        validate_campaign_id(args.rename_to)
    text = _read_trace_file(args.file)
    # --campaign picks a campaign of the trace, so the store opens on its active campaign (creating nothing).
    with CampaignStore.open(settings_from(args)) as store:
        result = import_trace(store, text, campaign_id=args.campaign, rename_to=args.rename_to)
    if args.json:
        print(result.model_dump_json(indent=2))
        return 0
    for c in result.campaigns:
        n = c.counts
        name = c.campaign_id + (f" (from {c.source_id})" if c.source_id != c.campaign_id else "")
        print(f"imported campaign {name}: {n['attempts']} attempts, {n['questions']} questions, "
              f"{n['claims']} claims, {n['events']} events, {n['human_questions']} human questions")
    for src in result.skipped:
        print(f"skipped campaign {src}: it holds no records in the trace and the store already uses the id")
    if not result.campaigns:
        print("nothing to import")
    if result.activated:
        print(f"active campaign: {result.active} (the store held no attempts before)")
    else:
        hint = f"; switch with: attnq trace use {result.campaigns[-1].campaign_id}" if result.campaigns else ""
        print(f"active campaign: {result.active} (unchanged{hint})")
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
    s = sub.add_parser("export", help="write the store for publication (every campaign, or --campaign NAME's)")
    add_output_args(s)
    s.add_argument("--format", choices=("jsonl", "json"), default="jsonl")
    add_common_args(s, json_flag=False, campaign_help="export only this campaign (default: every campaign)")
    s.set_defaults(handler=_export)
    s = sub.add_parser("import", help="restore campaigns from a trace written by `attnq trace export`")
    s.add_argument("file", type=Path, help="the trace (jsonl or json; - reads stdin)")
    s.add_argument("--campaign", default=None, help="import only this campaign of the trace (default: every one)")
    s.add_argument("--as", dest="rename_to", metavar="NEW_ID", default=None,
                   help="import the (single or chosen) campaign under this id")
    s.add_argument("--workspace", type=Path, default=None, help="workspace root (default: ATTNQ_WORKSPACE or cwd)")
    s.add_argument("--json", action="store_true", help="print the result model as JSON")
    s.set_defaults(handler=_import)
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
