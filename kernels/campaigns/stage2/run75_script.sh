#!/bin/bash
# Run 75 (session 23, after run 74's ncu of the decode kernel; measure only, adopt in the next call): three decode
# candidates checked and benched on `production` against v20 (base25, a byte copy baseb) with FA3 in the process,
# 3 rotated rounds per row:
#   dplan   (ATTN_DEC_PLAN=2: the split model lets the resident CTAs share the HBM rate, so 128 (batch, kv head) units
#            run unsplit, one CTA per SM, with no combine kernel; run 74's ncu: attn_dec 194 us + combine 6.7 us
#            where FA3 runs one 180 us kernel on 132 CTAs);
#   dl2     (ATTN_DEC_L2H=1: the K/V cp.async with the .L2::256B prefetch-size hint);
#   dplanl2 (both);
# pick_variant's choice (+1.5 % over the suite, no group below 0.98 of base) is printed; adopting it (sed of the
# knob's default) needs `--suite production --anchors fa3` recorded and `full` in the next call.
# Build first on the CPU box (base25's SASS is v20's, byte for byte, names normalized):
#   .venv/bin/python scripts/kernel_bench.py kernels/attn_fast.cu --variant base25= --variant dplan=-DATTN_DEC_PLAN=2 \
#     --variant dl2=-DATTN_DEC_L2H=1 --variant dplanl2="-DATTN_DEC_PLAN=2 -DATTN_DEC_L2H=1" --build-only --keep .prebuilt
# Carry .whl, .fa3, .prebuilt (only these four libraries: the carry limit is 64 MiB), the script (cp to
# scripts/.run1.sh; BUDGET=<call limit - 20>).
. scripts/run_preamble.sh
export ATTNQ_STATE=$PWD/.campaign
LIBS=$PWD/.prebuilt; cp $LIBS/base25.so $LIBS/base.so; cp $LIBS/base25.so $LIBS/baseb.so
K=kernels/attn_fast.cu
timeout 100 python3 scripts/kernel_bench.py $K --variant dplan= --variant dl2= --variant dplanl2= --prebuilt $LIBS \
  --check-only > $OUT/x/check.log 2>&1
echo "check rc=$? $(grep -h 'check:' $OUT/x/check.log | tr '\n' ' ') t=$(el)"
ok=(--variant base= --variant baseb=)
for n in dplan dl2 dplanl2; do grep -q "\[$n\] check: OK" $OUT/x/check.log && ok+=(--variant $n=); done
timeout 130 python3 scripts/kernel_bench.py $K "${ok[@]}" --prebuilt $LIBS --no-check --suite production --rounds 3 \
  --json $OUT/x/bench_prod.json > $OUT/x/bench_prod.log 2>&1
echo "bench production rc=$? t=$(el)"; tail -6 $OUT/x/bench_prod.log
pick=$(python3 scripts/pick_variant.py $OUT/x/bench_prod.json --min-gain 0.015 --class-floor 0.98 2>$OUT/x/pick.err)
echo "pick: $pick"; cat $OUT/x/pick.err
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
