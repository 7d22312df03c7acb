#!/usr/bin/env bash
# Vocabulary parallelism on this machine (issue 48): the gpt over bpe32k's 32,768 subwords on 2
# pipeline stages (1f1b, one CPU thread each), training throughput with the embedding and output
# layer cut by vocabulary across the stages against without, measured in one run:
#   bench/vocab_parallel.sh [BUILD_DIR] [REPS] [STEPS]
# REPS runs of each, alternated (without, with, without, ...); the median samples/s of each and
# their ratio (with / without; and the ratio of the best runs), their CPU seconds (the work, whatever the load), each run's peak
# resident memory (the whole process), and each stage's peak memory: the bytes its own buffers
# (parameters, gradients, optimizer state, activations, messages) held at once, counted by the
# stage (the stages are threads of one process), as max over mean. Then the simulator's
# prediction from instruction times measured on this machine (bench_engine --predict) for 2, 4
# and 8 stages (a model of 8 layers) beside the paper's 5-51%.
set -euo pipefail
build=${1:-build}
reps=${2:-3}
steps=${3:-10}
[ -x "$build/bench_engine" ] || { echo "error: $build/bench_engine not found; build the bench_engine target" >&2; exit 2; }
python=/usr/bin/python3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
model=(--model gpt --tokenizer bpe32k --vocab 32768 --layers 4 --heads 4 --dim 128 --context 64
  --batch 16 --microbatches 4 --stages 2 --schedule 1f1b --threads 1 --steps "$steps" --warmup 2)
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "gpt: ${model[*]}"
for ((i = 0; i < reps; ++i)); do
  "$build/bench_engine" "${model[@]}" >>"$out/without"
  # The last run then measures the instruction times, after its timed steps.
  predict=$( ((i == reps - 1)) && echo --predict || true)
  "$build/bench_engine" "${model[@]}" --vocab-parallel $predict >"$out/line"
  head -n 1 "$out/line" >>"$out/with"
  tail -n +2 "$out/line" >"$out/predict"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
$python - "$out" "$steps" <<'PY'
import json, statistics, sys
runs = {k: [json.loads(l) for l in open(f"{sys.argv[1]}/{k}")] for k in ("without", "with")}
# The peers did the work: every run trained the steps asked, or no ratio is printed.
for k, lines in runs.items():
    for l in lines:
        if l["steps_done"] != int(sys.argv[2]):
            sys.exit(f"error: a run {k} vocab_parallel trained {l['steps_done']} of {sys.argv[2]} steps")
med = {}
for k, lines in runs.items():
    rates = [l["samples_per_s"] for l in lines]
    med[k] = statistics.median(rates)
    cpu = statistics.median(l["cpu_seconds"] for l in lines)
    print(f"{k:>8} vocab_parallel: {med[k]:.2f} samples/s (median of {len(rates)}: "
          f"{min(rates):.2f}..{max(rates):.2f}), {cpu:.2f} CPU s, peak RSS "
          f"{max(l['peak_rss_mib'] for l in lines):.0f} MiB")
    last = lines[-1]
    print("          each stage's peak: " +
          ", ".join(f"{m:.1f}" for m in last["stage_peak_mib"]) +
          f" MiB; max/mean {last['stage_memory_max_over_mean']:.3f}")
print(f"ratio with / without: {med['with'] / med['without']:.3f} (medians), "
      f"{max(l['samples_per_s'] for l in runs['with']) / max(l['samples_per_s'] for l in runs['without']):.3f}"
      " (the best run of each: the least disturbed by other load)")
print("simulator, from this machine's instruction times (a stage per core, free of load):")
print("  layers stages  without   with  ratio   (paper: 5-51% more throughput)")
for l in open(f"{sys.argv[1]}/predict"):
    p = json.loads(l)["predict"]
    print(f"  {p['layers']:>6} {p['stages']:>6} {p['without']:>8.2f} {p['with']:>6.2f} "
          f"{p['ratio']:>6.2f}x")
PY
