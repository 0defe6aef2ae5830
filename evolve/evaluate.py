"""Evaluating a program: the evaluator interface, two evaluators, and the cascade.

Cascade (:func:`next_stage`): ``compile`` (CPU, nvcc: cheap, catches most broken children) ->
``quick`` (the quick suite on a GPU) -> ``full`` (the full suite) only for children whose quick
fitness beats their parent's by more than ``full_min_gain``; the seed always goes to ``full``.

Evaluators (:class:`Evaluator`: ``compile(path)`` and ``run(path, stage, gpu)``):

- :class:`HarnessEvaluator` — the real one: ``harness.compile.compile_kernel`` then
  ``harness.verify.verify_kernel`` on the stage's suite, pinned to one GPU (verify holds the per-GPU
  lock). Fitness = the verdict's geomean speedup vs the original (or vs ``goal_against``'s anchor) on a
  correct run; an incorrect run has no fitness and keeps its most frequent failure kind.
- :class:`CompileFactsEvaluator` — a CPU stand-in for machines without a GPU (tests, dry runs): the
  same real nvcc build, and as fitness the documented pure function :func:`compile_facts_score` of
  the build's ptxas facts. It says nothing about speed; it exists so the search, the pools and Dask
  can be exercised end to end on real compiles.

:func:`run_stage` is what pool workers call: it stages the source text into the worker's state
directory and runs one stage, so it works the same in a thread, a process or on a Dask worker.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from evolve.config import EvaluatorSpec, Stage
from harness.errors import AttnqError, InputError, VerifyError
from harness.store import COMPILE_FAILURE_CODES

StageStatus = Literal["compiled", "failed_compile", "correct", "incorrect", "error"]


class StageResult(BaseModel):
    """The outcome of one stage for one program."""

    stage: Stage
    status: StageStatus
    fitness: float | None = Field(default=None, description="geomean speedup (or the evaluator's score); "
                                                            "None unless correct")
    goal_met: bool = False
    failure_kind: str | None = Field(default=None, description="compile error code, or the most frequent "
                                                               "scenario failure kind")
    message: str = ""
    failed: list[str] = Field(default_factory=list, description="ids of failed scenarios")
    worst: list[str] = Field(default_factory=list, description="lowest-speedup scenario ids, worst first")
    geomean_by_group: dict[str, float] = Field(default_factory=dict)
    num_scenarios: int | None = None
    num_correct: int | None = None
    suite: str | None = None
    facts: dict[str, Any] | None = Field(default=None, description="compile facts summary (facts_summary)")
    wall_s: float = 0.0
    gpu_s: float = Field(default=0.0, description="seconds the stage held a GPU")
    worker: str = Field(default="", description="host:gpu that ran it")


class Evaluator(Protocol):
    """What the cascade needs. ``run`` is only called after a successful ``compile``."""

    spec: EvaluatorSpec

    def compile(self, path: Path) -> StageResult: ...

    def run(self, path: Path, stage: Stage, gpu: int, cancel: threading.Event | None = None) -> StageResult: ...


def facts_summary(result: Any) -> dict[str, Any]:
    """The compile facts a brief and the descriptors need, from a ``harness.compile.CompileResult``."""
    kernels = []
    for k in result.kernels:
        kernels.append({"name": k.name, "registers": k.registers, "shared_mem_bytes": k.shared_mem_bytes,
                        "stack_frame_bytes": k.stack_frame_bytes, "spill_store_bytes": k.spill_store_bytes,
                        "spill_load_bytes": k.spill_load_bytes, "hgmma": k.sass.hgmma if k.sass else None,
                        "hmma": k.sass.hmma if k.sass else None})
    return {"kernels": kernels, "sass_available": result.sass_available, "build_hash": result.build_hash,
            "build_time_s": result.build_time_s, "warnings": len(result.warnings)}


def compile_facts_score(facts: dict[str, Any]) -> float:
    """The CompileFactsEvaluator's fitness: a pure, documented function of ptxas facts (not a speed).

    ``1 + mean over kernels of [log2(1 + smem / 1 KiB) / 8 - registers / 512 - (spill stores + spill
    loads + stack frame) / 8 KiB]``, floored at 0.01: more static shared memory scores higher, register
    pressure and local memory lower. Raises ValueError for a build without kernels.
    """
    kernels = facts.get("kernels") or []
    if not kernels:
        raise ValueError("compile_facts_score needs at least one kernel")
    terms = [math.log2(1 + k["shared_mem_bytes"] / 1024) / 8 - k["registers"] / 512
             - (k["spill_store_bytes"] + k["spill_load_bytes"] + k["stack_frame_bytes"]) / 8192 for k in kernels]
    return round(max(0.01, 1 + sum(terms) / len(terms)), 6)


def _state_dir(spec: EvaluatorSpec) -> Path:
    if spec.state_dir:
        return Path(spec.state_dir)
    from harness.config import Settings

    return Settings().state_dir


def _compile(spec: EvaluatorSpec, path: Path) -> StageResult:
    from harness.compile import compile_kernel

    t0 = time.monotonic()
    try:
        res = compile_kernel(path, arch=spec.arch, cache_dir=_state_dir(spec) / "build", policy=True)
    except InputError as err:  # empty / oversized child: the child's fault, not the run's
        return StageResult(stage="compile", status="failed_compile", failure_kind=err.code, message=err.message,
                           wall_s=round(time.monotonic() - t0, 3))
    except AttnqError as err:
        if err.code not in COMPILE_FAILURE_CODES:
            raise  # toolchain missing and the like: the run cannot go on
        first = (err.details.get("diagnostics") or [{}])[0]
        where = f" ({first.get('file', '')}:{first.get('line')})" if first.get("line") else ""
        return StageResult(stage="compile", status="failed_compile", failure_kind=err.code,
                           message=err.message[:500] + where, wall_s=round(time.monotonic() - t0, 3))
    return StageResult(stage="compile", status="compiled", facts=facts_summary(res),
                       wall_s=round(time.monotonic() - t0, 3))


class HarnessEvaluator:
    """compile_kernel + verify_kernel on one GPU (see the module docstring). Raises NoGpuError and other
    run-stopping AttnqErrors from ``run``; failures of the candidate are in the StageResult."""

    def __init__(self, spec: EvaluatorSpec) -> None:
        self.spec = spec

    def compile(self, path: Path) -> StageResult:
        """Build ``path`` (cached); ``failed_compile`` with the error code on a compile/policy/ABI error."""
        return _compile(self.spec, path)

    def run(self, path: Path, stage: Stage, gpu: int, cancel: threading.Event | None = None) -> StageResult:
        """Verify ``path`` on the stage's suite on device ``gpu``."""
        from harness.config import Settings
        from harness.verify import VerifyOptions, verify_kernel

        spec = self.spec
        against = spec.goal_against
        options = VerifyOptions(suite=spec.quick_suite if stage == "quick" else spec.full_suite, gpu=gpu,
                                arch=spec.arch, anchors=[] if against == "original" else [against],
                                goal_speedup=spec.goal_speedup, goal_against=against,
                                scenario_timeout_s=spec.scenario_timeout_s)
        settings = Settings(state=Path(spec.state_dir)) if spec.state_dir else Settings()
        t0 = time.monotonic()
        try:
            v = verify_kernel(path, options, settings=settings, cancel=cancel)
        except VerifyError as err:  # the worker could not load or start this child: the child's failure
            return StageResult(stage=stage, status="error", failure_kind=err.code, message=err.message[:500],
                               wall_s=round(time.monotonic() - t0, 3))
        wall = time.monotonic() - t0
        fitness = None
        if v.status == "correct":
            fitness = v.geomean_speedup if against == "original" else v.geomean_vs_anchor.get(against)
        kinds = Counter(s.failure_kind for s in v.scenarios if not s.correct and s.failure_kind)
        by_group = v.geomean_by_group if against == "original" else v.geomean_vs_anchor_by_group.get(against, {})
        return StageResult(stage=stage, status=v.status, fitness=fitness, goal_met=v.goal.met,
                           failure_kind=kinds.most_common(1)[0][0] if kinds else None,
                           message=v.message or v.goal.reason, failed=v.failed[:20], worst=v.worst[:5],
                           geomean_by_group=dict(by_group), num_scenarios=v.num_scenarios,
                           num_correct=v.num_correct, suite=v.suite, wall_s=round(wall, 3),
                           gpu_s=round(max(0.0, v.wall_s - v.compile_s), 3))


class CompileFactsEvaluator:
    """The CPU stand-in (see the module docstring): real nvcc builds, fitness = compile_facts_score."""

    def __init__(self, spec: EvaluatorSpec) -> None:
        self.spec = spec

    def compile(self, path: Path) -> StageResult:
        """Build ``path`` (cached); ``failed_compile`` with the error code on a compile/policy/ABI error."""
        return _compile(self.spec, path)

    def run(self, path: Path, stage: Stage, gpu: int, cancel: threading.Event | None = None) -> StageResult:
        """Score the build's facts; the score does not depend on ``stage`` or ``gpu``."""
        t0 = time.monotonic()
        built = _compile(self.spec, path)
        if built.status != "compiled" or built.facts is None:
            return built.model_copy(update={"stage": stage})
        score = compile_facts_score(built.facts)
        return StageResult(stage=stage, status="correct", fitness=score,
                           goal_met=stage == "full" and score >= self.spec.goal_speedup,
                           suite=f"compile-facts:{stage}", num_scenarios=1, num_correct=1, facts=built.facts,
                           message=f"compile-facts score {score:.4f}", wall_s=round(time.monotonic() - t0, 3))


def make_evaluator(spec: EvaluatorSpec) -> Evaluator:
    """The evaluator named by ``spec.kind``."""
    return HarnessEvaluator(spec) if spec.kind == "harness" else CompileFactsEvaluator(spec)


def next_stage(done: list[StageResult], *, parent_quick: float | None, full_stage: bool, full_min_gain: float,
               is_seed: bool) -> Stage | None:
    """The cascade: which stage to run after ``done`` (None: the program's evaluation is over).

    compile first; quick after a successful compile; full after a correct quick when the program is
    the seed, or when ``full_stage`` is on and its quick fitness > ``parent_quick * (1 + full_min_gain)``.
    """
    if not done:
        return "compile"
    last = done[-1]
    if last.stage == "compile":
        return "quick" if last.status == "compiled" else None
    if last.stage == "quick":
        if last.status != "correct" or last.fitness is None or not full_stage:
            return None
        if is_seed or parent_quick is None:
            return "full"
        return "full" if last.fitness > parent_quick * (1 + full_min_gain) else None
    return None


def stage_source(spec: EvaluatorSpec, source_text: str, name: str) -> Path:
    """Write ``source_text`` to ``<state_dir>/evolve/staged/<name>-<sha12>.cu`` (once) and return the path."""
    sha = hashlib.sha256(source_text.encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80] or "program"
    path = _state_dir(spec) / "evolve" / "staged" / f"{safe}-{sha}.cu"
    if not path.is_file() or path.read_text(encoding="utf-8", errors="replace") != source_text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(source_text, encoding="utf-8")
        os.replace(tmp, path)
    return path


def run_stage(spec: EvaluatorSpec, source_text: str, name: str, stage: Stage, gpu: int = 0,
              cancel: threading.Event | None = None) -> StageResult:
    """Stage the source and run one stage of it (what local pool threads and Dask workers execute).

    Raises:
        AttnqError: what stops a run rather than fails a child (no GPU, toolchain missing, lock timeout).
    """
    path = stage_source(spec, source_text, name)
    ev = make_evaluator(spec)
    res = ev.compile(path) if stage == "compile" else ev.run(path, stage, gpu, cancel)
    where = socket.gethostname() + ("" if stage == "compile" else f":gpu{gpu}")
    return res.model_copy(update={"worker": where})
