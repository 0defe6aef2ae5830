"""GPU test of the harness evaluator under `attnq evolve`: a one-generation knob search from the original
kernel on the quick suite (seed + 2 children, about a minute on an H200).

The seed is the original itself, so its quick fitness is an A/A measurement: within timing noise of 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.config import EvolveConfig, parse_knob
from evolve.db import EvolveDB
from evolve.driver import run_search, start_or_resume
from evolve.mutators import KnobMutator
from evolve.pool import LocalPool
from harness import ORIGINAL_KERNEL

pytestmark = pytest.mark.gpu


def test_a_knob_generation_on_the_gpu(tmp_path: Path) -> None:
    cfg = EvolveConfig(evaluator="harness", knobs=[parse_knob("kLdS=4,8"), parse_knob("kLdO=4,8")], islands=1,
                       children_per_generation=2, max_generations=1, full_stage=False, gpus=[0], compile_workers=2)
    db = EvolveDB.for_state_dir(tmp_path)
    search, _ = start_or_resume(db, campaign_id="default", state_dir=tmp_path, cfg=cfg, run_id="gpu",
                                seed_path=ORIGINAL_KERNEL)
    rec = run_search(search, LocalPool([0], compile_workers=2), KnobMutator(search.cfg.knobs))
    assert rec.state == "budget", rec.stop_reason
    programs = db.programs("gpu")
    seed = programs[0]
    assert seed.status == "correct" and seed.quick["num_correct"] == seed.quick["num_scenarios"] == 10
    assert 0.85 < seed.fitness_quick < 1.15 and seed.quick["geomean_by_group"]
    assert seed.descriptors["wgmma"] is False and seed.descriptors["registers"] > 0
    kids = [p for p in programs if p.parent_id == seed.id and p.status != "rejected"]
    assert kids and all(p.status == "correct" and p.fitness_quick for p in kids)
    evals = [e for e in db.evaluations("gpu") if e.stage == "quick"]
    assert all(e.gpu_s > 0 and e.worker.endswith(":gpu0") for e in evals)
