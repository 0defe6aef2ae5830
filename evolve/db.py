"""Population tables of evolve runs, in the campaign's SQLite file (``<state_dir>/campaign.sqlite``).

Tables (all keyed by ``run_id``; a campaign may hold several runs, e.g. the arms of an ablation):

- ``evolve_runs``: one row per run: campaign, arm, seed, config (JSON), state, stop reason, current
  generation, wall time spent (seconds, summed over restarts);
- ``evolve_programs``: every program: source (archived) and hashes, parent, inspiration, island,
  generation, the question that produced it, status, the stage reached, fitness per stage, behaviour
  descriptors and their archive cell, compile facts and verdict summaries, why a child was rejected;
- ``evolve_tickets``: planned mutations (parent, island, selection, question) and how far each got;
- ``evolve_evaluations``: one row per stage evaluated (compile, quick, full) with wall and GPU seconds;
- ``evolve_migrations``: which elites moved to which island, and when.

Islands, the MAP-Elites archive and the bandit statistics are derived from these rows, never stored
apart, so a restarted run sees exactly the state it left. Same durability rules as harness/store.py
(WAL, ``synchronous=FULL``, one ``BEGIN IMMEDIATE`` transaction per write); its own connection.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal, Self, get_args

from pydantic import BaseModel, Field

from harness.errors import StoreError
from harness.store import STORE_FILENAME, utc_now, validate_campaign_id, write_transaction

ProgramStatus = Literal["pending", "rejected", "failed_compile", "incorrect", "error", "correct"]
TicketState = Literal["planned", "issued", "submitted", "done", "failed"]
RunState = Literal["running", "goal_met", "budget", "stopped", "failed"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS evolve_runs (
    run_id TEXT PRIMARY KEY, campaign_id TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    arm TEXT NOT NULL, seed INTEGER NOT NULL, config_json TEXT NOT NULL, state TEXT NOT NULL, stop_reason TEXT,
    generation INTEGER NOT NULL DEFAULT 0, elapsed_s REAL NOT NULL DEFAULT 0, seed_program_id INTEGER);
CREATE TABLE IF NOT EXISTS evolve_programs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, created_at TEXT NOT NULL,
    source_sha256 TEXT NOT NULL, norm_sha256 TEXT NOT NULL, source_text TEXT NOT NULL, path TEXT NOT NULL,
    parent_id INTEGER, inspiration_id INTEGER, island INTEGER NOT NULL, generation INTEGER NOT NULL,
    ticket_id INTEGER, question_id TEXT, layer TEXT, question_text TEXT, arm TEXT, mutator TEXT NOT NULL,
    status TEXT NOT NULL, stage TEXT, failure_kind TEXT, reject_reason TEXT, similarity REAL,
    added_lines INTEGER, readded_lines INTEGER, fitness_quick REAL, fitness_full REAL,
    parent_fitness_quick REAL, improvement REAL, goal_met INTEGER, descriptors_json TEXT, cell TEXT,
    compile_json TEXT, quick_json TEXT, full_json TEXT);
CREATE TABLE IF NOT EXISTS evolve_tickets (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, generation INTEGER NOT NULL, slot INTEGER NOT NULL,
    island INTEGER NOT NULL, parent_id INTEGER NOT NULL, inspiration_id INTEGER, kind TEXT NOT NULL,
    selection TEXT NOT NULL, question_id TEXT, layer TEXT, question_text TEXT, arm TEXT NOT NULL,
    state TEXT NOT NULL, program_id INTEGER, child_path TEXT, note TEXT, created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL, UNIQUE (run_id, generation, slot));
CREATE TABLE IF NOT EXISTS evolve_evaluations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, program_id INTEGER NOT NULL, stage TEXT NOT NULL,
    created_at TEXT NOT NULL, status TEXT NOT NULL, fitness REAL, goal_met INTEGER, wall_s REAL, gpu_s REAL,
    worker TEXT, result_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS evolve_migrations (
    run_id TEXT NOT NULL, generation INTEGER NOT NULL, program_id INTEGER NOT NULL, from_island INTEGER NOT NULL,
    to_island INTEGER NOT NULL, PRIMARY KEY (run_id, program_id, to_island));
CREATE INDEX IF NOT EXISTS evolve_programs_run ON evolve_programs (run_id, id);
CREATE INDEX IF NOT EXISTS evolve_tickets_run ON evolve_tickets (run_id, generation, slot);
CREATE INDEX IF NOT EXISTS evolve_evaluations_run ON evolve_evaluations (run_id, program_id)
"""


class RunRecord(BaseModel):
    """One evolve run (``config`` is an ``EvolveConfig`` as JSON)."""

    run_id: str
    campaign_id: str
    created_at: str
    updated_at: str
    arm: str
    seed: int
    config: dict[str, Any]
    state: RunState
    stop_reason: str | None = None
    generation: int = Field(default=0, description="last generation planned (0: only the seed)")
    elapsed_s: float = Field(default=0.0, description="wall seconds spent, summed over restarts")
    seed_program_id: int | None = None


class ProgramRecord(BaseModel):
    """One program of the population. Fitness: geomean speedup (or the evaluator's score) per stage."""

    id: int
    run_id: str
    created_at: str
    source_sha256: str
    norm_sha256: str = Field(description="sha256 of the normalized source (comments and spacing dropped)")
    source_text: str
    path: str
    parent_id: int | None = None
    inspiration_id: int | None = None
    island: int
    generation: int
    ticket_id: int | None = None
    question_id: str | None = None
    layer: str | None = None
    question_text: str | None = None
    arm: str | None = None
    mutator: str
    status: ProgramStatus
    stage: str | None = Field(default=None, description="last stage evaluated: compile, quick or full")
    failure_kind: str | None = None
    reject_reason: str | None = None
    similarity: float | None = None
    added_lines: int | None = None
    readded_lines: int | None = None
    fitness_quick: float | None = None
    fitness_full: float | None = None
    parent_fitness_quick: float | None = None
    improvement: float | None = Field(default=None, description="fitness_quick / parent's - 1 (correct children)")
    goal_met: bool | None = None
    descriptors: dict[str, Any] = Field(default_factory=dict)
    cell: str | None = None
    compile: dict[str, Any] | None = None
    quick: dict[str, Any] | None = None
    full: dict[str, Any] | None = None


class TicketRecord(BaseModel):
    """A planned mutation: parent, island, how it was selected, the question, and its progress."""

    id: int
    run_id: str
    generation: int
    slot: int
    island: int
    parent_id: int
    inspiration_id: int | None = None
    kind: Literal["mutation", "crossover"]
    selection: Literal["exploit", "explore", "elite"]
    question_id: str | None = None
    layer: str | None = None
    question_text: str | None = None
    arm: str
    state: TicketState
    program_id: int | None = None
    child_path: str | None = None
    note: str | None = None
    created_at: str
    updated_at: str


class EvaluationRecord(BaseModel):
    """One stage evaluated for one program."""

    id: int
    run_id: str
    program_id: int
    stage: str
    created_at: str
    status: str
    fitness: float | None = None
    goal_met: bool | None = None
    wall_s: float | None = None
    gpu_s: float | None = None
    worker: str | None = None
    result: dict[str, Any] = Field(default_factory=dict)


_JSON_COLS = {"descriptors_json": "descriptors", "compile_json": "compile", "quick_json": "quick",
              "full_json": "full", "config_json": "config", "result_json": "result"}


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def _row(r: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in r.items():
        if k in _JSON_COLS:
            out[_JSON_COLS[k]] = json.loads(v) if v is not None else ({} if k in ("descriptors_json",
                                                                                  "result_json") else None)
        elif k == "goal_met":
            out[k] = None if v is None else bool(v)
        else:
            out[k] = v
    return out


class EvolveDB:
    """Handle on the evolve tables of one campaign store file. Thread-safe (one connection, one lock).

    Raises:
        StoreError: the file cannot be opened, or a read/write fails.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                         check_same_thread=False)
            for pragma in ("journal_mode=WAL", "synchronous=FULL", "busy_timeout=30000"):
                self._conn.execute(f"PRAGMA {pragma}")
            with self._tx() as cur:
                for stmt in filter(str.strip, _SCHEMA.split(";")):
                    cur.execute(stmt)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the evolve tables in {self.path}: {exc}") from exc

    @classmethod
    def for_state_dir(cls, state_dir: Path) -> EvolveDB:
        """The tables in ``<state_dir>/campaign.sqlite`` (the campaign store's file)."""
        return cls(Path(state_dir) / STORE_FILENAME)

    def _tx(self) -> AbstractContextManager[sqlite3.Cursor]:
        return write_transaction(self._conn, self._lock)

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        try:
            with self._tx() as cur:
                cur.execute(sql, params)
                return int(cur.lastrowid or 0)
        except sqlite3.Error as exc:
            raise StoreError(f"evolve store write failed: {exc}") from exc

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self._lock:
            try:
                cur = self._conn.execute(sql, params)
                names = [d[0] for d in cur.description or ()]
                return [_row(dict(zip(names, row))) for row in cur.fetchall()]
            except sqlite3.Error as exc:
                raise StoreError(f"evolve store read failed: {exc}") from exc

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs ---------------------------------------------------------------------------------
    def create_run(self, run_id: str, campaign_id: str, *, arm: str, seed: int, config: dict[str, Any]) -> RunRecord:
        """Insert a new run (state ``running``). Raises StoreError when ``run_id`` exists."""
        validate_campaign_id(run_id)
        if self.run_or_none(run_id) is not None:
            raise StoreError(f"evolve run {run_id!r} exists; resume it or choose another --run name")
        now = utc_now()
        self._write("INSERT INTO evolve_runs (run_id, campaign_id, created_at, updated_at, arm, seed, config_json,"
                    " state) VALUES (?,?,?,?,?,?,?,?)", (run_id, campaign_id, now, now, arm, seed, _dump(config),
                                                         "running"))
        return self.run(run_id)

    def run_or_none(self, run_id: str) -> RunRecord | None:
        """The run, or None."""
        rows = self._query("SELECT * FROM evolve_runs WHERE run_id = ?", (run_id,))
        return RunRecord.model_validate(rows[0]) if rows else None

    def run(self, run_id: str) -> RunRecord:
        """The run. Raises StoreError naming the known runs when there is none."""
        rec = self.run_or_none(run_id)
        if rec is None:
            known = ", ".join(r.run_id for r in self.runs()) or "none"
            raise StoreError(f"no evolve run {run_id!r} (known runs: {known})")
        return rec

    def runs(self, campaign_id: str | None = None) -> list[RunRecord]:
        """Runs (of one campaign, or all), oldest first."""
        if campaign_id is None:
            rows = self._query("SELECT * FROM evolve_runs ORDER BY created_at, run_id")
        else:
            rows = self._query("SELECT * FROM evolve_runs WHERE campaign_id = ? ORDER BY created_at, run_id",
                               (campaign_id,))
        return [RunRecord.model_validate(r) for r in rows]

    def update_run(self, run_id: str, **fields: Any) -> RunRecord:
        """Set ``state``, ``stop_reason``, ``generation``, ``elapsed_s``, ``seed_program_id`` or ``config``."""
        allowed = {"state", "stop_reason", "generation", "elapsed_s", "seed_program_id", "config"}
        bad = set(fields) - allowed
        if bad:
            raise StoreError(f"cannot update run fields {sorted(bad)}")
        if "state" in fields and fields["state"] not in get_args(RunState):  # the row would no longer load
            raise StoreError(f"unknown run state {fields['state']!r}; known: {', '.join(get_args(RunState))}")
        cols = [("config_json" if k == "config" else k) for k in fields]
        vals = [(_dump(v) if k == "config" else v) for k, v in fields.items()]
        self._write(f"UPDATE evolve_runs SET {', '.join(c + ' = ?' for c in cols)}, updated_at = ? WHERE run_id = ?",
                    (*vals, utc_now(), run_id))
        return self.run(run_id)

    # -- programs -----------------------------------------------------------------------------
    def add_program(self, run_id: str, **fields: Any) -> ProgramRecord:
        """Insert a program; JSON fields (descriptors, compile, quick, full) are given as dicts."""
        fields = {("descriptors_json" if k == "descriptors" else k): (_dump(v) if k == "descriptors" else v)
                  for k, v in fields.items()}
        cols = ["run_id", "created_at", *fields]
        pid = self._write(f"INSERT INTO evolve_programs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                          (run_id, utc_now(), *fields.values()))
        return self.program(pid)

    def update_program(self, program_id: int, **fields: Any) -> ProgramRecord:
        """Update columns of a program (dict values of the JSON columns are serialized)."""
        cols, vals = [], []
        for k, v in fields.items():
            col = next((c for c, name in _JSON_COLS.items() if name == k), k)
            cols.append(col)
            vals.append(_dump(v) if col in _JSON_COLS else (None if v is None else (int(v) if k == "goal_met" else v)))
        self._write(f"UPDATE evolve_programs SET {', '.join(c + ' = ?' for c in cols)} WHERE id = ?",
                    (*vals, program_id))
        return self.program(program_id)

    def program(self, program_id: int) -> ProgramRecord:
        """Program ``program_id``. Raises StoreError when absent."""
        rows = self._query("SELECT * FROM evolve_programs WHERE id = ?", (program_id,))
        if not rows:
            raise StoreError(f"no evolve program #{program_id}")
        return ProgramRecord.model_validate(rows[0])

    def programs(self, run_id: str, *, status: str | None = None) -> list[ProgramRecord]:
        """The run's programs in id order (optionally of one status)."""
        if status is None:
            rows = self._query("SELECT * FROM evolve_programs WHERE run_id = ? ORDER BY id", (run_id,))
        else:
            rows = self._query("SELECT * FROM evolve_programs WHERE run_id = ? AND status = ? ORDER BY id",
                               (run_id, status))
        return [ProgramRecord.model_validate(r) for r in rows]

    # -- tickets ------------------------------------------------------------------------------
    def add_ticket(self, run_id: str, **fields: Any) -> TicketRecord:
        """Insert a planned mutation (state ``planned``)."""
        now = utc_now()
        cols = ["run_id", "state", "created_at", "updated_at", *fields]
        tid = self._write(f"INSERT INTO evolve_tickets ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                          (run_id, "planned", now, now, *fields.values()))
        return self.ticket(tid)

    def update_ticket(self, ticket_id: int, **fields: Any) -> TicketRecord:
        """Update a ticket's columns (state, program_id, child_path, note, question fields)."""
        cols = list(fields)
        self._write(f"UPDATE evolve_tickets SET {', '.join(c + ' = ?' for c in cols)}, updated_at = ? WHERE id = ?",
                    (*fields.values(), utc_now(), ticket_id))
        return self.ticket(ticket_id)

    def ticket(self, ticket_id: int) -> TicketRecord:
        """Ticket ``ticket_id``. Raises StoreError when absent."""
        rows = self._query("SELECT * FROM evolve_tickets WHERE id = ?", (ticket_id,))
        if not rows:
            raise StoreError(f"no evolve ticket #{ticket_id}")
        return TicketRecord.model_validate(rows[0])

    def tickets(self, run_id: str, generation: int | None = None) -> list[TicketRecord]:
        """The run's tickets (of one generation), in (generation, slot) order."""
        if generation is None:
            rows = self._query("SELECT * FROM evolve_tickets WHERE run_id = ? ORDER BY generation, slot", (run_id,))
        else:
            rows = self._query("SELECT * FROM evolve_tickets WHERE run_id = ? AND generation = ? ORDER BY slot",
                               (run_id, generation))
        return [TicketRecord.model_validate(r) for r in rows]

    # -- evaluations, migrations --------------------------------------------------------------
    def add_evaluation(self, run_id: str, program_id: int, stage: str, *, status: str, fitness: float | None,
                       goal_met: bool | None, wall_s: float, gpu_s: float, worker: str,
                       result: dict[str, Any]) -> int:
        """Record one stage evaluated; returns the row id."""
        return self._write("INSERT INTO evolve_evaluations (run_id, program_id, stage, created_at, status, fitness,"
                           " goal_met, wall_s, gpu_s, worker, result_json) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                           (run_id, program_id, stage, utc_now(), status, fitness,
                            None if goal_met is None else int(goal_met), wall_s, gpu_s, worker, _dump(result)))

    def evaluations(self, run_id: str) -> list[EvaluationRecord]:
        """The run's stage evaluations, oldest first."""
        rows = self._query("SELECT * FROM evolve_evaluations WHERE run_id = ? ORDER BY id", (run_id,))
        return [EvaluationRecord.model_validate(r) for r in rows]

    def add_migration(self, run_id: str, generation: int, program_id: int, from_island: int, to_island: int) -> None:
        """Record that ``program_id`` joined ``to_island`` (idempotent)."""
        self._write("INSERT OR IGNORE INTO evolve_migrations VALUES (?,?,?,?,?)",
                    (run_id, generation, program_id, from_island, to_island))

    def migrations(self, run_id: str) -> list[dict[str, Any]]:
        """``{generation, program_id, from_island, to_island}`` rows, oldest first."""
        return self._query("SELECT generation, program_id, from_island, to_island FROM evolve_migrations "
                           "WHERE run_id = ? ORDER BY generation, to_island, program_id", (run_id,))
