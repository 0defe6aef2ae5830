"""The report: roofline numbers, derived question effects, every figure built from the recorded campaign
(kernels/campaigns/) and from the test fixtures, the HTML page, and the CLI."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from attnq.cli import main
from harness.config import Settings
from harness.errors import InputError
from harness.roofline import (
    HBM_TBPS_MEASURED_H200,
    annotate,
    position,
    scenario_from_id,
)
from harness.scenarios import list_suites, load_suite
from harness.store import CampaignStore
from harness.verdict import Verdict
from questions.policy import effectiveness
from report import (
    ReportInputs,
    build_report,
    campaign_from_store,
    load_evolve,
    load_trace,
    load_verdict,
    write_report,
)
from report.data import question_effects
from report.html import png_size
from tests.report_support import (
    EVOLVE,
    RECORDED_TRACE,
    ROOT,
    V3,
    V5,
    picture_stats,
    replay,
    replay_fixture,
)


def _v5() -> Verdict:
    return Verdict.model_validate(json.loads(gzip.decompress(V5.read_bytes())))


# -- roofline --------------------------------------------------------------------------------------

def test_every_suite_id_parses_back_to_its_scenario() -> None:
    for name in list_suites():
        for sc in load_suite(name).scenarios:
            assert scenario_from_id(sc.id) == sc, sc.id
    assert scenario_from_id("mha_b4_h16_s1024_d128") is None
    assert scenario_from_id("g/b1-s64-h3x2-d64-causal-bf16") is None  # 3 heads over 2 kv heads: no such shape


def test_roofline_matches_the_hand_count_and_kernels_notes() -> None:
    """Bounds as kernels/NOTES.md derives them by hand: decode is memory-bound, long prefill compute-bound."""
    v = _v5()
    assert all(r.bound is None for r in v.scenarios)  # recorded before the fields existed
    assert annotate(v, load_suite("full").scenarios) == len(v.scenarios)
    assert v.hbm_tbps == HBM_TBPS_MEASURED_H200 and v.bound_tflops == v.peak_tflops
    rows = {r.id: r for r in v.scenarios}
    dec = rows["production/b64-sq1-sk2048-h32x8-d128-noncausal-bf16"]
    nbytes = 2 * (64 * 1 * 32 * 128 * 2) + 2 * (64 * 2048 * 8 * 128 * 2) + 4 * 64 * 32  # q+o, k+v, lse
    assert dec.bound == "memory"
    assert dec.fraction_of_bound == pytest.approx(nbytes / 4.3e12 / (dec.candidate.median_ms * 1e-3), rel=1e-9)
    big = rows["fa3grid/b1-s16384-h16-d128-noncausal-bf16"]
    assert big.bound == "compute" and big.fraction_of_bound == pytest.approx(big.fraction_of_peak, rel=1e-9)
    for r in v.scenarios:
        sc = scenario_from_id(r.id)
        if r.group == "production" and sc.seqlen_q <= 4:
            assert r.bound == "memory", r.id
        if r.group == "fa3grid" and sc.seqlen_q >= 1024:
            assert r.bound == "compute", r.id
        assert 0 <= r.fraction_of_bound <= 1.0, r.id  # nothing beats its roof on a real H200
    # an override moves the memory fraction in proportion and is recorded
    annotate(v, hbm_tbps=3.0, overwrite=True)
    assert v.hbm_tbps == 3.0
    assert rows["production/b64-sq1-sk2048-h32x8-d128-noncausal-bf16"].fraction_of_bound == pytest.approx(
        dec.fraction_of_bound, rel=1e-9)  # same object, recomputed
    assert dec.fraction_of_bound == pytest.approx(nbytes / 3.0e12 / (dec.candidate.median_ms * 1e-3), rel=1e-9)


def test_position_picks_the_longer_bound_and_refuses_bad_rates() -> None:
    assert position(1e12, 1e6, 2.0, matmul_tflops=1000, hbm_tbps=1) == ("compute", pytest.approx(0.5))
    assert position(1e6, 1e12, 500.0, matmul_tflops=1000, hbm_tbps=4) == ("memory", pytest.approx(0.5))
    assert position(1e6, 1e12, None, matmul_tflops=1000, hbm_tbps=4) == ("memory", None)
    with pytest.raises(ValueError, match="positive"):
        position(1, 1, 1, matmul_tflops=0, hbm_tbps=4)
    with pytest.raises(Exception, match="hbm_tbps"):
        Settings(hbm_tbps=-1)
    assert Settings(hbm_tbps=3.9, matmul_tflops=700).hbm_tbps == 3.9


# -- question effects -------------------------------------------------------------------------------

def test_question_effects_agree_with_the_selection_policy(tmp_path: Path) -> None:
    """Per-question counts are those questions/policy.py learns from; gains are best after / best before - 1."""
    with CampaignStore(tmp_path / "c.sqlite") as store:
        replay_fixture(store, "stall_plateau", 0, 2)
        store.record_question("a", "question a", layer="memory_traffic", trigger="stall", fired=True, evidence="e")
        replay_fixture(store, "stall_plateau", 2, 4)
        store.record_question("b", "question b", layer="pipelining", trigger="stall", fired=True, evidence="e")
        store.record_question("a", "question a", layer="memory_traffic", trigger=None, fired=False, evidence="e")
        replay_fixture(store, "stall_plateau", 4, None)
        attempts = store.attempts()
        campaign = campaign_from_store(store)
        policy = effectiveness(store)
    per_q, per_layer = question_effects(campaign)
    for row in per_q:
        st = policy[row.key]
        assert (row.asked, row.resolved, row.improved) == (st.asked, st.resolved, st.improved)
    best = {a.seq: a.geomean_speedup for a in attempts if a.status == "correct"}
    a_row = next(r for r in per_q if r.key == "a")
    expect = max(best[s] for s in (3, 4, 5) if s in best) / max(best[s] for s in (1, 2) if s in best) - 1
    assert a_row.gains[0] == pytest.approx(expect)
    assert [(r.key, r.asked, r.resolved, r.improved) for r in per_q] == [("a", 2, 2, 1), ("b", 1, 1, 0)]
    assert per_q[1].median_gain == pytest.approx(best[7] / best[4] - 1)  # +0.6 %: below the 1 % that counts
    assert [r.key for r in per_layer] == ["memory_traffic", "pipelining"] and per_layer[0].asked == 2


# -- the report from the recorded campaign ---------------------------------------------------------------

@pytest.fixture(scope="module")
def recorded_report():  # type: ignore[no-untyped-def]
    campaign = load_trace(RECORDED_TRACE)
    inputs = ReportInputs(campaign=campaign, compare=(load_verdict(V3), load_verdict(V5)), evolve=load_evolve(EVOLVE))
    seen: list[tuple[int, int, str]] = []
    report = build_report(inputs, progress=lambda d, n, m: seen.append((d, n, m)))
    return campaign, report, seen


def test_recorded_campaign_gives_every_figure(recorded_report) -> None:  # type: ignore[no-untyped-def]
    campaign, report, seen = recorded_report
    assert [f.key for f in report.figures] == ["speedup", "roofline", "compare", "timeline", "questions", "evolve"]
    assert report.skipped == []
    assert seen[-1] == (6, 6, "done") and [d for d, _, _ in seen] == list(range(7))
    for f in report.figures:
        w, h, colours = picture_stats(f.png)
        assert (w, h) == png_size(f.png) and w >= 1000 and h >= 300, f.key
        assert colours > 50, f"{f.key} looks blank ({colours} colours)"
    assert campaign.campaign_id == "fast-kernel" and len(campaign.attempts) == 4
    assert "153/153 correct" in report.summary and "9.499x vs the original" in report.summary
    assert "1.122x vs flash" in report.summary and "0.761x vs cudnn" in report.summary
    assert "fast-kernel #4 (best, " in report.summary  # the best attempt stands for the kernel
    assert "claims: done after #4" in report.summary


def test_timeline_svg_carries_every_question_claim_and_attempt(recorded_report) -> None:  # type: ignore[no-untyped-def]
    campaign, report, _ = recorded_report
    svg = report.figure("timeline").svg
    titles = re.findall(r"<title>(.*?)</title>", svg, flags=re.DOTALL)
    qs = [t for t in titles if t.startswith("Q")]
    assert len(qs) == len(campaign.questions) == 4
    assert any("[suspicious_win] kv-head-mapping" in t for t in qs)
    assert any(t.startswith("Q1 after #2 [general] registers-cap-residency") and "followed by 9.499x" in t for t in qs)
    assert sum(t.startswith("done claimed after #4") for t in titles) == 1
    assert sum(bool(re.match(r"#\d (correct|incorrect)", t)) for t in titles) == 4
    table = report.figure("timeline").tables[0]
    assert table.count("<tr>") == 1 + 4 + 1 and "7.950x \u2192 9.499x" in table and table.count("pending") == 3


def test_the_timelines_best_so_far_is_like_with_like() -> None:
    """The stage-2 campaign mixes `full` and `production` attempts (#3: ~30x vs the original on 22 scenarios): the
    best-so-far line is drawn per suite, so a production run is never the best of the full ones (the one line sat at
    ~30x from #3 on), and the legend names each line's suite."""
    from report.figures_campaign import best_so_far_lines, timeline_figure

    c = load_trace(ROOT / "kernels" / "campaigns" / "stage2-fa3.jsonl", "stage2-fa3")
    lines = {suite: (xs, ys) for suite, xs, ys in best_so_far_lines(c.attempts)}
    # the latest attempt's suite first (#20 of the exported trace is a production run)
    assert next(iter(lines)) == c.attempts[-1].verdict.suite and set(lines) == {"full", "production"}
    by_suite = {s: [a.geomean_speedup for a in c.attempts if a.status == "correct" and a.verdict is not None
                    and a.verdict.suite == s and a.geomean_speedup is not None] for s in lines}
    assert max(by_suite["production"]) > max(by_suite["full"])  # the case: one line would show production's best
    assert lines["full"][1][-1] == max(by_suite["full"]) and lines["production"][1][-1] == max(by_suite["production"])
    assert all(b >= a for a, b in zip(lines["full"][1], lines["full"][1][1:], strict=False))  # a best never falls
    svg = timeline_figure(c).svg  # type: ignore[union-attr]
    assert "best so far on full" in svg and "best so far on production" in svg


def test_question_effects_of_the_recorded_campaign(recorded_report) -> None:  # type: ignore[no-untyped-def]
    campaign, _, _ = recorded_report
    per_q, per_layer = question_effects(campaign)
    rows = {r.key: r for r in per_q}
    assert set(rows) == {"registers-cap-residency", "kv-head-mapping", "production-suite-holds", "last-wave-occupancy"}
    reg = rows["registers-cap-residency"]  # asked after #2; #3 (9.316x) and #4 (9.499x) beat #1's 7.950x
    assert (reg.asked, reg.resolved, reg.improved) == (1, 1, 1)
    assert reg.median_gain == pytest.approx(9.49890982407666 / 7.950076904960349 - 1)
    assert all(r.resolved == 0 and r.median_gain is None for k, r in rows.items() if k != "registers-cap-residency")
    assert {r.key for r in per_layer} == {q.layer for q in campaign.questions}


def test_html_is_self_contained_with_every_figure(recorded_report, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, report, _ = recorded_report
    page = report.html
    assert page.count('<figure class="attnq-figure"') == len(report.figures)
    assert page.count("data:image/png;base64,") == len(report.figures) - 1  # the timeline is inline SVG
    assert page.count("<svg") == 1 and "Content-Security-Policy" in page
    assert not re.search(r"""(src|href)=["'](https?:|//)""", page)
    written = write_report(report, tmp_path / "out" / "r.html", tmp_path / "png")
    assert [p.name for p in written] == ["r.html"] + [f"{f.key}.png" for f in report.figures]
    assert all(p.stat().st_size > 10_000 for p in written)


def test_compare_table_shows_both_runs(recorded_report) -> None:  # type: ignore[no-untyped-def]
    _, report, _ = recorded_report
    table = report.figure("compare").tables[0]
    assert "8.659x" in table and "9.499x" in table  # run 7 (v3) and run 11 (v5) geomeans vs the original
    assert "geomean vs flash" in table and "1.139x" in table and "1.122x" in table


# -- other sources, skipped sections, bad input -------------------------------------------------------------

def test_fixture_campaign_with_failures_and_unknown_shapes(tmp_path: Path) -> None:
    with CampaignStore(tmp_path / "c.sqlite") as store:
        replay_fixture(store, "failures")
        campaign = campaign_from_store(store)
    report = build_report(ReportInputs(campaign=campaign))
    assert [f.key for f in report.figures] == ["speedup", "timeline"]
    assert any(s.startswith("roofline") and "known shape" in s for s in report.skipped)  # fixture ids are not shapes
    assert any(s.startswith("question effectiveness: no question") for s in report.skipped)
    assert any(s.startswith("evolutionary search: no evolve data") for s in report.skipped)
    statuses = {a.status for a in campaign.attempts}
    assert {"correct", "incorrect", "failed_compile", "error"} <= statuses
    titles = re.findall(r"<title>(.*?)</title>", report.figure("timeline").svg, flags=re.DOTALL)
    assert len([t for t in titles if t.startswith("#")]) == len(campaign.attempts)
    assert any("failed_compile (compile_error)" in t for t in titles)


def test_several_verdicts_get_their_own_sections() -> None:
    report = build_report(ReportInputs(verdicts=[load_verdict(V3), load_verdict(V5)]))
    keys = [f.key for f in report.figures]
    assert keys == ["speedup-run07-v3-f2bd825", "roofline-run07-v3-f2bd825",
                    "speedup-run11-v5-7647c64-anchor-spin", "roofline-run11-v5-7647c64-anchor-spin"]
    assert report.key_figure().key == "speedup-run07-v3-f2bd825"
    assert "campaign timeline and question effectiveness: no campaign given" in report.skipped


def test_bad_inputs_are_refused_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nothing to report"):
        build_report(ReportInputs())
    (tmp_path / "x.json").write_text('{"kernel": "k.cu"}')
    with pytest.raises(InputError, match=r"x.json is not a verdict: source_sha256: Field required"):
        load_verdict(tmp_path / "x.json")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(InputError, match="is not JSON"):
        load_verdict(tmp_path / "bad.json")
    with pytest.raises(InputError, match="cannot read"):
        load_verdict(tmp_path / "missing.json")
    with pytest.raises(InputError, match="not an attnq trace"):
        load_trace(V5)
    with pytest.raises(InputError, match=r"no campaign 'nope'.*campaigns: fast-kernel"):
        load_trace(RECORDED_TRACE, "nope")
    (tmp_path / "ev.json").write_text('{"generations": [{"generation": -1}]}')
    with pytest.raises(InputError, match=r"attnq-evolve-report data: generations.0.generation"):
        load_evolve(tmp_path / "ev.json")


# -- the CLI ---------------------------------------------------------------------------------------------

def test_cli_report_writes_html_and_pngs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNQ_STATE", str(tmp_path / "state"))
    out, pngs = tmp_path / "r.html", tmp_path / "png"
    code = main(["report", "--trace", str(RECORDED_TRACE), "--compare", str(V3), str(V5), "-o", str(out),
                 "--png-dir", str(pngs), "--hbm-tbps", "4.0", "--json"])
    assert code == 0
    got = json.loads(capsys.readouterr().out)
    assert got["figures"] == ["speedup", "roofline", "compare", "timeline", "questions"]
    assert sorted(p.name for p in pngs.iterdir()) == sorted(f"{k}.png" for k in got["figures"])
    assert out.read_text().count('<figure class="attnq-figure"') == 5
    assert "4.0 TB/s" in out.read_text()  # the override reached the roofline caption
    assert not (tmp_path / "state").exists()  # reading a trace touches no store


def test_cli_report_from_the_store_and_its_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNQ_STATE", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    assert main(["report"]) == 2
    assert "nothing to report" in capsys.readouterr().err
    assert main(["report", "--campaign", "fast-kernel"]) == 2
    assert "no campaign store at" in capsys.readouterr().err
    with CampaignStore.open(Settings(), campaign_id="fast-kernel") as store:
        replay(store, load_trace(RECORDED_TRACE))
        store.set_active_campaign("fast-kernel")
    assert main(["report"]) == 0
    text = capsys.readouterr().out
    assert "campaign fast-kernel: 4 attempts" in text and "wrote attnq-report.html (4 figures)" in text
    assert (tmp_path / "attnq-report.html").exists()
    assert main(["report", "--campaign", "nope"]) == 2
    assert "unknown campaign 'nope'" in capsys.readouterr().err
    assert main(["report", "--verdict", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["report", "--trace", str(RECORDED_TRACE), "--horizon", "0"]) == 2
    assert "horizon" in capsys.readouterr().err


def test_all_failed_and_disjoint_verdicts() -> None:
    v = _v5()
    for r in v.scenarios:
        r.correct, r.failure_kind, r.speedup, r.vs_anchor = False, "wrong_output", None, {}
    v.status, v.num_correct, v.geomean_speedup, v.geomean_vs_anchor = "incorrect", 0, None, {}
    from report.data import LabelledVerdict

    failed = LabelledVerdict(label="failed", verdict=v)
    report = build_report(ReportInputs(verdicts=[failed]))
    assert [f.key for f in report.figures] == ["speedup"]
    assert picture_stats(report.figures[0].png)[2] > 20  # the 153 red marks are drawn
    assert "153 incorrect scenario(s) marked in red" in report.figures[0].caption
    assert any(s.startswith("roofline failed: no data to draw (no correct scenario") for s in report.skipped)
    other = v.model_copy(deep=True)
    for r in other.scenarios:
        r.id = "renamed/" + r.id
    with pytest.raises(InputError, match="share no scenario"):
        build_report(ReportInputs(compare=(failed, LabelledVerdict(label="other", verdict=other))))
