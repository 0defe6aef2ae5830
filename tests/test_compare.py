"""Like-with-like comparisons (questions/compare.py) on real stores: mixed suites, goal anchors, grown suites,
and the recorded stage-2 campaign (kernels/campaigns/stage2-fa3.jsonl), where production-suite attempts
alternate with full-suite ones and `full` grew from 153 to 256 scenarios."""

from __future__ import annotations

import math
from pathlib import Path

from harness.config import Settings
from harness.store import AttemptRecord, CampaignStore
from harness.verdict import Goal, ScenarioResult, Verdict
from questions.compare import compare
from questions.policy import ask_outcome
from questions.trace import summarize
from questions.trace_import import import_trace
from questions.triggers import (
    best_attempt,
    check_goal,
    check_stall,
    check_suspicious_win,
    limit_evidence,
    state_summary,
)
from report.data import best_verdict, campaign_from_store

STAGE2 = Path(__file__).resolve().parents[1] / "kernels" / "campaigns" / "stage2-fa3.jsonl"


def _verdict(suite: str, rows: dict[str, tuple[float, float]], against: str = "fa3", min_speedup: float = 1.0
             ) -> Verdict:
    """A correct verdict; rows: scenario id -> (speedup vs the original, speedup vs fa3)."""
    sc = [ScenarioResult(id=i, group=i.split("/")[0], flops=1e9, correct=True, speedup=o, vs_anchor={"fa3": f})
          for i, (o, f) in rows.items()]

    def gm(vals: list[float]) -> float:
        return math.exp(sum(math.log(v) for v in vals) / len(vals))

    g, gf = gm([o for o, _ in rows.values()]), gm([f for _, f in rows.values()])
    return Verdict(kernel="k.cu", source_sha256="0" * 64, build_hash="b", original_sha256="o", suite=suite,
                   status="correct", num_scenarios=len(rows), num_correct=len(rows), geomean_speedup=g,
                   geomean_vs_anchor={"fa3": gf},
                   goal=Goal(against=against, min_speedup=min_speedup, met=(gf if against == "fa3" else g) >= min_speedup),
                   scenarios=sc)


def _store(tmp_path: Path, verdicts: list[Verdict]) -> list[AttemptRecord]:
    with CampaignStore(tmp_path / "c.sqlite") as store:
        for n, v in enumerate(verdicts):
            store.record_attempt("k.cu", f"// attempt {n}\n", None, v, None)
        return store.attempts()


FULL = [f"full/s{i}" for i in range(10)]
PROD = FULL[:3]  # production: a few rows of full, with a high speedup vs the (slow) original


def _full(scale: float, extra: int = 0, extra_speed: float = 0.3) -> dict[str, tuple[float, float]]:
    rows = {i: (2.0 * scale, 0.8 * scale) for i in FULL}
    rows.update({f"full/new{j}": (extra_speed, extra_speed / 2) for j in range(extra)})
    return rows


def test_a_production_attempt_is_not_the_best_of_full_attempts(tmp_path: Path) -> None:
    prod = _verdict("production", {i: (20.0, 0.9) for i in PROD})
    atts = _store(tmp_path, [_verdict("full", _full(1.0)), prod, _verdict("full", _full(1.02))])
    best = best_attempt(atts)
    assert best is not None and best.seq == 3  # before: #2, 20x vs the original over 3 other scenarios
    assert "best 0.816x FA3 on full (#3)" in state_summary(atts)
    assert "1 verified on other scenarios not compared" in state_summary(atts)
    c = compare(atts[1], atts[0])
    assert not c.comparable and "only 3 scenarios in common" in c.reason and "under 50%" in c.reason
    # the production attempt, latest, is compared only with production attempts: no jump
    hit = check_suspicious_win(atts[:2], Settings(workspace=tmp_path))
    assert "previous_best_seq" not in hit.data and not hit.fired


def test_a_grown_suite_compares_on_the_scenarios_both_ran(tmp_path: Path) -> None:
    """`full` grows by slow new scenarios: the raw geomean drops while every common scenario gets faster."""
    vs = [_verdict("full", _full(1.0)), _verdict("full", _full(1.005))]
    vs += [_verdict("full", _full(1.02 + 0.02 * k, extra=4)) for k in range(4)]
    atts = _store(tmp_path, vs)
    assert atts[-1].geomean_speedup < atts[1].geomean_speedup  # raw geomean: looks like a loss
    assert best_attempt(atts).seq == 6  # before: #2
    hit = check_stall(atts, Settings(workspace=tmp_path))
    assert not hit.fired and hit.evidence.startswith("improving")  # before: a stall at -x% vs #2
    assert "on 10 common scenarios" in hit.evidence and hit.data["measure"] == "fa3"
    assert hit.data["gain"] > 0.05


def test_the_goal_gap_is_read_on_the_latest_goal_anchor(tmp_path: Path) -> None:
    """#1 was verified against the original (met: 2x); later attempts against FA3 (not met)."""
    first = _verdict("full", _full(1.0), against="original", min_speedup=1.0)
    later = _verdict("full", _full(1.1), against="fa3", min_speedup=1.0)
    atts = _store(tmp_path, [first, later])
    hit = check_goal(atts)
    assert hit.fired and hit.data["goal_met"] is False  # before: "goal met by #1" (against the original)
    assert "0.880x FA3 on full (#2)" in hit.evidence and "short of the goal 1.00x FA3" in hit.evidence
    lim = limit_evidence(atts).evidence
    assert lim.startswith("best 0.880x FA3 on full (#2)") and "worst scenario full/s0 (0.88x FA3)" in lim


def test_the_anchor_decides_when_the_original_moves(tmp_path: Path) -> None:
    """vs the original #1 looks faster (its original timing was slower); vs FA3 #2 is faster."""
    a = _verdict("full", {i: (3.0, 0.80) for i in FULL})
    b = _verdict("full", {i: (2.5, 0.85) for i in FULL})
    atts = _store(tmp_path, [a, b])
    assert best_attempt(atts).seq == 2
    c = compare(atts[1], atts[0])
    assert c.comparable and c.measure == "fa3" and abs(c.ratio - 0.85 / 0.80) < 1e-9 and c.common == 10


def test_the_recorded_stage2_campaign_reads_like_with_like(tmp_path: Path) -> None:
    settings = Settings(workspace=tmp_path)
    with CampaignStore.open(settings) as store, STAGE2.open(encoding="utf-8") as fh:
        import_trace(store, fh)
        every = store.attempts(with_source=False)
    # the history as it stood after #15 (the trace grows; later attempts are checked below)
    atts = [a for a in every if a.seq <= 15]
    best = best_attempt(atts)
    assert best is not None and best.seq == 15 and best.verdict.suite == "full"  # before: #3, production
    assert "best 0.938x FA3 on full (#15)" in state_summary(atts)
    stall = check_stall(atts, settings)
    assert not stall.fired and stall.data["measure"] == "fa3"  # before: "best 12.73x (#2) not improved"
    assert set(stall.data["not_compared_seqs"]) == {3, 5, 7, 10}
    goal = check_goal(atts, settings.goal_speedup)
    assert "0.938x FA3 on full (#15)" in goal.evidence  # before: 0.82x vs fa3 from #3, a production run
    at13 = check_stall(atts[:13], settings)
    assert not at13.fired  # before: a stall against #2's 12.73x on the 153-scenario full
    # #16 (v16 on the 259-scenario full, 0.957x FA3) is compared with #15 on their common rows and wins
    assert len(every) >= 16 and best_attempt(every[:16]).seq == 16
    assert "best 0.957x FA3 on full (#16)" in state_summary(every[:16])
    # #17 (v17 on the 2 MiB-rounded arenas, 0.990x FA3) is compared with #16 on the same 259 rows and wins
    assert len(every) >= 17 and best_attempt(every[:17]).seq == 17
    assert "best 0.990x FA3 on full (#17)" in state_summary(every[:17])


def test_question_outcomes_and_the_report_read_like_with_like(tmp_path: Path) -> None:
    prod = _verdict("production", {i: (20.0, 0.9) for i in PROD})
    atts = _store(tmp_path, [_verdict("full", _full(1.0)), prod, _verdict("full", _full(1.03))])
    # a question after #1: the production run (20x vs the original on 3 rows) is no improvement, #3 is (+3 %)
    assert ask_outcome(atts, 1, horizon=1) == (False, 0.8, None)  # before: (True, 2.0, 20.0)
    imp, before, after = ask_outcome(atts, 1, horizon=2)
    assert imp is True and before == 0.8 and abs(after - 0.8 * 1.03) < 1e-9
    with CampaignStore(tmp_path / "c.sqlite") as store:
        c = campaign_from_store(store)
        s = {x.campaign_id: x for x in summarize(store).campaigns}[store.campaign_id]
    label = best_verdict(c).label
    assert label.endswith("#3 (best, 0.824x FA3 on full)")  # before: "#2 (best)", the production run
    assert s.best == "0.824x FA3 on full (#3)" and s.best_over_time[1].best_seq == 2  # #2 is the latest then


def test_the_mcp_best_is_like_with_like(tmp_path: Path) -> None:
    from mcp_server.resources import report_markdown
    from mcp_server.state import ServerState
    from mcp_server.task import best_attempt as task_best
    from mcp_server.tools_questions import campaign_status_of

    settings = Settings(workspace=tmp_path)
    prod = _verdict("production", {i: (20.0, 0.9) for i in PROD})
    with CampaignStore.open(settings) as store:
        for n, v in enumerate([_verdict("full", _full(1.0)), prod, _verdict("full", _full(1.02))]):
            store.record_attempt("k.cu", f"// attempt {n}\n", None, v, None)
    state = ServerState(settings)
    st = campaign_status_of(state)
    assert st.best is not None and st.best.seq == 3 and st.best.described == "0.816x FA3 on full (#3)"
    assert task_best(state).described == "0.816x FA3 on full (#3)"  # before: the production run, #2
    assert "Best: #3 `k.cu` 0.816x FA3 on full (#3)" in report_markdown(state)
