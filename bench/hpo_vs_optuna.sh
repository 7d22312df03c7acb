#!/usr/bin/env bash
# hippo against the trial-based anchors on one study, in one run on this machine:
#   1. hippo run --workers W --policy shared
#   2. hippo run --workers W --policy trial-based (hippo without sharing)
#   3. Optuna's grid sampler + PyTorch CPU training the same trials one after another, with
#      Optuna's SQLite storage, at PyTorch's best thread count up to W (BENCHMARKING.md).
# Prints each side's JSON and the ratios. Usage: bench/hpo_vs_optuna.sh [SPEC] [WORKERS]
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${1:-examples/fmnist-mlp-lr-decay.json}
workers=${2:-2}
hippo=${HIPPO:-build/hippo}
# The same OpenBLAS kernels for both sides (hippo-worker picks these itself: kernels/blas_env.h).
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

shared=$("$hippo" --db "$tmp/shared.db" --format json run "$spec" --workers "$workers" 2>/dev/null | tail -1)
echo "hippo shared:      $shared"
trial=$("$hippo" --db "$tmp/trial.db" --format json run "$spec" --workers "$workers" --policy trial-based 2>/dev/null | tail -1)
echo "hippo trial-based: $trial"

# PyTorch's best thread count at <= workers: time a short probe of each.
best_threads=1
if [ "$workers" -gt 1 ]; then
  probe() {
    OPENBLAS_NUM_THREADS=$1 OMP_NUM_THREADS=$1 /usr/bin/python3 - "$1" <<'PY'
import sys, time, torch
from torch import nn
torch.set_num_threads(int(sys.argv[1]))
m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
o = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
x, y = torch.rand(128, 784), torch.randint(0, 10, (128,))
for i in range(250):
    if i == 50: t = time.perf_counter()
    o.zero_grad(); nn.functional.cross_entropy(m(x), y).backward(); o.step()
print(time.perf_counter() - t)
PY
  }
  t1=$(probe 1); tw=$(probe "$workers")
  best_threads=$(/usr/bin/python3 -c "print(1 if $t1 <= $tw else $workers)")
fi
optuna=$(OPENBLAS_NUM_THREADS=$best_threads OMP_NUM_THREADS=$best_threads \
  /usr/bin/python3 bench/optuna_grid.py "$spec" "$best_threads" "sqlite:///$tmp/optuna.db")
echo "optuna + pytorch:  $optuna"

/usr/bin/python3 - "$shared" "$trial" "$optuna" <<'PY'
import json, sys
s, t, o = (json.loads(a) for a in sys.argv[1:])
print(f"speed-up of hippo shared over Optuna+PyTorch (wall): {o['wall_s'] / s['wall_s']:.2f}x")
print(f"speed-up of hippo shared over hippo trial-based (wall): {t['wall_s'] / s['wall_s']:.2f}x")
print(f"steps: trial-based {s['steps_trial_based']}, unique {s['steps_unique']}, "
      f"executed {s['steps_executed']} ({s['steps_trial_based'] / s['steps_executed']:.2f}x fewer)")
print(f"best accuracy: hippo {s['best']['value']:.4f}, Optuna+PyTorch {o['best']:.4f}")
print(f"master cost per trial: hippo {s['master_ms_per_trial']:.3f} ms, "
      f"Optuna (SQLite) {o['optuna_ms_per_trial']:.3f} ms")
print(f"makespan / lower bound: {s['makespan_ratio']:.2f}")
PY
