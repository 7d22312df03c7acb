#!/usr/bin/env python3
"""Training throughput of the reference MLP or CNN in PyTorch eager on a GPU, for gpu_vs_pytorch.sh.

The same work per step as `bench_engine --device cuda:0`: a batch gathered on the host from a
60000-image uint8 set in a shuffled order, scaled and standardized there, copied to the GPU
(pinned, asynchronous), then forward, backward and an SGD step (momentum 0.9) on the GPU. fp32
runs without TF32 (hippo's fp32 products do not use it); bf16 is autocast (bf16 products and
convolutions, fp32 weights and optimizer), as hippo's `precision: bf16`. `--deterministic` also
sets torch.backends.cudnn.deterministic (cuDNN's deterministic algorithms only, as
hippo.deterministic() does and as hippo's engine always runs). Timed with CUDA events
around `steps` steps after `warmup` untimed ones; prints one JSON line like bench_engine's.

For the ceiling that gpu_vs_pytorch.sh prints beside the ratio: the line also carries the product
and convolution FLOPs of one training step per sample (`flops_per_sample`: PyTorch's
FlopCounterMode over one more step after the timed ones, forward and backward), and `--peak`
prints the GPU's dense matrix-product FLOP/s at the precision instead (an 8192^3 product, the mean
of 10 after 3 warm-ups): no model of this kind trains faster than peak / flops samples/s on it.
"""
import argparse
import json

import torch

from engine_vs_pytorch import model  # the same MLP and CNN as the CPU comparison


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--peak", action="store_true", help="print the GPU's product FLOP/s")
    p.add_argument("--deterministic", action="store_true",
                   help="cuDNN's deterministic algorithms only")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = a.deterministic
    torch.manual_seed(0)
    dev = torch.device("cuda:0")
    if a.peak:
        print(json.dumps({"precision": a.precision, "peak_flops": product_peak(a.precision, dev)}))
        return
    m = model(a.model).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randint(0, 256, (60000, 1, 28, 28), dtype=torch.uint8)
    labels = torch.randint(0, 10, (60000,))
    order = torch.randperm(60000)
    position = 0

    def step():
        nonlocal position
        if position + a.batch > 60000:
            position = 0
        idx = order[position:position + a.batch]
        position += a.batch
        x = ((images[idx].float() / 255.0 - 0.2860) / 0.3530).pin_memory()
        y = labels[idx].pin_memory()
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = loss_fn(m(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(a.steps):
        step()
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000.0
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        step()
    print(json.dumps({"model": a.model, "batch": a.batch, "device": "cuda:0",
                      "precision": a.precision, "deterministic": a.deterministic,
                      "samples_per_s": a.batch * a.steps / seconds,
                      "flops_per_sample": counter.get_total_flops() / a.batch}))


def product_peak(precision, dev, n=8192):
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    x, y = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
    for _ in range(3):
        x @ y
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        x @ y
    end.record()
    torch.cuda.synchronize()
    return 10 * 2 * n**3 / (start.elapsed_time(end) / 1000.0)


if __name__ == "__main__":
    main()
