#!/usr/bin/env bash
# hippo against the trial-based anchors on one study, in one run on this machine
# (BENCHMARKING.md):
#   1. hippo run --workers W --policy shared
#   2. hippo run --workers W --policy trial-based (hippo without sharing)
#   3. Optuna + PyTorch CPU training the same trials, Optuna's distributed mode: W processes on one
#      shared SQLite study (the cores hippo gets, used the way Optuna's users use them), each with
#      the PyTorch thread count that is fastest for it when W of them run at once (probed first).
# Both sides run under the environment this script was started with (OPENBLAS_CORETYPE and the
# rest; PyTorch's products use OpenBLAS, hippo's kernels are its own), which it prints, with the
# machine and its load. Wall times are measured here around each side's whole run (process starts
# and data loading included). Usage: bench/hpo_vs_optuna.sh [SPEC] [WORKERS]
# Goals: hippo shared at least 3x sooner than Optuna + PyTorch, best accuracy within 0.01.
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${1:-examples/fmnist-mlp-lr-decay.json}
workers=${2:-2}
hippo=${HIPPO:-build/hippo}
python=/usr/bin/python3
[ -x "$hippo" ] || { echo "error: $hippo not found; build it (scripts/build)" >&2; exit 2; }
[ -f "$spec" ] || { echo "error: spec $spec not found" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
echo "software: $($python -c 'import optuna, torch; print("torch", torch.__version__, "optuna", optuna.__version__)'), $(dpkg-query -W -f='OpenBLAS ${Version}' libopenblas0-pthread 2>/dev/null || echo 'OpenBLAS ?')"
echo "environment (both sides): OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-<unset>}, OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS-<unset>}, OMP_NUM_THREADS=${OMP_NUM_THREADS-<unset>}"
echo "study: $spec, $workers workers"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

t0=$(now)
shared=$("$hippo" --db "$tmp/shared.db" --format json run "$spec" --workers "$workers" 2>/dev/null | tail -1)
t1=$(now)
echo "hippo shared:      $shared"
trial=$("$hippo" --db "$tmp/trial.db" --format json run "$spec" --workers "$workers" --policy trial-based 2>/dev/null | tail -1)
t2=$(now)
echo "hippo trial-based: $trial"

# PyTorch's fastest thread count for one of W processes running at once: W concurrent probes of
# each candidate (1 .. cores / W), the one with the most steps per second in all.
probe() {
  OPENBLAS_NUM_THREADS=$1 OMP_NUM_THREADS=$1 $python - "$1" <<'PY'
import sys, time, torch
from torch import nn
torch.set_num_threads(int(sys.argv[1]))
m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
o = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
x, y = torch.rand(128, 784), torch.randint(0, 10, (128,))
for i in range(450):
    if i == 50: t = time.perf_counter()
    o.zero_grad(); nn.functional.cross_entropy(m(x), y).backward(); o.step()
print(400 / (time.perf_counter() - t))
PY
}
candidates=$(( $(nproc) / workers > 1 ? $(nproc) / workers : 1 ))
best_threads=1 best_rate=0
for t in $(seq "$candidates"); do
  for w in $(seq "$workers"); do probe "$t" >"$tmp/probe.$w" & done
  wait
  rate=$(cat "$tmp"/probe.* | awk '{s += $1} END {printf "%.0f", s}')
  echo "optuna thread probe: $workers processes x $t threads: $rate steps/s in all"
  if [ "$rate" -gt "$best_rate" ]; then best_threads=$t best_rate=$rate; fi
done

storage="sqlite:///$tmp/optuna.db"
t3=$(now)
$python bench/optuna_grid.py "$spec" --storage "$storage" --prepare >/dev/null
for w in $(seq "$workers"); do
  OPENBLAS_NUM_THREADS=$best_threads OMP_NUM_THREADS=$best_threads \
    $python bench/optuna_grid.py "$spec" --storage "$storage" --worker --threads "$best_threads" \
    >"$tmp/optuna.$w" &
done
wait
t4=$(now)
for w in $(seq "$workers"); do echo "optuna worker $w:    $(cat "$tmp/optuna.$w")"; done
optuna=$($python bench/optuna_grid.py "$spec" --storage "$storage" --summary)
echo "optuna + pytorch:  $optuna"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

$python - "$shared" "$trial" "$optuna" "$t0" "$t1" "$t2" "$t3" "$t4" "$workers" "$best_threads" <<'PY'
import json, sys
s, t, o = (json.loads(a) for a in sys.argv[1:4])
t0, t1, t2, t3, t4 = map(float, sys.argv[4:9])
workers, threads = sys.argv[9:]
hippo_wall, trial_wall, optuna_wall = t1 - t0, t2 - t1, t4 - t3
speedup = optuna_wall / hippo_wall
gap = s["best"]["value"] - o["best"]
print(f"wall (whole runs, measured here): hippo shared {hippo_wall:.1f} s (its own wall_s "
      f"{s['wall_s']:.1f}), hippo trial-based {trial_wall:.1f} s, Optuna + PyTorch "
      f"({workers} processes x {threads} threads) {optuna_wall:.1f} s")
print(f"speed-up of hippo shared over Optuna+PyTorch: {speedup:.2f}x; goal >= 3: "
      f"{'yes' if speedup >= 3 else 'NO'}")
print(f"speed-up of hippo shared over hippo trial-based: {trial_wall / hippo_wall:.2f}x")
print(f"steps: trial-based {s['steps_trial_based']}, unique {s['steps_unique']}, "
      f"executed {s['steps_executed']} ({s['steps_trial_based'] / s['steps_executed']:.2f}x fewer); "
      f"Optuna {o['steps']} in {o['trials']} trials")
print(f"best accuracy: hippo {s['best']['value']:.4f}, Optuna+PyTorch {o['best']:.4f} "
      f"(difference {gap:+.4f}; goal within 0.01: {'yes' if abs(gap) <= 0.01 else 'NO'})")
print(f"master cost per trial: hippo {s['master_ms_per_trial']:.3f} ms, "
      f"Optuna (SQLite) {o['optuna_ms_per_trial']:.3f} ms")
print(f"makespan / lower bound: {s['makespan_ratio']:.2f}")
PY
