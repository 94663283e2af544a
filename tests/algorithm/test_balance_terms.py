"""The part check's balance test written through its scalars (``certificate.upper_terms``,
``parts.balance_terms``: what a backend's fused kernel takes) gives the bits of the formulas
written out, on both forms of ``certificate.magnitude_upper`` (bfloat16/float32 sums below
LOWER_K_MAX, float64 sums above)."""

from __future__ import annotations

import numpy as np
import pytest

from emulinalg.algorithm import certificate, parts
from emulinalg.algorithm.certificate import _LOWER_REL, cert_constants, lower_abs, signed_error


def _upper(lower, k):  # certificate.magnitude_upper written out
    cc = cert_constants(k)
    if k > certificate.LOWER_K_MAX:
        return (lower + cc.native_abs_term) / cc.native_factor**2 * (1.0 + 2.0**-50)
    sums = (lower + cc.abs_term) / cc.factor**2 + lower_abs(k)
    return sums / (1.0 - _LOWER_REL) ** 2 * (1.0 + 2.0**-50)


@pytest.mark.parametrize("k", [1, 24, 4096, certificate.LOWER_K_MAX, certificate.LOWER_K_MAX + 1])
def test_balance_through_its_terms(k):
    rng = np.random.default_rng(k % 1000)
    t_lo = np.abs(rng.standard_normal((60, 50))) * 2.0 ** rng.integers(-40, 3, (60, 1))
    t_lo[0, :5] = 0.0
    s = t_lo * rng.uniform(-0.3, 0.3, t_lo.shape)
    np.testing.assert_array_equal(certificate.magnitude_upper(np, t_lo, k), _upper(t_lo, k))
    t_hi = _upper(t_lo, k)
    d_hi = (np.abs(s) + signed_error(k) * t_hi + lower_abs(k)) * (1.0 + 2.0**-50)
    part_lo = (t_lo * (1.0 - 2.0**-52) - d_hi * (1.0 + 2.0**-52)) * (0.5 * (1.0 - 2.0**-50))
    rows = np.zeros((60, 1), dtype=bool)
    cols = np.zeros((1, 50), dtype=bool)
    seen = set()
    for slack in (1.5, 2.0, 3.0, 8.0, 1e3):
        fine = part_lo >= t_hi * ((1.0 + 2.0**-52) / slack)
        for r in (rows, rows | (np.arange(60)[:, None] == 0)):
            want = bool(np.all(fine | r | cols))
            assert parts.balance_fine(np, t_lo, s, parts.balance_terms(k, slack), r, cols) == want
            seen.add(want)
    # both decisions seen where the signed estimate's error (signed_error(k)) leaves room
    assert seen == ({True, False} if k <= 4096 else {False})
