"""Selection: islands with periodic elite migration, a MAP-Elites archive, exploit/explore/elite picks.

- **Islands.** Program ``p`` lives on island ``p.island``; a migration adds it to another island too.
  An island's population is its ``island_size`` fittest correct programs (quick fitness, ties by id).
  Every ``migration_interval`` generations each island sends its ``migration_count`` best programs to
  the next island (a ring), if they are not there yet.
- **Archive (MAP-Elites).** Each correct program has behaviour descriptors (:func:`descriptors`): the
  scenario groups it wins (geomean speedup > 1 on quick), its register and shared-memory footprint per
  CTA (binned) and whether it issues Hopper warpgroup MMA (wgmma). The archive keeps the fittest
  program of each cell (:func:`cell_of`).
- **Parent selection** for one slot: with the normalized ratios, *exploit* (tournament of 3 on the
  island), *explore* (a uniformly chosen archive cell's elite, any island) or *elite* (the island's best).
  The inspiration, when drawn, is the best program of another island.

Pure functions of the rows in evolve.db and a seeded ``random.Random``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from evolve.db import ProgramRecord

#: Upper edges of the register bins (registers per thread) and shared-memory bins (static bytes per CTA).
REGISTER_BINS = (64, 96, 128, 168, 255)
SMEM_BINS = (0, 16 * 1024, 48 * 1024, 100 * 1024, 228 * 1024)
TOURNAMENT = 3
_WGMMA_SRC = re.compile(r"\bwgmma\b")


def fitness_key(p: ProgramRecord) -> tuple[float, int]:
    """Sort key, fittest first: (-quick fitness, id)."""
    return (-(p.fitness_quick or 0.0), p.id)


def _bin(value: int, edges: Sequence[int]) -> str:
    for edge in edges:
        if value <= edge:
            return f"<={edge // 1024}K" if edges is SMEM_BINS and edge else f"<={edge}"
    return f">{edges[-1]}"


def descriptors(facts: dict[str, Any] | None, geomean_by_group: dict[str, float] | None, source: str) -> dict[str, Any]:
    """Behaviour descriptors of a program (see the module docstring).

    Args:
        facts: the compile stage's facts summary: ``{"kernels": [{registers, shared_mem_bytes, hgmma,
            ...}], "sass_available": bool}`` (evolve.evaluate.facts_summary).
        geomean_by_group: quick geomean speedup per scenario group (None / empty: no groups).
        source: the program's source (wgmma is read from it when the SASS mix is not available).
    """
    kernels = (facts or {}).get("kernels") or []
    regs = max((int(k.get("registers", 0)) for k in kernels), default=0)
    smem = max((int(k.get("shared_mem_bytes", 0)) for k in kernels), default=0)
    if (facts or {}).get("sass_available"):
        wgmma = any(int(k.get("hgmma") or 0) > 0 for k in kernels)
    else:
        wgmma = bool(_WGMMA_SRC.search(source))
    wins = sorted(g for g, x in (geomean_by_group or {}).items() if x > 1.0)
    return {"wins": "+".join(wins) if wins else ("none" if geomean_by_group else "n/a"),
            "registers": regs, "registers_bin": _bin(regs, REGISTER_BINS),
            "smem_bytes": smem, "smem_bin": _bin(smem, SMEM_BINS), "wgmma": wgmma}


def cell_of(desc: dict[str, Any]) -> str:
    """The archive cell of a program: ``wins|regs<=N|smem<=NK|wgmma or mma``."""
    return (f"{desc.get('wins', 'n/a')}|regs{desc.get('registers_bin', '?')}|smem{desc.get('smem_bin', '?')}|"
            f"{'wgmma' if desc.get('wgmma') else 'mma'}")


def archive(programs: Sequence[ProgramRecord]) -> dict[str, ProgramRecord]:
    """The MAP-Elites archive: cell -> fittest correct program of that cell (sorted by cell)."""
    best: dict[str, ProgramRecord] = {}
    for p in programs:
        if p.status != "correct" or p.fitness_quick is None or p.cell is None:
            continue
        cur = best.get(p.cell)
        if cur is None or fitness_key(p) < fitness_key(cur):
            best[p.cell] = p
    return dict(sorted(best.items()))


def island_members(programs: Sequence[ProgramRecord], migrations: Sequence[dict[str, Any]], island: int,
                   size: int) -> list[ProgramRecord]:
    """The island's population: its ``size`` fittest correct programs, natives and migrants, fittest first."""
    migrants = {m["program_id"] for m in migrations if m["to_island"] == island}
    pop = [p for p in programs if p.status == "correct" and p.fitness_quick is not None
           and (p.island == island or p.id in migrants)]
    return sorted(pop, key=fitness_key)[:size]


def select_parent(programs: Sequence[ProgramRecord], migrations: Sequence[dict[str, Any]], island: int, *,
                  size: int, ratios: tuple[float, float, float],
                  rng: random.Random) -> tuple[ProgramRecord, str]:
    """A parent for a slot on ``island`` and how it was chosen (``exploit``, ``explore`` or ``elite``).

    Raises:
        ValueError: the island has no correct program (cannot happen once the seed is correct).
    """
    members = island_members(programs, migrations, island, size)
    if not members:
        raise ValueError(f"island {island} has no correct program to select from")
    exploit, explore, _ = ratios
    u = rng.random()
    if u < exploit:
        contenders = rng.sample(members, min(TOURNAMENT, len(members)))
        return min(contenders, key=fitness_key), "exploit"
    if u < exploit + explore:
        cells = archive(programs)
        if cells:
            key = rng.choice(list(cells))
            return cells[key], "explore"
    return members[0], "elite"


def pick_inspiration(programs: Sequence[ProgramRecord], migrations: Sequence[dict[str, Any]], island: int,
                     parent: ProgramRecord, *, islands: int, size: int,
                     rng: random.Random) -> ProgramRecord | None:
    """The best program of a randomly chosen other island that differs from ``parent``, or None."""
    others = [i for i in range(islands) if i != island]
    rng.shuffle(others)
    for other in others:
        for cand in island_members(programs, migrations, other, size):
            if cand.id != parent.id and cand.norm_sha256 != parent.norm_sha256:
                return cand
    return None


def migration_plan(programs: Sequence[ProgramRecord], migrations: Sequence[dict[str, Any]], *, islands: int,
                   size: int, count: int) -> list[tuple[int, int, int]]:
    """``(program_id, from_island, to_island)`` moves of one migration: each island's ``count`` best
    go to the next island of the ring, unless already there."""
    if islands < 2 or count < 1:
        return []
    moves = []
    for i in range(islands):
        dest = (i + 1) % islands
        there = {p.id for p in island_members(programs, migrations, dest, size=10**9)}
        for p in island_members(programs, migrations, i, size)[:count]:
            if p.id not in there:
                moves.append((p.id, i, dest))
    return moves
