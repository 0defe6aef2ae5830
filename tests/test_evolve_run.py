"""Whole evolve runs on real nvcc builds (the compile-facts evaluator: no GPU): the search climbs, the
cascade spends the full stage only on improving children, a compile failure is kept with its kind,
runs are deterministic under a seed, survive restarts, stop on the goal or a budget, and export a
candidate that `attnq compile`/`attnq verify` accept."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attnq.cli import main
from evolve.config import EvolveConfig
from evolve.db import EvolveDB
from evolve.driver import run_search, start_or_resume
from evolve.engine import Budget, Search
from evolve.mutators import KnobMutator, set_knobs
from evolve.pool import LocalPool
from evolve.report import build_report
from harness.errors import InputError, StoreError
from tests.evolve_support import SEED, fingerprint, knob_config, run_knob, state_dir


@pytest.fixture(scope="module")
def climbed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, EvolveDB]:
    st = state_dir(tmp_path_factory, "evolve-climb")
    db, rec = run_knob(st, "climb", knob_config(seed=1, max_generations=3))
    assert rec.state == "budget" and rec.stop_reason == "generation budget spent (3 of 3)"
    return st, db


def test_the_knob_search_climbs_and_the_cascade_runs_full_only_for_improvers(climbed) -> None:  # type: ignore[no-untyped-def]
    _, db = climbed
    programs = {p.id: p for p in db.programs("climb")}
    seed = programs[min(programs)]
    assert seed.parent_id is None and seed.stage == "full" and seed.fitness_full == seed.fitness_quick
    evals = db.evaluations("climb")
    full_ids = {e.program_id for e in evals if e.stage == "full"}
    for p in programs.values():
        if p.parent_id is None or p.status != "correct":
            continue
        parent = programs[p.parent_id]
        assert p.parent_fitness_quick == parent.fitness_quick
        assert (p.id in full_ids) == (p.fitness_quick > parent.fitness_quick), p  # full only for improvers
        assert p.improvement == pytest.approx(p.fitness_quick / parent.fitness_quick - 1, abs=1e-6)
        assert p.cell and p.descriptors["wins"] == "n/a" and p.question_id.startswith("knob:")
    rep = build_report(db, db.run("climb"))
    so_far = [g.best_so_far_quick for g in rep.generations]
    assert so_far == sorted(so_far) and so_far[-1] > so_far[0]  # fitness rises over generations
    assert rep.lineage[0].id == seed.id and rep.lineage[-1].id == rep.status.best.id
    assert {s.layer for s in rep.per_question} == {"knob"} and rep.per_layer[0].children == sum(
        s.children for s in rep.per_question)
    assert rep.status.evaluations["compile"] == sum(1 for p in programs.values() if p.status != "rejected")


def test_a_compile_failure_is_kept_with_its_kind(tmp_path_factory: pytest.TempPathFactory) -> None:
    st = state_dir(tmp_path_factory, "evolve-fail")
    db = EvolveDB.for_state_dir(st)
    search, _ = start_or_resume(db, campaign_id="default", state_dir=st, cfg=knob_config(seed=2), run_id="fail",
                                seed_path=SEED)
    pool = LocalPool([0], compile_workers=1)
    budget = Budget(search.cfg, db, search.run)
    assert search.evaluate_one(search.seed_program(), pool, budget).status == "correct"
    search.close_generation(0)
    ticket = search.plan_generation()[0]
    too_big = set_knobs(SEED.read_text(), {"TILE": 65536})  # 256 KiB of static shared memory
    child = search.evaluate_one(search.accept_child(ticket, too_big, mutator="knob"), pool, budget)
    assert (child.status, child.stage, child.failure_kind) == ("failed_compile", "compile", "compile_error")
    assert child.fitness_quick is None and db.ticket(ticket.id).state == "done"
    assert [e.stage for e in db.evaluations("fail") if e.program_id == child.id] == ["compile"]
    assert "shared" in db.evaluations("fail")[-1].result["message"]
    # the next brief on that parent cites the failure
    brief = search.brief(ticket)
    assert f"#{child.id} failed_compile (compile_error) after {ticket.question_id}" in brief.text


def test_runs_are_deterministic_under_a_seed_and_survive_restarts(climbed, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    _, db_a = climbed
    st = state_dir(tmp_path_factory, "evolve-restart")
    # same seed, interrupted after one generation, resumed (a new process would do the same) to three
    _, rec = run_knob(st, "again", knob_config(seed=1, max_generations=1))
    assert rec.generation == 1
    db_b, rec = run_knob(st, "again", knob_config(seed=1, max_generations=3))
    assert rec.state == "budget" and rec.generation == 3
    assert fingerprint(db_b, "again") == fingerprint(db_a, "climb")
    # a crash in the middle of a generation: tickets planned, two children accepted, none evaluated
    search, _ = start_or_resume(db_b, campaign_id="default", state_dir=st, cfg=knob_config(seed=1, max_generations=3),
                                run_id="crash", seed_path=SEED)
    pool = LocalPool([0], compile_workers=2)
    search.evaluate_one(search.seed_program(), pool, Budget(search.cfg, db_b, search.run))
    search.close_generation(0)
    tickets = search.plan_generation()
    mut = KnobMutator(search.cfg.knobs)
    import random
    for t in tickets[:2]:
        src, note = mut.mutate(db_b.program(t.parent_id).source_text, t.question_id or "",
                               random.Random(f"1:{t.generation}:{t.slot}:knob"), known={
                                   p.norm_sha256 for p in db_b.programs("crash")})
        search.accept_child(t, src, mutator="knob", note=note)
    del search
    resumed = Search(db_b, "crash", state_dir=st)
    rec = run_search(resumed, pool, KnobMutator(resumed.cfg.knobs))
    assert rec.state == "budget" and fingerprint(db_b, "crash") == fingerprint(db_a, "climb")
    # another seed takes another path
    db_c, _ = run_knob(st, "other", knob_config(seed=5, max_generations=3))
    assert fingerprint(db_c, "other") != fingerprint(db_a, "climb")


def test_the_run_stops_on_the_goal_or_on_a_budget(tmp_path_factory: pytest.TempPathFactory) -> None:
    st = state_dir(tmp_path_factory, "evolve-stop")
    db, rec = run_knob(st, "goal", knob_config(seed=1, goal_speedup=1.3, max_generations=10))
    assert rec.state == "goal_met" and "met the goal on the full stage" in (rec.stop_reason or "")
    winners = [p for p in db.programs("goal") if p.goal_met]
    assert winners and all(p.fitness_full >= 1.3 for p in winners)
    db, rec = run_knob(st, "evals", knob_config(seed=1, max_evaluations=5))
    assert rec.state == "budget" and rec.stop_reason == "evaluation budget spent (5 of 5)"
    assert sum(e.stage != "compile" for e in db.evaluations("evals")) == 5


def test_cli_status_report_export_and_the_exported_file_is_a_candidate(climbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                       monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    st, db = climbed
    monkeypatch.setenv("ATTNQ_STATE", str(st))
    monkeypatch.chdir(tmp_path)
    assert main(["evolve", "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status[0]["run_id"] == "climb" and status[0]["best"]["stage"] == "full"
    assert main(["evolve", "report", "--run", "climb", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["lineage"][-1]["id"] == status[0]["best"]["id"] and report["duplicates"]["children"] == 12
    assert main(["evolve", "report", "--run", "climb"]) == 0
    text = capsys.readouterr().out
    assert "## Best per generation" in text and "## Lineage of the best" in text and "knob:TILE" in text
    # the compile_facts evaluator's CPU stand-in is a score, never printed as a speedup (trial of 2026-12-06)
    assert " score on full" in text and not re.search(r"\d\.\d{4}x", text), text
    assert main(["evolve", "export", "-o", "best.cu"]) == 0
    best = db.program(status[0]["best"]["id"])
    assert (tmp_path / "best.cu").read_text() == best.source_text
    assert main(["evolve", "trace", "-o", "run.jsonl"]) == 0
    kinds = {json.loads(line)["record"] for line in (tmp_path / "run.jsonl").read_text().splitlines()}
    assert kinds == {"run", "program", "ticket", "evaluation", "migration"}
    capsys.readouterr()
    assert main(["compile", "best.cu", "--json"]) == 0
    assert main(["verify", "best.cu", "--no-record"]) in (0, 1, 3)  # 3 here: the build passed, no GPU
    assert main(["evolve", "report", "--run", "nope"]) == 2
    assert "no evolve run 'nope'" in capsys.readouterr().err


def test_attnq_report_draws_the_runs_evolve_section_from_the_store_and_from_the_report_file(
        climbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """`attnq report` finds the campaign's latest evolve run in the store (evolve.report_data, the hook
    report/data.py calls) and draws the section; `attnq evolve report --json`'s file is accepted by --evolve."""
    from harness.store import CampaignStore
    from report.data import evolve_from_store, load_evolve

    st, db = climbed
    with CampaignStore(st / "campaign.sqlite", campaign_id="default") as store:
        data = evolve_from_store(store, "default")
    assert data is not None and data.fitness_against == "original"
    best = db.program(build_report(db, db.run("climb")).status.best.id)  # type: ignore[union-attr]
    assert data.lineage[-1].program_id == str(best.id) and data.lineage[0].parent_id is None
    assert [g.generation for g in data.generations] == [0, 1, 2, 3]
    assert data.generations[-1].best_fitness == max(p.fitness_quick for p in db.programs("climb")
                                                    if p.status == "correct" and p.fitness_quick is not None)
    monkeypatch.setenv("ATTNQ_STATE", str(st))
    monkeypatch.chdir(tmp_path)
    assert main(["report", "-o", "r.html", "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert written["figures"] == ["evolve"], written  # the store holds no attempt here: only the search
    assert main(["evolve", "report", "--run", "climb", "--json"]) == 0
    (tmp_path / "ev.json").write_text(capsys.readouterr().out, encoding="utf-8")
    from_file = load_evolve(tmp_path / "ev.json")
    assert [x.program_id for x in from_file.lineage] == [x.program_id for x in data.lineage]


def test_a_typo_in_arms_is_refused_before_any_arm_runs(tmp_path_factory: pytest.TempPathFactory,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    st = state_dir(tmp_path_factory, "evolve-arms")
    monkeypatch.setenv("ATTNQ_STATE", str(st))
    monkeypatch.chdir(st)
    assert main(["evolve", "--from", str(SEED), "--arms", "question,nonne", "--evaluator", "compile_facts",
                 "--max-evals", "1"]) == 2
    assert not (st / "campaign.sqlite").exists() or EvolveDB.for_state_dir(st).runs() == []


def test_a_run_name_that_is_not_a_plain_name_is_refused_and_nothing_is_written(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The run name is a folder under <state>/evolve/: '../x' would put programs outside the state dir."""
    st = state_dir(tmp_path_factory, "evolve-names")
    db = EvolveDB.for_state_dir(st)
    for bad in ("../x", "a/b", ".hidden", "", "x" * 101, "name with space"):
        with pytest.raises(InputError, match="evolve run name"):
            start_or_resume(db, campaign_id="default", state_dir=st, cfg=knob_config(seed=3), run_id=bad,
                            seed_path=SEED)
    assert db.runs() == [] and not (st.parent / "x").exists()
    search, created = start_or_resume(db, campaign_id="default", state_dir=st, cfg=knob_config(seed=3),
                                      run_id="h200-knobs.v2_1", seed_path=SEED)
    assert created and search.run_id == "h200-knobs.v2_1"


def test_a_resume_says_which_given_settings_the_run_keeps(tmp_path_factory: pytest.TempPathFactory,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`attnq evolve --run NAME` with flags a resume cannot change (the search's shape: islands, knobs, ...) names
    each with the run's value and the given one, and keeps the run's; the resumable ones (budgets) take effect; the
    same flags again say nothing."""
    from evolve.driver import kept_on_resume

    st = state_dir(tmp_path_factory, "evolve-kept")
    monkeypatch.setenv("ATTNQ_STATE", str(st))
    monkeypatch.chdir(st)
    knobs = [a for k in ("TILE=256,1024", "UNROLL=1,2") for a in ("--knob", k)]
    start = ["evolve", "--from", str(SEED), "--run", "k", "--evaluator", "compile_facts", "--goal", "9",
             "--islands", "2", "--children", "2", "--generations", "1", "--compile-workers", "2", *knobs]
    assert main(start) == 0
    capsys.readouterr()
    assert main(["evolve", "--run", "k", "--islands", "3", "--children", "2", "--generations", "1"]) == 0
    err = capsys.readouterr().err
    assert "resumed evolve run k" in err and "kept as the run started" in err, err
    assert "islands 2 (given 3)" in err and "children" not in err.split("kept as the run started")[1], err
    with EvolveDB.for_state_dir(st) as db:
        cfg = db.run("k").config
        assert cfg["islands"] == 2 and cfg["max_generations"] == 1
        same = EvolveConfig(**cfg)
        assert kept_on_resume(dict(cfg), same) == {}  # every field set, all equal
        assert kept_on_resume(dict(cfg), same.model_copy(update={"islands": 5, "max_generations": 9})) == {
            "islands": (2, 5)}  # max_generations is a budget: resumable
    assert main(["evolve", "--run", "k", "--islands", "2", "--generations", "2"]) == 0
    err = capsys.readouterr().err
    assert "resumed evolve run k" in err and "kept as the run started" not in err, err
    with EvolveDB.for_state_dir(st) as db:
        assert db.run("k").config["max_generations"] == 2


def test_a_knob_search_that_has_tried_every_setting_stops_instead_of_looping(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A knob domain of two settings gives one new child; every later child is a duplicate. The run used to plan
    generation after generation of rejected duplicates until a wall budget (no --max-evals is ever reached), writing
    one program file per duplicate; it now ends after IDLE_GENERATIONS idle generations and says why."""
    from evolve.engine import IDLE_GENERATIONS

    st = state_dir(tmp_path_factory, "evolve-exhausted")
    monkeypatch.setenv("ATTNQ_STATE", str(st))
    monkeypatch.chdir(st)
    args = ["evolve", "--from", str(SEED), "--run", "x", "--evaluator", "compile_facts", "--goal", "9",
            "--knob", "UNROLL=2,4", "--islands", "1", "--children", "2", "--max-evals", "50", "--compile-workers", "2"]
    assert main(args) == 0
    with EvolveDB.for_state_dir(st) as db:
        run = db.run("x")
        programs = db.programs("x")
    assert run.state == "budget" and "search exhausted" in (run.stop_reason or ""), run.stop_reason
    assert "widen --knob" in (run.stop_reason or "")
    assert run.generation <= IDLE_GENERATIONS + 2, run.generation
    assert len({p.norm_sha256 for p in programs}) == 2  # the seed and its one child
    assert len(list((st / "evolve" / "x" / "programs").iterdir())) == len(programs) < 2 + 2 * (IDLE_GENERATIONS + 2)


def test_a_second_driver_of_the_same_run_is_refused_with_the_holder(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Found as a new user: two `attnq evolve --run c1` started together; the second resumed the run the first was
    still creating and failed with "evolve run 'c1' has no seed program" (started later, both drove the same
    generations). While one process drives a run, another is refused, naming the holder's pid; nothing is written."""
    import os

    from evolve.driver import run_lock

    st = state_dir(tmp_path_factory, "evolve-lock")
    monkeypatch.setenv("ATTNQ_STATE", str(st))
    monkeypatch.chdir(st)
    args = ["evolve", "--from", str(SEED), "--run", "c1", "--evaluator", "compile_facts", "--goal", "9",
            "--knob", "UNROLL=1,2", "--islands", "1", "--children", "1", "--generations", "1", "--compile-workers", "1"]
    with run_lock(st, "c1"):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"evolve run 'c1' is being driven by another attnq process (pid {os.getpid()})" in err, err
        with EvolveDB.for_state_dir(st) as db:
            assert db.run_or_none("c1") is None
    assert main(args) == 0  # the lock went with its holder
    with EvolveDB.for_state_dir(st) as db:
        assert db.run("c1").state == "budget"


def test_status_says_when_a_running_run_has_no_driver_left(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Found as a new user: a driver killed by a signal (not Ctrl-C) leaves its run recorded as `running`, and
    `attnq evolve status` said only "running". Status now tells a live driver from a dead one."""
    import os
    import signal
    import subprocess
    import sys
    import time

    st = state_dir(tmp_path_factory, "evolve-orphan")
    env = {**os.environ, "ATTNQ_STATE": str(st), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    knobs = [a for k in ("TILE=256,1024,4096,16384", "UNROLL=1,2,4", "BLOCK=64,128,256") for a in ("--knob", k)]
    driver = subprocess.Popen([sys.executable, "-m", "attnq", "evolve", "--from", str(SEED), "--run", "o1",
                               "--evaluator", "compile_facts", "--goal", "9", "--max-wall-s", "300", *knobs],
                              cwd=st, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def status() -> str:
        r = subprocess.run([sys.executable, "-m", "attnq", "evolve", "status", "--run", "o1"], cwd=st, env=env,
                           capture_output=True, text=True, timeout=60, check=False)
        return r.stdout + r.stderr

    try:
        deadline = time.monotonic() + 120
        while "o1 (campaign default): running" not in (out := status()) and time.monotonic() < deadline:
            if driver.poll() is not None:  # the driver ended before it recorded the run: say why
                pytest.fail(f"the driver exited {driver.returncode} before recording o1: {driver.communicate()[1][-2000:]}")
            time.sleep(0.5)
        assert "running" in out and "no attnq evolve process drives it" not in out, out
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    out = status()
    assert "o1 (campaign default): running" in out, out
    assert "no attnq evolve process drives it now" in out and "attnq evolve --run o1" in out, out


def test_reading_commands_pick_the_newest_run_over_one_whose_driver_died(tmp_path: Path) -> None:
    """Found as a new user: a run killed before it recorded its stop stays `running`, and `attnq evolve export`
    (report, status without --run) took it over the newer finished run. Without a driver it is not live; an MCP run
    (its server drives it) and a run whose driver holds the lock are."""
    import time

    from evolve.driver import latest_run, run_lock

    with EvolveDB.for_state_dir(tmp_path) as db:
        db.create_run("dead-1", "default", arm="a", seed=1, config={"mutator": "knob"})
        db.update_run("dead-1", state="running")
        time.sleep(0.01)  # created_at orders the runs
        db.create_run("new-2", "default", arm="a", seed=1, config={"mutator": "knob"})
        db.update_run("new-2", state="budget", stop_reason="max evaluations")
        assert latest_run(db, "default", tmp_path).run_id == "new-2"
        assert latest_run(db, "default").run_id == "dead-1"  # no state dir to ask: running first, as the MCP tools do
        with run_lock(tmp_path, "dead-1"):  # a live driver: its run is the one to read
            assert latest_run(db, "default", tmp_path).run_id == "dead-1"
        db.create_run("mcp-3", "default", arm="a", seed=1, config={"mutator": "mcp"})
        db.update_run("mcp-3", state="running")
        time.sleep(0.01)
        db.create_run("new-4", "default", arm="a", seed=1, config={"mutator": "knob"})
        assert latest_run(db, "default", tmp_path).run_id == "mcp-3"  # the server drives it: no lock file
        with pytest.raises(StoreError, match="unknown run state 'finished'"):  # a row that would no longer load
            db.update_run("new-4", state="finished")
        assert db.run("new-4").state == "running"
