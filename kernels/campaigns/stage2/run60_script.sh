#!/bin/bash
# session 17 (run 60): d128 on three consumer warpgroups (ATTN_WS_NWG128=3, 192 rows per CTA at 160 registers) with a
# key tile of 80 (no spills) or 96 (16 registers spilled), against v18 and FA3 on the d128 rows (causal and not).
# Checks in parallel, one bench with FA3 in the process, the pick printed; a sanitizer-free correctness check only
# (the full verify follows in a later call when a variant wins). Libraries from .prebuilt (kernel_bench --build-only).
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
git log --oneline -1 | tee -a $OUT/x/info.txt
. scripts/gpu_env.sh
LIBS=$PWD/.prebuilt; V="${V:-base w3b80 w3b96}"
for n in $V; do
  timeout 120 python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant $n= --prebuilt $LIBS --check-only > $OUT/x/c_$n.log 2>&1 &
done
wait
ok=()
for n in $V; do
  grep -q "check: OK" $OUT/x/c_$n.log && ok+=(--variant $n=)
  echo "$n $(grep -h 'check:' $OUT/x/c_$n.log | head -1)" | tee -a $OUT/x/checks.txt
  grep -h "^   " $OUT/x/c_$n.log | head -8 >> $OUT/x/checks.txt
done
echo "checked t=$(el)"
left=$(( ${BUDGET:-250} - $(el) - 10 ))
timeout $left python3 scripts/kernel_bench.py kernels/attn_fast.cu "${ok[@]}" --prebuilt $LIBS --no-check --dims ${DIMS:-128} \
  --json $OUT/x/bench.json > $OUT/x/bench.log 2>&1
echo "bench rc=$? t=$(el)"; tail -4 $OUT/x/bench.log
python3 scripts/pick_variant.py $OUT/x/bench.json --dims 128 --only ${ONLY:-w3b80,w3b96} --min-seqlen 512 \
  --class-floor 0.985 --min-gain 0.01 > $OUT/x/decide128.txt 2>&1
cat $OUT/x/decide128.txt
echo "done t=$(el)"
