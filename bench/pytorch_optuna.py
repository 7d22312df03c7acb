#!/usr/bin/python3
"""The anchor of bench/pytorch_vs_optuna.sh: Optuna runs a spec's grid trial by trial, training
each trial with the same PyTorch code as hippo's trainer (examples/pytorch/fashion_mnist.py:
data, model, step, evaluation, batches, seeds), as one of several processes that share one
SQLite study (Optuna's distributed mode). Supports specs of the form of
examples/pytorch/fmnist-mlp-lr-decay.json: a multistep learning rate per epoch with one
milestone, grids over its fields, constant other settings.

    pytorch_optuna.py SPEC STORAGE STUDY --create      # once, before the workers
    pytorch_optuna.py SPEC STORAGE STUDY TRIALS        # in each process: TRIALS trials
    pytorch_optuna.py SPEC STORAGE STUDY --summary     # once they have ended

Each prints one JSON line.
"""
import itertools
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "pytorch"))


def grid_of(spec):
    lr = spec["hyperparameters"]["lr"]
    values = lambda v: v["grid"] if isinstance(v, dict) else [v]  # noqa: E731
    if lr.get("schedule") != "multistep" or len(lr["milestones"]) != 1:
        raise SystemExit("pytorch_optuna.py: supports a multistep lr with one milestone")
    return {"lr.init": values(lr["init"]), "lr.milestones[0]": values(lr["milestones"][0]),
            "lr.gamma": values(lr["gamma"])}


def main():
    import optuna
    spec_path, storage, name = sys.argv[1:4]
    with open(spec_path) as f:
        spec = json.load(f)
    grid = grid_of(spec)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if sys.argv[4] == "--create":
        optuna.create_study(study_name=name, storage=storage, direction="maximize")
        print(json.dumps({"grid_points": len(list(itertools.product(*grid.values())))}))
        return
    if sys.argv[4] == "--summary":  # once every process has ended
        done = [t for t in optuna.load_study(study_name=name, storage=storage).trials
                if t.value is not None]
        best = max(done, key=lambda t: t.value)
        print(json.dumps({"trials": len(done),
                          "grid_points_done": len({tuple(sorted(t.params.items())) for t in done}),
                          "best": best.value, "best_params": best.params}))
        return
    trials = int(sys.argv[4])
    started = time.perf_counter()

    import torch  # noqa: F401  (the same imports as the trainer's; timed as its start is)

    import fashion_mnist as fm
    import hippo
    data = {"train_samples": spec["data"].get("train_samples", 60000),
            "eval_samples": spec["data"].get("eval_samples", 10000)}
    x, y, x_eval, y_eval = fm.load_data(data)
    fixed, seed = spec["fixed"], spec.get("seed", 0)
    hp = spec["hyperparameters"]
    batch = fixed["batch_size"]
    unit = len(x) // batch  # steps per epoch
    length = spec["length"]["epochs"] * unit
    every = spec["eval"]["every"]["epochs"] * unit

    def objective(trial):
        init = trial.suggest_categorical("lr.init", grid["lr.init"])
        milestone = trial.suggest_categorical("lr.milestones[0]", grid["lr.milestones[0]"])
        gamma = trial.suggest_categorical("lr.gamma", grid["lr.gamma"])
        hippo.deterministic(threads=1)
        model = fm.build_model(fixed, seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)
        batches = hippo.BatchSampler(len(x), batch, seed)
        accuracy = 0.0
        for step in range(length):
            lr = init * gamma if step >= milestone * unit else init
            rows = batches(step)
            fm.train_step(model, optimizer, x[rows], y[rows], lr, fixed.get("momentum", 0.0),
                          hp.get("weight_decay", fixed.get("weight_decay", 0.0)))
            if (step + 1) % every == 0 or step + 1 == length:
                accuracy = fm.evaluate(model, x_eval, y_eval)["accuracy"]
                trial.report(accuracy, step + 1)
        return accuracy

    study = optuna.load_study(study_name=name, storage=storage,
                              sampler=optuna.samplers.GridSampler(grid, seed=0))
    study.optimize(objective, n_trials=trials)
    print(json.dumps({"pid": os.getpid(), "trials": trials,
                      "wall_s": round(time.perf_counter() - started, 3), "steps": trials * length}))


if __name__ == "__main__":
    main()
