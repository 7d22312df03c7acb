#!/usr/bin/env bash
# hippo against the trial-based anchors on one study, in one run on this machine
# (bench/README.md, "How we measure"):
#   1. hippo run --workers W --policy shared
#   2. hippo run --workers W --policy trial-based (hippo without sharing)
#   3. Optuna + PyTorch CPU training the same trials, Optuna's distributed mode: W processes (peers)
#      on one study in a journal file, created and filled with the grid before they start (the
#      cores hippo gets, used the way Optuna's documentation says for processes on one machine),
#      each with the PyTorch thread count that is fastest for it when W of them run at once
#      (probed first, on the spec's model and batch).
# Both sides run under the environment this script was started with (OPENBLAS_CORETYPE and the
# rest; PyTorch's products use OpenBLAS, hippo's kernels are its own), which it prints, with the
# machine and its load. Wall times are measured here around each side's whole run (process starts
# and data loading included).
# Before printing a ratio it verifies both sides, else exits 1 naming what failed (logs kept):
# each hippo run exited 0, its study is done and every grid point is a done trial; every Optuna
# peer exited 0, printed its result, completed the trials it claims (the study records which peer
# completed each), and the study completed each grid point exactly once.
# Beside each speed-up it prints two ceilings and how close the speed-up came to each
# (bench/schedule_bound.py):
#   - over hippo trial-based: the steps ratio (trial-based steps / executed steps), and the
#     schedule's bound (hippo simulate of the same study, trial-based over shared makespan, at the
#     shared run's step time, zero overheads);
#   - over Optuna + PyTorch: each of those x the per-step speed ratio, hippo's trial-based
#     training steps/s per worker (steps executed / the seconds its workers spent training, from
#     the summary's time split) over PyTorch's probe steps/s per process (W processes at once,
#     1 thread each, training steps only).
# Usage: bench/hpo_vs_optuna.sh [SPEC] [WORKERS]
# Environment: HIPPO (default build/hippo); BENCH_PYTHON, the interpreter of Optuna's side (default
# /usr/bin/python3, Debian's, with optuna and torch; tests/bench/ points it at a peer killer).
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${1:-examples/fmnist-mlp-lr-decay.json}
workers=${2:-2}
hippo=${HIPPO:-build/hippo}
python=${BENCH_PYTHON:-/usr/bin/python3}
[ -x "$hippo" ] || { echo "error: $hippo not found; build it (scripts/build)" >&2; exit 2; }
[ -f "$spec" ] || { echo "error: spec $spec not found" >&2; exit 2; }
tmp=$(mktemp -d)
# The logs are what explains a failed check: kept then, removed after a run that passed.
trap '[ -e "$tmp/keep" ] || rm -rf "$tmp"' EXIT
now() { date +%s.%N; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
echo "software: $("$python" -c 'import optuna, torch; print("torch", torch.__version__, "optuna", optuna.__version__)'), $(dpkg-query -W -f='OpenBLAS ${Version}' libopenblas0-pthread 2>/dev/null || echo 'OpenBLAS ?')"
echo "environment (both sides): OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-<unset>}, OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS-<unset>}, OMP_NUM_THREADS=${OMP_NUM_THREADS-<unset>}"
echo "study: $spec, $workers workers"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# check hippo NAME POINTS | check peers NAME WORKERS POINTS: verifies a side's run (above) from
# the files it left in $tmp (bench/verify_peers.py); on a failure, exits 1 saying what failed.
check() {
  /usr/bin/python3 bench/verify_peers.py "$tmp" "$hippo" "$@" ||
    { touch "$tmp/keep"; echo "logs kept in $tmp" >&2; exit 1; }
}

run_hippo() {  # $1: policy; its summary is the last line of $tmp/$1.out
  local rc=0
  "$hippo" --db "$tmp/$1.db" --format json run "$spec" --workers "$workers" --policy "$1" \
    >"$tmp/$1.out" 2>"$tmp/$1.log" || rc=$?
  echo "$rc" >"$tmp/$1.rc"
  echo "hippo $1: $(tail -1 "$tmp/$1.out")"
}
t0=$(now)
run_hippo shared
t1=$(now)
run_hippo trial-based
t2=$(now)

# PyTorch's fastest thread count for one of W processes running at once: W concurrent probes of
# each candidate (1 .. cores / W) on the spec's model and batch, the one with the most steps per
# second in all. The 1-thread rate is also the per-step anchor of the ceiling.
probe() {  # $1: threads; prints steps/s
  OPENBLAS_NUM_THREADS=$1 OMP_NUM_THREADS=$1 "$python" - "$1" "$spec" <<'PY'
import json, sys, time, torch
from torch import nn
torch.set_num_threads(int(sys.argv[1]))
spec = json.load(open(sys.argv[2]))
layers, width = [], 784
for h in spec["model"]["hidden"]:
    layers += [nn.Linear(width, h), nn.ReLU()]
    width = h
m = nn.Sequential(*layers, nn.Linear(width, 10))
o = torch.optim.SGD(m.parameters(), lr=0.01, momentum=spec["fixed"].get("momentum", 0),
                    weight_decay=spec["hyperparameters"].get("weight_decay", 0.0))
batch = spec["fixed"]["batch_size"]
x, y = torch.rand(batch, 784), torch.randint(0, 10, (batch,))
for i in range(450):
    if i == 50: t = time.perf_counter()
    o.zero_grad(); nn.functional.cross_entropy(m(x), y).backward(); o.step()
print(400 / (time.perf_counter() - t))
PY
}
candidates=$(( $(nproc) / workers > 1 ? $(nproc) / workers : 1 ))
best_threads=1 best_rate=0
for t in $(seq "$candidates"); do
  pids=()
  for w in $(seq "$workers"); do probe "$t" >"$tmp/probe.$w" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "error: a PyTorch probe ($t threads) failed" >&2; exit 1; }; done
  rate=$(cat "$tmp"/probe.* | awk '{s += $1} END {printf "%.0f", s}')
  echo "optuna thread probe: $workers processes x $t threads: $rate steps/s in all"
  if [ "$t" -eq 1 ]; then rate_1=$rate; fi
  if [ "$rate" -gt "$best_rate" ]; then best_threads=$t best_rate=$rate; fi
done

# Optuna's peers, each waited for by its pid so that every exit status is kept.
journal="$tmp/optuna.journal"
t3=$(now)
"$python" bench/optuna_grid.py "$spec" --journal "$journal" --prepare >"$tmp/optuna.prepare"
pids=()
for w in $(seq "$workers"); do
  OPENBLAS_NUM_THREADS=$best_threads OMP_NUM_THREADS=$best_threads \
    "$python" bench/optuna_grid.py "$spec" --journal "$journal" --worker "$w" --threads "$best_threads" \
    >"$tmp/optuna.peer$w.out" 2>"$tmp/optuna.peer$w.err" &
  pids+=($!)
done
for w in $(seq "$workers"); do
  rc=0
  wait "${pids[w - 1]}" || rc=$?
  echo "${pids[w - 1]} $rc" >"$tmp/optuna.peer$w.exit"
done
t4=$(now)
for w in $(seq "$workers"); do echo "optuna peer $w:    $(tail -1 "$tmp/optuna.peer$w.out")"; done
"$python" bench/optuna_grid.py "$spec" --journal "$journal" --summary >"$tmp/optuna.summary" \
  2>"$tmp/optuna.summary.err" || { touch "$tmp/keep"; echo "error: Optuna's summary of the study failed;" \
  "$tmp/optuna.summary.err ends:" >&2; tail -15 "$tmp/optuna.summary.err" >&2; exit 1; }
echo "optuna + pytorch:  $(cat "$tmp/optuna.summary")"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

points=$(/usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["enqueued"])' <"$tmp/optuna.prepare")
check hippo shared "$points"
check hippo trial-based "$points"
check peers optuna "$workers" "$points"
echo "verified: both hippo runs done with $points trials; $workers Optuna peers exited 0, each completed the trials it claims, $points grid points once each"

/usr/bin/python3 - "$tmp" "$t0" "$t1" "$t2" "$t3" "$t4" "$workers" "$best_threads" "$rate_1" "$hippo" "$spec" <<'PY'
import json, sys
sys.path.insert(0, "bench")
import schedule_bound
tmp, hippo, spec = sys.argv[1], sys.argv[10], sys.argv[11]
s, t, o = (json.loads(open(f"{tmp}/{f}").read().splitlines()[-1])
           for f in ("shared.out", "trial-based.out", "optuna.summary"))
t0, t1, t2, t3, t4 = map(float, sys.argv[2:7])
workers, threads, torch_rate = int(sys.argv[7]), sys.argv[8], float(sys.argv[9]) / int(sys.argv[7])
hippo_wall, trial_wall, optuna_wall = t1 - t0, t2 - t1, t4 - t3
# Both rates are of training steps alone: the probe times nothing else, and the time split says
# how long hippo's workers trained (their evaluations, data reading and idle time apart).
hippo_rate = t["steps_executed"] / t["time"]["all"]["train_s"]
step_ratio = hippo_rate / torch_rate
gap = s["best"]["value"] - o["best"]
print(f"wall (whole runs, measured here): hippo shared {hippo_wall:.1f} s (its own wall_s "
      f"{s['wall_s']:.1f}), hippo trial-based {trial_wall:.1f} s, Optuna + PyTorch "
      f"({workers} processes x {threads} threads) {optuna_wall:.1f} s")
print(f"steps: trial-based {s['steps_trial_based']}, unique {s['steps_unique']}, "
      f"executed {s['steps_executed']}; Optuna {o['steps']} in {o['trials']} trials")
print(f"per-step speed, 1 thread, {workers} at once: hippo trial-based {hippo_rate:.0f} steps/s "
      f"per worker (steps executed / its workers' training seconds), PyTorch probe "
      f"{torch_rate:.0f} steps/s per process: {step_ratio:.2f}x")
print("where hippo shared's workers spent the wall time: " +
      ", ".join(f"{p} {100 * s['time']['all'][p + '_s'] / (workers * s['time']['window_s']):.0f}%"
                for p in ("setup", "train", "eval", "save", "idle")))
c = schedule_bound.ceilings(hippo, spec, workers, s)
print(schedule_bound.report(trial_wall / hippo_wall, c, "hippo shared over hippo trial-based:"))
per_step = dict(c, steps_ratio=c["steps_ratio"] * step_ratio, bound=c["bound"] * step_ratio)
print(schedule_bound.report(optuna_wall / hippo_wall, per_step,
                            f"hippo shared over Optuna+PyTorch (ceilings x the per-step ratio "
                            f"{step_ratio:.2f}x):"))
line = schedule_bound.stage_overhead(s, json.load(open(spec)))
if line:
    print(line)
print(f"best accuracy: hippo {s['best']['value']:.4f}, Optuna+PyTorch {o['best']:.4f} "
      f"(difference {gap:+.4f}; goal within 0.01: {'yes' if abs(gap) <= 0.01 else 'NO'})")
print(f"master cost per trial: hippo {s['master_ms_per_trial']:.3f} ms, "
      f"Optuna (journal file) {o['optuna_ms_per_trial']:.3f} ms")
print(f"makespan / lower bound: {s['makespan_ratio']:.2f}")
PY
