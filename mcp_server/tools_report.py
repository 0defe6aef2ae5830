"""The report over MCP: the ``get_report`` tool (one figure as an image plus a short summary) and the
``attnq://report`` resource (the whole self-contained HTML page). Thin adapters over ``report/``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from harness.errors import AttnqError, InputError
from harness.logging import get_logger
from mcp_server.edge import format_error
from mcp_server.state import ServerState

log = get_logger("attnq.mcp.report")

REPORT_HTML_URI = "attnq://report"

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, destructive_hint=False, open_world_hint=False)

class ReportAnswer(BaseModel):
    """get_report's structured content; the figure itself travels as an image content block."""

    campaign_id: str
    figure: str = Field(description="key of the figure sent as the image")
    title: str
    figures: list[str] = Field(description="every figure of the report (any one can be asked for)")
    summary: str
    skipped: list[str] = Field(default_factory=list, description="sections left out, and why")
    html_uri: str = Field(default="attnq://report", description="the whole report as HTML")


FigureKind = Literal["auto", "speedup", "roofline", "timeline", "questions", "evolve"]


def build_campaign_report(state: ServerState, progress: Callable[[int, int, str], None] | None = None) -> Any:
    """The report of the server's active campaign (its best attempt stands for the kernel).

    Raises:
        InputError: the campaign has no attempt yet (nothing to draw).
    """
    from report import ReportInputs, build_report, campaign_from_store
    from report.data import evolve_from_store

    store = state.store()
    campaign = campaign_from_store(store)
    if not campaign.attempts:
        raise InputError(f"campaign {campaign.campaign_id!r} has no attempts yet: verify a kernel first "
                         "(verify_kernel), then ask for the report")
    settings = state.settings
    inputs = ReportInputs(campaign=campaign, evolve=evolve_from_store(store, campaign.campaign_id),
                          min_gain=settings.stall_min_gain, matmul_tflops=settings.matmul_tflops,
                          hbm_tbps=settings.hbm_tbps, title=f"attnq report: {campaign.campaign_id}")
    return build_report(inputs, progress=progress)


def register_report_tools(server: MCPServer, state: ServerState, *, edge: Callable[[str], Any]) -> None:
    """Register ``get_report`` and the ``attnq://report`` resource."""

    @server.tool(annotations=READ_ONLY)
    @edge("get_report")
    async def get_report(
        ctx: Context,
        figure: Annotated[FigureKind, Field(
            description="which figure: speedup (per scenario vs the original and anchors, best attempt), roofline "
                        "(fraction of the compute or memory bound per scenario), timeline (geomean per attempt, "
                        "questions, claims), questions (effectiveness), evolve; auto: speedup, else timeline")] = "auto",
    ) -> Annotated[CallToolResult, ReportAnswer]:
        """The campaign as a picture: one figure of the report as a PNG image plus a short text summary (best
        attempt's geomeans vs the original and the anchors, weakest group, distance to the roofline, attempts,
        questions and claims). The whole report (every figure, tables) is the HTML resource attnq://report."""
        def progress(done: int, total: int, message: str) -> None:  # called from the worker thread
            try:
                anyio.from_thread.run(ctx.report_progress, float(done), float(total), f"report: {message}")
            except Exception as exc:  # noqa: BLE001 - a lost progress notification must not fail the report
                log.debug("progress_not_sent", error=str(exc))

        report = await anyio.to_thread.run_sync(build_campaign_report, state, progress)
        fig = report.key_figure() if figure == "auto" else report.figure(figure)
        if fig is None:
            have = ", ".join(sorted({f.key.split("-")[0] for f in report.figures})) or "none"
            why = "; ".join(report.skipped) or "no data"
            raise InputError(f"no {figure} figure in this campaign's report (figures: {have}); {why}")
        text = (f"{report.summary}\n\nfigure: {fig.title}. {fig.caption}\n"
                f"The whole report (all figures, question table) is the resource {REPORT_HTML_URI}.")
        answer = ReportAnswer(campaign_id=state.store().campaign_id, figure=fig.key, title=fig.title,
                              figures=[f.key for f in report.figures], summary=report.summary, skipped=report.skipped)
        return CallToolResult(content=[TextContent(type="text", text=text),
                                       Image(data=fig.png, format="png").to_image_content()],
                              structured_content=answer.model_dump(mode="json"))

    @server.resource(REPORT_HTML_URI, name="report_html", title="Campaign report (HTML, figures)",
                     mime_type="text/html",
                     description="the active campaign as one self-contained HTML page: speedup per scenario, "
                                 "roofline position, timeline with questions and claims, question effectiveness")
    async def report_html() -> str:
        try:
            report = await anyio.to_thread.run_sync(build_campaign_report, state, None)
        except AttnqError as err:
            raise ResourceError(format_error(err)) from None
        return report.html
