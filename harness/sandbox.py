"""The candidate process's confinement (applied by harness/launcher.py before the library loads).

Three layers, each applied where the kernel offers it, each reported (:class:`SandboxReport`):

* **Landlock** (Linux >= 5.13; raw syscalls through ctypes, the kernel's documented ABI): writes,
  file creation/removal/renames and execution are allowed only beneath the launcher's temp dir (and
  writes to the NVIDIA device files the driver opens); file READS only beneath :func:`read_paths`
  (the temp dir, the library's private copy, the system's libraries, Python's standard library and
  packages (its prefix, the PYTHONPATH directories but the repository), the harness package, the NVIDIA device files, the process's own /proc entry and /proc/driver, /sys):
  not the user's home, the repository, the campaign store, other temp dirs; TCP bind/connect are
  refused (ABI >= 4); signals and abstract unix sockets cannot reach outside the sandbox (ABI >= 6).
  Landlock also stops the process from ptracing or reading the memory of any process outside it.
* **seccomp** (libseccomp through the ``pyseccomp`` binding, or libseccomp's own ``seccomp`` module
  where installed), loaded after the launcher's CUDA set-up (context, IPC, events, a warm-up launch)
  and before the candidate's library: no new threads or processes (clone refused whatever its flags,
  clone3 answers ENOSYS, fork/vfork/execve refused), no timers that deliver signals (setitimer, alarm,
  timer_create) and no new resource limits (a SIGXCPU alarm): nothing of the candidate's can run
  after ``attn_fwd`` returned; no new sockets at all (socket, socketpair), no connect/bind/listen/
  accept, no sendto with an address; no SysV shared memory, message queues or semaphores, no POSIX
  message queues, no kernel keyrings; no io_uring, ptrace, process_vm_readv/writev, unshare, setns,
  bpf, perf_event_open, syslog, setsid/setpgid (it stays in the checker's process group).
* **capabilities**: every capability dropped (bounding, effective, permitted, inheritable) and
  no_new_privs set: root without capabilities cannot ptrace a non-dumpable process (the checker
  makes itself non-dumpable) nor override file permissions.

Where a layer is unavailable (no Landlock in the kernel, e.g. gVisor; libseccomp or the binding
missing) the launcher runs without it and the report carries a warning naming what is not enforced.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import os
from dataclasses import dataclass, field

# Landlock ABI (include/uapi/linux/landlock.h)
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK, FS_MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
FS_REFER, FS_TRUNCATE = 1 << 13, 1 << 14
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 38, 24
#: The calls seccomp refuses with EPERM (a name this libseccomp/arch does not know is skipped).
DENIED_CALLS = (
    # processes and threads (clone itself is refused below; clone3 answers ENOSYS)
    "execve", "execveat", "fork", "vfork",
    # work after return: signal-delivering timers, a CPU-time limit (SIGXCPU)
    "setitimer", "alarm", "timer_create", "timer_settime", "setrlimit",
    # other processes' memory, namespaces, kernel facilities
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "unshare", "setns", "bpf",
    "perf_event_open", "io_uring_setup", "io_uring_enter", "io_uring_register", "syslog",
    "setsid", "setpgid",
    # channels that outlive the process or reach other processes: sockets, SysV and POSIX IPC, keyrings
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    "shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop",
    "semctl", "mq_open", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr", "mq_unlink",
    "add_key", "request_key", "keyctl",
    # watching files another process opens (a channel between the two candidate processes: red team, session 17)
    "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark",
)
#: Calls that may only name the calling process (pid argument 0): setting another process's priority, policy or
#: I/O class is a channel the other one reads back (red team, session 17). (call, index of the pid argument, and
#: for setpriority / ioprio_set the index of ``which`` and its value for "one process": PRIO_PROCESS 0,
#: IOPRIO_WHO_PROCESS 1; with another ``which``, pid 0 names the caller's whole group or user)
SELF_ONLY_CALLS = (("setpriority", 1, (0, 0)), ("sched_setscheduler", 0, None), ("sched_setparam", 0, None),
                   ("sched_setattr", 0, None), ("ioprio_set", 1, (0, 1)))

#: fcntl commands refused (record locks, open-file-description locks, leases: <asm-generic/fcntl.h>,
#: <linux/fcntl.h>): F_GETLK 5, F_SETLK 6, F_SETLKW 7, F_OFD_GETLK 36, F_OFD_SETLK 37, F_OFD_SETLKW 38,
#: F_SETLEASE 1024, F_GETLEASE 1025.
FCNTL_LOCK_CMDS = (5, 6, 7, 36, 37, 38, 1024, 1025)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass
class SandboxReport:
    """What was enforced: Landlock ABI version (None: not applied), seccomp, capabilities dropped, and a
    warning per layer that could not be applied."""

    landlock_abi: int | None = None
    seccomp: str | None = None  # the binding used ("pyseccomp" or "seccomp"), None when not applied
    caps_dropped: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.landlock_abi is not None and self.seccomp is not None and self.caps_dropped


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int | None:
    """The kernel's Landlock ABI version, or None when Landlock is unavailable."""
    r = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(r) if r > 0 else None


def read_paths(extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """What the launcher and the candidate may read once confined (existing paths only): ``extra`` (the
    temp dir, the library's private copy), the system's libraries (/usr, /lib*, /etc/ld.so.*), Python's
    standard library and the interpreter's prefix (site-packages: the CUDA runtime wheel), the package
    directories on PYTHONPATH (:func:`python_path_dirs`: the same packages installed with ``--target``, as
    on the GPU box's /tmp/site), the harness package (lazy imports), the NVIDIA device files and /dev/null, /dev/zero, /dev/urandom, this
    process's /proc entry (/proc/self resolved), /proc/driver, /proc/devices, /proc/meminfo,
    /proc/cpuinfo, /proc/stat, /sys (device topology). Not readable: home directories, the
    repository (but its harness package), the campaign store, /tmp outside the temp dir, /dev/shm,
    other processes' /proc entries."""
    import sys
    import sysconfig

    here = os.path.dirname(os.path.abspath(__file__))
    paths = [*extra, "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache", "/etc/ld.so.conf",
             "/etc/ld.so.conf.d", "/opt/nvidia", "/dev/zero", "/dev/urandom", "/dev/random", "/sys",
             "/proc/driver", "/proc/devices", "/proc/meminfo", "/proc/cpuinfo", "/proc/stat",
             f"/proc/{os.getpid()}", here, *python_path_dirs(), sys.prefix, sys.base_prefix, sys.exec_prefix,
             *(sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")),
             *nvidia_device_paths()]
    import pwd

    too_wide = {"/", "/home", "/root", "/tmp", "/var", "/var/tmp", os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)}
    return sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)} - too_wide)


def python_path_dirs() -> list[str]:
    """The existing directories on PYTHONPATH (resolved), less the repository: an entry that is the
    repository, lies inside it or contains it is left out (the harness package is readable on its own),
    so that a checkout first on PYTHONPATH does not open the repository to the candidate."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.realpath(here))
    out = []
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        p = os.path.realpath(entry) if entry else ""
        if not p or not os.path.isdir(p):
            continue
        if os.path.commonpath([p, repo]) in (p, repo):  # the repository, inside it, or above it
            continue
        out.append(p)
    return out


def _apply_landlock(abi: int, writable: list[str], devices: list[str], readable: list[str]) -> None:
    libc = _libc()
    fs = (FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_READ_DIR | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_CHAR
          | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_BLOCK | FS_MAKE_SYM)
    if abi >= 2:
        fs |= FS_REFER
    if abi >= 3:
        fs |= FS_TRUNCATE
    attr = _RulesetAttr(fs, (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0,
                        (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    rfd = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if rfd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset: " + os.strerror(ctypes.get_errno()))
    try:
        rules = [(p, fs & ~FS_EXECUTE) for p in writable]
        file_rights = FS_WRITE_FILE | FS_READ_FILE | (FS_TRUNCATE if abi >= 3 else 0)
        rules += [(p, file_rights if not os.path.isdir(p) else fs & ~FS_EXECUTE) for p in devices]
        rules += [(p, FS_READ_FILE | (FS_READ_DIR if os.path.isdir(p) else 0)) for p in readable
                  if p not in writable and p not in devices]
        for path, rights in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(rights, fd)
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(rfd), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(rfd), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self: " + os.strerror(ctypes.get_errno()))
    finally:
        os.close(rfd)


def _seccomp_module():
    try:
        import seccomp  # libseccomp's own binding (Debian/Ubuntu python3-seccomp)

        return seccomp, "seccomp"
    except ImportError:
        import pyseccomp  # ctypes binding over libseccomp.so.2, the same API

        return pyseccomp, "pyseccomp"


def _build_seccomp() -> tuple[object, str]:
    """The filter (not loaded yet) and the binding's name. Built before Landlock applies: the binding
    locates libseccomp with ctypes.util.find_library, which runs ldconfig/gcc and writes temp files."""
    sc, name = _seccomp_module()
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    for call in DENIED_CALLS:
        try:
            f.add_rule(eperm, call)
        except (RuntimeError, ValueError, OSError):  # a name unknown to this libseccomp/arch
            pass
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")  # libc falls back to clone (refused: EAGAIN, like a full table)
    f.add_rule(sc.ERRNO(errno.EAGAIN), "clone")  # no thread, no process, whatever the flags
    f.add_rule(eperm, "prlimit64", sc.Arg(2, sc.NE, 0))  # reading a limit stays possible
    f.add_rule(eperm, "sendto", sc.Arg(4, sc.NE, 0))  # only the connected socket the launcher was given
    for call, arg, which in SELF_ONLY_CALLS:
        try:
            f.add_rule(eperm, call, sc.Arg(arg, sc.NE, 0))
            if which is not None:  # compared on all 64 bits: high bits set are refused, never let through
                f.add_rule(eperm, call, sc.Arg(which[0], sc.NE, which[1]))
        except (RuntimeError, ValueError, OSError):
            pass
    f.add_rule(eperm, "preadv2", sc.Arg(5, sc.MASKED_EQ, 8, 8))  # RWF_NOWAIT, alone or with others: the page cache
    # file locks are state the two candidate processes could share through any file both can open (a system
    # library): F_GETLK in one reads what F_SETLK set in the other (red team, session 16). No lock of any kind.
    f.add_rule(eperm, "flock")
    for cmd in FCNTL_LOCK_CMDS:  # the kernel reads cmd as an int: judge the low 32 bits (red team, session 17:
        f.add_rule(eperm, "fcntl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, cmd))  # (1 << 32) | F_SETLK passed EQ)
    return f, name


def _drop_capabilities() -> None:
    libc = _libc()
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # past the last capability this kernel knows

    class _Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class _Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    hdr, data = _Header(0x20080522, 0), (_Data * 2)()  # _LINUX_CAPABILITY_VERSION_3, all sets empty
    if libc.capset(ctypes.byref(hdr), data) != 0:
        raise OSError(ctypes.get_errno(), "capset: " + os.strerror(ctypes.get_errno()))


def nvidia_device_paths() -> list[str]:
    """The NVIDIA device files (and /dev/nvidia-caps) the driver may open after start-up, plus /dev/null."""
    return sorted(set(glob.glob("/dev/nvidia*")) | ({"/dev/null"} if os.path.exists("/dev/null") else set()))


_NO_SECCOMP = ("new threads and processes, timers, sockets and SysV IPC are not blocked (threads alive after a "
               "call are still detected through /proc/self/task)")

#: Sandbox modes, strongest first: the launcher falls back one step when CUDA IPC stops working under a
#: mode (harness/worker.py), and the report says so. "seccomp": no Landlock, capabilities kept.
MODES = ("on", "seccomp", "off")


def apply_sandbox(temp_dir: str, *, mode: str = "on", readable: list[str] | tuple[str, ...] = ()) -> SandboxReport:
    """Confine the calling process. ``mode``: "on" (each layer where available, warnings for the rest),
    "seccomp" (the seccomp filter only) or "off" (nothing; the report says so). ``readable``: paths the
    process must still read besides :func:`read_paths`' defaults (the library's private copy). Never
    raises for a layer the system lacks; raises OSError when a layer that IS available fails half-way
    (the launcher then refuses to load the candidate)."""
    rep = SandboxReport()
    if mode == "off":
        rep.warnings.append("sandbox switched off: the candidate runs with the user's rights")
        return rep
    if mode == "seccomp":
        rep.warnings.append("Landlock and the capability drop left out (CUDA IPC failed under them): files, "
                            "TCP and other processes' memory are not confined by the kernel")
    libc = _libc()
    filt: object | None = None
    try:
        filt, binding = _build_seccomp()
    except ImportError:
        rep.warnings.append(f"no seccomp binding (pip install pyseccomp): {_NO_SECCOMP}")
    except (OSError, RuntimeError) as exc:  # libseccomp.so.2 missing
        rep.warnings.append(f"seccomp unavailable ({exc}): {_NO_SECCOMP}")
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    try:
        if mode == "on":
            _drop_capabilities()
            rep.caps_dropped = True
    except OSError as exc:
        rep.warnings.append(f"capabilities not dropped ({exc})")
    abi = landlock_abi() if mode == "on" else None
    if abi is None and mode == "on":
        rep.warnings.append("Landlock unavailable in this kernel: file reads and writes outside the temp dir and "
                            "TCP are not blocked by the kernel (seccomp still refuses new sockets)")
    elif abi is not None:
        _apply_landlock(abi, [os.path.realpath(temp_dir)], nvidia_device_paths(), read_paths(list(readable)))
        rep.landlock_abi = abi
        if abi < 4:
            rep.warnings.append(f"Landlock ABI {abi} < 4: TCP is refused by seccomp only")
    if filt is not None:
        try:
            filt.load()  # type: ignore[attr-defined]
            rep.seccomp = binding
        except (OSError, RuntimeError) as exc:  # the kernel refused the filter
            rep.warnings.append(f"seccomp filter not loaded ({exc}): {_NO_SECCOMP}")
    return rep
