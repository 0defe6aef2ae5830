#!/bin/bash
# session 13, call 1 (run 52): ATTN_WS_PVPIN (pin) and the trace build (tr) against v18 (base), libraries prebuilt on the
# CPU box (.prebuilt, carried); checks one process each; ws_trace of tr on three rows; one bench with FA3 on
# d64/128/192/256; pin made default and full verified (recorded) if it wins, else full profiled (issue 13).
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export ATTNQ_STATE=$PWD/.campaign ATTNQ_GOAL_ANCHOR=fa3 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
. scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
git log --oneline -1 | tee -a $OUT/x/info.txt
LIBS=$PWD/.prebuilt; V="base pin tr"
ls -la $LIBS | tee -a $OUT/x/info.txt
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
if grep -q "check: OK" /tmp/c_tr.log; then
  for row in d128_n_s8192 d256_n_s8192 d128_c_s8192 d64_n_s8192; do
    timeout 60 python3 scripts/ws_trace.py $LIBS/tr.so --one $row --json $OUT/x/trace_$row.json > $OUT/x/trace_$row.txt 2>&1
    echo "trace $row rc=$? t=$(el)"; cat $OUT/x/trace_$row.txt | tail -20
  done
fi
timeout 260 python3 scripts/kernel_bench.py kernels/attn_fast.cu "${ok[@]}" --prebuilt $LIBS --no-check --dims 64,128,192,256 \
  --json $OUT/x/bench.json > $OUT/x/bench.log 2>&1
tail -4 $OUT/x/bench.log; echo "bench t=$(el)"
python3 scripts/pick_variant.py $OUT/x/bench.json --min-seqlen 2048 --class-floor 0.985 --min-gain 0.015 > $OUT/x/decide.txt 2>&1
cat $OUT/x/decide.txt
best=$(head -1 $OUT/x/decide.txt)
left=$(( ${BUDGET:-570} - $(el) - 10 ))
if [ "$best" = pin ]; then
  sed -i 's/^#define ATTN_WS_PVPIN 0 /#define ATTN_WS_PVPIN 1 /' kernels/attn_fast.cu
  grep -n "^#define ATTN_WS_PVPIN " kernels/attn_fast.cu | cut -c1-40 | tee -a $OUT/x/decide.txt
  ATTNQ_DIAG_TIMING_LOG=$OUT/x/full_timing.jsonl timeout $left python3 -m attnq verify kernels/attn_fast.cu --suite full --anchors fa3,cudnn,flash --json > $OUT/x/full.json 2> $OUT/x/full.err
  echo "full(pin) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full.json) t=$(el)"
  tar czf $OUT/campaign.tgz .campaign
else
  ATTNQ_DIAG_PROFILE=$OUT/x/full.prof timeout $left python3 -m attnq verify kernels/attn_fast.cu --suite full --no-record --json > $OUT/x/full.json 2> $OUT/x/full.err
  echo "full(profile) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full.json) t=$(el)"
fi
tail -3 $OUT/x/full.err; gzip -f $OUT/x/full_timing.jsonl 2>/dev/null
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
