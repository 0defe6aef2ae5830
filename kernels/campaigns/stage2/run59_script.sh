#!/bin/bash
# session 16's last-resort call (run 59) when ~350 s of device time are left after failed starts: only the kernel
# questions of run 58 (the d128 non-causal key tile and head_dim 96 without the padding's MMA), on fewer libraries,
# checks then one bench on the d96 and d128 rows with FA3, the picks printed (adopted by the next session).
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
git log --oneline -1 | tee -a $OUT/x/info.txt
. scripts/gpu_env.sh
LIBS=$PWD/.prebuilt; V="base bn176 bn160 d96n d96v d96n3 d96v3"
for n in $V; do
  timeout 100 python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant $n= --prebuilt $LIBS --check-only > $OUT/x/c_$n.log 2>&1 &
done
wait
ok=()
for n in $V; do
  grep -q "check: OK" $OUT/x/c_$n.log && ok+=(--variant $n=)
  echo "$n $(grep -h 'check:' $OUT/x/c_$n.log | head -1)" | tee -a $OUT/x/checks.txt
done
echo "checked t=$(el)"
left=$(( ${BUDGET:-250} - $(el) - 10 ))
timeout $left python3 scripts/kernel_bench.py kernels/attn_fast.cu "${ok[@]}" --prebuilt $LIBS --no-check --dims 96,128 \
  --json $OUT/x/bench.json > $OUT/x/bench.log 2>&1
echo "bench rc=$? t=$(el)"; tail -3 $OUT/x/bench.log
python3 scripts/pick_variant.py $OUT/x/bench.json --dims 128 --only bn176,bn160 --min-seqlen 512 \
  --class-floor 0.985 --min-gain 0.01 > $OUT/x/decide128.txt 2>&1
python3 scripts/pick_variant.py $OUT/x/bench.json --dims 96 --only d96n,d96v,d96n3,d96v3 --min-seqlen 512 \
  --class-floor 0.985 --min-gain 0.02 > $OUT/x/decide96.txt 2>&1
cat $OUT/x/decide128.txt $OUT/x/decide96.txt
echo "done t=$(el)"
