"""Figures of one kernel's verdict: per-scenario speedup, roofline position, before/after comparison.

Scenarios are laid out along x by group (the verdict's group order), sorted within a group by the
plotted value, with a gap between groups; failed scenarios come first in their group and are marked.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from matplotlib.transforms import blended_transform_factory

from harness.errors import AttnqError
from harness.roofline import (
    PHYSICAL_PEAK_TFLOPS_H200,
    annotate,
    rates_for,
    scenario_from_id,
)
from harness.scenarios import Scenario, list_suites, load_suite
from harness.verdict import ScenarioResult, Verdict, geomean
from report.data import LabelledVerdict
from report.render import (
    BOUND_COLORS,
    INCORRECT_COLOR,
    RenderedFigure,
    new_figure,
    render,
    series_color,
)

GROUP_GAP = 3  # empty x slots between two groups
_MARKERS = ("o", "D", "^", "v", "s", "P")

Placed = list[tuple[int, ScenarioResult]]
Spans = list[tuple[str, int, int]]


def layout(results: Sequence[ScenarioResult], value: Callable[[ScenarioResult], float | None]) -> tuple[Placed, Spans]:
    """x position of each result (grouped, failed first, then by ``value``) and each group's (name, first, last) x."""
    placed: Placed = []
    spans: Spans = []
    x = 0
    for g in dict.fromkeys(r.group for r in results):
        rows = sorted((r for r in results if r.group == g), key=lambda r: (r.correct, value(r) or 0.0))
        start = x
        for r in rows:
            placed.append((x, r))
            x += 1
        spans.append((g, start, x - 1))
        x += GROUP_GAP
    return placed, spans


def _group_axis(ax: Axes, spans: Spans, placed: Placed) -> None:
    """Shade every other group, label groups (with their size) under the axis, no per-scenario ticks."""
    for i, (_, a, b) in enumerate(spans):
        if i % 2:
            ax.axvspan(a - 0.5, b + 0.5, color="#000000", alpha=0.04, lw=0, zorder=0)
    ax.set_xticks([(a + b) / 2 for _, a, b in spans])
    ax.set_xticklabels([f"{g}\n({b - a + 1})" for g, a, b in spans], fontsize=8)
    ax.tick_params(axis="x", length=0)
    if placed:
        ax.set_xlim(-1, placed[-1][0] + 1)


def _mark_incorrect(ax: Axes, placed: Placed) -> int:
    """A red x at the bottom edge and a faint red band at each failed scenario; returns how many."""
    bad = [x for x, r in placed if not r.correct]
    if bad:
        tr = blended_transform_factory(ax.transData, ax.transAxes)
        for x in bad:
            ax.axvspan(x - 0.5, x + 0.5, color=INCORRECT_COLOR, alpha=0.12, lw=0, zorder=0)
        ax.scatter(bad, [0.03] * len(bad), transform=tr, marker="x", s=36, color=INCORRECT_COLOR, zorder=5,
                   clip_on=False, label=f"incorrect ({len(bad)})")
    return len(bad)


def log_y_axis(ax: Axes, values: Sequence[float]) -> None:
    """Log y axis with ``0.5x 1x 2x`` labels, always showing 1.0."""
    ax.set_yscale("log")
    lo, hi = min([*values, 1.0]), max([*values, 1.0])
    ax.set_ylim(lo / 1.6, hi * 1.6)
    subs = (1.0, 2.0, 5.0) if hi / lo > 8 else tuple(float(k) for k in range(1, 10))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.axhline(1.0, color="#000000", lw=1.0, ls="--", zorder=1)
    ax.grid(axis="y", which="major", alpha=0.25)


def anchors_of(v: Verdict) -> list[str]:
    """Anchors timed in the run, in the verdict's order."""
    seen = dict.fromkeys(v.geomean_vs_anchor)
    for r in v.scenarios:
        for a in r.vs_anchor:
            seen.setdefault(a, None)
    return list(seen)


def speedup_figure(lv: LabelledVerdict, *, key: str) -> RenderedFigure | None:
    """Per-scenario speedup vs the original and every anchor of the run, grouped, log scale, 1.0 line,
    failed scenarios marked; short bars are each group's geomean. None for a verdict without scenarios."""
    v = lv.verdict
    if not v.scenarios:
        return None
    placed, spans = layout(v.scenarios, lambda r: r.speedup)
    fig, (ax,) = new_figure(12.5, 5.0)
    series: list[tuple[str, Callable[[ScenarioResult], float | None]]] = [("original", lambda r: r.speedup)]
    series += [(a, lambda r, a=a: r.vs_anchor.get(a)) for a in anchors_of(v)]
    allv: list[float] = []
    for i, (name, get) in enumerate(series):
        pts = [(x, get(r)) for x, r in placed if r.correct and get(r)]
        if not pts:
            continue
        color = series_color(name, i)
        ys = [y for _, y in pts if y is not None]
        allv += ys
        gm = geomean(ys)
        ax.scatter([x for x, _ in pts], ys, s=13, marker=_MARKERS[i % len(_MARKERS)], color=color, alpha=0.85,
                   zorder=3, label=f"vs {name} (geomean {gm:.3f}x)")
        for g, a, b in spans:
            gy = [y for x, y in pts if a <= x <= b and y is not None]
            if gy:
                ax.hlines(geomean(gy), a - 0.5, b + 0.5, color=color, lw=2.2, alpha=0.7, zorder=4)
    log_y_axis(ax, allv or [1.0])
    _group_axis(ax, spans, placed)
    nbad = _mark_incorrect(ax, placed)
    ax.set_ylabel("speedup (candidate faster > 1x)")
    ax.set_title(f"{lv.label}: speedup per scenario, {v.num_correct}/{v.num_scenarios} correct, suite {v.suite}",
                 fontsize=11)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8, ncols=min(4, len(series) + (1 if nbad else 0)), framealpha=0.9)
    caption = ("Each point is one scenario: original time / candidate time (blue) and anchor time / candidate "
               "time for each library kernel timed in the run; bars are group geomeans; the dashed line is 1.0 "
               "(parity). " + (f"{nbad} incorrect scenario(s) marked in red at the bottom (no speedup counts for "
                                f"them)." if nbad else "Every scenario is correct."))
    return render(fig, key=key, title=f"Speedup per scenario — {lv.label}", caption=caption)


def _shapes_for(v: Verdict) -> list[Scenario]:
    """The verdict's suite scenarios when it is a built-in suite (else the ids are parsed)."""
    if v.suite in list_suites():
        try:
            return load_suite(v.suite).scenarios
        except AttnqError:  # a suite file that no longer loads: fall back to parsing ids
            return []
    return []


def with_roofline(lv: LabelledVerdict, *, matmul_tflops: float | None = None,
                  hbm_tbps: float | None = None) -> LabelledVerdict:
    """A copy of ``lv`` whose scenario results all carry ``bound`` and ``fraction_of_bound`` (recomputed
    when a rate is overridden, else filled only where missing: verdicts from before those fields)."""
    v = lv.verdict.model_copy(deep=True)
    annotate(v, _shapes_for(v), matmul_tflops=matmul_tflops, hbm_tbps=hbm_tbps,
             overwrite=bool(matmul_tflops or hbm_tbps))
    return LabelledVerdict(label=lv.label, verdict=v)


def roofline_figure(lv: LabelledVerdict, *, key: str, matmul_tflops: float | None = None,
                    hbm_tbps: float | None = None) -> RenderedFigure | None:
    """Left: achieved TFLOP/s against arithmetic intensity under the compute and HBM roofs. Right: each
    correct scenario's fraction of its bound, grouped (hollow: fraction of the physical peak). None when
    no scenario has a known shape and time."""
    v = lv.verdict.model_copy(deep=True)
    shapes = {s.id: s for s in _shapes_for(v)}
    annotate(v, shapes.values(), matmul_tflops=matmul_tflops, hbm_tbps=hbm_tbps, overwrite=True)
    mm, bw = rates_for(v, matmul_tflops=matmul_tflops, hbm_tbps=hbm_tbps)
    phys = v.physical_peak_tflops or PHYSICAL_PEAK_TFLOPS_H200
    pts = []
    for r in v.scenarios:
        sc = shapes.get(r.id) or scenario_from_id(r.id)
        if sc is None or not r.correct or r.candidate is None or r.fraction_of_bound is None:
            continue
        ai = r.flops / sc.bytes_min
        tflops = r.flops / (r.candidate.median_ms * 1e-3) / 1e12
        pts.append((r, ai, tflops))
    if not pts:
        return None
    fig, (ax, ax2) = new_figure(13.0, 5.0, ncols=2, width_ratios=[1, 1.6])
    groups = list(dict.fromkeys(r.group for r, _, _ in pts))
    cmap = colormaps["tab10"]
    for gi, g in enumerate(groups):
        for bound, marker in (("compute", "o"), ("memory", "s")):
            sel = [(ai, t) for r, ai, t in pts if r.group == g and r.bound == bound]
            if sel:
                ax.scatter([a for a, _ in sel], [t for _, t in sel], s=16, marker=marker, color=cmap(gi % 10),
                           alpha=0.85, zorder=3, label=g if bound == "compute" or not any(
                               r.group == g and r.bound == "compute" for r, _, _ in pts) else None)
    lo = min(ai for _, ai, _ in pts) / 2
    hi = max(ai for _, ai, _ in pts) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(mm, x * bw) for x in xs], color="#000000", lw=1.6, zorder=2,
            label=f"roof: {mm:.0f} TFLOP/s matmul, {bw:.1f} TB/s HBM")
    ax.plot(xs, [min(phys, x * bw) for x in xs], color="#000000", lw=1.0, ls=":", zorder=2,
            label=f"physical peak {phys:.0f} TFLOP/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per minimum byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(which="major", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right", framealpha=0.9)
    ax.set_title("roofline (o compute-bound, \u25a1 memory-bound)", fontsize=10)

    placed, spans = layout([r for r, _, _ in pts], lambda r: r.fraction_of_bound)
    for bound in ("compute", "memory"):
        sel = [(x, r.fraction_of_bound) for x, r in placed if r.bound == bound]
        if sel:
            ax2.scatter([x for x, _ in sel], [f for _, f in sel], s=14, color=BOUND_COLORS[bound], zorder=3,
                        label=f"{bound}-bound: fraction of {'matmul rate' if bound == 'compute' else 'HBM bandwidth'}"
                              f" ({len(sel)})")
    comp = [(x, r.tflops / phys) for x, r in placed if r.bound == "compute" and r.tflops]
    if comp:
        ax2.scatter([x for x, _ in comp], [f for _, f in comp], s=14, facecolors="none",
                    edgecolors=BOUND_COLORS["compute"], lw=0.8, zorder=3, alpha=0.7, label="compute-bound: fraction of physical peak")
    ax2.axhline(1.0, color="#000000", lw=1.0, ls="--")
    top = max(1.05, max(r.fraction_of_bound or 0 for _, r in placed) * 1.05)
    ax2.set_ylim(0, top)
    ax2.set_ylabel("fraction of the bound (1 = at the roof)")
    ax2.grid(axis="y", alpha=0.25)
    _group_axis(ax2, spans, placed)
    ax2.legend(fontsize=7, loc="upper left", framealpha=0.9)
    ax2.set_title("distance to the roof, per scenario", fontsize=10)
    fig.suptitle(f"{lv.label}: roofline position ({len(pts)} correct scenarios)", fontsize=11)
    fracs = sorted(r.fraction_of_bound for r, _, _ in pts if r.fraction_of_bound is not None)
    med = fracs[len(fracs) // 2]
    nmem = sum(1 for r, _, _ in pts if r.bound == "memory")
    caption = (f"The bound of each scenario is the larger of FLOPs / {mm:.0f} TFLOP/s (dense bf16 matmul, measured) "
               f"and minimum bytes (q, k, v read once, o and lse written once) / {bw:.1f} TB/s (HBM, measured); "
               f"{nmem} of {len(pts)} are memory-bound. Median fraction of the bound: {med:.2f}.")
    return render(fig, key=key, title=f"Roofline position — {lv.label}", caption=caption)


def compare_figure(before: LabelledVerdict, after: LabelledVerdict, *, key: str = "compare") -> RenderedFigure:
    """Before/after: per group and per scenario, candidate time before / after (> 1: after is faster);
    scenarios failing in either run marked. A table gives both verdicts' geomeans side by side."""
    b_rows = {r.id: r for r in before.verdict.scenarios}
    common = [r for r in after.verdict.scenarios if r.id in b_rows]

    def ratio(r: ScenarioResult) -> float | None:
        b = b_rows[r.id]
        if r.correct and b.correct and r.candidate and b.candidate and r.candidate.median_ms > 0:
            return b.candidate.median_ms / r.candidate.median_ms
        return None

    fig, (ax, ax2) = new_figure(13.0, 5.0, ncols=2, width_ratios=[1, 2])
    placed, spans = layout(common, ratio)
    groups = [g for g, _, _ in spans]
    gms = []
    for g in groups:
        vals = [ratio(r) for r in common if r.group == g and ratio(r)]
        gms.append(geomean(v for v in vals if v) if vals else None)
    allr = [x for x in (ratio(r) for r in common) if x]
    overall = geomean(allr) if allr else None
    names = [*groups, "all"]
    vals = [*gms, overall]
    ax.bar(range(len(names)), [(x or 1.0) - 1.0 for x in vals], bottom=1.0, width=0.7,
           color=["#1f77b4"] * len(groups) + ["#444444"])  # bars grow from parity, up or down
    for i, x in enumerate(vals):
        if x:
            ax.text(i, x, f"{x:.3f}", ha="center", va="bottom" if x >= 1 else "top", fontsize=7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    log_y_axis(ax, [x for x in vals if x] or [1.0])
    ax.set_ylabel("geomean of time before / time after")
    ax.set_title("per group (> 1x: after is faster)", fontsize=10)
    pts = [(x, ratio(r)) for x, r in placed if ratio(r)]
    ax2.scatter([x for x, _ in pts], [y for _, y in pts], s=13, color="#1f77b4", zorder=3, label="time before / time after")
    log_y_axis(ax2, [y for _, y in pts if y] or [1.0])
    _group_axis(ax2, spans, placed)
    bad = [(x, r) for x, r in placed if not r.correct or not b_rows[r.id].correct]
    if bad:
        tr = blended_transform_factory(ax2.transData, ax2.transAxes)
        ax2.scatter([x for x, _ in bad], [0.03] * len(bad), transform=tr, marker="x", s=36, color=INCORRECT_COLOR,
                    clip_on=False, zorder=5, label=f"incorrect before or after ({len(bad)})")
    ax2.legend(fontsize=8, loc="upper left")
    ax2.set_title("per scenario", fontsize=10)
    fig.suptitle(f"before {before.label} \u2192 after {after.label} ({len(common)} common scenarios)", fontsize=11)
    out = render(fig, key=key, title=f"Before / after — {before.label} \u2192 {after.label}",
                 caption="Candidate median time of the same scenario before divided by after (a ratio of the "
                         "kernels' own times, independent of the original's timing noise); red: failed in either run.")
    out.tables.append(compare_table(before, after))
    return out


def _fmt(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.3f}x"


def compare_table(before: LabelledVerdict, after: LabelledVerdict) -> str:
    """HTML table: status, correct count and geomeans (vs original, per anchor, per group) of both runs."""
    b, a = before.verdict, after.verdict
    rows = [("status", b.status, a.status), ("correct", f"{b.num_correct}/{b.num_scenarios}", f"{a.num_correct}/{a.num_scenarios}"),
            ("geomean vs original", _fmt(b.geomean_speedup), _fmt(a.geomean_speedup))]
    for an in dict.fromkeys([*b.geomean_vs_anchor, *a.geomean_vs_anchor]):
        rows.append((f"geomean vs {an}", _fmt(b.geomean_vs_anchor.get(an)), _fmt(a.geomean_vs_anchor.get(an))))
    for g in dict.fromkeys([*b.geomean_by_group, *a.geomean_by_group]):
        rows.append((f"{g} vs original", _fmt(b.geomean_by_group.get(g)), _fmt(a.geomean_by_group.get(g))))
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(x)}</td><td>{html.escape(y)}</td></tr>"
                   for k, x, y in rows)
    return (f"<table><thead><tr><th></th><th>before: {html.escape(before.label)}</th>"
            f"<th>after: {html.escape(after.label)}</th></tr></thead><tbody>{body}</tbody></table>")
