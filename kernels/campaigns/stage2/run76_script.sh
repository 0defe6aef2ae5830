#!/bin/bash
# Run 76 (session 24, after run 75: dplan +0.7 %, dl2 +0.7 %, dplanl2 +1.3 % on `production`, each under the 1.5 % bar
# but each on the rows it was aimed at: b16 sk8192 +3-4 %): more key bytes in flight per SM for the decode kernel now
# that PLAN 2 runs one CTA per SM on the 537 MB rows (run 74's ncu: 2.79 TB/s against FA3's 3.00):
#   dplanl2 (PLAN 2 + L2H, run 75's best: 2 warps x 2 tiles of 16 KB in flight per CTA);
#   dnw4    (+ ATTN_DEC_NW=4: 4 warps per CTA, 128 KB in flight; one CTA per SM by shared memory; CTA_GBS 80);
#   dnw3s4  (+ ATTN_DEC_NW=3 ATTN_DEC_ST=4: 3 warps x 3 tiles, 144 KB; CTA_GBS 90);
#   ds4     (+ ATTN_DEC_ST=4: 2 warps x 3 tiles, 96 KB; CTA_GBS 60).
# Bench `production --rounds 3` (FA3 in the process) against v20 (base25, a byte copy baseb). The best variant by
# the bench (+1 % over the suite, no group below 0.98 of base) is then verified under attnq's rules: its knobs are
# set in this tree (scripts/set_knobs.sh) and `production --anchors fa3` is recorded; when that verdict's geomean
# vs FA3 beats #20's 0.942 by 1 % (0.951), `full --anchors fa3,cudnn,flash` is recorded too (the adoption record).
# Prepare on the CPU box, from a fresh checkout with the README's venv: `PREPARE=1 bash <this script>` fetches the
# wheels (with pyseccomp) and FA3 when missing, builds .prebuilt (base25 = the tree's kernel, and each variant below
# from its knobs as -D flags) and fills attnq's build cache (.campaign/build) with the tree's kernel and each variant's
# source (scripts/fill_build_cache.sh): ~2 + ~5 min on two cores.
# Carry .whl (with pyseccomp), .fa3, .prebuilt (base25, dplanl2, dnw4, dnw3s4, ds4), .campaign, the script (cp to
# scripts/.run1.sh; BUDGET=<call limit - 20>; VERIFY=0: the checks and the bench only).
declare -A KNOBS=(
  [dplanl2]="ATTN_DEC_PLAN=2,ATTN_DEC_L2H=1"
  [dnw4]="ATTN_DEC_NW=4,ATTN_DEC_PLAN=2,ATTN_DEC_L2H=1,ATTN_DEC_CTA_GBS=80"
  [dnw3s4]="ATTN_DEC_NW=3,ATTN_DEC_ST=4,ATTN_DEC_PLAN=2,ATTN_DEC_L2H=1,ATTN_DEC_CTA_GBS=90"
  [ds4]="ATTN_DEC_ST=4,ATTN_DEC_PLAN=2,ATTN_DEC_L2H=1,ATTN_DEC_CTA_GBS=60"
)
if [ "${PREPARE:-0}" = 1 ]; then  # the CPU box's part
  set -e
  [ -n "$(ls .whl/pyseccomp-*.whl 2>/dev/null)" ] || bash ../shared/gpu/fetch-wheels.sh .whl pyseccomp
  [ -n "$(ls .fa3/*.tgz 2>/dev/null)" ] || { mkdir -p .fa3; cp ../shared/anchors/fa3/*.tgz .fa3/; }
  vars=(--variant base25=)
  for n in "${!KNOBS[@]}"; do vars+=(--variant "$n=-D${KNOBS[$n]//,/ -D}"); done
  mkdir -p .prebuilt && .venv/bin/python scripts/kernel_bench.py kernels/attn_fast.cu "${vars[@]}" --build-only \
    --keep .prebuilt
  bash scripts/fill_build_cache.sh "" "${KNOBS[@]}"
  du -sh .whl .fa3 .prebuilt .campaign
  exit 0
fi
. scripts/run_preamble.sh
export ATTNQ_STATE=$PWD/.campaign ATTNQ_GOAL_ANCHOR=fa3
LIBS=$PWD/.prebuilt; cp $LIBS/base25.so $LIBS/base.so; cp $LIBS/base25.so $LIBS/baseb.so
K=kernels/attn_fast.cu
timeout 120 python3 scripts/kernel_bench.py $K --variant dnw4= --variant dnw3s4= --variant ds4= --prebuilt $LIBS \
  --check-only > $OUT/x/check.log 2>&1
echo "check rc=$? $(grep -h 'check:' $OUT/x/check.log | tr '\n' ' ') t=$(el)"
ok=(--variant base= --variant baseb= --variant dplanl2=)
for n in dnw4 dnw3s4 ds4; do grep -q "\[$n\] check: OK" $OUT/x/check.log && ok+=(--variant $n=); done
timeout 150 python3 scripts/kernel_bench.py $K "${ok[@]}" --prebuilt $LIBS --no-check --suite production --rounds 3 \
  --json $OUT/x/bench_prod.json > $OUT/x/bench_prod.log 2>&1
echo "bench production rc=$? t=$(el)"; tail -7 $OUT/x/bench_prod.log
pick=$(python3 scripts/pick_variant.py $OUT/x/bench_prod.json --min-gain 0.01 --class-floor 0.98 2>$OUT/x/pick.err)
echo "pick: $pick"; cat $OUT/x/pick.err
if [ "${VERIFY:-1}" = 1 ] && [ -n "$pick" ] && [ -n "${KNOBS[$pick]:-}" ]; then  # VERIFY=0: the bench only
  bash scripts/set_knobs.sh $K "${KNOBS[$pick]}"; grep -n "^#define ATTN_DEC_" $K | cut -c1-60; sha256sum $K | tee -a $OUT/x/info.txt
  timeout 200 python3 -m attnq verify $K --suite production --anchors fa3 --json > $OUT/x/prod.json 2> $OUT/x/prod.err
  echo "production(fa3, recorded) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/prod.json) t=$(el)"
  g=$(python3 -c "import json; print(json.load(open('$OUT/x/prod.json'))['geomean_vs_anchor']['fa3'])" 2>/dev/null)
  echo "production vs fa3: $g (#20: 0.942)"
  left=$(( ${BUDGET:-580} - $(el) - 10 ))
  if python3 -c "import sys; sys.exit(0 if float('${g:-0}') >= 0.951 else 1)" && [ $left -gt 120 ]; then
    timeout $left python3 -m attnq verify $K --suite full --anchors fa3,cudnn,flash --json > $OUT/x/full.json \
      2> $OUT/x/full.err
    echo "full(anchors, recorded) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full.json) t=$(el)"
  fi
  tar czf $OUT/campaign.tgz --exclude build .campaign
fi
left=$(( ${BUDGET:-580} - $(el) - 25 ))  # the wall of `full` / `quick` on this box (issues 12/13: <= 60 s / 10 s on an H200)
if [ "${VERIFY:-1}" = 1 ] && [ $left -gt 90 ]; then
  timeout $left python3 -m attnq verify $K --suite full --no-record --json > $OUT/x/full_na.json 2> $OUT/x/full_na.err
  echo "full(no anchors) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/full_na.json) t=$(el)"
  timeout 20 python3 -m attnq verify $K --suite quick --no-record --json > $OUT/x/quick.json 2> $OUT/x/quick.err
  echo "quick(no anchors) rc=$? $(python3 scripts/summarize_verdict.py $OUT/x/quick.json) t=$(el)"
fi
left=$(( ${BUDGET:-580} - $(el) - 15 ))  # session 24 changed the compile path (-I folder, environment, hit re-check)
if [ $left -gt 40 ]; then
  timeout $left python3 -m pytest -q -rA -m gpu tests/gpu/test_original.py -p no:cacheprovider > $OUT/x/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(tail -1 $OUT/x/gpu_tests.log) t=$(el)"
fi
grep -h '"relayout"\|"compiled"\|cache' $OUT/x/*.err 2>/dev/null | head -5 | cut -c1-300
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
