"""attnq evolve: an evolutionary search over one CUDA attention kernel whose mutations are questions.

Layers (each module imports only those above it):

- :mod:`evolve.config`   — ``EvolveConfig`` (flags and ``ATTNQ_EVOLVE_*`` variables) and ``EvaluatorSpec``;
- :mod:`evolve.db`       — population tables in the campaign's SQLite file (runs, programs, tickets,
  evaluations, migrations); every other piece of state is derived from them, so a run survives restarts;
- :mod:`evolve.dedup`    — near-duplicate rejection (normalized-diff similarity, re-added lines);
- :mod:`evolve.bandit`   — which question (per question and per layer) to ask next, by Thompson sampling
  on the measured improvement of the children each question produced;
- :mod:`evolve.select`   — islands, migration, the MAP-Elites archive, exploit/explore/elite selection;
- :mod:`evolve.evaluate` — the evaluator interface, the harness (GPU) and compile-facts (CPU) evaluators,
  the cascade compile -> quick -> full;
- :mod:`evolve.pool`     — where evaluations run: a local pool (one evaluator per GPU) or Dask distributed;
- :mod:`evolve.brief`    — the mutation brief (parent, verdict summary, inspiration, one question);
- :mod:`evolve.mutators` — the knob mutator (no model) and the headless command mutator;
- :mod:`evolve.engine`   — the search: plan a generation, accept children, evaluate, integrate, stop;
- :mod:`evolve.report`   — status, report (best per generation, lineage, per-question gains) and export.

The CLI (``attnq evolve``) and the MCP tools (``evolve_next``/``evolve_submit``) are edges over these.
"""

from __future__ import annotations

from typing import Any


def report_data(store: Any, campaign_id: str) -> dict[str, Any] | None:
    """The hook ``attnq report`` calls (report/data.py ``evolve_from_store``): the latest evolve run of
    ``campaign_id`` in the campaign store's SQLite file (``store.path``) as evolve data
    (:func:`evolve.report.report_data`), or None when that file has no evolve tables or the campaign no run.
    Reads only: a store without evolve tables is not given them."""
    import sqlite3

    from evolve.db import EvolveDB
    from evolve.report import report_data as _data

    con = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    try:
        has = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'evolve_runs'").fetchone()
    finally:
        con.close()
    if not has:
        return None
    with EvolveDB(store.path) as db:
        runs = db.runs(campaign_id)
        return _data(db, runs[-1]) if runs else None
