"""Is a kernel's output bit-identical across N runs on the same inputs? (the bank's `bitwise-repeatability` question)

    python3 scripts/bitwise_repeats.py LIB.so [--runs 20]      (on a GPU box; LIB built with harness.compile.nvcc_flags)

Runs the largest FA3-grid shapes (d256 s16k causal / not, d128 s16k causal, GQA-free b2 s8k d128 causal) N times
each on the same bf16 inputs, NaN-filling o and lse before every call, and prints per shape whether o and lse
are bitwise equal to the first run's. Exit status 1 when any shape differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.abi import load_kernel, make_params  # noqa: E402

SHAPES = ((1, 16384, 8, 256, False), (1, 16384, 8, 256, True), (1, 16384, 16, 128, True), (2, 8192, 32, 128, True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lib", type=Path)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    lib = load_kernel(args.lib)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ok = True
    for b, s, h, d, causal in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        o, lse = torch.empty_like(q), torch.empty(b, h, s, device="cuda", dtype=torch.float32)
        p = make_params(q, k, v, o, lse, softmax_scale=d**-0.5, causal=causal, num_sms=sms)
        n = lib.workspace_bytes(p)
        ws = torch.zeros(max(n, 1), dtype=torch.uint8, device="cuda")
        if n:
            p.workspace, p.workspace_bytes = ws.data_ptr(), n
        first = None
        same = True
        for _ in range(args.runs):
            o.fill_(float("nan"))
            lse.fill_(float("nan"))
            if lib.fwd(p, torch.cuda.current_stream().cuda_stream) != 0:
                raise SystemExit(f"attn_fwd declined b{b} s{s} h{h} d{d} causal={causal}")
            torch.cuda.synchronize()
            if first is None:
                first = (o.clone(), lse.clone())
            else:
                same = same and torch.equal(first[0], o) and torch.equal(first[1], lse)
        ok = ok and same
        print(f"b{b} s{s} h{h} d{d} causal={causal}: {args.runs} runs bit-identical o and lse: {same}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
