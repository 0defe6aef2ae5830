"""Print a one-line summary of a Verdict JSON file (used by scripts/gpu_run.sh)."""

import json
import sys

try:
    with open(sys.argv[1]) as fh:
        v = json.load(fh)
except Exception as exc:  # noqa: BLE001 - any unreadable verdict becomes one summary line, never a traceback
    print(f"(no verdict: {exc})")
    raise SystemExit(0) from None
if "status" not in v:
    print(f"error: {v.get('message', v)}"[:400])
    raise SystemExit(0)
gm = v.get("geomean_speedup")
parts = [f"{v['status']} {v['num_correct']}/{v['num_scenarios']}", f"geomean {gm:.3f}x" if gm else "geomean -",
         f"wall {v.get('wall_s', 0):.1f}s (compile {v.get('compile_s', 0):.1f}s)"]
parts += [f"vs {a} {x:.3f}x" for a, x in v.get("geomean_vs_anchor", {}).items()]
for a, groups in v.get("geomean_vs_anchor_by_group", {}).items():
    if "fa3grid" in groups:
        parts.append(f"fa3grid vs {a} {groups['fa3grid']:.3f}x")
sb = v.get("sandbox") or {}
if sb:
    parts.append(f"sandbox landlock={sb.get('landlock_abi')} seccomp={sb.get('seccomp')} caps={sb.get('caps_dropped')}"
                 + (f" WARN {'; '.join(sb.get('warnings', []))}" if sb.get("warnings") else ""))
if v.get("phase_s"):
    parts.append("phases " + " ".join(f"{k}={x:.1f}" for k, x in v["phase_s"].items()))
fails = {}
for r in v["scenarios"]:
    if not r["correct"]:
        fails.setdefault(f"{r['failure_kind']}[{r['check']}]", []).append(r["id"])
for k, ids in fails.items():
    parts.append(f"{k}: {len(ids)} e.g. {ids[0]}")
san = [r["sanitizer"] for r in v["scenarios"] if r.get("sanitizer")]
if san:
    counts = {}
    for x in san:
        counts[x["status"]] = counts.get(x["status"], 0) + 1
    first = next((x["findings"][0] for x in san if x["findings"]), "")
    parts.append(f"sanitizer {v.get('sanitizer_tool')}: " + ", ".join(f"{n} {k}" for k, n in counts.items())
                 + (f" e.g. {first.strip()[:120]}" if first else ""))
for f in v.get("flags", []):
    if f.get("kind") == "sanitizer_incomplete":
        parts.append(f"sanitizer incomplete: {f['message'][:200]}")
print("; ".join(parts))
