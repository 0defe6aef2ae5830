#!/bin/bash
# session 17 (run 61): run 58 (session 16's one-call plan) with the three-consumer d128 question of run 60 in the same
# bench: the d128 pick is among the key tiles bn176/bn160/bn144 and three consumer warpgroups at BN 80 / 96 (w3b80,
# w3b96; w3b80s3: three K/V stages); the d96 question keeps its three likeliest variants (d96n, d96n3, d96v3; d96 lifts neither goal). Then as
# run 58: the picks adopted by sed; `full` with anchors fa3,cudnn,flash recorded and profiled when something was
# adopted (else the sparse original's full without anchors); the d128 s512/s1k trace; the GPU tests owed; A/A at
# --budget-ms 75 with what is left.
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export ATTNQ_STATE=$PWD/.campaign ATTNQ_GOAL_ANCHOR=fa3 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
git log --oneline -1 | tee -a $OUT/x/info.txt
. scripts/gpu_env.sh
LIBS=$PWD/.prebuilt; V="base bn176 bn160 bn144 w3b80 w3b96 w3b80s3 d96n d96n3 d96v3"
for n in $V; do
  timeout 150 python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant $n= --prebuilt $LIBS --check-only > /tmp/c_$n.log 2>&1 &
done
wait
ok=()
for n in $V; do
  grep -q "check: OK" /tmp/c_$n.log && ok+=(--variant $n=)
  echo "$n $(grep -h 'check:' /tmp/c_$n.log | head -1)" | tee -a $OUT/x/checks.txt
  grep -h "^   " /tmp/c_$n.log | head -8 >> $OUT/x/checks.txt
  tail -3 /tmp/c_$n.log >> $OUT/x/checks.txt
done
echo "checked t=$(el)"
timeout 220 python3 scripts/kernel_bench.py kernels/attn_fast.cu "${ok[@]}" --prebuilt $LIBS --no-check --dims 96,128 \
  --json $OUT/x/bench.json > $OUT/x/bench.log 2>&1
tail -4 $OUT/x/bench.log; echo "bench t=$(el)"
python3 scripts/pick_variant.py $OUT/x/bench.json --dims 128 --only bn176,bn160,bn144,w3b80,w3b96,w3b80s3 --min-seqlen 512 \
  --class-floor 0.985 --min-gain 0.01 > $OUT/x/decide128.txt 2>&1
python3 scripts/pick_variant.py $OUT/x/bench.json --dims 96 --only d96n,d96n3,d96v3 --min-seqlen 512 \
  --class-floor 0.985 --min-gain 0.02 > $OUT/x/decide96.txt 2>&1
cat $OUT/x/decide128.txt $OUT/x/decide96.txt
P128=$(tail -1 $OUT/x/decide128.txt); P96=$(tail -1 $OUT/x/decide96.txt)
echo "picks: d128 $P128, d96 $P96" | tee -a $OUT/x/info.txt
K=kernels/attn_fast.cu
cp $K /tmp/attn_fast_before.cu
case $P128 in
  bn176|bn160|bn144) sed -i "s/^#define ATTN_WS_BN128N_TMAO 128 /#define ATTN_WS_BN128N_TMAO ${P128#bn} /" $K ;;
  w3b80|w3b96) sed -i -e 's/^#define ATTN_WS_NWG128 2 /#define ATTN_WS_NWG128 3 /' \
                 -e "s/^#define ATTN_WS_BN128W3 96 /#define ATTN_WS_BN128W3 ${P128#w3b} /" $K ;;
  w3b80s3) sed -i -e 's/^#define ATTN_WS_NWG128 2 /#define ATTN_WS_NWG128 3 /' \
             -e 's/^#define ATTN_WS_BN128W3 96 /#define ATTN_WS_BN128W3 80 /' \
             -e 's/^#define ATTN_WS_ST128W3 ATTN_WS_ST128 /#define ATTN_WS_ST128W3 3 /' $K ;;
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
grep -n "^#define ATTN_WS_BN128N_TMAO \|^#define ATTN_WS_NWG128 \|^#define ATTN_WS_BN128W3 \|^#define ATTN_WS_ST128W3 \|^#define ATTN_WS_D96N \|^#define ATTN_WS_NWG96 \|^#define ATTN_WS_BN96 " $K | cut -c1-48 | tee -a $OUT/x/info.txt
changed=0; cmp -s $K /tmp/attn_fast_before.cu || changed=1
[ $changed = 1 ] && diff /tmp/attn_fast_before.cu $K > $OUT/x/adopted.diff
left=$(( ${BUDGET:-570} - $(el) - 15 )); [ $left -gt 280 ] && left=280
if [ $changed = 1 ] && [ $left -ge 190 ]; then  # the adopted kernel on full with anchors, recorded (#19), profiled
  ATTNQ_DIAG_PROFILE=$OUT/x/full.prof timeout $left python3 -m attnq verify $K --suite full --anchors fa3,cudnn,flash --json \
    > $OUT/x/full.json 2> $OUT/x/full.err
  echo "full(anchors, adopted, recorded, profiled) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full.json) t=$(el)"
  tar czf $OUT/campaign.tgz .campaign
elif [ $left -ge 120 ]; then  # too little for that: the sparse original's wall (issues 12/13), v18 as committed
  cp /tmp/attn_fast_before.cu $K; changed=0
  ATTNQ_DIAG_PROFILE=$OUT/x/full.prof timeout $left python3 -m attnq verify $K --suite full --no-record --json \
    > $OUT/x/full.json 2> $OUT/x/full.err
  echo "full(v18, no anchors, not recorded, profiled) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full.json) t=$(el)"
fi
tail -3 $OUT/x/full.err 2>/dev/null
[ $(( ${BUDGET:-570} - $(el) )) -gt 60 ] && for row in d128_n_s512 d128_n_s1024; do
  timeout 40 python3 scripts/ws_trace.py .prebuilt/tr.so --one $row --skip 0 --bn 128 --json $OUT/x/trace_$row.json > $OUT/x/trace_$row.txt 2>&1
  echo "trace $row rc=$?"; tail -3 $OUT/x/trace_$row.txt
done
left=$(( ${BUDGET:-570} - $(el) - 10 ))
T="tests/gpu/test_original.py tests/gpu/test_adversarial.py"; [ $changed = 1 ] && T="tests/gpu/test_fast.py $T"
if [ $left -gt 30 ]; then
  ATTNQ_FAST_KERNEL=$K timeout $left python3 -m pytest -v -m gpu $T -p no:cacheprovider > $OUT/x/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(tail -1 $OUT/x/gpu_tests.log) t=$(el)"
fi
left=$(( ${BUDGET:-570} - $(el) - 10 ))
if [ $left -gt 120 ]; then
  OUT=$OUT/x AA_SUITES="full" AA_BUDGET_MS=75 timeout $left bash scripts/gpu_run.sh aa > $OUT/x/aa75.log 2>&1
  echo "aa75 rc=$? t=$(el)"; grep -h "A/A\|geomean\|wall" $OUT/x/aa75.log | tail -4
fi
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
