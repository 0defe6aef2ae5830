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
  scale F          both arenas re-laid out dense with softmax_scale F / sqrt(head_dim) (verify draws F in
                   [0.5, 1.5] on half of its calls), refilled, flush + sync
  padded_kv / padded_all / dense again   the same on verify's other drawn layouts, and back on dense
  read 2GB+flush / write 2GB+flush       a 2 GB read (sum) / write (zero) in this process, then flush + sync
  read orig arena+flush / read cand arena+flush   this process reads the original's / the candidate's input
                   regions (the memory the original's call reads, through this process's mapping), flush + sync
  orig tiny+flush  the original's timed call on the smallest bf16 scenario of the suites (its process active, no
                   large read), flush + sync
  orig+flush+cand  the original's call, flush, one candidate call, flush: the timed call is the second after it
PROBE_CONDITIONS=a,b (labels as above) runs only those.
Prints the median (us) of each. Written for the decode discrepancy of kernels/NOTES.md (session 7): attnq's verdict
times b64 sq4 h32x8 decode at ~228 us, every standalone reproduction at ~147 us; the pieces the loop adds are
tried one at a time here. Build the libraries with `scripts/kernel_bench.py FILE --variant NAME= --build-only
--keep DIR` (the same nvcc flags as attnq's compile).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
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
    return bufs, _params(bufs, sc, sms)


def _params(bufs: Buffers, sc, sms: int):
    """The call's params on ``bufs``' current views (and its workspace)."""
    p = make_params(bufs.q, bufs.k, bufs.v, bufs.o_c, bufs.lse_c, softmax_scale=bufs.scale, causal=sc.causal,
                    num_sms=sms)
    if bufs.workspace is not None:
        p.workspace, p.workspace_bytes = bufs.workspace.data_ptr(), bufs.workspace_bytes
    return p


_BIG: list = []


def big():
    """A 2 GB device buffer of this process (allocated on first use): more memory than any scenario's inputs."""
    if not _BIG:
        _BIG.append(torch.empty(2 << 30, dtype=torch.uint8, device="cuda"))
    return _BIG[0]


def probe(sc, cand: LauncherKernel, orig: LauncherKernel, arenas: CudaArenas, sms: int, gen, flush, a, tiny) -> str:
    """One scenario: the candidate's median event time (us) after each piece of the loop, as one line.
    ``tiny``: a small scenario the original also runs (its other process active, without the large read)."""
    bc, pc = _buffers(cand, sc, arenas, sms)
    bo, po = _buffers(orig, sc, arenas, sms)
    bt, pt = _buffers(orig, tiny, arenas, sms)
    bt.fill_inputs(gen, "normal", True)
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

    def relayout(layout: str, factor: float) -> None:
        """Both arenas on ``layout`` with softmax_scale factor ``factor`` (as verify's drawn calls), refilled."""
        nonlocal pc, po
        for k, b in ((cand, bc), (orig, bo)):
            b.apply(layout, factor)
        pc, po = _params(bc, sc, sms), _params(bo, sc, sms)
        fill()

    def drawn(layout: str, factor: float):
        return lambda: (relayout(layout, factor), flushed())

    before = {"alone": lambda: None, "flush+sync": flushed, "fill+flush": fill,
              "orig+flush": lambda: (orig.timed_call(po, tail=True), flushed()),
              "matmul+flush": lambda: ([a @ a for _ in range(12)], flushed()),
              "right after orig": lambda: orig.timed_call(po, tail=True),
              "fill large_logits": lambda: fill("large_logits"), "fill shifted": lambda: fill("shifted"),
              "scale 0.5": drawn("dense", 0.5), "scale 1.5": drawn("dense", 1.5),
              "padded_kv": drawn("padded_kv", 1.0), "padded_all": drawn("padded_all", 1.0),
              "dense again": drawn("dense", 1.0),
              "read 2GB+flush": lambda: (big().view(torch.int64).sum(), flushed()),
              "write 2GB+flush": lambda: (big().zero_(), flushed()),
              "read orig arena+flush": lambda: (sum(t.float().sum() for t in bo.input_regions_t()), flushed()),
              "read cand arena+flush": lambda: (sum(t.float().sum() for t in bc.input_regions_t()), flushed()),
              "orig tiny+flush": lambda: (orig.timed_call(pt, tail=True), flushed()),
              "orig+flush+cand": lambda: (orig.timed_call(po, tail=True), flushed(), cand.timed_call(pc, tail=True),
                                          flushed())}
    only = [c for c in os.environ.get("PROBE_CONDITIONS", "").split(",") if c]
    unknown = [c for c in only if c not in before]
    if unknown:
        raise SystemExit(f"PROBE_CONDITIONS: unknown {unknown}; known: {list(before)}")
    out = []
    for label, prep in before.items():
        if only and label not in only:
            continue
        times = []
        for _ in range(8):
            prep()
            times.append(cand.timed_call(pc, tail=True).event_ms)
        if label.startswith(("scale", "padded", "dense again")):
            label += f" ({bc.scale:.4f})"
        out.append(f"{label} {statistics.median(times[1:]) * 1e3:.1f}")
    for k, b in ((cand, bc), (orig, bo), (orig, bt)):
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
    tiny = min(suite.values(), key=lambda t: (t.dtype != "bf16", t.flops))  # the original's other-process call, small
    cand, orig = _launcher("candidate", cand_lib, arenas, guard), _launcher("original", orig_lib, arenas, guard)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    for sid in ids:
        print(f"{sid}: {probe(suite[sid], cand, orig, arenas, sms, gen, flush, a, tiny)}", flush=True)
    cand.close()
    orig.close()


if __name__ == "__main__":
    main()
