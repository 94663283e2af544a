"""Shared by the amx tests (``tests/backends/amx/``): ``emulinalg._amx`` where it is built, the
AMX marks, the blocking knobs the kernels are swept over, the amx backend forced onto numpy
products, and the inputs of the C++ pipeline's checks."""

from __future__ import annotations

import numpy as np
import pytest

import emulinalg
from emulinalg.inputs import phi_matrix

try:
    from emulinalg import _amx
except ImportError:
    _amx = None

AMX_AVAILABLE = _amx is not None and _amx.available()
amx_only = pytest.mark.skipif(
    not AMX_AVAILABLE,
    reason=f"no usable AMX here: {_amx.reason() if _amx is not None else 'not built'}",
)

# Small blocks so that the shapes below cross every loop boundary (C blocks, K chunks, edge
# register blocks, thread regions), both loop orders, schedules, prefetch modes, partitions and
# the unpacked-A path.
TUNINGS = [
    "default",
    "mc=32,nc=32,kc=1",
    "mc=64,nc=32,kc=3,order=1",
    "kc=2,sched=1,prefetch=3",
    "mc=32,nc=64,kc=4,sched=2,prefetch=2,partition=1",
    "mc=32,nc=32,kc=1,order=1,prefetch=3,partition=1",
    "kc=3,pack_a=0",
    "mc=32,nc=32,kc=2,order=1,prefetch=3,pack_a=0",
    "kc=100000,prefetch=0",
    "mc=32,nc=64,kc=2,nest=1",
    "mc=64,nc=32,kc=3,nest=1,order=1,partition=1,prefetch=3",
    "kc=2,stream=1,sched=2",
    "kc=3,sched=3,prefetch=3",
    "mc=32,nc=32,kc=1,sched=3,order=1,stream=1",
    "mc=32,nc=32,kc=5,order=1,stream=1,pack_a=0",
]
# nest=0 with K in several chunks: the mod-epilogue GEMM keeps each C block's partial sums in a
# buffer of its thread (kernel.hpp, Worker::local_partials); static and dynamic grids
NEST0_TUNINGS = [
    "mc=32,nc=64,kc=1,nest=0",
    "mc=64,nc=32,kc=2,nest=0,order=1,prefetch=3",
    "mc=64,nc=64,kc=1,nest=0,partition=0",
    "mc=64,nc=64,kc=2,nest=0,sched=3",
    "mc=1048576,nc=1048576,kc=1,nest=0,partition=0",  # a C block larger than C: sized to C
]
TUNING_SHAPES = [(33, 129, 17), (64, 256, 96), (96, 640, 160), (128, 1280, 64)]
# the larger two in the long tier, for the tests that run many products per shape
TUNING_SHAPES_TIERED = [
    s if s[1] <= 256 else pytest.param(*s, marks=pytest.mark.slow) for s in TUNING_SHAPES
]


def force_amx_backend(monkeypatch, emulate):
    """Make numpy products use the amx backend, on the tile model or on AMX."""
    import emulinalg.backends
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", emulate)
    monkeypatch.setattr(emulinalg.backends, "for_namespace", lambda xp: amx)
    return amx


def matmul_amx_and_numpy(monkeypatch, a, b, precision):
    """emulinalg.matmul through the (already forced) amx backend, then through numpy's (both
    take complex products modulo the Gaussian moduli, ``gaussian_moduli``)."""
    got = emulinalg.matmul(a, b, precision=precision)
    assert emulinalg.last_plan().backend == "amx"
    monkeypatch.undo()
    monkeypatch.setenv("EMULINALG_AMX", "0")  # numpy's backend also where AMX is the default
    want = emulinalg.matmul(a, b, precision=precision)
    assert emulinalg.last_plan().backend == "numpy"
    return got, want


def _pipeline_inputs(case, rng):
    m, k, n = 37, 150, 29
    if case == "phi":
        a = phi_matrix((m, k), 2.0, "float64", seed=41)
        b = phi_matrix((k, n), 2.0, "float64", seed=42)
    elif case == "wide":  # rows/columns spanning 2**+-300, zero lines, subnormals
        a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-300, 300, (m, 1)))
        b = rng.standard_normal((k, n)) * np.exp2(rng.integers(-300, 300, (1, n)))
        a[3] = 0.0
        b[:, 5] = 0.0
        a[7, :5] = 5e-324
    else:  # huge: results near overflow
        a = rng.uniform(-1, 1, (m, k)) * 2.0**1000
        b = rng.uniform(-1, 1, (k, n)) * 2.0**20
    return a, b
