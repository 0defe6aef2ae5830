"""The verification worker: the only code that loads a candidate library.

Run as ``python -m harness.worker --fd N``: reads a :class:`WorkerJob` (JSON) on stdin, writes JSON
lines on file descriptor N (``hello``, ``start``, ``result``, ``fatal``, ``done``). The parent
(harness/verify.py) enforces timeouts and restarts the worker after a crash.

Isolation (why the candidate never sees an expected answer): per scenario and draw, the candidate's
calls all run BEFORE the fp32 reference and the original kernel's output exist; both are computed
afterwards from a private copy of the inputs, compared, overwritten and freed before the
candidate's code runs again. During timing the candidate always runs first within a sample, and the
original's previous output is poisoned before the candidate's next call. Outputs are poisoned before
every call, so memory the allocator hands back can never pass for a result.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from harness.anchors import AnchorName, check_worker_anchors, fa3_runner
from harness.buffers import Buffers
from harness.memory import worker_refusal
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
    anchors: list[AnchorName] = []
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
#: The same spin before the candidate's and the original's timed calls too, when ATTNQ_HOST_COVER_ALL=1: an
#: experiment (scripts/gpu_run.sh step aa_cover, an A/A run) on whether covering every kernel's host path is
#: fairer than covering only the anchors'. Off by default until that run says so.
KERNEL_HOST_COVER_CYCLES = ANCHOR_HOST_COVER_CYCLES if os.environ.get("ATTNQ_HOST_COVER_ALL") == "1" else 0


class _Fatal(Exception):
    """A CUDA error that leaves the context unusable: report and exit so the parent restarts us."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Fail(Exception):
    """A scenario failure found by a named check (the context stays usable)."""

    def __init__(self, kind: str, check: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.check = kind, check


_FATAL_MARKERS = {
    "illegal memory access": "illegal_memory_access",
    "misaligned address": "illegal_memory_access",
    "illegal address": "illegal_memory_access",
    "unspecified launch failure": "crash",
    "illegal instruction": "crash",
    "launch timed out": "timeout",
    "device-side assert": "crash",
    "hardware stack error": "crash",
}


class Runner:
    """Holds the CUDA state of one worker: libraries, buffers, events, the runtime's error API."""

    def __init__(self, job: WorkerJob) -> None:
        import torch

        from harness.abi import load_kernel

        self.torch = torch
        self.job = job
        self.phases = PhaseTimes()
        torch.cuda.set_device(job.gpu)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.props = torch.cuda.get_device_properties(job.gpu)
        self.num_sms = self.props.multi_processor_count
        # bind the run to the exact builds the parent compiled and named in the verdict
        for path, want in ((job.original_lib, job.original_sha256), (job.candidate_lib, job.candidate_sha256)):
            got = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            if want and got != want:
                raise RuntimeError(f"{path} changed since it was compiled (sha256 {got[:12]}, expected {want[:12]})")
        self.orig = load_kernel(job.original_lib)
        self.cand = load_kernel(job.candidate_lib)
        self.cudart = _cdll_or_none("libcudart.so.13")  # the runtime the candidate was linked against
        if self.cudart is not None:
            self.cudart.cudaGetLastError.restype = ctypes.c_int
            self.cudart.cudaGetErrorString.restype = ctypes.c_char_p
        l2 = getattr(self.props, "L2_cache_size", 60 << 20) or (60 << 20)
        self.flush_buf = torch.empty(max(4 * l2, 256 << 20), dtype=torch.uint8, device="cuda")

    # -- calls ---------------------------------------------------------------------------------
    def sync(self) -> None:
        """Device-wide synchronize; a sticky CUDA error becomes :class:`_Fatal`."""
        try:
            self.torch.cuda.synchronize()
        except RuntimeError as exc:  # torch raises on a sticky error
            msg = str(exc).splitlines()[0]
            kind = next((k for m, k in _FATAL_MARKERS.items() if m in msg.lower()), "crash")
            raise _Fatal(kind, msg) from None

    def last_error(self) -> str | None:
        """The runtime's last launch error (cleared), or None."""
        if self.cudart is None:
            return None
        code = self.cudart.cudaGetLastError()
        return None if code == 0 else f"{self.cudart.cudaGetErrorString(code).decode()} (cudaError {code})"

    def call(self, lib: Any, params: Any, who: str) -> None:
        """Call ``attn_fwd`` on the legacy default stream; raise _Fail on unsupported / launch error."""
        status = lib.fwd(params, 0)
        err = self.last_error()
        if status != 0:
            raise _Fail("unsupported", "launch_status", f"{who} attn_fwd returned {status} (unsupported configuration)")
        if err:
            raise _Fail("launch_error", "launch_status", f"{who} launch failed: {err}")

    # -- one scenario ----------------------------------------------------------------------------
    def run(self, sc: Scenario, index: int) -> ScenarioResult:
        torch = self.torch
        base = ScenarioResult(id=sc.id, group=sc.group, flops=sc.flops, correct=False)
        dtype = torch.bfloat16 if sc.dtype == "bf16" else torch.float16
        gen = torch.Generator(device="cuda")
        gen.manual_seed((self.job.seed * 1_000_003 + index) % (1 << 63))
        too_big = worker_refusal(torch, sc, self.job.gpu)  # the memory guard, before any allocation
        if too_big:
            base.failure_kind, base.check, base.message = "out_of_memory", "memory_guard", too_big
            return base
        bufs = Buffers(torch, sc, dtype)
        base.phases = self.phases = PhaseTimes()
        try:
            t0 = time.perf_counter()
            try:
                stats, tol = self._check(sc, bufs, gen)
            finally:  # a failed scenario's time is accounted too
                self.phases.check_s = round(time.perf_counter() - t0, 4)
            base.errors = stats
            t1 = time.perf_counter()
            try:
                timing = self._time(sc, bufs, gen, tol)
            finally:
                self.phases.timing_s = round(time.perf_counter() - t1, 4)
        except _Fail as f:
            base.failure_kind, base.check, base.message = f.kind, f.check, str(f)  # type: ignore[assignment]
            return base
        finally:
            bufs.scrub()
        cand_t, orig_t, anchors, escaped = timing
        base.candidate, base.original, base.anchors = cand_t, orig_t, anchors
        base.speedup = orig_t.median_ms / cand_t.median_ms
        base.tflops = sc.flops / (cand_t.median_ms * 1e-3) / 1e12
        if self.job.peak_tflops:
            base.fraction_of_peak = base.tflops / self.job.peak_tflops
        base.vs_anchor = {k: t.median_ms / cand_t.median_ms for k, t in anchors.items() if t is not None}
        base.correct = True
        if escaped:
            base.message = escaped
        phys = self.job.physical_peak_tflops
        if phys and base.tflops > phys:
            base.correct = False
            base.failure_kind, base.check = "impossible_speed", "physical_peak"
            base.message = f"{base.tflops:.0f} TFLOP/s is above the physical peak {phys:.0f} TFLOP/s: the timing was escaped"
        return base

    def _params(self, lib_out: tuple[Any, Any], bufs: Buffers, sc: Scenario, lib: Any) -> Any:
        from harness.abi import make_params

        o, lse = lib_out
        p = make_params(bufs.q, bufs.k, bufs.v, o, lse, softmax_scale=bufs.scale, causal=sc.causal,
                        num_sms=self.num_sms)
        nbytes = lib.workspace_bytes(p)
        if nbytes:
            ws = bufs.workspace(lib, nbytes)
            p.workspace, p.workspace_bytes = ws.data_ptr(), nbytes
        return p

    def _check(self, sc: Scenario, bufs: Buffers, gen: Any) -> tuple[ErrorStats, tuple[float, float]]:
        """Correctness over ``draws`` fresh input draws. Returns worst errors and the draw-0 tolerances."""
        from harness.checks import bits_equal, count_poison, error_report, judge, poison_, timed_bound_o, tolerances
        from harness.exactness import exactness_failure
        from harness.reference import attention_reference

        torch = self.torch
        worst: ErrorStats | None = None
        tol0 = (0.0, 0.0)
        for draw in range(self.job.draws):
            kind = ("normal", "large_logits", "shifted")[draw % 3]
            # draw 0: contiguous q/o and the default scale; later draws: q and o with a padded head
            # stride (the ABI's strides must be honoured) and a softmax_scale drawn in [0.5, 1.5] x default
            bufs.set_layout(strided=draw > 0, scale_factor=1.0 if draw == 0 else 0.5 + float(
                torch.rand((), generator=gen, device=gen.device).item()))
            bufs.fill_inputs(gen, kind)
            q0, k0, v0 = bufs.q.clone(), bufs.k.clone(), bufs.v.clone()
            o_c, lse_c = poison_(bufs.o_c), poison_(bufs.lse_c)
            self.call(self.cand, self._params((o_c, lse_c), bufs, sc, self.cand), "candidate")
            self.sync()
            for rep in range(1, sc.repeats if draw == 0 else 1):  # determinism: sc.repeats calls, same bits
                o2, l2 = poison_(torch.empty_like(o_c)), poison_(torch.empty_like(lse_c))
                self.call(self.cand, self._params((o2, l2), bufs, sc, self.cand), "candidate")
                self.sync()
                if not (bits_equal(o2, o_c) and bits_equal(l2, lse_c)):
                    d = (o2.float() - o_c.float()).abs().nan_to_num(0).max().item()
                    raise _Fail("nondeterministic", "determinism",
                                f"call {rep + 1} of {sc.repeats} on the same inputs differs from the first (max |diff| "
                                f"{d:.3g}): a race (missing barrier?)")
                del o2, l2
            if not (bits_equal(bufs.q, q0) and bits_equal(bufs.k, k0) and bits_equal(bufs.v, v0)):
                raise _Fail("inputs_modified", "input_integrity", "q, k or v changed during the call")
            broken = bufs.guards_intact()
            if broken:
                raise _Fail("out_of_bounds_write", "guard_bands", f"out-of-bounds write: {broken}")
            unwritten = count_poison(o_c) + count_poison(lse_c)
            if unwritten:
                raise _Fail("unwritten_output", "poisoned_output",
                            f"{unwritten} elements of o/lse were never written (poison left, draw {draw})")
            # Expected answers exist only from here on, after the candidate's calls for this draw.
            t_ref = time.perf_counter()
            o_ref, lse_ref = attention_reference(q0, k0, v0, softmax_scale=bufs.scale, causal=sc.causal)
            o_o, lse_o = poison_(torch.empty_like(o_c)), poison_(torch.empty_like(lse_c))
            self.call(self.orig, self._params((o_o, lse_o), bufs, sc, self.orig), "original")
            self.sync()
            rep_o = error_report(o_o, lse_o, o_ref, lse_ref)
            rep_c = error_report(o_c, lse_c, o_ref, lse_ref)
            inexact = exactness_failure(o_c, v0, causal=sc.causal)  # judged after the reference checks
            tol_o, tol_lse = tolerances(rep_o, o_ref, lse_ref)
            for t in (o_ref, lse_ref, o_o, lse_o):
                t.zero_()
            del o_ref, lse_ref, o_o, lse_o, q0, k0, v0
            self.phases.reference_s = round(self.phases.reference_s + time.perf_counter() - t_ref, 4)
            stats = ErrorStats(max_abs_err_o=rep_c.max_abs_err_o, max_abs_err_lse=rep_c.max_abs_err_lse,
                               rel_err_o=rep_c.rel_err_o, tol_o=tol_o, tol_lse=tol_lse,
                               original_max_abs_err_o=rep_o.max_abs_err_o, original_max_abs_err_lse=rep_o.max_abs_err_lse)
            if rep_o.nonfinite or rep_o.lse_inf_mismatch:  # pragma: no cover - the original is verified
                raise _Fail("wrong_output", "reference_tolerance", f"the ORIGINAL kernel failed on draw {draw} ({kind})")
            bad = judge(rep_c, tol_o, tol_lse, bufs.dtype)
            what = f"{kind} inputs" if sc.inputs is None else f"the scenario's inputs, {kind} for the others"
            if bad:
                raise _Fail(bad[0], bad[1], f"{bad[2]} [draw {draw}: {what}]")
            if inexact:
                raise _Fail("wrong_output", "exactness", f"{inexact} [draw {draw}: {what}]")
            if draw == 0:
                max_o = float(o_c.float().abs().nan_to_num(0).max().item()) if o_c.numel() else 0.0
                tol0 = (timed_bound_o(tol_o, rep_o.max_abs_err_o, max(2 * max_o, 1.0), bufs.dtype),
                        tol_lse + rep_o.max_abs_err_lse)
            if worst is None or stats.max_abs_err_o / max(tol_o, 1e-30) > worst.max_abs_err_o / max(worst.tol_o, 1e-30):
                worst = stats
        assert worst is not None
        bufs.set_layout(strided=False, scale_factor=1.0)  # timing: the benchmark's contiguous layout
        return worst, tol0

    def _timed(self, fn: Any, host_cover_cycles: int = 0) -> tuple[float, float]:
        """(event ms, host wall ms) of one call; events on the legacy default stream, L2 flushed first.

        The flush (~0.1 ms of GPU work) keeps the GPU busy while the host enqueues the call, so host time
        does not count as kernel time; ``host_cover_cycles`` adds a GPU spin (``torch.cuda._sleep``) for
        callers whose host path is longer than that (torch SDPA's Python and cuDNN dispatch: the anchors).
        """
        torch = self.torch
        self.sync()  # input regeneration and poisoning finish first: the wall clock starts from an idle GPU
        self.flush_buf.zero_()  # evicts L2 and keeps the GPU busy while the host enqueues the call
        if host_cover_cycles:
            torch.cuda._sleep(host_cover_cycles)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        fn()
        end.record()
        self.sync()
        wall_ms = (time.perf_counter() - t0) * 1e3
        return start.elapsed_time(end), wall_ms

    def _time(self, sc: Scenario, bufs: Buffers, gen: Any, tol: tuple[float, float]):
        """A/B timing on fresh inputs per sample; after every timed candidate call the inputs must be
        unchanged, and its output is checked against the original's on the same inputs (bound: see
        harness.checks.timed_bound_o). A sample's checks run on the GPU and come back in one transfer
        (harness.checks.timed_sample_values); they are judged in the order input_integrity, unwritten
        output, guard_bands, lse +inf rows, output bounds. Sampling stops at ``max_samples``, or once
        ``min_samples`` are taken and the loop's host wall time exceeds ``budget_ms``."""
        from harness.checks import (
            bits_equal_t,
            judge_timed_sample,
            poison_,
            timed_sample_values,
        )

        torch = self.torch
        o_o, lse_o = torch.empty_like(bufs.o_c), torch.empty_like(bufs.lse_c)
        p_o = self._params((o_o, lse_o), bufs, sc, self.orig)
        anchors = {name: fa3_runner(torch, sc.causal, bufs.q, bufs.k, bufs.v, bufs.scale) if name == "fa3"
                   else _sdpa_runner(torch, sc, bufs, name) for name in self.job.anchors}
        t_c: list[float] = []
        t_o: list[float] = []
        w_c: list[float] = []
        w_o: list[float] = []
        t_a: dict[str, list[float]] = {k: [] for k, fn in anchors.items() if fn is not None}
        gpu_ms = 0.0
        n = 0
        t_loop = time.perf_counter()
        while n < self.job.max_samples and (
                n < self.job.min_samples or (time.perf_counter() - t_loop) * 1e3 < self.job.budget_ms):
            bufs.fill_inputs(gen, "normal")  # fresh inputs for every timed call
            snapshot = [t.clone() for t in (bufs.q, bufs.k, bufs.v)]
            poison_(bufs.o_c), poison_(bufs.lse_c), poison_(o_o), poison_(lse_o)
            # built per call, as for the checked calls: a timed call looks like any other to the candidate
            p_c = self._params((bufs.o_c, bufs.lse_c), bufs, sc, self.cand)
            ec, wc = self._timed(functools.partial(self.call, self.cand, p_c, "candidate"), KERNEL_HOST_COVER_CYCLES)
            # input integrity: compared on the GPU now, before the original runs; read back with the rest
            inputs_same = torch.stack([bits_equal_t(a, b) for a, b in zip(snapshot, (bufs.q, bufs.k, bufs.v),
                                                                          strict=True)]).all()
            del snapshot
            eo, wo = self._timed(lambda: self.call(self.orig, p_o, "original"), KERNEL_HOST_COVER_CYCLES)
            for name, fn in anchors.items():
                if fn is not None:
                    t_a[name].append(self._timed(fn, ANCHOR_HOST_COVER_CYCLES)[0])
                    gpu_ms += t_a[name][-1]
            values = timed_sample_values(inputs_same, bufs.o_c, bufs.lse_c, o_o, lse_o, bufs.guards_written())
            bad = judge_timed_sample(values.tolist(), n, tol, bufs.guard_names)  # the sample's one transfer
            if bad:
                raise _Fail(*bad)
            t_c.append(ec), t_o.append(eo), w_c.append(wc), w_o.append(wo)
            gpu_ms += ec + eo
            self.phases.timed_gpu_s = round(gpu_ms / 1e3, 4)
            n += 1
        o_o.zero_()
        escaped = None
        over_c = statistics.median(w - e for w, e in zip(w_c, t_c, strict=True))
        over_o = statistics.median(w - e for w, e in zip(w_o, t_o, strict=True))
        if over_c > over_o + max(0.05, 0.25 * statistics.median(t_c)):
            # work finished after the end event (another stream): count the host-observed time instead
            t_c = [w - over_o for w in w_c]
            escaped = (f"stream_timing: work outlived the end event by {over_c - over_o:.3f} ms per call "
                       "(launched on another stream?); host wall-clock time used")
        anchor_stats: dict[str, TimingStats | None] = {k: (_stats(t_a[k]) if k in t_a else None) for k in anchors}
        return _stats(t_c), _stats(t_o), anchor_stats, escaped


def _stats(times: list[float]) -> TimingStats:
    qs = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    return TimingStats(median_ms=statistics.median(times), iqr_ms=qs[2] - qs[0], samples=len(times))


def _sdpa_runner(torch: Any, sc: Scenario, bufs: Buffers, backend: str) -> Any:
    """A zero-arg callable running torch SDPA with one backend on the scenario's buffers, or None when
    that backend does not support the scenario (tried once)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    q, k, v = (t.transpose(1, 2) for t in (bufs.q, bufs.k, bufs.v))
    kwargs: dict[str, Any] = {"scale": bufs.scale}
    if sc.num_heads_q != sc.num_heads_kv:
        kwargs["enable_gqa"] = True
    if sc.causal:
        if sc.seqlen_q == sc.seqlen_k:
            kwargs["is_causal"] = True
        else:
            from torch.nn.attention.bias import causal_lower_right

            kwargs["attn_mask"] = causal_lower_right(sc.seqlen_q, sc.seqlen_k)

    def run() -> None:
        with sdpa_kernel(be):
            F.scaled_dot_product_attention(q, k, v, **kwargs)

    try:
        run()
        torch.cuda.synchronize()
    except RuntimeError:
        return None
    return run


def _cdll_or_none(name: str) -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


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

        check_worker_anchors(job.anchors)  # fa3: importable in this process too (after torch)

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
