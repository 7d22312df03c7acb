"""The search space written in Python: the distributions and schedules of the JSON spec
(docs/spec.md, "Settings"), each a function that returns the very JSON the spec would hold, so a
space written here is serialized to the one spec the hippo binary validates (and its errors name
the same paths).

    space = {
        "lr": hippo.multistep(init=hippo.grid([0.1, 0.05]), milestones=[hippo.choice([3, 6])],
                              gamma=0.1, unit="epoch"),
        "weight_decay": hippo.loguniform(1e-5, 1e-3),
    }
"""


def grid(values):
    """Every value, one trial each (with the other grid leaves: their product)."""
    return {"grid": list(values)}


def choice(values):
    """One of the values, drawn."""
    return {"choice": list(values)}


def uniform(lo, hi):
    """A number drawn uniformly from [lo, hi)."""
    return {"uniform": [lo, hi]}


def loguniform(lo, hi):
    """A number drawn uniformly in log scale from [lo, hi) (lo > 0)."""
    return {"loguniform": [lo, hi]}


def integer(lo, hi):
    """An integer drawn from [lo, hi], both included (the spec's "int")."""
    return {"int": [lo, hi]}


def steps(n):
    """A length of n steps (the spec's {"steps": n}): `length`, `eval_every`, a searcher's."""
    return {"steps": n}


def epochs(n):
    """A length of n epochs (the spec's {"epochs": n})."""
    return {"epochs": n}


# The schedules and their fields in the spec's order (searchers/space.cc's schedule_shapes): a
# schedule function takes them by position or by name, and `unit` ("step" or "epoch") by name.
_SCHEDULES = {
    "constant": ("value",),
    "multistep": ("init", "milestones", "gamma"),
    "step_decay": ("init", "every", "gamma"),
    "exponential": ("init", "gamma"),
    "cosine": ("init", "final", "length"),
    "warmup_linear": ("init", "warmup", "after"),
    "piecewise": ("points",),
    "wsd": ("peak", "warmup", "decay_start", "decay", "final", "shape"),
}


def _schedule(name, fields):
    def make(*args, unit=None, **kwargs):
        if len(args) > len(fields):
            raise TypeError(f"{name}() takes its fields {', '.join(fields)}: "
                            f"{len(args)} given by position")
        value = {"schedule": name}
        if unit is not None:
            value["unit"] = unit
        for field, arg in zip(fields, args):
            if field in kwargs:
                raise TypeError(f"{name}(): {field} given twice")
            kwargs[field] = arg
        # The binary checks the fields (a missing or unknown one is refused, naming its path).
        value.update(kwargs)
        return value

    make.__name__ = name
    make.__doc__ = (f"The `{name}` schedule (docs/spec.md): fields {', '.join(fields)}, each a "
                    "number or a distribution; unit \"step\" (default) or \"epoch\".")
    return make


constant = _schedule("constant", _SCHEDULES["constant"])
multistep = _schedule("multistep", _SCHEDULES["multistep"])
step_decay = _schedule("step_decay", _SCHEDULES["step_decay"])
exponential = _schedule("exponential", _SCHEDULES["exponential"])
cosine = _schedule("cosine", _SCHEDULES["cosine"])
warmup_linear = _schedule("warmup_linear", _SCHEDULES["warmup_linear"])
piecewise = _schedule("piecewise", _SCHEDULES["piecewise"])
wsd = _schedule("wsd", _SCHEDULES["wsd"])

__all__ = ["grid", "choice", "uniform", "loguniform", "integer", "steps", "epochs"] + list(
    _SCHEDULES)
