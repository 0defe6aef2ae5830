"""The verification worker: the checker process. It never loads the candidate library.

Run as ``python -m harness.worker --fd N``: reads a :class:`WorkerJob` (JSON) on stdin, writes JSON
lines on file descriptor N (``hello``, ``start``, ``result``, ``load_error``, ``fatal``, ``done``). The
parent (harness/verify.py) enforces timeouts and restarts the worker after a crash.

Trust split: the candidate runs in a launcher process (harness/launcher.py, sandboxed: no network, no
writes outside its temp dir, no new processes) that maps only the candidate's buffers (CUDA IPC) and
only launches ``attn_fwd`` on them; the original runs in a second launcher of its own, so both are
timed the same way. Comparisons, the fp32 reference and the verdict live here (harness/checker.py),
where the candidate's code never runs. Loading each library has its own limit (``load_timeout_s``).
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness.buffers import Buffers
from harness.scenarios import Scenario
from harness.verdict import ErrorStats, PhaseTimes, ScenarioResult, TimingStats


class WorkerJob(BaseModel):
    """What the parent sends on stdin."""

    candidate_lib: str
    original_lib: str
    candidate_sha256: str = ""
    original_sha256: str = ""
    scenarios: list[Scenario]
    first_index: int = 0
    seed: int
    draws: int = 2
    anchors: list[Literal["cudnn", "flash"]] = []
    gpu: int = 0
    min_samples: int = 10
    max_samples: int = 40
    budget_ms: float = Field(default=300.0, description="host wall time of a scenario's timing loop (all of each "
                             "sample: inputs, checks, flushes, calls, anchors) after which sampling stops, once "
                             "min_samples are taken")
    measure_peak: bool = False
    physical_peak_tflops: float | None = None
    peak_tflops: float | None = None


#: GPU spin before each timed anchor call (~0.5 ms at 1.98 GHz): torch SDPA's host path (Python, backend
#: selection, cuDNN graph lookup) can outlast the L2 flush, and the idle GPU would count as the anchor's time
#: (seen on the H200: 2x swings of the flash anchor on microsecond-scale scenarios between runs).
ANCHOR_HOST_COVER_CYCLES = 1_000_000


def _measure_peak_tflops(torch: Any) -> float:
    """Dense bf16 matmul TFLOP/s (8192^3, random data, median of 10 after 3 warm-ups)."""
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return 2 * n**3 / (statistics.median(times) * 1e-3) / 1e12


def _device_info(torch: Any, gpu: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(gpu)
    clock_mhz = None
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        clock_mhz = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
    except Exception:  # noqa: BLE001 - NVML is optional
        driver = "unknown"
    clock_mhz = clock_mhz or 1980
    sms = props.multi_processor_count
    physical = sms * 4096 * clock_mhz * 1e6 / 1e12 if props.major == 9 else None
    return {
        "gpu": f"{props.name}, {sms} SMs, cc {props.major}.{props.minor}, driver {driver}, "
               f"max SM clock {clock_mhz} MHz, torch {torch.__version__}",
        "physical_peak_tflops": physical,
        "key": f"{props.name}|{driver}|{sms}",
    }


def main(argv: list[str] | None = None) -> int:
    """Worker entry point. Exit codes: 0 done, 3 fatal CUDA error (context lost), 4 bad job / load."""
    ap = argparse.ArgumentParser(prog="python -m harness.worker")
    ap.add_argument("--fd", type=int, required=True, help="file descriptor for JSON-lines messages")
    args = ap.parse_args(argv)
    chan = os.fdopen(args.fd, "w", buffering=1)

    def send(msg: dict[str, Any]) -> None:
        chan.write(json.dumps(msg) + "\n")
        chan.flush()

    t_start = time.perf_counter()
    try:
        job = WorkerJob.model_validate_json(sys.stdin.read())
        import torch

        info = _device_info(torch, job.gpu)
        if job.measure_peak:
            torch.cuda.set_device(job.gpu)
            info["peak_tflops"] = _measure_peak_tflops(torch)
        job.peak_tflops = job.peak_tflops or info.get("peak_tflops")
        job.physical_peak_tflops = job.physical_peak_tflops or info["physical_peak_tflops"]
        runner = Runner(job)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which maps it
        send({"type": "load_error", "message": f"{type(exc).__name__}: {exc}"})
        return 4
    send({"type": "hello", **info, "startup_s": round(time.perf_counter() - t_start, 3)})
    for offset, sc in enumerate(job.scenarios):
        index = job.first_index + offset
        send({"type": "start", "index": index, "id": sc.id})
        try:
            result = runner.run(sc, index)
        except _Fatal as f:
            send({"type": "fatal", "index": index, "kind": f.kind, "message": str(f)})
            return 3
        except Exception as exc:  # noqa: BLE001 - a harness-side error in one scenario
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            low = msg.lower()
            if any(m in low for m in _FATAL_MARKERS):
                kind = next(k for m, k in _FATAL_MARKERS.items() if m in low)
                send({"type": "fatal", "index": index, "kind": kind, "message": msg})
                return 3
            traceback.print_exc(file=sys.stderr)
            result = ScenarioResult(id=sc.id, group=sc.group, flops=sc.flops, correct=False,
                                    failure_kind="launch_error", check="launch_status",
                                    message=f"{type(exc).__name__}: {msg}")
        send({"type": "result", "index": index, "result": result.model_dump(mode="json")})
    send({"type": "done"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
