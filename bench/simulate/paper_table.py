#!/usr/bin/env python3
"""The Hippo paper's table (PVLDB 2022), in simulation: `hippo simulate` over the studies of
bench/simulate/specs/ at several cluster sizes, shared stages against trial-based training and
the critical-path scheduler against FIFO. Standard library only. See bench/README.md.

Usage: paper_table.py HIPPO_BINARY   (paper_table.sh is the entry point)
Environment: WORKERS (default "8 32 128"), SCENARIOS (names, default all), OUT_DIR (where the raw
JSON of every simulation is kept; default a new temporary directory).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SPECS = os.path.join(HERE, "specs")

# The cost model: a ResNet-56-class CNN on one GPU. Nothing trains in a simulation, so these say
# how long things take: 0.05 s a training step (batch 64..256: the simulator has one step time
# per model, whatever the batch size), 2 s an evaluation pass over the 10,000 test images, 1 s of
# fixed cost per job (message, building the model, loading data), 8 MiB per checkpoint (weights
# and momentum) written and read at 1 GB/s, and a synthetic learning curve that rises over 5,000
# steps (about 10 epochs at batch 128), which the adaptive searchers rank by.
TIMES = ["--step-time", "0.05", "--eval-time", "2", "--job-time", "1",
         "--state-bytes", "8MiB", "--bandwidth", "1GB", "--curve-steps", "5000"]

# Hippo: Sharing Computations in Hyper-Parameter Optimization (PVLDB 15(5), 2022): the largest
# reductions it reports against trial-based execution.
PAPER_SINGLE = (2.76, 4.81)  # end-to-end, GPU-hours
PAPER_MULTI = (3.53, 6.77)

# name, specs, submit times (s), what it is. ASHA's `parallel` (trials in flight) is set to the
# number of workers of each run; the spec files hold 8. OPTIONAL ones run only when SCENARIOS
# names them.
SCENARIOS = [
    ("grid", ["grid-multistep.json"], None,
     "grid: multistep lr (init x 2 milestones x gamma) x batch size, 576 trials, 40 epochs"),
    ("sha", ["sha-step-decay.json"], None,
     "SHA: step-decay lr (init x every x gamma) x batch size, 729 trials, rungs 1-27 epochs"),
    ("asha", ["asha-warmup-cosine.json"], None,
     "ASHA: warm-up + cosine lr (warm-up x final x length) x batch x momentum, 864 trials, "
     "rungs 2-54 epochs"),
    ("hyperband", ["hyperband-warmup-multistep.json"], None,
     "Hyperband: warm-up + multistep lr x momentum, 6 brackets, 415 trials, 1/3-81 epochs"),
    ("pbt", ["pbt.json"], None,
     "PBT: lr, momentum, weight decay, batch size; population 64, 20 generations, 368 trials"),
    ("multi", ["multi-1-grid.json", "multi-2-sha.json", "multi-3-asha.json",
               "multi-4-grid-fine.json"], [0, 600, 1200, 1800],
     "4 users' studies (grid 96, SHA 243, ASHA 64, fine grid 72 trials) over overlapping "
     "multistep spaces, submitted at 0, 10, 20, 30 min"),
    ("asha-end-eval", ["asha-warmup-cosine-end-eval.json"], None,
     "the asha study evaluated only at each rung's end (no per-epoch evaluations)"),
]
OPTIONAL = {"asha-end-eval"}


class Failure(Exception):
    pass


def spec_for(path, workers, tmp):
    """The spec file to run: ASHA specs get parallel = workers (a copy in tmp)."""
    with open(path) as f:
        spec = json.load(f)
    if spec.get("searcher", {}).get("name") != "asha":
        return path
    spec["searcher"]["parallel"] = workers
    out = os.path.join(tmp, f"{os.path.basename(path)[:-5]}-parallel{workers}.json")
    with open(out, "w") as f:
        json.dump(spec, f)
    return out


def simulate(hippo, name, specs, at, workers, tmp, out_dir):
    args = [hippo, "simulate"] + [spec_for(os.path.join(SPECS, s), workers, tmp) for s in specs]
    args += ["--workers", str(workers), "--policy", "both", "--order", "both", "--format", "json"]
    args += TIMES
    if at:
        args += ["--at"] + [str(t) for t in at]
    started = time.monotonic()
    try:
        p = subprocess.run(args, capture_output=True, text=True, cwd=tmp)
    except OSError as e:
        raise Failure(f"scenario {name}, {workers} workers: cannot run {hippo}: {e}")
    real = time.monotonic() - started
    raw = os.path.join(out_dir, f"{name}-{workers}.json")
    with open(raw, "w") as f:
        f.write(p.stdout)
    if p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip())[-2000:]
        raise Failure(f"scenario {name}, {workers} workers: hippo simulate exited with status "
                      f"{p.returncode}\n  command: {' '.join(args)}\n  {tail}")
    try:
        result = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise Failure(f"scenario {name}, {workers} workers: no JSON on the last line of the "
                      f"output (kept in {raw})")
    for column in ("shared critical-path", "shared fifo", "trial-based"):
        if column not in result:
            raise Failure(f"scenario {name}, {workers} workers: no column '{column}' in {raw}")
        for s in result[column]["studies"]:
            if s.get("status") != "done":
                raise Failure(f"scenario {name}, {workers} workers, {column}: study {s['study']} "
                              f"ended {s.get('status')} (kept in {raw})")
    return result, real


def worst_match(cp, tb):
    """(ratio, study) of the study whose shared search is furthest from its trial-based one."""
    pairs = []
    for s, t in zip(cp["studies"], tb["studies"]):
        if s["study"] != t["study"]:
            raise Failure(f"studies out of order: {s['study']} and {t['study']}")
        pairs.append((s["steps_trial_based"] / t["steps_executed"], s["study"]))
    return max(pairs, key=lambda m: abs(m[0] - 1))


def row(name, workers, result, real):
    cp, fifo, tb = result["shared critical-path"], result["shared fifo"], result["trial-based"]
    mean_study = lambda c: sum(s["wall_s"] for s in c["studies"]) / len(c["studies"])
    return {
        "scenario": name,
        "workers": workers,
        "trials": sum(s["trials"] for s in cp["studies"]),
        "mk_shared_h": cp["makespan_s"] / 3600,
        "mk_tb_h": tb["makespan_s"] / 3600,
        "e2e": tb["makespan_s"] / cp["makespan_s"],
        "gpuh_shared": cp["gpu_hours"],
        "gpuh_tb": tb["gpu_hours"],
        "gpuh": tb["gpu_hours"] / cp["gpu_hours"],
        "study": mean_study(tb) / mean_study(cp) if mean_study(cp) > 0 else float("inf"),
        "cp_fifo": fifo["makespan_s"] / cp["makespan_s"],
        "util_shared": cp["utilization"],
        "util_fifo": fifo["utilization"],
        "util_tb": tb["utilization"],
        # 1.00 when the shared run searched what the trial-based run searched: the trial-based
        # steps of the trials the shared run made, over what the trial-based run executed; the
        # study furthest from 1.
        "match": worst_match(cp, tb),
        "replay": cp["steps_executed"] / cp["steps_unique"] if cp["steps_unique"] else 1.0,
        "sim_s": cp["wall_s"] + fifo["wall_s"] + tb["wall_s"],
        "real_s": real,
    }


def fmt_table(rows):
    head = ["scenario", "GPUs", "trials", "makespan shared (h)", "makespan trial-based (h)",
            "end-to-end x", "GPU-h shared", "GPU-h trial-based", "GPU-h x", "mean study x",
            "FIFO / crit-path", "util shared", "util FIFO", "util trial-based", "search match",
            "executed / unique", "paper (up to) e2e / GPU-h", "sim wall (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        paper = PAPER_MULTI if r["scenario"] == "multi" else PAPER_SINGLE
        cells = [r["scenario"], str(r["workers"]), str(r["trials"]),
                 f"{r['mk_shared_h']:.2f}", f"{r['mk_tb_h']:.2f}", f"{r['e2e']:.2f}x",
                 f"{r['gpuh_shared']:.1f}", f"{r['gpuh_tb']:.1f}", f"{r['gpuh']:.2f}x",
                 f"{r['study']:.2f}x", f"{r['cp_fifo']:.3f}", f"{r['util_shared']:.2f}",
                 f"{r['util_fifo']:.2f}", f"{r['util_tb']:.2f}", f"{r['match'][0]:.2f}",
                 f"{r['replay']:.3f}", f"{paper[0]}x / {paper[1]}x",
                 f"{r['sim_s']:.1f} ({r['real_s']:.1f})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: paper_table.py HIPPO_BINARY")
    hippo = os.path.abspath(sys.argv[1])
    workers = [int(w) for w in os.environ.get("WORKERS", "8 32 128").split()]
    wanted = os.environ.get("SCENARIOS", "").split()
    scenarios = [s for s in SCENARIOS if s[0] in wanted or (not wanted and s[0] not in OPTIONAL)]
    unknown = set(wanted) - {s[0] for s in SCENARIOS}
    if unknown:
        sys.exit(f"error: unknown scenario(s) {' '.join(sorted(unknown))}; known: "
                 f"{' '.join(s[0] for s in SCENARIOS)}")
    out_dir = os.environ.get("OUT_DIR") or tempfile.mkdtemp(prefix="hippo-paper-table-")
    os.makedirs(out_dir, exist_ok=True)
    started = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="hippo-paper-specs-") as tmp:
        for name, specs, at, what in scenarios:
            for w in workers:
                print(f"  {name:<10} {w:>4} workers ...", end="", file=sys.stderr, flush=True)
                try:
                    result, real = simulate(hippo, name, specs, at, w, tmp, out_dir)
                except Failure as e:
                    print(" failed", file=sys.stderr)
                    print(f"error: {e}", file=sys.stderr)
                    sys.exit(1)
                rows.append(row(name, w, result, real))
                print(f" {real:.1f} s", file=sys.stderr)
    total = time.monotonic() - started

    print("## Hippo's table in simulation (`hippo simulate`, real master, virtual time)\n")
    print("Scenarios (specs in bench/simulate/specs/, model `cnn` on fashion-mnist, 468 steps "
          "an epoch at batch 128):\n")
    for name, specs, at, what in scenarios:
        print(f"- **{name}**: {what}")
    print("\nCost model: " + " ".join(TIMES) + " (a ResNet-56-class CNN on one GPU; one step "
          "time for every batch size). ASHA's `parallel` = the number of GPUs.\n")
    print(fmt_table(rows))
    print("""
- *end-to-end x*: trial-based makespan / shared makespan (critical-path order); *GPU-h x*: the
  same for busy GPU-hours; *mean study x*: the same for the mean time from a study's submission
  to its end (equals end-to-end x for one study).
- *FIFO / crit-path*: shared makespan under FIFO order / under the critical-path order (> 1: the
  critical-path scheduler is faster).
- *search match*: the trial-based steps of the trials the shared run made / the steps the
  trial-based run executed, for the study where they differ most. 1.00 means both policies ran
  the same search; otherwise the adaptive searcher decided differently under the two policies,
  and the GPU-hour ratio mixes sharing with a different search.
- *executed / unique*: shared steps executed / unique steps (> 1: replays from an earlier
  checkpoint; for several studies the unique steps are summed per study, so it may be < 1).
- *sim wall*: the simulator's own time for the three columns (the whole process, in brackets).
- *paper*: the largest reductions Hippo (PVLDB 2022) reports against trial-based execution on
  real GPUs: single studies 2.76x end-to-end and 4.81x GPU-hours, multiple studies sharing a
  cluster 3.53x and 6.77x.
- The trial-based policy trains every trial from step 0 along its own path: a PBT exploit too
  (a new trial forked from its donor), where PBT systems copy the donor's checkpoint instead, so
  the pbt rows overstate what sharing saves against such a system.""")
    single = [r for r in rows if r["scenario"] not in ("multi", "asha-end-eval")]
    multi = [r for r in rows if r["scenario"] == "multi"]
    if single:
        best_e2e = max(single, key=lambda r: r["e2e"])
        best_gpu = max(single, key=lambda r: r["gpuh"])
        print(f"\nSingle studies here: up to {best_e2e['e2e']:.2f}x end-to-end "
              f"({best_e2e['scenario']}, {best_e2e['workers']} GPUs) and {best_gpu['gpuh']:.2f}x "
              f"GPU-hours ({best_gpu['scenario']}, {best_gpu['workers']} GPUs); paper: "
              f"{PAPER_SINGLE[0]}x / {PAPER_SINGLE[1]}x.")
    if multi:
        print(f"Multiple studies here: up to {max(r['e2e'] for r in multi):.2f}x end-to-end "
              f"and {max(r['gpuh'] for r in multi):.2f}x GPU-hours; paper: {PAPER_MULTI[0]}x / "
              f"{PAPER_MULTI[1]}x.")
    flags = []
    for r in rows:
        where = f"{r['scenario']} at {r['workers']} GPUs"
        if r["e2e"] < 1:
            flags.append(f"{where}: shared is slower than trial-based ({r['e2e']:.2f}x)")
        if r["cp_fifo"] < 0.995:
            flags.append(f"{where}: FIFO is faster than the critical-path order "
                         f"({r['cp_fifo']:.3f})")
        if abs(r["match"][0] - 1) > 0.01:
            flags.append(f"{where}: the two policies ran different searches (study "
                         f"{r['match'][1]}: search match {r['match'][0]:.2f})")
        if r["replay"] > 1.001:
            flags.append(f"{where}: shared replayed {100 * (r['replay'] - 1):.1f}% of its "
                         f"unique steps")
    if flags:
        print("\nLook at:\n" + "\n".join(f"- {f}" for f in flags))
    print(f"\nRaw JSON of every simulation: {out_dir}. Total time: {total:.0f} s.")


if __name__ == "__main__":
    main()
