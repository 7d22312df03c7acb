#!/usr/bin/env bash
# The shipped bpe32k merges are scripts/train-bpe's: a short run of the script (its first merges
# are a longer run's first, train-bpe's tie rule) reproduces the shipped file's first lines.
set -euo pipefail
root=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
python3 "$root/scripts/train-bpe" --merges 300 --out "$out"
cmp <(zcat "$out") <(zcat "$root/worker/engine/bpe32k.merges.gz" | head -n 300)
echo "bpe_merges_test: the first 300 merges are the script's"
