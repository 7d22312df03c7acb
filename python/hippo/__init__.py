"""hippo from Python: write a trainer for your own model (hippo.serve, hippo.Stage), and run,
submit and read studies (hippo.run, hippo.trials, hippo.dataframe, ...). Standard library only;
PyTorch, numpy and pandas are used when present. python/README.md documents it."""
from .determinism import BatchSampler, deterministic, mix, rng_state, seed_all, set_rng_state
from .studies import (HippoError, best, binary, dataframe, metrics, run, studies, submit,
                      trials)
from .trainer import Stage, StageError, serve, torch_libraries, torch_state
from .version import __version__

__all__ = [
    "BatchSampler", "deterministic", "mix", "rng_state", "seed_all", "set_rng_state",
    "HippoError", "best", "binary", "dataframe", "metrics", "run", "studies", "submit", "trials",
    "Stage", "StageError", "serve", "torch_libraries", "torch_state", "__version__",
]
