#!/usr/bin/env python3
"""Optuna's TPE sampler as a hippo external searcher, through Optuna's ask/tell interface (the
protocol is in searchers/README.md; Optuna is Debian's python3-optuna).

Keeps up to PARALLEL trials open. Each is asked from an in-memory Optuna study over the spec's
space and trained to the spec's full length; when it closes, the study is told the metric of its
last validation (a failed trial, or one without a value, is told FAIL). Finishes once max_trials
(8 when the spec gives none) have closed.

A restarted master must see the same decisions: the state is every trial's params, last value and
status, which load re-tells to a new study, and each ask uses a sampler seeded by the study's seed
and the trial's number, so that no random state outside the saved trials matters.
"""
import json
import sys

import optuna

PARALLEL = 2
STARTUP = 4  # trials drawn at random before TPE models the results


def distribution(leaf):
    kind = leaf["kind"]
    if kind in ("grid", "choice"):
        return optuna.distributions.CategoricalDistribution(leaf["values"])
    lo, hi = leaf["range"]
    if kind == "int":
        return optuna.distributions.IntDistribution(lo, hi)
    return optuna.distributions.FloatDistribution(lo, hi, log=kind == "loguniform")


class TpeSearch:
    def __init__(self, study):
        self.seed = study["seed"]
        self.total = study["max_trials"] or 8
        self.space = {leaf["name"]: distribution(leaf) for leaf in study["space"]}
        direction = "maximize" if study["mode"] == "max" else "minimize"
        self.study = optuna.create_study(direction=direction)
        self.trials = []  # by hippo trial id: {"params", "value", "status"}
        self.asked = {}  # hippo trial id -> open Optuna trial

    def ask(self, params=None):
        number = len(self.trials)
        self.study.sampler = optuna.samplers.TPESampler(
            seed=(self.seed * 1000003 + number) % 2**32, n_startup_trials=STARTUP)
        if params is not None:
            self.study.enqueue_trial(params)
        self.asked[number] = self.study.ask(self.space)
        self.trials.append({"params": self.asked[number].params, "value": None,
                            "status": "running"})
        return number

    def tell(self, trial, status):
        t = self.trials[trial]
        t["status"] = status if t["value"] is not None else "failed"
        if t["status"] == "done":
            self.study.tell(self.asked.pop(trial), t["value"])
        else:
            self.study.tell(self.asked.pop(trial), state=optuna.trial.TrialState.FAIL)

    def fill(self):
        ops = []
        while len(self.trials) < self.total and len(self.asked) < PARALLEL:
            trial = self.ask()
            ops.append({"op": "create", "trial": trial, "params": self.trials[trial]["params"]})
            ops.append({"op": "train", "trial": trial, "length": "full"})
        if not self.asked:
            ops.append({"op": "finish"})
        return ops

    def load(self, trials):
        for saved in trials:
            trial = self.ask(saved["params"])
            self.trials[trial]["value"] = saved["value"]
            if saved["status"] != "running":
                self.tell(trial, saved["status"])


def main():
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a FAIL told is no news
    search = None
    for line in sys.stdin:  # one event per line; exactly one reply each
        event = json.loads(line)
        kind = event["event"]
        reply = {"operations": []}
        if kind == "start":
            search = TpeSearch(event)
            reply = {"operations": search.fill()}
        elif kind == "load":
            search = TpeSearch(event)
            search.load(event["state"])
            reply = {"ok": True}
        elif kind == "save":
            reply = {"state": search.trials}
        elif kind == "validation":
            search.trials[event["trial"]]["value"] = event["value"]
        elif kind in ("trial_closed", "trial_failed"):
            search.tell(event["trial"], "done" if kind == "trial_closed" else "failed")
            reply = {"operations": search.fill()}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
