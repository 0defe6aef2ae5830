#!/bin/bash
# Run 74 (session 23, the warm H100 after run 73): ncu of the decode kernel beside FA3 on one 537 MB decode row,
# `quick` twice, `full` again without anchors. Carry .whl, .fa3, .prebuilt (base23.so), .campaign.
. scripts/run_preamble.sh
export ATTNQ_STATE=$PWD/.campaign
cat > /tmp/dec_probe.py <<'PY'
import sys, torch
sys.path.insert(0, "scripts")
from kernel_bench import Runner
from harness.anchors import fa3_runner
from pathlib import Path
b, sq, sk, hq, hk, d, causal = 16, 4, 8192, 64, 8, 128, True
q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16)
k = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
r = Runner(Path(".prebuilt/base23.so"))
call = r.prepare(q, k, v, causal, d ** -0.5)[0]
f = fa3_runner(torch, causal, q, k, v, d ** -0.5)
for _ in range(3): call(); f()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
call(); f()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
PY
timeout 200 ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section LaunchStats --section Occupancy --section SchedulerStats python3 /tmp/dec_probe.py > $OUT/x/ncu_dec.txt 2>&1
echo "ncu rc=$? t=$(el)"; grep -E "^\s+[a-z_].*\(|Duration|DRAM Throughput|Memory Throughput|Registers|Grid Size|Achieved Occupancy|Stall|Block Size|Waves" $OUT/x/ncu_dec.txt | head -60
for i in 1 2; do
  timeout 60 python3 -m attnq verify kernels/attn_fast.cu --suite quick --no-record --json > $OUT/x/quick$i.json 2>/dev/null
  echo "quick$i $(python3 scripts/summarize_verdict.py $OUT/x/quick$i.json | cut -c1-200) t=$(el)"
done
timeout 200 python3 -m attnq verify kernels/attn_fast.cu --suite full --no-record --json > $OUT/x/full2.json 2>/dev/null
echo "full2 $(python3 scripts/summarize_verdict.py $OUT/x/full2.json) t=$(el)"
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
