#!/usr/bin/env bash
# Runs attnq's GPU work on an H200 in one call (the lent device machine, or any GPU box):
#   bash scripts/gpu_run.sh [STEP ...]      steps: info tests original aa quick wrong faults adversarial fast fastq fastna cand mcp
#   cand: CANDIDATE="a.cu [b.cu ...]" — GPU tests (tests/gpu/test_fast.py) on each in turn; the first that
#         passes gets `attnq verify --suite full --anchors flash,cudnn` (recorded in the campaign store)
# Logs and JSON verdicts go under $OUT (default ./gpu-out). Wheels the box lacks travel in .whl/
# (see ../shared/gpu/fetch-wheels.sh); they are installed to /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 ATTNQ_LOG_LEVEL=${ATTNQ_LOG_LEVEL:-warning}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
attnq() { python3 -m attnq "$@"; }
steps=${*:-info tests original aa quick wrong}
S=$OUT/summary.txt
note() { echo "$*" | tee -a "$S"; }
note "== attnq GPU run $(date -u +%FT%TZ) commit ${ATTNQ_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)} steps: $steps"
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
      attnq verify kernels/attn_original.cu --suite full --no-record --json > "$OUT/logs/original_full.json" 2> "$OUT/logs/original_full.err"
      note "original full: exit $? $(python3 scripts/summarize_verdict.py "$OUT/logs/original_full.json")" ;;
    aa)
      mkdir -p /tmp/aa && cp kernels/attn_original.cu /tmp/aa/attn_original_copy.cu
      i=0
      for suite in ${AA_SUITES:-full full full}; do
        i=$((i + 1))
        ATTNQ_WORKSPACE=/tmp/aa attnq verify /tmp/aa/attn_original_copy.cu --suite $suite --no-record --json > "$OUT/logs/aa_$i.json" 2>>"$OUT/logs/aa.err"
        note "A/A run $i ($suite): exit $? $(python3 scripts/summarize_verdict.py "$OUT/logs/aa_$i.json")"
      done ;;
    quick)
      attnq verify kernels/attn_original.cu --suite quick --no-record --json > "$OUT/logs/quick.json" 2> "$OUT/logs/quick.err"
      note "quick: exit $? $(python3 scripts/summarize_verdict.py "$OUT/logs/quick.json")" ;;
    wrong)
      # one-line wrong variants of the original (scripts/wrong_kernels.py) must fail exactly the expected scenarios
      python3 scripts/wrong_kernels.py make /tmp/wrong > /dev/null
      for b in no_causal_mask drop_last_tile; do
        attnq verify /tmp/wrong/$b.cu --suite full --no-record --json > "$OUT/logs/wrong_$b.json" 2> "$OUT/logs/wrong_$b.err"
        note "$b (full): exit $? $(python3 scripts/summarize_verdict.py "$OUT/logs/wrong_$b.json")"
        note "   $(python3 scripts/wrong_kernels.py check $b "$OUT/logs/wrong_$b.json")"
      done ;;
    faults)
      for spec in infinite_loop illegal_address abort_on_head_dim; do
        attnq verify tests/adversarial/$spec.cu --suite quick --scenario-timeout 15 --no-record --json > "$OUT/logs/fault_$spec.json" 2> "$OUT/logs/fault_$spec.err"
        note "$spec (quick): exit $? $(python3 scripts/summarize_verdict.py "$OUT/logs/fault_$spec.json")"
      done
      attnq verify kernels/attn_original.cu --suite quick --no-record --json > "$OUT/logs/after_faults.json" 2>&1
      note "original after faults: exit $? $(python3 scripts/summarize_verdict.py "$OUT/logs/after_faults.json")" ;;
    adversarial)
      ATTNQ_ADV_TABLE=$OUT/adversarial_table.md python3 -m pytest -q -m gpu tests/gpu/test_adversarial.py -p no:cacheprovider 2>&1 \
        | tee "$OUT/logs/adversarial.log" | tail -25
      note "adversarial: $(tail -1 "$OUT/logs/adversarial.log")" ;;
    fastq)
      attnq verify kernels/attn_fast.cu --suite quick --no-record --json > "$OUT/logs/fast_quick.json" 2> "$OUT/logs/fast_quick.err"
      note "fast quick: exit $? $(python3 scripts/summarize_verdict.py "$OUT/logs/fast_quick.json")" ;;
    fastna)
      attnq verify kernels/attn_fast.cu --suite full --no-record --json > "$OUT/logs/fast_full_noanchors.json" 2> "$OUT/logs/fast_full_noanchors.err"
      note "fast full (no anchors): exit $? $(python3 scripts/summarize_verdict.py "$OUT/logs/fast_full_noanchors.json")" ;;
    fast)
      attnq verify kernels/attn_fast.cu --suite full --anchors flash,cudnn --json > "$OUT/logs/fast_full.json" 2> "$OUT/logs/fast_full.err"
      note "fast full: exit $? $(python3 scripts/summarize_verdict.py "$OUT/logs/fast_full.json")" ;;
    cand)
      # CANDIDATE="a.cu [b.cu ...]": the first whose GPU tests pass gets the full verify
      for c in ${CANDIDATE:?cand needs CANDIDATE=path.cu}; do
        n=$(basename "$c" .cu)
        ATTNQ_FAST_KERNEL=$c python3 -m pytest -q -m gpu tests/gpu/test_fast.py -p no:cacheprovider > "$OUT/logs/${n}_tests.log" 2>&1
        rc=$?
        note "$n gpu tests: $(tail -1 "$OUT/logs/${n}_tests.log")"
        [ $rc -ne 0 ] && { grep -E "^FAILED|Error" "$OUT/logs/${n}_tests.log" | head -8 | tee -a "$S"; continue; }
        attnq verify "$c" --suite full --anchors flash,cudnn --json > "$OUT/logs/${n}_full.json" 2> "$OUT/logs/${n}_full.err"
        note "$n full: exit $? $(python3 scripts/summarize_verdict.py "$OUT/logs/${n}_full.json")"
        break
      done ;;
    mcp)
      mkdir -p /tmp/mcpws && python3 examples/clients/campaign.py --server "python3 -m attnq serve" --workspace /tmp/mcpws --suite quick > "$OUT/logs/mcp_campaign.log" 2>&1
      note "mcp campaign: exit $? (transcript in logs/mcp_campaign.log)" ;;
    *) note "unknown step $step" ;;
  esac
  note "   [$step took $(( $(date +%s) - t0 )) s]"
done
[ -f .attnq/campaign.sqlite ] && cp .attnq/campaign.sqlite "$OUT/campaign.sqlite"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
cat "$S"
