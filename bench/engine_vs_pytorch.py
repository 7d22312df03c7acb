#!/usr/bin/env python3
"""Training throughput of the reference MLP or CNN in PyTorch on CPU, for engine_vs_pytorch.sh.

Same model, batch, optimizer (SGD, momentum 0.9) and thread count as bench_engine; random inputs
(PyTorch's speed does not depend on the values). Prints one JSON line like bench_engine's.
"""
import argparse
import json
import time

import torch
import torch.nn as nn


def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = model(a.model)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(m(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    elapsed = time.perf_counter() - start
    print(json.dumps({"model": a.model, "batch": a.batch, "threads": a.threads,
                      "samples_per_s": a.batch * a.steps / elapsed}))


if __name__ == "__main__":
    main()
