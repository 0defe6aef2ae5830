"""Source and symbol policy for candidate kernels (what ``compile_kernel`` refuses, and why).

The rule (from the research behind attnq): a candidate is one hand-written .cu file. It may use the
CUDA runtime to *launch* its own kernels on the stream it is given, CUB, and the C/C++ basics; it may
not reach for a finished attention/GEMM library (CUTLASS, CuTe, cuBLAS(Lt), cuDNN, Thrust), and its
host code may not load code, start threads or processes, touch files or sockets, allocate or copy
device memory, or synchronize the device. Three checks enforce it:

1. **Headers** (:func:`scan_source_includes`, :func:`scan_preprocessed`): ``#include`` of a
   forbidden header is refused with the header and the line. The preprocessed output (nvcc ``-E``
   line markers) catches an indirect include through a header the candidate owns; headers the
   toolkit or the system include for themselves (CUB pulls in ``thrust/`` and ``pthread.h``) are not
   the candidate's doing and are not refused.
2. **Symbols** (:func:`check_imports`): every undefined dynamic symbol of the built library
   (``nm -D --undefined-only``) must match :data:`ALLOWED_SYMBOLS` (an allow-list: unknown symbols
   are refused). Versioned names (``memcpy@GLIBC_2.14``) match by base name. Every DT_NEEDED
   library must match :data:`ALLOWED_LIBRARIES`.
   No dynamic relocation may name a symbol the library defines (:func:`scan_interposable`: the dynamic linker
   would bind it to another library's function of that name; the build links with ``-Bsymbolic``).
3. **Instructions** (:func:`scan_host_code`): raw ``syscall``/``sysenter``/``int $0x80`` in the
   host code (inline asm) would bypass the symbol check and is refused; harness/exec_scan.py
   (:func:`scan_executable`) reads every byte of the executable segments: no system call bytes anywhere, displacements
   included (red team, session 21), no writable code, no executable stack, no text relocations.
4. **Names** (harness/source_scans.py, re-exported here: :func:`scan_driver_entry_points`,
   :func:`scan_asm_labels`, :func:`scan_asm_text`): the driver entry points only as a direct call naming a
   ``cuTensorMap*`` function, no asm label binding a declaration to a symbol the policy forbids or controls, and no
   string the assembler would read as a directive that reads a file, builds text or binds names (harness/asm_text.py).

The candidate and its local headers are read once into a snapshot (harness/snapshot.py); the scans and nvcc read
the snapshot, never the user's files again.

The lists below are the reviewable data; docs/compile.md explains each decision.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from harness import source_scans
from harness.errors import ToolchainError
from harness.exec_scan import (  # noqa: F401 - re-exported: their home was this module until session 21
    _disp_span,
    scan_executable,
)
from harness.source_scans import (  # noqa: F401 - re-exported: their home was this module until session 18
    ENTRY_POINT_ALLOWED_RE,
    ENTRY_POINT_FAMILY,
    MARKER_RE,
    entry_point_name_allowed,
    owned_lines,
    scan_asm_text,
    scan_driver_entry_points,
)
from harness.source_text import logical_text, stray_hashes
from harness.violations import ImportedSymbol, PolicyViolation, raise_violations

# --------------------------------------------------------------------------------------------------
# The data
# --------------------------------------------------------------------------------------------------

#: Libraries whose headers are refused: a path component with this name (``cutlass/``, ``cute/``,
#: ``thrust/``) or a file name starting with it (``cublas_v2.h``, ``cublasLt.h``, ``cudnn.h``).
FORBIDDEN_LIBRARY_DIRS: dict[str, str] = {
    "cutlass": "CUTLASS is a finished GEMM/attention library",
    "cute": "CuTe is part of CUTLASS",
    "thrust": "Thrust is a high-level library (allocates and synchronizes)",
}
FORBIDDEN_LIBRARY_PREFIXES: dict[str, str] = {
    "cutlass": "CUTLASS is a finished GEMM/attention library",
    "cublas": "cuBLAS/cuBLASLt is a finished GEMM library",
    "cudnn": "cuDNN is a finished attention library",
}
#: Host headers that only serve calls the symbol policy refuses (loading code, threads, processes,
#: files, sockets, signals).
FORBIDDEN_HOST_HEADERS: dict[str, str] = {
    "dlfcn.h": "loads code at run time (dlopen/dlsym)",
    "pthread.h": "starts threads",
    "thread": "starts threads",
    "future": "starts threads",
    "mutex": "thread synchronization (pthread)",
    "shared_mutex": "thread synchronization (pthread)",
    "condition_variable": "thread synchronization (pthread)",
    "semaphore": "thread synchronization",
    "spawn.h": "starts processes",
    "sys/wait.h": "waits for processes",
    "unistd.h": "raw file/process calls (read, write, fork, exec)",
    "fcntl.h": "opens files",
    "sys/mman.h": "maps memory (mmap)",
    "sys/ioctl.h": "ioctl on devices",
    "sys/syscall.h": "raw system calls",
    "syscall.h": "raw system calls",
    "sys/socket.h": "network sockets",
    "sys/un.h": "unix sockets",
    "netinet/in.h": "network sockets",
    "arpa/inet.h": "network sockets",
    "netdb.h": "network name lookup",
    "signal.h": "signal handlers (could hide faults)",
    "csignal": "signal handlers (could hide faults)",
    "fstream": "opens files",
    "filesystem": "touches the file system",
    "iostream": "host stream I/O (std::cout and its static initializer)",
}

#: DT_NEEDED libraries a candidate may link (fnmatch patterns).
ALLOWED_LIBRARIES: tuple[str, ...] = (
    "libcudart.so*", "libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux*.so*",
)

_MATH = (
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "cbrt", "pow", "hypot", "fabs",
    "ceil", "floor", "round", "lround", "llround", "rint", "lrint", "nearbyint", "trunc", "fmod",
    "remainder", "fmax", "fmin", "fma", "ldexp", "frexp", "modf", "scalbn", "ilogb", "copysign",
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "erf", "erfc",
    "tgamma", "lgamma", "nextafter",
)

#: Imported symbols a candidate may use, by purpose (fnmatch patterns on the base name).
ALLOWED_SYMBOLS: dict[str, tuple[str, ...]] = {
    "CUDA runtime: kernel registration and launch (emitted by nvcc for <<<>>>)": (
        "__cudaRegister*", "__cudaUnregisterFatBinary", "__cudaInitModule", "__cudaGetKernel",
        "__cudaPushCallConfiguration", "__cudaPopCallConfiguration", "__cudaLaunchKernel*",
        "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
        "cudaGetKernel", "cudaGetFuncBySymbol",
    ),
    "CUDA runtime: function/device attributes and occupancy (read-only or per-function)": (
        "cudaFuncSetAttribute", "cudaFuncGetAttributes", "cudaFuncSetCacheConfig", "cudaFuncGetName",
        "cudaDeviceGetAttribute", "cudaGetDevice", "cudaGetDeviceProperties*", "cudaGetDeviceCount",
        "cudaOccupancy*", "cudaDriverGetVersion", "cudaRuntimeGetVersion", "cudaDeviceGetLimit",
    ),
    "CUDA runtime: queries of the GIVEN stream (never create one)": (
        "cudaStreamGetFlags", "cudaStreamIsCapturing", "cudaStreamGetPriority", "cudaStreamGetDevice",
        "cudaStreamGetId", "cudaStreamGetCaptureInfo*",
    ),
    "CUDA runtime: workspace zeroing on the given stream": ("cudaMemsetAsync", "cudaMemset2DAsync"),
    "CUDA runtime: driver entry points (TMA tensor maps via cuTensorMapEncodeTiled; see the risk note)": (
        "cudaGetDriverEntryPoint", "cudaGetDriverEntryPointByVersion",
    ),
    "CUDA runtime: errors": ("cudaGetLastError", "cudaPeekAtLastError", "cudaGetErrorString", "cudaGetErrorName"),
    "libc: memory and strings": (
        "memcpy", "memset", "memmove", "memcmp", "memchr", "strlen", "strcmp", "strncmp", "strchr",
        "__memcpy_chk", "__memset_chk", "__memmove_chk", "__errno_location",
    ),
    "libm: math": tuple(f"{m}{s}" for m in _MATH for s in ("", "f", "l"))
    + tuple(f"__{m}{s}_finite" for m in _MATH for s in ("", "f")),
    "C++ runtime: statics, exceptions, new/delete, RTTI": (
        "__cxa_atexit", "__cxa_finalize", "__cxa_guard_acquire", "__cxa_guard_release", "__cxa_guard_abort",
        "__cxa_begin_catch", "__cxa_end_catch", "__cxa_rethrow", "__cxa_allocate_exception",
        "__cxa_free_exception", "__cxa_throw", "__cxa_pure_virtual", "__cxa_deleted_virtual",
        "__cxa_throw_bad_array_new_length", "__cxa_bad_cast", "__cxa_bad_typeid",
        "__gxx_personality_v0", "_Unwind_Resume", "_Znwm*", "_Znam*", "_ZdlPv*", "_ZdaPv*",
        "_ZSt*__throw_*", "_ZTVN10__cxxabiv1*", "_ZTI*", "_ZTS*", "_ZNSt9exceptionD*", "_ZNKSt9exception4whatEv",
        "_ZNSt9bad_allocD*", "_ZSt9terminatev",
        "_ZNSt8ios_base4InitC1Ev", "_ZNSt8ios_base4InitD1Ev",  # <iostream>'s static init (CUB pulls it in)
        "__tls_get_addr", "__dso_handle",
    ),
    "toolchain: weak hooks in every shared library": (
        "_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable", "__gmon_start__",
    ),
    "process end: abort/assert/exit (a crash is a FAULT the verifier survives, not a compile error; nvcc itself "
    "emits an `exit` stub in host code for every non-inline __device__ function)": (
        "abort", "__assert_fail", "__stack_chk_fail", "exit",
    ),
}

#: Refused with a specific reason (checked before the allow-list; anything else unlisted is refused
#: as "not in the allow-list").
REFUSED_SYMBOLS: tuple[tuple[str, str], ...] = (
    ("dl*", "loads code at run time"),
    ("__libc_dl*", "loads code at run time"),
    ("exec*", "runs another program"), ("fork", "starts a process"), ("vfork", "starts a process"),
    ("clone*", "starts a process/thread"), ("system", "runs a shell command"),
    ("popen", "runs a shell command"), ("posix_spawn*", "starts a process"),
    ("pthread_*", "threads"), ("_ZNSt6thread*", "std::thread"), ("thrd_*", "threads"),
    ("_exit", "ends the process"), ("_Exit", "ends the process"), ("quick_exit", "ends the process"),
    ("open*", "file access"), ("fopen*", "file access"), ("freopen*", "file access"), ("creat*", "file access"),
    ("read*", "file access"), ("write*", "file access"), ("pread*", "file access"), ("pwrite*", "file access"),
    ("fread", "file access"), ("fwrite", "file access"), ("mmap*", "maps memory"), ("mprotect", "changes page protection"),
    ("ioctl", "device control"), ("syscall", "raw system call"), ("unlink*", "file access"),
    ("socket*", "network"), ("connect", "network"), ("bind", "network"), ("listen", "network"),
    ("accept*", "network"), ("send*", "network"), ("recv*", "network"), ("getaddrinfo", "network"),
    ("*printf*", "printing from host code (stdout belongs to the harness)"), ("puts", "printing"),
    ("fputs", "printing"), ("putchar", "printing"), ("_ZSt4cout", "printing"), ("_ZSt4cerr", "printing"),
    ("getenv", "reads the environment (behaviour could differ under the harness)"),
    ("secure_getenv", "reads the environment"),
    ("signal", "installs a signal handler (could hide faults)"), ("sigaction", "installs a signal handler"),
    ("cudaMalloc*", "the kernel never allocates device memory (ask for a workspace instead)"),
    ("cudaFree*", "the kernel never frees device memory"),
    ("cudaMemcpy*", "the kernel never copies memory through the runtime"),
    ("cudaMemset", "synchronous memset (use cudaMemsetAsync on the given stream)"),
    ("cudaHostAlloc", "allocates memory"), ("cudaMallocHost", "allocates memory"),
    ("cudaDeviceSynchronize", "synchronizes the device"), ("cudaStreamSynchronize", "synchronizes"),
    ("cudaEventSynchronize", "synchronizes"), ("cudaStreamCreate*", "creates streams (use the given one)"),
    ("cudaEventCreate*", "creates events"), ("cudaSetDevice*", "switches devices"),
    ("cudaDeviceReset", "resets the device"), ("cudaDeviceSetLimit", "changes device limits"),
    ("cudaGraph*", "builds graphs"), ("cudaStreamBeginCapture*", "captures the stream"),
    ("cu[A-Z]*", "driver API called directly"),
)



@functools.lru_cache(maxsize=1)
def policy_fingerprint() -> str:
    """sha256 of all the lists above and of the code that applies them (this module, harness/source_text.py,
    harness/source_scans.py, harness/asm_text.py, harness/snapshot.py, harness/nvcc_passes.py, harness/compile.py,
    harness/build_cache.py, harness/exec_scan.py):
    part of the build cache key, so editing the policy, or how it is scanned, re-checks every candidate (a cache entry
    built under an older scan is not reused)."""
    import hashlib
    import json

    data = [FORBIDDEN_LIBRARY_DIRS, FORBIDDEN_LIBRARY_PREFIXES, FORBIDDEN_HOST_HEADERS, ALLOWED_LIBRARIES,
            ALLOWED_SYMBOLS, REFUSED_SYMBOLS]
    h = hashlib.sha256(json.dumps(data, sort_keys=True).encode())
    here = Path(__file__).resolve().parent
    for name in ("policy.py", "source_text.py", "source_scans.py", "asm_text.py", "snapshot.py", "nvcc_passes.py",
                 "compile.py", "build_cache.py", "exec_scan.py"):
        h.update(hashlib.sha256((here / name).read_bytes()).digest())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------------
# Headers
# --------------------------------------------------------------------------------------------------

#: ``#include``, and gcc's ``#include_next`` and ``#import`` (an include by another name: session 19's red team had
#: ``#include_next "/etc/hostname"`` read by nvcc's -E pass before any check refused it).
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*(?:include(?:_next)?|import)[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)


def forbidden_header_reason(name: str) -> str | None:
    """Why the header spelled (or located at) ``name`` is refused, or None when it is allowed.

    ``name`` is an include spelling (``cublas_v2.h``, ``cutlass/gemm/gemm.h``) or a resolved path.
    """
    norm = re.sub(r"/+", "/", name.strip().replace("\\", "/"))
    parts = [p for p in norm.split("/") if p not in ("", ".")]
    if not parts:
        return None
    for d in parts[:-1]:
        if d in FORBIDDEN_LIBRARY_DIRS:
            return FORBIDDEN_LIBRARY_DIRS[d]
    base = parts[-1].lower()
    for prefix, reason in FORBIDDEN_LIBRARY_PREFIXES.items():
        if base.startswith(prefix):
            return reason
    joined = "/".join(parts)
    for header, reason in FORBIDDEN_HOST_HEADERS.items():
        if joined == header or joined.endswith("/" + header):
            return reason
    return None


def forbidden_library_reason(path: str) -> str | None:
    """Why a shared library found mapped into a candidate's process at run time is refused, or None.

    ``path`` is a file path from ``/proc/self/maps`` (``/usr/lib/x86_64-linux-gnu/libcublasLt.so.13``); the file
    name without ``lib`` is judged like a header name (:data:`FORBIDDEN_LIBRARY_PREFIXES`: cuBLAS, cuDNN, CUTLASS)
    and its folders by :data:`FORBIDDEN_LIBRARY_DIRS`. Only shared objects (``.so`` in the name) are judged.
    """
    base = os.path.basename(path)
    if ".so" not in base:
        return None
    stem = base.removeprefix("lib")
    return forbidden_header_reason(os.path.join(os.path.dirname(path), stem))


def list_includes(text: str) -> list[tuple[int, str, str]]:
    """``(line, delimiter, spelled name)`` for every ``#include`` outside comments (1-based physical lines), read as
    the preprocessor reads it: line splices joined, ``%:`` as ``#`` (harness/source_text.py)."""
    kept, lines, _ = logical_text(text)
    return _includes(kept, lines)


def _includes(kept: str, lines: list[int]) -> list[tuple[int, str, str]]:
    """:func:`list_includes` on a :func:`logical_text` already made."""
    return [(lines[kept.count("\n", 0, m.start())], m.group(1), m.group(2).strip()) for m in _INCLUDE_RE.finditer(kept)]


#: ``#line N "file"``, a GNU line marker ``# N "file" 3`` and the system-header pragmas: in the candidate's own
#: files they would make its lines look like a toolkit or system header's to :func:`scan_preprocessed`, whose
#: line markers decide what the candidate owns (a red team, session 16: ``<dlfcn.h>`` passed that way).
_DISOWN_RE = re.compile(r'^[ \t]*#[ \t]*(?:line\b|\d+[ \t]+")|\bsystem_header\b', re.MULTILINE)
_DISOWN_REASON = ("line markers (#line, # N \"file\") and system_header pragmas are not allowed in the candidate's "
                  "own files: the policy reads the preprocessor's line markers to tell the candidate's code from the "
                  "toolkit's")
_STRAY_HASH_REASON = ("a '#' outside a directive and not a macro operator (## or # before a parameter): a macro that "
                      "carries a '#' into the preprocessed text can make a directive the policy never reads")
_INCLUDE_OUTSIDE = ("includes a file outside the candidate's folder and kernels/ (the compiler would read and may "
                    "echo it): keep the candidate's headers beside it")


def _include_outside(name: str, folder: str, roots: tuple[str, ...]) -> bool:
    """Whether an include spelled ``name`` (in a file of ``folder``) names a file outside ``roots`` by an absolute
    path or by ``..`` (resolved from the including folder and from each root, as the compiler searches)."""
    norm = name.strip().replace("\\", "/")
    if norm.startswith(("/", "~")):
        bases = [""]
    elif ".." in norm.split("/"):
        bases = [folder, *roots]
    else:
        return False
    return not any(_under(os.path.normpath(os.path.join(b, os.path.expanduser(norm))), roots) for b in bases)


def scan_source_includes(text: str, file: str, roots: tuple[str, ...] = ()) -> list[PolicyViolation]:
    """Forbidden ``#include`` lines of one source text (raw scan, comments ignored, before the preprocessor reads
    anything): forbidden headers; with ``roots`` (the folders the candidate may include from) an include of a file
    outside them by an absolute path or ``..`` (``#include "/etc/passwd"``, ``"/dev/stdin"``: the compiler would
    read it and may echo it in a diagnostic); and line markers or system_header pragmas (:data:`_DISOWN_RE`)."""
    out = []
    folder = os.path.dirname(os.path.abspath(file))
    kept, lines, blank = logical_text(text)
    for line, _, name in _includes(kept, lines):
        reason = forbidden_header_reason(name)
        if not reason and roots and _include_outside(name, folder, roots):
            reason = _INCLUDE_OUTSIDE
        if reason:
            out.append(PolicyViolation(kind="header", name=name, reason=reason, file=file, line=line))
    for m in _DISOWN_RE.finditer(kept):
        out.append(PolicyViolation(kind="directive", name=m.group(0).strip(), reason=_DISOWN_REASON, file=file,
                                   line=lines[kept.count("\n", 0, m.start())]))
    for line in stray_hashes(blank, lines):
        out.append(PolicyViolation(kind="directive", name="#", reason=_STRAY_HASH_REASON, file=file, line=line))
    return out


def _under(path: str, roots: tuple[str, ...]) -> bool:
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


_OUTSIDE_REASON = ("a header outside the candidate's folder and kernels/ (and not a toolkit or system header): keep "
                   "the candidate's own headers next to it")
#: A line of a compiler diagnostic that starts with an absolute path (``path:line...``, also after gcc's ``In file
#: included from``); the path ends at the first ``:<digits>`` after which it names an existing file (a folder may be
#: called ``run-12:30``).
_DIAG_LINE_RE = re.compile(r'^(?:In file included from|\s+from)?\s*(/.*)$', re.MULTILINE)
_LINE_NO_RE = re.compile(r':\d+')


def _diagnostic_files(output: str) -> list[str]:
    """The existing files that the diagnostics in ``output`` name at the start of a line, in order, each once."""
    found: dict[str, None] = {}
    for m in _DIAG_LINE_RE.finditer(output):
        rest = m.group(1)
        for c in _LINE_NO_RE.finditer(rest):
            if os.path.isfile(rest[:c.start()]):
                found[rest[:c.start()]] = None
                break
    return list(found)


def scan_failed_pass(output: str, is_owned: Callable[[str], bool], roots: tuple[str, ...]) -> list[PolicyViolation]:
    """The files outside ``roots`` that a FAILED ``-E`` pass names in its diagnostics (``output``: its stderr and
    stdout), as :func:`scan_preprocessed` would refuse them had the pass succeeded: judged before any diagnostic is
    shown, because gcc quotes the offending lines of the file it stopped in (red team, session 24: a macro-made
    ``#include "/home/me/secret.txt"`` whose first line starts with ``#`` came back in the CompileError's log).
    ``is_owned`` and ``roots`` as for :func:`scan_preprocessed`; the violations name the file, never its text."""
    real_roots = tuple(os.path.realpath(r) for r in roots)
    out: list[PolicyViolation] = []
    for fname in _diagnostic_files(output):
        if is_owned(fname) and not _under(fname, real_roots):
            out.append(PolicyViolation(kind="header", name=fname, reason=_OUTSIDE_REASON))
    return out


def scan_preprocessed(text: str, is_owned: Callable[[str], bool],
                      roots: tuple[str, ...] = ()) -> list[PolicyViolation]:
    """Forbidden headers entered directly from a candidate-owned file, from ``-E`` line markers.

    Args:
        text: nvcc/gcc ``-E`` output with ``# N "file" flags`` markers.
        is_owned: True for a file the candidate wrote (its .cu, its own headers); headers of the
            toolkit and the system are not owned, so what they include for themselves passes.
        roots: when given, the folders a candidate's own headers must lie in (its folder, kernels/):
            a file outside them and outside the toolkit and the system (``#include "/etc/passwd"``,
            ``"../../secret.h"``, through a macro too) is refused, so compiler diagnostics never echo
            the text of a file the candidate may not read.
    Returns the violations with the includer's file and the ``#include`` line.
    """
    real_roots = tuple(os.path.realpath(r) for r in roots)
    stack: list[list] = [["", 1]]  # [file, next line]
    out: list[PolicyViolation] = []
    seen: set[tuple[str, str]] = set()
    for raw in text.splitlines():
        m = MARKER_RE.match(raw) if raw.startswith("# ") else None
        if not m:
            cur = stack[-1]
            if cur[0] and "system_header" in raw and raw.lstrip().startswith("#") and is_owned(cur[0]) \
                    and ("pragma", cur[0]) not in seen:  # a _Pragma built by token pasting (the raw scan cannot see it)
                seen.add(("pragma", cur[0]))
                out.append(PolicyViolation(kind="directive", name="system_header", reason=_DISOWN_REASON,
                                           file=cur[0], line=cur[1]))
            cur[1] += 1
            continue
        num, fname, flags = int(m.group(1)), m.group(2), m.group(3).split()
        if "1" in flags:
            parent = stack[-1]
            if real_roots and is_owned(fname) and not _under(fname, real_roots) and ("outside", fname) not in seen:
                seen.add(("outside", fname))
                out.append(PolicyViolation(
                    kind="header", name=fname, file=parent[0] or None, line=parent[1] if parent[0] else None,
                    reason=_OUTSIDE_REASON))
            if parent[0] and is_owned(parent[0]):  # by its path: a system flag on the candidate's file is not trusted
                reason = forbidden_header_reason(fname)
                if reason and (parent[0], fname) not in seen:
                    seen.add((parent[0], fname))
                    out.append(PolicyViolation(kind="header", name=fname, reason=reason + " (included indirectly)",
                                               file=parent[0], line=parent[1]))
            stack.append([fname, num])
        elif "2" in flags:
            while len(stack) > 1 and stack[-1][0] != fname:
                stack.pop()
            stack[-1][1] = num
        else:
            stack[-1] = [fname, num]
    return out


# --------------------------------------------------------------------------------------------------
# Symbols and libraries
# --------------------------------------------------------------------------------------------------


def _tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise ToolchainError(f"`{name}` (binutils) is not on PATH; it is needed for the symbol policy and ABI check")
    return path


def run_tool(args: list[str], timeout_s: float = 60.0) -> str:
    """Run a binutils command, return stdout. Raises ToolchainError when it is missing or fails."""
    exe = _tool(args[0])
    try:
        proc = subprocess.run([exe, *args[1:]], capture_output=True, text=True, encoding="utf-8", errors="replace",
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"`{' '.join(args)}` failed: {exc}") from None
    if proc.returncode != 0:
        raise ToolchainError(f"`{' '.join(args)}` failed: {proc.stderr.strip()[:500]}")
    return proc.stdout


def parse_nm_undefined(text: str) -> list[ImportedSymbol]:
    """Parse ``nm -D --undefined-only`` output (``U name@VERSION`` / ``w name``)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^\s*([UwWvV])\s+(\S+)\s*$", line)
        if m:
            base, _, version = m.group(2).replace("@@", "@").partition("@")
            out.append(ImportedSymbol(name=base, version=version or None, weak=m.group(1) in "wWvV"))
    return out


def parse_nm_defined(text: str) -> dict[str, str]:
    """Parse ``nm -D --defined-only`` output into ``{base name: type letter}``."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\s*[0-9a-fA-F]*\s+([A-Za-z])\s+(\S+)\s*$", line)
        if m:
            out[m.group(2).split("@")[0]] = m.group(1)
    return out


def parse_needed(text: str) -> list[str]:
    """DT_NEEDED entries from ``readelf -d`` (or ``objdump -p``) output."""
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", text) or re.findall(
        r"^\s*NEEDED\s+(\S+)", text, re.MULTILINE)


def symbol_decision(name: str) -> tuple[bool, str]:
    """``(allowed, reason)`` for one base symbol name: refused list first, then the allow-list."""
    for pattern, reason in REFUSED_SYMBOLS:
        if fnmatch.fnmatchcase(name, pattern):
            return False, reason
    for purpose, patterns in ALLOWED_SYMBOLS.items():
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return True, purpose
    return False, "not in the allow-list of imported symbols (see docs/compile.md)"


def check_imports(symbols: Iterable[ImportedSymbol], needed: Iterable[str]) -> list[PolicyViolation]:
    """Violations among imported symbols and DT_NEEDED libraries (allow-list; unknown = refused)."""
    out = []
    for lib in needed:
        if not any(fnmatch.fnmatchcase(lib, p) for p in ALLOWED_LIBRARIES):
            out.append(PolicyViolation(kind="library", name=lib,
                                       reason=f"only {', '.join(ALLOWED_LIBRARIES)} may be linked"))
    for sym in symbols:
        ok, reason = symbol_decision(sym.name)
        if not ok:
            out.append(PolicyViolation(kind="symbol", name=sym.name, reason=reason))
    return out


_SYSCALL_RE = re.compile(r"^\s*[0-9a-f]+:\s.*?\b(syscall|sysenter|int\s+\$0x80)\b", re.MULTILINE)


def asm_label_reason(name: str) -> str | None:
    """Why an asm label may not name the symbol ``name`` (a plain symbol name, version cut), or None: the driver
    entry points (allowed only as direct calls the entry-point rule judges), a refused import
    (:data:`REFUSED_SYMBOLS`), or a forbidden library's function (:data:`FORBIDDEN_LIBRARY_PREFIXES` for C names; a
    C++ name mangled in a namespace of :data:`FORBIDDEN_LIBRARY_DIRS`)."""
    if name.startswith(ENTRY_POINT_FAMILY):
        return "the driver entry points are allowed only as a direct call naming a cuTensorMap* function"
    for pattern, reason in REFUSED_SYMBOLS:
        if fnmatch.fnmatchcase(name, pattern):
            return reason
    for prefix, reason in FORBIDDEN_LIBRARY_PREFIXES.items():
        if name.lower().startswith(prefix):
            return reason
    m = re.match(r"_Z(?:N[rVKRO]*)?(\d+)", name)
    if m and (space := name[m.end():m.end() + int(m.group(1))]) in FORBIDDEN_LIBRARY_DIRS:
        return FORBIDDEN_LIBRARY_DIRS[space]
    return None


def scan_asm_labels(preprocessed: str, is_owned: Callable[[str], bool]) -> list[PolicyViolation]:
    """Refused asm labels in the candidate's own code (harness/source_scans.py), judged by :func:`asm_label_reason`."""
    return source_scans.scan_asm_labels(preprocessed, is_owned, asm_label_reason)


def scan_host_code(objdump_text: str) -> list[PolicyViolation]:
    """Raw system-call instructions in ``objdump -d`` output of the host code."""
    found = sorted({re.sub(r"\s+", " ", m.group(1)) for m in _SYSCALL_RE.finditer(objdump_text)})
    return [PolicyViolation(kind="instruction", name=f, reason="a raw system call bypasses the symbol policy")
            for f in found]


#: A dynamic relocation as ``readelf -rW -D`` prints it: offset, info, type, the symbol's value, its name (versioned),
#: the addend. Relocations without a symbol (``R_X86_64_RELATIVE``) have no value column and do not match.
_RELOC_RE = re.compile(r"^[ \t]*[0-9a-f]+[ \t]+[0-9a-f]+[ \t]+(R_\w+)[ \t]+([0-9a-f]+)[ \t]+(.+?)[ \t]+[+-][ \t]+"
                       r"[0-9a-f]+[ \t]*$",
                       re.MULTILINE)
_INTERPOSABLE = ("the library defines this symbol and its code refers to it through the dynamic linker, which binds "
                 "the reference to the first library of the process that defines the name (libc's `open`, `dlopen`, "
                 "...) instead of this one: a call of any function the allow-list refuses, with nothing imported; "
                 "build with nvcc_flags() (-Xlinker -Bsymbolic binds such references inside the library)")


def scan_interposable(reloc_text: str, defined: dict[str, str], symbolic: bool = True) -> list[PolicyViolation]:
    """Dynamic relocations (``readelf -rW -D``: what the dynamic linker reads) that name a symbol the library itself
    defines (``defined``: :func:`parse_nm_defined`; a nonzero symbol value counts too). Without ``-Bsymbolic`` every
    call of a default-visibility function goes through such a relocation, and the dynamic linker binds it to the
    first definition in the process's global scope: a candidate that defines ``extern "C" int open(...)`` as a stub
    and calls it imports nothing (``nm --undefined-only`` is empty) and calls libc's ``open`` at run time (red team,
    session 19). STB_GNU_UNIQUE objects (``u``: C++ inline statics, which ``-Bsymbolic`` leaves to the dynamic
    linker) pass only in a ``symbolic`` library (DT_SYMBOLIC: the dynamic linker searches the library itself first, so
    a unique ``open`` defined in assembler text binds to itself, not to libc's; measured)."""
    out, seen = [], set()
    for m in _RELOC_RE.finditer(reloc_text):
        base = m.group(3).split("@")[0]
        if (symbolic and defined.get(base) == "u") or not (base in defined or int(m.group(2), 16)) or base in seen:
            continue
        seen.add(base)
        out.append(PolicyViolation(kind="symbol", name=base, reason=_INTERPOSABLE))
    return out


def library_imports(library: Path, dynamic: str | None = None) -> tuple[list[ImportedSymbol], list[str]]:
    """``(undefined dynamic symbols, DT_NEEDED)`` of a built library (runs nm, and readelf unless ``dynamic``, its
    ``readelf -d`` text, is given)."""
    syms = parse_nm_undefined(run_tool(["nm", "-D", "--undefined-only", str(library)]))
    needed = parse_needed(dynamic if dynamic is not None else run_tool(["readelf", "-d", str(library)]))
    return syms, needed


def check_library(library: Path) -> list[ImportedSymbol]:
    """Apply the symbol, library and instruction policy to a built library.

    Returns the imported symbols. Raises PolicyError naming the first refused item (all in
    ``details["violations"]``), ToolchainError when nm/readelf/objdump are missing.
    """
    dynamic = run_tool(["readelf", "-d", str(library)])  # DT_NEEDED and DT_SYMBOLIC, one read
    syms, needed = library_imports(library, dynamic)
    violations = check_imports(syms, needed)
    symbolic = re.search(r"\(SYMBOLIC\)|\(FLAGS\).*\bSYMBOLIC\b", dynamic) is not None
    violations += scan_interposable(run_tool(["readelf", "-rW", "-D", str(library)]),
                                    parse_nm_defined(run_tool(["nm", "-D", "--defined-only", str(library)])), symbolic)
    violations += scan_host_code(run_tool(["objdump", "-d", "--no-show-raw-insn", str(library)]))
    violations += scan_executable(library, dynamic)
    raise_violations(violations)
    return syms
