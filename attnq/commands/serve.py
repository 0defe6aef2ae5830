"""``attnq serve``: run the MCP server (stdio by default; ``--http`` for streamable HTTP + bearer token)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``serve`` subcommand."""
    from mcp_server.cli import add_serve_arguments

    parser = subparsers.add_parser(
        "serve", help="run the MCP server (stdio; --http for streamable HTTP)",
        description="Run the attnq MCP server. stdio by default (what Claude Code, Codex, Cursor, VS Code and "
                    "Gemini CLI launch); --http serves streamable HTTP at /mcp behind a bearer token "
                    "(ATTNQ_HTTP_TOKEN or --token-file), on 127.0.0.1 unless told otherwise.")
    add_serve_arguments(parser)
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    from mcp_server.cli import serve_from_args

    return serve_from_args(args)
