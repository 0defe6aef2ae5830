"""pytest plugin of ``attnq peer-test``, loaded in the pytest subprocess with ``-p harness.export.peer_plugin``.

FlashAttention's tests do ``from flash_attn_interface import flash_attn_func, ...``. At configure time
this plugin puts a module of that name into ``sys.modules`` (so it wins over any real one on
``sys.path``) whose ``flash_attn_func`` calls the exported package's (``$ATTNQ_PEER_PACKAGE``):

* a call the kernel runs counts as a *candidate call* of the test;
* a call whose only unsupported argument is ``head_dim_v`` (v's head_dim differs from q's, as in
  FlashAttention-3's own output test, which loops over several v head dims in one test) is answered
  by attnq's fp32 reference (harness.reference) so that the test can go on to the calls the kernel
  can take; such calls are counted per reason and never count as the kernel's;
* any other unsupported argument, or the kernel declining a configuration, skips the test with the
  reason; the other entry points of FlashAttention's interface (varlen, kvcache, combine, ...) skip
  the test too.

A test that passed without a single candidate call is reported as skipped ("no call reached the
kernel"). One JSON object per line goes to ``$ATTNQ_PEER_RESULTS``: ``{"event": "collected", "count"}``,
``{"event": "collect_error", "nodeid", "message"}`` and per test ``{"event": "test", "nodeid",
"outcome": passed|failed|skipped|error, "reason", "message", "candidate_calls", "reference_calls",
"duration_s"}``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import sys
import types
from collections import Counter
from typing import Any

import pytest

from harness.export.peer import ENV_PACKAGE, ENV_RESULTS

#: Entry points of flash_attn_interface the export does not provide; a test calling one is skipped.
OTHER_ENTRY_POINTS = ("flash_attn_qkvpacked_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
                      "flash_attn_combine", "get_scheduler_metadata")
REFERENCE_REASON = "head_dim_v != head_dim (answered by attnq's fp32 reference, not counted)"


class _Tally:
    """Per-test counts, reset before each test."""

    def __init__(self) -> None:
        self.candidate_calls = 0
        self.reference_calls: Counter[str] = Counter()

    def reset(self) -> None:
        self.candidate_calls = 0
        self.reference_calls = Counter()


TALLY = _Tally()


def _reference_answer(bound: inspect.BoundArguments) -> Any:
    """fp32 attention (harness.reference) for a call the kernel cannot express, in q's dtype."""
    import torch

    from harness.reference import attention_reference

    a = bound.arguments
    q, k, v = a["q"], a["k"], a["v"]
    with torch.no_grad():
        o, lse = attention_reference(q, k, v, softmax_scale=a.get("softmax_scale"), causal=bool(a.get("causal")))
    o = o.to(q.dtype)
    return (o, lse) if a.get("return_attn_probs") else o


def make_shim(package: types.ModuleType) -> types.ModuleType:
    """A ``flash_attn_interface`` module over the exported ``package`` (see the module docstring)."""
    shim = types.ModuleType("flash_attn_interface")
    shim.__doc__ = f"attnq peer-test: FlashAttention's interface over {package.__name__}"
    target = package.flash_attn_func
    signature = inspect.signature(target)

    @functools.wraps(target)
    def flash_attn_func(*args: Any, **kwargs: Any) -> Any:
        try:
            out = target(*args, **kwargs)
        except package.UnsupportedArgument as exc:
            if exc.arguments == ["head_dim_v"]:
                TALLY.reference_calls[REFERENCE_REASON] += 1
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                return _reference_answer(bound)
            pytest.skip(f"unsupported by the kernel: {', '.join(exc.arguments)}")
        except package.KernelDeclined as exc:
            pytest.skip(f"the kernel declined the configuration (attn_fwd returned {exc.status})")
        TALLY.candidate_calls += 1
        return out

    shim.flash_attn_func = flash_attn_func
    for name in OTHER_ENTRY_POINTS:
        def other(*args: Any, _name: str = name, **kwargs: Any) -> Any:
            pytest.skip(f"{_name} is not part of the exported interface (attnq exports flash_attn_func)")

        other.__name__ = name
        setattr(shim, name, other)
    return shim


#: ``$ATTNQ_PEER_RESULTS``, read once at configure time (a test may clear the environment).
_RESULTS: list[str] = []


def _write(record: dict[str, Any]) -> None:
    if _RESULTS:
        with open(_RESULTS[0], "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    """Install the shim as ``flash_attn_interface`` before any test module is imported."""
    name = os.environ.get(ENV_PACKAGE)
    if not name:
        raise pytest.UsageError(f"harness.export.peer_plugin needs {ENV_PACKAGE} (the exported package's name)")
    sys.modules["flash_attn_interface"] = make_shim(importlib.import_module(name))
    if os.environ.get(ENV_RESULTS):
        _RESULTS[:] = [os.environ[ENV_RESULTS]]
    config._attnq_peer = {}  # type: ignore[attr-defined]  # nodeid -> record being built


def pytest_collection_finish(session: pytest.Session) -> None:
    _write({"event": "collected", "count": len(session.items)})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _write({"event": "collect_error", "nodeid": report.nodeid, "message": report.longreprtext[-4000:]})


def pytest_runtest_setup(item: pytest.Item) -> None:
    TALLY.reset()


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Turn a pass without candidate calls into a skip; record each phase's outcome for the report."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when == "call" and report.passed and TALLY.candidate_calls == 0 and TALLY.reference_calls:
        report.outcome = "skipped"
        reasons = "; ".join(sorted(TALLY.reference_calls))
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: no call reached the kernel: {reasons}")
    records: dict[str, dict[str, Any]] = item.config._attnq_peer  # type: ignore[attr-defined]
    rec = records.setdefault(item.nodeid, {"event": "test", "nodeid": item.nodeid, "outcome": "passed",
                                           "reason": "", "message": "", "duration_s": 0.0})
    rec["duration_s"] = round(rec["duration_s"] + report.duration, 4)
    if report.skipped and rec["outcome"] == "passed":
        rec["outcome"], rec["reason"] = "skipped", _skip_reason(report)
    elif report.failed and rec["outcome"] not in ("failed", "error"):
        rec["outcome"] = "failed" if report.when == "call" else "error"
        exc = call.excinfo.exconly() if call.excinfo is not None else report.longreprtext
        crash = getattr(report.longrepr, "reprcrash", None)
        where = f"{os.path.basename(crash.path)}:{crash.lineno}: " if crash is not None else ""
        rec["message"] = where + exc.strip()[:600]
    if report.when == "teardown":
        rec["candidate_calls"] = TALLY.candidate_calls
        rec["reference_calls"] = dict(TALLY.reference_calls)
        _write(records.pop(item.nodeid))

