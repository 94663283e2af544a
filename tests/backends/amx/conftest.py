"""Fixtures of the amx tests: the blocking knobs restored after a test, the amx backend on the
tile model and on AMX, and the C++ stages' loops (explicit AVX-512 or portable)."""

from __future__ import annotations

import pytest
from _amx_helpers import _amx, amx_only, force_amx_backend


@pytest.fixture
def restore_blocking():
    """Give each test the default knobs and put back whatever was set before."""
    before = _amx.set_blocking("default")
    yield
    _amx.set_blocking(before["spec"])


@pytest.fixture(
    params=[True, pytest.param(False, marks=[pytest.mark.amx, amx_only])], ids=["model", "amx"]
)
def backend(request, monkeypatch):
    """The amx backend on the tile model (no AMX instruction, runs everywhere), and on AMX."""
    return force_amx_backend(monkeypatch, emulate=request.param)


@pytest.fixture
def amx_backend(monkeypatch):
    """The amx backend on the AMX tiles."""
    return force_amx_backend(monkeypatch, emulate=False)


@pytest.fixture(params=["avx512", "portable"])
def host_loops(request):
    """The C++ stages' loops of this test (``_amx.host_avx512``'s switch): the explicit AVX-512
    ones where the CPU has them (else skipped), then the portable ones."""
    try:
        was = _amx.host_avx512(request.param == "avx512")
    except ValueError as exc:
        pytest.skip(str(exc))
    yield request.param
    _amx.host_avx512(was)
