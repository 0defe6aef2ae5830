"""The ``exactness`` check: what the softmax guarantees whatever the inputs, independent of the original
kernel's error.

* A row that sees exactly one key returns that key's v exactly (its weight is exp(0) / exp(0) = 1). A
  kernel that subtracts its row max from the same rounded score gets p = 1 and l = 1 exactly; one that
  folds the max into an FMA is off by ~2^-24 |score| before rounding, which rounding to bf16/fp16 removes
  while |softmax_scale q.k| stays below ~1000.
* A row that sees no key returns o = 0 exactly (kernels/attn_abi.h).
* Every o element lies within [min v, max v] over the keys its row sees (a convex combination), widened
  by ``HULL_ULPS`` units in the last place of the dtype at the larger of |min v|, |max v|. Basis: P is
  rounded to the dtype before P V while the denominator l is not (the weights sum to 1 +- one unit
  roundoff: < 1 ulp at max |v|), o is rounded to the dtype (half an ulp), and fp32 accumulation over long
  rows adds a little: 3 ulps bound all of it. An overflowing accumulator, a wrong normalisation, a read of
  NaN padding or of another row's keys leaves the range.
"""

from __future__ import annotations

import bisect
from typing import Any

import torch

from harness.scenarios import keys_seen

#: Units in the last place of the dtype by which o may leave [min v, max v] of its visible keys.
HULL_ULPS = 3
_MANTISSA = {torch.bfloat16: 7, torch.float16: 10}


def visible_keys(seqlen_q: int, seqlen_k: int, causal: bool, device: Any) -> torch.Tensor:
    """Keys each query row sees, int64 ``[seqlen_q]`` (bottom-right causal)."""
    rows = torch.arange(seqlen_q, device=device)
    if not causal:
        return torch.full_like(rows, seqlen_k)
    return (rows + seqlen_k - seqlen_q + 1).clamp_(0, seqlen_k)


def _ulp(mag: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One ulp of ``dtype`` at each magnitude (fp32 tensor), with magnitudes below 2^-14 treated as 2^-14."""
    _, e = torch.frexp(mag.clamp(min=2.0**-14))
    return torch.ldexp(torch.ones_like(mag), e - 1 - _MANTISSA[dtype])


def _where(idx: torch.Tensor, shape: tuple[int, ...]) -> str:
    b, i, h, c = (int(x) for x in torch.unravel_index(idx, shape))
    return f"o[batch {b}, row {i}, head {h}, dim {c}]"


def _rows_seeing_at_most(keys: int, sq: int, sk: int, causal: bool) -> int:
    """How many query rows see at most ``keys`` keys. The keys a row sees never decrease with the row (constant,
    or a clamped rising line), so those rows are rows ``0 ..`` that count minus one."""
    return bisect.bisect_right(range(sq), keys, key=lambda i: keys_seen(i, sq, sk, causal))


def _first(bad: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Flat index (row-major) of the first True element of ``bad`` (one exists), and that index unravelled
    (a host read: only on the failure path, for the message)."""
    flat = int(bad.flatten().nonzero()[0])
    return flat, torch.unravel_index(torch.tensor(flat), bad.shape)


def exactness_failure(o: torch.Tensor, v: torch.Tensor, *, causal: bool) -> str | None:
    """None when ``o`` satisfies the module's three rules for values ``v``, else what broke, first found.

    Args:
        o: ``[batch, seqlen_q, num_heads_q, head_dim]`` bf16/fp16, the output to judge (any strides).
        v: ``[batch, seqlen_k, num_heads_kv, head_dim]``, the values the call read (any strides);
            query head h reads kv head ``h // (num_heads_q // num_heads_kv)``.
        causal: bottom-right causal masking.
    The rules are judged in order (rows that see no key, rows that see one key, the range), each failing element
    counted on the device; the counts come back with one device-to-host transfer (none when ``seqlen_q`` is 0),
    and only a failed rule reads more (where its first failing element is).
    Transient memory: a few fp32 copies of o and of v (the per-row range uses prefix maxima over the keys).
    """
    _, sq, hq, _ = o.shape
    sk, hk = v.shape[1], v.shape[2]
    heads = torch.arange(hq, device=o.device) // (hq // hk)
    n = visible_keys(sq, sk, causal, o.device)
    of = o.float()
    vf = v.float()
    # the rows that see no key are rows 0..e0-1, those that see exactly one key rows e0..e1-1 (a slice, not a mask:
    # no host synchronization); the others see at least two
    e0, e1 = _rows_seeing_at_most(0, sq, sk, causal), _rows_seeing_at_most(1, sq, sk, causal)
    counts: list[torch.Tensor] = []  # failing elements per rule, in the order the rules are judged
    if e0:
        counts.append((of[:, :e0] != 0).sum())
    if e1 > e0:
        want = vf[:, 0][:, heads].unsqueeze(1)  # [b, 1, hq, d]: the only visible key of such a row is key 0
        counts.append((of[:, e0:e1] != want).sum())
    if e0 < sq:  # some row sees a key
        seen = n != 0
        idx = (n - 1).clamp(min=0)
        if keys_seen(0, sq, sk, causal) == sk:  # every row sees every key (the fewest are row 0's)
            hi = vf.amax(dim=1, keepdim=True)[:, :, heads]  # [b, 1, hq, d]
            lo = vf.amin(dim=1, keepdim=True)[:, :, heads]
        else:
            hi = vf.cummax(dim=1).values[:, idx][:, :, heads]  # [b, sq, hq, d]: max over keys 0..n_i-1
            lo = vf.cummin(dim=1).values[:, idx][:, :, heads]
        slack = HULL_ULPS * _ulp(torch.maximum(hi.abs(), lo.abs()), o.dtype)
        inside = (of >= lo - slack) & (of <= hi + slack)  # NaN is outside
        bad = ~inside & seen.view(1, sq, 1, 1)
        counts.append(bad.sum())
    if not counts:
        return None
    found = iter(torch.stack(counts).tolist())  # the one transfer
    if e0 and next(found):
        bb, r, h, c = (int(x) for x in _first(of[:, :e0] != 0)[1])  # row r (rows 0..e0-1 see no key)
        return (f"o[batch {bb}, row {r}, head {h}, dim {c}] = {float(of[bb, r, h, c]):.6g} on a row "
                "that sees no key (must be exactly 0)")
    if e1 > e0 and next(found):
        got = of[:, e0:e1]
        bb, r, h, c = (int(x) for x in _first(got != want)[1])
        return (f"o[batch {bb}, row {e0 + r}, head {h}, dim {c}] = {float(got[bb, r, h, c]):.6g}, but the row "
                f"sees one key (key 0) whose v is {float(want[bb, 0, h, c]):.6g}: it must be returned exactly")
    if e0 == sq:
        return None
    n_bad = next(found)
    if n_bad:
        flat, at = _first(bad)
        bb, i, h, c = (int(x) for x in at)
        lo_v = float(lo[bb, i if lo.shape[1] > 1 else 0, h, c])
        hi_v = float(hi[bb, i if hi.shape[1] > 1 else 0, h, c])
        return (f"{_where(torch.tensor(flat), tuple(bad.shape))} = {float(of[bb, i, h, c]):.6g} lies outside "
                f"[{lo_v:.6g}, {hi_v:.6g}], the range of v over the {int(n[i])} keys its row sees "
                f"(+- {HULL_ULPS} ulps): o must be a convex combination of them ({int(n_bad)} such elements)")
    return None
