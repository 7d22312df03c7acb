#!/usr/bin/env bash
# Does `hippo dashboard` slow a master that writes the same search plan? The same study runs
# (`hippo run`, 2 workers) under three conditions, interleaved, REPS times each:
#   none    no dashboard reading
#   watch   4 open study pages: each asks for its content every 2 s with its ETag, as
#           dashboard.js does (the dashboard re-reads a changed plan at most once a second)
#   hammer  4 connections fetching the whole study page back to back, as fast as the server answers
# and prints the median (and range) of the run's wall time and of the master's own CPU time per
# trial, with the ratio to `none`.
#   bench/dashboard_vs_master.sh [BUILD] [REPS]
set -euo pipefail
build=${1:-build}
reps=${2:-5}
hippo="$build/hippo"
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
db="$dir/plan.db"
examples="$(dirname "$0")/../examples"

# 8 trials of the CI grid, longer: seconds of training on 2 workers, a commit every few ms.
spec() {
  python3 - "$examples/fmnist-mlp-ci.json" "$1" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
s["name"] = sys.argv[2]
s["seed"] = sum(map(ord, sys.argv[2])) * 1000 + len(sys.argv[2])  # its own root key: no sharing across runs
s["data"]["train_samples"] = 4096
s["hyperparameters"]["lr"]["init"] = {"grid": [0.1, 0.05, 0.02, 0.01]}
s["length"] = {"epochs": 8}
print(json.dumps(s))
EOF
}
spec warmup > "$dir/warmup.json"
"$hippo" --db "$db" run "$dir/warmup.json" --workers 2 > /dev/null 2>&1
"$hippo" --db "$db" dashboard --bind 127.0.0.1:0 2> "$dir/dashboard.log" &
dashboard=$!
cpu_of_dashboard() {  # user + system CPU seconds so far
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$dashboard/stat"
}
for _ in $(seq 100); do
  port=$(sed -n 's/.*read-only at http:\/\/127.0.0.1:\([0-9]*\)\/.*/\1/p' "$dir/dashboard.log")
  [ -n "$port" ] && break
  sleep 0.1
done
echo "dashboard on port $port; load before: $(cut -d' ' -f1-3 /proc/loadavg)"

watch() {  # $1: study name. Four open pages, each polling every 2 s as dashboard.js does.
  trap 'kill $(jobs -p) 2>/dev/null; exit 0' TERM
  for _ in 1 2 3 4; do
    (
      etag='"none"'
      while true; do
        new=$(curl -s -D - -o /dev/null -H 'X-Hippo-Part: content' -H "If-None-Match: $etag" \
          "http://127.0.0.1:$port/study/$1" | sed -n 's/^ETag: //p' | tr -d '\r') || true
        [ -n "$new" ] && etag=$new
        sleep 2
      done
    ) &
  done
  wait
}
hammer() {  # one curl, 4 connections kept alive, 400 requests a round (few processes to spawn)
  local urls=()
  for _ in $(seq 400); do urls+=("http://127.0.0.1:$port/study/$1" -o /dev/null); done
  while true; do curl -s --parallel --parallel-max 4 "${urls[@]}" || true; done
}

declare -A wall cpu served
for rep in $(seq "$reps"); do
  for condition in none watch hammer; do
    name="$condition-$rep"
    spec "$name" > "$dir/$name.json"
    pids=()
    case $condition in
      watch) watch "$name" & pids+=($!) ;;
      hammer) hammer "$name" & pids+=($!) ;;
    esac
    before=$(cpu_of_dashboard)
    line=$("$hippo" --db "$db" --format json run "$dir/$name.json" --workers 2 2>/dev/null | tail -1)
    served[$condition]+="$(awk -v a="$(cpu_of_dashboard)" -v b="$before" 'BEGIN {print a - b}') "
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    wall[$condition]+="$(echo "$line" | python3 -c 'import json,sys; print(json.load(sys.stdin)["wall_s"])') "
    cpu[$condition]+="$(echo "$line" | python3 -c 'import json,sys; print(json.load(sys.stdin)["master_ms_per_trial"])') "
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "${wall[none]}" "${wall[watch]}" "${wall[hammer]}" "${cpu[none]}" "${cpu[watch]}" "${cpu[hammer]}" \
  "${served[none]}" "${served[watch]}" "${served[hammer]}" <<'EOF'
import statistics, sys
names = ["none", "watch", "hammer"]
wall = [list(map(float, a.split())) for a in sys.argv[1:4]]
cpu = [list(map(float, a.split())) for a in sys.argv[4:7]]
served = [list(map(float, a.split())) for a in sys.argv[7:10]]
for n, d in zip(names, served):
    print(f"dashboard CPU during the run, {n:7s}: median {statistics.median(d):.3f} s")
for title, data, unit in (("wall time of the run", wall, "s"), ("master CPU per trial", cpu, "ms")):
    base = statistics.median(data[0])
    print(title)
    for n, d in zip(names, data):
        m = statistics.median(d)
        print(f"  {n:7s} median {m:8.3f} {unit} (range {min(d):.3f} .. {max(d):.3f}), ratio to none {m / base:.3f}")
EOF
