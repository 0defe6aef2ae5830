"""The per-call checks of the candidate's arena and outputs, fused into few torch operations (harness/checker.py).

Each torch operation the checker issues is a kernel launch or a host synchronization on the GPU, and ~20 us of host
time: at ~340 operations per timed sample they were most of a sample's host cost (docs/checks.md "How many timed
samples"; scripts/ops_per_sample.py counts them). The checks themselves are those of harness/checks.py, judged by
its ``judge_timed_sample`` and ``judge_checked_call`` on the same values; only how the values are computed is fused:

* **inputs** (input_integrity): the candidate's input regions lie at the same offsets of its arena as the
  original's in the original's arena (the regions come first, the workspaces, of different sizes, last), so the
  whole span from the first input region to the end of the last (the guard bands between them included) is
  compared bit for bit in one operation;
* **guard bands** (guard_bands): every band of the candidate's arena laid end to end and counted in one
  reduction; o's region outside its view as the region's poison count against the view's (the view's count is
  the unwritten-output count too); the inputs' regions outside their views (drawn layouts) need no count of their
  own: they are inside the compared span, and the original's hold poison there (the checker wrote it, and only
  values into the views: harness.buffers.Buffers.apply, fill_inputs, set_inputs), so an equal span has none written;
* **sampled rows** (timed_output): the candidate's and the original's rows against the fp32 reference in one
  batch, with the reference rows' maxima (:func:`rows_check_t`).

Every count comes back with the sample's other values in one transfer. Where a fused count is not clean (a span that
differs, a written band, a written element outside o's view), the per-region checks of harness/checker.py and
harness.buffers.Buffers.guards_written run once more, on the failure path only, and their values are judged: the
failure kind and the message (the region named) are those of the per-region checks.
"""

from __future__ import annotations

from typing import Any

from harness.checks import POISON_BITS, TIMED_SAMPLE_FIELDS

#: Layout of :meth:`ArenaChecks.counts_t`: the input span bit-equal to the original's (1/0), poison left in o's
#: view, poison left in o's whole region, poison left in lse, written elements of the guard bands.
ARENA_FIELDS = ("span_same", "poison_o_view", "poison_o_region", "poison_lse", "bands_written")
#: Layout of :func:`timed_values_t`'s integer part (after :data:`ARENA_FIELDS`): lse's +inf rows as the original's
#: (1/0), the repeat's bits its source's (1/0), the candidate's sampled rows disagreeing on lse = +inf.
_INT_FIELDS = (*ARENA_FIELDS, "fin_same", "repeat_same", "row_inf_mismatch")
#: Its float part: max|o - original|, max|lse - original| (finite rows), max|o| of the original's output.
_FLOAT_FIELDS = ("d_o", "d_lse", "orig_o_max")


def finite(torch: Any, x: Any) -> Any:
    """``torch.isfinite(x)`` (bool, shaped like ``x``, a floating tensor) in two operations instead of four: x x 0 is
    ±0 for a finite x and NaN for ±inf and NaN (torch.isfinite is composite on every device: ==, abs, !=, *)."""
    return torch.eq(x.mul(0), 0)


class ArenaChecks:
    """The fused arena checks of one scenario's two arenas (harness.buffers.Buffers ``bufs_c``, the candidate's,
    ``bufs_o``, the original's), for whatever layout they hold at the time of each call. ``same_inputs(bufs_c,
    bufs_o)``: the per-region input comparison (a 0-d bool tensor), run where the span is not equal, and on every
    call where the two arenas' input regions do not lie at the same offsets."""

    def __init__(self, torch: Any, bufs_c: Any, bufs_o: Any, same_inputs: Any) -> None:
        self.torch, self.bufs_c, self.bufs_o, self.same_inputs = torch, bufs_c, bufs_o, same_inputs
        first, last = bufs_c.input_regions[0], bufs_c.input_regions[-1]
        span = (bufs_c.byte_range(first)[0], bufs_c.byte_range(last)[1])
        aligned = span == (bufs_o.byte_range(first)[0], bufs_o.byte_range(last)[1]) and not (span[0] | span[1]) % 4
        #: the input span of each arena as int32 words (None: regions at other offsets, compared one by one)
        self.spans = tuple(b.arena[span[0]:span[1]].view(torch.int32) for b in (bufs_c, bufs_o)) if aligned else None
        self.bands = [t.view(torch.int32) for t in bufs_c.guard_bands()]
        self.o_words, self.lse_words = bufs_c.region_words("o"), bufs_c.region_words("lse")
        self.p_half = POISON_BITS[bufs_c.dtype]
        self.p_word = POISON_BITS[torch.float32]

    def span_t(self) -> Any:
        """0-d bool on the arenas' device: the candidate's input regions bit-equal to the original's (the span
        between them, guard bands included; per region where the regions lie apart), no host synchronization."""
        if self.spans is not None:
            return self.torch.eq(*self.spans).all()
        return self.same_inputs(self.bufs_c, self.bufs_o)

    def counts_t(self, span: Any = None) -> Any:
        """int64 ``[5]`` on the arenas' device, in the layout of :data:`ARENA_FIELDS` (no host synchronization);
        ``span``: :meth:`span_t` taken earlier (right after the candidate's call), else taken now."""
        torch, b = self.torch, self.bufs_c
        span = self.span_t() if span is None else span
        o_view = b.o_c.view(self.o_words.dtype)  # the same element size: any strides
        bands = torch.cat(self.bands) if self.bands else self.o_words.new_zeros(0, dtype=torch.int32)
        return torch.stack([span, (o_view == self.p_half).sum(), (self.o_words == self.p_half).sum(),
                            (self.lse_words == self.p_word).sum(), (bands != self.p_word).sum()])

    def resolved(self, counts: list[float] | list[int]) -> tuple[bool, int, list[int] | None]:
        """``(inputs same, unwritten o/lse elements, written elements per guard or None)`` from :meth:`counts_t`
        read back: ``None`` where every guard is clean (the fused counts prove it); otherwise the inputs are compared
        per region and the guards counted per guard (harness.buffers.Buffers.guards_written, in the order of its
        ``guard_names``) once more, with one transfer: the failure path."""
        span, p_view, p_region, p_lse, bands = (int(x) for x in counts[:len(ARENA_FIELDS)])
        o_view_n, o_region_n = self.bufs_c.o_c.numel(), self.o_words.numel()
        outside_o = (o_region_n - o_view_n) - (p_region - p_view)  # o's region written outside its view
        unwritten = p_view + p_lse
        if span and not bands and not outside_o:
            return True, unwritten, None
        torch = self.torch
        detail = torch.cat([self.same_inputs(self.bufs_c, self.bufs_o).reshape(1).to(torch.int64),
                            self.bufs_c.guards_written().to(torch.int64)]).tolist()
        return bool(detail[0]), unwritten, [int(x) for x in detail[1:]]

    def checked_values(self, counts: list[float] | list[int]) -> list[int]:
        """harness.checks.checked_call_values's list (inputs same, unwritten, written per guard) from
        :meth:`counts_t` read back, for harness.checks.judge_checked_call."""
        same, unwritten, guards = self.resolved(counts)
        return [int(same), unwritten, *(guards or [0] * len(self.bufs_c.guard_names))]


def rows_check_t(torch: Any, outs: list[tuple[Any, Any]], s: Any, o_ref: Any, lse_ref: Any) -> tuple[Any, Any]:
    """harness.checks.row_errors_t of several outputs at once, and the reference rows' maxima.

    Args:
        outs: ``[(o [b, sq, hq, d] bf16/fp16, lse [b, hq, sq] fp32), ...]``: the candidate's, then the original's
            where it ran (one layout: the same strides).
        s: harness.checks.RowSample (``batch_idx``, ``head_idx`` int64 ``[P]``, ``rows`` int64 ``[P, R]``).
        o_ref, lse_ref: ``[P, R, d]``, ``[P, R]`` fp32 (harness.reference.attention_reference_rows).
    Returns:
        ``(inf mismatches int64 [k], fp32 [2k + 2])``: per output the rows disagreeing on lse = +inf (or NaN/-inf);
        then max|o - ref| per output (a NaN counts as +inf), max|lse - ref| per output (rows finite in both, 0 where
        none), max|ref o|, max|ref lse| over its finite rows (0 for an empty sample).
    """
    k = len(outs)
    bi, hi = s.batch_idx[:, None], s.head_idx[:, None]
    o_rows = [o[bi, s.rows, hi] for o, _ in outs]
    l_rows = [lse[bi, hi, s.rows] for _, lse in outs]
    o_rows = (o_rows[0][None] if k == 1 else torch.stack(o_rows)).float()  # [k, P, R, d]
    l_rows = l_rows[0][None] if k == 1 else torch.stack(l_rows)  # [k, P, R]
    ref_inf = torch.isposinf(lse_ref)
    fin = finite(torch, l_rows)
    bad = torch.where(ref_inf, torch.isposinf(l_rows), fin).logical_not_().flatten(1).sum(1)
    if not o_rows.numel():
        return bad, o_ref.new_zeros(2 * k + 2)
    err_o = torch.sub(o_rows, o_ref).abs_().nan_to_num_(float("inf")).flatten(1).amax(1)
    err_l = torch.where(fin & ~ref_inf, torch.sub(l_rows, lse_ref).abs_(), 0.0).flatten(1).amax(1)
    ref_l = torch.where(finite(torch, lse_ref), lse_ref.abs(), 0.0).amax()
    return bad, torch.cat([err_o, err_l, o_ref.abs().amax().reshape(1), ref_l.reshape(1)])


def timed_values_t(torch: Any, counts: Any, o_c: Any, lse_c: Any, o_o: Any, lse_o: Any, rows: tuple[Any, Any],
                   repeat_same: Any = None, *, no_key_rows: int = 0) -> Any:
    """Every per-sample check of the timing loop as one float64 vector on the device (one transfer): the integer
    fields (:data:`ARENA_FIELDS`, fin_same, repeat_same, the candidate's row inf mismatches), max|o - original|,
    max|lse - original|, max|o| of the original's, then :func:`rows_check_t`'s floats. Read back, :func:`timed_values`
    turns it into harness.checks.timed_sample_values's list; the same definitions as there.

    Args:
        counts: :meth:`ArenaChecks.counts_t`. o_c, lse_c: the candidate's ``[b, sq, hq, d]`` and ``[b, hq, sq]`` fp32.
        o_o, lse_o: the original's, or both None where it did not run in the sample (then fin_same is judged from
            the scenario's ``no_key_rows``: harness.checks.timed_sample_values).
        rows: :func:`rows_check_t` of the candidate's outputs (then the original's where it ran).
        repeat_same: 0-d bool, the repeat's outputs bit-equal to its source's (None: no repeat).
    """
    zero = o_c.new_zeros((), dtype=torch.float32)
    if o_o is None or lse_o is None:
        fin_same = torch.stack([torch.isposinf(lse_c[..., :no_key_rows]).all(), finite(torch, lse_c[..., no_key_rows:]).all(),
                                (o_c[:, :no_key_rows] == 0).all(), finite(torch, o_c).all()]).all()
        floats = zero.expand(3)
    else:
        fin_same = torch.where(torch.isposinf(lse_o), torch.isposinf(lse_c), finite(torch, lse_c)).all()
        of_o = o_o.float()
        d_o = torch.sub(o_c.float(), of_o).abs_().nan_to_num_(float("inf")).max() if o_c.numel() else zero
        d_l = torch.where(finite(torch, lse_o), (lse_c - lse_o).abs_(), 0.0).max() if lse_c.numel() else zero
        o_max = of_o.abs().nan_to_num_(0.0).max() if o_o.numel() else zero
        floats = torch.stack([d_o, d_l, o_max])
    rep = repeat_same if repeat_same is not None else torch.ones((), dtype=torch.bool, device=o_c.device)
    ints = torch.cat([counts, torch.stack([fin_same, rep]), rows[0][:1]])
    return torch.cat([ints.to(torch.float64), floats, rows[1]])


def timed_values(values: list[float], checks: ArenaChecks, original_ran: bool) -> list[float]:
    """harness.checks.timed_sample_values's list (``TIMED_SAMPLE_FIELDS``, then written elements per guard) from
    :func:`timed_values_t` read back, for harness.checks.judge_timed_sample; the per-region checks run again only
    where a fused count is not clean (:meth:`ArenaChecks.resolved`)."""
    n_int = len(_INT_FIELDS)
    same, unwritten, guards = checks.resolved(values[:len(ARENA_FIELDS)])
    fin_same, repeat_same, r_bad = values[len(ARENA_FIELDS):n_int]
    d_o, d_l, o_max = values[n_int:n_int + 3]
    k = 2 if original_ran else 1
    rest = values[n_int + 3:]
    r_o, r_l, ref_o, ref_l = rest[0], rest[k], rest[2 * k], rest[2 * k + 1]
    r_o_orig, r_l_orig = (rest[1], rest[k + 1]) if original_ran else (0.0, 0.0)
    head = {"inputs_same": float(same), "unwritten": float(unwritten), "lse_finite_same": fin_same, "d_o": d_o,
            "d_lse": d_l, "row_err_o": r_o, "row_err_o_orig": r_o_orig, "row_ref_o_max": ref_o, "row_err_lse": r_l,
            "row_err_lse_orig": r_l_orig, "row_ref_lse_max": ref_l, "row_inf_mismatch": r_bad,
            "repeat_same": repeat_same, "orig_o_max": o_max}
    return [head[f] for f in TIMED_SAMPLE_FIELDS] + [float(g) for g in guards or [0] * len(checks.bufs_c.guard_names)]
