#!/usr/bin/python3
"""The anchor of bench/hpo_vs_optuna.sh: a study's trials trained one after another in PyTorch
(CPU) under Optuna's grid sampler, with the same model, data, batch, optimizer and learning-rate
schedule as the hippo spec. Supports the specs of the form of examples/fmnist-mlp-lr-decay.json
(an MLP, SGD with momentum, a multistep lr per epoch over grids, a constant weight decay).
Prints one JSON line: trials, wall_s, best accuracy, steps, per-trial overhead of Optuna."""
import gzip, itertools, json, sys, time

import numpy as np
import optuna
import torch
from torch import nn

DATA = "/usr/share/datasets/fashion-mnist"


def idx(name):
    with gzip.open(f"{DATA}/{name}", "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    spec = json.load(open(sys.argv[1]))
    threads = int(sys.argv[2])
    storage = sys.argv[3] if len(sys.argv) > 3 else None
    torch.set_num_threads(threads)
    train_n = spec["data"].get("train_samples", 60000)
    eval_n = spec["data"].get("eval_samples", 10000)
    x = torch.tensor(idx("train-images-idx3-ubyte.gz")[:train_n].reshape(train_n, -1) / 255.0,
                     dtype=torch.float32)
    y = torch.tensor(idx("train-labels-idx1-ubyte.gz")[:train_n].astype(np.int64))
    xe = torch.tensor(idx("t10k-images-idx3-ubyte.gz")[:eval_n].reshape(eval_n, -1) / 255.0,
                      dtype=torch.float32)
    ye = torch.tensor(idx("t10k-labels-idx1-ubyte.gz")[:eval_n].astype(np.int64))

    fixed = spec["fixed"]
    batch = fixed["batch_size"]
    epochs = spec["length"]["epochs"]
    steps_per_epoch = train_n // batch
    lr = spec["hyperparameters"]["lr"]
    grid = {"init": lr["init"]["grid"], "milestone": lr["milestones"][0]["grid"],
            "gamma": lr["gamma"]["grid"]}
    wd = spec["hyperparameters"].get("weight_decay", 0.0)

    def objective(trial):
        init = trial.suggest_categorical("init", grid["init"])
        milestone = trial.suggest_categorical("milestone", grid["milestone"])
        gamma = trial.suggest_categorical("gamma", grid["gamma"])
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
    study = optuna.create_study(direction="maximize", storage=storage,
                                sampler=optuna.samplers.GridSampler(grid, seed=0))
    trials = len(list(itertools.product(*grid.values())))
    start = time.perf_counter()
    study.optimize(objective, n_trials=trials)
    wall = time.perf_counter() - start

    # Optuna's own cost per trial: the same number of trials with an empty objective.
    empty = optuna.create_study(direction="maximize", storage=storage,
                                sampler=optuna.samplers.GridSampler(grid, seed=0))
    t0 = time.perf_counter()
    empty.optimize(lambda t: (t.suggest_categorical("init", grid["init"]),
                              t.suggest_categorical("milestone", grid["milestone"]),
                              t.suggest_categorical("gamma", grid["gamma"]), 0.0)[-1],
                   n_trials=trials)
    overhead_ms = 1000 * (time.perf_counter() - t0) / trials
    print(json.dumps({"trials": trials, "wall_s": round(wall, 3), "threads": threads,
                      "best": study.best_value, "steps": trials * epochs * steps_per_epoch,
                      "optuna_ms_per_trial": round(overhead_ms, 3)}))


if __name__ == "__main__":
    main()
