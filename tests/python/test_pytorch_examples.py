"""The PyTorch examples (examples/pytorch/) end to end, on prefixes of their data: real hippo,
worker and trainer processes (Debian's /usr/bin/python3 with python3-torch), a real search plan.

- For each example, the shared run and the trial-based run give every trial's metrics bit for bit
  equal, and the shared run trains each step of the tree once (steps_executed == steps_unique).
- A trainer that crashes mid-stage, or is SIGKILLed, costs at most the steps since its last state
  (the master retries the stage from its newest checkpoint; the steps it trained again count as
  executed), and the study ends with the metrics of an undisturbed run.
"""
import json
import os

import pytest

import hippo

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTORCH = os.path.join(ROOT, "examples", "pytorch")


def example(file, **changes):
    with open(os.path.join(PYTORCH, file)) as f:
        spec = json.load(f)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key].update(value)
        else:
            spec[key] = value
    return spec


def small_cnn(name="cnn"):
    """fmnist-cnn-multistep.json on 512 samples: 8 steps an epoch, 3 epochs, 8 trials."""
    return example("fmnist-cnn-multistep.json", name=name,
                   data={"train_samples": 512, "eval_samples": 200},
                   fixed={"channels": [4, 8]})


def small_cnn_bn_dropout(name="cnn-bn-dropout"):
    """small_cnn with BatchNorm and Dropout: running statistics and the dropout generator travel
    through the held copies and the checkpoints."""
    spec = small_cnn(name)
    spec["fixed"].update(batch_norm=True, dropout=0.25)
    return spec


def small_lm(name="lm"):
    """fortunes-lm-warmup.json, small: a 5-step warm-up, milestones at 10 or 20 steps after it."""
    spec = example("fortunes-lm-warmup.json", name=name,
                   data={"train_samples": 256, "eval_samples": 32},
                   fixed={"layers": 1, "dim": 32, "context": 32, "heads": 2, "batch_size": 8},
                   length={"steps": 30}, eval={"every": {"steps": 10}})
    lr = spec["hyperparameters"]["lr"]
    lr["warmup"] = 5
    lr["after"]["milestones"] = [{"grid": [10, 20]}]
    return spec


def small_wsd(name="wsd"):
    """fortunes-lm-wsd.json, small: cooldowns from steps 10 or 20, 5 or 10 long, linear or
    1-sqrt; each trial ends with its cooldown."""
    spec = example("fortunes-lm-wsd.json", name=name,
                   data={"train_samples": 256, "eval_samples": 32},
                   fixed={"layers": 1, "dim": 32, "context": 32, "heads": 2, "batch_size": 8},
                   eval={"every": {"steps": 10}, "at_end": True})
    spec["hyperparameters"]["lr"].update(warmup=5, decay_start={"grid": [10, 20]},
                                         decay={"grid": [5, 10]})
    return spec


def small_minimal(name="minimal"):
    """minimal.json (python/README.md's example) on 512 samples."""
    return example("minimal.json", name=name, data={"train_samples": 512, "eval_samples": 200})


def run(spec, tmp_path, policy="shared", workers=2):
    db = tmp_path / f"{spec['name']}-{policy}.db"
    summary = hippo.run(spec, workers=workers, policy=policy, allow_exec=True, db=db, cwd=ROOT)
    assert summary["status"] == "done", summary
    return summary, {t["trial"]: t["metrics"] for t in hippo.trials(spec["name"], db=db)}


@pytest.mark.parametrize("make", [small_cnn, small_cnn_bn_dropout, small_lm, small_wsd,
                                  small_minimal],
                         ids=["cnn", "cnn-bn-dropout", "lm", "wsd", "minimal"])
def test_shared_and_trial_based_runs_are_bit_for_bit_equal(make, tmp_path):
    spec = make()
    shared, shared_metrics = run(spec, tmp_path)
    alone, alone_metrics = run(spec, tmp_path, policy="trial-based")
    assert shared["steps_executed"] == shared["steps_unique"] < shared["steps_trial_based"]
    assert alone["steps_executed"] == shared["steps_trial_based"]
    assert shared_metrics == alone_metrics  # floats from JSON: equal text, equal bits
    names = {m["name"] for ms in shared_metrics.values() for m in ms}
    trials = {t["trial"]: t for t in hippo.trials(spec["name"], db=tmp_path / f"{spec['name']}-shared.db")}
    assert all(len(m) == len(names) * len(spec_evals(spec, trials[t]))
               for t, m in shared_metrics.items())
    assert shared["best"] == alone["best"]


def spec_evals(spec, trial):
    """The evaluation steps of a trial: every N up to its length, and its end."""
    if "end_of" in spec["length"]:
        every = spec["eval"]["every"]["steps"]
        return sorted(set(range(every, trial["length"], every)) | {trial["length"]})
    length = spec["length"]
    if "epochs" in length:
        return range(length["epochs"])
    return range(length["steps"] // spec["eval"]["every"]["steps"])


def test_an_asha_study_of_the_cnn(tmp_path):
    spec = example("fmnist-cnn-asha.json", name="asha",
                   data={"train_samples": 256, "eval_samples": 100}, length={"epochs": 9},
                   searcher={**example("fmnist-cnn-asha.json")["searcher"], "max_trials": 6})
    summary, metrics = run(spec, tmp_path)
    assert summary["steps_executed"] == summary["steps_unique"]
    assert len(metrics) == 6
    lengths = sorted(max(m["step"] for m in ms) for ms in metrics.values())
    assert lengths[-1] > lengths[0]  # promoted trials went further than stopped ones


def crashing_cnn(crash_at, marker, how, log):
    spec = small_cnn("crash")
    spec["model"]["command"] = ["/usr/bin/python3", "tests/python/crash_once.py",
                                "examples/pytorch/fashion_mnist.py", str(crash_at), str(marker),
                                how, str(log)]
    return spec


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_trainer_that_crashes_costs_only_the_steps_since_its_last_state(how, tmp_path):
    # Undisturbed (it never reaches step 1000): its stages' log shows the long-lived trainers
    # forking children from the states they hold in memory (the master sends a child stage to
    # the worker whose trainer holds its parent).
    calm_log = tmp_path / "calm.log"
    calm, calm_metrics = run(crashing_cnn(1000, tmp_path / "never", how, calm_log), tmp_path)
    restored = [line.split()[3] for line in calm_log.read_text().splitlines()]
    assert restored.count("None") == 2  # the two roots (one per initial learning rate)
    assert restored.count("memory") >= 1, restored
    # Branch points (checkpoints) are at the epochs, steps 8 and 16; the crash is at step 12.
    crash_at, last_state = 12, 8
    log, marker = tmp_path / "stages.log", tmp_path / "crashed"
    spec = crashing_cnn(crash_at, marker, how, log)
    db = tmp_path / f"crash-{how}.db"
    summary = hippo.run(spec, workers=2, allow_exec=True, db=db, cwd=ROOT)
    assert marker.exists()
    assert summary["status"] == "done", summary
    metrics = {t["trial"]: t["metrics"] for t in hippo.trials("crash", db=db)}
    assert metrics == calm_metrics
    assert summary["best"] == calm["best"]
    assert summary["steps_unique"] == calm["steps_unique"]
    # What the crash cost counts as executed: exactly for an exception (the helper says how far
    # it got), up to the last progress line (a tenth of a second) for a SIGKILL.
    redone = summary["steps_executed"] - summary["steps_unique"]
    if how == "raise":
        assert redone == crash_at - last_state, summary
    else:
        assert 0 <= redone <= crash_at - last_state, summary
    # The crashed stage was given again, from its last state: the only (from, to) logged twice.
    stages = [tuple(line.split()[:3]) for line in log.read_text().splitlines()]
    twice = {s for s in stages if stages.count(s) > 1}
    assert len(twice) == 1, stages
    assert int(next(iter(twice))[0]) == last_state


def test_the_helpers_misuse_fails_the_trial_with_the_step(tmp_path):
    """A trainer that reports a metric for a step it was not asked for: the helper raises before
    anything reaches the worker, the stage is tried 3 times, and the trial fails saying why."""
    script = tmp_path / "bad_trainer.py"
    script.write_text("import hippo\n"
                      "def train(stage):\n"
                      "    for step in stage.steps():\n"
                      "        stage.report(step + 1, accuracy=0.5)\n"
                      "hippo.serve(train)\n")
    spec = small_cnn("misuse")
    spec["model"]["command"] = ["/usr/bin/python3", str(script)]
    spec["hyperparameters"]["lr"] = 0.1
    summary = hippo.run(spec, workers=1, allow_exec=True, db=tmp_path / "misuse.db", cwd=ROOT)
    assert summary["status"] == "failed"
    [trial] = hippo.trials("misuse", db=tmp_path / "misuse.db")
    assert trial["status"] == "failed"
    assert "StageError: step 1: no evaluation was asked for at this step" in trial["error"]
    assert "(the stage failed 3 times)" in trial["error"]


def test_workers_started_otherwise_and_plain_pytorch_give_the_bits_of_hippo_run(tmp_path):
    """The worker, not how it was started, fixes its trainers' environment (python/README.md):
    a cluster of `hippo worker`s started from a shell with other thread counts and BLAS settings,
    on machines of different core counts, gives the metrics of `hippo run`, bit for bit; and one
    trial trained again in plain PyTorch, outside hippo (the trainer fed a stage line of our own,
    with the documented environment), gives that trial's metrics too."""
    import subprocess
    import time

    spec = small_minimal("cluster")
    _, by_run = run(spec, tmp_path)

    # A master and two workers as a user's shell on a larger machine would start them.
    shell = dict(os.environ, OMP_NUM_THREADS="4", MKL_NUM_THREADS="4", OPENBLAS_NUM_THREADS="4",
                 OPENBLAS_CORETYPE="Prescott", CUDA_VISIBLE_DEVICES="0")
    db, address = tmp_path / "cluster.db", f"ipc://{tmp_path}/master.sock"
    master = subprocess.Popen([hippo.binary(), "--db", str(db), "master", "--bind", address,
                               "--checkpoints", str(tmp_path / "ckpt"), "--allow-exec", "trainer"],
                              env=shell, cwd=ROOT, stderr=subprocess.DEVNULL)
    # Machines of different core counts: w0 sees one core (taskset), w1 every core.
    cores = [["taskset", "-c", "0"], []]
    workers = [subprocess.Popen(cores[i] + [hippo.binary(), "worker", "--master", address,
                                            "--threads", "1", "--checkpoints",
                                            str(tmp_path / "ckpt"), "--name", f"w{i}",
                                            "--allow-exec", "trainer"],
                                env=shell, cwd=ROOT, stderr=subprocess.DEVNULL) for i in range(2)]
    try:
        time.sleep(1)
        summary = hippo.submit(spec, master=address)
    finally:
        for p in workers + [master]:
            p.terminate()
            p.wait()
    assert summary["status"] == "done", summary
    by_cluster = {t["trial"]: t["metrics"] for t in hippo.trials("cluster", db=db)}
    assert by_cluster == by_run

    # Trial 1 alone, in plain PyTorch: its whole path as one stage from step 0.
    [trial] = [t for t in hippo.trials("cluster", db=db) if t["trial"] == 1]
    steps_per_epoch = spec["data"]["train_samples"] // spec["fixed"]["batch_size"]
    end = spec["length"]["epochs"] * steps_per_epoch
    milestone = int(trial["params"]["lr.milestones[0]"]) * steps_per_epoch
    lr = {"segments": [{"kind": "constant", "start": 0, "end": milestone, "v0": 0.1},
                       {"kind": "constant", "start": milestone,
                        "v0": 0.1 * trial["params"]["lr.gamma"]}]}
    stage = {"hippo_trainer": 1, "hippo_version": hippo.__version__, "model": spec["model"], "seed": spec.get("seed", 0),
             "data": dict(spec["data"], name="fashion-mnist"), "fixed": spec["fixed"],
             "from": 0, "to": end, "input_checkpoint": None, "input_state": None,
             "checkpoints": [], "eval_steps": list(range(steps_per_epoch, end + 1, steps_per_epoch)),
             "hyperparameters": {"lr": lr}, "device": "cpu", "threads": 1}
    documented = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                      OPENBLAS_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
                      PYTHONPATH=os.path.join(ROOT, "python"))
    documented.pop("OPENBLAS_CORETYPE", None)
    alone = subprocess.run(["/usr/bin/python3", os.path.join(PYTORCH, "minimal.py")],
                           input=json.dumps(stage) + "\n", capture_output=True, text=True,
                           env=documented, cwd=ROOT, timeout=120)
    assert alone.returncode == 0, alone.stderr
    lines = [json.loads(line) for line in alone.stdout.splitlines()]
    plain = [{"step": m["step"], "name": m["metric"], "value": m["value"]}
             for m in lines if "metric" in m]
    assert plain == trial["metrics"]
