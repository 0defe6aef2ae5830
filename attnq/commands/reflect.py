"""``attnq reflect``: the question for now, with its trigger and evidence (questions/reflect.py).

Also holds the helpers the question commands share (``--workspace``/``--campaign``, opening the store).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

from harness.config import Settings
from harness.errors import InputError
from harness.store import CampaignStore
from questions.bank import TRIGGERS, Bank, load_bank


def add_common_args(p: argparse.ArgumentParser, *, json_flag: bool = True,
                    campaign_help: str = "campaign name (default: the workspace's active campaign)") -> None:
    """``--workspace DIR``, ``--campaign NAME`` (``campaign_help``: its help text) and (optionally) ``--json``."""
    p.add_argument("--workspace", type=Path, default=None, help="workspace root (default: ATTNQ_WORKSPACE or cwd)")
    p.add_argument("--campaign", default=None, help=campaign_help)
    if json_flag:
        p.add_argument("--json", action="store_true", help="print the result model as JSON")


def positive_int(text: str) -> int:
    """argparse ``type=``: an integer >= 1 (``--horizon 0`` and ``-1`` are refused, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse ``type=``: a finite number > 0 (``0``, ``-1``, ``nan``, ``inf`` and ``1e400`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def add_output_args(p: argparse.ArgumentParser) -> None:
    """``[FILE]`` or ``-o/--output FILE`` (the same for every command that writes a file; ``-`` is stdout)."""
    p.add_argument("file", nargs="?", type=Path, default=None, help="output file (default: stdout)")
    p.add_argument("-o", "--output", type=Path, default=None, help="output file, the same as FILE")


def output_target(args: argparse.Namespace) -> Path | None:
    """The file named by FILE or ``-o`` (None: stdout). Raises InputError when both name different files."""
    a, b = getattr(args, "file", None), getattr(args, "output", None)
    if a is not None and b is not None and a != b:
        raise InputError(f"two output files given ({a} and {b}): give FILE or -o FILE")
    target = a if a is not None else b
    return None if target is None or str(target) == "-" else target


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the environment, with ``--workspace`` applied.

    Raises:
        InputError: the workspace (``--workspace`` or ``ATTNQ_WORKSPACE``) is not an existing directory; a
            typo must not become a new, empty workspace on the first write.
    """
    ws = getattr(args, "workspace", None)
    settings = Settings(workspace=ws) if ws is not None else Settings()
    check_workspace(settings.workspace)
    return settings


def check_workspace(workspace: Path) -> None:
    """InputError unless ``workspace`` is an existing directory."""
    try:
        ok = workspace.is_dir()
    except OSError as exc:
        raise InputError(f"workspace {workspace}: {exc.strerror or exc}") from None
    if not ok:
        what = "is not a directory" if workspace.exists() else "does not exist"
        raise InputError(f"workspace {workspace} {what}: create it first or fix the path")


def open_store(args: argparse.Namespace, *, create: bool = False) -> tuple[Settings, CampaignStore]:
    """Settings and the workspace's campaign store (campaign from ``--campaign`` or the active one).

    An unknown ``--campaign`` is refused (InputError listing the known campaigns and how to start one:
    ``attnq trace use --new NAME``), for writing commands too, so a typo never starts a campaign and
    splits its records off; ``create=True`` creates it instead. A ``--campaign`` that is not a slug is
    always refused.
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
