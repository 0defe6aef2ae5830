"""The device-side checks of harness/checks.py and harness/buffers.py against plain element-by-element
computations written here, on real CPU tensors with the edge cases the checker meets (NaN/Inf in o, NaN/-inf/+inf
in lse, rows that see no key, rows with no finite element, empty tensors, strided outputs), and the number of
device-to-host transfers each one makes: error_report and tolerances read back once, guards_written,
row_errors_t and timed_sample_values never (their caller reads the sample's vector once)."""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import pytest
import torch

from harness.buffers import Buffers
from harness.checks import (
    FLOOR_LSE,
    FLOOR_O,
    POISON_BITS,
    TIMED_SAMPLE_FIELDS,
    ErrorReport,
    RowSample,
    error_report,
    poison_,
    row_errors_t,
    sample_rows,
    timed_sample_values,
    tolerances,
)
from harness.layouts import LayoutSpec
from harness.scenarios import Scenario
from tests.checker_support import count_reads

INF, NAN = float("inf"), float("nan")


def _vals(t: torch.Tensor) -> list[float]:
    """The elements of ``t`` as Python floats (exact: every fp32/bf16/fp16 value is a double)."""
    return [float(x) for x in t.detach().flatten().tolist()]


def _max(xs: list[float]) -> float:
    """max over ``xs`` as torch reduces: NaN when one is NaN, 0.0 for none (the checks' convention)."""
    if any(math.isnan(x) for x in xs):
        return NAN
    return max(xs, default=0.0)


def _as_error(d: float) -> float:
    """|d| as the timed checks count it (torch.nan_to_num(nan=inf)): a NaN is an infinite error, an infinite
    difference fp32's largest value."""
    return INF if math.isnan(d) else min(abs(d), torch.finfo(torch.float32).max)


def _same(a: float, b: float) -> bool:
    """Equal bit for bit as doubles, NaN equal to NaN (the payload of a NaN a reduction makes is torch's)."""
    return (math.isnan(a) and math.isnan(b)) or struct.pack("<d", a) == struct.pack("<d", b)


def _expected_report(o: torch.Tensor, lse: torch.Tensor, o_ref: torch.Tensor, lse_ref: torch.Tensor) -> ErrorReport:
    """error_report's documented meaning, one element at a time (the differences rounded to fp32 by torch's
    element-wise subtraction, as the check computes them; the relative error is today's expression)."""
    of = o.float()
    ov, dv = _vals(of), _vals(of - o_ref)
    lv, rv, dl = _vals(lse), _vals(lse_ref), _vals(lse - lse_ref)
    nonfinite = sum(not math.isfinite(x) for x in ov) + sum(math.isnan(x) or x == -INF for x in lv)
    mismatch = sum((x == INF) != (r == INF) for x, r in zip(lv, rv, strict=True))
    max_o = _max([abs(d) for x, d in zip(ov, dv, strict=True) if math.isfinite(x)])
    max_lse = _max([abs(d) for x, r, d in zip(lv, rv, dl, strict=True) if math.isfinite(x) and r != INF])
    num = torch.where(torch.isfinite(of), of - o_ref, torch.zeros_like(of)).norm().item()
    rel = num / max(o_ref.norm().item(), 1e-30)
    return ErrorReport(max_o, max_lse, rel, nonfinite, mismatch)


def _assert_report(got: ErrorReport, want: ErrorReport, o: torch.Tensor, o_ref: torch.Tensor) -> None:
    assert type(got.nonfinite) is int and type(got.lse_inf_mismatch) is int
    assert (got.nonfinite, got.lse_inf_mismatch) == (want.nonfinite, want.lse_inf_mismatch)
    for f in ("max_abs_err_o", "max_abs_err_lse", "rel_err_o"):
        assert _same(getattr(got, f), getattr(want, f)), (f, getattr(got, f), getattr(want, f))
    # and the relative error means what it says, in float64
    ov, dv, rv = _vals(o.float()), _vals(o.float() - o_ref), _vals(o_ref)
    num = math.sqrt(sum(d * d for x, d in zip(ov, dv, strict=True) if math.isfinite(x)))
    den = max(math.sqrt(sum(r * r for r in rv)), 1e-30)
    if math.isfinite(num / den):
        assert got.rel_err_o == pytest.approx(num / den, rel=1e-5, abs=1e-30)


def _case(name: str, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(o, lse, o_ref, lse_ref)``: a close candidate, then the edge case ``name``."""
    shape = (0, 5, 3, 8) if name == "empty" else (2, 9, 3, 8)
    b, sq, hq, _ = shape
    o_ref = torch.randn(shape, generator=gen)
    lse_ref = 3 * torch.randn(b, hq, sq, generator=gen)
    dtype = torch.float16 if name == "fp16_strided" else torch.bfloat16
    o = (o_ref + 0.02 * torch.randn(shape, generator=gen)).to(dtype)
    lse = lse_ref + 1e-3 * torch.randn(lse_ref.shape, generator=gen)
    if name == "mixed":
        o[0, 1, 2, 3], o[1, 4, 0, 0], o[1, 8, 2, 7] = NAN, INF, -INF
        lse_ref[0, 1, :2] = INF  # two rows see no key: the candidate agrees on one, not on the other
        lse[0, 1, 0] = INF
        lse[1, 2, 3], lse[1, 0, 5], lse[0, 2, 1] = NAN, -INF, INF
    elif name == "no_finite":  # no element finite in both: the maxima are 0.0
        o.fill_(NAN)
        lse_ref[0], lse[0] = INF, INF
        lse[1] = -INF
    elif name == "all_rows_empty":
        lse_ref.fill_(INF)
        lse.fill_(INF)
        o_ref.zero_()
        o.zero_()
    elif name == "fp16_strided":  # a padded layout's view of o
        wide = torch.full((*shape[:3], 12), 7.0, dtype=dtype)
        wide[..., :8] = o
        o = wide[..., :8]
        o[1, 1, 1, 1] = NAN
    elif name == "nan_reference":  # a NaN in the reference itself propagates (today's behaviour)
        lse_ref[1, 1, 1] = NAN
        o_ref[0, 0, 0, 0] = NAN
    return o, lse, o_ref, lse_ref


CASES = ["plain", "mixed", "no_finite", "all_rows_empty", "empty", "fp16_strided", "nan_reference"]


@pytest.mark.parametrize("name", CASES)
def test_error_report_and_tolerances_equal_an_element_by_element_computation(name: str) -> None:
    o, lse, o_ref, lse_ref = _case(name, torch.Generator().manual_seed(CASES.index(name)))
    rep = error_report(o, lse, o_ref, lse_ref)
    _assert_report(rep, _expected_report(o, lse, o_ref, lse_ref), o, o_ref)
    if name == "no_finite":
        assert rep.max_abs_err_o == 0.0 and rep.max_abs_err_lse == 0.0 and rep.nonfinite == o.numel() + 9 * 3
    if name == "empty":
        assert rep == ErrorReport(0.0, 0.0, 0.0, 0, 0)
    # tolerances: FLOOR x max(1, max|ref|), lse over its finite elements only (1 where none; max(1, NaN) is 1)
    scale_o = max(1.0, _max([abs(x) for x in _vals(o_ref)]))
    scale_l = max(1.0, _max([abs(x) for x in _vals(lse_ref) if math.isfinite(x)]))
    want = (2 * rep.max_abs_err_o + FLOOR_O * scale_o, 2 * rep.max_abs_err_lse + FLOOR_LSE * scale_l)
    got = tolerances(rep, o_ref, lse_ref)
    assert all(_same(a, b) for a, b in zip(got, want, strict=True)), (got, want)


@pytest.mark.parametrize("seed", range(6))
def test_error_report_on_random_specials_equals_an_element_by_element_computation(seed: int) -> None:
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    specials = [NAN, INF, -INF, 0.0, -0.0]
    for _ in range(10):
        shape = (rng.randint(0, 2), rng.randint(1, 6), rng.randint(1, 3), rng.choice([1, 4]))
        o_ref = torch.randn(shape, generator=gen) * rng.choice([1e-3, 1.0, 300.0])
        lse_ref = torch.randn(shape[0], shape[2], shape[1], generator=gen)
        o = (o_ref + 0.01 * torch.randn(shape, generator=gen)).to(rng.choice([torch.bfloat16, torch.float16]))
        lse = lse_ref + 1e-3 * torch.randn(lse_ref.shape, generator=gen)
        for t, pool in ((o, specials), (lse, specials), (lse_ref, [INF, INF, NAN, -INF])):
            for _ in range(rng.randint(0, 4) if t.numel() else 0):
                t.view(-1)[rng.randrange(t.numel())] = rng.choice(pool)
        rep = error_report(o, lse, o_ref, lse_ref)
        _assert_report(rep, _expected_report(o, lse, o_ref, lse_ref), o, o_ref)


def test_error_report_and_tolerances_read_back_once(monkeypatch: pytest.MonkeyPatch) -> None:
    o, lse, o_ref, lse_ref = _case("mixed", torch.Generator().manual_seed(3))
    calls = count_reads(monkeypatch)
    rep = error_report(o, lse, o_ref, lse_ref)
    assert calls == ["tolist"]
    tolerances(rep, o_ref, lse_ref)
    assert calls == ["tolist", "tolist"]


def _expected_rows(o: torch.Tensor, lse: torch.Tensor, s: Any, o_ref: torch.Tensor,
                   lse_ref: torch.Tensor) -> list[float]:
    """row_errors_t's meaning, one sampled row at a time."""
    err_o, err_l, bad = [], [], 0
    for p in range(s.rows.shape[0]):
        bi, hi = int(s.batch_idx[p]), int(s.head_idx[p])
        for r in range(s.rows.shape[1]):
            i = int(s.rows[p, r])
            diffs = _vals(o[bi, i, hi].float() - o_ref[p, r])
            err_o += [_as_error(d) for d in diffs]
            x, ref = float(lse[bi, hi, i]), float(lse_ref[p, r])
            bad += (ref == INF) != (x == INF) or math.isnan(x) or x == -INF
            if ref != INF and math.isfinite(x):
                err_l.append(abs(float(lse[bi, hi, i] - lse_ref[p, r])))
    return [_max(err_o), _max(err_l), float(bad)]


def _expected_sample(inputs_same: bool, o_c, lse_c, o_o, lse_o, guards: list[int], rows_c, rows_o, ref_max,
                     repeat_same: bool) -> list[float]:
    """timed_sample_values' layout (TIMED_SAMPLE_FIELDS, then the guards), one element at a time."""
    def poison_left(t: torch.Tensor) -> int:
        ints = t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)
        return sum(x == POISON_BITS[t.dtype] for x in ints.flatten().tolist())

    lc, lo = _vals(lse_c), _vals(lse_o)
    fin_same = all((c == INF) if x == INF else math.isfinite(c) for c, x in zip(lc, lo, strict=True))
    d_o = _max([_as_error(d) for d in _vals(o_c.float() - o_o.float())])
    d_l = _max([abs(d) for d, x in zip(_vals(lse_c - lse_o), lo, strict=True) if math.isfinite(x)])
    o_max = max([0.0 if math.isnan(x) else abs(x) for x in _vals(o_o.float())], default=0.0)
    head = [float(inputs_same), float(poison_left(o_c) + poison_left(lse_c)), float(fin_same), d_o, d_l,
            rows_c[0], rows_o[0], ref_max[0], rows_c[1], rows_o[1], ref_max[1], rows_c[2], float(repeat_same), o_max]
    assert len(head) == len(TIMED_SAMPLE_FIELDS)
    return head + [float(g) for g in guards]


@pytest.mark.parametrize("seed", range(8))
def test_row_errors_and_timed_sample_values_equal_an_element_by_element_computation(seed: int) -> None:
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    b, sq, hq, d = 2, rng.randint(1, 7), 3, 4
    o_o = torch.randn(b, sq, hq, d, generator=gen).bfloat16()
    o_c = (o_o.float() + 0.01 * torch.randn(b, sq, hq, d, generator=gen)).bfloat16()
    lse_o = torch.randn(b, hq, sq, generator=gen)
    lse_o[0, 1, 0] = INF  # a row that sees no key
    lse_c = lse_o + 1e-3 * torch.randn(b, hq, sq, generator=gen)
    lse_c[0, 1, 0] = INF
    specials = [NAN, INF, -INF]
    for t in (o_c, lse_c):
        for _ in range(rng.randint(0, 3)):
            t.view(-1)[rng.randrange(t.numel())] = rng.choice(specials)
    if seed % 3 == 0:
        poison_(o_c.view(-1)[:3]), poison_(lse_c.view(-1)[-2:])  # unwritten elements
    s = sample_rows(b, hq, sq, 3, 5, gen, "cpu")
    o_ref = torch.randn(3, 5, d, generator=gen)
    lse_ref = torch.randn(3, 5, generator=gen)
    lse_ref.view(-1)[rng.randrange(15)] = INF
    lse_ref[0, 0] = INF if seed % 2 else NAN
    rows_c, rows_o = row_errors_t(o_c, lse_c, s, o_ref, lse_ref), row_errors_t(o_o, lse_o, s, o_ref, lse_ref)
    for got, o, lse in ((rows_c, o_c, lse_c), (rows_o, o_o, lse_o)):
        assert got.dtype == torch.float32 and got.shape == (3,)
        assert all(_same(a, w) for a, w in zip(_vals(got), _expected_rows(o, lse, s, o_ref, lse_ref), strict=True))
    ref_max = torch.tensor([1.5, 2.5])
    guards = [0, rng.randint(0, 9), 0, 3]
    same, rep = bool(seed % 2), seed % 4 != 1
    vals = timed_sample_values(torch.tensor(same), o_c, lse_c, o_o, lse_o, torch.tensor(guards), rows_c, rows_o,
                               ref_max, torch.tensor(rep))
    assert vals.dtype == torch.float64 and vals.shape == (len(TIMED_SAMPLE_FIELDS) + 4,)
    want = _expected_sample(same, o_c, lse_c, o_o, lse_o, guards, _vals(rows_c), _vals(rows_o), _vals(ref_max), rep)
    assert all(_same(a, w) for a, w in zip(vals.tolist(), want, strict=True)), (vals.tolist(), want)
    # the optional arguments left out: zeros for the rows, "same" for the repeat
    bare = timed_sample_values(torch.tensor(True), o_c, lse_c, o_o, lse_o, torch.zeros(0, dtype=torch.int64))
    want = _expected_sample(True, o_c, lse_c, o_o, lse_o, [], [0.0] * 3, [0.0] * 3, [0.0] * 2, True)
    assert all(_same(a, w) for a, w in zip(bare.tolist(), want, strict=True))


def test_timed_sample_values_of_empty_outputs_are_zeros() -> None:
    o, lse = torch.zeros(0, 4, 2, 8, dtype=torch.bfloat16), torch.zeros(0, 2, 4)
    vals = timed_sample_values(torch.tensor(True), o, lse, o.clone(), lse.clone(), torch.tensor([2]))
    assert vals.tolist() == [1.0, 0.0, 1.0] + [0.0] * 9 + [1.0, 0.0, 2.0]


# -- guards ------------------------------------------------------------------------------------------
def _expected_guards(bufs: Buffers) -> list[int]:
    """Written elements per guard: a band's non-poison fp32 words; "outside the view": the region's non-poison
    elements that no element of the view covers (found by writing two different values through the view)."""
    out = []
    for where, band in bufs._guards:
        if band is not None:
            out.append(sum(x != POISON_BITS[torch.float32] for x in band.view(torch.int32).tolist()))
            continue
        name = bufs._outside[where]
        region, view = bufs.region(name), bufs.targets[name]
        saved = region.clone()
        view.fill_(1.0)
        first = region.view(torch.int16).clone()
        view.fill_(2.0)
        covered = (first == torch.tensor(1.0, dtype=region.dtype).view(torch.int16)) & (
            region.view(torch.int16) == torch.tensor(2.0, dtype=region.dtype).view(torch.int16))
        region.copy_(saved)
        bits = saved.view(torch.int16).tolist()
        out.append(sum(x != POISON_BITS[region.dtype] and not c for x, c in zip(bits, covered.tolist(), strict=True)))
    return out


GUARD_LAYOUTS = [None, "head_major", "packed_qkv", "cache", {"k": "broadcast", "v": "broadcast"}, {"o": "padded"},
                 {"k": {"kind": "cache", "capacity": 40}, "v": "cache", "o": "head_major"}]


@pytest.mark.parametrize("layout", GUARD_LAYOUTS, ids=str)
def test_guards_written_equals_a_count_per_guard(layout: Any) -> None:
    rng = random.Random(str(layout))
    sc = Scenario(group="t", batch=2, seqlen_q=6, seqlen_k=6 if layout == "packed_qkv" else 11, num_heads_q=4,
                  num_heads_kv=2, head_dim=16, causal=False,
                  layout=None if layout is None else LayoutSpec.model_validate(layout))
    bufs = Buffers(torch, sc, torch.bfloat16, device="cpu", workspace_bytes=1001)
    for n, lay in enumerate(bufs.layouts * 2):
        poison_(bufs.arena.view(torch.float32))  # the guard bands too (apply poisons the regions only)
        bufs.apply(lay, 1.0)
        bufs.fill_inputs(torch.Generator().manual_seed(n), "normal")
        bufs.o_c.fill_(0.5), bufs.lse_c.fill_(0.5)
        assert bufs.guards_written().tolist() == _expected_guards(bufs) == [0] * len(bufs.guard_names)
        for _, band in bufs._guards:  # words written in the bands, their first and last ones included
            if band is not None:
                n_words = band.numel()
                band[rng.sample([0, n_words - 1, *rng.sample(range(1, n_words - 1), 2)], rng.randint(0, 4))] = 0.0
        for _ in range(rng.randint(1, 30)):  # and bytes anywhere in the arena
            at = rng.randrange(bufs.nbytes)
            bufs.arena[at:at + rng.randint(1, 6)] = rng.randrange(256)
        got = bufs.guards_written()
        assert got.dtype == torch.int64 and got.shape == (len(bufs.guard_names),)
        assert got.tolist() == _expected_guards(bufs)


def test_guards_and_sample_checks_never_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    sc = Scenario(group="t", batch=2, seqlen_q=6, seqlen_k=9, num_heads_q=4, num_heads_kv=2, head_dim=16, causal=False)
    bufs = Buffers(torch, sc, torch.bfloat16, device="cpu")
    bufs.apply("padded_all", 1.0)
    bufs.o_c.fill_(0.5), bufs.lse_c.fill_(0.5)
    gen = torch.Generator().manual_seed(0)
    s = sample_rows(2, 4, 6, 3, 5, gen, "cpu")
    o_ref, lse_ref = torch.randn(3, 5, 16, generator=gen), torch.randn(3, 5, generator=gen)
    calls = count_reads(monkeypatch)
    rows = row_errors_t(bufs.o_c, bufs.lse_c, s, o_ref, lse_ref)
    vals = timed_sample_values(torch.tensor(True), bufs.o_c, bufs.lse_c, bufs.o_c.clone(), bufs.lse_c.clone(),
                               bufs.guards_written(), rows, rows, torch.ones(2), torch.tensor(True))
    assert calls == []
    assert vals.tolist()[len(TIMED_SAMPLE_FIELDS):] == [0.0] * len(bufs.guard_names)


def test_row_errors_flag_each_disagreement_on_the_rows_that_see_no_key() -> None:
    """row_errors_t's third value counts the sampled rows whose lse is NaN, -inf, or +inf where the reference's is
    not (and finite where the reference's is +inf): here one of each kind, on a row the reference says sees no key
    (+inf) and on rows it says see keys."""
    o = torch.zeros(1, 4, 1, 2, dtype=torch.bfloat16)
    lse = torch.tensor([[[-INF, INF, NAN, 0.5]]])  # [b, hq, sq]
    s = RowSample(torch.tensor([0]), torch.tensor([0]), torch.tensor([[0, 1, 2, 3]]))
    lse_ref = torch.tensor([[INF, 0.5, 0.5, 0.5]])  # row 0 sees no key
    got = row_errors_t(o, lse, s, torch.zeros(1, 4, 2), lse_ref)
    assert got[2].item() == 3.0  # -inf where ref is +inf, +inf where ref is finite, NaN; row 3 agrees
    lse[0, 0, 0] = INF  # row 0 now agrees
    assert row_errors_t(o, lse, s, torch.zeros(1, 4, 2), lse_ref)[2].item() == 2.0


def test_tolerances_scale_the_lse_floor_by_the_finite_reference_only() -> None:
    """The lse floor's scale is max(1, max |lse_ref|) over its finite elements: -inf, +inf and NaN are left out."""
    o_ref = torch.tensor([0.5, -3.0])
    lse_ref = torch.tensor([-INF, INF, NAN, -7.0, 2.0])
    tol_o, tol_lse = tolerances(ErrorReport(0.01, 0.001, 0.0, 0, 0), o_ref, lse_ref)
    assert tol_o == 2 * 0.01 + FLOOR_O * 3.0
    assert tol_lse == 2 * 0.001 + FLOOR_LSE * 7.0
    _, only_inf = tolerances(ErrorReport(0.0, 0.0, 0.0, 0, 0), o_ref, torch.tensor([INF, -INF, NAN]))
    assert only_inf == FLOOR_LSE * 1.0


def test_timed_sample_values_keep_integer_counts_exact() -> None:
    """Every value is converted to float64 on its own, so an integer row statistic above 2^24 stays exact."""
    o, lse = torch.zeros(1, 2, 1, 4, dtype=torch.bfloat16), torch.zeros(1, 1, 2)
    rows = torch.tensor([16_777_217, 0, 0])
    vals = timed_sample_values(torch.tensor(True), o, lse, o.clone(), lse.clone(), torch.tensor([0]), rows, rows,
                               torch.ones(2))
    assert vals[TIMED_SAMPLE_FIELDS.index("row_err_o")].item() == 16_777_217.0
    assert vals[TIMED_SAMPLE_FIELDS.index("row_err_o_orig")].item() == 16_777_217.0


def test_view_of_maps_exactly_the_views_inside_their_region() -> None:
    """harness.buffers._view_of: the region's mask at a view's elements for a view inside the region at any offset
    and strides; None for a view of another dtype, another storage, or one that runs past the region."""
    from harness.buffers import _view_of

    region = torch.arange(64, dtype=torch.float32)
    mask = region.remainder(3) == 0  # any per-element mask of the region
    for offset, shape, stride in ((0, (4, 4), (4, 1)), (5, (3, 2), (7, 2)), (10, (2, 3, 2), (20, 1, 5)), (63, (1,), (1,)),
                                  (8, (4,), (0,))):
        view = region.as_strided(shape, stride, offset)
        got = _view_of(mask, region, view)
        assert got is not None and got.shape == view.shape
        assert got.tolist() == (view.remainder(3) == 0).tolist()
    assert _view_of(mask, region, region.view(torch.int32)[2:6]) is None  # another dtype
    assert _view_of(mask, region, torch.arange(64, dtype=torch.float32)[:4]) is None  # another storage
    assert _view_of(mask, region[:32], region.as_strided((4,), (10,), 5)) is None  # past the region's end
