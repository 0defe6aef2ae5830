"""Figures of a campaign: the timeline (attempts, best so far, questions, claims), question
effectiveness per question and per layer, and the evolutionary search (best per generation, lineage)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import blended_transform_factory

from harness.store import AttemptRecord
from questions.policy import ask_outcome
from report.data import CampaignData, EvolveData, QuestionEffect
from report.figures_kernel import log_y_axis
from report.render import (
    INCORRECT_COLOR,
    TRIGGER_COLORS,
    RenderedFigure,
    new_figure,
    render,
)

#: Marker, colour and legend text per attempt status (attempts without a geomean sit on the bottom edge).
STATUS_STYLE = {
    "correct": ("o", "#2ca02c", "correct"),
    "incorrect": ("^", "#ff7f0e", "incorrect (geomean of its correct scenarios)"),
    "error": ("X", INCORRECT_COLOR, "run error"),
    "failed_compile": ("X", "#8c0000", "compile / policy / ABI failure"),
    "compiled": (".", "#7f7f7f", "compiled, not verified"),
}
#: Above this many attempts, points get no individual hover titles (the SVG would grow too much).
MAX_TITLED_ATTEMPTS = 400


def _attempt_title(a: AttemptRecord) -> str:
    gm = f"{a.geomean_speedup:.3f}x" if a.geomean_speedup is not None else "no geomean"
    n = f", {a.num_correct}/{a.num_scenarios} correct" if a.num_scenarios else ""
    err = f" ({a.error_code})" if a.error_code else ""
    return f"#{a.seq} {a.status}{err}: {gm}{n}\n{a.source_path}\n{a.created_at}"


def question_positions(c: CampaignData) -> list[float]:
    """x of each asked question: spread inside (seq, seq + 1) after the attempt it followed."""
    by_seq: dict[int, int] = {}
    for q in c.questions:
        by_seq[q.attempt_seq] = by_seq.get(q.attempt_seq, 0) + 1
    seen: dict[int, int] = {}
    out = []
    for q in c.questions:
        i = seen.get(q.attempt_seq, 0)
        seen[q.attempt_seq] = i + 1
        out.append(q.attempt_seq + 0.2 + 0.6 * (i + 1) / (by_seq[q.attempt_seq] + 1))
    return out


def best_so_far_lines(attempts: Sequence[AttemptRecord]) -> list[tuple[str, list[float], list[float]]]:
    """The timeline's best-so-far steps, like with like: per suite (``verdict.suite``; "" without a verdict), the
    attempt numbers from the suite's first correct attempt on and the best geomean of its correct attempts so far
    (each line runs on to the last attempt + 0.9). The latest attempt's suite comes first. So a production run's
    30x against the original is never drawn as the best of the full runs."""
    def suite_of(a: AttemptRecord) -> str:
        return a.verdict.suite if a.verdict is not None else ""

    order: list[str] = []
    for a in reversed(attempts):
        if suite_of(a) not in order:
            order.append(suite_of(a))
    out = []
    for suite in order:
        xs: list[float] = []
        ys: list[float] = []
        best: float | None = None
        for a in attempts:
            if suite_of(a) != suite:
                continue
            if a.status == "correct" and a.geomean_speedup is not None:
                best = max(best or 0.0, a.geomean_speedup)
            if best is not None:
                xs.append(a.seq)
                ys.append(best)
        if xs:
            out.append((suite, [*xs, attempts[-1].seq + 0.9], [*ys, ys[-1]]))
    return out


def timeline_figure(c: CampaignData, *, key: str = "timeline", horizon: int = 3,
                    min_gain: float = 0.01) -> RenderedFigure | None:
    """Geomean per attempt (marker per status), the best-so-far line, a vertical line per question asked
    (colour = trigger; hover: the question) and a mark per claim (limit, done). None without attempts."""
    if not c.attempts:
        return None
    fig, (ax,) = new_figure(12.5, 5.0)
    titles: dict[str, str] = {}
    tr = blended_transform_factory(ax.transData, ax.transAxes)
    titled = len(c.attempts) <= MAX_TITLED_ATTEMPTS
    statuses: dict[str, int] = {}
    for a in c.attempts:
        marker, color, _ = STATUS_STYLE.get(a.status, STATUS_STYLE["error"])
        statuses[a.status] = statuses.get(a.status, 0) + 1
        gid = f"attempt-{a.seq}" if titled else None
        if a.geomean_speedup is not None and a.geomean_speedup > 0:
            (ln,) = ax.plot([a.seq], [a.geomean_speedup], marker=marker, color=color, ms=8, ls="none", zorder=4,
                            mfc=color if a.status == "correct" else "none", mew=1.6)
        else:
            (ln,) = ax.plot([a.seq], [0.05], marker=marker, color=color, ms=8, ls="none", zorder=4, transform=tr,
                            clip_on=False)
        if gid:
            ln.set_gid(gid)
            titles[gid] = _attempt_title(a)
    best_lines: list[tuple[str, str, str]] = []  # (suite, colour, line style) of the lines drawn
    for i, (suite, xs, ys) in enumerate(best_so_far_lines(c.attempts)):
        style = ("#1f77b4", "-") if i == 0 else ("#8fb8de", "--")
        ax.step(xs, ys, where="post", color=style[0], ls=style[1], lw=1.8, zorder=3)
        best_lines.append((suite, *style))
    values = [a.geomean_speedup for a in c.attempts if a.geomean_speedup]
    log_y_axis(ax, [v for v in values if v] or [1.0])
    triggers: dict[str, int] = {}
    for n, (q, x) in enumerate(zip(c.questions, question_positions(c), strict=True), start=1):
        trig = q.trigger if (q.fired and q.trigger) else "general"
        triggers[trig] = triggers.get(trig, 0) + 1
        color = TRIGGER_COLORS.get(trig, TRIGGER_COLORS["general"])
        ln = ax.axvline(x, color=color, lw=1.6, alpha=0.8, zorder=2)
        ln.set_gid(f"question-{n}")
        improved, before, after = ask_outcome(c.attempts, q.attempt_seq, horizon=horizon, min_gain=min_gain)
        follow = ("pending" if improved is None else
                  f"followed by {after:.3f}x (best before {before:.3f}x)" if improved else "no gain followed")
        titles[f"question-{n}"] = (f"Q{n} after #{q.attempt_seq} [{trig}] {q.question_id} ({q.layer}): {q.text}\n"
                                   f"evidence: {q.evidence[:400]}\noutcome: {follow}")
        ax.text(x, 0.99, f"Q{n}", transform=tr, rotation=90, ha="right", va="top", fontsize=7, color=color)
    for cl in c.claims:
        x = cl.attempt_seq + 0.5
        marker, color = ("v", "#9467bd") if cl.kind == "limit" else ("*", "#bcbd22")
        (ln,) = ax.plot([x], [0.9], marker=marker, ms=13 if cl.kind == "done" else 10, color=color, transform=tr,
                        ls="none", zorder=5, clip_on=False, mec="#333333", mew=0.6)
        ln.set_gid(f"claim-{cl.id}")
        titles[f"claim-{cl.id}"] = f"{cl.kind} claimed after #{cl.attempt_seq}: {cl.text} (goal met: {cl.goal_met})"
        ax.text(x, 0.84, cl.kind, transform=tr, ha="center", va="top", fontsize=7, color="#333333")
    ax.set_xlim(0.4, c.attempts[-1].seq + 1)
    seqs = [a.seq for a in c.attempts]
    step = max(1, len(seqs) // 25)
    ax.set_xticks(seqs[::step])
    ax.set_xlabel("attempt (#seq)")
    ax.set_ylabel("geomean speedup vs the original")
    handles = [Line2D([], [], marker=STATUS_STYLE[s][0], color=STATUS_STYLE[s][1], ls="none", ms=7,
                      mfc=STATUS_STYLE[s][1] if s == "correct" else "none", label=f"{STATUS_STYLE[s][2]} ({k})")
               for s, k in statuses.items() if s in STATUS_STYLE]
    for suite, color, style in best_lines:
        handles.append(Line2D([], [], color=color, ls=style, lw=1.8,
                              label=f"best so far on {suite}" if suite else "best so far"))
    handles += [Line2D([], [], color=TRIGGER_COLORS.get(t, "#7f7f7f"), lw=1.6, label=f"question: {t} ({k})")
                for t, k in triggers.items()]
    for kind, marker, color in (("limit", "v", "#9467bd"), ("done", "*", "#bcbd22")):
        k = sum(1 for cl in c.claims if cl.kind == kind)
        if k:
            handles.append(Line2D([], [], marker=marker, color=color, ls="none", ms=9, mec="#333333",
                                  label=f"{kind} claimed ({k})"))
    ax.legend(handles=handles, fontsize=7, loc="lower right", framealpha=0.9, ncols=2)
    ax.set_title(f"campaign {c.campaign_id}: {len(c.attempts)} attempts, {len(c.questions)} questions, "
                 f"{len(c.claims)} claim{'s' if len(c.claims) != 1 else ''}", fontsize=11)
    caption = ("Geomean speedup vs the original per attempt; the line is the best correct geomean so far. Vertical "
               "lines mark questions (after the attempt they followed; colour = trigger, grey = asked with no "
               "trigger); marks at the top are claims. Hover a line or a point for the question, the claim or the "
               "attempt.")
    out = render(fig, key=key, title=f"Campaign timeline — {c.campaign_id}", caption=caption, svg_titles=titles)
    out.tables.append(questions_table(c, horizon=horizon, min_gain=min_gain))
    return out


def questions_table(c: CampaignData, *, horizon: int, min_gain: float) -> str:
    """HTML table of the questions asked: number, after which attempt, trigger, question, outcome."""
    if not c.questions:
        return "<p>No question was asked in this campaign.</p>"
    rows = []
    for n, q in enumerate(c.questions, start=1):
        improved, before, after = ask_outcome(c.attempts, q.attempt_seq, horizon=horizon, min_gain=min_gain)
        follow = ("pending" if improved is None else
                  f"{before:.3f}x \u2192 {after:.3f}x" if improved else "no gain")
        trig = q.trigger if (q.fired and q.trigger) else "general"
        rows.append(f"<tr><td>Q{n}</td><td>#{q.attempt_seq}</td><td>{html.escape(trig)}</td>"
                    f"<td><code>{html.escape(q.question_id)}</code><br>{html.escape(q.text)}</td>"
                    f"<td>{html.escape(follow)}</td></tr>")
    for cl in c.claims:
        rows.append(f"<tr><td>{html.escape(cl.kind)}</td><td>#{cl.attempt_seq}</td><td>claim</td>"
                    f"<td>{html.escape(cl.text)}</td><td>goal met: {cl.goal_met}</td></tr>")
    return ("<table><thead><tr><th></th><th>after</th><th>trigger</th><th>question / claim</th>"
            f"<th>within {horizon} attempts</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _effect_panel(ax, rows: list[QuestionEffect], title: str) -> None:  # type: ignore[no-untyped-def]
    ys = list(range(len(rows)))[::-1]
    ax.barh(ys, [r.asked for r in rows], color="#c7c7c7", height=0.7, label="asked")
    ax.barh(ys, [r.improved for r in rows], color="#2ca02c", height=0.7, label="followed by a gain")
    for y, r in zip(ys, rows, strict=True):
        med = r.median_gain
        text = f"  {r.improved}/{r.asked} gained"
        if r.asked > r.resolved:
            text += f", {r.asked - r.resolved} pending"
        if med is not None:
            text += f", median {med:+.1%}"
        ax.text(r.asked, y, text, va="center", fontsize=7)
    ax.set_yticks(ys)
    ax.set_yticklabels([r.key for r in rows], fontsize=7)
    ax.set_xlim(0, max(r.asked for r in rows) * 2.0 + 0.5)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("times asked")
    ax.set_title(title, fontsize=10)


def questions_figure(per_question: list[QuestionEffect], per_layer: list[QuestionEffect], *, horizon: int,
                     key: str = "questions", campaign_id: str = "") -> RenderedFigure | None:
    """Bars per question and per layer: times asked, asks followed by a gain within the horizon, median
    gain. None when no question was asked."""
    if not per_question:
        return None
    height = max(3.0, 0.28 * max(len(per_question), len(per_layer)) + 1.4)
    fig, (ax, ax2) = new_figure(12.5, height, ncols=2, width_ratios=[1.3, 1])
    _effect_panel(ax, per_question, "per question")
    _effect_panel(ax2, per_layer, "per layer")
    fig.legend(handles=ax.containers, labels=["asked", "followed by a gain within the horizon"], fontsize=8,
               loc="outside lower center", ncols=2)
    fig.suptitle(f"question effectiveness{' in ' + campaign_id if campaign_id else ''} "
                 f"(gain = best geomean within the next {horizon} attempts over the best before)", fontsize=11)
    caption = (f"Grey: times a question (or a layer of the bank) was asked; green: asks followed by a new best "
               f"geomean within the next {horizon} attempts (the rule question selection learns from, "
               f"questions/policy.py); pending: fewer than {horizon} attempts followed yet; median: best geomean "
               f"after over best before, minus 1, over asks followed by a verified attempt.")
    return render(fig, key=key, title="Question effectiveness", caption=caption)


def evolve_figure(data: EvolveData, *, key: str = "evolve") -> RenderedFigure | None:
    """Best (and median) fitness per generation, the lineage of the best program, and the ablation arms
    when present. None when the data is empty."""
    if data.empty():
        return None
    panels = [p for p, has in (("gens", data.generations), ("lineage", data.lineage), ("arms", data.arms)) if has]
    fig, axes = new_figure(4.6 * len(panels) + 1.5, 4.6, ncols=len(panels))
    for ax, panel in zip(axes, panels, strict=True):
        if panel == "gens":
            gens = data.generations
            best = [(g.generation, g.best_fitness) for g in gens if g.best_fitness is not None]
            med = [(g.generation, g.median_fitness) for g in gens if g.median_fitness is not None]
            ax.plot([g for g, _ in best], [f for _, f in best], "o-", color="#1f77b4", label="best")
            if med:
                ax.plot([g for g, _ in med], [f for _, f in med], "s--", color="#7f7f7f", ms=4, label="median")
            ax.set_xlabel("generation")
            ax.set_ylabel(f"fitness (geomean vs {data.fitness_against})")
            ax.set_title("best per generation", fontsize=10)
            ax.legend(fontsize=7)
        elif panel == "lineage":
            ids = {p.program_id: p for p in data.lineage}
            for p in data.lineage:
                parent = ids.get(p.parent_id or "")
                if parent and parent.fitness is not None and p.fitness is not None:
                    ax.annotate("", xy=(p.generation, p.fitness), xytext=(parent.generation, parent.fitness),
                                arrowprops={"arrowstyle": "->", "color": "#555555"})
            pts = [p for p in data.lineage if p.fitness is not None]
            ax.scatter([p.generation for p in pts], [p.fitness for p in pts], color="#1f77b4", zorder=3)
            for p in pts:
                label = p.program_id + (f"\n{p.question_id}" if p.question_id else "")
                ax.annotate(label, (p.generation, p.fitness), textcoords="offset points", xytext=(4, -10), fontsize=6)
            ax.set_xlabel("generation")
            ax.margins(x=0.2, y=0.1)
            ax.set_title(f"lineage of the best ({len(data.lineage)} programs)", fontsize=10)
        else:
            for arm, curve in data.arms.items():
                ax.plot([e for e, _ in curve], [f for _, f in curve], drawstyle="steps-post", label=arm)
            ax.set_xlabel("evaluations")
            ax.set_title("best fitness per arm", fontsize=10)
            ax.legend(fontsize=7)
        ax.grid(alpha=0.25)
        if panel != "arms":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle("evolutionary search", fontsize=11)
    return render(fig, key=key, title="Evolutionary search",
                  caption="Best and median fitness per generation; the chain of parents that led to the best "
                          "program, each labelled with the mutation question that produced it; ablation arms.")
