#!/usr/bin/env python3
"""An external trainer for hippo (worker/README.md, "External trainers"): softmax regression on
Fashion-MNIST with numpy, trained by SGD with momentum.

hippo's worker runs this once per stage. It reads the stage as one JSON line on stdin, resumes
from the input checkpoint (or initializes from the seed at step 0), trains steps [from, to) with
the learning rate of each step, prints the metrics of each evaluation step and announces each
checkpoint it writes, and ends with a done line. Everything is a pure function of (seed, step):
the initial weights come from the seed, the batch of step s from a permutation keyed by
(seed, epoch), and a checkpoint holds all the state (weights, momentum, step). So a trial trained
through shared stages, checkpoints and forks equals the same trial trained alone, bit for bit.
"""
import gzip
import json
import math
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread: same sums in every run
import numpy as np  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # as hippo's own engine standardizes


def read_images(name, count):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read(16 + count * 784)
    pixels = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(count, 784)
    return (pixels.astype(np.float64) / 255.0 - MEAN) / STD


def read_labels(name, count):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read(8 + count)
    return np.frombuffer(raw, dtype=np.uint8, offset=8).astype(np.int64)


def value_at(sequence, step):
    """A hyper-parameter's value at `step`, from the canonical segments the stage carries
    (worker/README.md): the formulas of stagetree/sequence.h in the same float operations, so the
    same bits as hippo's own engine (python/hippo's Stage.value does the same)."""
    if "text" in sequence:
        return sequence["text"]
    seg = [seg for seg in sequence["segments"] if seg["start"] <= step][-1]
    kind, start, v0 = seg["kind"], seg["start"], float(seg["v0"])
    if kind == "constant":
        return v0
    if kind == "exponential":
        try:
            return v0 * math.pow(seg["gamma"], float((step - start) // seg["period"]))
        except OverflowError:  # where C's pow gives infinity, Python's raises
            return v0 * math.inf
    length, v1 = float(seg["end"] - start), float(seg["v1"])
    if kind == "linear":
        return v0 + (v1 - v0) * float(step - start + 1) / length
    if kind == "cosine":
        return v1 + (v0 - v1) * (1 + math.cos(math.pi * float(step - start) / length)) / 2
    x = float(step - start) / length
    if kind == "linear-decay":
        return v0 + (v1 - v0) * x
    if kind == "cosine-decay":
        return v1 + (v0 - v1) * (1 + math.cos(math.pi * x)) / 2
    return v1 + (v0 - v1) * (1 - math.sqrt(x))  # 1-sqrt-decay


def emit(line):
    print(json.dumps(line), flush=True)


def main():
    stage = json.loads(sys.stdin.readline())
    first, last = stage["from"], stage["to"]
    seed = stage["seed"]
    fixed, sequences = stage["fixed"], stage["hyperparameters"]

    def setting(name, step, default=None):
        if name in sequences:
            return value_at(sequences[name], step)
        if name in fixed:
            return fixed[name]
        if default is None:
            raise SystemExit(f"external-trainer: the spec gives no {name}")
        return default

    if "batch_size" in sequences:
        raise SystemExit("external-trainer: batch_size must be fixed for this trainer")
    batch = int(setting("batch_size", first))
    n_train = stage["data"]["train_samples"]
    n_eval = stage["data"]["eval_samples"]
    steps_per_epoch = n_train // batch

    if stage["input_checkpoint"] is None:
        rng = np.random.default_rng([seed, 1])
        state = {"W": rng.normal(0.0, 0.01, size=(784, 10)), "b": np.zeros(10),
                 "vW": np.zeros((784, 10)), "vb": np.zeros(10), "step": np.int64(0)}
    else:
        with np.load(stage["input_checkpoint"]) as f:
            state = {k: f[k] for k in f.files}
    if int(state["step"]) != first:
        raise SystemExit(f"external-trainer: the input checkpoint is at step {int(state['step'])}, "
                         f"the stage starts at {first}")
    W, b, vW, vb = state["W"], state["b"], state["vW"], state["vb"]

    evals = set(stage["eval_steps"])
    checkpoints = {c["step"]: c["path"] for c in stage["checkpoints"]}
    x_train = read_images("train-images-idx3-ubyte.gz", n_train) if last > first else None
    y_train = read_labels("train-labels-idx1-ubyte.gz", n_train) if last > first else None
    x_eval = read_images("t10k-images-idx3-ubyte.gz", n_eval) if evals else None
    y_eval = read_labels("t10k-labels-idx1-ubyte.gz", n_eval) if evals else None

    def evaluate(step):
        logits = x_eval @ W + b
        logits -= logits.max(axis=1, keepdims=True)
        log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        loss = float(-log_p[np.arange(n_eval), y_eval].mean())
        accuracy = float((logits.argmax(axis=1) == y_eval).mean())
        emit({"step": step, "metric": "accuracy", "value": accuracy})
        emit({"step": step, "metric": "loss", "value": loss})

    def save(step, path):
        # A new file at an unpredictable name (O_EXCL|O_NOFOLLOW: whoever can write in the
        # directory cannot have a symlink followed there), the name the master's sweep knows.
        tmp = f"{path}.tmp.{os.urandom(8).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            np.savez(f, W=W, b=b, vW=vW, vb=vb, step=np.int64(step))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # readers see the old file or the whole new one
        emit({"checkpoint": step})

    if first in evals:
        evaluate(first)
    order, order_epoch = None, -1
    for s in range(first, last):
        epoch, offset = divmod(s, steps_per_epoch)
        if epoch != order_epoch:
            order, order_epoch = np.random.default_rng([seed, 2, epoch]).permutation(n_train), epoch
        rows = order[offset * batch:(offset + 1) * batch]
        x, y = x_train[rows], y_train[rows]
        logits = x @ W + b
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(batch), y] -= 1.0
        p /= batch
        gW = x.T @ p + setting("weight_decay", s, 0.0) * W
        gb = p.sum(axis=0)
        momentum, lr = setting("momentum", s, 0.0), setting("lr", s)
        vW = momentum * vW + gW
        vb = momentum * vb + gb
        W = W - lr * vW
        b = b - lr * vb
        step = s + 1
        if step in evals:
            evaluate(step)
        if step in checkpoints:
            save(step, checkpoints[step])
        elif step % 50 == 0:
            emit({"step": step})  # progress: the worker's heartbeats carry it to the master
    emit({"done": True})


if __name__ == "__main__":
    main()
