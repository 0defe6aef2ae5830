"""How the checker reaches a kernel: in its own process (tests, the trusted original on request) or in a
launcher process (harness/launcher.py: the candidate, always). One interface, :class:`KernelEndpoint`.

An endpoint is given the checker's buffers (harness.buffers.Buffers) with :meth:`attach` and calls
``attn_fwd`` with parameters whose pointers point into them; it never returns data, only a status,
the launch error and (timed calls) the GPU event time. Fatal errors (the context is lost, the process
died) raise :class:`KernelFatal`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

#: Messages of fatal CUDA errors -> failure kinds (a sticky error: the context is unusable).
FATAL_MARKERS = {
    "illegal memory access": "illegal_memory_access",
    "misaligned address": "illegal_memory_access",
    "illegal address": "illegal_memory_access",
    "unspecified launch failure": "crash",
    "illegal instruction": "crash",
    "launch timed out": "timeout",
    "device-side assert": "crash",
    "hardware stack error": "crash",
}


def fatal_kind(message: str) -> str | None:
    """The failure kind of a fatal CUDA error message, or None when the message names none."""
    low = message.lower()
    return next((k for m, k in FATAL_MARKERS.items() if m in low), None)


class KernelFatal(Exception):
    """The kernel's context or process is gone: the worker reports the scenario and is replaced."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


#: The exit code of a launcher whose loader audit (harness/native/entry_guard.c ``la_objopen``) saw a cuBLAS, cuDNN
#: or CUTLASS library being loaded: it stops the process before the library's code can run.
AUDIT_EXIT_CODE = 86

#: How the launcher names a forbidden library it finds mapped (harness/launcher.py ``Launcher.refused``).
LOADED_PREFIX = "loaded "


def describe_refused(names: tuple[str, ...] | list[str]) -> str:
    """What a launcher refused, as one phrase: driver functions the entry-point guard refused (``asked the driver
    for cuStreamCreate (only cuTensorMap* may be resolved)``) and forbidden libraries found mapped into the process
    (entries starting with :data:`LOADED_PREFIX`: ``loaded libcublasLt.so.13 (cuBLAS ...)``), joined by ``; ``."""
    driver = [n for n in names if not n.startswith(LOADED_PREFIX)]
    parts = [n for n in names if n.startswith(LOADED_PREFIX)]
    if driver:
        parts.insert(0, f"asked the driver for {', '.join(driver)} (only cuTensorMap* may be resolved)")
    return "; ".join(parts)


class RefusedCall(Exception):
    """The kernel asked the driver for a function the entry-point guard refuses, or a forbidden library was found
    mapped into its process (``names``: see :func:`describe_refused`)."""

    def __init__(self, names: tuple[str, ...], where: str) -> None:
        super().__init__(f"{where} {describe_refused(names)}")
        self.names = names


class WorkAfterReturn(Exception):
    """Threads of the kernel's library were alive after it returned (from a load, a query or a call):
    work that would go on outside the timed call (harness/launcher.py ``threads``)."""

    def __init__(self, threads: int, where: str) -> None:
        super().__init__(f"{threads} thread(s) started by the library were still alive after {where} returned "
                         "(work after the call is never timed; no thread may outlive a call)")
        self.threads = threads


@dataclass
class CallResult:
    """One ``attn_fwd`` call: its return ``status``, the runtime's launch ``error`` (None when clean),
    ``event_ms`` (GPU time between events around the call; timed calls only), ``wall_ms`` (host time of
    the whole call as the checker saw it, synchronization and process round trip included) and
    ``refused`` (driver functions the entry-point guard refused during the call), ``threads`` (threads
    of the library alive after the call returned: :class:`WorkAfterReturn`) and ``tail_ms`` (timed calls
    asked for it: device ms from the end event to the synchronize after the call, harness/timing_escape.py;
    None when not asked)."""

    status: int
    error: str | None = None
    event_ms: float = 0.0
    wall_ms: float = 0.0
    refused: tuple[str, ...] = ()
    threads: int = 0
    tail_ms: float | None = None


class KernelEndpoint(Protocol):
    """What the checker needs of a kernel (the candidate or the original)."""

    name: str

    def workspace_bytes(self, params: Any) -> int:
        """``attn_fwd_workspace_bytes`` on ``params`` (data pointers already NULL); all work it launched is
        finished when this returns."""

    def attach(self, bufs: Any) -> None:
        """Make ``bufs``'s arena reachable by the kernel (pointers in later params point into it)."""

    def detach(self, bufs: Any) -> None:
        """Undo :meth:`attach` (before the checker frees the arena)."""

    def call(self, params: Any) -> CallResult:
        """An untimed call, synchronized."""

    def timed_call(self, params: Any, tail: bool = False) -> CallResult:
        """A timed call: L2 flush, events around the call on the legacy default stream, synchronized;
        ``tail``: also the device time from the end event to the synchronize (``CallResult.tail_ms``)."""

    def close(self) -> None:
        """Release the kernel (end its process)."""


class InProcessKernel:
    """A kernel library loaded in the checker's own process (CPU tests; never the candidate in a
    verification). ``lib``: ``fwd(params, stream) -> int`` and ``workspace_bytes(params) -> int``;
    ``dev``: the checker's device (harness.checker.CudaDevice / HostDevice)."""

    def __init__(self, lib: Any, dev: Any, name: str) -> None:
        self.lib, self.dev, self.name = lib, dev, name

    def workspace_bytes(self, params: Any) -> int:
        n = int(self.lib.workspace_bytes(params))
        self.dev.sync()
        return n

    def attach(self, bufs: Any) -> None:
        pass

    def detach(self, bufs: Any) -> None:
        pass

    def _run(self, params: Any) -> tuple[int, str | None]:
        status = int(self.lib.fwd(params, 0))
        return status, self.dev.last_error()

    def call(self, params: Any) -> CallResult:
        t0 = time.perf_counter()
        status, err = self._run(params)
        self.dev.sync()
        return CallResult(status, err, wall_ms=(time.perf_counter() - t0) * 1e3)

    def timed_call(self, params: Any, tail: bool = False) -> CallResult:
        """A timed call (``tail``: reported as 0.0, the checker's device synchronize ends the timing here)."""
        out: list[tuple[int, str | None]] = []
        event_ms, wall_ms = self.dev.timed(lambda: out.append(self._run(params)))
        status, err = out[0]
        return CallResult(status, err, event_ms=event_ms, wall_ms=wall_ms, tail_ms=0.0 if tail else None)

    def close(self) -> None:
        pass
