#!/usr/bin/env bash
# What having no shared disk costs (checkpoints fetched between workers' storages through the
# master), in one run on this machine:
#   1. the same study on a master and W workers over ipc://, R times each, alternating: every
#      worker on one shared checkpoint directory (the anchor), and every worker with a directory
#      of its own; the median wall time of each, their ratio, the bytes moved and transfer time;
#   2. as root: the master and 3 workers each in a network namespace (its own host: real TCP
#      over a bridge, CURVE keys, a directory of its own), and every trial's metrics compared
#      with the shared-directory run's, bit for bit, with steps executed and unique.
# Usage: bench/no_shared_disk.sh [SPEC] [WORKERS] [REPEATS]
#        (default: the docs/spec.md example, examples/fmnist-mlp-lr-decay.json, 2 workers, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
spec=$(realpath "${1:-examples/fmnist-mlp-lr-decay.json}")
workers=${2:-2}
repeats=${3:-3}
hippo=$(realpath "${HIPPO:-build/hippo}")
tmp=$(mktemp -d)
export HIPPO_HOME=$tmp/home
pids=()
namespaces=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for n in "${namespaces[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  ip link del hbdisk 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

# run_cluster NAME SHARED: a master and $workers workers over ipc; prints the study's summary.
run_cluster() {
  local name=$1 shared=$2 dir=$tmp/$1
  mkdir -p "$dir"
  "$hippo" --db "$dir/plan.db" master --bind "ipc://$dir/m.sock" --checkpoints "$dir/ck" \
    2>"$dir/master.log" &
  pids+=($!)
  for ((i = 0; i < workers; i++)); do
    local ck=$dir/ck
    [[ $shared == yes ]] || ck=$dir/ck-w$i
    "$hippo" worker --master "ipc://$dir/m.sock" --checkpoints "$ck" --name "w$i" \
      2>"$dir/worker-$i.log" &
    pids+=($!)
  done
  "$hippo" --master "ipc://$dir/m.sock" --format json submit "$spec" --wait 2>/dev/null | tail -1
  stop_all
}

echo "spec $spec, $workers workers, $repeats runs of each, $(nproc) cores"
summaries=$tmp/summaries.jsonl
for ((r = 0; r < repeats; r++)); do
  for mode in shared separate; do
    s=$(run_cluster "$mode-$r" "$([[ $mode == shared ]] && echo yes || echo no)")
    echo "{\"mode\": \"$mode\", \"summary\": $s}" >>"$summaries"
    echo "  $mode run $r: $s" | cut -c1-200
  done
done
/usr/bin/python3 - "$summaries" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
def med(mode, key):
    return statistics.median(r["summary"][key] for r in runs if r["mode"] == mode)
shared, separate = med("shared", "wall_s"), med("separate", "wall_s")
print(f"wall time, median: shared directory {shared:.2f} s, separate directories {separate:.2f} s:"
      f" ratio {separate / shared:.3f} (goal: under 1.10)")
print(f"moved per run, median: {med('separate', 'bytes_moved') / 1e6:.2f} MB in"
      f" {med('separate', 'transfer_s'):.3f} s of fetches (summed over jobs)")
PY

if [[ $(id -u) != 0 ]] || ! ip netns list >/dev/null 2>&1; then
  echo "namespaces: skipped (not root, or no ip netns)"
  exit 0
fi
# 2. Hosts of their own: h0 (master), h1..h3 (workers), 10.201.0.2-5 on bridge hbdisk.
ip link add hbdisk type bridge && ip link set hbdisk up
for i in 0 1 2 3; do
  n=hippodisk$i
  ip netns add "$n" && namespaces+=("$n")
  ip link add "hvdisk$i" type veth peer name eth0 netns "$n"
  ip link set "hvdisk$i" master hbdisk && ip link set "hvdisk$i" up
  ip -n "$n" addr add "10.201.0.$((i + 2))/24" dev eth0
  ip -n "$n" link set eth0 up && ip -n "$n" link set lo up
done
keys=$tmp/keys
mkdir -p "$keys/authorized/workers" "$keys/authorized/clients"
for k in master worker client; do "$hippo" keygen "$keys/$k" >/dev/null; done
cp "$keys/worker.pub" "$keys/authorized/workers/"
cp "$keys/client.pub" "$keys/authorized/clients/"
address=tcp://10.201.0.2:5555
dir=$tmp/hosts
mkdir -p "$dir"
ip netns exec hippodisk0 "$hippo" --db "$dir/plan.db" master --bind $address --auth \
  --key "$keys/master.key" --authorized "$keys/authorized" --checkpoints "$dir/ck-h0" \
  2>"$dir/master.log" &
pids+=($!)
sleep 1
for i in 1 2 3; do
  ip netns exec "hippodisk$i" "$hippo" worker --master $address --master-key "$keys/master.pub" \
    --key "$keys/worker.key" --checkpoints "$dir/ck-h$i" --name "host$i" 2>"$dir/worker-$i.log" &
  pids+=($!)
done
summary=$(ip netns exec hippodisk0 "$hippo" --master $address --master-key "$keys/master.pub" \
  --key "$keys/client.key" --format json submit "$spec" --wait | tail -1)
study=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["study"])' "$summary")
"$hippo" --db "$dir/plan.db" --format json trials "$study" >"$tmp/hosts.json"
"$hippo" --db "$tmp/shared-0/plan.db" --format json trials "$study" >"$tmp/shared.json"
/usr/bin/python3 - "$summary" "$tmp/hosts.json" "$tmp/shared.json" <<'PY'
import json, sys
s = json.loads(sys.argv[1])
a, b = (json.load(open(p)) for p in sys.argv[2:4])
metrics = lambda trials: {t["trial"]: json.dumps(t["metrics"]) for t in trials}
same = metrics(a) == metrics(b)
print(f"3 hosts in namespaces (TCP, CURVE, no shared disk): wall {s['wall_s']} s, "
      f"{s['bytes_moved'] / 1e6:.2f} MB moved in {s['transfer_s']} s, steps executed "
      f"{s['steps_executed']} / unique {s['steps_unique']}, metrics of all {len(a)} trials "
      f"{'equal' if same else 'DIFFERENT FROM'} the shared-directory run's")
sys.exit(0 if same and s["steps_executed"] == s["steps_unique"] else 1)
PY
