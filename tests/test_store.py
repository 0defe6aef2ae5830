"""Campaign store: round trips with real Verdict models, campaigns, durability under SIGKILL."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.config import Settings
from harness.errors import StoreError
from harness.store import STORE_FILENAME, CampaignStore
from harness.verdict import Verdict

DATA = Path(__file__).parent / "data" / "campaigns"


def _fixture(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def _replay(store: CampaignStore, name: str, upto: int | None = None) -> None:
    for a in _fixture(name)["attempts"][:upto]:
        v = None if a["verdict"] is None else Verdict.model_validate(a["verdict"])
        store.record_attempt(a["source_path"], a["source_text"], a["compile_result"], v, a["error"])


def test_attempt_round_trip_keeps_verdict_source_and_compile_facts(tmp_path: Path) -> None:
    fx = _fixture("failures")
    with CampaignStore(tmp_path / "c.sqlite") as store:
        _replay(store, "failures")
        got = store.attempts()
    assert [a.seq for a in got] == list(range(1, len(fx["attempts"]) + 1))
    assert [a.status for a in got] == ["correct", "failed_compile", "incorrect", "error", "error", "correct"]
    for rec, src in zip(got, fx["attempts"]):
        assert rec.source_text == src["source_text"]
        assert rec.source_sha256 == hashlib.sha256(src["source_text"].encode()).hexdigest()
        assert rec.compile == src["compile_result"]
        assert rec.error == src["error"]
        if src["verdict"] is not None:
            v = Verdict.model_validate(src["verdict"])
            assert rec.verdict == v
            assert rec.geomean_speedup == v.geomean_speedup
            assert rec.failed == v.failed
            assert rec.goal_met == v.goal.met
    assert got[1].error_code == "compile_error" and got[3].error_code == "no_gpu"
    rows = CampaignStore(tmp_path / "c.sqlite").scenario_rows(got[2].id)
    assert len(rows) == 12
    assert {r.scenario_id for r in rows if not r.correct} == set(got[2].failed)
    assert all(r.speedup and r.tflops for r in rows if r.correct)


def test_compile_result_model_is_accepted(tmp_path: Path) -> None:
    compile_mod = pytest.importorskip("harness.compile")
    model = compile_mod.CompileResult.model_validate(_fixture("goal")["attempts"][0]["compile_result"])
    with CampaignStore(tmp_path / "c.sqlite") as store:
        rec = store.record_attempt("k.cu", "src", model, None, None)
    assert rec.status == "compiled"
    assert rec.compile == model.model_dump(mode="json")


def test_nothing_to_record_is_a_store_error(tmp_path: Path) -> None:
    with CampaignStore(tmp_path / "c.sqlite") as store, pytest.raises(StoreError):
        store.record_attempt("k.cu", "src", None, None, None)


def test_campaigns_are_separate_and_the_active_one_persists(tmp_path: Path) -> None:
    settings = Settings(workspace=tmp_path)
    with CampaignStore.open(settings) as store:
        assert store.path == tmp_path.resolve() / ".attnq" / STORE_FILENAME
        assert store.campaign_id == "default"
        _replay(store, "goal", 2)
        store.set_active_campaign("hopper-fa3")
        _replay(store, "goal", 3)
    with CampaignStore.open(settings) as store:
        assert store.campaign_id == "hopper-fa3"
        assert [a.seq for a in store.attempts()] == [1, 2, 3]
        assert [a.seq for a in store.attempts("default")] == [1, 2]
        infos = {c.campaign_id: c for c in store.list_campaigns()}
        assert infos["hopper-fa3"].active and not infos["default"].active
        assert infos["default"].attempts == 2
    with CampaignStore.open(settings, campaign_id="default") as store:
        assert store.campaign_id == "default" and store.active_campaign() == "hopper-fa3"


def test_questions_claims_events_and_human_questions(tmp_path: Path) -> None:
    with CampaignStore(tmp_path / "c.sqlite") as store:
        _replay(store, "goal", 2)
        q = store.record_question("hgmma-or-hmma", "Does the SASS ...?", layer="instruction_mix_registers",
                                  trigger="stall", fired=True, evidence="best 1.34x", evidence_data={"n": 2})
        assert q.attempt_seq == 2 and q.evidence_data == {"n": 2}
        c = store.record_claim("done", "goal reached", goal_met=False)
        store.update_claim_answer(c.id, {"question_id": "x"})
        e = store.record_event("verify_kernel", args={"path": "k.cu"}, result={"status": "correct"}, duration_s=1.5)
        h = store.record_human_question("Is it L2 bound?", "is it l2 bound", triggers=["stall"], layer=None,
                                        campaign_id="other")
        assert store.claims()[0].answer == {"question_id": "x"} and store.claims()[0].attempt_seq == 2
        assert store.events()[0] == e and e.duration_s == 1.5
        assert store.human_questions() == [h] and h.campaign_id == "other"
        assert store.questions_asked(all_campaigns=True) == [q]
        with pytest.raises(StoreError):
            store.record_claim("maybe", "x", goal_met=None)  # type: ignore[arg-type]
        with pytest.raises(StoreError):
            store.attempt(99)


def test_threads_share_one_handle_without_duplicate_seqs(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path / "c.sqlite")

    def work(i: int) -> None:
        for j in range(10):
            store.record_attempt(f"k{i}.cu", f"// {i} {j}", None, None, {"error": "compile_error", "message": "x"})

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [a.seq for a in store.attempts()] == list(range(1, 41))
    store.close()


_WRITER = r"""
import json, sys
from harness.store import CampaignStore
from harness.verdict import Verdict
path, fixture = sys.argv[1], sys.argv[2]
atts = json.load(open(fixture))["attempts"]
store = CampaignStore(path)
i = 0
while True:
    a = atts[i % len(atts)]
    v = None if a["verdict"] is None else Verdict.model_validate(a["verdict"])
    src = a["source_text"] + ("// pad %d\n" % i) * 2000   # ~30 kB more per attempt: longer transactions
    rec = store.record_attempt(a["source_path"], src, a["compile_result"], v, a["error"])
    store.record_event("verify_kernel", args={"i": i})
    print(rec.seq, rec.source_sha256, flush=True)
    i += 1
"""


def test_sigkill_mid_stream_loses_no_committed_attempt(tmp_path: Path) -> None:
    db = tmp_path / "campaign.sqlite"
    committed: dict[int, str] = {}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for round_ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(db), str(DATA / "churn.json")],
                                stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        target = 8 + 5 * round_
        n = 0
        deadline = time.monotonic() + 60
        while n < target and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seq, sha = line.split()
            committed[int(seq)] = sha
            n += 1
        time.sleep(0.013 * (round_ + 1))  # land somewhere inside a later write
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for line in proc.stdout:  # lines printed before the kill are committed too
            parts = line.split()
            if line.endswith("\n") and len(parts) == 2:  # the kill can cut the last line short
                committed[int(parts[0])] = parts[1]
        assert n == target, "writer did not produce attempts"
    with CampaignStore(db) as store:
        assert store.integrity_check() == "ok"
        got = {a.seq: a for a in store.attempts()}
        for seq, sha in committed.items():
            rec = got[seq]
            assert rec.source_sha256 == sha
            assert hashlib.sha256((rec.source_text or "").encode()).hexdigest() == sha
            if rec.verdict is not None:
                assert len(store.scenario_rows(rec.id)) == rec.verdict.num_scenarios
        assert sorted(got) == list(range(1, len(got) + 1))  # no holes: each attempt is all or nothing
