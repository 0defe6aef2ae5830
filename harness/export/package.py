"""``export_kernel``: one candidate .cu file -> a small installable Python package.

The package (written to ``out_dir``)::

    pyproject.toml        PEP 517 metadata; build backend: build_backend.py (standard library only)
    build_backend.py      writes the wheel offline (template/build_backend.py)
    README.md             three lines of usage
    <name>/__init__.py    the one module: flash_attn_func + the torch custom op (template/runtime.py)
    <name>/kernel.json    name, version, kernel, source sha256, ABI version, nvcc, libraries by arch
    <name>/lib/<arch>.so  the kernel built by harness.compile.compile_kernel (policy on) for each arch
    <name>/native/        the op's native CUDA kernel: op.cpp, a copy of attn_abi.h, its builder (template/native/)
                          and, unless --no-native or the build cannot happen here, op.so built against this
                          interpreter's torch (harness.export.native_build; kernel.json's "native" records for what)

``pip install <out_dir>`` installs it; ``import <name>`` works without a GPU (the library is loaded on
the first call).
"""

from __future__ import annotations

import datetime as _dt
import json
import keyword
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel

import harness
from harness import ABI_HEADER
from harness.abi import ABI_VERSION
from harness.errors import InputError
from harness.export.native_build import NativeBuild, build_native
from harness.logging import get_logger

log = get_logger(__name__)

TEMPLATE_DIR = Path(__file__).resolve().parent / "template"
#: Package names that would shadow something the package itself or attnq imports, or torch's own op namespaces.
RESERVED_NAMES = frozenset({"torch", "aten", "prim", "prims", "attnq", "harness", "questions", "mcp_server",
                            "build_backend", "ctypes", "json", "struct", "math", "re", "threading", "hashlib", "os",
                            "warnings", "shutil", "sys", "native"})
#: What the package requires at install time (the custom op API it uses: torch.library.register_fake).
TORCH_REQUIREMENT = "torch>=2.4"
MANIFEST_NAME = "kernel.json"
#: template/native/ files copied into <name>/native/ (next to a copy of kernels/attn_abi.h).
NATIVE_FILES = ("__init__.py", "op.cpp")
GENERATOR = "attnq export"


class ExportedLibrary(BaseModel):
    """One built library in the package: ``file`` relative to the package directory; ``sha256`` of it."""

    arch: str
    file: str
    sha256: str
    cache_hit: bool
    build_time_s: float


class ExportResult(BaseModel):
    """What ``export_kernel`` wrote. ``directory``: absolute path of the package project.

    ``op_impl``: the implementation of the op the package serves when imported with the exporting torch
    ("native": the shipped library; "python": none shipped), ``op_impl_note`` the same in one line with the
    conditions (another torch, --no-native, a build that could not happen here).
    """

    name: str
    version: str
    directory: str
    kernel: str
    source_sha256: str
    abi_version: int
    nvcc_version: str
    libraries: list[ExportedLibrary]
    files: list[str]
    install_command: str
    op: str
    native: NativeBuild
    op_impl: str
    op_impl_note: str


def parse_archs(value: str | Sequence[str] | None, default: str = "sm_90a") -> list[str]:
    """``"sm_90a,sm_100a"`` (or a list) -> ``["sm_90a", "sm_100a"]``: stripped, deduplicated, validated.

    Raises:
        InputError: an empty list or an arch that is not ``sm_<digits>[a|f]``.
    """
    items = value.split(",") if isinstance(value, str) else list(value or [default])
    archs: list[str] = []
    for raw in items:
        arch = raw.strip()
        if not arch:
            continue
        if not re.fullmatch(r"sm_\d{2,3}[af]?", arch):
            raise InputError(f"arch must look like sm_90a or sm_100a, got {arch!r}")
        if arch not in archs:
            archs.append(arch)
    if not archs:
        raise InputError("--arch names no arch: give e.g. sm_90a or sm_90a,sm_100a")
    return archs


def default_name(kernel: Path) -> str:
    """``attnq_<stem>`` with every character outside ``[A-Za-z0-9_]`` replaced by ``_``."""
    return "attnq_" + re.sub(r"\W", "_", kernel.stem, flags=re.ASCII).strip("_").lower()


def check_name(name: str) -> str:
    """A package name that is a Python identifier, also usable as a torch op namespace.

    Raises:
        InputError: not ``[A-Za-z_][A-Za-z0-9_]*``, a keyword, longer than 64 characters or reserved.
    """
    if keyword.iskeyword(name):
        raise InputError(f"--name {name!r} is a Python keyword (`import {name}` cannot work): choose another")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
        raise InputError(f"--name {name!r} must be a Python identifier of at most 64 characters "
                         "(letters, digits, _; not starting with a digit)")
    if name.lower() in RESERVED_NAMES:
        raise InputError(f"--name {name!r} would shadow a module the package or attnq imports: choose another")
    return name


def _git_commit() -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(harness.REPO_ROOT), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def _is_previous_export(path: Path) -> bool:
    return any(_manifest_generator(p) == GENERATOR for p in path.glob(f"*/{MANIFEST_NAME}"))


def _manifest_generator(path: Path) -> str | None:
    try:
        return json.loads(path.read_text()).get("generator")
    except (OSError, ValueError, AttributeError):
        return None


def _check_out_dir(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir} exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if not force:
            raise InputError(f"{out_dir} is not empty: choose a new directory (or --force to replace an earlier "
                             "attnq export there)")
        if not _is_previous_export(out_dir):
            raise InputError(f"{out_dir} is not empty and holds no earlier attnq export: --force replaces only "
                             "those; choose a new directory")


def _pyproject(name: str, version: str, kernel: str) -> str:
    return (
        "[build-system]\nrequires = []\nbuild-backend = \"build_backend\"\nbackend-path = [\".\"]\n\n"
        f"[project]\nname = \"{name}\"\nversion = \"{version}\"\n"
        f"description = \"attention forward kernel {kernel} exported by attnq (FlashAttention-3 interface)\"\n"
        f"requires-python = \">=3.9\"\ndependencies = [\"{TORCH_REQUIREMENT}\"]\n"
    )


def _readme(name: str, kernel: str, archs: list[str]) -> str:
    return (
        f"# {name}\n\nThe attention forward kernel `{kernel}`, exported by attnq for {', '.join(archs)}, "
        "behind FlashAttention-3's interface.\n\n"
        f"```python\nfrom {name} import flash_attn_func              # FlashAttention-3's signature\n"
        "out = flash_attn_func(q, k, v, causal=True)     # q [batch, seqlen_q, heads, head_dim], bf16/fp16, CUDA\n"
        f"out, lse = torch.ops.{name}.fwd(q, k, v, q.shape[-1] ** -0.5, True)  # the custom op "
        "(torch.compile, CUDA graphs)\n```\n\n"
        f"Install with `pip install .`; `{name}/kernel.json` records what was built from what. Unsupported "
        "arguments (qv, descales, windows, attention_chunk, softcap, head_dim_v != head_dim, other dtypes) raise "
        "NotImplementedError naming them.\n\n"
        f"The op's native (C++) implementation serves when `{name}/native/op.so` was built for the running torch "
        f"(kernel.json's \"native\" entry), else it is built on the first GPU use when a C++ compiler and ninja "
        f"are there, else the Python one serves; `{name}.impl_info()` says which and why, "
        f"`{name.upper()}_NATIVE=0` keeps the Python one.\n"
    )


def _op_impl(pkg_name: str, native: NativeBuild) -> tuple[str, str]:
    env = f"{pkg_name.upper()}_NATIVE"
    if native.status == "built":
        return "native", (f"native (C++) op, shipped for torch {native.torch} (CUDA {native.torch_cuda}, "
                          f"{native.machine}); with another torch the package builds it on the first use on a GPU "
                          f"(C++ compiler, ninja), else serves the Python op; {env}=0 keeps the Python op")
    if native.status == "skipped":
        return "python", f"Python op (--no-native); {env}=1 or {pkg_name}.load_native() builds the native one"
    return "python", (f"Python op until the native one builds on the first use on a GPU ({native.reason}); "
                      f"{env}=0 skips that")


def export_kernel(kernel: str | Path, out_dir: str | Path, *, name: str | None = None,
                  archs: Sequence[str] = ("sm_90a",), cache_dir: Path | None = None, force: bool = False,
                  native: bool = True, progress: Callable[[str], None] | None = None) -> ExportResult:
    """Build ``kernel`` for each arch and write the installable package project to ``out_dir``.

    Args:
        kernel: the candidate .cu file (the rules of harness.compile.compile_kernel apply, policy on).
        out_dir: a new or empty directory (or, with ``force``, one holding an earlier attnq export).
        name: the Python package and torch op namespace; default :func:`default_name`.
        archs: nvcc targets, e.g. ``["sm_90a", "sm_100a"]``; one library per arch.
        cache_dir: attnq's build cache (default ``Settings().state_dir / "build"``).
        native: build the op's native (C++) library against this interpreter's torch and ship it
            (:mod:`harness.export.native_build`: ~9 s on 2 CPU cores, 1.5 s from the cache); False (``--no-native``): the
            package serves the Python op unless asked for the native one. A build that cannot happen here
            does not fail the export (``ExportResult.native`` says why).
        progress: called with one line per step (builds take tens of seconds).
    Returns:
        ExportResult: what was written, the install command, the op's name and implementation.
    Raises:
        InputError: bad name, arch or output directory; the compile errors of compile_kernel
        (InputError, ToolchainError, CompileError, PolicyError, AbiError). Nothing is written then.
    """
    from harness.compile import compile_kernel

    src = Path(kernel).expanduser()
    pkg_name = check_name(default_name(src) if name is None else name)  # --name '' is refused, not defaulted
    archs = parse_archs(list(archs))
    out = Path(out_dir).expanduser().resolve()
    _check_out_dir(out, force)
    if cache_dir is None:
        from harness.config import Settings

        cache_dir = Settings().state_dir / "build"
    results = []
    for arch in archs:
        if progress:
            progress(f"building {src.name} for {arch}")
        results.append(compile_kernel(src, arch=arch, cache_dir=cache_dir, policy=True))
    first = results[0]
    version = f"0.1.0+src{first.source_sha256[:12]}"
    libraries = [ExportedLibrary(arch=r.arch, file=f"lib/{r.arch}.so", sha256=r.build_hash, cache_hit=r.cache_hit,
                                 build_time_s=r.build_time_s) for r in results]
    manifest: dict = {
        "generator": GENERATOR, "name": pkg_name, "version": version, "kernel": src.name,
        "source_sha256": first.source_sha256, "abi_version": ABI_VERSION, "nvcc_version": first.nvcc_version,
        "nvcc_flags": first.flags, "attnq_version": harness.__version__, "attnq_commit": _git_commit(),
        "exported_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "requires": [TORCH_REQUIREMENT],
        "libraries": {lib.arch: {"file": lib.file, "sha256": lib.sha256} for lib in libraries},
    }

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        pkg = tmp / pkg_name
        (pkg / "lib").mkdir(parents=True)
        shutil.copyfile(TEMPLATE_DIR / "runtime.py", pkg / "__init__.py")
        (pkg / "native").mkdir()
        for file in NATIVE_FILES:
            shutil.copyfile(TEMPLATE_DIR / "native" / file, pkg / "native" / file)
        shutil.copyfile(ABI_HEADER, pkg / "native" / "attn_abi.h")
        for lib, res in zip(libraries, results):
            shutil.copyfile(res.library, pkg / lib.file)
        if native:
            if progress:
                progress("building the native op (C++, against this interpreter's torch; ~9 s, then cached)")
            native_build = build_native(pkg / "native", pkg, cache_dir, ABI_VERSION)
        else:
            native_build = NativeBuild(status="skipped", reason="exported with --no-native")
        manifest["native"] = native_build.manifest_entry()
        (pkg / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        shutil.copyfile(TEMPLATE_DIR / "build_backend.py", tmp / "build_backend.py")
        (tmp / "pyproject.toml").write_text(_pyproject(pkg_name, version, src.name))
        (tmp / "README.md").write_text(_readme(pkg_name, src.name, archs))
        files = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())
        if out.exists():  # an earlier export (checked above): swap it out, then drop it
            old = out.parent / f".{out.name}.old-{secrets.token_hex(4)}"
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    op_impl, op_impl_note = _op_impl(pkg_name, native_build)
    log.info("exported", kernel=str(src), name=pkg_name, archs=archs, directory=str(out), op_impl=op_impl,
             native=native_build.status)
    return ExportResult(name=pkg_name, version=version, directory=str(out), kernel=str(src.resolve()),
                        source_sha256=first.source_sha256, abi_version=ABI_VERSION,
                        nvcc_version=first.nvcc_version, libraries=libraries, files=files,
                        install_command=f"python -m pip install {out}", op=f"torch.ops.{pkg_name}.fwd",
                        native=native_build, op_impl=op_impl, op_impl_note=op_impl_note)
