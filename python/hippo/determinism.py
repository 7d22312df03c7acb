"""Determinism for trainers: a trial trained through shared stages must equal the same trial
trained alone, bit for bit (the determinism rule). A stage may start in a fresh process, from a
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
    """The states of Python's, numpy's (if imported) and torch's (if imported; its CUDA
    generators too once CUDA is in use) generators, as tensors, lists and numbers only (what
    torch.load(..., weights_only=True) reads back)."""
    state = {"python": random.getstate()}
    np = _module("numpy")
    if np is not None:
        name, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]
    torch = _module("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_initialized():
            state["torch_cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state):
    """Restores what rng_state() returned."""
    random.setstate(state["python"])
    if "numpy" in state:
        np = _module("numpy")
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "torch" in state:
        _module("torch").set_rng_state(state["torch"])
    if "torch_cuda" in state:
        _module("torch").cuda.set_rng_state_all(state["torch_cuda"])


_said = False  # deterministic() says what it set once per process


def deterministic(threads=None, quiet=False):
    """Makes PyTorch reproducible, bit for bit, for the stages of a study: deterministic
    algorithms only, `threads` intra-op threads (default: the worker's --threads, from the stage's
    OMP_NUM_THREADS; results depend on the thread count), and on a GPU cuBLAS's deterministic
    workspace, cuDNN's deterministic kernels without autotuning, and no TF32 (which rounds fp32
    products to 10 bits). Returns what it set, and says it on stderr (once) unless quiet. Call it before
    the first CUDA operation (CUBLAS_WORKSPACE_CONFIG is read when cuBLAS starts; the worker
    already sets it for a trainer on a GPU)."""
    import os

    import torch

    if threads is None:
        threads = int(os.environ.get("OMP_NUM_THREADS", "1") or "1")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    settings = {
        "use_deterministic_algorithms": True,
        "num_threads": threads,
        "CUBLAS_WORKSPACE_CONFIG": os.environ["CUBLAS_WORKSPACE_CONFIG"],
        "cudnn.deterministic": True,
        "cudnn.benchmark": False,
        "cudnn.allow_tf32": False,
        "cuda.matmul.allow_tf32": False,
    }
    global _said
    if not quiet and not _said:
        _said = True
        print("hippo.deterministic: " + ", ".join(f"{k}={v}" for k, v in settings.items()),
              file=sys.stderr)
    return settings


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
