"""The run-time entry-point guard (harness/native/entry_guard.c): built once per content into the build
cache with the system C compiler, loaded by the launcher before the CUDA runtime and the candidate.

Without a C compiler the guard is missing: :func:`build_entry_guard` returns None and the verdict's
worker log and ``sandbox`` report say so (the static rule in harness/policy.py still applies).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
from pathlib import Path

from harness.logging import get_logger

log = get_logger("attnq.guard")
SOURCE = Path(__file__).resolve().parent / "native" / "entry_guard.c"


def build_entry_guard(cache_dir: Path) -> Path | None:
    """Path of the built guard library (``<cache_dir>/entry_guard-<sha12>.so``), or None when no C
    compiler (``$CC``, ``cc``, ``gcc``) is found or the build fails (logged)."""
    src = SOURCE.read_bytes()
    out = Path(cache_dir) / f"entry_guard-{hashlib.sha256(src).hexdigest()[:12]}.so"
    if out.is_file():
        return out
    cc = next((c for c in (os.environ.get("CC"), "cc", "gcc") if c and shutil.which(c)), None)
    if cc is None:
        log.warning("entry_guard_unavailable", reason="no C compiler (cc/gcc) on PATH")
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        proc = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(SOURCE), "-ldl"],
                              capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("entry_guard_unavailable", reason=str(exc))
        return None
    if proc.returncode != 0:
        log.warning("entry_guard_unavailable", reason=proc.stderr[-500:])
        tmp.unlink(missing_ok=True)
        return None
    os.replace(tmp, out)
    return out
