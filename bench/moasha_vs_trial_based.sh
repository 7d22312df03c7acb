#!/usr/bin/env bash
# Multi-objective ASHA whose rungs share stages, against the same searcher trial-based (each trial
# trains its own path, resuming its own checkpoints: MO-ASHA as Syne Tune runs it), in one run on
# this machine (bench/README.md, "How we measure"):
#   bench/moasha_vs_trial_based.sh [SPEC] [ROUNDS]
# SPEC (default examples/fmnist-mlp-moasha.json) runs with 2 workers under both policies,
# alternated ROUNDS times (default 2). Each run must exit 0 with every trial closed, and every
# evaluation both policies made must be equal bit for bit, before any ratio is printed (promotions
# are asynchronous, so the two may promote a trial differently). The wall-time ratio is printed
# beside two ceilings (bench/schedule_bound.py): the steps ratio (trial-based / executed: a ratio
# above it is noise) and the schedule's bound (hippo simulate of the spec on 2 workers at the last
# shared run's step time, zero overheads, replaying its metrics so that the searcher decides as
# it did).
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${1:-examples/fmnist-mlp-moasha.json}
rounds=${2:-2}
hippo=${HIPPO:-build/hippo}
[ -x "$hippo" ] || { echo "error: $hippo not found; build it (scripts/build)" >&2; exit 2; }
name=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['name'])" "$spec")
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$spec, 2 workers"
. bench/policy_run.sh
# Runs the study under a policy on a fresh plan; prints its wall time (seconds), checks its work.
run() {
  local policy=$1 plan="$tmp/$1-$2.db" wall
  wall=$(timed_policy_run "$hippo" "$spec" "$policy" "$plan" "$tmp/$policy-summary.json") || exit 1
  "$hippo" --db "$plan" --format json trials "$name" >"$tmp/$policy-trials.json"
  "$hippo" --db "$plan" --format json best "$name" >"$tmp/$policy-front.json"
  python3 - "$tmp/$policy-summary.json" "$tmp/$policy-trials.json" "$policy" <<'PY'
import json, sys
summary = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
trials = json.load(open(sys.argv[2]))
open_ = [t["trial"] for t in trials if t["status"] in ("pending", "running")]
if summary["status"] != "done" or open_ or not trials:
    sys.exit(f"error: the {sys.argv[3]} run ended {summary['status']} with trials {open_} open")
PY
  echo "$wall"
}
shared_total=0 trial_total=0
printf '%-6s %12s %12s\n' round shared_s trial_based_s
for r in $(seq 1 "$rounds"); do
  s=$(run shared "$r")
  t=$(run trial-based "$r")
  python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
def evaluations(policy):
    trials = json.load(open(f"{tmp}/{policy}-trials.json"))
    return {(t["trial"], m["step"], m["name"]): m["value"] for t in trials for m in t["metrics"]}
a, b = evaluations("shared"), evaluations("trial-based")
common = set(a) & set(b)
if any(a[k] != b[k] for k in common):
    sys.exit("error: a trial's metrics differ between the shared and trial-based runs")
# Promotions are asynchronous (a rung ranks what has finished when a worker asks), so a trial may
# be promoted in one run and not in the other: only evaluations both runs made are compared.
with open(f"{tmp}/compared", "a") as out:
    out.write(f"{len(common)} {len(set(a) | set(b))}\n")
PY
  printf '%-6s %12.2f %12.2f\n' "$r" "$s" "$t"
  shared_total=$(python3 -c "print($shared_total + $s)")
  trial_total=$(python3 -c "print($trial_total + $t)")
done
python3 - "$tmp" "$shared_total" "$trial_total" "$hippo" "$spec" "$rounds" <<'PY'
import json, sys
sys.path.insert(0, "bench")
import schedule_bound
tmp, hippo, spec, rounds = sys.argv[1], sys.argv[4], sys.argv[5], sys.argv[6]
s = json.loads(open(f"{tmp}/shared-summary.json").read().strip().splitlines()[-1])
t = json.loads(open(f"{tmp}/trial-based-summary.json").read().strip().splitlines()[-1])
trials = json.load(open(f"{tmp}/shared-trials.json"))
front = json.load(open(f"{tmp}/shared-front.json"))
ceiling = s["steps_trial_based"] / s["steps_unique"]
ratio = float(sys.argv[3]) / float(sys.argv[2])
compared = [tuple(map(int, line.split())) for line in open(f"{tmp}/compared")]
same = sum(c for c, _ in compared)
print(f"trials: {len(trials)}; of the evaluations either policy made, {same} of "
      f"{sum(n for _, n in compared)} were made by both, and all {same} are equal bit for bit")
print(f"front (last round, shared): {len(front)} trials: "
      + ", ".join(f"{f['trial']} {f['values']}" for f in front))
print(f"steps executed (last round): shared {s['steps_executed']}, trial-based "
      f"{t['steps_executed']} ({t['steps_executed'] / s['steps_executed']:.2f}x fewer; ceiling "
      f"{ceiling:.2f}x = the shared run's {s['steps_trial_based']} trial-based / "
      f"{s['steps_unique']} unique)")
c = schedule_bound.ceilings(hippo, spec, 2, s, metrics_from=f"{tmp}/shared-{rounds}.db")
print(schedule_bound.report(ratio, c, "wall time, trial-based / shared:"))
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
