"""Roofline position of a scenario: which bound applies (compute or memory) and how close the kernel gets.

For one call, ``t_compute = flops / matmul rate`` and ``t_memory = bytes_min / HBM bandwidth``; the
larger of the two is the bound (kernels/NOTES.md, "The two bounds per scenario class", does the same by
hand). ``fraction_of_bound = t_bound / t_measured``: for a compute-bound scenario that is the achieved
TFLOP/s over the matmul rate, for a memory-bound one the achieved bandwidth (``bytes_min / t``) over
the HBM bandwidth. Both rates are the *measured* ones (what a kernel can reach), not the data-sheet
figures; the physical ceiling is kept alongside for the figures.

Units: FLOPs per call, bytes per call, ms, TFLOP/s (1e12 FLOP/s), TB/s (1e12 B/s).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Literal

from harness.scenarios import Scenario
from harness.verdict import Verdict

#: Dense bf16 matmul rate measured on the H200 (8192^3, random data, the harness worker), TFLOP/s.
#: Source: docs/gpu-results.md (header). Each verification measures its own (``Verdict.peak_tflops``);
#: this is the fallback when a verdict carries none.
MATMUL_TFLOPS_MEASURED_H200 = 762.0
#: Physical dense bf16 ceiling of the H200: 132 SMs x 4096 FLOP/clk x 1980 MHz, TFLOP/s.
#: Source: docs/gpu-results.md (header); ``Verdict.physical_peak_tflops`` when the verdict has it.
PHYSICAL_PEAK_TFLOPS_H200 = 132 * 4096 * 1.98e9 / 1e12
#: HBM bandwidth a streaming kernel reaches on the H200, TB/s (data sheet: 4.8). Source: kernels/NOTES.md
#: ("t_mem = bytes_min / 4.3 TB/s"). Override with ``ATTNQ_HBM_TBPS`` (Settings.hbm_tbps).
HBM_TBPS_MEASURED_H200 = 4.3

Bound = Literal["compute", "memory"]

_ID_RE = re.compile(r"^(?P<group>.+)/b(?P<b>\d+)-(?:s(?P<s>\d+)|sq(?P<sq>\d+)-sk(?P<sk>\d+))-"
                    r"h(?P<hq>\d+)(?:x(?P<hkv>\d+))?-d(?P<d>\d+)-(?P<c>causal|noncausal)-(?P<dt>bf16|fp16)$")


@functools.cache
def _builtin_scenarios() -> dict[str, Scenario]:
    """Every scenario of the built-in suites by id (named scenarios carry fields their id does not spell out)."""
    from harness.scenarios import list_suites, load_suite

    return {sc.id: sc for name in list_suites() for sc in load_suite(name).scenarios}


def scenario_from_id(scenario_id: str) -> Scenario | None:
    """The scenario an id names: a built-in suite's scenario of that id, else the shape the id spells out
    (``Scenario.id``); None if it is neither."""
    known = _builtin_scenarios().get(scenario_id)
    if known is not None:
        return known
    m = _ID_RE.match(scenario_id)
    if not m:
        return None
    sq = int(m["s"] or m["sq"])
    sk = int(m["s"] or m["sk"])
    hq = int(m["hq"])
    try:
        return Scenario(group=m["group"], batch=int(m["b"]), seqlen_q=sq, seqlen_k=sk, num_heads_q=hq,
                        num_heads_kv=int(m["hkv"] or hq), head_dim=int(m["d"]), causal=m["c"] == "causal",
                        dtype=m["dt"])  # type: ignore[arg-type]
    except ValueError:
        return None


def bound_times_ms(flops: float, bytes_min: float, *, matmul_tflops: float, hbm_tbps: float) -> tuple[float, float]:
    """``(t_compute_ms, t_memory_ms)``: the time one call needs at the matmul rate and at the HBM bandwidth.

    Raises:
        ValueError: a rate that is not positive.
    """
    if matmul_tflops <= 0 or hbm_tbps <= 0:
        raise ValueError(f"rates must be positive: matmul {matmul_tflops} TFLOP/s, HBM {hbm_tbps} TB/s")
    return flops / (matmul_tflops * 1e12) * 1e3, bytes_min / (hbm_tbps * 1e12) * 1e3


def position(flops: float, bytes_min: float, time_ms: float | None, *, matmul_tflops: float,
             hbm_tbps: float) -> tuple[Bound, float | None]:
    """``(bound, fraction_of_bound)`` of one call that took ``time_ms`` (None: bound only).

    The bound is ``compute`` when ``t_compute >= t_memory``, else ``memory``; the fraction is
    ``max(t_compute, t_memory) / time_ms`` (1.0 = at the roof).
    """
    tc, tm = bound_times_ms(flops, bytes_min, matmul_tflops=matmul_tflops, hbm_tbps=hbm_tbps)
    bound: Bound = "compute" if tc >= tm else "memory"
    if time_ms is None or time_ms <= 0:
        return bound, None
    return bound, max(tc, tm) / time_ms


def rates_for(verdict: Verdict, *, matmul_tflops: float | None = None,
              hbm_tbps: float | None = None) -> tuple[float, float]:
    """``(matmul TFLOP/s, HBM TB/s)`` for ``verdict``: the overrides, else the verdict's measured peak and
    recorded HBM rate, else the H200 constants of this module."""
    mm = matmul_tflops or verdict.bound_tflops or verdict.peak_tflops or MATMUL_TFLOPS_MEASURED_H200
    bw = hbm_tbps or verdict.hbm_tbps or HBM_TBPS_MEASURED_H200
    return float(mm), float(bw)


def annotate(verdict: Verdict, scenarios: Iterable[Scenario] = (), *, matmul_tflops: float | None = None,
             hbm_tbps: float | None = None, overwrite: bool = False) -> int:
    """Fill ``bound`` and ``fraction_of_bound`` of each scenario result of ``verdict`` in place.

    Shapes come from ``scenarios`` (matched by id), else from the id itself (:func:`scenario_from_id`);
    a result whose shape is unknown is left as is. The rates are :func:`rates_for`'s; they are recorded
    on the verdict (``bound_tflops``, ``hbm_tbps``). Results that already carry a bound keep it unless
    ``overwrite``. Returns the number of results annotated.
    """
    mm, bw = rates_for(verdict, matmul_tflops=matmul_tflops, hbm_tbps=hbm_tbps)
    if verdict.bound_tflops is None or overwrite:
        verdict.bound_tflops, verdict.hbm_tbps = mm, bw
    shapes = {s.id: s for s in scenarios}
    n = 0
    for r in verdict.scenarios:
        if r.bound is not None and not overwrite:
            continue
        sc = shapes.get(r.id) or scenario_from_id(r.id)
        if sc is None:
            continue
        t = r.candidate.median_ms if (r.correct and r.candidate is not None) else None
        r.bound, r.fraction_of_bound = position(r.flops or sc.flops, sc.bytes_min, t, matmul_tflops=mm, hbm_tbps=bw)
        n += 1
    return n
