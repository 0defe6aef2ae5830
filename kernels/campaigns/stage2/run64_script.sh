#!/bin/bash
# session 17's plan for the next session's first call (run 64): v19 on `full` with anchors fa3,cudnn,flash, recorded
# (#19; run 61's attempt ran out of its 280 s), then production with FA3, then the GPU tests owed since session 13
# (test_fast, test_adversarial) with pyseccomp in .whl (the new seccomp rules on a GPU for the first time).
# Carry .whl (fetch-wheels.sh .whl pyseccomp einops), .fa3, .campaign (attnq trace import kernels/campaigns/stage2-fa3.jsonl).
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export ATTNQ_STATE=$PWD/.campaign ATTNQ_GOAL_ANCHOR=fa3 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
git log --oneline -1 | tee -a $OUT/x/info.txt
. scripts/gpu_env.sh
python3 -c "import pyseccomp" && echo "pyseccomp ok" | tee -a $OUT/x/info.txt
K=kernels/attn_fast.cu
left=$(( ${BUDGET:-580} - $(el) - 20 )); [ $left -gt 470 ] && left=470
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
if [ $left -gt 30 ]; then
  ATTNQ_FAST_KERNEL=$K timeout $left python3 -m pytest -v -m gpu tests/gpu/test_fast.py tests/gpu/test_adversarial.py \
    -p no:cacheprovider > $OUT/x/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(tail -1 $OUT/x/gpu_tests.log) t=$(el)"
fi
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
