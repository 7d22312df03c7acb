#!/usr/bin/python3
"""The anchor of bench/asha_vs_optuna.sh: what an Optuna user would run instead of hippo's ASHA.
Optuna's TPESampler with its HyperbandPruner (or, with --pruner sha, its
SuccessiveHalvingPruner), several processes on one study in a
JournalFileStorage (Optuna's recommended storage for processes on one machine), PyTorch (CPU)
training the same model, data (standardized as hippo does), batch, optimizer, learning-rate
schedule and search space as the hippo spec, reporting the validation accuracy at the spec's
evaluation steps. Supports specs of the form of bench/specs/asha-warmup-exponential.json: an MLP,
SGD with momentum, lr = a linear warm-up to a fixed value, then an exponential decay per epoch
whose init (loguniform) and gamma (uniform) are drawn; searcher asha.

  optuna_asha.py SPEC --journal J --prepare                  # creates the study (before workers)
  optuna_asha.py SPEC --journal J --worker I --trials N --tickets DIR [--pruner sha]
                                                   # several at once, I = 0, 1, ...
  optuna_asha.py SPEC --journal J --summary

Each mode prints one JSON line. Times are time.time() (seconds since the epoch), so that the
shell script can put them on the same clock as hippo's plan.
"""
import argparse
import json
import os
import time
import warnings

import numpy as np
import optuna

from optuna_grid import idx, images  # the same Fashion-MNIST reading and standardization

STUDY = "asha_vs_optuna"


def space_of(spec):
    """The schedule's fixed and drawn parts, refusing any spec this anchor does not mirror."""
    lr = spec["hyperparameters"]["lr"]
    after = lr.get("after", {})
    searcher = spec["searcher"]
    if (lr.get("schedule") != "warmup_linear" or lr.get("unit") != "epoch"
            or after.get("schedule") != "exponential" or after.get("unit", "epoch") != "epoch"
            or list(after["init"]) != ["loguniform"] or list(after["gamma"]) != ["uniform"]
            or searcher["name"] != "asha" or searcher["metric"] != "accuracy"
            or searcher["mode"] != "max" or spec["model"]["type"] != "mlp"
            or spec["fixed"].get("optimizer", "sgd") != "sgd"
            or set(spec["hyperparameters"]) != {"lr"}):
        raise SystemExit("error: optuna_asha.py mirrors only a spec of the form of "
                         "bench/specs/asha-warmup-exponential.json")
    return {"warm_lr": lr["init"], "warm_epochs": lr["warmup"],
            "init": after["init"]["loguniform"], "gamma": after["gamma"]["uniform"]}


def shape_of(spec):
    train_n = spec["data"]["train_samples"]
    steps_per_epoch = train_n // spec["fixed"]["batch_size"]
    s = spec["searcher"]
    return {"train_n": train_n, "eval_n": spec["data"]["eval_samples"],
            "steps_per_epoch": steps_per_epoch,
            "length": spec["length"]["epochs"] * steps_per_epoch,
            "eval_every": spec["eval"]["every"]["epochs"] * steps_per_epoch,
            "min_resource": s["min_length"]["epochs"] * steps_per_epoch,
            "max_resource": s.get("max_length", spec["length"])["epochs"] * steps_per_epoch,
            "eta": s.get("eta", 3)}


def storage_of(journal):
    with warnings.catch_warnings():  # JournalStorage is "experimental" in Optuna 3.1
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.JournalStorage(optuna.storages.JournalFileStorage(journal))


def pruner_of(shape, name):
    # Resources are training steps, as hippo's rungs: min_length, times eta, up to max_length.
    # HyperbandPruner is what Optuna's documentation pairs with TPE; its most aggressive bracket
    # is hippo's rung structure, its others start later. SuccessiveHalvingPruner is that bracket
    # alone (ASHA), the closest match of hippo's searcher.
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=shape["min_resource"],
                                              max_resource=shape["max_resource"],
                                              reduction_factor=shape["eta"])
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=shape["min_resource"],
                                                  reduction_factor=shape["eta"])


def prepare(journal):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(study_name=STUDY, storage=storage_of(journal), direction="maximize")
    print(json.dumps({"study": STUDY}))


def worker(spec, journal, index, trials, tickets, pruner):
    # PyTorch is imported only where it trains, so that --prepare and --summary start fast.
    import torch
    from torch import nn
    torch.set_num_threads(1)
    start = time.time()
    space, shape = space_of(spec), shape_of(spec)
    train_n, steps_per_epoch = shape["train_n"], shape["steps_per_epoch"]
    x = torch.tensor(images("train-images-idx3-ubyte.gz", train_n))
    y = torch.tensor(idx("train-labels-idx1-ubyte.gz")[:train_n].astype(np.int64))
    xe = torch.tensor(images("t10k-images-idx3-ubyte.gz", shape["eval_n"]))
    ye = torch.tensor(idx("t10k-labels-idx1-ubyte.gz")[:shape["eval_n"]].astype(np.int64))
    batch, seed = spec["fixed"]["batch_size"], spec["seed"]
    warm_steps = space["warm_epochs"] * steps_per_epoch

    def lr_at(s, init, gamma):  # hippo's warmup_linear then exponential, step by step (spec.md)
        if s < warm_steps:
            return space["warm_lr"] * (s + 1) / warm_steps
        return init * gamma ** ((s - warm_steps) // steps_per_epoch)

    def objective(trial):
        init = trial.suggest_float("lr.after.init", *space["init"], log=True)
        gamma = trial.suggest_float("lr.after.gamma", *space["gamma"])
        # Every trial starts from the same weights and sees the same data order (per seed and
        # epoch), as hippo's trials of one root key do.
        torch.manual_seed(seed)
        layers, width = [], 784
        for h in spec["model"]["hidden"]:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        model = nn.Sequential(*layers, nn.Linear(width, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.0,
                              momentum=spec["fixed"].get("momentum", 0.0))
        loss_fn = nn.CrossEntropyLoss()
        g = torch.Generator().manual_seed(seed)
        reported, trained = [], 0
        try:
            for s in range(shape["length"]):
                if s % steps_per_epoch == 0:
                    order = torch.randperm(train_n, generator=g)
                for group in opt.param_groups:
                    group["lr"] = lr_at(s, init, gamma)
                i = order[(s % steps_per_epoch) * batch:(s % steps_per_epoch + 1) * batch]
                opt.zero_grad(set_to_none=True)
                loss_fn(model(x[i]), y[i]).backward()
                opt.step()
                trained = s + 1
                if trained % shape["eval_every"] == 0 or trained == shape["length"]:
                    with torch.no_grad():
                        acc = (model(xe).argmax(1) == ye).float().mean().item()
                    trial.report(acc, trained)
                    reported.append([trained, acc, time.time()])
                    if trial.should_prune():
                        raise optuna.TrialPruned()
            return acc
        finally:
            trial.set_user_attr("steps", trained)
            trial.set_user_attr("reports", reported)  # [step, accuracy, time.time()] each

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=STUDY, storage=storage_of(journal),
                              sampler=optuna.samplers.TPESampler(seed=seed + index),
                              pruner=pruner_of(shape, pruner))
    # Trials are claimed by creating ticket files (O_EXCL is atomic), so the processes run exactly
    # `trials` in all and none idles while trials are left: a fixed split per process leaves one
    # idle at the end, and MaxTrialsCallback, checked after a trial ends, overshoots.
    done = 0
    for ticket in range(trials):
        try:
            os.close(os.open(os.path.join(tickets, str(ticket)), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            continue
        study.optimize(objective, n_trials=1)
        done += 1
    print(json.dumps({"worker": index, "sampler_seed": seed + index, "pruner": pruner,
                      "trials": done,
                      "wall_s": round(time.time() - start, 3)}))


def summary(journal):
    study = optuna.load_study(study_name=STUDY, storage=storage_of(journal))
    trials = study.get_trials(deepcopy=False)
    states = [t.state.name.lower() for t in trials]
    # Every evaluation of every trial, pruned ones included, as hippo's `best` counts them.
    reports = sorted([r[2], r[1]] for t in trials for r in t.user_attrs.get("reports", []))
    print(json.dumps({"trials": len(trials), "complete": states.count("complete"),
                      "pruned": states.count("pruned"),
                      "other": len(trials) - states.count("complete") - states.count("pruned"),
                      "steps": sum(t.user_attrs.get("steps", 0) for t in trials),
                      "best": max((a for _, a in reports), default=None),
                      "reports": reports}))  # [time, accuracy], in time order


def main():
    p = argparse.ArgumentParser()
    p.add_argument("spec")
    p.add_argument("--journal", required=True, help="the JournalFileStorage file")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prepare", action="store_true")
    mode.add_argument("--worker", type=int, metavar="INDEX")
    mode.add_argument("--summary", action="store_true")
    p.add_argument("--trials", type=int, help="trials of the whole study (--worker)")
    p.add_argument("--tickets", help="a directory shared by the workers (--worker)")
    p.add_argument("--pruner", choices=("hyperband", "sha"), default="hyperband",
                   help="HyperbandPruner or SuccessiveHalvingPruner (--worker)")
    a = p.parse_args()
    with open(a.spec) as f:
        spec = json.load(f)
    space_of(spec)
    if a.prepare:
        prepare(a.journal)
    elif a.worker is not None:
        if a.trials is None or a.tickets is None:
            p.error("--worker needs --trials and --tickets")
        worker(spec, a.journal, a.worker, a.trials, a.tickets, a.pruner)
    else:
        summary(a.journal)


if __name__ == "__main__":
    main()
