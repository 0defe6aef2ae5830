"""`attnq verify --sanitize TOOL` on CPU: which scenarios are sanitized, how compute-sanitizer's report lines
are attributed to scenarios and turned into the named check `sanitizer`, how a missing tool is refused;
plus the worker batches of fresh_process scenarios. The sanitizer itself needs a GPU (scripts/gpu_run.sh
step `sanitize`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import ToolchainError
from harness.sanitize import (
    BEGIN,
    END,
    SanitizeJob,
    command,
    find_compute_sanitizer,
    findings,
    merge,
    parse_output,
    pick_scenarios,
    run_sanitizer,
    to_sanitize,
)
from harness.scenarios import Scenario, load_suite
from harness.verdict import ScenarioResult
from harness.verify import VerifyOptions, run_order, worker_batch_end

IDS = ["a/one", "a/two", "a/three"]

# Report formats as compute-sanitizer prints them (its manual's examples; racecheck's "analysis" report).
MEMCHECK = """========= COMPUTE-SANITIZER
@@attnq-sanitize begin 0 a/one
@@attnq-sanitize end 0 status=0
@@attnq-sanitize begin 1 a/two
========= Invalid __global__ read of size 16 bytes
=========     at attn_fwd_kernel<__nv_bfloat16, 64>(KernelArgs<__nv_bfloat16>)+0x1a50
=========     by thread (3,0,0) in block (0,1,0)
=========     Address 0x7f0e2c001000 is out of bounds
=========     and is 4096 bytes after the nearest allocation at 0x7f0e2c000000 of size 4096 bytes
=========
========= Invalid __global__ read of size 16 bytes
=========     at attn_fwd_kernel<__nv_bfloat16, 64>(KernelArgs<__nv_bfloat16>)+0x1a50
@@attnq-sanitize end 1 status=0
@@attnq-sanitize begin 2 a/three
@@attnq-sanitize end 2 status=1
========= ERROR SUMMARY: 2 errors
"""

RACECHECK = """========= COMPUTE-SANITIZER
@@attnq-sanitize begin 0 a/one
========= ERROR: Race reported between Write access at 0x6360 in attn.cu:123:kernel(...)
=========     and Read access at 0x1fe0 in attn.cu:63:kernel(...) [1088 hazards]
========= WARNING: Race reported between Write access at 0x10 in attn.cu:9:kernel(...)
=========     and Write access at 0x20 in attn.cu:9:kernel(...) [4 hazards]
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
@@attnq-sanitize end 0 status=0
@@attnq-sanitize begin 1 a/two
========= Uninitialized __global__ memory read of size 4 bytes
@@attnq-sanitize end 1 status=fatal CUDA error: unspecified launch failure
@@attnq-sanitize begin 2 a/three
========= Barrier error detected. Divergent thread(s) in warp
"""


def test_reports_are_attributed_to_the_scenario_between_the_markers() -> None:
    got = parse_output(MEMCHECK, "memcheck", IDS)
    assert [got[i].status for i in IDS] == ["clean", "errors", "clean"]
    assert got["a/two"].errors == 2 and got["a/two"].findings[0] == "========= Invalid __global__ read of size 16 bytes"
    assert got["a/three"].message == "attn_fwd returned 1"
    got = parse_output(RACECHECK, "racecheck", IDS)
    assert (got["a/one"].status, got["a/one"].errors, got["a/one"].warnings) == ("errors", 1, 1)
    assert got["a/two"].status == "errors" and got["a/two"].message.startswith("CUDA error: unspecified launch failure")
    assert got["a/three"].status == "errors" and got["a/three"].errors == 1  # begun, never ended, with a report
    died = f"{BEGIN} 0 a/one\n{END} 0 status=0\n{BEGIN} 1 a/two\n"
    assert parse_output(died, "memcheck", IDS)["a/two"].status == "crashed"  # the process died, nothing reported
    only_warnings = f"{BEGIN} 0 a/one\n========= WARNING: Race reported between ...\n{END} 0 status=0\n"
    assert parse_output(only_warnings, "racecheck", IDS)["a/one"].status == "warnings"
    assert parse_output("========= Invalid __global__ read\n", "memcheck", IDS) == {}  # outside any scenario


def test_whole_output_findings_count_reports_wherever_they_fall() -> None:
    errors, warnings, lines = findings(MEMCHECK + RACECHECK)
    assert (errors, warnings) == (2 + 3, 1) and lines[0].startswith("========= Invalid __global__ read")
    assert not any("SUMMARY" in line or "COMPUTE-SANITIZER" in line for line in lines)


def test_a_sanitized_process_that_cannot_start_leaves_every_scenario_not_run(tmp_path) -> None:
    """The real target process (python -m harness.sanitize) under a stand-in for the tool that only drops the
    tool's options: without a GPU it cannot start, and the run says so instead of reporting clean."""
    tool = tmp_path / "compute-sanitizer"
    tool.write_text("#!/bin/sh\nwhile [ \"$1\" != \"" + sys.executable + "\" ]; do shift; done\nexec \"$@\"\n")
    tool.chmod(0o755)
    job = SanitizeJob(candidate_lib=str(tmp_path / "missing.so"), scenarios=[_sc(), _sc(seqlen_q=7)])
    reports, wall_s, ended = run_sanitizer("memcheck", job, tmp_path, timeout_s=120, exe=str(tool))
    assert ended and "ran no scenario" in ended and "sanitize: cannot start" in ended
    assert [r.status for r in reports.values()] == ["not_run", "not_run"] and wall_s > 0
    assert "sanitize: cannot start" in (tmp_path / "sanitize.log").read_text()


def test_merge_fails_correct_scenarios_with_errors_only() -> None:
    got = parse_output(MEMCHECK, "memcheck", IDS)
    results = [ScenarioResult(id=i, group="a", flops=1.0, correct=True) for i in IDS]
    results.append(ScenarioResult(id="a/four", group="a", flops=1.0, correct=True))
    merge(results, got)
    one, two, _, four = results
    assert one.correct and one.sanitizer.status == "clean" and four.sanitizer is None
    assert not two.correct and (two.failure_kind, two.check) == ("sanitizer_error", "sanitizer")
    assert two.message.startswith("compute-sanitizer memcheck: 2 error reports: Invalid __global__ read of size 16")
    wrong = ScenarioResult(id="a/two", group="a", flops=1.0, correct=False, failure_kind="wrong_output",
                           check="reference_tolerance")
    merge([wrong], got)
    assert wrong.check == "reference_tolerance" and wrong.sanitizer.errors == 2  # the first failure stays


def _sc(**kw) -> Scenario:
    base = {"group": "g", "batch": 1, "seqlen_q": 100, "seqlen_k": 100, "num_heads_q": 2, "num_heads_kv": 2,
            "head_dim": 64, "causal": False}
    return Scenario(**(base | kw))


def test_pick_one_cheap_scenario_per_head_dim_with_several_key_tiles() -> None:
    pool = [_sc(seqlen_q=1, seqlen_k=1), _sc(seqlen_k=128, seqlen_q=128), _sc(seqlen_k=130, seqlen_q=130),
            _sc(head_dim=128, seqlen_q=4096, seqlen_k=4096), _sc(head_dim=128, seqlen_q=65, seqlen_k=65, num_heads_q=4)]
    got = pick_scenarios(pool)
    assert [s.id for s in got] == [pool[2].id, pool[4].id]  # tail tile preferred; the cheaper d128 one
    assert pick_scenarios(pool, limit=1) == [pool[2]]
    bugs = load_suite("bugs").scenarios
    chosen = pick_scenarios(bugs)
    assert len(chosen) == 5 and len({s.head_dim for s in chosen}) == 5 and max(s.flops for s in chosen) < 1e8
    assert to_sanitize(bugs, [bugs[3].id, bugs[1].id], 5) == [bugs[1], bugs[3]]


def test_command_and_a_missing_tool(tmp_path, monkeypatch) -> None:
    cmd = command("/x/compute-sanitizer", "racecheck", tmp_path / "job.json")
    assert cmd[:3] == ["/x/compute-sanitizer", "--tool", "racecheck"] and cmd[-3:] == ["harness.sanitize", "--job",
                                                                                      str(tmp_path / "job.json")]
    tool = tmp_path / "bin" / "compute-sanitizer"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    assert find_compute_sanitizer() == str(tool)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nocuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if Path("/usr/local/cuda/bin/compute-sanitizer").exists() or Path("/opt/cuda/bin/compute-sanitizer").exists():
        pytest.skip("this machine has compute-sanitizer in a standard place")
    with pytest.raises(ToolchainError, match="--sanitize needs NVIDIA's compute-sanitizer"):
        find_compute_sanitizer()


def test_cli_refuses_an_unknown_tool_and_options_default_off() -> None:
    assert VerifyOptions().sanitize is None
    assert VerifyOptions(sanitize="initcheck").sanitize == "initcheck"
    out = subprocess.run([sys.executable, "-m", "attnq", "verify", "kernels/attn_original.cu", "--sanitize", "valgrind"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "invalid choice: 'valgrind'" in out.stderr


def test_fresh_process_scenarios_run_first_and_end_a_worker_batch() -> None:
    a, b, c, d = _sc(seqlen_q=11), _sc(seqlen_q=12, fresh_process=True), _sc(seqlen_q=13), _sc(seqlen_q=14, fresh_process=True)
    order = run_order([a, b, c, d])
    assert order == [b, d, a, c]
    assert worker_batch_end(order, 0) == 1  # b alone: d needs a new process
    assert worker_batch_end(order, 1) == 4  # d is first in its process, a and c follow
    assert worker_batch_end([a, c], 0) == 2


def test_mcp_verify_kernel_takes_a_sanitizer_tool(tmp_path) -> None:
    import anyio
    from mcp.client import Client

    from harness.config import Settings
    from mcp_server.server import build_server
    from tests.test_mcp_errors import call_tools, plain

    server = build_server(Settings(workspace=tmp_path))

    async def tools() -> list:  # type: ignore[type-arg]
        async with Client(server) as client:
            return (await client.list_tools()).tools

    try:
        (verify,) = [t for t in anyio.run(tools) if t.name == "verify_kernel"]
    finally:
        server.attnq_state.close()  # type: ignore[attr-defined]
    prop = verify.input_schema["properties"]["sanitize"]
    assert "compute-sanitizer" in prop["description"] and "off by default" in prop["description"]
    assert {"memcheck", "racecheck", "initcheck", "synccheck"} <= set(json_enum(prop))
    (bad,) = call_tools(tmp_path, [("verify_kernel", {"path": "k.cu", "sanitize": "valgrind"})])
    assert plain(bad).startswith("[invalid_arguments] verify_kernel: sanitize")


def json_enum(schema: dict) -> list:  # type: ignore[type-arg]
    """The enum values of an optional Literal's JSON schema (``anyOf: [{enum}, {type: null}]``)."""
    for part in schema.get("anyOf", [schema]):
        if "enum" in part:
            return part["enum"]
    return []
