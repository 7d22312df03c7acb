#!/usr/bin/python3
"""A hippo trainer for Fashion-MNIST in PyTorch: an MLP (fixed.net "mlp", fixed.hidden: widths)
or a CNN (fixed.net "cnn", fixed.channels: conv widths, each a 3x3 conv, ReLU and 2x2 max-pool),
trained by SGD with momentum; lr, momentum and weight_decay may each follow a schedule.

hippo's worker runs it (the spec's model.command) and sends it stages; hippo.serve turns each into
the loop of train() below. Everything the result depends on is a function of (seed, step) or in
the checkpoint (weights, momentum buffers, generator states), so a trial trained through shared
stages equals the same trial trained alone, bit for bit. The functions above train() are plain
PyTorch; bench/pytorch_optuna.py trains with the same ones, trial by trial.
"""
import gzip
import os

import torch
from torch import nn

import hippo

MEAN, STD = 0.2860, 0.3530  # as hippo's own engine standardizes
_loaded = {}  # a long-lived trainer reads the data once


def read_idx(path, count, item_bytes, header):
    with gzip.open(path, "rb") as f:
        raw = f.read(header + count * item_bytes)
    return torch.frombuffer(bytearray(raw[header:]), dtype=torch.uint8)


def load_data(data, device):
    """(x_train, y_train, x_eval, y_eval) of the spec's data on `device`: train_samples and
    eval_samples of Fashion-MNIST from data.dir (default Debian's
    /usr/share/datasets/fashion-mnist)."""
    directory = data.get("dir", "/usr/share/datasets/fashion-mnist")
    n, m = data["train_samples"], data["eval_samples"]
    key = (directory, n, m, device)
    if key not in _loaded:
        def images(name, count):
            pixels = read_idx(os.path.join(directory, name), count, 784, 16).float()
            return ((pixels / 255.0 - MEAN) / STD).reshape(count, 1, 28, 28)

        def labels(name, count):
            return read_idx(os.path.join(directory, name), count, 1, 8).long()
        _loaded[key] = tuple(t.to(device) for t in (
            images("train-images-idx3-ubyte.gz", n), labels("train-labels-idx1-ubyte.gz", n),
            images("t10k-images-idx3-ubyte.gz", m), labels("t10k-labels-idx1-ubyte.gz", m)))
    return _loaded[key]


def build_model(fixed, seed):
    """The network of the fixed settings, initialized from the seed."""
    torch.manual_seed(hippo.mix(seed, 0x1417) & ((1 << 63) - 1))
    if fixed.get("net", "mlp") == "cnn":
        layers, width, size = [], 1, 28
        for channels in fixed.get("channels", [16, 32]):
            layers += [nn.Conv2d(width, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
            width, size = channels, size // 2
        return nn.Sequential(*layers, nn.Flatten(), nn.Linear(width * size * size, 10))
    layers, width = [nn.Flatten()], 784
    for hidden in fixed.get("hidden", [256, 128]):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, 10))


def train_step(model, optimizer, x, y, lr, momentum, weight_decay):
    """One SGD step on the batch (x, y) with this step's settings."""
    for group in optimizer.param_groups:
        group.update(lr=lr, momentum=momentum, weight_decay=weight_decay)
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()


@torch.no_grad()
def evaluate(model, x, y, batch=1000):
    """accuracy and mean cross-entropy on (x, y), summed in a fixed order."""
    correct, loss = 0, 0.0
    for i in range(0, len(x), batch):
        logits = model(x[i:i + batch])
        loss += nn.functional.cross_entropy(logits, y[i:i + batch], reduction="sum").item()
        correct += (logits.argmax(1) == y[i:i + batch]).sum().item()
    return {"accuracy": correct / len(x), "loss": loss / len(x)}


def train(stage):
    hippo.deterministic()  # the worker's --threads; on a GPU, its deterministic kernels
    x, y, x_eval, y_eval = load_data(stage.data, stage.device)
    model = build_model(stage.fixed, stage.seed).to(stage.device)  # initialized on the CPU
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)
    state = hippo.torch_state(model=model, optimizer=optimizer)
    stage.restore(state.load)
    batches = hippo.BatchSampler(len(x), stage.value("batch_size", stage.start), stage.seed)
    for step in stage.steps(evaluate=lambda: evaluate(model, x_eval, y_eval), save=state.save):
        rows = batches(step)
        train_step(model, optimizer, x[rows], y[rows], stage.value("lr", step),
                   stage.value("momentum", step, 0.0), stage.value("weight_decay", step, 0.0))


if __name__ == "__main__":
    hippo.serve(train)
