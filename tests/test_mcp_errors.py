"""MCP tool errors are plain: invalid arguments name the field and the problem (no pydantic dump, no
errors.pydantic.dev URL), an unknown suite gets the CLI's message, and add_question's length bound is the
one ``attnq questions add`` uses. Runs the server in process through the SDK's own client."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from harness import ORIGINAL_KERNEL
from mcp_server.state import need
from questions.human import MAX_QUESTION_CHARS, MIN_QUESTION_CHARS
from tests.mcp_support import call_tools

REPO = Path(__file__).resolve().parent.parent


def plain(result) -> str:  # type: ignore[no-untyped-def]
    assert result.is_error, result.structured_content
    text = result.content[0].text
    assert "Traceback" not in text and "errors.pydantic.dev" not in text and "type=" not in text, text
    assert "validation error for" not in text and "input_value" not in text, text
    return text


def test_invalid_arguments_are_plain(tmp_path: Path) -> None:
    declare_bad, declare_missing, short, long_, anchors = call_tools(tmp_path, [
        ("declare", {"kind": "bogus", "text": "I am done"}),
        ("declare", {"kind": "done"}),
        ("add_question", {"text": "abc"}),
        ("add_question", {"text": "x" * (MAX_QUESTION_CHARS + 1)}),
        ("verify_kernel", {"path": "k.cu", "anchors": ["foo"]}),
    ])
    t = plain(declare_bad)
    assert t.startswith("[invalid_arguments] declare: kind: ") and "'limit' or 'done'" in t, t
    assert plain(declare_missing) == "[invalid_arguments] declare: text: Field required"
    assert f"at least {MIN_QUESTION_CHARS} characters" in plain(short)
    assert f"at most {MAX_QUESTION_CHARS} characters" in plain(long_)
    assert plain(anchors).startswith("[invalid_arguments] verify_kernel: anchors.0: ")


def test_an_argument_the_tool_does_not_take_is_refused(tmp_path: Path) -> None:
    """The SDK dropped unknown arguments: `verify_kernel(path, suit="full")` ran the default suite (MCP trial of
    2026-12-06). Nothing runs; the message names the argument, the likely one and what the tool takes."""
    (tmp_path / "k.cu").write_text("// never compiled\n")
    typo, several, none = call_tools(tmp_path, [
        ("verify_kernel", {"path": "k.cu", "suit": "full"}),
        ("compile_kernel", {"path": "k.cu", "bogus": 1, "zzz": 2}),
        ("get_task", {"verbose": True}),
    ])
    t = plain(typo)
    assert t.startswith("[invalid_arguments] verify_kernel: unknown argument 'suit' (did you mean 'suite'?); "
                        "verify_kernel takes path, suite, anchors"), t
    assert plain(several).startswith("[invalid_arguments] compile_kernel: unknown argument 'bogus' (and 1 more); "
                                     "compile_kernel takes path")
    assert plain(none) == "[invalid_arguments] get_task: unknown argument 'verbose'; get_task takes no arguments"
    assert not (tmp_path / ".attnq" / "build").exists() or not any((tmp_path / ".attnq" / "build").iterdir())


def test_question_length_bound_is_shared_with_the_cli(tmp_path: Path) -> None:
    text = "w" * (MIN_QUESTION_CHARS - 1) + "?"
    ok, too_short, padded = call_tools(tmp_path, [("add_question", {"text": text}),
                                                  ("add_question", {"text": text[1:]}),
                                                  ("add_question", {"text": "  " + text[1:] + "   "})])
    assert not ok.is_error, ok.content[0].text
    assert too_short.is_error
    assert f"{MIN_QUESTION_CHARS} to {MAX_QUESTION_CHARS} characters (got {MIN_QUESTION_CHARS - 1})" in plain(padded)
    cli = subprocess.run([sys.executable, "-m", "attnq", "questions", "add", text[1:], "--workspace", str(tmp_path)],
                         check=False, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2 and f"{MIN_QUESTION_CHARS} to {MAX_QUESTION_CHARS}" in cli.stderr


def test_unknown_suite_matches_the_cli(tmp_path: Path) -> None:
    shutil.copy(ORIGINAL_KERNEL, tmp_path / "k.cu")
    by_name, by_path = call_tools(tmp_path, [("verify_kernel", {"path": "k.cu", "suite": "nosuch"}),
                                             ("verify_kernel", {"path": "k.cu", "suite": "sub/nosuch.toml"})])
    cli = subprocess.run([sys.executable, "-m", "attnq", "scenarios", "--suite", "nosuch"],
                         check=False, capture_output=True, text=True, timeout=60)
    cli_message = cli.stderr.strip().removeprefix("attnq scenarios: ")
    assert cli.returncode == 2 and cli_message.startswith("unknown suite 'nosuch'")
    assert cli_message in plain(by_name)
    assert "no such file in the workspace" in plain(by_path)  # a path stays a workspace path


def test_a_missing_module_is_an_unavailable_tool_error_and_a_broken_one_is_raised(tmp_path: Path) -> None:
    """mcp_server.state.need: a module this install lacks answers ``[unavailable] ...`` (the [code] form of every
    model-facing error); a module that exists but fails inside its own imports is a bug and is raised as is."""
    assert need("harness.compile").__name__ == "harness.compile"
    with pytest.raises(ToolError) as missing:
        need("harness.no_such_module_here")
    assert str(missing.value).startswith("[unavailable] ") and "harness.no_such_module_here" in str(missing.value)
    broken = tmp_path / "attnq_broken_probe_mod.py"
    broken.write_text("import attnq_module_that_does_not_exist_either\n", encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ModuleNotFoundError) as inner:
            need("attnq_broken_probe_mod")
        assert inner.value.name == "attnq_module_that_does_not_exist_either"
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("attnq_broken_probe_mod", None)
