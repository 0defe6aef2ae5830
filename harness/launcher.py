"""The launcher: the process a kernel library runs in (the candidate's, and the original's, alike).

``python -m harness.launcher --sock FD --device cuda|cpu --gpu N --tmp DIR --libdir DIR [--guard LIB]
[--cudart PATH] [--host-cover-cycles N]``. It starts the CUDA runtime (its own context), loads the entry-point
guard (harness/native/entry_guard.c) and the runtime with RTLD_GLOBAL, loads the host-path cover's spin
kernel when N > 0 (harness/host_cover.py), warms every CUDA path the calls take (an IPC mapping, a memset
launch, events, a module loaded and launched through the driver API: the driver starts its threads now),
confines itself (harness/sandbox.py: from here on no thread or process can be created), takes the warm-up
paths again under the sandbox (a failure there makes the checker retry with a weaker mode), reports
``ready``, and then only does what the checker asks over its socket (length-prefixed JSON, fds for CPU
arenas):

``load`` (hash-check and dlopen the library), ``map``/``unmap`` (an arena the checker owns),
``query`` (``attn_fwd_workspace_bytes`` on NULL data pointers, then a device synchronize), ``call``
(``attn_fwd`` on the legacy default stream with pointers relocated into mapped arenas; timed calls
get an L2-flushing memset, then the N-cycle spin when N > 0, and events around the call; ``tail``: a third
event recorded once the synchronize after the call returned, reported as ``tail_ms``, the device time
from the end event to it: harness/timing_escape.py), ``exit``. It holds no expected answer and
no buffer it was not given; it never imports torch. A sticky CUDA error is reported (``fatal``) and
ends the process. Every reply to ``load``, ``query`` and ``call`` carries ``threads``: the threads
alive now that were not when the loop started (/proc/self/task; seccomp refuses new ones where it
applies, this is the check where it does not): work that would go on after the call returned.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import pathlib
import socket
import struct
import sys
import time
from typing import Any

from harness.abi import POINTER_FIELDS, KernelLibrary, params_from_bytes
from harness.arena import close_arena, open_arena
from harness.endpoints import LOADED_PREFIX, fatal_kind

MAX_FDS = 4
#: A kernel that does nothing, loaded from PTX and launched through the driver API before the sandbox
#: (the path the candidate's own module takes at its first launch: module load, JIT, launch).
_WARM_PTX = b""".version 7.0
.target sm_52
.address_size 64
.visible .entry attnq_warm() { ret; }
\0"""


def live_tasks() -> set[str]:
    """Thread ids of this process (/proc/self/task)."""
    try:
        return set(os.listdir("/proc/self/task"))
    except OSError:
        return set()


def send_msg(sock: socket.socket, msg: dict[str, Any], fds: list[int] | None = None) -> None:
    """One message: 4-byte big-endian length + JSON; ``fds`` ride along (SCM_RIGHTS)."""
    body = json.dumps(msg).encode()
    data = struct.pack(">I", len(body)) + body
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


def recv_msg(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """The next message and the fds that came with it; ``(None, [])`` at end of stream."""
    head, fds, _, _ = socket.recv_fds(sock, 4, MAX_FDS)
    if not head:
        return None, []
    while len(head) < 4:
        more = sock.recv(4 - len(head))
        if not more:
            return None, []
        head += more
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None, []
        body += chunk
    return json.loads(body), list(fds)


class _Cuda:
    """The launcher's CUDA runtime calls (ctypes)."""

    def __init__(self, cudart_path: str, gpu: int, cover_cycles: int = 0) -> None:
        self.rt = ctypes.CDLL(cudart_path, mode=ctypes.RTLD_GLOBAL)
        self.rt.cudaGetErrorString.restype = ctypes.c_char_p
        self._check(self.rt.cudaSetDevice(gpu), "cudaSetDevice")
        self._check(self.rt.cudaFree(None), "cudaFree(0)")  # creates the context now, before the sandbox
        flush = ctypes.c_int(0)
        self.rt.cudaDeviceGetAttribute(ctypes.byref(flush), 38, gpu)  # cudaDevAttrL2CacheSize
        self.flush_bytes = max(4 * flush.value, 256 << 20)
        self.flush = ctypes.c_void_p()
        self._check(self.rt.cudaMalloc(ctypes.byref(self.flush), ctypes.c_size_t(self.flush_bytes)), "cudaMalloc")
        self.start, self.end, self.done = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        for ev in (self.start, self.end, self.done):
            self._check(self.rt.cudaEventCreate(ctypes.byref(ev)), "cudaEventCreate")
        self.cover_cycles, self.cover = cover_cycles, None
        if cover_cycles:  # JIT-compiled, loaded and run once now: before the library and the sandbox
            from harness.host_cover import SpinKernel

            self.cover = SpinKernel()
            self.cover.launch(1)
            self._check(self.rt.cudaDeviceSynchronize(), "host cover spin")

    def warm(self) -> str | None:
        """Take every CUDA path a call takes (a memset launch, events, a synchronize, a module loaded from
        PTX and launched through the driver API), so that threads the driver starts lazily exist before
        seccomp refuses new ones. Raises RuntimeError when the runtime fails; returns why the driver-API
        module warm-up did not run (None when it did)."""
        self._check(self.rt.cudaMemsetAsync(self.flush, 0, ctypes.c_size_t(1 << 20), None), "warm-up memset")
        self._check(self.rt.cudaEventRecord(self.start, None), "warm-up event")
        self._check(self.rt.cudaEventRecord(self.end, None), "warm-up event")
        self._check(self.rt.cudaDeviceSynchronize(), "warm-up synchronize")
        self.elapsed_ms()
        self.tail_ms()
        try:
            cu = ctypes.CDLL("libcuda.so.1")
            mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
            cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
            for what, code in (("cuModuleLoadData", lambda: cu.cuModuleLoadData(ctypes.byref(mod), _WARM_PTX)),
                               ("cuModuleGetFunction", lambda: cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"attnq_warm")),
                               ("cuLaunchKernel", lambda: cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, None, None)),
                               ("cuCtxSynchronize", lambda: cu.cuCtxSynchronize())):
                rc = code()
                if rc != 0:
                    return f"{what} returned CUresult {rc}"
            cu.cuModuleUnload(mod)
        except (OSError, AttributeError) as exc:
            return f"driver API unavailable: {exc}"
        return None

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed: {self.rt.cudaGetErrorString(code).decode()} (cudaError {code})")

    def last_error(self) -> str | None:
        code = self.rt.cudaGetLastError()
        return None if code == 0 else f"{self.rt.cudaGetErrorString(code).decode()} (cudaError {code})"

    def sync(self) -> str | None:
        code = self.rt.cudaDeviceSynchronize()
        return None if code == 0 else f"{self.rt.cudaGetErrorString(code).decode()} (cudaError {code})"

    def timed(self, fn: Any) -> float:
        self.rt.cudaMemsetAsync(self.flush, 0, ctypes.c_size_t(self.flush_bytes), None)  # L2 flush
        if self.cover is not None:  # the anchors' host-path cover (harness.host_cover.host_cover_cycles)
            self.cover.launch(self.cover_cycles)
        self.rt.cudaEventRecord(self.start, None)
        fn()
        self.rt.cudaEventRecord(self.end, None)
        return -1.0  # read after the synchronize

    def elapsed_ms(self) -> float:
        ms = ctypes.c_float(0.0)
        self.rt.cudaEventElapsedTime(ctypes.byref(ms), self.start, self.end)
        return float(ms.value)

    def tail_ms(self) -> float:
        """After the synchronize that ended a timed call: a third event on the legacy default stream, and
        the device ms from the end event to it (work on other streams that outlived the end event)."""
        self.rt.cudaEventRecord(self.done, None)
        self.rt.cudaDeviceSynchronize()  # the path every call already takes (warmed before the sandbox)
        ms = ctypes.c_float(0.0)
        self.rt.cudaEventElapsedTime(ctypes.byref(ms), self.end, self.done)
        return float(ms.value)


class _Host:
    """CPU stand-in (tests): no device, host time; no spin (``cover_cycles`` is only reported)."""

    rt = None

    def __init__(self, cover_cycles: int = 0) -> None:
        self.cover_cycles = cover_cycles

    def warm(self) -> str | None:
        return None

    def last_error(self) -> str | None:
        return None

    def sync(self) -> str | None:
        return None

    def timed(self, fn: Any) -> float:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    def elapsed_ms(self) -> float:  # pragma: no cover - _Host.timed returns the time itself
        return 0.0

    def tail_ms(self) -> float:
        return 0.0  # no device: nothing outlives the call


def mapped_files() -> set[str]:
    """The files mapped into this process now (the path column of ``/proc/self/maps``; empty where it is absent)."""
    out = set()
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.rstrip("\n").split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    out.add(parts[5].removesuffix(" (deleted)"))
    except OSError:
        pass
    return out


class Launcher:
    """The message loop's state: the device, the guard, the library, the mapped arenas."""

    def __init__(self, dev: Any, guard: Any) -> None:
        self.dev, self.guard = dev, guard
        self.lib: KernelLibrary | None = None
        self.arenas: dict[int, tuple[int, int, dict, Any]] = {}  # id -> (base, size, desc, keep)
        self.tasks = live_tasks()  # the launcher's own threads and the CUDA runtime's, before the library
        self.orphans: list[Any] = []  # host arenas unmapped by the checker while library threads lived (``unmap``)
        self.maps = mapped_files() if guard is None else set()  # without the guard: what was mapped before the library

    def threads(self) -> int:
        """Threads alive now that were not before the library was loaded."""
        return len(live_tasks() - self.tasks)

    def refused(self, before: int) -> list[str]:
        """The driver function the guard refused since its count was ``before``, and a forbidden library
        (cuBLAS, cuDNN, CUTLASS: policy.forbidden_library_reason) loaded into the process however it was loaded
        (an import is refused at compile time; a dlopen found by walking libc's memory is not): each load,
        query and call that finds one fails (endpoints.describe_refused). The guard lists the dynamic linker's
        libraries (~us); without it, the files mapped since the launcher started are read from /proc/self/maps
        (~0.5-1 ms)."""
        out = []
        if self.guard is not None:
            if int(self.guard.attnq_guard_refused_count()) > before:
                out.append(self.guard.attnq_guard_last_refused().decode(errors="replace"))
            new = {self.guard.attnq_guard_forbidden_library().decode(errors="replace")} \
                if self.guard.attnq_guard_forbidden_libraries() else set()
        else:
            new = mapped_files() - self.maps
        if new:  # rare: the policy (and pydantic) imported only then, not at every start
            from harness.policy import forbidden_library_reason

            for path in sorted(new):
                reason = forbidden_library_reason(path)
                if reason:  # judged again at every request: it stays loaded
                    out.append(f"{LOADED_PREFIX}{os.path.basename(path)} ({reason})")
                else:
                    self.maps.add(path)
        return out

    def guard_count(self) -> int:
        return int(self.guard.attnq_guard_refused_count()) if self.guard is not None else 0

    def relocate(self, msg: dict[str, Any]) -> Any:
        p = params_from_bytes(bytes.fromhex(msg["params"]))
        for f in POINTER_FIELDS:
            setattr(p, f, None)
        for field, arena_id, offset in msg.get("relocs", []):
            if field not in POINTER_FIELDS:
                raise ValueError(f"not a pointer field: {field}")
            base, size, _, _ = self.arenas[int(arena_id)]
            if not 0 <= int(offset) <= size:
                raise ValueError(f"{field} offset {offset} outside arena {arena_id} ({size} bytes)")
            setattr(p, field, base + int(offset))
        return p

    def handle(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        op = msg.get("op")
        if op == "load":
            with open(msg["path"], "rb") as fh:
                data_hash = hashlib.sha256(fh.read()).hexdigest()
            if msg.get("sha256") and data_hash != msg["sha256"]:
                raise ValueError(f"{msg['path']} changed since it was compiled (sha256 {data_hash[:12]})")
            before = self.guard_count()
            self.lib = KernelLibrary(pathlib.Path(msg["path"]))
            return {"ok": True, "refused": self.refused(before), "threads": self.threads()}
        if op == "map":
            base, keep = open_arena(msg["arena"], fds, self.dev.rt)
            self.arenas[int(msg["id"])] = (base, int(msg["arena"]["size"]), msg["arena"], keep)
            return {"ok": True}
        if op == "unmap":
            _, _, desc, keep = self.arenas.pop(int(msg["id"]))
            if desc["kind"] == "memfd" and self.threads():
                # a library thread outlived a call (the checker failed it: work_after_return) and may still write
                # into this arena: the mapping stays until the process ends, so that late write cannot kill the
                # launcher and be blamed on the next scenario (the checker's pages are its own again either way)
                self.orphans.append(keep)
                return {"ok": True}
            close_arena(desc, keep, self.dev.rt)
            return {"ok": True}
        if self.lib is None:
            raise ValueError("no library loaded")
        if op == "query":
            p = params_from_bytes(bytes.fromhex(msg["params"]))
            for f in POINTER_FIELDS:  # the query never sees data, whatever it was sent
                setattr(p, f, None)
            p.workspace_bytes = 0
            before = self.guard_count()
            n = self.lib.workspace_bytes(p)
            err = self.dev.last_error() or self.dev.sync()  # nothing the query launched outlives it
            return {"ok": True, "bytes": n, "error": err, "refused": self.refused(before), "threads": self.threads()}
        if op == "call":
            p = self.relocate(msg)
            before = self.guard_count()
            out: dict[str, Any] = {}

            def run() -> None:
                out["status"] = self.lib.fwd(p, 0)  # type: ignore[union-attr]
                out["error"] = self.dev.last_error()

            event_ms = self.dev.timed(run) if msg.get("timed") else (run() or 0.0)
            sync_err = self.dev.sync()
            tail = msg.get("timed") and msg.get("tail")
            tail_ms = self.dev.tail_ms() if tail and sync_err is None else 0.0  # at once: no host work in it
            if event_ms < 0:
                event_ms = self.dev.elapsed_ms() if sync_err is None else 0.0
            reply = {"ok": True, "status": out["status"], "error": out["error"] or sync_err, "event_ms": event_ms,
                     "refused": self.refused(before), "threads": self.threads()}
            if tail:
                reply["tail_ms"] = tail_ms
            return reply
        raise ValueError(f"unknown op {op!r}")


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 on ``exit`` or end of stream, 3 after a fatal CUDA error, 4 when start-up failed."""
    ap = argparse.ArgumentParser(prog="python -m harness.launcher")
    ap.add_argument("--sock", type=int, required=True)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--libdir", default="", help="the library's private copy (readable under the sandbox)")
    ap.add_argument("--guard", default="")
    ap.add_argument("--cudart", default="libcudart.so.13")
    ap.add_argument("--sandbox", choices=("on", "seccomp", "off"), default="on")
    ap.add_argument("--host-cover-cycles", type=int, default=0, help="GPU spin before each timed call")
    args = ap.parse_args(argv)
    sock = socket.socket(fileno=args.sock)
    os.chdir(args.tmp)
    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG = SIGKILL: never outlive the checker
    try:
        guard = ctypes.CDLL(args.guard, mode=ctypes.RTLD_GLOBAL) if args.guard else None
        if guard is not None:
            guard.attnq_guard_last_refused.restype = ctypes.c_char_p
            guard.attnq_guard_refused_count.restype = ctypes.c_long
            guard.attnq_guard_forbidden_libraries.restype = ctypes.c_long
            guard.attnq_guard_forbidden_library.restype = ctypes.c_char_p
        if args.host_cover_cycles < 0:
            raise ValueError(f"--host-cover-cycles must be >= 0, not {args.host_cover_cycles}")
        dev = _Cuda(args.cudart, args.gpu, args.host_cover_cycles) if args.device == "cuda" else _Host(args.host_cover_cycles)
        warm_note = dev.warm()
        send_msg(sock, {"started": True, "pid": os.getpid()})
        # a probe arena from the checker: mapped once before and once after the sandbox applies, so a
        # sandbox layer that breaks CUDA IPC on this machine is found now, not at the first scenario
        probe, fds = recv_msg(sock)
        if probe is None or probe.get("op") != "probe":
            return 4
        close_arena(probe["arena"], open_arena(probe["arena"], fds[:1], dev.rt)[1], dev.rt)
        from harness.sandbox import apply_sandbox

        report = apply_sandbox(args.tmp, mode=args.sandbox, readable=[args.libdir] if args.libdir else [])
    except Exception as exc:  # noqa: BLE001 - reported to the checker
        send_msg(sock, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 4
    ipc_error = None
    try:  # the same paths under the sandbox: a layer that breaks them is found now, not at the first call
        close_arena(probe["arena"], open_arena(probe["arena"], fds[1:2], dev.rt)[1], dev.rt)
        again = dev.warm()
        if again and not warm_note:
            raise RuntimeError(f"the driver-API warm-up fails under the sandbox: {again}")
    except Exception as exc:  # noqa: BLE001 - the checker falls back to a weaker mode
        ipc_error = f"{type(exc).__name__}: {exc}"
    if warm_note:
        report.warnings.append(f"driver-API module warm-up not run ({warm_note}): a driver thread started at the "
                               "candidate's first launch would be refused")
    send_msg(sock, {"ready": True, "pid": os.getpid(), "guard": guard is not None, "ipc_error": ipc_error,
                    "host_cover_cycles": dev.cover_cycles,
                    "sandbox": {"mode": args.sandbox, "landlock_abi": report.landlock_abi, "seccomp": report.seccomp,
                                "caps_dropped": report.caps_dropped, "warnings": report.warnings}})
    if ipc_error:
        return 5
    launcher = Launcher(dev, guard)
    while True:
        msg, fds = recv_msg(sock)
        if msg is None or msg.get("op") == "exit":
            return 0
        try:
            reply = launcher.handle(msg, fds)
        except Exception as exc:  # noqa: BLE001 - the checker decides what it means
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        err = reply.get("error")
        if err and fatal_kind(str(err)):
            send_msg(sock, {"ok": False, "fatal": fatal_kind(str(err)), "error": err})
            return 3
        send_msg(sock, reply)


if __name__ == "__main__":
    sys.exit(main())
