"""examples/searchers/optuna_bridge.py, Optuna's samplers as an external searcher: spoken to
directly in the protocol of searchers/README.md (a restart mid-study proposes what an undisturbed
run proposes), and its NSGA-II example run by the real hippo binary ($HIPPO_BIN) with several
objectives and a constraint."""
import json
import math
import os
import sqlite3
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BRIDGE = os.path.join(ROOT, "examples", "searchers", "optuna_bridge.py")
NSGA2_EXAMPLE = os.path.join(ROOT, "examples", "fmnist-mlp-optuna-nsga2.json")

START = {"event": "start", "seed": 7, "metric": "accuracy", "mode": "max", "max_trials": 14,
         "length": 30, "eval_steps": [10, 20, 30],
         "objectives": [{"metric": "accuracy", "mode": "max"}, {"metric": "loss", "mode": "min"}],
         "constraints": [{"metric": "loss", "max": 0.9}],
         "space": [{"name": "lr.init", "kind": "loguniform", "range": [0.0001, 0.1]},
                   {"name": "depth", "kind": "int", "range": [1, 4]},
                   {"name": "act", "kind": "choice", "values": ["relu", "gelu"]}]}


class Bridge:
    """One bridge process, one event a line, one reply each."""

    def __init__(self, *args):
        self.process = subprocess.Popen(["/usr/bin/python3", BRIDGE, *args], text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def __call__(self, event):
        self.process.stdin.write(json.dumps(event) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self):
        self.process.stdin.close()
        assert self.process.wait(timeout=30) == 0


def evaluation(trial, params):
    """Two objectives in conflict (accuracy up and loss down with lr, loss up with depth) and a
    loss bound some trials break; trial 9 diverges (hippo's worst values, as strings)."""
    if trial == 9:
        return {"value": None, "values": ["-inf", "inf"], "violation": "inf"}
    x = math.log10(params["lr.init"])  # in [-4, -1]
    accuracy = 0.9 + 0.02 * x + 0.01 * params["depth"]
    loss = 0.2 * params["depth"] + 0.1 * (x + 4) + (0.05 if params["act"] == "gelu" else 0)
    violation = max(0.0, loss - 0.9)
    return {"value": accuracy if violation == 0 else None, "values": [accuracy, loss],
            "violation": violation}


def study(bridge):
    """Runs the study to its finish, trials trained and closed one at a time in creation order
    (trial 11 fails). Returns the events fed and the replies."""
    events, replies, trials = [], [], {}

    def feed(event):
        events.append(event)
        replies.append(bridge(event))
        for op in replies[-1]["operations"]:
            if op["op"] == "create":
                trials[op["trial"]] = op["params"]
        return replies[-1]

    reply = feed(START)
    closed = 0
    while closed < len(trials):
        if closed == 11:
            reply = feed({"event": "trial_failed", "trial": closed})
        else:
            feed({"event": "validation", "trial": closed, "step": 30,
                  **evaluation(closed, trials[closed])})
            reply = feed({"event": "trial_closed", "trial": closed})
        closed += 1
    assert reply["operations"][-1] == {"op": "finish"}
    return events, replies, trials


@pytest.mark.parametrize("sampler", ["nsga2", "tpe"])
def test_a_restart_mid_study_proposes_what_an_undisturbed_run_proposes(sampler):
    args = ["--sampler", sampler, "--population", "4"]
    bridge = Bridge(*args)
    events, replies, trials = study(bridge)
    state = bridge({"event": "save"})["state"]
    bridge.close()
    assert len(trials) == 14
    # The search was told every objective's value (the state keeps what it told).
    assert state["trials"][0]["values"] == evaluation(0, trials[0])["values"]
    assert state["trials"][9]["status"] == "failed"  # not finite: told FAIL
    for cut in (8, 11, 13, len(events) - 3):
        first = Bridge(*args)
        assert [first(e) for e in events[:cut]] == replies[:cut]
        saved = first({"event": "save"})["state"]
        first.close()
        # A new process loads the state, is fed the events that followed, and replies what the
        # undisturbed one replied.
        second = Bridge(*args)
        assert second(dict(START, event="load", state=saved)) == {"ok": True}
        assert second({"event": "save"})["state"] == saved
        assert [second(e) for e in events[cut:]] == replies[cut:]
        second.close()


def hippo(db, *args):
    """The hippo command's JSON output, run from the repository root as the README runs it."""
    out = subprocess.run([os.environ["HIPPO_BIN"], "--db", str(db), "--format", "json", *args],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def dominates(a, b):
    """Accuracy up, loss down: a is no worse in both and better in one."""
    no_worse = a[0] >= b[0] and a[1] <= b[1]
    return no_worse and (a[0] > b[0] or a[1] < b[1])


def test_the_nsga2_example_finds_the_front_from_every_value(tmp_path):
    db = tmp_path / "plan.db"
    with open(NSGA2_EXAMPLE) as f:
        spec = json.load(f)
    summary = hippo(db, "run", NSGA2_EXAMPLE, "--workers", "2", "--allow-exec", "searcher")
    assert summary["status"] == "done"
    assert summary["trials"] == spec["searcher"]["max_trials"] == 14

    trials = hippo(db, "trials", spec["name"])
    assert len(trials) == 14 and all(t["status"] == "done" for t in trials)
    bound = spec["searcher"]["constraints"][0]["max"]
    point = {t["trial"]: (t["values"]["accuracy"], t["values"]["loss"]) for t in trials}
    feasible = {n for n, (_, loss) in point.items() if loss <= bound}
    assert {t["trial"] for t in trials if t["feasible"]} == feasible
    assert 0 < len(feasible) < 14  # the bound matters in this example
    front = {n for n in feasible if not any(dominates(point[m], point[n]) for m in feasible)}
    assert {t["trial"] for t in trials if t["pareto_optimal"]} == front
    best = hippo(db, "best", spec["name"])
    assert isinstance(best, list)
    assert {b["trial"] for b in best} == front
    assert {b["trial"]: (b["values"]["accuracy"], b["values"]["loss"]) for b in best} == \
        {n: point[n] for n in front}

    # The Optuna study inside the bridge was told both objectives and the violation of each trial
    # (its state in the search plan keeps what it told; trials are created in hippo's order).
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as plan:
        [(saved,)] = plan.execute("SELECT searcher_state FROM studies WHERE name = ?",
                                  (spec["name"],)).fetchall()
    told = json.loads(saved)["state"]["trials"]
    assert len(told) == 14
    for t, mine in zip(sorted(trials, key=lambda t: t["trial"]), told):
        assert mine["params"] == t["params"] and mine["status"] == "done"
        assert tuple(mine["values"]) == point[t["trial"]]
        assert mine["violation"] == pytest.approx(max(0.0, point[t["trial"]][1] - bound))
