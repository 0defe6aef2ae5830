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
