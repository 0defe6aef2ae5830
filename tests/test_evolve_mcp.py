"""The MCP mutator: evolve_next / evolve_submit driven by a client (the compile-facts evaluator: real
nvcc builds on CPU), the long evaluation answered as a job, campaign_status and the report resource."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client

from harness.config import Settings
from mcp_server.jobs import Limits
from mcp_server.server import build_server
from tests.evolve_support import SEED, state_dir


@pytest.fixture
def workspace(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    ws = tmp_path_factory.mktemp("evolve-mcp")
    st = state_dir(tmp_path_factory, "evolve-mcp-state")
    shutil.copy(SEED, ws / "seed.cu")
    monkeypatch.setenv("ATTNQ_EVOLVE_EVALUATOR", "compile_facts")
    monkeypatch.setenv("ATTNQ_EVOLVE_CHILDREN_PER_GENERATION", "2")
    monkeypatch.setenv("ATTNQ_EVOLVE_ISLANDS", "1")
    monkeypatch.setenv("ATTNQ_EVOLVE_COMPILE_WORKERS", "1")
    (ws / "state").symlink_to(st, target_is_directory=True)
    return ws


def _settings(ws: Path) -> Settings:
    return Settings(workspace=ws, state=ws / "state", goal_speedup=9.0)


async def _call(c: Client, tool: str, **args: Any) -> dict[str, Any]:
    res = await c.call_tool(tool, args)
    assert not res.is_error, res.content[0].text  # type: ignore[union-attr]
    return res.structured_content  # type: ignore[return-value]


def _edit(ws: Path, rel: str, old: str, new: str) -> None:
    path = ws / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_an_mcp_client_is_the_mutation_operator(workspace: Path) -> None:
    server = build_server(_settings(workspace))

    async def main() -> None:
        async with Client(server) as c:
            nxt = await _call(c, "evolve_next", seed_path="seed.cu")  # starts the run; the seed is quick here
            assert nxt["state"] == "ready" and nxt["run_id"] == "evolve-1" and nxt["arm"] == "question"
            assert nxt["question"] and nxt["question"].endswith("?") and nxt["question"] in nxt["brief"]
            assert nxt["child_path"] == f"evolve/evolve-1/g001-t{nxt['ticket_id']}.cu"
            assert (workspace / nxt["child_path"]).read_text() == SEED.read_text()  # primed with the parent
            assert "## Parent source (program A)" in nxt["brief"] and "#define TILE 256" in nxt["brief"]
            _edit(workspace, nxt["child_path"], "#define TILE 256", "#define TILE 4096")
            sub = await _call(c, "evolve_submit", ticket_id=nxt["ticket_id"])
            assert sub["state"] == "finished" and sub["status"] == "correct" and sub["improved"] is True
            assert sub["fitness_quick"] > sub["parent_fitness_quick"] and sub["fitness_full"] == sub["fitness_quick"]
            assert sub["stage"] == "full" and sub["best_fitness"] == sub["fitness_full"]
            again = await _call(c, "evolve_submit", ticket_id=nxt["ticket_id"])  # idempotent, same next ticket
            assert again["program_id"] == sub["program_id"] and again["status"] == "correct"
            assert again["next"]["ticket_id"] == sub["next"]["ticket_id"]
            second = sub["next"]
            assert second["state"] == "ready" and second["ticket_id"] != nxt["ticket_id"]
            # the unchanged parent is a duplicate: rejected before any evaluation, counted
            dup = await _call(c, "evolve_submit", ticket_id=second["ticket_id"])
            assert dup["status"] == "rejected" and dup["reject_reason"].startswith("identical")
            assert dup["improved"] is None and dup["next"]["state"] == "ready"
            assert dup["next"]["generation"] == 2  # both tickets of generation 1 are done
            status = await _call(c, "campaign_status")
            evo = status["evolve"][0]
            assert (evo["run_id"], evo["programs"], evo["correct"], evo["rejected"]) == ("evolve-1", 3, 2, 1)
            assert evo["best"]["id"] == sub["program_id"] and evo["mutator"] == "mcp"
            report = (await c.read_resource("attnq://evolve/report")).contents[0].text  # type: ignore[union-attr]
            assert "## Lineage of the best" in report and nxt["question_id"] in report
            bad = await c.call_tool("evolve_submit", {"ticket_id": 9999})
            assert bad.is_error and "no evolve ticket 9999" in bad.content[0].text  # type: ignore[union-attr]

    anyio.run(main)
    server.attnq_state.close()  # type: ignore[attr-defined]


def test_a_long_evaluation_answers_as_a_job(workspace: Path) -> None:
    server = build_server(_settings(workspace), limits=Limits(inline_s=0.0, heartbeat_s=0.05, poll_s=0.01))

    async def until(c: Client, tool: str, done: Any, **args: Any) -> dict[str, Any]:
        deadline = time.monotonic() + 120
        while True:
            out = await _call(c, tool, **args)
            if done(out) or time.monotonic() > deadline:
                return out
            await anyio.sleep(0.2)

    async def main() -> None:
        async with Client(server) as c:
            first = await _call(c, "evolve_next", seed_path="seed.cu")
            assert first["state"] == "evaluating_seed" and first["job_id"]
            nxt = await until(c, "evolve_next", lambda o: o["state"] != "evaluating_seed")
            assert nxt["state"] == "ready"
            _edit(workspace, nxt["child_path"], "#define UNROLL 2", "#define UNROLL 3")
            sub = await _call(c, "evolve_submit", ticket_id=nxt["ticket_id"])
            assert sub["state"] == "running" and sub["job_id"] and "evolve_submit(ticket_id=" in sub["message"]
            done = await until(c, "evolve_submit", lambda o: o["state"] != "running", ticket_id=nxt["ticket_id"])
            assert done["state"] == "finished" and done["job_id"] == sub["job_id"] and done["stage"] in ("quick", "full")
            assert done["status"] == "correct" and done["next"]["state"] in ("ready", "waiting")

    anyio.run(main)
    server.attnq_state.close()  # type: ignore[attr-defined]


def test_without_a_run_evolve_next_says_how_to_start_one(workspace: Path) -> None:
    server = build_server(_settings(workspace))

    async def main() -> None:
        async with Client(server) as c:
            res = await c.call_tool("evolve_next", {})
            assert res.is_error and "has no evolve run" in res.content[0].text  # type: ignore[union-attr]
            res = await c.call_tool("evolve_next", {"seed_path": "../outside.cu"})
            assert res.is_error and "outside the workspace" in res.content[0].text  # type: ignore[union-attr]
            assert (await _call(c, "campaign_status"))["evolve"] == []

    anyio.run(main)
    server.attnq_state.close()  # type: ignore[attr-defined]


def _set_evaluator(ws: Path, run: str, kind: str) -> None:
    from evolve.db import EvolveDB

    with EvolveDB.for_state_dir(ws / "state") as db:
        db.update_run(run, config={**db.run(run).config, "evaluator": kind})


EDITS = [("#define TILE 256", "#define TILE 4096"), ("#define UNROLL 2", "#define UNROLL 3")]


def _submit_offline(ws: Path, run: str, edits: list[tuple[str, str]]) -> tuple[list[tuple[dict[str, Any], Any]], dict[str, Any]]:
    """The agent's side of the offline loop, on a fresh server: per edit, evolve_next, the edit applied to the
    child, evolve_submit. Returns ``([(evolve_next's answer, evolve_submit's CallToolResult), ...], the final
    evolve_next's answer)``; the callers assert on them."""
    async def agent() -> tuple[list[tuple[dict[str, Any], Any]], dict[str, Any]]:
        server = build_server(_settings(ws))
        subs: list[tuple[dict[str, Any], Any]] = []
        async with Client(server) as c:
            for old, new in edits:
                nxt = await _call(c, "evolve_next", run=run)
                _edit(ws, nxt["child_path"], old, new)
                subs.append((nxt, await c.call_tool("evolve_submit", {"ticket_id": nxt["ticket_id"], "run": run})))
            last = await _call(c, "evolve_next", run=run)
        server.attnq_state.close()  # type: ignore[attr-defined]
        return subs, last

    return anyio.run(agent)


def _next_on_a_fresh_server(ws: Path, run: str) -> dict[str, Any]:
    """evolve_next(run=run) on a new server (a new `attnq serve` process on the agent's machine)."""
    async def ask() -> dict[str, Any]:
        server = build_server(_settings(ws))
        async with Client(server) as c:
            out = await _call(c, "evolve_next", run=run)
        server.attnq_state.close()  # type: ignore[attr-defined]
        return out

    return anyio.run(ask)


def test_children_submitted_without_a_gpu_wait_for_one_batch_on_a_gpu_host(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline loop: an agent on a machine without a GPU mutates, a GPU host sharing the workspace state
    evaluates. The host starts the run (`attnq evolve --mutator mcp`: the seed); on the agent's machine
    evolve_submit keeps each child as pending and says how it gets evaluated, and evolve_next says the same
    once the generation is handed out; `attnq evolve --run NAME` on the host evaluates every waiting child in
    one batch; then evolve_next hands out generation 2. The host's evaluator is the compile-facts one here (no
    GPU in CI), switched to the GPU harness for the agent's phase so that this machine refuses as one without
    a GPU does (no_gpu)."""
    from attnq.cli import main
    from evolve.db import EvolveDB

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU: the harness evaluator must refuse here")
    monkeypatch.setenv("ATTNQ_STATE", str(workspace / "state"))
    monkeypatch.chdir(workspace)
    assert main(["evolve", "--from", "seed.cu", "--mutator", "mcp", "--run", "off", "--goal", "9"]) == 0  # the host: the seed
    _set_evaluator(workspace, "off", "harness")

    subs, waiting = _submit_offline(workspace, "off", EDITS)
    assert len(subs) == 2
    for nxt, res in subs:
        assert nxt["state"] == "ready" and nxt["generation"] == 1, nxt
        text = res.content[0].text
        assert res.is_error and "[no_gpu]" in text and "wait for an evaluation" in text, text
        assert "`attnq evolve --run off`" in text
    assert waiting["state"] == "waiting" and "attnq evolve --run off" in waiting["message"], waiting
    with EvolveDB.for_state_dir(workspace / "state") as db:
        kids = [p for p in db.programs("off") if p.parent_id is not None]
        assert len(kids) == 2 and {p.status for p in kids} == {"pending"} and all(p.stage is None for p in kids)

    _set_evaluator(workspace, "off", "compile_facts")  # back on the host
    assert main(["evolve", "--run", "off"]) == 0
    with EvolveDB.for_state_dir(workspace / "state") as db:
        kids = [p for p in db.programs("off") if p.parent_id is not None]
        assert {p.status for p in kids} == {"correct"} and all(p.fitness_quick for p in kids)
        assert any(p.improvement and p.improvement > 0 for p in kids)  # TILE 4096 is faster in this evaluator

    nxt = _next_on_a_fresh_server(workspace, "off")
    assert nxt["state"] == "ready" and nxt["generation"] == 2, nxt


def test_a_running_server_reads_the_budget_the_host_raised(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One long-lived `attnq serve` across the host's work: the host starts an mcp run whose evaluation budget the
    seed spends, the agent hears the run is over, the host raises the budget (`attnq evolve --run NAME
    --max-evals 20`); the same server then hands out a mutation instead of ending the run on its first copy of
    the budget."""
    from attnq.cli import main
    from evolve.db import EvolveDB

    monkeypatch.setenv("ATTNQ_STATE", str(workspace / "state"))
    monkeypatch.chdir(workspace)
    assert main(["evolve", "--from", "seed.cu", "--mutator", "mcp", "--run", "b", "--goal", "9", "--max-evals", "2"]) == 0
    server = build_server(_settings(workspace))

    async def agent() -> tuple[dict[str, Any], dict[str, Any]]:
        async with Client(server) as c:
            over = await _call(c, "evolve_next", run="b")
            assert main(["evolve", "--run", "b", "--max-evals", "20"]) == 0  # the host, meanwhile
            return over, await _call(c, "evolve_next", run="b")

    over, nxt = anyio.run(agent)
    server.attnq_state.close()  # type: ignore[attr-defined]
    assert over["state"] == "finished" and "evaluation budget spent (2 of 2)" in over["message"], over
    assert "`attnq evolve export --run b -o best.cu`" in over["message"]  # this run's best, not the latest run's
    assert nxt["state"] == "ready" and nxt["generation"] == 1, nxt
    with EvolveDB.for_state_dir(workspace / "state") as db:
        assert db.run("b").state == "running"


def test_the_host_command_with_a_mistyped_run_name_names_the_known_runs(
        workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`attnq evolve --run NAME` with a name no run has: exit 2, one line naming the name and the runs there are
    (it asked for a seed program before, as if the user had meant to start a run), and no run is created."""
    from attnq.cli import main
    from evolve.db import EvolveDB

    monkeypatch.setenv("ATTNQ_STATE", str(workspace / "state"))
    monkeypatch.chdir(workspace)
    assert main(["evolve", "--from", "seed.cu", "--mutator", "mcp", "--run", "off", "--goal", "9"]) == 0
    capsys.readouterr()
    assert main(["evolve", "--run", "of"]) == 2
    err = capsys.readouterr().err
    assert "no evolve run 'of' to resume (known runs: off)" in err and "--run of --from FILE" in err, err
    with EvolveDB.for_state_dir(workspace / "state") as db:
        assert [r.run_id for r in db.runs()] == ["off"]


def test_children_that_wait_on_a_spent_budget_say_how_to_raise_it(
        workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The offline loop with an evaluation budget the batch outruns: the host's batch leaves the children pending
    and says which budget stopped them and how to raise it; the agent's evolve_next says the same instead of
    sending it back to the plain `attnq evolve --run NAME`, which would evaluate nothing."""
    from attnq.cli import main

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU: the harness evaluator must refuse here")
    monkeypatch.setenv("ATTNQ_STATE", str(workspace / "state"))
    monkeypatch.chdir(workspace)
    assert main(["evolve", "--from", "seed.cu", "--mutator", "mcp", "--run", "b", "--goal", "9", "--max-evals", "3"]) == 0
    _set_evaluator(workspace, "b", "harness")

    subs, _ = _submit_offline(workspace, "b", EDITS)
    assert len(subs) == 2 and all(res.is_error and "[no_gpu]" in res.content[0].text for _, res in subs)
    _set_evaluator(workspace, "b", "compile_facts")
    capsys.readouterr()
    assert main(["evolve", "--run", "b"]) == 0  # the seed took 2 of the 3 evaluations: one quick stage is left
    err = capsys.readouterr().err
    assert "still wait: evaluation budget spent (3 of 3)" in err and "`attnq evolve --run b --max-evals N`" in err, err

    waiting = _next_on_a_fresh_server(workspace, "b")
    assert waiting["state"] == "waiting", waiting
    assert "(pending): evaluation budget spent (3 of 3), so on a machine" in waiting["message"], waiting
    assert "`attnq evolve --run b --max-evals N`" in waiting["message"], waiting


def test_an_agent_without_a_gpu_is_told_where_the_run_starts(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """evolve_next(seed_path=...) on a machine without a GPU cannot start a run (the seed needs the GPU): the error
    says how the offline loop starts instead (on the GPU host, `attnq evolve --mutator mcp --from SEED --run NAME`)
    and no run is created."""
    from evolve.db import EvolveDB

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU: the harness evaluator must refuse here")
    server = build_server(_settings(workspace))

    async def main() -> str:
        async with Client(server) as c:
            res = await c.call_tool("evolve_next", {"seed_path": "seed.cu"})
            assert res.is_error
            return res.content[0].text  # type: ignore[union-attr]

    monkeypatch.delenv("ATTNQ_EVOLVE_EVALUATOR")  # the fixture's compile-facts evaluator needs no GPU; the default does
    text = anyio.run(main)
    server.attnq_state.close()  # type: ignore[attr-defined]
    assert "[no_gpu]" in text and "`attnq evolve --mutator mcp --from seed.cu --run NAME`" in text, text
    assert "evolve_next(run=NAME)" in text
    with EvolveDB.for_state_dir(workspace / "state") as db:
        assert db.runs() == []
