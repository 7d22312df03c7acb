#!/usr/bin/python3
"""Runs an example trainer that crashes once, for the fault tests: the first time any stage reaches
step CRASH_AT (counted over every process that shares MARKER), the process raises an exception
(`raise`) or SIGKILLs itself (`kill`). Every stage that trains is logged to LOG as
"from to values-hash restored_from". Usage: crash_once.py TRAINER CRASH_AT MARKER raise|kill LOG"""
import hashlib
import json
import os
import runpy
import signal
import sys

import hippo.trainer

trainer, crash_at, marker, how, log = sys.argv[1], int(sys.argv[2]), *sys.argv[3:6]
steps = hippo.trainer.Stage.steps


def crashing_steps(self, *args, **kwargs):
    for step in steps(self, *args, **kwargs):
        if step == self.start:  # a stage is its range and its values
            values = [[self.value(name, s) for name in self.hyperparameters]
                      for s in range(self.start, self.end)]
            values = hashlib.sha1(json.dumps(values).encode()).hexdigest()[:12]
            with open(log, "a") as f:
                f.write(f"{self.start} {self.end} {values} {self.restored_from}\n")
        if step == crash_at:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass  # crashed once already
            else:
                if how == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError(f"crash_once: a crash at step {step}")
        yield step


hippo.trainer.Stage.steps = crashing_steps
sys.argv = [trainer]
runpy.run_path(trainer, run_name="__main__")
