"""Complex parts on the GPU (issue #26, class 1): where |Im| is far below |Re|, the cupy
backend's default level keeps each part's accuracy as cuBLAS's ZGEMM/CGEMM on the same inputs
(per part, against the exact product), and the plan says the product was split; ordinary
complex inputs keep the complex route. The CPU tests of the same route (numpy backend, more
shapes and ratios): tests/core/test_complex_parts.py."""

from __future__ import annotations

import numpy as np
import pytest
from _gpu_helpers import _eager, require_gpu

import emulinalg
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy, exact_matmul

cp = require_gpu()

pytestmark = pytest.mark.gpu

PARTS = ("bits_maxrel_re", "bits_cw_re", "bits_maxrel_im", "bits_cw_im")
MARGIN = 0.5  # single realizations of two products' maxima (tests/core/test_complex_parts.py)


def _small_part(m, k, n, dtype, ratio, seed):
    def op(sh, s):
        re = phi_matrix(sh, 0.5, "float64", seed=s)
        return (re + 1j * ratio * phi_matrix(sh, 0.5, "float64", seed=s + 1)).astype(dtype)

    return op((m, k), seed), op((k, n), seed + 7)


def _bits(c, a, b, ref):
    acc = accuracy(cp.asnumpy(c), a, b, ref)
    assert acc["nonfinite_mismatch"] == 0
    return [acc[p] for p in PARTS]


@pytest.mark.parametrize("ratio", [1e-8, 1e-12, 1e-20])
@pytest.mark.parametrize("k", [1, 64, 300])
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_small_part_keeps_cublas_bits(dtype, k, ratio):
    a, b = _small_part(96, k, 80, dtype, ratio, seed=k + int(-np.log10(ratio)))
    ref = exact_matmul(a, b)
    da, db = cp.asarray(a), cp.asarray(b)
    native = _bits(da @ db, a, b, ref)
    c, plan = _eager(emulinalg.matmul, da, db)
    assert isinstance(c, cp.ndarray) and c.dtype == da.dtype
    got = _bits(c, a, b, ref)
    for name, g, w in zip(PARTS, got, native):
        assert g >= w - MARGIN, f"{name}: {g:.2f} < cuBLAS {w:.2f}\n{plan}"
    if k == 300:  # smaller products refit every entry: no split needed there
        assert any(n.startswith("complex parts: split") for n in plan.notes), plan


def test_ordinary_complex_keeps_the_complex_route():
    a = phi_matrix((128, 256), 0.5, "complex128", seed=3)
    b = phi_matrix((256, 96), 0.5, "complex128", seed=4)
    ref = exact_matmul(a, b)
    da, db = cp.asarray(a), cp.asarray(b)
    native = _bits(da @ db, a, b, ref)
    c, plan = _eager(emulinalg.matmul, da, db)
    assert not any(n.startswith("complex parts: split") for n in plan.notes), plan
    got = _bits(c, a, b, ref)
    for name, g, w in zip(PARTS, got, native):
        assert g >= w - MARGIN, f"{name}: {g:.2f} < cuBLAS {w:.2f}\n{plan}"
