"""hippo.run / trials / best / studies / metrics / dataframe against the real hippo binary
($HIPPO_BIN) and a real search plan: the small built-in CI study (seconds)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import hippo

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def ci_spec(name):
    with open(os.path.join(ROOT, "examples", "fmnist-mlp-ci.json")) as f:
        spec = json.load(f)
    spec["name"] = name
    return spec


def test_a_study_from_python_end_to_end(tmp_path):
    db = tmp_path / "plan.db"
    spec = ci_spec("from-python")
    summary = hippo.run(spec, workers=2, db=db)
    assert summary["status"] == "done"
    assert summary["trials"] == 4
    assert summary["steps_executed"] == summary["steps_unique"]
    assert summary["best"]["metric"] == "accuracy"

    [study] = hippo.studies(db=db)
    assert study["name"] == "from-python" and study["status"] == "done"
    trials = hippo.trials("from-python", db=db)
    assert len(trials) == 4
    assert all(t["status"] == "done" for t in trials)
    best = hippo.best("from-python", db=db)
    assert best["value"] == summary["best"]["value"]
    assert best["value"] == max(m["value"] for t in trials for m in t["metrics"]
                                if m["name"] == "accuracy")

    rows = hippo.metrics("from-python", db=db)
    assert len(rows) == sum(len(t["metrics"]) for t in trials) == 4 * 3 * 3  # accuracy, loss, params
    assert set(rows[0]) == {"trial", "status", "end_step", "step", "metric", "value", "lr.init",
                            "lr.every"}
    pandas = pytest.importorskip("pandas")
    frame = hippo.dataframe("from-python", db=db)
    assert isinstance(frame, pandas.DataFrame)
    assert len(frame) == len(rows)
    curve = frame[(frame.trial == best["trial"]) & (frame.metric == "accuracy")]
    assert curve.value.max() == best["value"]


def test_the_trial_based_policy_and_a_spec_file(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(ci_spec("as-a-file")))
    summary = hippo.run(spec, workers=1, policy="trial-based", db=tmp_path / "plan.db")
    assert summary["status"] == "done"
    assert summary["steps_executed"] == summary["steps_trial_based"]


def test_resume_starts_a_new_study_and_refuses_one_that_is_done(tmp_path):
    db = tmp_path / "plan.db"
    spec = ci_spec("resumable")
    assert hippo.run(spec, workers=2, db=db, resume=True)["status"] == "done"  # none to resume
    with pytest.raises(hippo.HippoError) as e:
        hippo.run(spec, workers=2, db=db, resume=True)
    assert e.value.status == 2 and "is done: there is nothing to resume" in str(e.value)
    with pytest.raises(hippo.HippoError) as e:
        hippo.run(spec, workers=2, db=db)
    # A study that is done is not offered resume (refused above), but its summary and delete.
    assert "resume" not in str(e.value) and "hippo summary resumable" in str(e.value)
    assert "hippo delete resumable" in str(e.value)


def test_bad_input_raises_the_commands_error(tmp_path):
    spec = ci_spec("bad")
    spec["hyperparameters"]["lr"]["gamma"] = "x"
    with pytest.raises(hippo.HippoError) as e:
        hippo.run(spec, db=tmp_path / "plan.db")
    assert e.value.status == 2
    assert "hyperparameters.lr.gamma: expected a number or a distribution" in str(e.value)
    assert not (tmp_path / "plan.db").exists() or hippo.studies(db=tmp_path / "plan.db") == []
    with pytest.raises(hippo.HippoError) as e:
        hippo.trials("nothing", db=tmp_path / "none.db")
    assert e.value.status == 2 and "no search plan at" in str(e.value)


def test_dataframe_without_pandas_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now fails
    with pytest.raises(ImportError) as e:
        hippo.dataframe("any", db=tmp_path / "plan.db")
    assert "python3-pandas" in str(e.value)


def _package_copy(tmp_path, version):
    """This package, copied out of the checkout (so that it finds no build/hippo) as `version`."""
    copy = tmp_path / "site" / "hippo"
    shutil.copytree(os.path.dirname(hippo.__file__), copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "version.py").write_text(f'__version__ = "{version}"\n')
    return copy.parent


def _run_python(code, site, **env):
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), **env}
    return subprocess.run([sys.executable, "-c", code], env=environment, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_binary_of_another_version_is_refused_naming_both(tmp_path):
    site = _package_copy(tmp_path, "0.0.1")
    done = _run_python("import hippo; hippo.studies(db='x.db')", site,
                       HIPPO_BIN=os.environ["HIPPO_BIN"])
    assert done.returncode != 0
    assert f"is version {hippo.__version__} (protocol 1, plan schema" in done.stderr, done.stderr
    assert "this Python package is 0.0.1" in done.stderr, done.stderr
    assert not (tmp_path / "x.db").exists()


def test_no_binary_anywhere_says_how_to_name_one(tmp_path):
    site = _package_copy(tmp_path, hippo.__version__)
    done = _run_python("import hippo; hippo.studies()", site)  # no HIPPO_BIN, no hippo on PATH
    assert done.returncode != 0
    assert "no hippo binary" in done.stderr and "HIPPO_BIN" in done.stderr, done.stderr
