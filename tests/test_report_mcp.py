"""The report over MCP, through the SDK's own client: get_report answers a PNG image plus a summary (with
progress notifications), any figure on request, tool errors when there is nothing to draw; the
``attnq://report`` resource is the HTML page."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import anyio
import pytest
from mcp.client import Client

from harness.config import Settings
from harness.store import CampaignStore
from mcp_server.server import build_server
from report import load_trace
from tests.report_support import RECORDED_TRACE, picture_stats, replay


def call(server, fn):  # type: ignore[no-untyped-def]
    async def main():  # type: ignore[no-untyped-def]
        async with Client(server) as client:
            return await fn(client)

    return anyio.run(main)


@pytest.fixture(scope="module")
def campaign_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace whose active campaign is the recorded fast-kernel campaign."""
    ws = tmp_path_factory.mktemp("report-ws")
    with pytest.MonkeyPatch.context() as mp:  # set up before conftest's function-scoped ATTNQ_* clearing
        for name in [n for n in os.environ if n.startswith("ATTNQ_")]:
            mp.delenv(name)
        with CampaignStore.open(Settings(workspace=ws)) as store:
            replay(store, load_trace(RECORDED_TRACE))
    return ws


def test_get_report_sends_the_key_figure_as_png_with_a_summary(campaign_workspace: Path) -> None:
    server = build_server(Settings(workspace=campaign_workspace))
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    async def go(c):  # type: ignore[no-untyped-def]
        tools = {t.name: t for t in (await c.list_tools()).tools}
        auto = await c.call_tool("get_report", {}, progress_callback=on_progress)
        timeline = await c.call_tool("get_report", {"figure": "timeline"})
        return tools["get_report"], auto, timeline

    tool, auto, timeline = call(server, go)
    assert tool.annotations.read_only_hint is True
    assert tool.output_schema["properties"]["figures"]["type"] == "array"
    assert not auto.is_error
    text, image = auto.content
    assert text.type == "text" and image.type == "image" and image.mime_type == "image/png"
    png = base64.b64decode(image.data)
    w, h, colours = picture_stats(png)
    assert w >= 1000 and h >= 300 and colours > 50
    assert "153/153 correct" in text.text and "9.499x vs the original" in text.text and "attnq://report" in text.text
    sc = auto.structured_content
    assert sc["figure"] == "speedup" and sc["figures"] == ["speedup", "roofline", "timeline", "questions"]
    assert sc["campaign_id"] == "default" and "4 questions" in sc["summary"]
    assert progress and progress[-1][0] == progress[-1][1] == 4.0  # one notification per figure, then done
    assert timeline.structured_content["figure"] == "timeline"
    assert base64.b64decode(timeline.content[1].data) != png


def test_get_report_errors_are_plain(tmp_path: Path, campaign_workspace: Path) -> None:
    empty = call(build_server(Settings(workspace=tmp_path)), lambda c: c.call_tool("get_report", {}))
    assert empty.is_error and "has no attempts yet: verify a kernel first" in empty.content[0].text
    no_evolve = call(build_server(Settings(workspace=campaign_workspace)),
                     lambda c: c.call_tool("get_report", {"figure": "evolve"}))
    assert no_evolve.is_error
    assert "no evolve figure" in no_evolve.content[0].text and "figures: questions, roofline, speedup, timeline" \
        in no_evolve.content[0].text
    bad = call(build_server(Settings(workspace=campaign_workspace)),
               lambda c: c.call_tool("get_report", {"figure": "pie"}))
    assert bad.is_error and "[invalid_arguments] get_report: figure" in bad.content[0].text


def test_report_resource_is_the_html_page(tmp_path: Path, campaign_workspace: Path) -> None:
    async def go(c):  # type: ignore[no-untyped-def]
        listed = {str(r.uri): r for r in (await c.list_resources()).resources}
        page = (await c.read_resource("attnq://report")).contents[0]
        return listed, page

    listed, page = call(build_server(Settings(workspace=campaign_workspace)), go)
    assert listed["attnq://report"].mime_type == "text/html"
    assert page.mime_type == "text/html" and page.text.startswith("<!doctype html>")
    assert page.text.count('<figure class="attnq-figure"') == 4 and "campaign default: 4 attempts" in page.text

    async def empty(c):  # type: ignore[no-untyped-def]
        try:
            await c.read_resource("attnq://report")
        except Exception as exc:  # noqa: BLE001 - the client raises the server's resource error
            return str(exc)
        return "no error"

    msg = call(build_server(Settings(workspace=tmp_path)), empty)
    assert "has no attempts yet" in msg and "[" in msg.split("has no attempts yet")[0]  # the tools' "[code] message"
