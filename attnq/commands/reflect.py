"""``attnq reflect``: the question for now, with its trigger and evidence (questions/reflect.py).

Also holds the helpers the question commands share (``--workspace``/``--campaign``, opening the store).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from harness.config import Settings
from harness.store import CampaignStore
from questions.bank import TRIGGERS, Bank, load_bank


def add_common_args(p: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    """``--workspace DIR``, ``--campaign NAME`` and (optionally) ``--json``."""
    p.add_argument("--workspace", type=Path, default=None, help="workspace root (default: ATTNQ_WORKSPACE or cwd)")
    p.add_argument("--campaign", default=None, help="campaign name (default: the workspace's active campaign)")
    if json_flag:
        p.add_argument("--json", action="store_true", help="print the result model as JSON")


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the environment, with ``--workspace`` applied."""
    ws = getattr(args, "workspace", None)
    return Settings(workspace=ws) if ws is not None else Settings()


def open_store(args: argparse.Namespace, *, create: bool = True) -> tuple[Settings, CampaignStore]:
    """Settings and the workspace's campaign store (campaign from ``--campaign`` or the active one).

    ``create=False`` (read-only commands): an unknown ``--campaign`` is refused (InputError listing the
    known campaigns) instead of created. A ``--campaign`` that is not a slug is always refused.
    """
    settings = settings_from(args)
    return settings, CampaignStore.open(settings, campaign_id=getattr(args, "campaign", None), create=create)


def open_bank(settings: Settings, store: CampaignStore) -> Bank:
    """The layered bank: built-in, promoted, imported, ``bank_paths``."""
    return load_bank(settings=settings, store=store)


def record_cli_event(store: CampaignStore, command: str, args: argparse.Namespace, started: float,
                     result: dict[str, Any] | None, ok: bool = True) -> None:
    """Record the CLI call as a tool-call event (``tool = "cli.<command>"``)."""
    keep = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
            if k not in ("handler", "json", "workspace", "log_level") and not callable(v)}
    store.record_event(f"cli.{command}", args=keep, result=result, ok=ok, duration_s=time.monotonic() - started)


def _run(args: argparse.Namespace) -> int:
    from questions.reflect import reflect

    started = time.monotonic()
    settings, store = open_store(args)
    with store:
        r = reflect(store, open_bank(settings, store), trigger=args.trigger, claim=args.claim, settings=settings)
        record_cli_event(store, "reflect", args, started, {"question_id": r.question_id, "trigger": r.trigger})
    if args.json:
        print(r.model_dump_json(indent=2))
    else:
        if r.trigger:
            print(f"[{r.trigger}] {r.evidence}")
        else:  # the evidence of a general question already says "no trigger fired: ..."
            print(r.evidence if r.evidence.startswith("no trigger fired") else f"[no trigger fired] {r.evidence}")
        print(f"question ({r.question_id}, {r.layer}): {r.question}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``attnq reflect``."""
    p = subparsers.add_parser("reflect", help="ask the question for this moment (trigger + evidence)",
                              description="Detect a trigger (or use --trigger) and print one question with its evidence.")
    p.add_argument("--trigger", choices=TRIGGERS, default=None, help="force this trigger")
    p.add_argument("--claim", default=None, help="the agent's claim in words (recorded as limit/done)")
    add_common_args(p)
    p.set_defaults(handler=_run)
