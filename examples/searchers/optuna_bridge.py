#!/usr/bin/env python3
"""Optuna's samplers as a hippo external searcher, through Optuna's ask/tell interface (the
protocol is in searchers/README.md; Optuna is Debian's python3-optuna, 3.1).

    optuna_bridge.py [--sampler tpe|nsga2] [--population N]

  tpe    TPESampler: one objective, or several (Optuna's multi-objective TPE); the first STARTUP
         trials are drawn at random.
  nsga2  NSGAIISampler with a population of N (default 4): one objective or several.

Both take the spec's constraints through Optuna's constraints_func: hippo's violation (0 when
every constraint holds) is kept in the trial's user attribute "violation" before it is told.

Keeps up to PARALLEL trials open. Each is asked from an in-memory Optuna study over the spec's
space (directions from the spec's objectives, or its metric and mode) and trained to the spec's
full length; when it closes, the study is told the values of its last validation. A trial that
failed, or whose values are not all finite (hippo's worst values for a diverged trial), is told
FAIL. Finishes once max_trials (8 when the spec gives none) have closed.

A restarted master must see the same decisions. Each ask uses a sampler seeded by the study's seed
and the trial's number, so no random state outside the study matters; the state is every trial's
params, values, violation and status, and the order in which trials were asked and told: load
replays that order on a new study. The order matters to NSGA-II, which puts each trial asked in
the generation after the last one complete at that moment.
"""
import argparse
import json
import math
import sys
import warnings

import optuna

PARALLEL = 2
STARTUP = 4  # trials TPE draws at random before it models the results


def distribution(leaf):
    kind = leaf["kind"]
    if kind in ("grid", "choice"):
        return optuna.distributions.CategoricalDistribution(leaf["values"])
    lo, hi = leaf["range"]
    if kind == "int":
        return optuna.distributions.IntDistribution(lo, hi)
    return optuna.distributions.FloatDistribution(lo, hi, log=kind == "loguniform")


def number(v):
    """A value as hippo writes it: a number, or "inf", "-inf", "nan"; null when not finite."""
    return math.nan if v is None else float(v)


def violation_of(trial):
    return [trial.user_attrs["violation"]]


class Search:
    def __init__(self, study, options):
        self.options = options
        self.seed = study["seed"]
        self.total = study["max_trials"] or 8
        self.space = {leaf["name"]: distribution(leaf) for leaf in study["space"]}
        objectives = study.get("objectives") or [{"metric": study["metric"], "mode": study["mode"]}]
        directions = ["maximize" if o["mode"] == "max" else "minimize" for o in objectives]
        self.constrained = bool(study.get("constraints"))
        self.study = optuna.create_study(directions=directions)
        self.trials = []  # by hippo trial id: {"params", "values", "violation", "status"}
        self.order = []  # ["ask", id] and ["tell", id], as they happened
        self.asked = {}  # hippo trial id -> open Optuna trial

    def sampler(self, number):
        seed = (self.seed * 1000003 + number) % 2**32
        constraints = violation_of if self.constrained else None
        if self.options.sampler == "nsga2":
            return optuna.samplers.NSGAIISampler(
                population_size=self.options.population, seed=seed, constraints_func=constraints)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP,
                                          constraints_func=constraints)

    def ask(self, params=None):
        number = len(self.trials)
        self.study.sampler = self.sampler(number)
        if params is not None:
            self.study.enqueue_trial(params)
        self.asked[number] = self.study.ask(self.space)
        self.trials.append({"params": self.asked[number].params, "values": None, "violation": 0,
                            "status": "running"})
        self.order.append(["ask", number])
        return number

    def evaluated(self, event):
        t = self.trials[event["trial"]]
        t["values"] = event.get("values", [event["value"]])  # by objective
        t["violation"] = event.get("violation", 0)

    def tell(self, trial, status):
        t = self.trials[trial]
        values = [number(v) for v in t["values"] or [None]]
        t["status"] = status if all(math.isfinite(v) for v in values) else "failed"
        asked = self.asked.pop(trial)
        if t["status"] == "done":
            asked.set_user_attr("violation", number(t["violation"]))
            self.study.tell(asked, values)
        else:
            self.study.tell(asked, state=optuna.trial.TrialState.FAIL)
        self.order.append(["tell", trial])

    def fill(self):
        ops = []
        while len(self.trials) < self.total and len(self.asked) < PARALLEL:
            trial = self.ask()
            ops.append({"op": "create", "trial": trial, "params": self.trials[trial]["params"]})
            ops.append({"op": "train", "trial": trial, "length": "full"})
        if not self.asked:
            ops.append({"op": "finish"})
        return ops

    def state(self):
        return {"trials": self.trials, "order": self.order}

    def load(self, state):
        saved = state["trials"]
        for what, trial in state["order"]:
            if what == "ask":
                self.ask(saved[trial]["params"])
                continue
            self.trials[trial].update(values=saved[trial]["values"],
                                      violation=saved[trial]["violation"])
            self.tell(trial, saved[trial]["status"])
        for trial, t in enumerate(saved):  # values of open trials, validated but not yet told
            if t["status"] == "running":
                self.trials[trial].update(values=t["values"], violation=t["violation"])


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sampler", choices=["tpe", "nsga2"], default="tpe")
    parser.add_argument("--population", type=int, default=4, help="NSGA-II's population size")
    options = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a FAIL told is no news
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    search = None
    for line in sys.stdin:  # one event per line; exactly one reply each
        event = json.loads(line)
        kind = event["event"]
        reply = {"operations": []}
        if kind == "start":
            search = Search(event, options)
            reply = {"operations": search.fill()}
        elif kind == "load":
            search = Search(event, options)
            search.load(event["state"])
            reply = {"ok": True}
        elif kind == "save":
            reply = {"state": search.state()}
        elif kind == "validation":
            search.evaluated(event)
        elif kind in ("trial_closed", "trial_failed"):
            search.tell(event["trial"], "done" if kind == "trial_closed" else "failed")
            reply = {"operations": search.fill()}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
