"""The one place hookkit's version is written: the package metadata (pyproject's dynamic version),
``hookkit.__version__`` and ``hookkit --version`` all read it."""

__version__ = "0.2.0.dev0"
