#!/usr/bin/env bash
# What a stage costs a PyTorch trainer beyond its training, one-shot against long-lived:
# build/bench_trainer runs a chain of 1-step stages (each from the previous stage's checkpoint,
# each writing its own) through the worker's own ExternalTrainer, on the PyTorch trainer
# examples/pytorch/fashion_mnist.py (an MLP 784-64-10 on 1,024 samples), the two modes interleaved
# stage by stage. A one-shot stage pays the process start (Python, the PyTorch import, the data),
# the hand-over (the stage line, loading the parent checkpoint) and the checkpoint (torch.save,
# fsync, rename, announcement); a long-lived stage after the first pays the last two only. A
# third chain, long-lived without checkpoints, separates the hand-over from the checkpoint; a probe
# times the disk's part of a checkpoint (write, fsync, rename, directory fsync) in the same run.
# Usage: bench/trainer_overhead.sh [STAGES] [BUILD]
set -euo pipefail
cd "$(dirname "$0")/.."
stages=${1:-12}
build=${2:-build}
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "machine: $(getconf _NPROCESSORS_ONLN) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/bench_trainer" --stages "$stages" --dir "$tmp/ckpt" -- \
  /usr/bin/python3 examples/pytorch/fashion_mnist.py 2>"$tmp/stderr" | tee "$tmp/out" ||
  { cat "$tmp/stderr"; exit 1; }
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$tmp" <<'PY'
import os, sys, time
sys.path.insert(0, "python")
from hippo.trainer import _write_durably
data, times = os.urandom(218395), []  # the size of the trainer's checkpoints (MLP 784-64-10)
for _ in range(21):
    start = time.perf_counter()
    _write_durably(os.path.join(sys.argv[1], "probe.ckpt"), data)
    times.append(time.perf_counter() - start)
times.sort()
print(f"disk probe: write + fsync + rename + directory fsync of 218 KB: median {times[10] * 1000:.1f} ms "
      f"(min {times[0] * 1000:.1f}, max {times[-1] * 1000:.1f})")
PY
/usr/bin/python3 - "$tmp/out" <<'PY'
import json, sys
one, many, handover = (json.loads(line) for line in open(sys.argv[1]))
print(f"per stage after the first (median; a step's training, {many['step_s'] * 1000:.2f} ms, "
      f"excluded): one-shot {one['overhead_median_s'] * 1000:.0f} ms, long-lived "
      f"{many['overhead_median_s'] * 1000:.1f} ms ({one['median_s'] / many['median_s']:.0f}x less), "
      f"of which the hand-over {handover['overhead_median_s'] * 1000:.1f} ms and the checkpoint "
      f"{(many['median_s'] - handover['median_s']) * 1000:.1f} ms")
print(f"first stage: one-shot {one['first_s']:.2f} s, long-lived {many['first_s']:.2f} s; "
      f"long-lived spread {many['min_s'] * 1000:.1f} to {many['max_s'] * 1000:.1f} ms "
      f"(goal: under 50 ms after the first: {'met' if many['overhead_median_s'] < 0.05 else 'NOT met'})")
PY
