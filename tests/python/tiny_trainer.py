"""A trainer function for hippo.Study tests (tests/python/test_python_study.py), named by import
path ("tiny_trainer:fit"): no PyTorch, so a stage costs milliseconds. Its "model" is one number
that each step moves by the step's learning rate; its accuracy rises with it, the same for a
trial trained alone or through shared stages. The fixed setting `sleep` (seconds per step) makes
a study slow enough to interrupt."""
import math
import struct
import time


def fit(stage):
    x = [0.0]

    def load(f):
        (x[0],) = struct.unpack("<d", f.read())

    def save(f):
        f.write(struct.pack("<d", x[0]))

    stage.restore(load)
    pause = stage.fixed.get("sleep", 0)
    for step in stage.steps(evaluate=lambda: {"accuracy": 1 - math.exp(-x[0]), "x": x[0]},
                            save=save):
        x[0] += stage.value("lr", step)
        if pause:
            time.sleep(pause)
