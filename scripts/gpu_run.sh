#!/usr/bin/env bash
# Runs attnq's GPU work on an H200 in one call (the lent device machine, or any GPU box):
#   bash scripts/gpu_run.sh [STEP ...]      steps: info tests original aa aa_cover quick wrong faults adversarial
#                                                  corpus fast fastq fastna fa3 prodfa3 cand mcp report evolve evolve2
#                                                  export bugs sanitize sandbox rowcost naive
#                                                  (default: info tests original aa quick wrong)
#   sandbox: what the candidate's launcher could apply on this machine (Landlock, seccomp, capabilities), a real CUDA
#         launcher under the full sandbox running the original (scripts/launcher_probe.py: must say mode "on", no
#         warning, outputs written, no thread after the call) and the CPU tests of the red team's classes
#   decodeprobe: the decode timing discrepancy (kernels/NOTES.md, session 7): kernels/attn_fast.cu and the original built
#         as attnq builds them, scripts/launcher_timing_probe.py on two production decode rows (which piece of the
#         timing loop moves b64 sq4 h32x8 from ~147 us to ~228 us), then `attnq verify` on the same rows with the
#         per-sample timing log (ATTNQ_DIAG_TIMING_LOG -> $OUT/logs/decode_timing.jsonl: layout, process, order)
#   rowcost: the timed calls' sampled-row reference against a full reference (scripts/measure_row_reference.py)
#   naive:   kernels/examples/attn_naive.cu on quick
#   aa / aa_cover: A/A runs (a byte-identical copy of the original as the candidate; AA_SUITES, default
#         "full full full"; anchors AA_ANCHORS, default flash; AA_BUDGET_MS: verify's --budget-ms) with the host-path cover on the anchors only (aa)
#         and, with ATTNQ_HOST_COVER_ALL=1, on the candidate's and the original's timed calls too (aa_cover: the
#         launchers run the same ~0.5 ms GPU spin before each timed call, harness/host_cover.py). aa_cover first
#         runs tests/gpu/test_host_cover.py (the spin lasts as long as the anchors'), and after the runs
#         scripts/compare_aa.py on both sets: A/A spreads, the original's time with / without the cover,
#         vs-anchor geomeans, and which rule to keep (issue 16). `aa aa_cover` with three full suites each takes
#         ~10 min; AA_SUITES="full full" (~6-7 min) fits one 10-minute device call.
#   corpus: the CPU corpus test with every adversarial kernel built (ATTNQ_TEST_FULL_CORPUS=1)
#   report: after fastq/fast/quick, the roofline fields of that verdict and `attnq report` on it (needs matplotlib)
#   bugs: the original and kernels/attn_fast.cu on the `bugs` suite; the wrong variants of
#         scripts/wrong_kernels.py on it (each must fail the bug scenarios written for it)
#   sanitize: `attnq verify --sanitize TOOL` (compute-sanitizer) on a few bug scenarios: the original with
#         every tool, the fast kernel with memcheck and racecheck, two corpus faults that must be reported
#   cand: CANDIDATE="a.cu [b.cu ...]" — GPU tests (tests/gpu/test_fast.py) on each in turn; the first that
#         passes gets `attnq verify --suite full --anchors $ANCHORS` (recorded in the campaign store;
#         ANCHORS default fa3,cudnn,flash when FlashAttention-3 imports, else flash,cudnn)
#   fa3 / prodfa3: kernels/attn_fast.cu on the full suite vs fa3,cudnn,flash / on the production suite vs fa3
#   export: GPU tests of `attnq export` on the fast kernel (tests/gpu/test_export.py: reference, torch.compile,
#         CUDA graphs, the shipped native op as the default and vs the Python one, per-call overhead of the default
#         op and of the Python op, each in a fresh process -> $OUT/export_overhead.json), then, with FA_TESTS=path/to/flash-attention/
#         hopper/test_flash_attn.py, `attnq peer-test` of the fast kernel against FlashAttention's forward tests
#         (that file imports einops: bring it in .whl/ with ../shared/gpu/fetch-wheels.sh .whl einops; PEER_SELECT
#         narrows the pytest -k expression, default test_flash_attn_output, e.g. "test_flash_attn_output and gqa")
# FlashAttention-3 (the `fa3` anchor): a .fa3/*.tgz in the repository root (copied from
# ../shared/anchors/fa3/) is unpacked to /tmp/fa3, which goes first on PYTHONPATH.
# Logs and JSON verdicts go under $OUT (default ./gpu-out). Wheels the box lacks travel in .whl/
# (see ../shared/gpu/fetch-wheels.sh); they are installed to /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS="info decodeprobe tests original aa aa_cover corpus quick wrong bugs sanitize faults adversarial fastq fastna fast fa3 prodfa3 cand evolve evolve2 mcp report export sandbox rowcost naive"
case "${1:-}" in -h|--help|help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
for step in "$@"; do
  case " $STEPS " in *" $step "*) ;; *) echo "gpu_run.sh: unknown step '$step'; steps: $STEPS (--help)" >&2; exit 2 ;; esac
done
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT/logs"
# an earlier invocation in the same $OUT left its logs packed: unpack them, so the tar at the end holds both
[ -f "$OUT/logs.tar.gz" ] && tar -xzf "$OUT/logs.tar.gz" -C "$OUT" && rm -f "$OUT/logs.tar.gz"
export PYTHONUNBUFFERED=1 ATTNQ_LOG_LEVEL=${ATTNQ_LOG_LEVEL:-warning}
. scripts/gpu_env.sh
attnq() { python3 -m attnq "$@"; }
steps=${*:-info tests original aa quick wrong}
# the knob domains of the evolve steps (kBM and kWarps are tied: each warp owns 16 query rows)
EVOLVE_ARGS=${EVOLVE_ARGS:---from kernels/attn_original.cu --knob kBM,kWarps=32:2,64:4,128:8 --knob kLdX=8,16,24 --knob kLdS=4,8,12 --knob kLdP=8,16 --knob kLdO=4,8,12 --islands 2 --seed 0 --compile-workers 8}
S=$OUT/summary.txt
note() { echo "$*" | tee -a "$S"; }
# verify_to LOG LABEL ARGS...: `attnq verify ARGS --json` into logs/LOG.json (stderr logs/LOG.err), one summary line
verify_to() {
  local log=$1 label=$2; shift 2
  attnq verify "$@" --json > "$OUT/logs/$log.json" 2> "$OUT/logs/$log.err"
  note "$label: exit $? $(python3 scripts/summarize_verdict.py "$OUT/logs/$log.json")"
}
if python3 -c "import torch, flash_attn_interface" >/dev/null 2>&1; then HAVE_FA3=1; else HAVE_FA3=0; fi
note "== attnq GPU run $(date -u +%FT%TZ) commit ${ATTNQ_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)} steps: $steps fa3: $HAVE_FA3"
for step in $steps; do
  t0=$(date +%s)
  case $step in
    info)
      nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$S"
      python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$S" ;;
    tests)
      python3 -m pytest -q -m gpu ${GPU_TESTS:-tests/gpu} -p no:cacheprovider 2>&1 | tee "$OUT/logs/gpu_tests.log" | tail -25
      note "gpu tests: $(tail -1 "$OUT/logs/gpu_tests.log")" ;;
    original)
      verify_to original_full "original full" kernels/attn_original.cu --suite full --no-record ;;
    aa)
      mkdir -p /tmp/aa && cp kernels/attn_original.cu /tmp/aa/attn_original_copy.cu
      i=0
      for suite in ${AA_SUITES:-full full full}; do
        i=$((i + 1))
        ATTNQ_WORKSPACE=/tmp/aa verify_to "aa_$i" "A/A run $i ($suite)" /tmp/aa/attn_original_copy.cu --suite "$suite" \
          --anchors "${AA_ANCHORS:-flash}" --no-record ${AA_BUDGET_MS:+--budget-ms $AA_BUDGET_MS}
      done ;;
    aa_cover)
      python3 -m pytest -q -m gpu tests/gpu/test_host_cover.py -p no:cacheprovider 2>&1 | tee "$OUT/logs/host_cover_tests.log" | tail -5
      note "host cover tests: $(tail -1 "$OUT/logs/host_cover_tests.log")"
      mkdir -p /tmp/aa && cp kernels/attn_original.cu /tmp/aa/attn_original_copy.cu
      i=0
      for suite in ${AA_SUITES:-full full full}; do
        i=$((i + 1))
        ATTNQ_HOST_COVER_ALL=1 ATTNQ_WORKSPACE=/tmp/aa verify_to "aa_cover_$i" "A/A run $i, host cover on all ($suite)" \
          /tmp/aa/attn_original_copy.cu --suite "$suite" --anchors "${AA_ANCHORS:-flash}" --no-record
      done
      python3 scripts/compare_aa.py "$OUT/logs" | tee -a "$S" ;;
    corpus)
      ATTNQ_TEST_FULL_CORPUS=1 python3 -m pytest -q tests/test_adversarial_static.py -p no:cacheprovider 2>&1 \
        | tee "$OUT/logs/corpus.log" | tail -5
      note "corpus (all kernels built): $(tail -1 "$OUT/logs/corpus.log")" ;;
    quick)
      verify_to quick quick kernels/attn_original.cu --suite quick --no-record ;;
    wrong)
      # one-line wrong variants of the original (scripts/wrong_kernels.py) must fail exactly the expected scenarios
      python3 scripts/wrong_kernels.py make /tmp/wrong > /dev/null
      for b in no_causal_mask drop_last_tile; do
        verify_to "wrong_$b" "$b (full)" "/tmp/wrong/$b.cu" --suite full --no-record
        note "   $(python3 scripts/wrong_kernels.py check $b "$OUT/logs/wrong_$b.json")"
      done ;;
    bugs)
      verify_to original_bugs "original bugs" kernels/attn_original.cu --suite bugs --no-record
      verify_to fast_bugs "fast bugs" kernels/attn_fast.cu --suite bugs --no-record
      python3 scripts/wrong_kernels.py make /tmp/wrong > /dev/null
      for b in ${BUG_VARIANTS:-wrong_gqa hardcoded_scale ignored_kv_strides log2_lse unguarded_tail}; do
        verify_to "wrong_$b" "$b (bugs)" "/tmp/wrong/$b.cu" --suite bugs --no-record
        note "   $(python3 scripts/wrong_kernels.py check $b "$OUT/logs/wrong_$b.json")"
      done ;;
    sanitize)
      # the scenarios --sanitize picks from the bugs suite, so that the verification part stays short
      ids=$(python3 -c "from harness.sanitize import pick_scenarios; from harness.scenarios import load_suite
print(' '.join('--scenario ' + s.id for s in pick_scenarios(load_suite('bugs').scenarios)))")
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}; do
        verify_to "sanitize_original_$tool" "original --sanitize $tool" kernels/attn_original.cu --suite bugs $ids --sanitize "$tool" --no-record
      done
      for tool in memcheck racecheck; do
        verify_to "sanitize_fast_$tool" "fast --sanitize $tool" kernels/attn_fast.cu --suite bugs $ids --sanitize "$tool" --no-record
      done
      # must be reported: an out-of-bounds write past o (memcheck) and a missing __syncthreads (racecheck)
      verify_to sanitize_oob "oob_write_past_o --sanitize memcheck" tests/adversarial/oob_write_past_o.cu --suite bugs $ids --sanitize memcheck --no-record
      verify_to sanitize_race "race_missing_sync --sanitize racecheck" tests/adversarial/race_missing_sync.cu --suite bugs $ids --sanitize racecheck --no-record ;;
    faults)
      for spec in infinite_loop illegal_address abort_on_head_dim; do
        verify_to "fault_$spec" "$spec (quick)" "tests/adversarial/$spec.cu" --suite quick --scenario-timeout 15 --no-record
      done
      verify_to after_faults "original after faults" kernels/attn_original.cu --suite quick --no-record ;;
    adversarial)
      ATTNQ_ADV_TABLE=$OUT/adversarial_table.md python3 -m pytest -q -m gpu tests/gpu/test_adversarial.py -p no:cacheprovider 2>&1 \
        | tee "$OUT/logs/adversarial.log" | tail -25
      note "adversarial: $(tail -1 "$OUT/logs/adversarial.log")" ;;
    decodeprobe)
      rows="production/b64-sq4-sk2048-h32x8-d128-causal-bf16 production/b64-sq4-sk2048-h64x8-d128-causal-bf16"
      python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant fast= --build-only --keep /tmp/libs > "$OUT/logs/decodeprobe_build.log" 2>&1
      python3 scripts/kernel_bench.py kernels/attn_original.cu --variant orig= --build-only --keep /tmp/libs >> "$OUT/logs/decodeprobe_build.log" 2>&1
      python3 scripts/launcher_timing_probe.py /tmp/libs/fast.so /tmp/libs/orig.so $rows 2>&1 | tee "$OUT/logs/decodeprobe.log" | tee -a "$S"
      ATTNQ_DIAG_TIMING_LOG=$OUT/logs/decode_timing.jsonl verify_to decodeprobe_verify "fast on the probe's rows" \
        kernels/attn_fast.cu --suite production $(printf -- "--scenario %s " $rows) --no-record ;;
    fastq)
      verify_to fast_quick "fast quick" kernels/attn_fast.cu --suite quick --no-record ;;
    fastna)
      verify_to fast_full_noanchors "fast full (no anchors)" kernels/attn_fast.cu --suite full --no-record ;;
    fast)
      verify_to fast_full "fast full" kernels/attn_fast.cu --suite full --anchors flash,cudnn ;;
    fa3)
      [ $HAVE_FA3 = 1 ] || note "   flash_attn_interface does not import (no .fa3/*.tgz?): attnq will refuse --anchors fa3"
      verify_to fast_full_fa3 "fast full vs fa3,cudnn,flash" kernels/attn_fast.cu --suite full --anchors fa3,cudnn,flash ;;
    prodfa3)
      verify_to fast_prod_fa3 "fast production vs fa3" kernels/attn_fast.cu --suite production --anchors fa3 ;;
    cand)
      # CANDIDATE="a.cu [b.cu ...]": the first whose GPU tests pass gets the full verify
      for c in ${CANDIDATE:?cand needs CANDIDATE=path.cu}; do
        n=$(basename "$c" .cu)
        ATTNQ_FAST_KERNEL=$c python3 -m pytest -q -m gpu tests/gpu/test_fast.py -p no:cacheprovider > "$OUT/logs/${n}_tests.log" 2>&1
        rc=$?
        note "$n gpu tests: $(tail -1 "$OUT/logs/${n}_tests.log")"
        [ $rc -ne 0 ] && { grep -E "^FAILED|Error" "$OUT/logs/${n}_tests.log" | head -8 | tee -a "$S"; continue; }
        verify_to "${n}_full" "$n full" "$c" --suite full --anchors "${ANCHORS:-$([ $HAVE_FA3 = 1 ] && echo fa3,cudnn,flash || echo flash,cudnn)}"
        break
      done ;;
    sandbox)
      python3 -c "import json, tempfile; from harness.sandbox import apply_sandbox; r = apply_sandbox(tempfile.mkdtemp()); print('sandbox', json.dumps(r.__dict__))" 2>&1 | tee -a "$S"
      python3 -c "import pyseccomp" 2>&1 | tail -1 | sed 's/^/pyseccomp import: /' | tee -a "$S"
      # a real CUDA launcher (warm-up, sandbox, post-sandbox probe, thread baseline) with the original kernel:
      # its sandbox report must be mode "on" with no warning, else the thread rule or a read rule breaks CUDA here
      python3 scripts/launcher_probe.py 2>&1 | tee "$OUT/logs/launcher_probe.log" | tail -3 | tee -a "$S"
      # the CPU path of the red team's classes (needs gcc): rules syscall by syscall, cheats 11-16, probes 6-10
      # (-rfEs: each failure, error and skip reason in the log; they go into the summary)
      python3 -m pytest -q -rfEs tests/test_trust_holes.py tests/test_trust_split.py -p no:cacheprovider 2>&1 \
        | tee "$OUT/logs/trust_holes.log" | tail -3
      note "trust holes (CPU path): $(tail -1 "$OUT/logs/trust_holes.log")"
      grep -E "^(FAILED|ERROR|SKIPPED) " "$OUT/logs/trust_holes.log" | cut -c1-400 | head -24 | tee -a "$S" ;;
    rowcost)
      python3 scripts/measure_row_reference.py full 2>&1 | tee -a "$S" ;;
    naive)
      verify_to naive_quick "naive quick" kernels/examples/attn_naive.cu --suite quick --no-record ;;
    evolve)
      # a short real search (knob mutator) from the original kernel, ~4 min: trace, report and best program in $OUT
      EV=/tmp/attnq-evolve; rm -rf "$EV"; mkdir -p "$EV"
      ATTNQ_STATE=$EV/state timeout 330 python3 -m attnq evolve --run h200 $EVOLVE_ARGS --gpus 0 \
        --generations "${EVOLVE_GENERATIONS:-5}" --max-wall-s "${EVOLVE_WALL_S:-180}" --children "${EVOLVE_CHILDREN:-4}" \
        --full-suite "${EVOLVE_FULL_SUITE:-production}" --report "$OUT/evolve_report.md" --json \
        > "$OUT/logs/evolve.json" 2> "$OUT/logs/evolve.err"
      note "evolve: exit $? $(python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
if isinstance(d, dict): print(d.get("error"), d.get("message")); raise SystemExit
s = d[0]; b = s["best"] or {}
print(s["state"], s["stop_reason"], "generation", s["generation"], "best", b.get("fitness"), "on", b.get("stage"), "evaluations", s["evaluations"], "evals/h", s["evaluations_per_hour"], "GPU s/eval", s["gpu_s_per_evaluation"])' "$OUT/logs/evolve.json" 2>&1 | tail -1)"
      cp "$EV/state/campaign.sqlite" "$OUT/evolve_campaign.sqlite" 2>/dev/null
      ATTNQ_STATE=$EV/state python3 -m attnq evolve report --run h200 --json > "$OUT/evolve_report.json"
      ATTNQ_STATE=$EV/state python3 -m attnq evolve trace --run h200 -o "$OUT/evolve_trace.jsonl"
      ATTNQ_STATE=$EV/state python3 -m attnq evolve export --run h200 -o "$OUT/evolve_best.cu" ;;
    evolve2)
      # evaluations per hour on 1 GPU and on 2 (same seed, same children; a warm-up run fills the build cache)
      ngpu=$(nvidia-smi -L | wc -l)
      if [ "$ngpu" -lt 2 ]; then note "evolve2: needs 2 GPUs, $ngpu visible"; else
        EV=/tmp/attnq-evolve2; rm -rf "$EV"; mkdir -p "$EV"
        E2="--children ${EVOLVE2_CHILDREN:-12} --generations 1 --islands 1 --no-full --seed 0 --compile-workers 12"
        for r in warm:0,1 one:0 two:0,1; do  # warm: builds and both devices' peak caches
          ATTNQ_STATE=$EV/state timeout 600 python3 -m attnq evolve --run "${r%%:*}" $EVOLVE_ARGS $E2 --gpus "${r#*:}" \
            --json > "$OUT/logs/evolve2_${r%%:*}.json" 2> "$OUT/logs/evolve2_${r%%:*}.err"
        done
        note "evolve2: $(python3 -c 'import json,sys
rate = {}
for name in ("one", "two"):
    d = json.load(open(sys.argv[1] + "/evolve2_" + name + ".json"))
    if isinstance(d, dict): raise SystemExit(name + ": " + str(d.get("message")))
    s = d[0]
    rate[name] = s["evaluations_per_hour"] or 0.0
    print(name, "GPU(s):", s["evaluations"], "evaluations in", s["elapsed_s"], "s =", rate[name], "evals/h,", s["gpu_s_per_evaluation"], "GPU s/eval;", end=" ")
print("speedup 2 vs 1 GPU: %.2fx" % (rate["two"] / rate["one"] if rate["one"] else 0.0))' "$OUT/logs" 2>&1)"
      fi ;;
    mcp)
      mkdir -p /tmp/mcpws && python3 examples/clients/campaign.py --server "python3 -m attnq serve" --workspace /tmp/mcpws --suite quick > "$OUT/logs/mcp_campaign.log" 2>&1
      note "mcp campaign: exit $? (transcript in logs/mcp_campaign.log)" ;;
    report)
      v=$(ls -t "$OUT"/logs/fast_full.json "$OUT"/logs/fast_quick.json "$OUT"/logs/quick.json 2>/dev/null | head -1)
      if [ -z "$v" ]; then
        note "report: no verdict in this run (put fastq, fast or quick before report)"
      else
        note "report: $(python3 - "$v" <<'PY'
import collections, json, sys
v = json.load(open(sys.argv[1]))
ok = [s for s in v["scenarios"] if s["correct"]]
bounds = collections.Counter(s.get("bound") for s in ok)
fr = sorted(s["fraction_of_bound"] for s in ok if s.get("fraction_of_bound") is not None)
med = f"{fr[len(fr) // 2]:.2f}" if fr else "-"
print(f"{sys.argv[1].rsplit('/', 1)[-1]}: bounds {dict(bounds)} over {len(ok)} correct; median fraction_of_bound {med}; "
      f"matmul {v.get('bound_tflops')} TFLOP/s, HBM {v.get('hbm_tbps')} TB/s")
PY
)"
        attnq report --verdict "$v" -o "$OUT/report.html" --png-dir "$OUT/report-png" > "$OUT/logs/report.log" 2>&1
        note "report: exit $? ($(grep -m1 "^wrote" "$OUT/logs/report.log"))"
      fi ;;
    export)
      ATTNQ_EXPORT_REPORT=$OUT/export_overhead.json python3 -m pytest -q -m gpu tests/gpu/test_export.py \
        -p no:cacheprovider 2>&1 | tee "$OUT/logs/export_tests.log" | tail -25
      note "export gpu tests: $(tail -1 "$OUT/logs/export_tests.log")"
      [ -f "$OUT/export_overhead.json" ] && note "   per-call host us: $(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
lines = ["%s op (%s%s): direct attn_fwd %.2f, op %.2f (+%.2f), flash_attn_func %.2f (+%.2f)%s" % (label, r["impl"],
         ", " + r["source"] if r.get("source") else "", r["direct_attn_fwd_us"], r["op_us"], r["op_overhead_us"],
         r["flash_attn_func_us"], r["flash_attn_func_overhead_us"], "; " + r["reason"] if r.get("reason") else "")
         for label, r in (("default", d["default"]), ("python", d["python"]))]
lines.append("target +%g for the default op: %s" % (d["target_us"], "met" if d["target_met"] else "NOT met"))
print("\n     ".join(lines))' "$OUT/export_overhead.json")"
      if [ -n "${FA_TESTS:-}" ]; then
        attnq peer-test kernels/attn_fast.cu --fa-tests "$FA_TESTS" --select "${PEER_SELECT:-test_flash_attn_output}" \
          --json > "$OUT/logs/peer_fast.json" 2> "$OUT/logs/peer_fast.err"
        rc=$?
        note "peer-test fast vs $FA_TESTS: exit $rc $(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
if "status" not in d:
    print(d.get("error"), d.get("message")); sys.exit()
print("%s: %s; %d collected, %d passed, %d skipped, %d failed, %d errors, %d kernel calls, %.0f s" % (d["status"],
      d["message"], d["collected"], d["passed"], d["skipped"], d["failed"], d["errors"], d["candidate_calls"], d["duration_s"]))
for reason, n in list(d["skip_reasons"].items()) + list(d["reference_calls"].items()):
    print("     %6d  %s" % (n, reason[:140]))
for f in d["failures"][:10]:
    print("     FAIL %s: %s" % (f["nodeid"], f["message"][:200]))
log = d.get("log_file") or ""
if log:
    import shutil; shutil.copy(log, sys.argv[2])' "$OUT/logs/peer_fast.json" "$OUT/logs/peer_fast_pytest.log" 2>&1)"
      else
        note "peer-test: not run (set FA_TESTS=path/to/flash-attention/hopper/test_flash_attn.py)"
      fi ;;
    *) note "unknown step $step" ;;  # not reached: steps are checked before anything runs
  esac
  note "   [$step took $(( $(date +%s) - t0 )) s]"
done
[ -f .attnq/campaign.sqlite ] && cp .attnq/campaign.sqlite "$OUT/campaign.sqlite"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
cat "$S"
