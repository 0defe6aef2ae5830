#!/bin/sh
# Builds the red-team host kernels (same flags as tests/hostkernels.build) into ${OUT:-/tmp/redteam}.
# Run from the repository root: sh tests/adversarial/redteam/build.sh
set -e
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../../.." && pwd); OUT=${OUT:-/tmp/redteam}; mkdir -p "$OUT"
I="-I $ROOT/tests/hostkernels/include -I $ROOT/kernels -I $HERE"
for n in 0 1 2 12 3 13 23 4; do gcc -shared -fPIC -O2 -w -DRT=$n $I "$HERE/rt.c" -o "$OUT/rt$n.so" -lm -lpthread -lrt; done
for T in 0.05 0.01; do for n in 13 23; do gcc -shared -fPIC -O2 -w -DRT=$n -DTHRESH=${T}f $I "$HERE/rt.c" -o "$OUT/rt${n}_t$T.so" -lm -lpthread -lrt; done; done
for f in rt5 rt8 rt9; do gcc -shared -fPIC -O2 -w $I "$HERE/$f.c" -o "$OUT/$f.so" -lm; done
