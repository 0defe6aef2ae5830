"""Bad input to the ``attnq`` CLI gives ONE plain message (stderr, exit 2; the error JSON on stdout with
``--json``), never a traceback: invalid flag/env values, OS errors from user paths, a closed stdout,
serve's flags, banks and port, campaign names, and the wording fixes of compile/reflect/trace/declare.
Every test runs the real CLI in a subprocess (``python -m attnq``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness import ORIGINAL_KERNEL
from harness.errors import InputError
from harness.store import CampaignStore, validate_campaign_id

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
REPO = Path(__file__).resolve().parent.parent


def attnq(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
          timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m attnq ARGS`` with ``env`` added to a clean ``ATTNQ_*``-free environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ATTNQ_")}
    base["PYTHONPATH"] = str(REPO) + os.pathsep + base.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "attnq", *args], cwd=cwd, check=False, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def plain_error(r: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """Assert exit ``code`` and exactly one plain stderr line without a traceback; return that line."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "errors.pydantic.dev" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    """A workspace with a copy of the original kernel as ``k.cu``."""
    shutil.copy(ORIGINAL_KERNEL, tmp_path / "k.cu")
    return tmp_path


# -- 1. invalid values: flags and ATTNQ_* variables ---------------------------------------------------------
@pytest.mark.parametrize(("flags", "field"), [
    (["--goal", "0"], "--goal:"), (["--goal", "-1"], "--goal:"), (["--goal", "nan"], "--goal:"),
    (["--gpu", "-1"], "--gpu:"), (["--scenario-timeout", "0"], "--scenario-timeout:"), (["--anchors", "foo"], "--anchors:"),
])
def test_verify_invalid_flag_values(ws: Path, flags: list[str], field: str) -> None:
    line = plain_error(attnq("verify", "k.cu", *flags, cwd=ws))
    assert line.startswith("attnq verify: invalid value: ") and field in line, line


@pytest.mark.parametrize(("env", "field"), [({"ATTNQ_GPU": "abc"}, "gpu"),
                                            ({"ATTNQ_GOAL_SPEEDUP": "-1"}, "goal_speedup")])
def test_invalid_environment_values(ws: Path, env: dict[str, str], field: str) -> None:
    (name, value), = env.items()
    for args in (["verify", "k.cu"], ["trace", "campaigns"], ["serve"]):
        line = plain_error(attnq(*args, cwd=ws, env=env))
        assert f"invalid value: {field}:" in line and f"(from {name}={value!r})" in line, line


def test_a_flag_value_is_not_blamed_on_the_variable(ws: Path) -> None:
    line = plain_error(attnq("serve", "--goal-speedup", "-1", cwd=ws, env={"ATTNQ_GOAL_SPEEDUP": "2"}))
    assert "invalid value: --goal-speedup:" in line and "ATTNQ_" not in line, line


def test_an_evolve_setting_is_named_by_its_flag_not_by_the_config_field(ws: Path) -> None:
    """--max-evals sets EvolveConfig.max_evaluations; the refusal names what the user typed (trial of 2026-12-06)."""
    for flag, value in (("--max-evals", "-3"), ("--generations", "-1"), ("--parallel", "0")):
        line = plain_error(attnq("evolve", flag, value, "--evaluator", "compile_facts", cwd=ws))
        assert f"invalid value: {flag}:" in line and "max_evaluations" not in line, line


def test_a_list_variable_that_is_not_json(ws: Path) -> None:
    for args in (["reflect"], ["serve"]):
        line = plain_error(attnq(*args, cwd=ws, env={"ATTNQ_BANK_PATHS": "team.toml"}))
        assert "ATTNQ_BANK_PATHS='team.toml' is not valid" in line and "JSON" in line, line
        assert "EnvSettingsSource" not in line, line


def test_invalid_value_as_json(ws: Path) -> None:
    r = attnq("verify", "k.cu", "--goal", "0", "--json", cwd=ws)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    doc = json.loads(r.stdout)
    assert doc["error"] == "input_error" and "--goal:" in doc["message"]


# -- 2. OS errors from user paths ------------------------------------------------------------------------------
def test_file_name_too_long(ws: Path) -> None:
    line = plain_error(attnq("compile", "a" * 300 + ".cu", cwd=ws))
    assert line.startswith("attnq compile: ") and "too long" in line.lower(), line


def test_state_dir_is_a_file(ws: Path) -> None:
    (ws / ".attnq").write_text("not a directory")
    line = plain_error(attnq("trace", "show", cwd=ws))
    assert str(ws / ".attnq") in line and "not a directory" in line, line
    assert "attnq's state directory" in line and "set ATTNQ_STATE to move it" in line, line


def test_an_unusable_attnq_state_is_named_as_the_state_directory(ws: Path) -> None:
    """Found as a new user: ATTNQ_STATE=/proc/x said only "No such file or directory: /proc/x", which does not
    say that the path is the state directory nor where it came from."""
    for cmd in (["reflect"], ["declare", "limit", "x"], ["trace", "show"]):
        line = plain_error(attnq(*cmd, cwd=ws, env={"ATTNQ_STATE": "/proc/attnq-x"}))
        assert line.startswith(f"attnq {cmd[0]}: ") and "/proc/attnq-x" in line, line
        assert "state directory" in line and "from ATTNQ_STATE" in line and "writable folder" in line, line
    line = plain_error(attnq("compile", "missing.cu", cwd=ws, env={"ATTNQ_STATE": str(ws / "st")}))
    assert "state directory" not in line, line  # only a path that is the state directory gets the note


@needs_nvcc
def test_cache_dir_unwritable(ws: Path) -> None:
    line = plain_error(attnq("compile", "k.cu", "--cache-dir", "/proc/attnq-x", cwd=ws))
    assert line.startswith("attnq compile: ") and "/proc/attnq-x" in line, line


def test_log_file_unopenable_falls_back_to_stderr(ws: Path) -> None:
    r = attnq("scenarios", "--suite", "quick", cwd=ws, env={"ATTNQ_LOG_FILE": "/proc/attnq-x/log"})
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert "cannot open log file /proc/attnq-x/log" in r.stderr and r.stdout.startswith("suite quick")


# -- 3. a closed stdout (``| head``) ----------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["scenarios"], ["questions", "stats"], ["trace", "export"]])
def test_closed_stdout_exits_quietly(ws: Path, args: list[str]) -> None:
    with CampaignStore(ws / ".attnq" / "campaign.sqlite") as store:
        store.record_event("cli.test", args={"n": 1}, result=None, ok=True, duration_s=0.0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNQ_")}
    env["PYTHONPATH"] = str(REPO)
    p = subprocess.Popen([sys.executable, "-m", "attnq", *args], cwd=ws, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the first write: every write raises EPIPE
    err = p.stderr.read()
    assert p.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err


# -- 4/5. serve: port, ranges, log level, banks -------------------------------------------------------------------
@pytest.mark.parametrize(("flags", "needle"), [
    (["--http", "--port", "99999"], "--port"), (["--http", "--port", "0"], "--port"),
    (["--heartbeat-s", "20"], "--heartbeat-s"), (["--heartbeat-s", "0.1"], "--heartbeat-s"),
    (["--max-call-s", "0"], "--max-call-s"), (["--max-call-s", "-5"], "--max-call-s"),
])
def test_serve_flag_ranges_are_argparse_errors(ws: Path, flags: list[str], needle: str) -> None:
    r = attnq("serve", *flags, cwd=ws)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"error: argument {needle}" in r.stderr and "outside" in r.stderr, r.stderr


def test_log_level_choices(ws: Path) -> None:
    for cmd in ([sys.executable, "-m", "attnq", "--log-level", "bogus", "scenarios"],
                [sys.executable, "-m", "mcp_server", "--log-level", "bogus"]):
        r = subprocess.run(cmd, cwd=ws, check=False, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
        assert r.returncode == 2 and "invalid choice: 'bogus'" in r.stderr, r.stderr
    assert attnq("--log-level", "INFO", "scenarios", "--suite", "quick", cwd=ws).returncode == 0


def test_a_bad_flag_value_is_named_by_its_flag(ws: Path) -> None:
    """`--goal 0` said `goal_speedup: ...` (the model's field), `--anchors flsh` `anchors.0: ...`."""
    for flags, flag in ((("--goal", "0"), "--goal"), (("--anchors", "flsh"), "--anchors"),
                        (("--scenario-timeout", "-1"), "--scenario-timeout")):
        r = attnq("verify", str(ORIGINAL_KERNEL), *flags, cwd=ws)
        assert r.returncode == 2 and f"attnq verify: invalid value: {flag}: " in r.stderr, r.stderr


def test_an_explicit_log_level_applies_after_a_module_configured_the_default(ws: Path) -> None:
    """`attnq --log-level info ...` logged nothing: a module's import-time logger had configured the default
    (warning) before the CLI passed its level, and the second configuration was skipped."""
    code = ("import harness.build_dir\n"  # its module-level logger configures the default level at import
            "from harness.logging import configure_logging, get_logger\n"
            "configure_logging('info')\n"
            "get_logger('probe').info('probe_event')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ws, check=False, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO), "ATTNQ_LOG_LEVEL": "warning"})
    assert r.returncode == 0 and '"event": "probe_event"' in r.stderr and r.stdout == "", r.stderr


def test_serve_refuses_a_missing_bank(ws: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "attnq", "serve", "--bank", str(ws / "nonexist.toml")], cwd=ws, check=False,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    line = plain_error(r)
    assert line.startswith("attnq serve: ") and "nonexist.toml" in line, line


def test_serve_port_in_use(ws: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = attnq("serve", "--http", "--port", str(port), cwd=ws, env={"ATTNQ_HTTP_TOKEN": "t" * 32})
    line = plain_error(r)
    assert f"127.0.0.1:{port}" in line and "in use" in line, line
    assert "http://" not in r.stderr  # the URL line only follows a successful bind


# -- 6. CLI question length matches the MCP tool ------------------------------------------------------------------
def test_questions_add_minimum_length(ws: Path) -> None:
    from questions.human import MIN_QUESTION_CHARS

    line = plain_error(attnq("questions", "add", "abc", cwd=ws))
    assert f"{MIN_QUESTION_CHARS} to" in line, line
    assert attnq("questions", "add", "x" * (MIN_QUESTION_CHARS - 1) + "?", cwd=ws).returncode == 0


# -- 7. campaign names -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["", "../../etc", "a/b", "-x", ".hidden", "x" * 65, "has space"])
def test_bad_campaign_names(ws: Path, tmp_path: Path, name: str) -> None:
    with pytest.raises(InputError):
        validate_campaign_id(name)
    line = plain_error(attnq("trace", "use", "--", name, cwd=ws))
    assert "bad campaign name" in line, line
    r = attnq("trace", "campaigns", "--json", cwd=ws)
    assert [c["campaign_id"] for c in json.loads(r.stdout)] == ["default"]


def test_good_campaign_names() -> None:
    for name in ("default", "hopper-fa3", "run_2.v1", "A", "9" * 64):
        assert validate_campaign_id(name) == name


def test_every_command_refuses_an_unknown_campaign(ws: Path) -> None:
    """Reading and writing commands alike: a --campaign typo would otherwise start a campaign and record into it
    (a newcomer's claims and questions split off from the real campaign; trial of 2026-12-06)."""
    assert attnq("trace", "use", "--new", "alpha", cwd=ws).stdout.strip() == "active campaign: alpha (new)"
    for args in (["trace", "show", "--campaign", "nosuch"], ["trace", "export", "--campaign", "nosuch"],
                 ["reflect", "--campaign", "nosuch"], ["declare", "done", "it is done", "--campaign", "nosuch"],
                 ["questions", "add", "Is the typo campaign created?", "--campaign", "nosuch"],
                 ["questions", "list", "--campaign", "nosuch"]):
        line = plain_error(attnq(*args, cwd=ws))
        assert "unknown campaign 'nosuch'" in line and "default" in line and "alpha" in line, line
        assert "attnq trace use --new nosuch" in line, line
    ids = [c["campaign_id"] for c in json.loads(attnq("trace", "campaigns", "--json", cwd=ws).stdout)]
    assert sorted(ids) == ["alpha", "default"]
    fresh = ws / "fresh"
    fresh.mkdir()
    for args in (["trace", "campaigns"], ["reflect"], ["questions", "list"]):  # the implicit `default`: known
        r = attnq(*args, "--campaign", "default", cwd=fresh)
        assert r.returncode == 0, (args, r.stderr)
    assert attnq("trace", "show", "--campaign", "alpha", cwd=ws).returncode == 0


# -- 8. messages -------------------------------------------------------------------------------------------------------
def test_reflect_says_no_trigger_once(ws: Path) -> None:
    r = attnq("reflect", cwd=ws)
    assert r.returncode == 0, r.stderr
    assert r.stdout.lower().count("no trigger fired") == 1, r.stdout


def test_declare_help_documents_exit_status() -> None:
    r = attnq("declare", "--help")
    text = " ".join(r.stdout.split())
    assert r.returncode == 0 and "1 for 'done' when the goal is not met" in text, r.stdout


def test_trace_show_without_verified_attempt_prints_no_best(ws: Path) -> None:
    assert attnq("reflect", cwd=ws).returncode == 0
    out = attnq("trace", "show", cwd=ws).stdout
    assert "best -" in out and "1.00x" not in out, out


@needs_nvcc
def test_compile_table_says_static_smem(ws: Path) -> None:
    r = attnq("compile", "k.cu", "--cache-dir", str(ws / "build"), cwd=ws, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "smem(static)" in r.stdout.splitlines()[0], r.stdout
    assert "dynamic shared memory is sized at launch" in r.stdout, r.stdout


def test_compile_table_names_tell_instantiations_apart() -> None:
    """A 60-character cut left rows of attn_fast.cu's kernels the same (trial of 2026-12-06)."""
    from attnq.commands.compile import _short_name

    a = "void (anonymous namespace)::attn_fwd_ws<128, 128, 2, true, 2, __half, false, false, false, 96, false>(CUtensorMap)"
    b = a.replace(", 96, false>", ", 128, false>").replace("__half", "__nv_bfloat16")
    assert _short_name(a) == "attn_fwd_ws<128, 128, 2, true, 2, half, false, false, false, 96, false>"
    assert _short_name(b) == "attn_fwd_ws<128, 128, 2, true, 2, bf16, false, false, false, 128, false>"


def test_an_unknown_log_level_is_said_not_ignored(ws: Path) -> None:
    r = attnq("questions", "list", cwd=ws, env={"ATTNQ_LOG_LEVEL": "loud"})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "ATTNQ_LOG_LEVEL='loud' is not one of debug, info, warning" in r.stderr, r.stderr


def test_version_and_the_mcp_config_help(ws: Path) -> None:
    """`attnq --version` answers (it was "the following arguments are required: COMMAND"), and mcp-config's help
    keeps its example apart from the exit codes (they ran together; trial of 2026-12-06)."""
    r = attnq("--version", cwd=ws)
    assert r.returncode == 0 and re.fullmatch(r"attnq \d+\.\d+\.\d+\S*\n", r.stdout), (r.stdout, r.stderr)
    text = attnq("mcp-config", "--help", cwd=ws).stdout
    assert "\nExit codes: 0 done" in text and ") Exit codes" not in text, text


def test_evolve_without_a_gpu_says_what_the_command_line_offers_instead(ws: Path) -> None:
    """The no-GPU refusal of `attnq evolve` names --scheduler and --evaluator compile_facts (trial of 2026-12-06);
    the MCP tools, which have neither option, keep the plain message (harness.gpu.require_gpu)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: evolve would start")
    r = attnq("evolve", cwd=ws)
    assert r.returncode == 3 and "--evaluator compile_facts" in r.stderr and "--scheduler" in r.stderr, r.stderr
