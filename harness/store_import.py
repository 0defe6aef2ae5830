"""The campaign store's bulk insert of whole campaigns (harness/store.py's ``CampaignStore`` mixes this in).

``insert_campaigns`` writes campaigns as a trace holds them (``questions.trace.import_trace`` parses the
trace): every attempt, question, claim, event and human question with its own timestamps, ``seq`` and
``attempt_seq``, in one transaction, so a bad record leaves the store as it was. The per-scenario rows
of an attempt come from its verdict through :func:`insert_scenario_rows`, the one place that builds
them (``record_attempt`` uses it too). Row ids are the store's own (autoincrement), not the trace's.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.errors import InputError
from harness.store_human import dump_json
from harness.verdict import Verdict

if TYPE_CHECKING:  # pragma: no cover
    from harness.store import CampaignRecords

#: Tables holding a campaign's records (a campaign with none of them is empty).
CAMPAIGN_TABLES = ("attempts", "questions_asked", "claims", "events", "human_questions")


def insert_scenario_rows(cur: sqlite3.Cursor, attempt_id: int, verdict: Verdict | None) -> None:
    """Insert the ``scenario_results`` rows of attempt row ``attempt_id``: one per scenario of ``verdict``
    (group, correct, failure kind, speedup, tflops, the candidate's median time in ms); none without one."""
    for s in verdict.scenarios if verdict else []:
        cur.execute(
            "INSERT OR REPLACE INTO scenario_results VALUES (?,?,?,?,?,?,?,?)",
            (attempt_id, s.id, s.group, int(s.correct), s.failure_kind, s.speedup, s.tflops,
             s.candidate.median_ms if s.candidate else None))


def campaign_record_count(cur: sqlite3.Cursor, campaign_id: str) -> int:
    """Records (attempts, questions, claims, events, human questions) the store holds for ``campaign_id``."""
    return sum(int(cur.execute(f"SELECT COUNT(*) FROM {t} WHERE campaign_id = ?", (campaign_id,)).fetchone()[0])
               for t in CAMPAIGN_TABLES)


def _opt_int(value: bool | None) -> int | None:
    return None if value is None else int(value)


class ImportTables:
    """Methods of ``CampaignStore`` that insert whole campaigns."""

    _cid: Any
    _write: Any
    _query: Any
    campaign_id: str

    def campaign_is_empty(self, campaign_id: str) -> bool:
        """True when the store holds no records of ``campaign_id`` (absent, or created and never used)."""
        return all(self._query(f"SELECT COUNT(*) AS n FROM {t} WHERE campaign_id = ?", (campaign_id,))[0]["n"] == 0
                   for t in CAMPAIGN_TABLES)

    def insert_campaigns(self, campaigns: Sequence[CampaignRecords], *, activate: str | None = None) -> None:
        """Insert whole campaigns in one transaction (all or nothing); optionally make one active.

        Each record keeps its fields as given (timestamps, ``seq``, status, counts, JSON columns); the
        records' own ``campaign_id`` and ``id`` are ignored (the campaign is ``CampaignRecords.campaign_id``,
        ids are new). A campaign that exists but holds no records is filled (its ``created_at`` becomes
        the imported one).

        Raises:
            InputError: a campaign id that is not a slug, or one that already holds records (nothing is written).
            StoreError: a database error (nothing is written).
        """
        ids = [self._cid(c.campaign_id) for c in campaigns]
        if activate is not None and activate not in ids:
            raise InputError(f"cannot activate {activate!r}: it is not among the imported campaigns")

        def write(cur: sqlite3.Cursor) -> None:
            for c in campaigns:
                cid = c.campaign_id
                held = campaign_record_count(cur, cid)
                if held:
                    raise InputError(f"campaign {cid!r} already exists in the store with {held} records; "
                                     "nothing was imported")
                cur.execute("INSERT OR REPLACE INTO campaigns VALUES (?, ?)", (cid, c.created_at))
                for a in c.attempts:
                    cur.execute(
                        "INSERT INTO attempts (campaign_id, seq, created_at, source_path, source_sha256, source_text,"
                        " status, error_code, geomean_speedup, goal_met, num_scenarios, num_correct, failed_json,"
                        " compile_json, verdict_json, error_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (cid, a.seq, a.created_at, a.source_path, a.source_sha256, a.source_text, a.status,
                         a.error_code, a.geomean_speedup, _opt_int(a.goal_met), a.num_scenarios, a.num_correct,
                         dump_json(list(a.failed)), None if a.compile is None else dump_json(a.compile),
                         None if a.verdict is None else a.verdict.model_dump_json(),
                         None if a.error is None else dump_json(a.error)))
                    insert_scenario_rows(cur, int(cur.lastrowid or 0), a.verdict)
                for q in c.questions:
                    cur.execute("INSERT INTO questions_asked (campaign_id, created_at, question_id, text, layer,"
                                " trigger, fired, evidence, evidence_json, attempt_seq) VALUES (?,?,?,?,?,?,?,?,?,?)",
                                (cid, q.created_at, q.question_id, q.text, q.layer, q.trigger, int(q.fired),
                                 q.evidence, dump_json(q.evidence_data), q.attempt_seq))
                for cl in c.claims:
                    cur.execute("INSERT INTO claims (campaign_id, created_at, kind, text, attempt_seq, goal_met,"
                                " answer_json) VALUES (?,?,?,?,?,?,?)",
                                (cid, cl.created_at, cl.kind, cl.text, cl.attempt_seq, _opt_int(cl.goal_met),
                                 dump_json(cl.answer)))
                for e in c.events:
                    cur.execute("INSERT INTO events (campaign_id, created_at, tool, args_json, result_json, ok,"
                                " duration_s) VALUES (?,?,?,?,?,?,?)",
                                (cid, e.created_at, e.tool, dump_json(e.args),
                                 None if e.result is None else dump_json(e.result), int(e.ok), e.duration_s))
                for h in c.human_questions:
                    cur.execute("INSERT INTO human_questions (campaign_id, created_at, text, normalized, triggers_json,"
                                " layer) VALUES (?,?,?,?,?,?)",
                                (cid, h.created_at, h.text, h.normalized, dump_json(list(h.triggers)), h.layer))
            if activate is not None:
                cur.execute("INSERT OR REPLACE INTO meta VALUES ('active_campaign', ?)", (activate,))

        self._write(write)
        if activate is not None:
            self.campaign_id = activate
