"""The trainer side of hippo: the stage protocol of worker/README.md ("External trainers") as a
training loop.

    def train(stage):
        model, opt = build(stage.fixed)              # settings: stage.fixed / stage.value()
        state = hippo.torch_state(model=model, optimizer=opt)
        stage.restore(state.load)                    # the parent state (not at step 0)
        for step in stage.steps(evaluate=lambda: evaluate(model), save=state.save):
            lr = stage.value("lr", step)             # the value of hyper-parameter lr at step
            ...one optimizer step...

    hippo.serve(train)

A long-lived trainer pays its setup once: serve(train, setup=setup, build=build) calls setup(stage)
once per process (the data, on the device), build(stage) once per architecture (the objects with
a state dict: model, optimizer, ...), and before each stage loads the parent state into those
objects (from the device copy the process holds, else from the file); train(stage) then finds
them in stage.prepared and stage.objects, and the helper writes the ordered checkpoints itself,
in the background (python/README.md, "Setup once").

serve() reads stages from stdin (one JSON line each; a long-lived trainer gets many) and calls
train(stage) for each. The helper writes the protocol's lines: metrics, checkpoints (written to a
temporary name, fsynced, renamed, announced), progress and the done line. Steps count as in hippo:
step s is the optimizer step that takes the model from state s to state s + 1; evaluations and
checkpoints are of states (after `step` steps).

A diverging model is a result, not an error: a metric may be NaN or infinite. Once an evaluation
reports one, stage.steps() ends (nothing after a diverged state is worth training) and the stage
ends with a diverged line instead of the done line; hippo marks the trials through that state
`diverged`.

Misuse raises StageError naming the step: a report or a save at a step that was not asked for,
twice, out of order, or a stage that ends with something asked for and not done.
"""
import bisect
import copy
import hashlib
import io
import json
import math
import os
import queue
import struct
import sys
import threading
import time
from collections import OrderedDict

from .version import __version__

_MISSING = object()


class StageError(RuntimeError):
    """The trainer broke the stage's rules (the message names the step)."""


class Stage:
    """One stage: train steps [start, end) from the parent state, evaluate and checkpoint where
    asked. Attributes: seed, fixed (the study's fixed settings), data (the spec's data fields),
    model (the spec's model), start, end, eval_steps, checkpoint_steps, device (where to train:
    "cuda:0" on a worker given a GPU, which is the only GPU this process sees, else "cpu"),
    threads (the worker's --threads), input (the stage's JSON as it came), restored_from (after
    restore(): "memory", "file", or None). Under serve(setup=, build=): prepared (what setup
    returned) and objects (what build returned, loaded with the parent state)."""

    def __init__(self, stage_input, out, memory=None, keep=4, writer=None):
        self.input = stage_input
        self.seed = stage_input["seed"]
        self.fixed = stage_input["fixed"]
        self.data = stage_input["data"]
        self.model = stage_input["model"]
        self.start = stage_input["from"]
        self.end = stage_input["to"]
        self.device = stage_input.get("device", "cpu")
        self.threads = stage_input.get("threads", 1)
        self.eval_steps = list(stage_input["eval_steps"])
        self.checkpoint_steps = [c["step"] for c in stage_input["checkpoints"]]
        self._checkpoints = {c["step"]: c for c in stage_input["checkpoints"]}
        self._sequences = {name: _Sequence(name, sequence)
                           for name, sequence in stage_input["hyperparameters"].items()}
        self._out = out
        self._memory = memory  # state id -> checkpoint bytes (a long-lived trainer), or None
        self._keep = keep
        # Under serve(setup=, build=): the objects' _TorchState and architecture (held states are
        # (architecture, device copy) pairs), and the process's background checkpoint writer.
        self._writer = writer
        self._torch = None
        self._architecture = None
        self.prepared = None
        self.objects = None
        self._state = self.start  # the state the model is at (or gets to in the running step)
        self._reported = set()
        self._saved = set()
        self._restored = False
        self.restored_from = None  # after restore(): "memory", "file", or None at a root
        self._last_progress = time.monotonic()
        self.diverged_at = None  # the step whose evaluation reported a NaN or infinite metric
        # Where the stage's time goes (its done line carries it): setup is train()'s time before
        # the parent state (data, model), then load (restore), eval, save; train is the rest.
        self._began = time.monotonic()
        self._setup_end = None
        self._times = {"load": 0.0, "eval": 0.0, "save": 0.0}
        self._preloaded = 0.0  # load seconds before train() (serve's build): not setup
        self.ready_at = None  # the process's first stage: when it was ready for it (monotonic)

    # -- settings -------------------------------------------------------------------------------

    @property
    def hyperparameters(self):
        """The names of the settings that follow a sequence (the spec's hyperparameters)."""
        return sorted(self._sequences)

    def value(self, name, step, default=_MISSING):
        """The value of setting `name` at step `step` (a hyper-parameter's value at that step,
        computed from its canonical segments exactly as the worker computes it, or the fixed
        setting), else `default`."""
        if name in self._sequences:
            if not self.start <= step < self.end:
                raise StageError(f"step {step}: value({name!r}) is known for the steps "
                                 f"{self.start} to {self.end - 1} of this stage")
            return self._sequences[name].value_at(step)
        if name in self.fixed:
            return self.fixed[name]
        if default is not _MISSING:
            return default
        raise StageError(f"step {step}: no setting {name!r} (the spec has neither "
                         f"fixed.{name} nor hyperparameters.{name})")

    def _setting(self, name):
        """The value of setting `name` at the stage's first step (None if it has none)."""
        if name in self._sequences:
            return self._sequences[name].value_at(self.start)
        return self.fixed.get(name)

    def evaluates(self, step):
        """Whether an evaluation is asked for the state after `step` steps."""
        return step in self.eval_steps

    def saves(self, step):
        """Whether a checkpoint is ordered for the state after `step` steps."""
        return step in self._checkpoints

    # -- the loop -------------------------------------------------------------------------------

    def restore(self, load_fn):
        """Loads the parent state: calls load_fn(file), `file` a binary file object with what a
        save_fn wrote (from memory when this process holds it, else from the input checkpoint).
        Returns False at a root (step 0: initialize from the seed), where load_fn is not called.
        Under serve(build=...) the helper has loaded stage.objects already: not to be called."""
        if self._writer is not None:
            raise StageError(f"step {self.start}: serve(build=...) loads the parent state into "
                             "stage.objects before train(stage); do not call stage.restore")
        self._restored = True
        self._end_setup()
        path = self.input.get("input_checkpoint")
        if path is None:
            return False
        began = time.monotonic()
        state_id = self.input.get("input_state")
        data = self._memory.get(state_id) if self._memory is not None else None
        self.restored_from = "memory"
        if data is None:
            data = self._read_input()
            self._hold(state_id, data)
            self.restored_from = "file"
        load_fn(io.BytesIO(data))
        self._times["load"] += time.monotonic() - began
        return True

    def _read_input(self):
        """The input checkpoint's bytes, read once and checked: the model is loaded from these
        very bytes, so a file replaced after the worker's check is never what it gets."""
        with open(self.input["input_checkpoint"], "rb") as f:
            data = f.read()
        expected = self.input.get("input_checksum")
        if expected is not None and content_hash(data) != expected:
            raise StageError(
                f"step {self.start}: the input checkpoint's bytes have content hash "
                f"{content_hash(data)}, its producer wrote {expected} (replaced or corrupted "
                "after the worker checked it); refused")
        return data

    def _load_into(self, state, initial, architecture):
        """serve(build=...): loads the parent state into the objects of `state` (a _TorchState):
        from the device copy this process holds of it (a device-to-device copy), else from the
        checked input file, else, at a root, the state build() left them in."""
        began = time.monotonic()
        self._restored = True
        self._torch, self._architecture = state, architecture
        self.objects = state.objects
        state_id = self.input.get("input_state")
        held = self._memory.get(state_id) if self._memory is not None else None
        if self.input.get("input_checkpoint") is None:
            state.load_tree(initial)
        elif held is not None and held[0] == architecture:
            state.load_tree(held[1])
            self._memory.move_to_end(state_id)
            self.restored_from = "memory"
        else:
            state.load(io.BytesIO(self._read_input()))
            self._hold(state_id, (architecture, state.snapshot()))
            self.restored_from = "file"
        self._preloaded = time.monotonic() - began
        self._times["load"] += self._preloaded

    def steps(self, evaluate=None, save=None):
        """The steps to train, start to end - 1. Once the loop's body has trained step s, the
        state is s + 1: an evaluation asked there calls evaluate() (a dict of metrics, reported)
        unless the body reported it itself; a checkpoint ordered there calls save(file) unless
        the body saved it. The stage's start state is handled the same way before the first
        step (an evaluation-only stage has no steps)."""
        if self.input.get("input_checkpoint") is not None and not self._restored:
            raise StageError(f"step {self.start}: this stage starts from a checkpoint; call "
                             "stage.restore(load_fn) before training")
        self._end_setup()
        self._complete(self.start, evaluate, save)
        for s in range(self.start, self.end):
            if self.diverged_at is not None:
                return  # the model diverged: the stage ends there
            self._state = s
            yield s
            self._state = s + 1
            self._complete(s + 1, evaluate, save)
            now = time.monotonic()
            # The worker's heartbeats carry it, and it counts what a crash costs: up to 10 a
            # second (a crash, even a SIGKILL, loses the count of at most 0.1 s of steps).
            if now - self._last_progress > 0.1:
                self._emit({"step": s + 1})
                self._last_progress = now

    def report(self, step, **metrics):
        """Reports the metrics of the state after `step` steps, e.g.
        stage.report(100, accuracy=0.91, loss=0.25). Only where an evaluation is asked, once."""
        if step not in self.eval_steps:
            raise StageError(f"step {step}: no evaluation was asked for at this step (this "
                             f"stage's eval_steps: {self.eval_steps})")
        if step in self._reported:
            raise StageError(f"step {step}: reported twice")
        self._check_reachable(step, "report")
        if not metrics:
            raise StageError(f"step {step}: report() needs at least one metric")
        for name, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise StageError(f"step {step}: metric {name} is {value!r}, not a number")
            if not 1 <= len(name) <= 64:
                raise StageError(f"step {step}: metric name {name!r} is not 1 to 64 characters")
        for earlier in self.eval_steps:
            if earlier < step and earlier not in self._reported:
                raise StageError(f"step {step}: reported before step {earlier}, which is asked "
                                 "for too (report in step order)")
        self._emit(*({"step": step, "metric": name, "value": _wire_number(value)}
                     for name, value in metrics.items()))
        self._reported.add(step)
        if not all(math.isfinite(v) for v in metrics.values()):
            self.diverged_at = step

    def save(self, step, save_fn=None):
        """Writes the checkpoint ordered for the state after `step` steps: save_fn(file) writes
        the state to a binary file object (e.g. torch.save(obj, file)); the helper writes it to a
        temporary name, fsyncs it, renames it into place and announces it. Under
        serve(build=...), no save_fn: the helper copies stage.objects' state (on the device, and
        to host memory), training goes on, and a background thread writes, hashes and announces
        it; the stage's done line waits for it."""
        if (save_fn is None) != (self._writer is not None):
            raise StageError(f"step {step}: " + (
                "serve(build=...) saves stage.objects itself: call stage.save(step) without a "
                "save_fn" if save_fn is not None else "save() needs a save_fn"))
        if step not in self._checkpoints:
            raise StageError(f"step {step}: no checkpoint was ordered at this step (this stage's "
                             f"checkpoint_steps: {self.checkpoint_steps})")
        if step in self._saved:
            raise StageError(f"step {step}: saved twice")
        self._check_reachable(step, "save")
        began = time.monotonic()
        order = self._checkpoints[step]
        if self._writer is not None:
            tree = self._torch.snapshot()  # on the device: what a child in this process forks
            self._hold(order.get("state"), (self._architecture, tree))
            host = _to_host(tree)
            self._writer.put(step, order["path"], lambda f: _TorchState.write(host, f))
            self._saved.add(step)
            self._times["save"] += time.monotonic() - began
            return
        buffer = io.BytesIO()
        save_fn(buffer)
        data = buffer.getvalue()
        checksum = _write_durably(order["path"], data)
        self._hold(order.get("state"), data)
        self._saved.add(step)
        self._times["save"] += time.monotonic() - began
        # What it wrote: the worker refuses a file with other bytes (replaced meanwhile).
        self._emit({"checkpoint": step, "checksum": checksum})

    # -- the helper's side ----------------------------------------------------------------------

    def _check_reachable(self, step, what):
        # The body of step s may act on state s (before its update) or s + 1 (after it).
        if not self.start <= step <= min(self._state + 1, self.end):
            raise StageError(f"step {step}: {what} of a state this stage has not reached (it is "
                             f"at step {self._state}, from {self.start} to {self.end})")

    def _complete(self, step, evaluate, save):
        if step in self.eval_steps and step not in self._reported:
            if evaluate is None:
                raise StageError(f"step {step}: an evaluation is asked for here and was not "
                                 f"reported: call stage.report({step}, ...) once the state is "
                                 "at that step, or give steps(evaluate=...)")
            began = time.monotonic()
            metrics = evaluate()
            self._times["eval"] += time.monotonic() - began
            if not isinstance(metrics, dict):
                raise StageError(f"step {step}: evaluate() returned {type(metrics).__name__}, "
                                 "not a dict of metrics")
            self.report(step, **metrics)
        if self.diverged_at is not None:
            return  # a diverged state is not saved: no trial trains from it
        if step in self._checkpoints and step not in self._saved:
            if save is None and self._writer is not None:
                self.save(step)
                return
            if save is None:
                raise StageError(f"step {step}: a checkpoint is ordered here and was not saved: "
                                 f"call stage.save({step}, save_fn), or give steps(save=...)")
            self.save(step, save)

    def _end_setup(self):
        if self._setup_end is None:
            self._setup_end = time.monotonic()

    def _time_line(self):
        """The done line's "times": seconds of setup, load, train, eval and save (worker/README.md),
        and, in a process's first stage, when it was ready for it."""
        total = time.monotonic() - self._began
        times = dict(self._times)
        times["setup"] = (self._setup_end or time.monotonic()) - self._began - self._preloaded
        times["train"] = max(0.0, total - sum(times.values()))
        if self.ready_at is not None:
            times["ready_at"] = self.ready_at
        return {k: round(v, 6) for k, v in times.items()}

    def _finish(self):
        """After train(stage): everything asked for is done; the done line (or, when the model
        diverged, the diverged line: what was asked before that step is done), once every
        checkpoint written in the background is announced."""
        if self._writer is not None:
            began = time.monotonic()
            self._writer.wait()
            self._times["save"] += time.monotonic() - began
        if self.diverged_at is not None:
            for step in self.checkpoint_steps:
                if step < self.diverged_at and step not in self._saved:
                    raise StageError(f"step {step}: a checkpoint was ordered and not saved")
            line = {"diverged": self.diverged_at, "times": self._time_line()}
            if self._memory is not None:
                line["held"] = list(self._memory)
            self._emit(line)
            return
        if self._state != self.end:
            raise StageError(f"step {self._state}: train() returned before the stage's end "
                             f"(step {self.end}); iterate stage.steps() to its end")
        for step in self.eval_steps:
            if step not in self._reported:
                raise StageError(f"step {step}: an evaluation was asked for and not reported")
        for step in self.checkpoint_steps:
            if step not in self._saved:
                raise StageError(f"step {step}: a checkpoint was ordered and not saved")
        done = {"done": True, "times": self._time_line()}
        if self._memory is not None:
            done["held"] = list(self._memory)
        self._emit(done)

    def _hold(self, state_id, data):
        if self._memory is None or state_id is None:
            return
        self._memory[state_id] = data
        self._memory.move_to_end(state_id)
        while len(self._memory) > self._keep:
            self._memory.popitem(last=False)

    def _emit(self, *lines):
        _emit(self._out, *lines)


# The protocol's lines come from the stage's thread and from the checkpoint writer's: each group
# (a step's metrics, an announcement) is written whole, under this lock.
_emit_lock = threading.Lock()


def _emit(out, *lines):
    with _emit_lock:
        out.write("".join(json.dumps(line) + "\n" for line in lines))
        out.flush()


def _wire_number(value):
    """A metric's value as the protocol writes it: JSON has no NaN nor infinity, so those are the
    strings "nan", "inf" and "-inf"."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


# The fields of each kind of segment besides kind, start, end and v0 (stagetree/sequence_json.h);
# the kinds that go from v0 to v1 over their range need an end.
_INTERPOLATING = ("linear", "cosine", "linear-decay", "cosine-decay", "1-sqrt-decay")
_SEGMENT_FIELDS = {"constant": (), "exponential": ("gamma", "period"),
                   **{kind: ("v1",) for kind in _INTERPOLATING}}


def _is_integer(v):
    return isinstance(v, int) and not isinstance(v, bool)


class _Sequence:
    """A hyper-parameter as the stage line carries it (stagetree/sequence_json.h): a text value, or
    canonical segments that tile the steps from 0 on. value_at computes a segment's value with the
    float operations of stagetree/sequence.h's Segment::value_at, in the same order (Python's
    floats are C's doubles, math.cos, math.sqrt and math.pow are the C library's): the same bits
    as the worker's engine."""

    def __init__(self, name, sequence):
        def bad(what):
            return StageError(f"stage input: hyperparameters.{name}{what}")
        self.text = None
        if isinstance(sequence, dict) and list(sequence) == ["text"]:
            if not isinstance(sequence["text"], str):
                raise bad(".text: expected a string")
            self.text = sequence["text"]
            return
        if not isinstance(sequence, dict) or list(sequence) != ["segments"] \
                or not isinstance(sequence["segments"], list) or not sequence["segments"]:
            raise bad(': expected {"text": STRING} or {"segments": [SEGMENT, ...]}')
        self._segments = []
        next_start = 0  # the segments tile [0, forever): each starts where the last ended
        for i, segment in enumerate(sequence["segments"]):
            where = f".segments[{i}]"
            kind = segment.get("kind") if isinstance(segment, dict) else None
            if kind not in _SEGMENT_FIELDS:
                raise bad(f"{where}.kind: expected one of {', '.join(_SEGMENT_FIELDS)}")
            needed = {"kind", "start", "v0", *_SEGMENT_FIELDS[kind]}
            if not needed <= set(segment) <= needed | {"end"}:
                raise bad(f"{where}: a segment of kind {kind} has the fields "
                          f"{', '.join(sorted(needed))} and end (none when it never ends)")
            for key in ("start", "end", "period"):
                if key in segment and not _is_integer(segment[key]):
                    raise bad(f"{where}.{key}: expected an integer")
            for key in ("v0", "v1", "gamma"):
                value = segment.get(key, 0.0)
                if not isinstance(value, (int, float)) or isinstance(value, bool) \
                        or not math.isfinite(value):
                    raise bad(f"{where}.{key}: expected a finite number")
            if next_start is None or segment["start"] != next_start:
                raise bad(f"{where}.start: expected {next_start} (the segments tile the steps "
                          "from 0, the last one never ends)")
            next_start = segment.get("end")
            if next_start is not None and next_start <= segment["start"]:
                raise bad(f"{where}.end: expected a step after its start")
            if next_start is None and kind in _INTERPOLATING:
                raise bad(f"{where}: a segment of kind {kind} needs an end")
            if segment.get("period", 1) < 1:
                raise bad(f"{where}.period: expected at least 1")
            self._segments.append(dict(segment, **{k: float(segment[k]) for k in
                                                   ("v0", "v1", "gamma") if k in segment}))
        if next_start is not None:
            raise bad(": the last segment must never end (no \"end\")")
        self._starts = [segment["start"] for segment in self._segments]

    def value_at(self, step):
        if self.text is not None:
            return self.text
        s = self._segments[bisect.bisect_right(self._starts, step) - 1]
        kind, start, v0 = s["kind"], s["start"], s["v0"]
        if kind == "constant":
            return v0
        if kind == "exponential":
            try:
                power = math.pow(s["gamma"], float((step - start) // s["period"]))
            except OverflowError:  # where C's pow gives infinity, Python's raises
                power = math.inf
            return v0 * power
        end, v1 = s["end"], s["v1"]
        if kind == "linear":
            return v0 + (v1 - v0) * float(step - start + 1) / float(end - start)
        if kind == "cosine":
            return v1 + (v0 - v1) * (1 + math.cos(math.pi * float(step - start) /
                                                  float(end - start))) / 2
        x = float(step - start) / float(end - start)  # the decays' fraction of their range
        if kind == "linear-decay":
            return v0 + (v1 - v0) * x
        if kind == "cosine-decay":
            return v1 + (v0 - v1) * (1 + math.cos(math.pi * x)) / 2
        return v1 + (v0 - v1) * (1 - math.sqrt(x))  # 1-sqrt-decay


def _random_suffix():
    """16 hex digits from the kernel's random source: a temporary name at which nobody can have
    planted anything in advance."""
    return os.urandom(8).hex()


def content_hash(data):
    """The content hash of a checkpoint's bytes, as hippo computes it (protocol/content_hash.h:
    BLAKE2b with a 32-byte digest, as 64 lowercase hex digits)."""
    return hashlib.blake2b(data, digest_size=32).hexdigest()


def _write_durably(path, data):
    """Writes the bytes `data` to `path` as _write_stream does; returns their content hash."""
    return _write_stream(path, lambda f: f.write(data))


class _HashingFile:
    """A write-only binary file over a descriptor that hashes the bytes as it writes them."""

    def __init__(self, fd):
        self._fd = fd
        self.digest = hashlib.blake2b(digest_size=32)

    def write(self, data):
        view = memoryview(data).cast("B")
        for at in range(0, len(view), 1 << 20):
            piece = view[at:at + (1 << 20)]
            self.digest.update(piece)
            while piece:
                piece = piece[os.write(self._fd, piece):]
        return len(view)

    def flush(self):
        pass


def _write_stream(path, produce):
    """Writes what produce(file) writes to `path` so that no reader sees half of it, as the worker
    writes its own checkpoints (worker/README.md, "Checkpoints"): a new file "<name>.tmp.<16 random
    hex digits>" created through a descriptor of the directory with O_CREAT|O_EXCL|O_NOFOLLOW (a
    symlink or file planted there is never followed nor truncated; the master sweeps such a file
    that a killed trainer leaves), private to its owner (0600, as the worker's own), fsync,
    rename, then the directory fsynced. Returns the content hash of the bytes written, computed piece by piece
    as they are written (the bytes on disk: the worker hashes the file again and compares)."""
    directory, name = os.path.split(os.path.abspath(path))
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        tmp = f"{name}.tmp.{_random_suffix()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=dir_fd)
        except OSError as e:
            raise StageError(f"checkpoint {path}: cannot create {tmp}: {e.strerror}") from None
        try:
            try:
                f = _HashingFile(fd)
                produce(f)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return f.digest.hexdigest()


class _Writer:
    """A trainer process's checkpoint writes under serve(build=...), on a thread of their own, in
    the order they were put: each is written (_write_stream: a temporary name, hashed as written,
    fsynced, renamed) and only then announced with its hash. A process killed meanwhile leaves a
    temporary file that nobody was told of (the master sweeps it), never an announced partial
    one."""

    def __init__(self, out):
        self._out = out
        self._queue = queue.Queue()
        self._failure = None
        threading.Thread(target=self._run, name="hippo-checkpoints", daemon=True).start()

    def put(self, step, path, produce):
        self._queue.put((step, path, produce))

    def wait(self):
        """Returns once every checkpoint put is announced; raises the first write's failure."""
        self._queue.join()
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _run(self):
        while True:
            step, path, produce = self._queue.get()
            try:
                if self._failure is None:  # after a failure, the stage fails: nothing more
                    checksum = _write_stream(path, produce)
                    _emit(self._out, {"checkpoint": step, "checksum": checksum})
            except BaseException as e:  # noqa: B036 (handed to the stage's thread)
                self._failure = e
            finally:
                self._queue.task_done()


class _Process:
    """What serve(train, setup=, build=) keeps for the life of the process: what setup returned,
    and per architecture the objects build returned with the state they were built in (where a
    root stage starts)."""

    def __init__(self, setup, build, architecture):
        if isinstance(architecture, str) or not all(isinstance(n, str) for n in architecture):
            raise StageError(f"serve(architecture={architecture!r}): expected a tuple of setting "
                             "names, e.g. (\"net\", \"width\")")
        self._setup, self._build, self._architecture = setup, build, tuple(architecture)
        self._prepared = _MISSING
        self._built = {}  # architecture -> (_TorchState, its state after build)

    def prepare(self, stage):
        """Gives the stage what setup returned and its architecture's objects, loaded with its
        parent state."""
        if self._prepared is _MISSING:
            self._prepared = self._setup(stage) if self._setup is not None else None
        stage.prepared = self._prepared
        architecture = json.dumps([stage._setting(name) for name in self._architecture])
        if architecture not in self._built:
            objects = self._build(stage)
            if not isinstance(objects, dict) or not objects or not all(
                    hasattr(o, "state_dict") and hasattr(o, "load_state_dict")
                    for o in objects.values()):
                raise StageError("build(stage) must return a dict of the objects to checkpoint, "
                                 "each with state_dict() and load_state_dict() (e.g. {\"model\": "
                                 "model, \"optimizer\": optimizer})")
            state = _TorchState(objects)
            self._built[architecture] = (state, state.snapshot())
        stage._load_into(*self._built[architecture], architecture)


def _protocol_stream():
    """The stream the protocol's lines go to: the process's stdout. What the training code prints
    (print(), a library's messages) is sent to stderr, the worker's log, instead: a stray line on
    stdout would break the protocol."""
    fd = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    return os.fdopen(fd, "w", buffering=1)


def serve(train, keep=4, stdin=None, stdout=None, setup=None, build=None, architecture=()):
    """Runs train(stage) for every stage that comes on stdin, one JSON line each, until its end.
    A long-lived trainer (the spec's model.long_lived) gets stage after stage and keeps up to
    `keep` states in memory (the bytes its save_fn wrote), so that a child stage forks from its
    parent without reading a file; a one-shot trainer gets one stage.

    With build (a long-lived trainer's setup paid once): setup(stage), if given, is called once
    per process and its result is every stage's stage.prepared (the data, on stage.device);
    build(stage) once per architecture, the values at the stage's start of the settings named in
    `architecture` (none: one per process), returns the objects to checkpoint ({"model": model,
    "optimizer": opt}: state_dict() and load_state_dict()); each stage finds them in
    stage.objects, loaded with its parent state (a held state: a device-to-device copy; else the
    checked file; at a root, the state build() left), and the helper saves them itself: a copy on
    the device (kept: `keep` states), one in host memory, then written, hashed and announced in
    the background while training goes on."""
    stdin = sys.stdin if stdin is None else stdin
    out = _protocol_stream() if stdout is None else stdout
    memory = OrderedDict()
    process = _Process(setup, build, architecture) if build is not None else None
    writer = _Writer(out) if build is not None else None
    said_where = False
    ready_at = time.monotonic()  # imports done: what a worker's start of this process waits for
    while True:
        line = stdin.readline()
        if not line:
            return
        stage_input = json.loads(line)
        if stage_input.get("hippo_trainer") != 1:
            raise StageError("stdin: not a hippo stage (no \"hippo_trainer\": 1)")
        if stage_input.get("hippo_version") != __version__:
            raise StageError(
                f"this trainer's hippo package is version {__version__} and its worker is "
                f"{stage_input.get('hippo_version') or 'older than 0.1.0'}: install the package "
                "that came with the worker's hippo (in the Python that runs the trainer)")
        long_lived = "held" in stage_input
        if long_lived:  # the worker says which earlier states may still be used
            allowed = set(stage_input["held"])
            for state_id in [s for s in memory if s not in allowed]:
                del memory[state_id]
        stage = Stage(stage_input, out, memory if long_lived else None, keep, writer)
        stage.ready_at, ready_at = ready_at, None
        if not said_where:  # once per process, in the worker's log
            print(f"hippo trainer: device {stage.device}, {stage.threads} thread(s), "
                  f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}",
                  file=sys.stderr, flush=True)
            said_where = True
        try:
            if process is not None:
                process.prepare(stage)
            train(stage)
        except BaseException:
            # How far it got: the worker counts the steps the crash cost as executed.
            if stage._state > stage.start:
                stage._emit({"step": stage._state})
            raise
        stage._finish()


# What torch_state writes: torch.save of {"format": _TORCH_STATE, "tree": the state with every
# Python float replaced by None, "floats": [[path, the float's bits as an int64], ...]}, so that
# the file holds only tensors, dicts, lists, tuples, strings, ints, bools and None. That is what
# every weights-only unpickler reads: PyTorch 1.13's refuses plain floats (an optimizer's lr),
# 2.x's reads them; a file that would need anything else (code) is refused by both.
_TORCH_STATE = "hippo.torch_state/1"


def _floats_apart(obj, path, floats):
    """obj with each float replaced by None, its path and bits appended to floats; anything that
    a weights-only load would refuse raises StageError naming its path."""
    import torch

    if isinstance(obj, float):
        floats.append([list(path), struct.unpack("<q", struct.pack("<d", obj))[0]])
        return None
    if obj is None or type(obj) in (bool, int, str) or torch.is_tensor(obj):
        return obj
    if type(obj) in (dict, OrderedDict):
        out = type(obj)()
        for key, value in obj.items():
            if not isinstance(key, (str, int)):
                raise StageError(f"torch_state.save: {_path_text(path)} has the key {key!r}: "
                                 "keys must be strings or integers")
            out[key] = _floats_apart(value, path + (key,), floats)
        if hasattr(obj, "_metadata"):  # a module's state dict: its layers' versions
            out._metadata = obj._metadata
        return out
    if type(obj) in (list, tuple):
        return type(obj)(_floats_apart(v, path + (i,), floats) for i, v in enumerate(obj))
    raise StageError(f"torch_state.save: {_path_text(path)} is a {type(obj).__name__}: a "
                     "checkpoint holds only tensors, numbers, strings, None, and dicts, lists "
                     "and tuples of them")


def _floats_back(obj, path, floats):
    """What _floats_apart took apart: obj with the float at each path in floats put back."""
    if path in floats:
        return floats[path]
    if isinstance(obj, dict):
        for key in obj:
            obj[key] = _floats_back(obj[key], path + (key,), floats)
    elif isinstance(obj, (list, tuple)):
        obj = type(obj)(_floats_back(v, path + (i,), floats) for i, v in enumerate(obj))
    return obj


def _path_text(path):
    return "the state" + "".join(f"[{key!r}]" for key in path)


def torch_libraries():
    """The libraries whose versions a PyTorch trainer's bits depend on, as torch_state records
    them with each state: "torch 2.11.0+cu130, CUDA 13.0, cuDNN 91900" ("CUDA none" on a CPU
    build). The device and the threads are the worker's to say (its environment)."""
    import torch

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return (f"torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}, "
            f"cuDNN {cudnn or 'none'}")


class _TorchState:
    def __init__(self, objects):
        self.objects = objects

    def _tree(self):
        from .determinism import rng_state
        return {"state_dicts": {k: o.state_dict() for k, o in self.objects.items()},
                "rng": rng_state()}

    def save(self, f):
        _TorchState.write(self._tree(), f)

    def snapshot(self):
        """A copy of the state, where it is (a GPU's tensors copied on the GPU)."""
        return copy.deepcopy(self._tree())

    def load_tree(self, tree):
        """Loads a snapshot (a copy of it: the snapshot stays as it is)."""
        from .determinism import set_rng_state
        tree = copy.deepcopy(tree)
        for name, obj in self.objects.items():
            obj.load_state_dict(tree["state_dicts"][name])
        set_rng_state(tree["rng"])

    @staticmethod
    def write(tree, f):
        """torch.save of the state tree in the format load reads (data only)."""
        import torch

        floats = []
        data = _floats_apart(tree, (), floats)
        torch.save({"format": _TORCH_STATE, "libraries": torch_libraries(), "tree": data,
                    "floats": floats}, f)

    def load(self, f):
        import torch

        from .determinism import set_rng_state
        try:
            saved = torch.load(f, weights_only=True)  # data only: never a pickle's code
        except Exception as e:
            # The unpickler's own reason, its first sentence: torch's message goes on to advise
            # loading with weights_only=False, or allowlisting what the file names.
            text = " ".join(str(e).split())
            at = text.find("WeightsUnpickler error:")
            reason = (text[at:] if at >= 0 else text).split(". ")[0][:200]
            raise StageError("torch_state.load: refused the checkpoint: it is not data only "
                             "(tensors, numbers, strings, lists, dicts; a pickle that would run "
                             f"code is never run): {reason}") from None
        if not isinstance(saved, dict) or saved.get("format") != _TORCH_STATE \
                or not isinstance(saved.get("floats"), list):
            raise StageError(f"torch_state.load: not a checkpoint of {_TORCH_STATE} (one that "
                             "hippo.torch_state().save wrote)")
        # A state goes on only under the libraries that computed it: other versions compute
        # other bits, and a trial must be trained in one environment (states saved before this
        # record carry none and load as before).
        libraries = saved.get("libraries")
        if libraries is not None and libraries != torch_libraries():
            raise StageError(f"torch_state.load: the checkpoint was computed under {libraries}, "
                             f"this trainer runs {torch_libraries()}: a trial's states never mix "
                             "library versions (they compute other bits); give the study's "
                             "trainer workers one PyTorch build")
        try:
            floats = {tuple(path): struct.unpack("<d", struct.pack("<q", bits))[0]
                      for path, bits in saved["floats"]}
        except (TypeError, ValueError, struct.error) as e:
            raise StageError(f"torch_state.load: its floats are malformed: {e}") from None
        state = _floats_back(saved["tree"], (), floats)
        if not isinstance(state, dict) or not isinstance(state.get("state_dicts"), dict) \
                or "rng" not in state:
            raise StageError("torch_state.load: the checkpoint holds no state_dicts and rng")
        for name, obj in self.objects.items():
            if name not in state["state_dicts"]:
                raise StageError(f"torch_state.load: the checkpoint holds no state of {name} "
                                 f"(it holds {', '.join(map(str, state['state_dicts']))})")
            obj.load_state_dict(state["state_dicts"][name])
        set_rng_state(state["rng"])


def _to_host(obj):
    """The state tree with every tensor off the CPU copied to pinned host memory (the tree itself
    on a CPU): what the background writer serializes while training goes on."""
    import torch

    if torch.is_tensor(obj):
        if obj.device.type == "cpu":
            return obj
        return torch.empty(obj.shape, dtype=obj.dtype, pin_memory=True).copy_(obj)
    if isinstance(obj, dict):
        out = type(obj)((k, _to_host(v)) for k, v in obj.items())
        if hasattr(obj, "_metadata"):
            out._metadata = obj._metadata
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_host(v) for v in obj)
    return obj


def torch_state(**objects):
    """save and load functions for stage.save / stage.restore that keep the state dicts of the
    given objects (model=..., optimizer=..., scheduler=...) and the generators' states:
    state = torch_state(model=model, optimizer=opt); stage.restore(state.load). load reads data
    only (torch.load with weights_only=True): a checkpoint that would run code is refused with a
    StageError, as is one computed under other library versions (torch_libraries())."""
    return _TorchState(objects)
