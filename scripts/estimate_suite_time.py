"""Estimate a suite's `attnq verify` wall time on the H200 before running it, from the scenario sizes.

    python scripts/estimate_suite_time.py [SUITE] [--base-ids full]   # SUITE default: full

The model (seconds per scenario) is fitted to the H200 verdicts of kernels/attn_fast.cu (run 11,
kernels/campaigns/fast-kernel/verdicts/, and run 11's 47.7 s full run without anchors, docs/gpu-results.md):

* original's time per call: waves x key tiles x 14.4 us x head_dim / 128 (64-row query blocks, 64-key tiles,
  2 blocks per SM for head_dim <= 128, 1 above; matches 49 ms for the 16k d128 prefill and 3.9 ms for the 16k
  decode of `full`); the candidate's (a fast kernel): max(6 us, FLOPs / 280 TFLOP/s, bytes / 3 TB/s);
* timing: samples = 10..30, as many as fit 150 ms; each costs both calls + 1.6 ms of harness work (run 11's
  tiny scenarios, anchors taken out) + 0.02 ms per million elements of q, k, v, o (fills, copies, checks);
* checks: 2 draws x (candidate + original + fp32 reference at 0.07 s per TFLOP + 4 ms) + the extra repeats;
* 6 ms of set-up per scenario; a fresh_process scenario after the first costs a worker start (3.5 s);
* all of it times CALIBRATION = 0.86, which makes the 153 scenarios `full` had before the bug groups come to
  the 44 s they took in run 11 (47.7 s wall without anchors, less the worker start and set-up).

Printed: the estimate for the scenarios not in --base-ids (when given) and for all; add the measured time of
the base suite (47.7 s for `full`'s first 153 scenarios, run 11) to the first to get the new total.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.scenarios import Scenario, load_suite

TILE_US = 14.4
SMS = 132
CALIBRATION = 0.86


def original_ms(sc: Scenario) -> float:
    blocks = math.ceil(sc.seqlen_q / 64) * sc.num_heads_q * sc.batch
    occupancy = 2 if sc.head_dim <= 128 else 1
    waves = math.ceil(blocks / (SMS * occupancy))
    keys = sc.visible_pairs / sc.seqlen_q if sc.causal else sc.seqlen_k
    tiles = max(1, math.ceil(keys / 64))
    return max(0.01, waves * tiles * TILE_US * sc.head_dim / 128 / 1e3)


def candidate_ms(sc: Scenario) -> float:
    return max(0.006, sc.flops / 280e12 * 1e3, sc.bytes_min / 3e12 * 1e3)


def scenario_s(sc: Scenario) -> float:
    t_o, t_c = original_ms(sc), candidate_ms(sc)
    elems = (2 * sc.batch * sc.seqlen_q * sc.num_heads_q + 2 * sc.batch * sc.seqlen_k * sc.num_heads_kv) * sc.head_dim
    per_sample = t_o + t_c + 1.6 + 0.02 * elems / 1e6
    samples = max(10, min(30, math.ceil(150.0 / per_sample)))
    reference = 0.07 * sc.flops / 1e12 + 0.004
    check = 2 * (t_o + t_c) / 1e3 + 2 * reference + (sc.repeats - 1) * t_c / 1e3
    return CALIBRATION * (0.006 + check + samples * per_sample / 1e3)


def main(argv: list[str]) -> int:
    name = argv[0] if argv and not argv[0].startswith("--") else "full"
    base = set()
    if "--base-ids" in argv:
        base = set(load_suite(argv[argv.index("--base-ids") + 1]).ids())
    suite = load_suite(name)
    fresh = sum(1 for s in suite.scenarios if s.fresh_process)
    extra = 3.5 * max(0, fresh - 1)
    new = [s for s in suite.scenarios if s.id not in base]
    by_group: dict[str, float] = {}
    for s in new:
        by_group[s.group] = by_group.get(s.group, 0.0) + scenario_s(s)
    print(f"suite {suite.name}: {len(suite.scenarios)} scenarios; {len(new)} estimated here")
    for g, t in by_group.items():
        print(f"  {g:<16} {t:6.1f} s")
    print(f"  estimated: {sum(by_group.values()) + extra:.1f} s (+ worker restarts for fresh_process: {extra:.1f} s)")
    slow = sorted(new, key=scenario_s, reverse=True)[:5]
    print("  costliest: " + ", ".join(f"{s.id} {scenario_s(s):.2f} s" for s in slow))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
