"""The evolve search's decisions on real rows: selection ratios, islands and migration, the MAP-Elites
archive, the question bandit, near-duplicate rejection, the cascade and the budget."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from evolve.bandit import Arm, Pull, arm_stats, choose, layer_stats
from evolve.config import EvolveConfig, parse_knob
from evolve.db import EvolveDB, ProgramRecord
from evolve.dedup import check_child, norm_sha256, normalize
from evolve.engine import Budget
from evolve.evaluate import StageResult, compile_facts_score, next_stage
from evolve.select import archive, cell_of, descriptors, island_members, migration_plan, select_parent

SEED_SRC = (Path(__file__).parent / "data" / "evolve" / "knob_kernel.cu").read_text()


def prog(pid: int, fit: float | None, island: int = 0, *, status: str = "correct", cell: str | None = "c0",
         generation: int = 1, parent: int | None = 0, src: str = "") -> ProgramRecord:
    return ProgramRecord(id=pid, run_id="r", created_at="t", source_sha256=f"{pid}", norm_sha256=f"n{pid}",
                         source_text=src or f"// {pid}", path="", island=island, generation=generation,
                         parent_id=parent, mutator="knob", status=status, fitness_quick=fit, cell=cell)


# -- selection --------------------------------------------------------------------------------------
def test_selection_follows_the_ratios_and_is_deterministic_under_a_seed() -> None:
    programs = [prog(i, 1.0 + i / 100, cell=f"c{i % 3}") for i in range(1, 13)]
    ratios = EvolveConfig(exploit_ratio=6, explore_ratio=3, elite_ratio=1).ratios()
    assert ratios == pytest.approx((0.6, 0.3, 0.1))
    picks = [select_parent(programs, [], 0, size=8, ratios=ratios, rng=random.Random(f"7:{i}")) for i in range(2000)]
    kinds = Counter(how for _, how in picks)
    assert abs(kinds["exploit"] / 2000 - 0.6) < 0.04 and abs(kinds["explore"] / 2000 - 0.3) < 0.04
    assert abs(kinds["elite"] / 2000 - 0.1) < 0.03
    # elite = the island's fittest; exploit = best of a tournament among the island's 8 fittest
    assert {p.id for p, how in picks if how == "elite"} == {12}
    assert {p.id for p, how in picks if how == "exploit"} <= {p.id for p in island_members(programs, [], 0, 8)}
    # explore draws archive cells uniformly: each cell's elite (12, 11, 10) about a third of the time
    explored = Counter(p.id for p, how in picks if how == "explore")
    assert set(explored) == {10, 11, 12} and min(explored.values()) > 0.25 * sum(explored.values())
    again = [select_parent(programs, [], 0, size=8, ratios=ratios, rng=random.Random(f"7:{i}")) for i in range(2000)]
    assert [(p.id, how) for p, how in again] == [(p.id, how) for p, how in picks]


def test_select_parent_needs_a_correct_program_on_the_island() -> None:
    with pytest.raises(ValueError, match="island 1 has no correct program"):
        select_parent([prog(1, 1.0, island=0)], [], 1, size=4, ratios=(1, 0, 0), rng=random.Random(0))


# -- islands and migration --------------------------------------------------------------------------
def test_islands_keep_their_fittest_and_migration_moves_elites_around_the_ring() -> None:
    programs = [prog(1, 1.0, 0), prog(2, 1.5, 0), prog(3, 0.9, 0), prog(4, 1.2, 1), prog(5, 2.0, 1),
                prog(6, None, 1, status="incorrect"), prog(7, 1.1, 2)]
    assert [p.id for p in island_members(programs, [], 0, size=2)] == [2, 1]
    assert [p.id for p in island_members(programs, [], 1, size=5)] == [5, 4]  # incorrect programs never count
    moves = migration_plan(programs, [], islands=3, size=2, count=1)
    assert moves == [(2, 0, 1), (5, 1, 2), (7, 2, 0)]
    migrated = [{"generation": 3, "program_id": pid, "from_island": a, "to_island": b} for pid, a, b in moves]
    assert [p.id for p in island_members(programs, migrated, 2, size=5)] == [5, 7]
    # the next migration passes the migrant on (island 2's best is now #5); nothing goes where it already is
    again = migration_plan(programs, migrated, islands=3, size=2, count=1)
    assert again == [(5, 2, 0)]
    migrated.append({"generation": 6, "program_id": 5, "from_island": 2, "to_island": 0})
    assert migration_plan(programs, migrated, islands=3, size=2, count=1) == [(5, 0, 1)] or \
        all(m[0] != 2 for m in migration_plan(programs, migrated, islands=3, size=2, count=1))
    assert migration_plan(programs, [], islands=1, size=2, count=1) == []


# -- archive ----------------------------------------------------------------------------------------
def test_descriptors_and_archive_keep_one_elite_per_cell() -> None:
    facts = {"sass_available": True, "kernels": [{"registers": 90, "shared_mem_bytes": 40960, "hgmma": 12},
                                                 {"registers": 40, "shared_mem_bytes": 0, "hgmma": 0}]}
    d = descriptors(facts, {"gqa": 1.2, "odd": 0.8, "extremes": 1.01}, "")
    assert d == {"wins": "extremes+gqa", "registers": 90, "registers_bin": "<=96", "smem_bytes": 40960,
                 "smem_bin": "<=48K", "wgmma": True}
    assert cell_of(d) == "extremes+gqa|regs<=96|smem<=48K|wgmma"
    # without a SASS mix, wgmma is read from the source; without groups, wins is n/a
    d2 = descriptors({"sass_available": False, "kernels": [{"registers": 200, "shared_mem_bytes": 0}]}, None,
                     "asm volatile(\"wgmma.mma_async.sync.aligned ...\");")
    assert d2["wgmma"] is True and d2["wins"] == "n/a" and d2["registers_bin"] == "<=255"
    programs = [prog(1, 1.0, cell="a"), prog(2, 1.3, cell="a"), prog(3, 0.7, cell="b"),
                prog(4, 9.0, cell="b", status="incorrect")]
    arch = archive(programs)
    assert {k: v.id for k, v in arch.items()} == {"a": 2, "b": 3}


# -- bandit -----------------------------------------------------------------------------------------
def test_bandit_learns_which_question_and_layer_pay_off() -> None:
    arms = [Arm(id="q-good", layer="pipelining"), Arm(id="q-bad", layer="pipelining"),
            Arm(id="q-other", layer="numerics")]
    pulls = ([Pull(arm_id="q-good", layer="pipelining", improved=True, improvement=0.05)] * 8
             + [Pull(arm_id="q-bad", layer="pipelining", improved=False, improvement=-0.02)] * 8
             + [Pull(arm_id="q-other", layer="numerics", improved=False, improvement=None)] * 10)
    picks = Counter(choose(arms, pulls, random.Random(i)).arm.id for i in range(500))
    assert picks["q-good"] > 400 and picks["q-good"] > 5 * (picks["q-bad"] + picks["q-other"])
    st = arm_stats(pulls)
    assert st["q-good"].rate == 1.0 and st["q-bad"].mean_improvement == pytest.approx(-0.02)
    assert st["q-other"].mean_improvement is None and st["q-other"].children == 10
    lay = layer_stats(pulls)
    assert lay["pipelining"].children == 16 and lay["pipelining"].improved == 8
    # untried arms are explored: with no pulls every arm gets picked
    assert set(Counter(choose(arms, [], random.Random(i)).arm.id for i in range(200))) == {a.id for a in arms}
    assert [choose(arms, pulls, random.Random(3)).arm.id for _ in range(3)] == [choose(arms, pulls, random.Random(3)).arm.id] * 3
    with pytest.raises(ValueError):
        choose([], pulls, random.Random(0))


# -- near duplicates --------------------------------------------------------------------------------
def test_normalization_ignores_comments_and_spacing_only() -> None:
    a = "int x=1; // one\n/* block\ncomment */\n\nfloat  y = x + 2;\n"
    b = "int x = 1;\nfloat y=x+2;  // two\n"
    assert normalize(a) == normalize(b) == ["int x=1;", "float y=x+2;"]
    assert norm_sha256(a) == norm_sha256(b) != norm_sha256("int x = 2;\nfloat y=x+2;")


def test_duplicates_are_rejected_by_similarity_and_by_readded_lines() -> None:
    parent = SEED_SRC
    known = [(1, parent)]
    same = parent.replace("// A tiny", "//   A tiny  ")  # a comment edit only
    r = check_child(same, parent, known, [], threshold=0.995, readd_max_fraction=0.5, readd_min_lines=3)
    assert r.rejected and r.reason == "identical" and r.most_similar_id == 1
    one_line = parent.replace("#define TILE 256", "#define TILE 512")
    n = len(normalize(parent))  # one changed line of n: similarity 1 - 1/n
    r = check_child(one_line, parent, known, [], threshold=0.95, readd_max_fraction=0.5, readd_min_lines=3)
    assert r.rejected and r.reason == "near_duplicate" and r.similarity == pytest.approx(1 - 1 / n, abs=1e-6)
    assert r.added_lines == 1
    assert not check_child(one_line, parent, known, [], threshold=1.0, readd_max_fraction=0.5,
                           readd_min_lines=3).rejected
    # an ancestor removed three lines; the child puts them back (and adds one new line)
    body = [f"int v{i} = {i};" for i in range(40)]
    grand = "\n".join(body)
    anc = "\n".join(body[:10] + body[13:])  # removed v10, v11, v12
    child = "\n".join(body + ["int extra = 0;"])
    r = check_child(child, anc, [(1, grand), (2, anc)], [(grand, anc)], threshold=0.999,
                    readd_max_fraction=0.5, readd_min_lines=3)
    assert r.rejected and r.reason == "readds_removed_lines" and (r.readded_lines, r.added_lines) == (3, 4)
    r = check_child(child, anc, [(2, anc)], [(grand, anc)], threshold=0.999, readd_max_fraction=None,
                    readd_min_lines=3)
    assert not r.rejected and r.readded_lines == 3  # counted even when the rule is off


# -- cascade ----------------------------------------------------------------------------------------
def sr(stage: str, status: str, fitness: float | None = None) -> StageResult:
    return StageResult(stage=stage, status=status, fitness=fitness)  # type: ignore[arg-type]


def test_cascade_runs_full_only_for_children_beating_their_parent_on_quick() -> None:
    kw = {"full_stage": True, "full_min_gain": 0.02, "is_seed": False}
    assert next_stage([], parent_quick=1.0, **kw) == "compile"
    assert next_stage([sr("compile", "failed_compile")], parent_quick=1.0, **kw) is None
    assert next_stage([sr("compile", "compiled")], parent_quick=1.0, **kw) == "quick"
    assert next_stage([sr("compile", "compiled"), sr("quick", "incorrect")], parent_quick=1.0, **kw) is None
    assert next_stage([sr("compile", "compiled"), sr("quick", "correct", 1.01)], parent_quick=1.0, **kw) is None
    assert next_stage([sr("compile", "compiled"), sr("quick", "correct", 1.03)], parent_quick=1.0, **kw) == "full"
    assert next_stage([sr("quick", "correct", 1.03), sr("full", "correct", 1.0)], parent_quick=1.0, **kw) is None
    # the seed always gets the full stage; --no-full never does
    seed = {**kw, "is_seed": True}
    assert next_stage([sr("compile", "compiled"), sr("quick", "correct", 0.5)], parent_quick=None, **seed) == "full"
    off = {**kw, "full_stage": False}
    assert next_stage([sr("compile", "compiled"), sr("quick", "correct", 9.0)], parent_quick=1.0, **off) is None


def test_compile_facts_score_is_the_documented_function() -> None:
    k = {"registers": 32, "shared_mem_bytes": 3072, "spill_store_bytes": 0, "spill_load_bytes": 0,
         "stack_frame_bytes": 0}
    assert compile_facts_score({"kernels": [k]}) == pytest.approx(1 + 2 / 8 - 32 / 512)
    spilled = {**k, "spill_store_bytes": 4096, "spill_load_bytes": 4096}
    assert compile_facts_score({"kernels": [k, spilled]}) == pytest.approx(1 + 2 / 8 - 32 / 512 - 0.5)
    with pytest.raises(ValueError):
        compile_facts_score({"kernels": []})


# -- budget and config ------------------------------------------------------------------------------
def test_budget_counts_gpu_evaluations_from_the_store(tmp_path: Path) -> None:
    db = EvolveDB(tmp_path / "campaign.sqlite")
    cfg = EvolveConfig(max_evaluations=3)
    run = db.create_run("b1", "default", arm="question", seed=0, config=cfg.model_dump(mode="json"))
    for stage in ("compile", "quick", "full"):
        db.add_evaluation("b1", 1, stage, status="correct", fitness=1.0, goal_met=None, wall_s=1.0,
                          gpu_s=0.0 if stage == "compile" else 900.0, worker="h", result={})
    budget = Budget(cfg, db, run)
    assert budget.evaluations == 2 and budget.exhausted() is None
    assert budget.take() and not budget.take()
    assert "evaluation budget spent (3 of 3)" == budget.exhausted()
    hours = Budget(EvolveConfig(max_gpu_hours=0.5), db, run)
    assert hours.exhausted() is not None and "GPU-hour" in hours.exhausted()  # type: ignore[operator]


def test_config_and_knob_specs_refuse_bad_values() -> None:
    assert parse_knob("kBM,kWarps=32:2,64:4").values == [[32, 2], [64, 4]]
    for bad in ("TILE", "TILE=a,b", "A,B=1:2,3", "1X=4"):
        with pytest.raises(ValueError):
            parse_knob(bad)
    with pytest.raises(ValueError, match="mutator_cmd"):
        EvolveConfig(mutator="command")
    with pytest.raises(ValueError, match="distinct"):
        EvolveConfig(gpus=[0, 0])
    assert EvolveConfig(scheduler="tcp://h:8786").backend == "dask"


# -- planning ---------------------------------------------------------------------------------------
def _planned(tmp_path: Path, name: str, **kw: object) -> list:  # type: ignore[type-arg]
    """A run with two correct programs (one per island), then generation 1 planned from those rows."""
    from evolve.engine import Search
    from questions.bank import load_bank

    db = EvolveDB(tmp_path / f"{name}.sqlite")
    cfg = EvolveConfig(mutator="mcp", islands=2, children_per_generation=4, seed=9, **kw)  # type: ignore[arg-type]
    search = Search.create(db, name, "default", cfg, SEED_SRC, seed_path="seed.cu", state_dir=tmp_path,
                           bank=load_bank())
    seed = search.seed_program()
    db.update_program(seed.id, status="correct", fitness_quick=1.0, cell="a",
                      quick={"geomean_by_group": {"gqa": 0.9, "odd": 1.1}})
    other = search._add_program(SEED_SRC.replace("#define TILE 256", "#define TILE 1024"), parent=seed, island=1,
                                generation=0, mutator="knob", status="correct")
    db.update_program(other.id, fitness_quick=1.2, cell="b")
    search.close_generation(0)
    tickets = search.plan_generation()
    return [(t, search.brief(t)) for t in tickets]


def test_planning_is_deterministic_and_asks_crossover_questions(tmp_path: Path) -> None:
    planned = _planned(tmp_path, "x1", inspiration_rate=1.0, crossover_rate=1.0)
    assert [t.slot for t, _ in planned] == [0, 1, 2, 3] and [t.island for t, _ in planned] == [0, 1, 0, 1]
    for t, b in planned:
        assert t.kind == "crossover" and t.inspiration_id is not None and t.inspiration_id != t.parent_id
        assert t.question_id.startswith("crossover-") and t.layer == "crossover"
        assert f"program B (#{t.inspiration_id})" in t.question_text and f"program A (#{t.parent_id})" in t.question_text
        assert t.question_text.endswith("?") and t.question_text.count("?") == 1
        assert "## Inspiration from another island" in b.text and b.question in b.text
        assert b.text.count("```cuda") == 2
    for t, b in planned:  # the seed has quick groups (gqa is its weakest); the other program has none
        has_groups = bool(b.parent.geomean_by_group)
        assert ("A's weakest group (gqa)" in t.question_text) == has_groups
        assert ("A's slowest scenarios" in t.question_text) == (not has_groups)
    again = _planned(tmp_path, "x2", inspiration_rate=1.0, crossover_rate=1.0)
    assert [(t.parent_id - planned[0][0].parent_id, t.question_id, t.selection) for t, _ in planned] == \
        [(t.parent_id - again[0][0].parent_id, t.question_id, t.selection) for t, _ in again]
    plain = _planned(tmp_path, "x3", arm="plain", inspiration_rate=1.0)
    for t, b in plain:
        assert (t.kind, t.question_id, t.question_text) == ("mutation", "plain", "Make it faster.")
        assert "## Instruction\n\nMake it faster." in b.text and "## Question" not in b.text
    asked = _planned(tmp_path, "x4", inspiration_rate=0.0)
    from questions.bank import load_bank
    bank = {q.id: q for q in load_bank().questions}
    for t, b in asked:
        q = bank[t.question_id]
        assert t.kind == "mutation" and q.requires != "failures" and {"stall", "declared_limit"} & set(q.triggers)
        assert f"## Question ({q.layer}, {q.id})\n\n{q.text}" in b.text and b.inspiration is None
