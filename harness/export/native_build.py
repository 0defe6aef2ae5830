"""The exported package's native op, built at export time (``attnq export`` without ``--no-native``).

The package's ``native/__init__.py`` (template/native/) is run as a script with this interpreter, so the
library is built against the torch attnq runs with, by the same code the package uses for its just-in-time
build (``torch.utils.cpp_extension``: ninja, the C++ compiler ``$CXX`` or ``c++``, torch's headers, CUDA's
``cuda_runtime_api.h``; host code only). Builds are cached under ``<cache_dir>/native/<key>`` (key: the
sources, the ABI version, torch and its CUDA version, the C++ ABI, CPU architecture, OS, Python version,
compiler and CUDA header directory), so exporting again, or another kernel, reuses it. Measured on this
project's CPU machine (2 cores, torch 2.14.1+cu130, g++ 12; 2026-12-01): 8.0-9.0 s wall per build, the
interpreter's start and torch's import included; 1.5 s on a cache hit.

A build that cannot happen (no compiler, no ninja, a CPU-only torch, a compiler error, past the timeout)
does not fail the export: the package then ships no library and builds it on its first use on a GPU when it
can (``NativeBuild.status`` "unavailable", with the reason).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from harness.logging import get_logger

log = get_logger(__name__)

#: Where the library goes in the package, relative to the package directory (the runtime's native.SHIPPED_FILE).
SHIPPED_FILE = "native/op.so"
#: Seconds one export-time build may take (it takes ~9 s on 2 cores).
NATIVE_BUILD_TIMEOUT_S = 600


class NativeBuild(BaseModel):
    """The native op of an exported package, as ``kernel.json``'s ``native`` entry records it.

    ``status``: "built" (``file``, relative to the package directory, is shipped), "skipped" (``--no-native``)
    or "unavailable" (the build could not happen here: ``reason``). When built: what the running process must
    match for the package to load it (``torch`` version, ``torch_cuda``, ``cxx11_abi``, CPU ``machine``,
    ``system``, ``sources_sha256`` of op.cpp + attn_abi.h), for information ``python`` and ``compiler``;
    ``build_time_s`` (wall seconds, including the interpreter's start) and ``cache_hit`` are not recorded in
    kernel.json.
    """

    status: Literal["built", "skipped", "unavailable"]
    reason: str | None = None
    file: str | None = None
    sha256: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None
    cxx11_abi: bool | None = None
    machine: str | None = None
    system: str | None = None
    sources_sha256: str | None = None
    python: str | None = None
    compiler: str | None = None
    build_time_s: float = 0.0
    cache_hit: bool = False

    def manifest_entry(self) -> dict:
        """The entry for kernel.json (no timing, no cache flag, no empty field)."""
        return self.model_dump(exclude={"build_time_s", "cache_hit"}, exclude_none=True)


def build_native(native_dir: Path, package_dir: Path, cache_dir: Path, abi_version: int, *,
                 timeout_s: float = NATIVE_BUILD_TIMEOUT_S) -> NativeBuild:
    """Build (or take from ``cache_dir``) the native op of the package staged in ``package_dir`` and copy the
    library to ``package_dir / SHIPPED_FILE``.

    Args:
        native_dir: the package's ``native/`` directory (op.cpp, attn_abi.h, __init__.py), already written.
        package_dir: the package directory the library is copied into.
        cache_dir: attnq's build cache root (``<cache_dir>/native`` holds the builds).
        abi_version: the ABI version op.cpp is built for (harness.abi.ABI_VERSION).
        timeout_s: limit of the build subprocess, seconds.
    Returns:
        NativeBuild: "built" with its record, or "unavailable" with the reason (never raises for a failed build).
    """
    t0 = time.perf_counter()
    cmd = [sys.executable, str(native_dir / "__init__.py"), "--cache", str(cache_dir / "native"),
           "--abi-version", str(abi_version)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    except subprocess.TimeoutExpired:
        return _unavailable(f"the build ran past {timeout_s:.0f} s", t0)
    except OSError as exc:
        return _unavailable(f"the builder did not start: {exc}", t0)
    lines = proc.stdout.strip().splitlines()
    try:
        record = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = " | ".join(line.strip() for line in proc.stderr.strip().splitlines()[-3:])
        return _unavailable(f"the builder exited {proc.returncode} without a record: {tail[:600]}", t0)
    if proc.returncode != 0 or "error" in record:
        return _unavailable(str(record.get("error") or f"the builder exited {proc.returncode}"), t0)
    target = package_dir / SHIPPED_FILE
    shutil.copyfile(record["library"], target)
    fields = {k: record.get(k) for k in NativeBuild.model_fields if k not in ("status", "file", "build_time_s")}
    res = NativeBuild(status="built", file=SHIPPED_FILE, **fields, build_time_s=round(time.perf_counter() - t0, 2))
    log.info("native op built", torch=res.torch, cache_hit=res.cache_hit, build_time_s=res.build_time_s)
    return res


def _unavailable(reason: str, t0: float) -> NativeBuild:
    log.warning("native op not built", reason=reason)
    return NativeBuild(status="unavailable", reason=f"not built at export: {reason}",
                       build_time_s=round(time.perf_counter() - t0, 2))
