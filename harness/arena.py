"""Arenas the checker owns and a launcher process maps: CUDA IPC on a GPU, memfd shared memory on CPU.

The checker allocates each scenario's arena (harness.buffers.Buffers carves it), exports it to the
launcher that runs the kernel (a 64-byte CUDA IPC handle, or a memfd passed over the launcher's
socket), and frees it after the launcher unmapped it. The launcher side (:func:`open_arena`) maps
what it is given and nothing else: the original's arena is never exported to the candidate's process.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import Any

IPC_HANDLE_BYTES = 64


class HostArenas:
    """CPU arenas in memfd shared memory (tests and CPU runs): ``allocate(nbytes)`` -> uint8 tensor."""

    kind = "cpu"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self._live: dict[int, tuple[int, mmap.mmap]] = {}

    def allocate(self, nbytes: int) -> Any:
        fd = os.memfd_create("attnq-arena", os.MFD_CLOEXEC)
        os.ftruncate(fd, max(nbytes, 1))
        mm = mmap.mmap(fd, max(nbytes, 1))
        t = self.torch.frombuffer(mm, dtype=self.torch.uint8)[:nbytes]
        self._live[t.data_ptr()] = (fd, mm)
        return t

    def export(self, arena: Any) -> tuple[dict[str, Any], list[int]]:
        """``(message fields, fds to pass)`` describing ``arena`` to a launcher."""
        fd, _ = self._live[arena.data_ptr()]
        return {"kind": "memfd", "size": arena.numel()}, [fd]

    def free(self, arena: Any) -> None:
        fd, _mm = self._live.pop(arena.data_ptr())
        os.close(fd)  # the mapping goes when the last tensor view is collected


class _DeviceMemory:
    """A raw device allocation exposed through ``__cuda_array_interface__`` (torch.as_tensor wraps it)."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.ptr, self.nbytes = ptr, nbytes
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


class CudaArenas:
    """Device arenas from ``cudaMalloc`` (one allocation each, so a CUDA IPC handle covers exactly it),
    wrapped as torch uint8 tensors. ``cudart``: the process's CUDA runtime (ctypes.CDLL)."""

    kind = "cuda"

    def __init__(self, cudart: Any) -> None:
        import torch

        self.torch, self.rt = torch, cudart
        self._live: dict[int, _DeviceMemory] = {}

    def allocate(self, nbytes: int) -> Any:
        ptr = ctypes.c_void_p()
        err = self.rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 256)))
        if err != 0:
            raise MemoryError(f"cudaMalloc of {nbytes} bytes failed (cudaError {err})")
        mem = _DeviceMemory(int(ptr.value or 0), nbytes)
        t = self.torch.as_tensor(mem, device="cuda")
        self._live[t.data_ptr()] = mem
        return t

    def export(self, arena: Any) -> tuple[dict[str, Any], list[int]]:
        handle = (ctypes.c_char * IPC_HANDLE_BYTES)()
        err = self.rt.cudaIpcGetMemHandle(handle, ctypes.c_void_p(arena.data_ptr()))
        if err != 0:
            raise RuntimeError(f"cudaIpcGetMemHandle failed (cudaError {err})")
        return {"kind": "cuda_ipc", "size": arena.numel(), "handle": bytes(handle).hex()}, []

    def free(self, arena: Any) -> None:
        mem = self._live.pop(arena.data_ptr())
        self.torch.cuda.synchronize()
        self.rt.cudaFree(ctypes.c_void_p(mem.ptr))


def open_arena(desc: dict[str, Any], fds: list[int], cudart: Any = None) -> tuple[int, Any]:
    """Launcher side: map an exported arena. Returns ``(base address, keep-alive object)``.

    Raises:
        RuntimeError: the handle cannot be opened (another device, a dead exporter).
    """
    if desc["kind"] == "memfd":
        size = max(int(desc["size"]), 1)
        mm = mmap.mmap(fds[0], size)
        os.close(fds[0])
        base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        return base, mm
    ptr = ctypes.c_void_p()
    raw = bytes.fromhex(desc["handle"])

    class _Handle(ctypes.Structure):
        _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]

    h = _Handle()
    ctypes.memmove(ctypes.addressof(h), raw, IPC_HANDLE_BYTES)
    err = cudart.cudaIpcOpenMemHandle(ctypes.byref(ptr), h, ctypes.c_uint(1))  # cudaIpcMemLazyEnablePeerAccess
    if err != 0:
        raise RuntimeError(f"cudaIpcOpenMemHandle failed (cudaError {err})")
    return int(ptr.value or 0), ptr


def close_arena(desc: dict[str, Any], keep: Any, cudart: Any = None) -> None:
    """Launcher side: unmap what :func:`open_arena` mapped."""
    if desc["kind"] == "memfd":
        try:
            keep.close()
        except BufferError:  # a ctypes view still points into it: leave it to the process's end
            pass
        return
    cudart.cudaIpcCloseMemHandle(keep)
