"""reflect / declare / selection policy / effectiveness / trace, on recorded campaigns."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from pathlib import Path

import pytest

from attnq.cli import main as cli_main
from harness.config import Settings
from harness.errors import InputError
from harness.store import AttemptRecord, CampaignStore
from harness.verdict import Verdict
from questions.bank import Bank, load_bank
from questions.policy import ask_outcome, effectiveness, rank, select_question
from questions.reflect import Declaration, Reflection, declare, on_attempt, reflect
from questions.trace import summarize, write_trace

DATA = Path(__file__).parent / "data" / "campaigns"


def _record(store: CampaignStore, name: str, start: int = 0, stop: int | None = None) -> None:
    for a in json.loads((DATA / f"{name}.json").read_text())["attempts"][start:stop]:
        v = None if a["verdict"] is None else Verdict.model_validate(a["verdict"])
        store.record_attempt(a["source_path"], a["source_text"], a["compile_result"], v, a["error"])


def _ask(store: CampaignStore, bank: Bank, qid: str, trigger: str = "stall") -> None:
    q = bank.get(qid)
    store.record_question(q.id, q.text, layer=q.layer, trigger=trigger, fired=True, evidence="test")


def test_reflect_without_trigger_says_so_and_records_the_question(tmp_path: Path) -> None:
    settings = Settings(workspace=tmp_path, seed=5)
    with CampaignStore.open(settings) as store:
        bank = load_bank(settings=settings, store=store)
        r0 = reflect(store, bank, settings=settings)
        assert r0.trigger is None and not r0.fired and r0.evidence.startswith("no trigger fired: no attempts")
        assert bank.get(r0.question_id).layer in ("measurement", "correctness_edge_cases", "search_strategy")
        _record(store, "goal", 0, 2)
        r = reflect(store, bank, settings=settings)
        assert r.trigger is None and not r.fired
        assert "best 1.34x vs the original on quick (#2)" in r.evidence
        assert "stall" in bank.get(r.question_id).triggers  # a general question looks for the next bottleneck
        asked = store.questions_asked()
        assert [a.question_id for a in asked] == [r0.question_id, r.question_id]
        assert asked[-1].attempt_seq == 2 and asked[-1].evidence == r.evidence and not asked[-1].fired


def test_reflect_detects_and_forced_trigger(tmp_path: Path) -> None:
    settings = Settings(workspace=tmp_path, seed=5)
    with CampaignStore.open(settings) as store:
        bank = load_bank(settings=settings, store=store)
        _record(store, "stall_plateau", 0, 9)
        r = reflect(store, bank, settings=settings)
        assert r.trigger == "stall" and r.fired and "#5–#9" in r.evidence
        forced = reflect(store, bank, trigger="suspicious_win", settings=settings)
        assert forced.trigger == "suspicious_win" and not forced.fired
        assert "suspicious_win" in bank.get(forced.question_id).triggers
        with pytest.raises(InputError):
            reflect(store, bank, trigger="bored", settings=settings)  # type: ignore[arg-type]


def test_never_the_same_question_twice_in_a_row(tmp_path: Path) -> None:
    settings = Settings(workspace=tmp_path, seed=11)
    with CampaignStore.open(settings) as store:
        bank = load_bank(settings=settings, store=store)
        _record(store, "stall_plateau", 0, 9)
        ids = [reflect(store, bank, trigger="churn", settings=settings).question_id for _ in range(25)]
    assert all(a != b for a, b in itertools.pairwise(ids))
    assert len(set(ids)) >= 8  # exploration and the repeat penalty spread the asks


def test_layers_not_asked_recently_are_preferred(tmp_path: Path) -> None:
    bank = load_bank()
    with CampaignStore(tmp_path / "c.sqlite") as store:
        for qid in ("hgmma-or-hmma", "tensor-idle-during-softmax", "dram-bytes-vs-minimum"):
            _ask(store, bank, qid)
        history = store.questions_asked()
    recent = {"instruction_mix_registers", "pipelining", "memory_traffic"}
    cands = bank.for_trigger("stall")
    share_recent = sum(q.layer in recent for q in cands) / len(cands)
    picks = [select_question(bank, "stall", history=history, stats={}, rng=random.Random(i)).question
             for i in range(200)]
    picked_recent = sum(q.layer in recent for q in picks) / len(picks)
    assert share_recent > 0.4 and picked_recent < share_recent / 2


def test_effectiveness_ranks_helpful_question_first_and_still_explores(tmp_path: Path) -> None:
    bank = load_bank()
    good, bad, untried = "tensor-idle-during-softmax", "hgmma-or-hmma", "barrier-wait-cycles"
    with CampaignStore(tmp_path / "c.sqlite") as store:
        for camp in ("c1", "c2", "c3"):  # good: asked while climbing; bad: asked on the plateau
            store.set_active_campaign(camp)
            _record(store, "stall_plateau", 0, 1)
            _ask(store, bank, good)          # after #1 (1.05x): #2-#4 climb to 1.84x
            _record(store, "stall_plateau", 1, 5)
            _ask(store, bank, bad)           # after #5: #6-#8 peak at 1.85x, +0.5 % (< 1 %)
            _record(store, "stall_plateau", 5, 10)
        stats = effectiveness(store, bank)
        assert (stats[good].asked, stats[good].resolved, stats[good].improved) == (3, 3, 3)
        assert (stats[bad].asked, stats[bad].resolved, stats[bad].improved) == (3, 3, 0)
        assert stats[untried].asked == 0 and stats[untried].posterior_mean == 0.5
        order = [s.question_id for s in rank(stats)]
        assert order.index(good) < order.index(untried) < order.index(bad)
        # an ask with fewer than 3 attempts after it and no gain yet is pending, not a failure
        assert ask_outcome(store.attempts("c1"), 9) == (None, pytest.approx(1.85, abs=0.01),
                                                       pytest.approx(1.83, abs=0.01))

    pool2 = [bank.get(good), bank.get(bad)]
    wins = Counter(select_question(bank, "stall", history=[], stats=stats, rng=random.Random(s), pool=pool2)
                   .question.id for s in range(200))
    assert wins[good] > 170
    pool3 = [bank.get(good), bank.get(untried)]
    picks = [select_question(bank, "stall", history=[], stats=stats, rng=random.Random(s), pool=pool3).question.id
             for s in range(200)]
    explored = picks.count(untried)
    assert 10 < explored < picks.count(good)  # Beta(1,1) beats Beta(4,1) about 1 time in 5
    again = [select_question(bank, "stall", history=[], stats=stats, rng=random.Random(s), pool=pool3).question.id
             for s in range(200)]
    assert again == picks  # deterministic under a seed


def test_seeded_settings_make_reflect_reproducible(tmp_path: Path) -> None:
    def run(ws: Path) -> list[str]:
        settings = Settings(workspace=ws, seed=42)
        with CampaignStore.open(settings) as store:
            bank = load_bank(settings=settings, store=store)
            _record(store, "stall_plateau", 0, 9)
            return [reflect(store, bank, settings=settings).question_id for _ in range(6)]

    assert run(tmp_path / "a") == run(tmp_path / "b")


def test_declare_done_checks_the_goal(tmp_path: Path) -> None:
    settings = Settings(workspace=tmp_path, seed=9)
    with CampaignStore.open(settings) as store:
        bank = load_bank(settings=settings, store=store)
        _record(store, "goal", 0, 3)
        d = declare(store, bank, "done", "all scenarios pass and we are at 1.55x", settings=settings)
        assert d.goal_met is False and d.reflection.trigger == "declared_done" and d.reflection.fired
        assert "ragged_b2_h16_q1000_k1337_d128" in d.goal and "causal_b4_h16_s1024_d128" in d.goal
        assert "declared_done" in bank.get(d.reflection.question_id).triggers
        claim = store.claims()[-1]
        assert claim.kind == "done" and claim.goal_met is False and claim.answer["question_id"] == d.reflection.question_id
        _record(store, "goal", 3, 4)
        d2 = declare(store, bank, "done", "goal met", settings=settings)
        assert d2.goal_met is True and "goal met by #4" in d2.goal
        assert d2.reflection.question_id != d.reflection.question_id
        lim = declare(store, bank, "limit", "memory bound, cannot go faster", settings=settings)
        assert lim.reflection.trigger == "declared_limit" and "best 1.62x vs the original on quick (#4)" in lim.reflection.evidence
        assert "fraction of measured peak" in lim.reflection.evidence
        r = reflect(store, bank, claim="I think this is the limit of the hardware", trigger="declared_limit",
                    settings=settings)
        assert r.trigger == "declared_limit" and store.claims()[-1].kind == "limit"
        assert len(store.claims()) == 4
        with pytest.raises(InputError):
            declare(store, bank, "tired", "x", settings=settings)  # type: ignore[arg-type]


def test_on_attempt_returns_none_when_quiet(tmp_path: Path) -> None:
    settings = Settings(workspace=tmp_path, seed=1)
    a = json.loads((DATA / "goal.json").read_text())["attempts"][0]
    with CampaignStore.open(settings) as store:
        bank = load_bank(settings=settings, store=store)
        r = on_attempt(store, bank, source_path=a["source_path"], source_text=a["source_text"],
                       compile_result=a["compile_result"], verdict=Verdict.model_validate(a["verdict"]),
                       error=None, settings=settings)
        assert r is None and len(store.attempts()) == 1 and store.questions_asked() == []


def test_trace_export_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(workspace=tmp_path, seed=4)
    with CampaignStore.open(settings) as store:
        bank = load_bank(settings=settings, store=store)
        _record(store, "stall_plateau", 0, 9)
        reflect(store, bank, settings=settings)
        _record(store, "stall_plateau", 9, 10)
        store.record_event("verify_kernel", args={"path": "kernels/candidate.cu"}, duration_s=41.5)
        store.set_active_campaign("second")
        _record(store, "goal", 0, 2)
        summary = summarize(store)
    camp = {c.campaign_id: c for c in summary.campaigns}
    c = camp["default"]
    assert c.attempts == 10 and c.verified == 9 and c.failed == 1 and c.best_seq == 7
    bests = [p.best_geomean for p in c.best_over_time]
    assert bests == sorted(bests) and c.triggers == {"stall": 1}
    assert c.questions[0].attempt_seq == 9 and c.questions[0].improved is None  # one attempt after it so far
    assert camp["second"].active and camp["second"].attempts == 2

    ws = ["--workspace", str(tmp_path)]
    out = tmp_path / "trace.jsonl"
    assert cli_main(["trace", "export", "-o", str(out), *ws]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    types = Counter(r["type"] for r in recs)
    assert types["header"] == 1 and types["campaign"] == 2 and types["attempt"] == 12 and types["question"] == 1
    assert all(r["source_text"] for r in recs if r["type"] == "attempt")
    Verdict.model_validate(next(r for r in recs if r["type"] == "attempt")["verdict"])
    assert cli_main(["trace", "export", "--format", "json", "-o", str(tmp_path / "t.json"), *ws]) == 0
    whole = json.loads((tmp_path / "t.json").read_text())
    assert whole["format"] == "attnq-trace" and len(whole["campaigns"]) == 2
    with open(tmp_path / "again.jsonl", "w") as fh, CampaignStore.open(settings) as store:
        assert write_trace(store, fh, fmt="jsonl") == 12 + 1 + 1 + 0  # attempts, question, event, claims
    capsys.readouterr()
    assert cli_main(["trace", "show", *ws]) == 0
    shown = capsys.readouterr().out
    assert "campaign default" in shown and "best 1.85x vs the original on quick (#7)" in shown and "[stall]" in shown


def test_cli_reflect_and_declare_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(workspace=tmp_path)
    with CampaignStore.open(settings) as store:
        _record(store, "goal", 0, 3)
    ws = ["--workspace", str(tmp_path)]
    capsys.readouterr()
    assert cli_main(["reflect", "--json", *ws]) == 0
    r = Reflection.model_validate_json(capsys.readouterr().out)
    assert r.campaign_id == "default"
    assert cli_main(["declare", "done", "finished", "--json", *ws]) == 1  # goal not met on #3
    d = Declaration.model_validate_json(capsys.readouterr().out)
    assert d.goal_met is False and d.reflection.trigger == "declared_done"
    assert cli_main(["questions", "stats", "--json", *ws]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert sum(s["asked"] for s in stats["questions"]) == 2
    with CampaignStore.open(settings) as store:
        assert [e.tool for e in store.events()] == ["cli.reflect", "cli.declare"]


def _attempt(status: str, failed: list[str], *, geomean: float | None = 1.0) -> AttemptRecord:
    """An attempt record as the store returns it (2 scenarios, ``failed`` among them)."""
    return AttemptRecord(id=1, campaign_id="c", seq=1, created_at="2026-11-30T00:00:00Z", source_path="k.cu",
                         source_sha256="0" * 64, source_text=None, status=status, error_code=None,
                         geomean_speedup=geomean, goal_met=False, num_scenarios=2, num_correct=2 - len(failed),
                         failed=failed, compile=None, verdict=None, error=None)


def test_a_question_that_presupposes_failures_is_not_asked_of_an_all_correct_run() -> None:
    from questions.bank import load_bank
    from questions.reflect import fitting_state

    bank = load_bank()
    needs = [q for q in bank.questions if q.requires == "failures"]
    assert needs, "the bank marks at least one question as needing failures"

    A = _attempt
    pool = bank.for_trigger("stall")
    clean = fitting_state(pool, [A("incorrect", ["x"]), A("correct", [])])
    assert not any(q.requires == "failures" for q in clean) and len(clean) == len(pool) - sum(q in pool for q in needs)
    failing = fitting_state(pool, [A("correct", []), A("incorrect", ["gqa/b4"])])
    assert failing == pool
    assert fitting_state(needs, [A("correct", [])]) == needs  # never an empty pool


def test_a_question_that_presupposes_a_measurement_waits_for_one(tmp_path) -> None:
    """requires = "verified" ("does the gain hold?") is not asked before any attempt was verified and timed:
    not by fitting_state, and not by a real `reflect` on a campaign whose only attempt failed to compile."""
    from questions.bank import load_bank
    from questions.reflect import fitting_state

    bank = load_bank()
    needs = {q.id for q in bank.questions if q.requires == "verified"}
    assert len(needs) >= 10

    def A(status: str, geomean: float | None) -> AttemptRecord:  # noqa: N802
        return _attempt(status, [], geomean=geomean)

    pool = list(bank.questions)
    before = fitting_state(pool, [A("failed_compile", None)])
    n_failures = sum(q.requires == "failures" for q in pool)  # nothing failed either: those go too
    assert not {q.id for q in before} & needs and len(before) == len(pool) - len(needs) - n_failures
    after = fitting_state(pool, [A("failed_compile", None), A("correct", 1.2)])
    assert needs <= {q.id for q in after} and len(after) == len(pool) - n_failures

    settings = Settings(workspace=tmp_path, seed=0)
    with CampaignStore.open(settings) as store:
        store.record_attempt("k.cu", "int x;", None, None, {"error": "compile_error", "message": "bad"})
        assert [a.status for a in store.attempts()] == ["failed_compile"]
    for seed in range(12):
        settings = Settings(workspace=tmp_path, seed=seed)
        with CampaignStore.open(settings) as store:
            asked = reflect(store, bank, settings=settings)
        assert asked.question_id not in needs, (seed, asked.question_id)
