"""`verify_kernel`: compile, then check and time a candidate against the original in a worker process.

The parent never loads the candidate. It spawns ``python -m harness.worker`` (a fresh process with its
own CUDA context), streams progress from it, enforces per-scenario and whole-run timeouts, kills and
restarts the worker after a hang or crash (the verdict names the scenario and the failure kind), and
holds a per-GPU lock so that one verification runs at a time on a GPU, across processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import secrets
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness import ORIGINAL_KERNEL, ORIGINAL_SOURCE_SHA256, REPO_ROOT, child_pythonpath
from harness.anchors import AnchorName, GoalAgainst, require_anchors
from harness.compile import compile_kernel
from harness.config import Settings
from harness.errors import InputError, VerifyError
from harness.gpu import require_gpu
from harness.guard import build_entry_guard
from harness.logging import get_logger
from harness.memory import device_total_bytes, refusal
from harness.roofline import annotate as annotate_roofline
from harness.sanitize import (
    SanitizeJob,
    find_compute_sanitizer,
    merge,
    run_sanitizer,
    to_sanitize,
)
from harness.scenarios import GOAL_SUITE, Scenario, load_suite, suite_choices_text
from harness.timed_samples import ORIGINAL_SPARSE_MS
from harness.verdict import CHECKS, Flag, Goal, ScenarioResult, Verdict, geomean
from harness.worker import WorkerJob

log = get_logger("attnq.verify")

#: Interpreter, torch and CUDA start of the worker (and its launchers' start), before any library loads.
WORKER_START_TIMEOUT_S = 180.0
#: Slack over the worker's own load limit (WorkerJob.load_timeout_s) before the parent gives up on it.
LOAD_SLACK_S = 30.0
#: After this many hung scenarios the rest are reported as not run (a hanging kernel would hang them all).
MAX_HANGS = 2


class VerifyOptions(BaseModel):
    """Options of one verification (CLI flags and MCP tool arguments map onto these)."""

    suite: str = Field(default="quick", description=f"{suite_choices_text()} path")
    anchors: list[AnchorName] = Field(default_factory=list, description="library kernels timed too: cudnn, "
                                      "flash (torch SDPA backends), fa3 (FlashAttention-3, when importable)")
    arch: str = Field(default="sm_90a", description="nvcc target arch")
    policy: bool = Field(default=True, description="enforce the source/symbol policy")
    gpu: int = Field(default=0, ge=0, description="CUDA device index")
    scenario_timeout_s: float = Field(default=60.0, gt=0, description="limit per scenario (hang detection)")
    run_timeout_s: float = Field(default=900.0, gt=0, description="limit for the whole run")
    draws: int = Field(default=2, ge=2, le=6, description="fresh random input draws per scenario")
    repeats: int = Field(default=4, ge=1, le=10, description="determinism repeats after the fresh timed calls, each "
                         "of an earlier call (reordered values, bitwise comparison); 4 or more: every drawn layout "
                         "and (up to 4) every value key has a source slot")
    load_timeout_s: float = Field(default=20.0, gt=0, description="limit for loading each library (constructors)")
    goal_speedup: float = Field(default=1.0, gt=0, allow_inf_nan=False, description="goal: geomean speedup >= this")
    goal_against: GoalAgainst = Field(default="original")
    goal_suite: str = Field(default=GOAL_SUITE, description="the goal is judged only on a complete run of this suite")
    scenario_ids: list[str] | None = Field(default=None, description="run only these ids of the suite")
    min_samples: int = Field(default=10, ge=3, description="timed samples per scenario, at least")
    max_samples: int = Field(default=30, ge=3, description="timed samples per scenario, at most (once twice that where only the wall clock would "
                                 "convict an escape: harness.timed_samples.WALL_MORE)")
    sanitize: Literal["memcheck", "racecheck", "initcheck", "synccheck"] | None = Field(
        default=None, description="after the verification, run compute-sanitizer with this tool over the candidate on "
                                  "a few small scenarios (check `sanitizer`); off by default")
    sanitize_scenarios: int = Field(default=5, ge=1, le=50, description="scenarios sanitized, at most")
    budget_ms: float = Field(default=30.0, gt=0,
                             description="host wall time (ms) of a scenario's timing loop (whole samples: input "
                                         "fills, checks, flushes, the timed calls, anchors) after which sampling "
                                         "stops, once min_samples are taken (30: the floor ends almost every "
                                         "scenario of `full`; docs/checks.md \"How many timed samples\")")
    original_sparse_ms: float = Field(default=ORIGINAL_SPARSE_MS, ge=0, description="once the median of the "
                                      "original's timed calls is this long (ms), it runs only in the timed samples "
                                      "whose output or time is used: the timed layout's counted calls, the calls "
                                      "checked whole and declared-value calls (harness.timed_samples.OriginalPlan); "
                                      "0: in every sample")


class VerifyProgress(BaseModel):
    """A progress event: ``done`` of ``total`` scenarios finished; sent at least every 5 s while running."""

    done: int
    total: int
    scenario_id: str | None = None
    message: str = ""
    result: ScenarioResult | None = None


ProgressFn = Callable[[VerifyProgress], None]


@contextlib.contextmanager
def gpu_lock(gpu: int, timeout_s: float, progress: ProgressFn | None = None) -> Iterator[None]:
    """Exclusive lock per GPU index shared by all processes of this machine (flock on a file in the
    temp dir). Raises VerifyError after ``timeout_s``."""
    path = Path(tempfile.gettempdir()) / f"attnq-gpu{gpu}.lock"
    with open(path, "a+") as fh:
        t0 = time.monotonic()
        last = 0.0
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - t0
                if waited > timeout_s:
                    raise VerifyError(f"GPU {gpu} is busy with another verification for {waited:.0f} s; try again") from None
                if progress and waited - last >= 5:
                    last = waited
                    progress(VerifyProgress(done=0, total=0, message=f"waiting for GPU {gpu} ({waited:.0f} s)"))
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def check_original_source() -> None:
    """Refuse to verify against a modified original: every speedup is relative to it.

    Raises:
        VerifyError: kernels/attn_original.cu does not hash to ``ORIGINAL_SOURCE_SHA256``.
    """
    got = hashlib.sha256(ORIGINAL_KERNEL.read_bytes()).hexdigest()
    if got != ORIGINAL_SOURCE_SHA256:
        raise VerifyError(f"the original kernel {ORIGINAL_KERNEL} was modified (sha256 {got[:12]}, expected "
                          f"{ORIGINAL_SOURCE_SHA256[:12]}): restore it (git checkout -- kernels/attn_original.cu); "
                          "speedups are only meaningful against the pinned original")


def _peak_cache(settings: Settings) -> Path:
    return settings.state_dir / "device_peaks.json"


class _WorkerRun:
    """Runs scenarios[first:] in one worker process; yields parsed messages with deadlines enforced."""

    def __init__(self, job: WorkerJob, log_path: Path) -> None:
        r, w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = child_pythonpath()
        # the launchers' folders (harness.launch_client: attnq-candidate-*, attnq-original-*) inside the run's
        # folder: the parent kills the worker's group on "done", before the worker could remove them itself
        tmp = log_path.parent / "tmp"
        tmp.mkdir(exist_ok=True)
        env["TMPDIR"] = str(tmp)
        self.log_fh = open(log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.worker", "--fd", str(w)],
            stdin=subprocess.PIPE, stdout=self.log_fh, stderr=self.log_fh, pass_fds=(w,),
            start_new_session=True, env=env, cwd=str(REPO_ROOT),
        )
        os.close(w)
        self.rfd = r
        assert self.proc.stdin is not None
        self.proc.stdin.write(job.model_dump_json().encode())
        self.proc.stdin.close()
        self.buf = b""
        self.sel = selectors.DefaultSelector()
        self.sel.register(r, selectors.EVENT_READ)

    def read(self, timeout_s: float) -> dict[str, Any] | None | Literal["eof"]:
        """Next message, None on timeout, "eof" when the worker closed its channel."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                return None
            chunk = os.read(self.rfd, 65536)
            if not chunk:
                return "eof"
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return {"type": "garbage", "line": line[:200].decode(errors="replace")}

    def kill(self) -> int | None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 9)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover
            code = None
        self.close()
        return code

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.sel.close()
            os.close(self.rfd)
        self.log_fh.close()


def run_order(scenarios: list[Scenario]) -> list[Scenario]:
    """The order the worker runs scenarios in: those that ask for a fresh process first (the first of them
    needs no extra worker start), then the rest in suite order (the verdict is put back in suite order)."""
    return [s for s in scenarios if s.fresh_process] + [s for s in scenarios if not s.fresh_process]


def worker_batch_end(scenarios: list[Scenario], first: int) -> int:
    """End (exclusive) of the scenarios one worker process runs from index ``first``: up to the next
    scenario after ``first`` that asks for a fresh process (its first call is the candidate's first call
    in a new worker), else all of them."""
    return next((i for i in range(first + 1, len(scenarios)) if scenarios[i].fresh_process), len(scenarios))


def _failed(sc: Scenario, kind: str, check: str, message: str) -> ScenarioResult:
    return ScenarioResult(id=sc.id, group=sc.group, flops=sc.flops, correct=False,
                          failure_kind=kind, check=check, message=message)  # type: ignore[arg-type]


def _run_all(job_base: WorkerJob, scenarios: list[Scenario], options: VerifyOptions, work_dir: Path,
             progress: ProgressFn | None, cancel: threading.Event | None) -> tuple[list[ScenarioResult], dict[str, Any], str | None]:
    """Run every scenario, restarting the worker after a fatal error. Returns results, device info and
    a message when the run ended early (cancel, whole-run timeout)."""
    results: list[ScenarioResult] = []
    info: dict[str, Any] = {}
    t_run = time.monotonic()
    total = len(scenarios)
    ended: str | None = None

    def emit(msg: str, sid: str | None = None, result: ScenarioResult | None = None) -> None:
        if progress:
            progress(VerifyProgress(done=len(results), total=total, scenario_id=sid, message=msg, result=result))

    while len(results) < total and ended is None:
        hangs = sum(1 for r in results if r.failure_kind == "timeout")
        if hangs >= MAX_HANGS:
            ended = f"stopped after {hangs} scenarios hung (each killed after {options.scenario_timeout_s:.0f} s)"
            break
        first = len(results)
        stop = worker_batch_end(scenarios, first)
        job = job_base.model_copy(update={"scenarios": scenarios[first:stop], "first_index": first})
        w = _WorkerRun(job, work_dir / "worker.log")
        current: int | None = None
        started = time.monotonic()
        deadline = started + WORKER_START_TIMEOUT_S
        try:
            while True:
                if cancel is not None and cancel.is_set():
                    ended = "cancelled"
                    break
                if time.monotonic() - t_run > options.run_timeout_s:
                    ended = f"whole-run timeout ({options.run_timeout_s:.0f} s)"
                    break
                msg = w.read(min(2.0, max(0.05, deadline - time.monotonic())))
                if msg is None:
                    if time.monotonic() > deadline:
                        if current is None:
                            what = (f"load the libraries within {job.load_timeout_s:.0f} s" if "startup_s" in info
                                    else f"start within {WORKER_START_TIMEOUT_S:.0f} s")
                            raise VerifyError(f"the worker did not {what} (log: {work_dir / 'worker.log'})")
                        sc = scenarios[current]
                        results.append(_failed(sc, "timeout", "worker_isolation",
                                               f"no result within {options.scenario_timeout_s:.0f} s: killed (hang?)"))
                        emit(f"{sc.id}: timeout", sc.id, results[-1])
                        break
                    emit(f"running {scenarios[current].id}" if current is not None else "starting worker",
                         scenarios[current].id if current is not None else None)
                    continue
                if msg == "eof":
                    code = w.proc.wait(timeout=30)
                    if current is None and not results[first:]:
                        tail = (work_dir / "worker.log").read_text(errors="replace")[-800:]
                        raise VerifyError(f"the worker exited (code {code}) before any scenario: {tail}")
                    if current is not None:
                        sc = scenarios[current]
                        results.append(_failed(sc, "crash", "worker_isolation",
                                               f"the worker process died (exit code {code}) during this scenario"))
                        emit(f"{sc.id}: crash", sc.id, results[-1])
                    break
                kind = msg.get("type")
                if kind == "load_error":
                    raise VerifyError(f"the worker could not load the libraries: {msg['message']}")
                if kind == "hello":  # again after every restart: the start-up times add up
                    startup_s = info.get("startup_s", 0.0) + float(msg.get("startup_s", 0.0))
                    info = {k: v for k, v in msg.items() if k != "type"} | {"startup_s": startup_s}
                    # from here on the libraries load, under their own limit (the worker enforces it)
                    deadline = time.monotonic() + job.load_timeout_s + LOAD_SLACK_S
                elif kind == "ready":  # libraries loaded in their launchers; the candidate's sandbox report
                    info["startup_s"] = info.get("startup_s", 0.0) + float(msg.get("load_s", 0.0))
                    info["sandbox"] = msg.get("sandbox", {})
                    info["host_cover_cycles"] = msg.get("host_cover_cycles", {})
                    deadline = time.monotonic() + options.scenario_timeout_s
                elif kind == "start":
                    current = int(msg["index"])
                    deadline = time.monotonic() + options.scenario_timeout_s
                    emit(f"scenario {current + 1}/{total}: {msg['id']}", msg["id"])
                elif kind == "result":
                    res = ScenarioResult.model_validate(msg["result"])
                    results.append(res)
                    current = None
                    deadline = time.monotonic() + options.scenario_timeout_s
                    emit(f"{res.id}: {'ok' if res.correct else res.failure_kind}", res.id, res)
                elif kind == "fatal":
                    sc = scenarios[int(msg["index"])]
                    results.append(_failed(sc, msg["kind"], "worker_isolation", msg["message"]))
                    emit(f"{sc.id}: {msg['kind']}", sc.id, results[-1])
                    current = None
                elif kind == "done":
                    break
        finally:
            w.kill()
    for sc in scenarios[len(results):]:
        results.append(_failed(sc, "not_run", "worker_isolation", f"not run: {ended}"))
    return results, info, ended


def verify_kernel(path: str | Path, options: VerifyOptions | None = None, *, settings: Settings | None = None,
                  progress: ProgressFn | None = None, cancel: threading.Event | None = None) -> Verdict:
    """Compile ``path`` and verify it against the original kernel on a suite; returns the Verdict.

    Raises:
        InputError, ToolchainError, CompileError, PolicyError, AbiError: from compiling (see compile_kernel).
        NoGpuError: no GPU that runs the build's arch (after compiling).
        InputError: a scenario id that is not in the suite, a bad suite.
        VerifyError: the run could not start (worker failed to load, GPU lock timeout).
    Per-scenario failures (wrong output, crash, hang, ...) are in the Verdict, not raised.
    """
    options = options or VerifyOptions()
    settings = settings or Settings()
    require_anchors([*options.anchors, options.goal_against])
    t0 = time.monotonic()
    suite = load_suite(options.suite)
    scenarios = suite.scenarios
    if options.scenario_ids:
        known = {s.id for s in scenarios}
        missing = [i for i in options.scenario_ids if i not in known]
        if missing:
            raise InputError(f"scenario ids not in suite {suite.name}: {missing[:5]}")
        scenarios = [s for s in scenarios if s.id in set(options.scenario_ids)]
    check_original_source()
    sanitizer = find_compute_sanitizer() if options.sanitize else None  # missing tool: an error before any work
    scenarios = run_order(scenarios)
    cache_dir = settings.state_dir / "build"
    with ThreadPoolExecutor(max_workers=2) as pool:  # nvcc is single-threaded: build both at once
        cand_f = pool.submit(compile_kernel, path, arch=options.arch, cache_dir=cache_dir, policy=options.policy)
        orig_f = pool.submit(compile_kernel, ORIGINAL_KERNEL, arch=options.arch, cache_dir=cache_dir, policy=True)
        cand, orig = cand_f.result(), orig_f.result()
    compile_s = time.monotonic() - t0
    device_key = require_gpu(options.arch, options.gpu, library=cand.library)
    _memory_guard(scenarios, options.gpu)
    peaks: dict[str, float] = {}
    with contextlib.suppress(OSError, ValueError):
        peaks = json.loads(_peak_cache(settings).read_text())
    guard = build_entry_guard(cache_dir)
    job = WorkerJob(candidate_lib=cand.library, original_lib=orig.library, candidate_sha256=cand.build_hash,
                    original_sha256=orig.build_hash, scenarios=[], seed=secrets.randbits(62),
                    draws=options.draws, repeats=options.repeats, load_timeout_s=options.load_timeout_s,
                    entry_guard_lib=str(guard) if guard else None,
                    sandbox="off" if os.environ.get("ATTNQ_SANDBOX", "on") == "off" else "on",
                    **settings.timing_fields(),
                    anchors=options.anchors, gpu=options.gpu, min_samples=options.min_samples,
                    max_samples=options.max_samples, budget_ms=options.budget_ms,
                    original_sparse_ms=options.original_sparse_ms,
                    measure_peak=device_key not in peaks, peak_tflops=peaks.get(device_key))
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    with gpu_lock(options.gpu, options.run_timeout_s, progress), tempfile.TemporaryDirectory(prefix="attnq-verify-") as td:
        results, info, ended = _run_all(job, scenarios, options, Path(td), progress, cancel)
        sanitize_s, sanitize_ended = 0.0, None
        if options.sanitize and sanitizer and not (cancel is not None and cancel.is_set()):
            chosen = to_sanitize(scenarios, options.scenario_ids, options.sanitize_scenarios)
            if progress:
                progress(VerifyProgress(done=len(results), total=len(results),
                                        message=f"compute-sanitizer {options.sanitize} on {len(chosen)} scenarios"))
            sjob = SanitizeJob(candidate_lib=cand.library, candidate_sha256=cand.build_hash, scenarios=chosen,
                               gpu=options.gpu, seed=job.seed)
            reports, sanitize_s, sanitize_ended = run_sanitizer(
                options.sanitize, sjob, Path(td), timeout_s=options.scenario_timeout_s * (len(chosen) + 2), exe=sanitizer)
            merge(results, reports)
    order = {s.id: i for i, s in enumerate(suite.scenarios)}
    results.sort(key=lambda r: order.get(r.id, len(order)))
    if info.get("peak_tflops") and device_key not in peaks:
        peaks[device_key] = info["peak_tflops"]
        _peak_cache(settings).write_text(json.dumps(peaks, indent=2))
    verdict = build_verdict(results, suite_name=suite.name, options=options, source=str(path),
                            source_sha256=cand.source_sha256, build_hash=cand.build_hash,
                            original_sha256=orig.build_hash, gpu=info.get("gpu", ""),
                            peak_tflops=job.peak_tflops or info.get("peak_tflops"),
                            physical_peak_tflops=info.get("physical_peak_tflops"),
                            goal_ids=set(load_suite(options.goal_suite).ids()))
    annotate_roofline(verdict, scenarios, matmul_tflops=settings.matmul_tflops, hbm_tbps=settings.hbm_tbps)
    verdict.wall_s = round(time.monotonic() - t0, 2)
    verdict.compile_s = round(compile_s, 2)
    verdict.phase_s = _phase_totals(verdict, float(info.get("startup_s", 0.0)), sanitize_s)
    verdict.message = ended
    verdict.sandbox = info.get("sandbox", {})
    verdict.host_cover_cycles = info.get("host_cover_cycles", {})
    if options.sanitize:
        verdict.sanitizer_tool = options.sanitize
        if sanitize_ended:
            verdict.flags.append(Flag(kind="sanitizer_incomplete", message=sanitize_ended))
    log.info("verified", kernel=str(path), status=verdict.status, geomean=verdict.geomean_speedup, wall_s=verdict.wall_s)
    return verdict


def count_prior_compile(verdict: Verdict, compile_s: float) -> Verdict:
    """``verdict`` with a build that ran before :func:`verify_kernel` started its clock counted in (the CLI builds the
    candidate first, so that a failed build is recorded with its facts even where verification cannot run; the build
    inside verify_kernel is then a cache hit): ``wall_s``, ``compile_s`` and ``phase_s["compile"]`` grow by
    ``compile_s`` (seconds), so ``wall_s`` stays the whole verification, compiles included. Raises ValueError for a
    negative or non-finite ``compile_s``."""
    if not math.isfinite(compile_s) or compile_s < 0:
        raise ValueError(f"compile_s must be a finite number of seconds >= 0, got {compile_s!r}")
    phase = dict(verdict.phase_s)
    if phase:
        phase["compile"] = round(phase.get("compile", 0.0) + compile_s, 2)
    return verdict.model_copy(update={"wall_s": round(verdict.wall_s + compile_s, 2),
                                      "compile_s": round(verdict.compile_s + compile_s, 2), "phase_s": phase})


def _memory_guard(scenarios: list[Scenario], gpu: int) -> None:
    """Refuse, before the worker allocates anything, scenarios whose estimated peak memory exceeds the GPU's
    (harness/memory.py). Raises VerifyError naming the first of them with the numbers."""
    total = device_total_bytes(gpu)
    if total is None:
        return
    refused = [m for m in (refusal(s, total) for s in scenarios) if m]
    if refused:
        more = f" ({len(refused) - 1} more scenarios too)" if len(refused) > 1 else ""
        raise VerifyError(refused[0] + more)


def _phase_totals(verdict: Verdict, startup_s: float, sanitize_s: float = 0.0) -> dict[str, float]:
    """``wall_s`` broken down (seconds): compile, worker_start, check (of which reference), timing (of which
    timed_gpu: GPU time inside the timed events), sanitize (--sanitize), other (locks, scenario set-up,
    process traffic)."""
    ph = [r.phases for r in verdict.scenarios if r.phases]
    tot = {"compile": verdict.compile_s, "worker_start": startup_s,
           "check": sum(p.check_s for p in ph), "reference": sum(p.reference_s for p in ph),
           "timing": sum(p.timing_s for p in ph), "timed_gpu": sum(p.timed_gpu_s for p in ph)}
    if sanitize_s:
        tot["sanitize"] = sanitize_s
    tot["other"] = verdict.wall_s - tot["compile"] - tot["worker_start"] - tot["check"] - tot["timing"] - sanitize_s
    return {k: round(v, 2) for k, v in tot.items()}


def build_verdict(results: list[ScenarioResult], *, suite_name: str, options: VerifyOptions, source: str,
                  source_sha256: str, build_hash: str, original_sha256: str, gpu: str = "",
                  peak_tflops: float | None = None, physical_peak_tflops: float | None = None,
                  goal_ids: set[str] | None = None) -> Verdict:
    """Summarize per-scenario results: geomeans (overall, per group, vs anchors), worst, goal, flags.

    Geomeans run over correct scenarios only. The goal needs every scenario correct, the policy on, and
    the run's scenario ids equal to ``goal_ids`` (the goal suite's; ids derive from the shapes, so a
    suite file cannot pass for the goal suite by its name). ``goal_ids=None`` skips that comparison.
    """
    ok = [r for r in results if r.correct and r.speedup]
    failed = [r.id for r in results if not r.correct]
    gm = geomean(r.speedup for r in ok if r.speedup)
    by_group: dict[str, float] = {}
    for g in dict.fromkeys(r.group for r in ok):
        val = geomean(r.speedup for r in ok if r.group == g and r.speedup)
        if val is not None:
            by_group[g] = val
    vs_anchor: dict[str, float] = {}
    vs_anchor_by_group: dict[str, dict[str, float]] = {}
    for a in options.anchors:
        val = geomean(r.vs_anchor[a] for r in ok if a in r.vs_anchor)
        if val is not None:
            vs_anchor[a] = val
        for g in dict.fromkeys(r.group for r in ok):
            val = geomean(r.vs_anchor[a] for r in ok if r.group == g and a in r.vs_anchor)
            if val is not None:
                vs_anchor_by_group.setdefault(a, {})[g] = val
    worst = failed + [r.id for r in sorted(ok, key=lambda r: r.speedup or 0)][: max(0, 5 - len(failed))]
    flags: list[Flag] = []
    for r in results:
        if r.failure_kind == "impossible_speed":
            flags.append(Flag(kind="above_physical_peak", message=r.message or "", scenario_id=r.id))
        if r.correct and peak_tflops and r.tflops and r.tflops > peak_tflops:
            flags.append(Flag(kind="above_measured_peak", scenario_id=r.id,
                              message=f"{r.tflops:.0f} TFLOP/s exceeds the measured matmul rate {peak_tflops:.0f} "
                                      "(possible, not impossible: check it)"))
        if r.message and r.message.startswith("stream_timing"):
            flags.append(Flag(kind="work_outside_stream", message=r.message, scenario_id=r.id))
        elif r.correct and r.candidate and r.candidate.resampled:
            flags.append(Flag(kind="resampled_timing", scenario_id=r.id,
                              message="the first samples' host round trips alone said the work outlived the end event; "
                                      f"more were taken and {r.candidate.samples} timed calls cleared it (host noise)"))
        if r.correct and r.candidate and r.candidate.median_ms > 0 and r.candidate.iqr_ms / r.candidate.median_ms > 0.1:
            flags.append(Flag(kind="noisy_timing", scenario_id=r.id,
                              message=f"IQR {100 * r.candidate.iqr_ms / r.candidate.median_ms:.0f}% of the median"))
    goal = Goal(against=options.goal_against, min_speedup=options.goal_speedup)
    measure = gm if options.goal_against == "original" else vs_anchor.get(options.goal_against)
    ran = {r.id for r in results}
    partial = [why for cond, why in (
        (goal_ids is not None and ran != goal_ids,
         f"suite {suite_name!r}: {len(ran & (goal_ids or set()))} of the {len(goal_ids or ())} scenarios of the goal "
         f"suite {options.goal_suite!r}" + (f" and {len(ran - goal_ids)} others" if goal_ids and ran - goal_ids else "")),
        (bool(options.scenario_ids), "a subset of scenarios (--scenario)"),
        (not options.policy, "the source/symbol policy switched off"),
    ) if cond]
    if partial:
        goal.reason = f"the goal is judged only on a complete {options.goal_suite!r} run with the policy on; this run: " \
                      + ", ".join(partial)
    elif failed:
        goal.reason = f"{len(failed)} of {len(results)} scenarios failed: {', '.join(failed[:5])}"
    elif measure is None:
        goal.reason = f"no geomean against {options.goal_against} (run with --anchors {options.goal_against})"
    else:
        goal.met = measure >= options.goal_speedup
        goal.reason = (f"geomean {measure:.3f}x vs {options.goal_against} "
                       f"{'>=' if goal.met else '<'} {options.goal_speedup:g}x, all {len(results)} scenarios correct")
    not_run = all(r.failure_kind == "not_run" for r in results)
    status = "error" if not_run else ("correct" if not failed else "incorrect")
    checks = [c for c in CHECKS if (options.policy or c not in ("source_policy", "symbol_policy"))
              and (options.sanitize or c != "sanitizer")]
    return Verdict(kernel=source, source_sha256=source_sha256, build_hash=build_hash, original_sha256=original_sha256,
                   suite=suite_name, gpu=gpu, status=status, num_scenarios=len(results),
                   num_correct=len(results) - len(failed), failed=failed, geomean_speedup=gm,
                   geomean_by_group=by_group, geomean_vs_anchor=vs_anchor,
                   geomean_vs_anchor_by_group=vs_anchor_by_group, worst=worst, goal=goal, flags=flags,
                   peak_tflops=peak_tflops, physical_peak_tflops=physical_peak_tflops, checks=checks,
                   seed_draws=options.draws, scenarios=results)
