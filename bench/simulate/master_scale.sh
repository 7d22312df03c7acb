#!/usr/bin/env bash
# How the master's costs grow with the size of a study, measured with `hippo simulate` (the real
# master, virtual time, no training): per decision, per metric message and per done message (CPU
# time of the master's thread), the simulation's wall time, the plan file's size and the process's
# peak memory. The anchor is the smallest size in the same run: each row prints its growth
# against it.
#
#   bench/simulate/master_scale.sh [HIPPO_BINARY]      # default build/hippo
#
# Environment: GRID_SIZES (default "1000 10000 100000": a multistep grid of a tiny MLP, 50 steps
# per trial, 2 workers, the shape of examples/fmnist-mlp-lr-decay.json), ASHA_RUNS (default "1000:16 1000:128 10000:128
# 10000:1000 100000:1000": trials:workers, parallel = workers), STEP (seconds per step, default
# 0.005), REAL_GRID_SIZES (default "1000 10000"; "" for none): the same grids run for real by
# `hippo run` with 2 workers (training included), their wall times and growth.
set -euo pipefail
hippo=${1:-build/hippo}
[[ -f $hippo && -x $hippo ]] || { echo "no hippo binary at $hippo" >&2; exit 2; }
GRID_SIZES=${GRID_SIZES:-"1000 10000 100000"}
ASHA_RUNS=${ASHA_RUNS:-"1000:16 1000:128 10000:128 10000:1000 100000:1000"}
STEP=${STEP:-0.005}
REAL_GRID_SIZES=${REAL_GRID_SIZES-"1000 10000"}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

python3 - "$dir" $(printf '%s\n' $GRID_SIZES $REAL_GRID_SIZES | sort -un) -- $ASHA_RUNS <<'PY'
import json, sys
out = sys.argv[1]
args = sys.argv[2:]
split = args.index("--")
grids, ashas = args[:split], args[split + 1:]
base = {"model": {"type": "mlp", "hidden": [16]},
        "data": {"name": "fashion-mnist", "train_samples": 640, "eval_samples": 256}, "seed": 0}
for n in grids:
    n = int(n)
    lr = n // 100
    spec = dict(base, name="grid%d" % n,
                fixed={"batch_size": 128, "optimizer": "sgd", "momentum": 0.9},
                hyperparameters={"lr": {"schedule": "multistep", "unit": "epoch",
                    "init": {"grid": [round(0.001 + 0.3 * i / lr, 6) for i in range(lr)]},
                    "milestones": [{"grid": list(range(1, 11))}],
                    "gamma": {"grid": [round(0.05 + 0.09 * i, 4) for i in range(10)]}}},
                searcher={"name": "grid", "metric": "accuracy", "mode": "max", "max_trials": n},
                length={"epochs": 10}, eval={"every": {"epochs": 5}})
    json.dump(spec, open("%s/grid-%d.json" % (out, n), "w"))
for run in ashas:
    n, workers = map(int, run.split(":"))
    spec = dict(base, name="asha%d" % n, fixed={"batch_size": 128, "optimizer": "sgd"},
                hyperparameters={"lr": {"loguniform": [0.003, 0.3]},
                                 "momentum": {"uniform": [0.5, 0.95]}},
                searcher={"name": "asha", "metric": "loss", "mode": "min", "max_trials": n,
                          "eta": 3, "min_length": {"epochs": 1}, "max_length": {"epochs": 27},
                          "parallel": workers},
                length={"epochs": 27}, eval={"every": {"epochs": 1}})
    json.dump(spec, open("%s/asha-%d-%d.json" % (out, n, workers), "w"))
PY

limits="--max-trials 1000000 --max-steps 1000000000 --max-evaluations 1000000000"
measure() {  # name spec workers
  /usr/bin/time -f "%M" -o "$dir/rss" "$hippo" --format json simulate "$2" --workers "$3" \
    --step-time "$STEP" --policy shared $limits > "$dir/$1.out" ||
    { echo "simulation $1 failed" >&2; exit 1; }
  python3 - "$1" "$3" "$dir/$1.out" "$(cat "$dir/rss")" <<'PY'
import json, sys
name, workers, path, rss = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
r = json.load(open(path))["shared"]
m = r["master"]
def per(kind):
    c = m["messages"].get(kind, {"count": 0, "cpu_s": 0})
    return 1e6 * c["cpu_s"] / c["count"] if c["count"] else 0
d = m["decisions"]
s = r["studies"][0]
print("%s %d %d %.1f %.1f %.1f %.2f %.1f %.0f %d %d" % (
    name, s["trials"], workers, 1e6 * d["cpu_s"] / max(1, d["count"]), per("metric"),
    per("done"), r["wall_s"], r["plan_bytes"] / 1e6, rss / 1024, d["count"], r["jobs"]))
PY
}

{
  for n in $GRID_SIZES; do measure "grid-$n" "$dir/grid-$n.json" 2; done
  for run in $ASHA_RUNS; do
    n=${run%:*} w=${run#*:}
    measure "asha-$n-$w" "$dir/asha-$n-$w.json" "$w"
  done
} > "$dir/rows"

python3 - "$dir/rows" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
print("| study | trials | workers | us/decision | us/metric | us/done | sim wall s | wall x | "
      "plan MB | peak RSS MB | decisions | jobs |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
first = {}
for name, trials, workers, dec, met, done, wall, plan, rss, decisions, jobs in rows:
    kind = name.split("-")[0]
    first.setdefault(kind, (float(wall), int(trials)))
    w0, t0 = first[kind]
    growth = "%.1fx for %.0fx trials" % (float(wall) / w0, int(trials) / t0)
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        kind, trials, workers, dec, met, done, wall, growth, plan, rss, decisions, jobs))
PY

[[ -z $REAL_GRID_SIZES ]] && exit 0
echo
echo "The grids run for real (hippo run, 2 workers, training included):"
echo "| trials | wall s | growth | steps executed |"
echo "|---|---|---|---|"
first=""
for n in $REAL_GRID_SIZES; do
  "$hippo" --db "$dir/real-$n.db" --format json run "$dir/grid-$n.json" --workers 2 $limits \
    > "$dir/real-$n.out" 2>"$dir/real-$n.err" || { echo "hippo run of grid-$n failed" >&2; exit 1; }
  python3 - "$n" "$dir/real-$n.out" "$first" <<'PY'
import json, sys
n, path, first = int(sys.argv[1]), sys.argv[2], sys.argv[3]
r = json.loads(open(path).read().strip().splitlines()[-1])
if first:
    t0, n0 = map(float, first.split(":"))
    growth = "%.1fx for %.0fx trials" % (r["wall_s"] / t0, n / n0)
else:
    growth = "1.0x"
print("| %d | %.1f | %s | %d |" % (n, r["wall_s"], growth, r["steps_executed"]))
PY
  [[ -n $first ]] || first="$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])['wall_s'])" "$dir/real-$n.out"):$n"
done
