"""Input values, layouts, exactness and the memory guard on CPU tensors, against the one fp32 reference
(harness/reference.py): what the checker builds for a scenario (harness/buffers.py arenas) is what the
suite file says, and its correctness checks (repeats, exactness) catch what they are for."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from harness.abi import make_params
from harness.buffers import Buffers
from harness.checker import Fail as _Fail
from harness.checks import count_poison, poison_
from harness.draws import CallDrawer, declared_samples, repeats_of
from harness.exactness import exactness_failure
from harness.inputs import InputsSpec
from harness.layouts import LayoutSpec, storage_elements, strides
from harness.memory import GIB, estimate_peak_bytes, refusal
from harness.reference import attention_reference
from harness.sanitize import sanitizer_tensors
from harness.scenarios import Scenario, load_suite
from tests.checker_support import PyKernel, check_scenario, run_scenario
from tests.checker_support import honest as _honest

BF, FP = torch.bfloat16, torch.float16


def _sc(**kw: Any) -> Scenario:
    base = {"group": "t", "batch": 2, "seqlen_q": 40, "seqlen_k": 40, "num_heads_q": 4, "num_heads_kv": 2,
            "head_dim": 64, "causal": True}
    return Scenario(**(base | kw))


def _filled(sc: Scenario, kind: str = "normal", seed: int = 0, dtype: torch.dtype = BF) -> Buffers:
    bufs = Buffers(torch, sc, dtype, device="cpu")
    bufs.apply(bufs.layouts[0], 1.0)
    bufs.fill_inputs(torch.Generator().manual_seed(seed), kind)
    return bufs


# -- input values ---------------------------------------------------------------------------------
def test_constant_normal_uniform_and_large_values() -> None:
    sc = _sc(batch=4, seqlen_q=256, seqlen_k=256, inputs=InputsSpec(
        q={"dist": "normal", "mean": 4.0, "std": 0.5}, k={"dist": "uniform", "lo": -2.0, "hi": 3.0},
        v={"dist": "large", "magnitude": 1.3e5}))
    b = _filled(sc)
    q, k, v = b.q.float(), b.k.float(), b.v.float()
    assert q.mean().item() == pytest.approx(4.0, abs=0.02) and q.std().item() == pytest.approx(0.5, rel=0.05)
    assert k.min().item() >= -2.0 and k.max().item() <= 3.0 and k.mean().item() == pytest.approx(0.5, abs=0.03)
    assert v.abs().min().item() >= 1.3e5 / 2 * 0.99 and v.abs().max().item() <= 1.3e5 * 1.01
    assert 0.45 < (v > 0).float().mean().item() < 0.55  # random signs
    c = _filled(_sc(dtype="fp16", inputs=InputsSpec(v={"dist": "constant", "value": 60000.0})), dtype=FP)
    assert bool((c.v.float() == 60000.0).all())


def test_head_tagged_and_high_dims() -> None:
    sc = _sc(num_heads_q=8, num_heads_kv=4, head_dim=128,
             inputs=InputsSpec(v={"dist": "head_tagged", "step": 5.0}, q={"dist": "high_dims", "from_dim": 64}))
    b = _filled(sc)
    for h in range(4):
        assert bool((b.v[:, :, h].float() == 5.0 * h).all())
    assert bool((b.q[..., :64] == 0).all()) and b.q[..., 64:].float().std().item() == pytest.approx(1.0, rel=0.05)


def test_rising_logits_rise_by_span_along_the_keys() -> None:
    sc = _sc(batch=1, seqlen_q=1, seqlen_k=2048, num_heads_q=2, num_heads_kv=1, head_dim=128, causal=False,
             inputs=InputsSpec(q={"dist": "constant", "value": 1.0}, k={"dist": "rising", "span": 40.0}))
    b = _filled(sc, dtype=FP)
    s = (b.q[0, 0, 0].float() @ b.k[0, :, 0].float().T) * sc.scale  # [sk] logits of the one query row
    ramp = torch.arange(2048, dtype=torch.float32) * 40.0 / 2047
    assert (s - ramp).abs().max().item() < 6.0  # noise: N(0, 1) per logit
    assert (s[-256:].mean() - s[:256].mean()).item() == pytest.approx(40.0 * (2048 - 256) / 2047, abs=0.5)


def test_undeclared_tensors_follow_the_draw_kind_and_values_are_finite() -> None:
    sc = _sc(inputs=InputsSpec(v={"dist": "constant", "value": 2.0}))
    b = _filled(sc, kind="large_logits")
    assert b.q.float().std().item() == pytest.approx(6.0, rel=0.1) and bool((b.v.float() == 2.0).all())
    b = _filled(sc, kind="shifted")
    assert b.k.float().mean().item() == pytest.approx(1.0, abs=0.1)
    wide = _sc(dtype="fp16", inputs=InputsSpec(q={"dist": "normal", "mean": 6e4, "std": 1e4}))
    assert bool(torch.isfinite(_filled(wide, dtype=FP).q).all())  # clamped to fp16's range


def test_declared_softmax_scale_is_used_on_every_draw() -> None:
    b = Buffers(torch, _sc(softmax_scale=0.25), BF, device="cpu")
    b.apply("padded_all", 1.37)
    assert b.scale == 0.25
    b = Buffers(torch, _sc(), BF, device="cpu")
    b.apply("padded_all", 1.37)
    assert b.scale == pytest.approx(1.37 / 8)
    with pytest.raises(ValueError, match="declares its layout"):  # a declared layout is the only one
        Buffers(torch, _sc(layout=LayoutSpec.model_validate("head_major")), BF, device="cpu").apply("dense", 1.0)


# -- layouts -----------------------------------------------------------------------------------------
LAYOUTS = ["dense", "head_major", "packed_qkv", "cache", {"k": "broadcast", "v": "broadcast"},
           {"k": {"kind": "padded", "pad": 24, "fill": "inf"}, "o": "padded"},
           {"q": "padded", "k": "head_major", "o": "head_major"}]


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_layout_views_have_the_declared_strides_and_the_reference_reads_them(layout: Any) -> None:
    sc = _sc(layout=LayoutSpec.model_validate(layout))
    b = _filled(sc)
    want = strides(sc)
    for name, t in (("q", b.q), ("k", b.k), ("v", b.v), ("o", b.o_c)):
        assert t.stride()[:3] == want[name] and t.stride(3) == 1, name
    p = make_params(b.q, b.k, b.v, b.o_c, b.lse_c, softmax_scale=b.scale, causal=True, num_sms=1)
    assert (p.k_batch_stride, p.k_row_stride, p.k_head_stride) == want["k"]
    o, lse = attention_reference(b.q, b.k, b.v, causal=True)
    o2, lse2 = attention_reference(b.q.contiguous(), b.k.contiguous(), b.v.contiguous(), causal=True)
    assert torch.equal(o, o2) and torch.equal(lse, lse2) and bool(torch.isfinite(o).all())


def test_cache_slack_and_input_padding_hold_their_fill_after_every_fill() -> None:
    sc = _sc(layout=LayoutSpec(k={"kind": "cache", "capacity": 64}, v={"kind": "padded", "pad": 8, "fill": "inf"}))
    b = _filled(sc)
    for seed in (1, 2):
        b.fill_inputs(torch.Generator().manual_seed(seed), "normal")
        slack = torch.as_strided(b.k, (2, 64 - 40, 2, 64), b.k.stride(), b.k.storage_offset() + 40 * b.k.stride(1))
        assert bool(slack.isnan().all()) and bool(torch.isfinite(b.k).all())
        pad = torch.as_strided(b.v, (2, 40, 2, 8), b.v.stride(), b.v.storage_offset() + 64)
        assert bool(torch.isposinf(pad).all()) and bool(torch.isfinite(b.v).all())


def test_packed_qkv_is_one_buffer_and_broadcast_has_head_stride_zero() -> None:
    b = _filled(_sc(layout=LayoutSpec.model_validate("packed_qkv")))
    assert b.k.data_ptr() - b.q.data_ptr() == 4 * 64 * 2 and b.v.data_ptr() - b.k.data_ptr() == 2 * 64 * 2
    assert b.q.untyped_storage().data_ptr() == b.v.untyped_storage().data_ptr()
    b = _filled(_sc(layout=LayoutSpec.model_validate({"k": "broadcast", "v": "broadcast"})))
    assert b.k.stride(2) == 0 and torch.equal(b.v[:, :, 0], b.v[:, :, 1])


def test_padded_o_is_guarded() -> None:
    b = Buffers(torch, _sc(layout=LayoutSpec.model_validate({"o": "padded"})), BF, device="cpu")
    where = "outside the o view (head padding or tail)"
    assert where in b.guard_names and b.guards_intact() is None
    torch.as_strided(b.o_c, (3,), (1,), b.o_c.storage_offset() + 64).fill_(0.0)  # 3 elements of head 0's padding
    assert b.guards_intact() == f"3 elements written {where}"


def test_sanitizer_tensors_are_exact_allocations() -> None:
    sc = _sc(layout=LayoutSpec.model_validate("cache"))
    views, lse = sanitizer_tensors(torch, sc, BF, torch.Generator().manual_seed(0), "cpu")
    want = storage_elements(sc)
    assert [s.numel() for s in views.storages] == [want[n] for n in ("q", "k", "v", "o")]
    assert bool(torch.isfinite(views.k).all()) and count_poison(views.o) == views.o.numel()
    assert count_poison(lse) == lse.numel() and views.k.stride()[:3] == strides(sc)["k"]


# -- exactness ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("sq", "sk", "causal", "dtype"), [(7, 3, True, BF), (5, 1, False, FP), (40, 40, True, FP),
                                                          (9, 130, False, BF), (1, 1, True, BF)])
def test_reference_outputs_are_exact(sq: int, sk: int, causal: bool, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(sq * 1000 + sk)
    q, k = (torch.randn(2, n, h, 64, generator=g).to(dtype) * 3 for n, h in ((sq, 4), (sk, 2)))
    v = torch.randn(2, sk, 2, 64, generator=g).to(dtype)
    o, _ = attention_reference(q, k, v, causal=causal)
    assert exactness_failure(o.to(dtype), v, causal=causal) is None


def test_exactness_catches_one_ulp_on_a_one_key_row_and_non_zero_empty_rows() -> None:
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, n, 2, 64, generator=g).to(BF) for n in (5, 2, 2))
    o = attention_reference(q, k, v, causal=True)[0].to(BF)  # rows 0-2 see no key, row 3 sees key 0 only
    bad = o.clone()
    bad[0, 3, 1, 7] *= 1 + 2**-7  # one bf16 ulp (or two) away from v[0]
    msg = exactness_failure(bad, v, causal=True)
    assert msg and "row 3, head 1, dim 7" in msg and "sees one key (key 0)" in msg
    bad = o.clone()
    bad[0, 1, 0, 0] = 1e-30
    assert "on a row that sees no key (must be exactly 0)" in exactness_failure(bad, v, causal=True)


def test_exactness_allows_three_ulps_beyond_the_range_of_visible_values() -> None:
    v = torch.full((1, 300, 1, 64), 60000.0, dtype=FP)
    o = torch.full((1, 4, 1, 64), 60000.0, dtype=FP)
    assert exactness_failure(o, v, causal=False) is None
    o[0, 2, 0, 5] = 60000.0 + 3 * 32  # fp16 ulp at 60000 is 32
    assert exactness_failure(o, v, causal=False) is None
    o[0, 2, 0, 5] = 60000.0 + 4 * 32
    msg = exactness_failure(o, v, causal=False)
    assert msg and "= 60128 lies outside [60000, 60000]" in msg
    o[0, 2, 0, 5] = float("inf")
    assert exactness_failure(o, v, causal=False)


def test_exactness_uses_only_the_keys_a_causal_row_sees() -> None:
    v = torch.zeros(1, 8, 1, 64, dtype=BF)
    v[0, 7] = 100.0  # only the last query row sees key 7
    o = torch.zeros(1, 8, 1, 64, dtype=BF)
    o[0, 6, 0, 0] = 50.0  # row 6 sees keys 0..6 (all 0): 50 is outside
    assert "row 6, head 0, dim 0] = 50" in exactness_failure(o, v, causal=True)
    o[0, 6, 0, 0], o[0, 7, 0, 0] = 0.0, 50.0  # row 7 sees key 7: 50 is inside [0, 100]
    assert exactness_failure(o, v, causal=True) is None


# -- the worker's checks on CPU: declared fields, repeats, exactness ------------------------------------
def _check(sc: Scenario, cand: Any, orig: Any = _honest, draws: int = 2) -> Any:
    return check_scenario(sc, cand, orig, draws=draws, seed=1)


def test_declared_fields_reach_every_checked_and_timed_call() -> None:
    """A declared scale and layout reach every call; declared inputs reach the first checked draws and the
    scheduled declared timed calls (never counted in a time), while the counted timed calls and as many more
    checked draws draw ordinary values (the timed values of harness/draws.py: declared values can give the
    answer away); the repeats come last and carry their sources' values."""
    seen: list[tuple] = []

    def spy(p: Any) -> None:
        seen.append((p.scale, p.k.stride()[:3], p.o.stride()[:3]))
        declared.append(bool((p.q.float() == 0.5).all()))
        _honest(p)

    declared: list[bool] = []
    sc = _sc(softmax_scale=0.3, repeats=5, inputs=InputsSpec(q={"dist": "constant", "value": 0.5}),
             layout=LayoutSpec.model_validate({"k": {"kind": "cache", "capacity": 48}, "v": "cache", "o": "head_major"}))
    runner, res = run_scenario(sc, PyKernel(spy), draws=3)
    assert res.correct, res.message
    # 3 checked draws on the declared values, 3 on ordinary ones, then the timed calls: 2 on the declared values
    # (declared_samples(3)) and at least 3 counted ones (the times' floor), never a repeat; then the 4 repeats
    # (repeats - 1), never counted in a time either
    assert declared_samples(3) == 2
    assert runner.cand.calls == 6 + 2 + res.candidate.samples + 4 and res.candidate.samples >= 3
    assert all(s == (pytest.approx(0.3), strides(sc)["k"], strides(sc)["o"]) for s in seen)
    assert declared[:6] == [True] * 3 + [False] * 3 and sum(declared[6:-4]) == 2
    assert res.timed_values and "declared q" in res.timed_values


def test_scenario_repeats_schedule_that_many_replays_and_catch_a_late_difference() -> None:
    sc = _sc(repeats=6)
    assert repeats_of(sc, 1) == 5 and repeats_of(_sc(), 3) == 3  # the job's repeats are the floor
    drawer = CallDrawer(sc, 7, draws=2, repeats=repeats_of(sc, 1), min_samples=3)
    assert drawer.repeats == 5
    calls = {"n": 0}

    def flaky(p: Any) -> None:  # bit-different (within the tolerance) from its 3rd call on
        calls["n"] += 1
        _honest(p)
        if calls["n"] >= 3:
            p.o[0, 0, 0, 0] = (p.o[0, 0, 0, 0].float() * (1 + 2**-6)).to(p.o.dtype)

    _, res = run_scenario(sc, flaky, repeats=1, min_samples=3, max_samples=3)
    assert (res.failure_kind, res.check) == ("nondeterministic", "determinism"), res.message


def test_exactness_fails_what_the_tolerance_lets_through() -> None:
    """An original with noise in the 3rd decimal widens the tolerance (2 x its error); a candidate that is
    off by one ulp on a row that sees one key still fails, by the exactness check."""

    def noisy(p: Any) -> None:
        _honest(p)
        p.o.add_(torch.full_like(p.o, 0.01))

    def off_one_ulp(p: Any) -> None:
        _honest(p)
        p.o[:, 3].mul_(1 + 2**-7)  # row 3 sees key 0 only (seqlen_q 5, seqlen_k 2, causal)

    sc = _sc(batch=1, seqlen_q=5, seqlen_k=2, num_heads_q=2, num_heads_kv=1)
    _check(sc, _honest, orig=noisy)
    with pytest.raises(_Fail) as info:
        _check(sc, off_one_ulp, orig=noisy)
    assert (info.value.kind, info.value.check) == ("wrong_output", "exactness")
    assert "sees one key (key 0)" in str(info.value) and "[draw 0: normal inputs" in str(info.value)


# -- the memory guard --------------------------------------------------------------------------------
def test_memory_estimates_grow_with_the_problem_and_refuse_with_numbers() -> None:
    small, big = _sc(), _sc(batch=64, seqlen_q=32768, seqlen_k=32768, num_heads_q=64, num_heads_kv=8, head_dim=128)
    assert estimate_peak_bytes(small).total < estimate_peak_bytes(big).total
    assert refusal(small, 8 * (1 << 30)) is None
    msg = refusal(big, int(141 * GIB))
    assert msg and msg.startswith(f"scenario {big.id} needs an estimated ") and "of device memory; the GPU has 141.0 GiB" in msg
    cache = _sc(layout=LayoutSpec(k={"kind": "cache", "capacity": 100000}))
    assert estimate_peak_bytes(cache).buffers > estimate_peak_bytes(_sc()).buffers + 2 * 100000 * 2 * 64 - 2 * 40 * 2 * 64
    assert all(refusal(s, int(141 * GIB)) is None for s in load_suite("full").scenarios)


def test_scale_of_a_scenario() -> None:
    assert _sc(head_dim=128).scale == pytest.approx(1 / math.sqrt(128))
    assert poison_(torch.empty(3, dtype=BF)).isnan().all() and count_poison(torch.zeros(2, dtype=BF)) == 0
