"""The checker: per scenario, the checked draws, the timing loop and every comparison (the verdict's
source). Runs in the worker process (harness/worker.py); the candidate runs elsewhere (a launcher
process, harness/launcher.py) and only ever sees its own buffers.

Per scenario: the workspace query of each kernel on parameters whose data pointers are NULL, once per
layout, before any buffer exists (its work is finished before the query returns), the workspaces weighed
against the free memory (harness.memory.workspace_refusal); two arenas (the candidate's, mapped into its
process, and the original's, never shown to it). Per call, checked or timed: a drawn layout, softmax_scale
and value kind (harness/draws.py); pristine inputs in the original's arena, copied whole into the
candidate's; outputs poisoned and the workspace filled with garbage; the candidate called on one path
(``_cand_call``: flushes, the launcher's timed call); after the call the candidate's inputs are compared
with the pristine copy before the original runs. Checked draws compare both outputs with the full fp32
reference (harness/full_check.py); every timed call is compared with the original's output (whole) and
with the fp32 reference on sampled rows, under the checked draws' tolerance, and a secret subset of them
with the fp32 reference whole (harness.full_check.FullChecks); determinism repeats, after the last fresh
timed call, replay an earlier call's values (reordered) and must reproduce the candidate's bits of that
call (its source: a uniformly random call of its stratum, value key and layout, held by a source slot of
harness/repeats.py, its inputs and outputs kept in a SourceStore from the moment it ran). With a second candidate endpoint
(``cand_b``, a second launcher process of the same library) each repeat runs in the process that did not
run its source (harness/draws.py ``split``): no cache of the candidate's can replay the source's bits.

Scenario fields (harness/scenarios.py) win over the draws: a declared ``layout`` is every call's layout,
a declared ``softmax_scale`` every call's scale, declared ``inputs`` the values of the first checked draws,
of the uncounted declared timed calls and of their repeats (counted timed calls draw ordinary ones:
harness/draws.py); ``repeats`` more repeats (harness.draws.repeats_of). The memory
guard runs before any allocation; the exactness check after the reference checks of each checked draw.
Work after a timed call's end event (another stream) is found by harness/timing_escape.py
(``job.stream_escape_check``). Anchors (torch SDPA backends, FA3) run here on the original's buffers, timed like the kernels, behind
the host-path cover (harness/host_cover.py; the kernels get it from their launchers when ATTNQ_HOST_COVER_ALL=1).
"""

from __future__ import annotations

import time
from typing import Any

from harness.abi import make_params, null_data_copy
from harness.anchors import TimedAnchors
from harness.buffers import DECLARED, Buffers
from harness.draws import (
    LAYOUTS,
    CallDraw,
    CallDrawer,
    describe_values,
    repeats_of,
    timed_values_note,
)
from harness.endpoints import (
    CallResult,
    KernelEndpoint,
    KernelFatal,
    RefusedCall,
    WorkAfterReturn,
    describe_refused,
    fatal_kind,
)
from harness.host_cover import host_cover_cycles
from harness.repeats import SourceStore
from harness.scenarios import Scenario, no_key_rows
from harness.timed_samples import (
    MIN_TIMED_LAYOUT_SAMPLES,
    UNCOUNTED,
    WALL_MORE,
    OriginalPlan,
    count_counted,
    timed_selection,
    timing_stats,
)
from harness.timing_escape import append_timing_log, escape_evidence, judge_escape
from harness.verdict import ErrorStats, PhaseTimes, ScenarioResult, TimingStats

#: Sampled rows of every timed call checked against the fp32 reference: pairs x rows per pair.
ROW_PAIRS, ROWS_PER_PAIR = 4, 32


class Fail(Exception):
    """A scenario failure found by a named check (the contexts stay usable)."""

    def __init__(self, kind: str, check: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.check = kind, check


class CudaDevice:
    """The checker's CUDA state: synchronize, L2 flush, event timing (anchors), arenas via ``allocate``."""

    def __init__(self, torch: Any, gpu: int, cudart: Any = None) -> None:
        self.torch, self.kind = torch, "cuda"
        props = torch.cuda.get_device_properties(gpu)
        self.num_sms = props.multi_processor_count
        l2 = getattr(props, "L2_cache_size", 60 << 20) or (60 << 20)
        self.flush_buf = torch.empty(max(4 * l2, 256 << 20), dtype=torch.uint8, device="cuda")
        self.cudart = cudart

    def sync(self) -> None:
        """Device-wide synchronize; a sticky CUDA error becomes KernelFatal."""
        try:
            self.torch.cuda.synchronize()
        except RuntimeError as exc:
            msg = str(exc).splitlines()[0]
            raise KernelFatal(fatal_kind(msg) or "crash", msg) from None

    def last_error(self) -> str | None:
        if self.cudart is None:
            return None
        code = self.cudart.cudaGetLastError()
        return None if code == 0 else f"{self.cudart.cudaGetErrorString(code).decode()} (cudaError {code})"

    def flush(self) -> None:
        self.flush_buf.zero_()

    def timed(self, fn: Any, cover_cycles: int = 0) -> tuple[float, float]:
        """(event ms, host wall ms) of ``fn``; events on the legacy default stream after an L2 flush and,
        when ``cover_cycles`` > 0, a GPU spin of that many cycles (harness/host_cover.py)."""
        torch = self.torch
        self.sync()
        self.flush()
        if cover_cycles:
            torch.cuda._sleep(cover_cycles)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        fn()
        end.record()
        self.sync()
        return start.elapsed_time(end), (time.perf_counter() - t0) * 1e3


class HostDevice:
    """The CPU stand-in of :class:`CudaDevice` (tests): no flush, host time for both timings."""

    kind, num_sms = "cpu", 1

    def sync(self) -> None:
        pass

    def last_error(self) -> str | None:
        return None

    def flush(self) -> None:
        pass

    def timed(self, fn: Any, cover_cycles: int = 0) -> tuple[float, float]:
        t0 = time.perf_counter()
        fn()
        ms = (time.perf_counter() - t0) * 1e3
        return ms, ms


class Runner:
    """Checks and times one scenario at a time. ``job``: harness.worker.WorkerJob; ``cand``/``orig``:
    endpoints; ``dev``: CudaDevice or HostDevice; ``allocate(nbytes)``: an arena (uint8 tensor) the
    endpoints can attach (harness/arena.py), default a plain tensor on the device; ``cand_b``: a second
    endpoint of the candidate (another process) for the determinism repeats, or None."""

    def __init__(self, job: Any, cand: KernelEndpoint, orig: KernelEndpoint, dev: Any,
                 allocate: Any = None, free: Any = None, cand_b: KernelEndpoint | None = None) -> None:
        import torch

        self.torch, self.job, self.cand, self.orig, self.dev = torch, job, cand, orig, dev
        self.cand_b = cand_b
        self.allocate, self.free = allocate, free
        self.device = "cuda" if dev.kind == "cuda" else "cpu"
        self.phases = PhaseTimes()
        self._ac: Any = None  # the fused checks of the current arenas (_arena_checks; reset by _release)

    # -- calls ---------------------------------------------------------------------------------
    def _cand(self, draw: CallDraw) -> KernelEndpoint:
        """The candidate endpoint that runs ``draw``."""
        return self.cand_b if draw.process and self.cand_b is not None else self.cand

    def _result(self, res: CallResult, who: str) -> CallResult:
        if res.refused:
            raise Fail("forbidden_call", "symbol_policy",
                       f"{who} {describe_refused(res.refused)}")
        if res.threads:
            raise Fail("work_after_return", "work_after_return", f"{who}: {WorkAfterReturn(res.threads, 'attn_fwd')}")
        if res.status != 0:
            raise Fail("unsupported", "launch_status", f"{who} attn_fwd returned {res.status} (unsupported configuration)")
        if res.error:
            kind = fatal_kind(res.error)
            if kind:
                raise KernelFatal(kind, res.error)
            raise Fail("launch_error", "launch_status", f"{who} launch failed: {res.error}")
        return res

    def _params(self, bufs: Buffers, sc: Scenario) -> Any:
        p = make_params(bufs.q, bufs.k, bufs.v, bufs.o_c, bufs.lse_c, softmax_scale=bufs.scale, causal=sc.causal,
                        num_sms=self.dev.num_sms)
        if bufs.workspace is not None:
            p.workspace, p.workspace_bytes = bufs.workspace.data_ptr(), bufs.workspace_bytes
        return p

    def _query(self, kernel: KernelEndpoint, sc: Scenario, dtype: Any) -> int:
        """Largest workspace ``kernel`` asks for over the layouts, each asked on NULL data pointers before
        any buffer of the scenario exists (a small dense probe supplies the strides)."""
        probe = Buffers(self.torch, sc, dtype, "meta")
        need = 0
        for layout in probe.layouts:
            probe.apply(layout, 1.0)
            p = make_params(probe.q, probe.k, probe.v, probe.o_c, probe.lse_c, softmax_scale=probe.scale,
                            causal=sc.causal, num_sms=self.dev.num_sms, data_ptrs=False)
            need = max(need, kernel.workspace_bytes(null_data_copy(p)))
        return need

    # -- one scenario ----------------------------------------------------------------------------
    def run(self, sc: Scenario, index: int) -> ScenarioResult:
        torch = self.torch
        base = ScenarioResult(id=sc.id, group=sc.group, flops=sc.flops, correct=False)
        dtype = torch.bfloat16 if sc.dtype == "bf16" else torch.float16
        seed = (self.job.seed * 1_000_003 + index) % (1 << 63)
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        drawer = CallDrawer(sc, seed ^ 0x5EED, draws=self.job.draws, repeats=repeats_of(sc, self.job.repeats),
                            min_samples=self.job.min_samples, layouts=(DECLARED,) if sc.layout is not None else LAYOUTS,
                            split=self.cand_b is not None)
        base.phases = self.phases = PhaseTimes()
        if self.dev.kind == "cuda":
            from harness.memory import worker_refusal

            too_big = worker_refusal(torch, sc, self.job.gpu)  # the memory guard, before any allocation
            if too_big:
                base.failure_kind, base.check, base.message = "out_of_memory", "memory_guard", too_big
                return base
        try:
            ws_c, ws_o = self._query(self.cand, sc, dtype), self._query(self.orig, sc, dtype)
            if self.cand_b is not None:  # both candidate processes are asked, like any call
                ws_c = max(ws_c, self._query(self.cand_b, sc, dtype))
        except RefusedCall as exc:
            base.failure_kind, base.check, base.message = "forbidden_call", "symbol_policy", str(exc)
            return base
        except WorkAfterReturn as exc:
            base.failure_kind, base.check, base.message = "work_after_return", "work_after_return", str(exc)
            return base
        refused = self._workspace_refusal(sc, ws_c, ws_o)
        if refused:  # the memory guard again, with the workspaces asked for (2**60 bytes: a refusal, no crash)
            base.failure_kind, base.check, base.message = "out_of_memory", "memory_guard", refused
            return base
        bufs_c = Buffers(torch, sc, dtype, self.device, workspace_bytes=ws_c, allocate=self.allocate)
        bufs_o = Buffers(torch, sc, dtype, self.device, workspace_bytes=ws_o, allocate=self.allocate)
        attached: list[tuple[KernelEndpoint, Buffers]] = []
        try:
            pairs = [(self.cand, bufs_c), (self.orig, bufs_o)] + ([(self.cand_b, bufs_c)] if self.cand_b else [])
            for k, b in pairs:
                k.attach(b)
                attached.append((k, b))
            t0 = time.perf_counter()
            sources = SourceStore(torch)
            try:
                stats, bounds = self._check(sc, bufs_c, bufs_o, gen, drawer, sources)
            finally:  # a failed scenario's time is accounted too
                self.phases.check_s = round(time.perf_counter() - t0, 4)
            base.errors = stats
            t1 = time.perf_counter()
            try:
                timing = self._time(sc, bufs_c, bufs_o, gen, drawer, bounds, sources)
            finally:
                self.phases.timing_s = round(time.perf_counter() - t1, 4)
        except Fail as f:
            base.failure_kind, base.check, base.message = f.kind, f.check, str(f)  # type: ignore[assignment]
            return base
        finally:
            self._release(attached, bufs_c, bufs_o)
        return self._summarize(base, sc, *timing)

    def _workspace_refusal(self, sc: Scenario, ws_c: int, ws_o: int) -> str | None:
        """harness.memory.workspace_refusal against the device's free memory (the host's on the CPU)."""
        from harness.memory import device_free_bytes, host_free_bytes, workspace_need, workspace_refusal

        if self.dev.kind == "cuda":  # torch's cache emptied below what workspace_refusal weighs
            free = device_free_bytes(self.torch, self.job.gpu, workspace_need(sc, ws_c, ws_o))
        else:
            free = host_free_bytes()
        return workspace_refusal(sc, ws_c, ws_o, free)

    def _release(self, attached: list, *bufs: Buffers) -> None:
        self._ac = None  # the fused checks' views of these arenas (Runner._arena_checks)
        try:
            self.dev.sync()
            for b in bufs:
                b.scrub()
            self.dev.sync()
        finally:
            for k, b in attached:
                k.detach(b)
            if self.free is not None:
                for b in bufs:
                    self.free(b.arena)

    def _summarize(self, base: ScenarioResult, sc: Scenario, cand_t: TimingStats, orig_t: TimingStats,
                   anchors: dict, escaped: str | None) -> ScenarioResult:
        base.candidate, base.original, base.anchors = cand_t, orig_t, anchors
        base.timed_values = timed_values_note(sc)
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

    def _prepare(self, bufs_c: Buffers, bufs_o: Buffers, draw: CallDraw, gen: Any, values: tuple | None) -> None:
        """Layout and scale of ``draw`` on both arenas (harness.buffers.Buffers.reapply); pristine inputs (``values`` or a fresh fill of
        ``draw.kind``) in the original's, copied whole into the candidate's; outputs poisoned, workspaces
        filled with garbage."""
        for b in (bufs_o, bufs_c):
            b.reapply(draw.layout, draw.scale_factor)
        if values is None:
            bufs_o.fill_inputs(gen, draw.kind, draw.ordinary)
        else:
            bufs_o.set_inputs(*values)
        bufs_c.copy_inputs_from(bufs_o)
        bufs_c.prepare_outputs(), bufs_o.prepare_outputs()

    def _timed_pair(self, draw: CallDraw, n: int, p_c: Any, p_o: Any, bufs_c: Buffers, bufs_o: Buffers,
                    tail: bool) -> tuple[CallResult, CallResult | None, Any, bool]:
        """Sample ``n``'s two timed calls, each after the checker's flush and a synchronize (nothing of the
        checker's runs beside a timed call), the candidate's first unless ``job.diag_order`` says otherwise;
        the candidate's inputs are compared (on the device) right after its call. ``tail``: the launchers
        report the device tail (harness/timing_escape.py). ``p_o`` None: the original does not run in this
        sample (harness.timed_samples.OriginalPlan). Returns ``(candidate's result, original's result or None,
        inputs-same tensor, whether the original went first)``."""
        order = self.job.diag_order
        orig_first = order == "original_first" or (order == "alternate" and n % 2 == 1)
        rc = ro = same = None
        for who in ("original", "candidate") if orig_first else ("candidate", "original"):
            if who == "candidate":
                rc = self._cand_call(draw, p_c, tail)
                same = self._arena_checks(bufs_c, bufs_o).span_t()  # (default order) compared before the original runs
            elif p_o is not None:
                ro = self._flushed_call(self.orig, p_o, tail, "original")
        assert rc is not None
        return rc, ro, same, orig_first

    def _flushed_call(self, endpoint: KernelEndpoint, params: Any, tail: bool, who: str) -> CallResult:
        """One timed call of ``endpoint``: the checker's own flush (the kernel's process cannot skip it) and a
        synchronize (its context must see the prepared buffers), then the launcher's timed call (its flush,
        events; ``tail``: the device tail, harness/timing_escape.py)."""
        self.dev.flush()
        self.dev.sync()
        return self._result(endpoint.timed_call(params, **({"tail": True} if tail else {})), who)

    def _cand_call(self, draw: CallDraw, p_c: Any, tail: bool) -> CallResult:
        """The candidate's call of ``draw``, checked or timed alike (:meth:`_flushed_call` on the endpoint that
        runs ``draw``)."""
        return self._flushed_call(self._cand(draw), p_c, tail, "candidate")

    def _arena_checks(self, bufs_c: Buffers, bufs_o: Buffers) -> Any:
        """The fused arena checks of ``bufs_c`` against ``bufs_o`` (harness.sample_checks.ArenaChecks), made once."""
        from harness.sample_checks import ArenaChecks

        ac = self._ac
        if ac is None or ac.bufs_c is not bufs_c or ac.bufs_o is not bufs_o:
            ac = self._ac = ArenaChecks(self.torch, bufs_c, bufs_o, self._inputs_same_t)
        return ac

    def _inputs_same_t(self, bufs_c: Buffers, bufs_o: Buffers) -> Any:
        from harness.checks import bits_equal_t

        # whole regions: the views and what surrounds them (padding, cache slack, the rest of a packed buffer)
        return self.torch.stack([bits_equal_t(a, b) for a, b in zip(bufs_c.input_regions_t(), bufs_o.input_regions_t(),
                                                                     strict=True)]).all()

    def _check(self, sc: Scenario, bufs_c: Buffers, bufs_o: Buffers, gen: Any, drawer: CallDrawer,
               sources: SourceStore):
        """Correctness over the checked draws (``drawer.checked_draws`` fresh input draws). Returns the worst
        errors and the timed bounds per value key (CallDraw.values); the draws a source slot takes are kept
        in ``sources`` (pristine inputs, candidate outputs: harness/repeats.py)."""
        from harness.checks import (
            MANTISSA_BITS,
            TimedBounds,
            checked_bounds,
            judge_checked_call,
            timed_bound_o,
        )
        from harness.full_check import whole_check

        worst: ErrorStats | None = None
        drafts: list[tuple[str, TimedBounds, Any]] = []  # per passed draw: value key, bounds, max|o| (device)
        for draw_i in range(drawer.checked_draws):
            draw = drawer.checked(draw_i)
            self._prepare(bufs_c, bufs_o, draw, gen, None)
            # the timed path (the checker's flush, the launcher's flush and events): nothing, not even a warm L2,
            # tells the kernel that this call is checked and not timed
            self._cand_call(draw, self._params(bufs_c, sc), self.job.stream_escape_check == "tail")
            self.dev.sync()
            where = f"[draw {draw_i}: {describe_values(sc, draw)}, {draw.layout} layout]"
            # inputs, guard bands, poison left: computed on the device (fused: harness/sample_checks.py), one transfer,
            # judged in that order
            arena = self._arena_checks(bufs_c, bufs_o)
            bad = judge_checked_call(arena.checked_values(arena.counts_t().tolist()), bufs_c.guard_names, where)
            if bad:
                raise Fail(*bad)
            # Expected answers exist only from here on, after the candidate's call for this draw.
            t_ref = time.perf_counter()
            self.dev.sync()
            self._result(self.orig.call(self._params(bufs_o, sc)), "original")
            self.dev.sync()
            whole = whole_check(sc, bufs_c, bufs_o)
            rep_o, rep_c, tol_o, tol_lse = whole.rep_o, whole.rep_c, whole.tol_o, whole.tol_lse
            self.phases.reference_s = round(self.phases.reference_s + time.perf_counter() - t_ref, 4)
            stats = ErrorStats(max_abs_err_o=rep_c.max_abs_err_o, max_abs_err_lse=rep_c.max_abs_err_lse,
                               rel_err_o=rep_c.rel_err_o, tol_o=tol_o, tol_lse=tol_lse,
                               original_max_abs_err_o=rep_o.max_abs_err_o, original_max_abs_err_lse=rep_o.max_abs_err_lse)
            if rep_o.nonfinite or rep_o.lse_inf_mismatch:  # pragma: no cover - the original is verified
                raise Fail("wrong_output", "reference_tolerance", f"the ORIGINAL kernel failed {where}")
            bad = whole.failure(bufs_c.dtype)  # the reference checks, then exactness
            if bad:
                raise Fail(bad[0], bad[1], f"{bad[2]} {where}")
            drawer.full.passed(draw.call)  # a repeat of this call needs no whole check of its own
            # max|o| of the original's output (the bounds' ref_o_max): on the device now, read back after the last draw
            max_o = bufs_o.o_c.float().abs().nan_to_num(0).max() if bufs_o.o_c.numel() else None
            drafts.append((draw.values, TimedBounds(timed_bound_o(tol_o, rep_o.max_abs_err_o, 0.0, bufs_c.dtype, ulp=False),
                                                    tol_lse + rep_o.max_abs_err_lse, tol_o, tol_lse,
                                                    mantissa_bits=MANTISSA_BITS[bufs_c.dtype]), max_o))
            sources.keep(draw.keep, bufs_o, bufs_c)
            if worst is None or stats.max_abs_err_o / max(tol_o, 1e-30) > worst.max_abs_err_o / max(worst.tol_o, 1e-30):
                worst = stats
        assert worst is not None
        return worst, checked_bounds(drafts)  # one transfer for every draw's max|o|

    def _time(self, sc: Scenario, bufs_c: Buffers, bufs_o: Buffers, gen: Any, drawer: CallDrawer,
              bounds: dict, sources: SourceStore | None):
        """A/B timing, each sample a drawn call: fresh (layout, scale, value kind; where the scenario declares
        inputs, some on the declared values at scheduled places), then the determinism repeats. After every
        timed candidate call its inputs must equal the pristine copy, and its output is checked against the
        fp32 reference (sampled rows) and, where the original runs in the sample (harness.timed_samples.
        OriginalPlan), against the original's (whole); a repeat must reproduce the bits of its
        source (kept in ``sources`` while a source slot holds it: harness/repeats.py). A sample's checks run on
        the device, fused (harness/sample_checks.py), and come back in one transfer, judged in the order of
        harness.checks.judge_timed_sample. The fresh calls stop when, with the repeats still to come, the
        samples would reach ``max_samples`` (raised to reach every scheduled declared call; past it only for
        3 counted dense calls), or once ``min_samples`` (repeats included), every scheduled call and
        max(3, min_samples / 2) counted dense calls are taken and the loop's host wall time exceeds
        ``budget_ms``; then every repeat runs. Where the samples so far would convict on the wall clock alone,
        :data:`WALL_MORE` times the fresh calls more (at most the cap again) are taken first, once: the cap
        can then be passed. The times, and the stream_timing check, are over the counted
        dense calls (:func:`timed_selection`): never a repeat, whose values a cache can replay, nor a declared
        call, whose values can give the answer away."""
        from harness.checks import bits_equal_t, judge_timed_sample, sample_rows
        from harness.full_check import whole_check
        from harness.reference import attention_reference_rows
        from harness.sample_checks import rows_check_t, timed_values, timed_values_t

        torch, job = self.torch, self.job
        anchors = TimedAnchors(torch, sc, job.anchors)
        cover = host_cover_cycles("anchor", job.host_cover_all)  # the kernels': their launchers apply it
        t_c: list[float] = []
        t_o: list[float] = []
        w_c: list[float] = []
        w_o: list[float] = []
        t_a: dict[str, list[float]] = {k: [] for k in job.anchors}
        lay: list[str] = []  # each sample's layout, and each anchor time's
        lay_a: dict[str, list[str]] = {k: [] for k in job.anchors}
        keep = drawer.timed_layout  # the layout the statistics are over (None: every layout)
        counts: list[bool] = []  # CallDraw.counted: no repeat, no declared call (checked, never timed)
        min_keep = max(MIN_TIMED_LAYOUT_SAMPLES, job.min_samples // 2) if keep else MIN_TIMED_LAYOUT_SAMPLES
        tail = job.stream_escape_check == "tail"
        tl_c: list[float] = []
        tl_o: list[float] = []
        log: list[dict] | None = [] if job.diag_timing_log else None
        gpu_ms = 0.0
        n = 0
        t_loop = time.perf_counter()
        reps = drawer.repeats
        cap = max(job.max_samples, drawer.samples_needed + reps)  # past it only for the first 3 calls counted

        more_to = 0  # WALL_MORE: fresh calls are taken up to this n (once) when only the wall clock convicts
        # sparse only in the default order: with the original first, a skipped original would tell the next
        # call in advance that it is not checked whole
        plan = OriginalPlan(job.original_sparse_ms if job.diag_order == "candidate_first" else 0.0)
        no_key = no_key_rows(sc)

        def escape_args(sel: list[int]) -> list[list[float] | None]:
            """The escape check's sample lists over the samples ``sel`` (the device tails only under ``tail``)."""
            return [[xs[i] for i in sel] if xs is not None else None
                    for xs in (t_c, t_o, w_c, w_o, tl_c if tail else None, tl_o if tail else None)]

        def more_fresh() -> bool:
            """Another fresh call: fewer than 3 counted (whatever the cap: ends, 6 dense cards in any 12), or
            below the cap with the repeats still to come and a floor, a scheduled call or the budget not met;
            or, once, :data:`WALL_MORE` more when the samples so far would convict on the wall clock alone."""
            nonlocal more_to
            counted = count_counted(lay, counts, keep)
            if counted < MIN_TIMED_LAYOUT_SAMPLES or n < more_to or (n + reps < cap and (
                    n + reps < job.min_samples or drawer.pending(n) or counted < min_keep
                    or (time.perf_counter() - t_loop) * 1e3 < job.budget_ms)):
                return True
            if more_to == 0:
                sel = timed_selection(lay, counts, keep)[0]
                if escape_evidence(job.stream_escape_check, *escape_args(sel)) == "wall":
                    more_to = n + min(WALL_MORE * max(n, job.min_samples), cap)  # bounded: at most cap more
                    return True
            return False

        j = 0  # repeats taken: they follow the last fresh call
        while True:
            if j == 0 and more_fresh():
                draw = drawer.timed(n)
            elif j < reps:
                draw, j = drawer.repeat(j, n), j + 1
            else:
                break
            values = expect = None
            if draw.repeat is not None and sources is not None:
                values, expect = sources.replay(sc, draw)
            self._prepare(bufs_c, bufs_o, draw, gen, values)
            whole_wanted = drawer.full.wanted(draw)  # drawn before the calls: nothing the kernel sees tells it
            with_o = plan.runs(draw.layout, draw.counted, keep, whole_wanted, bool(drawer.declared) and not draw.ordinary)
            p_c, p_o = self._params(bufs_c, sc), self._params(bufs_o, sc) if with_o else None
            rc, ro, inputs_same, orig_first = self._timed_pair(draw, n, p_c, p_o, bufs_c, bufs_o, tail)
            if ro is not None:
                plan.ran(ro.event_ms)
            for name, times in t_a.items():
                fn = anchors.runner(name, bufs_o, draw.layout)
                if fn is not None:
                    times.append(self.dev.timed(fn, cover)[0])
                    lay_a[name].append(draw.layout if draw.counted else UNCOUNTED)
                    gpu_ms += times[-1]
            rows = sample_rows(sc.batch, sc.num_heads_q, sc.seqlen_q, ROW_PAIRS, ROWS_PER_PAIR, gen, self.device)
            t_ref = time.perf_counter()
            o_ref, lse_ref = attention_reference_rows(bufs_o.q, bufs_o.k, bufs_o.v, rows.batch_idx, rows.head_idx,
                                                      rows.rows, softmax_scale=bufs_o.scale, causal=sc.causal)
            repeat_same = None
            if expect is not None:
                repeat_same = bits_equal_t(bufs_c.o_c, expect[0]) & bits_equal_t(bufs_c.lse_c, expect[1])
            outs = [(bufs_c.o_c, bufs_c.lse_c)] + ([(bufs_o.o_c, bufs_o.lse_c)] if ro is not None else [])
            arena = self._arena_checks(bufs_c, bufs_o)  # fused checks, no host synchronization: harness/sample_checks.py
            vals = timed_values_t(torch, arena.counts_t(inputs_same), *outs[0], *(outs[1] if ro is not None else (None, None)),
                                  rows_check_t(torch, outs, rows, o_ref, lse_ref), repeat_same, no_key_rows=no_key)
            if sources is not None:  # a source slot takes this call (before anything else runs)
                sources.keep(draw.keep, bufs_o, bufs_c)
            source = None if draw.source is None else drawer.name(draw.source)
            bound = bounds[draw.values]
            bad = judge_timed_sample(timed_values(vals.tolist(), arena, ro is not None), n, bound,  # one transfer
                                     bufs_c.guard_names, repeat_of=source, original_ran=ro is not None)
            if not bad and whole_wanted:  # a secret subset: the checked draws' rule, whole output
                whole = whole_check(sc, bufs_c, bufs_o, at_least=(bound.tol_o, bound.tol_lse)).failure(bufs_c.dtype)
                if whole:
                    bad = ("timed_output_wrong", "timed_output", (f"timed call {n}, whole output against the fp32 "
                           f"reference ({whole[1]}, the checked draws' rule): {whole[2]}"))
                elif draw.repeat is None:  # a source a first repeat may replay
                    drawer.full.passed(draw.call)
            self.phases.reference_s = round(self.phases.reference_s + time.perf_counter() - t_ref, 4)
            if bad:
                raise Fail(*bad)
            nan = float("nan")  # the original's times where it did not run (never in a selection: OriginalPlan)
            t_c.append(rc.event_ms), w_c.append(rc.wall_ms), tl_c.append(rc.tail_ms or 0.0)
            t_o.append(ro.event_ms if ro else nan), w_o.append(ro.wall_ms if ro else nan)
            tl_o.append((ro.tail_ms or 0.0) if ro else nan)
            lay.append(draw.layout), counts.append(draw.counted)
            if log is not None:
                log.append({"n": n, "process": draw.process if self.cand_b is not None else 0, "orig_first": orig_first,
                            "repeat": draw.repeat is not None, "repeat_of": source, "counted": draw.counted,
                            "layout": draw.layout, "e_c": rc.event_ms,
                            "e_o": ro and ro.event_ms, "w_c": rc.wall_ms, "w_o": ro and ro.wall_ms,
                            "tail_c": rc.tail_ms, "tail_o": ro and ro.tail_ms})
            gpu_ms += rc.event_ms + (ro.event_ms if ro else 0.0)
            self.phases.timed_gpu_s = round(gpu_ms / 1e3, 4)
            n += 1
        mode = job.stream_escape_check
        sel, label = timed_selection(lay, counts, keep)  # the escape check judges the calls the times are over

        picked = escape_args(sel)
        t_c, escaped = judge_escape(mode, *picked)
        if log is not None:
            append_timing_log(job.diag_timing_log, {"id": sc.id, "escape_check": mode, "order": job.diag_order,
                                                    "split": self.cand_b is not None, "escaped": escaped,
                                                    "wall_more_to": more_to, "samples": log})
        anchor_stats: dict[str, TimingStats | None] = {}
        for k, times in t_a.items():  # an anchor time's layout is UNCOUNTED on a repeat or a declared call
            a_sel, a_label = timed_selection(lay_a[k], [x != UNCOUNTED for x in lay_a[k]], keep)
            anchor_stats[k] = timing_stats([times[i] for i in a_sel], a_label) if times else None
        c_stats = timing_stats(t_c, label).model_copy(update={"resampled": more_to > 0})
        o_stats = timing_stats(picked[1], label).model_copy(update={"sparse": plan.sparse})
        return c_stats, o_stats, anchor_stats, escaped

