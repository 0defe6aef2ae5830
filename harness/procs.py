"""Child processes with a time limit: one rule for nvcc (harness/compile.py), compute-sanitizer
(harness/sanitize.py) and an evolve mutator command (evolve/mutators.py).

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
