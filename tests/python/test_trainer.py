"""hippo.trainer: the stage protocol as the helper writes it, its checkpoints, its memory of states
(long-lived), and every misuse it refuses with an error naming the step. The stages are fed as
the worker writes them (one JSON line each); a toy model (a counter and a running sum, in plain
Python) stands in for PyTorch so that these tests take milliseconds."""
import io
import json
import math
import os
import pickle
import subprocess
import sys
import time

import pytest

import hippo
import hippo.trainer
from hippo import StageError

TRAINER_SCRIPT = """
import pickle, sys
import hippo

def train(stage):
    model = {"sum": 0.0}
    def save(f): pickle.dump(model, f)
    def load(f): model.update(pickle.load(f))
    stage.restore(load)
    print("a line for humans, not for the worker")  # goes to stderr
    for step in stage.steps(evaluate=lambda: {"sum": model["sum"]}, save=save):
        model["sum"] += stage.value("lr", step)

hippo.serve(train)
"""


def stage_line(tmp_path, start, end, evals, checkpoints, parent=None, held=None, lr=0.5,
               parent_state=None):
    """A stage as the worker writes it (worker/README.md)."""
    stage = {
        "hippo_trainer": 1, "hippo_version": hippo.__version__,
        "model": {"type": "external", "command": ["x"]},
        "data": {"name": "toy", "train_samples": 8}, "seed": 3, "fixed": {"batch_size": 2},
        "from": start, "to": end,
        "input_checkpoint": None if parent is None else str(tmp_path / parent),
        "input_state": parent_state,
        "checkpoints": [{"step": s, "path": str(tmp_path / f), "state": state}
                        for s, f, state in checkpoints],
        "eval_steps": evals,
        "hyperparameters": {"lr": {"segments": [{"kind": "constant", "start": 0, "v0": lr}]}},
    }
    if held is not None:
        stage["held"] = held
    return json.dumps(stage) + "\n"


def toy_train(calls=None):
    """A trainer: the model is a running sum of the learning rates."""
    def train(stage):
        model = {"sum": 0.0}

        def save(f):
            pickle.dump(model, f)

        def load(f):
            model.update(pickle.load(f))

        stage.restore(load)
        if calls is not None and stage.restored_from:
            calls.append((stage.restored_from, stage.start))
        for step in stage.steps(evaluate=lambda: {"sum": model["sum"], "loss": 1.0},
                                save=save):
            model["sum"] += stage.value("lr", step)
    return train


TIME_PARTS = {"setup", "load", "train", "eval", "save", "ready_at"}


def without_times(line):
    """A protocol line without the "times" of a done or diverged line, once they are checked
    (seconds, each >= 0; test_a_stage_says_where_its_time_went looks at their values), and
    without the "checksum" of a checkpoint line, once it is checked to be a content hash
    (test_checkpoints_are_checked_where_they_are_used looks at its value)."""
    times = line.pop("times", None)
    if "done" in line or "diverged" in line:
        assert set(times) <= TIME_PARTS and all(v >= 0 for v in times.values()), times
    if "checkpoint" in line:
        checksum = line.pop("checksum")
        assert len(checksum) == 64 and set(checksum) <= set("0123456789abcdef"), checksum
    return line


def serve(lines, train, tmp_path):
    out = io.StringIO()
    hippo.serve(train, stdin=io.StringIO("".join(lines)), stdout=out)
    return [without_times(json.loads(line)) for line in out.getvalue().splitlines()]


def test_a_stage_reports_saves_and_ends(tmp_path):
    lines = serve([stage_line(tmp_path, 0, 4, [2, 4], [(2, "a.ckpt", 11), (4, "b.ckpt", 12)])],
                  toy_train(), tmp_path)
    assert lines == [
        {"step": 2, "metric": "sum", "value": 1.0}, {"step": 2, "metric": "loss", "value": 1.0},
        {"checkpoint": 2},
        {"step": 4, "metric": "sum", "value": 2.0}, {"step": 4, "metric": "loss", "value": 1.0},
        {"checkpoint": 4},
        {"done": True},
    ]
    with open(tmp_path / "a.ckpt", "rb") as f:
        assert pickle.load(f) == {"sum": 1.0}
    assert sorted(os.listdir(tmp_path)) == ["a.ckpt", "b.ckpt"]  # no temporary file is left


@pytest.mark.parametrize("version", ["0.0.9", None])
def test_a_stage_from_a_worker_of_another_version_is_refused(tmp_path, version):
    stage = json.loads(stage_line(tmp_path, 0, 4, [4], []))
    if version is None:
        del stage["hippo_version"]  # a worker from before versions were sent
    else:
        stage["hippo_version"] = version
    with pytest.raises(StageError) as e:
        serve([json.dumps(stage) + "\n"], toy_train(), tmp_path)
    assert f"package is version {hippo.__version__}" in str(e.value)
    assert (version or "older than 0.1.0") in str(e.value)
    assert os.listdir(tmp_path) == []  # nothing trained, nothing written


def test_a_child_stage_continues_its_parent_exactly(tmp_path):
    serve([stage_line(tmp_path, 0, 2, [2], [(2, "a.ckpt", 1)])], toy_train(), tmp_path)
    lines = serve([stage_line(tmp_path, 2, 4, [4], [], parent="a.ckpt", parent_state=1)],
                  toy_train(), tmp_path)
    assert lines[0] == {"step": 4, "metric": "sum", "value": 2.0}
    # An evaluation-only stage (from == to) evaluates its start state.
    lines = serve([stage_line(tmp_path, 2, 2, [2], [], parent="a.ckpt", parent_state=1)],
                  toy_train(), tmp_path)
    assert lines == [{"step": 2, "metric": "sum", "value": 1.0},
                     {"step": 2, "metric": "loss", "value": 1.0}, {"done": True}]


def test_a_long_lived_trainer_forks_from_memory_and_lists_what_it_holds(tmp_path):
    calls = []
    lines = serve([
        stage_line(tmp_path, 0, 2, [2], [(2, "a.ckpt", 1)], held=[]),
        # The parent's file is gone by then: the state comes from memory.
        stage_line(tmp_path, 2, 4, [4], [(4, "b.ckpt", 2)], parent="gone.ckpt", parent_state=1,
                   held=[1]),
        # The worker no longer vouches for state 1 (its master restarted): forgotten, so the
        # file is read.
        stage_line(tmp_path, 2, 3, [3], [], parent="a.ckpt", parent_state=1, held=[2]),
    ], toy_train(calls), tmp_path)
    dones = [line for line in lines if "done" in line]
    assert dones == [{"done": True, "held": [1]}, {"done": True, "held": [1, 2]},
                     {"done": True, "held": [2, 1]}]
    assert {"step": 4, "metric": "sum", "value": 2.0} in lines
    assert {"step": 3, "metric": "sum", "value": 1.5} in lines
    assert calls == [("memory", 2), ("file", 2)]


def test_keep_bounds_the_states_in_memory(tmp_path):
    lines = serve([stage_line(tmp_path, 0, 3, [3], [(1, "a", 1), (2, "b", 2), (3, "c", 3)],
                              held=[])],
                  lambda stage: toy_train()(stage), tmp_path)
    assert lines[-1] == {"done": True, "held": [1, 2, 3]}
    out = io.StringIO()
    hippo.serve(toy_train(), keep=2, stdout=out, stdin=io.StringIO(
        stage_line(tmp_path, 0, 3, [3], [(1, "a", 1), (2, "b", 2), (3, "c", 3)], held=[])))
    assert without_times(json.loads(out.getvalue().splitlines()[-1])) == {"done": True,
                                                                          "held": [2, 3]}


def test_a_stage_says_where_its_time_went(tmp_path):
    def train(stage):
        time.sleep(0.05)  # setup: data and model
        stage.restore(lambda f: time.sleep(0.02))

        def save(f):
            time.sleep(0.03)
            f.write(b"x")
        for _ in stage.steps(evaluate=lambda: time.sleep(0.04) or {"loss": 1.0}, save=save):
            time.sleep(0.01)
    out = io.StringIO()
    started = time.monotonic()
    hippo.serve(train, stdout=out, stdin=io.StringIO(
        stage_line(tmp_path, 0, 4, [2, 4], [(2, "a", 1), (4, "b", 2)], held=[]) +
        stage_line(tmp_path, 4, 6, [6], [], parent="b", parent_state=2, held=[2])))
    elapsed = time.monotonic() - started
    first, second = [json.loads(line)["times"] for line in out.getvalue().splitlines()
                     if "done" in line]
    # Only the process's first stage says when it was ready (before its first line was read).
    assert started <= first["ready_at"] <= started + 0.05 and "ready_at" not in second
    assert 0.05 <= first["setup"] < 0.09 and first["load"] == 0  # a root: nothing to load
    assert 0.02 <= second["load"] < 0.05  # from memory: what load_fn took
    assert 0.08 <= first["eval"] < 0.12 and 0.06 <= first["save"] < 0.1
    assert 0.04 <= first["train"] < 0.08  # the four steps' bodies
    parts = sum(t[k] for t in (first, second) for k in ("setup", "load", "train", "eval", "save"))
    assert parts <= elapsed < parts + 0.05


def explicit(body):
    """A trainer whose loop reports and saves itself through `body(stage, step, model)`."""
    def train(stage):
        model = {"sum": 0.0}
        stage.restore(lambda f: model.update(pickle.load(f)))
        for step in stage.steps():
            model["sum"] += stage.value("lr", step)
            body(stage, step, model)
    return train


def misuse(tmp_path, train, line=None):
    line = line or stage_line(tmp_path, 0, 4, [2, 4], [(2, "a.ckpt", 1), (4, "b.ckpt", 2)])
    with pytest.raises(StageError) as e:
        serve([line], train, tmp_path)
    return str(e.value)


def test_explicit_reports_and_saves(tmp_path):
    def body(stage, step, model):
        if stage.evaluates(step + 1):
            stage.report(step + 1, sum=model["sum"])
        if stage.saves(step + 1):
            stage.save(step + 1, lambda f: pickle.dump(model, f))
    lines = serve([stage_line(tmp_path, 0, 4, [2, 4], [(2, "a.ckpt", 1), (4, "b.ckpt", 2)])],
                  explicit(body), tmp_path)
    assert lines == [{"step": 2, "metric": "sum", "value": 1.0}, {"checkpoint": 2},
                     {"step": 4, "metric": "sum", "value": 2.0}, {"checkpoint": 4},
                     {"done": True}]


def test_every_misuse_raises_an_error_that_names_the_step(tmp_path):
    save = lambda f: f.write(b"x")  # noqa: E731

    def report_at(step):
        return explicit(lambda stage, s, m: stage.report(step, sum=1.0) if s == 0 else None)

    assert misuse(tmp_path, report_at(3)).startswith("step 3: no evaluation was asked for")
    assert "step 2: reported twice" in misuse(tmp_path, explicit(
        lambda stage, s, m: [stage.report(2, sum=1.0) for _ in range(2)] if s == 1 else None))
    assert misuse(tmp_path, explicit(
        lambda stage, s, m: stage.save(3, save) if s == 0 else None)).startswith(
        "step 3: no checkpoint was ordered at this step")
    assert "step 2: saved twice" in misuse(tmp_path, explicit(
        lambda stage, s, m: [stage.save(2, save) for _ in range(2)] if s == 1 else None))
    assert misuse(tmp_path, report_at(4)).startswith(
        "step 4: report of a state this stage has not reached")
    # Nothing reported where an evaluation is asked, nothing saved where a checkpoint is.
    assert misuse(tmp_path, explicit(lambda stage, s, m: None)).startswith(
        "step 2: an evaluation is asked for here and was not reported")
    assert misuse(tmp_path, explicit(
        lambda stage, s, m: stage.report(s + 1, sum=1.0) if stage.evaluates(s + 1) else None
    )).startswith("step 2: a checkpoint is ordered here and was not saved")
    assert "metric sum is 'high', not a number" in misuse(tmp_path, explicit(
        lambda stage, s, m: stage.report(2, sum="high") if s == 1 else None))

    def stops_early(stage):
        for step in stage.steps(evaluate=lambda: {"sum": 0.0}, save=save):
            if step == 2:
                break
    assert misuse(tmp_path, stops_early).startswith("step 2: train() returned before the stage")

    def no_restore(stage):
        for _ in stage.steps(evaluate=lambda: {"sum": 0.0}, save=save):
            pass
    child = stage_line(tmp_path, 2, 4, [4], [], parent="a.ckpt", parent_state=1)
    assert misuse(tmp_path, no_restore, child).startswith(
        "step 2: this stage starts from a checkpoint; call stage.restore")

    def unknown_setting(stage):
        stage.value("dropout", 0)
    assert misuse(tmp_path, unknown_setting).startswith("step 0: no setting 'dropout'")


def test_checkpoints_are_checked_where_they_are_used(tmp_path):
    """Issue 43: the helper reports the content hash of each checkpoint it wrote (BLAKE2b-256,
    libsodium's crypto_generichash: hippo's own content hash; tests/protocol checks the same
    vector), and a parent whose bytes are not the ones the worker checked (replaced after the
    check, by anyone who may write in the directory) is refused before anything is loaded from
    it."""
    assert hippo.trainer.content_hash(b"abc") == \
        "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319"
    out = io.StringIO()
    hippo.serve(toy_train(), stdin=io.StringIO(
        stage_line(tmp_path, 0, 2, [2], [(2, "a.ckpt", 1)])), stdout=out)
    said = [json.loads(line) for line in out.getvalue().splitlines() if "checkpoint" in line]
    written = (tmp_path / "a.ckpt").read_bytes()
    assert said == [{"checkpoint": 2, "checksum": hippo.trainer.content_hash(written)}]

    child = json.loads(stage_line(tmp_path, 2, 4, [4], [], parent="a.ckpt", parent_state=1))
    child["input_checksum"] = hippo.trainer.content_hash(written)
    lines = serve([json.dumps(child) + "\n"], toy_train(), tmp_path)
    assert lines[0] == {"step": 4, "metric": "sum", "value": 2.0}

    loaded = []
    forged = pickle.dumps({"sum": 1000.0})
    (tmp_path / "forged").write_bytes(forged)
    os.replace(tmp_path / "forged", tmp_path / "a.ckpt")  # after the worker's check
    error = misuse(tmp_path, lambda stage: stage.restore(loaded.append), json.dumps(child) + "\n")
    assert error.startswith("step 2: the input checkpoint's bytes have content hash "
                            f"{hippo.trainer.content_hash(forged)}, its producer wrote "
                            f"{hippo.trainer.content_hash(written)}"), error
    assert loaded == []


def test_a_diverging_model_ends_its_stage_at_that_evaluation(tmp_path):
    """A NaN (or infinite) metric is a result: it is reported as the protocol writes it, the
    steps end there, the diverged state is not saved, and the stage ends with a diverged line."""
    def train(stage):
        model = {"sum": 0.0}
        def evaluate():
            return {"loss": float("nan") if model["sum"] > 0.75 else 1.0, "sum": model["sum"]}
        trained = []
        for step in stage.steps(evaluate=evaluate, save=lambda f: pickle.dump(model, f)):
            model["sum"] += stage.value("lr", step)
            trained.append(step)
        assert trained == [0, 1]  # nothing after the evaluation at step 2

    lines = serve([stage_line(tmp_path, 0, 6, [1, 2, 4, 6],
                              [(1, "a.ckpt", 1), (2, "b.ckpt", 2), (4, "c.ckpt", 3)])],
                  train, tmp_path)
    assert lines == [
        {"step": 1, "metric": "loss", "value": 1.0}, {"step": 1, "metric": "sum", "value": 0.5},
        {"checkpoint": 1},
        {"step": 2, "metric": "loss", "value": "nan"}, {"step": 2, "metric": "sum", "value": 1.0},
        {"diverged": 2},
    ]
    assert not (tmp_path / "b.ckpt").exists()

    def infinite(stage):
        for step in stage.steps(evaluate=lambda: {"loss": float("-inf")}):
            pass
    lines = serve([stage_line(tmp_path, 0, 2, [2], [])], infinite, tmp_path)
    assert lines == [{"step": 2, "metric": "loss", "value": "-inf"}, {"diverged": 2}]


def test_values_and_settings(tmp_path):
    seen = {}

    def train(stage):
        seen["lr"] = [stage.value("lr", s) for s in range(stage.start, stage.end)]
        seen["batch_size"] = stage.value("batch_size", 0)
        seen["momentum"] = stage.value("momentum", 0, 0.9)
        seen["names"] = stage.hyperparameters
        for _ in stage.steps(evaluate=lambda: {"x": 1}, save=lambda f: None):
            pass
    serve([stage_line(tmp_path, 0, 3, [3], [])], train, tmp_path)
    assert seen == {"lr": [0.5] * 3, "batch_size": 2, "momentum": 0.9, "names": ["lr"]}


def test_values_come_from_the_segments_without_a_list_per_step(tmp_path):
    """A stage of 10^9 steps (issue 29): the helper keeps each sequence's segments and computes a
    step's value from them (tests/worker/external_trainer_test.cc checks every kind against the
    worker's engine, bit for bit); it builds nothing per step."""
    stage = json.loads(stage_line(tmp_path, 0, 10**9, [], []))
    stage["hyperparameters"] = {
        "lr": {"segments": [
            {"kind": "linear", "start": 0, "end": 4, "v0": 0.0, "v1": 0.1},
            {"kind": "constant", "start": 4, "end": 100, "v0": 0.1},
            {"kind": "cosine", "start": 100, "end": 200, "v0": 0.1, "v1": 0.0},
            {"kind": "exponential", "start": 200, "v0": 0.5, "gamma": 0.5, "period": 10}]},
        "growth": {"segments": [{"kind": "exponential", "start": 0, "v0": 0.5, "gamma": 2.0,
                                 "period": 1}]},
        "optimizer": {"text": "adam"}}
    seen = {}

    def train(stage):
        seen["lr"] = [stage.value("lr", s) for s in (0, 3, 4, 99, 100, 150, 200, 219, 10**9 - 1)]
        seen["growth"] = [stage.value("growth", s) for s in (3, 10**9 - 1)]  # C's pow: inf
        seen["optimizer"] = stage.value("optimizer", 10**9 - 1)
        raise SystemExit  # seen enough: not 10^9 steps
    with pytest.raises(SystemExit):
        serve([json.dumps(stage) + "\n"], train, tmp_path)
    assert seen == {"lr": [0.025, 0.1, 0.1, 0.1, 0.1, 0.1 * (1 + math.cos(math.pi * 50 / 100)) / 2,
                           0.5, 0.25, 0.0],
                    "growth": [4.0, math.inf], "optimizer": "adam"}


@pytest.mark.parametrize("sequence, error", [
    ({"segments": []}, 'hyperparameters.lr: expected {"text": STRING} or {"segments"'),
    ({"text": 3}, "hyperparameters.lr.text: expected a string"),
    ({"segments": [{"kind": "square", "start": 0, "v0": 1.0}]},
     "hyperparameters.lr.segments[0].kind: expected one of constant, exponential"),
    ({"segments": [{"kind": "constant", "start": 1, "v0": 1.0}]},
     "hyperparameters.lr.segments[0].start: expected 0"),
    ({"segments": [{"kind": "constant", "start": 0, "end": 5, "v0": 1.0}]},
     "hyperparameters.lr: the last segment must never end"),
    ({"segments": [{"kind": "linear", "start": 0, "v0": 1.0, "v1": 2.0}]},
     "hyperparameters.lr.segments[0]: a segment of kind linear needs an end"),
    ({"segments": [{"kind": "constant", "start": 0, "v0": "0.1"}]},
     "hyperparameters.lr.segments[0].v0: expected a finite number"),
    ({"segments": [{"kind": "exponential", "start": 0, "v0": 1.0, "gamma": 0.5}]},
     "hyperparameters.lr.segments[0]: a segment of kind exponential has the fields"),
    ({"segments": [{"kind": "exponential", "start": 0, "v0": 1.0, "gamma": 0.5, "period": 0}]},
     "hyperparameters.lr.segments[0].period: expected at least 1"),
])
def test_a_malformed_sequence_is_refused_naming_its_field(tmp_path, sequence, error):
    stage = json.loads(stage_line(tmp_path, 0, 4, [4], []))
    stage["hyperparameters"]["lr"] = sequence
    with pytest.raises(StageError) as e:
        serve([json.dumps(stage) + "\n"], toy_train(), tmp_path)
    assert error in str(e.value)


def test_a_symlink_planted_at_the_temporary_name_is_not_followed(tmp_path):
    """Issue 29: whoever can write in the checkpoint directory planted a symlink where the helper
    wrote its temporary file ("<path>.tmp.<pid>"), and the checkpoint's bytes went through it to
    the link's target. A real trainer process, the link planted at its pid's name: the target is
    untouched and the checkpoint is a file of its own."""
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER_SCRIPT)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    trainer = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    os.symlink(victim, tmp_path / f"a.ckpt.tmp.{trainer.pid}")
    out, err = trainer.communicate(stage_line(tmp_path, 0, 2, [2], [(2, "a.ckpt", 1)]),
                                   timeout=60)
    assert trainer.returncode == 0, err
    assert victim.read_text() == "precious"
    assert not os.path.islink(tmp_path / "a.ckpt")
    assert os.stat(tmp_path / "a.ckpt").st_mode & 0o777 == 0o600  # its owner's only
    with open(tmp_path / "a.ckpt", "rb") as f:
        assert pickle.load(f) == {"sum": 1.0}


def test_a_temporary_name_taken_already_is_never_written_through(tmp_path, monkeypatch):
    """The temporary name is random; should something be there anyway (a symlink, a file), it is
    neither followed nor truncated: the save fails, naming it, and leaves nothing behind."""
    monkeypatch.setattr(hippo.trainer, "_random_suffix", lambda: "0123456789abcdef")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    planted = tmp_path / "a.ckpt.tmp.0123456789abcdef"
    for plant in (lambda: os.symlink(victim, planted), lambda: planted.write_text("planted")):
        plant()
        with pytest.raises(StageError) as e:
            serve([stage_line(tmp_path, 0, 2, [2], [(2, "a.ckpt", 1)])], toy_train(), tmp_path)
        assert f"checkpoint {tmp_path / 'a.ckpt'}: cannot create {planted.name}: File exists" \
            in str(e.value)
        assert victim.read_text() == "precious"
        assert sorted(os.listdir(tmp_path)) == sorted(["victim", planted.name])
        if not planted.is_symlink():
            assert planted.read_text() == "planted"
        planted.unlink()


def test_the_protocol_owns_stdout(tmp_path):
    """A trainer process that prints: its lines go to stderr, stdout carries the protocol only."""
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)], input=stage_line(tmp_path, 0, 2, [2], [(2, "a", 1)]),
        capture_output=True, text=True, check=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert [without_times(json.loads(line)) for line in done.stdout.splitlines()] == [
        {"step": 2, "metric": "sum", "value": 1.0}, {"checkpoint": 2}, {"done": True}]
    assert "a line for humans" in done.stderr


def test_a_failing_trainer_exits_non_zero_with_the_step_on_stderr(tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text("import hippo\n"
                      "def train(stage):\n"
                      "    for step in stage.steps():\n"
                      "        stage.report(step + 7, acc=1.0)\n"
                      "hippo.serve(train)\n")
    done = subprocess.run(
        [sys.executable, str(script)], input=stage_line(tmp_path, 0, 2, [2], []),
        capture_output=True, text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode != 0
    assert done.stdout == ""
    assert "StageError: step 7: no evaluation was asked for at this step" in done.stderr


def test_the_readme_example_is_the_file_that_runs():
    """python/README.md shows examples/pytorch/minimal.py as it is (test_pytorch_examples runs it),
    in under 40 lines with the code that runs its study."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "python", "README.md")) as f:
        blocks = f.read().split("```python\n")
    trainer, study = (block.split("```")[0] for block in blocks[1:3])
    with open(os.path.join(root, "examples", "pytorch", "minimal.py")) as f:
        assert trainer == f.read()
    assert len((trainer + study).splitlines()) < 40
