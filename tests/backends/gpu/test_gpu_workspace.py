"""The cupy backend's Scheme II product reports its workspace in the plan (issue #26, class 5):
B's residue planes and one chunk of A's with its products, bounded by the backend's chunk size;
a smaller chunk gives a smaller workspace and the same bits."""

from __future__ import annotations

import re

import numpy as np
import pytest
from _gpu_helpers import require_gpu

import emulinalg
from emulinalg.inputs import phi_matrix

cp = require_gpu()

from emulinalg.backends.cupy import products as cupy_products  # noqa: E402

pytestmark = pytest.mark.gpu


def _workspace(plan):
    m = re.search(r"workspace: ([0-9.e+-]+) GiB", str(plan))
    assert m, str(plan)
    return float(m.group(1)) * 2**30


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_plan_reports_the_workspace(dtype, monkeypatch):
    m, k, n = 1000, 700, 900
    a = cp.asarray(phi_matrix((m, k), 1.0, dtype, seed=1))
    b = cp.asarray(phi_matrix((k, n), 1.0, dtype, seed=2))
    scheme = emulinalg.OzakiII(moduli=14)
    c, plan = emulinalg.matmul(a, b, precision=scheme, explain=True)
    got = _workspace(plan)
    planes = (3 if dtype == "complex128" else 1) * 14 * 900 * 704  # B's planes (k padded to 16)
    assert planes < got <= planes + cupy_products.chunk_bytes
    monkeypatch.setattr(cupy_products, "chunk_bytes", 1 << 20)  # A in chunks of a few rows
    c2, plan2 = emulinalg.matmul(a, b, precision=scheme, explain=True)
    small = _workspace(plan2)
    assert planes < small <= planes + (1 << 20) and small < got
    np.testing.assert_array_equal(cp.asnumpy(c2), cp.asnumpy(c))
