"""Determinism for trainers: a trial trained through shared stages must equal the same trial
trained alone, bit for bit (DESIGN.md, invariant 1). A stage may start in a fresh process, from a
checkpoint, at any step; so everything random must be a function of (seed, step), or be saved in
the checkpoint:

- seed_all(seed, step) seeds Python's, numpy's and PyTorch's generators from (seed, step), e.g.
  at the start of every step (then no generator state needs saving);
- rng_state() / set_rng_state() save and restore those generators (torch_state() puts them in
  every checkpoint it writes);
- BatchSampler gives the batch of step s as a pure function of (seed, s);
- deterministic() makes PyTorch pick deterministic kernels and a fixed thread count.

numpy and torch are used only when the trainer has imported them: this module imports neither.
"""
import random
import sys

_MASK = (1 << 64) - 1


def mix(*parts):
    """A 64-bit seed from integers (splitmix64 chained over the parts): the same parts give the
    same seed on every machine and in every Python."""
    x = 0x9E3779B97F4A7C15
    for part in parts:
        x = (x ^ (int(part) & _MASK)) & _MASK
        x = (x + 0x9E3779B97F4A7C15) & _MASK
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
        x ^= x >> 31
    return x


def _module(name):
    return sys.modules.get(name)


def seed_all(seed, step=0):
    """Seeds random, and numpy's and torch's global generators if they are imported, from
    (seed, step)."""
    s = mix(seed, step, 0x5EED)
    random.seed(s)
    np = _module("numpy")
    if np is not None:
        np.random.seed(s & 0xFFFFFFFF)
    torch = _module("torch")
    if torch is not None:
        torch.manual_seed(s & ((1 << 63) - 1))


def rng_state():
    """The states of Python's, numpy's (if imported) and torch's (if imported) generators."""
    state = {"python": random.getstate()}
    np = _module("numpy")
    if np is not None:
        state["numpy"] = np.random.get_state()
    torch = _module("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state()
    return state


def set_rng_state(state):
    """Restores what rng_state() returned."""
    random.setstate(state["python"])
    if "numpy" in state:
        _module("numpy").random.set_state(state["numpy"])
    if "torch" in state:
        _module("torch").set_rng_state(state["torch"])


def deterministic(threads=1):
    """PyTorch with deterministic algorithms only and `threads` intra-op threads (results depend
    on the thread count: keep it the same for every stage of a study)."""
    import os

    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS on a GPU
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads)


class BatchSampler:
    """The sample indices of each step's batch, a pure function of (seed, step): with
    steps_per_epoch = n // batch_size, step s reads positions [o * batch_size, (o + 1) *
    batch_size) of epoch e's order, e, o = divmod(s, steps_per_epoch), and epoch e's order is a
    permutation of range(n) drawn from (seed, e); the last partial batch of an epoch is dropped
    (as hippo's engine does).

    Orders come from torch.randperm when PyTorch is imported (batches are then index tensors),
    else from Python's random (lists). The two differ: keep one for all trials of a study. An
    order is computed once per epoch and kept (the last few epochs' of each process)."""

    _orders = {}  # (backend, n, seed, epoch) -> order, shared by every sampler of the process
    _kept = 4

    def __init__(self, n, batch_size, seed):
        if batch_size < 1 or n < batch_size:
            raise ValueError(f"BatchSampler: batch_size {batch_size} for {n} samples")
        self.n, self.batch_size, self.seed = int(n), int(batch_size), int(seed)
        self.steps_per_epoch = self.n // self.batch_size
        self._torch = _module("torch")

    def order(self, epoch):
        """The order of the samples in `epoch`."""
        backend = "torch" if self._torch is not None else "python"
        key = (backend, self.n, self.seed, epoch)
        order = BatchSampler._orders.get(key)
        if order is None:
            s = mix(self.seed, epoch, 0x5A3F)
            if self._torch is not None:
                g = self._torch.Generator().manual_seed(s & ((1 << 63) - 1))
                order = self._torch.randperm(self.n, generator=g)
            else:
                order = list(range(self.n))
                random.Random(s).shuffle(order)
            if len(BatchSampler._orders) >= BatchSampler._kept:
                BatchSampler._orders.pop(next(iter(BatchSampler._orders)))
            BatchSampler._orders[key] = order
        return order

    def __call__(self, step):
        """The indices of step `step`'s batch."""
        epoch, offset = divmod(int(step), self.steps_per_epoch)
        start = offset * self.batch_size
        return self.order(epoch)[start:start + self.batch_size]
