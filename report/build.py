"""Build a report: choose the sections from the inputs, draw the figures (with progress), write the files.

Sections, in page order (each left out, with the reason, when its data is missing):
1. per verdict (``--verdict`` files, else the campaign's best attempt): speedup per scenario, roofline;
2. before/after (``--compare``);
3. the campaign: timeline, question effectiveness;
4. the evolutionary search (evolve data).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import InputError
from harness.logging import get_logger
from questions.compare import describe
from questions.policy import DEFAULT_HORIZON
from questions.triggers import best_and_measure
from report.data import (
    CampaignData,
    EvolveData,
    LabelledVerdict,
    best_verdict,
    question_effects,
)
from report.render import RenderedFigure

log = get_logger(__name__)

#: ``progress(done, total, message)``: called before each figure and once at the end (done == total).
Progress = Callable[[int, int, str], None]

#: Which figure stands for the report where only one fits (MCP ``get_report``), in order of preference.
KEY_FIGURE_ORDER = ("speedup", "timeline", "roofline", "compare", "questions", "evolve")


class ReportInputs(BaseModel):
    """What to draw. ``verdicts`` empty: the campaign's best attempt stands for the kernel."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    verdicts: list[LabelledVerdict] = Field(default_factory=list)
    campaign: CampaignData | None = None
    compare: tuple[LabelledVerdict, LabelledVerdict] | None = None
    evolve: EvolveData | None = None
    horizon: int = Field(default=DEFAULT_HORIZON, ge=1, description="attempts after a question that count for it")
    min_gain: float = Field(default=0.01, ge=0, description="relative gain over the best that counts as a gain")
    matmul_tflops: float | None = Field(default=None, gt=0, description="compute roof override, TFLOP/s")
    hbm_tbps: float | None = Field(default=None, gt=0, description="memory roof override, TB/s")
    title: str = "attnq report"


@dataclass
class Report:
    """A built report: its figures (PNG, and SVG where used), sections left out, a text summary, the page."""

    title: str
    figures: list[RenderedFigure]
    sections: list[tuple[str, str, list[str]]]  # (anchor id, heading, figure keys)
    skipped: list[str] = field(default_factory=list)
    summary: str = ""
    html: str = ""

    def figure(self, kind: str) -> RenderedFigure | None:
        """The first figure whose key is ``kind`` or starts with ``kind-``."""
        return next((f for f in self.figures if f.key == kind or f.key.startswith(kind + "-")), None)

    def key_figure(self) -> RenderedFigure | None:
        """The figure that best stands for the whole report (:data:`KEY_FIGURE_ORDER`)."""
        for kind in KEY_FIGURE_ORDER:
            f = self.figure(kind)
            if f is not None:
                return f
        return None


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")[:60] or "x"


def _verdict_line(lv: LabelledVerdict) -> str:
    v = lv.verdict
    parts = [f"{lv.label}: {v.status}, {v.num_correct}/{v.num_scenarios} correct on {v.suite}"]
    if v.geomean_speedup is not None:
        parts.append(f"geomean {v.geomean_speedup:.3f}x vs the original")
    parts += [f"{g:.3f}x vs {a}" for a, g in v.geomean_vs_anchor.items()]
    if v.geomean_by_group:
        worst = min(v.geomean_by_group.items(), key=lambda kv: kv[1])
        parts.append(f"weakest group {worst[0]} {worst[1]:.2f}x")
    fr = sorted(r.fraction_of_bound for r in v.scenarios if r.fraction_of_bound is not None)
    if fr:
        mem = sum(1 for r in v.scenarios if r.bound == "memory" and r.fraction_of_bound is not None)
        parts.append(f"median {fr[len(fr) // 2]:.2f} of the roof ({mem} memory-bound)")
    return "; ".join(parts)


def _campaign_line(c: CampaignData) -> str:
    status = Counter(a.status for a in c.attempts)
    found = best_and_measure(c.attempts)  # like with like: the scenarios in common with the latest verified
    trig = Counter((q.trigger if q.fired and q.trigger else "general") for q in c.questions)
    line = (f"campaign {c.campaign_id}: {len(c.attempts)} attempts ("
            + ", ".join(f"{k} {s}" for s, k in status.items()) + ")")
    line += f", best {describe(*found)}" if found else ", no correct attempt"
    line += f"; {len(c.questions)} questions"
    if trig:
        line += " (" + ", ".join(f"{t} x{k}" for t, k in trig.most_common()) + ")"
    if c.claims:
        line += "; claims: " + ", ".join(f"{cl.kind} after #{cl.attempt_seq}" for cl in c.claims)
    return line


def build_report(inputs: ReportInputs, progress: Progress | None = None) -> Report:
    """Draw every section the inputs allow and assemble the HTML page.

    Raises:
        InputError: nothing to report (no verdict, no comparison, no campaign attempt, no evolve data).
    """
    from report.figures_campaign import evolve_figure, questions_figure, timeline_figure
    from report.figures_kernel import (
        compare_figure,
        roofline_figure,
        speedup_figure,
        with_roofline,
    )
    from report.html import page

    verdicts = [with_roofline(lv, matmul_tflops=inputs.matmul_tflops, hbm_tbps=inputs.hbm_tbps)
                for lv in inputs.verdicts]
    skipped: list[str] = []
    c = inputs.campaign
    if not verdicts and c is not None:
        best = best_verdict(c)
        if best is not None:
            verdicts.append(with_roofline(best, matmul_tflops=inputs.matmul_tflops, hbm_tbps=inputs.hbm_tbps))
        else:
            skipped.append(f"speedup and roofline: campaign {c.campaign_id} has no verified attempt yet")
    has_campaign = c is not None and bool(c.attempts)
    has_evolve = inputs.evolve is not None and not inputs.evolve.empty()
    if not verdicts and inputs.compare is None and not has_campaign and not has_evolve:
        where = f"campaign {c.campaign_id!r} has no attempts" if c is not None else "no campaign"
        raise InputError(f"nothing to report: no verdict, no comparison, {where}, no evolve data "
                         "(give --verdict FILE.json, --compare BEFORE AFTER, --campaign NAME or --trace FILE)")
    jobs: list[tuple[str, str, Callable[[], RenderedFigure | None]]] = []  # (section, message, make)
    sections: list[tuple[str, str, list[str]]] = []
    used: set[str] = set()

    def key_for(kind: str, label: str) -> str:
        k = kind if len(verdicts) == 1 else f"{kind}-{_slug(label)}"
        while k in used:
            k += "-x"
        used.add(k)
        return k

    for lv in verdicts:
        sid = f"kernel-{_slug(lv.label)}"
        sections.append((sid, f"Kernel: {lv.label}", []))
        ks, kr = key_for("speedup", lv.label), key_for("roofline", lv.label)
        jobs.append((sid, f"speedup {lv.label}", lambda lv=lv, k=ks: speedup_figure(lv, key=k)))
        jobs.append((sid, f"roofline {lv.label}", lambda lv=lv, k=kr: roofline_figure(
            lv, key=k, matmul_tflops=inputs.matmul_tflops, hbm_tbps=inputs.hbm_tbps)))
    if inputs.compare is not None:
        before, after = inputs.compare
        if not {r.id for r in before.verdict.scenarios} & {r.id for r in after.verdict.scenarios}:
            raise InputError(f"--compare: {before.label} and {after.label} share no scenario (suites "
                             f"{before.verdict.suite!r} and {after.verdict.suite!r})")
        sections.append(("compare", f"Before / after: {before.label} \u2192 {after.label}", []))
        jobs.append(("compare", "before/after", lambda: compare_figure(before, after)))
    if c is not None:
        sections.append(("campaign", f"Campaign: {c.campaign_id}", []))
        if c.attempts:
            jobs.append(("campaign", "timeline", lambda: timeline_figure(c, horizon=inputs.horizon,
                                                                           min_gain=inputs.min_gain)))
        else:
            skipped.append(f"timeline: campaign {c.campaign_id} has no attempts")
        per_q, per_layer = question_effects(c, horizon=inputs.horizon, min_gain=inputs.min_gain)
        if per_q:
            jobs.append(("campaign", "question effectiveness", lambda: questions_figure(
                per_q, per_layer, horizon=inputs.horizon, campaign_id=c.campaign_id)))
        else:
            skipped.append(f"question effectiveness: no question was asked in campaign {c.campaign_id}")
    else:
        skipped.append("campaign timeline and question effectiveness: no campaign given")
    if has_evolve:
        assert inputs.evolve is not None
        sections.append(("evolve", "Evolutionary search", []))
        jobs.append(("evolve", "evolve", lambda: evolve_figure(inputs.evolve)))  # type: ignore[arg-type]
    else:
        skipped.append("evolutionary search: no evolve data (attnq evolve has not run here, or --evolve not given)")

    figures: list[RenderedFigure] = []
    index = {sid: keys for sid, _, keys in sections}
    for i, (sid, message, make) in enumerate(jobs):
        if progress:
            progress(i, len(jobs), message)
        fig = make()
        if fig is None:
            why = ("no scenario in the verdict" if message.startswith("speedup") else
                   "no correct scenario with a known shape and time")
            skipped.append(f"{message}: no data to draw ({why})")
            continue
        figures.append(fig)
        index[sid].append(fig.key)
    if progress:
        progress(len(jobs), len(jobs), "done")
    lines = [_verdict_line(lv) for lv in verdicts]
    if c is not None:
        lines.append(_campaign_line(c))
    if has_evolve and inputs.evolve is not None:
        ev = inputs.evolve
        bests = [g.best_fitness for g in ev.generations if g.best_fitness is not None]
        lines.append(f"evolve: {len(ev.generations)} generations" + (f", best fitness {max(bests):.3f}x" if bests else ""))
    report = Report(title=inputs.title, figures=figures, sections=sections, skipped=skipped, summary="\n".join(lines))
    report.html = page(report)
    log.info("report_built", figures=len(figures), skipped=len(skipped))
    return report


def write_report(report: Report, html_path: str | Path | None = None, png_dir: str | Path | None = None) -> list[Path]:
    """Write the HTML page and/or one PNG per figure (``<png_dir>/<key>.png``); returns the paths written.

    Raises:
        InputError: a path that cannot be written (the OS reason is given).
    """
    out: list[Path] = []
    try:
        if html_path is not None:
            p = Path(html_path)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(report.html, encoding="utf-8")
            out.append(p)
        if png_dir is not None:
            d = Path(png_dir)
            d.mkdir(parents=True, exist_ok=True)
            for f in report.figures:
                p = d / f"{f.key}.png"
                p.write_bytes(f.png)
                out.append(p)
    except OSError as exc:
        raise InputError(f"cannot write the report: {exc.strerror or exc}: {exc.filename or ''}") from None
    return out
