#!/bin/bash
# Run 71 (session 21, second call): run 70's `attnq compile kernels/attn_fast.cu` ran past 150 s on the box (55 s in
# run 66, 55 s on the CPU box with red team 21's policy): the compile alone with its log (relayout attempts), then
# `full`'s wall without anchors (the fused reference), then the corpus tests no run has reached.
# Carry .whl (pyseccomp), the script (cp to scripts/.run1.sh; BUDGET=<call limit - 20>).
. scripts/run_preamble.sh
gcc --version | head -1 | tee -a $OUT/x/info.txt
ATTNQ_LOG_LEVEL=info timeout ${CT:-240} python3 -m attnq compile kernels/attn_fast.cu --json > $OUT/x/compile.json 2> $OUT/x/compile.err
echo "compile rc=$? t=$(el)"; cut -c1-300 $OUT/x/compile.err | tail -8
python3 -c "import json; d=json.load(open('$OUT/x/compile.json')); print('flags', d['flags'][-8:], 'build_s', d['build_time_s'])" 2>&1 | tail -1
left=$(( ${BUDGET:-480} - $(el) - 10 ))
ATTNQ_DIAG_PROFILE=$OUT/x/full.prof timeout $left python3 -m attnq verify kernels/attn_fast.cu --suite full --no-record --json \
  > $OUT/x/full.json 2> $OUT/x/full.err
echo "full(no anchors) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full.json) t=$(el)"; tail -3 $OUT/x/full.err | cut -c1-300
left=$(( ${BUDGET:-480} - $(el) - 15 ))
if [ $left -gt 60 ]; then
  timeout $left python3 -m pytest -v -rA -m gpu tests/gpu/test_adversarial.py -k "control or escape_sysv_shm or escape_unix_socket or policy_off or still_serves" \
    -p no:cacheprovider > $OUT/x/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(tail -1 $OUT/x/gpu_tests.log) t=$(el)"; grep -n "^E " $OUT/x/gpu_tests.log | head -10
fi
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
