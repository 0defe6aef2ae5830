"""The memory guard: a scenario's peak device memory, estimated from its shape and layout before anything
is allocated, and the device's total memory through the driver API (no torch in the parent process).

A scenario whose estimate exceeds what the GPU has is refused with the numbers before the worker starts
(harness/verify.py); the worker checks again against the memory free at that moment (harness/worker.py).
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING

from pydantic import BaseModel

from harness.layouts import storage_elements
from harness.repeats import MAX_SOURCES

if TYPE_CHECKING:  # pragma: no cover
    from harness.scenarios import Scenario

GIB = float(1 << 30)
#: Kept free for the CUDA context, torch's kernels and the allocator's rounding.
RESERVE_BYTES = 2 << 30
#: The worker's L2 flush buffer (4 x L2, at least 256 MiB: harness/worker.py).
FLUSH_BYTES = 256 << 20
#: The candidate's second launcher (the determinism repeats' process): a CUDA context and its own flush buffer.
REPEAT_LAUNCHER_BYTES = 768 << 20
#: Guard bytes around each allocation (harness/buffers.py GUARD_BYTES, both sides).
_GUARDS = 2 * (64 << 10)
#: An arena's rounding to the allocation granule, at most (harness.buffers.ARENA_GRANULE).
_GRANULE = 2 << 20
#: fp32 score block of the reference, at most (harness/reference.py: chunk_heads keeps it near 1 GiB).
_REF_BLOCK = 1 << 30


class PeakEstimate(BaseModel):
    """Estimated peak device memory of one scenario in the worker, bytes, by part."""

    buffers: int  # the candidate's and the original's arenas: inputs and outputs in their layouts, lse, guards
    copies: int  # the repeats' sources' inputs and outputs (harness.repeats.MAX_SOURCES), and a permuted replay
    reference: int  # the fp32 reference (outputs, upcast k/v chunk, score block) and the error statistics
    total: int

    def describe(self) -> str:
        return (f"{self.total / GIB:.1f} GiB (buffers {self.buffers / GIB:.1f}, copies {self.copies / GIB:.1f}, "
                f"reference and checks {self.reference / GIB:.1f})")


def estimate_peak_bytes(sc: Scenario) -> PeakEstimate:
    """An upper estimate of the device memory the worker (the checker, harness/checker.py) holds at once
    for ``sc`` (2-byte elements for q, k, v, o; fp32 for lse and the reference), without the CUDA context,
    the flush buffer and the kernels' workspaces. Two arenas (harness/buffers.py): the candidate's and the
    original's, regions sized for the declared layout's storage, else for the padded drawn layouts."""
    el = 2
    n_q = sc.batch * sc.seqlen_q * sc.num_heads_q * sc.head_dim
    n_kv = sc.batch * sc.seqlen_k * sc.num_heads_kv * sc.head_dim
    n_lse = sc.batch * sc.num_heads_q * sc.seqlen_q
    if sc.layout is not None:
        stor = storage_elements(sc)
    else:  # every region sized for a head stride of head_dim + 8 (harness.buffers.PAD)
        w = (sc.head_dim + 8) / sc.head_dim
        stor = {"q": int(n_q * w), "k": int(n_kv * w), "v": int(n_kv * w), "o": int(n_q * w)}
    arena = sum(stor.values()) * el + (len(stor) + 2) * _GUARDS + 4 * n_lse + _GRANULE  # rounded to a granule
    buffers = 2 * arena
    copies = (MAX_SOURCES + 1) * ((2 * n_q + 2 * n_kv) * el + 4 * n_lse)
    # reference: o and lse fp32, k and v upcast for a chunk of heads, the score block (+ a temporary), q chunk
    chunk_heads = max(1, min(sc.num_heads_q, (_REF_BLOCK // 4) // max(1, sc.batch * 1024 * sc.seqlen_k)))
    kv_chunk = 2 * 4 * sc.batch * chunk_heads * sc.seqlen_k * sc.head_dim
    block = 4 * sc.batch * chunk_heads * min(1024, sc.seqlen_q) * sc.seqlen_k
    reference = 4 * n_q + 4 * n_lse + kv_chunk + 2 * block + 2 * 4 * sc.batch * chunk_heads * min(1024, sc.seqlen_q) * sc.head_dim
    # error statistics and the exactness check: a few fp32 copies of o, prefix maxima of v (values + int64 indices)
    checks = 4 * 4 * n_q + 12 * n_kv
    reference += checks
    return PeakEstimate(buffers=buffers, copies=copies, reference=reference, total=buffers + copies + reference)


#: What a device keeps beside a scenario's own memory: the CUDA context and allocator slack, the flush buffer, the
#: repeats' second launcher.
DEVICE_RESERVE_BYTES = RESERVE_BYTES + FLUSH_BYTES + REPEAT_LAUNCHER_BYTES


def refusal(sc: Scenario, device_bytes: int, reserve_bytes: int = DEVICE_RESERVE_BYTES) -> str | None:
    """A plain message when ``sc`` cannot fit a device of ``device_bytes``, else None."""
    est = estimate_peak_bytes(sc)
    room = device_bytes - reserve_bytes
    if est.total <= room:
        return None
    return (f"scenario {sc.id} needs an estimated {est.describe()} of device memory; the GPU has "
            f"{device_bytes / GIB:.1f} GiB ({room / GIB:.1f} GiB after the CUDA context and the flush buffer): "
            "shrink it (batch, heads or lengths) or drop it")


def device_total_bytes(gpu: int) -> int | None:
    """Total memory of CUDA device ``gpu`` through the driver API (``cuDeviceTotalMem_v2``), or None when
    the driver or the device is unavailable."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
        dev, total = ctypes.c_int(), ctypes.c_size_t()
        if cu.cuInit(0) != 0 or cu.cuDeviceGet(ctypes.byref(dev), gpu) != 0:
            return None
        if cu.cuDeviceTotalMem_v2(ctypes.byref(total), dev) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return int(total.value)




def device_free_bytes(torch: object, gpu: int, need: int = 0) -> int:
    """Bytes of device memory free for the worker now: the driver's free memory plus torch's cached, unused
    blocks; when that is below ``need``, torch's cache is emptied once and it is read again."""
    cuda = torch.cuda  # type: ignore[attr-defined]

    def free_bytes() -> int:
        free, _ = cuda.mem_get_info(gpu)
        return int(free) + int(cuda.memory_reserved(gpu)) - int(cuda.memory_allocated(gpu))

    free = free_bytes()
    if free < need:
        cuda.empty_cache()
        free = free_bytes()
    return free


def host_free_bytes() -> int:
    """Bytes of host memory available now (``MemAvailable`` of /proc/meminfo; else free pages): the CPU
    checker's arenas are host memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def worker_refusal(torch: object, sc: Scenario, gpu: int) -> str | None:
    """In the worker, before a scenario's first allocation: a plain message when its estimate exceeds the
    device memory free now (torch's cached blocks count as free; the cache is emptied once to make sure)."""
    est = estimate_peak_bytes(sc)
    free = device_free_bytes(torch, gpu, est.total)
    if est.total <= free:
        return None
    return (f"scenario {sc.id} needs an estimated {est.describe()} of device memory; {free / GIB:.1f} GiB are "
            "free: refused before allocating anything")


def workspace_need(sc: Scenario, ws_candidate: int, ws_original: int) -> int:
    """Bytes a scenario needs once its workspaces are known: its estimate (:func:`estimate_peak_bytes`) plus
    the candidate's and the original's workspace (``attn_fwd_workspace_bytes``)."""
    return estimate_peak_bytes(sc).total + ws_candidate + ws_original


def workspace_refusal(sc: Scenario, ws_candidate: int, ws_original: int, free_bytes: int) -> str | None:
    """After the workspace queries, before any arena exists: a plain message (with the bytes asked for) when
    the candidate's workspace (``ws_candidate`` bytes, from ``attn_fwd_workspace_bytes``), the original's and the
    scenario's estimate (:func:`estimate_peak_bytes`) together exceed ``free_bytes`` (the device's free memory,
    or the host's on the CPU checker); else None. A workspace of 2**60 bytes is a refusal with its number
    (``out_of_memory``, ``memory_guard``), never an allocator's crash."""
    need = workspace_need(sc, ws_candidate, ws_original)
    if need <= free_bytes:
        return None
    est = estimate_peak_bytes(sc)
    return (f"scenario {sc.id}: the candidate's workspace query asked for {ws_candidate} bytes "
            f"({ws_candidate / GIB:.3g} GiB); with the scenario's estimated {est.total / GIB:.1f} GiB and the "
            f"original's workspace ({ws_original} bytes) that is {need / GIB:.3g} GiB, and {free_bytes / GIB:.1f} GiB "
            "are free: refused before allocating it")
