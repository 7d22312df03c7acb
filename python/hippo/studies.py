"""Studies from Python: run one embedded, submit one to a master, wait, and read the history.

Everything goes through the `hippo` binary and its JSON output (INTERFACE.md), never through the
search plan's tables: the binary is the only reader of the plan's schema. The binary is the
`binary` argument, else $HIPPO_BIN, else build/hippo of the checkout this package is in, else
`hippo` on the PATH. `db` is the search plan (default: $HIPPO_DB, else ./hippo.db, as for the
CLI); `master` a master's address (default $HIPPO_MASTER).

    summary = hippo.run(spec_dict, workers=2)        # INTERFACE.md's JSON line
    hippo.trials(spec_dict["name"])                  # [{"trial", "params", "status", "metrics"}]
    hippo.dataframe(spec_dict["name"])               # one row per (trial, step, metric)
"""
import json
import os
import shutil
import subprocess
import tempfile


class HippoError(RuntimeError):
    """The hippo command refused (bad input: exit status 2) or failed; `status` is its exit
    status, the message its error."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


def binary():
    """The path of the hippo binary this module runs."""
    if os.environ.get("HIPPO_BIN"):
        return os.environ["HIPPO_BIN"]
    checkout = os.path.join(os.path.dirname(__file__), "..", "..", "build", "hippo")
    if os.access(checkout, os.X_OK):
        return os.path.abspath(checkout)
    found = shutil.which("hippo")
    if found:
        return found
    raise HippoError("no hippo binary: set HIPPO_BIN, or build the checkout (scripts/build)", 2)


def _call(args, db=None, master=None, cwd=None):
    """Runs hippo --format json ARGS; returns (exit status, stdout). Exit status 2 (bad input)
    raises HippoError with the command's error."""
    command = [binary()]
    if db is not None:
        command += ["--db", os.fspath(db)]
    if master is not None:
        command += ["--master", master]
    command += ["--format", "json"] + [os.fspath(a) for a in args]
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    if done.returncode == 2 or (done.returncode != 0 and not done.stdout.strip()):
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise HippoError(lines[-1] if lines else f"hippo exited with {done.returncode}",
                         done.returncode)
    return done.returncode, done.stdout


def _last_json(stdout):
    lines = [line for line in stdout.splitlines() if line.strip()]
    return json.loads(lines[-1])


class _SpecFile:
    """A spec given as a dict is written to a temporary file for the command; a path is used as
    it is."""

    def __init__(self, spec):
        self._spec = spec
        self._tmp = None

    def __enter__(self):
        if isinstance(self._spec, dict):
            fd, self._tmp = tempfile.mkstemp(prefix="hippo-spec-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(self._spec, f)
            return self._tmp
        return os.fspath(self._spec)

    def __exit__(self, *exc):
        if self._tmp:
            os.unlink(self._tmp)


def run(spec, workers=None, policy="shared", allow_exec=False, db=None, checkpoints=None,
        cwd=None, resume=False):
    """Runs a study to its end with a master in the hippo process and `workers` local worker
    processes (default: one per core), as `hippo run`; returns its summary, INTERFACE.md's JSON
    line (status "done", or "failed" or "interrupted" with "error"). `spec`: a dict or a file.
    `allow_exec` lets the workers run the spec's trainer command (as `hippo run --allow-exec
    trainer`: off unless asked, like the CLI's); `cwd` is where the command runs. With `resume`, a
    study of that name that was interrupted goes on where it stopped (`hippo run --resume`)."""
    with _SpecFile(spec) as path:
        args = ["run", path, "--policy", policy] + (["--resume"] if resume else [])
        if workers is not None:
            args += ["--workers", str(workers)]
        if allow_exec:
            args.extend(["--allow-exec", "trainer"])
        if checkpoints is not None:
            args += ["--checkpoints", checkpoints]
        _, out = _call(args, db=db, cwd=cwd)
    return _last_json(out)


def submit(spec, master=None, wait=True, policy="shared"):
    """Sends a study to a running master (`master`, default $HIPPO_MASTER). With wait, returns
    its summary once it ends; else {"study": name, "id": id}."""
    with _SpecFile(spec) as path:
        args = ["submit", path, "--policy", policy] + (["--wait"] if wait else [])
        _, out = _call(args, master=master)
    return _last_json(out)


def studies(db=None):
    """Every study of the search plan: [{"id", "name", "status", "policy", "trials", "metric",
    "best"}]."""
    return _last_json(_call(["studies"], db=db)[1])


def trials(study, db=None):
    """A study's trials (name or id): [{"trial", "params", "status", "length", "metrics": [{"step",
    "name", "value"}]}] (and "error" for a failed trial)."""
    return _last_json(_call(["trials", str(study)], db=db)[1])


def best(study, db=None):
    """The best trial: {"study", "trial", "params", "metric", "value", "step"}."""
    return _last_json(_call(["best", str(study)], db=db)[1])


def metrics(study, db=None):
    """Every metric of a study as rows: {"trial", "status", "step", "metric", "value", and each
    parameter by its leaf name (e.g. "lr.init")}; a parameter whose name is one of those five
    columns is prefixed with "param:"."""
    rows = []
    columns = {"trial", "status", "step", "metric", "value"}
    for t in trials(study, db=db):
        params = {(f"param:{k}" if k in columns else k): v for k, v in t["params"].items()}
        for m in t["metrics"]:
            row = {"trial": t["trial"], "status": t["status"], "step": m["step"],
                   "metric": m["name"], "value": m["value"]}
            row.update(params)
            rows.append(row)
    return rows


def dataframe(study, db=None):
    """metrics(study) as a pandas.DataFrame (pandas must be installed: apt-get install
    python3-pandas)."""
    try:
        import pandas
    except ImportError as e:
        raise ImportError("hippo.dataframe needs pandas (Debian: apt-get install python3-pandas); "
                          "hippo.metrics() gives the same rows as dicts") from e
    return pandas.DataFrame(metrics(study, db=db))
