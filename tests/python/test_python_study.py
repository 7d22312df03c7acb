"""hippo.Study: the space written in Python, optimize() with a trainer function named by import
path (tiny_trainer:fit, no PyTorch), its events (hippo run --events) to callbacks, a second
optimize() going on with an interrupted study, and the results against the binary's own output
(export --wide, preview, the errors of a bad spec). Real hippo processes and a real search plan;
seconds."""
import csv
import io
import json
import math
import os
import subprocess
import threading
import time

import pytest

import hippo

SPACE = {"lr": hippo.multistep(init=hippo.grid([0.1, 0.05]), milestones=[hippo.grid([2, 4])],
                               gamma=0.1)}
# The same space and study as the spec's JSON, written by hand.
SPACE_JSON = {"lr": {"schedule": "multistep", "init": {"grid": [0.1, 0.05]},
                     "milestones": [{"grid": [2, 4]}], "gamma": 0.1}}


def tiny_study(name, db, space=SPACE, fixed=None, length=6):
    return hippo.Study(name, space=space, searcher="grid", metric="accuracy", mode="max",
                       trainer="tiny_trainer:fit", data={"name": "toy"}, fixed=fixed,
                       length=hippo.steps(length), eval_every=hippo.steps(2), db=db)


def hippo_cli(*args, db=None):
    command = [hippo.binary()] + (["--db", str(db)] if db else []) + [str(a) for a in args]
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_optimize_streams_every_event_and_the_dataframe_equals_export_wide(tmp_path):
    db = tmp_path / "plan.db"
    study = tiny_study("tiny", db)
    events = []
    summary = study.optimize(workers=2, callbacks=[lambda s, e: events.append((s, e))])
    assert summary["status"] == "done" and summary["trials"] == 4
    assert all(s is study for s, _ in events)
    events = [e for _, e in events]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "study_started" and kinds[-1] == "study_ended"
    assert events[-1]["status"] == "done" and events[-1]["why"]
    trials = hippo.trials("tiny", db=db)
    # Each trial started (with its params) before its evaluations, and ended once.
    started = {e["trial"]: e for e in events if e["event"] == "trial_started"}
    ended = {e["trial"]: e for e in events if e["event"] == "trial_ended"}
    assert sorted(ended) == sorted(started) == sorted(t["trial"] for t in trials)
    for t in trials:
        assert started[t["trial"]]["params"] == t["params"]
        assert ended[t["trial"]]["status"] == t["status"] == "done"
        assert ended[t["trial"]]["step"] == t["length"] == 6
        told = sorted((e["step"], name, value) for e in events
                      if e["event"] == "evaluation" and e["trial"] == t["trial"]
                      for name, value in e["metrics"].items())
        assert told == sorted((m["step"], m["name"], m["value"]) for m in t["metrics"])
    assert kinds.index("trial_started") < kinds.index("evaluation")
    # The best so far only improves, and its last is hippo best's.
    bests = [e["value"] for e in events if e["event"] == "best"]
    assert bests == sorted(bests) and bests[-1] == study.best_trial["value"]
    assert study.best_trials == [study.best_trial]

    # The dataframe (or its rows) is export --wide, column for column, numbers bit for bit.
    frame = study.trials_dataframe()
    rows = frame.to_dict("records") if hasattr(frame, "to_dict") else frame
    columns = list(frame.columns) if hasattr(frame, "columns") else list(rows[0])
    exported = hippo_cli("--format", "csv", "export", "--wide", "tiny", db=db)
    assert exported.returncode == 0, exported.stderr
    table = list(csv.reader(io.StringIO(exported.stdout)))
    assert table[0] == columns
    assert columns[:6] == ["trial", "status", "length", "end_step", "lr.init",
                           "lr.milestones[0]"]  # parameters in the spec's order
    assert columns[6:] == ["step", "accuracy", "x", "best_accuracy", "start", "end", "duration"]
    assert len(table) - 1 == len(rows) == 4
    for cells, row in zip(table[1:], rows):
        for column, text in zip(columns, cells):
            value = row[column]
            if text == "":
                assert value is None or (isinstance(value, float) and math.isnan(value))
            elif column == "status":
                assert value == text
            else:
                assert float(text) == value  # lossless: the CSV's text reads back as the value
        assert row["duration"] == row["end"] - row["start"] and row["duration"] >= 0
    wide = json.loads(hippo_cli("--format", "json", "export", "--wide", "tiny", db=db).stdout)
    assert [r["best_accuracy"] for r in wide] == [max(
        m["value"] for m in t["metrics"] if m["name"] == "accuracy") for t in trials]

    # A study that has ended is not run again; it leaves the plan with delete().
    assert study.optimize() is None
    report = study.report(tmp_path / "report.html")
    assert os.path.getsize(report) > 0
    assert study.delete()["deleted"] == "tiny"
    with pytest.raises(hippo.HippoError):
        hippo.load_study("tiny", db=db)


def test_a_second_optimize_goes_on_with_an_interrupted_study(tmp_path):
    db = tmp_path / "plan.db"
    study = tiny_study("slow", db, fixed={"sleep": 0.15}, length=12)  # 44 unique steps: 6.6 s
    before, events = [], []
    first = study.optimize(workers=1, timeout=3, callbacks=[lambda s, e: before.append(e)])
    assert first["status"] == "interrupted"
    assert before[-1]["event"] == "study_ended" and before[-1]["status"] == "interrupted"
    assert hippo.load_study("slow", db=db).trials_dataframe() is not None  # readable meanwhile
    second = study.optimize(workers=2, callbacks=[lambda s, e: events.append(e)])
    assert second["status"] == "done" and second["trials"] == 4
    assert events[0]["event"] == "study_started" and events[0]["resumed"] is True
    assert events[-1]["event"] == "study_ended"
    trials = hippo.trials("slow", db=db)
    assert all(t["status"] == "done" for t in trials)
    # Each trial's end is told once, in the run where it ended.
    ends = [e["trial"] for e in before + events if e["event"] == "trial_ended"]
    assert sorted(ends) == sorted(t["trial"] for t in trials)


def test_enqueue_trial_before_a_run_and_into_a_running_one(tmp_path, monkeypatch):
    """Optuna's enqueue_trial: before optimize() a configuration is the spec's first trial; into
    a study that another thread's optimize() runs, it is a trial of that run (hippo enqueue on the
    run of this OS user, found through $HIPPO_HOME); params it has already make no trial; an
    ended study refuses."""
    monkeypatch.setenv("HIPPO_HOME", str(tmp_path / "home"))
    db = tmp_path / "plan.db"
    space = {"lr": hippo.uniform(0.01, 0.1)}

    def tpe_study(name, sleep):
        return hippo.Study(name, space=space, searcher="tpe", metric="accuracy", mode="max",
                           max_trials=4, trainer="tiny_trainer:fit", data={"name": "toy"},
                           fixed={"sleep": sleep}, length=hippo.steps(6),
                           eval_every=hippo.steps(2), db=db)

    first = tpe_study("queued", 0)
    assert first.enqueue_trial({"lr": 0.03}) is None
    first.enqueue_trial({"lr": 0.03})  # given twice: one configuration
    assert first.spec["enqueue"] == [{"lr": 0.03}]
    assert first.optimize(workers=1)["status"] == "done"
    assert hippo.trials("queued", db=db)[0]["params"] == {"lr": 0.03}
    with pytest.raises(hippo.HippoError, match="is done"):
        first.enqueue_trial({"lr": 0.04})
    with pytest.raises(hippo.HippoError, match="has already ended"):
        hippo.enqueue("queued", {"lr": 0.04}, db=db)

    running = tpe_study("live", 0.1)  # 4 trials of 6 steps: at least 2.4 s
    result = {}
    thread = threading.Thread(target=lambda: result.update(running.optimize(workers=1)))
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while running._status() != "running":
            assert time.monotonic() < deadline, "the study never started"
            time.sleep(0.05)
        reply = tpe_study("live", 0.1).enqueue_trial({"lr": 0.0421})
        assert reply["name"] == "live" and "existing" not in reply
        again = hippo.enqueue("live", {"lr": 0.04210}, db=db)  # the same value, written longer
        assert "existing" in again
    finally:
        thread.join()
    assert result["status"] == "done" and result["trials"] == 4
    assert {"lr": 0.0421} in [t["params"] for t in hippo.trials("live", db=db)]


def write_json(path, spec):
    path.write_text(json.dumps(spec))
    return path


def test_the_space_in_python_is_the_json_spec(tmp_path):
    study = tiny_study("same", tmp_path / "plan.db")
    by_hand = {"name": "same",
               "model": {"type": "external", "command": study.spec["model"]["command"],
                         "long_lived": True},
               "data": {"name": "toy"}, "hyperparameters": SPACE_JSON,
               "searcher": {"name": "grid", "metric": "accuracy", "mode": "max"},
               "length": {"steps": 6}, "eval": {"every": {"steps": 2}}}
    assert study.spec == by_hand
    # The same trials, root key and stage tree (the preview's table), and the same counts.
    a = hippo_cli("preview", write_json(tmp_path / "a.json", study.spec))
    b = hippo_cli("preview", write_json(tmp_path / "b.json", by_hand))
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    assert "root key" in a.stdout and a.stdout == b.stdout
    counts = json.loads(hippo_cli("--format", "json", "preview", tmp_path / "b.json").stdout)
    assert study.preview() == counts and counts["trials"] == 4


def test_a_bad_space_names_the_path_the_binary_names(tmp_path):
    bad = {"lr": hippo.multistep(init=hippo.grid([0.1]), milestones=[hippo.choice([3, 6])],
                                 gamma=-1)}
    study = tiny_study("bad", tmp_path / "plan.db", space=bad)
    with pytest.raises(hippo.HippoError) as refused:
        study.preview()
    cli = hippo_cli("preview", write_json(tmp_path / "bad.json", study.spec))
    assert cli.returncode == refused.value.status == 2
    assert str(refused.value) == cli.stderr.strip().splitlines()[-1]
    assert "hyperparameters.lr.gamma" in str(refused.value)
    with pytest.raises(hippo.HippoError, match="module:function"):
        hippo.Study("x", space=SPACE, trainer="no_colon", data={"name": "toy"})
    with pytest.raises(hippo.HippoError, match="no module"):
        hippo.Study("x", space=SPACE, trainer="no_such_module_here:fit", data={"name": "toy"})
