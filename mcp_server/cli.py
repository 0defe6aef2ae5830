"""Command-line options of the MCP server, shared by ``attnq serve`` and ``python -m mcp_server``.

Settings come from ``ATTNQ_*`` environment variables (harness.config.Settings); a flag given here
overrides its variable.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from harness.anchors import GOAL_TARGETS
from harness.config import Settings, env_note, settings_error_text
from harness.errors import AttnqError, InputError
from harness.scenarios import suite_choices_text
from mcp_server.jobs import Limits

#: flag destination -> Settings field
_SETTINGS_FLAGS = {
    "workspace": "workspace", "gpu": "gpu", "suite": "suite", "arch": "arch", "goal_speedup": "goal_speedup",
    "goal_anchor": "goal_anchor", "stall_window": "stall_window", "stall_min_gain": "stall_min_gain",
    "stall_failures": "stall_failures", "suspicious_jump": "suspicious_jump", "bank": "bank_paths", "seed": "seed",
}


#: ``--log-level`` values (case-insensitive); the same as ``attnq --log-level``.
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
#: Allowed ranges (inclusive) of the long-call flags, in seconds: a tool call must answer before
#: clients cut it (~60 s), and a progress notification must come at least every 10 s.
MAX_CALL_RANGE_S = (1.0, 55.0)
HEARTBEAT_RANGE_S = (0.5, 10.0)


def ranged(kind: type, low: float, high: float) -> Any:
    """An argparse ``type=`` that parses ``kind`` (int or float) and refuses values outside [low, high]."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None
        if not low <= value <= high:  # also refuses nan
            raise argparse.ArgumentTypeError(f"{text} is outside {low:g}..{high:g}")
        return value

    parse.__name__ = kind.__name__
    return parse


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add transport, settings and timing flags to ``parser``."""
    t = parser.add_argument_group("transport")
    t.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio (needs a token)")
    t.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    t.add_argument("--port", type=ranged(int, 1, 65535), default=8765, help="HTTP port, 1..65535 (default 8765)")
    t.add_argument("--token-file", default=None,
                   help="file whose first line is the bearer token (default: $ATTNQ_HTTP_TOKEN)")
    t.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host")
    s = parser.add_argument_group("settings (override ATTNQ_* variables)")
    s.add_argument("--workspace", type=Path, default=None, help="workspace root (default: $ATTNQ_WORKSPACE or cwd)")
    s.add_argument("--gpu", type=int, default=None,
                   help="CUDA device index for verification (default: ATTNQ_GPU or 0)")
    s.add_argument("--suite", default=None, help=f"default suite: {suite_choices_text()} (default: ATTNQ_SUITE or "
                   "quick)")
    s.add_argument("--arch", default=None, help="nvcc target arch (default: ATTNQ_ARCH or sm_90a)")
    s.add_argument("--goal-speedup", type=float, default=None,
                   help="goal: geomean speedup to reach (default: ATTNQ_GOAL_SPEEDUP or 1.0)")
    s.add_argument("--goal-anchor", choices=GOAL_TARGETS, default=None,
                   help="measure the goal against this anchor, or the original (default: ATTNQ_GOAL_ANCHOR or "
                        "original; fa3 needs flash_attn_interface importable)")
    s.add_argument("--stall-window", type=int, default=None, help="stall trigger: attempts without gain")
    s.add_argument("--stall-min-gain", type=float, default=None, help="stall trigger: relative gain that counts")
    s.add_argument("--stall-failures", type=int, default=None, help="stall trigger: consecutive failed attempts")
    s.add_argument("--suspicious-jump", type=float, default=None, help="suspicious_win trigger: jump factor")
    s.add_argument("--bank", action="append", type=Path, default=None, help="extra question bank file (repeatable)")
    s.add_argument("--seed", type=int, default=None, help="seed for question selection")
    j = parser.add_argument_group("long calls")
    j.add_argument("--max-call-s", type=ranged(float, *MAX_CALL_RANGE_S), default=45.0,
                   help="longest a tool call blocks before answering with a job id, 1..55 (default 45)")
    j.add_argument("--heartbeat-s", type=ranged(float, *HEARTBEAT_RANGE_S), default=5.0,
                   help="longest gap between progress notifications, 0.5..10 (default 5)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the environment, overridden by the flags that were given."""
    overrides: dict[str, Any] = {}
    for dest, field in _SETTINGS_FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            overrides[field] = value
    return Settings(**overrides)


def check_settings(settings: Settings) -> None:
    """Refuse, before serving, settings the tools would only trip over later.

    Raises:
        InputError: the workspace is not an existing directory; the default suite is neither a built-in
            suite nor a valid suite file inside the workspace (load_suite's own message).
    """
    from harness.scenarios import list_suites, load_suite

    ws = settings.workspace
    if not ws.is_dir():
        raise InputError(f"workspace {ws} {'is not a directory' if ws.exists() else 'does not exist'}: "
                         "create it first or fix the path")
    name = settings.suite.strip()
    if name not in list_suites() and ("/" in name or "\\" in name or name.endswith(".toml")):
        name = str(settings.resolve_in_workspace(name))
    load_suite(name)


def serve_from_args(args: argparse.Namespace) -> int:
    """Run the server as the parsed flags say; returns an exit code (2 on a usable error)."""
    from mcp_server.transport import configure_server_logging, run_http, run_stdio
    from questions.bank import load_bank

    configure_server_logging(getattr(args, "log_level", None))
    settings = settings_from_args(args)
    from harness.anchors import require_anchors

    require_anchors([settings.goal_anchor or "original"])  # AnchorUnavailableError (exit 2) before serving
    check_settings(settings)  # a typo in --workspace or --suite fails now, not at the first verify_kernel
    load_bank(settings=settings)  # QuestionBankError (exit 2) on a missing or bad --bank, before serving
    limits = Limits(inline_s=args.max_call_s, heartbeat_s=args.heartbeat_s)
    if args.http:
        from mcp_server.auth import load_token

        token = load_token(args.token_file)
        run_http(settings, token, host=args.host, port=args.port, allow_remote=args.allow_remote, limits=limits)
    else:
        run_stdio(settings, limits=limits)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mcp_server``: the same flags as ``attnq serve``."""
    parser = argparse.ArgumentParser(prog="python -m mcp_server", description="attnq MCP server (stdio by default)")
    parser.add_argument("--log-level", default=None, type=str.lower, choices=LOG_LEVELS,
                        help="log level (default: warning)")
    add_serve_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return serve_from_args(args)
    except AttnqError as err:
        print(f"attnq serve: {err.message}", file=sys.stderr)
        return err.exit_code
    except ValidationError as err:
        note = env_note if err.title == "Settings" else (lambda _e: "")  # a bad ATTNQ_* variable is named
        msgs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}{note(e)}" for e in err.errors(include_url=False)[:3])
        print(f"attnq serve: invalid value: {msgs}", file=sys.stderr)
        return 2
    except (SettingsError, OSError) as err:  # a bad ATTNQ_* variable; an unusable path
        if isinstance(err, SettingsError):
            text = f"invalid value: {settings_error_text(err)}"
        else:
            text = f"{err.strerror}: {err.filename}" if err.filename else str(err)
        print(f"attnq serve: {text}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
