"""ctypes mirror of ``kernels/attn_abi.h`` and the loader for a built candidate library.

Only the worker process (and GPU tests) call :func:`load_kernel`: loading a library runs its code.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import ABI_HEADER
from harness.errors import AbiError

if TYPE_CHECKING:  # pragma: no cover
    import torch


def _read_abi_version() -> int:
    m = re.search(r"#define\s+ATTN_ABI_VERSION\s+(\d+)", ABI_HEADER.read_text())
    if not m:  # pragma: no cover - the header is ours
        raise AbiError(f"{ABI_HEADER} defines no ATTN_ABI_VERSION")
    return int(m.group(1))


#: The ABI version this harness speaks (read from kernels/attn_abi.h, the single source).
ABI_VERSION = _read_abi_version()

DTYPE_BF16 = 0
DTYPE_FP16 = 1


class AttnFwdParams(ctypes.Structure):
    """Field-for-field copy of ``attn_fwd_params`` (see kernels/attn_abi.h for meanings)."""

    _fields_ = [
        ("abi_version", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        *[
            (f"{t}_{s}_stride", ctypes.c_int64)
            for t in ("q", "k", "v", "o")
            for s in ("batch", "row", "head")
        ],
        ("batch", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("seqlen_k", ctypes.c_int32),
        ("num_heads_q", ctypes.c_int32),
        ("num_heads_kv", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        ("num_sms", ctypes.c_int32),
        ("reserved", ctypes.c_int32 * 7),
    ]


def make_params(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    *,
    softmax_scale: float,
    causal: bool,
    num_sms: int,
    workspace: Any = None,
    workspace_bytes: int = 0,
    data_ptrs: bool = True,
) -> AttnFwdParams:
    """Fill :class:`AttnFwdParams` from CUDA tensors.

    Args:
        q, o: ``[batch, seqlen_q, num_heads_q, head_dim]`` bf16/fp16, last dim contiguous.
        k, v: ``[batch, seqlen_k, num_heads_kv, head_dim]``, same dtype.
        lse: ``[batch, num_heads_q, seqlen_q]`` fp32, contiguous.
        workspace: a device pointer (int) or None.
        data_ptrs: False leaves every pointer NULL (shapes and strides only: tensors may be on "meta").
    Raises:
        AbiError: on a dtype, shape or layout the ABI cannot express.
    """
    import torch

    dtypes = {torch.bfloat16: DTYPE_BF16, torch.float16: DTYPE_FP16}
    if q.dtype not in dtypes or not (q.dtype == k.dtype == v.dtype == o.dtype):
        raise AbiError(f"q/k/v/o must share dtype bf16 or fp16, got {q.dtype}, {k.dtype}, {v.dtype}, {o.dtype}")
    if lse.dtype != torch.float32 or not lse.is_contiguous():
        raise AbiError("lse must be a contiguous fp32 tensor [batch, num_heads_q, seqlen_q]")
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        if t.dim() != 4 or t.stride(-1) != 1:
            raise AbiError(f"{name} must be 4-D with a contiguous last dimension, got shape {tuple(t.shape)}")
    b, sq, hq, d = q.shape
    _, sk, hk, _ = k.shape
    if hq % hk:
        raise AbiError(f"num_heads_q={hq} is not divisible by num_heads_kv={hk}")
    p = AttnFwdParams()
    p.abi_version = ABI_VERSION
    p.dtype = dtypes[q.dtype]
    if data_ptrs:
        p.q, p.k, p.v, p.o, p.lse = (t.data_ptr() for t in (q, k, v, o, lse))
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        setattr(p, f"{name}_batch_stride", t.stride(0))
        setattr(p, f"{name}_row_stride", t.stride(1))
        setattr(p, f"{name}_head_stride", t.stride(2))
    p.batch, p.seqlen_q, p.seqlen_k = b, sq, sk
    p.num_heads_q, p.num_heads_kv, p.head_dim = hq, hk, d
    p.softmax_scale = softmax_scale
    p.causal = int(causal)
    p.workspace = workspace
    p.workspace_bytes = workspace_bytes
    p.num_sms = num_sms
    return p


def params_bytes(p: AttnFwdParams) -> bytes:
    """The struct's bytes (what crosses to the launcher process)."""
    return ctypes.string_at(ctypes.addressof(p), ctypes.sizeof(p))


def params_from_bytes(data: bytes) -> AttnFwdParams:
    """Inverse of :func:`params_bytes`. Raises AbiError on a wrong size."""
    if len(data) != ctypes.sizeof(AttnFwdParams):
        raise AbiError(f"params of {len(data)} bytes, expected {ctypes.sizeof(AttnFwdParams)}")
    return AttnFwdParams.from_buffer_copy(data)


#: Pointer fields of the struct (the data the workspace query must not see).
POINTER_FIELDS = ("q", "k", "v", "o", "lse", "workspace")


def null_data_copy(p: AttnFwdParams) -> AttnFwdParams:
    """A copy of ``p`` whose q, k, v, o, lse and workspace are NULL (and workspace_bytes 0): what
    ``attn_fwd_workspace_bytes`` is called with (kernels/attn_abi.h), so the query cannot see or touch data."""
    c = params_from_bytes(params_bytes(p))
    for f in POINTER_FIELDS:
        setattr(c, f, None)
    c.workspace_bytes = 0
    return c


class KernelLibrary:
    """A loaded candidate library. ``fwd(params, stream_ptr) -> int`` and ``workspace_bytes(params)``."""

    def __init__(self, path: Path) -> None:
        try:
            self._lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            raise AbiError(f"cannot load {path}: {exc}") from None
        if not hasattr(self._lib, "attn_fwd"):
            raise AbiError(f"{path.name} exports no `attn_fwd` with C linkage (extern \"C\")")
        if not hasattr(self._lib, "attn_abi_version"):
            raise AbiError(f"{path.name} exports no `attn_abi_version`: include kernels/attn_abi.h")
        self._lib.attn_abi_version.restype = ctypes.c_int
        got = self._lib.attn_abi_version()
        if got != ABI_VERSION:
            raise AbiError(f"{path.name} was built against ABI version {got}; this harness speaks {ABI_VERSION}")
        self._lib.attn_fwd.restype = ctypes.c_int
        self._lib.attn_fwd.argtypes = [ctypes.POINTER(AttnFwdParams), ctypes.c_void_p]
        self._ws = getattr(self._lib, "attn_fwd_workspace_bytes", None)
        if self._ws is not None:
            self._ws.restype = ctypes.c_size_t
            self._ws.argtypes = [ctypes.POINTER(AttnFwdParams)]

    def workspace_bytes(self, params: AttnFwdParams) -> int:
        """Scratch bytes requested by the candidate (0 when it exports no attn_fwd_workspace_bytes)."""
        return int(self._ws(ctypes.byref(params))) if self._ws is not None else 0

    def fwd(self, params: AttnFwdParams, stream_ptr: int) -> int:
        """Call ``attn_fwd``; returns its status (0 = launched, nonzero = unsupported)."""
        return int(self._lib.attn_fwd(ctypes.byref(params), ctypes.c_void_p(stream_ptr)))


def load_kernel(path: str | Path) -> KernelLibrary:
    """Load a built candidate ``.so`` and check its ABI version. Raises :class:`AbiError`."""
    return KernelLibrary(Path(path))
