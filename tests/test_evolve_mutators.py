"""The mutators: knobs found and set in real sources, and the headless --mutator-cmd contract (brief on
stdin, child on stdout, N in parallel, failures and timeouts) with a scripted mutator, through the
CLI with the three ablation arms."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from attnq.cli import main
from evolve.brief import MutationBrief, ProgramBrief, render_brief
from evolve.config import KnobSpec
from evolve.db import EvolveDB
from evolve.mutators import CommandMutator, default_domain, extract_source, find_knobs, knob_specs, set_knobs
from harness import ORIGINAL_KERNEL
from harness.errors import InputError
from tests.evolve_support import SEED, state_dir

SCRIPT = Path(__file__).resolve().parent / "data" / "evolve" / "scripted_mutator.py"
CMD = f"{sys.executable} {SCRIPT}"


def test_knobs_are_found_and_set_in_the_original_kernel() -> None:
    src = ORIGINAL_KERNEL.read_text()
    knobs = find_knobs(src)
    assert {"kBM": 64, "kBN": 64, "kWarps": 4, "kLdX": 8, "kLdS": 4}.items() <= knobs.items()
    child = set_knobs(src, {"kBM": 32, "kWarps": 2, "kLdX": 16})
    assert "constexpr int kBM = 32;                     // query rows per block" in child
    assert "static constexpr int kLdX = D + 16;" in child and "constexpr int kWarps = 2;" in child
    assert len(child.splitlines()) == len(src.splitlines())
    assert default_domain(64) == [32, 64, 128] and default_domain(12) == [8, 12, 16] and default_domain(0) == [0, 4]
    specs = knob_specs(src, [])
    assert KnobSpec(names=["kWarps"], values=[[2], [4], [8]]) in specs
    with pytest.raises(InputError, match="kNope"):
        knob_specs(src, [KnobSpec(names=["kNope"], values=[[1]])])
    with pytest.raises(InputError, match="no compile-time integer"):
        knob_specs("int main() { return 0; }\n", [])
    with pytest.raises(InputError, match="not defined"):
        set_knobs(src, {"kNope": 1})


def test_extract_source_takes_the_longest_fenced_block() -> None:
    assert extract_source("plain source\nline 2\n") == "plain source\nline 2\n"
    out = "Here:\n```\nshort\n```\nand the file:\n```cuda\n#include \"attn_abi.h\"\nint x;\n```\nbye"
    assert extract_source(out) == "#include \"attn_abi.h\"\nint x;\n"
    assert extract_source("  \n") == ""


def _brief(ticket: int, question_id: str = "q-one") -> MutationBrief:
    b = MutationBrief(run_id="r", ticket_id=ticket, generation=1, island=0, kind="mutation", selection="exploit",
                      arm="question", question_id=question_id, layer="pipelining", question="Why is it slow?",
                      parent=ProgramBrief(id=1, generation=0, island=0, status="correct", fitness_quick=1.0),
                      parent_source=SEED.read_text())
    b.text = render_brief(b)
    return b


def test_command_mutator_contract_stdin_stdout_parallel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("SCRIPTED_LOG", str(log))
    monkeypatch.setenv("SCRIPTED_MODE", "pause")  # each call takes 1 s
    briefs = [_brief(11), _brief(12, "q-two")]
    outs = CommandMutator(CMD, parallel=2, timeout_s=60, workdir=tmp_path / "briefs").mutate_many(briefs)
    assert [o.ticket_id for o in outs] == [11, 12] and all(o.error is None for o in outs)
    for o in outs:
        assert o.source and o.source.startswith("// A tiny candidate") and "Answering" not in o.source
        assert o.source != SEED.read_text()  # one #define changed
    calls = sorted((json.loads(x) for x in log.read_text().splitlines()), key=lambda c: c["ticket"])
    assert [c["ticket"] for c in calls] == ["11", "12"] and [c["question_id"] for c in calls] == ["q-one", "q-two"]
    import hashlib
    assert [c["stdin_sha256"] for c in calls] == [hashlib.sha256(b.text.encode()).hexdigest() for b in briefs]
    assert json.loads(Path(calls[0]["brief_file"]).read_text())["ticket_id"] == 11
    assert calls[0]["start"] < calls[1]["end"] and calls[1]["start"] < calls[0]["end"]  # ran at the same time


@pytest.mark.parametrize(("mode", "message"), [("fail", "exited with status 3: mutator: the model is unavailable"),
                                               ("empty", "printed no source"), ("sleep", "timed out after 1 s")])
def test_command_mutator_failures_are_plain(mode: str, message: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTED_MODE", mode)
    monkeypatch.setenv("SCRIPTED_LOG", str(tmp_path / "calls.jsonl"))
    out = CommandMutator(CMD, parallel=1, timeout_s=1.0, workdir=tmp_path).mutate_one(_brief(5))
    assert out.source is None and message in (out.error or "")
    if mode == "sleep":  # the whole process group was killed: the sleeper never logged its end
        assert not (tmp_path / "calls.jsonl").exists()


def test_cli_runs_the_three_arms_with_the_headless_mutator(tmp_path_factory: pytest.TempPathFactory,
                                                           monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    st = state_dir(tmp_path_factory, "evolve-arms")
    log = st / "calls.jsonl"
    monkeypatch.setenv("ATTNQ_STATE", str(st))
    monkeypatch.setenv("SCRIPTED_LOG", str(log))
    monkeypatch.chdir(st)
    code = main(["evolve", "--from", str(SEED), "--mutator-cmd", CMD, "--arms", "question,plain,none", "--run", "abl",
                 "--evaluator", "compile_facts", "--generations", "2", "--children", "3", "--islands", "1",
                 "--seed", "4", "--parallel", "3", "--goal", "9", "--compile-workers", "2", "--json"])
    assert code == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in runs] == ["abl-question", "abl-plain", "abl-none"]
    assert all(r["state"] == "budget" and r["generation"] == 2 and r["mutator"] == "command" for r in runs)
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    by_arm = {arm: [c for c in calls if c["arm"] == arm] for arm in ("question", "plain", "none")}
    assert all(len(v) == 6 for v in by_arm.values())  # 2 generations x 3 children per arm
    assert all(c["has_question"] and c["question_id"] for c in by_arm["question"])
    assert all(c["has_plain"] and not c["has_question"] and not c["question_id"] for c in by_arm["plain"])
    assert all(not c["has_plain"] and not c["has_question"] for c in by_arm["none"])
    with EvolveDB.for_state_dir(st) as db:
        qarm = [p for p in db.programs("abl-question") if p.parent_id is not None]
        assert all(p.mutator == "command" and p.layer not in ("plain", "none", None) for p in qarm)
        assert {p.question_id for p in db.programs("abl-plain") if p.parent_id} == {"plain"}
    assert main(["evolve", "report", "--run", "abl-question", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [a["arm"] for a in rep["arms"]] == ["question", "plain", "none"]
    assert all(a["evaluations"] > 0 and a["best_quick"] for a in rep["arms"])
    assert rep["per_question"] and all(s["layer"] not in ("plain", "none") for s in rep["per_question"])
    assert rep["duplicates"]["children"] == 6 and rep["duplicates"]["rejected"] == rep["status"]["rejected"]
    # a bad flag value is one plain line
    assert main(["evolve", "--mutator", "command", "--run", "x2"]) == 2
    assert "mutator_cmd" in capsys.readouterr().err
    assert os.environ["SCRIPTED_LOG"] == str(log)
