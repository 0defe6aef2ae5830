"""The build cache directory's hygiene and the paths nvcc can take (used by harness.compile).

- :func:`sweep_stale_builds`: a build writes into ``<cache>/.tmp-<key>-<pid>-<hex>/`` and renames it into
  place when done; a process killed mid-build (kill -9) leaves its temp dir behind, and the next build
  removes it.
- :func:`check_nvcc_path`: nvcc runs its stages through ``sh -c`` with each path in double quotes, so a
  path holding one of :data:`NVCC_UNSAFE_PATH_CHARS` (or a file name holding a comma) fails deep inside nvcc;
  it is refused up front, by name.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from harness.errors import InputError
from harness.logging import get_logger

log = get_logger(__name__)

#: Longest a build may run (seconds) before its temp dir counts as stale even if its pid runs (a reused pid):
#: twice harness.compile.NVCC_TIMEOUT_S.
STALE_AFTER_S = 600.0


#: Characters nvcc cannot take in a path: it runs its stages through ``sh -c`` with each path inside double
#: quotes, so ``" $ ` \\`` end or escape the quoting ("Syntax error: Unterminated quoted string"); and the
#: preprocessor's ``# line "file"`` markers cannot hold a control character (a newline ends the marker:
#: '"tmpxft_..." is not a valid filename').
NVCC_UNSAFE_PATH_CHARS = '"$`\\' + "".join(map(chr, range(1, 32))) + "\x7f"
#: Characters nvcc cannot take in the source file's own name (directories may hold them): nvcc names its
#: intermediate files after it and hands them to fatbinary as comma-separated ``keyword=value`` lists
#: (``--image3=kind=elf,sm=90a,file=NAME.cubin``), so a comma in the name ends the list early ("'...cubin'
#: is not in 'keyword=value' format").
NVCC_UNSAFE_NAME_CHARS = ","


def nvcc_unsafe_chars(path: Path, is_file: bool = True) -> list[str]:
    """The characters of ``path`` nvcc cannot build with, sorted: :data:`NVCC_UNSAFE_PATH_CHARS` anywhere and,
    for a source file (``is_file``), :data:`NVCC_UNSAFE_NAME_CHARS` in its name."""
    return sorted({ch for ch in str(path) if ch in NVCC_UNSAFE_PATH_CHARS}
                  | ({ch for ch in path.name if ch in NVCC_UNSAFE_NAME_CHARS} if is_file else set()))


def check_nvcc_path(path: Path, what: str, is_file: bool = True) -> None:
    """InputError naming the character when ``path`` (a source file, or a directory when not ``is_file``)
    holds one nvcc cannot handle (:func:`nvcc_unsafe_chars`)."""
    bad = nvcc_unsafe_chars(path, is_file)
    if bad:
        raise InputError(f"{what} {path}: nvcc cannot build a path with {' or '.join(map(repr, bad))} in it "
                         "(it passes paths through a shell and file names through comma-separated lists); rename it")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - someone else's process
        return True
    return True


def sweep_stale_builds(cache_dir: Path, *, max_age_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove build temp dirs (``.tmp-<key>-<pid>-<hex>``) left by a process that died mid-build (kill -9).

    A temp dir is stale when its pid no longer runs, or when it is older than ``max_age_s`` (a reused
    pid); a live build's dir is never touched. Returns the removed paths.
    """
    removed = []
    now = time.time()
    for d in cache_dir.glob(".tmp-*"):
        parts = d.name.split("-")
        try:
            pid = int(parts[2])
            age_s = now - d.stat().st_mtime
        except (IndexError, ValueError, OSError):
            continue
        if pid == os.getpid() and age_s < max_age_s:
            continue
        if not _pid_alive(pid) or age_s > max_age_s:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    if removed:
        log.info("stale_builds_removed", count=len(removed), cache_dir=str(cache_dir))
    return removed
