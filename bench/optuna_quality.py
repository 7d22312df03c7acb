"""Optuna's TPESampler on bench/search_quality.cc's objectives, the same trials and seeds.

    optuna_quality.py OBJECTIVE default|multivariate TRIALS SEEDS

prints one JSON line per seed, {"seed", "trials" (completed), "best"}, as search_quality does.
The objectives must stay identical to search_quality.cc's (bench/search_quality.sh compares them).
"""
import json
import math
import sys

import optuna


def bowl(t):
    c = [0.5, -1.0, 1.0, -0.25]
    return sum((t.suggest_float(f"x{i}", -2, 2) - c[i]) ** 2 for i in range(4))


def branin(t):
    x, y = t.suggest_float("x", -5, 10), t.suggest_float("y", 0, 15)
    pi = math.pi
    return (y - 5.1 / (4 * pi * pi) * x * x + 5 / pi * x - 6) ** 2 + 10 * (1 - 1 / (8 * pi)) * math.cos(x) + 10


ALPHA = [1.0, 1.2, 3.0, 3.2]
A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886], [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
     [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650], [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]


def hartmann6(t):
    x = [t.suggest_float(f"x{j}", 0, 1) for j in range(6)]
    return -sum(ALPHA[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j]) ** 2 for j in range(6))) for i in range(4))


def curves(t):
    lr = math.log10(t.suggest_float("lr", 1e-4, 1.0, log=True))
    wd = math.log10(t.suggest_float("weight_decay", 1e-6, 1e-1, log=True))
    width = t.suggest_int("width", 16, 1024)
    u, v, w = lr + 2 + 0.3 * (math.log2(width) - 7), wd + 4, math.log2(width) - 8
    h = math.sin(12.9898 * lr + 78.233 * wd + 37.719 * width) * 43758.5453
    final = 0.1 + 0.15 * u * u + 0.05 * v * v + 0.02 * w * w + 0.02 * (h - math.floor(h))
    speed = 1 / (1 + 0.5 * u * u)
    return final + (2.3 - final) * math.exp(-5 * speed * 40 / 40)  # the last of steps 10..40


def main():
    objective = {"bowl": bowl, "branin": branin, "hartmann6": hartmann6, "curves": curves}[sys.argv[1]]
    multivariate = {"default": False, "multivariate": True}[sys.argv[2]]
    trials, seeds = int(sys.argv[3]), int(sys.argv[4])
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for seed in range(seeds):
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=multivariate)
        study = optuna.create_study(sampler=sampler, direction="minimize")
        study.optimize(objective, n_trials=trials)
        done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        print(json.dumps({"seed": seed, "trials": len(done), "best": study.best_value}), flush=True)


if __name__ == "__main__":
    main()
