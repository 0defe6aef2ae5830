"""``attnq report``: the campaign and the kernel as pictures, in one self-contained HTML file and as PNGs.

Layers: :mod:`report.data` (inputs: verdicts, a campaign from the store or a trace, evolve data; derived
numbers), :mod:`report.figures_kernel` and :mod:`report.figures_campaign` (matplotlib figures),
:mod:`report.html` (the page), :mod:`report.build` (sections, progress, files). The CLI
(``attnq report``) and the MCP server (``get_report``, ``attnq://report``) only adapt these.
"""

from report.build import Report, ReportInputs, build_report, write_report
from report.data import (
    CampaignData,
    EvolveData,
    LabelledVerdict,
    campaign_from_store,
    load_evolve,
    load_trace,
    load_verdict,
)

__all__ = ["CampaignData", "EvolveData", "LabelledVerdict", "Report", "ReportInputs", "build_report",
           "campaign_from_store", "load_evolve", "load_trace", "load_verdict", "write_report"]
