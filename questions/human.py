"""Questions people ask, and their promotion into the bank.

A question a person asks (``attnq questions add``) is recorded with its campaign. When the same
question — equal after :func:`normalize_question`, or with a difflib ratio >= :data:`SIMILAR_RATIO`
— has been asked in >= :data:`PROMOTE_CAMPAIGNS` distinct campaigns, it is promoted into the bank
(stored in the campaign store, loaded by ``load_bank(store=...)``) with its provenance: campaigns,
first/last date and count. Its triggers are the union of those given (all triggers when none was);
its layer the most frequent one given (``search_strategy`` when none was).
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections import Counter

from pydantic import BaseModel, Field, ValidationError

from harness.errors import InputError
from harness.store import CampaignStore, HumanQuestionRecord
from questions.bank import LAYERS, TRIGGERS, Provenance, Question

SIMILAR_RATIO = 0.9
PROMOTE_CAMPAIGNS = 2
DEFAULT_LAYER = "search_strategy"
#: Length bounds of a question a person adds (characters, after whitespace is collapsed); the MCP
#: ``add_question`` tool and ``attnq questions add`` use the same bounds.
MIN_QUESTION_CHARS = 5
MAX_QUESTION_CHARS = 500


class HumanQuestionResult(BaseModel):
    """The recorded question, the campaigns that asked it (or a near copy), and the promotion if any."""

    record: HumanQuestionRecord
    campaigns: list[str]
    promoted: Question | None = None
    promotion_error: str | None = Field(default=None, description="why a question due for promotion was not")


def normalize_question(text: str) -> str:
    """Lowercase words of ``text`` without punctuation, single-spaced (the comparison key)."""
    return " ".join(re.sub(r"[^a-z0-9_]+", " ", text.lower()).split())


def similar(a: str, b: str) -> bool:
    """Two normalized questions are the same question (equal, or difflib ratio >= SIMILAR_RATIO)."""
    return a == b or difflib.SequenceMatcher(None, a, b).ratio() >= SIMILAR_RATIO


def _promoted_id(store: CampaignStore, normalized: str) -> str:
    for d in store.promoted():
        if similar(normalize_question(d.get("text", "")), normalized):
            return str(d["id"])
    words = normalized.split()[:6]
    slug = "-".join(words)[:48].strip("-") or "question"
    return f"human-{slug}-{hashlib.sha1(normalized.encode()).hexdigest()[:6]}"


def add_question(store: CampaignStore, text: str, *, triggers: list[str] | None = None, layer: str | None = None,
                 campaign_id: str | None = None) -> HumanQuestionResult:
    """Record a question a person asked; promote it when asked in >= 2 campaigns.

    Raises:
        InputError: empty text, unknown trigger or layer.
    """
    text = " ".join(text.split())
    if not text:
        raise InputError("the question is empty")
    for t in triggers or []:
        if t not in TRIGGERS:
            raise InputError(f"unknown trigger {t!r}; one of {', '.join(TRIGGERS)}")
    if layer is not None and layer not in LAYERS:
        raise InputError(f"unknown layer {layer!r}; one of {', '.join(LAYERS)}")
    norm = normalize_question(text)
    rec = store.record_human_question(text, norm, triggers=list(triggers or []), layer=layer,
                                      campaign_id=campaign_id)
    matches = [h for h in store.human_questions() if similar(h.normalized, norm)]
    campaigns = sorted({h.campaign_id for h in matches})
    result = HumanQuestionResult(record=rec, campaigns=campaigns)
    if len(campaigns) < PROMOTE_CAMPAIGNS:
        return result
    trig = sorted({t for h in matches for t in h.triggers}, key=TRIGGERS.index) or list(TRIGGERS)
    layers = Counter(h.layer for h in matches if h.layer)
    qtext = text if text.endswith("?") else text.rstrip(".!") + "?"
    try:
        q = Question(id=_promoted_id(store, norm), text=qtext, triggers=trig,  # type: ignore[arg-type]
                     layer=layers.most_common(1)[0][0] if layers else DEFAULT_LAYER,  # type: ignore[arg-type]
                     note=f"Asked by people in {len(campaigns)} campaigns; promoted automatically.",
                     origin="promoted",
                     provenance=Provenance(campaigns=campaigns, first_asked=matches[0].created_at,
                                           last_asked=matches[-1].created_at, times_asked=len(matches)))
    except ValidationError as exc:
        result.promotion_error = exc.errors()[0]["msg"]
        return result
    store.save_promoted(q.model_dump(mode="json"))
    result.promoted = q
    return result
