"""harness.procs.communicate_or_kill on real child processes: output collected, and on timeout the whole
process group (the child and what it started) killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from harness.procs import communicate_or_kill


def _sh(script: str) -> subprocess.Popen:
    return subprocess.Popen(["/bin/sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_a_child_that_finishes_gives_its_output() -> None:
    out, err, timed_out = communicate_or_kill(_sh("cat; echo oops >&2"), 30.0, "brief\n")
    assert (out, err, timed_out) == ("brief\n", "oops\n", False)


def _gone(pid: int, within_s: float) -> bool:
    """True once process ``pid`` no longer exists, polled every 50 ms for up to ``within_s`` seconds."""
    for _ in range(int(within_s / 0.05)):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_child_past_its_limit_is_killed_with_what_it_started(tmp_path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    t0 = time.monotonic()
    out, _, timed_out = communicate_or_kill(_sh(f"echo started; sleep 60 & echo $! > {pid_file}; wait"), 0.5)
    assert timed_out and out == "started\n" and time.monotonic() - t0 < 10
    grandchild = int(pid_file.read_text())
    assert _gone(grandchild, 2.5), f"the grandchild {grandchild} outlived the kill"  # SIGKILL of the group


def test_ctrl_c_while_waiting_kills_the_group(tmp_path) -> None:
    """SIGINT to a Python process waiting in communicate_or_kill (what Ctrl-C sends): the child runs in a
    session of its own and never sees the terminal's SIGINT, so it must be killed by us, grandchild too."""
    pid_file = tmp_path / "grandchild.pid"
    script = (
        "import signal, subprocess, sys\n"
        # Ctrl-C's handler even where this test runs with SIGINT ignored (a background job of a shell without job
        # control inherits SIG_IGN, and Python then keeps it: the waiter sat out its 120 s and printed nothing)
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from harness.procs import communicate_or_kill\n"
        "p = subprocess.Popen(['/bin/sh', '-c', sys.argv[1]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,"
        " text=True, start_new_session=True)\n"
        "try:\n"
        "    communicate_or_kill(p, 120.0)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    waiter = subprocess.Popen([sys.executable, "-c", script, f"sleep 60 & echo $! > {pid_file}; wait"],
                              stdout=subprocess.PIPE, text=True, env=env)
    for _ in range(200):  # until the grandchild has started
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    waiter.send_signal(signal.SIGINT)
    out, _ = waiter.communicate(timeout=30)
    assert out == "interrupted\n"
    if not _gone(grandchild, 5.0):
        os.kill(grandchild, signal.SIGKILL)
        raise AssertionError(f"the grandchild {grandchild} outlived Ctrl-C")


def test_a_process_that_exits_while_a_thread_waits_leaves_no_child(tmp_path) -> None:
    """An MCP server closed by its client mid-build exited at once and left nvcc running, orphaned (trial of
    2026-12-06): the atexit handler kills the group of every child a thread still waits for, grandchildren too."""
    pids = tmp_path / "pids"
    code = ("import subprocess, sys, threading, time\n"
            "from harness.procs import communicate_or_kill\n"
            f"script = 'sleep 60 & echo $$ $! > {pids}; wait'\n"
            "p = subprocess.Popen(['/bin/sh', '-c', script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, "
            "text=True, start_new_session=True)\n"
            "threading.Thread(target=communicate_or_kill, args=(p, 300.0), daemon=True).start()\n"
            f"while not __import__('os').path.exists({str(pids)!r}): time.sleep(0.05)\n"
            "time.sleep(0.3)\n")  # then the interpreter exits with the thread still waiting
    env = {**os.environ, "PYTHONPATH": str(__import__("harness").REPO_ROOT)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    shell, sleeper = (int(x) for x in pids.read_text().split())
    assert _gone(shell, 10.0) and _gone(sleeper, 10.0)
