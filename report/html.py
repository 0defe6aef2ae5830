"""The report page: one self-contained HTML file (figures as base64 PNG, the timeline as inline SVG with
hover titles, inline CSS, no script). A Content-Security-Policy that allows nothing but inline styles
and data: images makes any outside reference fail loudly in a browser instead of loading silently.
"""

from __future__ import annotations

import base64
import html
import struct
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import harness

if TYPE_CHECKING:  # pragma: no cover
    from report.build import Report
    from report.render import RenderedFigure

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1b1b1b; background: #fafafa; }
header, main { max-width: 1500px; margin: 0 auto; padding: 0 24px; }
header { padding-top: 18px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
pre.summary { background: #fff; border: 1px solid #e2e2e2; padding: 10px 12px; white-space: pre-wrap; font-size: 13px; }
nav a { margin-right: 14px; }
figure.attnq-figure { background: #fff; border: 1px solid #e2e2e2; margin: 12px 0; padding: 10px; }
figure.attnq-figure img { max-width: 100%; height: auto; display: block; }
figure.attnq-figure svg { width: 100%; max-width: 1375px; height: auto; display: block; }
figcaption { color: #444; font-size: 13px; margin-top: 6px; }
table { border-collapse: collapse; margin: 8px 0 0; font-size: 13px; background: #fff; }
th, td { border: 1px solid #e2e2e2; padding: 3px 8px; text-align: left; vertical-align: top; }
.muted { color: #666; font-size: 12px; }
"""


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's IHDR chunk."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    w, h = struct.unpack(">II", png[16:24])
    return int(w), int(h)


def figure_html(f: RenderedFigure) -> str:
    """One ``<figure>``: inline SVG when the figure has one (hover titles), else the PNG as a data URI."""
    if f.svg is not None:
        body = f'<div class="svg" role="img" aria-label="{html.escape(f.title)}">{f.svg}</div>'
    else:
        w, h = png_size(f.png)
        data = base64.b64encode(f.png).decode("ascii")
        body = f'<img alt="{html.escape(f.title)}" width="{w}" height="{h}" src="data:image/png;base64,{data}">'
    tables = "".join(f.tables)
    return (f'<figure class="attnq-figure" id="fig-{html.escape(f.key)}" data-key="{html.escape(f.key)}">{body}'
            f"<figcaption><b>{html.escape(f.title)}.</b> {html.escape(f.caption)}</figcaption>{tables}</figure>")


def page(report: Report) -> str:
    """The whole HTML document of ``report``."""
    by_key = {f.key: f for f in report.figures}
    nav = " ".join(f'<a href="#{html.escape(sid)}">{html.escape(head)}</a>' for sid, head, keys in report.sections
                   if keys)
    parts = []
    for sid, head, keys in report.sections:
        if not keys:
            continue
        figs = "".join(figure_html(by_key[k]) for k in keys)
        parts.append(f'<section id="{html.escape(sid)}"><h2>{html.escape(head)}</h2>{figs}</section>')
    if report.skipped:
        items = "".join(f"<li>{html.escape(s)}</li>" for s in report.skipped)
        parts.append(f'<section id="skipped"><h2>Not shown</h2><ul class="muted">{items}</ul></section>')
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{html.escape(report.title)}</title>
<style>{CSS}</style>
</head>
<body>
<header>
<h1>{html.escape(report.title)}</h1>
<p class="muted">attnq {html.escape(harness.__version__)}, {when}; {len(report.figures)} figures</p>
<pre class="summary">{html.escape(report.summary)}</pre>
<nav>{nav}</nav>
</header>
<main>
{"".join(parts)}
</main>
</body>
</html>
"""
