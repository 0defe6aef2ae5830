#!/bin/bash
# Fills attnq's build cache in .campaign/build (CPU box, before run 73) with the sources run73_script.sh may verify:
# attn_original.cu and attn_fast.cu with each combination of the two knobs it may adopt (the same `sed` as the run
# script, on a copy of kernels/). A cache entry is keyed by the source bytes, headers, flags, nvcc version, arch and
# policy switch, so the box uses it only if its nvcc prints the same version; a miss just builds there. (In run 73
# every entry missed: the key held absolute paths until 4d8f83d; the knob combinations name run 73's tree, 56501d5.)
set -eu
PY=${PY:-.venv/bin/python}
export ATTNQ_STATE=$PWD/.campaign
$PY -m attnq compile kernels/attn_original.cu > /dev/null
for combo in "" "bn" "bulk" "bn bulk"; do
  d=$(mktemp -d); cp -r kernels/attn_fast.cu kernels/attn_abi.h $d/
  for c in $combo; do
    [ $c = bn ] && sed -i 's/^#define ATTN_WS_BN176_FROM 0 /#define ATTN_WS_BN176_FROM 4096 /' $d/attn_fast.cu
    [ $c = bulk ] && sed -i 's/^#define ATTN_DEC_BULK 0 /#define ATTN_DEC_BULK 1 /' $d/attn_fast.cu
  done
  echo "[$combo] $(sha256sum $d/attn_fast.cu | cut -c1-16) $($PY -m attnq compile $d/attn_fast.cu --json 2>/dev/null | $PY -c 'import json,sys; r=json.load(sys.stdin); print(r.get("cache_hit"), r.get("compile_time_s"))')"
  rm -rf $d
done
