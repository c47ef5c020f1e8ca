"""Loads a script of scripts/ (a file name with dashes, not an importable package) as a
module, for the tests of its functions."""

import importlib.util
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load(name):
    """scripts/<name> as a fresh module."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py").replace("-", "_"),
                                                  SCRIPTS / name)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m
