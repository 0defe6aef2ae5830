"""The host-path cover: a GPU spin enqueued before a timed call, after the L2 flush and before the start
event, so the host work of issuing the call (Python, ctypes, backend selection) overlaps the spin and
only the call's GPU work falls between the events.

One rule for every timed call (:func:`host_cover_cycles`): anchors (torch SDPA, FA3; timed by the
checker, harness/checker.py) always get it; the candidate and the original (timed in their launcher
processes, harness/launcher.py) get the same spin only when ``ATTNQ_HOST_COVER_ALL=1``
(harness.config.Settings.host_cover_all): an experiment on whether covering every kernel is fairer
(scripts/gpu_run.sh steps ``aa`` / ``aa_cover``, docs/checks.md "Anchors").

The anchors' spin is ``torch.cuda._sleep``; the launchers have no torch, so they launch
:data:`SPIN_PTX` (one thread spinning on ``%clock64`` for at least the given cycles, the same loop)
through the driver API (:class:`SpinKernel`, ctypes on ``libcuda.so.1``). The module is JIT-compiled
and launched once when the launcher starts, before the candidate's library is loaded and before the
sandbox applies; afterwards each timed call costs one ``cuLaunchKernel``.
"""

from __future__ import annotations

import ctypes
from typing import Literal

#: SM clock cycles of the spin (~0.5 ms at 1.98 GHz): torch SDPA's host path can outlast the L2 flush,
#: and the idle GPU would count as the anchor's time (H200: 2x swings on tiny scenarios without it).
HOST_COVER_CYCLES = 1_000_000

#: The launchers' spin: one thread reads %clock64 until ``cycles`` have passed (the loop of
#: torch.cuda._sleep). PTX ISA 7.0 for sm_70 and newer, so any driver since CUDA 11 JIT-compiles it.
SPIN_PTX = """\
.version 7.0
.target sm_70
.address_size 64

.visible .entry attnq_spin(
    .param .u64 attnq_spin_cycles
)
{
    .reg .pred %p;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd0, [attnq_spin_cycles];
    mov.u64 %rd1, %clock64;
SPIN:
    mov.u64 %rd2, %clock64;
    sub.s64 %rd3, %rd2, %rd1;
    setp.lt.s64 %p, %rd3, %rd0;
    @%p bra SPIN;
    ret;
}
"""
SPIN_ENTRY = "attnq_spin"
#: The driver API's handle of the legacy default stream (cudaStreamLegacy), where the launcher's flush,
#: events and calls go.
CU_STREAM_LEGACY = 1


def host_cover_cycles(who: Literal["anchor", "kernel"], cover_all: bool) -> int:
    """Spin cycles before a timed call of ``who``: an anchor always gets :data:`HOST_COVER_CYCLES`; a kernel
    (the candidate or the original, both alike so the A/A stays like with like) gets them only when
    ``cover_all`` (``ATTNQ_HOST_COVER_ALL=1``), else 0 (its launcher's L2-flush memset is its only cover).

    Raises ValueError for any other ``who``."""
    if who == "anchor":
        return HOST_COVER_CYCLES
    if who == "kernel":
        return HOST_COVER_CYCLES if cover_all else 0
    raise ValueError(f"who must be 'anchor' or 'kernel', not {who!r}")


class SpinKernel:
    """:data:`SPIN_PTX` loaded into the calling thread's current CUDA context (the launcher's, made by
    the runtime) through the driver API. ``launch(cycles)`` enqueues one spin of ``cycles`` SM clock
    cycles (grid 1, block 1) on the legacy default stream, the stream of the launcher's timed calls.

    Raises OSError when the driver library cannot be opened, RuntimeError (with the driver's message) when
    the driver refuses the module (no current context, PTX it cannot JIT-compile)."""

    def __init__(self, driver: str = "libcuda.so.1") -> None:
        self.cu = ctypes.CDLL(driver)
        self.cu.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
        self.cu.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]
        self.cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
        self.cu.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self.module, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(self.cu.cuModuleLoadData(ctypes.byref(self.module), SPIN_PTX.encode()), "cuModuleLoadData")
        self._check(self.cu.cuModuleGetFunction(ctypes.byref(self.fn), self.module, SPIN_ENTRY.encode()),
                    "cuModuleGetFunction")
        self._cycles = ctypes.c_uint64(0)
        self._args = (ctypes.c_void_p * 1)(ctypes.addressof(self._cycles))  # kernelParams: one pointer per parameter

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            msg = ctypes.c_char_p()
            self.cu.cuGetErrorString(code, ctypes.byref(msg))
            text = msg.value.decode(errors="replace") if msg.value else "unknown error"
            raise RuntimeError(f"host cover: {what} failed: {text} (CUresult {code})")

    def launch(self, cycles: int) -> None:
        """Enqueue one spin of ``cycles`` (>= 0) on the legacy default stream. Raises RuntimeError."""
        self._cycles.value = int(cycles)
        self._check(self.cu.cuLaunchKernel(self.fn, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_LEGACY, self._args, None), "cuLaunchKernel")
