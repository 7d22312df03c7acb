#!/usr/bin/env bash
# Stands in for the benchmarks' BENCH_PYTHON: runs Debian's python3 with the same arguments, except
# that Optuna's peer 1 (a worker started with `--worker 1`) meets the fault named by PEER_FAULT:
#   none   no fault (the run that must pass);
#   kill   the real peer process is killed with SIGKILL half a second after it starts (while
#          it imports Optuna and PyTorch, before it takes a trial: the benchmark sees a dead peer
#          that printed nothing, as when Optuna's SQLite storage killed one);
#   claim  the peer runs to its end, then its result line claims one trial more than it completed.
# The benchmarks' own logic is untouched: a fault is a real process dying or a real line lying.
set -euo pipefail
python=/usr/bin/python3
peer1=no
for ((i = 1; i < $#; i++)); do
  if [ "${!i}" = --worker ] && j=$((i + 1)) && [ "${!j}" = 1 ]; then peer1=yes; fi
done
case $peer1-${PEER_FAULT:?PEER_FAULT must be none, kill or claim} in
  no-* | yes-none) exec "$python" "$@" ;;
  yes-kill)
    # This shell's pid is the peer's once exec replaces the shell by python.
    (sleep 0.5; kill -KILL $$) &
    exec "$python" "$@" ;;
  yes-claim)
    "$python" "$@" | "$python" -c 'import json, sys
line = json.loads(sys.stdin.read().splitlines()[-1])
line["trials"] += 1
print(json.dumps(line))' ;;
  *) echo "python_with_faults.sh: PEER_FAULT=$PEER_FAULT is not none, kill or claim" >&2; exit 2 ;;
esac
