#!/usr/bin/env bash
# What synchronous=FULL costs the search plan (storage/README.md, "Transactions and durability"),
# in one run on this machine's disk:
#   1. one commit (BEGIN IMMEDIATE, one row, COMMIT) in WAL mode with synchronous=NORMAL (the
#      anchor) and FULL, 300 commits each, interleaved 3 times, in a directory beside the plan;
#   2. `hippo run SPEC --workers W` (its plan is FULL): the wall time, master_ms_per_trial, and,
#      with strace, the number of fsyncs of the master process and the time they took;
# and prints the estimated share of the run's wall time that FULL adds over NORMAL.
# Usage: bench/plan_sync.sh [SPEC] [WORKERS]     (run it on the disk the plan will live on: TMPDIR)
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${1:-examples/fmnist-mlp-ci.json}
workers=${2:-2}
hippo=${HIPPO:-build/hippo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

commit_ms=$(/usr/bin/python3 - "$tmp" <<'PY'
import json, os, sqlite3, statistics, sys, time
d, out = sys.argv[1], {}
for rep in range(3):
    for mode in ("NORMAL", "FULL"):
        path = os.path.join(d, f"commits-{mode}-{rep}.db")
        c = sqlite3.connect(path, isolation_level=None)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute(f"PRAGMA synchronous={mode}")
        c.execute("CREATE TABLE m (a INTEGER, b TEXT)")
        t = time.perf_counter()
        for i in range(300):
            c.execute("BEGIN IMMEDIATE")
            c.execute("INSERT INTO m VALUES (?, ?)", (i, "x" * 100))
            c.execute("COMMIT")
        out.setdefault(mode, []).append((time.perf_counter() - t) / 300 * 1e3)
        c.close()
print(json.dumps({m: {"median": statistics.median(v), "min": min(v), "max": max(v)}
                  for m, v in out.items()}))
PY
)
echo "ms per commit: $commit_ms"

if command -v strace >/dev/null; then
  run=$(strace -w -c -e trace=fsync,fdatasync -o "$tmp/strace.txt" \
    "$hippo" --db "$tmp/plan.db" --format json run "$spec" --workers "$workers" 2>/dev/null | tail -1)
  syncs=$(awk '$NF == "total" {print $(NF-1), $2}' "$tmp/strace.txt")
else
  run=$("$hippo" --db "$tmp/plan.db" --format json run "$spec" --workers "$workers" 2>/dev/null |
    tail -1)
  syncs=""
fi
echo "hippo run: $run"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$commit_ms" "$run" "$syncs" <<'PY'
import json, sys
ms, run, syncs = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3].split()
extra = ms["FULL"]["median"] - ms["NORMAL"]["median"]
print(f"one commit: FULL {ms['FULL']['median']:.3f} ms, NORMAL {ms['NORMAL']['median']:.3f} ms "
      f"(ratio {ms['FULL']['median'] / ms['NORMAL']['median']:.0f}x)")
print(f"hippo run: wall {run['wall_s']} s, master_ms_per_trial {run['master_ms_per_trial']}")
if syncs:
    calls, seconds = int(syncs[0]), float(syncs[1])
    print(f"master fsyncs: {calls} ({calls / run['trials']:.1f} per trial), {seconds:.3f} s of wall "
          f"time; FULL over NORMAL adds about {calls * extra / 1e3:.3f} s, "
          f"{100 * calls * extra / 1e3 / run['wall_s']:.1f}% of the run")
else:
    print("(install strace to count the master's fsyncs)")
PY
