#!/usr/bin/env python3
"""Random search as a hippo external searcher, in plain Python (the protocol is in
searchers/README.md).

Keeps up to PARALLEL trials open, each drawn from the spec's space with a random.Random seeded by
the study's seed and trained to the spec's full length; finishes once max_trials (8 when the spec
gives none) have closed. Its state is the generator's state and two counters, so a restarted
master continues with the same trials.
"""
import json
import math
import random
import sys

PARALLEL = 4


def draw(rng, leaf):
    kind = leaf["kind"]
    if kind in ("grid", "choice"):
        return rng.choice(leaf["values"])
    lo, hi = leaf["range"]
    if kind == "int":
        return rng.randint(lo, hi)
    if kind == "loguniform":  # exp(log(x)) may round past the bounds
        return min(hi, max(lo, math.exp(rng.uniform(math.log(lo), math.log(hi)))))
    return rng.uniform(lo, hi)


class RandomSearch:
    def __init__(self, study):
        self.space = study["space"]
        self.total = study["max_trials"] or 8
        self.rng = random.Random(study["seed"])
        self.created = 0
        self.running = 0

    def fill(self):
        ops = []
        while self.created < self.total and self.running < PARALLEL:
            params = {leaf["name"]: draw(self.rng, leaf) for leaf in self.space}
            ops.append({"op": "create", "trial": self.created, "params": params})
            ops.append({"op": "train", "trial": self.created, "length": "full"})
            self.created += 1
            self.running += 1
        if self.running == 0:
            ops.append({"op": "finish"})
        return ops

    def save(self):
        return {"rng": self.rng.getstate(), "created": self.created, "running": self.running}

    def load(self, state):
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.created, self.running = state["created"], state["running"]


def main():
    search = None
    for line in sys.stdin:  # one event per line; exactly one reply each
        event = json.loads(line)
        kind = event["event"]
        if kind == "start":
            search = RandomSearch(event)
            reply = {"operations": search.fill()}
        elif kind == "load":
            search = RandomSearch(event)
            search.load(event["state"])
            reply = {"ok": True}
        elif kind == "save":
            reply = {"state": search.save()}
        elif kind in ("trial_closed", "trial_failed"):
            search.running -= 1
            reply = {"operations": search.fill()}
        else:  # validation: random search does not look at results
            reply = {"operations": []}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
