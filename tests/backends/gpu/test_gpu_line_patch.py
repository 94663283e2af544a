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
from _helpers import assert_lines_reach, level_lines, line_patch_case

from emulinalg.algorithm.xputil import to_host
from emulinalg.reference import accuracy

cp = require_gpu()

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["float64", "float32"])
def test_cupy_level_takes_the_numpy_lines(name, monkeypatch):
    a, b = line_patch_case(name)
    c, plan, lines = level_lines(monkeypatch, cp.asarray(a), cp.asarray(b))
    _, want_plan, want_lines = level_lines(monkeypatch, a, b)
    assert plan.backend == "cupy" and want_plan.backend == "numpy"
    assert plan.scheme == want_plan.scheme
    assert to_host(lines.rows).tolist() == to_host(want_lines.rows).tolist()
    assert to_host(lines.cols).tolist() == to_host(want_lines.cols).tolist()
    assert (lines.block is None) == (want_lines.block is None)
    assert np.array_equal(to_host(lines.entries), to_host(want_lines.entries))
    # the whole product, the lines and the block (float64 products of cuBLAS's: line_pieces
    # off) at or above cuBLAS's own product of the inputs' precision on the same entries,
    # against the exact product
    native, got_c = to_host(cp.matmul(cp.asarray(a), cp.asarray(b))), to_host(c)
    got, ref = (accuracy(x, a, b) for x in (got_c, native))
    assert got["nonfinite_mismatch"] == 0
    assert got["bits_maxrel"] >= ref["bits_maxrel"], (got, ref)
    assert got["bits_cw"] >= ref["bits_cw"], (got, ref)
    assert_lines_reach(got_c, native, a, b, lines)
