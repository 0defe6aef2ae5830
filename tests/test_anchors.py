"""The ``fa3`` anchor (FlashAttention-3) without a GPU: where flash_attn_interface cannot be found, every
entry point refuses it with one plain, actionable message before any compile (CLI exit 2, MCP tool
error, ``attnq serve`` exit 2); where it can be found (a folder holding ``flash_attn_interface.py`` on the
path: the parent only looks it up, never imports it), options accept it and get_task lists it available.
Timing it is the GPU test tests/gpu/test_fa3_anchor.py."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp.client import Client
from pydantic import ValidationError

from harness import ORIGINAL_KERNEL
from harness.anchors import (
    ANCHORS,
    FA3_MISSING,
    FA3_MODULE,
    available_anchors,
    fa3_available,
    require_anchors,
)
from harness.config import Settings
from harness.errors import AnchorUnavailableError
from harness.verify import VerifyOptions
from mcp_server.server import build_server

REPO = Path(__file__).resolve().parent.parent


def _holds_fa3(entry: str) -> bool:
    p = Path(entry or ".")
    return (p / f"{FA3_MODULE}.py").exists() or (p / FA3_MODULE).is_dir()


def _clean_env(extra_path: Path | None = None, **env: str) -> dict[str, str]:
    """The environment without ATTNQ_* variables and with PYTHONPATH = the repository (plus ``extra_path``)
    only: a FlashAttention-3 folder on the caller's PYTHONPATH (the GPU box's /tmp/fa3) is left out."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ATTNQ_")}
    base["PYTHONPATH"] = os.pathsep.join(str(p) for p in (extra_path, REPO) if p is not None)
    return {**base, **env}


def _run(module: str, *args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, check=False,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def fa3_installed_in_site() -> bool:
    """Whether a clean interpreter (PYTHONPATH = the repository) still finds flash_attn_interface."""
    r = subprocess.run([sys.executable, "-c", f"import importlib.util as u; print(u.find_spec({FA3_MODULE!r}) is not None)"],
                       env=_clean_env(), capture_output=True, text=True, timeout=30, check=True)
    return r.stdout.strip() == "True"


@pytest.fixture()
def no_fa3(monkeypatch: pytest.MonkeyPatch, fa3_installed_in_site: bool) -> None:
    """This process without FlashAttention-3: path entries holding it removed (skip if it is installed)."""
    if fa3_installed_in_site:
        pytest.skip("flash_attn_interface is installed in site-packages here: the absent case cannot be tested")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not _holds_fa3(p)])
    monkeypatch.delitem(sys.modules, FA3_MODULE, raising=False)
    importlib.invalidate_caches()
    assert not fa3_available()


@pytest.fixture()
def fa3_dir(tmp_path: Path) -> Path:
    """A folder with a file named flash_attn_interface.py: what find_spec looks for (never imported here)."""
    d = tmp_path / "fa3"
    d.mkdir()
    (d / f"{FA3_MODULE}.py").write_text('raise ImportError("found by attnq tests; importing it is a bug")\n')
    return d


@pytest.fixture()
def with_fa3(monkeypatch: pytest.MonkeyPatch, fa3_dir: Path) -> None:
    monkeypatch.syspath_prepend(str(fa3_dir))
    importlib.invalidate_caches()


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    shutil.copy(ORIGINAL_KERNEL, w / "k.cu")
    return w


def _one_plain_line(r: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


# -- the CLI --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flags", [["--anchors", "fa3"], ["--anchors", "cudnn,fa3"], ["--goal-against", "fa3"]])
def test_cli_verify_refuses_fa3_when_absent(ws: Path, fa3_installed_in_site: bool, flags: list[str]) -> None:
    if fa3_installed_in_site:
        pytest.skip("flash_attn_interface is installed in site-packages here")
    state = ws / "state"
    r = _run("attnq", "verify", "k.cu", *flags, cwd=ws, env=_clean_env(ATTNQ_STATE=str(state)))
    assert _one_plain_line(r) == f"attnq verify: {FA3_MISSING}"
    assert not (state / "build").exists()  # refused before compiling; nothing recorded


def test_cli_verify_refusal_as_json_and_from_environment(ws: Path, fa3_installed_in_site: bool) -> None:
    if fa3_installed_in_site:
        pytest.skip("flash_attn_interface is installed in site-packages here")
    r = _run("attnq", "verify", "k.cu", "--json", cwd=ws, env=_clean_env(ATTNQ_GOAL_ANCHOR="fa3"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    doc = json.loads(r.stdout)
    assert doc == {"error": "anchor_unavailable", "message": FA3_MISSING, "anchor": "fa3"}


def test_cli_unknown_anchor_names(ws: Path) -> None:
    line = _one_plain_line(_run("attnq", "verify", "k.cu", "--anchors", "fa4", cwd=ws, env=_clean_env()))
    assert line.startswith("attnq verify: invalid value: --anchors:") and "fa3" in line, line
    r = _run("attnq", "verify", "k.cu", "--goal-against", "fa4", cwd=ws, env=_clean_env())
    assert r.returncode == 2 and "invalid choice: 'fa4'" in r.stderr and "fa3" in r.stderr
    line = _one_plain_line(_run("attnq", "verify", "k.cu", cwd=ws, env=_clean_env(ATTNQ_GOAL_ANCHOR="fa4")))
    assert "invalid value: goal_anchor" in line and "cudnn, flash, fa3" in line, line


def test_cli_accepts_fa3_when_found(ws: Path, fa3_dir: Path) -> None:
    """With flash_attn_interface on PYTHONPATH the anchor check passes (the run then stops at the
    nonexistent file, not at the anchor)."""
    r = _run("attnq", "verify", "missing.cu", "--anchors", "fa3,flash", "--goal-against", "fa3", cwd=ws,
             env=_clean_env(fa3_dir))
    line = _one_plain_line(r)
    assert "fa3" not in line and "missing.cu" in line, line


def test_serve_refuses_fa3_goal_when_absent(ws: Path, fa3_installed_in_site: bool) -> None:
    if fa3_installed_in_site:
        pytest.skip("flash_attn_interface is installed in site-packages here")
    r = _run("mcp_server", "--goal-anchor", "fa3", "--workspace", str(ws), cwd=ws, env=_clean_env())
    assert _one_plain_line(r) == f"attnq serve: {FA3_MISSING}"


# -- the harness ------------------------------------------------------------------------------------------------
def test_options_and_settings_validation() -> None:
    opts = VerifyOptions(anchors=["fa3", "cudnn", "flash"], goal_against="fa3")
    assert opts.anchors == ["fa3", "cudnn", "flash"]
    with pytest.raises(ValidationError, match="anchors"):
        VerifyOptions(anchors=["fa2"])
    with pytest.raises(ValidationError, match="goal_against"):
        VerifyOptions(goal_against="fa2")
    assert Settings(goal_anchor="fa3").goal_anchor == "fa3"
    assert Settings(goal_anchor="original").goal_anchor is None
    with pytest.raises(ValidationError, match="not an anchor"):
        Settings(goal_anchor="fa2")


def test_require_anchors_absent(no_fa3: None) -> None:
    require_anchors(["cudnn", "flash", "original"])
    with pytest.raises(AnchorUnavailableError) as info:
        require_anchors(["cudnn", "fa3"])
    assert info.value.exit_code == 2 and info.value.message == FA3_MISSING
    assert available_anchors() == ["cudnn", "flash"]


def test_require_anchors_present(with_fa3: None) -> None:
    require_anchors(list(ANCHORS))
    assert available_anchors() == list(ANCHORS)
    assert FA3_MODULE not in sys.modules  # found, never imported (the placeholder raises on import)


# -- the MCP server ---------------------------------------------------------------------------------------------
def _mcp(settings: Settings, name: str, args: dict | None = None):  # type: ignore[no-untyped-def]
    import anyio

    async def main():  # type: ignore[no-untyped-def]
        async with Client(build_server(settings)) as client:
            return await client.call_tool(name, args or {})

    return anyio.run(main)


def _tool_error(res) -> str:  # type: ignore[no-untyped-def]
    """The text of a tool error (the SDK prefixes "Error executing tool NAME: ")."""
    assert res.is_error, res.structured_content
    text = res.content[0].text
    assert "Traceback" not in text and 'File "' not in text
    return text


def test_mcp_verify_refuses_fa3_when_absent(ws: Path, no_fa3: None) -> None:
    settings = Settings(workspace=ws, state=ws / "state")
    for args in ({"path": "k.cu", "anchors": ["fa3"]}, {"path": "k.cu", "anchors": ["flash", "fa3"]}):
        assert _tool_error(_mcp(settings, "verify_kernel", args)).endswith(f"[anchor_unavailable] {FA3_MISSING}")
    res = _mcp(Settings(workspace=ws, state=ws / "state", goal_anchor="fa3"), "verify_kernel", {"path": "k.cu"})
    assert _tool_error(res).endswith(f"[anchor_unavailable] {FA3_MISSING}")
    assert "Input should be" in _tool_error(_mcp(settings, "verify_kernel", {"path": "k.cu", "anchors": ["fa2"]}))
    assert not (ws / "state" / "build").exists()


def test_get_task_lists_anchors_absent(ws: Path, no_fa3: None) -> None:
    task = _mcp(Settings(workspace=ws, state=ws / "state", goal_anchor="fa3"), "get_task").structured_content
    by_name = {a["name"]: a for a in task["anchors"]}
    assert list(by_name) == ["cudnn", "flash", "fa3"]
    assert by_name["cudnn"]["available"] and by_name["flash"]["available"]
    assert not by_name["fa3"]["available"] and by_name["fa3"]["reason"] == FA3_MISSING
    assert any("fa3" in n and FA3_MISSING in n for n in task["notes"])


def test_get_task_lists_anchors_present(ws: Path, with_fa3: None) -> None:
    task = _mcp(Settings(workspace=ws, state=ws / "state", goal_anchor="fa3"), "get_task").structured_content
    assert [(a["name"], a["available"], a["reason"]) for a in task["anchors"]] == [
        ("cudnn", True, None), ("flash", True, None), ("fa3", True, None)]
    assert task["goal"]["against"] == "fa3" and not any("fa3" in n for n in task["notes"])


def test_get_task_says_when_there_is_no_gpu_to_verify_on(ws: Path) -> None:
    """An agent learnt that there is no GPU only from verify_kernel, after its compile (MCP trial of 2026-12-06)."""
    from harness.gpu import gpu_unavailable_reason

    reason = gpu_unavailable_reason("sm_90a", 0)
    task = _mcp(Settings(workspace=ws, state=ws / "state"), "get_task").structured_content
    notes = [n for n in task["notes"] if n.startswith("no GPU to verify on")]
    if reason is None:
        assert not notes, notes  # a GPU box: nothing to say
    else:
        assert notes == [(f"no GPU to verify on: {reason}. compile_kernel, reflect, declare and the question tools "
                         "work; verify_kernel compiles, then answers no_gpu")]


def test_get_task_warns_when_the_workspace_is_the_home_folder(tmp_path: Path) -> None:
    """Started from $HOME (or /), every file below is in the tools' reach (MCP trial of 2026-12-06): get_task says so.
    The store lives under tmp_path: nothing is written to the home folder."""
    task = _mcp(Settings(workspace=Path.home(), state=tmp_path / "state"), "get_task").structured_content
    assert any(n.startswith(f"the workspace is {Path.home().resolve()} ") for n in task["notes"]), task["notes"]
    task = _mcp(Settings(workspace=tmp_path, state=tmp_path / "state"), "get_task").structured_content
    assert not any(n.startswith("the workspace is") for n in task["notes"])
