#!/usr/bin/env bash
# hippo's ASHA (shared stages) against what a user would pick instead: Optuna's TPESampler with
# its HyperbandPruner, PyTorch CPU training the same model, data, batch, optimizer, schedule and
# search space (bench/optuna_asha.py), WORKERS processes on one study in a JournalFileStorage,
# created before they start (bench/README.md, "How we measure"). Both sides run the same number of trials, the same
# maximum length, evaluation steps and rungs (min_length, eta, max_length), one thread per process.
# The space: a linear warm-up to a fixed lr over the first epoch (the prefix every trial shares),
# then an exponential decay per epoch whose lr (loguniform) and gamma (uniform) are drawn.
# Beside the steps it prints the two ceilings of sharing alone (bench/schedule_bound.py).
# Usage: bench/asha_vs_optuna.sh [TRIALS] [WORKERS]    (default 40 and 2; HIPPO=path/to/hippo,
#        SPEC=another spec of the same form, e.g. a smaller one while developing; PRUNER=sha for
#        Optuna's SuccessiveHalvingPruner, hippo's rungs exactly, instead of its HyperbandPruner)
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-40}
workers=${2:-2}
hippo=${HIPPO:-build/hippo}
spec=${SPEC:-bench/specs/asha-warmup-exponential.json}
pruner=${PRUNER:-hyperband}
python=/usr/bin/python3
[ -x "$hippo" ] || { echo "error: $hippo not found; build it (scripts/build) or set HIPPO" >&2; exit 2; }
[ -f "$spec" ] || { echo "error: spec $spec not found" >&2; exit 2; }
[[ $pruner =~ ^(hyperband|sha)$ ]] || { echo "error: PRUNER must be hyperband or sha (got '$pruner')" >&2; exit 2; }
[[ $trials =~ ^[1-9][0-9]*$ && $workers =~ ^[1-9][0-9]*$ ]] ||
  { echo "error: TRIALS and WORKERS must be positive integers (got '$trials' '$workers')" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
cores=$(nproc)  # before the export below: nproc obeys OMP_NUM_THREADS
# One thread per process on both sides: W processes on W cores (bench/README.md, "How we measure"; for this MLP
# PyTorch is not faster with 2 threads on these machines).
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

# The spec with this run's trial count, and ASHA's trials in flight = the workers.
$python - "$spec" "$trials" "$workers" >"$tmp/spec.json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["searcher"]["max_trials"] = int(sys.argv[2])
spec["searcher"]["parallel"] = int(sys.argv[3])
print(json.dumps(spec))
PY
seed=$($python -c 'import json, sys; print(json.load(open(sys.argv[1]))["seed"])' "$tmp/spec.json")

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $cores cores"
echo "software: $($python -c 'import optuna, torch; print("torch", torch.__version__, "optuna", optuna.__version__)'), $(dpkg-query -W -f='OpenBLAS ${Version}' libopenblas0-pthread 2>/dev/null || echo 'OpenBLAS ?'), $("$hippo" --version | head -1)"
echo "environment (both sides): OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-<unset>}, OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS, OMP_NUM_THREADS=$OMP_NUM_THREADS"
echo "study: $spec, $trials trials, $workers workers; Optuna's pruner: $pruner"
echo "seeds: hippo spec seed $seed (draws, weights, data order); Optuna TPESampler seeds $seed..$((seed + workers - 1)) (one per process), torch.manual_seed($seed) per trial"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# Optuna's study exists before any of its workers starts (its advice for several processes); made
# first, so that a spec the anchor cannot mirror is refused before hippo trains.
$python bench/optuna_asha.py "$tmp/spec.json" --journal "$tmp/optuna.journal" --prepare >/dev/null

t0=$(now)
rc=0
"$hippo" --db "$tmp/hippo.db" --format json run "$tmp/spec.json" --workers "$workers" \
  >"$tmp/hippo.out" 2>"$tmp/hippo.err" || rc=$?
t1=$(now)
summary=$(tail -1 "$tmp/hippo.out")
echo "hippo asha:  $summary"
if [ "$rc" -ne 0 ]; then
  echo "error: hippo run exited $rc; its last messages:" >&2; tail -5 "$tmp/hippo.err" >&2; exit 1
fi

mkdir "$tmp/tickets"
t2=$(now)
pids=()
for w in $(seq 0 $((workers - 1))); do
  $python bench/optuna_asha.py "$tmp/spec.json" --journal "$tmp/optuna.journal" --worker "$w" \
    --trials "$trials" --tickets "$tmp/tickets" --pruner "$pruner" >"$tmp/optuna.$w" 2>"$tmp/optuna.$w.err" &
  pids+=($!)
done
# Checks before any ratio (here and below): a crashed or short peer makes any comparison wrong.
failed=0
for w in "${!pids[@]}"; do
  wait "${pids[$w]}" || { echo "error: Optuna process $w exited $?; its last messages:" >&2
                          tail -5 "$tmp/optuna.$w.err" >&2; failed=1; }
done
t3=$(now)
[ "$failed" -eq 0 ] || exit 1
for w in "${!pids[@]}"; do echo "optuna process $w: $(tail -1 "$tmp/optuna.$w")"; done
optuna=$($python bench/optuna_asha.py "$tmp/spec.json" --journal "$tmp/optuna.journal" --summary)
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

$python - "$tmp/hippo.db" "$summary" "$optuna" "$trials" "$t0" "$t1" "$t2" "$t3" "$hippo" \
  "$tmp/spec.json" "$workers" <<'PY'
import json, sqlite3, sys
sys.path.insert(0, "bench")
import schedule_bound
db, s, o = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
trials = int(sys.argv[4])
t0, t1, t2, t3 = map(float, sys.argv[5:9])
problems = []
if s.get("status") != "done":
    problems.append(f"hippo's study ended {s.get('status')}: {s.get('error', '')}")
if s.get("trials") != trials:
    problems.append(f"hippo ran {s.get('trials')} trials, not {trials}")
if o["trials"] != trials or o["other"]:
    problems.append(f"Optuna ran {o['trials']} trials ({o['other']} neither complete nor "
                    f"pruned), not {trials}")
if problems:
    sys.exit("error: " + "; ".join(problems))

# hippo's CLI gives no time for a metric (export/trials print step and value only), so the curve
# is read from the plan's SQLite file: a metric of trial T at step s is known once the execution
# that trained T through s has ended (executions.ended_at, the same clock as time.time()). A
# metric reported mid-execution is thus dated at its execution's end: late by at most one job,
# which favours Optuna, whose reports are dated as made.
plan = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
rows = plan.execute("""
  SELECT m.value, (SELECT min(e.ended_at) FROM executions e
                   WHERE e.trial_id = m.trial_id AND e.outcome = 'done'
                     AND ((e.from_step < m.step AND m.step <= e.reached_step)
                          OR (e.kind = 'evaluate' AND e.from_step = m.step)))
  FROM metrics m WHERE m.name = 'accuracy' AND m.value IS NOT NULL""").fetchall()
if any(t is None for _, t in rows):
    sys.exit("error: some hippo metric has no execution that trained its trial to its step")
spec, = plan.execute("SELECT spec FROM studies").fetchone()
spec = json.loads(spec)
max_epochs = spec["searcher"].get("max_length", spec["length"])["epochs"]
length = max_epochs * (spec["data"]["train_samples"] // spec["fixed"]["batch_size"])
early, = plan.execute("SELECT count(*) FROM trials WHERE length < ?", (length,)).fetchone()
hippo_curve = sorted((t - t0, v) for v, t in rows)
optuna_curve = [(t - t2, v) for t, v in o["reports"]]
walls = {"hippo": t1 - t0, "optuna": t3 - t2}
curves = {"hippo": hippo_curve, "optuna": optuna_curve}
best = {k: max(v for _, v in c) for k, c in curves.items()}

def reached(curve, target):  # seconds until the best so far is >= target, or None
    return next((t for t, v in curve if v >= target), None)

def best_by(curve, limit):
    values = [v for t, v in curve if t <= limit]
    return f"{max(values):.4f}" if values else "no evaluation yet"

print(f"wall (whole runs, process starts and data loading included): hippo {walls['hippo']:.1f} s "
      f"(its own wall_s {s['wall_s']:.1f}), Optuna + PyTorch {walls['optuna']:.1f} s; "
      f"Optuna / hippo {walls['optuna'] / walls['hippo']:.2f}x")
print(f"trials: hippo {s['trials']} ({s['trials'] - early} to the full {length} steps, {early} "
      f"stopped at a lower rung); Optuna {o['trials']} ({o['complete']} complete, "
      f"{o['pruned']} pruned)")
print(f"steps: hippo executed {s['steps_executed']}, unique {s['steps_unique']}, trial-based "
      f"{s['steps_trial_based']}; Optuna trained {o['steps']} ({o['steps'] / s['steps_executed']:.2f}x "
      f"hippo's executed)")
# The ceilings of sharing alone (hippo's ASHA shared over the same ASHA trial-based, which this
# benchmark does not run): the simulation replays this run's metrics, so ASHA decides as it did.
c = schedule_bound.ceilings(sys.argv[9], sys.argv[10], int(sys.argv[11]), s, metrics_from=db)
print(f"ceilings of sharing: steps ratio {c['steps_ratio']:.2f}x, schedule's bound {c['bound']:.2f}x "
      f"(hippo simulate at {c['step_s'] * 1000:.2f} ms a step, zero overheads, replaying this run's "
      "metrics)")
print(f"best accuracy (any evaluation of any trial): hippo {best['hippo']:.4f}, "
      f"Optuna {best['optuna']:.4f} (difference {best['hippo'] - best['optuna']:+.4f})")
for side, other in (("hippo", "optuna"), ("optuna", "hippo")):
    t = reached(curves[side], best[other])
    print(f"time for {side} to reach {other}'s best {best[other]:.4f}: "
          + (f"{t:.1f} s" if t is not None else f"not reached (its best {best[side]:.4f})"))
limit = min(walls.values())
print(f"best in the same wall time ({limit:.1f} s, the shorter run): "
      f"hippo {best_by(hippo_curve, limit)}, Optuna {best_by(optuna_curve, limit)}")
# The two best-so-far curves, sampled at fractions of the longer run.
print("best so far, seconds since each side started: hippo / Optuna")
for f in (0.1, 0.2, 0.3, 0.5, 0.75, 1.0):
    t = f * max(walls.values())
    print(f"  {t:6.1f} s: {best_by(hippo_curve, t)} / {best_by(optuna_curve, t)}")
PY
