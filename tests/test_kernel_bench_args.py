"""scripts/kernel_bench.py refuses bad arguments with one usage line (exit 2) before it builds anything: a typo
used to surface as a traceback after the variants' nvcc builds (minutes on the fast kernel) or on the GPU."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.script_support import load_script

ROOT = Path(__file__).resolve().parents[1]
KERNEL = str(ROOT / "tests" / "data" / "evolve" / "knob_kernel.cu")


def _bench():  # type: ignore[no-untyped-def]
    return load_script("kernel_bench")


@pytest.mark.parametrize(("args", "says"), [
    (["--suite", "nosuch"], "--suite: unknown suite 'nosuch'"),
    (["--variant", "base"], "--variant 'base': use NAME=FLAGS"),
    (["--variant", "a=", "--variant", "a=-DX=1"], "--variant 'a' is given twice"),
    (["--dims", "64,x"], "--dims '64,x'"),
    (["--dims", "80"], "--dims '80'"),
    (["--one", "d128"], "--one 'd128'"),
    (["--one", "d128_n_s8192", "--suite", "production"], "--one calls one FA3-grid scenario: not with --suite"),
    (["--suite", "production", "--dims", "128"], "--dims filters the FA3 grid: not with --suite"),
    (["--check-only", "--no-check"], "--check-only and --no-check exclude each other"),
    (["--one", "d128_n_s8192", "--calls", "0"], "--calls must be at least 1"),
    (["--rounds", "0"], "--rounds 0 / --rep-ms 100.0: at least one round"),
    (["--rep-ms", "-5"], "--rounds 1 / --rep-ms -5.0: at least one round"),
])
def test_bad_arguments_are_one_usage_error_before_any_build(args: list[str], says: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    monkeypatch.setattr(sys, "argv", ["kernel_bench.py", KERNEL, *args])
    monkeypatch.setattr(bench, "build", lambda *a: pytest.fail("built despite bad arguments"))
    with pytest.raises(SystemExit) as exc:
        bench.main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"kernel_bench.py: error: {says}" in err, err


def test_a_missing_kernel_is_refused_unless_prebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    monkeypatch.setattr(sys, "argv", ["kernel_bench.py", str(tmp_path / "nope.cu")])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2 and "error: no kernel file" in capsys.readouterr().err


def test_the_help_documents_every_option(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    monkeypatch.setattr(sys, "argv", ["kernel_bench.py", "--help"])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    out = capsys.readouterr().out
    assert exc.value.code == 0
    for opt in ("--json JSON", "--dims DIMS", "--no-fa3", "--build-only", "--suite SUITE", "--no-check"):
        # help text on the option's line, or on the next one indented to the help column
        assert re.search(rf"^  {re.escape(opt)}( +\S|\n {{20,}}\S)", out, re.MULTILINE), f"{opt} has no help text:\n{out}"
