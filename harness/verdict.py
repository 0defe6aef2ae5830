"""Verdict models: what `attnq verify` returns, per scenario and in summary; geomean and the goal.

All times are milliseconds of GPU time per call (CUDA events), rates are TFLOP/s (1e12 FLOP/s),
speedups are ``t_original / t_candidate`` (> 1 means the candidate is faster).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, Field

#: Named checks, in the order a verification applies them (see docs/checks.md for cost and rationale).
CHECKS = (
    "source_policy",        # compile: forbidden headers (CUTLASS, CuTe, cuBLAS, cuDNN, Thrust, dlfcn...)
    "symbol_policy",        # compile: the built library imports only allow-listed symbols and libraries
    "abi",                  # compile/load: attn_fwd and attn_abi_version exported, ABI version matches
    "build_hash",           # the verdict names the sha256 of the exact library checked and timed
    "load_limit",           # loading each library (its constructors) has its own short limit (20 s)
    "sandbox",              # the candidate runs in its own confined process: no network, writes, processes
    "work_after_return",    # no thread or process of the candidate's outlives a call (seccomp; /proc/self/task after each call)
    "worker_isolation",     # fresh process; crash, hang, illegal address end in a verdict, harness goes on
    "memory_guard",         # a scenario's peak memory is estimated; one that cannot fit is refused before allocation
    "launch_status",        # attn_fwd returned nonzero (unsupported) or the launch failed
    "poisoned_output",      # o and lse poisoned with a NaN payload before every call: all must be written
    "input_integrity",      # q, k, v bit-identical after the call
    "guard_bands",          # poisoned regions around q, k, v, o and lse untouched after every call
    "determinism",          # repeats (scenario `repeats` - 1, at least the job's; reordered, among the timed calls) reproduce the bits of the earlier call each replays
    "finite_output",        # no NaN/Inf in o; lse finite except +inf exactly on rows that see no key
    "reference_tolerance",  # FlashAttention's rule: err <= 2 * original's err + floor; relative bound per dtype
    "exactness",            # one visible key returns its v exactly; no key gives 0; o within [min v, max v] of its keys
    "fresh_inputs",         # every timed call sees new random inputs (no replay by pointer or content)
    "timed_output",         # the output of every timed call is compared with the original's on those inputs
    "stream_timing",        # events on the legacy default stream + host wall-clock cross-check
    "physical_peak",        # candidate TFLOP/s above SMs x 4096 FLOP/clk x max clock is an error
    "sanitizer",            # --sanitize TOOL: compute-sanitizer memcheck/racecheck/initcheck/synccheck findings
)

#: Why a scenario failed. ``None`` on a correct scenario.
FailureKind = Literal[
    "wrong_output",       # error above FlashAttention's tolerance rule (o or lse)
    "nan_inf",            # NaN or Inf where a finite value was due
    "unwritten_output",   # poison left in o or lse: some elements were never written
    "inputs_modified",    # q, k or v changed by the call
    "out_of_bounds_write", # a guard region around an input or output was written
    "nondeterministic",   # two runs on the same inputs differ: a race
    "timed_output_wrong", # outputs of the timed calls did not match the checked outputs
    "work_after_return",  # a thread of the library was alive after attn_fwd (or the workspace query) returned
    "forbidden_call",     # the kernel asked the driver for a function the entry-point guard refuses
    "unsupported",        # attn_fwd returned nonzero
    "launch_error",       # a CUDA error after the call (bad launch configuration, too much smem)
    "illegal_memory_access",
    "crash",              # the worker process died (segfault, abort, exit)
    "timeout",            # the scenario exceeded its time limit (hang)
    "impossible_speed",   # throughput above the device's physical peak
    "not_run",            # the run ended before this scenario (an earlier crash, the whole-run timeout)
    "out_of_memory",      # the memory guard: the scenario's estimated peak exceeds the device's free memory
    "sanitizer_error",    # compute-sanitizer reported errors in the candidate's calls (--sanitize)
]


class TimingStats(BaseModel):
    """Per-call GPU time over the samples of one kernel on one scenario."""

    median_ms: float = Field(description="median time per call, ms")
    iqr_ms: float = Field(description="interquartile range (p75 - p25), ms")
    samples: int = Field(description="number of timed calls the median and IQR are over")
    layout: str | None = Field(default=None, description="the layout those calls had: 'dense' when calls drew "
                               "layouts (the padded ones are checked, not timed); None: every timed call counts")
    resampled: bool = Field(default=False, description="the first samples would have convicted the kernel of escaping "
                            "the timer on the host wall clock alone, so more were taken before judging "
                            "(harness.timed_samples.WALL_MORE)")
    sparse: bool = Field(default=False, description="the original's only: it ran only in the samples whose time or "
                         "output is used, its median time being original_sparse_ms or more "
                         "(harness.timed_samples.OriginalPlan)")


class ErrorStats(BaseModel):
    """Worst error against the fp32 reference over the draws, with the bound that applied."""

    max_abs_err_o: float
    max_abs_err_lse: float
    rel_err_o: float = Field(description="||o - ref|| / ||ref|| (Frobenius)")
    tol_o: float = Field(description="bound on max_abs_err_o: 2 * original's error + floor")
    tol_lse: float
    original_max_abs_err_o: float
    original_max_abs_err_lse: float


class PhaseTimes(BaseModel):
    """Where the harness spent one scenario's host wall time, seconds (the harness's own cost)."""

    check_s: float = Field(default=0.0, description="correctness: all draws, reference and original included")
    reference_s: float = Field(default=0.0, description="of check_s: fp32 reference, original's call, error stats")
    timing_s: float = Field(default=0.0, description="timing loop: samples, flushes, per-sample checks, anchors")
    timed_gpu_s: float = Field(default=0.0, description="of timing_s: GPU time inside the timed events (all kernels)")


class SanitizerReport(BaseModel):
    """compute-sanitizer's findings on one scenario (``attnq verify --sanitize TOOL``)."""

    tool: Literal["memcheck", "racecheck", "initcheck", "synccheck"]
    status: Literal["clean", "errors", "warnings", "not_run", "crashed"]
    errors: int = Field(default=0, description="error reports of the tool during the candidate's call")
    warnings: int = 0
    findings: list[str] = Field(default_factory=list, description="the first report lines, as the tool printed them")
    message: str = ""


class ScenarioResult(BaseModel):
    """One scenario's outcome."""

    id: str
    group: str
    flops: float = Field(description="FLOPs per call, FlashAttention's count (causal: visible pairs only)")
    correct: bool
    failure_kind: FailureKind | None = None
    check: str | None = Field(default=None, description="the named check that failed (see docs/checks.md)")
    message: str | None = None
    errors: ErrorStats | None = None
    candidate: TimingStats | None = None
    original: TimingStats | None = None
    anchors: dict[str, TimingStats | None] = Field(default_factory=dict, description="cudnn/flash/fa3; None if unsupported")
    speedup: float | None = Field(default=None, description="original median / candidate median")
    tflops: float | None = Field(default=None, description="candidate TFLOP/s")
    fraction_of_peak: float | None = Field(default=None, description="tflops / measured bf16 matmul TFLOP/s")
    bound: Literal["compute", "memory"] | None = Field(
        default=None, description="the roof that limits this shape: FLOPs at the matmul rate vs minimum bytes at "
                                  "the HBM bandwidth, whichever takes longer (harness/roofline.py)")
    fraction_of_bound: float | None = Field(
        default=None, description="time at that roof / candidate median: achieved TFLOP/s over the matmul rate "
                                  "(compute) or achieved bandwidth over the HBM bandwidth (memory)")
    vs_anchor: dict[str, float] = Field(default_factory=dict, description="anchor median / candidate median")
    timed_values: str | None = Field(
        default=None, description="None: the timed calls drew the scenario's own values; else the scenario declares "
                                  "inputs, checked on its first draws and on uncounted timed calls while the counted "
                                  "timed calls draw ordinary values (harness/draws.py, timed values)")
    phases: PhaseTimes | None = Field(default=None, description="the harness's own time on this scenario")
    sanitizer: SanitizerReport | None = Field(default=None, description="compute-sanitizer's findings (--sanitize)")


class Flag(BaseModel):
    """Something the caller should look at even when all scenarios are correct."""

    kind: Literal["above_physical_peak", "above_measured_peak", "suspicious_jump", "noisy_timing",
                  "work_outside_stream", "stale_original_cache", "sanitizer_incomplete", "resampled_timing"]
    message: str
    scenario_id: str | None = None


class Goal(BaseModel):
    """The verifiable stop condition: all correct and geomean >= ``min_speedup`` vs ``against``."""

    against: str = Field(default="original", description="original, cudnn, flash or fa3")
    min_speedup: float = 1.0
    met: bool = False
    reason: str = ""


class Verdict(BaseModel):
    """The answer of one verification."""

    kernel: str = Field(description="path of the candidate source")
    source_sha256: str
    build_hash: str = Field(description="sha256 of the exact library that was checked and timed")
    original_sha256: str
    suite: str
    gpu: str = Field(default="", description="device name, driver, SMs")
    status: Literal["correct", "incorrect", "error"]
    num_scenarios: int
    num_correct: int
    failed: list[str] = Field(default_factory=list, description="ids of failed scenarios")
    geomean_speedup: float | None = Field(default=None, description="over correct, timed scenarios")
    geomean_by_group: dict[str, float] = Field(default_factory=dict)
    geomean_vs_anchor: dict[str, float] = Field(default_factory=dict)
    geomean_vs_anchor_by_group: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="anchor -> group -> geomean of anchor median / candidate median")
    worst: list[str] = Field(default_factory=list, description="lowest-speedup scenario ids, worst first")
    goal: Goal = Field(default_factory=Goal)
    flags: list[Flag] = Field(default_factory=list)
    peak_tflops: float | None = Field(default=None, description="measured dense bf16 matmul TFLOP/s on this device")
    physical_peak_tflops: float | None = Field(default=None, description="SMs x 4096 FLOP/clk x max clock")
    bound_tflops: float | None = Field(default=None, description="matmul rate behind each compute bound, TFLOP/s "
                                       "(peak_tflops unless overridden)")
    hbm_tbps: float | None = Field(default=None, description="HBM bandwidth behind each memory bound, TB/s")
    original_timing: Literal["measured", "cached", "none"] = "measured"
    checks: list[str] = Field(default_factory=list, description="named checks that ran")
    sanitizer_tool: str | None = Field(default=None, description="the compute-sanitizer tool run (--sanitize), if any")
    seed_draws: int = Field(default=2, description="random input draws per scenario")
    wall_s: float = Field(default=0.0, description="whole verification, compiles included, s")
    compile_s: float = Field(default=0.0, description="of which compiling the candidate and the original, s")
    phase_s: dict[str, float] = Field(default_factory=dict, description="wall_s broken down: compile, worker_start "
                                      "(process, torch, CUDA context, peak), check, reference, timing, timed_gpu, other")
    message: str | None = Field(default=None, description="why the run ended early, if it did")
    sandbox: dict = Field(default_factory=dict, description="the candidate process's confinement as applied: "
                          "landlock_abi, seccomp, caps_dropped, warnings (docs/checks.md)")
    host_cover_cycles: dict[str, int] = Field(default_factory=dict, description="GPU spin (SM clock cycles) before "
                                              "each timed call of the anchors, the candidate and the original "
                                              "(0: none; harness/host_cover.py, ATTNQ_HOST_COVER_ALL)")
    scenarios: list[ScenarioResult] = Field(default_factory=list)


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive values; None for an empty input. Raises ValueError on a value <= 0."""
    vals = list(values)
    if not vals:
        return None
    if any(v <= 0 or not math.isfinite(v) for v in vals):
        raise ValueError(f"geomean needs positive finite values, got {vals}")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))
