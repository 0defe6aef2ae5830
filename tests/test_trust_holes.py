"""The three holes the red team of 2026-12-01 found in the trust split (tests/adversarial/redteam/README.md),
closed as classes, on the CPU: work after return (threads, timers), replay of per-slice content across
the determinism repeats, and the sandbox's reads, SysV/POSIX IPC, keyrings and sockets. The cheating
libraries are CPU builds of the ABI (tests/hostkernels/attn_host.c) that reach libc by walking its
in-memory ELF (attnq_libc_walk.h), so no import gives them away: the run-time rules must hold alone.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import REPO_ROOT, child_pythonpath
from harness.endpoints import KernelFatal
from harness.launch_client import LauncherError
from tests import hostkernels
from tests.test_trust_split import NO_SANDBOX, SANDBOX, _child_env, _verify

pytestmark = pytest.mark.skipif(not hostkernels.have_cc(), reason="needs a C compiler (gcc) for the CPU kernels")
needs_sandbox = pytest.mark.skipif(not SANDBOX, reason=NO_SANDBOX)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostkernels-holes")


# ------------------------------------------------------------------ the rules, syscall by syscall

_ATTEMPTS = r"""
import ctypes, errno, json, os, signal, socket, sys, tempfile, threading
from harness.sandbox import apply_sandbox
tmp, outside, repo_file = sys.argv[1], sys.argv[2], sys.argv[3]
lib = open(os.path.join(tmp, "lib.so"), "wb"); lib.write(b"x"); lib.close()
rep = apply_sandbox(tmp, readable=[])
libc = ctypes.CDLL(None, use_errno=True)
out = {"report": [rep.landlock_abi, rep.seccomp, rep.caps_dropped, rep.warnings]}
def attempt(name, fn):
    try:
        fn()
        out[name] = "allowed"
    except (OSError, RuntimeError) as exc:
        out[name] = type(exc).__name__ + ": " + str(exc)
def raw(name, r):
    if r == -1:
        e = ctypes.get_errno()
        raise OSError(e, name + ": " + os.strerror(e))
attempt("thread", lambda: threading.Thread(target=lambda: None).start())
def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
attempt("fork", fork)
attempt("setitimer", lambda: signal.setitimer(signal.ITIMER_REAL, 10.0))
attempt("alarm", lambda: raw("alarm", -1 if libc.syscall(37, 100) == -1 else 0))
attempt("timer_create", lambda: raw("timer_create", libc.syscall(222, 1, None, ctypes.byref(ctypes.c_int()))))
attempt("setrlimit", lambda: raw("prlimit64", libc.prlimit64(0, 0, ctypes.byref((ctypes.c_uint64 * 2)(10, 10)), None)))
attempt("getrlimit", lambda: raw("prlimit64", libc.prlimit64(0, 0, None, ctypes.byref((ctypes.c_uint64 * 2)()))))
attempt("unix_socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
attempt("socketpair", lambda: socket.socketpair())
attempt("shmget", lambda: raw("shmget", libc.shmget(0, 4096, 0o1600)))
attempt("msgget", lambda: raw("msgget", libc.msgget(0, 0o1600)))
attempt("semget", lambda: raw("semget", libc.semget(0, 1, 0o1600)))
attempt("add_key", lambda: raw("add_key", libc.syscall(248, b"user", b"attnq", b"x", 1, -2)))
def lock(cmd, ltype=0):  # struct flock: l_type, l_whence (short), l_start, l_len (off_t), l_pid
    fd = os.open(os.path.realpath("/proc/self/exe"), os.O_RDONLY)  # a file the other launcher can open too
    try:
        fl = (ctypes.c_short * 2)(ltype, 0)
        buf = ctypes.create_string_buffer(bytes(fl) + bytes(4) + bytes(24))
        raw("fcntl", libc.fcntl(fd, cmd, buf))
    finally:
        os.close(fd)
attempt("fcntl_setlk", lambda: lock(6))  # F_RDLCK on a read-only descriptor
attempt("fcntl_getlk", lambda: lock(5))
attempt("fcntl_ofd_setlk", lambda: lock(37))
def lock_high(cmd):  # the raw system call with bits above 32 set in cmd (the kernel reads an int)
    fd = os.open(os.path.realpath("/proc/self/exe"), os.O_RDONLY)
    try:
        buf = ctypes.create_string_buffer(bytes((ctypes.c_short * 2)(0, 0)) + bytes(28))
        raw("fcntl", libc.syscall(ctypes.c_long(72), ctypes.c_long(fd), ctypes.c_long((1 << 32) | cmd), buf))
    finally:
        os.close(fd)
attempt("fcntl_setlk_high_bits", lambda: lock_high(6))
attempt("flock", lambda: raw("flock", libc.flock(os.open(tmp, os.O_RDONLY), 1)))
attempt("fcntl_getfl", lambda: raw("fcntl", libc.fcntl(os.open(tmp, os.O_RDONLY), 3)))
attempt("inotify", lambda: raw("inotify_init1", libc.syscall(294, 0)))
attempt("setpriority_by_pid", lambda: raw("setpriority", libc.setpriority(0, os.getpid(), 0)))  # only 0 names self
attempt("setpriority_self", lambda: raw("setpriority", libc.setpriority(0, 0, 0)))
attempt("setpriority_own_user", lambda: raw("setpriority", libc.setpriority(2, 0, 0)))  # PRIO_USER: every process of the uid
def nowait_read(flags):
    fd = os.open(os.path.join(tmp, "lib.so"), os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(1)], 0, flags)
    finally:
        os.close(fd)
attempt("preadv2_nowait", lambda: nowait_read(os.RWF_NOWAIT))
attempt("preadv2_nowait_hipri", lambda: nowait_read(os.RWF_NOWAIT | os.RWF_HIPRI))
attempt("read_outside", lambda: open(outside).read())
attempt("list_outside", lambda: os.listdir(os.path.dirname(outside)))
attempt("read_own_temp", lambda: open(os.path.join(tmp, "lib.so")).read())
attempt("read_system_lib", lambda: open(os.path.realpath("/proc/self/exe"), "rb").read(4))
attempt("read_own_proc", lambda: os.listdir("/proc/self/task"))
attempt("read_parent_proc", lambda: open(f"/proc/{os.getppid()}/cmdline").read())
attempt("write_own_temp", lambda: open(os.path.join(tmp, "w"), "w").write("x"))
attempt("import_from_pythonpath", lambda: __import__("attnq_site_probe"))
attempt("read_repository", lambda: open(repo_file).read())
print(json.dumps(out))
"""


@needs_sandbox
def test_each_forbidden_call_is_refused_and_what_the_launcher_needs_is_not(tmp_path: Path) -> None:
    """The sandbox applied in a fresh interpreter, then every forbidden call tried (threads, processes,
    timers, limits, sockets, SysV IPC, keyrings, reads outside) next to what a launcher still does. Python
    packages on PYTHONPATH outside the interpreter's prefix (the GPU box's wheels in /tmp/site) stay
    importable; the repository, first on that PYTHONPATH, stays unreadable."""
    tmp = tmp_path / "launcher-tmp"
    tmp.mkdir()
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the candidate")
    site = tmp_path / "site"  # a --target install dir, as gpu_env.sh makes
    site.mkdir()
    (site / "attnq_site_probe.py").write_text("VALUE = 7\n")
    env = _child_env(PYTHONPATH=os.pathsep.join([child_pythonpath(), str(site)]))
    proc = subprocess.run([sys.executable, "-c", _ATTEMPTS, str(tmp), str(outside), str(REPO_ROOT / "README.md")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    landlock, seccomp, caps, warnings = got.pop("report")
    assert landlock and seccomp and caps and not warnings
    allowed = {"getrlimit", "fcntl_getfl", "setpriority_self", "read_own_temp", "read_system_lib", "read_own_proc", "write_own_temp", "import_from_pythonpath"}
    for name, result in got.items():
        if name in allowed:
            assert result == "allowed", f"{name}: {result}"
        else:
            assert result != "allowed", f"{name} worked under the sandbox"
    assert "can't start new thread" in got["thread"] or "Resource" in got["thread"], got["thread"]


# ------------------------------------------------------------------------ 1: work after return

@needs_sandbox
@pytest.mark.parametrize(("cheat", "what"), [(11, "a thread started in attn_fwd"), (12, "a thread started at load"),
                                             (13, "a setitimer SIGALRM handler"), (14, "a timer_create handler")])
def test_work_after_return_gets_no_thread_and_no_timer(built: Path, cheat: int, what: str) -> None:
    """Half the rows in attn_fwd, half after it returned through ``what``: the mechanism is refused
    (seccomp), so that half is never written."""
    res, report = _verify(built, cheat=cheat)
    assert (res.check, res.failure_kind) == ("poisoned_output", "unwritten_output"), f"{what}: {res.message}"
    assert report["seccomp"] and not report["warnings"]


def test_a_thread_alive_after_the_call_is_caught_where_seccomp_is_missing(built: Path) -> None:
    """Without the sandbox (seccomp missing, or ATTNQ_SANDBOX=off) the thread starts; the launcher's
    /proc/self/task check after the call names it."""
    res, report = _verify(built, cheat=11, sandbox="off")
    assert (res.check, res.failure_kind) == ("work_after_return", "work_after_return"), res.message
    assert "still alive after attn_fwd returned" in res.message and "off" in report["warnings"][0]


def test_a_write_after_the_scenario_ended_cannot_crash_the_next_scenario(built: Path) -> None:
    """The thread writes its half 0.2 s after attn_fwd returned: after the failed scenario's arena went back.
    The launcher keeps a host arena mapped while library threads live (harness/launcher.py ``unmap``), so the
    late write lands in pages nobody reads and the next scenario is judged for what it does; before, the
    write hit the unmapped arena and the launcher died with SIGSEGV under the next scenario (a CI flake of
    2026-12-06, where load delayed the 100 us write past the scenario's end)."""
    lib, _ = hostkernels.build(built, cheat=11, late_us=200_000)
    res, _ = _verify(built, lib=lib, sandbox="off", again_after_s=0.5)
    assert (res.check, res.failure_kind) == ("work_after_return", "work_after_return"), res.message


def test_a_thread_started_at_load_refuses_the_library_where_seccomp_is_missing(built: Path) -> None:
    with pytest.raises(LauncherError, match=r"thread\(s\) started by the library were still alive after loading"):
        _verify(built, cheat=12, sandbox="off")


# --------------------------------------------------------------------- 2: per-slice replay

@pytest.mark.parametrize(("cheat", "what"), [(15, "a cache per (batch, kv head)"), (16, "a cache per (batch, query head)"),
                                             (3, "a cache of the whole call's content")])
def test_a_content_cache_cannot_replay_draw_0_in_the_repeat_process(built: Path, cheat: int, what: str) -> None:
    """Each repeat runs in the candidate process that never saw its source: the race shows."""
    res, _ = _verify(built, cheat=cheat, samples=6)
    assert (res.check, res.failure_kind) == ("determinism", "nondeterministic"), f"{what}: {res.message}"


def test_without_the_repeat_process_the_slice_cache_hides_the_race(built: Path) -> None:
    """The control (the hole the red team found): with the repeats in their sources' process, the per-slice
    cache replays the sources' bits through the reordering and the race passes."""
    res, _ = _verify(built, cheat=15, samples=6, split=False)
    assert res.correct, res.message


def test_the_repeat_process_also_runs_ordinary_calls(built: Path) -> None:
    """The second process gets checked draw 1 and about half of the fresh timed calls, and each repeat runs in
    the process that did not run its source, so being asked tells neither process that a call is a repeat;
    an honest kernel stays correct across both processes."""
    from harness.draws import CallDrawer
    from tests.test_trust_split import SC

    d = CallDrawer(SC, 7, draws=2, repeats=3, min_samples=20, split=True)
    checked = [d.checked(i) for i in range(2)]
    fresh = [d.timed(n) for n in range(200)]
    by_call = {c.call: c for c in checked + fresh}
    reps = [d.repeat(j, 200 + j) for j in range(3)]
    assert [c.process for c in checked] == [0, 1] and all(r.process != by_call[r.source].process for r in reps)
    assert 0.35 < sum(t.process for t in fresh) / len(fresh) < 0.65
    res, _ = _verify(built, samples=9)
    assert res.correct, res.message


# ------------------------------------------------------------------------------ 3: the sandbox

def _listener(tmp_path: Path) -> tuple[socket.socket, str]:
    path = str(tmp_path / "outside.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.setblocking(False)
    return s, path


@needs_sandbox
@pytest.mark.parametrize(("probe", "what"), [(6, "a file outside its temp dir"), (7, "SysV shared memory"),
                                             (8, "sendto a unix socket outside"), (9, "a POSIX message queue"),
                                             (10, "the user's keyring")])
def test_the_sandbox_refuses_reads_ipc_and_sockets(built: Path, tmp_path: Path, probe: int, what: str) -> None:
    """Each probe (reached through the libc walk) returns 99 when its escape worked, honest otherwise."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's file")
    lst, sock_path = _listener(tmp_path)
    try:
        path = sock_path if probe == 8 else str(secret)
        lib, _ = hostkernels.build(built, cheat=7, probe=probe, probe_path=path)
        res, report = _verify(built, lib=lib)
        assert res.correct, f"{what}: {res.check}/{res.failure_kind}: {res.message}"
        assert report["landlock_abi"] and report["seccomp"] and not report["warnings"]
        with pytest.raises(BlockingIOError):
            lst.recv(64)  # nothing arrived
    finally:
        lst.close()


@pytest.mark.parametrize(("probe", "what"), [(6, "a file outside"), (7, "SysV shared memory"), (8, "sendto"),
                                             (9, "a POSIX message queue"), (10, "a keyring")])
def test_without_the_sandbox_each_probe_escapes(built: Path, tmp_path: Path, probe: int, what: str) -> None:
    """The controls: the same probes with the sandbox off do escape (so the test above tests the sandbox,
    not a broken probe). POSIX queues and keyrings are missing in some containers: skipped there."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's file")
    lst, sock_path = _listener(tmp_path)
    try:
        lib, _ = hostkernels.build(built, cheat=7, probe=probe, probe_path=sock_path if probe == 8 else str(secret))
        res, _ = _verify(built, lib=lib, sandbox="off")
        if probe in (9, 10) and res.correct:
            pytest.skip(f"{what} is unavailable on this machine even without the sandbox")
        assert (res.check, res.failure_kind) == ("launch_status", "unsupported") and "99" in res.message, what
        if probe == 8:
            assert lst.recv(64) == b"hello"
    finally:
        lst.close()


def test_the_repeat_process_costs_one_launcher_start(built: Path) -> None:
    """The second candidate process on an honest kernel: one more launcher start and load (overlapped with
    the others in the worker), no more calls. Measured here on the CPU path; the H200 numbers are in
    docs/gpu-results.md."""
    t0 = time.perf_counter()
    res_one, _ = _verify(built, samples=9, split=False)
    one = time.perf_counter() - t0
    t0 = time.perf_counter()
    res_two, _ = _verify(built, samples=9)
    two = time.perf_counter() - t0
    assert res_one.correct and res_two.correct
    # the same draws; the dense calls timed are the same unless the wall clock alone would have convicted one run
    # of escaping (host wake-ups of the CPU launchers): that run takes more samples first (harness.timed_samples.WALL_MORE)
    for res in (res_one, res_two):
        assert res.candidate.layout == "dense" and 3 <= res.candidate.samples <= 9 + 2 * 9
    assert two < one + 5.0, (one, two)


# ------------------------------------------------- a forbidden library loaded at run time (red team hole 3)


def _fake_library(path: Path, soname: str | None = None) -> Path:
    """A tiny shared library built with the C compiler at ``path`` (one int, the given DT_SONAME if any)."""
    import shutil

    cc = shutil.which("gcc") or shutil.which("cc")
    subprocess.run([cc, "-shared", "-fPIC", *([f"-Wl,-soname,{soname}"] if soname else []), "-x", "c", "-", "-o",
                    str(path)], input="int attnq_fake_symbol;\n", check=True, capture_output=True, text=True)
    return path


def test_a_forbidden_library_loaded_at_run_time_fails_the_call(built: Path, tmp_path: Path) -> None:
    """Session 16's red team: host code that finds libc's dlopen by walking memory (no import, so the symbol
    policy sees nothing) could load cuBLAS or cuDNN from any readable folder. The launcher compares the files
    mapped into its process (/proc/self/maps) with those before the library: a call that finds a cuBLAS, cuDNN
    or CUTLASS library mapped fails `forbidden_call`, with the file named; with the entry guard, its loader audit
    (LD_AUDIT) makes the load fail, or stops the process as a renamed copy is mapped (by its soname). Control: a library of another name
    loads (the probe returns 99, `launch_status`), so the refusal comes from the name, not from a broken dlopen."""
    built_libs = {}
    for name, soname in (("libcublasLt.so.13", "libcublasLt.so.13"), ("libhelper.so.1", "libhelper.so.1"),
                         ("librenamed.so", "libcudnn.so.9")):  # a renamed copy keeps its soname
        path = _fake_library(tmp_path / name, soname)
        built_libs[name], _ = hostkernels.build(built, cheat=7, probe=11, probe_path=str(path))
    # with the guard, its loader audit: a search for the forbidden name finds nothing (the probe's dlopen fails, it
    # computes honestly), and a renamed copy, known by its soname only once mapped, stops the process
    res, _ = _verify(built, lib=built_libs["libcublasLt.so.13"], sandbox="off")
    assert res.correct and res.failure_kind is None, res.message
    with pytest.raises(KernelFatal, match="loaded a cuBLAS, cuDNN or CUTLASS library") as info:
        _verify(built, lib=built_libs["librenamed.so"], sandbox="off")
    assert info.value.kind == "forbidden_call"
    res, _ = _verify(built, lib=built_libs["libcublasLt.so.13"], sandbox="off", guard=False)  # /proc/self/maps
    assert (res.check, res.failure_kind) == ("symbol_policy", "forbidden_call"), res.message
    assert "loaded libcublasLt.so.13 (cuBLAS" in res.message
    res, _ = _verify(built, lib=built_libs["libhelper.so.1"], sandbox="off")
    assert (res.check, res.failure_kind) == ("launch_status", "unsupported") and "99" in res.message


def test_the_dynamic_linker_audit_refuses_forbidden_loads_in_every_namespace(built: Path, tmp_path: Path) -> None:
    """Session 17's red team: `dlmopen` into a new namespace (not in the guard's dl_iterate_phdr list) and a
    dlopen closed again before the call returns (after the call nothing is left to see) got a cuBLAS-named library
    past the run-time check. With the entry guard, the launcher's interpreter runs it as its LD_AUDIT auditor,
    which sees every load in every namespace: a search for the forbidden name finds nothing (dlopen fails) and a
    library mapped without a search (dlmopen) stops the process before its code runs (`forbidden_call`). Without the guard, /proc/self/maps still sees the dlmopen'd library
    (forbidden_call) but not the closed one (the probe returns 99): the audit is what closes that hole."""
    path = _fake_library(tmp_path / "libcublasLt.so.13")
    libs = {probe: hostkernels.build(built, cheat=7, probe=probe, probe_path=str(path))[0] for probe in (12, 13)}
    with pytest.raises(KernelFatal, match="loaded a cuBLAS, cuDNN or CUTLASS library") as info:
        _verify(built, lib=libs[12], sandbox="off")  # dlmopen: stopped as the library is mapped
    assert info.value.kind == "forbidden_call"
    res, _ = _verify(built, lib=libs[13], sandbox="off")  # dlopen: the search finds nothing, the probe is honest
    assert res.correct and res.failure_kind is None, res.message
    res, _ = _verify(built, lib=libs[12], sandbox="off", guard=False)
    assert res.failure_kind == "forbidden_call" and "loaded libcublasLt.so.13" in res.message
    res, _ = _verify(built, lib=libs[13], sandbox="off", guard=False)
    assert (res.check, res.failure_kind) == ("launch_status", "unsupported") and "99" in res.message
