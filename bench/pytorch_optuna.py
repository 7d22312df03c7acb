#!/usr/bin/python3
"""The anchor of bench/pytorch_vs_optuna.sh: Optuna runs a spec's grid trial by trial, training
each trial with the same PyTorch code as hippo's trainer (examples/pytorch/fashion_mnist.py:
data, model, step, evaluation, batches, seeds), as one of several processes (peers) that share one
study in a journal file (Optuna's JournalFileStorage, its recommended storage for processes on one
machine). Supports specs of the form of examples/pytorch/fmnist-mlp-lr-decay.json: a multistep
learning rate per epoch with one milestone, grids over its fields, constant other settings.

    pytorch_optuna.py SPEC JOURNAL STUDY --create        # once, before the peers start
    pytorch_optuna.py SPEC JOURNAL STUDY --worker PEER   # in each peer, PEER = 1 .. N
    pytorch_optuna.py SPEC JOURNAL STUDY --summary       # once they have ended

`--create` creates the study and enqueues every grid point once; each peer takes the next waiting
point until none is left (so no point is trained twice and none is skipped, whatever the number
of peers) and marks each trial with its peer number, so that a peer's claim can be checked
against the study. Each prints one JSON line.
"""
import itertools
import json
import os
import sys
import time
import warnings

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

    import optuna_grid  # bench/: the peers' loop over enqueued grid points
    spec_path, journal, name, mode = sys.argv[1:5]
    with open(spec_path) as f:
        spec = json.load(f)
    grid = grid_of(spec)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():  # experimental in Optuna 3.1, where it first came
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.JournalStorage(optuna.storages.JournalFileStorage(journal))
    if mode == "--create":
        study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
        points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
        for point in points:
            study.enqueue_trial(point)
        print(json.dumps({"grid_points": len(points)}))
        return
    if mode == "--summary":  # once every peer has ended
        done = optuna.load_study(study_name=name, storage=storage).get_trials(
            deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        per_peer = {}
        for t in done:
            per_peer[t.user_attrs["peer"]] = per_peer.get(t.user_attrs["peer"], 0) + 1
        best = max(done, key=lambda t: t.value, default=None)
        print(json.dumps({"trials": len(done), "per_peer": per_peer,
                          "grid_points_done": len({tuple(sorted(t.params.items())) for t in done}),
                          "best": best and best.value, "best_params": best and best.params}))
        return
    if mode != "--worker":
        raise SystemExit(f"pytorch_optuna.py: unknown mode {mode}; --create, --worker or --summary")
    peer = int(sys.argv[5])
    started = time.perf_counter()

    import torch  # noqa: F401  (the same imports as the trainer's; timed as its start is)

    import fashion_mnist as fm
    import hippo
    data = {"train_samples": spec["data"].get("train_samples", 60000),
            "eval_samples": spec["data"].get("eval_samples", 10000)}
    # The CPU, as hippo's CPU workers, or $BENCH_DEVICE (cuda:N: the GPU hippo's worker trains on).
    device = os.environ.get("BENCH_DEVICE", "cpu")
    x, y, x_eval, y_eval = fm.load_data(data, device)
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
        trial.set_user_attr("peer", peer)
        hippo.deterministic(threads=1)
        model = fm.build_model(fixed, seed).to(device)  # initialized on the CPU, as hippo's
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
    done = optuna_grid.run_enqueued(study, objective)
    print(json.dumps({"peer": peer, "pid": os.getpid(), "trials": done,
                      "wall_s": round(time.perf_counter() - started, 3), "steps": done * length}))


if __name__ == "__main__":
    main()
