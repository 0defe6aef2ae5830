"""Correctness checks shared by the worker and the tests: poison, error statistics, tolerances.

Every check has a name (listed in ``CHECKS`` and documented in docs/checks.md); a failed scenario
names the check that caught it. All functions take torch tensors on any device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from harness.verdict import CHECKS  # noqa: F401  (re-exported: the named checks)

#: NaN payloads used as poison; a kernel that computes NaN produces the canonical NaN, not these.
POISON_BITS = {torch.bfloat16: 0x7FA5, torch.float16: 0x7D5A, torch.float32: 0x7FA5A5A5}

#: Relative error bound ||o - ref|| / ||ref|| per dtype (a catch-all for precision dropped below the dtype).
REL_ERR_BOUND = {torch.bfloat16: 2e-2, torch.float16: 5e-3}

#: Floors added to FlashAttention's 2x rule, relative to max(1, max|ref|).
FLOOR_O = 1e-4
FLOOR_LSE = 1e-4


def _int_view(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` (bf16, fp16 or fp32) in place with this module's NaN payload; returns ``t``."""
    bits = POISON_BITS[t.dtype]
    if t.element_size() == 2 and bits >= 0x8000:  # pragma: no cover - payloads are < 0x8000
        bits -= 0x10000
    _int_view(t).fill_(bits)
    return t


def poison_count_t(t: torch.Tensor) -> torch.Tensor:
    """:func:`count_poison` as a 0-d int64 tensor on ``t``'s device (no host synchronization)."""
    return (_int_view(t) == POISON_BITS[t.dtype]).sum()


def written_mask(t: torch.Tensor) -> torch.Tensor:
    """Bool tensor shaped like ``t`` (bf16, fp16 or fp32): True where the element no longer holds the poison
    payload (written since :func:`poison_`), on ``t``'s device (no host synchronization)."""
    return _int_view(t) != POISON_BITS[t.dtype]


def count_poison(t: torch.Tensor) -> int:
    """Number of elements of ``t`` still holding the poison payload (never written)."""
    return int(poison_count_t(t).item())


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality (NaN payloads included)."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_int_view(a), _int_view(b))


def bits_equal_t(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """:func:`bits_equal` as a 0-d bool tensor on ``a``'s device (no host synchronization)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return torch.zeros((), dtype=torch.bool, device=a.device)
    return (_int_view(a) == _int_view(b)).all()


def first_written_guard(written: list[int] | list[float], names: list[str]) -> str | None:
    """None when no guard was written, else ``"<count> elements written <where>"`` for the first one.
    ``written``: elements no longer holding poison per guard; ``names``: where each guard is."""
    for count, where in zip(written, names, strict=True):
        if count:
            return f"{int(count)} elements written {where}"
    return None


#: Layout of :func:`timed_sample_values`: inputs unchanged (1/0), poison left in o/lse (count), lse
#: finite masks equal (1/0), max|o - original|, max|lse - original| over finite rows; on the sampled
#: rows against the fp32 reference: the candidate's and the original's max |o - ref|, max|ref o|, the
#: candidate's and the original's max |lse - ref| (finite rows), max|ref lse|, rows disagreeing on
#: lse = +inf (or NaN/-inf); the determinism repeat's outputs bit-equal to its source's (1/0; 1 when the
#: call is no repeat); max|o| of the original's output (the bound's scale); then one written-element
#: count per guard band.
TIMED_SAMPLE_FIELDS = ("inputs_same", "unwritten", "lse_finite_same", "d_o", "d_lse", "row_err_o", "row_err_o_orig",
                       "row_ref_o_max", "row_err_lse", "row_err_lse_orig", "row_ref_lse_max", "row_inf_mismatch",
                       "repeat_same", "orig_o_max")
_HEAD = len(TIMED_SAMPLE_FIELDS)


@dataclass(frozen=True)
class RowSample:
    """Query rows checked against the fp32 reference in one timed call: ``batch_idx``, ``head_idx`` int64
    ``[P]`` (query heads), ``rows`` int64 ``[P, R]``."""

    batch_idx: torch.Tensor
    head_idx: torch.Tensor
    rows: torch.Tensor


def sample_rows(b: int, hq: int, sq: int, pairs: int, per_pair: int, gen: torch.Generator, device) -> RowSample:
    """Random (batch, query head) pairs and random query rows in each (with replacement), drawn on ``device``."""
    bi = torch.randint(0, b, (pairs,), generator=gen, device=device)
    hi = torch.randint(0, hq, (pairs,), generator=gen, device=device)
    rows = torch.randint(0, sq, (pairs, per_pair), generator=gen, device=device)
    return RowSample(bi, hi, rows)


def row_errors_t(o: torch.Tensor, lse: torch.Tensor, s: RowSample, o_ref: torch.Tensor,
                 lse_ref: torch.Tensor) -> torch.Tensor:
    """``[max|o - ref|, max|lse - ref|, inf/NaN mismatches]`` (fp32, on the device) of ``o [b, sq, hq, d]``,
    ``lse [b, hq, sq]`` on the sampled rows; ``o_ref [P, R, d]``, ``lse_ref [P, R]`` from
    harness.reference.attention_reference_rows. A NaN in o counts as an infinite error."""
    o_rows = o[s.batch_idx[:, None], s.rows, s.head_idx[:, None]].float()
    lse_rows = lse[s.batch_idx[:, None], s.head_idx[:, None], s.rows]
    err_o = (o_rows - o_ref).abs().nan_to_num_(float("inf")).max() if o_rows.numel() else o_ref.new_zeros(())
    ref_inf = torch.isposinf(lse_ref)
    fin = torch.isfinite(lse_rows)
    # bad: NaN, -inf, or +inf exactly where the reference's is not (= not "+inf on ref_inf, finite elsewhere")
    bad = ~torch.where(ref_inf, torch.isposinf(lse_rows), fin)
    both = ~ref_inf & fin
    err_l = torch.where(both, (lse_rows - lse_ref).abs(), 0.0).max() if lse_rows.numel() else lse_ref.new_zeros(())
    return torch.stack([err_o, err_l, bad.sum().float()])


def timed_sample_values(inputs_same: torch.Tensor, o_c: torch.Tensor, lse_c: torch.Tensor, o_o: torch.Tensor,
                        lse_o: torch.Tensor, guards_written: torch.Tensor, rows_c: torch.Tensor | None = None,
                        rows_o: torch.Tensor | None = None, ref_max: torch.Tensor | None = None,
                        repeat_same: torch.Tensor | None = None, *, no_key_rows: int = 0) -> torch.Tensor:
    """Every per-sample check of the timing loop as one float64 vector on the device (read back with one
    transfer), in the layout of ``TIMED_SAMPLE_FIELDS`` followed by ``guards_written``.

    Args:
        inputs_same: 0-d bool, q, k and v bit-equal to the pristine copy the original ran on.
        o_c, lse_c: the candidate's output ``[b, sq, hq, d]`` (bf16/fp16) and lse ``[b, hq, sq]`` fp32.
        o_o, lse_o: the original's, on the same inputs; both None where the original did not run in the sample
            (harness.timed_samples.OriginalPlan, never on declared values): then ``d_o``, ``d_lse`` and
            ``o_max`` are 0 and ``fin_same`` holds when lse is +inf and o is 0 exactly on the first
            ``no_key_rows`` query rows (harness.scenarios.no_key_rows: where a correct original's are, for
            ordinary values) and o and lse are finite elsewhere.
        guards_written: int64 ``[num_guards]`` (harness.buffers.Buffers.guards_written).
        rows_c, rows_o: :func:`row_errors_t` of the candidate and of the original (zeros when None).
        ref_max: ``[max|ref o|, max|ref lse| over finite rows]`` on the sampled rows.
        repeat_same: 0-d bool, the determinism repeat reproduced its source's bits (None: not a repeat).
    ``fin_same``: lse is +inf exactly on the original's +inf rows and finite elsewhere. ``d_o`` counts a NaN
    difference as +inf; ``d_lse`` is 0 when no row is finite. Values are exact: counts < 2^53, maxima fp32.
    """
    unwritten = poison_count_t(o_c) + poison_count_t(lse_c)
    if o_o is None or lse_o is None:
        zero = o_c.new_zeros((), dtype=torch.float32)
        fin_same = torch.stack([torch.isposinf(lse_c[..., :no_key_rows]).all(),  # what the original's output
                                torch.isfinite(lse_c[..., no_key_rows:]).all(),  # pinned down: lse's +inf rows,
                                (o_c[:, :no_key_rows] == 0).all(),  # o = 0 there, finite o everywhere
                                torch.isfinite(o_c).all()]).all()
        d_o = d_l = o_max = zero
    else:
        fin_same = torch.where(torch.isposinf(lse_o), torch.isposinf(lse_c), torch.isfinite(lse_c)).all()
        zero = o_c.new_zeros((), dtype=torch.float32) if not (o_c.numel() and lse_c.numel() and o_o.numel()) else None
        of_o = o_o.float()  # shared by d_o and o_max (neither modifies it)
        d_o = torch.sub(o_c.float(), of_o).abs_().nan_to_num_(float("inf")).max() if o_c.numel() else zero
        d_l = torch.where(torch.isfinite(lse_o), (lse_c - lse_o).abs(), 0.0).max() if lse_c.numel() else zero
        o_max = of_o.abs().nan_to_num_(0.0).max() if o_o.numel() else zero
    z3 = torch.zeros(3, dtype=torch.float32, device=o_c.device) if rows_c is None or rows_o is None else None
    rc = z3 if rows_c is None else rows_c
    ro = z3 if rows_o is None else rows_o
    rm = torch.zeros(2, dtype=torch.float32, device=o_c.device) if ref_max is None else ref_max
    rep = torch.ones((), dtype=torch.bool, device=o_c.device) if repeat_same is None else repeat_same
    head = [inputs_same, unwritten, fin_same, d_o, d_l, rc[0], ro[0], rm[0], rc[1], ro[1], rm[1], rc[2], rep, o_max]
    return torch.cat([torch.stack([x.to(torch.float64) for x in head]), guards_written.to(torch.float64)])


@dataclass(frozen=True)
class TimedBounds:
    """Bounds of a timed call, from the checked draws of its value kind. Against the original's whole
    output: ``base_o`` (tolerance + the original's error, :func:`timed_bound_o` without its ulp term)
    measured at outputs of magnitude ``ref_o_max``, scaled to the timed output's magnitude, plus one ulp
    of the dtype (``mantissa_bits``) there; ``bound_lse`` on lse. ``tol_o``/``tol_lse``: the checked
    calls' reference tolerance (applied per element on the sampled rows, never looser than 2 x the
    original's error on those rows + the floor)."""

    base_o: float
    bound_lse: float
    tol_o: float
    tol_lse: float
    ref_o_max: float = 1.0
    mantissa_bits: int = 7

    def bound_o(self, o_max: float) -> float:
        """The whole-output bound for a timed call whose original output has max|o| = ``o_max``: errors of
        correct kernels scale with the output, and each rounds to the dtype on its own (one ulp)."""
        ulp = ulp_bits(max(2 * o_max, 1.0), self.mantissa_bits)
        return self.base_o * max(1.0, o_max / max(self.ref_o_max, 1e-30)) + ulp

    def merge(self, other: TimedBounds) -> TimedBounds:
        """The looser of two (several checked draws of one kind)."""
        return TimedBounds(max(self.base_o, other.base_o), max(self.bound_lse, other.bound_lse),
                           max(self.tol_o, other.tol_o), max(self.tol_lse, other.tol_lse),
                           min(self.ref_o_max, other.ref_o_max), self.mantissa_bits)


def judge_timed_sample(values: list[float], n: int, tol: TimedBounds, guard_names: list[str],
                       repeat_of: str | None = None, *, original_ran: bool = True) -> tuple[str, str, str] | None:
    """None when timed call ``n`` passes, else ``(failure_kind, check, message)`` of the first failed check,
    in the order: input_integrity, timed_output (unwritten), guard_bands, timed_output (lse +inf rows),
    timed_output (whole output against the original), timed_output (sampled rows against the fp32
    reference, the checked calls' tolerance), determinism (a repeat must give its source's bits).
    ``values``: :func:`timed_sample_values` read back (``.tolist()``); ``repeat_of``: the call a repeat
    replays, for the message (e.g. ``"checked draw 2"``; harness.draws.CallDrawer.name). ``original_ran``: False
    where the original skipped the sample (harness.timed_samples.OriginalPlan): the sampled rows' tolerance is then
    the checked draws' alone, measured on other inputs, and gets one ulp of the dtype at the rows' reference
    magnitude, for the reason :func:`timed_bound_o` gives (seen on an H100, run 61: an honest split-KV row 0.00185
    off against 0.00136, under one bf16 ulp at its magnitude)."""
    (inputs_same, unwritten, fin_same, d_o, d_l, r_o, r_o_orig, ref_o, r_l, r_l_orig, ref_l, r_bad,
     repeat_same, o_max) = values[:_HEAD]
    if not inputs_same:
        return "inputs_modified", "input_integrity", f"timed call {n} changed q, k or v"
    if unwritten:
        return "timed_output_wrong", "timed_output", f"timed call {n} left o/lse elements unwritten"
    broken = first_written_guard(values[_HEAD:], guard_names)
    if broken:
        return "out_of_bounds_write", "guard_bands", f"timed call {n}: out-of-bounds write: {broken}"
    if not fin_same or r_bad:
        return ("timed_output_wrong", "timed_output",
                (f"timed call {n}: lse is not +inf on exactly the rows that see no key (or holds NaN/-inf; without "
                 "the original in the sample: or o is not 0 on those rows, or not finite)"))
    bound_o = tol.bound_o(o_max)
    if not (d_o <= bound_o and d_l <= tol.bound_lse):  # written so that a NaN fails
        return ("timed_output_wrong", "timed_output",
                (f"timed call {n} on fresh inputs: max|o - original| = {d_o:.3g} (bound {bound_o:.3g}), "
                 f"max|lse - original| = {d_l:.3g} (bound {tol.bound_lse:.3g}); outputs checked untimed were right"))
    lim_o = max(tol.tol_o, 2 * r_o_orig + FLOOR_O * max(1.0, ref_o))
    if not original_ran:
        lim_o += ulp_bits(ref_o, tol.mantissa_bits)
    lim_l = max(tol.tol_lse, 2 * r_l_orig + FLOOR_LSE * max(1.0, ref_l))
    if not (r_o <= lim_o and r_l <= lim_l):
        return ("timed_output_wrong", "timed_output",
                (f"timed call {n}, sampled rows against the fp32 reference: max|o - ref| = {r_o:.3g} (tolerance "
                 f"{lim_o:.3g}), max|lse - ref| = {r_l:.3g} (tolerance {lim_l:.3g}): the checked calls' rule"))
    if not repeat_same:
        return ("nondeterministic", "determinism",
                (f"timed call {n} repeated {repeat_of or 'an earlier call'}'s inputs (reordered) and did not "
                 "reproduce its bits: a race (missing barrier, unordered atomics?)"))
    return None


def checked_call_values(inputs_same: torch.Tensor, o_c: torch.Tensor, lse_c: torch.Tensor,
                        guards_written: torch.Tensor) -> torch.Tensor:
    """The checks of a checked draw's candidate call that come before the original runs, as one int64 vector on
    the device (read back with one transfer; no host synchronization here): inputs unchanged (1/0), elements of
    o and lse still holding poison, then ``guards_written``. Judged by :func:`judge_checked_call`.

    Args:
        inputs_same: 0-d bool, q, k and v (their whole regions) bit-equal to the pristine copy.
        o_c, lse_c: the candidate's output ``[b, sq, hq, d]`` (bf16/fp16) and lse ``[b, hq, sq]`` fp32.
        guards_written: int64 ``[num_guards]`` (harness.buffers.Buffers.guards_written).
    """
    head = torch.stack([inputs_same.to(torch.int64), poison_count_t(o_c) + poison_count_t(lse_c)])
    return torch.cat([head, guards_written.to(torch.int64)])


def judge_checked_call(values: list[int], guard_names: list[str], where: str) -> tuple[str, str, str] | None:
    """None when a checked draw's candidate call passes, else ``(failure_kind, check, message)`` of the first
    failed check, in the order: input_integrity, guard_bands (the first written guard), poisoned_output.
    ``values``: :func:`checked_call_values` read back (``.tolist()``); ``where``: the draw, for the message."""
    inputs_same, unwritten = values[:2]
    if not inputs_same:
        return "inputs_modified", "input_integrity", f"q, k or v changed during the call {where}"
    broken = first_written_guard(values[2:], guard_names)
    if broken:
        return "out_of_bounds_write", "guard_bands", f"out-of-bounds write: {broken} {where}"
    if unwritten:
        return ("unwritten_output", "poisoned_output",
                f"{int(unwritten)} elements of o/lse were never written (poison left) {where}")
    return None


def checked_bounds(drafts: list[tuple[str, TimedBounds, torch.Tensor | None]]) -> dict[str, TimedBounds]:
    """The timed bounds per value key from the passed checked draws, in draw order: each draw's ``(value key,
    bounds, max|o| of the original's output)``, the maximum a 0-d fp32 tensor (None: an empty output, 0.0) that
    becomes the bounds' ``ref_o_max``; the bounds of one key merged (:meth:`TimedBounds.merge`). Every maximum
    comes back with one device-to-host transfer (none without a tensor)."""
    maxima = [m for _, _, m in drafts if m is not None]
    read = iter(torch.stack(maxima).tolist() if maxima else [])  # exact: fp32 values as Python floats
    bounds: dict[str, TimedBounds] = {}
    for key, draft, m in drafts:
        b = replace(draft, ref_o_max=0.0 if m is None else next(read))
        bounds[key] = b if key not in bounds else bounds[key].merge(b)
    return bounds


@dataclass
class ErrorReport:
    """Errors of one output against the fp32 reference. ``lse_inf_mismatch`` counts rows where exactly
    one of (candidate lse, reference lse) is +inf; ``nonfinite`` counts NaN/Inf in o and NaN/-inf in lse."""

    max_abs_err_o: float
    max_abs_err_lse: float
    rel_err_o: float
    nonfinite: int
    lse_inf_mismatch: int


def error_report(o: torch.Tensor, lse: torch.Tensor, o_ref: torch.Tensor, lse_ref: torch.Tensor) -> ErrorReport:
    """Compare ``o [b, sq, hq, d]`` (bf16/fp16) and ``lse [b, hq, sq]`` (fp32) with the fp32 reference.

    NaN/Inf are counted, not propagated: the max errors are over finite elements only (0.0 where there is
    none). Every statistic is computed on the device and read back with one transfer.
    """
    of = o.float()
    finite_o = torch.isfinite(of)
    d = torch.where(finite_o, of - o_ref, torch.zeros_like(of))  # o - ref on finite elements, 0 elsewhere
    fin_l = torch.isfinite(lse)
    pos_l = torch.isposinf(lse)
    ref_inf = torch.isposinf(lse_ref)
    # |lse - ref| where lse is finite and ref is not +inf, 0 elsewhere: its max is the max over those rows (all
    # >= 0 or NaN), and 0.0 when there is none
    d_l = torch.where(~ref_inf & fin_l, (lse - lse_ref).abs(), 0.0)
    zero = of.new_zeros(()) if not (d.numel() and d_l.numel()) else None
    counts = torch.stack([finite_o.sum(), fin_l.sum(), pos_l.sum(), (ref_inf ^ pos_l).sum()])  # int64
    # fp32 (promoted to the widest floating dtype when the inputs differ: exact); float64 holds both exactly
    stats = torch.stack([d.abs().max() if d.numel() else zero, o_ref.norm(), d.norm(),
                         d_l.max() if d_l.numel() else zero])
    values = torch.cat([counts.to(torch.float64), stats.to(torch.float64)]).tolist()  # the one transfer
    n_fin_o, n_fin_l, n_pos_l, mismatch, max_o, ref_norm, rel_norm, max_lse = values
    # every element is exactly one of finite, +inf, -inf, NaN: NaN or -inf in lse = all - finite - (+inf)
    nonfinite = (o.numel() - int(n_fin_o)) + (lse.numel() - int(n_fin_l) - int(n_pos_l))
    return ErrorReport(max_o, max_lse, rel_norm / max(ref_norm, 1e-30), nonfinite, int(mismatch))


def tolerances(orig: ErrorReport, o_ref: torch.Tensor, lse_ref: torch.Tensor) -> tuple[float, float]:
    """FlashAttention's test rule: candidate error <= 2 x the original kernel's error + a floor.

    Source: flash-attention tests (``(out - out_ref).abs().max() <= 2 * (out_pt - out_ref).abs().max()
    + atol``), with the original kernel in the role of the low-precision baseline. Floors are
    ``FLOOR_O`` / ``FLOOR_LSE`` times ``max(1, max|ref|)`` (lse: over its finite elements; 1 where there
    is none). Returns ``(tol_o, tol_lse)``; one device-to-host transfer.
    """
    zero = o_ref.new_zeros(()) if not (o_ref.numel() and lse_ref.numel()) else None
    max_o = o_ref.abs().max() if o_ref.numel() else zero
    max_l = torch.where(torch.isfinite(lse_ref), lse_ref.abs(), 0.0).max() if lse_ref.numel() else zero
    m_o, m_l = torch.stack([max_o.to(torch.float64), max_l.to(torch.float64)]).tolist()  # exact, one transfer
    scale_o, scale_lse = max(1.0, m_o), max(1.0, m_l)  # max(1.0, nan) is 1.0, as before
    return 2 * orig.max_abs_err_o + FLOOR_O * scale_o, 2 * orig.max_abs_err_lse + FLOOR_LSE * scale_lse


def judge(cand: ErrorReport, tol_o: float, tol_lse: float, dtype: torch.dtype) -> tuple[str, str, str] | None:
    """None when ``cand`` passes; else ``(failure_kind, check, message)``."""
    if cand.nonfinite:
        return "nan_inf", "finite_output", f"{cand.nonfinite} NaN/Inf values in o or lse"
    if cand.lse_inf_mismatch:
        return ("wrong_output", "reference_tolerance",
                f"{cand.lse_inf_mismatch} rows disagree on lse = +inf (a row that sees no key has lse = +inf)")
    if cand.max_abs_err_o > tol_o:
        return ("wrong_output", "reference_tolerance",
                f"max|o - ref| = {cand.max_abs_err_o:.3g} > {tol_o:.3g} (2 x original's error + floor)")
    if cand.max_abs_err_lse > tol_lse:
        return ("wrong_output", "reference_tolerance",
                f"max|lse - ref| = {cand.max_abs_err_lse:.3g} > {tol_lse:.3g} (2 x original's error + floor)")
    bound = REL_ERR_BOUND[dtype]
    if cand.rel_err_o > bound:
        return "wrong_output", "reference_tolerance", f"relative error {cand.rel_err_o:.3g} > {bound:g} for {dtype}"
    return None


#: Mantissa bits (explicit) per dtype, for one unit in the last place.
MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10}


def ulp_bits(magnitude: float, mantissa_bits: int) -> float:
    """One unit in the last place at ``magnitude`` of a float type with ``mantissa_bits`` explicit mantissa bits
    (7: bf16, 10: fp16); magnitudes below 2^-14 count as 2^-14."""
    return 2.0 ** (math.floor(math.log2(max(abs(magnitude), 2.0**-14))) - mantissa_bits)


def ulp_at(magnitude: float, dtype: torch.dtype) -> float:
    """One unit in the last place of ``dtype`` at ``magnitude`` (the spacing of representable values)."""
    return ulp_bits(magnitude, MANTISSA_BITS[dtype])


def timed_bound_o(tol_o: float, orig_err_o: float, max_abs_o: float, dtype: torch.dtype, *, ulp: bool = True) -> float:
    """Bound on max|o_candidate - o_original| for the output of a timed call on fresh inputs.

    By the triangle inequality a candidate within ``tol_o`` of the reference differs from the original
    by at most ``tol_o + orig_err_o`` (errors measured on the checked draw), plus one ulp of the dtype
    at the output's magnitude: on new inputs each kernel rounds its fp32 result to the dtype on its
    own, and two correct kernels can land on adjacent representable values where the checked draw's
    errors happened to be smaller (seen on an H200: 0.0039 = 1 bf16 ulp in [0.5, 1) against a bound
    of 0.0034 from the checked draw). ``ulp=False`` leaves the ulp out (TimedBounds adds it at the timed
    output's own magnitude).
    """
    return tol_o + orig_err_o + (ulp_at(max_abs_o, dtype) if ulp else 0.0)
