"""Pick the variant to adopt from a kernel_bench JSON: the best geomean ratio vs FA3 among variants whose
checks passed, if it beats `base` by at least --min-gain (else `base`). Prints the variant name.

    python3 scripts/pick_variant.py bench.json [--min-gain 0.02]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def geomean_vs_fa3(res: dict, fa3: dict) -> float:
    """Geomean of ``res[key] / fa3[key]`` (TFLOP/s ratios) over the keys both have; nan when none."""
    rr = [res[k] / fa3[k] for k in res if k in fa3 and isinstance(res[k], float)]
    return math.exp(sum(map(math.log, rr)) / len(rr)) if rr else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", type=Path)
    ap.add_argument("--min-gain", type=float, default=0.02)
    args = ap.parse_args()
    data = json.loads(args.bench.read_text())
    fa3 = data.pop("fa3", {})
    scores = {n: geomean_vs_fa3(r, fa3) for n, r in data.items() if not r.get("check_failures")}
    for n, g in scores.items():
        print(f"{n}: {g:.3f}", file=sys.stderr)
    base = scores.get("base", float("nan"))
    best = max((n for n in scores if not math.isnan(scores[n])), key=scores.get, default="base")
    print(best if best != "base" and scores[best] >= base * (1 + args.min_gain) else "base")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
