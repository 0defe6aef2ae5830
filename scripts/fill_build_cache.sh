#!/bin/bash
# Fills attnq's build cache ($ATTNQ_STATE/build, default .campaign/build) on the CPU box with the sources a device run
# may verify, so the box skips the ~85 s build of attn_fast.cu when its nvcc prints the same version (the key holds
# the bytes, the headers by their path relative to kernels/, the flags, nvcc's version, the arch and the policy).
# Each argument is one source: kernels/attn_fast.cu with the listed knob defaults set, "" for the file as it is:
#   bash scripts/fill_build_cache.sh "" "ATTN_DEC_PLAN=2" "ATTN_DEC_PLAN=2,ATTN_DEC_L2H=1"
# The edit is made in place (a copy elsewhere would key its headers as <src>/..., not <kernels>/...) and undone on
# exit; the run script applies the same edit (scripts/set_knobs.sh).
# The original kernel is compiled too.
set -eu
PY=${PY:-.venv/bin/python}
export ATTNQ_STATE=${ATTNQ_STATE:-$PWD/.campaign}
K=kernels/attn_fast.cu
cp $K /tmp/fill_build_cache.keep; trap 'cp /tmp/fill_build_cache.keep $K' EXIT
$PY -m attnq compile kernels/attn_original.cu > /dev/null
for combo in "$@"; do
  cp /tmp/fill_build_cache.keep $K
  bash scripts/set_knobs.sh $K "$combo"
  echo "[$combo] $(sha256sum $K | cut -c1-16) $($PY -m attnq compile $K --json 2>/dev/null | $PY -c 'import json,sys; r=json.load(sys.stdin); print("cache_hit", r.get("cache_hit"), "s", r.get("compile_time_s"))')"
done
