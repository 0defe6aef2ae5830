"""``attnq trace import``: a trace written by ``attnq trace export`` becomes the live campaign again."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from attnq.cli import main as cli_main
from harness.config import Settings
from harness.errors import InputError, StoreError
from harness.store import AskedQuestion, AttemptRecord, CampaignRecords, CampaignStore
from questions.bank import load_bank
from questions.human import add_question
from questions.reflect import declare, reflect
from questions.trace import export_trace, summarize, write_trace
from questions.trace_import import import_trace
from questions.triggers import best_attempt, detect, detect_triggers

ROOT = Path(__file__).resolve().parent.parent
STAGE2 = ROOT / "kernels" / "campaigns" / "stage2-fa3.jsonl"
FIXTURES = ROOT / "tests" / "data" / "campaigns"


def _record(store: CampaignStore, name: str, start: int = 0, stop: int | None = None) -> None:
    for a in json.loads((FIXTURES / f"{name}.json").read_text())["attempts"][start:stop]:
        store.record_attempt(a["source_path"], a["source_text"], a["compile_result"], a["verdict"], a["error"])


def _source_store(tmp_path: Path) -> Settings:
    """A workspace whose store holds two campaigns with every kind of record (the second one active)."""
    settings = Settings(workspace=tmp_path / "src", seed=4)
    settings.workspace.mkdir()
    with CampaignStore.open(settings) as store:
        bank = load_bank(settings=settings, store=store)
        _record(store, "stall_plateau", 0, 9)  # includes a compile_error attempt
        reflect(store, bank, settings=settings)
        _record(store, "stall_plateau", 9, 10)
        store.record_event("verify_kernel", args={"path": "kernels/candidate.cu"}, result={"ok": 1}, duration_s=41.5)
        add_question(store, "How many registers does the hot loop use per thread?")
        store.set_active_campaign("second")
        _record(store, "failures")  # incorrect, compile_error and no_gpu attempts
        _record(store, "goal", 0, 3)
        declare(store, bank, "done", "all scenarios pass", settings=settings)
        store.record_event("cli.reflect", args={"trigger": None}, ok=False)
        add_question(store, "Which warp stall reason dominates the main loop?", triggers=["stall"])
    return settings


def _comparable(trace: dict[str, Any]) -> dict[str, Any]:
    """The trace without what an import may change: exported_at and the stores' own row ids."""
    return {"format": trace["format"], "version": trace["version"],
            "campaigns": [{k: v if k == "campaign" else [{f: x for f, x in r.items() if f != "id"} for r in v]
                           for k, v in c.items()} for c in trace["campaigns"]]}


def _scenario_rows(store: CampaignStore, campaign_id: str) -> list[list[dict[str, Any]]]:
    return [[r.model_dump(exclude={"attempt_id"}) for r in store.scenario_rows(a.id)] for a in store.attempts(campaign_id)]


def _snapshot(store: CampaignStore) -> tuple[Any, ...]:
    return (_comparable(export_trace(store)), [i.model_dump() for i in store.list_campaigns()], store.active_campaign(),
            [_scenario_rows(store, c) for c in store.campaign_ids()])


def _file_records(kind: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "type"} for r in map(json.loads, STAGE2.read_text().splitlines())
            if r["type"] == kind]


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_export_import_export_round_trips(tmp_path: Path, fmt: str) -> None:
    settings = _source_store(tmp_path)
    buf = io.StringIO()
    with CampaignStore.open(settings) as src:
        write_trace(src, buf, fmt=fmt)
        before = export_trace(src)
        rows = {c: _scenario_rows(src, c) for c in src.campaign_ids()}
        assert any(r for c in rows.values() for r in c)  # the fixture has per-scenario rows to rebuild
    with CampaignStore(tmp_path / "fresh" / "campaign.sqlite") as dst:
        result = import_trace(dst, buf.getvalue())
        after = export_trace(dst)
        assert _comparable(after) == _comparable(before)
        assert {c: _scenario_rows(dst, c) for c in dst.campaign_ids()} == rows
        assert result.activated and result.active == "second" == dst.active_campaign()
        src_counts = {c["campaign"]["campaign_id"]: {k: len(v) for k, v in c.items() if k != "campaign"}
                      for c in before["campaigns"]}
        assert {c.campaign_id: c.counts for c in result.campaigns} == src_counts
        assert result.counts["human_questions"] == 2 and result.counts["claims"] == 1
        # a new attempt continues the numbering of the imported campaign
        nxt = dst.record_attempt("k.cu", "// next", None, None, {"error": "no_gpu", "message": "x"})
        assert nxt.seq == max(a["seq"] for a in before["campaigns"][1]["attempts"]) + 1


def test_the_recorded_stage2_campaign_imports_and_continues(tmp_path: Path) -> None:
    attempts = [AttemptRecord.model_validate(r) for r in _file_records("attempt")]
    asked = [AskedQuestion.model_validate(r) for r in _file_records("question")]
    best = best_attempt(attempts)
    assert best is not None and len(attempts) > 1
    settings = Settings(workspace=tmp_path)
    with CampaignStore.open(settings) as store, STAGE2.open(encoding="utf-8") as fh:
        result = import_trace(store, fh)
        assert result.active == "stage2-fa3" == store.active_campaign() == store.campaign_id
        s = {c.campaign_id: c for c in summarize(store).campaigns}["stage2-fa3"]
        assert (s.attempts, s.best_geomean, s.best_seq) == (len(attempts), best.geomean_speedup, best.seq)
        assert s.active and len(s.questions) == len(asked) and s.events == len(_file_records("event"))
        assert [q.model_dump(exclude={"id"}) for q in store.questions_asked()] == \
            [q.model_dump(exclude={"id"}) for q in asked]
        # reflect's triggers see the same history as in the campaign's own store
        assert [h.model_dump() for h in detect_triggers(store, settings)] == \
            [h.model_dump() for h in detect(attempts, asked, settings)]
        last = attempts[-1]
        nxt = store.record_attempt(last.source_path, last.source_text, last.compile, last.verdict, None)
        assert nxt.seq == max(a.seq for a in attempts) + 1 == len(attempts) + 1
        assert [a.seq for a in store.attempts()] == [*(a.seq for a in attempts), nxt.seq]


def test_a_campaign_id_in_use_is_refused_and_nothing_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = _source_store(tmp_path)
    text = io.StringIO()
    with CampaignStore.open(settings) as store:
        write_trace(store, text, fmt="json")
        before = _snapshot(store)
        with pytest.raises(InputError, match="--as NEW_ID"):
            import_trace(store, text.getvalue())
        with pytest.raises(InputError, match="already exists"):
            import_trace(store, text.getvalue(), campaign_id="second")
        assert _snapshot(store) == before
        # the store layer refuses too, as one transaction: the new campaign before the clash is not written
        fresh = CampaignRecords(campaign_id="brand-new", created_at="2026-12-01T00:00:00+00:00",
                                attempts=store.attempts("second"))
        clash = CampaignRecords(campaign_id="second", created_at="2026-12-01T00:00:00+00:00")
        with pytest.raises(InputError, match="already exists"):
            store.insert_campaigns([fresh, clash])
        assert _snapshot(store) == before and "brand-new" not in store.campaign_ids()
        # a database error half-way (a repeated attempt number) also leaves nothing behind
        twice = store.attempts("second")[:1] * 2
        with pytest.raises(StoreError):
            store.insert_campaigns([CampaignRecords(campaign_id="twice", created_at="x", attempts=twice)])
        assert _snapshot(store) == before
    ws = ["--workspace", str(settings.workspace)]
    capsys.readouterr()
    trace = tmp_path / "t.jsonl"
    trace.write_text(STAGE2.read_text())
    assert cli_main(["trace", "import", str(trace), *ws]) == 0
    out = capsys.readouterr().out  # the trace's unused 'default' is skipped: the store's own holds attempts
    assert "skipped campaign default" in out and "imported campaign stage2-fa3" in out
    assert "active campaign: second (unchanged" in out  # the store held attempts already
    with CampaignStore.open(settings) as store:
        before = _snapshot(store)
    assert cli_main(["trace", "import", str(trace), *ws]) == 2
    assert "--as NEW_ID" in capsys.readouterr().err
    with CampaignStore.open(settings) as store:
        assert _snapshot(store) == before


def test_a_corrupt_line_half_way_imports_nothing(tmp_path: Path) -> None:
    lines = STAGE2.read_text().splitlines()
    bad = len(lines) // 2
    for broken in (lines[bad][: len(lines[bad]) // 2],                            # truncated: not JSON
                   json.dumps({**json.loads(lines[bad]), "type": "mystery"}),    # unknown record type
                   json.dumps({**json.loads(lines[bad]), "created_at": None})):  # not a valid record
        with CampaignStore(tmp_path / "c.sqlite") as store:
            before = _snapshot(store)
            text = "\n".join([*lines[:bad], broken, *lines[bad + 1:]])
            with pytest.raises(InputError, match=f"line {bad + 1}\\b"):
                import_trace(store, text)
            with pytest.raises(InputError, match=f"line {bad + 2}\\b"):  # numbers count leading blank lines
                import_trace(store, "\n" + text)
            assert _snapshot(store) == before and store.attempts() == []


@pytest.mark.parametrize("change", [{"format": "other-trace"}, {"version": 2}, {"version": "1"}])
def test_wrong_format_or_version_is_refused(tmp_path: Path, change: dict[str, Any]) -> None:
    lines = STAGE2.read_text().splitlines()
    header = {**json.loads(lines[0]), **change}
    whole = {"format": "attnq-trace", "version": 1, "exported_at": "x", "campaigns": []} | change
    word = "format" if "format" in change else "version"
    with CampaignStore(tmp_path / "c.sqlite") as store:
        before = _snapshot(store)
        for data in ("\n".join([json.dumps(header), *lines[1:]]), json.dumps(whole), whole):
            with pytest.raises(InputError, match=word):
                import_trace(store, data)
        for junk in ("", "not json at all", "[1, 2]"):
            with pytest.raises(InputError):
                import_trace(store, junk)
        assert _snapshot(store) == before


def test_as_renames_one_campaign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = ["--workspace", str(tmp_path)]
    with pytest.raises(InputError, match="--campaign"), CampaignStore(tmp_path / "x.sqlite") as store:
        import_trace(store, STAGE2.read_text(), rename_to="restored")  # the trace holds two campaigns
    assert cli_main(["trace", "import", str(STAGE2), "--as", "restored", *ws]) == 2
    assert cli_main(["trace", "import", str(STAGE2), "--campaign", "nope", "--as", "restored", *ws]) == 2
    assert cli_main(["trace", "import", str(STAGE2), "--campaign", "stage2-fa3", "--as", "../up", *ws]) == 2
    capsys.readouterr()
    assert cli_main(["trace", "import", str(STAGE2), "--campaign", "stage2-fa3", "--as", "restored", *ws]) == 0
    out = capsys.readouterr().out
    assert "imported campaign restored (from stage2-fa3)" in out and "active campaign: restored" in out
    assert cli_main(["trace", "import", str(STAGE2), "--campaign", "stage2-fa3", "--as", "again", "--json", *ws]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["active"] == "restored" and not shown["activated"]
    assert shown["campaigns"][0]["counts"]["attempts"] == len(_file_records("attempt"))
    with CampaignStore.open(Settings(workspace=tmp_path)) as store:
        assert "stage2-fa3" not in store.campaign_ids()
        for cid in ("restored", "again"):
            got = store.attempts(cid)
            assert {a.campaign_id for a in got} == {cid}
            assert [a.model_dump(exclude={"id", "campaign_id"}) for a in got] == \
                [AttemptRecord.model_validate(r).model_dump(exclude={"id", "campaign_id"})
                 for r in _file_records("attempt")]
        assert store.claims("restored")[0].answer == _file_records("claim")[0]["answer"]


def test_cli_reads_a_missing_or_binary_file_as_a_plain_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    for name in ("missing.jsonl", "bin.jsonl"):
        assert cli_main(["trace", "import", str(tmp_path / name), "--workspace", str(tmp_path)]) == 2
        assert "Traceback" not in capsys.readouterr().err


def test_an_import_keeps_the_active_campaign_someone_chose(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A fresh store takes the import as its campaign, but not over one chosen with `trace use` (trial of
    2026-12-06: `trace use --new exp2` then `trace import ... --as restored` made `restored` active)."""
    ws = ["--workspace", str(tmp_path)]
    assert cli_main(["trace", "use", "--new", "exp2", *ws]) == 0
    assert cli_main(["trace", "import", str(STAGE2), "--campaign", "stage2-fa3", "--as", "restored", *ws]) == 0
    assert "active campaign: exp2 (unchanged; switch with: attnq trace use restored)" in capsys.readouterr().out
    with CampaignStore.open(Settings(workspace=tmp_path)) as store:
        assert store.active_campaign() == "exp2" and len(store.attempts("restored")) == len(_file_records("attempt"))
