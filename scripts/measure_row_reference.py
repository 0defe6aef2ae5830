"""Cost of the timed calls' sampled-row reference against a full fp32 reference, on the GPU
(scripts/gpu_run.sh step `rowcost`). Prints one line per scenario: ms of each (median of 5)."""

import functools
import statistics
import sys
import time

import torch

from harness.checker import ROW_PAIRS, ROWS_PER_PAIR
from harness.checks import sample_rows
from harness.reference import attention_reference, attention_reference_rows
from harness.scenarios import load_suite


def ms(fn) -> float:
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    sc_all = load_suite(sys.argv[1] if len(sys.argv) > 1 else "full").scenarios
    picks = sorted(sc_all, key=lambda s: s.flops)[-3:] + [max(sc_all, key=lambda s: s.seqlen_k)]
    g = torch.Generator(device="cuda").manual_seed(0)
    for sc in picks:
        dt = torch.bfloat16 if sc.dtype == "bf16" else torch.float16
        q = torch.randn(sc.batch, sc.seqlen_q, sc.num_heads_q, sc.head_dim, device="cuda", dtype=dt)
        k = torch.randn(sc.batch, sc.seqlen_k, sc.num_heads_kv, sc.head_dim, device="cuda", dtype=dt)
        v = torch.randn_like(k)
        rows = sample_rows(sc.batch, sc.num_heads_q, sc.seqlen_q, ROW_PAIRS, ROWS_PER_PAIR, g, "cuda")
        t_rows = ms(functools.partial(attention_reference_rows, q, k, v, rows.batch_idx, rows.head_idx, rows.rows,
                                      causal=sc.causal))
        t_full = ms(functools.partial(attention_reference, q, k, v, causal=sc.causal))
        print(f"{sc.id}: sampled rows {t_rows:.2f} ms, full reference {t_full:.1f} ms")


if __name__ == "__main__":
    main()
