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
from _helpers import level_lines, line_patch_case

from emulinalg.reference import accuracy

cp = require_gpu()

pytestmark = pytest.mark.gpu


def _host(x):
    return x.get() if isinstance(x, cp.ndarray) else np.asarray(x)


@pytest.mark.parametrize("name", ["float64", "float32"])
def test_cupy_level_takes_the_numpy_lines(name, monkeypatch):
    a, b = line_patch_case(name)
    c, plan, lines = level_lines(monkeypatch, cp.asarray(a), cp.asarray(b))
    _, want_plan, want_lines = level_lines(monkeypatch, a, b)
    assert plan.backend == "cupy" and want_plan.backend == "numpy"
    assert plan.scheme == want_plan.scheme
    assert _host(lines.rows).tolist() == _host(want_lines.rows).tolist()
    assert _host(lines.cols).tolist() == _host(want_lines.cols).tolist()
    assert (lines.block is None) == (want_lines.block is None)
    assert np.array_equal(_host(lines.entries), _host(want_lines.entries))
    # the whole product, the lines and the block (float64 products of cuBLAS's: line_pieces
    # off) at or above cuBLAS's own product of the inputs' precision on the same entries,
    # against the exact product
    native, got_c = _host(cp.matmul(cp.asarray(a), cp.asarray(b))), _host(c)
    every = slice(None)
    sel = [(every, every), (_host(lines.rows), every)]
    if len(lines.cols):
        sel.append((every, _host(lines.cols)))
    if lines.block is not None:
        sel.append(tuple(_host(x) for x in lines.block))
    for r, cl in sel:
        ta, tb = a[r], b[:, cl]
        got = accuracy(got_c[r][:, cl], ta, tb)
        ref = accuracy(native[r][:, cl], ta, tb)
        assert got["nonfinite_mismatch"] == 0
        assert got["bits_maxrel"] >= ref["bits_maxrel"], (r, cl, got, ref)
        assert got["bits_cw"] >= ref["bits_cw"], (r, cl, got, ref)
