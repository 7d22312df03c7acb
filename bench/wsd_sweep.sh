#!/usr/bin/env bash
# Warmup-stable-decay cooldown sweeps (docs/spec.md's wsd schedule, length.end_of), in one run
# on this machine (bench/README.md, "How we measure"):
#   bench/wsd_sweep.sh [ROUNDS]
# 1. Measured: examples/gpt-fortunes-wsd.json (a 2-layer gpt on fortunes, 12 trials: cooldown
#    starts {100, 200, 300} x lengths {20, 60} x shapes {linear, 1-sqrt}) with 2 workers, shared
#    against trial-based, alternated ROUNDS times (default 2). Each run must exit 0 with 12 done
#    trials, and every trial's metrics must be equal in both policies, before any ratio is printed.
#    The wall-time ratio is printed beside two ceilings (bench/schedule_bound.py): the steps ratio
#    (trial-based / executed: a ratio above it is noise) and the schedule's bound (hippo simulate
#    on 2 workers at the last shared run's step time, zero overheads).
# 2. A paper-sized sweep, counted and simulated (no training): 4 gpt sizes x 5 cooldown starts
#    (8k to 40k steps) x 3 cooldown lengths (2k, 4k, 8k) x 2 shapes = 120 trials, from `hippo
#    preview` (steps) and `hippo simulate` on 64 workers (GPU hours and makespan, one step time
#    for every size: the ratios do not depend on it).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
hippo=${HIPPO:-build/hippo}
[ -x "$hippo" ] || { echo "error: $hippo not found; build it (scripts/build)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
spec=examples/gpt-fortunes-wsd.json

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "1. $spec, 2 workers, measured"
. bench/policy_run.sh
# Runs the study under a policy on a fresh plan; prints its wall time (seconds), checks its work.
run() {
  local policy=$1 plan="$tmp/$1-$2.db" wall
  wall=$(timed_policy_run "$hippo" "$spec" "$policy" "$plan" "$tmp/$policy-summary.json") || exit 1
  "$hippo" --db "$plan" --format json trials gpt-fortunes-wsd >"$tmp/$policy-trials.json"
  python3 - "$tmp/$policy-summary.json" "$tmp/$policy-trials.json" "$policy" <<'PY'
import json, sys
summary = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
trials = json.load(open(sys.argv[2]))
done = sum(t["status"] == "done" for t in trials)
if summary["status"] != "done" or done != 12:
    sys.exit(f"error: the {sys.argv[3]} run ended {summary['status']} with {done} of 12 trials done")
PY
  echo "$wall"
}
shared_total=0 trial_total=0
printf '%-6s %12s %12s\n' round shared_s trial_based_s
for r in $(seq 1 "$rounds"); do
  s=$(run shared "$r")
  t=$(run trial-based "$r")
  python3 -c "
import json, sys
a = {t['trial']: t['metrics'] for t in json.load(open('$tmp/shared-trials.json'))}
b = {t['trial']: t['metrics'] for t in json.load(open('$tmp/trial-based-trials.json'))}
sys.exit(0 if a == b else 'error: the shared and trial-based metrics differ')"
  printf '%-6s %12.2f %12.2f\n' "$r" "$s" "$t"
  shared_total=$(python3 -c "print($shared_total + $s)")
  trial_total=$(python3 -c "print($trial_total + $t)")
done
python3 - "$tmp/shared-summary.json" "$shared_total" "$trial_total" "$hippo" "$spec" <<'PY'
import json, sys
sys.path.insert(0, "bench")
import schedule_bound
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
ceiling = s["steps_trial_based"] / s["steps_unique"]
ratio = float(sys.argv[3]) / float(sys.argv[2])
print(f"metrics: equal for all 12 trials in every round")
print(f"steps: trial-based {s['steps_trial_based']}, unique {s['steps_unique']} (ceiling {ceiling:.2f}x)")
c = schedule_bound.ceilings(sys.argv[4], sys.argv[5], 2, s)
print(schedule_bound.report(ratio, c, "wall time, trial-based / shared:"))
PY

echo
echo "2. a paper-sized sweep: 4 gpt sizes x 5 starts x 3 lengths x 2 shapes, counted and simulated"
python3 - "$tmp" <<'PY'
import json, sys
for layers, dim in [(4, 256), (8, 512), (12, 768), (16, 1024)]:
    spec = {"name": f"wsd-{dim}",
            "model": {"type": "gpt", "layers": layers, "heads": dim // 64, "dim": dim,
                      "context": 256, "vocab": 96},
            "data": {"name": "fortunes", "eval_samples": 32}, "seed": 0,
            "fixed": {"batch_size": 16, "optimizer": "adamw", "weight_decay": 0.1},
            "hyperparameters": {"lr": {"schedule": "wsd", "unit": "step", "peak": 0.003,
                                       "warmup": 1000,
                                       "decay_start": {"grid": [8000, 16000, 24000, 32000, 40000]},
                                       "decay": {"grid": [2000, 4000, 8000]}, "final": 0.0,
                                       "shape": {"grid": ["linear", "1-sqrt"]}}},
            "searcher": {"name": "grid", "metric": "loss", "mode": "min"},
            "length": {"end_of": "lr"}, "eval": {"every": {"steps": 2000}, "at_end": True}}
    json.dump(spec, open(f"{sys.argv[1]}/wsd-{dim}.json", "w"))
PY
for dim in 256 512 768 1024; do
  "$hippo" --db "$tmp/none.db" --format json preview "$tmp/wsd-$dim.json" | tail -n 1
done >"$tmp/previews.json"
"$hippo" --db "$tmp/sim.db" --format json simulate "$tmp"/wsd-*.json --workers 64 --step-time 0.1 \
  2>/dev/null | tail -n 1 >"$tmp/simulated.json"
python3 - "$tmp/previews.json" "$tmp/simulated.json" <<'PY'
import json, sys
previews = [json.loads(line) for line in open(sys.argv[1])]
trial_based = sum(p["steps_trial_based"] for p in previews)
unique = sum(p["steps_unique"] for p in previews)
trials = sum(p["trials"] for p in previews)
sim = json.load(open(sys.argv[2]))
s, t = sim["shared"], sim["trial-based"]
for run in (s, t):
    if any(st["status"] != "done" or st["trials"] != 30 for st in run["studies"]):
        sys.exit("error: a simulated study did not finish its 30 trials")
print(f"preview: {trials} trials, steps trial-based {trial_based}, unique {unique} "
      f"({trial_based / unique:.2f}x fewer)")
print(f"simulate, 64 workers: GPU hours {t['gpu_hours']:.1f} trial-based, {s['gpu_hours']:.1f} shared "
      f"({t['gpu_hours'] / s['gpu_hours']:.2f}x); makespan {t['makespan_s']:.0f} s against "
      f"{s['makespan_s']:.0f} s ({t['makespan_s'] / s['makespan_s']:.2f}x; "
      f"the critical path is {s['critical_path_s']:.0f} s)")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
