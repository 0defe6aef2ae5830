"""Issue 12's classes on the CPU, end to end through the trust split: CPU builds of the ABI
(tests/hostkernels/attn_host.c, the twins of the GPU kernels in tests/adversarial/) run in launcher
processes, checked and timed by the worker's checker; each cheat gets the intended check. The GPU
kernels themselves are verified by tests/gpu/test_adversarial.py on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import hostkernels
from tests.test_trust_split import _verify

pytestmark = pytest.mark.skipif(not hostkernels.have_cc(), reason="needs a C compiler (gcc) for the CPU kernels")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostkernels-classes")


@pytest.mark.parametrize(("cheat", "what", "caught_by"), [
    (1, "all the work in the workspace query", {("poisoned_output", "unwritten_output")}),
    (2, "most of the work in the query, through remembered params", {("poisoned_output", "unwritten_output")}),
    (3, "a race hidden by a content-keyed replay", {("determinism", "nondeterministic")}),
    (4, "a race hidden by replaying on the second call", {("reference_tolerance", "wrong_output"),
                                                        ("timed_output", "timed_output_wrong")}),
    (5, "lower precision after the first two calls", {("timed_output", "timed_output_wrong")}),
    (6, "lower precision on dense default-scale calls", {("timed_output", "timed_output_wrong"),
                                                         ("reference_tolerance", "wrong_output")}),
])
def test_each_cheat_gets_the_intended_check(built: Path, cheat: int, what: str, caught_by: set) -> None:
    res, _ = _verify(built, cheat=cheat, samples=9)  # 2 draws + 9 - 3 repeats: 8 fresh calls, the whole deck
    assert not res.correct, f"{what}: passed"
    assert (res.check, res.failure_kind) in caught_by, f"{what}: {res.check}/{res.failure_kind}: {res.message}"


def test_the_honest_twin_passes_with_the_same_settings(built: Path) -> None:
    res, _ = _verify(built, samples=9)
    assert res.correct, res.message
