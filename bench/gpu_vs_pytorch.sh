#!/usr/bin/env bash
# Training throughput of hippo's CUDA engine against PyTorch eager on the same GPU, same model,
# batch, precision and optimizer, one after the other in this script (bench/README.md, "How we measure"):
#   bench/gpu_vs_pytorch.sh [BUILD_DIR] [REPS]
# For mlp and cnn, batch 128 and 1024, fp32 and bf16: the median (min..max) samples/s of REPS
# runs of `bench_engine --device cuda:0` and of bench/gpu_vs_pytorch.py, and the ratio
# hippo / PyTorch (the goal: >= 1.0). Each run warms up first; PyTorch is timed with CUDA events,
# bench_engine with the host clock between two synchronizations (the same span). Beside them, the
# ceiling: the GPU's dense product FLOP/s at that precision, measured in this run, over the
# model's product and convolution FLOPs per sample (forward and backward, PyTorch's count), in
# samples/s, and the share of it that hippo reached.
#
# The fp32 cnn, where cuDNN's choice of algorithms matters, gets three more rows: hippo's own
# im2col convolutions (`--device cuda:0:im2col`, kernels.h) against the same PyTorch, and both of
# hippo's paths against PyTorch restricted to cuDNN's deterministic algorithms (`--deterministic`),
# the anchor that runs under the same rule as hippo. The `conv` column says which: hippo's path /
# PyTorch's (default or det).
#
# Needs: a CUDA device, BUILD_DIR/bench_engine built with CUDA (on a bare GPU machine,
# scripts/gpu-check builds it and runs this), python3 with torch, and the Fashion-MNIST files
# (HIPPO_DATA_DIR, default /usr/share/datasets/fashion-mnist).
set -euo pipefail
build=${1:-build}
reps=${2:-5}
bench="$build/bench_engine"
data=${HIPPO_DATA_DIR:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$bench" ] || { echo "error: $bench not found; build the bench_engine target" >&2; exit 2; }
[ -f "$data/train-images-idx3-ubyte.gz" ] ||
  { echo "error: no Fashion-MNIST in $data (set HIPPO_DATA_DIR)" >&2; exit 2; }
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
  { echo "error: python3 has no PyTorch that sees a CUDA device" >&2; exit 2; }
python3 -c 'import torch; print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__)'
echo "$reps repetitions of each; samples/s, median (min..max)"

# median, min and max of samples_per_s over reps runs of a command, and the last run's
# flops_per_sample (0 when it gives none); fails (and says which) when a run exits non-zero or its
# last line has no positive samples_per_s: no ratio without both.
measure() {
  local out values=() flops
  for _ in $(seq "$reps"); do
    out=$("$@") || { echo "error: $* failed" >&2; return 1; }
    values+=("$(python3 -c 'import json, sys
v = json.loads(sys.stdin.read().splitlines()[-1])["samples_per_s"]
print(v) if v > 0 else sys.exit(1)' <<<"$out")") || { echo "error: $*: no samples/s in its output" >&2; return 1; }
  done
  flops=$(python3 -c 'import json, sys
print(json.loads(sys.stdin.read().splitlines()[-1]).get("flops_per_sample", 0))' <<<"$out")
  printf '%s\n' "${values[@]}" | sort -g |
    awk -v f="$flops" '{v[NR]=$1} END {printf "%.0f %.0f %.0f %s\n", v[int((NR+1)/2)], v[1], v[NR], f}'
}

# The GPU's product peak per precision, measured once.
declare -A peak
for precision in fp32 bf16; do
  peak[$precision]=$(python3 "$here/gpu_vs_pytorch.py" --peak --precision "$precision" |
    python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["peak_flops"])') ||
    { echo "error: the $precision product peak could not be measured" >&2; exit 1; }
  printf "%s product peak: %.1f TFLOP/s\n" "$precision" \
    "$(awk -v p="${peak[$precision]}" 'BEGIN {print p / 1e12}')"
done

printf "%-4s %5s %5s %-14s %28s %28s %7s %11s %8s\n" model batch prec conv \
  "hippo median (min..max)" "torch median (min..max)" ratio ceiling "reached"
# One row: hippo's result against PyTorch's (each "median min max flops"), with the ceiling.
row() {
  local model=$1 batch=$2 precision=$3 conv=$4 ours ours_lo ours_hi torch torch_lo torch_hi flops
  read -r ours ours_lo ours_hi _ <<<"$5"
  read -r torch torch_lo torch_hi flops <<<"$6"
  awk -v f="$flops" 'BEGIN {exit !(f > 0)}' || { echo "error: no FLOP count for $model" >&2; exit 1; }
  ratio=$(awk -v a="$ours" -v b="$torch" 'BEGIN {printf "%.2f", a / b}')
  ceiling=$(awk -v p="${peak[$precision]}" -v f="$flops" 'BEGIN {printf "%.0f", p / f}')
  reached=$(awk -v a="$ours" -v c="$ceiling" 'BEGIN {printf "%.1f%%", 100 * a / c}')
  printf "%-4s %5d %5s %-14s %10.0f (%7.0f..%7.0f) %10.0f (%7.0f..%7.0f) %6sx %11.0f %8s\n" \
    "$model" "$batch" "$precision" "$conv" "$ours" "$ours_lo" "$ours_hi" "$torch" "$torch_lo" \
    "$torch_hi" "$ratio" "$ceiling" "$reached"
}
for model in mlp cnn; do
  for batch in 128 1024; do
    steps=$([ "$batch" = 128 ] && echo 300 || echo 100)
    for precision in fp32 bf16; do
      args=(--model "$model" --batch "$batch" --precision "$precision" --steps "$steps" --warmup 20)
      hippo=$(measure "$bench" --device cuda:0 --data-dir "$data" "${args[@]}") || exit 1
      pytorch=$(measure python3 "$here/gpu_vs_pytorch.py" "${args[@]}") || exit 1
      conv=$([ "$model" = cnn ] && echo "cudnn/default" || echo "-")
      row "$model" "$batch" "$precision" "$conv" "$hippo" "$pytorch"
      [ "$model/$precision" = cnn/fp32 ] || continue
      own=$(measure "$bench" --device cuda:0:im2col --data-dir "$data" "${args[@]}") || exit 1
      strict=$(measure python3 "$here/gpu_vs_pytorch.py" --deterministic "${args[@]}") || exit 1
      row "$model" "$batch" "$precision" "im2col/default" "$own" "$pytorch"
      row "$model" "$batch" "$precision" "cudnn/det" "$hippo" "$strict"
      row "$model" "$batch" "$precision" "im2col/det" "$own" "$strict"
    done
  done
done
