"""compute-sanitizer over the candidate on a few scenarios: ``attnq verify K --sanitize TOOL``.

The parent (harness/verify.py, after the verification proper, under the same GPU lock) runs
``compute-sanitizer --tool TOOL python -m harness.sanitize --job FILE``: a process that loads only the
candidate, and per scenario allocates every tensor exactly (no guard bands, no caching allocator: an
access past a tensor leaves its allocation, which memcheck reports), fills the inputs as draw 0 does,
prints a begin marker, calls ``attn_fwd`` once, synchronizes and prints an end marker. When that process
reports nothing, every scenario is clean; otherwise each scenario runs again alone, and what its process
reports is its finding (the named check ``sanitizer``). API errors are not reported (torch's own probes
would count): a failing launch of the candidate shows as its status.

Tools: memcheck (out-of-bounds and misaligned global/shared accesses, hardware exceptions), racecheck
(shared-memory hazards), initcheck (reads of uninitialized global memory), synccheck (invalid barrier use).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from harness import REPO_ROOT, child_pythonpath
from harness.errors import ToolchainError
from harness.procs import communicate_or_kill
from harness.scenarios import Scenario
from harness.verdict import SanitizerReport

Tool = Literal["memcheck", "racecheck", "initcheck", "synccheck"]
TOOLS: tuple[str, ...] = ("memcheck", "racecheck", "initcheck", "synccheck")
BEGIN, END = "@@attnq-sanitize begin", "@@attnq-sanitize end"
#: Scenarios sanitized when the run names none (``VerifyOptions.sanitize_scenarios``).
DEFAULT_SCENARIOS = 5
#: Report lines kept per scenario.
MAX_FINDING_LINES = 12
_PREFIX = "========= "
_NOT_FINDINGS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY", "Target application",
                 "Saved host backtrace", "Process didn't terminate", "Error: process didn't terminate")


class SanitizeJob(BaseModel):
    """What the parent writes for the sanitized process (``--job FILE``)."""

    candidate_lib: str
    candidate_sha256: str = ""
    scenarios: list[Scenario]
    gpu: int = 0
    seed: int = 0


def find_compute_sanitizer() -> str:
    """Path of ``compute-sanitizer``: on PATH, under $CUDA_HOME / $CUDA_PATH, next to nvcc, or in the
    toolkit's usual places. Raises ToolchainError naming where it looked."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda", "/opt/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    places = []
    for root in filter(None, roots):
        for sub in ("bin", "compute-sanitizer"):
            p = Path(root) / sub / "compute-sanitizer"
            places.append(str(p))
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
    raise ToolchainError("--sanitize needs NVIDIA's compute-sanitizer (part of the CUDA toolkit); not found on PATH "
                         f"nor in {', '.join(places[:6])}: install the toolkit or put it on PATH")


def _cost(sc: Scenario) -> float:
    return sc.flops + 200.0 * sc.bytes_min  # ~200 FLOP per byte on an H200: a decode row is not free


def pick_scenarios(scenarios: list[Scenario], limit: int = DEFAULT_SCENARIOS) -> list[Scenario]:
    """A small set to sanitize: for each head_dim, the cheapest scenario with more than one key tile and
    query row, preferring a partial last key tile (seqlen_k % 64 != 0); the cheapest ``limit`` of those, in
    suite order."""
    best: dict[int, Scenario] = {}
    for sc in scenarios:
        key = (not (sc.seqlen_k > 64 and sc.seqlen_q > 1), sc.seqlen_k % 64 == 0, _cost(sc))
        cur = best.get(sc.head_dim)
        if cur is None or key < (not (cur.seqlen_k > 64 and cur.seqlen_q > 1), cur.seqlen_k % 64 == 0, _cost(cur)):
            best[sc.head_dim] = sc
    chosen = {s.id for s in sorted(best.values(), key=_cost)[:limit]}
    return [s for s in scenarios if s.id in chosen]


def command(exe: str, tool: str, job_path: Path) -> list[str]:
    """The compute-sanitizer command line for one sanitized process."""
    return [exe, "--tool", tool, "--error-exitcode", "97", "--show-backtrace", "no", "--report-api-errors", "no",
            sys.executable, "-m", "harness.sanitize", "--job", str(job_path)]


def _classify(line: str) -> str | None:
    """``"error"``, ``"warning"`` or ``"detail"`` for a report line of the tool (``========= ...``), else None."""
    if not line.startswith(_PREFIX.rstrip()):
        return None
    body = line[len(_PREFIX):] if line.startswith(_PREFIX) else ""
    if not body.strip():
        return None
    if body[0].isspace() or body.startswith(_NOT_FINDINGS):
        return "detail"
    return "warning" if body.lower().startswith("warning") else "error"


def findings(text: str) -> tuple[int, int, list[str]]:
    """(errors, warnings, report lines) over a whole output: a headline starting with "Warning" is a
    warning; any other (Invalid ..., Race reported ..., Uninitialized ..., Barrier error ...) an error."""
    errors = warnings = 0
    lines = []
    for raw in text.splitlines():
        kind = _classify(raw.rstrip())
        if kind is None or (kind == "detail" and raw[len(_PREFIX):].startswith(_NOT_FINDINGS)):
            continue
        lines.append(raw.rstrip())
        errors += kind == "error"
        warnings += kind == "warning"
    return errors, warnings, lines


def parse_output(text: str, tool: str, ids: list[str]) -> dict[str, SanitizerReport]:
    """Reports per scenario id from the merged output of one sanitized process: the tool's report lines
    between a scenario's begin and end markers are its findings (see :func:`findings`). A scenario begun
    but never ended is ``crashed``; one never begun is absent. The tool prints what the process sends it,
    so a report can trail its marker: :func:`run_sanitizer` re-runs scenarios one per process whenever a
    process reports anything."""
    out: dict[str, SanitizerReport] = {}
    current: str | None = None
    chunk: list[str] = []
    rc_msg = ""

    def close(crashed: bool) -> None:
        assert current is not None
        err, warn, lines = findings("\n".join(chunk))
        status = "errors" if err else ("crashed" if crashed else ("warnings" if warn else "clean"))
        out[current] = SanitizerReport(tool=tool, status=status, errors=err, warnings=warn,  # type: ignore[arg-type]
                                       findings=lines[:MAX_FINDING_LINES], message=rc_msg)

    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith(BEGIN):
            if current is not None:
                close(True)
            parts = line[len(BEGIN):].split(maxsplit=1)
            current = parts[1] if len(parts) > 1 else None
            chunk, rc_msg = [], ""
        elif line.startswith(END):
            m = re.search(r"status=(\S+)(?: (.*))?$", line)
            if current is not None:
                if m and m.group(1) != "0":
                    rc_msg = f"attn_fwd returned {m.group(1)}" if m.group(1).lstrip("-").isdigit() else (m.group(2) or m.group(1))
                close(bool(m and m.group(1) == "fatal"))
            current = None
        elif current is not None:
            chunk.append(line)
    if current is not None:
        close(True)
    return {i: out[i] for i in ids if i in out}


def _single(text: str, tool: str, sc_id: str) -> SanitizerReport | None:
    """The report of a process that ran one scenario: every report line it printed is that scenario's
    (the set-up before the call runs only torch's own kernels). None when the scenario never began."""
    marked = parse_output(text, tool, [sc_id]).get(sc_id)
    if marked is None:
        return None
    err, warn, lines = findings(text)
    status = "errors" if err else ("crashed" if marked.status == "crashed" else ("warnings" if warn else "clean"))
    return SanitizerReport(tool=tool, status=status, errors=err, warnings=warn,  # type: ignore[arg-type]
                           findings=lines[:MAX_FINDING_LINES], message=marked.message)


def run_sanitizer(tool: str, job: SanitizeJob, work_dir: Path, *, timeout_s: float,
                  exe: str | None = None) -> tuple[dict[str, SanitizerReport], float, str | None]:
    """Sanitize ``job.scenarios`` with ``tool``. All of them run in one process; when it reports nothing and
    every scenario ended, all are clean. Otherwise each scenario runs again in a process of its own, so that
    every report is attributed to the scenario whose call caused it (the tool relays reports from the
    process it watches: their order against the process's own markers is not guaranteed).
    Returns (reports by id, wall seconds, why it ended early or None). Raises ToolchainError when
    compute-sanitizer is missing."""
    exe = exe or find_compute_sanitizer()
    t0 = time.monotonic()
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    env["PYTHONPATH"] = child_pythonpath()
    runs = 0

    def run(scenarios: list[Scenario]) -> tuple[str, bool]:
        nonlocal runs
        runs += 1
        job_path = work_dir / f"sanitize-{runs}.json"
        job_path.write_text(job.model_copy(update={"scenarios": scenarios}).model_dump_json())
        left = timeout_s - (time.monotonic() - t0)
        proc = subprocess.Popen(command(exe, tool, job_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, cwd=str(REPO_ROOT), start_new_session=True)
        text, _, timed_out = communicate_or_kill(proc, max(left, 1.0))  # the tool and the Python it started
        with (work_dir / "sanitize.log").open("a") as fh:
            fh.write(text)
        return text, timed_out

    ids = [s.id for s in job.scenarios]
    reports: dict[str, SanitizerReport] = {}
    ended: str | None = None
    text, timed_out = run(job.scenarios)
    together = parse_output(text, tool, ids)
    errors, warnings, _ = findings(text)
    if timed_out:
        ended = f"compute-sanitizer {tool} ran past {timeout_s:.0f} s"
    if not together and not timed_out:  # nothing began: the process could not start (tool, driver, load error)
        tail = "\n".join(text.strip().splitlines()[-5:])
        ended = f"compute-sanitizer {tool} ran no scenario: {tail[-600:]}"
    elif not errors and not warnings and len(together) == len(ids) and all(r.status == "clean" for r in together.values()):
        reports = together
    elif not timed_out:
        for sc in job.scenarios:
            text, timed_out = run([sc])
            rep = _single(text, tool, sc.id)
            if rep is not None:
                reports[sc.id] = rep
            if timed_out:
                ended = f"compute-sanitizer {tool} ran past {timeout_s:.0f} s"
                break
    for sid in ids:
        if sid not in reports:
            reports[sid] = SanitizerReport(tool=tool, status="not_run", message=ended or "not run")  # type: ignore[arg-type]
    return reports, round(time.monotonic() - t0, 2), ended


def main(argv: list[str] | None = None) -> int:
    """The sanitized process. Exit codes: 0 all scenarios run, 3 a fatal CUDA error, 4 bad job or load."""
    ap = argparse.ArgumentParser(prog="python -m harness.sanitize")
    ap.add_argument("--job", required=True, help="SanitizeJob JSON file")
    args = ap.parse_args(argv)
    try:
        import hashlib

        import torch

        from harness.abi import load_kernel, make_params

        job = SanitizeJob.model_validate_json(Path(args.job).read_text())
        got = hashlib.sha256(Path(job.candidate_lib).read_bytes()).hexdigest()
        if job.candidate_sha256 and got != job.candidate_sha256:
            raise RuntimeError(f"{job.candidate_lib} changed since it was compiled")
        torch.cuda.set_device(job.gpu)
        lib = load_kernel(job.candidate_lib)
        num_sms = torch.cuda.get_device_properties(job.gpu).multi_processor_count
    except Exception as exc:  # noqa: BLE001 - reported in the output the parent parses
        print(f"sanitize: cannot start: {type(exc).__name__}: {exc}", flush=True)
        return 4
    for index, sc in enumerate(job.scenarios):
        dtype = torch.bfloat16 if sc.dtype == "bf16" else torch.float16
        gen = torch.Generator(device="cuda").manual_seed((job.seed * 1_000_003 + index) % (1 << 63))
        views, lse = sanitizer_tensors(torch, sc, dtype, gen, "cuda")
        p = make_params(views.q, views.k, views.v, views.o, lse, softmax_scale=sc.scale, causal=sc.causal,
                        num_sms=num_sms)
        nbytes = lib.workspace_bytes(p)
        ws = None
        if nbytes:
            ws = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            p.workspace, p.workspace_bytes = ws.data_ptr(), nbytes
        torch.cuda.synchronize()
        print(f"{BEGIN} {index} {sc.id}", flush=True)
        try:
            status = lib.fwd(p, 0)
            torch.cuda.synchronize()
        except RuntimeError as exc:
            print(f"{END} {index} status=fatal {str(exc).splitlines()[0]}", flush=True)
            return 3
        print(f"{END} {index} status={status}", flush=True)
        with contextlib.suppress(RuntimeError):
            for t in (*views.storages, lse, *([ws] if ws is not None else [])):
                t.zero_()
        del views, lse, ws
    return 0


def sanitizer_tensors(torch: Any, sc: Scenario, dtype: Any, gen: Any, device: str) -> tuple[Any, Any]:
    """The sanitized call's tensors: ``(views, lse)`` with harness.layouts.Views of the scenario's layout
    (declared, else dense), every storage its own exact allocation (no arena, no guard bands: an access past
    a tensor leaves its allocation), inputs filled with the scenario's values (``normal`` for the others)
    at its draw-0 softmax_scale, o and ``lse [batch, num_heads_q, seqlen_q]`` fp32 poisoned."""
    from harness.buffers import fill_values
    from harness.checks import poison_
    from harness.layouts import DENSE, build_views

    views = build_views(torch, sc, sc.layout or DENSE, dtype,
                        lambda _name, shape, dt: torch.empty(shape, dtype=dt, device=device), lambda *_: None)
    fill_values(torch, sc, views.targets, gen, "normal", sc.scale)
    lse = poison_(torch.empty((sc.batch, sc.num_heads_q, sc.seqlen_q), dtype=torch.float32, device=device))
    poison_(views.o)
    return views, lse


def to_sanitize(scenarios: list[Scenario], chosen_ids: list[str] | None, limit: int) -> list[Scenario]:
    """The scenarios to sanitize: those the run was limited to (``--scenario``), else :func:`pick_scenarios`."""
    if chosen_ids:
        return [s for s in scenarios if s.id in set(chosen_ids)][:limit]
    return pick_scenarios(scenarios, limit)


def merge(results: list[Any], reports: dict[str, SanitizerReport]) -> None:
    """Attach each report to its ScenarioResult; a scenario otherwise correct whose call drew errors (or
    killed the sanitized process) fails with check ``sanitizer``."""
    for r in results:
        rep = reports.get(r.id)
        if rep is None:
            continue
        r.sanitizer = rep
        if r.correct and rep.status in ("errors", "crashed"):
            r.correct = False
            r.failure_kind, r.check = "sanitizer_error", "sanitizer"
            first = next((f for f in rep.findings if not f[len(_PREFIX):][:1].isspace()), rep.message or "")
            what = f"{rep.errors} error reports" if rep.status == "errors" else "the process died during the call"
            r.message = f"compute-sanitizer {rep.tool}: {what}: {first.removeprefix(_PREFIX).strip()}"[:400]


if __name__ == "__main__":
    raise SystemExit(main())
