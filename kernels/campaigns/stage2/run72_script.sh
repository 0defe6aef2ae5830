#!/bin/bash
# Run 72 (session 22, first call; run 71's plan, never run, with session 22's kernel candidate first: run71_script.sh
# is gone, this is it): (1) kernel: vb176 (d128
# non-causal at BN 176, FA3's tile, with O staged over the V ring: -DATTN_WS_TMA_O_VBUF=2 -DATTN_WS_BN128N_TMAO=176)
# checked, benched on d128 against v20 (base20, twice) with FA3 (3 rotated rounds per row: kernel_bench --rounds); (2) run 71's question: `attnq compile
# kernels/attn_fast.cu` alone on the box, with its log (relayout lines, the flags used; since 063c812 a relayout is a
# relink of ~1 s, harness/relink.py), in the background during (1);
# (3) `full` without anchors (issue 13's wall), then the corpus tests no run has reached.
# Build first on the CPU box: python3 scripts/kernel_bench.py kernels/attn_fast.cu \
#   --variant vb176="-DATTN_WS_TMA_O_VBUF=2 -DATTN_WS_BN128N_TMAO=176" --build-only --keep .prebuilt (and vbc176, the
#   same with -DATTN_WS_BN128=176: causal d128 at BN 176 too)
# (base20.so: v20's default build, session 21.) Carry .whl (pyseccomp), .fa3, .prebuilt, the script
# (cp to scripts/.run1.sh; BUDGET=<call limit - 20>).
. scripts/run_preamble.sh
gcc --version | head -1 | tee -a $OUT/x/info.txt
LIBS=$PWD/.prebuilt; cp $LIBS/base20.so $LIBS/base20b.so
(ATTNQ_LOG_LEVEL=info timeout ${CT:-200} python3 -m attnq compile kernels/attn_fast.cu --json > $OUT/x/compile.json 2> $OUT/x/compile.err
 echo "compile rc=$? t=$(el)" > $OUT/x/compile.rc) &
CPID=$!
P=()
for n in vb176 vbc176; do
  timeout 150 python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant $n= --prebuilt $LIBS --check-only > $OUT/x/check_$n.log 2>&1 &
  P+=($!)
done
wait "${P[@]}"
ok=(--variant base20= --variant base20b=)
for n in vb176 vbc176; do
  echo "check $n $(grep -h 'check:' $OUT/x/check_$n.log | head -1) t=$(el)"; grep -q "check: OK" $OUT/x/check_$n.log && ok+=(--variant $n=)
done
timeout 200 python3 scripts/kernel_bench.py kernels/attn_fast.cu "${ok[@]}" --prebuilt $LIBS --no-check --dims 128 --rounds 3 \
  --json $OUT/x/bench.json > $OUT/x/bench.log 2>&1
echo "bench rc=$? t=$(el)"; tail -6 $OUT/x/bench.log
wait $CPID; cat $OUT/x/compile.rc; grep -c relayout $OUT/x/compile.err; cut -c1-300 $OUT/x/compile.err | tail -4
python3 -c "import json; d=json.load(open('$OUT/x/compile.json')); print('flags', d['flags'][-8:], 'build_s', d['build_time_s'])" 2>&1 | tail -1
left=$(( ${BUDGET:-580} - $(el) - 10 ))
if [ $left -gt 80 ]; then
  ATTNQ_DIAG_PROFILE=$OUT/x/full.prof timeout $left python3 -m attnq verify kernels/attn_fast.cu --suite full --no-record --json \
    > $OUT/x/full.json 2> $OUT/x/full.err
  echo "full(no anchors) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full.json) t=$(el)"; tail -3 $OUT/x/full.err | cut -c1-300
fi
left=$(( ${BUDGET:-580} - $(el) - 15 ))
if [ $left -gt 60 ]; then
  timeout $left python3 -m pytest -v -rA -m gpu tests/gpu/test_adversarial.py -k "control or escape_sysv_shm or escape_unix_socket or policy_off or still_serves" \
    -p no:cacheprovider > $OUT/x/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(tail -1 $OUT/x/gpu_tests.log) t=$(el)"; grep -n "^E " $OUT/x/gpu_tests.log | head -10
fi
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
