"""An attention forward kernel made with attnq, behind FlashAttention-3's interface.

Written by ``attnq export``; ``kernel.json`` next to this file names the kernel (source file and its
sha256), the archs its libraries were built for and the attnq version that built them.

Two entry points:

* ``flash_attn_func(q, k, v, softmax_scale=None, causal=False, ...)``: FlashAttention-3's signature
  and conventions (``hopper/flash_attn_interface.py``): q ``[batch, seqlen_q, num_heads_q, head_dim]``,
  k and v ``[batch, seqlen_k, num_heads_kv, head_dim]`` (bf16 or fp16; ``num_heads_q % num_heads_kv ==
  0``: MHA, GQA, MQA), causal masks aligned bottom-right, returns o ``[batch, seqlen_q, num_heads_q,
  head_dim]`` and, with ``return_attn_probs=True``, also lse ``[batch, num_heads_q, seqlen_q]`` fp32
  (natural log of the softmax denominator, scale included; ``+inf`` for a row that sees no key).
  ``num_splits``, ``pack_gqa``, ``deterministic`` are scheduling hints: accepted, the kernel schedules
  itself (its forward pass is deterministic); ``sm_margin`` SMs are left out of the SM count the kernel
  is told. Arguments the kernel cannot honour raise :class:`UnsupportedArgument` (a
  ``NotImplementedError``) naming them: ``qv``, ``q_descale``/``k_descale``/``v_descale``,
  ``window_size`` other than ``(-1, -1)``, ``attention_chunk``, ``softcap``, ``head_dim_v`` (v's head_dim
  differs from q's) and ``dtype`` (other than bf16/fp16). Forward only: a backward pass through it
  raises ``NotImplementedError``.
* ``torch.ops.<package>.fwd(q, k, v, softmax_scale, causal, sm_margin=0) -> (out, lse)``: the same
  computation as a torch custom op (``torch.library``) with a fake implementation, so
  ``torch.compile(fullgraph=True)`` traces it without graph breaks; it launches on the current
  stream of q's device (under a device guard), takes its workspace from torch's caching allocator
  and never synchronizes, so it can be captured in a CUDA graph.

The kernel library is loaded with ctypes on first use (importing needs no GPU) and called through
attnq's C ABI (``attn_abi.h``, version in kernel.json): ``int attn_fwd(const attn_fwd_params*,
cudaStream_t)``, nonzero meaning "configuration not supported" (raised as :class:`KernelDeclined`).

The op's CUDA kernel has two implementations with the same checks, exceptions and launch: native
(``native/op.cpp``, C++; on an H200 +4.48 us per call over a direct ``attn_fwd`` call) and Python (+16.5 us).
The native one serves by default: the library ``attnq export`` shipped (``native/op.so``) is loaded at
import when this process matches what kernel.json's ``native`` entry records (torch and its CUDA version,
C++ ABI, CPU architecture, OS, sources) and its sha256; otherwise ``op.cpp`` is built just in time on the
first use on a GPU (never at import; ``native/__init__.py`` says how and where); otherwise the Python one
serves and one ``RuntimeWarning`` says why. A package exported with ``--no-native`` serves the Python one
unless asked (``<PACKAGE>_NATIVE=1`` or :func:`load_native`); ``<PACKAGE>_NATIVE=0`` keeps the Python one
and loads or builds nothing. :func:`impl_kind` and :func:`impl_info` say which serves and why; the
decisions are logged at INFO (``logging``, logger ``<package>``).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import math
import os
import re
import struct
import threading
import warnings
from pathlib import Path
from typing import Any

import torch

_HERE = Path(__file__).resolve().parent
#: What ``attnq export`` recorded: name, version, kernel, source_sha256, abi_version, libraries {arch: {file, sha256}}.
MANIFEST: dict[str, Any] = json.loads((_HERE / "kernel.json").read_text())
NAME: str = MANIFEST["name"]
ABI_VERSION: int = int(MANIFEST["abi_version"])

#: 0 (or false, no, off): the Python implementation only; 1 (or true, yes, on): the native one even in a package
#: exported with --no-native; unset (or anything else): the default order (module docstring).
NATIVE_ENV: str = f"{NAME.upper()}_NATIVE"
#: kernel.json's record of the native library attnq export built: status ("built", "skipped", "unavailable"),
#: reason, and when built: file, sha256, torch, torch_cuda, cxx11_abi, machine, system, sources_sha256, ...
NATIVE_RECORD: dict[str, Any] = MANIFEST.get("native") or {}

__all__ = ["MANIFEST", "NATIVE_ENV", "NATIVE_RECORD", "KernelDeclined", "NoGpuError", "UnsupportedArgument",
           "flash_attn_func", "fwd", "impl_info", "impl_kind", "load_native"]

_log = logging.getLogger(NAME)

_DTYPES = {torch.bfloat16: 0, torch.float16: 1}  # attn_dtype in attn_abi.h

# attn_fwd_params (attn_abi.h, 224 bytes on x86-64, no padding): abi_version, dtype; q k v o lse pointers;
# q/k/v/o batch, row, head strides (elements); batch, seqlen_q, seqlen_k, num_heads_q, num_heads_kv,
# head_dim; softmax_scale; causal; workspace pointer, workspace_bytes; num_sms; then reserved[7] (zero).
_PARAMS = struct.Struct("<ii5Q12q6ifiQQi")
_WORKSPACE = struct.Struct("<QQ")
_WORKSPACE_OFFSET = 176
PARAMS_BYTES = 224


class UnsupportedArgument(NotImplementedError):
    """Arguments of FlashAttention-3's interface this kernel cannot honour; ``arguments`` lists their names."""

    def __init__(self, arguments: list[str], detail: str) -> None:
        super().__init__(f"{NAME}: not supported by this kernel: {', '.join(arguments)} ({detail})")
        self.arguments = list(arguments)


class KernelDeclined(NotImplementedError):
    """The kernel's ``attn_fwd`` returned a nonzero status: it does not support this configuration."""

    def __init__(self, status: int, config: str) -> None:
        super().__init__(f"{NAME}: the kernel does not support {config} (attn_fwd returned {status})")
        self.status = status


class NoGpuError(RuntimeError):
    """No CUDA GPU is usable, or none that runs one of the archs this package was built for."""


# --------------------------------------------------------------------------------------------------
# The library: one per device, loaded on first use
# --------------------------------------------------------------------------------------------------


def _arch_fits(arch: str, major: int, minor: int) -> bool:
    """True when a cubin built for ``arch`` runs on compute capability ``major.minor``.

    ``sm_XYa`` (arch-specific) runs on exactly X.Y; ``sm_XYf`` (family) and ``sm_XY`` on X.Z for Z >= Y.
    """
    m = re.fullmatch(r"sm_(\d+)(\d)([af]?)", arch)
    if not m:
        return False
    a_major, a_minor, suffix = int(m.group(1)), int(m.group(2)), m.group(3)
    if suffix == "a":
        return (a_major, a_minor) == (major, minor)
    return a_major == major and a_minor <= minor


class _Kernel:
    """A loaded kernel library: ``fwd(params_address, stream) -> status``, workspace bytes, launch errors."""

    def __init__(self, arch: str, path: Path, sha256: str | None) -> None:
        data = path.read_bytes()
        if sha256 and hashlib.sha256(data).hexdigest() != sha256:
            raise RuntimeError(f"{NAME}: {path} differs from the library recorded in kernel.json; reinstall")
        self.arch = arch
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        lib.attn_abi_version.restype = ctypes.c_int
        got = lib.attn_abi_version()
        if got != ABI_VERSION:
            raise RuntimeError(f"{NAME}: {path.name} speaks ABI version {got}, kernel.json says {ABI_VERSION}")
        self.fwd = lib.attn_fwd
        self.fwd.restype = ctypes.c_int
        self.fwd.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.ws = getattr(lib, "attn_fwd_workspace_bytes", None)
        if self.ws is not None:
            self.ws.restype = ctypes.c_size_t
            self.ws.argtypes = [ctypes.c_void_p]
        # the CUDA runtime the library links (found through its own dependency scope)
        self._last_error = lib.cudaGetLastError
        self._last_error.restype = ctypes.c_int
        self._error_string = lib.cudaGetErrorString
        self._error_string.restype = ctypes.c_char_p
        self._lib = lib

    def launch_error(self) -> str | None:
        """The launch error ``attn_fwd`` left behind (cudaGetLastError: no synchronization), or None."""
        code = self._last_error()
        return None if code == 0 else f"{self._error_string(code).decode()} (cudaError {code})"


_kernels: dict[int, _Kernel] = {}
_num_sms: dict[int, int] = {}
_load_lock = threading.Lock()
_local = threading.local()


def _kernel(device: int) -> _Kernel:
    """The library for ``device`` (loaded once per device). Raises NoGpuError when no arch fits."""
    kern = _kernels.get(device)
    if kern is not None:
        return kern
    with _load_lock:
        if device not in _kernels:
            major, minor = torch.cuda.get_device_capability(device)
            libs = MANIFEST["libraries"]
            fits = [a for a in libs if _arch_fits(a, major, minor)]
            if not fits:
                name = torch.cuda.get_device_name(device)
                raise NoGpuError(f"{NAME}: built for {', '.join(libs)}; GPU {device} ({name}) has compute capability "
                                 f"{major}.{minor}: export again with --arch for it")
            arch = min(fits, key=lambda a: (not a.endswith("a"), a.endswith("f")))  # the arch-specific build first
            kern = _Kernel(arch, _HERE / libs[arch]["file"], libs[arch].get("sha256"))
            _num_sms[device] = torch.cuda.get_device_properties(device).multi_processor_count
            _kernels[device] = kern
            if _native is not None:
                _attach(_native, device, kern)
            elif not _jit_tried and _jit_wanted():
                # the first use on a GPU: build (or reuse) the native op; attaches every library. This may run
                # inside a dispatch of the op's Python kernel, which therefore stays registered (shadowed).
                _enable_jit(drop_python=False)
    return _kernels[device]


def _params_buffer() -> tuple[ctypes.Array, int]:
    """This thread's attn_fwd_params buffer (zeroed once: reserved[] stays 0) and its address."""
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = ctypes.create_string_buffer(PARAMS_BYTES)
        _local.buf = buf
        _local.addr = ctypes.addressof(buf)
    return buf, _local.addr


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
#: A device guard that costs one C call each way (torch.cuda.device parses its argument in Python).
_DeviceGuard = getattr(torch.cuda, "_DeviceGuard", torch.cuda.device)


_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)


def _stream(device: int) -> int:
    """The current CUDA stream of ``device`` as an integer handle (what torch launches on, also under capture)."""
    if _raw_stream is not None:
        return _raw_stream(device)
    return torch.cuda.current_stream(device).cuda_stream  # pragma: no cover - older torch


# --------------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------------


def _check_tensors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Shape, dtype and device rules (ValueError / UnsupportedArgument / NoGpuError), before any work."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"{NAME}: q, k, v must be 4-D [batch, seqlen, heads, head_dim]; got shapes "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    b, _, hq, d = q.shape
    bk, sk, hk, dk = k.shape
    if bk != b or dk != d or tuple(v.shape[:3]) != (bk, sk, hk):
        raise ValueError(f"{NAME}: incompatible shapes q={tuple(q.shape)} k={tuple(k.shape)} v={tuple(v.shape)}")
    if hk == 0 or hq % hk:
        raise ValueError(f"{NAME}: num_heads_q={hq} must be a multiple of num_heads_kv={hk}")
    if v.shape[3] != d:
        raise UnsupportedArgument(["head_dim_v"], f"v has head_dim {v.shape[3]}, q and k have {d}")
    if q.dtype not in _DTYPES:
        raise UnsupportedArgument(["dtype"], f"{q.dtype}: the kernel takes torch.bfloat16 or torch.float16")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"{NAME}: q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")


def _check_device(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
    """q's CUDA device index; NoGpuError without a GPU, ValueError for CPU or mixed-device tensors."""
    if not q.is_cuda:
        if not torch.cuda.is_available():
            raise NoGpuError(f"{NAME}: no CUDA GPU is available (torch.cuda.is_available() is False); this "
                             f"package runs its kernel on NVIDIA GPUs ({', '.join(MANIFEST['libraries'])})")
        raise ValueError(f"{NAME}: q, k, v must be CUDA tensors; q is on {q.device}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"{NAME}: q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    return q.device.index if q.device.index is not None else torch.cuda.current_device()


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


# --------------------------------------------------------------------------------------------------
# The custom op
# --------------------------------------------------------------------------------------------------


#: Workspace bytes per launch configuration (attn_fwd_workspace_bytes depends on the shape, dtype, causal and
#: the SM count only): one ctypes call per new configuration instead of one per call.
_ws_bytes: dict[tuple, int] = {}


def _launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool, sm_margin: int,
            device: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Allocate o and lse, launch on the current stream of ``device`` (no sync); inputs already checked.

    The per-call host path is kept short (issue 17's target: < 5 us over a direct ``attn_fwd`` call): two
    allocations from torch's caching allocator, one struct pack, the ``attn_fwd`` call and the launch-error
    read; the workspace size is cached per configuration.
    """
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    o = q.new_empty((b, sq, hq, d))
    lse = q.new_empty((b, hq, sq), dtype=torch.float32)
    if o.numel() == 0:
        return o, lse
    if sk == 0:  # every row sees no key (attn_abi.h): o = 0, lse = +inf
        return o.zero_(), lse.fill_(math.inf)
    if q.stride(3) != 1:
        q = q.contiguous()
    if k.stride(3) != 1:
        k = k.contiguous()
    if v.stride(3) != 1:
        v = v.contiguous()
    with _DeviceGuard(device):
        kern = _kernel(device)
        buf, addr = _params_buffer()
        num_sms = max(1, _num_sms[device] - max(0, int(sm_margin)))
        qs, ks, vs, os_ = q.stride(), k.stride(), v.stride(), o.stride()
        _PARAMS.pack_into(
            buf, 0, ABI_VERSION, _DTYPES[q.dtype],
            q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
            qs[0], qs[1], qs[2], ks[0], ks[1], ks[2], vs[0], vs[1], vs[2], os_[0], os_[1], os_[2],
            b, sq, sk, hq, hk, d, softmax_scale, 1 if causal else 0, 0, 0, num_sms,
        )
        key = (device, q.dtype, b, sq, sk, hq, hk, d, bool(causal), num_sms, qs, ks, vs)
        nbytes = _ws_bytes.get(key)
        if nbytes is None:
            nbytes = int(kern.ws(addr)) if kern.ws is not None else 0
            _ws_bytes[key] = nbytes
        if nbytes:
            workspace = q.new_empty(nbytes, dtype=torch.uint8)  # caching allocator (graph pool under capture)
            _WORKSPACE.pack_into(buf, _WORKSPACE_OFFSET, workspace.data_ptr(), nbytes)
        status = kern.fwd(addr, _stream(device))
        if status != 0:
            raise KernelDeclined(status, f"batch={b} seqlen_q={sq} seqlen_k={sk} num_heads_q={hq} "
                                         f"num_heads_kv={hk} head_dim={d} dtype={q.dtype} causal={bool(causal)}")
        if (err := kern.launch_error()) is not None:
            raise RuntimeError(f"{NAME}: the kernel launch failed: {err}")
    return o, lse


def _fwd_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
              sm_margin: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The op on real tensors: validate, allocate o and lse, launch on the current stream (no sync)."""
    _check_tensors(q, k, v)
    return _launch(q, k, v, softmax_scale, causal, sm_margin, _check_device(q, k, v))


def _fwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
              sm_margin: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Shapes, dtypes and layout of the op's outputs without running it (torch.compile's tracing)."""
    _check_tensors(q, k, v)
    b, sq, hq, d = q.shape
    return q.new_empty((b, sq, hq, d)), q.new_empty((b, hq, sq), dtype=torch.float32)


_SCHEMA = "(Tensor q, Tensor k, Tensor v, float softmax_scale, bool causal, int sm_margin=0) -> (Tensor out, Tensor lse)"
_LIB = torch.library.Library(NAME, "DEF")
_LIB.define("fwd" + _SCHEMA)
_LIB.impl("fwd", _fwd_impl, "CPU")  # only to say plainly that a GPU is needed
_LIB.impl("fwd", torch.library.fallthrough_kernel, "Autograd")  # not differentiable; see _ForwardOnly
torch.library.register_fake(f"{NAME}::fwd", _fwd_fake, lib=_LIB)
# The Python implementation under a name of its own: the native kernel hands it every input it does not serve
# itself (errors, empty tensors, a declined configuration), so the exceptions and their messages are these.
_LIB.define("_fwd_python" + _SCHEMA)
_LIB.impl("_fwd_python", _fwd_impl, "CUDA")
#: The Python implementation as the op's CUDA kernel, when registered (_register_python: when the shipped
#: native library is not used).
_PY_CUDA: Any = None

#: ``fwd(q, k, v, softmax_scale, causal, sm_margin=0) -> (out, lse)``: the custom op (torch.ops.<package>.fwd).
fwd = getattr(torch.ops, NAME).fwd.default


# --------------------------------------------------------------------------------------------------
# The native implementation (native/): the shipped library at import, else a build on first use on a GPU
# --------------------------------------------------------------------------------------------------

_native: Any = None  # native.NativeOp while it serves the op's CUDA kernel
_native_source: str | None = None  # "shipped" or "jit" while it serves
_native_reason: str | None = None  # why the Python implementation serves (None while the native one does)
_shipped_reason: str | None = None  # why the shipped library is not used (None when it is)
_jit_tried = False


def impl_kind() -> str:
    """``"native"`` while native/op.cpp serves the op's CUDA kernel, else ``"python"`` (module docstring)."""
    return "python" if _native is None else "native"


def impl_info() -> dict[str, Any]:
    """Which implementation serves the op's CUDA kernel, and why.

    Returns:
        ``{"impl": "native" | "python", "source": "shipped" | "jit" | None, "library": path of the loaded
        native .so or None, "reason": str | None}``; ``reason`` says why the Python implementation serves
        (impl python) or why the shipped library is not the one serving (source jit), else None.
    """
    reason = _native_reason if _native is None else (None if _native_source == "shipped" else
                                                     f"shipped library not used: {_shipped_reason}")
    return {"impl": impl_kind(), "source": _native_source, "library": None if _native is None else
            str(_native.path), "reason": reason}


def load_native() -> str:
    """Make the native op serve now if it can: the shipped library when it matched at import, else build (or
    reuse the cached build of) ``native/op.cpp`` and register it, even in a package exported with --no-native.

    Needs no GPU. Returns :func:`impl_kind`; a failed build warns once (RuntimeWarning, naming the reason) and
    leaves the Python implementation in place. Tried once per process; refused with ``<PACKAGE>_NATIVE=0``.
    """
    with _load_lock:
        _enable_jit(drop_python=True)
    return impl_kind()


def _native_setting() -> str:
    """``<PACKAGE>_NATIVE``: "off" (0/false/no/off), "on" (1/true/yes/on) or "auto" (unset or anything else)."""
    value = os.environ.get(NATIVE_ENV, "").strip().lower()
    return "off" if value in ("0", "false", "no", "off") else "on" if value in ("1", "true", "yes", "on") else "auto"


def _jit_wanted() -> bool:
    """Build native/op.cpp on the first use on a GPU? Yes unless refused by the environment or --no-native."""
    setting = _native_setting()
    return setting == "on" or (setting == "auto" and NATIVE_RECORD.get("status") != "skipped")


def _attach(op: Any, device: int, kern: _Kernel) -> bool:
    return op.attach(device, kern.fwd, kern.ws, kern._last_error, kern._error_string, _num_sms[device])


def _register_python() -> None:
    """Register the Python implementation as the op's CUDA kernel (a Library of its own: it can go alone)."""
    global _PY_CUDA
    _PY_CUDA = torch.library.Library(NAME, "IMPL", "CUDA")
    _PY_CUDA.impl("fwd", _fwd_impl, "CUDA")


def _load_shipped() -> None:
    """At import: the shipped native library as the op's CUDA kernel, or the Python implementation (and why)."""
    global _native, _native_source, _native_reason, _shipped_reason
    if _native_setting() == "off":
        _native_reason = _shipped_reason = f"disabled by {NATIVE_ENV}={os.environ[NATIVE_ENV].strip()}"
        _log.info("torch.ops.%s.fwd: Python implementation (%s)", NAME, _native_reason)
        _register_python()
        return
    try:
        from . import native

        op = native.NativeOp(native.shipped_library(_HERE, NATIVE_RECORD))
        op.register(NAME, "CUDA")
    except Exception as exc:  # noqa: BLE001 - whatever the cause, the next step of the order serves
        _shipped_reason = str(exc) or type(exc).__name__
        _native_reason = f"shipped library: {_shipped_reason}" + (
            "; the native op is built on the first use on a GPU (or by load_native())" if _jit_wanted() else
            f"; {NATIVE_ENV}=1 or load_native() builds the native op")
        _log.info("torch.ops.%s.fwd: Python implementation for now (%s)", NAME, _native_reason)
        _register_python()
        return
    _native, _native_source = op, "shipped"
    _log.info("torch.ops.%s.fwd: native implementation, shipped library %s", NAME, op.path)


def _enable_jit(*, drop_python: bool) -> None:
    """Build, load and register native/op.cpp once (caller holds ``_load_lock``); on failure, warn once.

    ``drop_python``: unregister the Python kernel it shadows (not while a call of it may be running).
    """
    global _native, _native_source, _native_reason, _jit_tried
    if _native is not None or _jit_tried or _native_setting() == "off":
        return
    _jit_tried = True
    _log.info("torch.ops.%s.fwd: building the native implementation (shipped library: %s)", NAME, _shipped_reason)
    try:
        from . import native

        op = native.NativeOp(native.build(NAME, ABI_VERSION))
        for device, kern in _kernels.items():
            _attach(op, device, kern)
        op.register(NAME, "CUDA")  # the newest kernel registered for a key serves it
    except Exception as exc:  # noqa: BLE001 - whatever the cause, the Python implementation stays
        _native_reason = f"shipped library: {_shipped_reason}; build: {str(exc) or type(exc).__name__}"
        warnings.warn(f"{NAME}: the native op is not available ({_native_reason}); the Python implementation "
                      f"serves torch.ops.{NAME}.fwd (set {NATIVE_ENV}=0 to skip the attempt)", RuntimeWarning,
                      stacklevel=3)
        return
    _native, _native_source, _native_reason = op, "jit", None
    _log.info("torch.ops.%s.fwd: native implementation, built %s", NAME, op.path)
    if drop_python and _PY_CUDA is not None:
        _PY_CUDA._destroy()  # the Python kernel, now shadowed, goes (torch.ops.<package>._fwd_python stays)


_load_shipped()


class _ForwardOnly(torch.autograd.Function):
    """The op for inputs that require grad: the output joins the graph, and backward says it cannot."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
                sm_margin: int) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse = fwd(q, k, v, softmax_scale, causal, sm_margin)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise NotImplementedError(f"{NAME}: backward is not available: the exported kernel computes the "
                                  "attention forward pass only")


# --------------------------------------------------------------------------------------------------
# FlashAttention-3's function
# --------------------------------------------------------------------------------------------------


def flash_attn_func(
    q,
    k,
    v,
    softmax_scale=None,
    causal=False,
    qv=None,
    q_descale=None, k_descale=None, v_descale=None,
    window_size=(-1, -1),
    attention_chunk=0,
    softcap=0.0,
    num_splits=1,
    pack_gqa=None,
    deterministic=False,
    sm_margin=0,
    return_attn_probs=False,
):
    """Attention forward with FlashAttention-3's signature (see the module docstring for the conventions).

    Args:
        q: ``[batch, seqlen_q, num_heads_q, head_dim]`` bf16 or fp16, CUDA.
        k, v: ``[batch, seqlen_k, num_heads_kv, head_dim]``, same dtype and device; GQA/MQA when
            ``num_heads_kv < num_heads_q`` (query head h reads kv head ``h // (num_heads_q // num_heads_kv)``).
        softmax_scale: scale of q·k before the softmax; default ``head_dim ** -0.5``.
        causal: bottom-right aligned mask: query i sees key j iff ``j <= i + seqlen_k - seqlen_q``; a row
            that sees no key gives o = 0 (and lse = +inf).
        num_splits, pack_gqa, deterministic: hints; accepted, the kernel chooses its own schedule.
        sm_margin: SMs to leave free: the kernel is told ``num_sms - sm_margin`` SMs.
        return_attn_probs: also return lse.
        qv, q_descale, k_descale, v_descale, window_size, attention_chunk, softcap: only their defaults
            are supported.
    Returns:
        ``out`` ``[batch, seqlen_q, num_heads_q, head_dim]`` (q's dtype), or ``(out, lse)`` with lse
        ``[batch, num_heads_q, seqlen_q]`` fp32 in natural log when ``return_attn_probs``.
    Raises:
        UnsupportedArgument (NotImplementedError): an argument the kernel cannot honour, named.
        KernelDeclined (NotImplementedError): the kernel returned "unsupported" for this configuration.
        NoGpuError (RuntimeError): no CUDA GPU, or none whose arch this package was built for.
        ValueError: shapes, dtypes or devices that do not fit together.
    """
    unsupported = [name for name, value in (("qv", qv), ("q_descale", q_descale), ("k_descale", k_descale),
                                             ("v_descale", v_descale)) if value is not None]
    if tuple(window_size) != (-1, -1):
        unsupported.append("window_size")
    if attention_chunk:
        unsupported.append("attention_chunk")
    if softcap:
        unsupported.append("softcap")
    if v.shape[-1] != q.shape[-1]:
        unsupported.append("head_dim_v")
    if q.dtype not in _DTYPES:
        unsupported.append("dtype")
    if unsupported:
        raise UnsupportedArgument(unsupported, "the kernel takes only qv=None, q/k/v_descale=None, window_size="
                                               "(-1, -1), attention_chunk=0, softcap=0.0, v's head_dim equal to q's "
                                               f"and dtype bf16 or fp16 (got {q.dtype})")
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        out, lse = _ForwardOnly.apply(q, k, v, softmax_scale, bool(causal), sm_margin)
    elif _native is not None or _is_compiling() or not (q.is_cuda and type(q) is torch.Tensor):
        out, lse = fwd(q, k, v, softmax_scale, bool(causal), sm_margin)  # native, traced (torch.compile), or a subclass
    else:
        # eager: the op's body without the dispatcher's round trip into Python (same checks, same launch)
        out, lse = _fwd_impl(q, k, v, softmax_scale, bool(causal), sm_margin)
    return (out, lse) if return_attn_probs else out
