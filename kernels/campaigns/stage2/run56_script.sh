#!/bin/bash
# session 15's plan for the next session's first call (run 56; run 55 never ran: no machine in session 14, no device
# time in session 15): one bench answers two questions, each on its own rows (pick_variant --dims/--only):
#   the d128 non-causal key tile (ATTN_WS_BN128N_TMAO 176 / 160 / 144) on the d128 rows, and
#   head_dim 96 without the padding's MMA (ATTN_WS_D96N: 2 S only, 1 S and P V, 3 S and P V with V in 64-byte
#   swizzle; on 3 consumer warpgroups: ATTN_WS_NWG96=3, BN96 112 / 96)
#   on the d96 rows; libraries prebuilt on the CPU box (.prebuilt). Then the consumers' trace at s512/s1k
# (prologue-epilogue-share), full with the sparse original (7bf9bc1), profiled, not recorded, and the adversarial and
# original GPU tests with what is left. Winners are made default and recorded in the next call.
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export ATTNQ_STATE=$PWD/.campaign ATTNQ_GOAL_ANCHOR=fa3 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
git log --oneline -1 | tee -a $OUT/x/info.txt
. scripts/gpu_env.sh
LIBS=$PWD/.prebuilt; V="base bn176 bn160 bn144 d96s d96n d96v d96n3 d96v3 d96n3b96"
ls -la $LIBS | tee -a $OUT/x/info.txt
for n in $V; do  # checks in parallel, one process each (a hang costs one timeout)
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
timeout 260 python3 scripts/kernel_bench.py kernels/attn_fast.cu "${ok[@]}" --prebuilt $LIBS --no-check --dims 96,128 \
  --json $OUT/x/bench.json > $OUT/x/bench.log 2>&1
tail -4 $OUT/x/bench.log; echo "bench t=$(el)"
python3 scripts/pick_variant.py $OUT/x/bench.json --dims 128 --only bn176,bn160,bn144 --min-seqlen 512 \
  --class-floor 0.985 --min-gain 0.01 > $OUT/x/decide128.txt 2>&1
python3 scripts/pick_variant.py $OUT/x/bench.json --dims 96 --only d96s,d96n,d96v,d96n3,d96v3,d96n3b96 --min-seqlen 512 \
  --class-floor 0.985 --min-gain 0.02 > $OUT/x/decide96.txt 2>&1
cat $OUT/x/decide128.txt $OUT/x/decide96.txt
mkdir -p .state56 && cp $OUT/x/decide128.txt $OUT/x/decide96.txt $OUT/x/bench.json .state56/  # for the next call
for row in d128_n_s512 d128_n_s1024; do
  timeout 60 python3 scripts/ws_trace.py .prebuilt/tr.so --one $row --skip 0 --bn 128 --json $OUT/x/trace_$row.json > $OUT/x/trace_$row.txt 2>&1
  echo "trace $row rc=$?"; tail -4 $OUT/x/trace_$row.txt
done
echo "trace t=$(el)"
left=$(( ${BUDGET:-570} - $(el) - 10 ))
if [ $left -gt 110 ]; then  # the committed checker (the original only where used), profiled, not recorded
  ATTNQ_DIAG_PROFILE=$OUT/x/full.prof timeout $left python3 -m attnq verify kernels/attn_fast.cu --suite full --no-record --json > $OUT/x/fullp.json 2> $OUT/x/fullp.err
  echo "full(sparse original, profile) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/fullp.json) t=$(el)"
fi
left=$(( ${BUDGET:-570} - $(el) - 10 ))
if [ $left -gt 30 ]; then
  T="tests/gpu/test_adversarial.py tests/gpu/test_original.py"
  ATTNQ_FAST_KERNEL=kernels/attn_fast.cu timeout $left python3 -m pytest -v -m gpu $T -p no:cacheprovider > $OUT/x/gpu_tests.log 2>&1
  echo "gpu tests $T rc=$? $(tail -1 $OUT/x/gpu_tests.log) t=$(el)"
fi
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
