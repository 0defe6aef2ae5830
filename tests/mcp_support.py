"""Shared pieces of the MCP server tests: the tool list and a workspace sharing one build cache."""

from __future__ import annotations

from pathlib import Path

import pytest

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
