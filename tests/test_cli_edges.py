"""Issue 16's rough edges of the CLI and the MCP tools, each as a new user met it: one output form for
every exporting command, ATTNQ_SUITE honoured everywhere, typos refused instead of creating things,
the same limits on both edges, best attempt consistent between get_task and campaign_status, and
verifications that never judged the candidate recorded as events, not attempts.

The CLI runs as a subprocess (exit codes and stderr are the contract); the MCP server in process through
the SDK's client; the store is read back to check what was (not) recorded."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from attnq.cli import main
from harness import ORIGINAL_KERNEL
from harness.config import Settings
from harness.scenarios import load_suite
from harness.store import CampaignStore
from harness.verdict import Verdict
from questions.text import MAX_CLAIM_CHARS
from tests.mcp_support import call_tools, make_workspace

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "campaigns"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def attnq(*args: str | bytes, cwd: Path, env: dict[str, str] | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``attnq ARGS`` in ``cwd`` with ``env`` over an ATTNQ_*-free environment: exit code, stdout, stderr.

    In process through attnq.cli.main (quick), except ``serve`` (it sets up the process's logging) and bytes
    arguments (argv that is not UTF-8), which run as a subprocess."""
    if args[0] == "serve" or any(isinstance(a, bytes) for a in args):
        base = {k: v for k, v in os.environ.items() if not k.startswith("ATTNQ_")}
        base["PYTHONPATH"] = str(REPO)
        proc = subprocess.run([sys.executable, "-m", "attnq", *args], cwd=cwd, capture_output=True, timeout=timeout,
                              check=False, env={**base, **(env or {})})
        return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(errors="replace"),
                                           proc.stderr.decode(errors="replace"))
    out, err = io.StringIO(), io.StringIO()
    saved_cwd, saved_env = os.getcwd(), dict(os.environ)
    os.chdir(cwd)
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def refused(r: subprocess.CompletedProcess[str]) -> str:
    """Exit 2 with a message and no traceback; the message."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.strip(), r.stderr
    return r.stderr.strip()


# -- one output form -------------------------------------------------------------------------------------------
def test_exports_take_a_file_or_dash_o_or_stdout(tmp_path: Path) -> None:
    assert attnq("reflect", cwd=tmp_path).returncode == 0  # something in the store
    for cmd, suffix in ((("trace", "export"), "jsonl"), (("questions", "export"), "toml")):
        pos, opt = tmp_path / f"pos.{suffix}", tmp_path / f"opt.{suffix}"
        assert attnq(*cmd, str(pos), cwd=tmp_path).returncode == 0
        assert attnq(*cmd, "-o", str(opt), cwd=tmp_path).returncode == 0
        out = attnq(*cmd, cwd=tmp_path)
        assert out.returncode == 0 and out.stdout.strip()
        bodies = [text.splitlines()[1:] if suffix == "jsonl" else text  # a trace's first line is its header
                  for text in (pos.read_text(), opt.read_text(), out.stdout)]  # (with the export time)
        assert bodies[0] == bodies[1] == bodies[2], cmd
        assert "two output files" in refused(attnq(*cmd, str(pos), "-o", str(opt), cwd=tmp_path))
    assert tomllib.loads((tmp_path / "pos.toml").read_text())["question"]


def test_scenarios_honours_attnq_suite_like_verify(tmp_path: Path) -> None:
    for suite in ("quick", "production"):
        r = attnq("scenarios", "--json", cwd=tmp_path, env={"ATTNQ_SUITE": suite})
        assert json.loads(r.stdout)["name"] == load_suite(suite).name
    assert json.loads(attnq("scenarios", "--json", cwd=tmp_path).stdout)["name"] == load_suite("quick").name


# -- typos ------------------------------------------------------------------------------------------------------
def test_trace_use_refuses_an_unknown_campaign_without_new(tmp_path: Path) -> None:
    line = refused(attnq("trace", "use", "defualt", cwd=tmp_path))
    assert "no campaign 'defualt'" in line and "default" in line and "--new" in line
    ids = [c["campaign_id"] for c in json.loads(attnq("trace", "campaigns", "--json", cwd=tmp_path).stdout)]
    assert ids == ["default"]
    assert attnq("trace", "use", "--new", "hopper", cwd=tmp_path).stdout.strip() == "active campaign: hopper (new)"
    assert attnq("trace", "use", "default", cwd=tmp_path).stdout.strip() == "active campaign: default"


def test_a_missing_workspace_is_refused_not_created(tmp_path: Path) -> None:
    ghost = tmp_path / "no" / "such" / "ws"
    for args in (("questions", "add", "Is it bound?"), ("reflect",), ("trace", "campaigns"),
                 ("declare", "limit", "bound")):
        assert "does not exist" in refused(attnq(*args, "--workspace", str(ghost), cwd=tmp_path)), args
    assert not (tmp_path / "no").exists()


def test_serve_refuses_a_bogus_suite_or_workspace_before_serving(tmp_path: Path) -> None:
    r = attnq("serve", "--suite", "bogus", cwd=tmp_path, timeout=60)
    assert "unknown suite 'bogus'" in refused(r)
    r = attnq("serve", "--workspace", str(tmp_path / "nope"), cwd=tmp_path, timeout=60)
    assert "does not exist" in refused(r)
    r = attnq("serve", cwd=tmp_path, env={"ATTNQ_SUITE": "sub/none.toml"}, timeout=60)
    assert "none.toml" in refused(r)


# -- the same limits on both edges ------------------------------------------------------------------------------
def test_claim_limit_is_the_same_for_cli_and_mcp(tmp_path: Path) -> None:
    long = "x" * (MAX_CLAIM_CHARS + 1)
    assert f"1 to {MAX_CLAIM_CHARS} characters" in refused(attnq("declare", "limit", long, cwd=tmp_path))
    assert f"1 to {MAX_CLAIM_CHARS} characters" in refused(attnq("reflect", "--claim", long, cwd=tmp_path))
    declare_long, reflect_huge, ok = call_tools(tmp_path, [
        ("declare", {"kind": "limit", "text": long}), ("reflect", {"claim": "y" * 100_000}),
        ("declare", {"kind": "limit", "text": "x" * MAX_CLAIM_CHARS})])
    assert declare_long.is_error and f"at most {MAX_CLAIM_CHARS} characters" in declare_long.content[0].text
    assert reflect_huge.is_error and f"at most {MAX_CLAIM_CHARS} characters" in reflect_huge.content[0].text
    assert not ok.is_error
    with CampaignStore.open(Settings(workspace=tmp_path)) as store:
        assert [len(c.text) for c in store.claims()] == [MAX_CLAIM_CHARS]


@pytest.mark.parametrize("args", [
    ("questions", "add", "Make the kernel faster."), ("questions", "add", "Is it \u202efast?"),
    ("questions", "add", b"Is it caf\xe9?"), ("declare", "done", "done \x1b[2J"),
    ("questions", "stats", "--horizon", "-1"), ("questions", "stats", "--horizon", "0"),
    ("trace", "show", "--horizon", "0"), ("verify", "k.cu", "--goal", "1e400"), ("verify", "k.cu", "--goal", "inf"),
])
def test_bad_values_are_refused_and_leave_no_trace(tmp_path: Path, args: tuple) -> None:  # type: ignore[type-arg]
    shutil.copy(ORIGINAL_KERNEL, tmp_path / "k.cu")
    refused(attnq(*args, cwd=tmp_path))
    store = tmp_path / ".attnq" / "campaign.sqlite"
    if store.exists():
        with CampaignStore.open(Settings(workspace=tmp_path)) as s:
            assert s.human_questions() == [] and s.claims() == [] and s.attempts() == []


def test_mcp_add_question_refuses_what_the_cli_refuses(tmp_path: Path) -> None:
    results = call_tools(tmp_path, [("add_question", {"text": t}) for t in
                                    ("Make the kernel faster.", "Is it \u202efast?", "Is the NUL\x00 here?",
                                     "Is it bound? Or not?")])
    for r in results:
        assert r.is_error and "[input_error]" in r.content[0].text, r.content[0].text
    with CampaignStore.open(Settings(workspace=tmp_path)) as store:
        assert store.human_questions() == []


def test_questions_demote_from_the_cli(tmp_path: Path) -> None:
    text = "Is the softmax rescale on the critical path?"
    for name in ("b", "a"):  # campaigns are started explicitly (a --campaign typo is refused, not created)
        assert attnq("trace", "use", "--new", name, cwd=tmp_path).returncode == 0
    assert attnq("questions", "add", text, "--campaign", "a", cwd=tmp_path).returncode == 0
    out = attnq("questions", "add", text, "--campaign", "b", "--json", cwd=tmp_path).stdout
    qid = json.loads(out)["promoted"]["id"]
    assert qid in attnq("questions", "list", cwd=tmp_path).stdout
    r = attnq("questions", "demote", qid, "--reason", "asked the wrong way", cwd=tmp_path)
    assert r.returncode == 0 and f"demoted {qid}" in r.stdout, r.stderr
    assert qid not in attnq("questions", "list", cwd=tmp_path).stdout
    assert "no promoted question" in refused(attnq("questions", "remove", qid, cwd=tmp_path))


def test_questions_list_escapes_control_characters_of_an_older_store(tmp_path: Path) -> None:
    with CampaignStore.open(Settings(workspace=tmp_path)) as store:  # as an attnq before issue 16 stored it
        store.save_promoted({"id": "human-red-abc123", "text": "Is it \x1b[31mred\x1b[0m?", "triggers": ["stall"],
                             "layer": "measurement", "note": "", "origin": "promoted"})
    r = attnq("questions", "list", cwd=tmp_path)
    assert r.returncode == 0 and "\x1b" not in r.stdout and "Is it \\x1b[31mred\\x1b[0m?" in r.stdout, r.stdout
    r = attnq("questions", "demote", "human-red-abc123", cwd=tmp_path)
    assert r.returncode == 0 and "\x1b" not in r.stdout, r.stdout
    assert "human-red-abc123" not in attnq("questions", "list", cwd=tmp_path).stdout


# -- Medium 5: one "best" -----------------------------------------------------------------------------------------
def _record(store: CampaignStore, index: int) -> None:
    a = json.loads((DATA / "failures.json").read_text())["attempts"][index]
    v = None if a["verdict"] is None else Verdict.model_validate(a["verdict"])
    store.record_attempt(a["source_path"], a["source_text"], a["compile_result"], v, a["error"])


def test_get_task_best_is_campaign_status_best(tmp_path: Path) -> None:
    with CampaignStore.open(Settings(workspace=tmp_path)) as store:
        _record(store, 1)  # compile_error
        _record(store, 2)  # incorrect
    task, status = call_tools(tmp_path, [("get_task", {}), ("campaign_status", {})])
    assert task.structured_content["best"] is None and status.structured_content["best"] is None
    with CampaignStore.open(Settings(workspace=tmp_path)) as store:
        _record(store, 0)  # correct, 1.20x
        _record(store, 4)  # error (a run that ended early), 1.37x: not a best
    task, status = call_tools(tmp_path, [("get_task", {}), ("campaign_status", {})])
    best, sbest = task.structured_content["best"], status.structured_content["best"]
    assert best["geomean_speedup"] == sbest["geomean_speedup"] == pytest.approx(1.2000104084861076)
    assert best["status"] == sbest["status"] == "correct"


# -- Medium 7: not attempts ---------------------------------------------------------------------------------------
@needs_nvcc
def test_cli_verify_without_a_gpu_or_with_a_bad_scenario_is_not_an_attempt(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    pytest.importorskip("torch")
    from tests.conftest import gpu_skip_reason

    if gpu_skip_reason() is None:
        pytest.skip("this machine has a GPU: the no-GPU answer cannot be observed")
    tmp_path = make_workspace(tmp_path_factory, "verify-no-gpu")  # the session's shared build cache
    shutil.copy(ORIGINAL_KERNEL, tmp_path / "k.cu")
    r = attnq("verify", "k.cu", cwd=tmp_path, timeout=300)
    assert r.returncode == 3, r.stderr
    assert "scenario ids not in suite quick: ['nope']" in refused(attnq("verify", "k.cu", "--scenario", "nope",
                                                                         cwd=tmp_path))
    with CampaignStore.open(Settings(workspace=tmp_path)) as store:
        assert store.attempts() == []
        assert [e.result["error"] for e in store.events() if e.tool == "verify.not_an_attempt"] == ["no_gpu"]


def test_mcp_unknown_scenario_id_is_refused_before_any_job(tmp_path: Path) -> None:
    shutil.copy(ORIGINAL_KERNEL, tmp_path / "k.cu")
    (r,) = call_tools(tmp_path, [("verify_kernel", {"path": "k.cu", "scenario_ids": ["nope"]})])
    assert r.is_error and "[input_error] scenario ids not in suite quick: ['nope']" in r.content[0].text
    with CampaignStore.open(Settings(workspace=tmp_path)) as store:
        assert store.attempts() == []


def test_a_suite_that_is_a_folder_or_not_toml_is_refused_as_such(tmp_path: Path) -> None:
    """`--suite kernels` said "does not exist"; a .cu file was read as a suite with no scenarios."""
    (tmp_path / "k.cu").write_text("// not a suite\n", encoding="utf-8")
    assert "is a directory" in refused(attnq("scenarios", "--suite", str(REPO / "kernels"), cwd=tmp_path))
    assert "is not a .toml file" in refused(attnq("scenarios", "--suite", "k.cu", cwd=tmp_path))
    assert "does not exist" in refused(attnq("scenarios", "--suite", "nope.toml", cwd=tmp_path))


def test_an_export_name_that_is_empty_or_a_keyword_is_refused_with_the_reason() -> None:
    from harness.errors import InputError
    from harness.export.package import check_name, export_kernel

    with pytest.raises(InputError, match="is a Python keyword"):
        check_name("class")
    with pytest.raises(InputError, match="must be a Python identifier"):
        export_kernel(ORIGINAL_KERNEL, REPO / "never-written", name="")  # refused before anything is built
    assert not (REPO / "never-written").exists()


def test_scenarios_lists_declared_fields_and_marks_what_no_h200_holds(tmp_path: Path) -> None:
    p = tmp_path / "mine.toml"
    p.write_text('[[scenario]]\ngroup = "g"\nbatch = 1\nseqlen_q = 1\nseqlen_k = 1000\nheads = [16, 2]\nhead_dim = 128\n'
                 'causal = true\nlayout = { k = { kind = "cache", capacity = 2048 }, v = "cache" }\n'
                 'inputs.v = { dist = "head_tagged", step = 2.0 }\n\n'
                 '[[scenario]]\ngroup = "g"\nbatch = 64\nseqlen = 65536\nheads = [64, 64]\nhead_dim = 256\ncausal = false\n')
    out = attnq("scenarios", "--suite", str(p), cwd=tmp_path).stdout
    lines = out.splitlines()
    assert "inputs.v=head_tagged(step=2.0) layout.k=cache(capacity=2048) layout.v=cache(capacity=2048)" in out
    assert lines[4].startswith("  g/b64-s65536-h64-d256-noncausal-bf16") and lines[4].endswith("GiB  > H200")
    assert "1 scenario needs more than an H200's 139.8 GiB" in lines[-1] and "attnq verify refuses" in lines[-1]
    assert "> H200" not in lines[2]
