"""Shared pytest configuration: markers, hypothesis profiles and fixtures.

Hypothesis profiles (select with ``HYPOTHESIS_PROFILE=<name>``):

- ``ci`` (default): derandomized, no deadline, few examples, so the whole suite stays well
  under 15 minutes on a 2-core CI machine.
- ``dev``: more examples, random seeds, for local bug hunting.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    deadline=None,
    max_examples=60,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    for line in (
        "slow: long-running (over ~20 s) accuracy sweeps; still run in CI",
        "gpu: needs a CUDA GPU with cupy (skips where absent)",
        "cuda: needs a CUDA GPU with cupy (skips where absent)",
        "amx: needs an Intel AMX CPU (skips where absent)",
        "dask: needs dask[array] and distributed",
    ):
        config.addinivalue_line("markers", line)


@pytest.fixture
def rng():
    """A fresh, seeded numpy Generator per test."""
    return np.random.default_rng(20260101)


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
