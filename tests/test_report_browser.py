"""The report as a person sees it: the HTML page rendered by headless Chromium (tests/browser.py drives it
over the DevTools pipe). The page loads without a console error, every figure is there, decoded and drawn
(the pixels of the screenshot inside each figure are not blank), and the timeline's hover titles exist.

Chromium comes from Debian's ``chromium`` package (.ci/run installs it when missing); without it these
tests skip with the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from report import (
    ReportInputs,
    build_report,
    load_evolve,
    load_trace,
    load_verdict,
    write_report,
)
from tests.browser import FIGURES_JS, Chromium, find_browser
from tests.report_support import EVOLVE, RECORDED_TRACE, V3, V5

BROWSER = find_browser()
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium on PATH (.ci/run installs Debian's chromium; "
                                                        "`apt-get install -y chromium`)")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The full report (recorded campaign, before/after, evolve) rendered and screenshotted once."""
    d = tmp_path_factory.mktemp("report-browser")
    report = build_report(ReportInputs(campaign=load_trace(RECORDED_TRACE), compare=(load_verdict(V3), load_verdict(V5)),
                                       evolve=load_evolve(EVOLVE)))
    write_report(report, d / "report.html")
    assert BROWSER is not None
    with Chromium(BROWSER, width=1400) as b:
        b.open(d / "report.html")
        figures = b.evaluate(FIGURES_JS)
        errors = b.console_errors()
        b.screenshot(d / "shot.png")
    return report, figures, errors, Image.open(d / "shot.png").convert("RGB")


def test_page_loads_without_console_errors(rendered) -> None:  # type: ignore[no-untyped-def]
    _, _, errors, shot = rendered
    assert errors == []
    assert shot.width == 1400 and shot.height > 3000  # the whole page, not one viewport


def test_every_figure_is_present_decoded_and_drawn(rendered) -> None:  # type: ignore[no-untyped-def]
    report, figures, _, shot = rendered
    assert [f["key"] for f in figures] == [f.key for f in report.figures]
    for f in figures:
        assert f["decoded"], f
        assert f["width"] > 800 and f["height"] > 250, f  # laid out at a readable size
        box = (int(f["x"]), int(f["y"]), int(f["x"] + f["width"]), int(f["y"] + f["height"]))
        colours = shot.crop(box).getcolors(maxcolors=1 << 20) or []
        assert len(colours) > 50, f"{f['key']}: {len(colours)} colours on screen"
    svg = [f for f in figures if f["kind"] == "svg"]
    assert [f["key"] for f in svg] == ["timeline"]
    assert svg[0]["shapes"] > 20 and svg[0]["hoverTitles"] == 4 + 1 + 4  # questions, claim, attempts


def test_console_errors_and_blank_figures_are_caught(tmp_path: Path) -> None:
    """The checks above can fail: an outside image blocked by the page's policy and a script error are
    reported, and a figure that never decodes says so."""
    from report.html import CSP

    page = tmp_path / "bad.html"
    page.write_text(f"""<!doctype html><html><head><meta http-equiv="Content-Security-Policy" content="{CSP}">
<link rel="icon" href="data:,"></head><body>
<figure class="attnq-figure" data-key="outside"><img src="https://example.invalid/x.png" width="900" height="300">
</figure></body></html>""")
    script = tmp_path / "script.html"
    script.write_text("<!doctype html><html><head><link rel='icon' href='data:,'></head><body>"
                      "<script>console.error('boom'); undefinedCall();</script></body></html>")
    assert BROWSER is not None
    with Chromium(BROWSER) as b:
        b.open(page)
        figures = b.evaluate(FIGURES_JS)
        errors = b.console_errors()
    assert figures[0]["decoded"] is False
    assert any("Content Security Policy" in e for e in errors), errors
    with Chromium(BROWSER) as b:
        b.open(script)
        errors = b.console_errors()
    assert any("boom" in e for e in errors) and any("undefinedCall" in e for e in errors), errors
