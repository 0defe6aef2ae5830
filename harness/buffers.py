"""The worker's per-scenario buffers: inputs and candidate outputs inside poisoned guard bands, in the
scenario's layout (harness/layouts.py), filled with its input values (harness/inputs.py).

Used by harness/worker.py, harness/sanitize.py and CPU tests; torch is passed in, not imported, like the
worker's other CUDA state.
"""

from __future__ import annotations

import math
from typing import Any

from harness.inputs import generate
from harness.layouts import DENSE, LayoutSpec, Views, build_views
from harness.scenarios import Scenario

#: Bytes of poisoned guard before and after every input and candidate output (multiple of 256: views stay aligned).
GUARD_BYTES = 64 << 10

#: The worker's default draws for a tensor the scenario gives no distribution (``kind`` of fill_inputs).
DRAW_KINDS = ("normal", "large_logits", "shifted")

#: Head padding (elements) of q and o on the worker's strided draws.
STRIDED = LayoutSpec(q={"kind": "padded", "pad": 8}, o={"kind": "padded", "pad": 8})


class Buffers:
    """Inputs and candidate outputs of one scenario (inside guard bands), with scrubbing on exit.

    ``q [batch, seqlen_q, num_heads_q, head_dim]``, ``k``/``v [batch, seqlen_k, num_heads_kv, head_dim]``
    and ``o_c`` (like q) in ``dtype`` (bf16/fp16) with the strides of the current layout, ``lse_c
    [batch, num_heads_q, seqlen_q]`` fp32 contiguous, all on ``device`` (the worker: "cuda").

    A scenario that declares a ``layout`` gets it on every call; otherwise calls alternate between dense
    tensors and q/o with a padded head stride (:meth:`set_layout`). ``guard_bytes=0`` allocates every tensor
    exactly (the sanitizer's runs: an access past a tensor then leaves its allocation).
    """

    def __init__(self, torch: Any, sc: Scenario, dtype: Any, device: str = "cuda", guard_bytes: int = GUARD_BYTES) -> None:
        self.torch, self.sc, self.dtype, self.device = torch, sc, dtype, device
        self.guard_bytes = guard_bytes
        self._guards: list[tuple[str, Any]] = []
        self._storages: list[Any] = []
        self._declared: Views | None = None
        self._dense: Views | None = None
        self._strided: Views | None = None
        if sc.layout is not None:
            self._declared = self._build(sc.layout)
        else:
            self._dense = self._build(DENSE)
        self.lse_c = self._guarded("lse", (sc.batch, sc.num_heads_q, sc.seqlen_q), torch.float32)
        self.default_scale = 1.0 / math.sqrt(sc.head_dim)
        self.scale = sc.softmax_scale if sc.softmax_scale is not None else self.default_scale
        self._ws: dict[int, Any] = {}
        self.views: Views = self._declared or self._dense  # type: ignore[assignment]
        self._use(self.views)

    def _build(self, spec: LayoutSpec, shared: dict[str, Any] | None = None) -> Views:
        views = build_views(self.torch, self.sc, spec, self.dtype, self._guarded,
                            lambda where, t: self._guards.append((where, t)), shared)
        self._storages += views.storages
        return views

    def _use(self, views: Views) -> None:
        self.views = views
        self.q, self.k, self.v, self.o_c = views.q, views.k, views.v, views.o

    def set_layout(self, *, strided: bool, scale_factor: float) -> None:
        """Choose the layout and softmax_scale of the next calls. A declared layout is always used; else
        dense tensors, or (``strided``) q and o with a head stride of head_dim + 8 (the padding is poison:
        reading it gives NaN, writing it trips the guard check). The scale is the declared softmax_scale,
        else ``scale_factor`` x 1/sqrt(head_dim)."""
        self.scale = self.sc.softmax_scale if self.sc.softmax_scale is not None else self.default_scale * scale_factor
        if self._declared is not None:
            self._use(self._declared)
        elif strided:
            if self._strided is None:
                assert self._dense is not None
                self._strided = self._build(STRIDED, shared={"k": self._dense.k, "v": self._dense.v})
            self._use(self._strided)
        else:
            assert self._dense is not None
            self._use(self._dense)

    def _guarded(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
        """A tensor of ``shape`` inside a larger allocation whose ``guard_bytes`` before and after hold poison
        (checked by :meth:`guards_intact`): a write just past an input or output is caught."""
        from harness.checks import poison_

        g = self.guard_bytes // (2 if dtype != self.torch.float32 else 4)
        n = math.prod(shape)
        full = self.torch.empty(n + 2 * g, dtype=dtype, device=self.device)
        if g:
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

        if not self._guards:
            return self.torch.zeros(0, dtype=self.torch.int64, device=self.device)
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
        """New values for q, k and v (every element the call reads; padding and cache slack keep their fill).

        A tensor with a distribution in the scenario's ``inputs`` gets it (harness.inputs.generate, with the
        current softmax_scale); the others follow ``kind``: normal: N(0,1); large_logits: q, k ~ 6 N(0,1)
        (logits ~ 36 sigma, exp overflows without max subtraction); shifted: q, k ~ N(0,1) + 1 (all logits
        positive and large lse)."""
        declared = self.sc.inputs
        for name in ("q", "k", "v"):
            t = self.views.targets[name]
            spec = getattr(declared, name) if declared is not None else None
            if spec is not None:
                t.copy_(generate(self.torch, spec, tuple(t.shape), gen, t.device, dtype_name=self.sc.dtype,
                                 scale=self.scale, q_spec=declared.q, seqlen_k=self.sc.seqlen_k))
                continue
            t.normal_(generator=gen)
            if name != "v" and kind == "large_logits":
                t.mul_(6.0)
            elif name != "v" and kind == "shifted":
                t.add_(1.0)

    def scrub(self) -> None:
        for t in (*self._storages, self.lse_c, *self._ws.values()):
            t.zero_()
        self._ws.clear()
