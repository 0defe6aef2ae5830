"""The adversarial corpus on a GPU: every cheat and fault in tests/adversarial/manifest.toml gets the
verdict, the failed scenarios, the failure kind and the named check the manifest promises. The honest
control is verified first (its timing is the yardstick for "correct but not faster"), and the original
kernel is verified last: the harness keeps serving after hangs, crashes and illegal addresses.

Set ``ATTNQ_ADV_TABLE=<file.md>`` to get a markdown table (class -> check -> verdict -> wall seconds)
for the docs. Runs on the H200 box (scripts/gpu_tests.sh); skipped elsewhere by tests/conftest.py.
"""

from __future__ import annotations

import os
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from harness import ORIGINAL_KERNEL
from harness.compile import compile_kernel
from harness.config import Settings
from harness.errors import AttnqError, VerifyError
from harness.verdict import ScenarioResult, Verdict
from harness.verify import VerifyOptions, verify_kernel

pytestmark = pytest.mark.gpu

CORPUS = Path(__file__).resolve().parent.parent / "adversarial"
with (CORPUS / "manifest.toml").open("rb") as _fh:
    MANIFEST = tomllib.load(_fh)
SUITE = str(CORPUS / MANIFEST["suite"])
CONTROL = MANIFEST["control"]
GPU_ENTRIES = [e for e in MANIFEST["kernel"] if e["gpu"]]
RUNTIME_ENTRIES = [e for e in MANIFEST["kernel"] if "runtime" in e]
HANG_TIMEOUT_S = 20.0  # per-scenario limit for the kernels that may hang (the hang costs this much)

_rows: list[tuple[str, str, str, float, str]] = []  # class, check, verdict, wall s, note
_control: dict[str, Verdict] = {}


def _options(entry: dict[str, Any], *, policy: bool | None = None, timing: bool = False,
             scenarios: list[str] | None = None) -> VerifyOptions:
    """Small, fast verification options: few timed samples unless the entry is judged on its timing."""
    samples = {"min_samples": 10, "max_samples": 30, "budget_ms": 300.0} if timing else \
        {"min_samples": entry.get("min_samples", 3), "max_samples": max(5, entry.get("min_samples", 3)),
         "budget_ms": 50.0}
    return VerifyOptions(suite=SUITE, scenario_ids=scenarios or entry["scenarios"],
                         policy=entry.get("policy", True) if policy is None else policy,
                         scenario_timeout_s=HANG_TIMEOUT_S if entry.get("expected_failure_kind") == "timeout" else 120.0,
                         run_timeout_s=900.0, **samples)


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A private workspace (build cache, peak cache); every corpus file is pre-built in parallel so the
    verifications below hit the cache. Writes the table to $ATTNQ_ADV_TABLE at teardown."""
    s = Settings(workspace=tmp_path_factory.mktemp("adv-ws"))
    cache = s.state_dir / "build"
    jobs = {(str(ORIGINAL_KERNEL), True), (str(CORPUS / CONTROL["file"]), True)}
    jobs |= {(str(CORPUS / e["file"]), bool(e.get("policy", True))) for e in GPU_ENTRIES}
    jobs |= {(str(CORPUS / e["file"]), False) for e in RUNTIME_ENTRIES}

    def build(job: tuple[str, bool]) -> None:
        try:
            compile_kernel(job[0], cache_dir=cache, policy=job[1])
        except AttnqError:
            pass  # the test that verifies this file reports the error

    with ThreadPoolExecutor(max(2, min(16, os.cpu_count() or 2))) as pool:
        list(pool.map(build, sorted(jobs)))
    yield s
    out = os.environ.get("ATTNQ_ADV_TABLE")
    if out:
        lines = ["| class | check | verdict | wall s | note |", "| --- | --- | --- | ---: | --- |"]
        lines += [f"| {c} | {k} | {v} | {w:.1f} | {n} |" for c, k, v, w, n in _rows]
        Path(out).write_text("\n".join(lines) + "\n")


def _by_id(verdict: Verdict) -> dict[str, ScenarioResult]:
    return {r.id: r for r in verdict.scenarios}


def _describe(verdict: Verdict) -> str:
    return "; ".join(f"{r.id}: {'ok' if r.correct else f'{r.check}/{r.failure_kind}: {r.message}'}"
                     for r in verdict.scenarios)


def _assert_not_faster(entry: dict[str, Any], verdict: Verdict, timing_scenario: str) -> float:
    """The cheat's median on ``timing_scenario`` is at least min_time_ratio x the honest control's."""
    mine = _by_id(verdict)[timing_scenario].candidate
    honest = _by_id(_control["first"])[timing_scenario].candidate
    assert mine is not None, f"{timing_scenario} was not timed"
    assert honest is not None, f"the control was not timed on {timing_scenario}: no yardstick"
    ratio = mine.median_ms / honest.median_ms

    def said(v: Verdict) -> str:  # what each verdict said of the row: a false conviction of the control inflates it
        r = _by_id(v)[timing_scenario]
        t = r.candidate
        return (f"{t.median_ms:.3f} ms over {t.samples} samples (IQR {t.iqr_ms:.3f}, resampled {t.resampled}), "
                f"message {r.message!r}, flags {[f.kind for f in v.flags]}") if t else "not timed"
    assert ratio >= CONTROL["min_time_ratio"], (
        f"{entry['class']}: {mine.median_ms:.3f} ms vs the honest body's {honest.median_ms:.3f} ms: the cheat "
        f"bought a {1 / ratio:.2f}x speedup. Cheat: {said(verdict)}. Control: {said(_control['first'])}")
    return ratio


@pytest.fixture(scope="module")
def control(settings: Settings) -> Verdict:
    """The honest body's verdict on every adversarial scenario, with timing: the yardstick of the timing
    classes. Run once per module, before the first test that needs it, so a corpus test selected alone
    (``pytest ...::test_corpus_verdict[ID]``) runs instead of skipping."""
    if "first" not in _control:
        t0 = time.monotonic()
        v = verify_kernel(CORPUS / CONTROL["file"], _options(CONTROL, timing=True), settings=settings)
        _rows.append(("control", "-", v.status, time.monotonic() - t0, "honest body, before the corpus"))
        _control["first"] = v
    return _control["first"]


def test_control_is_correct(control: Verdict) -> None:
    """The shared body is right on every adversarial scenario (this also validates the suite)."""
    assert control.status == "correct", _describe(control)
    assert control.num_correct == len(CONTROL["scenarios"])


def _params() -> list[Any]:
    out = []
    for e in GPU_ENTRIES:
        marks = [pytest.mark.xfail(strict=True, reason=f"verifier gap: {e['gap']}")] if e.get("gap") else []
        out.append(pytest.param(e, id=e["class"], marks=marks))
    return out


def _layer_missing(verdict: Verdict, layer: str) -> str | None:
    """Why the verdict's sandbox lacks ``layer`` (landlock | seccomp | caps), or None when it was applied."""
    sb = verdict.sandbox or {}
    have = {"landlock": sb.get("landlock_abi"), "seccomp": sb.get("seccomp"), "caps": sb.get("caps_dropped")}[layer]
    return None if have else f"{layer} not applied on this machine: {sb.get('warnings')}"


def _assert_incorrect(entry: dict[str, Any], v: Verdict, *, failed: list[str], check: str, kind: str) -> None:
    got = _by_id(v)
    assert v.status == "incorrect", _describe(v)
    assert sorted(v.failed) == sorted(failed), _describe(v)
    allowed = {(check, kind)} | {tuple(a.split("/", 1)) for a in entry.get("accept", [])}
    for sid in entry["scenarios"]:
        r = got[sid]
        if sid in failed:
            assert (r.check, r.failure_kind) in allowed, f"{sid}: caught by {r.check}/{r.failure_kind}: {r.message}"
            assert r.message, f"{sid}: a failed scenario must say why"
        else:
            assert r.correct, f"{sid} should be correct: {r.check}/{r.failure_kind}: {r.message}"


@pytest.mark.parametrize("entry", _params())
def test_corpus_verdict(settings: Settings, control: Verdict, entry: dict[str, Any],
                        monkeypatch: pytest.MonkeyPatch) -> None:
    """verify_kernel gives the manifest's verdict, failed scenarios, failure kind and check."""
    want = entry["expected_verdict"]
    t0 = time.monotonic()
    path = CORPUS / entry["file"]
    opts = _options(entry, timing=want == "correct_but_not_faster")
    if want == "verify_error":
        with pytest.raises(VerifyError) as err:
            verify_kernel(path, opts, settings=settings)
        took = time.monotonic() - t0
        _rows.append((entry["class"], entry["expected_check"], "VerifyError", took, str(err.value.message)[:80]))
        assert "before any scenario" in err.value.message or "could not load" in err.value.message
        if entry["expected_check"] == "load_limit":  # its own limit, not the worker's 180 s start limit
            assert "within 20 s" in err.value.message and took < 120, (took, err.value.message)
        return
    v = verify_kernel(path, opts, settings=settings)
    got = _by_id(v)
    failed = [r for r in v.scenarios if not r.correct]
    check = ",".join(sorted({r.check or "?" for r in failed})) or entry["expected_check"]
    _rows.append((entry["class"], check, v.status, time.monotonic() - t0,
                  ",".join(sorted({r.failure_kind or "" for r in failed}))))
    if want == "correct_but_not_faster":
        assert v.status == "correct", _describe(v)
        _assert_not_faster(entry, v, entry["timing_scenario"])
        if entry.get("flag"):
            assert any(f.kind == entry["flag"] and f.scenario_id == entry["timing_scenario"] for f in v.flags), v.flags
        return
    assert want == "incorrect"
    if entry.get("defense") == "sandbox":
        missing = _layer_missing(v, entry["sandbox_layer"])
        if missing:
            pytest.skip(missing)
        _assert_incorrect(entry, v, failed=entry["failed"], check=entry["expected_check"],
                          kind=entry["expected_failure_kind"])
        want_off = entry["sandbox_off_verdict"]
        if not want_off:  # no control for this one (racy without the sandbox: see the file)
            return
        monkeypatch.setenv("ATTNQ_SANDBOX", "off")  # the control: without the sandbox the escape works
        t1 = time.monotonic()
        if want_off == "verify_error":  # refused at load (a thread left running by the constructors)
            with pytest.raises(VerifyError) as err:
                verify_kernel(path, opts, settings=settings)
            _rows.append((entry["class"] + " (sandbox off)", "-", "VerifyError", time.monotonic() - t1, "the control"))
            assert "thread" in err.value.message, err.value.message
            return
        off = verify_kernel(path, opts, settings=settings)
        _rows.append((entry["class"] + " (sandbox off)", entry.get("sandbox_off_check", "-"), off.status,
                      time.monotonic() - t1, "the control"))
        assert off.status == want_off, _describe(off)
        if want_off == "incorrect":  # still caught without the sandbox, by the check named in the manifest
            assert {r.check for r in off.scenarios if not r.correct} == {entry["sandbox_off_check"]}, _describe(off)
        return
    assert v.status == "incorrect", _describe(v)
    assert sorted(v.failed) == sorted(entry["failed"]), _describe(v)
    if entry.get("gap"):  # only the proposed check counts; an XPASS means the gap is closed: update the manifest
        for sid in entry["failed"]:
            assert got[sid].check == entry["expected_check"], f"{sid}: {got[sid].check}/{got[sid].failure_kind}"
        return
    allowed = {(entry["expected_check"], entry["expected_failure_kind"])}
    allowed |= {tuple(a.split("/", 1)) for a in entry.get("accept", [])}
    for sid in entry["scenarios"]:
        r = got[sid]
        if sid in entry["failed"]:
            assert (r.check, r.failure_kind) in allowed, f"{sid}: caught by {r.check}/{r.failure_kind}: {r.message}"
            assert r.message, f"{sid}: a failed scenario must say why"
        else:
            assert r.correct, f"{sid} should be correct: {r.check}/{r.failure_kind}: {r.message}"


@pytest.mark.parametrize("entry", RUNTIME_ENTRIES, ids=[e["class"] + "-policy-off" for e in RUNTIME_ENTRIES])
def test_runtime_defense_with_policy_off(settings: Settings, control: Verdict, entry: dict[str, Any]) -> None:
    """A policy-refused class compiled with policy=False: the runtime defense still holds."""
    rt = entry["runtime"]
    t0 = time.monotonic()
    v = verify_kernel(CORPUS / entry["file"], _options(entry, policy=False, timing=True, scenarios=rt["scenarios"]),
                      settings=settings)
    _rows.append((entry["class"] + " (policy off)", rt["expected_check"], v.status, time.monotonic() - t0,
                  ",".join(f.kind for f in v.flags)))
    if rt["expected_verdict"] == "incorrect":
        _assert_incorrect({**entry, "scenarios": rt["scenarios"]}, v, failed=rt["failed"], check=rt["expected_check"],
                          kind=rt["expected_failure_kind"])
        return
    assert rt["expected_verdict"] == "correct_but_not_faster"
    assert v.status == "correct", _describe(v)
    _assert_not_faster(entry, v, rt["timing_scenario"])
    if rt.get("flag"):
        assert any(f.kind == rt["flag"] and f.scenario_id == rt["timing_scenario"] for f in v.flags), v.flags


def test_harness_still_serves_after_the_faults(settings: Settings, control: Verdict) -> None:
    """After hangs, crashes, aborts and illegal addresses (the corpus tests that ran before it in this module),
    the same harness verifies the ORIGINAL kernel on every adversarial scenario, correct."""
    t0 = time.monotonic()
    v = verify_kernel(ORIGINAL_KERNEL, _options(CONTROL), settings=settings)
    _rows.append(("original (after the corpus)", "-", v.status, time.monotonic() - t0, "harness still serving"))
    assert v.status == "correct", _describe(v)
    assert v.num_correct == len(CONTROL["scenarios"])
