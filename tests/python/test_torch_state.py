"""hippo.torch_state: a checkpoint is data, never code. It holds only what a weights-only load
reads (on PyTorch 1.13, whose weights-only unpickler refuses plain floats, and on 2.x), a state
loaded from it continues bit for bit, and a checkpoint that would run code is refused."""
import io
import json
import os
import pickle
import random
import struct
import subprocess
import sys

import pytest

import hippo
from hippo import StageError

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

TRAINER_SCRIPT = """
import torch
import hippo

def train(stage):
    model = torch.nn.Linear(4, 2)
    state = hippo.torch_state(model=model)
    stage.restore(state.load)
    for step in stage.steps():
        pass

hippo.serve(train)
"""


class RunsCode:
    """Unpickled, it runs code: the code writes the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').close()",)


def stage_from(checkpoint):
    """A stage of steps [2, 3) that starts from `checkpoint` (worker/README.md)."""
    return json.dumps({
        "hippo_trainer": 1, "hippo_version": hippo.__version__,
        "model": {"type": "external", "command": ["x"]}, "data": {"name": "toy"}, "seed": 0,
        "fixed": {}, "from": 2, "to": 3, "input_checkpoint": str(checkpoint), "input_state": 5,
        "checkpoints": [], "eval_steps": [], "hyperparameters": {}}) + "\n"


@pytest.mark.parametrize("write", [
    lambda obj, f: torch.save({"state_dicts": obj}, f),  # torch's own format
    lambda obj, f: pickle.dump(obj, f),  # a bare pickle (torch's legacy format)
], ids=["torch.save", "pickle"])
def test_a_checkpoint_that_would_run_code_is_refused(tmp_path, write):
    """Issue 29: load called torch.load, which unpickles: any peer that could deliver a checkpoint
    ran code as the trainer's user. A real trainer process, a real file whose pickle would write
    a marker file: it is refused with a clear error, and the marker never appears."""
    marker, checkpoint = tmp_path / "marker", tmp_path / "parent.ckpt"
    with open(checkpoint, "wb") as f:
        write(RunsCode(marker), f)
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], input=stage_from(checkpoint),
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode != 0
    assert "StageError: torch_state.load: refused the checkpoint: it is not data only" \
        in done.stderr, done.stderr
    assert not marker.exists()


def build(seed):
    """A model with a layer that has a version and an integer buffer (batch norm), an optimizer
    whose state dict has floats, tuples and booleans (Adam), and a scheduler."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5),
                                torch.nn.ReLU(), torch.nn.Linear(5, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.9, 0.99))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched


def train(model, opt, sched, steps):
    for _ in range(steps):
        x = torch.randn(8, 6)  # the global generator: its state is in the checkpoint
        noise = random.random() + float(np.random.rand())
        loss = (model(x) ** 2).mean() * noise
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def test_a_loaded_state_continues_bit_for_bit():
    model, opt, sched = build(1)
    random.seed(2)
    np.random.seed(3)
    train(model, opt, sched, 3)
    f = io.BytesIO()
    hippo.torch_state(model=model, optimizer=opt, scheduler=sched).save(f)
    train(model, opt, sched, 3)  # the trial alone
    generators = hippo.rng_state()

    other, other_opt, other_sched = build(7)  # another start, and other generators' states
    random.seed(8)
    np.random.seed(9)
    hippo.torch_state(model=other, optimizer=other_opt, scheduler=other_sched).load(
        io.BytesIO(f.getvalue()))
    assert other_opt.state_dict()["param_groups"][0]["betas"] == (0.9, 0.99)  # a tuple again
    train(other, other_opt, other_sched, 3)  # the trial through a checkpoint

    for a, b in zip(model.state_dict().values(), other.state_dict().values()):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert opt.state_dict()["param_groups"] == other_opt.state_dict()["param_groups"]
    assert sched.state_dict() == other_sched.state_dict()
    now = hippo.rng_state()
    assert now["python"] == generators["python"] and now["numpy"] == generators["numpy"]
    assert torch.equal(now["torch"], generators["torch"])


def test_the_file_holds_data_that_a_weights_only_load_reads():
    """What save writes loads with torch.load(weights_only=True) on this PyTorch (1.13's refuses
    plain floats: the floats are kept apart, as integers of their bits)."""
    model, opt, sched = build(1)
    f = io.BytesIO()
    hippo.torch_state(model=model, optimizer=opt).save(f)
    f.seek(0)
    saved = torch.load(f, weights_only=True)
    assert saved["format"] == "hippo.torch_state/1"
    [lr_bits] = [bits for path, bits in saved["floats"]
                 if path == ["state_dicts", "optimizer", "param_groups", 0, "lr"]]
    assert struct.unpack("<d", struct.pack("<q", lr_bits)) == (0.01,)


def test_what_is_not_data_is_refused_at_save_naming_it():
    class Odd(torch.nn.Module):
        def state_dict(self):
            return {"weights": torch.zeros(2), "when": {1, 2}}
    with pytest.raises(StageError) as e:
        hippo.torch_state(odd=Odd()).save(io.BytesIO())
    assert "torch_state.save: the state['state_dicts']['odd']['when'] is a set" in str(e.value)


def test_data_of_another_kind_is_refused_naming_what_is_missing():
    f = io.BytesIO()
    torch.save({"model": torch.zeros(2)}, f)  # data, but not torch_state's
    with pytest.raises(StageError) as e:
        hippo.torch_state(model=torch.nn.Linear(1, 1)).load(io.BytesIO(f.getvalue()))
    assert "torch_state.load: not a checkpoint of hippo.torch_state/1" in str(e.value)

    f = io.BytesIO()
    hippo.torch_state(model=torch.nn.Linear(1, 1)).save(f)
    with pytest.raises(StageError) as e:
        hippo.torch_state(net=torch.nn.Linear(1, 1)).load(io.BytesIO(f.getvalue()))
    assert "torch_state.load: the checkpoint holds no state of net (it holds model)" \
        in str(e.value)


def test_a_state_of_other_library_versions_is_refused_naming_both(monkeypatch):
    f = io.BytesIO()
    hippo.torch_state(model=torch.nn.Linear(1, 1)).save(f)
    f.seek(0)
    assert torch.load(f, weights_only=True)["libraries"] == hippo.torch_libraries()
    assert hippo.torch_libraries().startswith(f"torch {torch.__version__}, CUDA ")
    hippo.torch_state(model=torch.nn.Linear(1, 1)).load(io.BytesIO(f.getvalue()))  # the same

    monkeypatch.setattr("hippo.trainer.torch_libraries",
                        lambda: "torch 9.9.9, CUDA 99.0, cuDNN 99999")
    with pytest.raises(StageError) as e:
        hippo.torch_state(model=torch.nn.Linear(1, 1)).load(io.BytesIO(f.getvalue()))
    assert (f"the checkpoint was computed under torch {torch.__version__}" in str(e.value)
            and "this trainer runs torch 9.9.9, CUDA 99.0, cuDNN 99999" in str(e.value)), e.value
