#!/usr/bin/env bash
# The docs/spec.md example study (examples/fmnist-mlp-lr-decay.json) with a PyTorch MLP, in one run on this machine:
#   1. hippo run SPEC --workers W: the PyTorch trainer examples/pytorch/fashion_mnist.py through the
#      Python helper (long-lived trainers, shared stages);
#   2. Optuna + the same PyTorch code (bench/pytorch_optuna.py), trial by trial, in W processes
#      (peers) on one study in a journal file, created and filled with the grid before they start
#      (Optuna's distributed mode on one machine as its documentation sets it up: as many
#      processes as hippo has workers); each peer takes waiting grid points until none is left.
# Both sides run with 1 BLAS/OpenMP thread per process and PyTorch's deterministic algorithms.
# REPS > 1 repeats the pair, alternating which side goes first, and prints the median and spread.
# After each repetition it verifies both sides, else exits 1 naming what failed (logs kept):
# hippo exited 0, its study is done and every grid point is a done trial; every Optuna peer
# exited 0, printed its result, completed the trials it claims (the study records which peer
# completed each), and the study completed each grid point exactly once.
# Both sides train with the same PyTorch code, so hippo's speed-up has two ceilings
# (bench/schedule_bound.py): the steps ratio (trial-based steps / executed steps), and the
# schedule's bound (hippo simulate of the same study, trial-based over shared makespan, at the step
# time measured in this run, zero overheads); it prints how close it came to each (goal: 0.95 of
# the bound), and what each stage paid beyond training (setup + load + save) against an epoch.
# Usage: bench/pytorch_vs_optuna.sh [SPEC] [WORKERS] [REPS]   (from anywhere)
# Environment: HIPPO (default build/hippo); BENCH_PYTHON, the interpreter of Optuna's side (default
# /usr/bin/python3, Debian's, with optuna and torch; tests/bench/ points it at a peer killer);
# BENCH_DEVICE, where both sides train: cpu (default) or cuda:N, one GPU, which takes WORKERS = 1
# (hippo run --gpus N: one worker on it; one Optuna peer on it; scripts/gpu-check's speed part).
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${1:-examples/pytorch/fmnist-mlp-lr-decay.json}
workers=${2:-2}
reps=${3:-1}
hippo=${HIPPO:-build/hippo}
python=${BENCH_PYTHON:-/usr/bin/python3}
device=${BENCH_DEVICE:-cpu}
# The checks and the report need only the standard library: Debian's python3, else this PATH's.
check_python=/usr/bin/python3
[ -x "$check_python" ] || check_python=python3
[ -x "$hippo" ] || { echo "error: $hippo not found; build it (scripts/build)" >&2; exit 2; }
case $device in
  cpu) where=(--workers "$workers") ;;
  cuda:[0-9]*)
    [ "$workers" = 1 ] || { echo "error: on $device, one worker and one peer (WORKERS = 1), got $workers" >&2; exit 2; }
    where=(--gpus "${device#cuda:}") ;;
  *) echo "error: BENCH_DEVICE=$device: expected cpu or cuda:N" >&2; exit 2 ;;
esac
export BENCH_DEVICE=$device
[ -f "$spec" ] || { echo "error: spec $spec not found" >&2; exit 2; }
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "machine: $device, $(getconf _NPROCESSORS_ONLN) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
tmp=$(mktemp -d)
# The logs are what explains a failed check: kept then, removed after a run that passed.
trap '[ -e "$tmp/keep" ] || rm -rf "$tmp"' EXIT

# check hippo NAME POINTS | check peers NAME WORKERS POINTS: verifies a side's run (above) from
# the files it left in $tmp (bench/verify_peers.py); on a failure, exits 1 saying what failed.
check() {
  "$check_python" bench/verify_peers.py "$tmp" "$hippo" "$@" ||
    { touch "$tmp/keep"; echo "logs kept in $tmp" >&2; exit 1; }
}

run_hippo() {  # $1: repetition; its summary is the last line of $tmp/hippo-$1.out
  local rc=0 start
  start=$(date +%s.%N)
  "$hippo" --db "$tmp/hippo-$1.db" --format json run "$spec" "${where[@]}" --allow-exec trainer \
    >"$tmp/hippo-$1.out" 2>"$tmp/hippo-$1.log" || rc=$?
  echo "$rc" >"$tmp/hippo-$1.rc"
  echo "$start $(date +%s.%N)" >"$tmp/hippo-$1.wall"
  echo "hippo shared:        $(tail -1 "$tmp/hippo-$1.out"), wall $(awk '{print $2 - $1}' "$tmp/hippo-$1.wall") s"
}
run_optuna() {  # $1: repetition; its peers' files are $tmp/optuna-$1.peerN.*, its summary $tmp/optuna-$1.summary
  local journal="$tmp/optuna-$1.journal" study="bench-$1" run="optuna-$1"
  local start end i rc pids=()
  start=$(date +%s.%N)
  "$python" bench/pytorch_optuna.py "$spec" "$journal" "$study" --create >"$tmp/$run.create"
  # Each peer waited for by its pid, so that every exit status is kept.
  for i in $(seq "$workers"); do
    "$python" bench/pytorch_optuna.py "$spec" "$journal" "$study" --worker "$i" \
      >"$tmp/$run.peer$i.out" 2>"$tmp/$run.peer$i.err" &
    pids+=($!)
  done
  for i in $(seq "$workers"); do
    rc=0
    wait "${pids[i - 1]}" || rc=$?
    echo "${pids[i - 1]} $rc" >"$tmp/$run.peer$i.exit"
  done
  end=$(date +%s.%N)
  echo "$start $end" >"$tmp/$run.wall"
  "$python" bench/pytorch_optuna.py "$spec" "$journal" "$study" --summary >"$tmp/$run.summary" \
    2>"$tmp/$run.summary.err" || { touch "$tmp/keep"; echo "error: Optuna's summary of the study failed;" \
    "$tmp/$run.summary.err ends:" >&2; tail -15 "$tmp/$run.summary.err" >&2; exit 1; }
  echo "optuna + pytorch:    $(cat "$tmp/$run.summary"), wall $(awk '{print $2 - $1}' "$tmp/$run.wall") s"
}
for r in $(seq "$reps"); do
  if [ $((r % 2)) -eq 1 ]; then run_hippo "$r"; run_optuna "$r"; else run_optuna "$r"; run_hippo "$r"; fi
  points=$("$check_python" -c 'import json, sys; print(json.load(sys.stdin)["grid_points"])' <"$tmp/optuna-$r.create")
  check hippo "hippo-$r" "$points"
  check peers "optuna-$r" "$workers" "$points"
  echo "verified (repetition $r): hippo done with $points trials; $workers Optuna peers exited 0, each completed the trials it claims, $points grid points once each"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$check_python" - "$tmp" "$reps" "$hippo" "$spec" "$workers" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
import schedule_bound
tmp, reps, hippo, spec, workers = sys.argv[1], int(sys.argv[2]), *sys.argv[3:5], int(sys.argv[5])
last = lambda path: json.loads(open(path).read().splitlines()[-1])  # noqa: E731
h = [last(f"{tmp}/hippo-{r}.out") for r in range(1, reps + 1)]
o = [last(f"{tmp}/optuna-{r}.summary") for r in range(1, reps + 1)]
def walls(side):  # measured here around each whole run, process starts and data loading included
    return [(lambda a, b: round(b - a, 3))(*map(float, open(f"{tmp}/{side}-{r}.wall").read().split()))
            for r in range(1, reps + 1)]
h_wall, o_wall = walls("hippo"), walls("optuna")
ratios = [b / a for a, b in zip(h_wall, o_wall)]
med = statistics.median
print(f"wall (whole runs, measured here): hippo {med(h_wall):.1f} s, Optuna+PyTorch {med(o_wall):.1f} s "
      f"(median of {reps}; per repetition: hippo {h_wall} (its own wall_s {[x['wall_s'] for x in h]}), "
      f"Optuna {o_wall})")
s = h[0]
print(f"steps: trial-based {s['steps_trial_based']}, unique {s['steps_unique']}, executed {s['steps_executed']}")
print(f"hippo sooner by {med(ratios):.2f}x (each repetition: {[round(r, 2) for r in ratios]})")
# Both sides train with the same PyTorch code: the ceilings are the steps ratio and the schedule's
# bound (bench/schedule_bound.py), the latter at the step time of the median hippo run.
c = schedule_bound.ceilings(hippo, spec, workers, sorted(h, key=lambda x: x["wall_s"])[(reps - 1) // 2])
print(schedule_bound.report(med(ratios), c, "hippo over Optuna + the same PyTorch code:"))
reached = med(ratios) / c["bound"]
print(f"goal >= 0.95 of the schedule's bound: {'yes' if reached >= 0.95 else 'NO'} ({reached:.2f})")
for r, x in enumerate(h, 1):
    line = schedule_bound.stage_overhead(x, json.load(open(spec)))
    if line:
        print(f"repetition {r}: {line}")
print(f"best accuracy: hippo {s['best']['value']:.4f} {s['best']['params']}, "
      f"Optuna {o[0]['best']:.4f} {o[0]['best_params']} ({o[0]['trials']} trials, "
      f"{o[0]['grid_points_done']} distinct grid points)")
# Where hippo's workers spent the study's wall time (the summary's split, docs/results.md): what
# keeps the speed-up from its ceiling.
parts = ["start", "setup", "load", "fetch", "train", "eval", "save", "other", "dispatch",
         "unfinished", "idle"]
for w in s["time"]["workers"] + [s["time"]["all"]]:
    print(f"hippo time, {w['worker']}: " +
          ", ".join(f"{p} {w[p + '_s']:.2f}" for p in parts if w[p + "_s"] > 0) + " s")
PY
