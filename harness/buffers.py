"""The worker's per-scenario buffers: inputs and candidate outputs inside poisoned guard bands.

Used only by harness/worker.py (and CPU tests); torch is passed in, not imported, like the worker's
other CUDA state.
"""

from __future__ import annotations

import math
from typing import Any

from harness.scenarios import Scenario

#: Bytes of poisoned guard before and after every input and candidate output (multiple of 256: views stay aligned).
GUARD_BYTES = 64 << 10


class Buffers:
    """Inputs and candidate outputs of one scenario (inside guard bands), with scrubbing on exit.

    ``q [batch, seqlen_q, num_heads_q, head_dim]``, ``k``/``v [batch, seqlen_k, num_heads_kv, head_dim]``
    and ``o_c`` (like q) in ``dtype`` (bf16/fp16), ``lse_c [batch, num_heads_q, seqlen_q]`` fp32, all on
    ``device`` (the worker: "cuda").
    """

    def __init__(self, torch: Any, sc: Scenario, dtype: Any, device: str = "cuda") -> None:
        self.torch, self.sc, self.dtype, self.device = torch, sc, dtype, device
        b, sq, sk, hq, hk, d = sc.batch, sc.seqlen_q, sc.seqlen_k, sc.num_heads_q, sc.num_heads_kv, sc.head_dim
        self._guards: list[tuple[str, Any]] = []
        self.q = self._q_dense = self._guarded("q", (b, sq, hq, d), dtype)
        self.k = self._guarded("k", (b, sk, hk, d), dtype)
        self.v = self._guarded("v", (b, sk, hk, d), dtype)
        self.o_c = self._o_dense = self._guarded("o", (b, sq, hq, d), dtype)
        self.lse_c = self._guarded("lse", (b, hq, sq), torch.float32)
        self._q_strided: Any = None
        self._o_strided: Any = None
        self.default_scale = 1.0 / math.sqrt(d)
        self.scale = self.default_scale
        self._ws: dict[int, Any] = {}

    def set_layout(self, *, strided: bool, scale_factor: float) -> None:
        """Point ``q`` and ``o_c`` at the dense tensors or at views with a head stride of head_dim + 8
        (the padding is poison: reading it gives NaN, writing it trips the guard check), and set the
        softmax_scale to ``scale_factor`` x 1/sqrt(head_dim)."""
        from harness.checks import poison_

        self.scale = self.default_scale * scale_factor
        if not strided:
            self.q, self.o_c = self._q_dense, self._o_dense
            return
        if self._q_strided is None:
            sc, pad = self.sc, 8
            shape = (sc.batch, sc.seqlen_q, sc.num_heads_q, sc.head_dim + pad)
            q_full, o_full = self._guarded("strided q", shape, self.dtype), self._guarded("strided o", shape, self.dtype)
            poison_(q_full[..., sc.head_dim:]), poison_(o_full[..., sc.head_dim:])
            self._guards.append(("in the head padding of strided o", o_full[..., sc.head_dim:]))
            self._q_strided, self._o_strided = q_full[..., : sc.head_dim], o_full[..., : sc.head_dim]
        self.q, self.o_c = self._q_strided, self._o_strided

    def _guarded(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
        """A tensor of ``shape`` inside a larger allocation whose GUARD_BYTES before and after hold poison
        (checked by :meth:`guards_intact`): a write just past an input or output is caught."""
        from harness.checks import poison_

        g = GUARD_BYTES // (2 if dtype != self.torch.float32 else 4)
        n = math.prod(shape)
        full = self.torch.empty(n + 2 * g, dtype=dtype, device=self.device)
        poison_(full[:g]), poison_(full[g + n:])
        self._guards += [(f"before {name}", full[:g]), (f"after {name}", full[g + n:])]
        return full[g:g + n].view(shape)

    @property
    def guard_names(self) -> list[str]:
        """Where each guard is ("before q", ..., "in the head padding of strided o"), in check order."""
        return [where for where, _ in self._guards]

    def guards_written(self) -> Any:
        """Elements no longer holding poison, per guard (order of :attr:`guard_names`): an int64 tensor
        ``[num_guards]`` on the buffers' device, computed without a host synchronization."""
        from harness.checks import poison_count_t

        return self.torch.stack([t.numel() - poison_count_t(t) for _, t in self._guards])

    def guards_intact(self) -> str | None:
        """None when every guard still holds only poison, else where the first written guard is
        (one device-to-host transfer for all guards)."""
        from harness.checks import first_written_guard

        return first_written_guard(self.guards_written().tolist(), self.guard_names)

    def workspace(self, lib: Any, nbytes: int) -> Any:
        key = id(lib)
        if key not in self._ws or self._ws[key].numel() < nbytes:
            self._ws[key] = self.torch.zeros(nbytes, dtype=self.torch.uint8, device=self.device)
        return self._ws[key]

    def fill_inputs(self, gen: Any, kind: str) -> None:
        """normal: N(0,1); large_logits: q, k ~ 6 N(0,1) (logits ~ 36 sigma, exp overflows without max
        subtraction); shifted: q, k ~ N(0,1) + 1 (all logits positive and large lse)."""
        for t in (self.q, self.k, self.v):
            t.normal_(generator=gen)
        if kind == "large_logits":
            self.q.mul_(6.0), self.k.mul_(6.0)
        elif kind == "shifted":
            self.q.add_(1.0), self.k.add_(1.0)

    def scrub(self) -> None:
        for t in (self._q_dense, self.k, self.v, self._o_dense, self.lse_c, self._q_strided, self._o_strided,
                  *self._ws.values()):
            if t is not None:
                t.zero_()
        self._ws.clear()
