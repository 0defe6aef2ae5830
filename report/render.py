"""Figure plumbing: matplotlib on the Agg backend (no display, no GUI toolkit), PNG and SVG output.

Why matplotlib: it is the well-kept standard for static scientific figures, writes PNG and SVG with no
browser or JavaScript runtime, renders headless on a CI machine without a GPU or a display, and its
wheels carry their own font (DejaVu Sans), so a report looks the same everywhere and needs nothing
from the network. Figures are built as ``matplotlib.figure.Figure`` objects (never pyplot's global
state), and rendering is serialized by one lock, so a server can build reports from worker threads.
"""

from __future__ import annotations

import html
import io
import re
import threading
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot; we never do, but a caller might

from matplotlib.figure import Figure

_RENDER_LOCK = threading.Lock()

#: Dots per inch of the PNG figures (a 12 x 5 in figure is 1320 x 550 px).
PNG_DPI = 110

#: One colour per trigger (and ``general`` for a question asked with no trigger), kept across figures.
TRIGGER_COLORS = {
    "stall": "#d62728", "declared_limit": "#9467bd", "declared_done": "#2ca02c",
    "suspicious_win": "#ff7f0e", "churn": "#8c564b", "general": "#7f7f7f",
}
#: Series colours: speedup vs the original and vs each anchor.
SERIES_COLORS = {"original": "#1f77b4", "flash": "#ff7f0e", "cudnn": "#2ca02c", "fa3": "#9467bd"}
BOUND_COLORS = {"compute": "#1f77b4", "memory": "#ff7f0e"}
INCORRECT_COLOR = "#d62728"


def series_color(name: str, index: int = 0) -> str:
    """Stable colour of a speedup series (an unknown anchor gets one from the tab10 cycle)."""
    if name in SERIES_COLORS:
        return SERIES_COLORS[name]
    return matplotlib.colormaps["tab10"](4 + index % 6)


def new_figure(width_in: float, height_in: float, ncols: int = 1, **kw: object) -> tuple[Figure, list]:
    """A figure with ``ncols`` axes side by side (a list even for one)."""
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    axes = fig.subplots(1, ncols, **kw)  # type: ignore[arg-type]
    return fig, list(axes) if ncols > 1 else [axes]


@dataclass
class RenderedFigure:
    """One figure of the report: PNG bytes always, inline SVG when the page uses it (hover titles)."""

    key: str
    title: str
    caption: str
    png: bytes
    svg: str | None = None
    tables: list[str] = field(default_factory=list)  # HTML shown under the figure (escaped by its maker)


def render(fig: Figure, *, key: str, title: str, caption: str, svg_titles: dict[str, str] | None = None
           ) -> RenderedFigure:
    """Rasterize ``fig`` to PNG; with ``svg_titles`` (artist gid -> hover text) also to inline SVG whose
    groups carry those texts as ``<title>`` (browsers show them on hover)."""
    with _RENDER_LOCK:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=PNG_DPI, metadata={"Software": None})
        svg = None
        if svg_titles is not None:
            sbuf = io.StringIO()
            with matplotlib.rc_context({"svg.hashsalt": key, "svg.fonttype": "path"}):
                fig.savefig(sbuf, format="svg", metadata={"Date": None})
            svg = _with_titles(sbuf.getvalue(), svg_titles)
    return RenderedFigure(key=key, title=title, caption=caption, png=buf.getvalue(), svg=svg)


def _with_titles(svg: str, titles: dict[str, str]) -> str:
    """Drop the XML prolog and DOCTYPE (inline SVG in HTML needs neither) and put a ``<title>`` first in
    each ``<g id="gid">`` named in ``titles``."""
    svg = svg[svg.index("<svg"):]

    def add(m: re.Match[str]) -> str:
        gid = m.group(1)
        text = titles.get(gid)
        return m.group(0) if text is None else f'{m.group(0)}<title>{html.escape(text)}</title>'

    return re.sub(r'<g id="([^"]+)">', add, svg)
