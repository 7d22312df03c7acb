"""Studies from Python: run one embedded, submit one to a master, wait, and read the history.

Everything goes through the `hippo` binary and its JSON output (docs/spec.md), never through the
search plan's tables: the binary is the only reader of the plan's schema. The binary is
$HIPPO_BIN, else build/hippo of the checkout this package is in, else `hippo` on the PATH; it must
be of this package's version (hippo.__version__), which is checked once per binary. `db` is the search plan (default: $HIPPO_DB, else ./hippo.db, as for the
CLI); `master` a master's address (default $HIPPO_MASTER).

    summary = hippo.run(spec_dict, workers=2)        # the summary's JSON line (docs/spec.md)
    hippo.trials(spec_dict["name"])                  # [{"trial", "params", "status", "metrics"}]
    hippo.dataframe(spec_dict["name"])               # one row per (trial, step, metric)
"""
import json
import os
import shutil
import subprocess
import tempfile

from .version import __version__


class HippoError(RuntimeError):
    """The hippo command refused (bad input: exit status 2) or failed; `status` is its exit
    status, the message its error."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


def binary():
    """The path of the hippo binary this module runs, checked to be of this package's version."""
    if os.environ.get("HIPPO_BIN"):
        path = os.environ["HIPPO_BIN"]
    else:
        checkout = os.path.join(os.path.dirname(__file__), "..", "..", "build", "hippo")
        path = os.path.abspath(checkout) if os.access(checkout, os.X_OK) else shutil.which("hippo")
        if not path:
            raise HippoError("no hippo binary: none on the PATH and $HIPPO_BIN is not set "
                             "(install hippo, or set HIPPO_BIN to its path)", 2)
    _check_version(path)
    return path


_checked = set()  # binaries whose version matched


def _check_version(path):
    """Refuses a binary of another version than this package: they would disagree on the JSON
    they exchange and on the plan's schema."""
    if path in _checked:
        return
    try:
        done = subprocess.run([path, "--format", "json", "--version"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    except OSError as e:
        raise HippoError(f"cannot run the hippo binary {path}: {e.strerror}", 2) from None
    try:
        said = json.loads(done.stdout)
        version = said["version"]
    except (ValueError, TypeError, KeyError):
        raise HippoError(f"{path} does not say its version (hippo --version): it is not a hippo "
                         f"binary of this package's version {__version__}", 2) from None
    if version != __version__:
        raise HippoError(
            f"the hippo binary {path} is version {version} (protocol {said.get('protocol')}, plan "
            f"schema {said.get('plan_schema')}) and this Python package is {__version__}: "
            "install the package that came with the binary (pip install "
            "<prefix>/share/hippo/hippo-<version>-py3-none-any.whl), or set HIPPO_BIN to a binary "
            "of this version", 2)
    _checked.add(path)


def _call(args, db=None, master=None, cwd=None, json_output=True):
    """Runs hippo --format json ARGS (without --format for a command that prints nothing:
    json_output=False); returns (exit status, stdout). Exit status 2 (bad input) raises HippoError
    with the command's error."""
    command = [binary()]
    if db is not None:
        command += ["--db", os.fspath(db)]
    if master is not None:
        command += ["--master", master]
    command += (["--format", "json"] if json_output else []) + [os.fspath(a) for a in args]
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
    processes (default: one per core), as `hippo run`; returns its summary, the JSON
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


def enqueue(study, params, db=None, master=None):
    """Makes `params` (a dict: every leaf of the space a value) the next trial of a running study
    (name or id), before its searcher's own proposals, as `hippo enqueue`: on the cluster master
    `master` (default $HIPPO_MASTER), else on the `hippo run` of the plan `db` that this OS user
    started on this host. Returns {"study", "name", "trials"}; params the study has already (a
    trial's, or enqueued and waiting) make no trial and return {"study", "name", "existing":
    {"trial", "status"} or {"waiting": true}} (Optuna's skip_if_exists). Raises HippoError when
    the study is not running, its searcher takes no configuration, or the params are bad."""
    args = ["enqueue", str(study), json.dumps(params)]
    return _last_json(_call(args, db=db, master=master)[1])


def studies(db=None):
    """Every study of the search plan: [{"id", "name", "status", "policy", "trials", "metric",
    "best"}]."""
    return _last_json(_call(["studies"], db=db)[1])


def trials(study, db=None):
    """A study's trials (name or id): [{"trial", "params", "status", "length", "metrics": [{"step",
    "name", "value"}]}] (and "error" for a failed trial, "end_step" for one that ended early:
    status "stopped" (its searcher stopped it there), "diverged" or "failed")."""
    return _last_json(_call(["trials", str(study)], db=db)[1])


def best(study, db=None):
    """The best trial: {"study", "trial", "params", "metric", "value", "step", "status"} (and
    "end_step" when it was stopped early); for a study of
    several objectives, its Pareto front: a list of {"trial", "params", "values": {metric:
    value}, "step"}, the feasible trials that no feasible trial dominates."""
    return _last_json(_call(["best", str(study)], db=db)[1])


def metrics(study, db=None):
    """Every metric of a study as rows: {"trial", "status", "end_step" (where a stopped, diverged
    or failed trial ended; None otherwise), "step", "metric", "value", and each parameter by its
    leaf name (e.g. "lr.init")}; a parameter whose name is one of those six columns is prefixed
    with "param:"."""
    rows = []
    columns = {"trial", "status", "end_step", "step", "metric", "value"}
    for t in trials(study, db=db):
        params = {(f"param:{k}" if k in columns else k): v for k, v in t["params"].items()}
        for m in t["metrics"]:
            row = {"trial": t["trial"], "status": t["status"], "end_step": t.get("end_step"),
                   "step": m["step"], "metric": m["name"], "value": m["value"]}
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
