"""The MCP server in process, through the SDK's own client: tool contract, get_task, compile_kernel on
the real original kernel, errors as plain tool errors, verify_kernel's no-GPU answer, resources,
the campaign prompt and the question tools."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import anyio
import pytest
from mcp.client import Client

from harness import ORIGINAL_KERNEL
from harness.abi import ABI_VERSION
from harness.config import Settings
from harness.scenarios import list_suites, load_suite
from mcp_server.server import build_server
from tests.mcp_support import EXPECTED_TOOLS, make_workspace

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace whose build cache is shared by every MCP test module of the session."""
    ws = make_workspace(tmp_path_factory, "mcp-ws")
    shutil.copy(ORIGINAL_KERNEL, ws / "cand.cu")
    return ws


def call(server, fn):  # type: ignore[no-untyped-def]
    """Run ``await fn(client)`` against ``server`` in a fresh in-process client."""

    async def main():  # type: ignore[no-untyped-def]
        async with Client(server) as client:
            return await fn(client)

    return anyio.run(main)


def tool(server, name: str, args: dict | None = None):  # type: ignore[no-untyped-def]
    return call(server, lambda c: c.call_tool(name, args or {}))


def error_text(result) -> str:  # type: ignore[no-untyped-def]
    assert result.is_error, f"expected a tool error, got {result.structured_content}"
    text = result.content[0].text
    assert "Traceback" not in text and 'File "' not in text
    return text


def test_tools_contract(workspace: Path) -> None:
    tools = call(build_server(Settings(workspace=workspace)), lambda c: c.list_tools()).tools
    assert {t.name for t in tools} == EXPECTED_TOOLS
    for t in tools:
        assert t.name.islower() and " " not in t.name
        assert 80 < len(t.description.encode()) < 2048, t.name
        ann = t.annotations
        assert ann is not None and ann.read_only_hint is not None and ann.idempotent_hint is not None, t.name
        assert ann.destructive_hint is not None, t.name
        assert t.output_schema is not None and t.output_schema.get("type") == "object", t.name
        for prop, schema in t.input_schema.get("properties", {}).items():
            assert schema.get("description"), f"{t.name}.{prop} has no description"
    by_name = {t.name: t for t in tools}
    assert by_name["get_task"].annotations.read_only_hint is True
    assert by_name["verify_kernel"].annotations.read_only_hint is False
    assert by_name["cancel_verification"].annotations.destructive_hint is True


def test_get_task(workspace: Path) -> None:
    server = build_server(Settings(workspace=workspace, goal_speedup=1.5, goal_anchor="cudnn"))

    async def go(c):  # type: ignore[no-untyped-def]
        task = (await c.call_tool("get_task", {})).structured_content
        header = await c.read_resource(task["abi"]["header_uri"])
        original = await c.read_resource(task["original_kernel_uri"])
        return task, header.contents[0].text, original.contents[0].text

    task, header, original = call(server, go)
    assert task["abi"]["version"] == ABI_VERSION and "#define ATTN_ABI_VERSION" in header
    assert "attn_fwd" in task["abi"]["summary"]
    suites = {s["name"]: s for s in task["suites"]}
    assert set(suites) == set(list_suites())
    for name, info in suites.items():
        assert info["num_scenarios"] == len(load_suite(name).scenarios)
    assert task["goal"]["min_speedup"] == 1.5 and task["goal"]["against"] == "cudnn"
    # the original lives outside this workspace: its absolute path, and its text as a resource
    assert task["original_kernel"] == str(ORIGINAL_KERNEL.resolve())
    assert original == ORIGINAL_KERNEL.read_text()
    assert any("cudnn" in f for f in task["rules"]["forbidden"])
    assert any("cudaLaunchKernel" in p for ps in task["rules"]["allowed_symbols"].values() for p in ps)
    assert task["default_suite"] == "quick"


def test_get_task_original_relative_inside_workspace(tmp_path: Path) -> None:
    repo = ORIGINAL_KERNEL.resolve().parent.parent
    # the repository as the workspace, its state elsewhere (ATTNQ_STATE): the developer's store is left alone
    repo_store = repo / ".attnq" / "campaign.sqlite"
    before = repo_store.stat().st_mtime_ns if repo_store.exists() else None
    task = tool(build_server(Settings(workspace=repo, state=tmp_path / "state")), "get_task").structured_content
    assert task["original_kernel"] == "kernels/attn_original.cu"
    assert (tmp_path / "state" / "campaign.sqlite").exists()
    assert (repo_store.stat().st_mtime_ns if repo_store.exists() else None) == before


@needs_nvcc
def test_compile_kernel_original(workspace: Path) -> None:
    server = build_server(Settings(workspace=workspace))
    result = tool(server, "compile_kernel", {"path": "cand.cu"})
    assert not result.is_error, result.content[0].text
    facts = result.structured_content
    assert facts["source"].endswith("cand.cu") and facts["arch"] == "sm_90a"
    assert facts["kernels"] and all(k["registers"] > 0 for k in facts["kernels"])
    # the original kernel's own path (outside the workspace) is accepted too
    again = tool(server, "compile_kernel", {"path": str(ORIGINAL_KERNEL)})
    assert not again.is_error and again.structured_content["build_hash"] == facts["build_hash"]
    # detail: auto lists the original's 10 kernels; summary the 8 with the most registers (none spills) and says so
    # (attn_fast.cu's 66 kernels made a 69,000-character answer: MCP trial of 2026-12-06)
    short = tool(server, "compile_kernel", {"path": "cand.cu", "detail": "summary"}).structured_content
    n = len(facts["kernels"])
    regs = sorted((k["registers"] for k in facts["kernels"]), reverse=True)
    assert n > 8 and len(short["kernels"]) == 8 and sorted((k["registers"] for k in short["kernels"]),
                                                           reverse=True) == regs[:8]
    assert short["warnings"][-1]["message"].startswith(f"{n - 8} of {n} kernels left out of this answer")
    assert short["build_hash"] == facts["build_hash"] and len(facts["warnings"]) == len(short["warnings"]) - 1


def test_compile_kernel_refuses_bad_paths(workspace: Path, tmp_path: Path) -> None:
    server = build_server(Settings(workspace=workspace))
    assert "no such file" in error_text(tool(server, "compile_kernel", {"path": "missing.cu"}))
    outside = tmp_path / "elsewhere.cu"
    outside.write_text("int x;\n")
    refused = error_text(tool(server, "compile_kernel", {"path": str(outside)}))
    assert f"outside the workspace {workspace.resolve()}" in refused
    assert "ATTNQ_WORKSPACE" in refused and "move the file into it" in refused  # how to get out of it, not just no
    assert "outside the workspace" in error_text(tool(server, "compile_kernel", {"path": "../../etc/hosts"}))
    (workspace / "notes.txt").write_text("hello")
    assert "not a .cu file" in error_text(tool(server, "compile_kernel", {"path": "notes.txt"}))


@needs_nvcc
def test_compile_kernel_structured_errors(workspace: Path) -> None:
    server = build_server(Settings(workspace=workspace))
    (workspace / "bad.cu").write_text('#include "attn_abi.h"\nextern "C" int attn_fwd(const attn_fwd_params* p,'
                                      " cudaStream_t s) {\n  return 0 +;\n}\n")
    text = error_text(tool(server, "compile_kernel", {"path": "bad.cu"}))
    assert text.startswith("Error executing tool compile_kernel: [compile_error]")
    assert "bad.cu:3" in text  # file:line of the syntax error
    (workspace / "threads.cu").write_text('#include "attn_abi.h"\n#include <pthread.h>\n')
    assert "[policy_violation]" in error_text(tool(server, "compile_kernel", {"path": "threads.cu"}))


@needs_nvcc
def test_verify_kernel_without_gpu_records_an_event_not_an_attempt(workspace: Path) -> None:
    pytest.importorskip("torch")
    from tests.conftest import gpu_skip_reason

    if gpu_skip_reason() is None:
        pytest.skip("this machine has a GPU: the no-GPU answer cannot be observed")
    server = build_server(Settings(workspace=workspace))

    async def go(c):  # type: ignore[no-untyped-def]
        seen: list[tuple[float, str | None]] = []

        async def progress(value: float, total: float | None, message: str | None) -> None:
            seen.append((value, message))

        result = await c.call_tool("verify_kernel", {"path": "cand.cu", "suite": "quick"}, progress_callback=progress)
        status = await c.call_tool("campaign_status", {})
        bad_suite = await c.call_tool("verify_kernel", {"path": "cand.cu", "suite": "nope"})
        return result, status.structured_content, bad_suite, seen

    result, status, bad_suite, seen = call(server, go)
    text = error_text(result)
    assert "[no_gpu]" in text and "needs an NVIDIA GPU" in text and "build succeeded" in text
    assert seen and all(b[0] > a[0] for a, b in itertools.pairwise(seen))  # strictly increasing
    assert status["attempts"] == 0 and status["recent_attempts"] == []  # no GPU: not an attempt (issue 16)
    assert "nope" in error_text(bad_suite)
    events = server.attnq_state.store().events()  # type: ignore[attr-defined]
    assert [e.result["error"] for e in events if e.tool == "verify.not_an_attempt"] == ["no_gpu"]
    verify_events = [e for e in events if e.tool == "verify_kernel"]
    assert verify_events and verify_events[-1].ok is False
    assert any(e.tool == "campaign_status" and e.ok for e in events)


def test_get_verification_unknown_job(workspace: Path) -> None:
    text = error_text(tool(build_server(Settings(workspace=workspace)), "get_verification", {"job_id": "deadbeef"}))
    assert "no verification job 'deadbeef'" in text


def test_resources_and_prompt(workspace: Path) -> None:
    server = build_server(Settings(workspace=workspace))

    async def go(c):  # type: ignore[no-untyped-def]
        uris = {str(r.uri) for r in (await c.list_resources()).resources}
        suites = json.loads((await c.read_resource("attnq://suites")).contents[0].text)
        quick = json.loads((await c.read_resource("attnq://suites/quick")).contents[0].text)
        bank = json.loads((await c.read_resource("attnq://questions/bank")).contents[0].text)
        report = (await c.read_resource("attnq://campaign/report")).contents[0].text
        prompts = [p.name for p in (await c.list_prompts()).prompts]
        prompt = await c.get_prompt("start_campaign", {"kernel": "cand.cu"})
        return uris, suites, quick, bank, report, prompts, prompt

    uris, suites, quick, bank, report, prompts, prompt = call(server, go)
    assert {"attnq://abi/attn_abi.h", "attnq://kernels/original", "attnq://suites", "attnq://questions/bank",
            "attnq://campaign/report"} <= uris
    assert {s["name"] for s in suites} == set(list_suites())
    assert len(quick["scenarios"]) == len(load_suite("quick").scenarios)
    assert quick["scenarios"][0]["id"] == load_suite("quick").scenarios[0].id
    assert bank["questions"] and all(q["text"].endswith("?") for q in bank["questions"])
    assert report.startswith("# attnq campaign")
    assert prompts == ["start_campaign"]
    text = prompt.messages[0].content.text
    assert "verify_kernel" in text and "cand.cu" in text and "reflect" in text and "declare" in text


def test_a_workspace_suite_is_read_and_checked_as_a_resource(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text('[[scenario]]\ngroup = "g"\nbatch = 1\nseqlen = 64\nheads = [4, 2]\n'
                                        'head_dim = 64\ncausal = false\ninputs.v = "head_tagged"\n')
    (tmp_path / "bad.toml").write_text('[[scenario]]\ngroup = "g"\nbatch = 1\nseqlen = 64\nheads = [4, 2]\n'
                                       'head_dim = 80\ncausal = false\n')
    server = build_server(Settings(workspace=tmp_path))

    async def go(c):  # type: ignore[no-untyped-def]
        mine = json.loads((await c.read_resource("attnq://suites/mine.toml")).contents[0].text)
        errors = []
        for uri in ("attnq://suites/bad.toml", "attnq://suites/missing.toml", "attnq://suites/nope"):
            with pytest.raises(Exception) as info:  # noqa: PT011 - the SDK's error type for a failed read
                await c.read_resource(uri)
            errors.append(str(info.value))
        return mine, errors

    mine, (bad, missing, nope) = call(server, go)
    assert [s["id"] for s in mine["scenarios"]] == load_suite(tmp_path / "mine.toml").ids()
    assert mine["scenarios"][0]["inputs"]["v"]["dist"] == "head_tagged"
    assert "bad.toml line 6" in bad and "head_dim" in bad
    assert "missing.toml: no such file in the workspace" in missing
    assert "no suite named 'nope'" in nope and "attnq://suites/mine.toml" in nope


def test_question_tools(tmp_path: Path) -> None:
    pytest.importorskip("questions.reflect")
    server = build_server(Settings(workspace=tmp_path, seed=7))

    async def go(c):  # type: ignore[no-untyped-def]
        r = await c.call_tool("reflect", {"claim": "loads of K dominate"})
        d = await c.call_tool("declare", {"kind": "done", "text": "I am done"})
        bad = await c.call_tool("declare", {"kind": "finished", "text": "x"})
        a = await c.call_tool("add_question", {"text": "Is the K tile reused across warps?", "triggers": ["stall"],
                                               "layer": "memory_traffic"})
        every = await c.call_tool("list_questions", {})
        stall = await c.call_tool("list_questions", {"trigger": "stall"})
        st = await c.call_tool("campaign_status", {})
        return r, d, bad, a, every, stall, st

    r, d, bad, a, every, stall, st = call(server, go)
    for res in (r, d, a, every, stall, st):
        assert not res.is_error, res.content[0].text
    assert r.structured_content["question"].endswith("?")
    assert d.structured_content["goal_met"] is not True  # no verified attempt meets the goal
    assert d.structured_content["reflection"]["trigger"] == "declared_done"
    assert bad.is_error
    assert 0 < stall.structured_content["count"] < every.structured_content["count"]
    assert all("stall" in q["triggers"] for q in stall.structured_content["questions"])
    status = st.structured_content
    assert status["questions_asked"] >= 2 and status["claims"][-1]["kind"] == "done"


@needs_nvcc
def test_a_fired_trigger_comes_with_the_verify_answer(tmp_path: Path) -> None:
    """Resubmitting the same broken kernel is recorded attempt after attempt; once a trigger fires
    (churn on identical sources), its question rides on the verify answer."""
    pytest.importorskip("questions.reflect")
    (tmp_path / "same.cu").write_text('#include "attn_abi.h"\nint broken = ;\n')
    server = build_server(Settings(workspace=tmp_path, seed=1))

    async def go(c):  # type: ignore[no-untyped-def]
        answers = [await c.call_tool("verify_kernel", {"path": "same.cu"}) for _ in range(3)]
        return answers, (await c.call_tool("campaign_status", {})).structured_content

    answers, status = call(server, go)
    texts = [error_text(a) for a in answers]
    assert all("[compile_error]" in t and "same.cu:2" in t for t in texts)
    with_question = [t for t in texts if "\n\nQuestion (" in t]
    assert with_question and with_question[-1].rstrip().endswith("?")
    assert status["attempts"] == 3 and status["recent_triggers"]
    assert all(a["status"] == "failed_compile" for a in status["recent_attempts"])
