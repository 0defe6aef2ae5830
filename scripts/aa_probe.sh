#!/usr/bin/env bash
# The A/A timing probe (run 20's bug: A/A on `bugs` at 0.484x): runs on the GPU box from the repository root,
#   bash scripts/aa_probe.sh            (logs under $OUT/aa_probe, summary in $OUT/aa_probe/summary.txt; ~4 min)
#   AA_RUNS="tail escape" bash scripts/aa_probe.sh     only those runs (default: wall tail alt single escape)
# Every run is `attnq verify <byte-identical copy of the original> --suite bugs --no-record --json` with the
# per-sample timing log on (ATTNQ_DIAG_TIMING_LOG: event, wall and device-tail times of both kernels, the
# candidate's process, which call went first):
#   wall    today's default (the wall-clock stream-escape check): expect ~0.48x, ~40/85 scenarios flagged
#           `stream_timing` (every slow scenario of run 20 was, and the others were at 0.995x)
#   tail    ATTNQ_STREAM_ESCAPE_CHECK=tail (the fix, harness/timing_escape.py): expect ~1.00x, none flagged,
#           the candidate's device tail equal to the original's
#   alt     wall check, ATTNQ_DIAG_ORDER=alternate: the round-trip overhead (wall - event) should follow the
#           position (first call of a sample wakes a cold launcher), for both kernels
#   single  wall check, ATTNQ_DIAG_SINGLE_CANDIDATE_LAUNCHER=1: fewer flags (run 19 had one launcher) if the
#           second launcher's longer idle adds to the candidate's wake-up
#   escape  tail check on tests/adversarial/stream_per_thread.cu (work left on cudaStreamPerThread): must
#           still be caught (`stream_timing ... on the device`, correct but not faster)
# Then the summary: geomean, flagged count, and per run the medians over scenarios of the overhead
# difference (candidate - original, wall - event) split by which call went first, and of the tails.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}; P=$OUT/aa_probe; mkdir -p "$P"
export PYTHONUNBUFFERED=1 ATTNQ_LOG_LEVEL=${ATTNQ_LOG_LEVEL:-warning}
. scripts/gpu_env.sh
mkdir -p /tmp/aa && cp kernels/attn_original.cu /tmp/aa/attn_original_copy.cu
T0=$(date +%s)
run() {  # run NAME ENV... : one A/A on bugs with the timing log
  local name=$1; shift
  rm -f "$P/$name.jsonl"
  env "$@" ATTNQ_WORKSPACE=/tmp/aa ATTNQ_DIAG_TIMING_LOG="$P/$name.jsonl" timeout 150 \
    python3 -m attnq verify /tmp/aa/attn_original_copy.cu --suite bugs --no-record --json > "$P/$name.json" 2> "$P/$name.err"
  echo "$name: exit $? $(python3 scripts/summarize_verdict.py "$P/$name.json" | cut -c1-160) [$(( $(date +%s) - T0 )) s]" | tee -a "$P/summary.txt"
}
RUNS=" ${AA_RUNS:-wall tail alt single escape} "
[[ $RUNS == *" wall "* ]] && run wall ATTNQ_STREAM_ESCAPE_CHECK=wall
[[ $RUNS == *" tail "* ]] && run tail ATTNQ_STREAM_ESCAPE_CHECK=tail
[[ $RUNS == *" alt "* ]] && run alt ATTNQ_STREAM_ESCAPE_CHECK=wall ATTNQ_DIAG_ORDER=alternate
[[ $RUNS == *" single "* ]] && run single ATTNQ_STREAM_ESCAPE_CHECK=wall ATTNQ_DIAG_SINGLE_CANDIDATE_LAUNCHER=1
if [[ $RUNS == *" escape "* ]]; then
  ATTNQ_STREAM_ESCAPE_CHECK=tail ATTNQ_DIAG_TIMING_LOG="$P/escape.jsonl" timeout 120 python3 -m attnq verify \
    tests/adversarial/stream_per_thread.cu --suite tests/adversarial/suite.toml --scenario adv/b1-s2048-h16-d128-noncausal-bf16 \
    --no-record --json > "$P/escape.json" 2> "$P/escape.err"
  echo "escape (tail check): exit $? $(python3 scripts/summarize_verdict.py "$P/escape.json" | cut -c1-160) [$(( $(date +%s) - T0 )) s]" | tee -a "$P/summary.txt"
fi
python3 - "$P" <<'EOF' | tee -a "$P/summary.txt"
import json, math, statistics as st, sys
from pathlib import Path
P = Path(sys.argv[1])
for name in ("wall", "tail", "alt", "single", "escape"):
    try:
        v = json.loads((P / f"{name}.json").read_text())
        recs = [json.loads(x) for x in (P / f"{name}.jsonl").read_text().splitlines()]
    except Exception as exc:  # noqa: BLE001 - a missing run is one line
        print(f"{name}: no data ({exc})"); continue
    res = [r for r in v.get("scenarios", []) if r.get("candidate")]
    flagged = [r for r in res if (r.get("message") or "").startswith("stream_timing")]
    gm = math.exp(st.fmean(math.log(r["speedup"]) for r in res)) if res else float("nan")
    clean = [r for r in res if r not in flagged]
    gmc = math.exp(st.fmean(math.log(r["speedup"]) for r in clean)) if clean else float("nan")
    line = f"{name}: geomean {gm:.3f} ({len(flagged)}/{len(res)} flagged; unflagged {gmc:.3f})"
    # per scenario: median overhead (wall - event) of the candidate minus the original's, by position
    for label, pick in (("cand first", lambda s: not s["orig_first"]), ("orig first", lambda s: s["orig_first"])):
        d = []
        for r in recs:
            ss = [s for s in r["samples"] if pick(s) and s["e_o"] is not None]  # e_o None: no original (sparse)
            if ss:
                d.append(st.median(s["w_c"] - s["e_c"] for s in ss) - st.median(s["w_o"] - s["e_o"] for s in ss))
        if d:
            line += f"; over_c-over_o [{label}] median {st.median(d) * 1e3:.0f} us (n={len(d)})"
    for proc in (0, 1):
        o = [s["w_c"] - s["e_c"] for r in recs for s in r["samples"] if s["process"] == proc]
        if o:
            line += f"; cand proc {proc} overhead median {st.median(o) * 1e3:.0f} us"
    oo = [s["w_o"] - s["e_o"] for r in recs for s in r["samples"] if s["e_o"] is not None]
    line += f"; orig overhead median {st.median(oo) * 1e3:.0f} us" if oo else ""
    tails = [(s["tail_c"], s["tail_o"]) for r in recs for s in r["samples"]
             if s["tail_c"] is not None and s["tail_o"] is not None]
    if tails:
        line += (f"; tail c/o median {st.median(t[0] for t in tails) * 1e3:.1f}/{st.median(t[1] for t in tails) * 1e3:.1f} us"
                 f" max {max(t[0] for t in tails) * 1e3:.0f}/{max(t[1] for t in tails) * 1e3:.0f} us")
    if name == "escape":
        line += f"; message: {(res[0].get('message') or '-')[:110] if res else v.get('message')}"
    print(line)
EOF
echo "aa_probe done in $(( $(date +%s) - T0 )) s"
