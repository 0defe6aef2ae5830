"""Evaluation through Dask distributed: a local cluster whose workers declare GPU=1 runs the same search
as the local pool (the compile-facts evaluator, a deterministic function of each program's real nvcc
build), so the two backends give the same population; a running scheduler is reached by address."""

from __future__ import annotations

import pytest

from evolve.evaluate import run_stage
from evolve.pool import DaskPool
from harness.errors import InputError
from tests.evolve_support import SEED, fingerprint, knob_config, run_knob, state_dir

distributed = pytest.importorskip("distributed", reason="the dask backend needs `pip install -e '.[dev]'`")


def test_a_dask_local_cluster_runs_the_same_search_as_the_local_pool(tmp_path_factory: pytest.TempPathFactory) -> None:
    cfg = knob_config(seed=11, max_generations=2, children_per_generation=3)
    pool = DaskPool([0, 1], compile_workers=2)
    try:
        workers = pool.client.scheduler_info()["workers"].values()
        assert sorted(w["resources"]["GPU"] for w in workers) == [1, 1] and pool.gpu_count == 2
        db_dask, rec = run_knob(state_dir(tmp_path_factory, "evolve-dask"), "d", cfg, pool=pool)
    finally:
        pool.close()
    assert rec.state == "budget" and rec.generation == 2
    evals = db_dask.evaluations("d")
    assert {e.worker.rsplit(":", 1)[-1] for e in evals if e.stage != "compile"} <= {"gpu0", "gpu1"}
    assert all(":" not in e.worker for e in evals if e.stage == "compile")  # compiles ask for no GPU
    db_local, _ = run_knob(state_dir(tmp_path_factory, "evolve-dask-local"), "d", cfg)
    assert fingerprint(db_dask, "d") == fingerprint(db_local, "d")


def test_a_running_scheduler_is_used_by_address(tmp_path_factory: pytest.TempPathFactory) -> None:
    st = state_dir(tmp_path_factory, "evolve-dask-sched")
    spec = knob_config().evaluator_spec(str(st))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, resources={"GPU": 1},
                                  dashboard_address=None) as cluster:
        pool = DaskPool([0], scheduler=cluster.scheduler_address)
        try:
            assert pool.gpu_count == 1 and cluster.scheduler_address in pool.description
            got = pool.run(spec, SEED.read_text(), "seed", "quick")
        finally:
            pool.close()
    want = run_stage(spec, SEED.read_text(), "seed", "quick")
    assert got.status == "correct" and got.fitness == want.fitness and got.worker.endswith(":gpu0")


@pytest.mark.parametrize("address", ["bogus", "tcp://host-without-port"])
def test_a_malformed_scheduler_address_is_an_input_error(address: str) -> None:
    with pytest.raises(InputError, match="is not a Dask scheduler address") as info:
        DaskPool([0], scheduler=address, connect_timeout_s=5.0)
    assert "tcp://HOST:PORT" in info.value.message
