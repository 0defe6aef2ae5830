"""Shared pieces of the report tests: the recorded campaign and verdicts, replaying a campaign into a store,
and checks that a PNG is a real picture."""

from __future__ import annotations

import io
import json
from pathlib import Path

from PIL import Image

from harness.store import CampaignStore
from report.data import CampaignData

ROOT = Path(__file__).resolve().parent.parent
RECORDED_TRACE = ROOT / "kernels" / "campaigns" / "fast-kernel-2026-11-30.jsonl"
VERDICTS = ROOT / "kernels" / "campaigns" / "fast-kernel" / "verdicts"
V3 = VERDICTS / "run07_v3_f2bd825.json.gz"
V5 = VERDICTS / "run11_v5_7647c64_anchor_spin.json.gz"
FIXTURES = ROOT / "tests" / "data" / "campaigns"
EVOLVE = ROOT / "tests" / "data" / "report" / "evolve.json"


def replay(store: CampaignStore, campaign: CampaignData) -> None:
    """Record ``campaign``'s attempts, questions and claims into ``store`` in their original order (each
    question and claim right after the attempt it followed, so ``attempt_seq`` comes out the same)."""
    pending_q = list(campaign.questions)
    pending_c = list(campaign.claims)

    def flush(seq: int) -> None:
        while pending_q and pending_q[0].attempt_seq <= seq:
            q = pending_q.pop(0)
            store.record_question(q.question_id, q.text, layer=q.layer, trigger=q.trigger, fired=q.fired,
                                  evidence=q.evidence, evidence_data=q.evidence_data)
        while pending_c and pending_c[0].attempt_seq <= seq:
            cl = pending_c.pop(0)
            store.record_claim(cl.kind, cl.text, goal_met=cl.goal_met, answer=cl.answer)

    flush(0)
    for a in campaign.attempts:
        store.record_attempt(a.source_path, None, a.compile, a.verdict, a.error)
        flush(a.seq)
    flush(1 << 30)


def replay_fixture(store: CampaignStore, name: str, start: int = 0, stop: int | None = None) -> None:
    """Record the attempts ``[start:stop]`` of tests/data/campaigns/<name>.json."""
    for a in json.loads((FIXTURES / f"{name}.json").read_text())["attempts"][start:stop]:
        store.record_attempt(a["source_path"], a["source_text"], a["compile_result"], a["verdict"], a["error"])


def picture_stats(png: bytes) -> tuple[int, int, int]:
    """(width, height, distinct colours) of a PNG: a drawn chart has hundreds of colours, a blank one 1."""
    im = Image.open(io.BytesIO(png)).convert("RGB")
    colours = im.getcolors(maxcolors=1 << 20) or []
    return im.width, im.height, len(colours)
