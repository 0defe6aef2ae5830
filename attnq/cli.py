"""``attnq`` entry point: argparse with one module per subcommand (see attnq/commands/).

Exit codes: 0 success (for ``verify``: all scenarios correct), 1 verified but incorrect or goal not
met, 2 error the user can fix (bad input, compile error, policy), 3 no usable GPU, 70 a bug in attnq
(EX_SOFTWARE of sysexits.h: one line on stderr, the traceback in the log).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from harness.config import Settings, env_note, settings_error_text
from harness.errors import AttnqError, internal_error_text
from harness.logging import configure_logging
from questions.text import printable

#: Exit code of a crash (a bug of attnq's, not the user's input): EX_SOFTWARE of sysexits.h.
EXIT_BUG = 70
#: ``--log-level`` values (case-insensitive).
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

#: Exit codes every command shares (attnq/cli.py: errors, crashes, Ctrl-C, a closed stdout).
COMMON_EXIT_CODES = {2: "an error you can fix (input, compile, policy; one line on stderr)",
                     70: "a bug in attnq (the traceback in the log)", 130: "interrupted", 141: "stdout closed (| head)"}
#: What 0 and 1 (and 3) mean, per subcommand whose codes say more than "0 done"; shown by ``--help``.
EXIT_CODES = {
    "verify": {0: "every scenario correct", 1: "some scenario failed",
               3: "no GPU that runs the build's arch (the build itself succeeded)"},
    "declare": {0: "the claim is recorded (for 'done': and the goal is met)",
                1: "for 'done' when the goal is not met (no verified attempt meets it)"},
    "evolve": {0: "the run ended (goal or budget) or waits for an MCP client",
               1: "the run failed (the seed is not correct)",
               3: "no GPU that runs the arch (checked before a run is created)"},
    "peer-test": {0: "FlashAttention's tests passed", 1: "a test failed", 3: "no GPU"},
}


def exit_codes_text(command: str | None) -> str:
    """``Exit codes: ...`` of one subcommand (None: of ``attnq`` itself), as ``--help`` prints it."""
    if command is None:
        codes = {0: "success", 1: "verified but not correct, or goal not met", 3: "no usable GPU", **COMMON_EXIT_CODES}
        tail = " Each command's --help lists its own."
    else:
        codes = {0: "done", **COMMON_EXIT_CODES, **EXIT_CODES.get(command, {})}
        tail = ""
    return textwrap.fill("Exit codes: " + "; ".join(f"{c} {codes[c]}" for c in sorted(codes)) + "." + tail, 79)


#: Subcommand modules under attnq.commands, in help order.
COMMANDS = ("compile", "scenarios", "verify", "reflect", "declare", "questions", "trace", "report", "evolve",
            "export", "peer_test", "mcp_config", "serve")


def _version() -> str:
    """The installed attnq's version (its package metadata), or ``unknown`` when it is run from a bare checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attnq")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error: ``attnq verify: error: argument --goal: invalid float value: 'abc' (see
    `attnq verify --help`)`` on stderr and exit code 2, instead of the whole usage block before the error (a
    newcomer's typo got 3-13 lines, session 19). Subparsers are of this class too (add_subparsers' default)."""

    def error(self, message: str) -> NoReturn:
        """Print the one line and exit 2 (argparse's contract: ``error`` must not return)."""
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The full parser; each command module adds its own subparser."""
    parser = _Parser(
        prog="attnq",
        description="Verify, time and question agent-written CUDA attention kernels.",
        epilog=exit_codes_text(None),
    )
    parser.add_argument("--version", action="version", version=f"attnq {_version()}")
    parser.add_argument("--log-level", default=None, type=str.lower, choices=LOG_LEVELS,
                        help="structlog level on stderr (default: warning)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    fields: dict[str, dict[str, str]] = {}  # command -> {model field: flag dest} (a module's FLAG_FIELDS)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"attnq.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"attnq.commands.{name}":
                continue  # command not built yet
            raise
        before = set(sub.choices)
        module.register(sub)
        for cmd in set(sub.choices) - before:
            fields[cmd] = {f: d for d, f in getattr(module, "FLAG_FIELDS", {}).items() if f != d}
    for name, command in sub.choices.items():  # every --help ends with the command's exit codes
        text = exit_codes_text(name)
        command.epilog = text if not command.epilog else f"{command.epilog}\n\n{text}"
        # dest -> the flag's long spelling, so an invalid value is named as the user typed it; a model field set by
        # a flag of another name (FLAG_FIELDS) is named by that flag too
        flags = {a.dest: max(a.option_strings, key=len) for a in command._actions
                 if a.option_strings and a.dest != "help"}
        flags.update({f: flags[d] for f, d in fields.get(name, {}).items() if d in flags})
        command.set_defaults(_flags=flags)
    return parser


#: Model fields set by a flag whose dest is spelled otherwise (``--goal`` sets ``goal_speedup``).
FIELD_DESTS = {"goal_speedup": "goal", "scenario_timeout_s": "scenario_timeout", "parallel_mutators": "parallel"}


def format_validation_error(exc: ValidationError, *, limit: int = 3, flags: dict[str, str] | None = None) -> str:
    """``field: message; ...`` for the first ``limit`` errors (no input echo, no errors.pydantic.dev URL; a
    value from an ``ATTNQ_*`` variable names it, harness.config.env_note; a field the command's ``flags``
    (dest -> flag) set is named by its flag: ``--goal: Input should be greater than 0``, not ``goal_speedup``)."""
    errors = exc.errors(include_url=False)
    note = env_note if exc.title == "Settings" else (lambda _e: "")  # a bad ATTNQ_* variable is named

    def where(e: dict) -> str:
        loc = e.get("loc", ())
        if loc and flags and not note(e):
            for dest in (str(loc[0]), FIELD_DESTS.get(str(loc[0]), "")):
                if dest in flags:
                    return flags[dest]
        return ".".join(str(x) for x in loc) or "value"

    parts = [f"{where(e)}: {e.get('msg', 'invalid')}{note(e)}" for e in errors[:limit]]
    if len(errors) > limit:
        parts.append(f"... {len(errors) - limit} more")
    return "; ".join(parts)


def _fail(args: argparse.Namespace, code: str, message: str, exit_code: int = 2) -> int:
    """Report an error that is not an AttnqError: the error JSON on stdout with ``--json``, else one line."""
    if getattr(args, "json", False):
        print(json.dumps({"error": code, "message": message}, indent=2))
    else:
        print(f"attnq {args.command}: {printable(message)}", file=sys.stderr)
    return exit_code


def _report(args: argparse.Namespace, err: AttnqError) -> int:
    """Print an AttnqError (JSON on stdout with ``--json``, else a line plus diagnostics on stderr)."""
    if getattr(args, "json", False):
        print(json.dumps(err.to_dict(), indent=2))
    else:
        print(f"attnq {args.command}: {printable(err.message)}", file=sys.stderr)  # it may quote the input
        for diag in err.details.get("diagnostics", [])[:10]:
            where = ":".join(str(x) for x in (diag.get("file"), diag.get("line"), diag.get("column")) if x is not None)
            print(f"  {where}: {diag.get('severity', 'error')}: {diag.get('message')}", file=sys.stderr)
        q = err.details.get("question")
        if isinstance(q, dict) and q.get("question"):
            print(f"question ({q.get('trigger')}): {q['question']}\n  evidence: {q.get('evidence')}", file=sys.stderr)
    return err.exit_code


def _state_note(where: object) -> str:
    """What a failing path is when it is attnq's state directory or inside it (a user rarely knows that
    ``ATTNQ_STATE`` or ``<workspace>/.attnq`` is where the build cache and campaign store live), else ``""``."""
    if not isinstance(where, str) or not where:
        return ""
    try:
        state = Settings().state_dir
        path = Path(where).absolute()
    except Exception:  # noqa: BLE001 - only a note: an unusable setting has its own message elsewhere
        return ""
    if path != state and state not in path.parents:
        return ""
    how = "ATTNQ_STATE" if os.environ.get("ATTNQ_STATE") else "<workspace>/.attnq; set ATTNQ_STATE to move it"
    return (f" (attnq's state directory {state}: the build cache and campaign store; from {how}): "
            "point it at a writable folder")


def _run(args: argparse.Namespace) -> int:
    """The handler, with every error a user can cause turned into one plain message and an exit code.

    pydantic ValidationError (flags and ``ATTNQ_*`` variables, via Settings) and pydantic_settings'
    SettingsError -> ``invalid value: field: message``, exit 2; OSError from a user path ->
    ``strerror: filename``, exit 2.
    """
    from pydantic_settings import SettingsError

    try:
        return int(args.handler(args) or 0)
    except AttnqError as err:
        return _report(args, err)
    except ValidationError as err:
        return _fail(args, "input_error",
                     f"invalid value: {format_validation_error(err, flags=getattr(args, '_flags', None))}")
    except SettingsError as err:
        return _fail(args, "input_error", f"invalid value: {settings_error_text(err)}")
    except BrokenPipeError:
        raise
    except OSError as err:
        where = err.filename if err.filename is not None else ""
        text = err.strerror or str(err)
        if isinstance(err, FileExistsError) and where and not os.path.isdir(where):
            text = "exists and is not a directory"
        return _fail(args, "input_error", (f"{text}: {where}" if where != "" else text) + _state_note(where))
    except Exception as err:  # noqa: BLE001 - a bug of ours: one line and EX_SOFTWARE; the traceback goes to the log
        from harness.logging import get_logger

        get_logger("attnq.cli").exception("command_crashed", command=args.command)
        text = internal_error_text(f"attnq {args.command}", err).removeprefix("[internal_error] ")
        return _fail(args, "internal_error", text.replace("the server log", "the log (stderr)"), EXIT_BUG)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code. Errors print one plain line on stderr, never a traceback.

    A closed stdout (``attnq scenarios | head``) ends the command quietly with exit code 141
    (128 + SIGPIPE, what a shell reports for a process killed by SIGPIPE); the recipe is the one in
    the Python docs (signal module, "Note on SIGPIPE").
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        code = _run(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("attnq: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
