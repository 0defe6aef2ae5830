"""One real launcher on this machine's GPU, the way the worker starts the candidate's: CUDA set-up and
warm-up, the sandbox (Landlock read/write rules, seccomp without threads, timers, sockets or IPC), the
post-sandbox probe, then the original kernel loaded, its workspace queried and one call run on an arena
of the checker's. Prints the sandbox report and the call's result; exit 1 when the launcher had to fall
back from mode "on", left a warning, or the call failed (then a sandbox rule breaks CUDA here: see
docs/checks.md "The trust split"). Used by scripts/gpu_run.sh step `sandbox`.

    python3 scripts/launcher_probe.py [--sandbox on|seccomp|off]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sandbox", default="on")
    args = ap.parse_args()
    import ctypes

    import torch

    from harness import ORIGINAL_KERNEL
    from harness.abi import make_params, null_data_copy
    from harness.arena import CudaArenas
    from harness.buffers import Buffers
    from harness.compile import compile_kernel
    from harness.guard import build_entry_guard
    from harness.launch_client import LauncherKernel
    from harness.scenarios import Scenario
    from harness.worker import cudart_path

    cache = Path(tempfile.mkdtemp(prefix="attnq-probe-"))
    built = compile_kernel(ORIGINAL_KERNEL, cache_dir=cache)
    guard = build_entry_guard(cache)
    torch.cuda.init()
    rt = ctypes.CDLL("libcudart.so.13")
    arenas = CudaArenas(rt)
    k = LauncherKernel("candidate", built.library, built.build_hash, arenas=arenas, device="cuda",
                       guard=str(guard) if guard else None, cudart=cudart_path(), sandbox=args.sandbox)
    ok = True
    try:
        print("sandbox", json.dumps(k.sandbox))
        ok = k.sandbox.get("mode") == args.sandbox and not k.sandbox.get("warnings")
        k.load()
        sc = Scenario(group="probe", batch=1, seqlen_q=256, seqlen_k=256, num_heads_q=4, num_heads_kv=4, head_dim=128,
                      causal=True)
        bufs = Buffers(torch, sc, torch.bfloat16, "cuda", allocate=arenas.allocate)
        bufs.apply("dense", 1.0)
        bufs.fill_inputs(torch.Generator(device="cuda").manual_seed(0), "normal")
        bufs.prepare_outputs()
        p = make_params(bufs.q, bufs.k, bufs.v, bufs.o_c, bufs.lse_c, softmax_scale=bufs.scale, causal=True,
                        num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
        ws = k.workspace_bytes(null_data_copy(p))
        torch.cuda.synchronize()
        k.attach(bufs)
        res = k.timed_call(p)
        torch.cuda.synchronize()
        written = not bool(torch.isnan(bufs.o_c.float()).any())
        print("call", json.dumps({"workspace_bytes": ws, "status": res.status, "error": res.error,
                                  "event_ms": res.event_ms, "threads_after": res.threads, "outputs_written": written}))
        ok = ok and res.status == 0 and res.error is None and res.threads == 0 and written
        k.detach(bufs)
        arenas.free(bufs.arena)
    finally:
        k.close()
    print("launcher probe:", "ok" if ok else "FAILED (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
