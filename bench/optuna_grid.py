#!/usr/bin/python3
"""The anchor of bench/hpo_vs_optuna.sh: Optuna's distributed mode with PyTorch (CPU) training,
the same model, data (standardized as hippo does), batch, optimizer and learning-rate schedule as
the hippo spec. Supports specs of the form of examples/fmnist-mlp-lr-decay.json (an MLP, SGD with
momentum, a multistep lr per epoch over grids, a constant weight decay).

Several processes share one study in one journal file (Optuna's JournalFileStorage, which its
documentation recommends for processes on one machine; several processes on one SQLite file race
on it), as Optuna users parallelize on one machine. `--prepare` creates the study and enqueues
every grid point once (Optuna's enqueue_trial), before any worker starts; each `--worker PEER`
process then takes the next waiting point until none is left, so no point is trained twice
(GridSampler alone may evaluate a point twice under distributed optimization, its documentation
says), and marks each trial with its peer number so that a peer's claim can be checked against
the study. `--summary` prints the study's result, its completed trials in all, per peer and per
distinct point, and Optuna's own cost per trial (as many trials as the grid has points, with an
empty objective, in the same storage). Each mode prints one JSON line.

  optuna_grid.py SPEC --journal s.log --prepare
  optuna_grid.py SPEC --journal s.log --worker 1 --threads 1   # peers 1 .. N at once
  optuna_grid.py SPEC --journal s.log --summary
"""
import argparse
import gzip
import itertools
import json
import os
import time
import warnings

import numpy as np
import optuna

DATA = "/usr/share/datasets/fashion-mnist"
STUDY = "hpo_vs_optuna"
MEAN, STD = 0.2860, 0.3530  # as hippo's data loader (worker/engine/image_network.cc)


def idx(name):

    with gzip.open(f"{DATA}/{name}", "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def images(name, n):
    x = idx(name)[:n].reshape(n, -1).astype(np.float32) / 255.0
    return (x - MEAN) / STD


def grid_of(spec):
    lr = spec["hyperparameters"]["lr"]
    return {"init": lr["init"]["grid"], "milestone": lr["milestones"][0]["grid"],
            "gamma": lr["gamma"]["grid"]}


def points_of(grid):
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def journal(path):
    with warnings.catch_warnings():  # experimental in Optuna 3.1, where it first came
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.JournalStorage(optuna.storages.JournalFileStorage(path))


def prepare(spec, storage):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        optuna.delete_study(study_name=STUDY, storage=storage)
    except KeyError:
        pass
    grid = grid_of(spec)
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize",
                                sampler=optuna.samplers.GridSampler(grid, seed=0))
    points = points_of(grid)
    for point in points:
        study.enqueue_trial(point)
    print(json.dumps({"enqueued": len(points)}))


def ask_waiting(study):
    """study.ask(), past a race of Optuna 3.1's journal storage: when another peer takes and
    finishes a waiting point between this peer's read of the waiting points and its claim, the
    claim raises RuntimeError ("Trial#N has already finished and can not be updated") instead
    of moving on to the next point. The claim is then a no-op in the journal, so asking again is
    safe; each such error means one more point finished elsewhere, so the retries are bounded by
    the number of trials. Returns None when the bound is spent."""
    for _ in range(len(study.get_trials(deepcopy=False)) + 1):
        try:
            return study.ask()
        except RuntimeError as error:
            if "has already finished" not in str(error):
                raise
    return None


def run_enqueued(study, objective):
    """Trains the study's enqueued grid points until none waits (other peers take them too, so
    no point is trained twice); returns how many this process completed."""
    waiting = (optuna.trial.TrialState.WAITING,)
    done = 0
    while study.get_trials(deepcopy=False, states=waiting):
        trial = ask_waiting(study)
        if trial is None:  # every point this peer tried to take was finished by another
            break
        with warnings.catch_warnings():  # Trial.system_attrs is deprecated, not yet replaced
            warnings.simplefilter("ignore", FutureWarning)
            taken = "fixed_params" not in trial.system_attrs
        if taken:  # another peer took the last point: this trial is not one of the grid
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            break
        study.tell(trial, objective(trial))
        done += 1
    return done


def worker(spec, storage, peer, threads):
    # PyTorch is imported only where it trains, so that --prepare and --summary start fast.
    import torch
    from torch import nn
    torch.set_num_threads(threads)
    start = time.perf_counter()
    train_n = spec["data"].get("train_samples", 60000)
    eval_n = spec["data"].get("eval_samples", 10000)
    x = torch.tensor(images("train-images-idx3-ubyte.gz", train_n))
    y = torch.tensor(idx("train-labels-idx1-ubyte.gz")[:train_n].astype(np.int64))
    xe = torch.tensor(images("t10k-images-idx3-ubyte.gz", eval_n))
    ye = torch.tensor(idx("t10k-labels-idx1-ubyte.gz")[:eval_n].astype(np.int64))

    fixed = spec["fixed"]
    batch = fixed["batch_size"]
    epochs = spec["length"]["epochs"]
    steps_per_epoch = train_n // batch
    grid = grid_of(spec)
    wd = spec["hyperparameters"].get("weight_decay", 0.0)

    def objective(trial):
        init = trial.suggest_categorical("init", grid["init"])
        milestone = trial.suggest_categorical("milestone", grid["milestone"])
        gamma = trial.suggest_categorical("gamma", grid["gamma"])
        trial.set_user_attr("peer", peer)
        torch.manual_seed(spec.get("seed", 0))
        layers, width = [], 784
        for h in spec["model"]["hidden"]:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        model = nn.Sequential(*layers, nn.Linear(width, 10))
        opt = torch.optim.SGD(model.parameters(), lr=init, momentum=fixed.get("momentum", 0),
                              weight_decay=wd)
        loss_fn = nn.CrossEntropyLoss()
        g = torch.Generator().manual_seed(spec.get("seed", 0))
        acc = 0.0
        for epoch in range(epochs):
            for group in opt.param_groups:
                group["lr"] = init * (gamma if epoch >= milestone else 1.0)
            order = torch.randperm(train_n, generator=g)
            for s in range(steps_per_epoch):
                i = order[s * batch:(s + 1) * batch]
                opt.zero_grad(set_to_none=True)
                loss_fn(model(x[i]), y[i]).backward()
                opt.step()
            with torch.no_grad():
                acc = (model(xe).argmax(1) == ye).float().mean().item()
            trial.report(acc, (epoch + 1) * steps_per_epoch)
        return acc

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=STUDY, storage=storage,
                              sampler=optuna.samplers.GridSampler(grid, seed=0))
    done = run_enqueued(study, objective)
    print(json.dumps({"peer": peer, "pid": os.getpid(), "trials": done, "threads": threads,
                      "wall_s": round(time.perf_counter() - start, 3)}))


def summary(spec, storage):
    study = optuna.load_study(study_name=STUDY, storage=storage)
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    train_n = spec["data"].get("train_samples", 60000)
    steps = len(complete) * spec["length"]["epochs"] * (train_n // spec["fixed"]["batch_size"])
    per_peer = {}
    for t in complete:
        per_peer[t.user_attrs["peer"]] = per_peer.get(t.user_attrs["peer"], 0) + 1
    best = max(complete, key=lambda t: t.value, default=None)

    # Optuna's own cost per trial: as many trials as the grid has points, with an empty
    # objective, in the same storage.
    grid = grid_of(spec)
    n = len(points_of(grid))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    empty = optuna.create_study(study_name=STUDY + "_empty", storage=storage,
                                direction="maximize", load_if_exists=True,
                                sampler=optuna.samplers.GridSampler(grid, seed=0))
    t0 = time.perf_counter()
    empty.optimize(lambda t: (t.suggest_categorical("init", grid["init"]),
                              t.suggest_categorical("milestone", grid["milestone"]),
                              t.suggest_categorical("gamma", grid["gamma"]), 0.0)[-1],
                   n_trials=n)
    overhead_ms = 1000 * (time.perf_counter() - t0) / n
    print(json.dumps({"trials": len(complete), "per_peer": per_peer,
                      "grid_points_done": len({tuple(sorted(t.params.items())) for t in complete}),
                      "best": best and best.value, "best_params": best and best.params,
                      "steps": steps, "optuna_ms_per_trial": round(overhead_ms, 3)}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("spec")
    p.add_argument("--journal", required=True, help="the study's journal file")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prepare", action="store_true")
    mode.add_argument("--worker", type=int, metavar="PEER", help="this peer's number, 1 .. N")
    mode.add_argument("--summary", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    with open(a.spec) as f:
        spec = json.load(f)
    storage = journal(a.journal)
    if a.prepare:
        prepare(spec, storage)
    elif a.worker is not None:
        worker(spec, storage, a.worker, a.threads)
    else:
        summary(spec, storage)


if __name__ == "__main__":
    main()
