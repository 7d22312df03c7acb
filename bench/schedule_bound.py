"""The two ceilings of a shared study's speed-up over the same study trained trial by trial, which
every benchmark of a study prints beside its measured speed-up:

- the steps ratio: trial-based steps / executed steps (from the shared run's summary). It counts
  work only: it is reached only if every worker is busy from start to end.
- the schedule's bound: the makespan of the study under the trial-based policy over its makespan
  shared, both from `hippo simulate` on the same number of workers, with the step time and the
  evaluation time measured in the same run (the shared run's training seconds / its executed
  steps, its evaluation seconds / its evaluations) and zero overheads (no process start, setup,
  load, save or transfer). It is the work ratio (steps and evaluations: sharing saves both, a
  state shared by several trials is evaluated once) less what the tree's shape costs: a root
  that one worker must train while the others wait.

As a module: ceilings(hippo, spec, workers, summary), report(speedup, ceilings), and
stage_overhead(summary, spec) (what a stage pays beyond its training, against an epoch). As a script:
bench/schedule_bound.py HIPPO SPEC WORKERS SUMMARY_FILE [SPEEDUP] (SUMMARY_FILE: a file whose
last line is the shared run's `--format json run` summary) prints them.
"""
import json
import subprocess
import sys


def ceilings(hippo, spec, workers, summary, metrics_from=None):
    """{"steps_ratio", "bound", "step_s", "eval_s", "shared_s", "trial_based_s", "run_s"} of the study
    `spec` (a file) run shared on `workers` workers, whose summary is `summary`. metrics_from (a
    plan file) replays that run's metrics in the simulation, for searchers whose decisions follow
    them."""
    t = summary["time"]["all"]
    step_s = t["train_s"] / summary["steps_executed"]
    eval_s = t["eval_s"] / t["evaluations"] if t.get("evaluations") else 0.0
    command = [hippo, "--format", "json", "simulate", spec, "--workers", str(workers),
               "--step-time", repr(step_s), "--eval-time", repr(eval_s), "--job-time", "0",
               "--state-bytes", "0"]
    if metrics_from:
        command += ["--metrics-from", metrics_from]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    runs = json.loads(out)
    shared, alone = runs["shared"]["makespan_s"], runs["trial-based"]["makespan_s"]
    return {"steps_ratio": summary["steps_trial_based"] / summary["steps_executed"],
            "bound": alone / shared, "step_s": step_s, "eval_s": eval_s, "shared_s": shared,
            "trial_based_s": alone, "run_s": summary["wall_s"]}


def report(speedup, c, what="speed-up"):
    """One line: the speed-up beside both ceilings and the fraction of each it reached, and the
    shared run's own schedule against the simulated one (its wall time over the simulated shared
    makespan: what hippo's overheads cost, whatever the other side's are)."""
    return (f"{what} {speedup:.2f}x; ceilings: steps ratio {c['steps_ratio']:.2f}x (reached "
            f"{speedup / c['steps_ratio']:.2f}), schedule's bound {c['bound']:.2f}x (reached "
            f"{speedup / c['bound']:.2f}; hippo simulate at {c['step_s'] * 1000:.2f} ms a step and "
            f"{c['eval_s'] * 1000:.0f} ms an evaluation, the shared run's, zero overheads: "
            f"trial-based {c['trial_based_s']:.1f} s / shared {c['shared_s']:.1f} s); the shared "
            f"run took {c['run_s']:.1f} s, {c['shared_s'] / c['run_s']:.2f} of the simulated "
            f"shared makespan's speed")


def stage_overhead(summary, spec):
    """One line: what a stage paid beyond its training and evaluation (setup + load + save, per
    job, from the summary's time split) as a share of one epoch's training (the spec's
    train_samples // batch_size steps at the run's step time), or None when the spec does not
    say its epoch's length."""
    data, fixed = spec.get("data", {}), spec.get("fixed", {})
    if "train_samples" not in data or "batch_size" not in fixed:
        return None
    t = summary["time"]["all"]
    epoch_s = data["train_samples"] // fixed["batch_size"] * t["train_s"] / summary["steps_executed"]
    per_job = {p: t[p + "_s"] / t["jobs"] for p in ("setup", "load", "save")}
    share = sum(per_job.values()) / epoch_s
    return (f"per stage ({t['jobs']} jobs): setup {per_job['setup'] * 1000:.0f} ms + load "
            f"{per_job['load'] * 1000:.0f} ms + save {per_job['save'] * 1000:.0f} ms = "
            f"{100 * share:.1f}% of one epoch's training ({epoch_s:.2f} s); the trainers' "
            f"start, once per worker: {t['start_s']:.1f} s in all")


if __name__ == "__main__":
    hippo, spec, workers, summary_file = sys.argv[1:5]
    with open(summary_file) as f:
        summary = json.loads(f.read().splitlines()[-1])
    c = ceilings(hippo, spec, int(workers), summary)
    if len(sys.argv) > 5:
        print(report(float(sys.argv[5]), c))
    else:
        print(json.dumps(c))
