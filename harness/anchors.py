"""Timing anchors: library attention kernels timed next to the candidate (``--anchors``).

- ``cudnn``, ``flash``: torch SDPA with one backend (cuDNN attention; FlashAttention-2), there with torch.
- ``fa3``: FlashAttention-3 (Hopper), ``flash_attn_interface.flash_attn_func``; there when that module is
  importable (the hopper build of flash-attention installed, or its folder on ``PYTHONPATH``).

The parent process checks availability with :func:`importlib.util.find_spec` (cheap: no torch, no import);
the worker (harness/worker.py) checks again by importing it and builds the zero-argument callables it
times. A scenario an anchor cannot run gets no anchor time (``ScenarioResult.anchors[name] is None``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, get_args

from harness.errors import AnchorUnavailableError

if TYPE_CHECKING:  # pragma: no cover
    from harness.buffers import Buffers
    from harness.scenarios import Scenario

#: The anchor names accepted by ``--anchors``, ``--goal-against``, ``ATTNQ_GOAL_ANCHOR`` and the MCP tools.
AnchorName = Literal["cudnn", "flash", "fa3"]
ANCHORS: tuple[str, ...] = get_args(AnchorName)
#: What a goal's geomean is measured against: the original kernel or one anchor. One vocabulary for
#: ``attnq verify --goal-against``, ``attnq evolve --goal-against``, ``attnq serve --goal-anchor``,
#: ``ATTNQ_GOAL_ANCHOR`` and the evolve config ("original" = no anchor).
GoalAgainst = Literal["original", "cudnn", "flash", "fa3"]
GOAL_TARGETS: tuple[str, ...] = get_args(GoalAgainst)
ANCHOR_DESCRIPTIONS = {
    "cudnn": "torch SDPA, cuDNN attention backend",
    "flash": "torch SDPA, FlashAttention-2 backend",
    "fa3": "FlashAttention-3 (flash_attn_interface.flash_attn_func; Hopper, bf16/fp16, "
           "head_dim 64/96/128/192/256)",
}
FA3_MODULE = "flash_attn_interface"
FA3_MISSING = ("anchor fa3 needs FlashAttention-3's flash_attn_interface importable (pip install flash-attn-3 / "
               "the hopper build of flash-attention, or put its folder on PYTHONPATH)")
#: FA3's ``num_splits=0``: its own split-KV heuristic (the default of its decode API flash_attn_with_kvcache);
#: flash_attn_func defaults to 1 (no split), which leaves most SMs idle on decode. Prefill grids large
#: enough to fill the GPU get 1 split from the heuristic either way.
FA3_NUM_SPLITS = 0


def fa3_available() -> bool:
    """True when ``flash_attn_interface`` can be found on ``sys.path`` (found, not imported)."""
    try:
        return importlib.util.find_spec(FA3_MODULE) is not None
    except (ImportError, ValueError):
        return False


def anchor_unavailable_reason(name: str) -> str | None:
    """None when anchor ``name`` can be timed here, else a plain, actionable reason."""
    if name == "fa3" and not fa3_available():
        return FA3_MISSING
    return None


def available_anchors() -> list[str]:
    """The anchors that can be timed here, in ANCHORS order."""
    return [a for a in ANCHORS if anchor_unavailable_reason(a) is None]


def require_anchors(names: Iterable[str]) -> None:
    """Refuse anchors that cannot be timed here; names that are not anchors ("original") are ignored.

    Raises:
        AnchorUnavailableError: (exit code 2) with the reason of the first unavailable anchor.
    """
    for name in names:
        reason = anchor_unavailable_reason(name) if name in ANCHORS else None
        if reason:
            raise AnchorUnavailableError(reason, details={"anchor": name})


def load_fa3() -> Any:
    """Import ``flash_attn_interface`` (the worker, after torch). Raises AnchorUnavailableError with the
    import error when the module is absent or found but unusable (wrong Python/torch build)."""
    require_anchors(["fa3"])
    try:
        import flash_attn_interface
    except Exception as exc:  # noqa: BLE001 - any import failure makes the anchor unusable
        raise AnchorUnavailableError(f"anchor fa3: {FA3_MODULE} was found but does not import "
                                     f"({type(exc).__name__}: {exc})", details={"anchor": "fa3"}) from None
    return flash_attn_interface


def check_worker_anchors(names: Iterable[str]) -> None:
    """The worker's own check before any scenario: every requested anchor is usable in this process."""
    if "fa3" in names:
        load_fa3()


def fa3_runner(torch: Any, causal: bool, q: Any, k: Any, v: Any, softmax_scale: float) -> Callable[[], Any] | None:
    """A zero-argument callable running FA3 on these tensors and returning its output, or None when FA3
    cannot run them (any exception on a trial call: unsupported head_dim or dtype, a layout it rejects).

    ``q [batch, seqlen_q, num_heads_q, head_dim]``, ``k``/``v [batch, seqlen_k, num_heads_kv, head_dim]``
    (GQA: num_heads_q a multiple of num_heads_kv), bf16 or fp16 on the GPU, last dim contiguous; causal
    is bottom-right aligned in FA3 as in attnq. The output ``[batch, seqlen_q, num_heads_q, head_dim]``
    (FA3 returns a tensor or ``(out, lse)`` depending on its version; both are handled). Tries
    ``num_splits=FA3_NUM_SPLITS`` first, then FA3's defaults (builds without that argument).
    """
    for extra in ({"num_splits": FA3_NUM_SPLITS}, {}):
        fn = fa3_bound(torch, causal, q, k, v, softmax_scale, extra)
        try:
            fn()
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001, S112 - FA3 refuses what it does not support with assorted errors
            continue
        return fn
    return None


def fa3_bound(torch: Any, causal: bool, q: Any, k: Any, v: Any, softmax_scale: float,
              extra: dict[str, Any]) -> Callable[[], Any]:
    """The zero-argument FA3 call of :func:`fa3_runner` without its trial call (``extra``: the keyword
    arguments a trial found usable, ``fn.keywords`` of a runner); tensors as there."""
    fa3 = load_fa3()

    def run() -> Any:
        with torch.no_grad():
            out = fa3.flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal, **extra)
        return out[0] if isinstance(out, (tuple, list)) else out

    run.keywords = dict(extra)  # type: ignore[attr-defined]
    return run


def sdpa_runner(torch: Any, sc: Scenario, bufs: Buffers, backend: str) -> Any:
    """A zero-arg callable running torch SDPA with one backend on ``bufs``'s current views and scale."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    q, k, v = (t.transpose(1, 2) for t in (bufs.q, bufs.k, bufs.v))
    kwargs: dict[str, Any] = {"scale": bufs.scale}
    if sc.num_heads_q != sc.num_heads_kv:
        kwargs["enable_gqa"] = True
    if sc.causal:
        if sc.seqlen_q == sc.seqlen_k:
            kwargs["is_causal"] = True
        else:
            from torch.nn.attention.bias import causal_lower_right

            kwargs["attn_mask"] = causal_lower_right(sc.seqlen_q, sc.seqlen_k)

    def run() -> None:
        with sdpa_kernel(be):
            F.scaled_dot_product_attention(q, k, v, **kwargs)

    return run


class TimedAnchors:
    """The anchors of one scenario's timing loop (harness/checker.py, which runs them in the worker on the
    original's buffers): a zero-argument callable per anchor on the original's current views and scale, or
    None where the anchor cannot run them (tried once per layout: FA3 and the SDPA backends refuse some
    shapes and strides). An anchor that runs on none of the scenario's timed calls gets no time
    (``ScenarioResult.anchors[name] is None``). ``names``: the job's anchors (:data:`ANCHORS`)."""

    def __init__(self, torch: Any, sc: Scenario, names: list[str]) -> None:
        self.torch, self.sc, self.names = torch, sc, names
        self.support: dict[tuple[str, str], Any] = {}

    def runner(self, name: str, bufs: Buffers, layout: str) -> Any:
        """The callable timing anchor ``name`` on ``bufs`` (harness.buffers.Buffers) in ``layout``, or None."""
        key = (name, layout)
        if name == "fa3":
            if key not in self.support:
                fn = fa3_runner(self.torch, self.sc.causal, bufs.q, bufs.k, bufs.v, bufs.scale)
                self.support[key] = None if fn is None else fn.keywords
            extra = self.support[key]
            return None if extra is None else fa3_bound(self.torch, self.sc.causal, bufs.q, bufs.k, bufs.v,
                                                         bufs.scale, extra)
        if key not in self.support:
            self.support[key] = sdpa_supported(self.torch, self.sc, bufs, name)
        return sdpa_runner(self.torch, self.sc, bufs, name) if self.support[key] else None


def sdpa_supported(torch: Any, sc: Scenario, bufs: Buffers, backend: str) -> bool:
    """Whether the SDPA backend runs the scenario (tried once, on the current views)."""
    try:
        sdpa_runner(torch, sc, bufs, backend)()
        torch.cuda.synchronize()
    except RuntimeError:
        return False
    return True
