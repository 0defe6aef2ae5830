#!/bin/bash
# Session 20's second call (run 67): v20 (v19 + ATTN_WS_PUBTILE + ATTN_WS_SMALL, adopted after run 66) on `full` with
# anchors fa3,cudnn,flash, recorded (ATTNQ_GOAL_ANCHOR=fa3), then production with FA3 (recorded), then full's wall
# without anchors (--no-record; the 2026-12-07 cost levers), then the GPU tests left over.
# Carry .whl (pyseccomp), .fa3, .campaign, the script (cp to scripts/.run1.sh; BUDGET=<call limit - 20>).
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export ATTNQ_STATE=$PWD/.campaign ATTNQ_GOAL_ANCHOR=fa3 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
git log --oneline -1 | tee -a $OUT/x/info.txt
. scripts/gpu_env.sh
K=kernels/attn_fast.cu
left=$(( ${BUDGET:-580} - $(el) - 20 )); [ $left -gt 400 ] && left=400
ATTNQ_DIAG_PROFILE=$OUT/x/full.prof timeout $left python3 -m attnq verify $K --suite full --anchors fa3,cudnn,flash --json \
  > $OUT/x/full.json 2> $OUT/x/full.err
echo "full(anchors, recorded) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full.json) t=$(el)"
tar czf $OUT/campaign.tgz .campaign
left=$(( ${BUDGET:-580} - $(el) - 10 ))
if [ $left -gt 60 ]; then
  timeout $left python3 -m attnq verify $K --suite production --anchors fa3 --json > $OUT/x/prod.json 2> $OUT/x/prod.err
  echo "production rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/prod.json) t=$(el)"
  tar czf $OUT/campaign.tgz .campaign
fi
left=$(( ${BUDGET:-580} - $(el) - 10 ))
if [ $left -gt 90 ]; then
  ATTNQ_DIAG_PROFILE=$OUT/x/full_noanchor.prof timeout $left python3 -m attnq verify $K --suite full --no-record --json \
    > $OUT/x/full_noanchor.json 2> $OUT/x/full_noanchor.err
  echo "full(no anchors) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full_noanchor.json) t=$(el)"
fi
left=$(( ${BUDGET:-580} - $(el) - 10 ))
if [ $left -gt 30 ]; then
  timeout $left python3 -m pytest -v -m gpu tests/gpu/test_adversarial.py -p no:cacheprovider > $OUT/x/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(tail -1 $OUT/x/gpu_tests.log) t=$(el)"
fi
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
