"""Shared pieces of the evolve tests: the knob seed, a state directory sharing one build cache, runs
with the compile-facts evaluator (real nvcc builds, fitness = evolve.evaluate.compile_facts_score)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evolve.config import EvolveConfig, parse_knob
from evolve.db import EvolveDB, RunRecord
from evolve.driver import run_search, start_or_resume
from evolve.mutators import KnobMutator
from evolve.pool import EvalPool, LocalPool

SEED = Path(__file__).resolve().parent / "data" / "evolve" / "knob_kernel.cu"
#: TILE=65536 is 256 KiB of static shared memory: ptxas refuses it (a real compile failure).
KNOBS = ("TILE=256,1024,4096,16384,65536", "UNROLL=1,2,4", "BLOCK=64,128,256")


def state_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A fresh state directory whose ``build`` cache is shared by every evolve test of the session."""
    st = tmp_path_factory.mktemp(name)
    shared = tmp_path_factory.getbasetemp() / "attnq-evolve-build"
    shared.mkdir(exist_ok=True)
    (st / "build").symlink_to(shared, target_is_directory=True)
    return st


def knob_config(**kw: Any) -> EvolveConfig:
    """A knob run scored by compile facts; the goal (9x) is out of reach unless a test sets one."""
    base: dict[str, Any] = {"evaluator": "compile_facts", "knobs": [parse_knob(k) for k in KNOBS],
                            "compile_workers": 2, "goal_speedup": 9.0, "islands": 2, "children_per_generation": 4,
                            "migration_interval": 1}
    base.update(kw)
    return EvolveConfig(**base)


def run_knob(st: Path, run_id: str, cfg: EvolveConfig, pool: EvalPool | None = None) -> tuple[EvolveDB, RunRecord]:
    """Start (or resume) ``run_id`` and run it to its stop condition."""
    db = EvolveDB.for_state_dir(st)
    search, _ = start_or_resume(db, campaign_id="default", state_dir=st, cfg=cfg, run_id=run_id, seed_path=SEED)
    own = pool is None
    pool = pool or LocalPool([0], compile_workers=2)
    try:
        rec = run_search(search, pool, KnobMutator(search.cfg.knobs))
    finally:
        if own:
            pool.close()
    return db, rec


def fingerprint(db: EvolveDB, run_id: str) -> list[tuple[Any, ...]]:
    """What must be identical between two runs with the same seed: lineage, questions, sources, outcomes."""
    programs = db.programs(run_id)
    base = programs[0].id
    return [(p.id - base, None if p.parent_id is None else p.parent_id - base, p.generation, p.island, p.question_id,
             p.norm_sha256, p.status, p.fitness_quick, p.fitness_full) for p in programs]
