"""Shared pytest configuration: the test tiers, hypothesis profiles and fixtures.

Tiers: a plain ``python -m pytest -q tests`` runs the fast tier, every module in a few minutes
on 2 cores: the tests and parametrized cases marked ``slow`` (the graded suite beyond a sample,
the big cases of parametrized sweeps, the CUDA sources compiled for the CPU, the costlier dask
graphs and clusters) are deselected, and hypothesis runs fewer examples. ``--run-slow`` runs all
tiers (``.ci/run`` does); ``-m`` selects within what the tier keeps (``--run-slow -m slow``: the
long tier alone).

Hypothesis profiles (``HYPOTHESIS_PROFILE=<name>`` or ``--hypothesis-profile=<name>`` overrides):

- ``fast`` (default): derandomized, no deadline, 15 examples.
- ``ci`` (with ``--run-slow``): as ``fast`` with 60 examples.
- ``dev``: more examples, random seeds, for local bug hunting.

A test whose own ``@settings`` sets ``max_examples`` keeps it in both tiers.
"""

from __future__ import annotations

import os

# One BLAS thread per process (before numpy loads OpenBLAS): the suite's products are small, and
# OpenBLAS's threads busy-wait where the cores are shared (dask workers, the OpenMP kernels,
# other jobs); on a loaded 2-core machine that made them up to 10x slower. The variable, where
# set, wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import pytest

from emulinalg import _extras

# Without the test extra, pytest_configure stops the run with the one line naming it (an import
# error here would be a traceback "while loading conftest").
_MISSING = _extras.missing("hypothesis", needed_by="tests/conftest.py")
if _MISSING is None:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "ci",
        deadline=None,
        max_examples=60,
        derandomize=True,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    settings.register_profile("fast", settings.get_profile("ci"), max_examples=15)
    settings.register_profile(
        "dev",
        deadline=None,
        max_examples=200,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def pytest_addoption(parser):
    parser.addoption(
        "--run-slow",
        action="store_true",
        help="run all test tiers: also the tests marked slow, hypothesis at the ci profile",
    )


@pytest.hookimpl(tryfirst=True)  # before hypothesis's plugin, which may adjust the profile
def pytest_configure(config):
    if _MISSING:
        pytest.exit(_MISSING, returncode=_extras.MISSING_EXTRA)
    if os.environ.get("HYPOTHESIS_PROFILE"):
        settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])
    elif not config.getoption("hypothesis_profile", None):
        settings.load_profile("ci" if config.getoption("--run-slow") else "fast")
    for line in (
        "slow: the long tier, deselected unless --run-slow (CI runs it)",
        "gpu: needs a CUDA GPU with cupy (skips where absent)",
        "cuda: needs a CUDA GPU with cupy (skips where absent)",
        "amx: needs an Intel AMX CPU (skips where absent)",
        "dask: needs dask[array] and distributed",
    ):
        config.addinivalue_line("markers", line)


def pytest_collection_modifyitems(config, items):
    """Deselect the long tier unless --run-slow."""
    if config.getoption("--run-slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.fixture
def rng():
    """A fresh, seeded numpy Generator per test."""
    return np.random.default_rng(20260101)


@pytest.fixture(autouse=True)
def _fresh_verdicts():
    """Each test's products decide their cost-model verdicts anew: ``emulinalg._api`` keeps the
    native ones per call signature, and a test may patch what decides them."""
    from emulinalg import _api

    _api._VERDICTS.clear()


@pytest.fixture
def numpy_backend(monkeypatch):
    """numpy arrays on the numpy backend (the CPU reference), also on CPUs where they default to
    the amx backend: for tests of that backend's own stages, plans and cost model."""
    monkeypatch.setenv("EMULINALG_AMX", "0")


@pytest.fixture
def eager():
    """Run the test body with ``strategy="eager"``: always emulate.

    The numpy backend never predicts emulation to be faster than BLAS, so under the default
    ``strategy="performant"`` most products would run natively and the accuracy tests would
    test nothing.
    """
    import emulinalg

    with emulinalg.config(strategy="eager"):
        yield
