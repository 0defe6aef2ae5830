"""Input values of a scenario: the per-tensor distributions of a suite file's ``inputs`` field, and
their generation on any torch device (the worker's CUDA tensors, the tests' CPU tensors).

A suite names a distribution per tensor (``q``, ``k``, ``v``); a tensor it does not name follows the
worker's default draws (draw 0 N(0, 1); later draws 6 N(0, 1) for q and k, or N(1, 1) for q and k):

    inputs.q = { dist = "constant", value = 0.0 }      # every logit 0: equal weights
    inputs.v = { dist = "constant", value = 60000.0 }  # o = 60000 exactly; an fp16 P V accumulator overflows
    inputs.v = "head_tagged"                           # a string is the distribution with its defaults

Importing this module does not import torch (the parent process loads suites without it).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:  # pragma: no cover
    from harness.scenarios import Scenario

#: Largest finite value per dtype: generated values are clamped to it, so inputs are always finite.
DTYPE_MAX = {"bf16": 3.3895313892515355e38, "fp16": 65504.0}


class _Dist(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Normal(_Dist):
    """``N(mean, std^2)``. Offset logits are two of these: ``q = normal(mean=+a)``, ``k = normal(mean=-a)``
    make every logit about ``-a^2 * head_dim * softmax_scale`` (hugely negative: exp underflows unless the
    row max is subtracted)."""

    dist: Literal["normal"] = "normal"
    mean: float = 0.0
    std: float = Field(default=1.0, ge=0)


class Uniform(_Dist):
    """Uniform in ``[lo, hi)``."""

    dist: Literal["uniform"]
    lo: float = -1.0
    hi: float = 1.0

    @model_validator(mode="after")
    def _order(self) -> Uniform:
        if not self.lo < self.hi:
            raise ValueError(f"uniform needs lo < hi, got lo={self.lo} hi={self.hi}")
        return self


class Constant(_Dist):
    """Every element ``value``."""

    dist: Literal["constant"]
    value: float


class Large(_Dist):
    """Large magnitude: a random sign times a value uniform in ``[magnitude / 2, magnitude]`` (e.g. 1.3e5
    in bf16, beyond fp16's 65504: a kernel that rounds through fp16 overflows)."""

    dist: Literal["large"]
    magnitude: float = Field(gt=0)


class HeadTagged(_Dist):
    """Tagged by head: ``x[b, s, h, :] = step * h + N(0, std)`` (``h`` the tensor's own head index; for
    ``v`` the kv head). A query head that reads the wrong kv head gets another head's tag: a wrong GQA
    mapping shows as an error of ``step`` or more."""

    dist: Literal["head_tagged"]
    step: float = 1.0
    std: float = Field(default=0.0, ge=0)


class HighDims(_Dist):
    """Signal only in the high dims: 0 in dims ``< from_dim``, ``N(mean, std)`` in dims ``>= from_dim``
    (a kernel that drops or mis-indexes dims past 64 loses all of it)."""

    dist: Literal["high_dims"]
    from_dim: int = Field(default=64, ge=1)
    mean: float = 0.0
    std: float = Field(default=1.0, ge=0)


class Rising(_Dist):
    """k only: logits that rise along the keys, so the running row max jumps from tile to tile.

    ``k[b, j, h, :] = N(0, std) + t_j`` (every dim) with ``t_j = span * j / (seqlen_k - 1) /
    (softmax_scale * sum_d E[q_d])``: for a q with a nonzero mean (which the suite must declare, e.g.
    ``q = { dist = "constant", value = 1.0 }``) the logit of key j is about ``span * j / (seqlen_k - 1)``
    plus noise. With span / (number of 64-key tiles) > 20 the max jumps by more than 20 between tiles
    (exp(-20) underflows an fp16 rescale factor)."""

    dist: Literal["rising"]
    span: float = Field(default=40.0, gt=0)
    std: float = Field(default=1.0, ge=0)


TensorValues = Annotated[Normal | Uniform | Constant | Large | HeadTagged | HighDims | Rising,
                         Field(discriminator="dist")]
DIST_NAMES = ("normal", "uniform", "constant", "large", "head_tagged", "high_dims", "rising")


class InputsSpec(BaseModel):
    """The ``inputs`` field: a distribution for each of ``q``, ``k``, ``v`` it names (the others follow the
    worker's default draws)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    q: TensorValues | None = None
    k: TensorValues | None = None
    v: TensorValues | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        """``v = "head_tagged"`` is ``v = { dist = "head_tagged" }``."""
        if isinstance(data, dict):
            return {k: ({"dist": v} if isinstance(v, str) else v) for k, v in data.items()}
        return data

    def problems(self, sc: Scenario) -> list[str]:
        """What makes this spec unusable for scenario ``sc`` (empty when fine): rising on a tensor other
        than k or without a q mean, high_dims past head_dim, values beyond the dtype's range."""
        out: list[str] = []
        top = DTYPE_MAX[sc.dtype]
        for name in ("q", "k", "v"):
            spec = getattr(self, name)
            if spec is None:
                continue
            where = f"inputs.{name}"
            if isinstance(spec, Rising) and name != "k":
                out.append(f"{where}: 'rising' applies to k only (the logits rise along the keys)")
            if isinstance(spec, HighDims) and spec.from_dim >= sc.head_dim:
                out.append(f"{where}: high_dims from_dim={spec.from_dim} leaves no dim of head_dim={sc.head_dim}")
            heads = sc.num_heads_q if name == "q" else sc.num_heads_kv
            peak = _peak_abs(spec, heads)
            if peak is not None and peak > top:
                out.append(f"{where}: values up to {peak:.4g} exceed {sc.dtype}'s largest finite value {top:.6g}")
        if isinstance(self.k, Rising):
            mu = q_mean_sum(self.q, sc.head_dim)
            if not mu:
                out.append("inputs.k: 'rising' needs q with a nonzero mean, e.g. inputs.q = { dist = \"constant\", "
                           "value = 1.0 } or { dist = \"normal\", mean = 1.0, std = 0.1 }")
            else:
                t_max = rising_offset_max(self.k, sc, mu)
                if t_max > top / 2:
                    out.append(f"inputs.k: rising span={self.k.span:g} needs k values up to {t_max:.4g}, beyond "
                               f"{sc.dtype}'s range: lower the span or raise q's mean")
        return out


#: Largest finite fp32 value: the reference and the kernels accumulate q·k and P·V in fp32.
FP32_MAX = 3.4028234663852886e38
#: A practical bound on |x| for draws with unbounded tails: 8 standard deviations from the mean.
_TAIL_SIGMAS = 8.0
#: The same for a tensor the suite does not name: the default draws reach 6 N(0, 1) or N(1, 1) (harness/draws.py).
DEFAULT_DRAW_PEAK = 6.0 * _TAIL_SIGMAS


def practical_peak(spec: Any, heads: int, sc: Scenario | None = None, q_spec: Any = None) -> float:
    """A bound on |value| of one tensor's draws (``spec`` None: the default draws), counting
    :data:`_TAIL_SIGMAS` standard deviations where the distribution has tails (harness/inputs.py's
    distributions; ``sc`` and ``q_spec`` are needed for a rising k)."""
    if spec is None:
        return DEFAULT_DRAW_PEAK
    tail = _TAIL_SIGMAS * getattr(spec, "std", 0.0)
    if isinstance(spec, Rising):
        mu = q_mean_sum(q_spec, sc.head_dim) if sc is not None else 0.0
        return (rising_offset_max(spec, sc, mu) if mu and sc is not None else 0.0) + tail
    return (_peak_abs(spec, heads) or 0.0) + tail  # tail 0 where the distribution has no std (uniform, constant, large)


def fp32_range_problems(sc: Scenario) -> list[str]:
    """Values that overflow fp32 in the reference and in every kernel (empty when none can): a logit
    ``head_dim x max|q| x max|k|`` (kernels form q·k in fp32 before scaling; times softmax_scale where that
    exceeds 1) beyond :data:`FP32_MAX`, or an unnormalized ``P V`` row ``seqlen_k x max|v|`` (each weight
    ``exp(s - max) <= 1``) beyond it. Bounds are worst cases (:func:`practical_peak`), e.g. q = k =
    constant 1e20 at head_dim 128 is refused, q = k = large 1.3e5 is not."""
    spec = sc.inputs
    q, k, v = (getattr(spec, n) if spec is not None else None for n in ("q", "k", "v"))
    scale = sc.softmax_scale if sc.softmax_scale is not None else 1.5 / math.sqrt(sc.head_dim)  # drawn up to 1.5x
    pq = practical_peak(q, sc.num_heads_q, sc)
    pk = practical_peak(k, sc.num_heads_kv, sc, q_spec=q)
    pv = practical_peak(v, sc.num_heads_kv, sc)
    out = []
    logit = sc.head_dim * pq * pk * max(1.0, scale)
    if not logit < FP32_MAX:
        out.append(f"inputs: logits can reach {logit:.3g} (head_dim {sc.head_dim} x max|q| {pq:.3g} x max|k| {pk:.3g}"
                   f"{f' x softmax_scale {scale:g}' if scale > 1 else ''}), beyond fp32's largest value {FP32_MAX:.3g}: "
                   "the fp32 reference and every kernel overflow; lower the magnitudes of q or k")
    row = sc.seqlen_k * pv
    if not row < FP32_MAX:
        out.append(f"inputs: an unnormalized P V row can reach {row:.3g} (seqlen_k {sc.seqlen_k} x max|v| {pv:.3g}), beyond "
                   f"fp32's largest value {FP32_MAX:.3g}: the fp32 reference and every kernel overflow; lower v")
    return out


def _peak_abs(spec: Any, heads: int) -> float | None:
    """Largest |value| the spec asks for, where it is fixed by the spec (None: only clamped tails)."""
    if isinstance(spec, Constant):
        return abs(spec.value)
    if isinstance(spec, Large):
        return spec.magnitude
    if isinstance(spec, Uniform):
        return max(abs(spec.lo), abs(spec.hi))
    if isinstance(spec, Normal | HighDims):
        return abs(spec.mean)
    if isinstance(spec, HeadTagged):
        return abs(spec.step) * max(heads - 1, 0)
    return None


def q_mean_sum(spec: Any, head_dim: int) -> float:
    """``sum_d E[q_d]`` of a q spec (0 for the default draws, random signs and per-head tags)."""
    if isinstance(spec, Normal):
        return head_dim * spec.mean
    if isinstance(spec, Constant):
        return head_dim * spec.value
    if isinstance(spec, Uniform):
        return head_dim * (spec.lo + spec.hi) / 2
    if isinstance(spec, HighDims):
        return (head_dim - spec.from_dim) * spec.mean
    return 0.0


def _scale_of(sc: Scenario) -> float:
    return sc.softmax_scale if sc.softmax_scale is not None else 1.0 / math.sqrt(sc.head_dim)


def rising_offset_max(spec: Rising, sc: Scenario, mu: float, scale: float | None = None) -> float:
    """Largest ``|t_j|`` of a rising k (see :class:`Rising`); a drawn scale down to half the default is
    allowed for when ``scale`` is None and the scenario declares none."""
    s = scale if scale is not None else (_scale_of(sc) if sc.softmax_scale is not None else 0.5 / math.sqrt(sc.head_dim))
    return spec.span / (s * abs(mu))


def generate(torch: Any, spec: Any, shape: tuple[int, ...], gen: Any, device: Any, *,
             dtype_name: str, scale: float, q_spec: Any = None, seqlen_k: int = 1) -> Any:
    """Values of one tensor as fp32 ``shape = [batch, seqlen, heads, head_dim]`` on ``device``, drawn from
    ``gen`` (a torch.Generator on that device), clamped to the dtype's finite range.

    Args:
        spec: one of the distributions of this module.
        scale: the softmax_scale of this draw (used by :class:`Rising` only).
        q_spec: the q distribution (used by :class:`Rising` only).
        seqlen_k: keys in the scenario (used by :class:`Rising`; ``shape[1]`` may be a cache's capacity).
    """
    f32 = torch.float32

    def randn() -> Any:
        return torch.randn(shape, generator=gen, device=device, dtype=f32)

    def rand() -> Any:
        return torch.rand(shape, generator=gen, device=device, dtype=f32)

    if isinstance(spec, Normal):
        x = randn().mul_(spec.std).add_(spec.mean)
    elif isinstance(spec, Uniform):
        x = rand().mul_(spec.hi - spec.lo).add_(spec.lo)
    elif isinstance(spec, Constant):
        x = torch.full(shape, spec.value, device=device, dtype=f32)
    elif isinstance(spec, Large):
        sign = torch.where(rand() < 0.5, -1.0, 1.0)
        x = rand().mul_(0.5).add_(0.5).mul_(spec.magnitude).mul_(sign)
    elif isinstance(spec, HeadTagged):
        tags = torch.arange(shape[2], device=device, dtype=f32).mul_(spec.step).view(1, 1, -1, 1)
        x = randn().mul_(spec.std).add_(tags)
    elif isinstance(spec, HighDims):
        x = randn().mul_(spec.std).add_(spec.mean)
        x[..., : spec.from_dim] = 0.0
    elif isinstance(spec, Rising):
        mu = q_mean_sum(q_spec, shape[3])
        if not mu:
            raise ValueError("a rising k needs q with a nonzero mean")
        j = torch.arange(shape[1], device=device, dtype=f32).view(1, -1, 1, 1)
        t = j.mul_(spec.span / max(seqlen_k - 1, 1) / (scale * mu))
        x = randn().mul_(spec.std).add_(t)
    else:  # pragma: no cover - the union is closed
        raise TypeError(f"unknown distribution {spec!r}")
    top = DTYPE_MAX[dtype_name]
    return x.clamp_(-top, top)
