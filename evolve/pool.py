"""Where evaluations run: one host (:class:`LocalPool`) or a Dask cluster (:class:`DaskPool`).

Both offer one blocking, thread-safe call, ``run(spec, source_text, name, stage) -> StageResult``; the
engine drives many children at once from a thread pool, so compiles of later children go on (CPU)
while earlier children hold the GPUs.

- **LocalPool**: one evaluator per GPU: a GPU stage takes a device index from a queue holding each of
  ``gpus`` once, runs pinned to it (``verify_kernel`` also takes the per-GPU file lock, so other attnq
  processes on the host are respected) and gives it back; compiles run on up to ``compile_workers``
  CPU threads at once.
- **DaskPool**: Dask distributed (no home-made RPC). With ``scheduler="tcp://host:8786"`` it uses a
  running cluster whose GPU workers declare the resource ``GPU=1`` and each see one GPU, e.g.
  ``CUDA_VISIBLE_DEVICES=1 dask worker tcp://host:8786 --nthreads 2 --resources GPU=1`` (the worker
  evaluates on device ``ATTNQ_GPU``, default 0, of what it sees; attnq and nvcc must be installed
  there). Without a scheduler it starts a local cluster with one in-process worker per GPU (worker
  ``i`` evaluates on ``gpus[i]``). GPU stages request ``resources={"GPU": 1}``; compiles request none.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any, Protocol

from evolve.config import EvaluatorSpec, Stage
from evolve.evaluate import StageResult, run_stage
from harness.errors import InputError
from harness.logging import get_logger

log = get_logger("attnq.evolve.pool")


class EvalPool(Protocol):
    """A place to run stages. ``gpu_count``: how many GPU stages can run at once."""

    gpu_count: int
    description: str

    def run(self, spec: EvaluatorSpec, source_text: str, name: str, stage: Stage) -> StageResult: ...

    def close(self) -> None: ...


class LocalPool:
    """One evaluator per GPU of this host plus ``compile_workers`` compile threads (module docstring)."""

    def __init__(self, gpus: list[int], compile_workers: int = 4) -> None:
        if not gpus:
            raise InputError("the local pool needs at least one GPU index")
        self.gpus = list(gpus)
        self.gpu_count = len(gpus)
        self._free: queue.Queue[int] = queue.Queue()
        for g in self.gpus:
            self._free.put(g)
        self._compile_slots = threading.Semaphore(compile_workers)
        self.cancel = threading.Event()
        self.description = f"local pool: GPUs {','.join(map(str, gpus))}, {compile_workers} compile threads"

    def run(self, spec: EvaluatorSpec, source_text: str, name: str, stage: Stage) -> StageResult:
        """Run one stage here (blocks until a compile slot or a GPU is free)."""
        if stage == "compile":
            with self._compile_slots:
                return run_stage(spec, source_text, name, stage)
        gpu = self._free.get()
        try:
            return run_stage(spec, source_text, name, stage, gpu=gpu, cancel=self.cancel)
        finally:
            self._free.put(gpu)

    def close(self) -> None:
        """Ask running verifications to stop (they end between scenarios)."""
        self.cancel.set()


def _dask_stage(spec_json: str, source_text: str, name: str, stage: str, gpu_map: dict[str, int] | None) -> dict:
    """Runs on a Dask worker: pick this worker's GPU, run the stage, return the StageResult as a dict."""
    gpu = 0
    if stage != "compile":
        from distributed import get_worker

        wname = str(get_worker().name)
        gpu = gpu_map[wname] if gpu_map and wname in gpu_map else int(os.environ.get("ATTNQ_GPU", "0"))
    spec = EvaluatorSpec.model_validate_json(spec_json)
    return run_stage(spec, source_text, name, stage, gpu=gpu).model_dump(mode="json")  # type: ignore[arg-type]


class DaskPool:
    """Stages as Dask tasks (module docstring). Raises InputError when Dask is not installed or the
    scheduler cannot be reached."""

    def __init__(self, gpus: list[int], *, scheduler: str | None = None, compile_workers: int = 4,
                 connect_timeout_s: float = 30.0) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise InputError("the dask backend needs Dask: pip install 'dask[distributed]' "
                             "(or pip install -e '.[evolve]')") from None
        self.cluster: Any = None
        self.gpu_map: dict[str, int] | None = None
        if scheduler:
            check_scheduler_address(scheduler)
            try:
                self.client = Client(scheduler, timeout=f"{connect_timeout_s}s")
            except (OSError, TimeoutError) as exc:
                raise InputError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
            workers = self.client.scheduler_info().get("workers", {})
            self.gpu_count = max(1, sum(int(w.get("resources", {}).get("GPU", 0)) for w in workers.values()))
            self.description = f"dask cluster {scheduler}: {len(workers)} workers, {self.gpu_count} GPU slots"
        else:
            per_worker = 1 + -(-compile_workers // len(gpus))  # one GPU task + a share of the compiles
            self.cluster = LocalCluster(n_workers=len(gpus), threads_per_worker=per_worker, processes=False,
                                        resources={"GPU": 1}, dashboard_address=None)
            self.client = Client(self.cluster)
            names = sorted(str(w.name) for w in self.cluster.workers.values())
            self.gpu_map = dict(zip(names, gpus))
            self.gpu_count = len(gpus)
            self.description = f"dask local cluster: {len(gpus)} workers (GPUs {','.join(map(str, gpus))})"
        log.info("dask_pool", description=self.description)

    def run(self, spec: EvaluatorSpec, source_text: str, name: str, stage: Stage) -> StageResult:
        """Submit one stage as a task (GPU stages with ``resources={"GPU": 1}``) and wait for it."""
        kwargs: dict[str, Any] = {"pure": False, "key": f"attnq-{stage}-{name}-{os.urandom(4).hex()}"}
        if stage != "compile":
            kwargs["resources"] = {"GPU": 1}
        fut = self.client.submit(_dask_stage, spec.model_dump_json(), source_text, name, stage, self.gpu_map,
                                 **kwargs)
        return StageResult.model_validate(fut.result())

    def close(self) -> None:
        """Close the client (and the local cluster this pool started)."""
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()


def check_scheduler_address(scheduler: str) -> None:
    """Refuse a scheduler address Dask cannot parse (``bogus``, ``tcp://host`` without a port) before a
    ``Client`` is made: distributed's Client raises a bare ValueError for it, and a Client that failed
    half-way can deadlock the next one in the same process (its __del__ stops the shared event loop).

    Raises:
        InputError: naming the address and the form it needs.
    """
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(scheduler)
        if scheme in ("tcp", "tls"):
            parse_host_port(location)
    except ValueError as exc:  # "missing port number in address 'x'", "invalid address ..."
        raise InputError(f"--scheduler {scheduler!r} is not a Dask scheduler address ({exc}): "
                         "give tcp://HOST:PORT") from None


def make_pool(gpus: list[int], *, backend: str = "local", scheduler: str | None = None,
              compile_workers: int = 4, connect_timeout_s: float = 30.0) -> EvalPool:
    """The pool for a run's placement settings (``connect_timeout_s``: how long to try to reach ``scheduler``)."""
    if backend == "dask" or scheduler:
        return DaskPool(gpus, scheduler=scheduler, compile_workers=compile_workers, connect_timeout_s=connect_timeout_s)
    return LocalPool(gpus, compile_workers=compile_workers)
