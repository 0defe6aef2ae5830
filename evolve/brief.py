"""The mutation brief: what a mutator (a model, a command, an MCP agent) gets to write one child.

A brief holds the parent's source, its verdict summary (fitness per stage, worst groups and scenarios,
compile facts), optionally an inspiration program from another island, and **one question**: a bank
question chosen by the bandit, or a crossover question ("what does B do in its softmax that A does not,
and would it remove A's weakness on <group>?"). The ablation arms replace the question with the plain
instruction "Make it faster." (``plain``) or with nothing (``none``).

:func:`question_arms` lists the bank questions that can be mutation questions; :data:`CROSSOVER_PARTS`
the crossover questions; :func:`render_brief` the text given to a model (markdown, sources fenced).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from evolve.bandit import Arm
from evolve.config import PLAIN_INSTRUCTION
from evolve.db import ProgramRecord

#: Crossover questions: arm id -> the part of the kernel they compare.
CROSSOVER_PARTS = {
    "crossover-softmax": "softmax (scaling, max, exponentials, rescaling)",
    "crossover-main-loop": "main loop over key tiles",
    "crossover-loads": "global-to-shared loads and their pipelining",
    "crossover-tiling": "tile shapes and launch configuration",
    "crossover-epilogue": "epilogue (normalization and stores)",
}


def question_arms(bank: Any, triggers: list[str]) -> list[Arm]:
    """Bank questions fit to be mutation questions: those fitting one of ``triggers`` and not presupposing
    failed scenarios (a parent is always a correct program)."""
    out = []
    for q in bank.questions:
        if q.requires == "failures" or not set(q.triggers) & set(triggers):
            continue
        out.append(Arm(id=q.id, layer=q.layer, text=q.text))
    return out


def crossover_arms() -> list[Arm]:
    """One arm per crossover question (layer ``crossover``)."""
    return [Arm(id=k, layer="crossover", text=v) for k, v in CROSSOVER_PARTS.items()]


def weakest_group(p: ProgramRecord) -> str | None:
    """The scenario group with the lowest quick geomean speedup, if the quick stage ran."""
    groups = (p.quick or {}).get("geomean_by_group") or {}
    return min(groups, key=lambda g: (groups[g], g)) if groups else None


def crossover_text(arm_id: str, parent: ProgramRecord, other: ProgramRecord) -> str:
    """The crossover question for program A (``parent``) and B (``other``)."""
    part = CROSSOVER_PARTS[arm_id].split(" (")[0]
    weak = weakest_group(parent)
    target = f"A's weakest group ({weak})" if weak else "A's slowest scenarios"
    return (f"What does program B (#{other.id}) do in its {part} that program A (#{parent.id}) does not, "
            f"and would it speed up {target}?")


class ProgramBrief(BaseModel):
    """A program as a brief shows it: fitness per stage and where it is weak."""

    id: int
    generation: int
    island: int
    status: str
    fitness_quick: float | None = None
    fitness_full: float | None = None
    weakest_group: str | None = None
    geomean_by_group: dict[str, float] = Field(default_factory=dict)
    worst_scenarios: list[str] = Field(default_factory=list)
    kernels: list[dict[str, Any]] = Field(default_factory=list, description="compile facts per kernel")
    question_id: str | None = Field(default=None, description="the question that produced it")


def program_brief(p: ProgramRecord) -> ProgramBrief:
    """The brief's view of a program."""
    quick = p.quick or {}
    return ProgramBrief(id=p.id, generation=p.generation, island=p.island, status=p.status,
                        fitness_quick=p.fitness_quick, fitness_full=p.fitness_full, weakest_group=weakest_group(p),
                        geomean_by_group=quick.get("geomean_by_group") or {}, worst_scenarios=quick.get("worst") or [],
                        kernels=(p.compile or {}).get("kernels") or [], question_id=p.question_id)


class MutationBrief(BaseModel):
    """Everything a mutator needs for one child; ``text`` is the prompt for a model."""

    run_id: str
    ticket_id: int
    generation: int
    island: int
    kind: str = Field(description="mutation or crossover")
    selection: str = Field(description="how the parent was chosen: exploit, explore or elite")
    arm: str = Field(description="question, plain or none (the ablation arm)")
    question_id: str | None = None
    layer: str | None = None
    question: str = Field(default="", description="the one question (or the plain instruction; empty for none)")
    parent: ProgramBrief
    parent_source: str
    inspiration: ProgramBrief | None = None
    inspiration_source: str | None = None
    child_path: str | None = Field(default=None, description="where an MCP agent writes the child")
    failed_children: list[str] = Field(default_factory=list, description="the parent's children that failed: "
                                       "'#id status (failure kind) after question'")
    text: str = ""


def _facts_line(b: ProgramBrief) -> str:
    parts = []
    for k in b.kernels[:4]:
        name = str(k.get("name", "?")).split("(")[0]
        mma = "" if k.get("hgmma") is None else f", HGMMA {k['hgmma']}, HMMA {k.get('hmma')}"
        parts.append(f"{name}: {k.get('registers')} regs, {k.get('shared_mem_bytes')} B static smem, "
                     f"{k.get('spill_store_bytes', 0) + k.get('spill_load_bytes', 0)} B spills{mma}")
    more = f" (+{len(b.kernels) - 4} more kernels)" if len(b.kernels) > 4 else ""
    return "; ".join(parts) + more if parts else "no compile facts"


def _program_lines(label: str, b: ProgramBrief) -> list[str]:
    fq = f"{b.fitness_quick:.4f}x" if b.fitness_quick is not None else "-"
    ff = f"{b.fitness_full:.4f}x" if b.fitness_full is not None else "not run"
    lines = [f"{label} #{b.id} (generation {b.generation}, island {b.island}): fitness {fq} on quick, full {ff}"]
    if b.geomean_by_group:
        groups = ", ".join(f"{g} {x:.3f}x" for g, x in sorted(b.geomean_by_group.items(), key=lambda kv: kv[1]))
        lines.append(f"- by group, weakest first: {groups}")
    if b.worst_scenarios:
        lines.append(f"- slowest scenarios: {', '.join(b.worst_scenarios[:3])}")
    lines.append(f"- compile facts: {_facts_line(b)}")
    return lines


def render_brief(brief: MutationBrief) -> str:
    """The brief as text for a model: the task, the question, the programs, the sources (fenced)."""
    lines = [(f"# attnq evolve: mutation brief (run {brief.run_id}, generation {brief.generation}, "
             f"ticket {brief.ticket_id})"), "",
             ("You are the mutation operator of an evolutionary search over one CUDA attention forward kernel "
             "(attnq's ABI: it includes attn_abi.h and exports extern \"C\" int attn_fwd(const attn_fwd_params*, "
             "cudaStream_t)). Write ONE complete child program: the parent with the change that answering the "
             "question below leads you to. It is compiled, checked on every scenario and timed against the "
             "original kernel. Answer with the complete .cu source only."), ""]
    if brief.arm == "question" and brief.question:
        lines += [f"## Question ({brief.layer}, {brief.question_id})", "", brief.question, "",
                  ("Answer it from the numbers below (or by reasoning about the source), then make the change "
                  "the answer calls for."), ""]
    elif brief.arm == "plain":
        lines += ["## Instruction", "", PLAIN_INSTRUCTION, ""]
    lines += ["## Parent", "", *_program_lines("Program A, the parent", brief.parent)]
    if brief.failed_children:
        lines.append(f"- its children that failed: {'; '.join(brief.failed_children)}")
    lines.append("")
    if brief.inspiration is not None:
        lines += ["## Inspiration from another island", "",
                  *_program_lines("Program B", brief.inspiration), "", "```cuda",
                  (brief.inspiration_source or "").rstrip(), "```", ""]
    lines += ["## Parent source (program A)", "", "```cuda", brief.parent_source.rstrip(), "```", ""]
    if brief.child_path:
        lines += [f"Write the child to {brief.child_path}, then call evolve_submit(ticket_id={brief.ticket_id}).", ""]
    return "\n".join(lines)
