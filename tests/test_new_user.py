"""What a new user met in the first 30 minutes (fresh clone, README followed literally, no GPU), each as
the kind of defect, not the instance:

- one vocabulary for what a goal is measured against (verify, evolve, serve, ATTNQ_GOAL_ANCHOR, the evolve
  config): ``fa3`` worked for verify and the campaign but was refused by ``attnq evolve``;
- a command that cannot run here (no GPU) refuses before it writes anything: ``attnq evolve`` created a
  run per try, each left "running" with a pending seed;
- help texts name every built-in suite (``bugs`` was missing wherever the list was typed by hand);
- every ``--help`` ends with the command's exit codes (they lived only in module docstrings);
- a question whose premise is earlier attempts is not asked of an empty campaign.

The CLI runs in process through attnq.cli.main (exit codes and stderr are the contract), the MCP server in
process through the SDK's client, the stores are read back."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import anyio
import pytest
from mcp.client import Client

from attnq.cli import EXIT_CODES, build_parser
from evolve.config import EvolveConfig
from evolve.db import EvolveDB
from harness import ORIGINAL_KERNEL
from harness.anchors import GOAL_TARGETS, fa3_available
from harness.config import Settings
from harness.scenarios import list_suites
from harness.store import CampaignStore
from mcp_server.server import build_server
from questions.bank import load_bank
from questions.reflect import reflect
from tests.conftest import gpu_skip_reason
from tests.test_cli_edges import attnq, refused

no_gpu_only = pytest.mark.skipif(gpu_skip_reason() is None, reason="this machine has a GPU: the no-GPU answer "
                                                                   "cannot be observed")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


# -- one goal vocabulary ------------------------------------------------------------------------------------------
def test_every_goal_flag_takes_the_same_targets() -> None:
    found = {}
    for name, sub in _subparsers(build_parser()).items():
        for action in sub._actions:
            if {"--goal-against", "--goal-anchor"} & set(action.option_strings):
                found[name] = tuple(action.choices or ())
    assert set(found) == {"verify", "evolve", "serve"}, found
    assert all(choices == GOAL_TARGETS for choices in found.values()), found
    for target in GOAL_TARGETS:  # the evolve config (CLI, MCP evolve_next, Dask workers) takes each one
        assert EvolveConfig(goal_against=target).goal_against == target
        assert Settings(goal_anchor=target).goal_anchor == (None if target == "original" else target)


@pytest.mark.skipif(fa3_available(), reason="FlashAttention-3 is importable here: fa3 is a valid goal")
def test_evolve_against_fa3_gets_the_anchor_answer_and_creates_no_run(tmp_path: Path) -> None:
    shutil.copy(ORIGINAL_KERNEL, tmp_path / "seed.cu")
    for args, env in ((("--goal-against", "fa3"), None), ((), {"ATTNQ_GOAL_ANCHOR": "fa3"})):
        msg = refused(attnq("evolve", "--from", "seed.cu", "--evaluator", "compile_facts", *args, cwd=tmp_path,
                            env=env))
        assert "anchor fa3 needs FlashAttention-3's flash_attn_interface" in msg, msg
    assert "has no evolve run yet" in refused(attnq("evolve", "status", cwd=tmp_path))


# -- no GPU: refused before anything is written -------------------------------------------------------------------
@no_gpu_only
def test_cli_evolve_without_a_gpu_exits_3_and_creates_no_run(tmp_path: Path) -> None:
    shutil.copy(ORIGINAL_KERNEL, tmp_path / "seed.cu")
    for extra in ((), ("--arms", "question,plain"), ("--mutator", "mcp")):
        r = attnq("evolve", "--from", "seed.cu", *extra, cwd=tmp_path)
        assert r.returncode == 3, (r.returncode, r.stderr)
        assert "attnq evolve: attnq evolve (evaluator harness, GPU 0) needs an NVIDIA GPU that runs sm_90a" \
            in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert "started evolve run" not in r.stderr
    assert "has no evolve run yet" in refused(attnq("evolve", "status", cwd=tmp_path))
    with EvolveDB.for_state_dir(Settings(workspace=tmp_path).state_dir) as db:
        assert db.runs() == []
    # the CPU stand-in evaluator still starts (it needs no GPU): the check is the harness evaluator's alone
    ok = attnq("evolve", "--from", "seed.cu", "--evaluator", "compile_facts", "--max-evals", "1",
               "--generations", "0", "--quiet", cwd=tmp_path, timeout=600)
    assert "needs an NVIDIA GPU" not in ok.stderr, ok.stderr


@no_gpu_only
def test_mcp_evolve_next_without_a_gpu_is_a_tool_error_and_creates_no_run(tmp_path: Path) -> None:
    shutil.copy(ORIGINAL_KERNEL, tmp_path / "seed.cu")
    settings = Settings(workspace=tmp_path)
    server = build_server(settings)

    async def main() -> object:
        async with Client(server) as client:
            return await client.call_tool("evolve_next", {"seed_path": "seed.cu"})

    try:
        res = anyio.run(main)
    finally:
        server.attnq_state.close()  # type: ignore[attr-defined]
    assert res.is_error and "[no_gpu] attnq evolve (evaluator harness, GPU 0) needs an NVIDIA GPU" \
        in res.content[0].text, res.content[0].text  # type: ignore[union-attr]
    with EvolveDB.for_state_dir(settings.state_dir) as db:
        assert db.runs() == []


# -- help texts ---------------------------------------------------------------------------------------------------
def test_suite_help_names_every_builtin_suite() -> None:
    helps = {}
    for name, sub in _subparsers(build_parser()).items():
        for action in sub._actions:
            if "--suite" in action.option_strings:
                helps[name] = action.help or ""
    assert {"scenarios", "verify", "serve"} <= set(helps), helps
    server = build_server(Settings())
    try:
        async def schema() -> str:
            async with Client(server) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                return tools["verify_kernel"].input_schema["properties"]["suite"]["description"]

        helps["mcp verify_kernel"] = anyio.run(schema)
    finally:
        server.attnq_state.close()  # type: ignore[attr-defined]
    for suite in list_suites():
        missing = [where for where, text in helps.items() if suite not in text]
        assert not missing, (suite, missing)


def test_every_help_ends_with_its_exit_codes() -> None:
    parser = build_parser()
    assert "Exit codes: 0 success" in parser.format_help()
    subs = _subparsers(parser)
    assert set(EXIT_CODES) <= set(subs)
    for name, sub in subs.items():
        text = " ".join(sub.format_help().split())
        assert "Exit codes: 0 " in text and "2 an error you can fix" in text, name
    for name in ("verify", "evolve", "peer-test"):  # the commands that answer 3 without a GPU say so
        assert "3 no GPU" in " ".join(subs[name].format_help().split()), name


@no_gpu_only
def test_evolve_exit_code_on_no_gpu_is_the_documented_one(tmp_path: Path) -> None:
    shutil.copy(ORIGINAL_KERNEL, tmp_path / "seed.cu")
    code = attnq("evolve", "--from", "seed.cu", cwd=tmp_path).returncode
    assert f"{code} no GPU" in " ".join(_subparsers(build_parser())["evolve"].format_help().split())


# -- questions fit the campaign's state ---------------------------------------------------------------------------
def test_an_empty_campaign_is_not_asked_about_earlier_attempts(tmp_path: Path) -> None:
    bank = load_bank()
    needs_attempts = {q.id for q in bank.questions if q.requires == "attempts"}
    assert {"closest-earlier-attempt", "abandoned-after-one-try"} <= needs_attempts
    asked = set()
    for seed in range(40):
        settings = Settings(workspace=tmp_path / f"ws{seed}", seed=seed)
        with CampaignStore.open(settings) as store:
            for trigger in (None, "churn", "stall", "declared_limit"):
                asked.add(reflect(store, bank, trigger=trigger, settings=settings).question_id)
    assert asked and not asked & needs_attempts, asked & needs_attempts


def test_evolve_with_a_malformed_scheduler_is_an_input_error_and_creates_no_run(tmp_path: Path) -> None:
    """A typo in --scheduler (no port) was a crash (exit 70, a traceback) that left a run 'running'."""
    shutil.copy(ORIGINAL_KERNEL, tmp_path / "seed.cu")
    r = attnq("evolve", "--from", "seed.cu", "--scheduler", "bogus", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert "--scheduler 'bogus' is not a Dask scheduler address" in r.stderr, r.stderr
    assert "started evolve run" not in r.stderr
    with EvolveDB.for_state_dir(Settings(workspace=tmp_path).state_dir) as db:
        assert db.runs() == []


def test_evolve_with_an_unreachable_scheduler_leaves_the_run_failed_not_running(tmp_path: Path) -> None:
    """A well-formed address nobody listens on: exit 2 after --scheduler-timeout, and the run it created says
    failed with the reason (it stayed 'running', with its seed pending, for good)."""
    shutil.copy(ORIGINAL_KERNEL, tmp_path / "seed.cu")
    r = attnq("evolve", "--from", "seed.cu", "--evaluator", "compile_facts", "--scheduler", "tcp://127.0.0.1:1",
              "--scheduler-timeout", "2", "--run", "unreachable", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    with EvolveDB.for_state_dir(Settings(workspace=tmp_path).state_dir) as db:
        (run,) = db.runs()
        assert (run.run_id, run.state) == ("unreachable", "failed")
        assert run.stop_reason.startswith("the evaluation pool could not be started")
