#!/bin/bash
# The next session's first call (run 66), sessions 18-19: ATTN_WS_S0FIRST (the next tile's S_0 issued before the O
# store) and ATTN_WS_PUBTILE (the producer publishes the decoded work unit) against v19, alone and together, on the
# d128 rows with FA3 (base twice: base2 is a copy, an A/A of the bench), pub also on d64 / d256 (it changes every
# kernel); the boundary records of the four trace builds; ATTN_WS_SMALL (the ws kernel below one wave) against v19 on
# kernels/campaigns/stage2/small_grid.toml with FA3 (two verifies, not recorded); then the GPU tests left by run 65.
# Build first on the CPU box (~2.5 min per pair of libraries; base / s0f / tr / trs0f as in session 18):
#   python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant base= --variant s0f=-DATTN_WS_S0FIRST=1 --build-only --keep .prebuilt
#   python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant tr=-DATTN_WS_TRACE=1 \
#       --variant trs0f="-DATTN_WS_TRACE=1 -DATTN_WS_S0FIRST=1" --build-only --keep .prebuilt
#   python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant pub=-DATTN_WS_PUBTILE=1 \
#       --variant s0fpub="-DATTN_WS_S0FIRST=1 -DATTN_WS_PUBTILE=1" \
#       --variant trs0fpub="-DATTN_WS_TRACE=1 -DATTN_WS_S0FIRST=1 -DATTN_WS_PUBTILE=1" \
#       --variant trpub="-DATTN_WS_TRACE=1 -DATTN_WS_PUBTILE=1" --build-only --keep .prebuilt
# Carry .whl (with pyseccomp), .fa3, .prebuilt, the script (cp to scripts/.run1.sh; BUDGET=<call limit - 20>).
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
. scripts/gpu_env.sh
python3 -c "import pyseccomp" && echo "pyseccomp ok" | tee -a $OUT/x/info.txt
# session 19's compile rules (-Bsymbolic, the build's preprocessed text against the scanned one) on the box's own
# nvcc and gcc, first: run 64's recorded full depends on them (the small-grid verify below reuses this build)
timeout 150 python3 -m attnq compile kernels/attn_fast.cu --json > $OUT/x/compile.json 2> $OUT/x/compile.err
echo "compile rc=$? t=$(el)" | tee -a $OUT/x/info.txt; tail -3 $OUT/x/compile.err
LIBS=$PWD/.prebuilt; cp $LIBS/base.so $LIBS/base2.so
for n in base s0f pub s0fpub trs0fpub; do
  timeout 150 python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant $n= --prebuilt $LIBS --check-only > /tmp/c_$n.log 2>&1 &
done
wait
for n in base s0f pub s0fpub trs0fpub; do echo "$n $(grep -h 'check:' /tmp/c_$n.log | head -1)" | tee -a $OUT/x/checks.txt; tail -3 /tmp/c_$n.log >> $OUT/x/checks.txt; done
echo "checked t=$(el)"
for lib in tr trs0f trpub trs0fpub; do for row in d128_n_s512 d128_n_s1024 d128_n_s2048; do
  timeout 40 python3 scripts/ws_trace.py $LIBS/$lib.so --one $row --skip 0 --bn 128 --json $OUT/x/trace_${lib}_$row.json > $OUT/x/trace_${lib}_$row.txt 2>&1
  echo "trace $lib $row rc=$?"; cat $OUT/x/trace_${lib}_$row.txt
done; done
echo "traced t=$(el)"
ok=(); for n in base s0f pub s0fpub; do grep -q "check: OK" /tmp/c_$n.log && ok+=(--variant $n=); [ $n = base ] && ok+=(--variant base2=); done
timeout 200 python3 scripts/kernel_bench.py kernels/attn_fast.cu "${ok[@]}" --prebuilt $LIBS --no-check --dims 128 \
  --json $OUT/x/bench.json > $OUT/x/bench.log 2>&1
tail -8 $OUT/x/bench.log; echo "bench t=$(el)"
if grep -q "check: OK" /tmp/c_pub.log; then
  timeout 150 python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant base= --variant pub= --prebuilt $LIBS --no-check \
    --dims 64,256 --json $OUT/x/bench_d64_d256.json > $OUT/x/bench_d64_d256.log 2>&1
  tail -6 $OUT/x/bench_d64_d256.log; echo "bench d64/d256 t=$(el)"
fi
# ATTN_WS_SMALL: the ws kernel below one wave (45 rows of full's odd / layouts / values groups), v19 then small, FA3 anchor
mkdir -p /tmp/small && sed 's/^#define ATTN_WS_SMALL 0 /#define ATTN_WS_SMALL 1 /' kernels/attn_fast.cu > /tmp/small/attn_fast.cu
grep -q "^#define ATTN_WS_SMALL 1 " /tmp/small/attn_fast.cu && echo "small.cu ok"
for K in kernels/attn_fast.cu /tmp/small/attn_fast.cu; do
  n=$( [ $K = kernels/attn_fast.cu ] && echo base || echo small )
  timeout 120 python3 -m attnq verify $K --suite kernels/campaigns/stage2/small_grid.toml --anchors fa3 --no-record --json \
    > $OUT/x/smallgrid_$n.json 2> $OUT/x/smallgrid_$n.err
  echo "smallgrid $n rc=$? t=$(el)"; python3 - $OUT/x/smallgrid_$n.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["num_correct"], "/", d["num_scenarios"], "vs fa3", d["geomean_vs_anchor"], "wall", d["wall_s"])
for s in d["scenarios"]:
    print(f'{(s.get("vs_anchor") or {}).get("fa3") or 0:6.2f} {s["tflops"] or 0:7.1f} {s["correct"]} {s["id"]}')
PY
done
left=$(( ${BUDGET:-570} - $(el) - 15 ))
if [ $left -gt 30 ]; then  # run 65 reached load_endless_static_table: the rest of the corpus
  timeout $left python3 -m pytest -v -m gpu tests/gpu/test_adversarial.py -p no:cacheprovider > $OUT/x/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(tail -1 $OUT/x/gpu_tests.log) t=$(el)"
fi
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
