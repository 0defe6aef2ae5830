"""Correctness checks shared by the worker and the tests: poison, error statistics, tolerances.

Every check has a name (listed in ``CHECKS`` and documented in docs/checks.md); a failed scenario
names the check that caught it. All functions take torch tensors on any device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
#: finite masks equal (1/0), max|o - original|, max|lse - original| over finite rows; then one
#: written-element count per guard band.
TIMED_SAMPLE_FIELDS = ("inputs_same", "unwritten", "lse_finite_same", "d_o", "d_lse")


def timed_sample_values(inputs_same: torch.Tensor, o_c: torch.Tensor, lse_c: torch.Tensor, o_o: torch.Tensor,
                        lse_o: torch.Tensor, guards_written: torch.Tensor) -> torch.Tensor:
    """Every per-sample check of the timing loop as one float64 vector on the device (read back with one
    transfer), in the layout of ``TIMED_SAMPLE_FIELDS`` followed by ``guards_written``.

    Args:
        inputs_same: 0-d bool, q, k and v bit-equal to the snapshot taken before the candidate's call.
        o_c, lse_c: the candidate's output ``[b, sq, hq, d]`` (bf16/fp16) and lse ``[b, hq, sq]`` fp32.
        o_o, lse_o: the original's, on the same inputs.
        guards_written: int64 ``[num_guards]`` (harness.buffers.Buffers.guards_written).
    ``fin_same``: lse is +inf exactly on the original's +inf rows and finite elsewhere. ``d_o`` counts a NaN
    difference as +inf (and an infinite one as the largest fp32); ``d_lse`` is 0 when no row is finite. Values are exact: counts < 2^53, the maxima are fp32 values.
    """
    unwritten = poison_count_t(o_c) + poison_count_t(lse_c)
    fin = torch.isfinite(lse_o)
    # lse rows: +inf exactly where the original's is +inf (rows that see no key), finite everywhere else
    # (NaN or -inf anywhere fails)
    fin_same = torch.where(torch.isposinf(lse_o), torch.isposinf(lse_c), torch.isfinite(lse_c)).all()
    zero = torch.zeros((), dtype=torch.float32, device=o_c.device)
    d_o = torch.sub(o_c.float(), o_o.float()).abs_().nan_to_num_(float("inf")).max() if o_c.numel() else zero
    d_l = torch.where(fin, (lse_c - lse_o).abs(), 0.0).max() if lse_c.numel() else zero
    head = torch.stack([x.to(torch.float64) for x in (inputs_same, unwritten, fin_same, d_o, d_l)])
    return torch.cat([head, guards_written.to(torch.float64)])


def judge_timed_sample(values: list[float], n: int, tol: tuple[float, float],
                       guard_names: list[str]) -> tuple[str, str, str] | None:
    """None when timed call ``n`` passes, else ``(failure_kind, check, message)`` of the first failed check,
    in the order: input_integrity, timed_output (unwritten), guard_bands, timed_output (lse +inf rows),
    timed_output (``tol = (bound on max|o - original|, bound on max|lse - original|)``).
    ``values``: :func:`timed_sample_values` read back (``.tolist()``)."""
    inputs_same, unwritten, fin_same, d_o, d_l = values[:5]
    if not inputs_same:
        return "inputs_modified", "input_integrity", f"timed call {n} changed q, k or v"
    if unwritten:
        return "timed_output_wrong", "timed_output", f"timed call {n} left o/lse elements unwritten"
    broken = first_written_guard(values[5:], guard_names)
    if broken:
        return "out_of_bounds_write", "guard_bands", f"timed call {n}: out-of-bounds write: {broken}"
    if not fin_same:
        return ("timed_output_wrong", "timed_output",
                f"timed call {n}: lse is not +inf on exactly the original's rows (or holds NaN/-inf)")
    if not (d_o <= tol[0] and d_l <= tol[1]):  # written so that a NaN fails
        return ("timed_output_wrong", "timed_output",
                (f"timed call {n} on fresh inputs: max|o - original| = {d_o:.3g} (bound {tol[0]:.3g}), "
                 f"max|lse - original| = {d_l:.3g} (bound {tol[1]:.3g}); outputs checked untimed were right"))
    return None


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

    NaN/Inf are counted, not propagated: the max errors are over finite elements only.
    """
    of = o.float()
    finite_o = torch.isfinite(of)
    nonfinite = int((~finite_o).sum().item())
    diff = torch.where(finite_o, (of - o_ref).abs(), torch.zeros_like(of))
    max_o = float(diff.max().item()) if diff.numel() else 0.0
    ref_norm = float(o_ref.norm().item())
    rel = float(torch.where(finite_o, of - o_ref, torch.zeros_like(of)).norm().item()) / max(ref_norm, 1e-30)
    ref_inf = torch.isposinf(lse_ref)
    cand_inf = torch.isposinf(lse)
    nonfinite += int((torch.isnan(lse) | torch.isneginf(lse)).sum().item())
    mismatch = int((ref_inf ^ cand_inf).sum().item())
    both = ~ref_inf & torch.isfinite(lse)
    max_lse = float((lse - lse_ref).abs()[both].max().item()) if bool(both.any()) else 0.0
    return ErrorReport(max_o, max_lse, rel, nonfinite, mismatch)


def tolerances(orig: ErrorReport, o_ref: torch.Tensor, lse_ref: torch.Tensor) -> tuple[float, float]:
    """FlashAttention's test rule: candidate error <= 2 x the original kernel's error + a floor.

    Source: flash-attention tests (``(out - out_ref).abs().max() <= 2 * (out_pt - out_ref).abs().max()
    + atol``), with the original kernel in the role of the low-precision baseline. Floors are
    ``FLOOR_O`` / ``FLOOR_LSE`` times ``max(1, max|ref|)``. Returns ``(tol_o, tol_lse)``.
    """
    scale_o = max(1.0, float(o_ref.abs().max().item())) if o_ref.numel() else 1.0
    finite = lse_ref[torch.isfinite(lse_ref)]
    scale_lse = max(1.0, float(finite.abs().max().item())) if finite.numel() else 1.0
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


def ulp_at(magnitude: float, dtype: torch.dtype) -> float:
    """One unit in the last place of ``dtype`` at ``magnitude`` (the spacing of representable values)."""
    mag = max(abs(magnitude), 2.0**-14)
    return 2.0 ** (math.floor(math.log2(mag)) - MANTISSA_BITS[dtype])


def timed_bound_o(tol_o: float, orig_err_o: float, max_abs_o: float, dtype: torch.dtype) -> float:
    """Bound on max|o_candidate - o_original| for the output of a timed call on fresh inputs.

    By the triangle inequality a candidate within ``tol_o`` of the reference differs from the original
    by at most ``tol_o + orig_err_o`` (errors measured on the checked draw), plus one ulp of the dtype
    at the output's magnitude: on new inputs each kernel rounds its fp32 result to the dtype on its
    own, and two correct kernels can land on adjacent representable values where the checked draw's
    errors happened to be smaller (seen on an H200: 0.0039 = 1 bf16 ulp in [0.5, 1) against a bound
    of 0.0034 from the checked draw).
    """
    return tol_o + orig_err_o + ulp_at(max_abs_o, dtype)
