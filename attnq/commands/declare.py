"""``attnq declare limit|done TEXT``: record a claim, check the goal, answer with a question."""

from __future__ import annotations

import argparse
import time

from attnq.commands.reflect import add_common_args, open_bank, open_store, record_cli_event


def _run(args: argparse.Namespace) -> int:
    from questions.reflect import declare

    started = time.monotonic()
    settings, store = open_store(args)
    with store:
        d = declare(store, open_bank(settings, store), args.kind, args.text, settings=settings)
        record_cli_event(store, "declare", args, started,
                         {"claim_id": d.claim_id, "goal_met": d.goal_met, "question_id": d.reflection.question_id})
    if args.json:
        print(d.model_dump_json(indent=2))
    else:
        print(f"claim #{d.claim_id} ({d.kind}) recorded; {d.goal}")
        print(f"[{d.reflection.trigger}] {d.reflection.evidence}")
        print(f"question ({d.reflection.question_id}, {d.reflection.layer}): {d.reflection.question}")
    return 0 if d.kind == "limit" or d.goal_met else 1


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``attnq declare``. Exit code 1 for ``done`` when the goal is not met."""
    p = subparsers.add_parser(
        "declare", help="claim 'limit' or 'done'; checks the goal and answers with a question",
        description="Record a claim ('limit': the kernel cannot get meaningfully faster; 'done': the goal is met), "
                    "check it against the measurements and print the question for that moment.")
    p.add_argument("kind", choices=("limit", "done"))
    p.add_argument("text", help="the claim in the agent's words")
    add_common_args(p)
    p.set_defaults(handler=_run)
