"""Questions people ask, and their promotion into the bank.

A question a person asks (``attnq questions add``, MCP ``add_question``) is recorded with its campaign
(once per campaign: the same question again in the same campaign is not stored twice). When the same
question (see :func:`similar`) has been asked in >= :data:`PROMOTE_CAMPAIGNS` distinct campaigns, it is
promoted into the bank (stored in the campaign store, loaded by ``load_bank(store=...)``) with its
provenance: campaigns, first/last date and count. Its triggers are the union of those given (all
triggers when none was); its layer the most frequent one given (``search_strategy`` when none was).
``attnq questions demote ID`` takes a promoted question out again, and it is not promoted again.

Matching is meant to merge rewordings, never two different questions:

- :func:`normalize_question`: Unicode NFKC, casefold, ``n't`` -> ``not``, possessive ``'s`` dropped,
  every run of non-word characters one space. Letters of every script are kept ("für" stays "für"), so
  questions in a non-Latin script never normalize to the empty string (which is refused).
- :func:`similar`: equal after normalization; or (a) the same count of negation words (``not``, ``no``,
  ``never``, ``without``, ...), so a question never merges with its negation; (b) no content word
  replaced by another (after dropping function words and plural/-ed/-ing endings), so "occupancy of
  the decode kernel" never merges with "latency of the decode kernel"; (c) no number added, dropped or
  changed; (d) the shared content words in the same order; and (e) a difflib ratio >= :data:`SIMILAR_RATIO`
  on the content words (a short word added, like "wall-clock" / "wall-clock time").
"""

from __future__ import annotations

import difflib
import hashlib
import re
import unicodedata
from collections import Counter

from pydantic import BaseModel, Field, ValidationError

from harness.errors import InputError
from harness.store import CampaignStore, HumanQuestionRecord
from questions.bank import LAYERS, MAX_TEXT_CHARS, TRIGGERS, Provenance, Question
from questions.text import clean_text, is_one_question, printable

SIMILAR_RATIO = 0.9
PROMOTE_CAMPAIGNS = 2
DEFAULT_LAYER = "search_strategy"
#: Length bounds of a question a person adds (characters, after whitespace is collapsed); the MCP
#: ``add_question`` tool and ``attnq questions add`` use the same bounds, and the upper one is the
#: bank's own (a question that could not be promoted is not accepted).
MIN_QUESTION_CHARS = 5
MAX_QUESTION_CHARS = MAX_TEXT_CHARS

#: Words that carry negation; "n't" is rewritten to "not" before matching.
NEGATIONS = frozenset({"not", "no", "never", "without", "cannot", "nor", "neither", "none", "nothing", "non",
                       "nobody", "nowhere", "lack", "lacks", "fail", "fails"})
#: Function words that may differ between two wordings of one question.
FUNCTION_WORDS = frozenset({
    "a", "an", "the", "this", "that", "these", "those", "is", "are", "was", "were", "be", "been", "being", "am",
    "do", "does", "did", "it", "its", "of", "for", "on", "at", "to", "in", "into", "by", "with", "from", "as",
    "our", "my", "your", "their", "we", "i", "you", "they", "there", "here", "any", "some", "really", "actually",
    "still", "just", "so", "very", "currently", "now", "then", "which", "what",
})
_NUMBER = re.compile(r"^\d+(?:\.\d+)?$")


class HumanQuestionResult(BaseModel):
    """The recorded question, the campaigns that asked it (or a near copy), and the promotion if any."""

    record: HumanQuestionRecord
    campaigns: list[str]
    promoted: Question | None = None
    already_recorded: bool = Field(default=False, description="the campaign had recorded this question before: "
                                   "nothing new was stored")
    promotion_error: str | None = Field(default=None, description="why a question due for promotion was not")


def normalize_question(text: str) -> str:
    """The comparison key of a question: NFKC, casefolded, ``n't`` -> `` not``, possessive ``'s`` dropped,
    non-word characters as single spaces (``"Isn't it L2-bound??"`` -> ``"is not it l2 bound"``)."""
    t = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    t = re.sub(r"\bcan't\b", "can not", t)
    t = re.sub(r"\bwon't\b", "will not", t)
    t = re.sub(r"n't\b", " not", t)
    t = re.sub(r"'s\b", "", t)
    return " ".join(re.sub(r"[\W_]+", " ", t).split())


def _stem(word: str) -> str:
    """A crude English stem so that inflections compare equal: plural -s/-ies, -ed and -ing (with a doubled
    final consonant undone) and a final -e dropped (``loads``/``loaded``/``loading`` -> ``load``,
    ``tile``/``tiles`` -> ``til``, ``overlap``/``overlapped`` -> ``overlap``). Numbers stay as they are."""
    w = word
    if _NUMBER.match(w):
        return w
    if len(w) >= 5 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif len(w) >= 4 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix, min_len in (("ing", 6), ("ed", 5)):
        if len(w) >= min_len and w.endswith(suffix):
            w = w[: -len(suffix)]
            if len(w) >= 4 and w[-1] == w[-2] and w[-1] not in "aeiouls":
                w = w[:-1]
            break
    if len(w) >= 4 and w.endswith("e"):
        w = w[:-1]
    return w


def similar(a: str, b: str) -> bool:
    """Two normalized questions are the same question (rules (a)-(e) in the module docstring)."""
    if a == b:
        return True
    wa, wb = a.split(), b.split()
    if sum(w in NEGATIONS for w in wa) != sum(w in NEGATIONS for w in wb):
        return False  # (a) a question and its negation
    ca = [_stem(w) for w in wa if w not in FUNCTION_WORDS]
    cb = [_stem(w) for w in wb if w not in FUNCTION_WORDS]
    only_a, only_b = set(ca) - set(cb), set(cb) - set(ca)
    if only_a and only_b:
        return False  # (b) a content word replaced: another quantity, another object
    if any(_NUMBER.match(w) for w in only_a | only_b):
        return False  # (c) a number added or dropped
    if [w for w in ca if w not in only_a] != [w for w in cb if w not in only_b]:
        return False  # (d) the same words in another order ("is A faster than B" / "is B faster than A")
    return difflib.SequenceMatcher(None, " ".join(ca), " ".join(cb)).ratio() >= SIMILAR_RATIO  # (e)


def _slug_words(normalized: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", normalized).encode("ascii", "ignore").decode("ascii")
    words = re.sub(r"[^a-z0-9]+", " ", ascii_text.lower()).split()[:6]
    return "-".join(words)[:48].strip("-") or "question"


def _promoted_id(store: CampaignStore, normalized: str) -> str:
    for d in store.promoted():
        if similar(normalize_question(d.get("text", "")), normalized):
            return str(d["id"])
    return f"human-{_slug_words(normalized)}-{hashlib.sha1(normalized.encode()).hexdigest()[:6]}"


def _demotion(store: CampaignStore, normalized: str) -> dict | None:
    """The demotion record of a question similar to ``normalized``, if a person demoted one."""
    for d in store.demoted():
        if similar(normalize_question(d["question"].get("text", "")), normalized):
            return d
    return None


def check_question_text(text: str) -> str:
    """``text`` cleaned (:func:`questions.text.clean_text`) and checked as ONE question.

    Raises:
        InputError: control/bidi characters, length outside [MIN_QUESTION_CHARS, MAX_QUESTION_CHARS],
            no letter or digit, or not one question ending in '?'.
    """
    clean = clean_text(text, what="the question", min_chars=MIN_QUESTION_CHARS, max_chars=MAX_QUESTION_CHARS)
    if not normalize_question(clean):
        raise InputError("the question has no letters or digits")
    if not is_one_question(clean):
        raise InputError("write ONE question that ends in '?' (or '？', '؟', ...; a question leads to a measurement; "
                         "statements and several questions at once are not promoted into the bank)")
    return clean


def add_question(store: CampaignStore, text: str, *, triggers: list[str] | None = None, layer: str | None = None,
                 campaign_id: str | None = None) -> HumanQuestionResult:
    """Record a question a person asked; promote it when asked in >= 2 campaigns.

    A question equal (after :func:`normalize_question`) to one already recorded in the same campaign is
    not stored again: the answer carries the earlier record and ``already_recorded=True``. A question
    similar to a demoted one is recorded but not promoted (``promotion_error`` says why).

    Raises:
        InputError: see :func:`check_question_text`; unknown trigger or layer.
    """
    text = check_question_text(text)
    for t in triggers or []:
        if t not in TRIGGERS:
            raise InputError(f"unknown trigger {t!r}; one of {', '.join(TRIGGERS)}")
    if layer is not None and layer not in LAYERS:
        raise InputError(f"unknown layer {layer!r}; one of {', '.join(LAYERS)}")
    norm = normalize_question(text)
    cid = campaign_id if campaign_id is not None else store.campaign_id
    earlier = [h for h in store.human_questions() if h.campaign_id == cid and normalize_question(h.text) == norm]
    if earlier:
        rec, already = earlier[0], True
    else:
        rec, already = store.record_human_question(text, norm, triggers=list(triggers or []), layer=layer,
                                                   campaign_id=cid), False
    # the key is recomputed from the text: records stored by an older normalization are compared anew
    matches = [h for h in store.human_questions() if similar(normalize_question(h.text), norm)]
    campaigns = sorted({h.campaign_id for h in matches})
    result = HumanQuestionResult(record=rec, campaigns=campaigns, already_recorded=already)
    if len(campaigns) < PROMOTE_CAMPAIGNS:
        return result
    if (demoted := _demotion(store, norm)) is not None:
        result.promotion_error = (f"a similar question ({demoted['question'].get('id')}) was demoted on "
                                  f"{demoted['demoted_at'][:10]}: {demoted['reason']}")
        return result
    trig = sorted({t for h in matches for t in h.triggers}, key=TRIGGERS.index) or list(TRIGGERS)
    layers = Counter(h.layer for h in matches if h.layer)
    try:
        q = Question(id=_promoted_id(store, norm), text=text, triggers=trig,  # type: ignore[arg-type]
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


def demote_question(store: CampaignStore, question_id: str, reason: str) -> Question:
    """Take the promoted question ``question_id`` out of the bank; questions similar to it are not promoted again.

    Raises:
        InputError: no promoted question has this id (built-in and imported questions live in bank files:
            edit or override those instead), or ``reason`` is empty or holds control characters.
    """
    why = clean_text(reason, what="the reason", min_chars=1, max_chars=MAX_QUESTION_CHARS)
    demoted = store.demote_promoted(question_id, why)
    if demoted is None:
        known = ", ".join(str(d["id"]) for d in store.promoted()) or "none"
        raise InputError(f"no promoted question {question_id!r} (promoted: {known}); built-in and imported "
                         "questions come from bank files: edit the file, or override the id in a bank of yours")
    return Question.model_validate({**demoted, "text": printable(str(demoted.get("text", ""))), "origin": "promoted"})
