"""Drive a red-team host kernel through the CPU trust split exactly like tests/test_trust_split.py::_verify."""
import argparse
import hashlib
import json
import tempfile
from pathlib import Path

from harness.arena import HostArenas
from harness.checker import HostDevice, Runner
from harness.guard import build_entry_guard
from harness.launch_client import LauncherKernel
from harness.scenarios import Scenario
from harness.worker import WorkerJob
from tests import hostkernels

ap = argparse.ArgumentParser()
ap.add_argument("lib"); ap.add_argument("--samples", type=int, default=9); ap.add_argument("--seed", type=int, default=11)
ap.add_argument("--shape", default="2,20,24,4,2,16,1")  # b,sq,sk,hq,hk,d,causal
ap.add_argument("--sandbox", default="on")
ap.add_argument("--no-split", action="store_true", help="each repeat in its source's process (before the fix)")
a = ap.parse_args()
b, sq, sk, hq, hk, d, c = map(int, a.shape.split(","))
SC = Scenario(group="t", batch=b, seqlen_q=sq, seqlen_k=sk, num_heads_q=hq, num_heads_kv=hk, head_dim=d, causal=bool(c))
built = Path(tempfile.mkdtemp(prefix="rt-built-"))
orig_lib, orig_sha = hostkernels.build(built)
cand_lib = Path(a.lib); cand_sha = hashlib.sha256(cand_lib.read_bytes()).hexdigest()
arenas = HostArenas(); g = str(build_entry_guard(built))
common = {"arenas": arenas, "device": "cpu", "guard": g, "sandbox": a.sandbox}
orig = LauncherKernel("original", str(orig_lib), orig_sha, **common)
cand = LauncherKernel("candidate", str(cand_lib), cand_sha, **common)
cand_b = None if a.no_split else LauncherKernel("candidate-b", str(cand_lib), cand_sha, **common)
try:
    orig.load(), cand.load()
    if cand_b is not None:
        cand_b.load()
    job = WorkerJob(original_sparse_ms=0.0, candidate_lib=str(cand_lib), original_lib=str(orig_lib), scenarios=[SC], seed=a.seed, device="cpu",
                    min_samples=a.samples, max_samples=a.samples, budget_ms=1e9)
    res = Runner(job, cand, orig, HostDevice(), allocate=arenas.allocate, free=arenas.free, cand_b=cand_b).run(SC, 0)
finally:
    cand.close(), orig.close()
    if cand_b is not None:
        cand_b.close()
out = {"correct": res.correct, "check": res.check, "failure_kind": res.failure_kind, "message": res.message,
       "speedup": res.speedup, "cand_ms": res.candidate.median_ms if res.candidate else None,
       "orig_ms": res.original.median_ms if res.original else None, "sandbox": cand.sandbox}
print(json.dumps(out, indent=1))
