"""Child processes with a time limit: one rule for nvcc (harness/compile.py), the relink's replayed build steps
(harness/relink.py), compute-sanitizer (harness/sanitize.py) and an evolve mutator command (evolve/mutators.py).

Each such child runs in a session of its own (no terminal signal reaches it), so this process kills its group
whenever it stops waiting for it: on time-out, on an exception, and at this process's exit while a thread still
waits (:func:`kill_live_children`, an atexit handler): an MCP server whose client closed it mid-build used to leave
nvcc running, orphaned, its output thrown away."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading
from pathlib import Path

_LIVE: set[subprocess.Popen] = set()  # children some thread is waiting for now
_LIVE_LOCK = threading.Lock()


def kill_live_children() -> int:
    """SIGKILL the process group of every child a thread of this process still waits for; returns how many
    (registered with atexit: a process that exits while a build runs in a worker thread leaves no nvcc behind)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for proc in live:
        _kill_group(proc)
    return len(live)


atexit.register(kill_live_children)


def communicate_or_kill(proc: subprocess.Popen, timeout_s: float, input: str | None = None) -> tuple[str, str, bool]:
    """``proc.communicate(input)`` within ``timeout_s`` seconds. On timeout the process's group is killed
    (SIGKILL: the child and whatever it started; ``proc`` must have been started with
    ``start_new_session=True``) and what it wrote is still collected. Returns ``(stdout, stderr,
    timed_out)``; a stream that was not piped comes back as ``""``.

    Ctrl-C (KeyboardInterrupt) or any other exception while waiting kills the group too before it
    propagates: the child runs in a session of its own, so the terminal's SIGINT never reaches it, and an
    nvcc or a mutator command (an agent) would otherwise run on, orphaned, after ``attnq`` exited."""
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        out, err = proc.communicate(input, timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        timed_out = True
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    return out or "", err or "", timed_out


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group ``proc`` leads (a no-op when it is already gone)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # pragma: no cover - already gone
        pass


#: The variables of this process's environment a build tool keeps: where programs and libraries are found (``PATH``,
#: ``LD_LIBRARY_PATH``, and ``NVCC_CCBIN``, nvcc's host compiler where the default gcc is one it does not support:
#: the host compiler is not in the cache key either way), the home and temp folders, the locale. Every other one is
#: dropped, because the compilers read more of them than the cache key could hash: ``NVCC_APPEND_FLAGS`` and
#: ``NVCC_PREPEND_FLAGS`` (nvcc), ``CPATH``, ``CPLUS_INCLUDE_PATH``, ``LIBRARY_PATH``, ``GCC_EXEC_PREFIX``,
#: ``COMPILER_PATH`` (gcc), ``LD_PRELOAD`` (red team, session 24: ``NVCC_APPEND_FLAGS=-DMODE`` built another kernel
#: under the same key, and a later run without it got that build).
BUILD_ENV_KEEP = ("PATH", "LD_LIBRARY_PATH", "NVCC_CCBIN", "HOME", "TMPDIR", "USER", "LOGNAME", "LANG", "LC_ALL",
                  "LC_CTYPE", "LC_MESSAGES")


def build_env() -> dict[str, str]:
    """The environment of a build tool: this process's :data:`BUILD_ENV_KEEP` variables, and ``SOURCE_DATE_EPOCH=0``
    (``__DATE__`` and ``__TIME__`` alike in the policy's -E passes and the build,
    harness.nvcc_passes.built_text_mismatch)."""
    return {**{k: os.environ[k] for k in BUILD_ENV_KEEP if k in os.environ}, "SOURCE_DATE_EPOCH": "0"}


def run_captured(argv: list[str], cwd: Path | str, timeout_s: float,
                 env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], bool]:
    """Run a build tool (nvcc, or a step of nvcc's plan) in a session of its own with stdin closed and its output
    captured as text, in ``env`` (default :func:`build_env`): ``(the completed process, timed_out)``; on timeout its
    group is killed (:func:`communicate_or_kill`) and what it wrote is kept. Raises OSError when it cannot start.

    stdin is closed so that a candidate's ``#include "/dev/stdin"`` cannot read this process's input (the MCP stdio
    server's protocol); undecodable output bytes become U+FFFD (nvcc echoes the candidate's bytes, which need not be
    UTF-8: a Latin-1 string literal is valid C++)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            encoding="utf-8", errors="replace", cwd=cwd, start_new_session=True,
                            env=build_env() if env is None else env)
    out, err, timed_out = communicate_or_kill(proc, timeout_s)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), timed_out
