"""Configuration of an evolve run: ``EvolveConfig`` (every ``attnq evolve`` flag; ``ATTNQ_EVOLVE_<FIELD>``
variables give the defaults, which the MCP tools use) and the picklable ``EvaluatorSpec`` sent to workers.

A run stores its config (JSON) in ``evolve_runs``; resuming a run keeps it, except the budget and the
evaluation placement (GPUs, backend, scheduler), which a resume may change.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from harness.anchors import GoalAgainst

Arm = Literal["question", "plain", "none"]
MutatorKind = Literal["knob", "command", "mcp"]
EvaluatorKind = Literal["harness", "compile_facts"]
Stage = Literal["compile", "quick", "full"]

#: The instruction of the ``plain`` ablation arm (the ``none`` arm gives no instruction at all).
PLAIN_INSTRUCTION = "Make it faster."
#: Fields a resumed run takes from the new invocation instead of the stored config.
RESUMABLE_FIELDS = ("max_evaluations", "max_gpu_hours", "max_wall_s", "max_generations", "gpus", "backend",
                    "scheduler", "scheduler_timeout_s", "compile_workers", "mutator_cmd", "parallel_mutators",
                    "mutator_timeout_s")
_KNOB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class KnobSpec(BaseModel):
    """A compile-time parameter the knob mutator may change: one name, or several names tied together
    (``values`` then holds one tuple per setting, e.g. ``kBM,kWarps = 32:2, 64:4``)."""

    names: list[str] = Field(min_length=1)
    values: list[list[int]] = Field(min_length=1, description="settings; each has one integer per name")

    @model_validator(mode="after")
    def _shape(self) -> KnobSpec:
        for n in self.names:
            if not _KNOB_NAME.match(n):
                raise ValueError(f"knob name {n!r} is not a C identifier")
        for v in self.values:
            if len(v) != len(self.names):
                raise ValueError(f"knob {','.join(self.names)}: setting {v} needs {len(self.names)} values")
        return self

    @property
    def key(self) -> str:
        """``knob:NAME`` (or ``knob:A,B`` when tied): the knob's arm id in the bandit."""
        return "knob:" + ",".join(self.names)


def parse_knob(text: str) -> KnobSpec:
    """``NAME=v1,v2,...`` or ``A,B=a1:b1,a2:b2`` -> KnobSpec.

    Raises:
        ValueError: no ``=``, a bad name, a value that is not an integer, or a tuple of the wrong size.
    """
    if "=" not in text:
        raise ValueError(f"knob {text!r}: expected NAME=v1,v2,... (or A,B=a1:b1,a2:b2)")
    lhs, rhs = text.split("=", 1)
    names = [n.strip() for n in lhs.split(",") if n.strip()]
    try:
        values = [[int(x, 0) for x in item.split(":")] for item in rhs.split(",") if item.strip()]
    except ValueError:
        raise ValueError(f"knob {text!r}: values must be integers") from None
    return KnobSpec(names=names, values=values)


class EvaluatorSpec(BaseModel):
    """What an evaluation worker needs to build an evaluator (picklable; travels to Dask workers)."""

    kind: EvaluatorKind = "harness"
    quick_suite: str = "quick"
    full_suite: str = "full"
    goal_speedup: float = Field(default=1.0, gt=0)
    goal_against: GoalAgainst = "original"
    arch: str = "sm_90a"
    scenario_timeout_s: float = Field(default=60.0, gt=0)
    state_dir: str | None = Field(default=None, description="where workers build and stage sources; "
                                                            "None: the worker's own ATTNQ_STATE / workspace")


class EvolveConfig(BaseSettings):
    """Every setting of a run. Ratios are normalized (exploit + explore + elite need not sum to 1)."""

    model_config = SettingsConfigDict(env_prefix="ATTNQ_EVOLVE_", extra="ignore")

    seed: int = Field(default=0, description="one seed for selection, questions and the knob mutator")
    arm: Arm = Field(default="question", description="question (a bank question), plain ('Make it faster.') or "
                                                     "none (no instruction): the ablation arms")
    group: str | None = Field(default=None, description="name shared by the arms of one ablation")
    mutator: MutatorKind = "knob"
    mutator_cmd: str | None = Field(default=None, description="headless mutator: brief on stdin, child on stdout")
    parallel_mutators: int = Field(default=2, ge=1, le=64)
    mutator_timeout_s: float = Field(default=1800.0, gt=0)
    knobs: list[KnobSpec] = Field(default_factory=list, description="knob domains; empty: found in the source")
    # population
    islands: int = Field(default=2, ge=1, le=64)
    island_size: int = Field(default=8, ge=1, le=1000)
    children_per_generation: int = Field(default=4, ge=1, le=1000)
    migration_interval: int = Field(default=3, ge=1, description="generations between migrations")
    migration_count: int = Field(default=1, ge=0, description="elites each island sends to the next one")
    exploit_ratio: float = Field(default=0.7, ge=0)
    explore_ratio: float = Field(default=0.2, ge=0)
    elite_ratio: float = Field(default=0.1, ge=0)
    inspiration_rate: float = Field(default=0.3, ge=0, le=1, description="briefs that show another island's best")
    crossover_rate: float = Field(default=0.15, ge=0, le=1, description="of those, briefs whose question is a "
                                                                        "crossover question")
    # questions
    question_triggers: list[str] = Field(default_factory=lambda: ["stall", "declared_limit"],
                                         description="bank questions fitting these triggers are mutation questions")
    bandit_min_gain: float = Field(default=0.01, ge=0, description="a child improved when its quick fitness "
                                                                   ">= parent's x (1 + this)")
    # near duplicates
    duplicate_similarity: float = Field(default=0.995, gt=0, le=1, description="model mutators: a child whose "
                                        "normalized-diff similarity to a known program is >= this is rejected")
    readd_max_fraction: float | None = Field(default=0.5, ge=0, le=1, description="reject a child when more "
                                             "than this fraction of its added lines re-add lines an ancestor removed")
    readd_min_lines: int = Field(default=3, ge=1, description="... and at least this many lines are re-added")
    # cascade and goal
    quick_suite: str = "quick"
    full_suite: str = "full"
    full_stage: bool = Field(default=True, description="False: quick only (no full stage, goal never met)")
    full_min_gain: float = Field(default=0.0, description="full runs only for children whose quick fitness "
                                 "> parent's quick fitness x (1 + this)")
    goal_speedup: float = Field(default=1.0, gt=0)
    goal_against: GoalAgainst = "original"
    # budget (None: unlimited); the run stops at the first exhausted one, or when the goal is met on full
    max_evaluations: int | None = Field(default=None, ge=1, description="GPU-stage evaluations (quick + full)")
    max_gpu_hours: float | None = Field(default=None, gt=0)
    max_wall_s: float | None = Field(default=None, gt=0, description="wall time of the run, restarts summed")
    max_generations: int | None = Field(default=None, ge=0)
    # evaluation
    evaluator: EvaluatorKind = "harness"
    arch: str = "sm_90a"
    scenario_timeout_s: float = Field(default=60.0, gt=0)
    gpus: list[int] = Field(default_factory=lambda: [0], min_length=1)
    backend: Literal["local", "dask"] = "local"
    scheduler: str | None = Field(default=None, description="Dask scheduler address (tcp://host:8786)")
    scheduler_timeout_s: float = Field(default=30.0, gt=0, description="how long to try to reach --scheduler")
    compile_workers: int = Field(default=4, ge=1, le=256)

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: list[int]) -> list[int]:
        if any(g < 0 for g in v) or len(set(v)) != len(v):
            raise ValueError(f"gpus must be distinct device indexes >= 0, got {v}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> EvolveConfig:
        if self.exploit_ratio + self.explore_ratio + self.elite_ratio <= 0:
            raise ValueError("exploit_ratio + explore_ratio + elite_ratio must be > 0")
        if self.mutator == "command" and not self.mutator_cmd:
            raise ValueError("mutator 'command' needs mutator_cmd (--mutator-cmd)")
        if self.scheduler and self.backend != "dask":
            self.backend = "dask"
        return self

    def evaluator_spec(self, state_dir: str | None = None) -> EvaluatorSpec:
        """The part of the config an evaluation worker needs."""
        return EvaluatorSpec(kind=self.evaluator, quick_suite=self.quick_suite, full_suite=self.full_suite,
                             goal_speedup=self.goal_speedup, goal_against=self.goal_against, arch=self.arch,
                             scenario_timeout_s=self.scenario_timeout_s, state_dir=state_dir)

    def ratios(self) -> tuple[float, float, float]:
        """(exploit, explore, elite), normalized to sum to 1."""
        total = self.exploit_ratio + self.explore_ratio + self.elite_ratio
        return self.exploit_ratio / total, self.explore_ratio / total, self.elite_ratio / total
