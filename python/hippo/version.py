"""hippo's version: the one place it is written. CMakeLists.txt reads it for the binaries
(`hippo --version`), python/pyproject.toml for the package; a package and a binary of different
versions refuse each other (studies.py, trainer.py)."""
__version__ = "0.3.0"
