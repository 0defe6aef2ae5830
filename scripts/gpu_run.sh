#!/usr/bin/env bash
# Runs attnq's GPU work on an H200 in one call (the lent device machine, or any GPU box):
#   bash scripts/gpu_run.sh [STEP ...]      steps: info tests original aa quick wrong faults adversarial fast fastq fastna cand mcp
#                                           sandbox rowcost naive
#   sandbox: what the candidate's launcher could apply on this machine (Landlock, seccomp, capabilities)
#   rowcost: the timed calls' sampled-row reference against a full reference (scripts/measure_row_reference.py)
#   naive:   kernels/examples/attn_naive.cu on quick
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
# verify_to LOG LABEL ARGS...: `attnq verify ARGS --json` into logs/LOG.json (stderr logs/LOG.err), one summary line
verify_to() {
  local log=$1 label=$2; shift 2
  attnq verify "$@" --json > "$OUT/logs/$log.json" 2> "$OUT/logs/$log.err"
  note "$label: exit $? $(python3 scripts/summarize_verdict.py "$OUT/logs/$log.json")"
}
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
      verify_to original_full "original full" kernels/attn_original.cu --suite full --no-record ;;
    aa)
      mkdir -p /tmp/aa && cp kernels/attn_original.cu /tmp/aa/attn_original_copy.cu
      i=0
      for suite in ${AA_SUITES:-full full full}; do
        i=$((i + 1))
        ATTNQ_WORKSPACE=/tmp/aa verify_to "aa_$i" "A/A run $i ($suite)" /tmp/aa/attn_original_copy.cu --suite "$suite" --no-record
      done ;;
    quick)
      verify_to quick quick kernels/attn_original.cu --suite quick --no-record ;;
    wrong)
      # one-line wrong variants of the original (scripts/wrong_kernels.py) must fail exactly the expected scenarios
      python3 scripts/wrong_kernels.py make /tmp/wrong > /dev/null
      for b in no_causal_mask drop_last_tile; do
        verify_to "wrong_$b" "$b (full)" "/tmp/wrong/$b.cu" --suite full --no-record
        note "   $(python3 scripts/wrong_kernels.py check $b "$OUT/logs/wrong_$b.json")"
      done ;;
    faults)
      for spec in infinite_loop illegal_address abort_on_head_dim; do
        verify_to "fault_$spec" "$spec (quick)" "tests/adversarial/$spec.cu" --suite quick --scenario-timeout 15 --no-record
      done
      verify_to after_faults "original after faults" kernels/attn_original.cu --suite quick --no-record ;;
    adversarial)
      ATTNQ_ADV_TABLE=$OUT/adversarial_table.md python3 -m pytest -q -m gpu tests/gpu/test_adversarial.py -p no:cacheprovider 2>&1 \
        | tee "$OUT/logs/adversarial.log" | tail -25
      note "adversarial: $(tail -1 "$OUT/logs/adversarial.log")" ;;
    fastq)
      verify_to fast_quick "fast quick" kernels/attn_fast.cu --suite quick --no-record ;;
    fastna)
      verify_to fast_full_noanchors "fast full (no anchors)" kernels/attn_fast.cu --suite full --no-record ;;
    fast)
      verify_to fast_full "fast full" kernels/attn_fast.cu --suite full --anchors flash,cudnn ;;
    cand)
      # CANDIDATE="a.cu [b.cu ...]": the first whose GPU tests pass gets the full verify
      for c in ${CANDIDATE:?cand needs CANDIDATE=path.cu}; do
        n=$(basename "$c" .cu)
        ATTNQ_FAST_KERNEL=$c python3 -m pytest -q -m gpu tests/gpu/test_fast.py -p no:cacheprovider > "$OUT/logs/${n}_tests.log" 2>&1
        rc=$?
        note "$n gpu tests: $(tail -1 "$OUT/logs/${n}_tests.log")"
        [ $rc -ne 0 ] && { grep -E "^FAILED|Error" "$OUT/logs/${n}_tests.log" | head -8 | tee -a "$S"; continue; }
        verify_to "${n}_full" "$n full" "$c" --suite full --anchors flash,cudnn
        break
      done ;;
    sandbox)
      python3 -c "import json, tempfile; from harness.sandbox import apply_sandbox; r = apply_sandbox(tempfile.mkdtemp()); print('sandbox', json.dumps(r.__dict__))" 2>&1 | tee -a "$S"
      python3 -c "import pyseccomp" 2>&1 | tail -1 | sed 's/^/pyseccomp import: /' | tee -a "$S" ;;
    rowcost)
      python3 scripts/measure_row_reference.py full 2>&1 | tee -a "$S" ;;
    naive)
      verify_to naive_quick "naive quick" kernels/examples/attn_naive.cu --suite quick --no-record ;;
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
