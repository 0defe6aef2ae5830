"""A host-code relayout without a second device compile: replay the host compile and link steps of one nvcc build.

A policy build refused only for system call bytes inside displacements is built again with its host code moved
(:data:`harness.exec_scan.RELAYOUT_FLAGS`: ``-Xcompiler -falign-*``, ``-Xlinker -z max-page-size``). Those flags
change only the host compiler's and the linker's steps; the device code (cicc, ptxas, fatbinary: ~55 s of the fast
kernel's ~60 s build) is the same. nvcc ``-dryrun`` prints the steps it would run for a command line, with the flags
in place and the intermediate files named after ``--keep-dir``; :func:`relink` runs that plan from the host compile of
the ``.cudafe1.cpp`` on (host compile, nvlink, fatbinary of the link image, the link stub's compile, the final link),
against the intermediates the first build kept. Measured (nvcc 13.0): 0.8-1 s per layout for kernels/attn_original.cu
and tests/adversarial/race_head_replay.cu on the CPU box (2 cores); on the GPU box (run 72) attn_fast.cu's relayout
took 10 s with its scan and SASS facts, against ~55-60 s for one full build of it.

The plan's lines are split as a POSIX shell would (``shlex``) and run without a shell. The only text in the plan that
is not nvcc's own is the paths of the command line (source, include folders, keep folder, output), so every argument
of the command line and the folder it runs in must be plain (letters, digits, ``_ . / + , = @ % : -``): a path with a
quote or a space could otherwise split into other arguments of the replayed steps. Where they are not, or a line
of the plan needs a shell (``$`` expansion, backticks, redirection: none in nvcc 13's), nothing is replayed and the
caller builds in full.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from harness.procs import build_env, run_captured

__all__ = ["relink", "replay_plan"]

_ENV_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_PLAIN_RE = re.compile(r"[\w./+,=@%:-]*")
_SHELL_RE = re.compile(r"[$`;|&<>]")


def replay_plan(dryrun: str) -> tuple[dict[str, str], list[list[str]]] | str:
    """The steps of an ``nvcc -dryrun`` output (its ``#$ `` lines) to replay for a relayout: ``(env, argvs)`` where
    ``env`` holds the plan's ``PATH`` and ``LD_LIBRARY_PATH`` (the tools it names: gcc, nvlink, fatbinary, g++; their
    absolute entries only, never the working folder's empty or relative ones) and
    ``argvs`` the commands from the host compile of the ``.cudafe1.cpp`` (``-c``) to the end; or a reason (str) when
    the plan has no such step or a step needs a shell."""
    env: dict[str, str] = {}
    cmds: list[str] = []
    for line in dryrun.splitlines():
        if not line.startswith("#$ "):
            continue
        body = line[3:].strip()
        if m := _ENV_RE.match(body):
            if m.group(1) in ("PATH", "LD_LIBRARY_PATH"):  # absolute entries only: nvcc.profile's value ends in an
                # empty entry (the working folder) when LD_LIBRARY_PATH is unset (red team, session 23)
                env[m.group(1)] = ":".join(e for e in m.group(2).strip().split(":") if e.startswith("/"))
            continue
        cmds.append(body)
    start = next((i for i, c in enumerate(cmds) if " -c " in c and '.cudafe1.cpp"' in c), None)
    if start is None:
        return "nvcc's plan has no host compile of a .cudafe1.cpp"
    argvs: list[list[str]] = []
    for cmd in cmds[start:]:  # only the replayed lines are split (the device steps' quoting does not matter)
        if _SHELL_RE.search(cmd):  # a quoted `$` or `>` would be fine, but no line of nvcc 13's plan has one
            return f"a step of nvcc's plan needs a shell: {cmd[:120]}"
        try:
            argvs.append(shlex.split(cmd))
        except ValueError as exc:
            return f"a step of nvcc's plan does not split into arguments ({exc}): {cmd[:120]}"
    return env, argvs


def relink(nvcc_argv: list[str], cwd: Path, timeout_s: float) -> str | None:
    """Replay the host compile and link of ``nvcc_argv`` (a complete nvcc command line with ``--keep --keep-dir K``
    whose device steps already ran into K, and the relayout flags added) in ``cwd``, the directory nvcc ran in.

    ``cwd`` must hold nothing of the candidate's (harness.compile._tool_cwd): the plan's link stub compile has ``-I.``.
    Returns None when every step succeeded (the ``-o`` library of ``nvcc_argv`` is then written), else the reason,
    with nothing raised: the caller then builds in full. ``timeout_s`` bounds each step (the plan itself takes nvcc
    well under a second)."""
    if bad := [a for a in [*nvcc_argv, str(cwd)] if not _PLAIN_RE.fullmatch(a)]:
        return f"an argument is not a plain path or flag: {bad[0][:120]!r}"
    env = build_env()
    plan = _run([*nvcc_argv, "-dryrun"], cwd, env, timeout_s)
    if isinstance(plan, str):
        return f"nvcc -dryrun: {plan}"
    parsed = replay_plan(plan.stderr + "\n" + plan.stdout)
    if isinstance(parsed, str):
        return parsed
    plan_env, argvs = parsed
    env.update(plan_env)
    for argv in argvs:
        done = _run(argv, cwd, env, timeout_s)
        if isinstance(done, str):
            return f"{argv[0]}: {done}"
        if done.returncode != 0:
            return f"{argv[0]} exited {done.returncode}: {(done.stderr or done.stdout).strip()[-400:]}"
    return None


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str] | str:
    """One step (harness.procs.run_captured); a reason (str) when it cannot run or times out."""
    try:
        proc, timed_out = run_captured(argv, cwd, timeout_s, env)
    except OSError as exc:
        return f"cannot run: {exc}"
    return f"timed out after {timeout_s:g} s" if timed_out else proc
