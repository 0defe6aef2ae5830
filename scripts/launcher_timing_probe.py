"""Times a kernel library through attnq's own launcher, piece by piece of the timing loop (GPU; diagnostics).

    python3 scripts/launcher_timing_probe.py CANDIDATE.so ORIGINAL.so SCENARIO_ID [SCENARIO_ID ...]

Each scenario (an id of the `production` or `full` suite, dense layout, the harness's `normal` values) runs in a
harness.launch_client.LauncherKernel (its own process, the arena over CUDA IPC, the entry guard, the sandbox on),
as `attnq verify` runs it, and is timed by the launcher's events around isolated calls (its 256 MB flush first):
  alone            the candidate's calls back to back
  flush+sync       after the checker's own flush and a synchronize (harness.checker._timed_pair)
  fill+flush       after a fresh fill of the inputs and poisoned outputs (harness.checker._prepare)
  fill KIND        the same with the other value kinds verify's timed calls draw (large_logits, shifted)
  orig+flush       after the original's timed call in its own launcher on its own arena, then flush + sync
  matmul+flush     after twelve 8192^3 bf16 matmuls in this process, then flush + sync
  right after orig the original's timed call, then the candidate's at once
Prints the median (us) of each. Written for the decode discrepancy of kernels/NOTES.md (session 7): attnq's verdict
times b64 sq4 h32x8 decode at ~228 us, every standalone reproduction at ~147 us; the pieces the loop adds are
tried one at a time here. Build the libraries with `scripts/kernel_bench.py FILE --variant NAME= --build-only
--keep DIR` (the same nvcc flags as attnq's compile).
"""

from __future__ import annotations

import ctypes
import hashlib
import statistics
import sys
from pathlib import Path

import torch

from harness.abi import make_params, null_data_copy
from harness.arena import CudaArenas
from harness.buffers import Buffers
from harness.guard import build_entry_guard
from harness.launch_client import LauncherKernel
from harness.scenarios import load_suite
from harness.worker import cudart_path


def _launcher(name: str, lib: str, arenas: CudaArenas, guard: Path | None) -> LauncherKernel:
    k = LauncherKernel(name, lib, hashlib.sha256(Path(lib).read_bytes()).hexdigest(), arenas=arenas, device="cuda",
                       gpu=0, guard=str(guard) if guard else None, cudart=cudart_path(), sandbox="on")
    k.load()
    return k


def _buffers(k: LauncherKernel, sc, arenas: CudaArenas, sms: int) -> tuple[Buffers, object]:
    """The scenario's Buffers in an IPC arena attached to ``k`` (dense layout) and the params of a call."""
    probe = Buffers(torch, sc, torch.bfloat16, "meta")
    probe.apply("dense", 1.0)
    need = k.workspace_bytes(null_data_copy(make_params(probe.q, probe.k, probe.v, probe.o_c, probe.lse_c,
                                                        softmax_scale=probe.scale, causal=sc.causal, num_sms=sms,
                                                        data_ptrs=False)))
    bufs = Buffers(torch, sc, torch.bfloat16, "cuda", workspace_bytes=need, allocate=arenas.allocate)
    bufs.apply("dense", 1.0)
    k.attach(bufs)
    p = make_params(bufs.q, bufs.k, bufs.v, bufs.o_c, bufs.lse_c, softmax_scale=bufs.scale, causal=sc.causal,
                    num_sms=sms)
    if bufs.workspace is not None:
        p.workspace, p.workspace_bytes = bufs.workspace.data_ptr(), bufs.workspace_bytes
    return bufs, p


def probe(sc, cand: LauncherKernel, orig: LauncherKernel, arenas: CudaArenas, sms: int, gen, flush, a) -> str:
    """One scenario: the candidate's median event time (us) after each piece of the loop, as one line."""
    bc, pc = _buffers(cand, sc, arenas, sms)
    bo, po = _buffers(orig, sc, arenas, sms)
    bo.fill_inputs(gen, "normal", True)
    bc.copy_inputs_from(bo)
    torch.cuda.synchronize()

    def flushed() -> None:
        flush.zero_()
        torch.cuda.synchronize()

    def fill(kind: str = "normal") -> None:
        bo.fill_inputs(gen, kind, True)
        bc.copy_inputs_from(bo)
        bc.prepare_outputs()
        flushed()

    before = {"alone": lambda: None, "flush+sync": flushed, "fill+flush": fill,
              "orig+flush": lambda: (orig.timed_call(po, tail=True), flushed()),
              "matmul+flush": lambda: ([a @ a for _ in range(12)], flushed()),
              "right after orig": lambda: orig.timed_call(po, tail=True),
              "fill large_logits": lambda: fill("large_logits"), "fill shifted": lambda: fill("shifted")}
    out = []
    for label, prep in before.items():
        times = []
        for _ in range(8):
            prep()
            times.append(cand.timed_call(pc, tail=True).event_ms)
        out.append(f"{label} {statistics.median(times[1:]) * 1e3:.1f}")
    for k, b in ((cand, bc), (orig, bo)):
        k.detach(b)
        arenas.free(b.arena)
    return " | ".join(out) + " (us)"


def main() -> None:
    cand_lib, orig_lib, ids = sys.argv[1], sys.argv[2], sys.argv[3:]
    arenas = CudaArenas(ctypes.CDLL(cudart_path()))
    guard = build_entry_guard(Path("/tmp/attnq-probe-guard"))
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    suite = {s.id: s for name in ("production", "full") for s in load_suite(name).scenarios}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cand, orig = _launcher("candidate", cand_lib, arenas, guard), _launcher("original", orig_lib, arenas, guard)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    for sid in ids:
        print(f"{sid}: {probe(suite[sid], cand, orig, arenas, sms, gen, flush, a)}", flush=True)
    cand.close()
    orig.close()


if __name__ == "__main__":
    main()
