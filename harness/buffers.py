"""One kernel's buffers for one scenario: inputs, outputs and workspace in ONE arena with poisoned guards.

The checker (harness/checker.py) holds two: the candidate's (mapped into the candidate's process, see
harness/arena.py) and the original's (never shown to the candidate). Each tensor's storage lives in a
data region inside 64 KiB guard bands of poison; :meth:`Buffers.apply` points ``q``, ``k``, ``v``,
``o_c`` at the views of a call's layout (harness/layouts.py builds them inside the regions).

Layouts: a scenario that declares a ``layout`` gets exactly it on every call (layout name
``"declared"``; regions sized for its storage, packed q/k/v in one region); otherwise each call draws one
of harness.draws.LAYOUTS (regions sized for the padded layout, head stride head_dim + PAD). Every element
of a region outside its views holds poison, except what the declared layout fills (input padding or
cache slack: ``fill``); writes into an input region are caught by the checker's whole-region input
comparison, writes around o by :meth:`Buffers.guards_written`. Input values: the scenario's ``inputs``
distributions (harness/inputs.py) for the tensors it names, the call's value kind for the others.
Used by the checker and CPU tests; torch is passed in, not imported.
"""

from __future__ import annotations

import itertools
import math
import mmap
from collections.abc import Callable
from typing import Any

from harness.inputs import generate
from harness.layouts import DENSE, LayoutSpec, build_views, storage_elements
from harness.scenarios import Scenario

#: Bytes of poisoned guard before and after every region (multiple of 256: views stay aligned).
GUARD_BYTES = 64 << 10
#: Elements of head padding in the padded layouts (16 bytes for bf16/fp16: rows stay 16-byte aligned).
PAD = 8
#: An arena's size is a multiple of this (bytes; the CPU: the page size), and its last guard band reaches its
#: end: what a process maps of the arena (whole pages; a cudaMalloc's 2 MiB granules) is guarded up to the last
#: byte, so no write past the last region lasts unseen (the two candidate processes map the same arena). On
#: CUDA it also keeps two arenas out of one 2 MiB granule: when the candidate's and the original's shared one,
#: the candidate's decode calls ran 26-38 % slower right after the original's (kernels/NOTES.md, run 40).
ARENA_GRANULE = {"cuda": 2 << 20}
#: Workspace sizes are rounded up to this (bytes): the guard after the workspace starts at the size the kernel
#: is given (``workspace_bytes``), 256-byte aligned like every region.
WORKSPACE_ALIGN = 256
#: Byte written over the whole workspace before every call (0xFFFFFFFF is a NaN as fp32): scratch holds
#: no state from an earlier call and no zeros a kernel could rely on.
WORKSPACE_FILL = 0xFF
#: The layout name of a scenario's declared layout (its only layout).
DECLARED = "declared"

_P = {"kind": "padded", "pad": PAD}
#: The drawn layouts (harness.draws.LAYOUTS) as layout specs.
DRAWN: dict[str, LayoutSpec] = {
    "dense": DENSE,
    "padded_qo": LayoutSpec(q=_P, o=_P),
    "padded_kv": LayoutSpec(k=_P, v=_P),
    "padded_all": LayoutSpec(q=_P, k=_P, v=_P, o=_P),
}


def _align(n: int, a: int = 256) -> int:
    return (n + a - 1) // a * a


def _view_of(mask: Any, region: Any, view: Any) -> Any:
    """``mask`` (a contiguous tensor with one element per element of the flat ``region``) at the elements of
    ``view`` (a view into ``region``, same dtype): the same shape, strides and offset, so element i of the result
    is ``mask`` at view element i. None where ``view`` is not provably inside ``region``."""
    esize = region.element_size()
    off, rem = divmod(view.data_ptr() - region.data_ptr(), esize)
    if (view.dtype != region.dtype or rem or off < 0 or region.dim() != 1 or region.stride(0) != 1
            or view.untyped_storage().data_ptr() != region.untyped_storage().data_ptr()
            or any(st < 0 for st in view.stride())):
        return None
    last = off + sum((n - 1) * st for n, st in zip(view.shape, view.stride(), strict=True))
    if view.numel() and last >= region.numel():
        return None
    return mask.as_strided(tuple(view.shape), tuple(view.stride()), mask.storage_offset() + off)


def fill_values(torch: Any, sc: Scenario, targets: dict[str, Any], gen: Any, kind: str, scale: float, *,
                ordinary: bool = False) -> None:
    """New values for q, k and v, written into ``targets`` (the non-overlapping views of
    harness.layouts.Views). A tensor with a distribution in the scenario's ``inputs`` gets it
    (harness.inputs.generate, with softmax_scale ``scale``) unless ``ordinary`` (the timed values of
    harness/draws.py: the declared inputs set aside); the others follow ``kind``: normal: N(0,1);
    large_logits: q, k ~ 6 N(0,1) (logits ~ 36 sigma, exp overflows without max subtraction); shifted:
    q, k ~ N(0,1) + 1 (all logits positive and large lse)."""
    declared = None if ordinary else sc.inputs
    for name in ("q", "k", "v"):
        t = targets[name]
        spec = getattr(declared, name) if declared is not None else None
        if spec is not None:
            t.copy_(generate(torch, spec, tuple(t.shape), gen, t.device, dtype_name=sc.dtype, scale=scale,
                             q_spec=declared.q, seqlen_k=sc.seqlen_k))
            continue
        t.normal_(generator=gen)
        if name != "v" and kind == "large_logits":
            t.mul_(6.0)
        elif name != "v" and kind == "shifted":
            t.add_(1.0)


class Buffers:
    """q ``[batch, seqlen_q, num_heads_q, head_dim]``, k/v ``[batch, seqlen_k, num_heads_kv, head_dim]``,
    o_c (like q) in ``dtype`` (bf16/fp16) with the strides of the current layout, lse_c ``[batch,
    num_heads_q, seqlen_q]`` fp32 and a workspace of ``workspace_bytes``, carved from one uint8 arena of
    :attr:`nbytes` returned by ``allocate(nbytes)`` (default ``torch.empty`` on ``device``). Raises
    ValueError for a layout the scenario cannot take in :meth:`apply`.
    """

    def __init__(self, torch: Any, sc: Scenario, dtype: Any, device: str = "cuda", *, workspace_bytes: int = 0,
                 allocate: Callable[[int], Any] | None = None) -> None:
        self.torch, self.sc, self.dtype, self.device = torch, sc, dtype, device
        b, sq, hq, d = sc.batch, sc.seqlen_q, sc.num_heads_q, sc.head_dim
        self.lse_shape = (b, hq, sq)
        esize = 2
        if sc.layout is not None:
            sizes = {k: n * esize for k, n in storage_elements(sc, sc.layout).items()}
        else:
            sizes = {n: math.prod(s[:3]) * (d + PAD) * esize for n, s in
                     (("q", (b, sq, hq)), ("k", (b, sc.seqlen_k, sc.num_heads_kv)),
                      ("v", (b, sc.seqlen_k, sc.num_heads_kv)), ("o", (b, sq, hq)))}
        self.input_regions = [k for k in ("qkv", "q", "k", "v") if k in sizes]
        #: the workspace's size as the kernel is given it: the request rounded up to WORKSPACE_ALIGN
        self.workspace_bytes = _align(workspace_bytes, WORKSPACE_ALIGN)
        # every region's size a multiple of 4 (its guard after it starts on an fp32 word): a 2-byte tail is the
        # region's, where the "outside the view" or the whole-region input comparison sees a write into it
        plan = [*((k, _align(n, 4)) for k, n in sizes.items()), ("lse", b * hq * sq * 4), ("ws", self.workspace_bytes)]
        offsets: dict[str, tuple[int, int]] = {}
        off = 0
        for name, n in plan:
            off += GUARD_BYTES
            offsets[name] = (off, n)
            off = _align(off + n) + GUARD_BYTES
        self.nbytes = _align(off, ARENA_GRANULE.get(device, mmap.PAGESIZE))
        self.arena = allocate(self.nbytes) if allocate else torch.empty(self.nbytes, dtype=torch.uint8, device=device)
        self._data: dict[str, Any] = {}
        #: (where, guard tensor) or (where, None) for "outside the view" of a region (counted against a view)
        self._guards: list[tuple[str, Any]] = []
        self._outside: dict[str, str] = {}
        for i, (name, (start, n)) in enumerate(offsets.items()):
            dt = torch.float32 if name == "lse" else (torch.uint8 if name == "ws" else dtype)
            before = self.arena[start - GUARD_BYTES:start]
            # after: up to the next region's guard (the alignment gap included), the last one to the arena's end
            end = self.nbytes if i == len(offsets) - 1 else _align(start + n) + GUARD_BYTES
            after = self.arena[start + n:end]
            self._data[name] = self.arena[start:start + n].view(dt)
            label = "the workspace" if name == "ws" else ("packed qkv" if name == "qkv" else name)
            self._guards += [(f"before {label}", before.view(torch.float32)), (f"after {label}", after.view(torch.float32))]
            # drawn layouts: a region's elements outside the view keep poison (inputs too); a declared
            # layout fills input padding, so only o's is counted (inputs: the whole-region comparison)
            if name == "o" or (name in ("q", "k", "v") and sc.layout is None):
                where = f"outside the {name} view (head padding or tail)"
                self._guards.append((where, None))
                self._outside[where] = name
        from harness.checks import POISON_BITS, poison_

        self._offsets = offsets
        #: per region (not the workspace): its integer words (int16 for bf16/fp16, int32 for lse) and poison bits,
        #: made once: poisoning a region is one fill, with no view made per call
        self._words = {n: (t.view(torch.int16 if t.element_size() == 2 else torch.int32), POISON_BITS[t.dtype])
                       for n, t in self._data.items() if n != "ws"}
        self._drawn_views: dict[str, Any] = {}  # drawn layouts: their views, built once each
        poison_(self.arena.view(torch.float32))  # every offset and the total are multiples of 256
        # guards_written counts the guard bands' written elements in one pass over [poison, band 0, band 1, ...]:
        # a prefix sum, read at each band's last element (index 0: the poisoned sentinel, 0 written)
        self._bands = [t for _, t in self._guards if t is not None]
        self._sentinel = poison_(torch.empty(1, dtype=torch.float32, device=self.arena.device))
        self._band_ends = torch.tensor([0, *itertools.accumulate(t.numel() for t in self._bands)], dtype=torch.int64,
                                       device=self.arena.device)
        self.default_scale = 1.0 / math.sqrt(d)
        self.scale = self.default_scale
        self.layouts = (DECLARED,) if sc.layout is not None else tuple(DRAWN)
        self.apply(self.layouts[0], 1.0)

    # -- layout -------------------------------------------------------------------------------
    def spec(self, layout: str) -> LayoutSpec:
        """The layout spec of a layout name (``"declared"``: the scenario's; else harness.draws.LAYOUTS)."""
        if self.sc.layout is not None:
            if layout != DECLARED:
                raise ValueError(f"scenario {self.sc.id} declares its layout: only {DECLARED!r}, not {layout!r}")
            return self.sc.layout
        if layout not in DRAWN:
            raise ValueError(f"unknown layout {layout!r}; known: {sorted(DRAWN)}")
        return DRAWN[layout]

    def _carve(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
        """harness.layouts.build_views's allocation: the start of the region its storage name names."""
        words = name.split()
        key = "qkv" if "qkv" in words else next(w for w in words if w in ("q", "k", "v", "o"))
        return self._data[key][:math.prod(shape)].view(shape)

    def apply(self, layout: str, scale_factor: float) -> None:
        """Point q, k, v, o_c at ``layout``'s views and set softmax_scale: the scenario's declared
        ``softmax_scale``, else ``scale_factor`` / sqrt(head_dim). Every region is poisoned whole first
        (then the declared layout's input fills written; inputs must be filled afterwards)."""
        spec = self.spec(layout)
        if self.sc.layout is None:  # drawn layouts: every region poisoned whole after the views exist (input
            views = self._drawn_views.get(layout)  # padding holds poison, not build_views's NaN fill); the views
            if views is None:  # are built once per layout (build_views writes only inside the regions)
                views = self._drawn_views[layout] = build_views(self.torch, self.sc, spec, self.dtype, self._carve,
                                                                lambda where, t: None)
            self._poison(*self.input_regions, "o", "lse")
        else:
            self._poison(*self.input_regions, "o", "lse")
            views = build_views(self.torch, self.sc, spec, self.dtype, self._carve, lambda where, t: None)
        self.layout = layout
        self.views = views
        self.q, self.k, self.v, self.o_c = views.q, views.k, views.v, views.o
        self.targets = {**views.targets, "o": views.o}
        self.lse_c = self._data["lse"].view(self.lse_shape)
        declared = self.sc.softmax_scale
        self.scale = declared if declared is not None else self.default_scale * scale_factor

    def reapply(self, layout: str, scale_factor: float) -> None:
        """:meth:`apply` for the checker's next call (harness.checker.Runner._prepare). Where ``layout`` is already
        the current layout only the scale is set: nothing but the calls' views was written since the last apply
        (input values go into the views; o and lse, the only outputs, are poisoned whole by
        :meth:`prepare_outputs` before every call; the candidate's input regions are copied whole from the
        original's; a write anywhere else fails the scenario, which ends it), so the regions outside the views
        still hold what apply left there. Saves apply's fills and view building on about a third of the calls
        (consecutive calls of one drawn layout; every call of a declared layout)."""
        if layout != self.layout:
            self.apply(layout, scale_factor)
            return
        self.spec(layout)  # the same refusal as apply's for a layout the scenario cannot take
        declared = self.sc.softmax_scale
        self.scale = declared if declared is not None else self.default_scale * scale_factor

    def _poison(self, *names: str) -> None:
        """Fill the named regions whole with harness.checks.poison_'s payload (one fill each)."""
        for n in names:
            words, bits = self._words[n]
            words.fill_(bits)

    def region_words(self, name: str) -> Any:
        """The whole data region of ``name`` (as :meth:`region`; not the workspace) as its integer words: int16
        for bf16/fp16 regions, int32 for lse (compared with harness.checks.POISON_BITS of the region's dtype)."""
        return self._words[name][0]

    def byte_range(self, name: str) -> tuple[int, int]:
        """``(first byte, end byte)`` of region ``name``'s data in the arena (its size rounded up to 4 bytes)."""
        start, n = self._offsets[name]
        return start, start + n

    def guard_bands(self) -> list[Any]:
        """The guard bands (fp32 views of the arena, in :attr:`guard_names` order without the "outside the view"
        entries): what :meth:`guards_written` counts besides the regions' outsides."""
        return list(self._bands)

    def region(self, name: str) -> Any:
        """The whole data region of ``name`` (qkv or q, k, v; o, lse, ws) as a flat tensor of its dtype."""
        return self._data[name]

    def input_regions_t(self) -> list[Any]:
        """The whole input regions (views, padding, cache slack), in :attr:`input_regions` order."""
        return [self._data[n] for n in self.input_regions]

    def copy_inputs_from(self, other: Buffers) -> None:
        """Copy the input regions whole (views and what surrounds them) from ``other`` (same scenario)."""
        for n in self.input_regions:
            self._data[n].copy_(other._data[n])

    def prepare_outputs(self) -> None:
        """Poison o and lse whole and fill the workspace with WORKSPACE_FILL (before every call)."""
        self._poison("o", "lse")
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
        view" count is the region's non-poison elements minus the (non-overlapping) view's."""
        from harness.checks import written_mask

        torch = self.torch
        # written elements of every band at once: a prefix sum over the bands laid end to end, read at the
        # bands' ends (exact integer counts, the same as counting each band on its own)
        ends = written_mask(torch.cat([self._sentinel, *self._bands])).cumsum(0)[self._band_ends]
        band_counts = ends[1:] - ends[:-1]
        counts, i = [], 0
        for where, t in self._guards:
            if t is not None:
                counts.append(band_counts[i:i + 1])
                i += 1
                continue
            name = self._outside[where]
            region, view = self._data[name], self.targets[name]
            written = written_mask(region)
            in_view = _view_of(written, region, view)
            n_view = (written_mask(view) if in_view is None else in_view).sum()
            counts.append((written.sum() - n_view).reshape(1))
        return torch.cat(counts)

    def guards_intact(self) -> str | None:
        """None when every guard still holds only poison, else where the first written guard is
        (one device-to-host transfer for all guards)."""
        from harness.checks import first_written_guard

        return first_written_guard(self.guards_written().tolist(), self.guard_names)

    # -- values -------------------------------------------------------------------------------
    def fill_inputs(self, gen: Any, kind: str, ordinary: bool = False) -> None:
        """New input values in the current views: :func:`fill_values` with the current softmax_scale
        (``ordinary``: the scenario's declared inputs set aside)."""
        fill_values(self.torch, self.sc, self.targets, gen, kind, self.scale, ordinary=ordinary)

    def set_inputs(self, q: Any, k: Any, v: Any) -> None:
        """Copy given values (dense ``[b, s, h, d]``, any strides) into the current views (a broadcast
        tensor takes its first head)."""
        for name, val in (("q", q), ("k", k), ("v", v)):
            t = self.targets[name]
            t.copy_(val if tuple(t.shape) == tuple(val.shape) else val[:, :, :t.shape[2]])

    def scrub(self) -> None:
        """Zero the whole arena (nothing of this scenario survives in memory the allocator hands out)."""
        self.arena.zero_()
