#!/bin/bash
# session 18's plan for the next session's first call (run 66): ATTN_WS_S0FIRST (the next tile's S_0 issued before the
# O store) against v19 on the d128 rows with FA3 (base and s0f each twice: base2 / s0f2 are copies, an A/A of the
# bench), the boundary records of both trace builds (tr, trs0f), then the GPU tests left by run 65.
# Build first on the CPU box (~2 min per library, two at a time):
#   python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant base= --variant s0f=-DATTN_WS_S0FIRST=1 --build-only --keep .prebuilt
#   python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant tr=-DATTN_WS_TRACE=1 \
#       --variant trs0f="-DATTN_WS_TRACE=1 -DATTN_WS_S0FIRST=1" --build-only --keep .prebuilt
# Carry .whl (with pyseccomp), .fa3, .prebuilt, the script (cp to scripts/.run1.sh; BUDGET=<call limit - 20>).
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
. scripts/gpu_env.sh
python3 -c "import pyseccomp" && echo "pyseccomp ok" | tee -a $OUT/x/info.txt
LIBS=$PWD/.prebuilt; cp $LIBS/base.so $LIBS/base2.so; cp $LIBS/s0f.so $LIBS/s0f2.so
for n in base s0f trs0f; do
  timeout 150 python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant $n= --prebuilt $LIBS --check-only > /tmp/c_$n.log 2>&1 &
done
wait
for n in base s0f trs0f; do echo "$n $(grep -h 'check:' /tmp/c_$n.log | head -1)" | tee -a $OUT/x/checks.txt; tail -3 /tmp/c_$n.log >> $OUT/x/checks.txt; done
echo "checked t=$(el)"
for lib in tr trs0f; do for row in d128_n_s512 d128_n_s1024 d128_n_s2048; do
  timeout 40 python3 scripts/ws_trace.py $LIBS/$lib.so --one $row --skip 0 --bn 128 --json $OUT/x/trace_${lib}_$row.json > $OUT/x/trace_${lib}_$row.txt 2>&1
  echo "trace $lib $row rc=$?"; cat $OUT/x/trace_${lib}_$row.txt
done; done
echo "traced t=$(el)"
ok=(); for n in base s0f; do grep -q "check: OK" /tmp/c_$n.log && ok+=(--variant $n= --variant ${n}2=); done
timeout 200 python3 scripts/kernel_bench.py kernels/attn_fast.cu "${ok[@]}" --prebuilt $LIBS --no-check --dims 128 \
  --json $OUT/x/bench.json > $OUT/x/bench.log 2>&1
tail -5 $OUT/x/bench.log; echo "bench t=$(el)"
left=$(( ${BUDGET:-570} - $(el) - 15 ))
if [ $left -gt 30 ]; then  # run 65 reached load_endless_static_table: the rest of the corpus
  timeout $left python3 -m pytest -v -m gpu tests/gpu/test_adversarial.py -p no:cacheprovider > $OUT/x/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(tail -1 $OUT/x/gpu_tests.log) t=$(el)"
fi
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
