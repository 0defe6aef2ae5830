"""Per-call host time of an exported package's op and ``flash_attn_func`` over a direct ``attn_fwd`` call.

Run in a process of its own for each implementation (the op's registrations are per process, so one
measurement never sees the other's)::

    python -m tests.gpu.export_overhead PACKAGE_DIR PACKAGE_NAME

(with ``<NAME>_NATIVE=0`` in the environment for the Python op). Prints one JSON line: ``impl_info()`` of the
package as imported, then host microseconds per call (median of 21 repeats of 200 back-to-back calls, batch
1, seqlen 128, 4 heads, head_dim 64, bf16): ``direct_attn_fwd_us`` (ctypes, prebuilt params, preallocated
outputs, the package's own .so), ``op_us``, ``flash_attn_func_us`` and the two overheads.
"""

from __future__ import annotations

import importlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

SHAPE = "batch 1, seqlen 128, heads 4, head_dim 64, bf16"


def host_us(fn, calls: int = 200, repeats: int = 21) -> float:  # type: ignore[no-untyped-def]
    """Median host time per call (us) of ``calls`` back-to-back calls (the launch queue never fills)."""
    for _ in range(20):
        fn()
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(samples)


@torch.no_grad()
def measure(directory: str, name: str) -> dict[str, Any]:
    """Import the package ``name`` from ``directory`` and time its op against a direct attn_fwd call."""
    from harness.abi import load_kernel, make_params

    sys.path.insert(0, directory)
    pkg = importlib.import_module(name)
    at_import = pkg.impl_info()
    lib = load_kernel(Path(pkg.__file__).parent / pkg.MANIFEST["libraries"]["sm_90a"]["file"])  # the same .so
    q = torch.randn(1, 128, 4, 64, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    o, lse = torch.empty_like(q), torch.empty(1, 4, 128, device="cuda", dtype=torch.float32)
    params = make_params(q, k, v, o, lse, softmax_scale=0.125, causal=False,
                         num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    assert lib.workspace_bytes(params) == 0
    stream = torch.cuda.current_stream().cuda_stream
    op = pkg.fwd
    pkg.flash_attn_func(q, k, v)  # the first call loads the library (and attaches it to the native op)
    figures: dict[str, Any] = {"shape": SHAPE, "impl_at_import": at_import, **pkg.impl_info(),
                               "direct_attn_fwd_us": host_us(lambda: lib.fwd(params, stream)),
                               "op_us": host_us(lambda: op(q, k, v, 0.125, False)),
                               "flash_attn_func_us": host_us(lambda: pkg.flash_attn_func(q, k, v))}
    figures["op_overhead_us"] = figures["op_us"] - figures["direct_attn_fwd_us"]
    figures["flash_attn_func_overhead_us"] = figures["flash_attn_func_us"] - figures["direct_attn_fwd_us"]
    figures["same_bits"] = bool(torch.equal(op(q, k, v, 0.125, False)[0], pkg.flash_attn_func(q, k, v)))
    return figures


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2])))
