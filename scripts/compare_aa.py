"""Compare the A/A runs without and with the host-path cover on the kernels (scripts/gpu_run.sh steps `aa`
and `aa_cover`) and say which rule to keep (issue 16).

    python3 scripts/compare_aa.py LOGS_DIR      # reads LOGS_DIR/aa_<n>.json and LOGS_DIR/aa_cover_<n>.json

Per set (off: anchors covered only; on: ATTNQ_HOST_COVER_ALL=1): the A/A geomeans (copy / original) and
their spread (max/min - 1, the noise floor); the original's median time with / without the cover per
scenario (geomean, per group, the largest changes); the anchors' time with / without (a control: the
anchors are covered in both sets, so this is the drift between the sets); the vs-anchor geomeans.
Decision: a kernel-time change no larger than the noise means the cover changes nothing (keep it on the
anchors only: cheaper, same figures); a larger change with a no-less-stable A/A means the kernels' host
path was timed while the anchors' was not (make the cover apply to all: one rule for every timed call).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path


def load(logs: Path, prefix: str) -> list[dict]:
    """Verdicts LOGS/<prefix><n>.json (n = 1, 2, ...) that hold scenarios."""
    out = []
    for p in sorted(logs.glob(f"{prefix}[0-9]*.json")):
        try:
            v = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if v.get("scenarios"):
            out.append(v)
    return out


def gmean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def per_scenario_ms(runs: list[dict], who: str) -> dict[str, tuple[str, float]]:
    """scenario id -> (group, median over runs of ``who``'s median ms); ``who``: original or anchor:NAME."""
    acc: dict[str, tuple[str, list[float]]] = {}
    for v in runs:
        for r in v["scenarios"]:
            t = r.get("original") if who == "original" else (r.get("anchors") or {}).get(who.split(":", 1)[1])
            if r.get("correct") and t and t.get("median_ms"):
                acc.setdefault(r["id"], (r.get("group", ""), []))[1].append(float(t["median_ms"]))
    return {k: (g, statistics.median(xs)) for k, (g, xs) in acc.items()}


def ratios(off: list[dict], on: list[dict], who: str) -> dict[str, tuple[str, float]]:
    """scenario id -> (group, on / off median ms) over scenarios timed in both sets."""
    a, b = per_scenario_ms(off, who), per_scenario_ms(on, who)
    return {k: (g, b[k][1] / ms) for k, (g, ms) in a.items() if k in b}


def spread(runs: list[dict]) -> float:
    gms = [v["geomean_speedup"] for v in runs if v.get("geomean_speedup")]
    return max(gms) / min(gms) - 1 if gms else float("nan")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    logs = Path(argv[0])
    off, on = load(logs, "aa_"), load(logs, "aa_cover_")
    if not off or not on:
        print(f"compare_aa: need aa_<n>.json and aa_cover_<n>.json verdicts in {logs} (found {len(off)} and {len(on)})")
        return 1
    lines = []
    for name, runs in (("off", off), ("on", on)):
        gms = ", ".join(f"{v.get('geomean_speedup') or float('nan'):.4f}" for v in runs)
        anchors = {a: gmean([v["geomean_vs_anchor"][a] for v in runs if a in v.get("geomean_vs_anchor", {})])
                   for a in sorted({a for v in runs for a in v.get("geomean_vs_anchor", {})})}
        covers = {json.dumps(v.get("host_cover_cycles", {}), sort_keys=True) for v in runs}
        lines.append(f"cover {name}: {len(runs)} runs, A/A geomeans {gms}, spread {spread(runs):.2%}; original vs "
                     + (", ".join(f"{a} {x:.3f}x" for a, x in anchors.items()) or "no anchor")
                     + f"; host_cover_cycles {' | '.join(sorted(covers))}")
    orig = ratios(off, on, "original")
    if not orig:
        print("\n".join(lines + ["compare_aa: no scenario timed correctly in both sets"]))
        return 1
    effect = gmean([x for _, x in orig.values()])
    groups: dict[str, list[float]] = {}
    for g, x in orig.values():
        groups.setdefault(g, []).append(x)
    by_group = {g: gmean(xs) for g, xs in sorted(groups.items())}
    top = sorted(orig.items(), key=lambda kv: -abs(math.log(kv[1][1])))[:5]
    lines.append(f"original time on/off: geomean {effect:.4f} over {len(orig)} scenarios; by group "
                 + ", ".join(f"{g} {x:.3f}" for g, x in by_group.items()))
    lines.append("largest changes: " + ", ".join(f"{k} {x:.3f}" for k, (_, x) in top))
    drift = 0.0
    names = sorted({a for v in off + on for r in v["scenarios"] for a in (r.get("anchors") or {})})
    for a in names:
        ctl = ratios(off, on, f"anchor:{a}")
        if ctl:
            x = gmean([r for _, r in ctl.values()])
            drift = max(drift, abs(x - 1))
            lines.append(f"control: {a} anchor time on/off {x:.4f} (covered in both sets: the drift between them)")
    noise = max(spread(off), spread(on), drift, 0.01)
    worst = max(abs(x - 1) for x in by_group.values())
    if worst <= noise:
        decision = (f"the cover changes no group's kernel time beyond the noise ({worst:.2%} <= {noise:.2%}): keep it "
                    "on the anchors only (ATTNQ_HOST_COVER_ALL off; same figures, cheaper)")
    elif spread(on) <= spread(off) + 0.005:
        decision = (f"the cover changes kernel times beyond the noise ({worst:.2%} > {noise:.2%}) and the A/A stays as "
                    "stable: the kernels' host path was timed while the anchors' was not; apply the cover to all "
                    "(make host_cover_all default true)")
    else:
        decision = (f"the cover changes kernel times ({worst:.2%}) but the A/A is less stable with it (spread "
                    f"{spread(on):.2%} vs {spread(off):.2%}): keep anchors only and look at the largest changes")
    print("\n".join([*lines, "decision: " + decision]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
