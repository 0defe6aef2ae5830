"""The timing loop's per-sample checks (harness.worker.Runner._time) on CPU tensors: every check still
catches its cheat, in the same priority order, with one device-to-host transfer per sample; the
sampling budget counts the loop's wall time. The CUDA parts (events, synchronize, the ctypes ABI) are
replaced by CPU stand-ins; the loop itself, the buffers and the checks are the worker's own code."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from harness.buffers import Buffers
from harness.checks import (
    bits_equal_t,
    count_poison,
    judge_timed_sample,
    poison_,
    poison_count_t,
    timed_sample_values,
)
from harness.reference import attention_reference
from harness.scenarios import Scenario
from harness.verdict import PhaseTimes
from harness.worker import Runner, WorkerJob, _Fail

SC = Scenario(group="t", batch=2, seqlen_q=24, seqlen_k=24, num_heads_q=4, num_heads_kv=2, head_dim=16, causal=True)
TOL = (1e-3, 1e-4)  # (bound on max|o - original|, on max|lse - original|); honest calls here agree exactly


def _honest(p: Any) -> None:
    o, lse = attention_reference(p.q, p.k, p.v, softmax_scale=p.scale, causal=p.causal)
    p.o.copy_(o), p.lse.copy_(lse)


class _Lib:
    """A fake kernel library: ``fwd`` runs ``body(params)`` (a Python 'kernel') and counts its calls."""

    def __init__(self, body) -> None:
        self.body, self.calls = body, 0

    def fwd(self, p: Any, stream: int) -> int:
        self.calls += 1
        self.body(p)
        return 0


class _CpuRunner(Runner):
    """Runner with CPU stand-ins for CUDA: no events (the host time is both timings), no synchronize,
    parameters as a namespace of tensors instead of the ctypes struct."""

    def __init__(self, job: WorkerJob, cand: _Lib, orig: _Lib) -> None:  # no CUDA state
        self.torch, self.job, self.phases = torch, job, PhaseTimes()
        self.cand, self.orig, self.cudart, self.num_sms = cand, orig, None, 1
        self.transfers = 0

    def sync(self) -> None:
        pass

    def _timed(self, fn: Any, host_cover_cycles: int = 0) -> tuple[float, float]:
        t0 = time.perf_counter()
        fn()
        ms = (time.perf_counter() - t0) * 1e3
        return ms, ms

    def _params(self, lib_out: tuple[Any, Any], bufs: Buffers, sc: Scenario, lib: Any) -> Any:
        o, lse = lib_out
        return SimpleNamespace(q=bufs.q, k=bufs.k, v=bufs.v, o=o, lse=lse, scale=bufs.scale, causal=sc.causal)


def _run(cand_body, *, min_samples=3, max_samples=6, budget_ms=1e9, monkeypatch=None):
    job = WorkerJob(candidate_lib="c.so", original_lib="o.so", scenarios=[SC], seed=1, min_samples=min_samples,
                    max_samples=max_samples, budget_ms=budget_ms)
    runner = _CpuRunner(job, _Lib(cand_body), _Lib(_honest))
    bufs = Buffers(torch, SC, torch.bfloat16, device="cpu")
    gen = torch.Generator().manual_seed(7)
    return runner, runner._time(SC, bufs, gen, TOL)


def test_honest_kernel_is_timed_with_one_transfer_per_sample(monkeypatch) -> None:
    transfers = []
    real_tolist = torch.Tensor.tolist

    def counting_tolist(self):
        transfers.append(self.numel())
        return real_tolist(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting_tolist)
    item_calls = []
    real_item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda self: item_calls.append(1) or real_item(self))
    runner, (cand, orig, anchors, escaped) = _run(_honest)
    assert cand.samples == orig.samples == 6 and anchors == {} and escaped is None
    assert runner.cand.calls == runner.orig.calls == 6
    assert len(transfers) == 6 and not item_calls  # one transfer per sample, nothing else reads back
    assert transfers[0] == 5 + 10  # 5 checks + one count per guard band (before/after q, k, v, o, lse)


@pytest.mark.parametrize(("budget_ms", "expected"), [(1e-6, 3), (1e9, 6)])
def test_budget_is_the_loops_wall_time_between_min_and_max_samples(budget_ms, expected) -> None:
    _, (cand, orig, _, _) = _run(_honest, budget_ms=budget_ms)
    assert cand.samples == orig.samples == expected


def test_budget_counts_harness_overhead_not_only_the_timed_calls() -> None:
    """Timed calls of 1 ms of "GPU" time but 10 ms of harness work per sample (a slow input fill): the old
    budget (GPU time of the two timed calls) would take 15 samples; the loop's wall time stops it after ~30 ms."""
    job = WorkerJob(candidate_lib="c.so", original_lib="o.so", scenarios=[SC], seed=1, min_samples=2,
                    max_samples=40, budget_ms=30.0)
    runner = _CpuRunner(job, _Lib(_honest), _Lib(_honest))
    runner._timed = lambda fn, host_cover_cycles=0: (fn(), (1.0, 1.0))[1]  # 1 ms of "GPU" time per call
    bufs = Buffers(torch, SC, torch.bfloat16, device="cpu")
    real_fill = bufs.fill_inputs
    bufs.fill_inputs = lambda gen, kind: (time.sleep(0.01), real_fill(gen, kind))[1]
    cand, _, _, _ = runner._time(SC, bufs, torch.Generator().manual_seed(7), TOL)
    assert 2 <= cand.samples <= 4 and runner.cand.calls == cand.samples
    assert runner.phases.timed_gpu_s == round(2 * cand.samples * 1.0 / 1e3, 4) > 0  # GPU time accounted as before


def _modifies_inputs(p: Any) -> None:
    _honest(p)
    p.q.zero_()  # the original then runs on zeros: its output differs, but the inputs are reported first


def _skips_lse(p: Any) -> None:
    o, _ = attention_reference(p.q, p.k, p.v, softmax_scale=p.scale, causal=p.causal)
    p.o.copy_(o)


def _past_lse(p: Any) -> None:
    torch.as_strided(p.lse, (3,), (1,), p.lse.storage_offset() + p.lse.numel()).fill_(0.0)


def _writes_past_lse(p: Any) -> None:
    _honest(p)
    _past_lse(p)


def _claims_empty_row(p: Any) -> None:
    _honest(p)
    p.lse[1, 2, 5] = float("inf")


def _o_off(p: Any) -> None:
    _honest(p)
    p.o.add_(0.0625)


def _lse_off(p: Any) -> None:
    _honest(p)
    p.lse.add_(0.01)


def _nan_lse_row(p: Any) -> None:  # NaN lse on a row that sees keys: fails even where a finite-mask equality would
    _honest(p)
    p.lse[0, 1, 2] = float("nan")


def _neg_inf_lse_row(p: Any) -> None:
    _honest(p)
    p.lse[0, 0, 0] = float("-inf")


def _computed_nan(p: Any) -> None:
    _honest(p)
    p.o[0, 3, 1, 2] = float("nan")  # a NaN the kernel computed, not the poison payload


def _everything_wrong(p: Any) -> None:  # inputs changed AND lse unwritten AND a guard written AND o wrong
    _skips_lse(p)
    _past_lse(p)
    p.o.add_(1.0)
    p.k.add_(1.0)


def _unwritten_and_guard(p: Any) -> None:
    _skips_lse(p)
    _past_lse(p)


def _guard_and_wrong(p: Any) -> None:
    _claims_empty_row(p)
    _past_lse(p)


@pytest.mark.parametrize(("body", "kind", "check", "message"), [
    (_modifies_inputs, "inputs_modified", "input_integrity", "timed call 0 changed q, k or v"),
    (_skips_lse, "timed_output_wrong", "timed_output", "timed call 0 left o/lse elements unwritten"),
    (_writes_past_lse, "out_of_bounds_write", "guard_bands", "timed call 0: out-of-bounds write: 3 elements written after lse"),
    (_claims_empty_row, "timed_output_wrong", "timed_output", "timed call 0: lse is not +inf on exactly the original's rows"),
    (_nan_lse_row, "timed_output_wrong", "timed_output", "(or holds NaN/-inf)"),
    (_neg_inf_lse_row, "timed_output_wrong", "timed_output", "(or holds NaN/-inf)"),
    (_o_off, "timed_output_wrong", "timed_output", "(bound 0.001), max|lse - original| = 0 (bound 0.0001)"),
    (_lse_off, "timed_output_wrong", "timed_output", "max|lse - original| = 0.01 (bound 0.0001)"),
    (_computed_nan, "timed_output_wrong", "timed_output", "max|o - original| = inf"),
    (_everything_wrong, "inputs_modified", "input_integrity", "changed q, k or v"),  # priority: inputs first
    (_unwritten_and_guard, "timed_output_wrong", "timed_output", "unwritten"),  # then poison, then guards,
    (_guard_and_wrong, "out_of_bounds_write", "guard_bands", "after lse"),  # then the values
])
def test_every_timed_check_catches_its_cheat_in_priority_order(body, kind, check, message) -> None:
    with pytest.raises(_Fail) as info:
        _run(body)
    assert (info.value.kind, info.value.check) == (kind, check)
    assert message in str(info.value)


def test_a_cheat_that_starts_after_some_honest_samples_is_named_with_its_call() -> None:
    calls = {"n": 0}

    def late(p: Any) -> None:
        calls["n"] += 1
        (_o_off if calls["n"] > 2 else _honest)(p)

    with pytest.raises(_Fail) as info:
        _run(late)
    assert info.value.check == "timed_output" and str(info.value).startswith("timed call 2 on fresh inputs")


def test_sample_values_match_the_host_side_checks_they_replace() -> None:
    """timed_sample_values gives exactly what the per-check .item() calls gave (same fp32 maxima)."""
    g = torch.Generator().manual_seed(0)
    o_o = torch.randn(2, 8, 4, 16, generator=g).bfloat16()
    o_c = (o_o.float() + 0.01 * torch.randn(2, 8, 4, 16, generator=g)).bfloat16()
    lse_o = torch.randn(2, 4, 8, generator=g)
    lse_o[0, 1, :3] = float("inf")
    lse_c = lse_o + 1e-3 * torch.randn(2, 4, 8, generator=g)
    guards = torch.tensor([0, 0, 5, 0], dtype=torch.int64)
    vals = timed_sample_values(torch.tensor(True), o_c, lse_c, o_o, lse_o, guards).tolist()
    fin = torch.isfinite(lse_o)
    assert vals[:3] == [1.0, 0.0, 1.0]
    assert vals[3] == (o_c.float() - o_o.float()).abs().nan_to_num(float("inf")).max().item()
    assert vals[4] == (lse_c - lse_o).abs()[fin].max().item()
    assert vals[5:] == [0.0, 0.0, 5.0, 0.0]
    names = ["before q", "after q", "before o", "after o"]
    assert judge_timed_sample(vals, 4, (1.0, 1.0), names) == (
        "out_of_bounds_write", "guard_bands", "timed call 4: out-of-bounds write: 5 elements written before o")
    # no finite row at all: d_lse is 0 (as before), and poison is counted in o and lse
    all_inf = torch.full((2, 4, 8), float("inf"))
    poison_(o_c[0, 0, 0]), poison_(lse_c[1, 1])
    vals = timed_sample_values(torch.tensor(False), o_c, lse_c, o_o, all_inf, guards[:0]).tolist()
    assert vals[0] == 0.0 and vals[1] == 16 + 8 and vals[2] == 0.0 and vals[4] == 0.0 and len(vals) == 5


def test_tensor_variants_agree_with_the_host_functions() -> None:
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        t = torch.randn(50).to(dtype)
        poison_(t[10:17])
        assert int(poison_count_t(t)) == count_poison(t) == 7
        assert bool(bits_equal_t(t, t.clone()))
        u = t.clone()
        u[3] = -u[3] if u[3] != 0 else 1.0
        assert not bool(bits_equal_t(t, u))
        assert not bool(bits_equal_t(t, t[:49])) and not bool(bits_equal_t(t, t.double()))


def test_batched_guards_report_the_first_written_guard() -> None:
    bufs = Buffers(torch, SC, torch.bfloat16, device="cpu")
    bufs.set_layout(strided=True, scale_factor=1.0)  # adds the strided q/o guards and the o head padding
    assert bufs.guards_intact() is None and int(bufs.guards_written().sum()) == 0
    assert bufs.guard_names[-1] == "in the head padding of strided o"
    o_full = bufs.o_c.as_strided((SC.batch, SC.seqlen_q, SC.num_heads_q, SC.head_dim + 8),
                                 (SC.seqlen_q * SC.num_heads_q * (SC.head_dim + 8), SC.num_heads_q * (SC.head_dim + 8),
                                  SC.head_dim + 8, 1))
    o_full[0, 0, 0, SC.head_dim:].fill_(1.0)  # 8 elements of padding written
    assert bufs.guards_intact() == "8 elements written in the head padding of strided o"
    torch.as_strided(bufs.k, (2,), (1,), bufs.k.storage_offset() - 2).fill_(0.0)
    assert bufs.guards_intact() == "2 elements written before k"  # the first guard in order wins


@pytest.mark.parametrize("bad", [float("nan"), float("-inf"), 0.5])
def test_a_row_that_sees_no_key_must_stay_plus_inf(bad: float) -> None:
    """The original's lse is +inf on a row that sees no key; NaN, -inf or a finite value there fails
    (a comparison of finite masks alone would let NaN and -inf through)."""
    o = torch.zeros(1, 3, 1, 8, dtype=torch.bfloat16)
    lse_o = torch.tensor([[[0.5, float("inf"), 1.0]]])
    lse_c = lse_o.clone()
    lse_c[0, 0, 1] = bad
    ok = timed_sample_values(torch.tensor(True), o, lse_o.clone(), o.clone(), lse_o, torch.zeros(0, dtype=torch.int64))
    bad_vals = timed_sample_values(torch.tensor(True), o, lse_c, o.clone(), lse_o, torch.zeros(0, dtype=torch.int64))
    assert judge_timed_sample(ok.tolist(), 0, TOL, []) is None
    kind, check, msg = judge_timed_sample(bad_vals.tolist(), 0, TOL, [])
    assert (kind, check) == ("timed_output_wrong", "timed_output") and "exactly the original's rows" in msg


def test_a_nan_difference_fails_the_bound() -> None:
    """values with a NaN max difference (which `>` would let through) fail the bound check."""
    kind, check, _ = judge_timed_sample([1.0, 0.0, 1.0, float("nan"), 0.0], 0, TOL, [])
    assert (kind, check) == ("timed_output_wrong", "timed_output")
    kind, check, _ = judge_timed_sample([1.0, 0.0, 1.0, 0.0, float("nan")], 0, TOL, [])
    assert (kind, check) == ("timed_output_wrong", "timed_output")
