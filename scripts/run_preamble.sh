# Sourced first by a device-run script (kernels/campaigns/stage2/run*_script.sh, from run 71 on) in the repository
# root: $OUT/x collects the run's files, `el` prints the seconds since the start, x/info.txt names the GPU, and
# scripts/gpu_env.sh sets up the wheels, FA3 and PYTHONPATH.
set -u
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT/x
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/x/info.txt
. scripts/gpu_env.sh
