"""The candidate process's confinement (applied by harness/launcher.py before the library loads).

Three layers, each applied where the kernel offers it, each reported (:class:`SandboxReport`):

* **Landlock** (Linux >= 5.13; raw syscalls through ctypes, the kernel's documented ABI): writes,
  file creation/removal/renames and execution are allowed only beneath the launcher's temp dir (and
  writes to the NVIDIA device files the driver opens); TCP bind/connect are refused (ABI >= 4);
  signals and abstract unix sockets cannot reach outside the sandbox (ABI >= 6). Landlock also
  stops the process from ptracing or reading the memory of any process outside it (the checker).
* **seccomp** (libseccomp through the ``pyseccomp`` binding, or libseccomp's own ``seccomp`` module
  where installed): no execve/execveat, no fork/vfork, no clone without CLONE_THREAD (threads stay
  possible; clone3 answers ENOSYS so libc falls back to clone), no socket other than AF_UNIX and no
  connect/bind/listen/accept at all, no io_uring, ptrace, process_vm_readv/writev, unshare, setns,
  bpf, perf_event_open, setsid/setpgid (it stays in the checker's process group).
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
_CLONE_THREAD = 0x00010000
_AF_UNIX = 1


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


def _apply_landlock(abi: int, writable: list[str], devices: list[str]) -> None:
    libc = _libc()
    fs = (FS_EXECUTE | FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_CHAR | FS_MAKE_DIR | FS_MAKE_REG
          | FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_BLOCK | FS_MAKE_SYM)
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
        file_rights = FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0)
        rules += [(p, file_rights if not os.path.isdir(p) else fs & ~FS_EXECUTE) for p in devices]
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
    for call in ("execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev",
                 "connect", "bind", "listen", "accept", "accept4", "io_uring_setup", "unshare", "setns",
                 "bpf", "perf_event_open", "pidfd_getfd", "setsid", "setpgid"):
        try:
            f.add_rule(eperm, call)
        except (RuntimeError, ValueError, OSError):  # a name unknown to this libseccomp/arch
            pass
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")  # libc falls back to clone, where flags can be checked
    f.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, _CLONE_THREAD, 0))
    f.add_rule(eperm, "socket", sc.Arg(0, sc.NE, _AF_UNIX))
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


#: Sandbox modes, strongest first: the launcher falls back one step when CUDA IPC stops working under a
#: mode (harness/worker.py), and the report says so. "seccomp": no Landlock, capabilities kept.
MODES = ("on", "seccomp", "off")


def apply_sandbox(temp_dir: str, *, mode: str = "on") -> SandboxReport:
    """Confine the calling process (and the threads it starts later). ``mode``: "on" (each layer where
    available, warnings for the rest), "seccomp" (the seccomp filter only) or "off" (nothing; the report
    says so). Never raises for a layer the system lacks; raises OSError when a layer that IS available
    fails half-way (the launcher then refuses to load the candidate)."""
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
        rep.warnings.append("no seccomp binding (pip install pyseccomp): exec, fork and sockets are not blocked")
    except (OSError, RuntimeError) as exc:  # libseccomp.so.2 missing
        rep.warnings.append(f"seccomp unavailable ({exc}): exec, fork and sockets are not blocked")
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
        rep.warnings.append("Landlock unavailable in this kernel: file writes outside the temp dir and TCP are "
                            "not blocked by the kernel (seccomp still refuses sockets other than AF_UNIX)")
    elif abi is not None:
        _apply_landlock(abi, [temp_dir], nvidia_device_paths())
        rep.landlock_abi = abi
        if abi < 4:
            rep.warnings.append(f"Landlock ABI {abi} < 4: TCP is refused by seccomp only")
    if filt is not None:
        try:
            filt.load()  # type: ignore[attr-defined]
            rep.seccomp = binding
        except (OSError, RuntimeError) as exc:  # the kernel refused the filter
            rep.warnings.append(f"seccomp filter not loaded ({exc}): exec, fork and sockets are not blocked")
    return rep
