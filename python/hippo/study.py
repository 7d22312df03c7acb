"""A study from Python, as Optuna and Ray Tune users expect one: `hippo.Study(...)` builds the JSON
spec (the search space written with hippo.grid, hippo.multistep, ...), `optimize()` runs it with
local workers through the hippo binary and streams its events (`hippo run --events`) to callbacks
and a progress line; the results come back through the binary's JSON output (`export --wide`,
`best`, `preview`, `report`, `delete`), never the plan's tables.

    study = hippo.Study("lr-search", space={"lr": hippo.multistep(...)}, searcher="grid",
                        metric="accuracy", mode="max", trainer="my_pkg.train:fit",
                        data={"name": "my-data"}, length=hippo.epochs(3))
    study.optimize(workers=2, callbacks=[lambda study, event: print(event)])
    study.trials_dataframe()

The trainer is a function named by import path, never pickled: each worker runs
`python -m hippo serve my_pkg.train:fit`, which imports it and serves it stages (hippo.serve).
"""
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from .studies import HippoError, _SpecFile, _call, _last_json, binary, enqueue

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _trainer_root(trainer):
    """The folder from which `trainer`'s module imports, checked: `trainer` must read
    "module:function" and its module be importable here (its import is not run: it may import
    PyTorch). The workers' trainers get this folder on their PYTHONPATH."""
    module, sep, function = trainer.partition(":")
    if not sep or not module or not function.isidentifier():
        raise HippoError(f"trainer {trainer!r}: expected \"module:function\", e.g. "
                         "\"my_pkg.train:fit\"", 2)
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        raise HippoError(f"trainer {trainer!r}: cannot find module {module}: {e}", 2) from None
    if found is None:
        raise HippoError(f"trainer {trainer!r}: no module {module} on the Python path "
                         f"(the working directory or PYTHONPATH)", 2)
    if not found.origin or not os.path.isabs(found.origin):
        return None  # a built-in or namespace module: importable anywhere, or not by a file
    root = os.path.dirname(found.origin)  # pkg/mod.py -> pkg; pkg/__init__.py -> pkg
    for _ in range(module.count(".") + (found.submodule_search_locations is not None)):
        root = os.path.dirname(root)
    return root


class Study:
    """A study of a search plan (`db`, default $HIPPO_DB, else ./hippo.db), by name.

    With a space and a trainer (or a built-in `model`), it is a spec to run: `searcher` is a
    name or the spec's searcher object, `metric`, `mode` and `max_trials` go into it, and
    `model`, `data`, `fixed`, `seed`, `length` and `eval_every` are the spec's fields as written
    (docs/spec.md). `trainer="pkg.mod:fn"` makes the model an external one whose command runs
    that function (`long_lived`: one process per worker serves stage after stage)."""

    def __init__(self, name, space=None, searcher="grid", trainer=None, db=None, *, metric=None,
                 mode=None, max_trials=None, model=None, data=None, fixed=None, seed=None,
                 length=None, eval_every=None, long_lived=True, python=None):
        self.name = name
        self.db = db
        self.trainer = trainer
        self._trainer_root = None
        if trainer is not None and model is not None:
            raise HippoError("give trainer (your function) or model (a built-in one), not both", 2)
        if trainer is None and model is None:
            self._spec = None  # a study of the plan (load_study): results, resume
            return
        if trainer is not None:
            self._trainer_root = _trainer_root(trainer)
            model = {"type": "external",
                     "command": [python or sys.executable, "-m", "hippo", "serve", trainer],
                     "long_lived": bool(long_lived)}
        searcher = {"name": searcher} if isinstance(searcher, str) else dict(searcher)
        for key, value in (("metric", metric), ("mode", mode), ("max_trials", max_trials)):
            if value is not None:
                searcher[key] = value
        spec = {"name": name, "model": model, "data": data if data is not None else {}}
        if seed is not None:
            spec["seed"] = seed
        if fixed is not None:
            spec["fixed"] = fixed
        if space is not None:
            spec["hyperparameters"] = space
        spec["searcher"] = searcher
        if length is not None:
            spec["length"] = length
        if eval_every is not None:
            spec["eval"] = {"every": eval_every}
        self._spec = spec

    @property
    def spec(self):
        """The JSON spec (a dict) this study runs; None for a study loaded from the plan."""
        return self._spec

    def __repr__(self):
        return f"hippo.Study({self.name!r}, db={self.db!r})"

    # --- Running ---

    def _status(self):
        """The study's status in the plan, or None when it has no row there."""
        if self.db is not None and not os.path.exists(self.db):
            return None
        if self.db is None and not os.path.exists(os.environ.get("HIPPO_DB", "hippo.db")):
            return None
        for s in _last_json(_call(["studies"], db=self.db)[1]):
            if s["name"] == self.name:
                return s["status"]
        return None

    def enqueue_trial(self, params):
        """Evaluates `params` (every leaf a value) before the searcher's own proposals, as
        Optuna's enqueue_trial: on a study that is running (another process's optimize() or
        `hippo run`), at once, as hippo.enqueue (returns its reply); on one not yet started, as
        the next of the spec's `enqueue` configurations of its optimize() (returns None); an
        interrupted or ended study refuses (HippoError). Params given twice, or that the study
        has already, make no new trial."""
        status = self._status()
        if status == "running":
            return enqueue(self.name, params, db=self.db)
        if status is not None:  # its spec, enqueue included, was fixed when it started
            raise HippoError(f"study {self.name} is {status}: a configuration goes to a running "
                             "study, or to one that has not started", 2)
        if self._spec is None:
            raise HippoError(f"no study named {self.name} in the plan and no spec to run it", 2)
        queued = self._spec.setdefault("enqueue", [])
        if params not in queued:
            queued.append(dict(params))
        return None

    def optimize(self, n_trials=None, timeout=None, workers=None, gpus=None, callbacks=(),
                 allow_exec=None, progress=None, checkpoints=None, policy="shared"):
        """Runs the study with local worker processes (`workers`, default one per core; or `gpus`:
        "all" or device numbers, a worker each) until it ends, or `timeout` seconds pass (then it
        is interrupted: a later optimize() goes on where it stopped). A study that was interrupted
        goes on (hippo resume); one that has ended is not run again (returns None).

        `n_trials` sets the searcher's max_trials. Every event (docs/spec.md, "Events": trial
        started, evaluation, best, trial ended, study ended) is passed to each callback as
        `callback(study, event)`, a dict, as it happens; `progress` (default: on a terminal or in
        Jupyter) draws one line on stderr. `allow_exec` lets the workers run the trainer command
        (default: yes for a study given `trainer=` here), or "searcher", "trainer" or
        "searcher,trainer". Returns the run's summary (`hippo run`'s JSON)."""
        status = self._status()
        if status in ("done", "failed", "cancelled"):
            return None
        if status == "running":
            raise HippoError(f"study {self.name} is running under another process (hippo "
                             "studies); wait for it or cancel it", 2)
        if status is None and self._spec is None:
            raise HippoError(f"no study named {self.name} in the plan and no spec to run it", 2)
        args = []
        if gpus is not None:
            args += ["--gpus", gpus if isinstance(gpus, str) else ",".join(map(str, gpus))]
        elif workers is not None:
            args += ["--workers", str(workers)]
        if allow_exec is None:
            allow_exec = "trainer" if self.trainer else None
        elif allow_exec is True:
            allow_exec = "trainer"
        if allow_exec:
            args += ["--allow-exec", allow_exec]
        if checkpoints is not None:
            args += ["--checkpoints", os.fspath(checkpoints)]
        spec = self._spec
        if n_trials is not None and spec is not None:
            spec = dict(spec, searcher=dict(spec["searcher"], max_trials=n_trials))
        if progress is None:
            progress = sys.stderr.isatty() or "ipykernel" in sys.modules
        resume = status == "interrupted"
        with tempfile.TemporaryDirectory(prefix="hippo-events-") as tmp, \
                (contextlib.nullcontext() if resume else _SpecFile(spec)) as path:
            events = os.path.join(tmp, "events.jsonl")
            command = ["resume", self.name] if resume else ["run", path, "--policy", policy]
            return self._run(command + args + ["--events", events], events, timeout,
                             list(callbacks), _Progress(self.name) if progress else None)

    def _run(self, args, events, timeout, callbacks, progress):
        """Runs hippo with `args`, reading the events file as it grows until the process ends."""
        command = [binary()]
        if self.db is not None:
            command += ["--db", os.fspath(self.db)]
        command += ["--format", "json"] + args
        env = dict(os.environ)
        # The workers' trainers import hippo and the trainer's module: this package's folder,
        # the module's, the working directory, then what PYTHONPATH held.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [_PACKAGE_PARENT, self._trainer_root, os.getcwd(), env.get("PYTHONPATH")]
            if p)
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(command, stdout=out, stderr=err, env=env)
            started = time.monotonic()
            offset, partial, interrupted = 0, "", None
            try:
                while True:
                    done = proc.poll() is not None  # then one last read below
                    if os.path.exists(events):
                        with open(events) as f:
                            f.seek(offset)
                            chunk = f.read()
                            offset = f.tell()
                        lines = (partial + chunk).split("\n")
                        partial = lines.pop()
                        for line in lines:
                            if line.strip():
                                self._tell(json.loads(line), callbacks, progress)
                    if done:
                        break
                    if (timeout is not None and interrupted is None
                            and time.monotonic() - started > timeout):
                        interrupted = "timeout"
                        proc.send_signal(signal.SIGINT)  # the study stays resumable
                    time.sleep(0.1)
            except BaseException:
                # Ctrl-C, a callback that raised: the study is interrupted (resumable), then the
                # exception goes on.
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                    proc.wait()
                raise
            finally:
                if progress:
                    progress.close()
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        if proc.returncode == 2 or not stdout.strip():
            lines = [line for line in stderr.splitlines() if line.strip()]
            raise HippoError(lines[-1] if lines else f"hippo exited with {proc.returncode}",
                             proc.returncode)
        return _last_json(stdout)

    def _tell(self, event, callbacks, progress):
        if progress:
            progress.update(event)
        for callback in callbacks:
            callback(self, event)

    # --- Results (the binary's JSON output) ---

    def trials_dataframe(self):
        """One row per trial (`hippo export --wide`): trial, status, length, end_step, the
        parameters in the spec's order, step (the last evaluation), each metric's value there,
        best_<objective>, start, end (unix seconds) and duration. A pandas.DataFrame when pandas
        imports, else the list of dicts."""
        rows = _last_json(_call(["export", "--wide", self.name], db=self.db)[1])
        try:
            import pandas
        except ImportError:
            return rows
        columns = list(rows[0]) if rows else None
        return pandas.DataFrame(rows, columns=columns)

    @property
    def best_trial(self):
        """The best trial (`hippo best`): {"study", "trial", "params", "metric", "value",
        "step"}; for several objectives, the first of the Pareto front."""
        best = _last_json(_call(["best", self.name], db=self.db)[1])
        return best[0] if isinstance(best, list) else best

    @property
    def best_trials(self):
        """The Pareto front for several objectives (a list of {"trial", "params", "values",
        "step"}); for one objective, [best_trial]."""
        best = _last_json(_call(["best", self.name], db=self.db)[1])
        return best if isinstance(best, list) else [best]

    def preview(self):
        """`hippo preview` of the spec: trials, steps trial-based and unique, critical path;
        nothing is trained."""
        if self._spec is None:
            raise HippoError(f"study {self.name} was loaded from the plan: it has no spec here", 2)
        with _SpecFile(self._spec) as path:
            return _last_json(_call(["preview", path], db=self.db)[1])

    def report(self, path):
        """Writes the dashboard's figures of the study to one offline HTML file (`hippo
        report`)."""
        _call(["report", self.name, "-o", os.fspath(path)], db=self.db, json_output=False)
        return os.fspath(path)

    def delete(self):
        """Removes the study, which must have ended, from the plan (`hippo delete`): its name is
        free again."""
        return _last_json(_call(["delete", self.name], db=self.db)[1])


def load_study(name, db=None):
    """A study of the plan by name (or '#id'): its results, and optimize() to resume it if it
    was interrupted."""
    study = Study(name, db=db)
    if study._status() is None:
        raise HippoError(f"no study named {name} in {db or os.environ.get('HIPPO_DB', 'hippo.db')}",
                         2)
    return study


class _Progress:
    """One line on stderr, drawn again as events come (at most ten times a second, and at the
    end): trials ended and running, the best so far, the elapsed time. A carriage return redraws
    it, in a terminal and in Jupyter alike."""

    def __init__(self, name):
        self.name = name
        self.started = time.monotonic()
        self.running, self.ended, self.best, self.status = set(), 0, None, "running"
        self.drawn_at, self.width = 0.0, 0

    def update(self, event):
        kind = event.get("event")
        if kind in ("trial_started", "trial_continued"):
            self.running.add(event["trial"])
        elif kind == "trial_ended":
            self.running.discard(event["trial"])
            self.ended += 1
        elif kind == "best":
            self.best = event
        elif kind == "study_ended":
            self.status = event["status"]
        if time.monotonic() - self.drawn_at >= 0.1:
            self.draw()

    def draw(self):
        best = "" if self.best is None else (f", best {self.best['metric']} "
                                             f"{self.best['value']:.6g} (trial "
                                             f"{self.best['trial']})")
        line = (f"study {self.name}: {self.status}, {self.ended} trials ended, "
                f"{len(self.running)} running{best}, {time.monotonic() - self.started:.1f} s")
        sys.stderr.write("\r" + line.ljust(self.width))  # blanks what a longer line left
        sys.stderr.flush()
        self.width = max(self.width, len(line))
        self.drawn_at = time.monotonic()

    def close(self):
        self.draw()
        sys.stderr.write("\n")
        sys.stderr.flush()
