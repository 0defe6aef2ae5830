"""The one fp32 attention reference, used by the harness and the tests alike.

Semantics follow kernels/attn_abi.h: softmax over ``softmax_scale * q·k``, causal masks bottom-right
aligned (FlashAttention >= 2.1), a row that sees no key gives ``o = 0`` and ``lse = +inf``.
"""

from __future__ import annotations

import math

import torch


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    softmax_scale: float | None = None,
    causal: bool = False,
    chunk_q: int = 1024,
    chunk_heads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 attention forward on upcast inputs, chunked so a 16k x 16k problem fits in memory.

    Every product and sum is fp32 (no TF32, no lower precision; the matmuls follow torch's global
    ``allow_tf32`` flags, which are off by default and which the worker turns off). Per block of
    ``chunk_heads`` query heads and ``chunk_q`` query rows ``[i0, i1)``, on one fp32 score block:
    ``s = (softmax_scale * q) @ k^T`` over the keys ``[0, kend)`` that some row of the block sees (causal:
    ``kend = min(seqlen_k, i1 + seqlen_k - seqlen_q)``, non-causal: ``seqlen_k``), the causal mask on the
    last columns only, ``m = max_j s`` and its column ``j*`` (one pass), ``p = softmax(s) = exp(s - m) / l``
    (torch's fused fp32 softmax: one kernel, not four passes over the block), ``o = p @ v`` and
    ``lse = m + log(l) = m - log(p[j*])``; rows that see no key are set afterwards.

    Args:
        q: ``[batch, seqlen_q, num_heads_q, head_dim]`` any float dtype (upcast to fp32), any strides;
            never modified (also when already fp32).
        k, v: ``[batch, seqlen_k, num_heads_kv, head_dim]``; ``num_heads_q % num_heads_kv == 0`` (GQA/MQA:
            query head ``h`` reads key/value head ``h // (num_heads_q // num_heads_kv)``). v may have its
            own last dimension ``head_dim_v`` (FlashAttention-3's tests use it; the kernel ABI does not).
        softmax_scale: default ``1/sqrt(head_dim)``.
        causal: bottom-right aligned: query i sees key j iff ``j <= i + seqlen_k - seqlen_q``.
        chunk_q: query rows per chunk; peak extra memory ~ ``2 x 4 * batch * heads * chunk_q * seqlen_k`` bytes
            (the score block and its softmax; harness/memory.py counts both).
        chunk_heads: query heads per chunk (default: all, or fewer when the score block would exceed ~1 GiB).
    Returns:
        ``(o, lse)``: o ``[batch, seqlen_q, num_heads_q, head_dim_v]`` fp32, lse ``[batch, num_heads_q, seqlen_q]``
        fp32 (natural log of the softmax denominator including the scale). A row that sees no key (causal
        with ``seqlen_q > seqlen_k``, or ``seqlen_k == 0``) has ``o = 0`` and ``lse = +inf``.
    Raises:
        ValueError: on mismatched shapes.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k, v must be 4-D [batch, seqlen, heads, head_dim]")
    b, sq, hq, d = q.shape
    bk, sk, hk, dk = k.shape
    if (bk, dk) != (b, d) or v.shape[:3] != k.shape[:3] or hq % hk:
        raise ValueError(f"incompatible shapes q={tuple(q.shape)} k={tuple(k.shape)} v={tuple(v.shape)}")
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    group = hq // hk
    o = torch.empty((b, sq, hq, v.shape[3]), dtype=torch.float32, device=q.device)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    if chunk_heads is None:
        budget = (1 << 30) // 4
        chunk_heads = max(1, min(hq, budget // max(1, b * chunk_q * max(sk, 1))))
    offset = sk - sq
    for h0 in range(0, hq, chunk_heads):
        h1 = min(hq, h0 + chunk_heads)
        kv_idx = torch.arange(h0, h1, device=q.device) // group
        # [b, h, sk, d] contiguous: a key prefix [:, :, :kend] is a batched matrix the GEMMs read in place
        kh = k.index_select(2, kv_idx).float().permute(0, 2, 1, 3).contiguous()
        vh = v.index_select(2, kv_idx).float().permute(0, 2, 1, 3).contiguous()
        for i0 in range(0, sq, chunk_q):
            i1 = min(sq, i0 + chunk_q)
            # keys [kend, sk) are masked for every row of the chunk (row i1 - 1 sees j <= i1 - 1 + offset)
            kend = max(0, min(sk, i1 + offset)) if causal else sk
            if kend == 0:  # no row of the chunk sees a key
                o[:, i0:i1, h0:h1] = 0.0
                lse[:, h0:h1, i0:i1] = float("inf")
                continue
            # the scale folded into the small q block (out of place: q itself is never written)
            qh = q[:, i0:i1, h0:h1].permute(0, 2, 1, 3).float().mul(scale)  # [b, h, rows, d]
            s = torch.matmul(qh, kh[:, :, :kend].transpose(-1, -2))  # [b, h, rows, kend]
            if causal:
                # row i0 + r sees j <= i0 + r + offset: every row sees the columns below c0, mask the rest
                c0 = max(0, i0 + offset + 1)
                if c0 < kend:
                    rows = torch.arange(i1 - i0, device=q.device).unsqueeze(1)
                    cols = torch.arange(c0, kend, device=q.device).unsqueeze(0)
                    s[..., c0:kend].masked_fill_(cols > rows + (i0 + offset), float("-inf"))
            # one pass for the row max and where it is: -inf where the row sees no key
            m, at = s.max(dim=-1, keepdim=True)  # [b, h, rows, 1]
            empty = torch.isneginf(m)
            # torch's fused softmax (exp(s - max) / l in fp32, one kernel) instead of separate max / sub / exp / sum
            # passes over the score block: rows that see no key come out NaN and are zeroed below
            p = torch.softmax(s, dim=-1)
            del s
            oh = torch.matmul(p, vh[:, :, :kend])  # [b, h, rows, d]
            # p at the row's max is exp(0) / l = 1 / l, so lse = m + log(l) = m - log(p[at])
            row_lse = m - p.gather(-1, at).log_()
            del p
            o[:, i0:i1, h0:h1] = oh.masked_fill_(empty, 0.0).permute(0, 2, 1, 3)
            lse[:, h0:h1, i0:i1] = row_lse.masked_fill_(empty, float("inf")).squeeze(-1)
            del oh
    return o, lse


def attention_reference_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    batch_idx: torch.Tensor,
    head_idx: torch.Tensor,
    rows: torch.Tensor,
    *,
    softmax_scale: float | None = None,
    causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attention_reference` on sampled query rows only (the timed calls' check, harness/checker.py).

    Same semantics and fp32 arithmetic as the full reference (bottom-right causal, GQA, empty rows
    ``o = 0``, ``lse = +inf``); only the rounding order may differ (~1e-6 relative: the matmuls' summation order,
    and here ``o = (exp(s - m) @ v) / l`` where the full reference takes torch's softmax first).

    Args:
        q: ``[batch, seqlen_q, num_heads_q, head_dim]``; k, v: ``[batch, seqlen_k, num_heads_kv, head_dim]``;
            any float dtype and strides (upcast to fp32, never modified).
        batch_idx, head_idx: int64 ``[P]``: the batch entry and QUERY head of each sampled (batch, head) pair.
        rows: int64 ``[P, R]``: query rows of each pair.
    Returns:
        ``(o, lse)``: o ``[P, R, head_dim]`` fp32 and lse ``[P, R]`` fp32.
    """
    sq, hq, d = q.shape[1], q.shape[2], q.shape[3]
    sk, hk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    kv_idx = head_idx // (hq // hk)
    qs = q[batch_idx[:, None], rows, head_idx[:, None], :].float().mul(scale)  # [P, R, d]
    ks = k[batch_idx, :, kv_idx, :].float()  # [P, sk, d]
    vs = v[batch_idx, :, kv_idx, :].float()
    s = torch.bmm(qs, ks.transpose(-1, -2))  # [P, R, sk] (bmm: torch.matmul's kernel here, without its reshapes)
    if causal:
        cols = torch.arange(sk, device=q.device).view(1, 1, sk)
        s.masked_fill_(cols > (rows + (sk - sq)).unsqueeze(-1), float("-inf"))
    m = s.amax(dim=-1, keepdim=True) if sk else torch.full((*rows.shape, 1), float("-inf"), device=q.device)
    empty = torch.isneginf(m)
    s.sub_(m.masked_fill(empty, 0.0)).exp_()
    den = s.sum(dim=-1, keepdim=True)
    o = torch.bmm(s, vs).div_(den.masked_fill(empty, 1.0)).masked_fill_(empty, 0.0)
    lse = (m + den.log()).masked_fill_(empty, float("inf")).squeeze(-1)
    return o, lse
