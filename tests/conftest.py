"""Shared fixtures: every shared test runs on both frameworks through ``fw``.

Determinism: each test starts from the same random state (``random``, numpy's global generator, torch,
Paddle: seed 0), whatever ran before it and whatever order pytest-randomly chose; ``-p randomly``
only changes the order (its seed is printed at the top of the run).

Threads: one math thread per process unless ``OMP_NUM_THREADS`` says otherwise (``OMP_NUM_THREADS=2
python -m pytest`` runs the suite with two); results are compared with tolerances that hold for any
thread count and CPU (``tests/tolerance.py``).

Device: ``HOOKKIT_TEST_DEVICE=cuda python -m pytest`` runs the tests that take a framework fixture
(``fw``, ``torch_fw``, ``paddle_fw``, ``device``) on the GPU: torch's default device becomes
``cuda`` (``torch.set_default_device``: every tensor and module a test builds without naming a device
lands there) and Paddle's ``paddle.set_device("gpu")`` when Paddle has a CUDA build. Tests that take no
framework fixture, and modules or tests known to be CPU-only (``CPU_ONLY`` below, ``@pytest.mark.cpu_only``),
are skipped there with the reason; the default (``cpu``) is unchanged.
"""

from __future__ import annotations

import os
import random
import sys
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
DEVICE = os.environ.get("HOOKKIT_TEST_DEVICE", "cpu").strip().lower() or "cpu"
FRAMEWORK_FIXTURES = {"fw", "torch_fw", "paddle_fw", "device"}
# Whole modules that only make sense on the CPU, with the reason shown when the GPU lane skips them.
CPU_ONLY = {
    "test_stats_kernel.py": "the C statistics kernel reads host memory (the CPU route)",
    "test_distributed.py": "2-rank gloo process groups on loopback CPUs",
    "test_extract_ranks.py": "2-rank gloo process groups on loopback CPUs",
    "test_packaging.py": "builds and installs the package; no tensor",
    "test_notebooks.py": "runs the notebooks as a user does, on the CPU",
}


def _paddle_has_gpu() -> bool:
    try:
        import paddle
    except ImportError:
        return False
    return bool(paddle.device.is_compiled_with_cuda()) and paddle.device.cuda.device_count() > 0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cpu_only(reason): runs on the CPU only; HOOKKIT_TEST_DEVICE=cuda skips it with the reason")
    if DEVICE == "cpu":
        return
    if DEVICE != "cuda":
        raise pytest.UsageError(f"HOOKKIT_TEST_DEVICE={DEVICE!r}: expected 'cpu' (the default) or 'cuda'")
    import torch

    if not torch.cuda.is_available():
        raise pytest.UsageError("HOOKKIT_TEST_DEVICE=cuda but torch.cuda.is_available() is False: no GPU to run on")
    torch.set_default_device("cuda")
    if _paddle_has_gpu():
        import paddle

        paddle.set_device("gpu")


def pytest_report_header(config: pytest.Config) -> str:
    return f"hookkit test device: {DEVICE} (HOOKKIT_TEST_DEVICE), math threads: {os.environ.get('OMP_NUM_THREADS')}"


def _uses_paddle(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    return "paddle_fw" in item.fixturenames or any(isinstance(v, str) and v == "paddle" for v in params)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if DEVICE == "cpu":
        return
    paddle_gpu = _paddle_has_gpu()
    for item in items:
        module = os.path.basename(str(item.fspath))
        marker = item.get_closest_marker("cpu_only")
        if module in CPU_ONLY:
            reason = CPU_ONLY[module]
        elif marker is not None:
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "CPU-only")
        elif not FRAMEWORK_FIXTURES & set(getattr(item, "fixturenames", ())):
            reason = "takes no framework fixture (fw, torch_fw, paddle_fw, device): the CPU lane runs it"
        elif not paddle_gpu and _uses_paddle(item):
            reason = "Paddle has no CUDA build here"
        else:
            continue
        item.add_marker(pytest.mark.skip(reason=f"HOOKKIT_TEST_DEVICE={DEVICE}: {reason}"))


@pytest.fixture(autouse=True)
def _same_random_state_for_every_test() -> None:
    """Seed 0 everywhere before each test: no test sees what another drew (pytest-randomly reseeds
    ``random`` and numpy before this runs; torch and Paddle it does not know)."""
    random.seed(0)
    np.random.seed(0)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(0)
    if "paddle" in sys.modules:
        sys.modules["paddle"].seed(0)


@pytest.fixture
def device() -> str:
    """The device tests run on: ``"cpu"`` unless ``HOOKKIT_TEST_DEVICE=cuda``."""
    return DEVICE


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
