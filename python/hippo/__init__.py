"""hippo from Python: write a trainer for your own model (hippo.serve, hippo.Stage), run a study
as Optuna users do (hippo.Study(...).optimize(), the space written with hippo.grid,
hippo.multistep, ...), and submit and read studies (hippo.run, hippo.trials, hippo.dataframe,
...). Standard library only; PyTorch, numpy and pandas are used when present. python/README.md
documents it."""
from .determinism import BatchSampler, deterministic, mix, rng_state, seed_all, set_rng_state
from .space import (choice, constant, cosine, epochs, exponential, grid, integer, loguniform,
                    multistep, piecewise, step_decay, steps, uniform, warmup_linear, wsd)
from .studies import (HippoError, best, binary, dataframe, enqueue, metrics, run, studies,
                      submit, trials)
from .study import Study, load_study
from .trainer import Stage, StageError, serve, torch_libraries, torch_state
from .version import __version__

__all__ = [
    "BatchSampler", "deterministic", "mix", "rng_state", "seed_all", "set_rng_state",
    "choice", "constant", "cosine", "epochs", "exponential", "grid", "integer", "loguniform",
    "multistep", "piecewise", "step_decay", "steps", "uniform", "warmup_linear", "wsd",
    "HippoError", "best", "binary", "dataframe", "enqueue", "metrics", "run", "studies", "submit",
    "trials",
    "Study", "load_study",
    "Stage", "StageError", "serve", "torch_libraries", "torch_state", "__version__",
]
