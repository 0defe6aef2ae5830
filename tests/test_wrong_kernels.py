"""The deliberately wrong variants of the original (scripts/wrong_kernels.py): they build, each changes only
its lines, the scenarios each must fail include the bug scenarios written for it, and `check` judges a
verdict by that. Running them needs a GPU (scripts/gpu_run.sh step `bugs`)."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness import ORIGINAL_KERNEL
from harness.scenarios import load_suite
from tests.script_support import load_script

wk = load_script("wrong_kernels")

NEW = ["wrong_gqa", "hardcoded_scale", "ignored_kv_strides", "log2_lse", "unguarded_tail"]


def test_make_writes_every_variant_with_only_its_edits(tmp_path) -> None:
    paths = wk.make(tmp_path)
    assert [p.stem for p in paths] == list(wk.EDITS)
    original = ORIGINAL_KERNEL.read_text().splitlines()
    for p in paths:
        lines = p.read_text().splitlines()
        changed = [b for a, b in zip(original, lines, strict=True) if a != b]
        assert len(changed) == len(wk.EDITS[p.stem]) + 1, p.stem  # its edits + the include path
        assert all("BUG" in line for line in changed if "#include" not in line)


@pytest.mark.parametrize("name", NEW)
def test_each_variant_must_fail_the_bug_scenarios_written_for_it(name: str) -> None:
    bugs = load_suite("bugs").scenarios
    must, _ = wk.expected_failures(name, bugs)
    written = [s for s in bugs if s.name.startswith(wk.WRITTEN_FOR[name])]
    targets = [s for s in written if name != "unguarded_tail" or s.seqlen_k % 64]
    assert len(targets) >= 2 and {s.id for s in targets} <= must, name


def test_the_predicates_follow_the_scenarios() -> None:
    full = {s.id: s for s in load_suite("full").scenarios}
    gqa, _ = wk.expected_failures("wrong_gqa", list(full.values()))
    assert "gqa/b4-s4096-h32x8-d128-causal-bf16" in gqa and "gqa/b4-s4096-h32x1-d128-noncausal-bf16" not in gqa  # MQA
    assert "layouts/b2-s512-h16x4-d128-causal-bf16-kv-broadcast" not in gqa  # every kv head holds the same values
    strided, exact = wk.expected_failures("ignored_kv_strides", list(full.values()))
    assert not exact and "layouts/b4-sq130-sk1000-h8x2-d128-causal-bf16-kv-cache-nan" in strided  # the draws pad K/V too
    assert "bugs/b2-sq4-sk4096-h8-d128-causal-bf16-b03-combine-o-padded" not in strided  # only o is strided there
    assert not any(i.startswith(("fa3grid", "gqa", "odd")) for i in strided)
    scale, exact = wk.expected_failures("hardcoded_scale", list(full.values()))
    assert not exact and len(scale) == 9  # b26's five scales, values/tiny-scale and values' three scale-1
    assert sum(i.endswith("-scale-1-sc1") for i in scale) == 3


def _verdict(tmp_path: Path, failed: set[str]) -> Path:
    ids = load_suite("bugs").ids()
    p = tmp_path / "v.json"
    p.write_text(json.dumps({"suite": "bugs", "scenarios": [
        {"id": i, "correct": i not in failed, "failure_kind": None if i not in failed else "wrong_output",
         "check": None if i not in failed else "reference_tolerance"} for i in ids]}))
    return p


def test_check_holds_a_verdict_to_the_expected_failures(tmp_path, capsys) -> None:
    bugs = load_suite("bugs").scenarios
    must, _ = wk.expected_failures("unguarded_tail", bugs)
    assert wk.check("unguarded_tail", _verdict(tmp_path, must)) == 0
    assert "OK (exact)" in capsys.readouterr().out
    assert wk.check("unguarded_tail", _verdict(tmp_path, must - {min(must)})) == 1  # one missed
    assert wk.check("unguarded_tail", _verdict(tmp_path, must | {bugs[0].id} if bugs[0].id not in must
                                                else must | {bugs[-1].id})) == 1  # one extra, exact variant
    assert wk.check("hardcoded_scale", _verdict(tmp_path, {s.id for s in bugs})) == 0  # extras allowed
    out = capsys.readouterr().out
    assert "the 5 scenarios written for it: 5 failed" in out


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(), reason="needs nvcc")
def test_the_new_variants_build_under_the_policy(tmp_path) -> None:
    from harness.compile import compile_kernel

    paths = [p for p in wk.make(tmp_path / "src") if p.stem in NEW]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda p: compile_kernel(p, cache_dir=tmp_path / "build"), paths))
    for p, r in zip(paths, results, strict=True):
        assert Path(r.library).is_file() and not r.warnings, (p.stem, r.warnings)
