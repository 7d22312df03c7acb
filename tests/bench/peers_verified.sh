#!/usr/bin/env bash
# A benchmark against Optuna verifies its peers before it prints a ratio: runs BENCH_SCRIPT on SPEC
# (2 workers) three times, with BENCH_PYTHON pointed at python_with_faults.sh:
#   1. no fault: exits 0, says it verified both sides, prints a speed-up beside its two ceilings
#      (the steps ratio and the schedule's bound) and what a stage paid beyond its training;
#   2. PEER_FAULT=kill (peer 1 killed with SIGKILL): exits 1 naming peer 1, its pid and the signal;
#   3. PEER_FAULT=claim (peer 1 claims a trial it did not complete): exits 1 naming peer 1's claim.
# Usage: tests/bench/peers_verified.sh BENCH_SCRIPT SPEC   (HIPPO: the hippo binary under test)
set -euo pipefail
script=$1 spec=$2
here=$(cd "$(dirname "$0")" && pwd)
: "${HIPPO:?HIPPO must name the hippo binary under test}"
# The benchmarks' own temporary folders (kept when a check fails) go here, removed at the end.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run FAULT: runs the benchmark, its output in $work/FAULT.out and its exit status in $rc.
run() {
  rc=0
  TMPDIR=$work BENCH_PYTHON=$here/python_with_faults.sh PEER_FAULT=$1 \
    "$script" "$spec" 2 >"$work/$1.out" 2>&1 || rc=$?
  echo "== $(basename "$script"), peer fault: $1 (exit status $rc)"
}
# expect FAULT PATTERN...: every extended regular expression matches a line of FAULT's output.
expect() {
  local fault=$1 pattern
  shift
  for pattern in "$@"; do
    grep -Eq -- "$pattern" "$work/$fault.out" || {
      echo "FAIL: no line of the output matches: $pattern" >&2
      cat "$work/$fault.out" >&2
      exit 1
    }
  done
}
fail_unless_rc() {  # $1: fault, $2: expected exit status
  [ "$rc" -eq "$2" ] || { echo "FAIL: exit status $rc, expected $2" >&2; cat "$work/$1.out" >&2; exit 1; }
}

run none
fail_unless_rc none 0
expect none '^verified' \
  "ceilings: steps ratio [0-9.]+x \\(reached [0-9.]+\\), schedule's bound [0-9.]+x \\(reached [0-9.]+;" \
  'per stage \([0-9]+ jobs\): setup [0-9]+ ms \+ load [0-9]+ ms \+ save [0-9]+ ms = [0-9.]+% of one epoch'

run kill
fail_unless_rc kill 1
expect kill '^error: Optuna peer 1 \(pid [0-9]+\) exited with status 137 \(killed by signal 9\)'
grep -v '^verified' "$work/kill.out" | grep -q 'speed-up' && { echo "FAIL: a ratio printed after a peer died" >&2; cat "$work/kill.out" >&2; exit 1; }

run claim
fail_unless_rc claim 1
expect claim '^error: Optuna peer 1 \(pid [0-9]+\) claims [0-9]+ completed trials, the study records [0-9]+'
echo "passed"
