"""The campaign store's tables of questions people ask (harness/store.py's ``CampaignStore`` mixes this in).

``human_questions``: every question a person asked, with its campaign; ``promoted_questions``: those
promoted into the bank; ``demoted_questions``: promoted questions a person took out again (kept so that
they are not promoted anew). Storage only: matching and promotion rules live in questions/human.py.
The methods use the store's own plumbing (``_cid``, ``_write``, ``_query``; one transaction per write);
the JSON-column and timestamp helpers of both modules live here.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from harness.errors import StoreError


def utc_now() -> str:
    """Current time, ISO 8601 UTC with microseconds (``2026-11-30T04:17:22.123456+00:00``)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def dump_json(value: Any) -> str:
    """A stored JSON column: keys sorted, anything else as ``str``."""
    return json.dumps(value, sort_keys=True, default=str)


def load_json(text: str | None) -> Any:
    """A stored JSON column back (None stays None)."""
    return None if text is None else json.loads(text)


class HumanQuestionRecord(BaseModel):
    """A question a person asked during a campaign (candidate for promotion into the bank)."""

    id: int
    campaign_id: str
    created_at: str
    text: str
    normalized: str
    triggers: list[str] = Field(default_factory=list)
    layer: str | None = None


class HumanQuestionTables:
    """Methods of ``CampaignStore`` over the human/promoted/demoted question tables."""

    _cid: Any
    _write: Any
    _query: Any

    def record_human_question(self, text: str, normalized: str, *, triggers: list[str], layer: str | None,
                              campaign_id: str | None = None) -> HumanQuestionRecord:
        """Record a question a person asked (``normalized``: the text as compared for promotion)."""
        cid = self._cid(campaign_id)
        now = utc_now()

        def write(cur: sqlite3.Cursor) -> int:
            cur.execute("INSERT OR IGNORE INTO campaigns VALUES (?, ?)", (cid, now))
            cur.execute("INSERT INTO human_questions (campaign_id, created_at, text, normalized, triggers_json, layer)"
                        " VALUES (?,?,?,?,?,?)", (cid, now, text, normalized, dump_json(list(triggers)), layer))
            return int(cur.lastrowid or 0)

        hid = self._write(write)
        return next(h for h in self.human_questions() if h.id == hid)

    def human_questions(self) -> list[HumanQuestionRecord]:
        """Every question people asked, in every campaign, oldest first."""
        return [HumanQuestionRecord(id=r["id"], campaign_id=r["campaign_id"], created_at=r["created_at"],
                                    text=r["text"], normalized=r["normalized"], triggers=load_json(r["triggers_json"]),
                                    layer=r["layer"])
                for r in self._query("SELECT * FROM human_questions ORDER BY id")]

    def save_promoted(self, question: dict[str, Any]) -> None:
        """Insert or replace a promoted question (a ``questions.bank.Question`` as a dict; key ``id``)."""
        if not question.get("id"):
            raise StoreError("a promoted question needs an id")
        self._write(lambda cur: cur.execute("INSERT OR REPLACE INTO promoted_questions VALUES (?,?,?)",
                                            (question["id"], utc_now(), dump_json(question))))

    def promoted(self) -> list[dict[str, Any]]:
        """Promoted questions as dicts, by id."""
        return [load_json(r["question_json"]) for r in
                self._query("SELECT question_json FROM promoted_questions ORDER BY question_id")]

    def demote_promoted(self, question_id: str, reason: str) -> dict[str, Any] | None:
        """Take a promoted question out of the bank, in one transaction, and remember it as demoted.

        Returns the demoted question (a dict), or None when no promoted question has this id. The
        people's records of it (``human_questions``) stay: they are the campaign's history.
        """
        now = utc_now()

        def write(cur: sqlite3.Cursor) -> dict[str, Any] | None:
            row = cur.execute("SELECT question_json FROM promoted_questions WHERE question_id = ?",
                              (question_id,)).fetchone()
            if row is None:
                return None
            cur.execute("DELETE FROM promoted_questions WHERE question_id = ?", (question_id,))
            cur.execute("INSERT OR REPLACE INTO demoted_questions VALUES (?,?,?,?)", (question_id, now, reason, row[0]))
            return dict(load_json(row[0]))

        return self._write(write)

    def demoted(self) -> list[dict[str, Any]]:
        """Demoted questions, oldest first: ``{"question": {...}, "demoted_at": ISO, "reason": str}``."""
        return [{"question": load_json(r["question_json"]), "demoted_at": r["demoted_at"], "reason": r["reason"]}
                for r in self._query("SELECT * FROM demoted_questions ORDER BY demoted_at, question_id")]
