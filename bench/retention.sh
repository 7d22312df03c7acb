#!/usr/bin/env bash
# Tuning in rounds, with and without the checkpoints that finished studies leave behind
# (master/retention.h), in one run on this machine (bench/README.md, "How we measure"):
#   bench/retention.sh [TRAIN_SAMPLES] [WORKERS]
# Three rounds on the MLP of examples/fmnist-mlp-lr-decay.json, each a grid around the previous
# round's region, longer than the one before:
#   coarse  lr init {0.1, 0.05, 0.02} x milestone {1, 2, 3} x gamma {0.1, 0.3}, 4 epochs (18 trials)
#   finer   lr init {0.1, 0.05} x milestone {2, 3} x gamma {0.2, 0.3, 0.5}, 5 epochs (12 trials)
#   finest  lr init {0.05} x milestone {3} x gamma {0.25, 0.3, 0.35}, 6 epochs (3 trials)
# on two plans: "kept" (the default --keep-checkpoints) and "none" (--keep-checkpoints 0, every
# state deleted when its study ends: hippo before retention). The rounds alternate between the
# plans (kept, none, kept, none, ...), so that a change in the machine's load touches both. Per
# round and in all: steps executed, steps reused, wall time (measured here, around `hippo run`),
# the bytes kept after the round, and the ratios none / kept. Each round's best must be equal.
set -euo pipefail
cd "$(dirname "$0")/.."
samples=${1:-10000}
workers=${2:-2}
hippo=${HIPPO:-build/hippo}
[ -x "$hippo" ] || { echo "error: $hippo not found; build it (scripts/build)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
echo "study: examples/fmnist-mlp-lr-decay.json's MLP, $samples training samples, $workers workers"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$tmp" "$samples" <<'EOF'
import json, sys
tmp, samples = sys.argv[1], int(sys.argv[2])
base = json.load(open("examples/fmnist-mlp-lr-decay.json"))
base["data"] = {"name": "fashion-mnist", "train_samples": samples, "eval_samples": 2000}
rounds = {
    "coarse": ([0.1, 0.05, 0.02], [1, 2, 3], [0.1, 0.3], 4),
    "finer": ([0.1, 0.05], [2, 3], [0.2, 0.3, 0.5], 5),
    "finest": ([0.05], [3], [0.25, 0.3, 0.35], 6),
}
for name, (init, milestones, gamma, epochs) in rounds.items():
    spec = json.loads(json.dumps(base))
    spec["name"] = name
    lr = spec["hyperparameters"]["lr"]
    lr["init"] = {"grid": init}
    lr["milestones"] = [{"grid": milestones}]
    lr["gamma"] = {"grid": gamma}
    spec["length"] = {"epochs": epochs}
    spec["searcher"]["max_trials"] = len(init) * len(milestones) * len(gamma)
    json.dump(spec, open(f"{tmp}/{name}.json", "w"))
EOF

now() { date +%s.%N; }
printf '%-7s %-5s %9s %9s %9s %10s %10s  %s\n' round plan executed reused unique wall_s kept_MB best
for round in coarse finer finest; do
  for plan in kept none; do
    keep=()
    [ "$plan" = none ] && keep=(--keep-checkpoints 0)
    start=$(now)
    "$hippo" --db "$tmp/$plan.db" --format json run "$tmp/$round.json" --workers "$workers" \
      "${keep[@]}" 2>/dev/null | tail -n 1 >"$tmp/$plan-$round.json"
    end=$(now)
    kept=$("$hippo" --db "$tmp/$plan.db" --format json checkpoints |
      python3 -c 'import json,sys; print(sum(r["kept_bytes"] for r in json.load(sys.stdin)))')
    python3 - "$tmp/$plan-$round.json" "$round" "$plan" "$start" "$end" "$kept" <<'EOF'
import json, sys
path, round_, plan, start, end, kept = sys.argv[1:]
s = json.load(open(path))
s["bench_wall_s"] = float(end) - float(start)
s["kept_bytes"] = int(kept)
json.dump(s, open(path, "w"))
print(f"{round_:7} {plan:5} {s['steps_executed']:9} {s['steps_reused']:9} {s['steps_unique']:9} "
      f"{s['bench_wall_s']:10.2f} {int(kept) / 1e6:10.1f}  {s['best']['value']:.6f}")
EOF
  done
done

python3 - "$tmp" <<'EOF'
import json, sys
tmp = sys.argv[1]
rounds = ["coarse", "finer", "finest"]
r = {(p, n): json.load(open(f"{tmp}/{p}-{n}.json")) for p in ("kept", "none") for n in rounds}
same = all(r[("kept", n)]["best"] == r[("none", n)]["best"] for n in rounds)
total = lambda p, k: sum(r[(p, n)][k] for n in rounds)
steps_k, steps_n = total("kept", "steps_executed"), total("none", "steps_executed")
wall_k, wall_n = total("kept", "bench_wall_s"), total("none", "bench_wall_s")
later_k = sum(r[("kept", n)]["bench_wall_s"] for n in rounds[1:])
later_n = sum(r[("none", n)]["bench_wall_s"] for n in rounds[1:])
print(f"\nall rounds: steps executed {steps_k} kept vs {steps_n} none ({steps_n / steps_k:.2f}x fewer), "
      f"steps reused {total('kept', 'steps_reused')}")
print(f"wall time {wall_k:.1f} s kept vs {wall_n:.1f} s none ({wall_n / wall_k:.2f}x, "
      f"{wall_n / wall_k / (steps_n / steps_k):.2f} of its ceiling, the steps ratio); "
      f"rounds 2 and 3 alone {later_k:.1f} s vs {later_n:.1f} s ({later_n / later_k:.2f}x)")
print(f"bytes kept at the end: {r[('kept', 'finest')]['kept_bytes'] / 1e6:.1f} MB")
print("best of each round equal with and without retention:", "yes" if same else "NO")
sys.exit(0 if same else 1)
EOF
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
