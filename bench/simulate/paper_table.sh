#!/usr/bin/env bash
# The Hippo paper's table (PVLDB 2022) in simulation: grid, SHA, ASHA, Hyperband and PBT studies
# and four users' studies sharing a cluster, at 8, 32 and 128 simulated GPUs, shared stages against
# trial-based training and the critical-path scheduler against FIFO (`hippo simulate`).
#
#   bench/simulate/paper_table.sh [HIPPO_BINARY]      (default build/hippo; about 4 minutes)
#
# Environment: WORKERS="8 32 128", SCENARIOS="grid sha asha hyperband pbt multi" (a subset),
# OUT_DIR (keeps the raw JSON of every simulation; default a new temporary directory).
# Prints one markdown table on stdout; progress and errors on stderr. See bench/README.md.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
hippo="${1:-build/hippo}"
if [[ ! -x "$hippo" ]]; then
  echo "error: $hippo is not an executable hippo binary (build it, or give its path)" >&2
  exit 2
fi
if ! "$hippo" simulate --help >/dev/null 2>&1; then
  echo "error: $hippo has no 'simulate' command" >&2
  exit 2
fi
command -v python3 >/dev/null || { echo "error: python3 is needed" >&2; exit 2; }

exec python3 "$here/paper_table.py" "$hippo"
