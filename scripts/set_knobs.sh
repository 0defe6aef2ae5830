#!/bin/bash
# Sets knob defaults in a kernel source in place: `bash scripts/set_knobs.sh FILE NAME=VALUE[,NAME=VALUE...]` turns
# each `#define NAME <old> ` line (the knob's default, followed by its comment) into `#define NAME VALUE `. Exits 2
# when FILE has no such line for a NAME. Used by scripts/fill_build_cache.sh (CPU box) and the device run scripts,
# so the bytes a run verifies are the bytes whose build the cache holds.
set -eu
f=$1; knobs=${2:-}
for kv in ${knobs//,/ }; do
  grep -q "^#define ${kv%%=*} " "$f" || { echo "no '#define ${kv%%=*} ' in $f" >&2; exit 2; }
  sed -i "s/^#define ${kv%%=*} [^ ]* /#define ${kv%%=*} ${kv#*=} /" "$f"
done
