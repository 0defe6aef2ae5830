#!/bin/bash
# session 14, call 1 (run 54; written in session 13, the profiled full added after the recorded one): ATTN_WS_RMID (O rescaled in the S GEMM's shadow) against v18 (base), libraries
# prebuilt on the CPU box (.prebuilt, carried); scripts/kernel_dev.sh checks and benches them with FA3; the
# winner (pick_variant: >= 1.5 % over s >= 2048, no class below 0.985) made default and full verified (recorded).
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export ATTNQ_STATE=$PWD/.campaign ATTNQ_GOAL_ANCHOR=fa3 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
git log --oneline -1 | tee -a $OUT/x/info.txt
# checks (one process each) and the bench with FA3: scripts/kernel_dev.sh on the carried libraries
OUT=$OUT/x PREBUILT=$PWD/.prebuilt VARIANTS="base=;rmid=;rmidpin=" DIMS=64,96,128,192,256 BENCH_TIMEOUT=240 \
  bash scripts/kernel_dev.sh > $OUT/x/kernel_dev.log 2>&1
tail -8 $OUT/x/kernel_dev.log; echo "bench t=$(el)"
. scripts/gpu_env.sh
python3 scripts/pick_variant.py $OUT/x/bench.json --min-seqlen 2048 --class-floor 0.985 --min-gain 0.015 > $OUT/x/decide.txt 2>&1
cat $OUT/x/decide.txt
best=$(tail -1 $OUT/x/decide.txt)
case $best in
  rmid) sed -i 's/^#define ATTN_WS_RMID 0 /#define ATTN_WS_RMID 1 /' kernels/attn_fast.cu ;;
  rmidpin) sed -i -e 's/^#define ATTN_WS_RMID 0 /#define ATTN_WS_RMID 1 /' -e 's/^#define ATTN_WS_PVPIN 0 /#define ATTN_WS_PVPIN 1 /' kernels/attn_fast.cu ;;
esac
grep -n "^#define ATTN_WS_RMID \|^#define ATTN_WS_PVPIN " kernels/attn_fast.cu | cut -c1-40 | tee -a $OUT/x/decide.txt
left=$(( ${BUDGET:-570} - $(el) - 10 ))
if [ "$best" != base ] && [ -n "$best" ] && [ $left -gt 250 ]; then
  cp kernels/attn_fast.cu $OUT/x/attn_fast_run54.cu
  ATTNQ_DIAG_TIMING_LOG=$OUT/x/full_timing.jsonl timeout $left python3 -m attnq verify kernels/attn_fast.cu --suite full --anchors fa3,cudnn,flash --json > $OUT/x/full.json 2> $OUT/x/full.err
  echo "full($best) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full.json) t=$(el)"
  tail -3 $OUT/x/full.err; gzip -f $OUT/x/full_timing.jsonl 2>/dev/null
  tar czf $OUT/campaign.tgz .campaign
fi
left=$(( ${BUDGET:-570} - $(el) - 10 ))
if [ $left -gt 140 ]; then
  ATTNQ_DIAG_PROFILE=$OUT/x/full.prof timeout $left python3 -m attnq verify kernels/attn_fast.cu --suite full --no-record --json > $OUT/x/fullp.json 2> $OUT/x/fullp.err
  echo "full(profile, new checker) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/fullp.json) t=$(el)"
fi
left=$(( ${BUDGET:-570} - $(el) - 10 ))
if [ $left -gt 60 ]; then
  T=tests/gpu/test_original.py; [ "$best" != base ] && T=tests/gpu/test_fast.py
  ATTNQ_FAST_KERNEL=kernels/attn_fast.cu timeout $left python3 -m pytest -q -m gpu $T tests/gpu/test_fa3_anchor.py -p no:cacheprovider > $OUT/x/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(tail -1 $OUT/x/gpu_tests.log) t=$(el)"
fi
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
