#!/usr/bin/env bash
# The INTERFACE.md study with a PyTorch MLP, in one run on this machine:
#   1. hippo run SPEC --workers W: the PyTorch trainer examples/pytorch/fashion_mnist.py through the
#      Python helper (long-lived trainers, shared stages);
#   2. Optuna + the same PyTorch code (bench/pytorch_optuna.py), trial by trial, in W processes on
#      one SQLite study (Optuna's distributed mode: as many processes as hippo has workers).
# Both sides run with 1 BLAS/OpenMP thread per process and PyTorch's deterministic algorithms.
# REPS > 1 repeats the pair, alternating which side goes first, and prints the median and spread.
# Usage: bench/pytorch_vs_optuna.sh [SPEC] [WORKERS] [REPS]   (from anywhere; Debian's python3)
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${1:-examples/pytorch/fmnist-mlp-lr-decay.json}
workers=${2:-2}
reps=${3:-1}
hippo=${HIPPO:-build/hippo}
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "machine: $(getconf _NPROCESSORS_ONLN) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run_hippo() {  # $1: repetition
  "$hippo" --db "$tmp/hippo-$1.db" --format json run "$spec" --workers "$workers" --allow-exec trainer \
    2>"$tmp/hippo-$1.log" | tail -1 > "$tmp/hippo-$1.json"
  echo "hippo shared:        $(cat "$tmp/hippo-$1.json")"
}
run_optuna() {  # $1: repetition
  local storage="sqlite:///$tmp/optuna-$1.db" study="bench-$1"
  local points per start end
  points=$(/usr/bin/python3 bench/pytorch_optuna.py "$spec" "$storage" "$study" --create |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["grid_points"])')
  per=$(( (points + workers - 1) / workers ))
  start=$(date +%s.%N)
  for i in $(seq "$workers"); do
    /usr/bin/python3 bench/pytorch_optuna.py "$spec" "$storage" "$study" "$per" \
      > "$tmp/optuna-$1-$i.json" 2>"$tmp/optuna-$1-$i.log" &
  done
  wait
  end=$(date +%s.%N)
  /usr/bin/python3 bench/pytorch_optuna.py "$spec" "$storage" "$study" --summary |
    /usr/bin/python3 -c "import json, sys; s = json.load(sys.stdin); s['wall_s'] = round($end - $start, 3); s['processes'] = $workers; print(json.dumps(s))" \
    > "$tmp/optuna-$1.json"
  echo "optuna + pytorch:    $(cat "$tmp/optuna-$1.json")"
}
for r in $(seq "$reps"); do
  if [ $((r % 2)) -eq 1 ]; then run_hippo "$r"; run_optuna "$r"; else run_optuna "$r"; run_hippo "$r"; fi
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$tmp" "$reps" <<'PY'
import json, statistics, sys
tmp, reps = sys.argv[1], int(sys.argv[2])
h = [json.load(open(f"{tmp}/hippo-{r}.json")) for r in range(1, reps + 1)]
o = [json.load(open(f"{tmp}/optuna-{r}.json")) for r in range(1, reps + 1)]
ratios = [b["wall_s"] / a["wall_s"] for a, b in zip(h, o)]
med = statistics.median
print(f"wall: hippo {med([x['wall_s'] for x in h]):.1f} s, Optuna+PyTorch {med([x['wall_s'] for x in o]):.1f} s "
      f"(median of {reps}; per repetition: hippo {[x['wall_s'] for x in h]}, Optuna {[x['wall_s'] for x in o]})")
print(f"hippo sooner by {med(ratios):.2f}x (each repetition: {[round(r, 2) for r in ratios]})")
s = h[0]
print(f"steps: trial-based {s['steps_trial_based']}, unique {s['steps_unique']}, executed {s['steps_executed']} "
      f"({s['steps_trial_based'] / s['steps_executed']:.2f}x fewer than trial by trial)")
print(f"best accuracy: hippo {s['best']['value']:.4f} {s['best']['params']}, "
      f"Optuna {o[0]['best']:.4f} {o[0]['best_params']} ({o[0]['trials']} trials, "
      f"{o[0]['grid_points_done']} distinct grid points)")
PY
