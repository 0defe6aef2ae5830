"""The op's native (C++) CUDA implementation: source, build and loading (written by ``attnq export``).

``op.cpp`` (with the copy of ``attn_abi.h`` beside it, the ABI the kernel libraries speak) is compiled on
the package's first use on a GPU, never at import, with ``torch.utils.cpp_extension.load`` (ninja, the
C++ compiler ``$CXX`` or ``c++``, torch's headers and CUDA's ``cuda_runtime_api.h``) into
``<$TORCH_EXTENSIONS_DIR or torch's default extension root>/attnq_native/<package>-<key>``; ``key`` hashes
the two sources, the package name and ABI version, the torch, CUDA and Python versions and the CUDA
header directory, so a new torch or a new export builds afresh and every later process reuses the build
(cpp_extension holds a file lock while it builds). The library is loaded without a Python module and
driven with ctypes (:class:`NativeOp`): the kernel library is not linked into it, its functions are
passed by address, so the .so the Python side loaded (sha256 and ABI version checked) is the one called.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: The files of the build, hashed into its cache key.
SOURCES = ("op.cpp", "attn_abi.h")


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


def _reason(exc: BaseException) -> str:
    """The last informative lines of a failed build, on one line (cpp_extension puts the compiler's output in)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return " | ".join((errors or lines)[-3:])[:600] or type(exc).__name__


def build(name: str, abi_version: int, *, verbose: bool = False) -> Path:
    """Compile ``op.cpp`` for package ``name`` (or reuse the cached build), load it, return the .so's path.

    Raises:
        RuntimeError: what is missing (:func:`toolchain_problem`) or the compiler's / loader's complaint.
    """
    problem = toolchain_problem()
    if problem is not None:
        raise RuntimeError(problem)
    import torch
    from torch.utils import cpp_extension

    include = cuda_include_dir()
    digest = hashlib.sha256()
    for part in (name, str(abi_version), torch.__version__, str(torch.version.cuda), sys.version, str(include)):
        digest.update(part.encode() + b"\0")
    for source in SOURCES:
        digest.update((HERE / source).read_bytes() + b"\0")
    key = digest.hexdigest()[:16]
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or getattr(
        cpp_extension, "get_default_build_root", lambda: str(Path.home() / ".cache" / "torch_extensions"))()
    build_dir = Path(root) / "attnq_native" / f"{name}-{key}"
    build_dir.mkdir(parents=True, exist_ok=True)
    ext = f"{name}_native_{key}"
    try:
        cpp_extension.load(
            name=ext, sources=[str(HERE / "op.cpp")], build_directory=str(build_dir),
            extra_cflags=["-O2", f"-DATTN_HARNESS_ABI_VERSION={int(abi_version)}"],
            extra_include_paths=[str(HERE), str(include)], extra_ldflags=["-lc10_cuda"],
            with_cuda=False, is_python_module=False, verbose=verbose,
        )
    except Exception as exc:  # noqa: BLE001 - any failure means "not available", said in one line
        raise RuntimeError(f"the build failed: {_reason(exc)}") from exc
    found = sorted(build_dir.glob(f"{ext}*.so"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise RuntimeError(f"the build left no {ext}.so in {build_dir}")
    return found[-1]


def _address(fn: Any) -> int | None:
    return None if fn is None else ctypes.cast(fn, ctypes.c_void_p).value


class NativeOp:
    """The loaded native library (``build``'s .so): attach a device's kernel library, register the op's kernel."""

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
