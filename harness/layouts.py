"""Memory layouts of a scenario's q, k, v and o (the ``layout`` field of a suite file): the strides the
kernel is given and the storage behind them, built inside the worker's guarded allocations.

Per tensor, a kind (a string, or a table with options):

* ``dense``: ``[batch, seqlen, heads, head_dim]`` contiguous (the default);
* ``padded``: a head stride of ``head_dim + pad``; the padding holds ``fill`` (NaN) for an input and
  poison for o (a write there is an out-of-bounds write);
* ``head_major``: ``[batch, heads, seqlen, head_dim]`` storage viewed as ``[batch, seqlen, heads, head_dim]``;
* ``broadcast`` (k, v): one head's storage shared by every kv head (head stride 0);
* ``cache`` (k, v): the keys inside a larger cache of ``capacity`` rows per batch (a padded batch stride),
  the rows past seqlen_k holding ``fill`` (NaN): a correct kernel never reads them.

A string names one kind for every tensor it applies to (``layout = "head_major"``), or ``packed_qkv``:
q, k and v slices of one ``[batch, seqlen, num_heads_q + 2 num_heads_kv, head_dim]`` buffer (row stride
``(num_heads_q + 2 num_heads_kv) head_dim``; needs seqlen_q == seqlen_k). Examples:

    layout = { k = "head_major" }                                          # K and V with different strides
    layout = { k = { kind = "cache", capacity = 64 }, v = { kind = "cache", capacity = 64 } }

Importing this module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:  # pragma: no cover
    from harness.scenarios import Scenario

KINDS = ("dense", "padded", "head_major", "broadcast", "cache")
KV_ONLY = ("broadcast", "cache")
#: Rows of slack a cache gets past seqlen_k when the suite names no capacity (covers key tiles up to 256).
DEFAULT_CACHE_SLACK = 256
FILLS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


class TensorLayout(BaseModel):
    """The layout of one tensor. ``pad``: padded only (elements per head); ``capacity``: cache only (rows per
    batch, > seqlen_k; default seqlen_k + 256); ``fill``: what the padding or the cache slack of an input holds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["dense", "padded", "head_major", "broadcast", "cache"] = "dense"
    pad: int = Field(default=8, ge=1)
    capacity: int | None = Field(default=None, ge=2)
    fill: Literal["nan", "inf", "-inf"] = "nan"

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"kind": data} if isinstance(data, str) else data


class LayoutSpec(BaseModel):
    """The ``layout`` field: a layout per tensor, or ``packed_qkv``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    packed_qkv: bool = False
    q: TensorLayout = TensorLayout()
    k: TensorLayout = TensorLayout()
    v: TensorLayout = TensorLayout()
    o: TensorLayout = TensorLayout()

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        """``"packed_qkv"``; or a kind for every tensor it applies to (``"cache"``: k and v). In a table, a bare
        ``"cache"`` for k or v beside the other's cache table is the same cache: it takes that table's
        capacity and fill (``{ k = { kind = "cache", capacity = 4096 }, v = "cache" }``)."""
        if isinstance(data, dict):
            for a, b in (("k", "v"), ("v", "k")):
                other = data.get(b)
                if data.get(a) == "cache" and isinstance(other, dict) and other.get("kind") == "cache":
                    data = {**data, a: {key: other[key] for key in ("kind", "capacity", "fill") if key in other}}
            return data
        if not isinstance(data, str):
            return data
        if data == "packed_qkv":
            return {"packed_qkv": True}
        if data not in KINDS:
            raise ValueError(f"unknown layout {data!r}: use packed_qkv or one of {', '.join(KINDS)}")
        names = ("k", "v") if data in KV_ONLY else ("q", "k", "v", "o")
        return {n: data for n in names}

    def problems(self, sc: Scenario) -> list[str]:
        """What makes this layout unusable for ``sc`` (empty when fine)."""
        out = []
        for name in ("q", "o"):
            if getattr(self, name).kind in KV_ONLY:
                out.append(f"layout.{name}: {getattr(self, name).kind!r} applies to k and v only")
        for name in ("k", "v"):
            t = getattr(self, name)
            if t.capacity is not None and t.kind != "cache":
                out.append(f"layout.{name}: capacity applies to kind 'cache' only")
            if t.kind == "cache" and t.capacity is not None and t.capacity <= sc.seqlen_k:
                out.append(f"layout.{name}: cache capacity={t.capacity} must exceed seqlen_k={sc.seqlen_k}")
        if self.o.fill != "nan":
            out.append("layout.o: an output's padding always holds poison (a write there fails guard_bands): no fill")
        if self.packed_qkv:
            if sc.seqlen_q != sc.seqlen_k:
                out.append(f"layout packed_qkv needs seqlen_q == seqlen_k (got {sc.seqlen_q} and {sc.seqlen_k})")
            if any(getattr(self, n).kind != "dense" for n in ("q", "k", "v")):
                out.append("layout packed_qkv fixes the layout of q, k and v: only o may be named with it")
        return out


DENSE = LayoutSpec()


def _shape(sc: Scenario, name: str) -> tuple[int, int, int, int]:
    if name in ("q", "o"):
        return sc.batch, sc.seqlen_q, sc.num_heads_q, sc.head_dim
    return sc.batch, sc.seqlen_k, sc.num_heads_kv, sc.head_dim


def capacity_of(t: TensorLayout, seqlen_k: int) -> int:
    """Rows per batch of a cache layout."""
    return t.capacity if t.capacity is not None else seqlen_k + DEFAULT_CACHE_SLACK


def strides(sc: Scenario, spec: LayoutSpec | None = None) -> dict[str, tuple[int, int, int]]:
    """``{tensor: (batch_stride, row_stride, head_stride)}`` in elements, as the kernel is given them, for
    ``spec`` (default: the scenario's declared layout, else dense)."""
    spec = spec or sc.layout or DENSE
    out = {}
    if spec.packed_qkv:
        _, s, hq, d = _shape(sc, "q")
        total = hq + 2 * sc.num_heads_kv
        for n in ("q", "k", "v"):
            out[n] = (s * total * d, total * d, d)
    for name in ("q", "k", "v", "o"):
        if name in out:
            continue
        t = getattr(spec, name)
        _, s, h, d = _shape(sc, name)
        if t.kind == "dense":
            out[name] = (s * h * d, h * d, d)
        elif t.kind == "padded":
            w = d + t.pad
            out[name] = (s * h * w, h * w, w)
        elif t.kind == "head_major":
            out[name] = (h * s * d, d, s * d)
        elif t.kind == "broadcast":
            out[name] = (s * d, d, 0)
        else:  # cache
            out[name] = (capacity_of(t, s) * h * d, h * d, d)
    return out


def storage_elements(sc: Scenario, spec: LayoutSpec | None = None) -> dict[str, int]:
    """Elements of the storage behind each tensor (``"qkv"`` for a packed buffer), guards excluded."""
    spec = spec or sc.layout or DENSE
    out: dict[str, int] = {}
    if spec.packed_qkv:
        out["qkv"] = sc.batch * sc.seqlen_q * (sc.num_heads_q + 2 * sc.num_heads_kv) * sc.head_dim
    for name in ("q", "k", "v", "o"):
        if spec.packed_qkv and name != "o":
            continue
        t = getattr(spec, name)
        b, s, h, d = _shape(sc, name)
        if t.kind == "padded":
            out[name] = b * s * h * (d + t.pad)
        elif t.kind == "broadcast":
            out[name] = b * s * d
        elif t.kind == "cache":
            out[name] = b * capacity_of(t, s) * h * d
        else:
            out[name] = b * s * h * d
    return out


def differs_from_dense(sc: Scenario, name: str, spec: LayoutSpec | None = None) -> bool:
    """True when tensor ``name``'s strides differ from dense in a dimension that is used (batch > 1,
    seqlen > 1, heads > 1): a kernel that assumes dense strides reads other elements."""
    got = strides(sc, spec)[name]
    want = strides(sc, DENSE)[name]
    b, s, h, _ = _shape(sc, name)
    used = (b > 1, s > 1, h > 1)
    return any(u and g != w for u, g, w in zip(used, got, want, strict=True))


@dataclass
class Views:
    """The tensors a call is given (``q, k, v, o``: ``[batch, seqlen, heads, head_dim]`` views with the
    layout's strides) and, for q, k and v, the non-overlapping views that input values are written into
    (``targets``: a broadcast tensor's single head)."""

    q: Any
    k: Any
    v: Any
    o: Any
    targets: dict[str, Any] = field(default_factory=dict)
    storages: list[Any] = field(default_factory=list)


def build_views(torch: Any, sc: Scenario, spec: LayoutSpec, dtype: Any, alloc: Any, add_guard: Any,
                shared: dict[str, Any] | None = None) -> Views:
    """Allocate the storage of ``spec`` for ``sc`` and return the views into it.

    Args:
        alloc: ``alloc(name, shape, dtype) -> tensor``: a fresh tensor of ``shape`` (the worker's guarded
            allocation, harness.buffers.Buffers._guarded).
        add_guard: ``add_guard(where, tensor)``: registers a region that must keep its poison (o's padding).
        shared: dense views to reuse by name (the worker's strided draws share k and v with the dense ones).
    """
    from harness.checks import poison_

    shared = shared or {}
    views: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    storages: list[Any] = []
    if spec.packed_qkv:
        b, s, hq, d = _shape(sc, "q")
        hk = sc.num_heads_kv
        st = alloc("packed qkv", (b, s, hq + 2 * hk, d), dtype)
        storages.append(st)
        views["q"], views["k"], views["v"] = st[:, :, :hq], st[:, :, hq:hq + hk], st[:, :, hq + hk:]
        targets.update(q=views["q"], k=views["k"], v=views["v"])
    for name in ("q", "k", "v", "o"):
        if name in views:
            continue
        t = getattr(spec, name)
        if t.kind == "dense" and name in shared:
            views[name] = shared[name]
            if name != "o":
                targets[name] = shared[name]
            continue
        b, s, h, d = _shape(sc, name)
        if t.kind == "dense":
            st = alloc(name, (b, s, h, d), dtype)
            view = target = st
        elif t.kind == "padded":
            st = alloc(f"strided {name}", (b, s, h, d + t.pad), dtype)
            view = target = st[..., :d]
            pad = st[..., d:]
            if name == "o":
                poison_(pad)
                add_guard("in the head padding of strided o", pad)
            else:
                pad.fill_(FILLS[t.fill])
        elif t.kind == "head_major":
            st = alloc(f"head-major {name}", (b, h, s, d), dtype)
            view = target = st.transpose(1, 2)
        elif t.kind == "broadcast":
            st = alloc(f"broadcast {name}", (b, s, 1, d), dtype)
            target = st
            view = st.expand(b, s, h, d)
        else:  # cache
            cap = capacity_of(t, s)
            st = alloc(f"{name} cache", (b, cap, h, d), dtype)
            view = target = st[:, :s]
            st[:, s:].fill_(FILLS[t.fill])
        storages.append(st)
        views[name] = view
        if name != "o":
            targets[name] = target
    return Views(q=views["q"], k=views["k"], v=views["v"], o=views["o"], targets=targets, storages=storages)
