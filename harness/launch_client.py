"""The checker's side of a launcher process (harness/launcher.py): :class:`LauncherKernel`, a
harness.endpoints.KernelEndpoint whose calls run in another, sandboxed process.

Start-up (interpreter, CUDA context, sandbox) and loading the library have separate limits: a library
whose constructor never returns costs ``load_timeout_s`` (default 20 s), not the worker's start-up
limit. The library is copied into a private directory and its hash checked before the launcher loads
the copy (it re-checks the hash itself, before any of the library's code runs).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import child_pythonpath
from harness.abi import POINTER_FIELDS, params_bytes
from harness.endpoints import AUDIT_EXIT_CODE, CallResult, KernelFatal, RefusedCall, WorkAfterReturn
from harness.launcher import recv_msg, send_msg

#: Limit for loading a library (its constructors run), apart from the interpreter and CUDA start.
LOAD_TIMEOUT_S = 20.0
#: Limit for a launcher's start: Python, the CUDA runtime and context, the sandbox.
START_TIMEOUT_S = 120.0
_ENV_KEEP = ("PATH", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
             "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


class LoadTimeout(Exception):
    """The library did not finish loading within the limit (a constructor that never returns?)."""


class LauncherError(Exception):
    """The launcher could not start or refused a request (not the kernel's fault)."""


class SandboxIpcError(LauncherError):
    """CUDA IPC (or the memfd mapping) fails under the requested sandbox mode on this machine."""


class LauncherKernel:
    """A kernel library in its own launcher process. ``arenas``: harness.arena.HostArenas/CudaArenas
    (how the checker's buffers are exported); ``device``: "cuda" or "cpu"; ``guard``: the entry-point
    guard library or None; ``sandbox``: "on" | "off" (ATTNQ_SANDBOX); ``host_cover_cycles``: the GPU spin
    before each timed call (harness.host_cover.host_cover_cycles; 0: none), as the launcher reports it in
    ``self.host_cover_cycles`` once ready; ``wait``: False returns as soon as the process is spawned (call
    :meth:`wait_ready` before anything else), so starts overlap."""

    def __init__(self, name: str, lib_path: str, sha256: str, *, arenas: Any, device: str = "cuda", gpu: int = 0,
                 guard: str | None = None, cudart: str = "libcudart.so.13", sandbox: str = "on",
                 host_cover_cycles: int = 0, start_timeout_s: float = START_TIMEOUT_S, wait: bool = True) -> None:
        self.name, self.arenas, self.lib_sha256, self.source_lib, self.cudart = name, arenas, sha256, lib_path, cudart
        self.tmp = tempfile.mkdtemp(prefix=f"attnq-{name}-")
        self.libdir = tempfile.mkdtemp(prefix=f"attnq-{name}-lib-")
        self.lib = Path(self.libdir) / "kernel.so"
        shutil.copyfile(lib_path, self.lib)
        ours, theirs = socket.socketpair()
        env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP}
        env.update(HOME=self.tmp, TMPDIR=self.tmp, PYTHONPATH=child_pythonpath(), PYTHONDONTWRITEBYTECODE="1")
        cmd = [sys.executable, "-m", "harness.launcher", "--sock", str(theirs.fileno()), "--device", device,
               "--gpu", str(gpu), "--tmp", self.tmp, "--libdir", self.libdir, "--cudart", cudart, "--sandbox", sandbox,
               "--host-cover-cycles", str(host_cover_cycles)]
        if guard:  # the entry guard, and the same library as the dynamic linker's auditor (entry_guard.c)
            cmd += ["--guard", guard]
            env["LD_AUDIT"] = guard
        self.proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),), env=env, cwd=self.tmp, stdin=subprocess.DEVNULL)
        theirs.close()
        self.sock = ours
        self._ids: dict[int, tuple[int, int]] = {}  # arena base -> (id, size)
        self._next = 0
        self.start_timeout_s = start_timeout_s
        self.sandbox: dict[str, Any] = {}
        self.guard = False
        self.cover_requested, self.host_cover_cycles = host_cover_cycles, 0
        self._ready = False
        if wait:
            self.wait_ready()

    def wait_ready(self, probe: Any = None) -> None:
        """Wait for the launcher's start (Python, CUDA context), hand it ``probe`` (a small arena of the
        checker's; None: one is allocated here) to map before and after it confines itself, and wait for
        ``ready``. Raises LauncherError when it could not start, SandboxIpcError when the arena could
        not be mapped under the sandbox (the caller retries with a weaker mode), TimeoutError after
        ``start_timeout_s``."""
        if self._ready:
            return
        started = self._reply(self.start_timeout_s, f"{self.name} launcher start")
        if not started.get("started"):
            self.close()
            raise LauncherError(f"the {self.name} launcher could not start: {started.get('error')}")
        own = probe is None
        arena = self.arenas.allocate(4096) if own else probe
        try:
            desc, fds = self.arenas.export(arena)
            extra = [os.dup(fd) for fd in fds]  # a second mapping after the sandbox (a memfd is consumed)
            try:
                send_msg(self.sock, {"op": "probe", "arena": desc}, fds + extra)
            finally:
                for fd in extra:
                    os.close(fd)
            ready = self._reply(self.start_timeout_s, f"{self.name} launcher sandbox")
        finally:
            if own:
                self.arenas.free(arena)
        if not ready.get("ready"):
            self.close()
            raise LauncherError(f"the {self.name} launcher could not start: {ready.get('error')}")
        self.sandbox = ready.get("sandbox", {})
        self.guard = bool(ready.get("guard"))
        self.host_cover_cycles = int(ready.get("host_cover_cycles", 0))
        if ready.get("ipc_error"):
            self.close()
            raise SandboxIpcError(f"the {self.name} launcher cannot map the checker's memory under sandbox mode "
                                  f"{self.sandbox.get('mode')!r}: {ready['ipc_error']}")
        self._ready = True

    # -- plumbing --------------------------------------------------------------------------------
    def _died(self, code: int | None, exc: OSError | None = None) -> KernelFatal:
        """The error for a launcher that is gone: ``forbidden_call`` when its loader audit stopped it."""
        if code == AUDIT_EXIT_CODE:
            return KernelFatal("forbidden_call", f"the {self.name}'s process loaded a cuBLAS, cuDNN or CUTLASS library "
                                                 "(the entry guard's loader audit stopped it)")
        return KernelFatal("crash", f"the {self.name}'s process died (exit code {code})" + (f": {exc}" if exc else ""))

    def _reply(self, timeout_s: float | None, what: str) -> dict[str, Any]:
        if timeout_s is not None:
            ready, _, _ = select.select([self.sock], [], [], timeout_s)
            if not ready:
                raise TimeoutError(f"{what}: no answer within {timeout_s:.0f} s")
        msg, _ = recv_msg(self.sock)
        if msg is None:
            raise self._died(self.proc.wait(timeout=30))
        if msg.get("fatal"):
            raise KernelFatal(str(msg["fatal"]), str(msg.get("error")))
        return msg

    def _request(self, msg: dict[str, Any], fds: list[int] | None = None, timeout_s: float | None = None) -> dict[str, Any]:
        try:
            send_msg(self.sock, msg, fds)
        except OSError as exc:  # the process is gone
            raise self._died(self.proc.poll(), exc) from None
        reply = self._reply(timeout_s, f"{self.name} {msg.get('op')}")
        if not reply.get("ok"):
            raise LauncherError(f"{self.name} {msg.get('op')}: {reply.get('error')}")
        return reply

    # -- the endpoint ----------------------------------------------------------------------------
    def load(self, timeout_s: float = LOAD_TIMEOUT_S) -> tuple[str, ...]:
        """Load the library (its constructors run) within ``timeout_s``. Returns the driver functions the
        guard refused during the load. Raises LoadTimeout (the process is killed), LauncherError (also when
        the library's constructors left a thread running)."""
        try:
            reply = self._request({"op": "load", "path": str(self.lib), "sha256": self.lib_sha256}, timeout_s=timeout_s)
        except TimeoutError:
            self.close()
            raise LoadTimeout(f"the {self.name} library did not finish loading within {timeout_s:.0f} s (a static "
                              "constructor that never returns?)") from None
        if reply.get("threads"):
            raise LauncherError(f"the {self.name} library: {WorkAfterReturn(reply['threads'], 'loading')}")
        return tuple(reply.get("refused", ()))

    def workspace_bytes(self, params: Any) -> int:
        reply = self._request({"op": "query", "params": params_bytes(params).hex()})
        if reply.get("error"):
            raise LauncherError(f"{self.name} workspace query: {reply['error']}")
        if reply.get("refused"):
            raise RefusedCall(tuple(reply["refused"]), f"the {self.name}'s workspace query")
        if reply.get("threads"):
            raise WorkAfterReturn(int(reply["threads"]), f"the {self.name}'s workspace query")
        return int(reply["bytes"])

    def attach(self, bufs: Any) -> None:
        desc, fds = self.arenas.export(bufs.arena)
        arena_id, self._next = self._next, self._next + 1
        self._request({"op": "map", "id": arena_id, "arena": desc}, fds)
        self._ids[bufs.arena.data_ptr()] = (arena_id, bufs.nbytes)

    def detach(self, bufs: Any) -> None:
        arena_id, _ = self._ids.pop(bufs.arena.data_ptr())
        self._request({"op": "unmap", "id": arena_id})

    def _relocs(self, params: Any) -> list[list[int | str]]:
        out: list[list[int | str]] = []
        for field in POINTER_FIELDS:
            ptr = getattr(params, field)
            if not ptr:
                continue
            for base, (arena_id, size) in self._ids.items():
                if base <= ptr <= base + size:
                    out.append([field, arena_id, ptr - base])
                    break
            else:
                raise LauncherError(f"{field} points outside every arena attached to the {self.name}")
        return out

    def _call(self, params: Any, timed: bool, tail: bool = False) -> CallResult:
        msg = {"op": "call", "params": params_bytes(params).hex(), "relocs": self._relocs(params), "timed": timed}
        if tail:
            msg["tail"] = True
        t0 = time.perf_counter()
        reply = self._request(msg)
        wall_ms = (time.perf_counter() - t0) * 1e3
        tail_ms = reply.get("tail_ms")
        return CallResult(int(reply["status"]), reply.get("error"), float(reply.get("event_ms", 0.0)), wall_ms,
                          tuple(reply.get("refused", ())), int(reply.get("threads", 0)),
                          None if tail_ms is None else float(tail_ms))

    def call(self, params: Any) -> CallResult:
        return self._call(params, False)

    def timed_call(self, params: Any, tail: bool = False) -> CallResult:
        """A timed call; ``tail``: the launcher also reports the device time from the end event to its
        synchronize (harness/timing_escape.py)."""
        return self._call(params, True, tail)

    def close(self) -> None:
        """End the launcher (politely, then SIGKILL) and remove its directories."""
        if self.proc.poll() is None:
            try:
                send_msg(self.sock, {"op": "exit"})
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.kill(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=30)
        self.sock.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.libdir, ignore_errors=True)
