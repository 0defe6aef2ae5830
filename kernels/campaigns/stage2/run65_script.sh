#!/bin/bash
# session 18 (run 65): where the d128 row tile's boundary goes (the trace build's new boundary records, v19 and the
# ATTN_WS_QDB candidate), the candidates against v19 on the d128 rows with FA3 (qdb: two Q buffers; qdbm: with the
# merged boundary; m: the merged boundary alone, v9-v16's; base and qdb each twice: base2 / qdb2 are copies, an A/A
# of the bench), then the GPU tests owed since session 13 (test_fast, test_adversarial) with pyseccomp.
# Carry .whl (with pyseccomp), .fa3, .prebuilt (kernel_bench.py --build-only --keep: base qdb qdbm m tr trq), the script.
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
. scripts/gpu_env.sh
python3 -c "import pyseccomp" && echo "pyseccomp ok" | tee -a $OUT/x/info.txt
LIBS=$PWD/.prebuilt; cp $LIBS/base.so $LIBS/base2.so; cp $LIBS/qdb.so $LIBS/qdb2.so
for n in base qdb qdbm m trq; do
  timeout 150 python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant $n= --prebuilt $LIBS --check-only > /tmp/c_$n.log 2>&1 &
done
wait
for n in base qdb qdbm m trq; do echo "$n $(grep -h 'check:' /tmp/c_$n.log | head -1)" | tee -a $OUT/x/checks.txt; tail -3 /tmp/c_$n.log >> $OUT/x/checks.txt; done
echo "checked t=$(el)"
for lib in tr trq; do for row in d128_n_s512 d128_n_s1024 d128_n_s2048; do
  timeout 40 python3 scripts/ws_trace.py $LIBS/$lib.so --one $row --skip 0 --bn 128 --json $OUT/x/trace_${lib}_$row.json > $OUT/x/trace_${lib}_$row.txt 2>&1
  echo "trace $lib $row rc=$?"; cat $OUT/x/trace_${lib}_$row.txt
done; done
echo "traced t=$(el)"
ok=(); for n in base qdb; do grep -q "check: OK" /tmp/c_$n.log && ok+=(--variant $n= --variant ${n}2=); done
for n in qdbm m; do grep -q "check: OK" /tmp/c_$n.log && ok+=(--variant $n=); done
timeout 200 python3 scripts/kernel_bench.py kernels/attn_fast.cu "${ok[@]}" --prebuilt $LIBS --no-check --dims 128 \
  --json $OUT/x/bench.json > $OUT/x/bench.log 2>&1
tail -5 $OUT/x/bench.log; echo "bench t=$(el)"
left=$(( ${BUDGET:-570} - $(el) - 15 ))
if [ $left -gt 30 ]; then
  ATTNQ_FAST_KERNEL=kernels/attn_fast.cu timeout $left python3 -m pytest -v -m gpu tests/gpu/test_fast.py tests/gpu/test_adversarial.py \
    -p no:cacheprovider > $OUT/x/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(tail -1 $OUT/x/gpu_tests.log) t=$(el)"
fi
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
