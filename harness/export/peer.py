"""``peer_test``: FlashAttention's own forward tests against a candidate, through its exported package.

The user points at a FlashAttention checkout's test file (``hopper/test_flash_attn.py``); attnq ships
none of its code. The candidate is exported (:func:`harness.export.package.export_kernel`) into the
state directory, then ``python -m pytest FILE -k SELECT -p harness.export.peer_plugin`` runs in the
test file's directory with the exported package importable; the plugin answers the test file's
``import flash_attn_interface`` with the package and writes one record per test
(:mod:`harness.export.peer_plugin`). FlashAttention's test file has its own switches for features a
build may lack (``FLASH_ATTENTION_DISABLE_*``); the ones in :data:`DISABLED_FEATURES` are set, since
the export has no such feature.

The report reads like a verdict: ``status`` pass (no failure and at least one test passed), fail (a
test failed or errored) or error (nothing ran: no test collected, the file did not import, pytest
crashed or ran past the time limit); counts; skips grouped by reason; the failures with their
messages.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

import harness
from harness.errors import InputError, NoGpuError, ToolchainError, VerifyError
from harness.export.package import default_name, export_kernel
from harness.logging import get_logger

log = get_logger(__name__)

#: Environment of the pytest subprocess: the exported package's name, and where the plugin writes its records.
ENV_PACKAGE = "ATTNQ_PEER_PACKAGE"
ENV_RESULTS = "ATTNQ_PEER_RESULTS"
#: FlashAttention's own switches set for the run, and why (the export has no such feature).
DISABLED_FEATURES = {
    "FLASH_ATTENTION_DISABLE_BACKWARD": "the export is forward only",
    "FLASH_ATTENTION_DISABLE_FP8": "the kernel takes bf16 and fp16",
    "FLASH_ATTENTION_DISABLE_LOCAL": "no sliding windows or attention_chunk",
    "FLASH_ATTENTION_DISABLE_SOFTCAP": "no softcap",
    "FLASH_ATTENTION_DISABLE_PAGEDKV": "no paged KV cache",
    "FLASH_ATTENTION_DISABLE_APPENDKV": "no KV append",
}
DEFAULT_SELECT = "test_flash_attn_output"
DEFAULT_TIMEOUT_S = 3600.0
MAX_FAILURES_REPORTED = 50


class PeerTestCase(BaseModel):
    """One test of the peer file: its pytest node id, outcome, skip reason or failure message."""

    nodeid: str
    outcome: Literal["passed", "failed", "skipped", "error"]
    reason: str = ""
    message: str = ""
    candidate_calls: int = 0
    reference_calls: dict[str, int] = Field(default_factory=dict)
    duration_s: float = 0.0


class PeerProgress(BaseModel):
    """Progress of a run: ``done`` of ``total`` collected tests (total None until collection ends)."""

    done: int
    total: int | None
    message: str


class PeerReport(BaseModel):
    """The outcome of ``peer_test`` (see the module docstring for ``status``)."""

    status: Literal["pass", "fail", "error"]
    message: str
    kernel: str
    package: str
    export_dir: str
    arch: str
    fa_tests: str
    select: str
    collected: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    skip_reasons: dict[str, int] = Field(default_factory=dict, description="skipped tests per reason, most first")
    candidate_calls: int = Field(0, description="flash_attn_func calls the kernel ran, all tests together")
    reference_calls: dict[str, int] = Field(default_factory=dict,
                                            description="calls the kernel cannot express, answered by attnq's "
                                                        "fp32 reference so a test could go on; never counted")
    failures: list[PeerTestCase] = Field(default_factory=list, description=f"failed and errored tests (first "
                                                                            f"{MAX_FAILURES_REPORTED})")
    collect_errors: list[str] = Field(default_factory=list)
    disabled_features: dict[str, str] = Field(default_factory=dict)
    pytest_exit_code: int | None = None
    duration_s: float = 0.0
    command: list[str] = Field(default_factory=list)
    log_file: str = ""


def _check_fa_tests(path: str | Path) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(f"{path}: no such file (give FlashAttention's test file, e.g. "
                         "flash-attention/hopper/test_flash_attn.py)")
    if not p.is_file() or p.suffix != ".py":
        raise InputError(f"{path}: give one pytest file, e.g. flash-attention/hopper/test_flash_attn.py")
    return p.resolve()


def _require_gpu() -> None:
    """NoGpuError unless the CUDA driver shows a device (driver API: the parent never imports torch)."""
    from harness.gpu import driver_device

    if driver_device(0) is None:
        raise NoGpuError("peer-test runs FlashAttention's tests on an NVIDIA GPU; the CUDA driver shows none here")


def _read_records(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # a line being written
    return records


def _first_error_line(text: str) -> str:
    """The ``E   ModuleNotFoundError: ...`` line of a collection error, else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errs = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    return (errs[-1] if errs else (lines[-1] if lines else "unknown error"))[:300]


def summarize(records: list[dict], *, exit_code: int | None, timed_out: bool = False) -> dict:
    """Counts, skip reasons, failures and status from the plugin's records (the fields of PeerReport)."""
    tests = [PeerTestCase(**{k: v for k, v in r.items() if k != "event"}) for r in records if r.get("event") == "test"]
    collected = max([r["count"] for r in records if r.get("event") == "collected"], default=0)
    collect_errors = [f"{r['nodeid']}: {_first_error_line(r['message'])}" for r in records
                      if r.get("event") == "collect_error"]
    count = Counter(t.outcome for t in tests)
    reasons = Counter(t.reason for t in tests if t.outcome == "skipped")
    reference: Counter[str] = Counter()
    for t in tests:
        reference.update(t.reference_calls)
    failures = [t for t in tests if t.outcome in ("failed", "error")]
    if timed_out:
        status, message = "error", f"pytest ran past the time limit after {len(tests)} of {collected} tests"
    elif collect_errors:
        status, message = "error", "FlashAttention's test file did not import: " + collect_errors[0]
    elif failures:
        status, message = "fail", f"{len(failures)} of {len(tests)} tests failed"
    elif count["passed"] == 0:
        status = "error"
        message = ("no test collected: check --select" if collected == 0 and not tests
                   else "no test passed: every test was skipped" if tests
                   else f"pytest ended (exit code {exit_code}) before running a test")
    elif exit_code not in (0, None):
        status, message = "error", f"pytest ended with exit code {exit_code} after {len(tests)} of {collected} tests"
    else:
        status, message = "pass", f"{count['passed']} passed, {count['skipped']} skipped, no failure"
    return {"status": status, "message": message, "collected": collected, "passed": count["passed"],
            "failed": count["failed"], "skipped": count["skipped"], "errors": count["error"],
            "skip_reasons": dict(reasons.most_common()), "candidate_calls": sum(t.candidate_calls for t in tests),
            "reference_calls": dict(reference), "failures": failures[:MAX_FAILURES_REPORTED],
            "collect_errors": collect_errors}


def peer_test(kernel: str | Path, fa_tests: str | Path, *, select: str = DEFAULT_SELECT, arch: str = "sm_90a",
              work_dir: Path | None = None, cache_dir: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
              require_gpu: bool = True, progress: Callable[[PeerProgress], None] | None = None,
              cancel: threading.Event | None = None) -> PeerReport:
    """Export ``kernel`` and run FlashAttention's tests in ``fa_tests`` (``-k select``) against it.

    Args:
        kernel: the candidate .cu file.
        fa_tests: FlashAttention's pytest file, e.g. ``flash-attention/hopper/test_flash_attn.py``.
        select: pytest ``-k`` expression; default the dense forward output test.
        arch: nvcc target of the export.
        work_dir: where the export, the records and pytest's log go; default
            ``<state_dir>/peer/<package name>``.
        timeout_s: wall-clock limit for pytest (its process group is killed past it).
        require_gpu: refuse without a GPU, once the export (the kernel's checks and build) has passed, as
            ``attnq verify`` does (tests of attnq itself turn it off).
        progress: called as records arrive; cancel: set it to stop the run (reported as error).
    Returns:
        PeerReport.
    Raises:
        InputError: a missing or non-.py test file, a bad select; the export's errors (compile, policy).
        NoGpuError: no GPU and ``require_gpu``.
    """
    started = time.monotonic()
    tests_file = _check_fa_tests(fa_tests)
    if not select.strip():
        raise InputError("select is empty: give a pytest -k expression, e.g. test_flash_attn_output")
    if importlib.util.find_spec("pytest") is None:
        raise ToolchainError("peer-test runs FlashAttention's tests with pytest, which is not installed: "
                             "python -m pip install pytest")
    name = default_name(Path(kernel))
    if work_dir is None:
        from harness.config import Settings

        settings = Settings()
        work_dir = settings.state_dir / "peer" / name
        cache_dir = cache_dir or settings.state_dir / "build"
    work_dir = Path(work_dir).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    if progress:
        progress(PeerProgress(done=0, total=None, message=f"exporting {Path(kernel).name} for {arch}"))
    exported = export_kernel(kernel, work_dir / "package", name=name, archs=[arch], cache_dir=cache_dir, force=True)
    if require_gpu:  # after the export: a missing file or a compile error is said first, as `attnq verify` does
        _require_gpu()
    results, log_file = work_dir / "records.jsonl", work_dir / "pytest.log"
    results.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", str(tests_file), "-k", select, "-q", "-p", "harness.export.peer_plugin",
               "-p", "no:cacheprovider"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASH_ATTENTION_")}
    env.update({var: "TRUE" for var in DISABLED_FEATURES})
    paths = [str(tests_file.parent), exported.directory, str(harness.REPO_ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env[ENV_PACKAGE], env[ENV_RESULTS] = exported.name, str(results)
    log.info("peer_test_start", kernel=str(kernel), fa_tests=str(tests_file), select=select)
    timed_out = cancelled = False
    with open(log_file, "w", encoding="utf-8") as log_fh:
        try:
            proc = subprocess.Popen(command, cwd=tests_file.parent, env=env, stdout=log_fh, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except OSError as exc:
            raise VerifyError(f"cannot start pytest ({sys.executable} -m pytest): {exc}") from None
        seen = -1
        while proc.poll() is None:
            if time.monotonic() - started > timeout_s:
                timed_out = True
            elif cancel is not None and cancel.is_set():
                cancelled = True
            if timed_out or cancelled:
                _kill_group(proc)
                break
            if progress:
                records = _read_records(results)
                if len(records) != seen:
                    seen = len(records)
                    total = next((r["count"] for r in records if r.get("event") == "collected"), None)
                    done = sum(1 for r in records if r.get("event") == "test")
                    last = next((r["nodeid"] for r in reversed(records) if r.get("event") == "test"), "collecting")
                    progress(PeerProgress(done=done, total=total, message=last.split("::")[-1][:80]))
            time.sleep(0.5)
    fields = summarize(_read_records(results), exit_code=proc.returncode, timed_out=timed_out)
    if cancelled:
        fields.update(status="error", message="cancelled")
    report = PeerReport(kernel=str(Path(kernel).resolve()), package=exported.name, export_dir=exported.directory,
                        arch=arch, fa_tests=str(tests_file), select=select, disabled_features=dict(DISABLED_FEATURES),
                        pytest_exit_code=proc.returncode, duration_s=round(time.monotonic() - started, 2),
                        command=command, log_file=str(log_file), **fields)
    log.info("peer_test_done", status=report.status, passed=report.passed, failed=report.failed,
             skipped=report.skipped)
    return report


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # pragma: no cover - already gone
        pass
    proc.wait()
