#!/usr/bin/env bash
# Training throughput of hippo's CPU engine against PyTorch on CPU (Debian's python3-torch), same
# model, batch and threads, one after the other on this machine (BENCHMARKING.md):
#   bench/engine_vs_pytorch.sh [BUILD_DIR] [REPS]
# For each model and T in {1, 2}: the median (and spread) of REPS runs of each side, PyTorch's
# best over 1..T threads, and the ratio hippo / PyTorch-best.
#
# OpenBLAS 0.3.21 takes some virtual CPUs for a "Prescott" (SSE3 kernels, several times slower)
# when the CPU model is hidden; OPENBLAS_CORETYPE (default here: SkylakeX when the CPU has
# AVX-512, Haswell with AVX2) applies to both sides, since PyTorch calls the same OpenBLAS.
set -euo pipefail
build=${1:-build}
reps=${2:-5}
bench="$build/bench_engine"
[ -x "$bench" ] || { echo "error: $bench not found; build the bench_engine target" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}, $reps repetitions, batch 128"

# median and spread (min..max) of samples_per_s over reps runs of a command
measure() {
  for _ in $(seq "$reps"); do "$@" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["samples_per_s"])'; done |
    sort -g | awk '{v[NR]=$1} END {printf "%.1f %.1f %.1f\n", v[int((NR+1)/2)], v[1], v[NR]}'
}

printf "%-5s %3s %26s %26s %16s %7s\n" model T "hippo median (min..max)" "torch median (min..max)" "torch best<=T" ratio
for model in mlp cnn; do
  steps=$([ "$model" = mlp ] && echo 200 || echo 15)
  best=0
  for t in 1 2; do
    export OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t
    read -r ours ours_lo ours_hi < <(measure "$bench" --model "$model" --batch 128 --threads "$t" --steps "$steps")
    read -r torch torch_lo torch_hi < <(measure /usr/bin/python3 "$here/engine_vs_pytorch.py" --model "$model" --batch 128 --threads "$t" --steps "$steps")
    best=$(awk -v a="$best" -v b="$torch" 'BEGIN {print (b > a ? b : a)}')
    ratio=$(awk -v a="$ours" -v b="$best" 'BEGIN {printf "%.2f", a / b}')
    printf "%-5s %3d %10.1f (%6.0f..%6.0f) %10.1f (%6.0f..%6.0f) %16.1f %6sx\n" \
      "$model" "$t" "$ours" "$ours_lo" "$ours_hi" "$torch" "$torch_lo" "$torch_hi" "$best" "$ratio"
  done
done
