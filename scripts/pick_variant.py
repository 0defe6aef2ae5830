"""Pick the variant to adopt from a kernel_bench JSON: the best geomean ratio vs FA3 among variants whose
checks passed, if it beats `base` by at least --min-gain (else `base`). Prints the variant name.

    python3 scripts/pick_variant.py bench.json [--min-gain 0.02] [--min-seqlen 2048] [--class-floor 0.985]
        [--dims 96] [--only base,d96n]

--min-seqlen: only the FA3-grid rows (keys ``d<head_dim>_<c|n>_s<seqlen>``) with at least this seqlen count (the
bench's s512/s1k rows carry FA3's Python-call overhead; run 42: FA3 slower at s512 than at s1k); other keys stay.
--class-floor: a variant is eligible only if, in every class (the key without its ``_s<seqlen>``), its geomean
ratio to `base` is at least this. --dims: only the rows of these head_dims (keys ``d<head_dim>_...``); --only: only
these variants (`base` always stays): one bench of independent variants answers one question per call (run 56: the
d128 key tile on d128 rows, the d96 kernels on d96 rows). Per variant, stderr gets its geomean vs FA3, vs `base`, and
its worst class.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

_SEQLEN = re.compile(r"_s(\d+)$")
_DIM = re.compile(r"^d(\d+)_")


def geomean_vs_fa3(res: dict, fa3: dict) -> float:
    """Geomean of ``res[key] / fa3[key]`` (TFLOP/s ratios) over the keys both have; nan when none."""
    rr = [res[k] / fa3[k] for k in res if k in fa3 and isinstance(res[k], float)]
    return math.exp(sum(map(math.log, rr)) / len(rr)) if rr else float("nan")


def keep_rows(res: dict, min_seqlen: int) -> dict:
    """``res`` without the rows whose key ends in ``_s<seqlen>`` with seqlen < ``min_seqlen``."""
    return {k: v for k, v in res.items() if not ((m := _SEQLEN.search(k)) and int(m.group(1)) < min_seqlen)}


def keep_dims(res: dict, dims: set[int] | None) -> dict:
    """``res`` without the rows whose key starts with ``d<head_dim>_`` for a head_dim outside ``dims`` (None: all);
    other keys stay."""
    if dims is None:
        return dict(res)
    return {k: v for k, v in res.items() if not ((m := _DIM.match(k)) and int(m.group(1)) not in dims)}


def class_ratios(res: dict, base: dict) -> dict[str, float]:
    """Per class (key without ``_s<seqlen>``), the geomean of ``res[key] / base[key]`` over the keys both have."""
    by: dict[str, list[float]] = {}
    for k, v in res.items():
        if k in base and isinstance(v, float) and isinstance(base[k], float):
            by.setdefault(_SEQLEN.sub("", k), []).append(math.log(v / base[k]))
    return {c: math.exp(sum(xs) / len(xs)) for c, xs in by.items()}


def pick(data: dict, min_gain: float = 0.02, min_seqlen: int = 0, class_floor: float = 0.0,
         dims: set[int] | None = None, only: set[str] | None = None) -> tuple[str, dict]:
    """The variant to adopt and, per variant whose checks passed, ``(vs FA3, vs base, worst class ratio)``
    (without FA3 in the JSON every score is nan and the pick is `base`). ``dims``: only rows of these head_dims;
    ``only``: only these variants (and `base`)."""
    unknown = sorted((only or set()) - set(data))
    if unknown:  # a typo would silently leave base as the pick
        raise ValueError(f"--only names variants the bench does not have: {', '.join(unknown)} "
                         f"(it has {', '.join(n for n in data if n != 'fa3')})")
    fa3 = keep_dims(keep_rows(data.get("fa3", {}), min_seqlen), dims)
    runs = {n: keep_dims(keep_rows(r, min_seqlen), dims) for n, r in data.items()
            if n != "fa3" and not r.get("check_failures") and (only is None or n in only or n == "base")}
    scores = {n: geomean_vs_fa3(r, fa3) for n, r in runs.items()}
    base = scores.get("base", float("nan"))
    worst = {n: min(class_ratios(r, runs.get("base", {})).values(), default=1.0) for n, r in runs.items()}
    table = {n: (scores[n], scores[n] / base, worst[n]) for n in runs}
    eligible = [n for n in scores if not math.isnan(scores[n]) and worst[n] >= class_floor]
    best = max(eligible, key=scores.get, default="base")
    return (best if best != "base" and scores[best] >= base * (1 + min_gain) else "base"), table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", type=Path)
    ap.add_argument("--min-gain", type=float, default=0.02)
    ap.add_argument("--min-seqlen", type=int, default=0, help="only grid rows with at least this seqlen")
    ap.add_argument("--class-floor", type=float, default=0.0, help="every class at least this ratio to base")
    ap.add_argument("--dims", type=lambda t: {int(x) for x in t.split(",")}, default=None,
                    help="only rows of these head_dims, e.g. 96,128")
    ap.add_argument("--only", type=lambda t: set(t.split(",")), default=None,
                    help="only these variants (base always stays), e.g. d96n,d96n3")
    args = ap.parse_args()
    try:
        best, table = pick(json.loads(args.bench.read_text()), args.min_gain, args.min_seqlen, args.class_floor,
                           args.dims, args.only)
    except ValueError as exc:
        ap.error(str(exc))
    for n, (g, vb, w) in table.items():
        print(f"{n}: {g:.3f} vs FA3, {vb:.3f} vs base, worst class {w:.3f}", file=sys.stderr)
    print(best)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
