"""Shared by the cupy backend's GPU tests (``tests/backends/gpu/``): products with
``strategy="eager"``, bitwise comparison, and the operands of the kernels' checks."""

from __future__ import annotations

import numpy as np
import pytest

import emulinalg
from emulinalg.inputs import phi_matrix


def require_gpu():
    """cupy, where it sees a CUDA device; otherwise the calling test module is skipped (called
    at module level, before the module imports the cupy backend)."""
    cp = pytest.importorskip("cupy", reason="cupy is not installed")
    try:
        ngpu = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver / no device
        pytest.skip(f"no CUDA device: {e}", allow_module_level=True)
    if ngpu == 0:
        pytest.skip("no CUDA device", allow_module_level=True)
    return cp


def _eager(fn, *args, **kw):
    with emulinalg.config(strategy="eager"):
        out = fn(*args, **kw)
        return out, emulinalg.last_plan()


def _bits_equal(x, y):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    if x.dtype.kind == "c":
        return _bits_equal(x.real, y.real) and _bits_equal(x.imag, y.imag)
    u = {8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}[x.dtype.itemsize]
    return np.array_equal(x.view(u), y.view(u))


def _operands(shape, phi, cplx, seed, scale_a=0, scale_b=0, zero_lines=True):
    """float64 parts (ar, ai, br, bi) of phi matrices, scaled by powers of two; a zero row of A
    and a zero column of B where there is room."""
    batch, m, k, n = shape
    dt = "complex128" if cplx else "float64"
    a = phi_matrix(batch + (m, k), phi, dt, seed=seed)
    b = phi_matrix(batch + (k, n), phi, dt, seed=seed + 1)
    parts = [np.ldexp(a.real, scale_a), np.ldexp(b.real, scale_b)]
    parts += [np.ldexp(a.imag, scale_a), np.ldexp(b.imag, scale_b)] if cplx else [None, None]
    ar, br, ai, bi = parts
    for x in (ar, ai):
        if x is not None and zero_lines and m >= 3:
            x[..., 1, :] = 0.0
    for x in (br, bi):
        if x is not None and zero_lines and n >= 3:
            x[..., :, 2] = 0.0
    return ar, ai, br, bi
