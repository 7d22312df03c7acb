"""`python -m hippo serve MODULE:FUNCTION`: a trainer process that imports the function by its
path and serves it the worker's stages (hippo.serve). hippo.Study(trainer="pkg.mod:fn") makes
its spec's model command this, so a trainer is named, never pickled."""
import importlib
import sys

from .trainer import serve


def main(argv):
    if len(argv) != 2 or argv[0] != "serve":
        sys.exit("usage: python -m hippo serve MODULE:FUNCTION (a trainer: train(stage))")
    module, sep, function = argv[1].partition(":")
    if not sep:
        sys.exit(f"python -m hippo serve {argv[1]}: expected MODULE:FUNCTION")
    train = getattr(importlib.import_module(module), function, None)
    if not callable(train):
        sys.exit(f"python -m hippo serve {argv[1]}: module {module} has no function {function}")
    serve(train)


if __name__ == "__main__":
    main(sys.argv[1:])
