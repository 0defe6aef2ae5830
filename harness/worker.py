"""The verification worker: the checker process. It never loads the candidate library.

Run as ``python -m harness.worker --fd N``: reads a :class:`WorkerJob` (JSON) on stdin, writes JSON
lines on file descriptor N (``hello``, ``start``, ``result``, ``load_error``, ``fatal``, ``done``). The
parent (harness/verify.py) enforces timeouts and restarts the worker after a crash.

Trust split: the candidate runs in a launcher process (harness/launcher.py, sandboxed: no network, no
writes outside its temp dir, no new processes) that maps only the candidate's buffers (CUDA IPC) and
only launches ``attn_fwd`` on them; the original runs in a launcher of its own, so both are timed the
same way. A second launcher of the candidate (``repeat_process``) shares the calls with the first: each
determinism repeat runs in the one that did not run the call it replays, so no cache of the candidate's can
replay that call's bits. Comparisons, the fp32 reference and the verdict live here (harness/checker.py),
where the candidate's code never runs. Loading each library has its own limit (``load_timeout_s``).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness.anchors import AnchorName, check_worker_anchors
from harness.scenarios import Scenario
from harness.timed_samples import ORIGINAL_SPARSE_MS
from harness.verdict import ScenarioResult


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
    repeats: int = Field(default=4, ge=1, description="determinism repeats after the fresh timed calls, each of an "
                       "earlier call (harness/repeats.py; 4: every drawn layout has a source slot)")
    anchors: list[AnchorName] = []
    gpu: int = 0
    min_samples: int = 10
    max_samples: int = 40
    budget_ms: float = Field(default=300.0, description="host wall time of a scenario's timing loop (all of each "
                             "sample: inputs, checks, flushes, calls, anchors) after which sampling stops, once "
                             "min_samples are taken")
    original_sparse_ms: float = Field(default=ORIGINAL_SPARSE_MS, ge=0, description="the median time of the "
                                      "original's timed calls from which it runs only in the timed samples whose "
                                      "output or time is used (harness.timed_samples.OriginalPlan); 0: in every sample")
    measure_peak: bool = False
    physical_peak_tflops: float | None = None
    peak_tflops: float | None = None
    device: Literal["cuda", "cpu"] = Field(default="cuda", description="cpu: the checker and launchers on the CPU "
                                           "(tests; the libraries are CPU builds of the ABI)")
    entry_guard_lib: str | None = Field(default=None, description="harness/native/entry_guard.c built (harness/guard.py)")
    load_timeout_s: float = Field(default=20.0, gt=0, description="limit for loading each library (its constructors)")
    sandbox: Literal["on", "off"] = "on"
    host_cover_all: bool = Field(default=False, description="the anchors' host-path cover before the candidate's "
                                 "and the original's timed calls too (ATTNQ_HOST_COVER_ALL; harness/host_cover.py)")
    repeat_process: bool = Field(default=True, description="a second candidate launcher: each determinism "
                                 "repeat runs in the launcher that did not run its source (harness/draws.py split)")
    stream_escape_check: Literal["wall", "tail"] = Field(default="tail", description="how work after the end event "
                                                         "is found (harness/timing_escape.py; ATTNQ_STREAM_ESCAPE_CHECK)")
    diag_order: Literal["candidate_first", "original_first", "alternate"] = Field(
        default="candidate_first", description="diagnostic: which timed call comes first in a sample (ATTNQ_DIAG_ORDER)")
    diag_timing_log: str | None = Field(default=None, description="diagnostic: per-sample timings appended here, one "
                                        "JSON line per scenario (ATTNQ_DIAG_TIMING_LOG)")
    diag_profile: str | None = Field(default=None, description="diagnostic: cProfile stats of the scenario loop "
                                     "written here, a text summary at <path>.txt (ATTNQ_DIAG_PROFILE)")


def cudart_path() -> str:
    """The CUDA runtime torch loads (the nvidia-cuda-runtime wheel's, found without importing torch), so the
    launchers and the candidate use the same one; else the soname."""
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13/lib", "cuda_runtime/lib"):
            path = os.path.join(root, sub, "libcudart.so.13")
            if os.path.isfile(path):
                return path
    return "libcudart.so.13"


def spawn_launchers(job: WorkerJob) -> tuple[Any, Any, Any, Any]:
    """Start the original's and the candidate's launchers (not waiting: their start overlaps the worker's
    torch import) and the checker's arenas. Returns ``(cand, orig, arenas, cand_b)``; ``cand_b``: the
    candidate's second launcher (the repeats), None without ``job.repeat_process``."""
    from harness.host_cover import host_cover_cycles
    from harness.launch_client import LauncherKernel

    if job.device == "cuda":
        from harness.arena import CudaArenas

        arenas: Any = CudaArenas(None)  # the runtime is bound in finish_endpoints, after torch started CUDA
    else:
        from harness.arena import HostArenas

        arenas = HostArenas()
    common = {"arenas": arenas, "device": job.device, "gpu": job.gpu, "guard": job.entry_guard_lib,
              "cudart": cudart_path() if job.device == "cuda" else "", "sandbox": job.sandbox, "wait": False,
              "host_cover_cycles": host_cover_cycles("kernel", job.host_cover_all)}
    orig = LauncherKernel("original", job.original_lib, job.original_sha256, **common)
    cand = cand_b = None
    try:
        cand = LauncherKernel("candidate", job.candidate_lib, job.candidate_sha256, **common)
        if job.repeat_process:
            cand_b = LauncherKernel("candidate-b", job.candidate_lib, job.candidate_sha256, **common)
    except Exception:
        for k in (orig, cand):
            if k is not None:
                k.close()
        raise
    return cand, orig, arenas, cand_b


def finish_endpoints(job: WorkerJob, cand: Any, orig: Any, arenas: Any, cand_b: Any = None) -> tuple[Any, dict[str, Any]]:
    """Wait for the launchers, load each library within ``job.load_timeout_s``, set up the checker's
    device. Returns ``(dev, info)``; ``info`` describes the candidate's sandbox and the host-path cover of
    each timed call (spin cycles: anchor, candidate, original, as the launchers report them) and holds the
    endpoints ``(cand, orig, cand_b)``. Raises LoadTimeout / LauncherError / KernelFatal (reported as load
    errors); the launchers are closed then."""
    from harness.checker import CudaDevice, HostDevice
    from harness.host_cover import host_cover_cycles

    try:
        if job.device == "cuda":
            import torch

            torch.cuda.set_device(job.gpu)
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            cudart = ctypes.CDLL("libcudart.so.13")
            cudart.cudaGetLastError.restype = ctypes.c_int
            cudart.cudaGetErrorString.restype = ctypes.c_char_p
            arenas.rt = cudart
            dev: Any = CudaDevice(torch, job.gpu, cudart)
        else:
            dev = HostDevice()
        probe = arenas.allocate(4096)
        try:
            orig = _ready_or_weaker(job, orig, arenas, probe)
            cand = _ready_or_weaker(job, cand, arenas, probe)
            if cand_b is not None:
                cand_b = _ready_or_weaker(job, cand_b, arenas, probe)
        finally:
            arenas.free(probe)
        orig.load(job.load_timeout_s)
        refused = cand.load(job.load_timeout_s)
        if cand_b is not None:
            refused = refused or cand_b.load(job.load_timeout_s)
        if refused:
            from harness.endpoints import describe_refused
            from harness.launch_client import LauncherError

            raise LauncherError(f"the candidate {describe_refused(refused)} while loading")
    except Exception:
        for k in (cand, orig, cand_b):
            if k is not None:
                k.close()
        raise
    sandbox = dict(cand.sandbox)
    if cand_b is not None and cand_b.sandbox.get("mode") != sandbox.get("mode"):
        weaker = f"the repeat process runs in sandbox mode {cand_b.sandbox.get('mode')!r}: {cand_b.sandbox.get('warnings')}"
        sandbox["warnings"] = [*sandbox.get("warnings", []), weaker]
    cover = {"anchor": host_cover_cycles("anchor", job.host_cover_all), "candidate": cand.host_cover_cycles,
             "original": orig.host_cover_cycles}
    return dev, {"sandbox": sandbox, "entry_guard": cand.guard, "refused_at_load": list(refused),
                 "host_cover_cycles": cover, "endpoints": (cand, orig, cand_b)}


def _ready_or_weaker(job: WorkerJob, k: Any, arenas: Any, probe: Any) -> Any:
    """``k`` ready, or a new launcher in the next weaker sandbox mode (harness.sandbox.MODES) when the
    checker's memory cannot be mapped under the current one; the report's warnings say so."""
    from harness.launch_client import LauncherKernel, SandboxIpcError
    from harness.sandbox import MODES

    mode = job.sandbox
    while True:
        try:
            k.wait_ready(probe)
            return k
        except SandboxIpcError as exc:
            nxt = MODES[MODES.index(mode) + 1] if mode in MODES[:-1] else None
            if nxt is None:
                raise
            print(f"attnq sandbox warning: {exc}; retrying with sandbox mode {nxt!r}", file=sys.stderr)
            mode = nxt
            k = LauncherKernel(k.name, k.source_lib, k.lib_sha256, arenas=arenas, device=job.device, gpu=job.gpu,
                               guard=job.entry_guard_lib, cudart=k.cudart, sandbox=mode,
                               host_cover_cycles=k.cover_requested, wait=False)


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
    launchers: tuple[Any, ...] = ()
    try:
        job = WorkerJob.model_validate_json(sys.stdin.read())
        launchers = spawn_launchers(job)  # their start overlaps torch's import below
        if job.device == "cpu":
            job.measure_peak = False
            info: dict[str, Any] = {"gpu": "cpu (test run)", "physical_peak_tflops": None, "key": "cpu"}
        else:
            import torch

            check_worker_anchors(job.anchors)  # fa3: importable in this process too (after torch)
            info = _device_info(torch, job.gpu)
        if job.measure_peak:
            torch.cuda.set_device(job.gpu)
            info["peak_tflops"] = _measure_peak_tflops(torch)
        job.peak_tflops = job.peak_tflops or info.get("peak_tflops")
        job.physical_peak_tflops = job.physical_peak_tflops or info["physical_peak_tflops"]
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which maps it
        for k in (launchers[0], launchers[1], launchers[3]) if launchers else ():
            if k is not None:
                k.close()
        send({"type": "load_error", "message": f"{type(exc).__name__}: {exc}"})
        return 4
    # the candidate's process must not be able to read this one's memory (it has no CAP_SYS_PTRACE)
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    send({"type": "hello", **info, "startup_s": round(time.perf_counter() - t_start, 3)})
    from harness.checker import Runner
    from harness.endpoints import KernelFatal

    t_load = time.perf_counter()
    cand, orig, arenas, cand_b = launchers
    try:
        dev, sandbox = finish_endpoints(job, cand, orig, arenas, cand_b)
        cand, orig, cand_b = sandbox.pop("endpoints")
    except Exception as exc:  # noqa: BLE001 - load timeout, refused start, a library that does not load
        send({"type": "load_error", "message": f"{type(exc).__name__}: {exc}",
              "load_s": round(time.perf_counter() - t_load, 3)})
        return 4
    send({"type": "ready", **sandbox, "load_s": round(time.perf_counter() - t_load, 3)})
    for w in sandbox["sandbox"].get("warnings", []):
        print(f"attnq sandbox warning: {w}", file=sys.stderr)
    runner = Runner(job, cand, orig, dev, allocate=arenas.allocate, free=arenas.free, cand_b=cand_b)
    try:
        return _serve(job, runner, send, KernelFatal)
    finally:
        for k in (cand, orig, cand_b):
            if k is not None:
                k.close()


def profile_path(path: str, first_index: int) -> str:
    """Where a worker writes its profile: ``path`` for the worker that starts at scenario 0, ``path.<first_index>``
    for a later one (a verification starts another worker after a fatal error and for each scenario that asks for a
    fresh process; each keeps its own file)."""
    return path if first_index == 0 else f"{path}.{first_index}"


def _write_profile(prof: Any, path: str) -> None:
    """The cProfile stats of the scenario loop to ``path`` (``pstats`` format) and a summary to ``path``.txt: the
    40 functions with the most own time and the 40 with the most cumulative time, seconds of this process's wall
    clock (GPU work shows where the host waits for it: synchronize, ``.item()``, copies). Written before the
    worker says it is done: the parent ends the worker's process group as soon as it reads that. A write that
    fails is reported on stderr; the verification goes on."""
    import io
    import pstats

    try:
        prof.dump_stats(path)
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(40)
        Path(path + ".txt").write_text(out.getvalue())
    except OSError as exc:
        print(f"attnq: the profile could not be written to {path}: {exc}", file=sys.stderr)


def _serve(job: WorkerJob, runner: Any, send: Any, fatal_exc: type) -> int:
    """Run every scenario of the job, one message per result (under cProfile where ``job.diag_profile`` asks:
    the stats are written before "done", and before the worker ends after a fatal error)."""
    prof = None
    if job.diag_profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    try:
        code = _scenarios(job, runner, send, fatal_exc)
    finally:
        if prof is not None:
            prof.disable()
    if prof is not None and job.diag_profile:
        _write_profile(prof, profile_path(job.diag_profile, job.first_index))
    if code == 0:
        send({"type": "done"})
    return code


def _scenarios(job: WorkerJob, runner: Any, send: Any, fatal_exc: type) -> int:
    """The scenario loop of :func:`_serve`: 0 when every scenario has its result, 3 after a fatal error."""
    for offset, sc in enumerate(job.scenarios):
        index = job.first_index + offset
        send({"type": "start", "index": index, "id": sc.id})
        try:
            result = runner.run(sc, index)
        except fatal_exc as f:
            send({"type": "fatal", "index": index, "kind": f.kind, "message": str(f)})
            return 3
        except Exception as exc:  # noqa: BLE001 - a harness-side error in one scenario
            from harness.endpoints import fatal_kind

            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if fatal_kind(msg):
                send({"type": "fatal", "index": index, "kind": fatal_kind(msg), "message": msg})
                return 3
            traceback.print_exc(file=sys.stderr)
            result = ScenarioResult(id=sc.id, group=sc.group, flops=sc.flops, correct=False,
                                    failure_kind="launch_error", check="launch_status",
                                    message=f"{type(exc).__name__}: {msg}")
        send({"type": "result", "index": index, "result": result.model_dump(mode="json")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
