"""Fixtures of the kernel tests: ``emulinalg/backends/cupy/`` on the CPU stand-in for cupy
(``fake_cupy``), its kernels the numpy model or the CUDA sources compiled as host C++."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module", params=["model", pytest.param("native", marks=pytest.mark.slow)])
def cpu_backend(request):
    """emulinalg/backends/cupy/ on a CPU stand-in for cupy whose kernels are the numpy model,
    or the CUDA sources themselves compiled as host C++ (needs g++ with C++20)."""
    import shutil

    import fake_cupy

    if request.param == "native" and shutil.which("g++") is None:
        pytest.skip("no g++ to compile the CUDA sources for the CPU")
    be, cp = fake_cupy.load_backend(native=request.param == "native")
    # a block per 256 threads here: few, grid-stride over the slots
    be.certificate._SAMPLE_BLOCKS = 3
    return be, cp


@pytest.fixture(scope="module")
def native_backend():
    """As ``cpu_backend``'s native form, in the fast tier too (tests that pick their cases)."""
    import shutil

    import fake_cupy

    if shutil.which("g++") is None:
        pytest.skip("no g++ to compile the CUDA sources for the CPU")
    return fake_cupy.load_backend(native=True)
