"""Double-double results of the engine (``_engine.matmul(..., dd=True)``, used by the dask layer
to add K-block partials): ``hi`` is the usual result, ``hi + lo`` the emulated exact value."""

from __future__ import annotations

import array_api_compat.numpy as xp
import numpy as np
import pytest

from emulinalg import OzakiI, OzakiII, _engine
from emulinalg._config import get_config
from emulinalg.backends import numpy as nb
from emulinalg.inputs import phi_matrix
from emulinalg.reference import exact_matmul


def _err(hi, lo, ref_hi, ref_lo):
    """|(hi + lo) - exact| per entry, accurate enough (errors here are far above 2**-100)."""
    return np.abs((hi - ref_hi) + (lo - ref_lo))


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("scheme", [OzakiII(moduli=20), OzakiI(slices=11)])
@pytest.mark.parametrize("phi", [0.5, 2.0])
def test_dd_partials_beat_rounded_result(dtype, scheme, phi):
    a = phi_matrix((9, 150), phi, dtype, seed=7)
    b = phi_matrix((150, 11), phi, dtype, seed=8)
    (hi, lo), plan = _engine.matmul(xp, nb, a, b, scheme, get_config(), dd=True)
    c, _ = _engine.matmul(xp, nb, a, b, scheme, get_config())
    assert plan.scheme == str(scheme)
    assert np.array_equal(hi, c)
    ref_hi, ref_lo = exact_matmul(a, b)
    err_dd = _err(hi, lo, ref_hi, ref_lo)
    err_hi = _err(hi, 0.0, ref_hi, ref_lo)
    assert np.all(err_dd <= err_hi)
    # lo carries the emulated value's bits below hi: |lo| <= ulp(hi) / 2
    for h, low in ((hi.real, lo.real), (np.imag(hi), np.imag(lo))):
        assert np.all(np.abs(low) <= np.spacing(np.abs(h)) / 2)


def test_dd_exact_when_the_scheme_is_exact():
    # Small integers: Scheme II with 20 moduli reproduces the exact product, so hi + lo == C.
    rng = np.random.default_rng(1)
    a = rng.integers(-(2**26), 2**26, size=(6, 40)).astype(np.float64) * 2.0**-3
    b = rng.integers(-(2**26), 2**26, size=(40, 5)).astype(np.float64)
    (hi, lo), _ = _engine.matmul(xp, nb, a, b, OzakiII(moduli=20), get_config(), dd=True)
    ref_hi, ref_lo = exact_matmul(a, b)
    assert np.array_equal(hi, ref_hi) and np.array_equal(lo, ref_lo)


def test_dd_native_entries_have_zero_lo():
    a = np.array([[1.0, np.inf], [2.0, 3.0]])
    b = np.array([[1.0, 1.0], [1.0, 1e-300]])
    (hi, lo), plan = _engine.matmul(xp, nb, a, b, OzakiII(moduli=20), get_config(), dd=True)
    assert plan.native_entries == 2
    assert np.array_equal(lo[0], [0.0, 0.0])
    with np.errstate(invalid="ignore"):
        assert np.array_equal(hi[0], a[0] @ b, equal_nan=True)


def test_dd_rejects_float32():
    a = np.ones((2, 2), dtype=np.float32)
    with pytest.raises(ValueError, match="double-double"):
        _engine.matmul(xp, nb, a, a, OzakiII(moduli=8), get_config(), dd=True)
