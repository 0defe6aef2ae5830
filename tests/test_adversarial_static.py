"""The adversarial corpus on the CPU: the manifest is sound, every policy/ABI class is refused by
``compile_kernel`` with an error that names the offending header or symbol, and every other kernel
compiles cleanly (under the default policy, or with ``policy=False`` where the manifest says so).

Each file is compiled at most once per session (a session fixture builds what the selected tests need,
in parallel, into a temporary cache); needs nvcc, skipped with a reason where it is missing. The GPU half
of the corpus (the verdicts) is tests/gpu/test_adversarial.py.

Cost: a build is ~1.8 CPU-seconds of nvcc, and CI has two cores. By default the clean-compile test builds
the runtime kernels whose build facts only this test checks (a policy=false build and its warning, the
kernel that launches nothing) and the honest control, whose body (common_attn.cuh) every other runtime
kernel instantiates; the other runtime kernels are built and verified by the GPU run
(tests/gpu/test_adversarial.py), and ATTNQ_TEST_FULL_CORPUS=1 (``scripts/gpu_run.sh corpus``) builds them
all here too. That cut the fixture from 36 builds (~40 s on CI) to 13 (~14 s).
"""

from __future__ import annotations

import os
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, get_args

import pytest

from harness.checks import CHECKS
from harness.compile import CompileResult, compile_kernel, find_nvcc
from harness.errors import AbiError, AttnqError, PolicyError, ToolchainError
from harness.scenarios import load_suite
from harness.verdict import FailureKind

CORPUS = Path(__file__).resolve().parent / "adversarial"
MANIFEST = CORPUS / "manifest.toml"
VERDICTS = {"refused", "incorrect", "correct_but_not_faster", "verify_error"}
REQUIRED = ("class", "file", "description", "expected_verdict", "expected_check", "expected_failure_kind", "gpu")


def load_manifest() -> dict[str, Any]:
    """The parsed manifest (see its header for the fields)."""
    with MANIFEST.open("rb") as fh:
        return tomllib.load(fh)


MANIFEST_DATA = load_manifest()
ENTRIES: list[dict[str, Any]] = MANIFEST_DATA["kernel"]
REFUSED = [e for e in ENTRIES if e["expected_verdict"] == "refused"]
BUILT = [e for e in ENTRIES if e["expected_verdict"] != "refused"]
DEFAULT_REFUSED = [e for e in ENTRIES if e.get("refused_by_default")]
#: Build every runtime kernel here (else only those of :func:`cpu_checked`); read at import, before the
#: test environment drops ATTNQ_* variables.
FULL_CORPUS = os.environ.get("ATTNQ_TEST_FULL_CORPUS") == "1"


def cpu_checked(entry: dict[str, Any]) -> bool:
    """A runtime kernel whose build facts only the CPU test checks: built with policy = false, expecting
    warnings, or launching nothing (allocator_reuse)."""
    return entry.get("policy", True) is False or bool(entry.get("expect_warnings")) \
        or entry["file"] == "allocator_reuse.cu"


CLEAN_BUILDS = [MANIFEST_DATA["control"], *[e for e in BUILT if FULL_CORPUS or cpu_checked(e)]]


def _ids(entries: list[dict[str, Any]]) -> list[str]:
    return [e["class"] for e in entries]


# ------------------------------------------------------------------------------------------ manifest


def test_manifest_is_valid() -> None:
    """Files exist, classes are unique (>= 15), checks/verdicts/failure kinds come from the harness's lists,
    scenario ids exist in the adversarial suite, and each verdict has the fields it needs."""
    assert len(ENTRIES) >= 15
    classes = _ids(ENTRIES)
    assert len(set(classes)) == len(classes), "duplicate class names"
    files = [e["file"] for e in ENTRIES] + [MANIFEST_DATA["control"]["file"]]
    assert len(set(files)) == len(files), "one entry per .cu file"
    assert sorted(files) == sorted(p.name for p in CORPUS.glob("*.cu")), "every .cu has exactly one entry"
    suite_ids = set(load_suite(CORPUS / MANIFEST_DATA["suite"]).ids())
    kinds = set(get_args(FailureKind))
    control = MANIFEST_DATA["control"]
    assert set(control["scenarios"]) == suite_ids and control["timing_scenario"] in suite_ids
    for e in ENTRIES:
        where = e.get("class", "?")
        for key in REQUIRED:
            assert key in e, f"{where}: missing {key}"
        assert (CORPUS / e["file"]).is_file(), f"{where}: {e['file']} missing"
        assert e["expected_verdict"] in VERDICTS, where
        if e.get("gap"):  # a proposed check the verifier lacks: must not pretend to be an existing one
            assert e["expected_check"] not in CHECKS, f"{where}: a gap names a check that does not exist yet"
        else:
            assert e["expected_check"] in CHECKS, f"{where}: {e['expected_check']} is not a named check"
        assert e["expected_failure_kind"] == "" or e["expected_failure_kind"] in kinds, where
        for alt in e.get("accept", []):
            check, _, kind = alt.partition("/")
            assert check in CHECKS and kind in kinds, f"{where}: bad accept {alt}"
        if e["expected_verdict"] == "refused":
            assert not e["gpu"] and e["names"], where
            assert e["expected_check"] in ("source_policy", "symbol_policy", "abi"), where
        else:
            assert e["gpu"] and e["scenarios"], where
            assert set(e["scenarios"]) <= suite_ids, f"{where}: unknown scenario ids"
        if e["expected_verdict"] == "incorrect":
            assert e["failed"] and set(e["failed"]) <= set(e["scenarios"]), where
            assert e["expected_failure_kind"] or e.get("gap"), where
        if e["expected_verdict"] == "correct_but_not_faster":
            assert e["timing_scenario"] in e["scenarios"], where
        if e.get("policy", True) is False:
            assert e["refused_by_default"], f"{where}: policy = false needs refused_by_default"
        if "runtime" in e:
            rt = e["runtime"]
            assert rt["expected_check"] in CHECKS and set(rt["scenarios"]) <= suite_ids, where
            assert rt["expected_verdict"] in ("incorrect", "correct_but_not_faster"), where
            if rt["expected_verdict"] == "incorrect":
                assert set(rt["failed"]) <= set(rt["scenarios"]) and rt["expected_failure_kind"] in kinds, where
        if e.get("defense") == "sandbox":
            assert e["sandbox_layer"] in ("landlock", "seccomp", "caps"), where
            assert e["sandbox_off_verdict"] in ("correct", "incorrect", "verify_error", ""), where
            assert e["sandbox_off_verdict"] != "incorrect" or e["sandbox_off_check"] in CHECKS, where
            # the escape must reach the run time: the policy is off, or the file walks libc (the policy sees nothing)
            assert e.get("policy", True) is False or e.get("libc_walk"), f"{where}: the symbol policy would refuse it first"


#: The classes of issue 12 and the least number of corpus kernels each must have.
ISSUE12 = ("work_outside_timed_call", "replayed_repeats", "timed_phase", "entry_point_rule", "load_limit", "trust_split")


def test_every_issue12_class_has_more_than_one_kernel() -> None:
    """More than one instance per class, each caught by the intended check (named in the manifest)."""
    by_class: dict[str, list[str]] = {}
    for e in ENTRIES:
        if "issue12" in e:
            assert e["issue12"] in ISSUE12, e["class"]
            by_class.setdefault(e["issue12"], []).append(e["file"])
    assert {c: len(by_class.get(c, [])) >= 2 for c in ISSUE12} == dict.fromkeys(ISSUE12, True), by_class


# ------------------------------------------------------------------------------------------ builds


def _compile(path: Path, cache: Path, policy: bool) -> CompileResult | AttnqError:
    try:
        return compile_kernel(path, cache_dir=cache, policy=policy)
    except AttnqError as err:
        return err


@pytest.fixture(scope="session")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], CompileResult | AttnqError]:
    """``{(file, policy): CompileResult or the error}`` for every build the tests need, each built once,
    in parallel (nvcc runs as a subprocess, so threads overlap)."""
    try:
        find_nvcc()
    except ToolchainError as err:
        pytest.skip(f"nvcc is needed to build the corpus: {err.message}")
    cache = tmp_path_factory.mktemp("adv-build")
    jobs = {(e["file"], True) for e in REFUSED + DEFAULT_REFUSED}
    jobs |= {(e["file"], bool(e.get("policy", True))) for e in CLEAN_BUILDS}
    workers = max(2, min(8, (os.cpu_count() or 2) + 1))
    with ThreadPoolExecutor(workers) as pool:
        futures = {job: pool.submit(_compile, CORPUS / job[0], cache, job[1]) for job in sorted(jobs)}
        return {job: fut.result() for job, fut in futures.items()}


@pytest.mark.slow
@pytest.mark.parametrize("entry", REFUSED, ids=_ids(REFUSED))
def test_policy_class_is_refused_by_name(builds: dict, entry: dict[str, Any]) -> None:
    """A policy/ABI class raises PolicyError (AbiError for `abi`) whose message names the header/symbol."""
    got = builds[(entry["file"], True)]
    want = AbiError if entry["expected_check"] == "abi" else PolicyError
    assert isinstance(got, want), f"{entry['file']}: expected {want.__name__}, got {got!r}"
    assert any(name in got.message for name in entry["names"]), got.message
    if want is PolicyError:
        kinds = {v["kind"] for v in got.details.get("violations", [])}
        want_kinds = {"header", "entry_point"} if entry["expected_check"] == "source_policy" else {"symbol"}
        assert want_kinds & kinds, f"expected a {want_kinds} violation, got {kinds}"


@pytest.mark.slow
@pytest.mark.parametrize("entry", DEFAULT_REFUSED, ids=_ids(DEFAULT_REFUSED))
def test_runtime_demo_is_still_refused_by_default_policy(builds: dict, entry: dict[str, Any]) -> None:
    """Classes verified with policy = false (to exercise a runtime defense) are refused by the default policy."""
    got = builds[(entry["file"], True)]
    assert isinstance(got, PolicyError), f"{entry['file']}: expected PolicyError, got {got!r}"
    assert any(name in got.message for name in entry["refused_by_default"]), got.message


@pytest.mark.slow
@pytest.mark.parametrize("entry", CLEAN_BUILDS, ids=["control", *_ids(CLEAN_BUILDS[1:])])
def test_runtime_class_compiles_cleanly(builds: dict, entry: dict[str, Any]) -> None:
    """Every kernel the GPU test verifies builds without errors or warnings and exports the ABI."""
    policy = bool(entry.get("policy", True))
    got = builds[(entry["file"], policy)]
    assert isinstance(got, CompileResult), f"{entry['file']} (policy={policy}): {got!r}"
    expected = entry.get("expect_warnings", [])
    for w in got.warnings:
        assert any(x in w.message for x in expected), f"unexpected warning: {w.message}"
    for x in expected:
        assert any(x in w.message for w in got.warnings), f"the build should warn about {x}"
    if entry["file"] != "allocator_reuse.cu":  # the one class that launches nothing
        assert got.kernels, "no __global__ kernel was built"
    assert Path(got.library).is_file()


def _quoted_includes(path: Path, seen: set[Path]) -> list[tuple[Path, str, Path]]:
    """``(includer, spelled name, resolved path)`` of every ``#include "..."`` reached from ``path`` that
    resolves next to its includer (the way nvcc finds a quoted header first), followed recursively."""
    from harness.policy import list_includes

    out = []
    for _, delim, name in list_includes(path.read_text(errors="replace")):
        target = (path.parent / name).resolve()
        if delim != '"' or not target.is_file() or target in seen:
            continue
        seen.add(target)
        out += [(path, name, target), *_quoted_includes(target, seen)]
    return out


def test_corpus_headers_lie_where_the_policy_allows() -> None:
    """Every corpus kernel that must pass the source policy includes only headers in its own folder or
    kernels/ (harness.policy.scan_preprocessed's rule): run 40 found six GPU entries refused before any
    scenario after the rule came in, because libc_walk.cuh included a header of tests/hostkernels/."""
    from harness import KERNELS_DIR

    roots = (CORPUS.resolve(), KERNELS_DIR.resolve())
    bad = []
    for e in BUILT:
        if e.get("policy", True) is False:
            continue
        src = (CORPUS / e["file"]).resolve()
        bad += [f"{e['file']}: {inc.name} includes {name!r}" for inc, name, target in _quoted_includes(src, {src})
                if not any(target.is_relative_to(r) for r in roots)]
    assert not bad, bad
