"""hippo.determinism: seeds, generator states and batches are pure functions of (seed, step),
the same in every process."""
import random
import subprocess
import sys

import pytest

import hippo
from hippo.determinism import BatchSampler


def test_mix_is_stable_and_spreads():
    # Fixed values: a seed must not change between versions, machines or Pythons.
    assert hippo.mix(0) == hippo.mix(0)
    assert hippo.mix(1, 2) != hippo.mix(2, 1)
    assert len({hippo.mix(0, s) for s in range(1000)}) == 1000
    assert all(0 <= hippo.mix(s) < 2 ** 64 for s in range(100))
    out = subprocess.run([sys.executable, "-c", "import hippo; print(hippo.mix(7, 11))"],
                         capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": ":".join(sys.path), "PYTHONHASHSEED": "123"})
    assert int(out.stdout) == hippo.mix(7, 11)


def test_batches_depend_only_on_seed_and_step():
    a = BatchSampler(100, 8, seed=5)
    steps = [0, 1, 11, 12, 13, 40, 3]  # 12 steps per epoch; in any order
    first = [list(a(s)) for s in steps]
    BatchSampler._orders.clear()  # as in a fresh process
    b = BatchSampler(100, 8, seed=5)
    assert [list(b(s)) for s in reversed(steps)] == list(reversed(first))
    assert [list(BatchSampler(100, 8, seed=6)(s)) for s in steps] != first
    # An epoch reads a permutation: 12 batches of 8 distinct samples (the last 4 dropped).
    epoch = [i for s in range(12) for i in a(s)]
    assert len(epoch) == 96 and len(set(epoch)) == 96
    assert a.steps_per_epoch == 12
    with pytest.raises(ValueError):
        BatchSampler(4, 8, seed=0)


def test_seed_all_and_rng_state():
    hippo.seed_all(3, step=10)
    x = [random.random() for _ in range(3)]
    state = hippo.rng_state()
    y = random.random()
    hippo.seed_all(3, step=10)
    assert [random.random() for _ in range(3)] == x
    hippo.set_rng_state(state)
    assert random.random() == y
    hippo.seed_all(3, step=11)
    assert random.random() != x[0]


def test_deterministic_sets_what_it_says_and_says_it_once():
    torch = pytest.importorskip("torch")
    del torch  # imported in the child, whose global state deterministic() changes
    child = r"""
import json, os, torch, hippo
first = hippo.deterministic()
second = hippo.deterministic(threads=3)
seen = {
    "use_deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
    "num_threads": torch.get_num_threads(),
    "CUBLAS_WORKSPACE_CONFIG": os.environ["CUBLAS_WORKSPACE_CONFIG"],
    "cudnn.deterministic": torch.backends.cudnn.deterministic,
    "cudnn.benchmark": torch.backends.cudnn.benchmark,
    "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
    "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
}
print(json.dumps({"first": first, "second": second, "seen": seen}))
"""
    import json
    env = {"PYTHONPATH": ":".join(sys.path), "OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True,
                         env=env)
    result = json.loads(out.stdout)
    # The threads come from the worker's OMP_NUM_THREADS unless given; torch holds what it returned.
    assert result["first"]["num_threads"] == 2
    assert result["second"] == result["seen"]
    assert result["seen"] == {
        "use_deterministic_algorithms": True, "num_threads": 3,
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "cudnn.deterministic": True,
        "cudnn.benchmark": False, "cudnn.allow_tf32": False, "cuda.matmul.allow_tf32": False}
    said = [line for line in out.stderr.splitlines() if line.startswith("hippo.deterministic: ")]
    assert len(said) == 1 and "num_threads=2" in said[0], out.stderr
