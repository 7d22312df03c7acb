#!/usr/bin/python3
"""A study from Python, notebook style (run it cell by cell in Jupyter, or as a script from the
repository's root): build a spec as a dict, run it (embedded, or on a master), read its history
and plot the learning curves with matplotlib if it is installed (else print them).

    /usr/bin/python3 examples/pytorch/notebook.py [--master ADDR --db PLAN] [--out curves.png]
"""
import argparse
import json
import os

import hippo

HERE = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser()
parser.add_argument("--master", help="a master's address (else an embedded run)")
parser.add_argument("--db", default="notebook.db", help="the search plan (the master's, if any)")
parser.add_argument("--out", default="notebook-curves.png", help="the plot")
parser.add_argument("--train-samples", type=int, default=2048)
args = parser.parse_args()
db = os.path.abspath(args.db)

# %% The study: the CNN learning-rate grid of fmnist-cnn-multistep.json on a smaller prefix.
with open(os.path.join(HERE, "fmnist-cnn-multistep.json")) as f:
    spec = json.load(f)
spec["name"] = "notebook-cnn"
spec["data"].update(train_samples=args.train_samples, eval_samples=500)

# %% Run it to the end: shared stages are trained once.
if args.master:
    summary = hippo.submit(spec, master=args.master)
else:
    summary = hippo.run(spec, workers=2, allow_exec=True, db=db, cwd=os.path.join(HERE, "..", ".."))
print(f"{summary['study']}: {summary['status']}, {summary['trials']} trials, "
      f"{summary['steps_executed']} steps trained of {summary['steps_trial_based']} "
      f"trial by trial, {summary['wall_s']} s")
best = hippo.best(spec["name"], db=db)
print(f"best: trial {best['trial']} {best['params']}: {best['metric']} {best['value']:.4f}")

# %% The learning curves: one row per (trial, step, metric).
rows = [r for r in hippo.metrics(spec["name"], db=db) if r["metric"] == "accuracy"]
curves = {}
for r in rows:
    curves.setdefault(r["trial"], []).append((r["step"], r["value"]))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is None:
    print("(no matplotlib: apt-get install python3-matplotlib for a plot)")
    for trial, points in sorted(curves.items()):
        print(f"trial {trial:3d}: " + "  ".join(f"{s}: {v:.3f}" for s, v in points))
else:
    for trial, points in sorted(curves.items()):
        plt.plot(*zip(*points), marker="o", label=f"trial {trial}")
    plt.xlabel("step")
    plt.ylabel("accuracy")
    plt.legend(fontsize="small")
    plt.savefig(args.out, dpi=100)
    print(f"learning curves in {args.out}")
