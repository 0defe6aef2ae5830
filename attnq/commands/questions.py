"""``attnq questions list|stats|add|export|import|validate``: the question bank and its effectiveness."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from attnq.commands.reflect import (
    add_common_args,
    add_output_args,
    open_bank,
    open_store,
    output_target,
    positive_int,
    record_cli_event,
    settings_from,
)
from harness.errors import QuestionBankError
from questions.bank import (
    LAYERS,
    TRIGGERS,
    Bank,
    dumps_bank,
    export_bank,
    import_bank,
    load_bank,
    load_bank_file,
    validate_bank,
)
from questions.text import printable


def _list(args: argparse.Namespace) -> int:
    settings, store = open_store(args)
    with store:
        bank = open_bank(settings, store)
    qs = [q for q in bank.for_trigger(args.trigger) if args.layer is None or q.layer == args.layer]
    if args.json:
        print(Bank(questions=qs, sources=bank.sources).model_dump_json(indent=2))
        return 0
    for q in qs:  # printable: text stored by an older attnq may hold control characters
        print(f"{q.id:40s} {q.layer:26s} {','.join(q.triggers)}\n    {printable(q.text)}")
    cov = bank.coverage()
    print(f"\n{len(qs)} of {len(bank.questions)} questions; per trigger: "
          + ", ".join(f"{t} {sum(cov[t].values())} ({len(cov[t])} layers)" for t in TRIGGERS))
    return 0


def _stats(args: argparse.Namespace) -> int:
    from questions.policy import effectiveness, rank

    settings, store = open_store(args)
    with store:
        bank = open_bank(settings, store)
        stats = effectiveness(store, bank, horizon=args.horizon, min_gain=settings.stall_min_gain)
    ranked = rank(stats)
    if args.json:
        print(json.dumps({"horizon": args.horizon, "questions": [s.model_dump(mode="json") for s in ranked]},
                         indent=2))
        return 0
    print(f"{'question':40s} {'layer':26s} asked resolved improved  rate  posterior")
    for s in ranked:
        rate = f"{s.rate:.2f}" if s.rate is not None else "  - "
        print(f"{s.question_id:40s} {s.layer:26s} {s.asked:5d} {s.resolved:8d} {s.improved:8d} {rate:>5s} "
              f"{s.posterior_mean:9.2f}")
    return 0


def _add(args: argparse.Namespace) -> int:
    from questions.human import add_question, check_question_text

    started = time.monotonic()
    check_question_text(args.text)  # before the store is opened: bad input leaves no trace
    _, store = open_store(args)
    with store:
        res = add_question(store, args.text, triggers=args.trigger, layer=args.layer)
        record_cli_event(store, "questions.add", args, started,
                         {"promoted": res.promoted.id if res.promoted else None})
    if args.json:
        print(res.model_dump_json(indent=2))
    else:
        what = "already recorded" if res.already_recorded else "recorded"
        print(f"{what} question #{res.record.id} in campaign {res.record.campaign_id}; "
              f"asked in {len(res.campaigns)} campaign(s): {', '.join(res.campaigns)}")
        if res.promoted:
            print(f"promoted into the bank as {res.promoted.id}")
        elif res.promotion_error:
            print(f"not promoted: {printable(res.promotion_error)}")
    return 0


def _demote(args: argparse.Namespace) -> int:
    from questions.human import demote_question

    started = time.monotonic()
    _, store = open_store(args)
    with store:
        q = demote_question(store, args.question_id, args.reason)
        record_cli_event(store, "questions.demote", args, started, {"demoted": q.id})
    if args.json:
        print(q.model_dump_json(indent=2))
    else:
        print(f"demoted {q.id} ({printable(q.text)}); it leaves the bank and is not promoted again")
    return 0


def _export(args: argparse.Namespace) -> int:
    target = output_target(args)
    settings, store = open_store(args)
    with store:
        bank = open_bank(settings, store)
    if target is None:
        sys.stdout.write(dumps_bank(bank, args.format or "toml"))
        return 0
    path = export_bank(bank, target, fmt=args.format)
    print(f"wrote {len(bank.questions)} questions to {path}", file=sys.stderr)
    return 0


def _import(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    dest = import_bank(args.file, settings=settings, replace=args.replace)
    bank = load_bank(settings=settings)
    print(f"imported {args.file} as {dest}; the bank now has {len(bank.questions)} questions")
    return 0


def _validate(args: argparse.Namespace) -> int:
    if args.file:
        bank = Bank(questions=load_bank_file(args.file), sources=[str(args.file)])
        problems = [p for p in validate_bank(bank, min_per_trigger=0, min_layers=0)]
    else:
        bank = load_bank(settings=settings_from(args))
        problems = validate_bank(bank)
    if args.json:
        print(json.dumps({"questions": len(bank.questions), "problems": problems, "coverage": bank.coverage()},
                         indent=2))
    else:
        for p in problems:
            print(f"problem: {p}")
        print(f"{len(bank.questions)} questions, {len(problems)} problem(s)")
    if problems:
        raise QuestionBankError(f"{len(problems)} problem(s) in the bank: {problems[0]}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``attnq questions`` and its subcommands."""
    p = subparsers.add_parser("questions", help="the question bank: list, stats, add, export, import, validate")
    sub = p.add_subparsers(dest="questions_command", metavar="SUBCOMMAND", required=True)
    s = sub.add_parser("list", help="list the layered bank")
    s.add_argument("--trigger", choices=TRIGGERS, default=None)
    s.add_argument("--layer", choices=LAYERS, default=None)
    add_common_args(s)
    s.set_defaults(handler=_list)
    s = sub.add_parser("stats", help="effectiveness: how often the next attempts improved the best geomean")
    s.add_argument("--horizon", type=positive_int, default=3, help="attempts after a question that count (default 3)")
    add_common_args(s)
    s.set_defaults(handler=_stats)
    s = sub.add_parser("add", help="record a question a person asked (promoted when asked in >= 2 campaigns)")
    s.add_argument("text", help="ONE question ending in '?'")
    s.add_argument("--trigger", action="append", choices=TRIGGERS, default=None, help="repeatable")
    s.add_argument("--layer", choices=LAYERS, default=None)
    add_common_args(s)
    s.set_defaults(handler=_add)
    s = sub.add_parser("demote", aliases=["remove"], help="take a promoted question out of the bank for good",
                       description="Remove a promoted question (id from `attnq questions list`, origin promoted) from "
                                   "the bank. Questions similar to it are no longer promoted; the people's records "
                                   "stay. Built-in and imported questions live in bank files: edit those.")
    s.add_argument("question_id")
    s.add_argument("--reason", default="demoted by a person", help="why (kept with the demotion)")
    add_common_args(s)
    s.set_defaults(handler=_demote)
    s = sub.add_parser("export", help="write the layered bank to FILE (.toml or .json; stdout without FILE)")
    add_output_args(s)
    s.add_argument("--format", choices=("toml", "json"), default=None, help="default: from the suffix (toml on stdout)")
    add_common_args(s, json_flag=False)
    s.set_defaults(handler=_export)
    s = sub.add_parser("import", help="validate FILE and add it to the workspace's banks (<state_dir>/banks)")
    s.add_argument("file", type=Path)
    s.add_argument("--replace", action="store_true",
                   help="replace an imported bank of the same name that holds other questions (else refused)")
    add_common_args(s, json_flag=False)
    s.set_defaults(handler=_import)
    s = sub.add_parser("validate", help="validate the layered bank (coverage rule) or one FILE (schema, ids)")
    s.add_argument("file", type=Path, nargs="?", default=None)
    add_common_args(s)
    s.set_defaults(handler=_validate)
