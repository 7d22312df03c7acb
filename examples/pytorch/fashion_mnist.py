#!/usr/bin/python3
"""A hippo trainer for Fashion-MNIST in PyTorch: an MLP (fixed.net "mlp", fixed.hidden: widths)
or a CNN (fixed.net "cnn", fixed.channels: conv widths, each a 3x3 conv, BatchNorm if
fixed.batch_norm, ReLU and 2x2 max-pool; fixed.dropout before the last layer), trained by SGD
with momentum; lr, momentum and weight_decay may each follow a schedule.

hippo's worker runs it (the spec's model.command) and sends it stages; hippo.serve turns each into
the loop of train() below. It is long-lived and pays its setup once: setup() puts the data on the
device once per process, build() makes the model and optimizer once, and each stage loads its
parent state into them (hippo.serve(train, setup=setup, build=build)). Everything the result depends on is a function of (seed, step) or in
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

    def images(name, count):
        pixels = read_idx(os.path.join(directory, name), count, 784, 16).float()
        return ((pixels / 255.0 - MEAN) / STD).reshape(count, 1, 28, 28)

    def labels(name, count):
        return read_idx(os.path.join(directory, name), count, 1, 8).long()
    return tuple(t.to(device) for t in (
        images("train-images-idx3-ubyte.gz", n), labels("train-labels-idx1-ubyte.gz", n),
        images("t10k-images-idx3-ubyte.gz", m), labels("t10k-labels-idx1-ubyte.gz", m)))


def build_model(fixed, seed):
    """The network of the fixed settings, initialized from the seed."""
    torch.manual_seed(hippo.mix(seed, 0x1417) & ((1 << 63) - 1))
    if fixed.get("net", "mlp") == "cnn":
        layers, width, size = [], 1, 28
        for channels in fixed.get("channels", [16, 32]):
            layers += [nn.Conv2d(width, channels, 3, padding=1)]
            layers += [nn.BatchNorm2d(channels)] if fixed.get("batch_norm") else []
            layers += [nn.ReLU(), nn.MaxPool2d(2)]
            width, size = channels, size // 2
        dropout = [nn.Dropout(fixed["dropout"])] if fixed.get("dropout") else []
        return nn.Sequential(*layers, nn.Flatten(), *dropout, nn.Linear(width * size * size, 10))
    layers, width = [nn.Flatten()], 784
    for hidden in fixed.get("hidden", [256, 128]):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, 10))


def train_step(model, optimizer, x, y, lr, momentum, weight_decay):
    """One SGD step on the batch (x, y) with this step's settings (dropout draws from torch's
    generator, whose state the checkpoints keep)."""
    model.train()
    for group in optimizer.param_groups:
        group.update(lr=lr, momentum=momentum, weight_decay=weight_decay)
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()


@torch.no_grad()
def evaluate(model, x, y, batch=1000):
    """accuracy and mean cross-entropy on (x, y), summed in a fixed order on x's device (read
    once at the end)."""
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=x.device)
    loss = torch.zeros((), dtype=torch.float64, device=x.device)
    for i in range(0, len(x), batch):
        logits = model(x[i:i + batch])
        loss += nn.functional.cross_entropy(logits, y[i:i + batch], reduction="sum").double()
        correct += (logits.argmax(1) == y[i:i + batch]).sum()
    return {"accuracy": correct.item() / len(x), "loss": loss.item() / len(x)}


def setup(stage):  # once per trainer process
    hippo.deterministic()  # the worker's --threads; on a GPU, its deterministic kernels
    return load_data(stage.data, stage.device)


def build(stage):  # once per architecture: every stage loads its parent state into these
    model = build_model(stage.fixed, stage.seed).to(stage.device)  # initialized on the CPU
    return {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)}


def train(stage):
    x, y, x_eval, y_eval = stage.prepared
    model, optimizer = stage.objects["model"], stage.objects["optimizer"]
    batches = hippo.BatchSampler(len(x), stage.value("batch_size", stage.start), stage.seed)
    for step in stage.steps(evaluate=lambda: evaluate(model, x_eval, y_eval)):
        rows = batches(step)
        train_step(model, optimizer, x[rows], y[rows], stage.value("lr", step),
                   stage.value("momentum", step, 0.0), stage.value("weight_decay", step, 0.0))


if __name__ == "__main__":
    hippo.serve(train, setup=setup, build=build)
