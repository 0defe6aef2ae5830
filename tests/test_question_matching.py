"""Issue 16, the question bank: questions people add are matched so that rewordings merge and different
questions never do (non-Latin scripts, negations, other quantities, numbers, word order), a promoted
question can be demoted for good, control and direction-override characters are refused (and escaped
where older stores hold them), one campaign records a question once; reflect(claim=...) records a claim
only with the kind the caller gave. Real stores in temporary workspaces."""

from __future__ import annotations

import pytest

from harness.config import Settings
from harness.errors import InputError
from harness.store import CampaignStore
from questions.bank import Question, load_bank
from questions.human import (
    MAX_QUESTION_CHARS,
    add_question,
    check_question_text,
    demote_question,
    normalize_question,
    similar,
)
from questions.reflect import declare, reflect, suggest_claim_kind
from questions.text import MAX_CLAIM_CHARS, printable

#: (a, b, same question?) — the first four pairs are the issue's own.
PAIRS = [
    ("What is the achieved occupancy of the decode kernel?", "What is the achieved latency of the decode kernel?",
     False),
    ("Is the kernel memory bound?", "Is the kernel not memory bound?", False),
    ("Is the kernel memory bound?", "Isn't the kernel memory bound?", False),
    ("Ist der Kernel für große Köpfe speicherbegrenzt?", "Ist der Kernel für kleine Köpfe speicherbegrenzt?", False),
    ("这个内核是内存受限的吗？", "这个内核是计算受限的吗？", False),
    ("Является ли ядро ограниченным памятью?", "Является ли ядро ограниченным вычислениями?", False),
    ("Is head_dim 128 slower than head_dim 64?", "Is head_dim 64 slower than head_dim 128?", False),
    ("Is the split-K path faster than the single pass?", "Is the single pass faster than the split-K path?", False),
    ("Does causal masking cost more than 10%?", "Does causal masking cost more than 20%?", False),
    ("Is the kernel memory bound?", "Is this kernel memory-bound?", True),
    ("Is the kernel memory bound?", "Are the kernels memory bound?", True),
    ("Are K loads coalesced?", "Are the K loads coalesced?", True),
    ("Is the epilogue overlapped with the next tile's loads?", "is the epilogue overlapped with the next tiles loads?",
     True),
    ("Does the gain show in SM cycles or only wall-clock?", "Does the gain show in SM cycles or only wall-clock time?",
     True),
    ("Ist der Kernel speicherbegrenzt?", "IST DER KERNEL SPEICHERBEGRENZT?", True),
]


@pytest.mark.parametrize(("a", "b", "same"), PAIRS)
def test_matching_merges_rewordings_only(a: str, b: str, same: bool) -> None:
    na, nb = normalize_question(a), normalize_question(b)
    assert na and nb
    assert similar(na, nb) is same and similar(nb, na) is same


def test_normalization_is_unicode_aware() -> None:
    assert normalize_question("Läuft der Kernel für große Köpfe?") == "läuft der kernel für grosse köpfe"
    assert normalize_question("ｆｕｌｌ－ｗｉｄｔｈ？") == "full width"  # NFKC
    assert normalize_question("这个内核是内存受限的吗？") == "这个内核是内存受限的吗"
    assert normalize_question("Isn't it L2-bound??") == "is not it l2 bound"
    with pytest.raises(InputError, match="no letters or digits"):
        check_question_text("?!?!? ...?")


def test_unrelated_questions_in_two_campaigns_are_not_promoted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The issue's merges: each pair asked in two campaigns stays two unpromoted questions; two different
    non-Latin questions get different records; a real rewording is promoted."""
    with CampaignStore.open(Settings(workspace=tmp_path)) as store:
        for a, b, same in PAIRS[:6]:
            r1 = add_question(store, a, campaign_id="alpha")
            r2 = add_question(store, b, campaign_id="beta")
            assert r1.promoted is None and r2.promoted is None, (a, b)
            assert r2.campaigns == ["beta"], (a, b)
        assert store.promoted() == []
        r = add_question(store, "Is this kernel memory-bound?", campaign_id="beta")
        assert r.promoted is not None and r.promoted.id.startswith("human-")
        assert r.campaigns == ["alpha", "beta"] and r.promoted.text == "Is this kernel memory-bound?"
        zh = [q for q in store.human_questions() if "内核" in q.text]
        assert len({normalize_question(q.text) for q in zh}) == 2


def test_same_question_twice_in_one_campaign_is_recorded_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with CampaignStore.open(Settings(workspace=tmp_path)) as store:
        r1 = add_question(store, "Are K loads coalesced?", campaign_id="alpha")
        r2 = add_question(store, "  are K  loads coalesced? ", campaign_id="alpha")
        assert not r1.already_recorded and r2.already_recorded and r2.record.id == r1.record.id
        assert len(store.human_questions()) == 1
        r3 = add_question(store, "Are the K loads coalesced?", campaign_id="alpha")  # a rewording: its own record
        assert not r3.already_recorded and r3.promoted is None and len(store.human_questions()) == 2


def test_a_demoted_question_leaves_the_bank_and_stays_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(workspace=tmp_path)
    with CampaignStore.open(settings) as store:
        add_question(store, "Is the epilogue overlapped with the next tile's loads?", campaign_id="a")
        q = add_question(store, "Is the epilogue overlapped with the next tiles loads?", campaign_id="b").promoted
        assert q is not None and q.id in {x.id for x in load_bank(settings=settings, store=store).questions}
        demoted = demote_question(store, q.id, "misleading: the epilogue is not the bottleneck here")
        assert demoted.id == q.id
        assert q.id not in {x.id for x in load_bank(settings=settings, store=store).questions}
        again = add_question(store, "Is the epilogue overlapped with the next tile loads?", campaign_id="c")
        assert again.promoted is None and "demoted" in (again.promotion_error or "")
        assert store.promoted() == [] and store.demoted()[0]["reason"].startswith("misleading")
        with pytest.raises(InputError, match="no promoted question 'hgmma-or-hmma'"):
            demote_question(store, "hgmma-or-hmma", "built-in questions live in files")


@pytest.mark.parametrize("bad", ["Is it \x1b[31mred\x1b[0m?", "Is the NUL\x00 here?", "Is it \u202eevil?",
                                 "Is it \u2066isolated\u2069?", "Is \udcff undecodable?", "Is DEL\x7f ok?"])
def test_control_and_bidi_characters_are_refused(tmp_path, bad: str) -> None:  # type: ignore[no-untyped-def]
    with CampaignStore.open(Settings(workspace=tmp_path)) as store:
        with pytest.raises(InputError, match="U\\+"):
            add_question(store, bad)
        with pytest.raises(InputError, match="U\\+"):
            declare(store, load_bank(), "limit", "bound by " + bad, settings=Settings(workspace=tmp_path))
        assert store.human_questions() == [] and store.claims() == []
    with pytest.raises(ValueError, match="control or direction-override"):
        Question(id="x-q", text=bad, triggers=["stall"], layer="measurement")


def test_stored_control_characters_print_escaped() -> None:
    assert printable("Is it \x1b[31mred\x1b[0m?") == "Is it \\x1b[31mred\\x1b[0m?"
    assert printable("a\u202eb") == "a\\u202eb" and printable("für 这个") == "für 这个"


def test_questions_must_be_one_question_within_the_bank_bound() -> None:
    for bad in ("Make the kernel faster.", "Is it bound? Or not?", "x" * MAX_QUESTION_CHARS + "?"):
        with pytest.raises(InputError):
            check_question_text(bad)
    assert check_question_text("  Is it\tbound? ") == "Is it bound?"


# -- Medium 4: the kind of a claim is the caller's ----------------------------------------------------------------
def test_reflect_with_a_free_text_claim_records_no_claim(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(workspace=tmp_path, seed=1)
    with CampaignStore.open(settings) as store:
        bank = load_bank(settings=settings, store=store)
        r = reflect(store, bank, claim="not done yet: the causal path is wrong and I cannot complete it",
                    settings=settings)
        assert store.claims() == [] and r.suggested_claim is None and "declare(kind=" in r.message
        r = reflect(store, bank, claim="memory bound: this is the limit", settings=settings)
        assert store.claims() == [] and r.suggested_claim == "limit"
        r = reflect(store, bank, claim="done: the goal is met", trigger="declared_done", settings=settings)
        assert [c.kind for c in store.claims()] == ["done"] and r.trigger == "declared_done"
        with pytest.raises(InputError, match=f"1 to {MAX_CLAIM_CHARS} characters"):
            reflect(store, bank, claim="x" * (MAX_CLAIM_CHARS + 1), settings=settings)


@pytest.mark.parametrize(("text", "kind"), [
    ("not done yet: ... I cannot complete it", None), ("I am done, all scenarios pass", "done"),
    ("we are not finished", None), ("finished: 1.2x on full", "done"), ("hit the roofline limit", "limit"),
    ("haven't completed the sweep", None), ("tried three things", None),
])
def test_suggested_claim_kind(text: str, kind: str | None) -> None:
    assert suggest_claim_kind(text) == kind
