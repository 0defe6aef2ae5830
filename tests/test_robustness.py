"""Issue 16, as a new user found it: non-UTF-8 and binary sources, absurd paths, crashes inside the server
and its log, unknown prompts, builds killed mid-way, caret columns. Each test failed before the fix.

Real inputs throughout: nvcc on real files, the MCP server through the SDK's own client, the CLI as a
subprocess where the process boundary matters (exit codes, log files)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from harness.build_dir import sweep_stale_builds
from harness.compile import compile_kernel, parse_diagnostics
from harness.config import Settings
from harness.errors import CompileError, InputError
from mcp_server.edge import tool_edge
from mcp_server.jobs import JobManager, Limits
from mcp_server.server import build_server
from tests.mcp_support import call_tools, make_workspace

REPO = Path(__file__).resolve().parent.parent
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
#: A valid candidate but for one byte: a Latin-1 string literal ("caf\xe9"), not UTF-8.
LATIN1_KERNEL = (b'#include "attn_abi.h"\nstatic const char* kName = "caf\xe9";\n'
                 b'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) { return kName[0] == 0; }\n')


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ATTNQ_")}
    base["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "attnq", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False, env={**base, **(env or {})})


def error_text(result) -> str:  # type: ignore[no-untyped-def]
    assert result.is_error, result.structured_content
    text = result.content[0].text
    assert "Traceback" not in text
    return text


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = make_workspace(tmp_path_factory, "robust-ws")
    (ws / "latin1.cu").write_bytes(LATIN1_KERNEL)
    (ws / "binary.cu").write_bytes(bytes(range(256)) * 8)
    return ws


# -- High 1: bytes that are not UTF-8 ------------------------------------------------------------------------
@needs_nvcc
def test_latin1_source_is_a_compile_error_not_a_traceback(ws: Path) -> None:
    r = cli("compile", "latin1.cu", cwd=ws)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "UnicodeDecodeError" not in r.stderr, r.stderr
    assert r.stderr.startswith("attnq compile: nvcc failed"), r.stderr
    with pytest.raises(CompileError) as err:
        compile_kernel(ws / "latin1.cu", cache_dir=ws / ".attnq" / "build")
    assert err.value.details["diagnostics"][0]["line"] == 2


def test_nul_bytes_are_refused_before_nvcc(ws: Path) -> None:
    with pytest.raises(InputError, match="NUL bytes"):
        compile_kernel(ws / "binary.cu", cache_dir=ws / ".attnq" / "build")
    (ws / "utf16.cu").write_bytes('#include "attn_abi.h"\n'.encode("utf-16"))
    with pytest.raises(InputError, match="NUL bytes"):
        compile_kernel(ws / "utf16.cu", cache_dir=ws / ".attnq" / "build")


@needs_nvcc
def test_mcp_tools_answer_non_utf8_binary_and_long_names_with_a_code(ws: Path) -> None:
    """compile_kernel and verify_kernel on the Latin-1 kernel, a binary .cu and a 5000-character name:
    `[code] message`, never a bare `Error executing tool` nor `[internal_error]`."""
    long_name = "k" * 5000 + ".cu"
    results = call_tools(ws, [("compile_kernel", {"path": "latin1.cu"}), ("verify_kernel", {"path": "latin1.cu"}),
                              ("compile_kernel", {"path": "binary.cu"}), ("verify_kernel", {"path": "binary.cu"}),
                              ("compile_kernel", {"path": long_name}), ("verify_kernel", {"path": long_name})])
    texts = [error_text(r) for r in results]
    assert "[compile_error]" in texts[0] and "invalid multibyte" in texts[0], texts[0]
    assert "[compile_error]" in texts[1], texts[1]  # compiled before any GPU is looked for
    assert "[input_error]" in texts[2] and "NUL bytes" in texts[2], texts[2]
    assert "[input_error]" in texts[3], texts[3]
    for t in texts[4:]:
        assert "[input_error]" in t and "unusable path" in t and len(t) < 600, t
    assert not any("[internal_error]" in t for t in texts)


# -- High 1 (the kind) and High 2: a bug of ours has a code, a message and a logged traceback -------------------
CRASHING_SERVER = """
import sys
import anyio
from mcp.client import Client
from harness.config import Settings
from mcp_server.server import build_server
from mcp_server.edge import tool_edge

server = build_server(Settings(workspace=sys.argv[1]))

@server.tool(description="a tool with a bug, for the test")
@tool_edge("buggy", sink=lambda: None)
async def buggy() -> str:
    return str({}["no such key"])

async def main():
    async with Client(server) as c:
        r = await c.call_tool("buggy", {})
        print(r.content[0].text)

anyio.run(main)
"""


def test_a_crash_is_a_coded_tool_error_and_its_traceback_is_logged(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNQ_")}
    env.update(PYTHONPATH=str(REPO), ATTNQ_LOG_FILE=str(log))
    r = subprocess.run([sys.executable, "-c", CRASHING_SERVER, str(tmp_path)], capture_output=True, text=True,
                       env=env, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    text = r.stdout.strip()
    assert "[internal_error] buggy failed: KeyError: 'no such key'" in text, text
    assert "the server log has the traceback" in text
    records = [json.loads(line) for line in log.read_text().splitlines()]
    crash = [x for x in records if x.get("event") == "tool_crashed"]
    assert crash and crash[0]["tool"] == "buggy", records
    assert "Traceback (most recent call last)" in crash[0]["exception"] and "KeyError" in crash[0]["exception"]


def test_log_exception_writes_the_traceback(tmp_path: Path) -> None:
    code = ("from harness.logging import get_logger\nlog = get_logger('t')\n"
            "try:\n    1 / 0\nexcept ZeroDivisionError:\n    log.exception('boom')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNQ_")} | {"PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    rec = json.loads(r.stderr.strip().splitlines()[-1])
    assert rec["event"] == "boom" and "ZeroDivisionError: division by zero" in rec["exception"], rec
    assert "exc_info" not in rec


def test_a_crashed_verification_job_says_what_crashed() -> None:
    jobs = JobManager(Limits(inline_s=5, heartbeat_s=1))

    def runner(progress, cancel):  # type: ignore[no-untyped-def]
        raise UnicodeDecodeError("utf-8", b"\xe9", 0, 1, "invalid continuation byte")

    job = jobs.start("k.cu", "quick", runner)
    deadline = time.monotonic() + 10
    while not job.finished and time.monotonic() < deadline:
        time.sleep(0.01)
    st = job.status()
    assert st.state == "failed" and st.error is not None and st.error["error"] == "internal_error"
    assert "UnicodeDecodeError" in st.error["message"] and "invalid continuation byte" in st.error["message"]


def test_tool_edge_keeps_cancellation_for_the_sdk() -> None:
    @tool_edge("t", sink=lambda: None)
    async def cancelled() -> None:
        raise anyio.get_cancelled_exc_class()()

    async def main() -> None:
        with pytest.raises(anyio.get_cancelled_exc_class()):  # passes through, not turned into a tool error
            await cancelled()

    anyio.run(main)


# -- Low: prompts, stale build dirs, caret columns --------------------------------------------------------------
def test_unknown_prompt_is_invalid_params_with_the_names(tmp_path: Path) -> None:
    server = build_server(Settings(workspace=tmp_path))

    async def main() -> tuple[str, str]:
        async with Client(server) as c:
            with pytest.raises(MCPError) as err:
                await c.get_prompt("start_campaing")
            ok = await c.get_prompt("start_campaign", {})
            return str(err.value), ok.messages[0].content.text

    message, prompt = anyio.run(main)
    assert message == "unknown prompt 'start_campaing'; prompts: start_campaign"
    assert "the lead" not in prompt and "Verify on the `quick` suite while you iterate." in prompt


def test_builds_killed_mid_way_leave_nothing_behind(tmp_path: Path) -> None:
    cache = tmp_path / "build"
    cache.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    stale = cache / f".tmp-0123456789abcdef-{dead}-dead"
    (stale / "sub").mkdir(parents=True)
    live = cache / f".tmp-0123456789abcdef-{os.getpid()}-live"  # a build of this process, running now
    live.mkdir()
    old = cache / ".tmp-0123456789abcdef-1-old"  # pid 1 runs, but no build lasts 10 minutes
    old.mkdir()
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    assert sorted(sweep_stale_builds(cache)) == sorted([stale, old])
    assert live.is_dir() and not stale.exists() and not old.exists()


KILLED_BUILD = """
import sys
from pathlib import Path
from harness.compile import compile_kernel
compile_kernel(Path(sys.argv[1]), cache_dir=Path(sys.argv[2]), policy=False)
"""


@needs_nvcc
def test_kill_9_during_a_compile_then_a_restart_leaves_no_temp_dir(tmp_path: Path) -> None:
    """The issue's case: a compile killed with SIGKILL leaves `.tmp-*` in the build cache; the next build
    (a restarted server, another CLI call) removes it."""
    cache = tmp_path / "build"
    (tmp_path / "k.cu").write_text((REPO / "tests" / "data" / "compile" / "tiny.cu").read_text() + "\n// killed\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNQ_")} | {"PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(tmp_path / "k.cu"), str(cache)], env=env)
    deadline = time.monotonic() + 120
    while not list(cache.glob(".tmp-*")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    left = list(cache.glob(".tmp-*"))
    assert left, "the build finished before it could be killed"
    (tmp_path / "other.cu").write_text((REPO / "tests" / "data" / "compile" / "tiny.cu").read_text() + "\n// next\n")
    compile_kernel(tmp_path / "other.cu", cache_dir=cache)
    assert not any(p.exists() for p in left) and not list(cache.glob(".tmp-*"))


def test_gpu_run_help_and_unknown_steps_run_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path / "out")}
    r = subprocess.run(["bash", str(REPO / "scripts" / "gpu_run.sh"), "--help"], capture_output=True, text=True,
                       env=env, timeout=60, check=False)
    assert r.returncode == 0 and "aa_cover" in r.stdout and "steps:" in r.stdout, r.stderr
    r = subprocess.run(["bash", str(REPO / "scripts" / "gpu_run.sh"), "info", "bogus"], capture_output=True,
                       text=True, env=env, timeout=60, check=False)
    assert r.returncode == 2 and "unknown step 'bogus'" in r.stderr
    assert not (tmp_path / "out").exists()


@needs_nvcc
def test_compile_sweeps_stale_build_dirs(tmp_path: Path) -> None:
    cache = tmp_path / "build"
    stale = cache / ".tmp-feedfeedfeedfeed-999999999-dead"
    stale.mkdir(parents=True)
    (tmp_path / "k.cu").write_text((REPO / "tests" / "data" / "compile" / "tiny.cu").read_text() + "\n// sweep\n")
    compile_kernel(tmp_path / "k.cu", cache_dir=cache)
    assert not stale.exists() and not list(cache.glob(".tmp-*"))


def test_caret_gives_the_column() -> None:
    out = ('k.cu(2): error: identifier "undefined_thing" is undefined\n'
           "    int y = undefined_thing + 1;\n"
           "            ^\n\n"
           'k.cu(3): error: identifier "z" is undefined\n'
           "   int w = z;\n"
           "           ^\n\n"
           "k.cu(9): warning #177-D: variable \"q\" was declared but never referenced\n"
           "\n"
           "2 errors detected in the compilation of \"k.cu\".\n")
    d = parse_diagnostics(out)
    assert [(x.line, x.column) for x in d] == [(2, 11), (3, 10), (9, None)]


@needs_nvcc
def test_real_nvcc_caret_matches_the_source(tmp_path: Path) -> None:
    src = '#include "attn_abi.h"\n  int y = undefined_thing + 1;\n\tint z = other_undefined;\n'
    (tmp_path / "k.cu").write_text(src)
    with pytest.raises(CompileError) as err:
        compile_kernel(tmp_path / "k.cu", cache_dir=tmp_path / "build")
    cols = {d["line"]: d["column"] for d in err.value.details["diagnostics"] if d["file"].endswith("k.cu")}
    lines = src.splitlines()
    assert lines[1][cols[2] - 1:].startswith("undefined_thing") and lines[2][cols[3] - 1:].startswith("other_"), cols


@needs_nvcc
@pytest.mark.parametrize("name", ['k"x.cu', "k$x.cu", "k`x.cu", "k\\x.cu"])
def test_names_nvcc_cannot_take_are_refused_by_name(tmp_path: Path, name: str) -> None:
    """nvcc runs its stages through `sh -c "..."`: before, such a name failed deep inside nvcc with
    "sh: 1: Syntax error: Unterminated quoted string" (found by tests/test_properties.py)."""
    shutil.copy(REPO / "tests" / "data" / "compile" / "tiny.cu", tmp_path / name)
    with pytest.raises(InputError, match="nvcc cannot build a path with .* rename it"):
        compile_kernel(tmp_path / name, cache_dir=tmp_path / "build")
    shutil.copy(REPO / "tests" / "data" / "compile" / "tiny.cu", tmp_path / "k'x (1).cu")  # quotes nvcc takes
    assert Path(compile_kernel(tmp_path / "k'x (1).cu", cache_dir=tmp_path / "build").library).is_file()
