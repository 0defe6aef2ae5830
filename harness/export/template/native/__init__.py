"""The op's native (C++) CUDA implementation: source, build and loading (written by ``attnq export``).

``op.cpp`` (with the copy of ``attn_abi.h`` beside it, the ABI the kernel libraries speak) is built with
``torch.utils.cpp_extension`` (ninja, the C++ compiler ``$CXX`` or ``c++``, torch's headers and CUDA's
``cuda_runtime_api.h``; host code only, no nvcc) in one of two places:

* at export: ``attnq export`` runs this file as a script (``python native/__init__.py --out DIR``) with
  the exporting machine's torch and ships the library as ``native/op.so``; ``kernel.json``'s ``native``
  entry records what it was built for (:func:`build_record`: torch and its CUDA version, the C++ ABI, the
  CPU architecture and OS, the sources' sha256). The package loads it at import when the running process
  matches that record (:func:`shipped_library`), never otherwise;
* just in time (:func:`build`): on the first use on a GPU when the shipped library is absent or does not
  match, into ``<$TORCH_EXTENSIONS_DIR or torch's default extension root>/attnq_native/<package>-<key>``;
  ``key`` hashes the two sources, the package name and ABI version, the torch, CUDA and Python versions
  and the CUDA header directory, so a new torch builds afresh and every later process reuses the build
  (cpp_extension holds a file lock while it builds).

Either library is loaded without a Python module and driven with ctypes (:class:`NativeOp`): the kernel
library is not linked into it, its functions are passed by address, so the .so the Python side loaded
(sha256 and ABI version checked) is the one called.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: The files of the build, hashed into its cache key and its record.
SOURCES = ("op.cpp", "attn_abi.h")
#: The library ``attnq export`` ships, relative to the package directory.
SHIPPED_FILE = "native/op.so"
#: Fields of a build record the running process must match for the shipped library to be loaded.
MATCH_FIELDS = ("torch", "torch_cuda", "cxx11_abi", "machine", "system", "sources_sha256")


def cuda_include_dir() -> Path | None:
    """A directory holding ``cuda_runtime_api.h``, or None.

    Looked for under ``$CUDA_HOME``, ``$CUDA_PATH``, torch's ``cpp_extension.CUDA_HOME``, ``/usr/local/cuda``
    and the CUDA runtime wheels beside torch (``nvidia/cu13``, ``nvidia/cuda_runtime``), in that order.
    """
    import torch

    try:
        from torch.utils import cpp_extension
    except Exception:  # noqa: BLE001 - torch's extension module is optional here
        cpp_extension = None
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), getattr(cpp_extension, "CUDA_HOME", None),
             "/usr/local/cuda"]
    site = Path(torch.__file__).resolve().parent.parent
    roots += [str(p) for p in sorted(site.glob("nvidia/cu*"), reverse=True)]
    roots.append(str(site / "nvidia" / "cuda_runtime"))
    for root in roots:
        if root and (Path(root) / "include" / "cuda_runtime_api.h").is_file():
            return Path(root) / "include"
    return None


def toolchain_problem() -> str | None:
    """Why the native op cannot be built here (one line), or None when everything it needs is present."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is built without CUDA"
    if not list((Path(torch.__file__).resolve().parent / "lib").glob("libc10_cuda.*")):
        return f"torch {torch.__version__} has no libc10_cuda library"
    try:
        from torch.utils import cpp_extension
    except Exception as exc:  # noqa: BLE001
        return f"torch.utils.cpp_extension does not import: {exc}"
    if not cpp_extension.is_ninja_available():
        return "ninja is not installed (pip install ninja)"
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return f"no C++ compiler: {cxx!r} is not on PATH"
    if cuda_include_dir() is None:
        return "no CUDA headers (cuda_runtime_api.h): set CUDA_HOME"
    return None


def sources_sha256() -> str:
    """sha256 over ``op.cpp`` and ``attn_abi.h`` (each followed by a NUL byte), hex."""
    digest = hashlib.sha256()
    for source in SOURCES:
        digest.update((HERE / source).read_bytes() + b"\0")
    return digest.hexdigest()


def build_record() -> dict[str, Any]:
    """What a native library built in this process depends on (the fields of :data:`MATCH_FIELDS`), plus the
    Python version (for information: the library does not use Python's C API)."""
    import torch

    return {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "cxx11_abi": bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)), "machine": platform.machine(),
            "system": platform.system(), "sources_sha256": sources_sha256(),
            "python": platform.python_version()}


def record_mismatch(record: dict[str, Any]) -> str | None:
    """Why a library built as ``record`` says must not be loaded in this process (one line), or None."""
    here = build_record()
    wrong = [f for f in MATCH_FIELDS if record.get(f) != here[f]]
    if not wrong:
        return None
    labels = {"torch": "torch", "torch_cuda": "torch's CUDA", "cxx11_abi": "the C++11 ABI flag",
              "machine": "the CPU architecture", "system": "the OS", "sources_sha256": "the sha256 of op.cpp + "
              "attn_abi.h"}
    return "; ".join(f"{labels[f]}: built for {record.get(f)!r}, this process has {here[f]!r}" for f in wrong)


def shipped_library(package_dir: Path, record: dict[str, Any] | None) -> Path:
    """The library ``attnq export`` shipped (``record`` is kernel.json's ``native`` entry), checked.

    Raises:
        RuntimeError: none shipped (with the reason the export gave), a record the running process does not
        match (:func:`record_mismatch`), a missing file or one whose sha256 differs from the record's.
    """
    if not record or not record.get("file"):
        raise RuntimeError((record or {}).get("reason") or "the package holds no native library")
    mismatch = record_mismatch(record)
    if mismatch is not None:
        raise RuntimeError(mismatch)
    path = package_dir / record["file"]
    if not path.is_file():
        raise RuntimeError(f"{record['file']} is missing; reinstall")
    if record.get("sha256") and hashlib.sha256(path.read_bytes()).hexdigest() != record["sha256"]:
        raise RuntimeError(f"{record['file']} differs from the library recorded in kernel.json; reinstall")
    return path


def _reason(exc: BaseException) -> str:
    """The last informative lines of a failed build, on one line (cpp_extension puts the compiler's output in)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return " | ".join((errors or lines)[-3:])[:600] or type(exc).__name__


def _compile(build_dir: Path, ext: str, abi_version: int, verbose: bool) -> Path:
    """Build ``op.cpp`` into ``build_dir/<ext>.so`` with cpp_extension; RuntimeError (one line) on failure."""
    problem = toolchain_problem()
    if problem is not None:
        raise RuntimeError(problem)
    from torch.utils import cpp_extension

    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        cpp_extension.load(
            name=ext, sources=[str(HERE / "op.cpp")], build_directory=str(build_dir),
            # __FILE__ (in the dispatcher's "registered at") reads native/op.cpp wherever the build ran
            extra_cflags=["-O2", f"-DATTN_HARNESS_ABI_VERSION={int(abi_version)}", f"-ffile-prefix-map={HERE}=native"],
            extra_include_paths=[str(HERE), str(cuda_include_dir())], extra_ldflags=["-lc10_cuda"],
            with_cuda=False, is_python_module=False, verbose=verbose,
        )
    except Exception as exc:  # noqa: BLE001 - any failure means "not available", said in one line
        raise RuntimeError(f"the build failed: {_reason(exc)}") from exc
    found = sorted(build_dir.glob(f"{ext}*.so"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise RuntimeError(f"the build left no {ext}.so in {build_dir}")
    return found[-1]


def _key(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def build(name: str, abi_version: int, *, verbose: bool = False) -> Path:
    """Compile ``op.cpp`` for package ``name`` (or reuse the cached build), load it, return the .so's path.

    Raises:
        RuntimeError: what is missing (:func:`toolchain_problem`) or the compiler's / loader's complaint.
    """
    import torch
    from torch.utils import cpp_extension

    key = _key(name, str(abi_version), torch.__version__, str(torch.version.cuda), sys.version,
               str(cuda_include_dir()), sources_sha256())
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or getattr(
        cpp_extension, "get_default_build_root", lambda: str(Path.home() / ".cache" / "torch_extensions"))()
    return _compile(Path(root) / "attnq_native" / f"{name}-{key}", f"{name}_native_{key}", abi_version, verbose)


def build_for_export(cache_dir: Path, abi_version: int) -> dict[str, Any]:
    """Build the library ``attnq export`` ships (or take it from ``cache_dir``); returns its record.

    The record: :func:`build_record`'s fields, ``library`` (absolute path of the built .so), ``sha256``,
    ``compiler`` (the first line of ``$CXX --version``), ``build_time_s`` and ``cache_hit``. The cache
    entry ``cache_dir/<key>`` is keyed by everything in the record but the time.

    Raises:
        RuntimeError: as :func:`build`.
    """
    t0 = time.perf_counter()
    cxx = os.environ.get("CXX", "c++")
    try:
        compiler = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60,
                                  check=False).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        compiler = cxx
    record = build_record()
    key = _key(str(abi_version), json.dumps(record, sort_keys=True), compiler, str(cuda_include_dir()))
    entry = cache_dir / key
    done = entry / "record.json"
    if done.is_file():
        cached = json.loads(done.read_text())
        lib = Path(cached["library"])
        if lib.is_file() and hashlib.sha256(lib.read_bytes()).hexdigest() == cached["sha256"]:
            return {**cached, "cache_hit": True, "build_time_s": round(time.perf_counter() - t0, 2)}
    lib = _compile(entry, f"attnq_native_{key}", abi_version, verbose=False)
    record.update(library=str(lib), sha256=hashlib.sha256(lib.read_bytes()).hexdigest(), compiler=compiler,
                  cache_hit=False, build_time_s=round(time.perf_counter() - t0, 2))
    tmp = entry / f"record.json.{os.getpid()}"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, done)
    return record


def _address(fn: Any) -> int | None:
    return None if fn is None else ctypes.cast(fn, ctypes.c_void_p).value


class NativeOp:
    """A loaded native library: attach a device's kernel library, register the op's kernel.

    Raises (constructor):
        OSError: the loader refused the library (e.g. a libstdc++ older than the compiler's that built it).
    """

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))
        self.path = path
        self._attach = lib.attnq_native_attach
        self._attach.restype = ctypes.c_int
        self._attach.argtypes = [ctypes.c_int, *[ctypes.c_void_p] * 4, ctypes.c_int]
        self._register = lib.attnq_native_register
        self._register.restype = ctypes.c_int
        self._register.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        self._lib = lib

    def attach(self, device: int, fwd: Any, workspace_bytes: Any, last_error: Any, error_string: Any,
               num_sms: int) -> bool:
        """Hand the native op ``device``'s library functions (ctypes function pointers); False when refused
        (device index >= 64, a missing function): that device then stays on the Python implementation."""
        return self._attach(device, _address(fwd), _address(workspace_bytes), _address(last_error),
                            _address(error_string), int(num_sms)) == 0

    def register(self, namespace: str, dispatch_key: str = "CUDA") -> None:
        """Register the native kernel of ``<namespace>::fwd`` for ``dispatch_key`` (for the process's life).

        Raises:
            RuntimeError: the dispatcher's refusal (e.g. a kernel whose signature is not the schema's).
        """
        error = ctypes.create_string_buffer(2048)
        if self._register(namespace.encode(), dispatch_key.encode(), error, len(error)) != 0:
            raise RuntimeError(f"registering {namespace}::fwd for {dispatch_key} failed: "
                               f"{error.value.decode(errors='replace')}")


def _main(argv: list[str]) -> int:
    """``python native/__init__.py --cache DIR --abi-version N``: :func:`build_for_export`, its record as one
    JSON line on stdout; exit 0, or 1 with ``{"error": reason}``."""
    import argparse

    parser = argparse.ArgumentParser(prog="native/__init__.py", description=_main.__doc__)
    parser.add_argument("--cache", required=True, help="directory of the cached builds")
    parser.add_argument("--abi-version", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        record = build_for_export(Path(args.cache).resolve(), args.abi_version)
    except Exception as exc:  # noqa: BLE001 - one line for the exporter
        print(json.dumps({"error": str(exc) or type(exc).__name__}))
        return 1
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
