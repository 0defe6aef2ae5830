"""Shared pieces of the MCP server tests: the tool list, a workspace sharing one build cache, and tool
calls through an in-process client."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp.client import Client

from harness.config import Settings
from mcp_server.server import build_server

EXPECTED_TOOLS = {"get_task", "compile_kernel", "verify_kernel", "get_verification", "cancel_verification",
                  "reflect", "declare", "add_question", "list_questions", "campaign_status", "get_report",
                  "evolve_next", "evolve_submit", "peer_test", "get_peer_test"}


def make_workspace(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A fresh workspace whose ``.attnq/build`` links to one build cache for the whole session, so the
    MCP test modules compile each kernel once."""
    ws = tmp_path_factory.mktemp(name)
    shared = tmp_path_factory.getbasetemp() / "attnq-shared-build"
    shared.mkdir(exist_ok=True)
    (ws / ".attnq").mkdir()
    (ws / ".attnq" / "build").symlink_to(shared, target_is_directory=True)
    return ws


def call_tools(ws: Path, calls: list[tuple[str, dict]]) -> list:  # type: ignore[type-arg]
    """Call each (tool, arguments) on a server for workspace ``ws`` in one in-process client session; the
    results in order. The server's state is closed afterwards."""
    server = build_server(Settings(workspace=ws))

    async def main() -> list:  # type: ignore[type-arg]
        async with Client(server) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    try:
        return anyio.run(main)
    finally:
        server.attnq_state.close()  # type: ignore[attr-defined]
