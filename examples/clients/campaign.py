#!/usr/bin/env python3
"""A scripted MCP client that runs a short attnq campaign over stdio and prints what it sees.

    python examples/clients/campaign.py [--workspace DIR] [--suite quick] [--server "python -m attnq serve"]

get_task -> compile_kernel(original) -> verify_kernel(suite) (polling get_verification while the
answer is state=running) -> reflect -> declare(done) -> campaign_status. It uses only the official
MCP Python SDK (``mcp.client.Client`` over ``StdioServerParameters``), the way an agent's client
would. On a machine without an NVIDIA GPU the verification answers a plain no_gpu tool error; the
script reports it and carries on. Exit code: 0 when every step answered as the protocol says
(including that error), 1 when a step broke (no answer, a malformed answer, a crash).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from typing import Any

import anyio
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters


def show(title: str, payload: Any) -> None:
    """Print one step: a title line, then the payload (JSON, cut to 40 lines)."""
    text = payload if isinstance(payload, str) else json.dumps(payload, indent=2, default=str)
    lines = text.splitlines()
    print(f"\n== {title}")
    print("\n".join(lines[:40]) + (f"\n... ({len(lines) - 40} more lines)" if len(lines) > 40 else ""))


def outcome(result: Any) -> tuple[bool, Any]:
    """(ok, structured content or the error text) of a CallToolResult."""
    if result.is_error:
        return False, result.content[0].text if result.content else "(no text)"
    return True, result.structured_content


async def progress(value: float, total: float | None, message: str | None) -> None:
    """Progress notifications from long calls (verify_kernel, get_verification, compile_kernel)."""
    print(f"   .. progress {value:.2f}/{total if total is not None else '?'} {message or ''}", flush=True)


async def run(args: argparse.Namespace) -> int:
    argv = shlex.split(args.server)
    if args.workspace:
        argv += ["--workspace", args.workspace]
    # The SDK starts the server with a minimal environment; pass ours so PATH/PYTHONPATH/ATTNQ_* reach it.
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    broken = 0
    async with Client(params, read_timeout_seconds=args.call_timeout_s) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        show("tools/list", tools)

        ok, task = outcome(await client.call_tool("get_task", {}))
        if not ok:
            show("get_task FAILED", task)
            return 1
        show("get_task", {k: task[k] for k in ("workspace", "original_kernel", "default_suite", "goal", "best")}
             | {"suites": [f"{s['name']} ({s['num_scenarios']})" for s in task["suites"]]})

        kernel = args.kernel or task["original_kernel"]
        ok, facts = outcome(await client.call_tool("compile_kernel", {"path": kernel}, progress_callback=progress))
        show("compile_kernel" if ok else "compile_kernel error", facts if not ok else {
            "build_hash": facts["build_hash"][:16], "cache_hit": facts["cache_hit"],
            "compile_time_s": facts["compile_time_s"],
            "kernels": [{k: f[k] for k in ("name", "registers", "shared_mem_bytes", "spill_store_bytes")}
                        | {"sass": f.get("sass")} for f in facts["kernels"]]})
        broken += 0 if ok else 1

        t0 = time.monotonic()
        ok, status = outcome(await client.call_tool("verify_kernel", {"path": kernel, "suite": args.suite},
                                                    progress_callback=progress))
        while ok and status["state"] == "running":
            show(f"verify_kernel running ({status['done']}/{status['total']}, {time.monotonic() - t0:.0f} s)",
                 {"job_id": status["job_id"], "finished": [r["id"] for r in status["results"]]})
            ok, status = outcome(await client.call_tool("get_verification", {"job_id": status["job_id"], "wait_s": 30},
                                                         progress_callback=progress))
        if ok:
            v = status["verdict"] or {}
            show(f"verdict after {time.monotonic() - t0:.0f} s", {
                "state": status["state"], "status": v.get("status"), "correct": f"{v.get('num_correct')}/"
                f"{v.get('num_scenarios')}", "geomean_speedup": v.get("geomean_speedup"), "failed": v.get("failed"),
                "goal": v.get("goal"), "flags": v.get("flags"), "gpu": v.get("gpu"), "question": status["question"]})
        else:
            show("verify_kernel error (expected without an NVIDIA GPU)", status)
            broken += 0 if "[" in str(status) else 1  # a plain "[code] message" is a proper answer

        for name, call_args in (("reflect", {}),
                                ("declare", {"kind": "done", "text": "scripted campaign: the original as is"}),
                                ("campaign_status", {})):
            ok, answer = outcome(await client.call_tool(name, call_args))
            show(name if ok else f"{name} FAILED", answer)
            broken += 0 if ok else 1

        report = await client.read_resource("attnq://campaign/report")
        show("resource attnq://campaign/report", report.contents[0].text)
    print(f"\ncampaign script: {'OK' if not broken else f'{broken} step(s) broke'}")
    return 0 if not broken else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = shlex.join([os.path.abspath(sys.executable), "-m", "attnq", "serve"])  # no PATH lookup needed
    parser.add_argument("--server", default=here, help=f'server command line (default: "{here}")')
    parser.add_argument("--workspace", default=None, help="workspace passed to the server (default: its cwd)")
    parser.add_argument("--kernel", default=None, help="kernel to compile and verify (default: the original)")
    parser.add_argument("--suite", default="quick", help="suite for verify_kernel (default: quick)")
    parser.add_argument("--call-timeout-s", type=float, default=120.0, help="client-side limit per call")
    return anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
