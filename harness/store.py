"""The campaign store: one SQLite file per state directory (``<state_dir>/campaign.sqlite``; the state
directory is ``<workspace>/.attnq`` unless ``ATTNQ_STATE`` names another).

Records every attempt (content hash, an archived copy of the source, compile facts, the verdict
summary and per-scenario results), every question asked (trigger, evidence, question id), every
claim (limit / done), every tool call as a timestamped event, and the questions people asked.
Storage only: trigger detection and question selection live in ``questions/``. Whole campaigns read
back from a trace go in through ``insert_campaigns`` (harness/store_import.py), all or nothing.

Durability: WAL journal, ``synchronous=FULL``, each write one ``BEGIN IMMEDIATE`` transaction, so a
process killed mid-write loses only the write in flight (tested with SIGKILL in tests/test_store.py).
A workspace holds one *active* campaign (name, default ``"default"``) recorded in the ``meta``
table; handles write to the active campaign unless given another ``campaign_id``.
Timestamps are ISO 8601 UTC strings with microseconds.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, Field

from harness.errors import InputError, StoreError
from harness.logging import get_logger
from harness.store_human import (
    HumanQuestionRecord,
    HumanQuestionTables,
    utc_now,
)
from harness.store_human import dump_json as _dump
from harness.store_human import load_json as _load
from harness.store_import import ImportTables, insert_scenario_rows
from harness.verdict import Verdict

if TYPE_CHECKING:  # pragma: no cover
    from harness.config import Settings

log = get_logger(__name__)

DEFAULT_CAMPAIGN = "default"
STORE_FILENAME = "campaign.sqlite"
SCHEMA_VERSION = 1
#: A campaign id is a slug: a letter or digit, then up to 63 letters, digits, ``.``, ``_`` or ``-``.
CAMPAIGN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@contextmanager
def write_transaction(conn: sqlite3.Connection, lock: Any) -> Iterator[sqlite3.Cursor]:
    """One write transaction on ``conn`` under ``lock`` (BEGIN IMMEDIATE ... COMMIT; ROLLBACK on error).
    Shared by the campaign store and evolve's tables in the same SQLite file."""
    with lock:
        cur = conn.cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                cur.execute("ROLLBACK")
            raise
        finally:
            cur.close()


def validate_campaign_id(campaign_id: str) -> str:
    """Return ``campaign_id`` when it is a slug (:data:`CAMPAIGN_ID_RE`).

    Raises:
        InputError: empty, too long (> 64 characters) or with other characters (``/``, spaces, ``..`` first).
    """
    if not isinstance(campaign_id, str) or not CAMPAIGN_ID_RE.fullmatch(campaign_id):
        raise InputError(f"bad campaign name {campaign_id!r}: use 1-64 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit")
    return campaign_id

#: Outcome of one attempt. correct/incorrect/error mirror ``Verdict.status``; ``failed_compile`` is an
#: error dict whose code is one of :data:`COMPILE_FAILURE_CODES`; ``error`` any other error dict
#: (e.g. ``no_gpu``); ``compiled`` means compiled but not verified.
AttemptStatus = Literal["correct", "incorrect", "error", "failed_compile", "compiled"]
COMPILE_FAILURE_CODES = frozenset({"compile_error", "policy_violation", "abi_mismatch"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS campaigns (campaign_id TEXT PRIMARY KEY, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, campaign_id TEXT NOT NULL, seq INTEGER NOT NULL,
    created_at TEXT NOT NULL, source_path TEXT NOT NULL, source_sha256 TEXT NOT NULL,
    source_text TEXT, status TEXT NOT NULL, error_code TEXT, geomean_speedup REAL, goal_met INTEGER,
    num_scenarios INTEGER, num_correct INTEGER, failed_json TEXT NOT NULL,
    compile_json TEXT, verdict_json TEXT, error_json TEXT, UNIQUE (campaign_id, seq));
CREATE TABLE IF NOT EXISTS scenario_results (
    attempt_id INTEGER NOT NULL REFERENCES attempts(id), scenario_id TEXT NOT NULL,
    grp TEXT NOT NULL, correct INTEGER NOT NULL, failure_kind TEXT, speedup REAL, tflops REAL,
    candidate_median_ms REAL, PRIMARY KEY (attempt_id, scenario_id));
CREATE TABLE IF NOT EXISTS questions_asked (
    id INTEGER PRIMARY KEY AUTOINCREMENT, campaign_id TEXT NOT NULL, created_at TEXT NOT NULL,
    question_id TEXT NOT NULL, text TEXT NOT NULL, layer TEXT NOT NULL, trigger TEXT,
    fired INTEGER NOT NULL, evidence TEXT NOT NULL, evidence_json TEXT NOT NULL,
    attempt_seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS claims (
    id INTEGER PRIMARY KEY AUTOINCREMENT, campaign_id TEXT NOT NULL, created_at TEXT NOT NULL,
    kind TEXT NOT NULL, text TEXT NOT NULL, attempt_seq INTEGER NOT NULL, goal_met INTEGER,
    answer_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, campaign_id TEXT NOT NULL, created_at TEXT NOT NULL,
    tool TEXT NOT NULL, args_json TEXT NOT NULL, result_json TEXT, ok INTEGER NOT NULL,
    duration_s REAL);
CREATE TABLE IF NOT EXISTS human_questions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, campaign_id TEXT NOT NULL, created_at TEXT NOT NULL,
    text TEXT NOT NULL, normalized TEXT NOT NULL, triggers_json TEXT NOT NULL, layer TEXT);
CREATE TABLE IF NOT EXISTS promoted_questions (
    question_id TEXT PRIMARY KEY, updated_at TEXT NOT NULL, question_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS demoted_questions (
    question_id TEXT PRIMARY KEY, demoted_at TEXT NOT NULL, reason TEXT NOT NULL, question_json TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS attempts_campaign ON attempts (campaign_id, seq);
CREATE INDEX IF NOT EXISTS questions_campaign ON questions_asked (campaign_id, id);
"""


def _not_unicode() -> InputError:
    return InputError("the text holds characters that are not valid Unicode (bytes that are not UTF-8, passed "
                      "through a command line?); the store keeps UTF-8 text only")


class AttemptRecord(BaseModel):
    """One recorded attempt. ``seq`` is its 1-based number in the campaign (shown as ``#seq``)."""

    id: int
    campaign_id: str
    seq: int
    created_at: str
    source_path: str
    source_sha256: str = Field(description="sha256 of the UTF-8 source text (hex)")
    source_text: str | None = Field(default=None, description="archived copy of the source")
    status: AttemptStatus
    error_code: str | None = None
    geomean_speedup: float | None = Field(default=None, description="Verdict.geomean_speedup vs the original")
    goal_met: bool | None = None
    num_scenarios: int | None = None
    num_correct: int | None = None
    failed: list[str] = Field(default_factory=list, description="ids of failed scenarios")
    compile: dict[str, Any] | None = Field(default=None, description="CompileResult as JSON")
    verdict: Verdict | None = None
    error: dict[str, Any] | None = Field(default=None, description="AttnqError.to_dict()")


class ScenarioRow(BaseModel):
    """Per-scenario result of one attempt (a projection of ``ScenarioResult``)."""

    attempt_id: int
    scenario_id: str
    group: str
    correct: bool
    failure_kind: str | None = None
    speedup: float | None = None
    tflops: float | None = None
    candidate_median_ms: float | None = None


class AskedQuestion(BaseModel):
    """A question put to the agent. ``attempt_seq``: attempts recorded when it was asked (0 = none)."""

    id: int
    campaign_id: str
    created_at: str
    question_id: str
    text: str
    layer: str
    trigger: str | None = None
    fired: bool = Field(description="False when no trigger fired and a general question was asked")
    evidence: str
    evidence_data: dict[str, Any] = Field(default_factory=dict)
    attempt_seq: int


class ClaimRecord(BaseModel):
    """An explicit claim by the agent: ``limit`` (cannot go faster) or ``done``."""

    id: int
    campaign_id: str
    created_at: str
    kind: Literal["limit", "done"]
    text: str
    attempt_seq: int
    goal_met: bool | None = None
    answer: dict[str, Any] = Field(default_factory=dict)


class EventRecord(BaseModel):
    """One tool call (CLI command or MCP tool) with its arguments and a result summary."""

    id: int
    campaign_id: str
    created_at: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] | None = None
    ok: bool = True
    duration_s: float | None = None


class CampaignRecords(BaseModel):
    """One whole campaign to insert (:meth:`CampaignStore.insert_campaigns`), e.g. read back from a trace."""

    campaign_id: str
    created_at: str
    attempts: list[AttemptRecord] = Field(default_factory=list)
    questions: list[AskedQuestion] = Field(default_factory=list)
    claims: list[ClaimRecord] = Field(default_factory=list)
    events: list[EventRecord] = Field(default_factory=list)
    human_questions: list[HumanQuestionRecord] = Field(default_factory=list)


class CampaignInfo(BaseModel):
    """A campaign and its record counts."""

    campaign_id: str
    created_at: str
    active: bool
    attempts: int
    questions: int
    claims: int
    events: int


def _model_json(obj: Any) -> dict[str, Any] | None:
    """A pydantic model or dict as a JSON-ready dict (None stays None)."""
    if obj is None:
        return None
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return json.loads(_dump(obj))
    raise StoreError(f"expected a pydantic model or a dict, got {type(obj).__name__}")


def _status_of(verdict: Verdict | None, error: dict[str, Any] | None, compiled: bool) -> tuple[str, str | None]:
    if verdict is not None:
        return verdict.status, (error or {}).get("error")
    if error is not None:
        code = str(error.get("error", "error"))
        return ("failed_compile" if code in COMPILE_FAILURE_CODES else "error"), code
    if compiled:
        return "compiled", None
    raise StoreError("an attempt needs a compile result, a verdict or an error")


class CampaignStore(HumanQuestionTables, ImportTables):
    """Handle on ``campaign.sqlite``. Thread-safe (one connection behind a lock); use as a context manager.

    Args:
        path: the SQLite file (created with its parent directory when absent).
        campaign_id: the campaign this handle writes to; default: the workspace's active campaign.
        create: when False (read-only commands), an unknown ``campaign_id`` is refused instead of created.

    Raises:
        StoreError: the file cannot be opened or is not a campaign store.
        InputError: ``campaign_id`` is not a slug (:func:`validate_campaign_id`), or is unknown and
            ``create`` is False (the message lists the known campaigns).
    """

    def __init__(self, path: str | Path, *, campaign_id: str | None = None, create: bool = True) -> None:
        if campaign_id is not None:
            validate_campaign_id(campaign_id)
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                         check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute("PRAGMA busy_timeout=30000")
            with self._tx() as cur:
                for stmt in filter(str.strip, _SCHEMA.split(";")):
                    cur.execute(stmt)
                cur.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                cur.execute("INSERT OR IGNORE INTO meta VALUES ('active_campaign', ?)", (DEFAULT_CAMPAIGN,))
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open campaign store {self.path}: {exc}") from exc
        self.campaign_id = campaign_id if campaign_id is not None else self.active_campaign()
        # the active campaign (``default`` in a fresh store) is known before its first record
        if not create and campaign_id is not None and campaign_id not in (*self.campaign_ids(), self.active_campaign()):
            known = ", ".join(self.campaign_ids()) or "none"
            self._conn.close()
            raise InputError(f"unknown campaign {campaign_id!r}; known campaigns: {known} "
                             f"(to start it: attnq trace use --new {campaign_id})")
        self._ensure_campaign(self.campaign_id)

    @classmethod
    def open(cls, settings: Settings, *, campaign_id: str | None = None, create: bool = True) -> CampaignStore:
        """The workspace's store: ``<settings.state_dir>/campaign.sqlite`` (see the class for ``create``)."""
        return cls(settings.state_dir / STORE_FILENAME, campaign_id=campaign_id, create=create)

    # -- plumbing -----------------------------------------------------------------------------
    def _tx(self) -> AbstractContextManager[sqlite3.Cursor]:
        """One write transaction (:func:`write_transaction`)."""
        return write_transaction(self._conn, self._lock)

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self._lock:
            try:
                cur = self._conn.execute(sql, params)
                names = [d[0] for d in cur.description or ()]
                return [dict(zip(names, row)) for row in cur.fetchall()]
            except sqlite3.Error as exc:
                raise StoreError(f"campaign store read failed: {exc}") from exc
            except UnicodeEncodeError:
                raise _not_unicode() from None

    def _write(self, fn: Any) -> Any:
        try:
            with self._tx() as cur:
                return fn(cur)
        except sqlite3.Error as exc:
            raise StoreError(f"campaign store write failed: {exc}") from exc
        except UnicodeEncodeError:  # a lone surrogate: what Python makes of non-UTF-8 bytes in argv
            raise _not_unicode() from None

    def _cid(self, campaign_id: str | None) -> str:
        return self.campaign_id if campaign_id is None else validate_campaign_id(campaign_id)

    def _ensure_campaign(self, campaign_id: str) -> None:
        self._write(lambda cur: cur.execute(
            "INSERT OR IGNORE INTO campaigns VALUES (?, ?)", (campaign_id, utc_now())))

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check``: ``"ok"`` for a healthy file, else SQLite's description."""
        rows = self._query("PRAGMA integrity_check")
        return "; ".join(str(next(iter(r.values()))) for r in rows)

    # -- campaigns ----------------------------------------------------------------------------
    def active_campaign(self) -> str:
        """The workspace's active campaign name."""
        rows = self._query("SELECT value FROM meta WHERE key = 'active_campaign'")
        return str(rows[0]["value"]) if rows else DEFAULT_CAMPAIGN

    def set_active_campaign(self, campaign_id: str) -> None:
        """Make ``campaign_id`` the workspace's active campaign (created if new); this handle follows."""
        cid = self._cid(campaign_id)
        self._write(lambda cur: cur.execute(
            "INSERT OR REPLACE INTO meta VALUES ('active_campaign', ?)", (cid,)))
        self._ensure_campaign(cid)
        self.campaign_id = cid

    def campaign_ids(self) -> list[str]:
        """Names of the campaigns in this store, oldest first."""
        return [str(r["campaign_id"]) for r in
                self._query("SELECT campaign_id FROM campaigns ORDER BY created_at, campaign_id")]

    def list_campaigns(self) -> list[CampaignInfo]:
        """Every campaign with its record counts, oldest first."""
        active = self.active_campaign()
        out = []
        for row in self._query("SELECT campaign_id, created_at FROM campaigns ORDER BY created_at, campaign_id"):
            cid = row["campaign_id"]
            counts = {t: self._query(f"SELECT COUNT(*) AS n FROM {t} WHERE campaign_id = ?", (cid,))[0]["n"]
                      for t in ("attempts", "questions_asked", "claims", "events")}
            out.append(CampaignInfo(campaign_id=cid, created_at=row["created_at"], active=cid == active,
                                    attempts=counts["attempts"], questions=counts["questions_asked"],
                                    claims=counts["claims"], events=counts["events"]))
        return out

    # -- attempts -----------------------------------------------------------------------------
    def record_attempt(self, source_path: str, source_text: str | None, compile_result: Any,
                       verdict: Verdict | None, error: dict[str, Any] | None, *,
                       campaign_id: str | None = None) -> AttemptRecord:
        """Record one attempt in one transaction and return it with its ``seq``.

        Args:
            source_path: the candidate's path as the caller named it.
            source_text: the source (archived); its sha256 is the content hash. When None, the hash
                comes from the verdict or the compile result.
            compile_result: ``CompileResult`` (harness/compile.py), its dict, or None.
            verdict: the ``Verdict`` (harness/verdict.py; its JSON dict is accepted) or None when
                verification did not run.
            error: ``AttnqError.to_dict()`` when compile or verify raised, else None.

        Raises:
            StoreError: nothing to record (all of compile_result, verdict, error None) or a DB error.
        """
        cid = self._cid(campaign_id)
        if isinstance(verdict, dict):
            verdict = Verdict.model_validate(verdict)
        comp = _model_json(compile_result)
        err = _model_json(error)
        status, code = _status_of(verdict, err, comp is not None)
        if source_text is not None:
            sha = hashlib.sha256(source_text.encode("utf-8")).hexdigest()
        else:
            sha = (verdict.source_sha256 if verdict else None) or (comp or {}).get("source_sha256") or ""
        vjson = verdict.model_dump_json() if verdict is not None else None
        now = utc_now()

        def write(cur: sqlite3.Cursor) -> tuple[int, int]:
            cur.execute("INSERT OR IGNORE INTO campaigns VALUES (?, ?)", (cid, now))
            seq = cur.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM attempts WHERE campaign_id = ?",
                              (cid,)).fetchone()[0]
            cur.execute(
                "INSERT INTO attempts (campaign_id, seq, created_at, source_path, source_sha256, source_text,"
                " status, error_code, geomean_speedup, goal_met, num_scenarios, num_correct, failed_json,"
                " compile_json, verdict_json, error_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (cid, seq, now, str(source_path), sha, source_text, status, code,
                 verdict.geomean_speedup if verdict else None,
                 None if verdict is None else int(verdict.goal.met),
                 verdict.num_scenarios if verdict else None, verdict.num_correct if verdict else None,
                 _dump(list(verdict.failed) if verdict else []), None if comp is None else _dump(comp),
                 vjson, None if err is None else _dump(err)))
            aid = int(cur.lastrowid or 0)
            insert_scenario_rows(cur, aid, verdict)
            return aid, int(seq)

        _, seq = self._write(write)
        log.info("attempt_recorded", campaign=cid, seq=seq, status=status)
        return self.attempt(seq, cid)

    def _attempt_from_row(self, r: dict[str, Any]) -> AttemptRecord:
        return AttemptRecord(
            id=r["id"], campaign_id=r["campaign_id"], seq=r["seq"], created_at=r["created_at"],
            source_path=r["source_path"], source_sha256=r["source_sha256"], source_text=r.get("source_text"),
            status=r["status"], error_code=r["error_code"], geomean_speedup=r["geomean_speedup"],
            goal_met=None if r["goal_met"] is None else bool(r["goal_met"]),
            num_scenarios=r["num_scenarios"], num_correct=r["num_correct"], failed=_load(r["failed_json"]),
            compile=_load(r["compile_json"]),
            verdict=None if r["verdict_json"] is None else Verdict.model_validate_json(r["verdict_json"]),
            error=_load(r["error_json"]))

    def attempts(self, campaign_id: str | None = None, *, with_source: bool = True) -> list[AttemptRecord]:
        """The campaign's attempts in ``seq`` order (``source_text`` None when ``with_source`` is False)."""
        cols = "*" if with_source else "*, NULL AS source_text"
        rows = self._query(f"SELECT {cols} FROM attempts WHERE campaign_id = ? ORDER BY seq",
                           (self._cid(campaign_id),))
        return [self._attempt_from_row(r) for r in rows]

    def attempt(self, seq: int, campaign_id: str | None = None) -> AttemptRecord:
        """Attempt ``#seq`` of the campaign. Raises StoreError when there is none."""
        rows = self._query("SELECT * FROM attempts WHERE campaign_id = ? AND seq = ?", (self._cid(campaign_id), seq))
        if not rows:
            raise StoreError(f"campaign {self._cid(campaign_id)!r} has no attempt #{seq}")
        return self._attempt_from_row(rows[0])

    def scenario_rows(self, attempt_id: int) -> list[ScenarioRow]:
        """Per-scenario results of one attempt (by its row ``id``), in scenario id order."""
        rows = self._query("SELECT * FROM scenario_results WHERE attempt_id = ? ORDER BY scenario_id", (attempt_id,))
        return [ScenarioRow(attempt_id=r["attempt_id"], scenario_id=r["scenario_id"], group=r["grp"],
                            correct=bool(r["correct"]), failure_kind=r["failure_kind"], speedup=r["speedup"],
                            tflops=r["tflops"], candidate_median_ms=r["candidate_median_ms"]) for r in rows]

    def _count_attempts(self, cid: str, cur: sqlite3.Cursor) -> int:
        return int(cur.execute("SELECT COUNT(*) FROM attempts WHERE campaign_id = ?", (cid,)).fetchone()[0])

    # -- questions, claims, events ------------------------------------------------------------
    def record_question(self, question_id: str, text: str, *, layer: str, trigger: str | None, fired: bool,
                        evidence: str, evidence_data: dict[str, Any] | None = None,
                        campaign_id: str | None = None) -> AskedQuestion:
        """Record a question put to the agent, with the trigger and its evidence."""
        cid = self._cid(campaign_id)
        now = utc_now()

        def write(cur: sqlite3.Cursor) -> int:
            seq = self._count_attempts(cid, cur)
            cur.execute("INSERT INTO questions_asked (campaign_id, created_at, question_id, text, layer, trigger,"
                        " fired, evidence, evidence_json, attempt_seq) VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (cid, now, question_id, text, layer, trigger, int(fired), evidence,
                         _dump(evidence_data or {}), seq))
            return int(cur.lastrowid or 0)

        qid = self._write(write)
        return next(q for q in self.questions_asked(cid) if q.id == qid)

    def questions_asked(self, campaign_id: str | None = None, *, all_campaigns: bool = False) -> list[AskedQuestion]:
        """Questions asked, oldest first: of one campaign, or of every campaign."""
        if all_campaigns:
            rows = self._query("SELECT * FROM questions_asked ORDER BY id")
        else:
            rows = self._query("SELECT * FROM questions_asked WHERE campaign_id = ? ORDER BY id",
                               (self._cid(campaign_id),))
        return [AskedQuestion(id=r["id"], campaign_id=r["campaign_id"], created_at=r["created_at"],
                              question_id=r["question_id"], text=r["text"], layer=r["layer"], trigger=r["trigger"],
                              fired=bool(r["fired"]), evidence=r["evidence"], evidence_data=_load(r["evidence_json"]),
                              attempt_seq=r["attempt_seq"]) for r in rows]

    def record_claim(self, kind: Literal["limit", "done"], text: str, *, goal_met: bool | None,
                     answer: dict[str, Any] | None = None, campaign_id: str | None = None) -> ClaimRecord:
        """Record the agent's explicit claim (``limit`` or ``done``) with the answer it got."""
        if kind not in ("limit", "done"):
            raise StoreError(f"claim kind must be 'limit' or 'done', got {kind!r}")
        cid = self._cid(campaign_id)
        now = utc_now()

        def write(cur: sqlite3.Cursor) -> int:
            seq = self._count_attempts(cid, cur)
            cur.execute("INSERT INTO claims (campaign_id, created_at, kind, text, attempt_seq, goal_met, answer_json)"
                        " VALUES (?,?,?,?,?,?,?)",
                        (cid, now, kind, text, seq, None if goal_met is None else int(goal_met), _dump(answer or {})))
            return int(cur.lastrowid or 0)

        cl_id = self._write(write)
        return next(c for c in self.claims(cid) if c.id == cl_id)

    def update_claim_answer(self, claim_id: int, answer: dict[str, Any]) -> None:
        """Attach the answer (question, goal check) to a recorded claim."""
        self._write(lambda cur: cur.execute("UPDATE claims SET answer_json = ? WHERE id = ?", (_dump(answer), claim_id)))

    def claims(self, campaign_id: str | None = None) -> list[ClaimRecord]:
        """The campaign's claims, oldest first."""
        rows = self._query("SELECT * FROM claims WHERE campaign_id = ? ORDER BY id", (self._cid(campaign_id),))
        return [ClaimRecord(id=r["id"], campaign_id=r["campaign_id"], created_at=r["created_at"], kind=r["kind"],
                            text=r["text"], attempt_seq=r["attempt_seq"],
                            goal_met=None if r["goal_met"] is None else bool(r["goal_met"]),
                            answer=_load(r["answer_json"])) for r in rows]

    def record_event(self, tool: str, *, args: dict[str, Any] | None = None, result: dict[str, Any] | None = None,
                     ok: bool = True, duration_s: float | None = None, campaign_id: str | None = None) -> EventRecord:
        """Record one tool call (name, JSON arguments, result summary, success, duration in seconds)."""
        cid = self._cid(campaign_id)
        now = utc_now()

        def write(cur: sqlite3.Cursor) -> int:
            cur.execute("INSERT INTO events (campaign_id, created_at, tool, args_json, result_json, ok, duration_s)"
                        " VALUES (?,?,?,?,?,?,?)",
                        (cid, now, tool, _dump(args or {}), None if result is None else _dump(result),
                         int(ok), duration_s))
            return int(cur.lastrowid or 0)

        eid = self._write(write)
        rows = self._query("SELECT * FROM events WHERE id = ?", (eid,))
        return self._event_from_row(rows[0])

    @staticmethod
    def _event_from_row(r: dict[str, Any]) -> EventRecord:
        return EventRecord(id=r["id"], campaign_id=r["campaign_id"], created_at=r["created_at"], tool=r["tool"],
                           args=_load(r["args_json"]), result=_load(r["result_json"]), ok=bool(r["ok"]),
                           duration_s=r["duration_s"])

    def events(self, campaign_id: str | None = None) -> list[EventRecord]:
        """The campaign's tool-call events, oldest first."""
        rows = self._query("SELECT * FROM events WHERE campaign_id = ? ORDER BY id", (self._cid(campaign_id),))
        return [self._event_from_row(r) for r in rows]
