#!/usr/bin/env bash
# Training throughput of hippo's CPU engine against PyTorch on CPU (Debian's python3-torch), same
# model, batch 128 and threads, on this machine, in one run (bench/README.md, "How we measure"):
#   bench/engine_vs_pytorch.sh [BUILD_DIR] [REPS]
# Under two environments in turn: the machine's own (as this script was started), and the same
# with OPENBLAS_CORETYPE unset (PyTorch's products run on OpenBLAS, which reads it; its
# convolutions on oneDNN, which picks its kernels itself; hippo uses neither). In each:
#   - the fp32 matrix-product peak of the machine, 1 and 2 threads, through OpenBLAS, oneDNN and
#     hippo's kernels (build/sgemm_peak), and which library reached it;
#   - for the mlp and the cnn, T = 1 and 2 threads: REPS runs of hippo and of PyTorch at each
#     thread count, interleaved (hippo, torch, hippo, ...), median (min..max); PyTorch's best over
#     1..T threads; the ratio hippo / PyTorch-best against the goal (>= 1.30);
#   - the mlp at 1 thread against the peak: its matrix products' flops per second over the
#     1-thread peak, against the goal (>= 0.85).
# Prints the machine, the environment and the load (before and after), since a timing taken while
# something else runs is noise.
set -euo pipefail
build=${1:-build}
reps=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
for tool in bench_engine sgemm_peak; do
  [ -x "$build/$tool" ] || { echo "error: $build/$tool not found; build the $tool target" >&2; exit 2; }
done
python=/usr/bin/python3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores," \
  "$(grep -m1 -o -w -E 'avx512f' /proc/cpuinfo || echo no-avx512f) $(grep -m1 -o -w 'avx2' /proc/cpuinfo || echo no-avx2)," \
  "kernel $(uname -r)"
echo "software: $($python -c 'import re, torch; print("torch", torch.__version__, "with", (re.findall(r"MKL-DNN v[0-9.]+", torch.__config__.show()) or ["no oneDNN"])[0])' 2>/dev/null || echo 'no torch'), $(dpkg-query -W -f='OpenBLAS ${Version}' libopenblas0-pthread 2>/dev/null || echo 'OpenBLAS ?')"
echo "hippo: $("$build/bench_engine" --model mlp --steps 1 --warmup 0 | $python -c 'import json,sys; print("CPU kernels", json.load(sys.stdin)["isa"])')"
echo "environment as started: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-<unset>}, OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS-<unset>}, OMP_NUM_THREADS=${OMP_NUM_THREADS-<unset>}; $reps repetitions, batch 128"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# run LABEL COMMAND...: one measurement, its JSON line appended to $out/LABEL.
run() {
  local label=$1
  shift
  "$@" >>"$out/$label"
}

for envname in own unset; do
  if [ "$envname" = own ]; then envcmd=(env); else envcmd=(env -u OPENBLAS_CORETYPE); fi
  echo
  echo "== environment: $envname (OPENBLAS_CORETYPE=$("${envcmd[@]}" sh -c 'echo ${OPENBLAS_CORETYPE-<unset>}'))"
  "${envcmd[@]}" "$build/sgemm_peak" --threads 2 >"$out/$envname.peak"
  for model in mlp cnn; do
    # Timed runs of about a second of hippo's time at 1 thread (300 mlp steps were 0.2 s, and
    # read 10% slower than the steady state), after untimed warm-up steps: the same for both.
    steps=$([ "$model" = mlp ] && echo 1000 || echo 15)
    warmup=$([ "$model" = mlp ] && echo 50 || echo 5)
    for t in 1 2; do
      for _ in $(seq "$reps"); do
        run "$envname.$model.hippo.$t" "${envcmd[@]}" OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t \
          "$build/bench_engine" --model "$model" --batch 128 --threads "$t" --steps "$steps" \
          --warmup "$warmup"
        run "$envname.$model.torch.$t" "${envcmd[@]}" OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t \
          $python "$here/engine_vs_pytorch.py" --model "$model" --batch 128 --threads "$t" \
          --steps "$steps" --warmup "$warmup"
      done
    done
  done
  $python - "$out" "$envname" <<'PY'
import json, os, statistics, sys
out, env = sys.argv[1:]
def runs(name):
    with open(os.path.join(out, f"{env}.{name}")) as f:
        return [json.loads(line) for line in f if line.strip()]
def summary(values):
    return statistics.median(values), min(values), max(values)
peak = json.loads(open(os.path.join(out, f"{env}.peak")).read())
print("fp32 matrix-product peak (GFLOP/s, n=%d):" % peak["n"])
for lib, values in sorted(peak["gflops"].items()):
    print("  %-8s %s" % (lib, "  ".join("%d thread%s %.1f" % (t, "s" if t > 1 else "", v)
                                        for t, v in zip(peak["threads"], values))))
print("  peak: %s" % ", ".join("%d thread%s %.1f (%s)" % (t, "s" if t > 1 else "", v, lib)
                               for t, v, lib in zip(peak["threads"], peak["peak"], peak["peak_library"])))
print("%-5s %2s %28s %28s %22s %7s %s" % ("model", "T", "hippo samples/s median (min..max)",
                                          "torch median (min..max)", "torch best<=T (threads)",
                                          "ratio", "goal>=1.30"))
for model in ("mlp", "cnn"):
    torch_by_threads = {}
    for t in (1, 2):
        ours = summary([r["samples_per_s"] for r in runs(f"{model}.hippo.{t}")])
        theirs = summary([r["samples_per_s"] for r in runs(f"{model}.torch.{t}")])
        torch_by_threads[t] = theirs[0]
        best_t = max(torch_by_threads, key=torch_by_threads.get)
        ratio = ours[0] / torch_by_threads[best_t]
        print("%-5s %2d %10.0f (%7.0f..%7.0f) %10.0f (%7.0f..%7.0f) %14.0f (%d) %6.2fx %s" % (
            model, t, *ours, *theirs, torch_by_threads[best_t], best_t, ratio,
            "yes" if ratio >= 1.3 else "NO"))
    flops = runs(f"{model}.hippo.1")[0]["product_flops_per_step"]
    rate = statistics.median(r["product_gflops"] for r in runs(f"{model}.hippo.1"))
    print("  %s, 1 thread: %.1f MFLOP of matrix products per step, %.1f GFLOP/s = %.2f of the "
          "1-thread peak (%s)%s" % (model, flops / 1e6, rate, rate / peak["peak"][0],
                                    peak["peak_library"][0],
                                    ("; goal >= 0.85: " + ("yes" if rate / peak["peak"][0] >= 0.85 else "NO"))
                                    if model == "mlp" else ""))
PY
  echo "load now: $(cut -d' ' -f1-3 /proc/loadavg)"
done
