"""harness.procs.communicate_or_kill on real child processes: output collected, and on timeout the whole
process group (the child and what it started) killed."""

from __future__ import annotations

import os
import subprocess
import time

from harness.procs import communicate_or_kill


def _sh(script: str) -> subprocess.Popen:
    return subprocess.Popen(["/bin/sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_a_child_that_finishes_gives_its_output() -> None:
    out, err, timed_out = communicate_or_kill(_sh("cat; echo oops >&2"), 30.0, "brief\n")
    assert (out, err, timed_out) == ("brief\n", "oops\n", False)


def test_a_child_past_its_limit_is_killed_with_what_it_started(tmp_path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    t0 = time.monotonic()
    out, _, timed_out = communicate_or_kill(_sh(f"echo started; sleep 60 & echo $! > {pid_file}; wait"), 0.5)
    assert timed_out and out == "started\n" and time.monotonic() - t0 < 10
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # SIGKILL of the group: the backgrounded sleep goes too
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the grandchild {grandchild} outlived the kill")
