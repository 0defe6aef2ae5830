"""The server as real clients launch it: stdio exactly as each example client config says (stdout
carries nothing but JSON-RPC), streamable HTTP behind the bearer token (401 without it), and the MCP
Inspector's CLI over stdio."""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from attnq.commands.mcp_config import EXAMPLE_PYTHON, render, server_command
from tests.mcp_support import EXPECTED_TOOLS, make_workspace

REPO = Path(__file__).resolve().parent.parent
CLIENTS = REPO / "examples" / "clients"
TOKEN = "test-token-0123456789abcdef"
TINY = REPO / "tests" / "data" / "mcp" / "tiny_kernel.cu"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace sharing the session's build cache with the other MCP test modules."""
    return make_workspace(tmp_path_factory, "mcp-transport-ws")


#: What a desktop-launched client sees: no venv on PATH (the bug of issue 16: a bare `attnq` did not start).
BARE_PATH = "/usr/bin:/bin"


def launch_spec(name: str, ws: Path, *, python: str | None = None) -> tuple[str, list[str], dict[str, str]]:
    """(command, args, env) of the attnq server as client ``name``'s config says: the one `attnq mcp-config`
    prints for this install (``python``: for another interpreter path), with a PATH that lacks the venv.
    PYTHONPATH points at this checkout so the server runs the code under test (a shared dev venv may hold
    another checkout's editable install; in CI it is this one)."""
    text = render(name, python=python)
    if name == "codex":
        cfg = tomllib.loads(text)["mcp_servers"]["attnq"]
        assert cfg["tool_timeout_sec"] >= 60 and cfg["startup_timeout_sec"] >= 10
    else:
        cfg = json.loads(text)["servers" if name == "vscode" else "mcpServers"]["attnq"]
        if name == "gemini":
            assert cfg["timeout"] >= 60_000
        if name == "claude-code":
            env = json.loads((CLIENTS / "claude-code" / ".claude" / "settings.json").read_text())["env"]
            assert int(env["MCP_TOOL_TIMEOUT"]) >= 60_000
    env = {k: v.replace("${workspaceFolder}", str(ws)) for k, v in cfg.get("env", {}).items()}
    env.setdefault("ATTNQ_WORKSPACE", str(ws))
    env.update(PATH=BARE_PATH, PYTHONPATH=str(REPO))
    assert Path(cfg["command"]).is_absolute(), cfg["command"]
    return cfg["command"], list(cfg.get("args", [])), env


EXAMPLE_FILES = {"claude-code": "claude-code/.mcp.json", "codex": "codex/config.toml", "cursor": "cursor/.cursor/mcp.json",
                 "vscode": "vscode/.vscode/mcp.json", "gemini": "gemini/.gemini/settings.json"}


def test_example_configs_are_the_generated_ones() -> None:
    """examples/clients/ hold exactly what `attnq mcp-config CLIENT` prints for an install in EXAMPLE_PYTHON,
    and the README shows the line that prints yours."""
    for name, rel in EXAMPLE_FILES.items():
        assert (CLIENTS / rel).read_text() == render(name, python=EXAMPLE_PYTHON), rel
    out = subprocess.run([sys.executable, "-m", "attnq", "mcp-config", "command"], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    assert out.split() == [os.path.abspath(sys.executable), "-m", "attnq", "serve"]
    for readme in (REPO / "README.md", CLIENTS / "README.md"):
        assert "attnq mcp-config" in readme.read_text(), readme


def test_mcp_config_refuses_a_suite_the_server_could_not_load_and_writes_files_absolute(tmp_path: Path) -> None:
    """A misspelled --suite was written verbatim and the client's server then died at start ("Connection closed"
    was all the client showed; trial of 2026-12-06); a relative suite file was written relative."""
    def mcp_config(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "attnq", "mcp-config", *args], capture_output=True, text=True,
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)

    for bad in ("quik", "nosuch.toml"):
        r = mcp_config("cursor", "--suite", bad)
        assert r.returncode == 2 and r.stdout == "" and ("unknown suite 'quik'" in r.stderr or
                                                          "does not exist" in r.stderr), r.stderr
        assert "Traceback" not in r.stderr
    (tmp_path / "mine.toml").write_text((REPO / "harness" / "suites" / "quick.toml").read_text())
    r = mcp_config("cursor", "--suite", "mine.toml")
    assert r.returncode == 0, r.stderr
    env = json.loads(r.stdout)["mcpServers"]["attnq"]["env"]
    assert env["ATTNQ_SUITE"] == str((tmp_path / "mine.toml").resolve())
    assert json.loads(mcp_config("cursor", "--suite", "full").stdout)["mcpServers"]["attnq"]["env"]["ATTNQ_SUITE"] == "full"


CLIENT_NAMES = ("claude-code", "codex", "cursor", "vscode", "gemini")


def test_every_client_config_starts_the_server(workspace: Path) -> None:
    """Each config parses, names an absolute command that starts the server with a PATH that lacks the venv
    (as a desktop-launched client has), and the server answers initialize + tools/list over stdio (the
    five launched concurrently to keep the test short)."""
    found: dict[str, set[str]] = {}

    async def one(name: str) -> None:
        command, args, env = launch_spec(name, workspace)
        params = StdioServerParameters(command=command, args=args, env=env, cwd=str(workspace))
        async with Client(params, read_timeout_seconds=60) as c:
            found[name] = {t.name for t in (await c.list_tools()).tools}

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for name in CLIENT_NAMES:
                tg.start_soon(one, name)

    anyio.run(main)
    assert found == {name: EXPECTED_TOOLS for name in CLIENT_NAMES}


def test_stdio_stdout_carries_only_jsonrpc(workspace: Path) -> None:
    """Start the server exactly as the Claude Code config does and speak raw JSON-RPC to it."""
    command, args, env = launch_spec("claude-code", workspace)
    proc = subprocess.Popen([command, *args], cwd=workspace, env={**os.environ, **env}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    err_chunks: list[bytes] = []
    threading.Thread(target=lambda: err_chunks.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]

    def send(msg: dict[str, Any]) -> None:
        proc.stdin.write((json.dumps(msg) + "\n").encode())  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]

    responses: dict[int, dict[str, Any]] = {}
    seen: list[bytes] = []

    def wait_for(msg_id: int, timeout_s: float = 90.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while msg_id not in responses:
            raw = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            seen.append(raw)
            msg = json.loads(raw)  # every stdout line must be one JSON-RPC message
            assert msg.get("jsonrpc") == "2.0", raw
            if "id" in msg and ("result" in msg or "error" in msg):
                responses[msg["id"]] = msg
        return responses[msg_id]

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
        assert wait_for(1)["result"]["serverInfo"]["name"] == "attnq"
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert {t["name"] for t in wait_for(2)["result"]["tools"]} == EXPECTED_TOOLS
        send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "get_task", "arguments": {}}})
        assert wait_for(3)["result"]["structuredContent"]["abi"]["version"] >= 1
        calls = [("compile_kernel", {"path": "missing.cu"})]
        if shutil.which("nvcc"):  # nvcc runs as a child process: its output must not reach our stdout
            fresh = workspace / "stdio_tiny.cu"  # a unique comment: never a cache hit, nvcc really runs
            fresh.write_text(TINY.read_text() + f"// {time.time_ns()}\n")
            calls.append(("compile_kernel", {"path": fresh.name}))
        for i, (name, arguments) in enumerate(calls, start=4):
            send({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
        missing = wait_for(4)["result"]
        assert missing["isError"] and "no such file" in missing["content"][0]["text"]
        if len(calls) > 1:
            built = wait_for(5)["result"]
            assert not built.get("isError"), built
            assert built["structuredContent"]["cache_hit"] is False and built["structuredContent"]["kernels"]
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.2)
    while not lines.empty():  # anything left on stdout after the session must be JSON-RPC too
        raw = lines.get()
        assert json.loads(raw).get("jsonrpc") == "2.0", raw
    assert seen and proc.returncode == 0
    assert b"Traceback" not in b"".join(err_chunks)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_requires_the_bearer_token(workspace: Path) -> None:
    import httpx2

    port = free_port()
    env = {**os.environ, "ATTNQ_HTTP_TOKEN": TOKEN}
    proc = subprocess.Popen([sys.executable, "-m", "mcp_server", "--http", "--port", str(port),
                             "--workspace", str(workspace)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "HTTP server did not start"
                time.sleep(0.2)
        with httpx2.Client(timeout=10) as http:
            assert http.post(url, json=init, headers=headers).status_code == 401
            wrong = http.post(url, json=init, headers={**headers, "Authorization": "Bearer " + TOKEN[:-1] + "X"})
            assert wrong.status_code == 401 and wrong.headers["www-authenticate"].startswith("Bearer")
            assert TOKEN not in wrong.text
            basic = http.post(url, json=init, headers={**headers, "Authorization": f"Basic {TOKEN}"})
            assert basic.status_code == 401

        async def main() -> tuple[set[str], dict[str, Any]]:
            async with (create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
                        Client(streamable_http_client(url, http_client=http)) as c):
                tools = {t.name for t in (await c.list_tools()).tools}
                bank = (await c.call_tool("list_questions", {})).structured_content
                return tools, bank

        tools, bank = anyio.run(main)
        assert tools == EXPECTED_TOOLS and bank["count"] > 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_http_refuses_to_start_without_a_token_or_on_a_public_host(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ATTNQ_HTTP_TOKEN"}
    no_token = subprocess.run([sys.executable, "-m", "mcp_server", "--http", "--workspace", str(tmp_path)],
                              env=env, capture_output=True, text=True, timeout=60)
    assert no_token.returncode == 2 and "ATTNQ_HTTP_TOKEN" in no_token.stderr and "Traceback" not in no_token.stderr
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    public = subprocess.run([sys.executable, "-m", "mcp_server", "--http", "--token-file", str(token_file),
                             "--host", "0.0.0.0", "--workspace", str(tmp_path)],
                            env=env, capture_output=True, text=True, timeout=60)
    assert public.returncode == 2 and "--allow-remote" in public.stderr
    empty = tmp_path / "empty-token"
    empty.write_text("\n")
    r = subprocess.run([sys.executable, "-m", "mcp_server", "--http", "--token-file", str(empty), "--workspace",
                        str(tmp_path)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"the token file {empty} is empty" in r.stderr, r.stderr  # not "pass --token-file"


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx (Node.js) is not installed")
def test_mcp_inspector_cli_lists_the_tools(workspace: Path) -> None:
    """The MCP Inspector's CLI (a client we did not write) over stdio. The first run downloads the
    package into the npm cache (~/.npm); later runs prefer the cache and work offline."""
    env = {**os.environ, "npm_config_prefer_offline": "true", "npm_config_update_notifier": "false",
           "npm_config_fund": "false", "npm_config_audit": "false"}
    try:
        out = subprocess.run(["npx", "-y", "@modelcontextprotocol/inspector@0.21.2", "--cli", *server_command(),
                              "--workspace", str(workspace), "--method", "tools/list"],
                             env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.skip("npx could not fetch @modelcontextprotocol/inspector@0.21.2 within 300 s (offline?)")
    if out.returncode != 0 and ("ENOTFOUND" in out.stderr or "EAI_AGAIN" in out.stderr or "ETIMEDOUT" in out.stderr):
        pytest.skip(f"npx could not reach the npm registry and the package is not cached: {out.stderr[-300:]}")
    assert out.returncode == 0, out.stderr[-2000:]
    listed = json.loads(out.stdout)
    assert {t["name"] for t in listed["tools"]} == EXPECTED_TOOLS
    assert all(t.get("annotations") for t in listed["tools"])


NOISY_SERVER = """
import os, sys
import mcp_server.server as s
base = s.build_server
def build(*args, **kwargs):
    server = base(*args, **kwargs)
    @server.tool(description="prints to stdout from Python and from a child process")
    def noisy() -> str:
        print("STRAY PRINT FROM PYTHON")
        sys.stdout.flush()
        os.system("echo STRAY PRINT FROM A CHILD")
        return "done"
    return server
s.build_server = build
from mcp_server.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_stray_prints_go_to_stderr(workspace: Path) -> None:
    """A print in library code or a child process's output must not corrupt the protocol on stdout."""
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "noisy", "arguments": {}}},
    ]
    proc = subprocess.Popen([sys.executable, "-c", NOISY_SERVER, "--workspace", str(workspace)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for m in msgs[:2]:
        proc.stdin.write((json.dumps(m) + "\n").encode())  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    first = proc.stdout.readline()  # type: ignore[union-attr]
    assert json.loads(first)["id"] == 1
    proc.stdin.write((json.dumps(msgs[2]) + "\n").encode())  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    second = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
    assert second["id"] == 2 and second["result"]["content"][0]["text"] == "done"
    out, err = proc.communicate(timeout=20)  # closes stdin: the server exits
    for line in out.splitlines():
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert b"STRAY PRINT FROM PYTHON" in err and b"STRAY PRINT FROM A CHILD" in err
    assert proc.returncode == 0


def test_scripted_campaign_client_runs(workspace: Path) -> None:
    """examples/clients/campaign.py end to end over stdio (on a GPU-less machine the verify step is
    the plain no_gpu error, which the script reports and passes)."""
    out = subprocess.run([sys.executable, str(CLIENTS / "campaign.py"), "--workspace", str(workspace)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for step in ("== get_task", "== compile_kernel", "== reflect", "== declare", "== campaign_status"):
        assert step in out.stdout
    assert "campaign script: OK" in out.stdout
