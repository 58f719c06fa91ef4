"""Shared fixtures: every shared test runs on both frameworks through ``fw``."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
# Two cores shared by pytest-xdist workers: one math thread each avoids oversubscription (10x slower).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
warnings.filterwarnings("ignore", module="paddle")

from models import Framework, make_framework  # noqa: E402

FRAMEWORKS = ["torch", "paddle"]


@pytest.fixture(params=FRAMEWORKS)
def fw(request) -> Framework:
    """The framework under test: ``fw.name``, ``fw.nn``, ``fw.tensor(array)``, model factories."""
    framework = make_framework(request.param)
    framework.seed(0)
    return framework


@pytest.fixture
def torch_fw() -> Framework:
    return make_framework("torch")


@pytest.fixture
def paddle_fw() -> Framework:
    return make_framework("paddle")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
