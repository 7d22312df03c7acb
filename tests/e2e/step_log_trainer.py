#!/usr/bin/env python3
"""An external trainer that writes down every step it trains: the accounting tests compare the
steps trainers trained (this log) with what the plan counts (`steps_executed`) under faults.

It speaks the worker's trainer protocol (worker/README.md, "External trainers") with the standard
library alone: its "model" is one number x, pulled at each step toward a target drawn from
(seed, step) with the step's learning rate, so that a trial trained through shared stages equals
the trial trained alone, bit for bit. Each step takes HIPPO_TEST_STEP_SECONDS (default 0.01) and,
once trained, is appended to the file HIPPO_TEST_STEP_LOG (a line "from to step") before its
progress line is printed: the log never counts less than the trainer said.
"""
import json
import math
import os
import secrets
import sys
import time


def value_at(sequence, step):
    """The value of canonical segments at `step` (stagetree/sequence.h): constants and decays."""
    seg = [seg for seg in sequence["segments"] if seg["start"] <= step][-1]
    v0 = float(seg["v0"])
    if seg["kind"] == "constant":
        return v0
    if seg["kind"] == "exponential":
        return v0 * math.pow(seg["gamma"], float((step - seg["start"]) // seg["period"]))
    raise SystemExit("step_log_trainer: segments of kind %s are not supported" % seg["kind"])


def target(seed, step):
    return ((seed * 1000003 + step * 7919) % 9973) / 9973.0


def emit(line):
    print(json.dumps(line), flush=True)


def save(path, x, step):
    """Whole, to a temporary name nobody can guess, then renamed (worker/README.md)."""
    tmp = "%s.tmp.%s" % (path, secrets.token_hex(8))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"x": x.hex(), "step": step}, f)
    os.rename(tmp, path)


def main():
    stage = json.loads(sys.stdin.readline())
    first, last, seed = stage["from"], stage["to"], stage["seed"]
    lr = stage["hyperparameters"]["lr"]
    x = 0.0
    if stage.get("input_checkpoint"):
        with open(stage["input_checkpoint"]) as f:
            state = json.load(f)
        if state["step"] != first:
            raise SystemExit("step_log_trainer: the input checkpoint is at step %d" % state["step"])
        x = float.fromhex(state["x"])
    checkpoints = {c["step"]: c["path"] for c in stage["checkpoints"]}
    evals = set(stage["eval_steps"])
    seconds = float(os.environ.get("HIPPO_TEST_STEP_SECONDS", "0.01"))
    log = open(os.environ["HIPPO_TEST_STEP_LOG"], "a")
    if first == last and first in evals:
        emit({"step": first, "metric": "accuracy", "value": 1 - abs(x - 0.5)})
    for s in range(first, last):
        time.sleep(seconds)
        x = x + value_at(lr, s) * (target(seed, s) - x)
        step = s + 1
        log.write("%d %d %d\n" % (first, last, step))
        log.flush()
        if step in evals:
            emit({"step": step, "metric": "accuracy", "value": 1 - abs(x - 0.5)})
        if step in checkpoints:
            save(checkpoints[step], x, step)
            emit({"checkpoint": step})
        else:
            emit({"step": step})
    emit({"done": True})


if __name__ == "__main__":
    main()
