#!/usr/bin/env bash
# Kernel development run on the H200 (one device call): builds variants of kernels/attn_fast.cu in
# parallel, checks each in its own process (a hang costs one timeout, not the run), then times the
# variants that passed on the FA3 grid against FlashAttention-3 in one process (scripts/kernel_bench.py).
#   VARIANTS="base=;v5=-DATTN_WS=0;st3=-DATTN_WS_ST128=3 -DATTN_WS_ST64=4" bash scripts/kernel_dev.sh      logs under $OUT (default ./gpu-out)
# Needs .whl/ (../shared/gpu/fetch-wheels.sh) and .fa3/*.tgz (the FA3 build) carried to the box.
# PREBUILT=.prebuilt: the variants' libraries were built on the CPU box (`kernel_bench.py ... --build-only --keep
# .prebuilt`, same VARIANTS) and carried: no build on the box. Then pick the variant to adopt with
# `python3 scripts/pick_variant.py $OUT/bench.json [--min-seqlen 2048 --class-floor 0.985]`.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
. scripts/gpu_env.sh
K=${KERNEL:-kernels/attn_fast.cu}
IFS=";" read -r -a VS <<< "${VARIANTS:-base=}"
args=(); for v in "${VS[@]}"; do args+=(--variant "$v"); done
LIBS=${PREBUILT:-/tmp/libs}
[ -n "${PREBUILT:-}" ] || python3 scripts/kernel_bench.py "$K" "${args[@]}" --build-only --keep "$LIBS" 2>&1 | tee -a "$OUT/summary.txt"
ok=()
for v in "${VS[@]}"; do
  n=${v%%=*}
  [ -f "$LIBS/$n.so" ] || { echo "no $LIBS/$n.so" | tee -a "$OUT/summary.txt"; continue; }
  if timeout "${CHECK_TIMEOUT:-120}" python3 scripts/kernel_bench.py "$K" --variant "$n=" --prebuilt "$LIBS" --check-only \
      > "/tmp/check_$n.log" 2>&1 && grep -q "check: OK" "/tmp/check_$n.log"; then
    ok+=(--variant "$n=")
  fi
  echo "check $n: rc=$? $(grep -h 'check:' "/tmp/check_$n.log" | head -1) $(grep -h 'max|o' "/tmp/check_$n.log" | head -3 | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
  tail -3 "/tmp/check_$n.log" | grep -i "error\|Traceback" | tee -a "$OUT/summary.txt"
  cat "/tmp/check_$n.log" >> "$OUT/checks.log"
done
if [ ${#ok[@]} -gt 0 ] && [ -z "${NO_TIMING:-}" ]; then
  timeout "${BENCH_TIMEOUT:-420}" python3 scripts/kernel_bench.py "$K" "${ok[@]}" --prebuilt "$LIBS" --no-check --dims "${DIMS:-64,128,256}" \
    --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
fi
