"""``attnq mcp-config CLIENT``: print an MCP client's configuration for this install, ready to paste.

A client launched from a desktop (Cursor, VS Code) or from a shell without the venv activated does not
have the venv's ``bin/`` on its ``PATH``, so a bare ``attnq`` command fails to start. The configuration
printed here names the venv's interpreter by its absolute path and runs ``-m attnq serve``, which works
from any directory and any ``PATH``. ``attnq mcp-config command`` prints just that command line.

examples/clients/ holds the same output for an install in :data:`EXAMPLE_PYTHON` (tests keep them equal).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from harness.scenarios import load_suite, suite_choices_text

CLIENTS = ("claude-code", "codex", "cursor", "vscode", "gemini", "command")
#: The interpreter path the files in examples/clients/ are written for (replace it with yours, or
#: generate the file with this command).
EXAMPLE_PYTHON = "/path/to/attnq/.venv/bin/python"
#: Tool-call timeout written into the configs, seconds: attnq never blocks longer than ~45 s, but a
#: first compile on a slow machine can come close.
TOOL_TIMEOUT_S = 120
STARTUP_TIMEOUT_S = 30


def server_command(python: str | None = None) -> list[str]:
    """``[<absolute venv python>, "-m", "attnq", "serve"]`` (``sys.executable``, not resolved: resolving
    a venv's symlinked python would step out of the venv)."""
    return [python or os.path.abspath(sys.executable), "-m", "attnq", "serve"]


def render(client: str, *, python: str | None = None, suite: str = "quick") -> str:
    """The configuration text of ``client`` (one of :data:`CLIENTS`), ending in a newline."""
    cmd = server_command(python)
    if client == "command":
        return shlex.join(cmd) + "\n"
    env: dict[str, str] = {"ATTNQ_SUITE": suite, "ATTNQ_LOG_LEVEL": "warning"}
    if client == "codex":
        return "\n".join([
            "# ~/.codex/config.toml (or <project>/.codex/config.toml): the attnq MCP server for Codex.",
            "# Written by `attnq mcp-config codex`. Codex cuts a tool call after tool_timeout_sec (60 s by default);",
            "# attnq never blocks longer than ~45 s (a long verification answers with a job id).",
            "[mcp_servers.attnq]",
            f"command = {json.dumps(cmd[0])}",
            f"args = {json.dumps(cmd[1:])}",
            f"startup_timeout_sec = {STARTUP_TIMEOUT_S}",
            f"tool_timeout_sec = {TOOL_TIMEOUT_S}",
            "",
            "[mcp_servers.attnq.env]",
            *[f"{k} = {json.dumps(v)}" for k, v in env.items()],
        ]) + "\n"
    server: dict[str, Any] = {"command": cmd[0], "args": cmd[1:]}
    if client in ("cursor", "vscode"):  # both expand ${workspaceFolder}: the open folder is the workspace
        env = {"ATTNQ_WORKSPACE": "${workspaceFolder}", **env}
    if client in ("claude-code", "cursor", "vscode"):
        server = {"type": "stdio", **server}
    server["env"] = env
    if client == "gemini":
        server.update({"timeout": TOOL_TIMEOUT_S * 1000, "trust": False})
    doc = {"servers" if client == "vscode" else "mcpServers": {"attnq": server}}
    return json.dumps(doc, indent=2) + "\n"


def config_suite(suite: str) -> str:
    """The ATTNQ_SUITE to write: a built-in name as given, a suite file as an absolute path (the client starts the
    server in a directory of its own). Raises InputError (harness.scenarios.load_suite) for an unknown suite or a
    file that does not load, here and not when the client starts the server (whose only message is then
    "Connection closed")."""
    load_suite(suite)
    path = Path(suite)
    return str(path.resolve()) if path.suffix == ".toml" or path.exists() else suite


def run(args: argparse.Namespace) -> int:
    """Handler: print the configuration on stdout."""
    sys.stdout.write(render(args.client, python=args.python, suite=config_suite(args.suite)))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``attnq mcp-config``."""
    p = subparsers.add_parser(
        "mcp-config", help="print an MCP client's config for this install (absolute command, works without PATH)",
        description="Print the configuration that makes CLIENT start this install's MCP server: the venv's "
                    "python by absolute path with `-m attnq serve`, so desktop-launched clients find it. "
                    "`command` prints only that command line, e.g. "
                    "`claude mcp add attnq -- $(attnq mcp-config command)`; "
                    "`attnq mcp-config cursor > .cursor/mcp.json` writes Cursor's.")
    p.add_argument("client", choices=CLIENTS)
    p.add_argument("--suite", default="quick",
                   help=f"ATTNQ_SUITE written into the config: {suite_choices_text()} (default quick)")
    p.add_argument("--python", default=None, help=argparse.SUPPRESS)  # examples/clients/ use EXAMPLE_PYTHON
    p.set_defaults(handler=run)
