"""One kernel's buffers for one scenario: inputs, outputs and workspace in ONE arena with poisoned guards.

The checker (harness/checker.py) holds two: the candidate's (mapped into the candidate's process, see
harness/arena.py) and the original's (never shown to the candidate). Each tensor lives in a data
region sized for the padded layout (head stride head_dim + 8), inside 64 KiB guard bands of poison;
:meth:`Buffers.apply` points ``q``, ``k``, ``v``, ``o_c`` at the views of a call's layout, and every
element of a region outside its view holds poison (reading it gives NaN, writing it trips
:meth:`Buffers.guards_written`). Used by the checker and CPU tests; torch is passed in, not imported.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from harness.scenarios import Scenario

#: Bytes of poisoned guard before and after every region (multiple of 256: views stay aligned).
GUARD_BYTES = 64 << 10
#: Elements of head padding in the padded layouts (16 bytes for bf16/fp16: rows stay 16-byte aligned).
PAD = 8
#: Byte written over the whole workspace before every call (0xFFFFFFFF is a NaN as fp32): scratch holds
#: no state from an earlier call and no zeros a kernel could rely on.
WORKSPACE_FILL = 0xFF

#: Which tensors each layout pads (harness.draws.LAYOUTS).
PADDED = {"dense": (), "padded_qo": ("q", "o"), "padded_kv": ("k", "v"), "padded_all": ("q", "k", "v", "o")}


def _align(n: int, a: int = 256) -> int:
    return (n + a - 1) // a * a


class Buffers:
    """q ``[batch, seqlen_q, num_heads_q, head_dim]``, k/v ``[batch, seqlen_k, num_heads_kv, head_dim]``,
    o_c (like q) in ``dtype`` (bf16/fp16), lse_c ``[batch, num_heads_q, seqlen_q]`` fp32 and a workspace of
    ``workspace_bytes``, carved from one uint8 arena of :attr:`nbytes` returned by ``allocate(nbytes)``
    (default ``torch.empty`` on ``device``). Raises ValueError for an unknown layout in :meth:`apply`.
    """

    def __init__(self, torch: Any, sc: Scenario, dtype: Any, device: str = "cuda", *, workspace_bytes: int = 0,
                 allocate: Callable[[int], Any] | None = None) -> None:
        self.torch, self.sc, self.dtype, self.device = torch, sc, dtype, device
        b, sq, sk, hq, hk, d = sc.batch, sc.seqlen_q, sc.seqlen_k, sc.num_heads_q, sc.num_heads_kv, sc.head_dim
        self.shapes = {"q": (b, sq, hq, d), "k": (b, sk, hk, d), "v": (b, sk, hk, d), "o": (b, sq, hq, d),
                       "lse": (b, hq, sq)}
        esize = 2
        plan: list[tuple[str, int]] = []
        for name in ("q", "k", "v", "o"):
            bb, s, h, dd = self.shapes[name]
            plan.append((name, bb * s * h * (dd + PAD) * esize))
        plan.append(("lse", b * hq * sq * 4))
        plan.append(("ws", workspace_bytes))
        offsets: dict[str, tuple[int, int]] = {}
        off = 0
        for name, n in plan:
            off += GUARD_BYTES
            offsets[name] = (off, n)
            off = _align(off + n) + GUARD_BYTES
        self.nbytes = off
        self.arena = allocate(off) if allocate else torch.empty(off, dtype=torch.uint8, device=device)
        self.workspace_bytes = workspace_bytes
        self._data: dict[str, Any] = {}
        self._guards: list[tuple[str, Any]] = []
        for name, (start, n) in offsets.items():
            dt = torch.float32 if name == "lse" else (torch.uint8 if name == "ws" else dtype)
            before = self.arena[start - GUARD_BYTES:start]
            after = self.arena[start + n:start + n + GUARD_BYTES]
            self._data[name] = self.arena[start:start + n].view(dt)
            label = "the workspace" if name == "ws" else name
            self._guards += [(f"before {label}", before.view(torch.float32)), (f"after {label}", after.view(torch.float32))]
            if name in ("q", "k", "v", "o"):
                self._guards.append((f"outside the {name} view (head padding or tail)", None))
        from harness.checks import poison_

        poison_(self.arena.view(torch.float32))  # every offset and the total are multiples of 256
        self.layout = "dense"
        self.default_scale = 1.0 / math.sqrt(d)
        self.scale = self.default_scale
        self.apply("dense", 1.0)

    # -- layout -------------------------------------------------------------------------------
    def view(self, name: str, layout: str) -> Any:
        """The ``name`` tensor's view in ``layout`` (dense: the first numel elements; padded: a head stride
        of head_dim + PAD)."""
        data, shape = self._data[name], self.shapes[name]
        if name == "lse":
            return data.view(shape)
        if layout not in PADDED:
            raise ValueError(f"unknown layout {layout!r}; known: {sorted(PADDED)}")
        if name in PADDED[layout]:
            b, s, h, d = shape
            return data.view(b, s, h, d + PAD)[..., :d]
        return data[:math.prod(shape)].view(shape)

    def apply(self, layout: str, scale_factor: float) -> None:
        """Point q, k, v, o_c at ``layout``'s views and set softmax_scale = ``scale_factor`` / sqrt(head_dim).
        Every region is poisoned whole first (inputs must be filled afterwards)."""
        from harness.checks import poison_

        views = {n: self.view(n, layout) for n in ("q", "k", "v", "o")}
        self.layout = layout
        for n in ("q", "k", "v", "o", "lse"):
            poison_(self._data[n])
        self.q, self.k, self.v, self.o_c = views["q"], views["k"], views["v"], views["o"]
        self.lse_c = self._data["lse"].view(self.shapes["lse"])
        self.scale = self.default_scale * scale_factor

    def region(self, name: str) -> Any:
        """The whole data region of ``name`` (q, k, v, o, lse, ws) as a flat tensor of its dtype."""
        return self._data[name]

    def copy_inputs_from(self, other: Buffers) -> None:
        """Copy q, k, v regions whole (views and the poison around them) from ``other`` (same scenario)."""
        for n in ("q", "k", "v"):
            self._data[n].copy_(other._data[n])

    def prepare_outputs(self) -> None:
        """Poison o and lse whole and fill the workspace with WORKSPACE_FILL (before every call)."""
        from harness.checks import poison_

        poison_(self._data["o"]), poison_(self._data["lse"])
        if self.workspace_bytes:
            self._data["ws"].fill_(WORKSPACE_FILL)

    @property
    def workspace(self) -> Any:
        """The workspace region (uint8), or None when no workspace was requested."""
        return self._data["ws"] if self.workspace_bytes else None

    # -- guards -------------------------------------------------------------------------------
    @property
    def guard_names(self) -> list[str]:
        """Where each guard is ("before q", "after q", "outside the q view ...", ...), in check order."""
        return [where for where, _ in self._guards]

    def guards_written(self) -> Any:
        """Elements no longer holding poison, per guard (order of :attr:`guard_names`): an int64 tensor
        ``[num_guards]`` on the buffers' device, computed without a host synchronization. The "outside the
        view" count is the region's non-poison elements minus the view's."""
        from harness.checks import poison_count_t

        counts = []
        views = {"q": self.q, "k": self.k, "v": self.v, "o": self.o_c}
        for where, t in self._guards:
            if t is not None:
                counts.append(t.numel() - poison_count_t(t))
                continue
            name = where.split()[2]
            region, view = self._data[name], views[name]
            counts.append((region.numel() - poison_count_t(region)) - (view.numel() - poison_count_t(view)))
        return self.torch.stack(counts)

    def guards_intact(self) -> str | None:
        """None when every guard still holds only poison, else where the first written guard is
        (one device-to-host transfer for all guards)."""
        from harness.checks import first_written_guard

        return first_written_guard(self.guards_written().tolist(), self.guard_names)

    # -- values -------------------------------------------------------------------------------
    def fill_inputs(self, gen: Any, kind: str) -> None:
        """normal: N(0,1); large_logits: q, k ~ 6 N(0,1) (logits ~ 36 sigma, exp overflows without max
        subtraction); shifted: q, k ~ N(0,1) + 1 (all logits positive and large lse)."""
        for t in (self.q, self.k, self.v):
            t.normal_(generator=gen)
        if kind == "large_logits":
            self.q.mul_(6.0), self.k.mul_(6.0)
        elif kind == "shifted":
            self.q.add_(1.0), self.k.add_(1.0)

    def set_inputs(self, q: Any, k: Any, v: Any) -> None:
        """Copy given values (any layout) into the current views."""
        self.q.copy_(q), self.k.copy_(k), self.v.copy_(v)

    def scrub(self) -> None:
        """Zero the whole arena (nothing of this scenario survives in memory the allocator hands out)."""
        self.arena.zero_()
