"""Which preprocessor passes nvcc runs, so the source policy can read every one of them.

nvcc preprocesses a ``.cu`` file twice: once for the device (``__CUDA_ARCH__`` defined, the text that
``nvcc -E`` prints) and once for the host (``__CUDA_ARCH__`` undefined, the text that gcc compiles). Code under
``#ifndef __CUDA_ARCH__`` exists only in the host pass, so a policy that scans ``nvcc -E`` alone misses a
macro-built ``#include <dlfcn.h>`` or a driver entry-point lookup there (session 16's red team). The host pass
is ``nvcc -E`` with the device-only macros undefined; which macros those are depends on the toolkit and the
arch (``__CUDA_ARCH_FEAT_SM90_ALL``, ``__CUDA_ARCH_SPECIFIC__``...), so they are read from ``nvcc --dryrun``:
the macros on the ``-E`` pass's gcc command minus those on the real build's host preprocessing command.

The policy reads those ``-E`` passes before the build; the build preprocesses again. Since session 19 the build keeps
its own preprocessed files (``nvcc --keep``) and :func:`built_text_mismatch` refuses a build whose text differs from
the text scanned: ``#if __has_include("/proc/self/fd/3")`` was false in the ``-E`` passes (output to a pipe) and true
in the build (output to a file), so an ``.incbin "/etc/passwd"`` or a forbidden entry-point call under it was built
and never scanned (red team, session 19).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

from harness.errors import ToolchainError
from harness.procs import build_env
from harness.violations import PolicyViolation

__all__ = ["DEVICE_PASS_RAN", "KEPT_PASSES", "built_text_mismatch", "host_pass_flags", "host_pass_undefs", "owned_predicate",
           "system_prefixes"]

_MARKER_RE = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"')

_MEMO: dict[tuple[str, ...], tuple[str, ...]] = {}


#: A host compiler's file name: gcc, g++, cc, c++, clang, clang++, with a target prefix and a version suffix too
#: (``x86_64-linux-gnu-g++-12``, ``g++-12``: ``NVCC_CCBIN`` where the default gcc is one nvcc does not support).
_HOST_CC_RE = re.compile(r"(?:[A-Za-z0-9_.]+-)*(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(?:-\d+(?:\.\d+)*)?")


def _gcc_commands(dryrun: str) -> list[list[str]]:
    """The host compiler's command lines (argv) in ``nvcc --dryrun`` output (lines ``#$ gcc ...``)."""
    out = []
    for line in dryrun.splitlines():
        if not line.startswith("#$ "):
            continue
        try:
            argv = shlex.split(line[3:])
        except ValueError:
            continue
        if argv and _HOST_CC_RE.fullmatch(os.path.basename(argv[0])):
            out.append(argv)
    return out


def _defined(argv: list[str]) -> set[str]:
    return {a[2:].split("=", 1)[0] for a in argv if a.startswith("-D") and len(a) > 2}


def host_pass_undefs(dryrun_preprocess: str, dryrun_build: str) -> tuple[str, ...]:
    """The macros to undefine on ``nvcc -E`` so that it prints the host pass instead of the device pass.

    Args:
        dryrun_preprocess: stderr of ``nvcc --dryrun -E <flags> x.cu`` (one ``gcc -E`` line, the device pass).
        dryrun_build: stderr of ``nvcc --dryrun <flags> x.cu -o x.so``; its first ``gcc -E`` line without
            ``-D__CUDA_ARCH__`` is the host preprocessing.
    Returns the sorted macro names defined on the first and not on the second (``__CUDA_ARCH__`` among them).
    Raises ToolchainError when either command is missing from the output or ``__CUDA_ARCH__`` is not among them.
    """
    device = [a for a in _gcc_commands(dryrun_preprocess) if "-E" in a]
    host = [a for a in _gcc_commands(dryrun_build) if "-E" in a and "__CUDA_ARCH__" not in _defined(a)]
    if not device or not host:
        raise ToolchainError("cannot tell nvcc's host preprocessing from its device preprocessing in `nvcc --dryrun` "
                             "output: the source policy needs both passes")
    undefs = tuple(sorted(_defined(device[0]) - _defined(host[0])))
    if "__CUDA_ARCH__" not in undefs:
        raise ToolchainError("nvcc --dryrun: the -E pass does not define __CUDA_ARCH__; cannot derive the host pass")
    return undefs


def host_pass_flags(nvcc: str, flags: list[str], cwd: Path) -> list[str]:
    """``-Xcompiler -U<macro>`` options that turn ``nvcc -E <flags>`` into nvcc's host pass (see the module doc).

    Runs ``nvcc --dryrun`` twice on a file name that need not exist (dry runs read nothing); memoized per nvcc
    and flags. Raises ToolchainError when nvcc cannot be run or its dry run cannot be read.
    """
    key = (nvcc, os.environ.get("NVCC_CCBIN", ""), *flags)
    if key not in _MEMO:
        texts = []
        for extra in (["-E", "x.cu"], ["x.cu", "-o", "x.so"]):
            try:
                proc = subprocess.run([nvcc, "--dryrun", *flags, *extra], capture_output=True, text=True, check=False,
                                      stdin=subprocess.DEVNULL, cwd=cwd, timeout=60, env=build_env())
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ToolchainError(f"cannot run `nvcc --dryrun`: {exc}") from None
            if proc.returncode != 0:  # nvcc's own words (an unwritable TMPDIR, a bad NVCC_CCBIN), not a guess
                raise ToolchainError(f"`nvcc --dryrun` failed (exit {proc.returncode}): "
                                     f"{(proc.stderr + proc.stdout).strip()[-600:]}")
            texts.append(proc.stderr + proc.stdout)
        _MEMO[key] = host_pass_undefs(*texts)
    return [f for m in _MEMO[key] for f in ("-Xcompiler", f"-U{m}")]


@functools.lru_cache(maxsize=8)
def system_prefixes(nvcc: str) -> tuple[str, ...]:
    """Folders whose headers belong to the toolkit or the system, not to the candidate."""
    toolkit = os.path.normpath(str(Path(nvcc).resolve().parent.parent))
    return ("/usr/include", "/usr/lib", "/usr/local/include", "/usr/local/cuda", "/opt/nvidia", toolkit)


def owned_predicate(nvcc: str) -> Callable[[str], bool]:
    """True for a file the candidate wrote: not a toolkit or system header (policy.scan_preprocessed)."""
    prefixes = system_prefixes(nvcc)

    def is_owned(path: str) -> bool:
        if path.startswith("<"):
            return False
        p = os.path.normpath(path)
        return not any(p == s or p.startswith(s.rstrip("/") + "/") for s in prefixes)

    return is_owned


#: The build's own preprocessed files that ``nvcc --keep`` leaves, in the policy's order (device pass, host pass):
#: cicc's input and cudafe++'s input; and the file whose presence says nvcc went on to the device pass. nvcc's order
#: is host preprocessing, cudafe++, device preprocessing, cicc (``nvcc --dryrun``): a host error (cudafe++) ends the
#: build before the device pass runs, and only the host pass's file is kept.
KEPT_PASSES = (("the device pass", ".cpp1.ii"), ("the host pass", ".cpp4.ii"))
DEVICE_PASS_RAN = ".cudafe1.cpp"
_BUILT_TEXT = ("the text nvcc preprocessed for the build differs from the text the source policy read (its `nvcc -E` "
               "passes, same flags and files): the preprocessing depends on something that changed between the runs "
               "(`__has_include` of a file that exists in one run only, such as /proc/self/fd/3, which only a "
               "compiler writing its output to a file has open), so the policy's scans did not read what was built")


def built_text_mismatch(keep_dir: Path, stem: str, scanned: list[str], built: bool) -> PolicyViolation | None:
    """A violation when the build's preprocessed text differs from what the policy scanned, else None.

    Args:
        keep_dir: nvcc's ``--keep-dir`` of the build (its ``<stem>.cpp1.ii`` and ``<stem>.cpp4.ii``).
        stem: the candidate's file name without ``.cu``.
        scanned: the ``nvcc -E`` outputs the policy read, in :data:`KEPT_PASSES` order (device, host).
        built: whether nvcc succeeded.
    A kept file that is missing where its pass must have run (the host pass always; the device pass when nvcc
    succeeded or cudafe++'s output exists): the build's preprocessing failed where the policy's passed, and its
    errors may quote a file the policy never let be read; that is a difference too, and so is any other ``.ii``
    file nvcc kept that equals neither text. Called before nvcc's output is shown. The violation names the first line of the
    scanned text that differs (file and line from its markers), never the built text (it may hold a file the policy
    never let be read). Decoded as ``_run_nvcc`` decodes nvcc's output (UTF-8, undecodable bytes replaced).
    """
    def read(path: Path) -> str | None:
        try:
            return path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            return None

    kept = {keep_dir / (stem + suffix) for _, suffix in KEPT_PASSES}
    device_ran = built or (keep_dir / (stem + DEVICE_PASS_RAN)).exists()
    pairs = [(what, read(keep_dir / (stem + suffix)), text, what != KEPT_PASSES[0][0] or device_ran)
             for (what, suffix), text in zip(KEPT_PASSES, scanned)]
    pairs += [("a pass", read(p), None, True) for p in sorted(keep_dir.glob("*.ii")) if p not in kept]
    for what, got, text, needed in pairs:
        if got is None and not needed or got is not None and (got == text or text is None and got in scanned):
            continue
        return PolicyViolation(kind="preprocessed", name=what, reason=_BUILT_TEXT,
                               **_first_difference(text or "", got or ""))
    return None


def _first_difference(scanned: str, built: str) -> dict:
    """``file``/``line`` (from the line markers of ``scanned``) of the first line where ``built`` departs from it."""
    file, line = None, None
    for a, b in zip(scanned.splitlines(), [*built.splitlines(), None]):
        m = _MARKER_RE.match(a)
        if a != b:
            return {"file": file, "line": line}
        if m:
            file, line = m.group(2), int(m.group(1))
        elif line is not None:
            line += 1
    return {"file": file, "line": line}
