"""The question bank: CI validation of the built-in bank, layering, import/export, promotion."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnq.cli import main as cli_main
from harness.config import Settings
from harness.errors import QuestionBankError
from harness.store import CampaignStore
from questions.bank import (
    BUILTIN_DIR,
    LAYERS,
    TRIGGERS,
    Bank,
    Question,
    export_bank,
    import_bank,
    load_bank,
    load_bank_file,
    validate_bank,
)
from questions.human import add_question, normalize_question


def test_builtin_bank_is_valid_and_covers_every_trigger() -> None:
    bank = load_bank()
    assert validate_bank(bank) == []
    assert len(bank.questions) >= 50
    ids = [q.id for q in bank.questions]
    assert len(ids) == len(set(ids))
    for trig in TRIGGERS:
        qs = bank.for_trigger(trig)
        assert len(qs) >= 8, trig
        assert len({q.layer for q in qs}) >= 4, trig
    assert {q.layer for q in bank.questions} == set(LAYERS)
    for q in bank.questions:
        assert q.text.endswith("?") and q.text.count("?") == 1 and len(q.text) <= 240
        assert q.note.strip(), f"{q.id} has no curator's note"
        assert q.origin == "builtin"


def test_builtin_files_parse_one_by_one_and_ids_are_unique_across_files() -> None:
    files = sorted(BUILTIN_DIR.glob("*.toml"))
    assert len(files) >= 8
    all_ids: list[str] = []
    for f in files:
        all_ids += [q.id for q in load_bank_file(f)]
    assert len(all_ids) == len(set(all_ids))


def test_import_questions_does_not_import_torch() -> None:
    code = ("import sys, questions, questions.bank, questions.triggers, questions.policy, questions.reflect, "
            "questions.human, questions.trace, harness.store; "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'cuda', 'pycuda', 'cupy'))]; "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("bad, message", [
    ({"id": "Bad Id", "text": "Why?", "triggers": ["stall"], "layer": "numerics"}, "slug"),
    ({"id": "two-q", "text": "Why? And how?", "triggers": ["stall"], "layer": "numerics"}, "ONE question"),
    ({"id": "no-q", "text": "Look at the SASS.", "triggers": ["stall"], "layer": "numerics"}, "ONE question"),
    ({"id": "bad-trigger", "text": "Why?", "triggers": ["bored"], "layer": "numerics"}, "Input should be"),
    ({"id": "bad-layer", "text": "Why?", "triggers": ["stall"], "layer": "vibes"}, "Input should be"),
    ({"id": "no-trigger", "text": "Why?", "triggers": [], "layer": "numerics"}, "at least 1"),
])
def test_schema_rejects_bad_questions(tmp_path: Path, bad: dict, message: str) -> None:
    f = tmp_path / "bank.json"
    f.write_text(json.dumps({"questions": [bad]}))
    with pytest.raises(QuestionBankError, match=message):
        load_bank_file(f)


@pytest.mark.parametrize("text, message", [
    ('id = "my-q"\ntxt = "Is the softmax in fp32?"\ntriggers = ["stall"]\nlayer = "numerics"\n',
     r"question #1 \(my-q\): unknown key 'txt' \(did you mean 'text'\?\); known keys: id, text, triggers"),
    ('id = "my-q"\ntext = "Is the softmax in fp32?"\ntrigger = ["stall"]\nlayer = "numerics"\n',
     r"unknown key 'trigger' \(did you mean 'triggers'\?\)"),
    ('id = "my-q"\ntext = "Is the softmax in fp32?"\nlayer = "numerics"\n', r"question #1 \(my-q\): triggers: Field required$"),
    ('id = "my-q"\ntext = "Is the softmax in fp32?"\ntriggers = ["stal"]\nlayer = "numerics"\n',
     r"triggers: Input should be 'stall'"),
])
def test_a_bank_file_error_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    """Found as a new user: a misspelt key ("txt") was dropped silently and the question refused with a bare
    "Field required" that named no field; `questions validate` and `questions import` must say which key."""
    f = tmp_path / "mine.toml"
    f.write_text("[[question]]\n" + text)
    with pytest.raises(QuestionBankError, match=message):
        load_bank_file(f)
    assert cli_main(["questions", "validate", str(f)]) == 2


def test_a_question_with_several_problems_lists_them_all(tmp_path: Path) -> None:
    """`questions validate` said "(and 3 more)" and hid them (trial of 2026-12-06): each is named now."""
    f = tmp_path / "mine.toml"
    f.write_text('[[question]]\nid = "Bad Id"\ntext = "Look at it."\ntriggers = ["bored"]\nlayer = "vibes"\n')
    with pytest.raises(QuestionBankError) as refused:
        load_bank_file(f)
    msg = str(refused.value)
    assert all(w in msg for w in ("id:", "text:", "triggers", "layer:")) and "more)" not in msg, msg


def test_a_bank_file_that_is_not_utf8_is_refused_at_its_line(tmp_path: Path) -> None:
    f = tmp_path / "latin1.toml"
    f.write_bytes(b'[[question]]\nid = "q\xff"\n')
    with pytest.raises(QuestionBankError, match=r"latin1\.toml: line 2, column 8: byte 0xff is not UTF-8"):
        load_bank_file(f)


def test_an_exported_bank_still_validates_as_a_file(tmp_path: Path) -> None:
    bank = load_bank()
    for name in ("b.toml", "b.json"):
        assert [q.id for q in load_bank_file(export_bank(bank, tmp_path / name))] == [q.id for q in bank.questions]


def test_duplicate_ids_in_one_file_are_rejected(tmp_path: Path) -> None:
    q = {"id": "same", "text": "Why?", "triggers": ["stall"], "layer": "numerics"}
    f = tmp_path / "dup.json"
    f.write_text(json.dumps({"questions": [q, q]}))
    with pytest.raises(QuestionBankError, match="duplicate"):
        load_bank_file(f)


def test_thin_bank_fails_coverage() -> None:
    qs = [Question(id=f"q{i}", text=f"Question {i}?", triggers=["stall"], layer=LAYERS[i % 2]) for i in range(9)]
    problems = validate_bank(Bank(questions=qs))
    assert any("'stall': 9 questions across 2 layers" in p for p in problems)
    assert any("'churn': 0 questions" in p for p in problems)


def test_layering_later_banks_override_by_id(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text('[[question]]\nid = "hgmma-or-hmma"\ntext = "Team wording: HGMMA or HMMA in the SASS?"\n'
                    'triggers = ["stall"]\nlayer = "instruction_mix_registers"\nnote = "team"\n\n'
                    '[[question]]\nid = "team-only"\ntext = "How many CTAs per cluster?"\n'
                    'triggers = ["declared_limit"]\nlayer = "parallelism_scheduling"\n')
    personal = tmp_path / "me.json"
    personal.write_text(json.dumps({"questions": [{"id": "team-only", "text": "My wording of team-only?",
                                                   "triggers": ["churn"], "layer": "search_strategy"}]}))
    settings = Settings(workspace=tmp_path, bank_paths=[team, personal])
    bank = load_bank(settings=settings)
    builtin = load_bank()
    assert len(bank.questions) == len(builtin.questions) + 1
    assert bank.get("hgmma-or-hmma").text.startswith("Team wording") and bank.get("hgmma-or-hmma").origin == "team"
    assert bank.get("team-only").text == "My wording of team-only?" and bank.get("team-only").triggers == ["churn"]
    assert bank.sources[-2:] == [str(team), str(personal)]
    with pytest.raises(QuestionBankError):
        bank.get("nope")


@pytest.mark.parametrize("suffix", ["toml", "json"])
def test_export_import_round_trip(tmp_path: Path, suffix: str) -> None:
    ws = tmp_path / "ws"
    settings = Settings(workspace=ws)
    with CampaignStore.open(settings) as store:
        add_question(store, "Is the epilogue overlapped with the next tile's loads?", triggers=["stall"],
                     layer="pipelining", campaign_id="c1")
        add_question(store, "is the epilogue overlapped with the next tiles loads?", campaign_id="c2")
        bank = load_bank(settings=settings, store=store)
    out = export_bank(bank, tmp_path / f"bank.{suffix}")
    again = load_bank_file(out)
    assert [q.model_dump(exclude={"origin"}) for q in again] == [q.model_dump(exclude={"origin"})
                                                                 for q in bank.questions]
    promoted = [q for q in again if q.provenance is not None]
    assert len(promoted) == 1 and promoted[0].provenance.campaigns == ["c1", "c2"]  # type: ignore[union-attr]
    # import a small bank into another workspace: it is layered over the built-in one
    small = Bank(questions=[q for q in again if q.id.startswith("human-")] +
                 [Question(id="extra-q", text="How many bytes per FLOP?", triggers=["stall"], layer="memory_traffic")])
    f = export_bank(small, tmp_path / f"small.{suffix}")
    other = Settings(workspace=tmp_path / "other")
    dest = import_bank(f, settings=other)
    assert dest.parent == other.state_dir / "banks"
    merged = load_bank(settings=other)
    assert merged.get("extra-q").layer == "memory_traffic"
    assert len(merged.questions) == len(load_bank().questions) + 2
    # the same file again: a no-op; a different bank under the same name: refused, the imported one kept
    assert import_bank(f, settings=other) == dest
    changed = Bank(questions=[Question(id="other-q", text="Which warp stalls longest?", triggers=["stall"],
                                       layer="parallelism_scheduling")])
    g = export_bank(changed, tmp_path / "elsewhere" / f"small.{suffix}")
    with pytest.raises(QuestionBankError, match="already imported") as refused:
        import_bank(g, settings=other)
    assert refused.value.message.endswith(f"attnq questions import --replace {g}")  # the command to run, with FILE
    assert load_bank(settings=other).get("extra-q").layer == "memory_traffic"
    bad = tmp_path / "broken" / f"small.{suffix}"
    bad.parent.mkdir()
    bad.write_text("not a bank [", encoding="utf-8")
    with pytest.raises(QuestionBankError):
        import_bank(bad, settings=other, replace=True)  # an invalid file replaces nothing
    assert load_bank(settings=other).get("extra-q").layer == "memory_traffic"
    assert import_bank(g, settings=other, replace=True) == dest
    assert load_bank(settings=other).get("other-q").layer == "parallelism_scheduling"


def test_promotion_needs_two_campaigns_and_keeps_provenance(tmp_path: Path) -> None:
    settings = Settings(workspace=tmp_path)
    with CampaignStore.open(settings) as store:
        r1 = add_question(store, "Does the gain show in SM cycles or only wall-clock?", triggers=["suspicious_win"],
                          campaign_id="alpha")
        r2 = add_question(store, "does the gain show in SM cycles, or only in wall clock?", layer="measurement",
                          campaign_id="alpha")
        assert r1.promoted is None and r2.promoted is None and r2.campaigns == ["alpha"]
        r3 = add_question(store, "Does the gain show in SM cycles or only wall-clock time?", triggers=["stall"],
                          campaign_id="beta")
        assert r3.campaigns == ["alpha", "beta"]
        q = r3.promoted
        assert q is not None and q.origin == "promoted" and q.id.startswith("human-")
        assert q.triggers == ["stall", "suspicious_win"] and q.layer == "measurement"
        assert q.provenance is not None and q.provenance.campaigns == ["alpha", "beta"]
        assert q.provenance.times_asked == 3 and q.provenance.first_asked <= q.provenance.last_asked
        r4 = add_question(store, "Does the gain show in SM cycles or only wall clock?", campaign_id="gamma")
        assert r4.promoted is not None and r4.promoted.id == q.id  # same question: same id, updated provenance
        assert r4.promoted.provenance.campaigns == ["alpha", "beta", "gamma"]  # type: ignore[union-attr]
        bank = load_bank(settings=settings, store=store)
        assert bank.get(q.id).origin == "promoted"
        unrelated = add_question(store, "What is the L2 hit rate of K loads?", campaign_id="beta")
        assert unrelated.promoted is None
    assert normalize_question("  Is it L2-bound?? ") == "is it l2 bound"


def test_cli_validate_list_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = ["--workspace", str(tmp_path)]
    assert cli_main(["questions", "validate", *ws]) == 0
    assert cli_main(["questions", "list", "--trigger", "churn", "--json", *ws]) == 0
    out = capsys.readouterr().out
    listed = Bank.model_validate_json(out.split("problem(s)\n", 1)[-1])
    assert len(listed.questions) >= 8 and all("churn" in q.triggers for q in listed.questions)
    assert cli_main(["questions", "export", str(tmp_path / "b.toml"), *ws]) == 0
    assert len(load_bank_file(tmp_path / "b.toml")) == len(load_bank().questions)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"questions": [{"id": "x1", "text": "no", "triggers": ["stall"], "layer": "numerics"}]}))
    assert cli_main(["questions", "import", str(bad), *ws]) == 2
