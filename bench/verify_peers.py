#!/usr/bin/python3
"""Verifies one side of a benchmark against Optuna (bench/hpo_vs_optuna.sh, pytorch_vs_optuna.sh)
from the files it left in TMP, before any ratio is printed; on a failure, says what failed with
its log's tail and exits 1.

    verify_peers.py TMP HIPPO hippo NAME POINTS          hippo's run NAME: exit status 0 (NAME.rc),
                                                         a summary (NAME.out) of a done study with
                                                         POINTS trials, all done (NAME.db)
    verify_peers.py TMP HIPPO peers NAME WORKERS POINTS  Optuna's peers 1..WORKERS: each exited 0
                                                         (NAME.peerW.exit: pid and status), printed
                                                         its result (NAME.peerW.out) and completed
                                                         the trials it claims, and the study
                                                         (NAME.summary) completed each of POINTS
                                                         grid points once
"""
import json, subprocess, sys
tmp, hippo, kind, name = sys.argv[1:5]

def tail(path, n=15):
    with open(path, errors="replace") as f:
        return "".join("    " + line for line in f.readlines()[-n:]) or "    (empty)\n"

def last_json(path):
    lines = [line for line in open(path) if line.strip()]
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None

def status_text(rc):
    return f"status {rc}" + (f" (killed by signal {rc - 128})" if rc > 128 else "")

errors = []
if kind == "hippo":
    points = int(sys.argv[5])
    rc, s, log = int(open(f"{tmp}/{name}.rc").read()), last_json(f"{tmp}/{name}.out"), f"{tmp}/{name}.log"
    if rc != 0 or s is None:
        problem = f"exited with {status_text(rc)}" + ("" if s else " and printed no summary")
    elif s["status"] != "done":
        problem = f"ended its study with status {s['status']!r}"
    else:
        trials = json.loads(subprocess.run(
            [hippo, "--db", f"{tmp}/{name}.db", "--format", "json", "trials", s["study"]],
            check=True, capture_output=True, text=True).stdout)
        done = sum(t["status"] == "done" for t in trials)
        problem = (None if s["trials"] == done == points else
                   f"ran {s['trials']} trials, {done} of them done, for {points} grid points")
    if problem:
        errors.append(f"hippo run ({name}) {problem}; its log ({log}) ends:\n{tail(log)}")
else:
    workers, points = int(sys.argv[5]), int(sys.argv[6])
    study = last_json(f"{tmp}/{name}.summary")
    for w in range(1, workers + 1):
        pid, rc = map(int, open(f"{tmp}/{name}.peer{w}.exit").read().split())
        err, line = f"{tmp}/{name}.peer{w}.err", last_json(f"{tmp}/{name}.peer{w}.out")
        recorded = study["per_peer"].get(str(w), 0)
        if rc != 0:
            problem = f"exited with {status_text(rc)}"
        elif line is None:
            problem = "exited 0 but printed no result"
        elif line["trials"] != recorded:
            problem = f"claims {line['trials']} completed trials, the study records {recorded}"
        else:
            continue
        errors.append(f"Optuna peer {w} (pid {pid}) {problem}; its stderr ({err}) ends:\n{tail(err)}")
    if not study["trials"] == study["grid_points_done"] == points:
        errors.append(f"Optuna's study completed {study['trials']} trials over "
                      f"{study['grid_points_done']} distinct grid points (per peer: "
                      f"{study['per_peer']}); the grid has {points} points, each to run once")
if errors:
    sys.exit("".join(f"error: {e}\n" for e in errors).rstrip())
