#!/usr/bin/env bash
# Search quality without training: hippo's random, tpe, tpe multivariate and gp searchers against
# Optuna's TPESampler (default and multivariate) on four synthetic objectives with known optima
# (bench/search_quality.cc, bench/optuna_quality.py; the same objectives, trials and seed count).
# Every searcher runs one trial at a time, as Optuna's optimize does, except the two tpe-parallel4
# rows: four in flight (the oldest reports first), with and without the constant liar. Prints, per objective and
# searcher, the regret (best value after N trials minus the known optimum; 0 is the ceiling) as the
# median and the interquartile range over the seeds. Before printing it checks that each peer
# exited 0 and completed exactly N trials on every seed, else exits 1 naming the peer.
# Usage: bench/search_quality.sh [TRIALS] [SEEDS]   (default 100 and 20; BUILD=build by default)
# Goal (issue 35): hippo's tpe within Optuna's IQR on bowl and curves; gp ahead of random on the
# small continuous ones (bowl, branin, hartmann6).
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-100}
seeds=${2:-20}
bin=${BUILD:-build}/search_quality
python=/usr/bin/python3
[ -x "$bin" ] || { echo "error: $bin not found; build the search_quality target" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "machine: $(nproc) cores; $($python -c 'import optuna; print("optuna", optuna.__version__)'); hippo $(git rev-parse --short HEAD)"
echo "$trials trials, $seeds seeds"
declare -A hippo_searchers=(
  [random]='{"name": "random"}'
  [tpe]='{"name": "tpe", "parallel": 1}'
  [tpe-multivariate]='{"name": "tpe", "parallel": 1, "multivariate": true}'
  [gp]='{"name": "gp", "parallel": 1}'
  [tpe-parallel4]='{"name": "tpe", "parallel": 4}'
  [tpe-parallel4-no-liar]='{"name": "tpe", "parallel": 4, "constant_liar": false}'
)
for objective in bowl branin hartmann6 curves; do
  for searcher in "${!hippo_searchers[@]}"; do
    out="$tmp/$objective.hippo-$searcher"
    "$bin" "$objective" "${hippo_searchers[$searcher]}" "$trials" "$seeds" >"$out" 2>"$out.err" &&
      echo 0 >"$out.rc" || echo $? >"$out.rc"
  done
  for mode in default multivariate; do
    out="$tmp/$objective.optuna-$mode"
    $python bench/optuna_quality.py "$objective" "$mode" "$trials" "$seeds" >"$out" 2>"$out.err" &&
      echo 0 >"$out.rc" || echo $? >"$out.rc"
  done
done

$python - "$tmp" "$trials" "$seeds" <<'PY'
import json, math, os, statistics, sys
tmp, trials, seeds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# Known optima; curves: the final loss 0.1 reached at the end of its 40 steps (2.2 e^-5 above).
optimum = {"bowl": 0.0, "branin": 0.397887, "hartmann6": -3.32237, "curves": 0.1 + 2.2 * math.exp(-5)}
peers = ["hippo-random", "hippo-tpe", "hippo-tpe-multivariate", "hippo-gp", "optuna-default", "optuna-multivariate",
         "hippo-tpe-parallel4", "hippo-tpe-parallel4-no-liar"]
rows, failed = [], []
for objective in optimum:
    for peer in peers:
        out = os.path.join(tmp, f"{objective}.{peer}")
        rc = open(out + ".rc").read().strip()
        lines = [json.loads(l) for l in open(out) if l.strip()]
        if rc != "0" or len(lines) != seeds or any(l["trials"] != trials for l in lines):
            err = open(out + ".err").read().strip().splitlines()
            failed.append(f"{peer} on {objective}: exit {rc}, {len(lines)} of {seeds} seeds, "
                          f"trials {[l['trials'] for l in lines]} {err[-1] if err else ''}")
            continue
        regret = sorted(l["best"] - optimum[objective] for l in lines)
        q1, _, q3 = statistics.quantiles(regret, n=4, method="inclusive")
        rows.append(f"| {objective} | {peer} | {statistics.median(regret):.4g} | {q1:.4g} – {q3:.4g} |")
if failed:
    print("error: peers that did not do the work:\n  " + "\n  ".join(failed), file=sys.stderr)
    sys.exit(1)
print("| objective | searcher | median regret | IQR |")
print("|---|---|---|---|")
print("\n".join(rows))
PY
