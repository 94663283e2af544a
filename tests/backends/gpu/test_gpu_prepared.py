"""Prepared cupy operands: the generic path with the cupy backend's kernels (its line scan,
statistics and Scheme II product run on the whole operands; the parts are reused), results
bit-identical to the unprepared product. Runs only where cupy sees a CUDA GPU."""

from __future__ import annotations

import numpy as np
import pytest
from _gpu_helpers import require_gpu

import emulinalg
from emulinalg import OzakiII
from emulinalg.inputs import phi_matrix

cp = require_gpu()

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
@pytest.mark.parametrize("precision", [OzakiII(moduli=14), None], ids=str)
def test_prepared_cupy_bit_identical(eager, dtype, precision):
    a = cp.asarray(phi_matrix((300, 500), 1, dtype=dtype, seed=1))
    b = cp.asarray(phi_matrix((500, 200), 1, dtype=dtype, seed=2))
    want = emulinalg.matmul(a, b, precision=precision)
    p = emulinalg.prepare(a, precision=precision)
    a[:] = 0  # the snapshot is a copy
    assert p.backend == "cupy"
    for _ in range(2):
        got, plan = emulinalg.matmul(p, b, precision=precision, explain=True)
        np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(want), strict=True)
    assert plan.notes[-1].startswith("prepared x1 (A): reused float64 parts")
    with pytest.raises(ValueError, match="prepared for precision"):
        emulinalg.matmul(p, b, precision=OzakiII(moduli=15))
