#!/bin/bash
# session 15's plan for the next session's second call (run 57), on the machine run 56 left warm: adopt run 56's picks
# (.state56/decide*.txt there; P128= / P96= override, e.g. after a new machine), verify full with anchors (recorded:
# #19) and the fast kernel's GPU tests when something changed; then A/A on full at budget_ms 75 (issues 12/13: the
# wall against run 54's 109 s at 150, and the A/A spread, +-1 %).
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export ATTNQ_STATE=$PWD/.campaign ATTNQ_GOAL_ANCHOR=fa3 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
. scripts/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/x/info.txt
P128=${P128:-$(tail -1 .state56/decide128.txt 2>/dev/null || echo base)}
P96=${P96:-$(tail -1 .state56/decide96.txt 2>/dev/null || echo base)}
echo "picks: d128 $P128, d96 $P96" | tee -a $OUT/x/info.txt
K=kernels/attn_fast.cu
cp $K /tmp/attn_fast_before.cu  # what travelled (uncommitted edits included): adopted = what the seds changed
case $P128 in
  bn176|bn160|bn144) sed -i "s/^#define ATTN_WS_BN128N_TMAO 128 /#define ATTN_WS_BN128N_TMAO ${P128#bn} /" $K ;;
esac
case $P96 in
  d96s) sed -i 's/^#define ATTN_WS_D96N 0 /#define ATTN_WS_D96N 2 /' $K ;;
  d96n) sed -i 's/^#define ATTN_WS_D96N 0 /#define ATTN_WS_D96N 1 /' $K ;;
  d96v) sed -i 's/^#define ATTN_WS_D96N 0 /#define ATTN_WS_D96N 3 /' $K ;;
  d96v3) sed -i -e 's/^#define ATTN_WS_D96N 0 /#define ATTN_WS_D96N 3 /' -e 's/^#define ATTN_WS_NWG96 2 /#define ATTN_WS_NWG96 3 /' \
           -e 's/^#define ATTN_WS_BN96 128 /#define ATTN_WS_BN96 112 /' $K ;;
  d96n3) sed -i -e 's/^#define ATTN_WS_D96N 0 /#define ATTN_WS_D96N 1 /' -e 's/^#define ATTN_WS_NWG96 2 /#define ATTN_WS_NWG96 3 /' \
           -e 's/^#define ATTN_WS_BN96 128 /#define ATTN_WS_BN96 112 /' $K ;;
  d96n3b96) sed -i -e 's/^#define ATTN_WS_D96N 0 /#define ATTN_WS_D96N 1 /' -e 's/^#define ATTN_WS_NWG96 2 /#define ATTN_WS_NWG96 3 /' \
              -e 's/^#define ATTN_WS_BN96 128 /#define ATTN_WS_BN96 96 /' $K ;;
esac
grep -n "^#define ATTN_WS_BN128N_TMAO \|^#define ATTN_WS_D96N \|^#define ATTN_WS_NWG96 \|^#define ATTN_WS_BN96 " $K | cut -c1-48 | tee -a $OUT/x/info.txt
if ! cmp -s $K /tmp/attn_fast_before.cu; then
  diff /tmp/attn_fast_before.cu $K > $OUT/x/adopted.diff
  timeout 300 python3 -m attnq verify $K --suite full --anchors fa3,cudnn,flash --json > $OUT/x/full.json 2> $OUT/x/full.err
  echo "full(adopted, recorded) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full.json) t=$(el)"
  tail -3 $OUT/x/full.err
  tar czf $OUT/campaign.tgz .campaign
  left=$(( ${BUDGET:-570} - $(el) - 200 ))
  if [ $left -gt 30 ]; then
    ATTNQ_FAST_KERNEL=$K timeout $left python3 -m pytest -q -m gpu tests/gpu/test_fast.py -p no:cacheprovider > $OUT/x/test_fast.log 2>&1
    echo "test_fast rc=$? $(tail -1 $OUT/x/test_fast.log) t=$(el)"
  fi
fi
left=$(( ${BUDGET:-570} - $(el) - 10 ))
if [ $left -gt 130 ]; then  # A/A on full at budget_ms 75: the original against its copy, twice (once if short of time)
  runs="full full"; [ $left -lt 260 ] && runs="full"
  OUT=$OUT/x AA_SUITES="$runs" AA_BUDGET_MS=75 timeout $left bash scripts/gpu_run.sh aa > $OUT/x/aa75.log 2>&1
  echo "aa75 rc=$? t=$(el)"; grep -h "A/A\|geomean\|wall" $OUT/x/aa75.log | tail -6
fi
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
