"""Long-call mechanics: a verification longer than the call budget becomes a job; polling returns partial
results; progress notifications keep coming (heartbeats) and strictly increase; cancelling stops the
worker; a finished verdict stays fetchable.

The runner here is a real function with verify_kernel's calling convention (progress callback with
VerifyProgress, a threading.Event for cancel) that paces real ScenarioResults — the only way to have
a verification that takes seconds on a machine without a GPU.
"""

from __future__ import annotations

import itertools
import shutil
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp.client import Client

from harness.config import Settings
from harness.errors import NoGpuError
from harness.verdict import ScenarioResult, Verdict
from harness.verify import VerifyProgress
from mcp_server.jobs import JobManager, Limits
from mcp_server.server import build_server

IDS = [f"s{i}" for i in range(6)]
TINY = Path(__file__).resolve().parent / "data" / "mcp" / "tiny_kernel.cu"


def paced_runner(step_s: float, ids: list[str] = IDS, *, silent_s: float = 0.0,  # type: ignore[no-untyped-def]
                 fail_every: int = 0):
    """verify_kernel-shaped runner: one ScenarioResult every ``step_s``, then a Verdict; honours cancel."""

    def run(progress, cancel: threading.Event) -> Verdict:  # type: ignore[no-untyped-def]
        results: list[ScenarioResult] = []
        if silent_s and cancel.wait(silent_s):  # a long phase with no progress at all (heartbeats only)
            pass
        for i, sid in enumerate(ids):
            if cancel.wait(step_s):
                break
            bad = bool(fail_every) and i % fail_every == 0
            res = (ScenarioResult(id=sid, group="g", flops=1e9, correct=False, failure_kind="wrong_output")
                   if bad else ScenarioResult(id=sid, group="g", flops=1e9, correct=True, speedup=1.0 + i / 10))
            results.append(res)
            progress(VerifyProgress(done=i + 1, total=len(ids), scenario_id=sid, message="checked and timed",
                                    result=res))
        ended = "cancelled" if cancel.is_set() else None
        return Verdict(kernel="k.cu", source_sha256="0" * 64, build_hash="1" * 64, original_sha256="2" * 64,
                       suite="quick", status="correct", num_scenarios=len(ids),
                       num_correct=sum(r.correct for r in results), failed=[r.id for r in results if not r.correct],
                       worst=[r.id for r in sorted((r for r in results if r.correct), key=lambda r: r.speedup)],
                       message=ended, scenarios=results)

    return run


def test_job_answers_before_the_budget_and_finishes_later() -> None:
    jobs = JobManager(Limits(inline_s=0.3, heartbeat_s=0.1, poll_s=0.02))
    job = jobs.start("k.cu", "quick", paced_runner(0.12))
    calls: list[list[tuple[float, float | None, str]]] = [[], []]

    def sink(n: int):  # type: ignore[no-untyped-def]
        async def send(value: float, total: float | None, message: str) -> None:
            calls[n].append((value, total, message))

        return send

    async def main() -> tuple[bool, bool]:
        first = await jobs.wait(job, 0.3, sink(0))
        partial = job.status()
        assert partial.state == "running" and 0 < len(partial.results) < len(IDS)
        assert partial.done == len(partial.results) and partial.total == len(IDS)
        second = await jobs.wait(job, 5.0, sink(1))
        return first, second

    first, second = anyio.run(main)
    assert first is False and second is True
    final = job.status()
    assert final.state == "finished" and final.verdict is not None and [r.id for r in final.verdict.scenarios] == IDS
    assert final.results == []  # not twice in the answer
    for sent in calls:  # strictly increasing within one call (the MCP spec's rule for one progress token)
        values = [v for v, _, _ in sent]
        assert values and all(b > a for a, b in itertools.pairwise(values))
    assert any(m.startswith("scenario 6 of 6") for _, _, m in calls[1])
    assert jobs.get(job.job_id) is job  # a finished job stays fetchable


def test_heartbeats_while_nothing_finishes() -> None:
    jobs = JobManager(Limits(heartbeat_s=0.1, poll_s=0.02))
    job = jobs.start("k.cu", "quick", paced_runner(0.01, ids=["only"], silent_s=0.8))
    times: list[float] = []

    async def send(value: float, total: float | None, message: str) -> None:
        times.append(time.monotonic())

    anyio.run(lambda: jobs.wait(job, 5.0, send))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) >= 6 and max(gaps) < 0.35  # no silence longer than ~heartbeat while the run is quiet


def test_client_cancel_sets_the_cancel_event_but_a_poll_does_not() -> None:
    jobs = JobManager(Limits(poll_s=0.02))
    job = jobs.start("k.cu", "quick", paced_runner(0.2))

    async def main() -> None:
        with anyio.move_on_after(0.1):  # a poll cut short: the job goes on
            await jobs.wait(job, 5.0, cancel_on_abort=False)
        assert not job.cancel.is_set()
        with anyio.move_on_after(0.1):  # the verify_kernel call itself cancelled by the client
            await jobs.wait(job, 5.0, cancel_on_abort=True)
        assert job.cancel.is_set()
        await jobs.wait(job, 5.0)

    anyio.run(main)
    st = job.status()
    assert st.state == "cancelled" and st.verdict is not None and len(st.verdict.scenarios) < len(IDS)


def test_failed_job_keeps_the_error() -> None:
    def no_gpu(progress, cancel):  # type: ignore[no-untyped-def]
        raise NoGpuError("verification needs an NVIDIA GPU")

    jobs = JobManager()
    job = jobs.start("k.cu", "quick", no_gpu)
    assert anyio.run(lambda: jobs.wait(job, 5.0)) is True
    st = job.status()
    assert st.state == "failed" and st.error == {"error": "no_gpu", "message": "verification needs an NVIDIA GPU"}


def test_poll_and_cancel_over_mcp(tmp_path: Path) -> None:
    server = build_server(Settings(workspace=tmp_path), limits=Limits(inline_s=0.4, heartbeat_s=0.1, poll_s=0.02))
    jobs = server.attnq_state.jobs  # type: ignore[attr-defined]
    slow = jobs.start("k.cu", "quick", paced_runner(0.15))
    stuck = jobs.start("k2.cu", "quick", paced_runner(10.0))

    async def main():  # type: ignore[no-untyped-def]
        progress: list[float] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        async with Client(server) as c:
            early = await c.call_tool("get_verification", {"job_id": slow.job_id, "wait_s": 0.2},
                                      progress_callback=on_progress)
            done = early
            for _ in range(40):
                done = await c.call_tool("get_verification", {"job_id": slow.job_id, "wait_s": 5})
                if done.structured_content["state"] != "running":
                    break
            cancel = await c.call_tool("cancel_verification", {"job_id": stuck.job_id})
            after = await c.call_tool("get_verification", {"job_id": stuck.job_id, "wait_s": 0})
            again = await c.call_tool("cancel_verification", {"job_id": slow.job_id})
        return early, done, cancel, after, again, progress

    early, done, cancel, after, again, progress = anyio.run(main)
    e = early.structured_content
    assert e["state"] == "running" and e["job_id"] == slow.job_id and "get_verification" in e["next_step"]
    assert progress, "progress notifications reach the client"
    d = done.structured_content
    assert d["state"] == "finished" and d["verdict"]["num_correct"] == len(IDS)
    assert len(d["verdict"]["scenarios"]) == len(IDS) and d["results"] == []
    assert cancel.structured_content["state"] == "cancelled"
    assert after.structured_content["state"] == "cancelled"
    assert again.structured_content["message"].startswith("already over")


@pytest.mark.parametrize("wait_s", [-1, 46])
def test_poll_wait_is_bounded(tmp_path: Path, wait_s: float) -> None:
    server = build_server(Settings(workspace=tmp_path))

    async def main():  # type: ignore[no-untyped-def]
        async with Client(server) as c:
            return await c.call_tool("get_verification", {"job_id": "x", "wait_s": wait_s})

    assert anyio.run(main).is_error


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_compile_longer_than_the_budget_answers_then_finishes_in_background(tmp_path: Path) -> None:
    src = tmp_path / "slow.cu"
    src.write_text(TINY.read_text() + f"// {time.time_ns()}\n")  # never in any cache
    server = build_server(Settings(workspace=tmp_path), limits=Limits(inline_s=0.3, heartbeat_s=0.1, poll_s=0.02))

    async def main():  # type: ignore[no-untyped-def]
        async with Client(server) as c:
            first = await c.call_tool("compile_kernel", {"path": "slow.cu"})
            for _ in range(200):
                again = await c.call_tool("compile_kernel", {"path": "slow.cu"})
                if not again.is_error:
                    return first, again
            return first, again

    first, again = anyio.run(main)
    assert first.is_error and "[still_compiling]" in first.content[0].text
    assert not again.is_error, again.content[0].text
    assert again.structured_content["kernels"]
    assert server.attnq_state.compiles == {}  # type: ignore[attr-defined]


def test_big_verdicts_are_summarized_unless_asked_in_full(tmp_path: Path) -> None:
    ids = [f"s{i}" for i in range(60)]
    server = build_server(Settings(workspace=tmp_path))
    job = server.attnq_state.jobs.start("k.cu", "full", paced_runner(0.0, ids, fail_every=7))  # type: ignore[attr-defined]

    async def main():  # type: ignore[no-untyped-def]
        async with Client(server) as c:
            auto = await c.call_tool("get_verification", {"job_id": job.job_id, "wait_s": 10})
            full = await c.call_tool("get_verification", {"job_id": job.job_id, "detail": "full"})
        return auto.structured_content, full.structured_content

    auto, full = anyio.run(main)
    failed = {f"s{i}" for i in range(0, 60, 7)}
    kept = {r["id"] for r in auto["verdict"]["scenarios"]}
    assert failed <= kept and len(kept) == len(failed) + 10 and auto["scenarios_omitted"] == 60 - len(kept)
    assert set(auto["verdict"]["worst"][:10]) <= kept
    assert len(full["verdict"]["scenarios"]) == 60 and full["scenarios_omitted"] == 0
