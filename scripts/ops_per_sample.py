"""Torch operations the checker issues per timed sample, by the harness function that issues them (CPU, no GPU).

    python scripts/ops_per_sample.py [--seed 1] [--scenario padded|declared] [--depth 2] [--top 40]

Each torch operation of the checker's timing loop (harness.checker.Runner._time) is one kernel launch or one host
synchronization on the GPU, and its host cost (the dispatcher, ~5-20 us each on the GPU box) is most of the
per-sample host time ``h`` of scripts/budget_model.py (docs/checks.md "How many timed samples"). This script runs
one fixed scenario through the CPU checker (tests/checker_support.py: an honest Python kernel on the arenas, the
verifier's defaults: 2 checked draws, 4 determinism repeats, 10..30 samples, the candidate in two processes, the
original in every sample), counts every ATen operation dispatched while the timing loop runs (a
``TorchDispatchMode``; the kernels' own operations, inside the endpoints' calls, are not counted: on the GPU they
are the kernel) and prints, per timed sample:

* all operations, and of them those that are views (no launch on the GPU, host cost only);
* the host reads (``.item()``, ``.tolist()``, ``bool(t)``, ...: each a device synchronization);
* operations by issuing function: the chain of harness functions below ``Runner._time`` (``--depth`` levels),
  with the whole-output fp32 checks (harness.full_check.whole_check, a secret subset of the samples) apart;
* the top ATen operators.

``--scenario declared``: a scenario with a declared layout (cache k/v with NaN slack) and declared inputs.
The figures are deterministic for a seed (the draws come from it). tests/test_sample_ops.py asserts the total
stays below its recorded figure.
"""

from __future__ import annotations

import argparse
import collections
import sys
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def scenario(name: str) -> Any:
    """The fixed CPU scenarios: ``padded`` (drawn layouts, GQA, causal) or ``declared`` (cache layout, declared
    inputs)."""
    from harness.scenarios import Scenario

    if name == "padded":
        return Scenario(group="t", batch=2, seqlen_q=24, seqlen_k=40, num_heads_q=4, num_heads_kv=2, head_dim=16,
                        causal=True)
    from harness.inputs import InputsSpec
    from harness.layouts import LayoutSpec

    return Scenario(group="t", batch=2, seqlen_q=24, seqlen_k=40, num_heads_q=4, num_heads_kv=2, head_dim=64,
                    causal=False, layout=LayoutSpec(k={"kind": "cache", "capacity": 64}, v={"kind": "cache"}),
                    inputs=InputsSpec(v={"dist": "head_tagged"}))


def measure(sc: Any, seed: int = 1, depth: int = 2) -> dict[str, Any]:
    """Run ``sc`` through the CPU checker (the verifier's defaults) and count the timing loop's torch operations.

    Returns a dict: ``samples`` (timed samples, repeats included), ``ops`` (ATen operations in the timing loop),
    ``views`` (of them, view operations), ``reads`` (host reads: each a synchronization on the GPU), ``whole_reads`` (of them, inside the whole-output
    checks), ``whole_ops``
    (operations inside harness.full_check.whole_check), ``whole_checks`` (its calls in the loop), ``by_fn``
    (Counter: issuing-function chain -> operations), ``by_op`` (Counter: ATen operator -> operations), ``correct``.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import harness.checker as hc
    from harness.checker import HostDevice, Runner
    from harness.worker import WorkerJob

    sys.path.insert(0, str(ROOT))
    from tests.checker_support import PyKernel, honest

    state = {"on": False, "in_kernel": False}
    by_fn: collections.Counter = collections.Counter()
    by_op: collections.Counter = collections.Counter()
    totals = collections.Counter()

    def key_of() -> tuple[str, bool]:
        frames = [f for f in traceback.extract_stack(limit=60) if "/harness/" in f.filename]
        names = [f.name for f in frames]
        whole = "whole_check" in names
        try:
            i = names.index("_time")
        except ValueError:
            return "?", whole
        chain = names[i + 1:i + 1 + depth] or ["_time"]
        return " > ".join(chain), whole

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if state["on"] and not state["in_kernel"]:
                key, whole = key_of()
                totals["ops"] += 1
                totals["views"] += bool(getattr(func, "is_view", False))
                totals["whole_ops"] += whole
                by_fn[("[whole_check] " if whole else "") + key] += 1
                by_op[str(func.overloadpacket.__name__)] += 1
            return func(*args, **(kwargs or {}))

    real_run = PyKernel._run

    def run_outside(self: Any, p: Any) -> int:
        state["in_kernel"] = True
        try:
            return real_run(self, p)
        finally:
            state["in_kernel"] = False

    real_time, real_pair, real_whole = Runner._time, Runner._timed_pair, hc.Runner._time

    def timed(self: Any, *a: Any, **k: Any) -> Any:
        state["on"] = True
        try:
            return real_time(self, *a, **k)
        finally:
            state["on"] = False

    def pair(self: Any, *a: Any, **k: Any) -> Any:
        totals["samples"] += 1
        return real_pair(self, *a, **k)

    import harness.full_check as fc

    real_whole = fc.whole_check

    def whole(*a: Any, **k: Any) -> Any:
        if not state["on"]:
            return real_whole(*a, **k)
        totals["whole_checks"] += 1
        state["whole"] = True
        try:
            return real_whole(*a, **k)
        finally:
            state["whole"] = False

    reads = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "nonzero")
    real_reads = {n: getattr(torch.Tensor, n) for n in reads}

    def reader(name: str) -> Any:
        real = real_reads[name]

        def counted(self: Any, *a: Any, **k: Any) -> Any:
            if state["on"] and not state["in_kernel"]:
                totals["reads"] += 1
                totals["whole_reads"] += bool(state.get("whole"))
            return real(self, *a, **k)
        return counted

    job = WorkerJob(candidate_lib="c.so", original_lib="o.so", scenarios=[sc], seed=seed, device="cpu", draws=2,
                    repeats=4, min_samples=10, max_samples=30, budget_ms=0.0, original_sparse_ms=0.0)
    runner = Runner(job, PyKernel(honest), PyKernel(honest, "original"), HostDevice(),
                    cand_b=PyKernel(honest, "candidate-b"))
    PyKernel._run, Runner._time, Runner._timed_pair, fc.whole_check = run_outside, timed, pair, whole
    for n in reads:
        setattr(torch.Tensor, n, reader(n))
    try:
        with Counting():
            res = runner.run(sc, 0)
    finally:
        PyKernel._run, Runner._time, Runner._timed_pair, fc.whole_check = real_run, real_time, real_pair, real_whole
        for n in reads:
            setattr(torch.Tensor, n, real_reads[n])
    return {"samples": totals["samples"], "ops": totals["ops"], "views": totals["views"], "reads": totals["reads"],
            "whole_reads": totals["whole_reads"], "whole_ops": totals["whole_ops"], "whole_checks": totals["whole_checks"], "by_fn": by_fn, "by_op": by_op,
            "correct": res.correct, "message": res.message}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenario", choices=("padded", "declared"), default="padded")
    ap.add_argument("--depth", type=int, default=2, help="levels of the issuing-function chain below _time")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args(argv)
    sc = scenario(a.scenario)
    m = measure(sc, a.seed, a.depth)
    n = max(m["samples"], 1)
    per = (m["ops"] - m["whole_ops"]) / n
    print(f"{sc.id} seed {a.seed}: correct={m['correct']} {m['message'] or ''}")
    print(f"  {m['samples']} timed samples, {m['whole_checks']} whole-output checks among them")
    print(f"  ops per sample: {m['ops'] / n:.1f} all, {per:.1f} without the whole-output checks "
          f"({m['whole_ops'] / max(m['whole_checks'], 1):.1f} per whole check); views {m['views'] / n:.1f} per sample; "
          f"host reads {(m['reads'] - m['whole_reads']) / n:.2f} per sample "
          f"(and {m['whole_reads']} in the whole-output checks)")
    print("  per sample, by issuing function (below Runner._time):")
    for k, v in m["by_fn"].most_common(a.top):
        print(f"    {v / n:7.2f}  {k}")
    print("  per sample, by ATen operator:")
    for k, v in m["by_op"].most_common(a.top):
        print(f"    {v / n:7.2f}  {k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
