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

    Args:
        q: ``[batch, seqlen_q, num_heads_q, head_dim]`` any float dtype (upcast to fp32).
        k, v: ``[batch, seqlen_k, num_heads_kv, head_dim]``; ``num_heads_q % num_heads_kv == 0`` (GQA/MQA).
        softmax_scale: default ``1/sqrt(head_dim)``.
        causal: bottom-right aligned: query i sees key j iff ``j <= i + seqlen_k - seqlen_q``.
        chunk_q: query rows per chunk; peak extra memory ~ ``4 * batch * heads * chunk_q * seqlen_k`` bytes.
        chunk_heads: query heads per chunk (default: all, or fewer when the score block would exceed ~1 GiB).
    Returns:
        ``(o, lse)``: o ``[batch, seqlen_q, num_heads_q, head_dim]`` fp32, lse ``[batch, num_heads_q, seqlen_q]``
        fp32 (natural log of the softmax denominator including the scale; ``+inf`` for a row with no key).
    Raises:
        ValueError: on mismatched shapes.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k, v must be 4-D [batch, seqlen, heads, head_dim]")
    b, sq, hq, d = q.shape
    bk, sk, hk, dk = k.shape
    if (bk, dk) != (b, d) or v.shape != k.shape or hq % hk:
        raise ValueError(f"incompatible shapes q={tuple(q.shape)} k={tuple(k.shape)} v={tuple(v.shape)}")
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    group = hq // hk
    o = torch.empty((b, sq, hq, d), dtype=torch.float32, device=q.device)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    if chunk_heads is None:
        budget = (1 << 30) // 4
        chunk_heads = max(1, min(hq, budget // max(1, b * chunk_q * max(sk, 1))))
    offset = sk - sq
    for h0 in range(0, hq, chunk_heads):
        h1 = min(hq, h0 + chunk_heads)
        kv_idx = torch.arange(h0, h1, device=q.device) // group
        kh = k.index_select(2, kv_idx).float().permute(0, 2, 3, 1)  # [b, h, d, sk]
        vh = v.index_select(2, kv_idx).float().permute(0, 2, 1, 3)  # [b, h, sk, d]
        for i0 in range(0, sq, chunk_q):
            i1 = min(sq, i0 + chunk_q)
            qh = q[:, i0:i1, h0:h1].float().permute(0, 2, 1, 3)  # [b, h, rows, d]
            s = torch.matmul(qh, kh) * scale  # [b, h, rows, sk]
            if causal:
                rows = torch.arange(i0, i1, device=q.device).unsqueeze(1)
                cols = torch.arange(sk, device=q.device).unsqueeze(0)
                s.masked_fill_(cols > rows + offset, float("-inf"))
            row_lse = torch.logsumexp(s, dim=-1)  # -inf where no key is visible
            p = torch.exp(s - row_lse.unsqueeze(-1))
            empty = torch.isneginf(row_lse)
            p = torch.where(empty.unsqueeze(-1), torch.zeros_like(p), p)
            o[:, i0:i1, h0:h1] = torch.matmul(p, vh).permute(0, 2, 1, 3)
            lse[:, h0:h1, i0:i1] = torch.where(empty, torch.full_like(row_lse, float("inf")), row_lse)
            del s, p
    return o, lse
