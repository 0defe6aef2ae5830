"""``compile_kernel``: one candidate .cu file -> a loadable shared library, its facts, a cache.

nvcc builds the single file with the flags of :func:`nvcc_flags` (``-cudart shared`` so the
library imports the runtime instead of linking the static one, whose own dlopen/socket/file calls
would trip the symbol policy). The result carries per-kernel facts from ``ptxas -v`` (registers,
static shared memory, stack frame, spills) and, where ``cuobjdump`` exists, the SASS instruction
mix. Builds are cached by content in ``<cache_dir>/<key>/`` (``kernel.so`` + ``facts.json``),
written through a temp dir and one ``rename`` so a concurrent reader never sees half an entry; the
build record, its key and the cache's locking are :mod:`harness.build_cache`.

The candidate and its local headers are read once (:mod:`harness.snapshot`): the key hashes those bytes, the
policy scans them, and nvcc builds a private copy of them, never the user's files.

The source/symbol policy lives in :mod:`harness.policy`; docs/compile.md is the user's view.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from harness import ABI_HEADER, KERNELS_DIR
from harness.abi import ABI_VERSION
from harness.build_cache import (
    FACTS_NAME,
    LIBRARY_NAME,
    CompileResult,
    KernelFacts,
    atomic_write,
    build_lock,
    cache_key,
    from_cache,
)
from harness.build_dir import check_nvcc_path, sweep_stale_builds
from harness.diagnostics import Diagnostic, parse_diagnostics
from harness.errors import AbiError, CompileError, InputError, PolicyError, ToolchainError
from harness.exec_scan import RELAYOUT_FLAGS, layout_only
from harness.logging import get_logger
from harness.nvcc_passes import built_text_mismatch, host_pass_flags, owned_predicate
from harness.policy import (
    PolicyViolation,
    check_library,
    forbidden_header_reason,
    library_imports,
    parse_nm_defined,
    raise_violations,
    run_tool,
    scan_asm_labels,
    scan_asm_text,
    scan_driver_entry_points,
    scan_failed_pass,
    scan_preprocessed,
    scan_source_includes,
)
from harness.procs import build_env, run_captured
from harness.relink import relink
from harness.sass import SassMix, demangle, parse_ptxas, sass_mixes
from harness.snapshot import MAX_SOURCE_BYTES, SnapshotTree, SourceSnapshot, private_copy, take_snapshot

__all__ = [
    "MAX_SOURCE_BYTES",
    "CompileResult",
    "Diagnostic",
    "KernelFacts",
    "SassMix",
    "compile_kernel",
    "find_nvcc",
    "nvcc_flags",
    "parse_diagnostics",
]

log = get_logger(__name__)

#: Wall-clock limit for one nvcc run (seconds).
NVCC_TIMEOUT_S = 300.0
#: Full nvcc builds one policy build may run while it looks for a host-code layout (the others are relinks).
MAX_FULL_BUILDS = 3


# --------------------------------------------------------------------------------------------------
# Toolchain
# --------------------------------------------------------------------------------------------------


def find_nvcc() -> str:
    """nvcc from ``$CUDA_HOME/bin`` (or ``$CUDA_PATH/bin``) when set, else PATH, else /usr/local/cuda/bin.

    Raises ToolchainError when none exists (or when CUDA_HOME is set but holds no bin/nvcc: an
    explicit toolkit that is broken is not silently replaced by another one).
    """
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if home := os.environ.get(var):
            if (p := Path(home) / "bin" / "nvcc").is_file():
                return str(p)
            raise ToolchainError(f"nvcc not found: {var}={home} has no bin/nvcc (fix or unset {var})")
    if found := shutil.which("nvcc"):
        return found
    if (p := Path("/usr/local/cuda/bin/nvcc")).is_file():
        return str(p)
    raise ToolchainError("nvcc not found: install the CUDA toolkit (13.0) or set CUDA_HOME")


_VERSION_MEMO: dict[str, str] = {}


def nvcc_version(nvcc: str, cache_dir: Path | None = None) -> str:
    """``nvcc --version``'s ``release ..., V...`` line, cached by path + mtime + size (memory and disk)."""
    st, real = Path(nvcc).stat(), str(Path(nvcc).resolve())
    try:
        rst = Path(real).stat()
    except OSError:  # pragma: no cover
        rst = st
    stamp = f"{nvcc}|{real}|{st.st_mtime_ns}|{st.st_size}|{rst.st_mtime_ns}|{rst.st_size}"
    if stamp in _VERSION_MEMO:
        return _VERSION_MEMO[stamp]
    disk = (cache_dir / "nvcc_versions.json") if cache_dir else None
    known: dict[str, str] = {}
    if disk and disk.is_file():
        try:
            known = json.loads(disk.read_text())
        except (OSError, ValueError):
            known = {}
    if stamp not in known:
        try:
            proc = subprocess.run([nvcc, "--version"], capture_output=True, text=True, encoding="utf-8",
                                  errors="replace", timeout=60, check=False, env=build_env())
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ToolchainError(f"`{nvcc} --version` failed: {exc}") from None
        lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
        rel = [ln for ln in lines if "release" in ln]
        if proc.returncode != 0 or not rel:
            raise ToolchainError(f"`{nvcc} --version` gave no version: {(proc.stdout + proc.stderr)[-300:]}")
        known[stamp] = rel[0] + ("; " + lines[-1] if lines[-1] != rel[0] else "")
        if disk:
            atomic_write(disk, json.dumps(known, indent=1))
    _VERSION_MEMO[stamp] = known[stamp]
    return known[stamp]


def nvcc_flags(arch: str = "sm_90a") -> list[str]:
    """The exact nvcc options (without source and output) for ``arch`` (``sm_90a``, ``sm_100a``...).

    Uses ``-gencode=arch=compute_XX,code=sm_XX`` (``-arch=sm_90a`` is unreliable with nvcc 13.0).
    ``-DCCCL_DISABLE_NVTX`` keeps CUB's NVTX ranges (getenv + dlopen of an injection library) out
    of the host code, so CUB passes the symbol policy. ``-Xlinker -Bsymbolic`` binds the library's calls of the
    functions it defines to its own definitions: without it a candidate that defines ``open`` (or ``dlopen``,
    ``dlsym``) and calls it imports nothing, and the dynamic linker binds the call to libc's ``open`` at load time
    (red team, session 19; harness.policy.scan_interposable checks the result).
    Raises InputError for an arch that is not ``sm_<digits>[a|f]``.
    """
    m = re.fullmatch(r"sm_(\d{2,3})([af]?)", arch)
    if not m:
        raise InputError(f"arch must look like sm_90a or sm_100a, got {arch!r}")
    num = m.group(1) + m.group(2)
    return [
        "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", "-Xlinker", "-Bsymbolic",
        "-lineinfo", f"-gencode=arch=compute_{num},code=sm_{num}", "--expt-relaxed-constexpr", "-DCCCL_DISABLE_NVTX",
        "-I", str(KERNELS_DIR), f"-DATTN_HARNESS_ABI_VERSION={ABI_VERSION}", "-Xptxas", "-v",
    ]


_ABI_ERROR_MARK = "ABI version does not match"
_MISSING_RE = re.compile(r'cannot open source file "([^"]+)"|fatal error: ([^:]+): No such file')


def _raise_for_failure(diags: list[Diagnostic], output: str, policy: bool, what: str,
                       tree: SnapshotTree | None = None) -> None:
    """Turn a failed nvcc run into AbiError / PolicyError / CompileError (always raises). ``tree``: the copy nvcc
    built (headers are read from it; a local file it lacks is named in the error)."""
    for d in diags:
        if _ABI_ERROR_MARK in d.message:
            theirs = None
            try:
                text = tree.snapshot.text(d.file) if tree else None
                text = Path(d.file).read_text(errors="replace") if text is None else text
                hm = re.search(r"#define\s+ATTN_ABI_VERSION\s+(\d+)", text)
                theirs = int(hm.group(1)) if hm else None
            except OSError:
                pass
            got = f"ABI version {theirs}" if theirs is not None else "another ABI version"
            raise AbiError(
                f"{d.file} declares {got}, but this harness speaks ABI version {ABI_VERSION}: "
                f"update your copy of attn_abi.h or include the harness's {ABI_HEADER}",
                details={"candidate_abi_version": theirs, "harness_abi_version": ABI_VERSION,
                         "header": d.file, "diagnostics": [x.model_dump() for x in diags]})
    hint = ""
    for d in diags:
        m = _MISSING_RE.search(d.message) or _MISSING_RE.search(f"fatal error: {d.message}")
        name = (m.group(1) or m.group(2)) if m else None
        if name and policy and (reason := forbidden_header_reason(name)):
            raise_violations([PolicyViolation(kind="header", name=name, reason=reason, file=d.file, line=d.line)])
        if name and tree and not hint and (found := tree.missing_local(name, d.file if d.line else None)):
            hint = f" ({found})"
    errs = [d for d in diags if d.severity == "error"]
    if not errs:
        tail = [ln for ln in output.splitlines() if ln.strip()][-5:]
        errs = [Diagnostic(file="nvcc", severity="error", message=" | ".join(tail) or "nvcc failed without output")]
        diags = errs + diags
    first = errs[0]
    where = f"{first.file}:{first.line}: " if first.line else f"{first.file}: "
    raise CompileError(f"{what} failed ({len(errs)} error{'s' if len(errs) > 1 else ''}); first: {where}{first.message}"
                       + hint,
                       details={"diagnostics": [d.model_dump() for d in diags], "log_tail": output[-4000:]})


def _run_nvcc(argv: list[str], timeout_s: float, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run nvcc in its own process group (harness.procs.run_captured); on timeout kill the group (cicc/ptxas too) ->
    CompileError."""
    try:
        proc, timed_out = run_captured(argv, cwd, timeout_s)
    except OSError as exc:
        raise ToolchainError(f"cannot run nvcc ({argv[0]}): {exc}") from None
    if timed_out:
        raise CompileError(f"nvcc timed out after {timeout_s:g} s; simplify the file (heavy template "
                           "instantiation or unrolling?)", details={"diagnostics": [], "timeout_s": timeout_s}) from None
    return proc


# --------------------------------------------------------------------------------------------------
# The call
# --------------------------------------------------------------------------------------------------


def compile_kernel(path: str | Path, *, arch: str = "sm_90a", cache_dir: Path | None = None,
                   policy: bool = True, timeout_s: float = NVCC_TIMEOUT_S) -> CompileResult:
    """Build one candidate .cu into a shared library (cached), check its ABI and the policy.

    Args:
        path: the candidate's .cu file (<= 1 MiB, not empty).
        arch: target, ``sm_90a`` (default) or e.g. ``sm_100a``.
        cache_dir: directory holding ``<key>/`` entries; default ``Settings().state_dir / "build"``.
        policy: apply the source/symbol policy (harness.policy); the ABI check always runs.
        timeout_s: nvcc wall-clock limit.
    Returns:
        CompileResult; ``cache_hit`` True when an identical build (same source bytes, owned headers,
        ABI header, flags, nvcc version, arch, policy switch) was already cached. The source and its local
        headers are read once (harness.snapshot): what the policy checked is what nvcc built and the key hashed.
    Raises:
        InputError: missing / not .cu / empty / > 1 MiB file, too many or too large local headers, bad arch, the name
            kernel_dlink.cu (nvcc's device-link object of the library has that stem).
        ToolchainError: nvcc (or nm/readelf/objdump) missing.
        CompileError: nvcc failed or timed out; ``details["diagnostics"]`` (errors first).
        PolicyError: forbidden header, library, symbol or instruction (named).
        AbiError: ``attn_fwd``/``attn_abi_version`` not exported with C linkage, or a stale header.
    """
    started = time.perf_counter()
    snap = take_snapshot(path, confine=policy)
    source = snap.source
    if source.stem == Path(LIBRARY_NAME).stem + "_dlink":  # red team, session 23: a misleading AbiError before
        raise InputError(f"{source.name}: nvcc names the library's device-link object {source.stem}.o, the same name as "
                         "this file's host object, so the build cannot work: rename the file")
    if cache_dir is None:
        from harness.config import Settings

        cache_dir = Settings().state_dir / "build"
    cache_dir = Path(cache_dir).resolve()
    check_nvcc_path(cache_dir, "the build cache", is_file=False)
    nvcc = find_nvcc()
    version = nvcc_version(nvcc, cache_dir)
    flags = nvcc_flags(arch)
    key = cache_key(snap, flags, version, arch, policy)
    entry = cache_dir / key
    if (hit := _checked_hit(entry, snap, started)) is not None:
        log.info("compile_cache_hit", source=str(source), key=key[:16])
        return hit
    cache_dir.mkdir(parents=True, exist_ok=True)
    with build_lock(cache_dir, key):  # one build per key at a time, across threads and processes
        if (hit := _checked_hit(entry, snap, started)) is not None:  # built while this call waited
            log.info("compile_cache_hit", source=str(source), key=key[:16], waited=True)
            return hit
        with private_copy(snap, cache_dir, f".tmp-{key[:16]}-{os.getpid()}-") as tree:
            return _build(tree, nvcc, flags, version, arch, policy, timeout_s, cache_dir, key, started)


def _checked_hit(entry: Path, snap: SourceSnapshot, started: float) -> CompileResult | None:
    """The cache entry ``entry`` for ``snap`` (:func:`harness.build_cache.from_cache`), a policy build's library
    checked again (exports, symbols and code: harness.policy.check_library; ~0.15 s for attn_fast.cu), its
    ``imported_symbols`` from that check. The entry's
    hash proves only that the library is the one its facts.json names, and whoever can write the cache folder can
    rewrite both (red team, session 24: a ``dlopen`` library with its hash in facts.json came back as a clean hit).
    None when there is no entry, and, with the entry removed so that it is built again, when the library fails; a
    build without the policy as it is. ``compile_time_s`` counts the check (``started``: the call's perf_counter
    start)."""
    hit = from_cache(entry, snap, started)
    if hit is None or not hit.policy:
        return hit
    try:
        _check_exports(Path(hit.library), Path(hit.source))
        imports = check_library(Path(hit.library))
    except (AbiError, PolicyError) as exc:
        log.warning("cache_entry_refused", entry=str(entry), reason=str(exc)[:300])
        shutil.rmtree(entry, ignore_errors=True)
        return None
    return hit.model_copy(update={"imported_symbols": sorted({s.name for s in imports}),
                                  "compile_time_s": round(time.perf_counter() - started, 4)})


def _tool_cwd(tree: SnapshotTree) -> Path:
    """A new, empty folder of the copy ``tree`` for nvcc and every tool it starts to run in (-E passes, builds,
    relinks). Never the candidate's folder: nvcc's plan resolves names against the working folder, where a candidate
    could place files through its ``#include`` lines (the snapshot copies an include even under ``#if 0``). Red team,
    session 23: nvcc.profile's ``LD_LIBRARY_PATH += $(TOP)/lib:`` ends in an empty entry (the working folder) when
    LD_LIBRARY_PATH is unset, so cc1plus loaded a ``libisl.so.23`` beside the candidate and ran its code during the
    policy's first -E pass; and nvcc's link stub compile (``crt/link.stub``: ``#include <stddef.h>``, with ``-I.``
    and no ``__CUDACC__``) read the candidate's ``stddef.h`` under macros no -E pass of the policy used."""
    return Path(tempfile.mkdtemp(prefix="cwd-", dir=tree.root))


def _scan(tree: SnapshotTree, nvcc: str, flags: list[str], timeout_s: float, cwd: Path) -> list[str]:
    """The source policy's scans of the copy ``tree`` (PolicyError naming the first refused item): the raw scans of
    every file first (nothing is read outside the candidate's folder before they pass), then both of nvcc's
    preprocessor passes (code under ``#ifndef __CUDA_ARCH__`` exists only in the host pass: nvcc_passes). Returns
    the texts scanned (device pass, host pass): the build's own must equal them (:func:`_build`). ``cwd``: the
    folder nvcc runs in (:func:`_tool_cwd`)."""
    snap = tree.snapshot
    found = list(snap.refused)
    for user, data in snap.files():
        found += scan_source_includes(data.decode("utf-8", errors="replace"), str(user), snap.roots)
    raise_violations(found)
    owned = tree.owned(owned_predicate(nvcc))
    pre_flags = [f for f in flags if f not in ("-Xptxas", "-v")]
    texts = []
    for what, extra in (("preprocessing", []), ("preprocessing (host pass)", host_pass_flags(nvcc, pre_flags, cwd))):
        pre = _run_nvcc([nvcc, "-E", *tree.flags(pre_flags), *extra, str(tree.source)], timeout_s, cwd)
        if pre.returncode != 0:  # a file outside the copy named in the failure is refused before its lines are shown
            raise_violations(tree.user_violations(scan_failed_pass(pre.stderr + "\n" + pre.stdout, owned, tree.roots)))
            _raise_for_failure(parse_diagnostics(tree.user_text(pre.stderr + "\n" + pre.stdout)),
                               tree.user_text(pre.stderr), True, what, tree)
        # judged on the preprocessed text: comments gone, macros expanded; the copy's folders are the roots, so a
        # candidate file read from anywhere else (the user's folder by absolute path) is refused
        raise_violations(tree.user_violations(scan_preprocessed(pre.stdout, owned, tree.roots)
                                              + scan_driver_entry_points(pre.stdout, owned)
                                              + scan_asm_labels(pre.stdout, owned)
                                              + scan_asm_text(pre.stdout, owned)))
        texts.append(pre.stdout)
    return texts


def _build(tree: SnapshotTree, nvcc: str, flags: list[str], version: str, arch: str, policy: bool,
           timeout_s: float, cache_dir: Path, key: str, started: float) -> CompileResult:
    """:func:`compile_kernel` past a cache miss, on the snapshot's copy ``tree``: the policy scans, nvcc, the ABI and
    symbol checks, the cache entry."""
    entry = cache_dir / key
    snap = tree.snapshot
    source = snap.source
    cwd = _tool_cwd(tree)  # nvcc and its tools never run in the candidate's folder
    scanned = _scan(tree, nvcc, flags, timeout_s, cwd) if policy else []

    sweep_stale_builds(cache_dir)
    tmp = cache_dir / f".tmp-{key[:16]}-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        lib = tmp / LIBRARY_NAME
        # a policy build whose only refusal is system call bytes inside displacements is built again with its host
        # code moved (harness/exec_scan.py RELAYOUT_FLAGS: an honest layout's chance bytes move, a candidate's stay):
        # a relink (harness/relink.py: host compile and link replayed, the device code kept), or a full build where
        # the relink cannot run (at most MAX_FULL_BUILDS in all)
        full_builds, last_refusal = 0, None
        for attempt, extra in enumerate(RELAYOUT_FLAGS if policy else ((),)):
            flags_used = [*flags, *extra]
            why = relink(_nvcc_argv(tree, nvcc, flags_used, policy, lib), cwd, timeout_s) \
                if attempt else "first build"
            if why is not None:
                if full_builds == MAX_FULL_BUILDS and last_refusal is not None:
                    raise last_refusal
                full_builds += 1
                output, diags = _nvcc_once(tree, nvcc, flags_used, policy, scanned, lib, timeout_s, attempt, cwd)
                if attempt:
                    log.warning("relink failed", source=str(source), key=key[:16], reason=why[:300])
            _check_exports(lib, source)
            if not policy:
                imports = library_imports(lib)[0]
                break
            try:
                imports = check_library(lib)
                break
            except PolicyError as exc:
                if attempt + 1 == len(RELAYOUT_FLAGS) or not layout_only(exc.details.get("violations", [])):
                    raise
                last_refusal = exc
                log.info("relayout", source=str(source), key=key[:16], attempt=attempt + 1)
        mixes = sass_mixes(lib, nvcc)
        entries = parse_ptxas(output)
        names = demangle([e.mangled_name for e in entries])
        kernels = [
            KernelFacts(name=names[e.mangled_name], mangled_name=e.mangled_name, registers=e.registers,
                        shared_mem_bytes=e.shared_mem_bytes, stack_frame_bytes=e.stack_frame_bytes,
                        spill_store_bytes=e.spill_store_bytes, spill_load_bytes=e.spill_load_bytes,
                        barriers=e.barriers, constant_mem_bytes=e.constant_mem_bytes,
                        sass=mixes.get(e.mangled_name) if mixes is not None else None)
            for e in entries
        ]
        warnings = [d for d in diags if d.severity == "warning"]
        if any(s.name.startswith("cudaGetDriverEntryPoint") for s in imports):
            warnings.append(Diagnostic(file=str(source), severity="warning", message=(
                "uses cudaGetDriverEntryPoint: driver functions reached through it are not checked by the "
                "symbol policy (allowed for cuTensorMapEncodeTiled; the worker's isolation is the backstop)")))
        build_time = time.perf_counter() - started
        result = CompileResult(
            source=str(source), source_sha256=hashlib.sha256(snap.data).hexdigest(), library=str(entry / LIBRARY_NAME),
            build_hash=hashlib.sha256(lib.read_bytes()).hexdigest(), arch=arch, nvcc_version=version,
            flags=flags_used, cache_hit=False, compile_time_s=round(build_time, 4), kernels=kernels,
            warnings=warnings, imported_symbols=sorted({s.name for s in imports}),
            build_time_s=round(build_time, 4), policy=policy, cache_key=key, nvcc=nvcc,
            sass_available=mixes is not None, local_headers=[str(h) for h in snap.headers])
        (tmp / FACTS_NAME).write_text(result.model_dump_json(indent=1))
        try:
            os.rename(tmp, entry)
        except OSError:
            # Another process finished the same build first (nvcc output is not byte-reproducible, so
            # return ITS entry: library and build_hash must describe the same file).
            if (winner := _checked_hit(entry, snap, started)) is not None:
                return winner
            shutil.rmtree(entry, ignore_errors=True)  # a broken leftover: replace it
            os.rename(tmp, entry)
        log.info("compiled", source=str(source), key=key[:16], build_time_s=round(build_time, 3))
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _nvcc_once(tree: SnapshotTree, nvcc: str, flags: list[str], policy: bool, scanned: list[str], lib: Path,
               timeout_s: float, attempt: int, cwd: Path) -> tuple[str, list[Diagnostic]]:
    """One nvcc build of the copy ``tree`` into ``lib``, run in ``cwd`` (:func:`_tool_cwd`): ``(its output, its
    diagnostics)``. With the policy on it keeps its preprocessed text (one keep folder per attempt), which must equal
    the ``scanned`` text."""
    keep = _keep_dir(tree, attempt)  # the build's own preprocessed text, compared with the scanned text
    keep.mkdir()
    proc = _run_nvcc(_nvcc_argv(tree, nvcc, flags, policy, lib, attempt), timeout_s, cwd)
    if policy and (differs := built_text_mismatch(keep, tree.source.stem, scanned,  # before any log is shown
                                                   proc.returncode == 0 and lib.is_file())):
        raise_violations(tree.user_violations([differs]))
    output = tree.user_text(proc.stderr + "\n" + proc.stdout)
    diags = parse_diagnostics(output)
    if proc.returncode != 0 or not lib.is_file():
        _raise_for_failure(diags, output, policy, "nvcc", tree)
    return output, diags


def _keep_dir(tree: SnapshotTree, attempt: int) -> Path:
    """nvcc's ``--keep-dir`` for build ``attempt`` of ``tree`` (a relink replays in the first build's)."""
    return tree.root / f".keep{attempt or ''}"


def _nvcc_argv(tree: SnapshotTree, nvcc: str, flags: list[str], policy: bool, lib: Path, attempt: int = 0) -> list[str]:
    """The nvcc command line that builds ``tree`` into ``lib`` (policy builds keep their intermediates)."""
    kept = ["--keep", "--keep-dir", str(_keep_dir(tree, attempt))] if policy else []
    return [nvcc, *tree.flags(flags), *kept, str(tree.source), "-o", str(lib)]


def _check_exports(lib: Path, source: Path) -> None:
    """AbiError unless ``attn_fwd`` and ``attn_abi_version`` are defined dynamic C symbols."""
    defined = parse_nm_defined(run_tool(["nm", "-D", "--defined-only", str(lib)]))
    problems = []
    if "attn_fwd" not in defined:
        mangled = [n for n in defined if re.match(r"_Z\d+attn_fwd", n)]
        hint = (f" (found the C++ symbol {mangled[0]}: declare it extern \"C\" with exactly "
                "`int attn_fwd(const attn_fwd_params*, cudaStream_t)`)" if mangled
                else ": define `extern \"C\" int attn_fwd(const attn_fwd_params*, cudaStream_t)`")
        problems.append("exports no `attn_fwd` with C linkage" + hint)
    if "attn_abi_version" not in defined:
        problems.append("exports no `attn_abi_version`: include attn_abi.h (it defines it)")
    if problems:
        raise AbiError(f"{source.name} " + "; and ".join(problems),
                       details={"exported": sorted(defined), "missing": [n for n in ("attn_fwd", "attn_abi_version")
                                                                          if n not in defined]})
