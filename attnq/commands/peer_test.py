"""``attnq peer-test KERNEL.cu --fa-tests PATH [--select EXPR] [--arch A] [--timeout S] [--json]``.

Runs FlashAttention's own forward tests (a checkout the user points to) against the kernel through
its exported package (harness.export.peer). Exit codes: 0 pass, 1 a test failed, 2 error (input,
compile, or nothing ran: see the message), 3 no GPU.
"""

from __future__ import annotations

import argparse
import sys

from attnq.commands.reflect import positive_float
from harness.export.peer import (
    DEFAULT_SELECT,
    DEFAULT_TIMEOUT_S,
    PeerProgress,
    PeerReport,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``peer-test`` subcommand."""
    p = subparsers.add_parser(
        "peer-test", help="run FlashAttention's forward tests against a kernel (through attnq export)",
        description="Export the kernel, then run FlashAttention's pytest file against it: the file's "
                    "`import flash_attn_interface` gets the exported package. Reports pass / skip (with reasons) "
                    "/ fail. Needs an NVIDIA GPU, pytest, and what the test file imports (einops for FA3's).")
    p.add_argument("file", help="the kernel .cu file")
    p.add_argument("--fa-tests", required=True, help="FlashAttention's test file, e.g. "
                                                     "flash-attention/hopper/test_flash_attn.py")
    p.add_argument("--select", default=DEFAULT_SELECT, help=f"pytest -k expression (default: {DEFAULT_SELECT})")
    p.add_argument("--arch", default=None, help="nvcc arch of the export (default: ATTNQ_ARCH or sm_90a)")
    p.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT_S,
                   help="seconds before pytest is stopped (a finite number > 0)")
    p.add_argument("--json", action="store_true", help="print the PeerReport JSON on stdout")
    p.set_defaults(handler=run)


def _progress(enabled: bool):
    tty = enabled and sys.stderr.isatty()

    def show(ev: PeerProgress) -> None:
        if not tty:
            return
        if ev.total:
            filled = int(30 * ev.done / ev.total)
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {ev.done}/{ev.total} {ev.message[:60]:<60}")
            if ev.done == ev.total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(f"\r{ev.message[:90]:<90}")
        sys.stderr.flush()

    return show


def format_report(r: PeerReport, max_failures: int = 20) -> str:
    """Human view: status line, counts, skip reasons, calls, failures."""
    lines = [f"peer-test {r.kernel} ({r.package}, {r.arch})",
             f"  against {r.fa_tests} -k '{r.select}'",
             f"status {r.status.upper()}: {r.message}",
             (f"  {r.collected} collected: {r.passed} passed, {r.skipped} skipped, {r.failed} failed, "
              f"{r.errors} errors ({r.duration_s:.0f} s); {r.candidate_calls} calls ran the kernel")]
    for reason, n in r.reference_calls.items():
        lines.append(f"  {n} calls: {reason}")
    if r.skip_reasons:
        lines.append("skipped, by reason:")
        lines += [f"  {n:>6}  {reason[:150]}" for reason, n in r.skip_reasons.items()]
    for err in r.collect_errors[:5]:
        lines.append(f"collection error: {err}")
    if r.failures:
        lines.append(f"failures (first {min(max_failures, len(r.failures))} of {r.failed + r.errors}):")
        lines += [f"  {f.outcome.upper()} {f.nodeid}\n      {f.message[:300]}" for f in r.failures[:max_failures]]
    lines.append("FlashAttention switches set: " + ", ".join(f"{k.removeprefix('FLASH_ATTENTION_')} ({v})"
                                                              for k, v in r.disabled_features.items()))
    lines.append(f"pytest log: {r.log_file}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Handler: 0 pass, 1 fail, 2 nothing ran (errors as AttnqError: 2, no GPU: 3)."""
    from harness.config import Settings
    from harness.export.peer import peer_test

    settings = Settings()
    report = peer_test(args.file, args.fa_tests, select=args.select, arch=args.arch or settings.arch,
                       timeout_s=args.timeout, progress=_progress(not args.json))
    print(report.model_dump_json(indent=2) if args.json else format_report(report))
    return {"pass": 0, "fail": 1}.get(report.status, 2)

