"""The checked draws' device-side checks against plain computations written here, on real CPU tensors:
harness.exactness.exactness_failure (its three rules judged one element at a time, each rule's failing cases,
NaN/Inf, rows that see no key or one key, causal and not, strided tensors, empty shapes) and the checks of a
checked draw's candidate call (harness.checks.checked_call_values / judge_checked_call: inputs, guard bands,
poison left, judged in that order; checked_bounds: the timed bounds from the draws' max|o|), and the number of
device-to-host transfers each makes: one per call where it passes (none for no query row)."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import pytest
import torch

import harness.checks as checks_mod
from harness.buffers import Buffers
from harness.checks import (
    POISON_BITS,
    TimedBounds,
    checked_bounds,
    checked_call_values,
    judge_checked_call,
    poison_,
)
from harness.exactness import HULL_ULPS, _rows_seeing_at_most, exactness_failure, visible_keys
from harness.reference import attention_reference
from harness.scenarios import Scenario, keys_seen
from tests.checker_support import count_reads, honest, make_runner, run_scenario

BF, FP = torch.bfloat16, torch.float16
INF, NAN = float("inf"), float("nan")
MANTISSA = {BF: 7, FP: 10}


# -- exactness: the rules one element at a time ----------------------------------------------------------
def _f32(x: float) -> float:
    """``x`` rounded to fp32 (one fp32 operation on fp32 operands computed in double, then rounded: exact)."""
    return torch.tensor(x, dtype=torch.float64).to(torch.float32).item()


def _keys_seen(i: int, sq: int, sk: int, causal: bool) -> int:
    """Keys query row ``i`` sees: every key, or (bottom-right causal) the keys j <= i + sk - sq."""
    return sum(1 for j in range(sk) if not causal or j <= i + sk - sq)


def _expected(o: torch.Tensor, v: torch.Tensor, causal: bool) -> str | None:
    """exactness_failure's documented meaning: rows that see no key hold exactly 0, rows that see one key
    (key 0) hold its v exactly, every other element lies in [min v, max v] over the keys its row sees widened by
    HULL_ULPS ulps (of the dtype, at the larger magnitude, at least 2^-14; NaN is outside). Rules in that
    order; within a rule the first failing element by (batch, row, head, dim), the message as documented."""
    b, sq, hq, d = o.shape
    sk, hk = v.shape[1], v.shape[2]
    ov = [[[[float(o[bb, i, h, c]) for c in range(d)] for h in range(hq)] for i in range(sq)] for bb in range(b)]
    vv = [[[[float(v[bb, j, h, c]) for c in range(d)] for h in range(hk)] for j in range(sk)] for bb in range(b)]
    n = [_keys_seen(i, sq, sk, causal) for i in range(sq)]
    group = hq // hk
    cells = [(bb, i, h, c) for bb in range(b) for i in range(sq) for h in range(hq) for c in range(d)]
    for bb, i, h, c in cells:
        x = ov[bb][i][h][c]
        if n[i] == 0 and x != 0:  # NaN != 0
            return (f"o[batch {bb}, row {i}, head {h}, dim {c}] = {x:.6g} on a row that sees no key "
                    "(must be exactly 0)")
    for bb, i, h, c in cells:
        x, w = ov[bb][i][h][c], (vv[bb][0][h // group][c] if sk else None)
        if n[i] == 1 and x != w:
            return (f"o[batch {bb}, row {i}, head {h}, dim {c}] = {x:.6g}, but the row sees one key (key 0) whose "
                    f"v is {w:.6g}: it must be returned exactly")
    outside = []
    for bb, i, h, c in cells:
        if n[i] == 0:
            continue
        seen = [vv[bb][j][h // group][c] for j in range(n[i])]
        lo, hi = (NAN, NAN) if any(math.isnan(y) for y in seen) else (min(seen), max(seen))
        mag = max(abs(lo), abs(hi), 2.0**-14)
        slack = HULL_ULPS * 2.0 ** (math.frexp(mag)[1] - 1 - MANTISSA[o.dtype]) if math.isfinite(mag) else 0.0
        x = ov[bb][i][h][c]
        if not (_f32(lo - slack) <= x <= _f32(hi + slack)):  # NaN (in o or among the keys) is outside
            outside.append((bb, i, h, c, x, lo, hi))
    if outside:
        bb, i, h, c, x, lo, hi = outside[0]
        return (f"o[batch {bb}, row {i}, head {h}, dim {c}] = {x:.6g} lies outside [{lo:.6g}, {hi:.6g}], the range "
                f"of v over the {n[i]} keys its row sees (+- {HULL_ULPS} ulps): o must be a convex combination of "
                f"them ({len(outside)} such elements)")
    return None


def _case(b: int, sq: int, sk: int, hq: int, hk: int, causal: bool, dtype: torch.dtype, seed: int, *,
          v_scale: float = 1.0, d: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Random v and the fp32 reference's o for it (rounded to ``dtype``: passes every rule); zeros without keys."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, sq, hq, d, generator=g).to(dtype)
    k = torch.randn(b, sk, hk, d, generator=g).to(dtype)
    v = (torch.randn(b, sk, hk, d, generator=g) * v_scale).to(dtype) + 0  # + 0: no -0 (min(-0, 0) is either)
    o = attention_reference(q, k, v, causal=causal)[0].to(dtype) if sk else torch.zeros(b, sq, hq, d, dtype=dtype)
    return o, v


def _ulp(x: float, dtype: torch.dtype) -> float:
    return 2.0 ** (math.frexp(max(abs(x), 2.0**-14))[1] - 1 - MANTISSA[dtype])


# (name, shape (b, sq, sk, hq, hk), causal, dtype, what to do to o (and v), the rule expected to fail or None)
def _no_key_row(o: torch.Tensor, v: torch.Tensor) -> None:
    o[1, 0, 1, 3] = 1e-30  # batch 1 first by row, but batch 0 comes first: the first failing element is batch 0's
    o[0, 2, 0, 5] = 2.0**-20


def _no_key_nan(o: torch.Tensor, v: torch.Tensor) -> None:
    o[0, 1, -1, 7] = NAN


def _negative_zero(o: torch.Tensor, v: torch.Tensor) -> None:
    o[:, :3] = -0.0  # -0 == 0: rows that see no key may hold it


def _one_key_ulp(o: torch.Tensor, v: torch.Tensor) -> None:
    x = float(o[1, 3, 2, 6])
    o[1, 3, 2, 6] = x + _ulp(x, o.dtype)


def _one_key_inf(o: torch.Tensor, v: torch.Tensor) -> None:
    o[0, 3, 0, 0] = -INF


def _both_first_rules(o: torch.Tensor, v: torch.Tensor) -> None:
    _one_key_ulp(o, v)
    o[1, 2, 3, 1] = 1.0  # the no-key rule is judged first
    o[0, 5, 0, 0] = 1e6  # and the range rule last


def _outside_by_4_ulps(o: torch.Tensor, v: torch.Tensor) -> None:
    hi = float(v[0, :, 1, 2].float().max())  # non-causal: every row sees every key
    o[0, 2, 2, 2] = hi + 4 * _ulp(hi, o.dtype)  # heads 2, 3 read kv head 1
    o[1, 4, 3, 7] = NAN
    o[1, 5, 0, 1] = INF


def _inside_by_3_ulps(o: torch.Tensor, v: torch.Tensor) -> None:
    lo = float(v[0, :, 0, 0].float().min())
    o[0, 2, 1, 0] = lo - 3 * _ulp(lo, o.dtype)


def _causal_range(o: torch.Tensor, v: torch.Tensor) -> None:
    v[:, -1] = 100.0  # only the last row sees the last key
    o[0, -2, 1, 4] = 50.0  # outside for the row before it
    o[1, -1, 2, 4] = 50.0  # inside for the last row


def _nan_key(o: torch.Tensor, v: torch.Tensor) -> None:
    v[0, 4, 0, 3] = NAN  # rows that see key 4 have no range: every element there is outside


def _inf_key(o: torch.Tensor, v: torch.Tensor) -> None:
    v[1, 0, 1, 1] = INF  # every value up to +inf is inside for head 2, 3's dim 1 (kv head 1), not one below min v
    o[1, 5, 2, 1] = 1e30
    o[1, 4, 3, 1] = -1e30


def _nothing(o: torch.Tensor, v: torch.Tensor) -> None:
    pass


CASES = [
    ("passes: causal, rows that see no key and one key", (2, 8, 5, 4, 2), True, BF, _nothing, None),
    ("passes: causal, square", (2, 7, 7, 4, 4), True, FP, _nothing, None),
    ("passes: causal, more keys than rows", (2, 4, 9, 2, 1), True, BF, _nothing, None),
    ("passes: not causal", (1, 6, 5, 4, 2), False, FP, _nothing, None),
    ("passes: not causal, one key for every row", (2, 5, 1, 4, 2), False, BF, _nothing, None),
    ("passes: causal, one key", (2, 5, 1, 2, 2), True, FP, _nothing, None),
    ("passes: no key at all (zeros)", (2, 4, 0, 2, 1), False, BF, _nothing, None),
    ("passes: no key at all, causal (zeros)", (2, 4, 0, 2, 1), True, FP, _nothing, None),
    ("passes: no query row", (2, 0, 5, 4, 2), True, BF, _nothing, None),
    ("passes: empty batch", (0, 6, 4, 4, 2), True, BF, _nothing, None),
    ("passes: one row", (1, 1, 6, 2, 1), True, FP, _nothing, None),
    ("passes: -0 on rows that see no key", (2, 8, 5, 4, 2), True, BF, _negative_zero, None),
    ("passes: 3 ulps below the range", (1, 6, 5, 4, 2), False, FP, _inside_by_3_ulps, None),
    ("no key: non-zero, first by batch", (2, 8, 5, 4, 2), True, BF, _no_key_row, "no key"),
    ("no key: NaN", (2, 8, 5, 4, 2), True, FP, _no_key_nan, "no key"),
    ("no key: non-zero without any key", (2, 4, 0, 2, 1), False, BF, _no_key_nan, "no key"),
    ("one key: one ulp off", (2, 8, 5, 4, 2), True, BF, _one_key_ulp, "one key"),
    ("one key: -inf", (2, 5, 1, 2, 2), False, FP, _one_key_inf, "one key"),
    ("no key judged before one key and range", (2, 8, 5, 4, 2), True, FP, _both_first_rules, "no key"),
    ("range: 4 ulps, NaN, inf (count)", (2, 6, 5, 4, 2), False, BF, _outside_by_4_ulps, "range"),
    ("range: only the keys a causal row sees", (2, 6, 6, 4, 2), True, FP, _causal_range, "range"),
    ("range: a NaN key", (2, 6, 6, 2, 1), True, BF, _nan_key, "range"),
    ("range: an infinite key", (2, 6, 6, 4, 2), False, FP, _inf_key, "range"),
]


def _rule(msg: str | None) -> str | None:
    if msg is None:
        return None
    return "no key" if "sees no key" in msg else ("one key" if "sees one key" in msg else "range")


@pytest.mark.parametrize(("name", "shape", "causal", "dtype", "edit", "rule"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("strided", [False, True], ids=["dense", "strided"])
def test_exactness_failure_equals_the_rules_one_element_at_a_time(name: str, shape: tuple[int, ...], causal: bool,
                                                                   dtype: torch.dtype, edit: Any, rule: str | None,
                                                                   strided: bool) -> None:
    b, sq, sk, hq, hk = shape
    o, v = _case(b, sq, sk, hq, hk, causal, dtype, seed=sum(shape) + causal)
    edit(o, v)
    if strided:  # head-major o, and v inside a padded buffer
        o = o.transpose(1, 2).contiguous().transpose(1, 2)
        big = torch.full((b, sk, hk, v.shape[3] + 8), NAN, dtype=dtype)
        big[..., :v.shape[3]] = v
        v = big[..., :v.shape[3]]
    want = _expected(o, v, causal)
    assert _rule(want) == rule, want  # the case reaches the rule it is for
    assert exactness_failure(o, v, causal=causal) == want


def test_exactness_failure_equals_the_rules_on_random_outputs() -> None:
    rng = random.Random(5)
    rules = set()
    for seed in range(150):
        hk = rng.choice([1, 2])
        b, sq, sk, hq = rng.randint(1, 2), rng.randint(0, 7), rng.randint(0, 6), hk * rng.choice([1, 2])
        causal, dtype = rng.random() < 0.6, rng.choice([BF, FP])
        o, v = _case(b, sq, sk, hq, hk, causal, dtype, seed, v_scale=rng.choice([1.0, 1e-3, 300.0, 1e-30]))
        for _ in range(rng.choice([0, 1, 1, 3])):  # a few elements changed: values, NaN, inf, an ulp, a zero
            if o.numel():
                i = rng.randrange(o.numel())
                x = float(o.view(-1)[i])
                o.view(-1)[i] = rng.choice([NAN, INF, -INF, 1e-30, 0.0, x + _ulp(x, dtype), x * 1.01, x + 1.0])
        want = _expected(o, v, causal)
        rules.add(_rule(want))
        assert exactness_failure(o, v, causal=causal) == want, (seed, want)
    assert rules == {None, "no key", "one key", "range"}


def test_rows_seeing_at_most_count_the_rows_of_visible_keys() -> None:
    for sq in range(12):
        for sk in range(12):
            for causal in (False, True):
                n = visible_keys(sq, sk, causal, "cpu").tolist()
                assert [keys_seen(i, sq, sk, causal) for i in range(sq)] == n
                assert n == [_keys_seen(i, sq, sk, causal) for i in range(sq)]
                for keys in (0, 1, 2):
                    count = _rows_seeing_at_most(keys, sq, sk, causal)
                    assert count == sum(x <= keys for x in n) and all(x <= keys for x in n[:count])


@pytest.mark.parametrize("causal", [True, False])
def test_exactness_failure_reads_back_once_when_it_passes(monkeypatch: pytest.MonkeyPatch, causal: bool) -> None:
    o, v = _case(2, 8, 5, 4, 2, causal, BF, seed=1)
    empty_q, empty_v = _case(2, 0, 5, 4, 2, causal, BF, seed=1)
    calls = count_reads(monkeypatch)
    assert exactness_failure(o, v, causal=causal) is None
    assert calls == ["tolist"]
    assert exactness_failure(empty_q, empty_v, causal=causal) is None  # no query row: nothing to read
    assert calls == ["tolist"]


@pytest.mark.parametrize("edit", [_no_key_row, _one_key_ulp, _causal_range], ids=["no key", "one key", "range"])
def test_exactness_failure_reads_more_only_for_the_failed_rules_message(monkeypatch: pytest.MonkeyPatch,
                                                                       edit: Any) -> None:
    o, v = _case(2, 8, 5, 4, 2, True, BF, seed=1)
    edit(o, v)
    want = _expected(o, v, True)
    calls = count_reads(monkeypatch)
    assert exactness_failure(o, v, causal=True) == want and want is not None
    assert calls[0] == "tolist" and "tolist" not in calls[1:]


# -- a checked draw's candidate call: inputs, guard bands, poison left -------------------------------------
def _old_judgement(same: bool, bufs: Buffers, where: str) -> tuple[str, str, str] | None:
    """The checked draw's checks as they were judged one read-back at a time: inputs, guards, poison left."""
    if not same:
        return "inputs_modified", "input_integrity", f"q, k or v changed during the call {where}"
    broken = bufs.guards_intact()
    if broken:
        return "out_of_bounds_write", "guard_bands", f"out-of-bounds write: {broken} {where}"
    unwritten = sum(x == POISON_BITS[t.dtype] for t in (bufs.o_c, bufs.lse_c)
                    for x in (t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)
                              .flatten().tolist()))
    if unwritten:
        return ("unwritten_output", "poisoned_output",
                f"{unwritten} elements of o/lse were never written (poison left) {where}")
    return None


def _bytes_equal(a: Buffers, b: Buffers) -> bool:
    return all(x.contiguous().view(torch.uint8).tolist() == y.contiguous().view(torch.uint8).tolist()
               for x, y in zip(a.input_regions_t(), b.input_regions_t(), strict=True))


@pytest.mark.parametrize("seed", range(24))
def test_checked_call_judgement_equals_the_checks_one_at_a_time(seed: int) -> None:
    rng = random.Random(seed)
    sc = Scenario(group="t", batch=2, seqlen_q=6, seqlen_k=9, num_heads_q=4, num_heads_kv=2, head_dim=16,
                  causal=bool(seed % 2))
    dtype = BF if seed % 3 else FP
    runner = make_runner(None)
    bufs_o = Buffers(torch, sc, dtype, device="cpu", workspace_bytes=512)
    bufs_c = Buffers(torch, sc, dtype, device="cpu", workspace_bytes=512)
    lay = rng.choice(bufs_c.layouts)
    for bf in (bufs_o, bufs_c):
        bf.apply(lay, 1.0)
    bufs_o.fill_inputs(torch.Generator().manual_seed(seed), "normal")
    bufs_c.copy_inputs_from(bufs_o)
    bufs_c.prepare_outputs(), bufs_o.prepare_outputs()
    # the "call": outputs written (some elements left poisoned), and maybe an input byte, a guard byte changed
    bufs_c.o_c.copy_(torch.randn(bufs_c.o_c.shape).to(dtype)), bufs_c.lse_c.fill_(0.5)
    for _ in range(rng.choice([0, 0, 1, 4])):  # elements left poisoned (o may be strided)
        bb, i, h = rng.randrange(2), rng.randrange(6), rng.randrange(4)
        if rng.random() < 0.5:
            poison_(bufs_c.o_c[bb, i, h, rng.randrange(16):][:1])
        else:
            poison_(bufs_c.lse_c[bb, h, i:i + 1])
    if rng.random() < 0.4:  # an input byte (a view's element or the padding around it)
        region = rng.choice(bufs_c.input_regions_t())
        region.view(torch.uint8)[rng.randrange(region.numel() * region.element_size())] ^= 0x10
    if rng.random() < 0.5:  # a byte anywhere in the arena (a guard band, a region's outside, the workspace...)
        at = rng.randrange(bufs_c.nbytes)
        bufs_c.arena[at] = (int(bufs_c.arena[at]) + 1) % 256
    where = f"[draw {seed}: normal inputs, {lay} layout]"
    want = _old_judgement(_bytes_equal(bufs_c, bufs_o), bufs_c, where)
    vals = checked_call_values(runner._inputs_same_t(bufs_c, bufs_o), bufs_c.o_c, bufs_c.lse_c, bufs_c.guards_written())
    assert vals.dtype == torch.int64 and vals.shape == (2 + len(bufs_c.guard_names),)
    assert judge_checked_call(vals.tolist(), bufs_c.guard_names, where) == want


def test_checked_call_values_never_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    sc = Scenario(group="t", batch=2, seqlen_q=6, seqlen_k=9, num_heads_q=4, num_heads_kv=2, head_dim=16, causal=True)
    bufs = Buffers(torch, sc, BF, device="cpu")
    bufs.o_c.fill_(1.0)
    calls = count_reads(monkeypatch)
    vals = checked_call_values(torch.tensor(True), bufs.o_c, bufs.lse_c, bufs.guards_written())
    assert calls == []
    assert vals.tolist() == [1, bufs.lse_c.numel()] + [0] * len(bufs.guard_names)


@pytest.mark.parametrize("case", ["inputs first", "guards second", "poison last", "passes"])
def test_judge_checked_call_order(case: str) -> None:
    names = ["before q", "after q", "after lse"]
    vals = {"inputs first": [0, 7, 0, 3, 1], "guards second": [1, 7, 0, 3, 1], "poison last": [1, 7, 0, 0, 0],
            "passes": [1, 0, 0, 0, 0]}[case]
    want = {"inputs first": ("inputs_modified", "input_integrity", "q, k or v changed during the call [w]"),
            "guards second": ("out_of_bounds_write", "guard_bands", "out-of-bounds write: 3 elements written after q [w]"),
            "poison last": ("unwritten_output", "poisoned_output",
                            "7 elements of o/lse were never written (poison left) [w]"),
            "passes": None}[case]
    assert judge_checked_call(vals, names, "[w]") == want


def test_checked_bounds_equal_the_merge_draw_by_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(3)
    for _ in range(40):
        drafts, plain = [], {}
        for _ in range(rng.randint(1, 6)):
            key = rng.choice(["normal", "large_logits", "declared"])
            draft = TimedBounds(rng.random(), rng.random(), rng.random(), rng.random(), mantissa_bits=rng.choice([7, 10]))
            o = torch.randn(3, 4, generator=torch.Generator().manual_seed(rng.randrange(99))).to(BF) * rng.random()
            if rng.random() < 0.2:
                o[0, 0] = rng.choice([NAN, INF])
            empty = rng.random() < 0.15
            m = None if empty else o.float().abs().nan_to_num(0).max()
            ref = 0.0 if empty else float(o.float().abs().nan_to_num(0).max().item())  # as the draws read it
            b = dataclasses.replace(draft, ref_o_max=ref)
            plain[key] = b if key not in plain else plain[key].merge(b)
            drafts.append((key, draft, m))
        calls = count_reads(monkeypatch)
        assert checked_bounds(drafts) == plain
        assert calls == ([] if all(m is None for _, _, m in drafts) else ["tolist"])
        monkeypatch.undo()


# -- through the checker: the first failed check of a checked draw, and its bounds -------------------------
SC_CHECK = Scenario(group="t", batch=2, seqlen_q=24, seqlen_k=24, num_heads_q=4, num_heads_kv=2, head_dim=16,
                    causal=True)


def _past_lse(p: Any) -> None:
    torch.as_strided(p.lse, (3,), (1,), p.lse.storage_offset() + p.lse.numel()).fill_(0.0)


def _everything(p: Any) -> None:  # inputs, a guard, poison left: the inputs are named
    honest(p)
    p.k[0, 0, 0, 0] += 1.0
    _past_lse(p)
    poison_(p.lse[0, 0, :5])


def _guard_and_poison(p: Any) -> None:  # a guard, poison left: the guard is named
    honest(p)
    _past_lse(p)
    poison_(p.lse[0, 0, :5])


def _poison(p: Any) -> None:
    honest(p)
    poison_(p.lse[1, 2, :7])
    poison_(p.o[0, 3, 1, :2])


@pytest.mark.parametrize(("body", "kind", "check", "start"), [
    (_everything, "inputs_modified", "input_integrity", "q, k or v changed during the call [draw 0: "),
    (_guard_and_poison, "out_of_bounds_write", "guard_bands", "out-of-bounds write: 3 elements written after lse [draw 0: "),
    (_poison, "unwritten_output", "poisoned_output", "9 elements of o/lse were never written (poison left) [draw 0: "),
])
def test_the_checked_draws_name_the_first_failed_check(body: Any, kind: str, check: str, start: str) -> None:
    _, res = run_scenario(SC_CHECK, body)
    assert (res.failure_kind, res.check) == (kind, check), res.message
    assert res.message.startswith(start) and res.message.endswith(" layout]"), res.message


def test_the_checked_draws_bounds_use_each_draws_original_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every draw's max|o| is computed when the draw ran and read back after the last one: the bounds are those
    of the original's outputs as they were (not as a later draw left the arena)."""
    seen: list[float] = []

    def original(p: Any) -> None:
        honest(p)
        seen.append(float(p.o.float().abs().nan_to_num(0).max()))

    captured: list[tuple[list, dict]] = []
    real = checks_mod.checked_bounds

    def spy(drafts: list) -> dict:
        out = real(drafts)
        captured.append((list(drafts), out))
        return out

    monkeypatch.setattr(checks_mod, "checked_bounds", spy)
    _, res = run_scenario(SC_CHECK, honest, original, draws=4)
    assert res.correct, res.message
    (drafts, bounds), = captured
    checked = seen[:len(drafts)]  # the original's checked calls come first (then its timed calls)
    assert [float(m) for _, _, m in drafts] == checked and len(set(checked)) == len(checked)
    plain: dict[str, TimedBounds] = {}
    for (key, draft, _), m in zip(drafts, checked, strict=True):
        b = dataclasses.replace(draft, ref_o_max=m)
        plain[key] = b if key not in plain else plain[key].merge(b)
    assert bounds == plain
