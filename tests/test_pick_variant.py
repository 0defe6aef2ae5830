"""scripts/pick_variant.py on real kernel_bench JSONs of runs 42 and 45 (kernels/campaigns/stage2/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.script_support import load_script

pv = load_script("pick_variant")
DATA = Path(__file__).resolve().parents[1] / "kernels" / "campaigns" / "stage2"
RUN42 = json.loads((DATA / "run42_d96_vb_bn160_bench.json").read_text())  # d96 adopted in run 42 (v18)
RUN45 = json.loads((DATA / "run45_ppu32_ppu_d32_bench.json").read_text())  # nothing adopted in run 45


def test_the_default_rule_picks_what_run_42_adopted() -> None:
    best, table = pv.pick(RUN42)
    assert best == "d96" and table["d96"][1] > 1.1 and table["base"][1] == pytest.approx(1.0)


def test_long_rows_and_a_class_floor_reproduce_run_45s_ratios_to_base() -> None:
    """NOTES (session 12, run 45): over the s >= 2048 rows ppu32 0.996, ppu 0.982, d32 0.997 of v18."""
    best, table = pv.pick(RUN45, min_gain=0.015, min_seqlen=2048, class_floor=0.985)
    assert best == "base"
    assert {n: round(t[1], 3) for n, t in table.items()} == {"base": 1.0, "ppu32": 0.996, "ppu": 0.982, "d32": 0.997}
    assert table["ppu"][2] < 0.985  # its worst class (d256 causal) is below the floor


def test_the_seqlen_filter_and_the_class_floor_bite() -> None:
    assert set(pv.keep_rows(RUN42["base"], 2048)) == {k for k in RUN42["base"] if not k.endswith(("_s512", "_s1024"))}
    assert pv.pick(RUN42, class_floor=0.999)[0] == "base"  # d96 loses ~1 % on d128 non-causal
    assert pv.pick({"base": {"d64_n_s512": 1.0}})[0] == "base"  # no FA3: nothing to compare with


def test_dims_and_only_answer_one_question_each_from_one_bench() -> None:
    """Run 42 benched d96 (a d96-only change) beside bn160 (a d128 one): on the d96 rows d96 wins by ~1.57x; on the
    d128 rows nothing beats base (d96 costs ~1 % there, bn160 ~2 %); --only drops the other variants."""
    best96, t96 = pv.pick(RUN42, dims={96}, min_seqlen=512)
    assert best96 == "d96" and t96["d96"][1] == pytest.approx(1.567, abs=1e-3)
    best128, t128 = pv.pick(RUN42, dims={128}, only={"bn160"})
    assert best128 == "base" and set(t128) == {"base", "bn160"} and t128["bn160"][1] < 0.99
    assert set(pv.keep_dims(RUN42["base"], {96})) == {k for k in RUN42["base"] if k.startswith("d96_")}
    assert pv.keep_dims({"d96_n_s512": 1.0, "check_failures": []}, {128}) == {"check_failures": []}
    with pytest.raises(ValueError, match="--only names variants the bench does not have: bn16O"):
        pv.pick(RUN42, dims={128}, only={"bn16O"})  # a typo would have left base as the pick, silently
