#!/bin/bash
# Run 70 (session 21; session 20's planned first call, never run as run 69, with this session's candidate added): (1) kernel: ATTN_WS_RFOLD 1 / 2 (the O
# rescale right after the row max) and ATTN_WS_PPFIRST (consumer 1 takes the first ping-pong turn), checked, benched
# against v20 (base20, twice) with FA3 on d128 and d256; PPFIRST traced against v20's trace build (trpub); (2) the adversarial control and work_after_return_thread (run 66: FAILED, report cut), then
# the five tests no run has reached; (3) `full`'s wall after the reference's fused softmax (run 67: 61.5 s) and an A/A.
# Build first on the CPU box: python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant base20= \
#   --variant pf=-DATTN_WS_PPFIRST=1 --variant trpf="-DATTN_WS_TRACE=1 -DATTN_WS_PPFIRST=1" --variant rf1=-DATTN_WS_RFOLD=1 --variant rf2=-DATTN_WS_RFOLD=2 \
#   --build-only --keep .prebuilt
# (trpub.so from session 19's builds is v20's trace build.) Carry .whl (pyseccomp), .fa3, .prebuilt, the script
# (cp to scripts/.run1.sh; BUDGET=<call limit - 20>).
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
# harness/ and tests/ as committed (a helper's uncommitted policy work in this tree stays out of the run):
# `git archive HEAD harness tests -o .prebuilt/tree.tar` on the CPU box
[ -f .prebuilt/tree.tar ] && tar xf .prebuilt/tree.tar && echo "tree: harness/ tests/ from tree.tar"
. scripts/gpu_env.sh
LIBS=$PWD/.prebuilt; cp $LIBS/base20.so $LIBS/base20b.so
# the compile cache filled during the checks, so that `full`'s wall below is the verification's, not nvcc's
(timeout 150 python3 -m attnq compile kernels/attn_fast.cu > $OUT/x/compile.log 2>&1; echo "compile rc=$?" >> $OUT/x/compile.log) &
for n in base20 pf rf1 rf2; do
  timeout 150 python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant $n= --prebuilt $LIBS --check-only > /tmp/c_$n.log 2>&1 &
done
wait
tail -1 $OUT/x/compile.log
for n in base20 pf rf1 rf2; do echo "$n $(grep -h 'check:' /tmp/c_$n.log | head -1)" | tee -a $OUT/x/checks.txt; done
ok=(--variant base20= --variant base20b=)
for n in pf rf1 rf2; do grep -q "check: OK" /tmp/c_$n.log && ok+=(--variant $n=); done
timeout 200 python3 scripts/kernel_bench.py kernels/attn_fast.cu "${ok[@]}" --prebuilt $LIBS --no-check --dims 128,256 \
  --json $OUT/x/bench.json > $OUT/x/bench.log 2>&1
tail -8 $OUT/x/bench.log; echo "bench t=$(el)"
for lib in trpub trpf; do for row in d128_n_s2048 d128_c_s8192; do
  timeout 40 python3 scripts/ws_trace.py $LIBS/$lib.so --one $row --skip 0 --bn 128 --json $OUT/x/trace_${lib}_$row.json > $OUT/x/trace_${lib}_$row.txt 2>&1
  echo "trace $lib $row rc=$?"; grep "warpgroup\|period\|row tile" $OUT/x/trace_${lib}_$row.txt | head -4
done; done
A=tests/gpu/test_adversarial.py
timeout 200 python3 -m pytest -v -rA -m gpu $A -k "control or work_after_return_thread" -p no:cacheprovider > $OUT/x/thread_test.log 2>&1
echo "control+thread rc=$? $(tail -1 $OUT/x/thread_test.log) t=$(el)"; grep -n "^E " $OUT/x/thread_test.log | head -20
ATTNQ_DIAG_PROFILE=$OUT/x/full.prof timeout 200 python3 -m attnq verify kernels/attn_fast.cu --suite full --no-record --json \
  > $OUT/x/full.json 2> $OUT/x/full.err
echo "full(no anchors) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full.json) t=$(el)"; tail -3 $OUT/x/full.err
left=$(( ${BUDGET:-580} - $(el) - 15 ))
if [ $left -gt 60 ]; then
  timeout $left python3 -m pytest -v -rA -m gpu $A -k "control or escape_sysv_shm or escape_unix_socket or policy_off or still_serves" \
    -p no:cacheprovider > $OUT/x/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(tail -1 $OUT/x/gpu_tests.log) t=$(el)"; grep -n "^E " $OUT/x/gpu_tests.log | head -20
fi
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
