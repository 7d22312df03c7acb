"""The recorded curves of bench/curves/ in Python: the table reader and the mapping rule, as
hippo's master/recorded_curves.h reads and maps them (bench/curves/README.md), and the
competitors that are not hippo's searchers, in the same simulated time: Optuna 3.1's TPESampler
with its HyperbandPruner or SuccessiveHalvingPruner, and "top-K after one epoch".

Every competitor here runs 4 (WORKERS) asynchronous simulated workers: a worker's epoch takes its
configuration's recorded step_s * steps_per_epoch, then an evaluation its eval_s; a worker that
is free asks for work at once; nothing starts at or after the budget T, and what would finish
after T is not seen. Each run returns its evaluations as (simulated time, accuracy).

  replay.py map TABLE < values.jsonl   # the nearest configuration of each line's values (tests)
"""
import gzip
import heapq
import json
import math
import sys

MAGIC = "# hippo recorded curves v1"
TAIL = ["steps_per_epoch", "step_s", "eval_s", "epoch", "accuracy", "loss"]


class Table:
    """A table of recorded curves (master/recorded_curves.h gives the format and its checks;
    this reader trusts the file that hippo's reader accepts, and checks what it uses)."""

    def __init__(self, path):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            lines = f.read().splitlines()
        if not lines or lines[0] != MAGIC:
            raise SystemExit(f"error: {path}: not a table of recorded curves")
        self.leaves = []  # (name, log, lo, hi)
        rows = []
        for line in lines[1:]:
            f = line.split("\t")
            if line.startswith("#"):
                continue
            if f[0] == "space":
                self.leaves.append((f[1], f[2] == "log", float(f[3]), float(f[4])))
            elif f[0] == "config":
                if f != ["config"] + [l[0] for l in self.leaves] + TAIL:
                    raise SystemExit(f"error: {path}: unexpected header {f}")
            else:
                rows.append(f)
        n = len(self.leaves)
        self.configs = []  # {values, epoch_s, eval_s, accuracy: [], loss: []}
        for f in rows:
            if int(f[n + 4]) == 1:
                spe, step_s = int(f[n + 1]), float(f[n + 2])
                self.configs.append({"values": [float(v) for v in f[1:n + 1]],
                                     "epoch_s": step_s * spe, "eval_s": float(f[n + 3]),
                                     "accuracy": [], "loss": []})
            c = self.configs[int(f[0])]
            c["accuracy"].append(float(f[n + 5]))
            c["loss"].append(float(f[n + 6]))
        self.epochs = len(self.configs[0]["accuracy"])
        self.points = [self.normalized(c["values"]) for c in self.configs]

    def normalized(self, values):
        out = []
        for (name, log, lo, hi), v in zip(self.leaves, values):
            out.append((math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) if log
                       else (v - lo) / (hi - lo))
        return out

    def nearest(self, values):
        """The number of the recorded configuration nearest to values (one per leaf, in the
        table's order) in normalized coordinates; the lower number on a tie."""
        u = self.normalized(values)
        best, best_d = 0, math.inf
        for i, p in enumerate(self.points):
            d = sum((a - b) * (a - b) for a, b in zip(u, p))
            if d < best_d:
                best, best_d = i, d
        return best

    def best_ever(self):
        return max(a for c in self.configs for a in c["accuracy"] if not math.isnan(a))


class Workers:
    """The simulated workers' next events: (time, worker), the earliest first (ties: the lower
    worker)."""

    def __init__(self):
        self.heap = []

    def at(self, time, worker):
        heapq.heappush(self.heap, (time, worker))

    def next(self):
        return heapq.heappop(self.heap) if self.heap else None


def epoch_time(config):
    return config["epoch_s"] + config["eval_s"]


def run_optuna(table, pruner_name, seed, budget, workers=4):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = (optuna.pruners.HyperbandPruner(min_resource=1, max_resource=table.epochs,
                                             reduction_factor=3) if pruner_name == "hyperband"
              else optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3))
    # A fixed name: HyperbandPruner assigns brackets by a hash of the study's name and the trial's
    # number, and an unnamed study gets a random one (the run would not repeat).
    study = optuna.create_study(study_name=f"curves-{pruner_name}-{seed}", direction="maximize",
                                pruner=pruner, sampler=optuna.samplers.TPESampler(seed=seed))
    (lr, _, lr_lo, lr_hi), (mo, _, mo_lo, mo_hi), (wd, _, wd_lo, wd_hi), \
        (bs, _, bs_lo, bs_hi), (wi, _, wi_lo, wi_hi) = table.leaves
    evals, running = [], {}
    pool = Workers()

    def start(worker, now):
        if now >= budget:
            return
        trial = study.ask()
        values = [trial.suggest_float(lr, lr_lo, lr_hi, log=True),
                  trial.suggest_float(mo, mo_lo, mo_hi),
                  trial.suggest_float(wd, wd_lo, wd_hi, log=True),
                  trial.suggest_int(bs, int(bs_lo), int(bs_hi)),
                  trial.suggest_int(wi, int(wi_lo), int(wi_hi))]
        config = table.configs[table.nearest(values)]
        running[worker] = [trial, config, 0]
        pool.at(now + epoch_time(config), worker)

    for w in range(workers):
        start(w, 0.0)
    evaluated = set()
    while (event := pool.next()) is not None:
        now, w = event
        if now > budget:
            break
        trial, config, epoch = running[w]
        epoch += 1
        running[w][2] = epoch
        acc = config["accuracy"][epoch - 1]
        if math.isnan(acc):  # diverged: a failed trial, as hippo counts it
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            evals.append((now, acc))
            evaluated.add(trial.number)
            trial.report(acc, epoch)
            if epoch == table.epochs:
                study.tell(trial, acc)
            elif trial.should_prune():
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                pool.at(now + epoch_time(config), w)
                continue
        start(w, now)
    return evals, {"trials": len(evaluated), "reached_budget": event is not None}


def run_top_k(table, seed, budget, workers=4):
    """Random configurations trained one epoch each until budget / 3, then the best of them by
    that epoch's accuracy continued to the last epoch, best first, until the budget."""
    import numpy as np
    rng = np.random.default_rng(seed)

    def draw():
        values = []
        for name, log, lo, hi in table.leaves:
            if name in ("batch_size", "width"):
                values.append(float(rng.integers(int(lo), int(hi) + 1)))
            elif log:
                values.append(math.exp(rng.uniform(math.log(lo), math.log(hi))))
            else:
                values.append(rng.uniform(lo, hi))
        return table.configs[table.nearest(values)]

    evals, done_one, running, idle = [], [], {}, []
    pool = Workers()
    phase_two_at = budget / 3
    one_epoch = 0

    def assign(worker, now):
        """Gives the worker its next trial; False when there is none for it now."""
        if now >= budget or (now >= phase_two_at and not done_one):
            return False
        if now < phase_two_at:
            config = draw()
            running[worker] = [config, 0, 1]  # config, epoch reached, epoch to train to
        else:
            done_one.sort(key=lambda x: (-x[0], x[1]))  # best first, the earlier on a tie
            config = done_one.pop(0)[2]
            running[worker] = [config, 1, table.epochs]
        pool.at(now + epoch_time(config), worker)
        return True

    for w in range(workers):
        assign(w, 0.0)
    while (event := pool.next()) is not None:
        now, w = event
        if now > budget:
            break
        config, epoch, last = running[w]
        epoch += 1
        running[w][1] = epoch
        acc = config["accuracy"][epoch - 1]
        diverged = math.isnan(acc)
        if not diverged:
            evals.append((now, acc))
        if epoch < last and not diverged:
            pool.at(now + epoch_time(config), w)
            continue
        if last == 1 and not diverged:
            one_epoch += 1
            done_one.append((acc, one_epoch, config))
        if not assign(w, now):
            idle.append(w)
        while idle and done_one and now >= phase_two_at and now < budget:
            assign(idle.pop(0), now)
    return evals, {"trials": one_epoch, "reached_budget": event is not None}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "map":
        table = Table(sys.argv[2])
        for line in sys.stdin:
            print(table.nearest(json.loads(line)))
        return
    raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
