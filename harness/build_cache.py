"""The build record of a candidate and the content-addressed cache that holds it.

A build lives in ``<cache_dir>/<key>/``: ``kernel.so`` and ``facts.json`` (a :class:`CompileResult`), written by
:func:`harness.compile.compile_kernel` through a temp dir and one ``rename``, so a concurrent reader never sees half an
entry. The key (:func:`cache_key`) is a sha256 over everything the build depends on; :func:`from_cache` re-hashes the
library on every hit and ignores an entry whose bytes changed after it was checked. docs/compile.md is the user's view.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from harness import ABI_HEADER, KERNELS_DIR
from harness.diagnostics import Diagnostic
from harness.logging import get_logger
from harness.policy import policy_fingerprint
from harness.sass import SassMix
from harness.snapshot import SourceSnapshot

__all__ = ["CACHE_FORMAT", "FACTS_NAME", "LIBRARY_NAME", "CompileResult", "KernelFacts", "atomic_write", "build_lock",
           "cache_key", "from_cache", "key_path"]

log = get_logger(__name__)

#: Bumped when the cache entry layout or the facts change meaning.
CACHE_FORMAT = 1
LIBRARY_NAME = "kernel.so"
FACTS_NAME = "facts.json"


class KernelFacts(BaseModel):
    """Per-kernel facts from ``ptxas -v`` (bytes; registers per thread) and the SASS mix.

    ``sass`` is None where ``cuobjdump`` is not available (this is not an error).
    """

    name: str
    registers: int
    shared_mem_bytes: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    sass: SassMix | None = None
    mangled_name: str = ""
    barriers: int | None = None
    constant_mem_bytes: int = 0


class CompileResult(BaseModel):
    """A built candidate. ``library``: absolute path of the cached .so; ``build_hash``: sha256 of it.

    ``compile_time_s``: this call's wall time (a cache hit: its library checked again, ~0.15 s for attn_fast.cu);
    ``build_time_s``: how long nvcc + checks took when the entry was built.
    """

    source: str
    source_sha256: str
    library: str
    build_hash: str
    arch: str
    nvcc_version: str
    flags: list[str]
    cache_hit: bool
    compile_time_s: float
    kernels: list[KernelFacts]
    warnings: list[Diagnostic]
    imported_symbols: list[str]
    build_time_s: float = 0.0
    policy: bool = True
    cache_key: str = ""
    nvcc: str = ""
    sass_available: bool = False
    local_headers: list[str] = Field(default_factory=list, description="candidate-owned headers hashed into the key "
                                     "(the user's paths of the files copied for the build: harness.snapshot)")


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file in its folder and one ``os.replace``: a reader sees the old file
    or the new one, never half of one (the parent folder is made when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    tmp.write_text(text)
    os.replace(tmp, path)


def key_path(path: str | Path, source_dir: Path) -> str:
    """``path`` as the cache key spells it: relative to attnq's ``kernels/`` (``<kernels>/...``, the folder of the ABI
    header and the ``-I`` flag) or else to the candidate's folder (``<src>/...``) when inside one, else as it is. A
    checkout or a candidate folder moved elsewhere (the GPU box's copy of this repository, runs 73-74) then finds its
    builds: the bytes, the relative layout that ``#include`` resolves against, the flags and the tools are what the
    build depends on. A hit names the asking folder's source and headers; its diagnostics keep the paths they were
    built under."""
    p = Path(path)  # kernels/ first: a candidate there and one elsewhere that finds the same header through -I
    for root, name in ((KERNELS_DIR, "<kernels>"), (source_dir, "<src>")):  # spell it alike (test_mcp_server)
        if p == root or root in p.parents:
            return f"{name}/{p.relative_to(root).as_posix()}"
    return str(path)


def cache_key(snap: SourceSnapshot, flags: list[str], version: str, arch: str, policy: bool) -> str:
    """sha256 over what is built: the snapshot's bytes (the candidate's, and each local header's with its path), the
    harness's ABI header, the flags, nvcc's version, the arch and the policy (its fingerprint). Paths enter as
    :func:`key_path` spells them."""
    src_dir = snap.source.parent
    key_flags = [key_path(f, src_dir) if f == str(KERNELS_DIR) else f for f in flags]
    h = hashlib.sha256()
    for part in (f"attnq-build-v{CACHE_FORMAT}".encode(), snap.data, ABI_HEADER.read_bytes(),
                 json.dumps(key_flags).encode(), version.encode(), arch.encode(),
                 b"policy:" + policy_fingerprint().encode() if policy else b"nopolicy"):
        h.update(hashlib.sha256(part).digest())
    for p, data in snap.headers.items():
        h.update(hashlib.sha256(key_path(p, src_dir).encode() + b"\0" + data).digest())
    return h.hexdigest()


def from_cache(entry: Path, snap: SourceSnapshot, started: float) -> CompileResult | None:
    """The cached build in ``entry`` (None when absent, unreadable or tampered with), naming ``snap``'s files: a key
    can be shared by a moved folder (:func:`key_path`)."""
    facts, lib = entry / FACTS_NAME, entry / LIBRARY_NAME
    if not (facts.is_file() and lib.is_file()):
        return None
    try:
        res = CompileResult.model_validate_json(facts.read_text())
        lib_hash = hashlib.sha256(lib.read_bytes()).hexdigest()
    except (OSError, ValueError):
        return None
    if lib_hash != res.build_hash:  # the library was replaced after it was checked: build again
        log.warning("cache_entry_tampered", entry=str(entry), expected=res.build_hash[:12], got=lib_hash[:12])
        return None
    return res.model_copy(update={"source": str(snap.source), "library": str(lib), "cache_hit": True,
                                  "local_headers": [str(h) for h in snap.headers],
                                  "compile_time_s": round(time.perf_counter() - started, 4)})


@contextlib.contextmanager
def build_lock(cache_dir: Path, key: str) -> Iterator[None]:
    """An exclusive flock on ``<cache_dir>/.lock-<key[:16]>`` while one call builds ``key``: a second call for the same
    build (compile_kernel and verify_kernel on one file, from an MCP client; two processes) waits and takes the
    first one's cache entry instead of running nvcc beside it. Released however the holder ends."""
    with open(cache_dir / f".lock-{key[:16]}", "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
