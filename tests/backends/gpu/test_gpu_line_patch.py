"""The cupy backend takes the native form's line patch (``refinement.line_patch``) as the numpy
backend does: its certificate kernels report up to ``fails_cap`` failing entries, the host settles
the patch with ``refinement.kernel_patch``, and the level takes numpy's count and lines, whose
entries come from float64 native products on the device, each over all of k (cuBLAS splits k
itself where the output is small: ``line_pieces`` off).

Runs only where cupy sees a CUDA GPU (marked ``gpu``)."""

from __future__ import annotations

import numpy as np
import pytest
from _gpu_helpers import require_gpu

import emulinalg
from emulinalg import _engine
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy

cp = require_gpu()

pytestmark = pytest.mark.gpu


def _case(name):
    if name == "float32":  # phi-matrices whose row 328 fails throughout one modulus below
        return (phi_matrix((512, 512), 1.0, "float32", seed=1),
                phi_matrix((512, 512), 1.0, "float32", seed=101))  # fmt: skip
    a, b = phi_matrix((256, 256), 0.5, seed=3), phi_matrix((256, 256), 0.5, seed=4)
    a[5, 7] *= 100.0  # row 5 and a block where rows and columns of large entries cross
    b[11, 9] *= 100.0
    return a, b


def _level(monkeypatch, a, b):
    seen = []
    real = _engine._native_lines

    def spy(*args):
        seen.append(args[7])
        return real(*args)

    with monkeypatch.context() as mp:
        mp.setattr(_engine, "_native_lines", spy)
        mp.setenv("EMULINALG_AMX", "0")
        with emulinalg.config(strategy="eager"):
            c = emulinalg.matmul(a, b, precision="float32" if a.dtype == np.float32 else "float64")
        plan = emulinalg.last_plan()
    assert len(seen) == 1, str(plan)
    return c, plan, seen[0]


def _host(x):
    return x.get() if isinstance(x, cp.ndarray) else np.asarray(x)


@pytest.mark.parametrize("name", ["float64", "float32"])
def test_cupy_level_takes_the_numpy_lines(name, monkeypatch):
    a, b = _case(name)
    c, plan, lines = _level(monkeypatch, cp.asarray(a), cp.asarray(b))
    _, want_plan, want_lines = _level(monkeypatch, a, b)
    assert plan.backend == "cupy" and want_plan.backend == "numpy"
    assert plan.scheme == want_plan.scheme
    assert _host(lines.rows).tolist() == _host(want_lines.rows).tolist()
    assert _host(lines.cols).tolist() == _host(want_lines.cols).tolist()
    assert (lines.block is None) == (want_lines.block is None)
    assert np.array_equal(_host(lines.entries), _host(want_lines.entries))
    # the whole product and the lines' rows (float64 products of cuBLAS's: line_pieces off) at
    # or above cuBLAS's own product of the inputs' precision, against the exact product
    native = _host(cp.matmul(cp.asarray(a), cp.asarray(b)))
    rows = _host(lines.rows)
    for sel in (slice(None), rows):
        got = accuracy(_host(c)[sel], a[sel], b)
        ref = accuracy(native[sel], a[sel], b)
        assert got["nonfinite_mismatch"] == 0
        assert got["bits_maxrel"] >= ref["bits_maxrel"], (sel, got, ref)
        assert got["bits_cw"] >= ref["bits_cw"], (sel, got, ref)
