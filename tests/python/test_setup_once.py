"""hippo.serve(train, setup=, build=): a long-lived PyTorch trainer that pays its setup once.
setup runs once per process, build once per architecture, a stage loads its parent state into
the objects built (from the device copy the process holds, else from the file: the same bits),
and checkpoints are written in the background and announced only once whole (a SIGKILL during a
write leaves an unannounced temporary file). A small BatchNorm + Dropout network on random data,
so that the weights, the running statistics and the dropout generator all have to travel."""
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import hippo
from hippo.trainer import content_hash

torch = pytest.importorskip("torch")

# The trainer, as a module: imported here, and run as a process by the kill test.
TRAINER = '''
import time
import torch
from torch import nn
import hippo

calls = {"setup": 0, "build": 0}


def setup(stage):
    calls["setup"] += 1
    time.sleep(stage.fixed.get("setup_s", 0))  # what reading a data set would cost
    g = torch.Generator().manual_seed(stage.seed)
    return torch.randn(64, 6, generator=g), torch.randint(0, 3, (64,), generator=g)


def build(stage):
    calls["build"] += 1
    torch.manual_seed(stage.seed)
    width = int(stage.value("width", stage.start, 8))
    model = nn.Sequential(nn.Linear(6, width), nn.BatchNorm1d(width), nn.ReLU(),
                          nn.Dropout(0.3), nn.Linear(width, 3))
    return {"model": model,
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)}


def train(stage):
    x, y = stage.prepared
    model, optimizer = stage.objects["model"], stage.objects["optimizer"]

    def evaluate():
        model.eval()
        with torch.no_grad():
            loss = nn.functional.cross_entropy(model(x), y).item()
        return {"loss": loss, "memory": float(stage.restored_from == "memory"),
                "builds": float(calls["build"]), "setups": float(calls["setup"]),
                "params": float(sum(p.numel() for p in model.parameters()))}
    for step in stage.steps(evaluate=evaluate):
        model.train()
        optimizer.param_groups[0]["lr"] = stage.value("lr", step)
        rows = torch.arange(step * 16, step * 16 + 16) % len(x)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
        optimizer.step()


def serve(**options):
    hippo.serve(train, setup=setup, build=build, architecture=("width",), **options)
'''


@pytest.fixture
def trainer(tmp_path, monkeypatch):
    (tmp_path / "toy_trainer.py").write_text(TRAINER)
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_trainer
    yield toy_trainer
    del sys.modules["toy_trainer"]


def stage_line(tmp_path, start, end, evals, checkpoints, parent=None, parent_state=None,
               held=(), width=None, fixed=None):
    """A long-lived trainer's stage as the worker writes it (worker/README.md)."""
    hps = {"lr": {"segments": [{"kind": "constant", "start": 0, "end": 3, "v0": 0.1},
                               {"kind": "constant", "start": 3, "v0": 0.05}]}}
    if width is not None:
        hps["width"] = {"segments": [{"kind": "constant", "start": 0, "v0": width}]}
    checksum = None
    if parent is not None and os.path.exists(tmp_path / parent):
        checksum = content_hash((tmp_path / parent).read_bytes())
    return json.dumps({
        "hippo_trainer": 1, "hippo_version": hippo.__version__,
        "model": {"type": "external", "command": ["x"], "long_lived": True},
        "data": {"name": "random"}, "seed": 5, "fixed": fixed or {},
        "from": start, "to": end,
        "input_checkpoint": None if parent is None else str(tmp_path / parent),
        "input_state": parent_state, "input_checksum": checksum,
        "checkpoints": [{"step": s, "path": str(tmp_path / f), "state": state}
                        for s, f, state in checkpoints],
        "eval_steps": evals, "hyperparameters": hps, "device": "cpu", "threads": 1,
        "held": list(held)}) + "\n"


def serve(trainer, lines):
    out = io.StringIO()
    trainer.serve(stdin=io.StringIO("".join(lines)), stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def metrics(lines, step):
    return {line["metric"]: line["value"] for line in lines
            if line.get("metric") and line["step"] == step}


def saved_state(path):
    """A checkpoint's state tree, every tensor and float as it is in the file."""
    saved = torch.load(path, weights_only=True)
    assert saved["format"] == "hippo.torch_state/1"
    return saved


def assert_same_bits(a, b):
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.view(torch.uint8) if a.dtype.is_floating_point else a,
                           b.view(torch.uint8) if b.dtype.is_floating_point else b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same_bits(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_bits(x, y)
    else:
        assert a == b


def test_a_fork_from_memory_equals_a_fork_from_the_file_bit_for_bit(trainer, tmp_path):
    root = stage_line(tmp_path, 0, 3, [3], [(3, "root.ckpt", 1)])
    first = serve(trainer, [
        root,
        # Another trial's stage in between: the model, its optimizer and the generators move on.
        stage_line(tmp_path, 0, 2, [2], [], held=[1]),
        stage_line(tmp_path, 3, 6, [6], [(6, "from-memory.ckpt", 2)], parent="gone.ckpt",
                   parent_state=1, held=[1])])
    # Another process, the parent from its file (the one the first process wrote and announced).
    second = serve(trainer, [stage_line(tmp_path, 3, 6, [6], [(6, "from-file.ckpt", 3)],
                                        parent="root.ckpt", parent_state=1)])
    by_memory, by_file = metrics(first, 6), metrics(second, 6)
    assert by_memory.pop("memory") == 1.0 and by_file.pop("memory") == 0.0
    assert by_memory.pop("setups") == by_memory.pop("builds") == 1.0  # the process's second stage
    del by_file["setups"], by_file["builds"]
    assert by_memory == by_file
    assert_same_bits(saved_state(tmp_path / "from-memory.ckpt")["tree"],
                     saved_state(tmp_path / "from-file.ckpt")["tree"])
    assert_same_bits(saved_state(tmp_path / "from-memory.ckpt")["floats"],
                     saved_state(tmp_path / "from-file.ckpt")["floats"])
    # The first process holds both states (device copies), the second neither.
    assert [line for line in first if "done" in line][-1]["held"] == [1, 2]


def test_each_architecture_gets_its_own_model_built_once(trainer, tmp_path):
    lines = serve(trainer, [
        stage_line(tmp_path, 0, 3, [3], [(3, "a.ckpt", 1)], width=4),
        stage_line(tmp_path, 0, 3, [3], [(3, "b.ckpt", 2)], width=8, held=[1]),
        stage_line(tmp_path, 3, 5, [5], [], parent="a.ckpt", parent_state=1, width=4,
                   held=[1, 2]),
        stage_line(tmp_path, 0, 3, [3], [], width=4, held=[1, 2])])
    stages = [[line for line in lines if line.get("metric")][i * 5:(i + 1) * 5]
              for i in range(4)]
    values = [{line["metric"]: line["value"] for line in s} for s in stages]
    params = {4: 6 * 4 + 4 + 2 * 4 + 4 * 3 + 3, 8: 6 * 8 + 8 + 2 * 8 + 8 * 3 + 3}
    assert [v["params"] for v in values] == [params[4], params[8], params[4], params[4]]
    assert [v["builds"] for v in values] == [1, 2, 2, 2]  # width 4's model is built once
    assert [v["setups"] for v in values] == [1, 1, 1, 1]
    assert [v["memory"] for v in values] == [0, 0, 1, 0]  # the child forked from width 4's copy
    # A root starts from the state build left, not from what the model trained before: the last
    # stage (a root of width 4, after two stages of it) gives the first one's bits.
    assert values[3]["loss"] == values[0]["loss"]
    # The width-4 child's file fork, in a process that never saw width 8, gives the same loss.
    alone = serve(trainer, [stage_line(tmp_path, 3, 5, [5], [], parent="a.ckpt",
                                       parent_state=1, width=4)])
    assert metrics(alone, 5)["loss"] == values[2]["loss"]


def test_setup_is_paid_once_and_every_part_of_a_stage_is_timed(trainer, tmp_path):
    lines = serve(trainer, [
        stage_line(tmp_path, 0, 3, [3], [(3, "a.ckpt", 1)], fixed={"setup_s": 0.3}),
        stage_line(tmp_path, 3, 6, [6], [(6, "b.ckpt", 2)], parent="a.ckpt", parent_state=1,
                   held=[1], fixed={"setup_s": 0.3})])
    first, second = [line["times"] for line in lines if "done" in line]
    for times in (first, second):
        assert {"setup", "load", "train", "eval", "save"} <= set(times)
    assert first["setup"] >= 0.3 and second["setup"] < 0.1
    assert second["load"] > 0 and first["save"] > 0 and second["save"] > 0
    # Announced with the hash of the bytes on disk, which load as the state.
    for line in lines:
        if "checkpoint" in line:
            path = tmp_path / ("a.ckpt" if line["checkpoint"] == 3 else "b.ckpt")
            assert line["checksum"] == content_hash(path.read_bytes())
            saved_state(path)


def test_the_helper_refuses_restore_and_a_save_fn_under_build(trainer, tmp_path):
    def restores(stage):
        stage.restore(lambda f: None)

    def saves(stage):
        for step in stage.steps(evaluate=lambda: {"loss": 0.0}):
            if stage.saves(step + 1):
                stage.save(step + 1, lambda f: None)
    for train, error in ((restores, "do not call stage.restore"),
                         (saves, "call stage.save(step) without a save_fn")):
        with pytest.raises(hippo.StageError) as e:
            hippo.serve(train, build=trainer.build, stdout=io.StringIO(), stdin=io.StringIO(
                stage_line(tmp_path, 0, 2, [2], [(2, "x.ckpt", 1)])))
        assert error in str(e.value)
    with pytest.raises(hippo.StageError) as e:
        hippo.serve(restores, build=trainer.build, architecture="width", stdin=io.StringIO(""))
    assert "serve(architecture='width'): expected a tuple of setting names" in str(e.value)


KILLED_DURING_A_WRITE = '''
import os, sys, threading
sys.path.insert(0, sys.argv[1])
import hippo.trainer
import toy_trainer

# The failpoint: the checkpoint writer's first piece goes to disk, then it stops for good (a write
# that never ends), after saying so in a file the test waits for.
write = hippo.trainer._HashingFile.write


def write_then_stop(self, data):
    write(self, bytes(memoryview(data).cast("B")[:100]))
    open(sys.argv[2], "w").close()
    threading.Event().wait()


hippo.trainer._HashingFile.write = write_then_stop
toy_trainer.serve()
'''


def test_a_kill_during_a_background_write_never_announces_a_partial_file(tmp_path):
    (tmp_path / "toy_trainer.py").write_text(TRAINER)
    (tmp_path / "killed.py").write_text(KILLED_DURING_A_WRITE)
    paused = tmp_path / "paused"
    trainer = subprocess.Popen(
        [sys.executable, str(tmp_path / "killed.py"), str(tmp_path), str(paused)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        trainer.stdin.write(stage_line(tmp_path, 0, 6, [2, 6], [(2, "a.ckpt", 1)]))
        trainer.stdin.flush()
        # Training goes on while the checkpoint of step 2 is being written: the evaluation of
        # step 6 comes, the checkpoint's announcement does not.
        lines = []
        while not any(line.get("step") == 6 and line.get("metric") for line in lines):
            line = trainer.stdout.readline()
            assert line, trainer.stderr.read()
            lines.append(json.loads(line))
        deadline = time.monotonic() + 60
        while not paused.exists():  # the writer is inside its write
            assert time.monotonic() < deadline and trainer.poll() is None
            time.sleep(0.01)
        trainer.send_signal(signal.SIGKILL)
        rest, _ = trainer.communicate(timeout=60)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
    assert trainer.returncode == -signal.SIGKILL
    lines += [json.loads(line) for line in rest.splitlines()]
    assert not any("checkpoint" in line or "done" in line for line in lines), lines
    assert not (tmp_path / "a.ckpt").exists()
    [partial] = [name for name in os.listdir(tmp_path) if name.startswith("a.ckpt.tmp.")]
    assert 0 < (tmp_path / partial).stat().st_size <= 100  # a part, which the master sweeps


def test_a_background_write_that_fails_fails_the_stage_and_announces_nothing(trainer, tmp_path,
                                                                             monkeypatch):
    """A file planted at the temporary name (the save refuses to write through it): the stage
    fails naming it when it ends, and no checkpoint line was written."""
    monkeypatch.setattr(hippo.trainer, "_random_suffix", lambda: "0123456789abcdef")
    planted = tmp_path / "a.ckpt.tmp.0123456789abcdef"
    planted.write_text("planted")
    out = io.StringIO()
    with pytest.raises(hippo.StageError) as e:
        trainer.serve(stdout=out, stdin=io.StringIO(stage_line(tmp_path, 0, 4, [2, 4],
                                                               [(2, "a.ckpt", 1)])))
    assert f"cannot create {planted.name}: File exists" in str(e.value)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert not any("checkpoint" in line or "done" in line for line in lines), lines
    assert planted.read_text() == "planted" and not (tmp_path / "a.ckpt").exists()
