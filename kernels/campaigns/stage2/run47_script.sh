#!/bin/bash
# session 12, call 3 (run 47): why v18 trails FA3 on non-causal d128/d256. (1) SM clock and power while each kernel
# runs alone for ~4 s (a power-throttle difference would show as a clock difference); (2) ncu PC sampling per
# SASS instruction (SourceCounters) of v18 and FA3 on d128_n_s8192 and d256_n_s8192, exported as CSV.
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
. scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
cat > /tmp/clock_probe.py <<'PY'
import subprocess, sys, threading, time, json
sys.path.insert(0, "scripts")
import torch
import kernel_bench as kb
import flash_attn_interface as fa3
samples = []
proc = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active",
                         "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
def reader():
    for line in proc.stdout:
        samples.append((time.time(), line.strip()))
threading.Thread(target=reader, daemon=True).start()
r = kb.Runner(sys.argv[1])
phases = []
for row in ("d128_n_s8192", "d256_n_s8192"):
    d, c, s = row.split("_")
    q, k, v = kb.grid_tensors(int(d[1:]), int(s[1:]))
    call, *_ = r.prepare(q, k, v, False, int(d[1:]) ** -0.5)
    fcall = kb.fa3_runner(torch, False, q, k, v, int(d[1:]) ** -0.5)
    for who, fn in (("v18", call), ("fa3", fcall), ("v18", call), ("fa3", fcall)):
        time.sleep(1.0)
        torch.cuda.synchronize()
        t0 = time.time(); n = 0
        e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        while time.time() - t0 < 4.0:
            for _ in range(20):
                fn()
            n += 20
            torch.cuda.synchronize()
        e1.record(); torch.cuda.synchronize()
        t1 = time.time()
        phases.append({"row": row, "who": who, "t0": t0, "t1": t1, "calls": n, "ms_per_call": e0.elapsed_time(e1) / n})
time.sleep(0.5)
proc.terminate()
out = []
for ph in phases:
    sel = [s for t, s in samples if ph["t0"] + 1.0 <= t <= ph["t1"]]
    clk = [float(x.split(",")[0]) for x in sel]; pw = [float(x.split(",")[1]) for x in sel]
    reasons = sorted({x.split(",")[3].strip() for x in sel})
    ph.update(n_samples=len(sel), clk_mhz_mean=sum(clk) / max(len(clk), 1), clk_min=min(clk or [0]), power_w_mean=sum(pw) / max(len(pw), 1), reasons=reasons)
    print(f"{ph['row']} {ph['who']}: {ph['ms_per_call']:.3f} ms/call, SM clock {ph['clk_mhz_mean']:.0f} MHz (min {ph['clk_min']:.0f}), {ph['power_w_mean']:.0f} W, reasons {reasons}, {len(sel)} samples")
json.dump({"phases": phases, "samples": samples}, open(sys.argv[2], "w"))
PY
timeout 120 python3 /tmp/clock_probe.py .prebuilt/base.so $OUT/x/clock.json 2>&1 | tee $OUT/x/clock.txt
echo "clock t=$(el)"
for row in d128_n_s8192 d256_n_s8192; do
  for who in v18 fa3; do
    k=attn_fwd_ws; [ $who = fa3 ] && k=device_kernel
    timeout 100 ncu -k regex:$k -c 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight -f -o /tmp/rep_${who}_$row \
      python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant base= --prebuilt .prebuilt --one $row --calls 1 > $OUT/x/ncu_${who}_$row.log 2>&1
    echo "ncu $who $row rc=$? t=$(el)"
    ncu -i /tmp/rep_${who}_$row.ncu-rep --page source --print-source sass --csv > $OUT/x/src_${who}_$row.csv 2>&1
    ncu -i /tmp/rep_${who}_$row.ncu-rep --page details --print-details all > $OUT/x/det_${who}_$row.txt 2>&1
    ncu -i /tmp/rep_${who}_$row.ncu-rep --page raw --csv > $OUT/x/raw_${who}_$row.csv 2>&1
    wc -c $OUT/x/*_${who}_$row.* | tail -4
  done
done
gzip -f $OUT/x/*.csv $OUT/x/*.json
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "done t=$(el)"
