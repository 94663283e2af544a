"""The numpy and amx backends' refit choice (``backends.host_refit.refit_pick``, by blocks of
rows in two passes): the same entries as the generic ``refit.cancelled_entries`` on the same
parts, real and complex (each part's measure too), float64 and float32 parts, batches whose
blocks cross no batch boundary, entries taken from the native product, exact zeros, NaN, more
candidates than the refit takes."""

from __future__ import annotations

import array_api_compat.numpy as xp
import numpy as np
import pytest

from emulinalg.algorithm import refit
from emulinalg.algorithm.scaling import ozaki2_prescale
from emulinalg.backends import amx, host_refit
from emulinalg.backends import numpy as npb
from emulinalg.inputs import phi_matrix


def _case(dtype, batch, zeros, nan, flat_ratios=False):
    m, k, n = 70, 40, 52
    cplx = dtype.startswith("complex")
    a = phi_matrix(batch + (m, k), 1.0, dtype, seed=3)
    b = phi_matrix(batch + (k, n), 1.0, dtype, seed=4)
    c = np.matmul(a, b)
    if flat_ratios:  # thousands of candidates within the spread of the smallest ratio
        c = np.ones_like(c) + 1e-3 * np.arange(c.size).reshape(c.shape) / c.size
    if zeros:
        c[..., 5, :7] = 0
        c[..., 60, 50:] = 0
        if cplx:
            c[..., 9, :] = c[..., 9, :].real
    if nan:
        c[..., 3, 4] = np.nan
    parts = [np.ascontiguousarray(c.real), np.ascontiguousarray(c.imag)] if cplx else [c]
    split = [a.real, a.imag if cplx else None, b.real, b.imag if cplx else None]
    pre = ozaki2_prescale(xp, npb.int_matmul, *(None if x is None else
                                               np.ascontiguousarray(x, dtype=np.float64)
                                               for x in split), "accurate")  # fmt: skip
    return parts, pre


@pytest.mark.parametrize("block", [host_refit.BLOCK_ENTRIES, 100])
@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("zeros,nan,flat", [(False, False, False), (True, True, False),
                                            (False, False, True)])  # fmt: skip
@pytest.mark.parametrize("batch", [(), (3,)])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "complex64"])
def test_refit_pick_is_the_generic_choice(dtype, batch, zeros, nan, flat, exclude, block,
                                          monkeypatch):  # fmt: skip
    monkeypatch.setattr(host_refit, "BLOCK_ENTRIES", block)  # 100: a block of 1 or 2 rows
    parts, pre = _case(dtype, batch, zeros, nan, flat)
    ex = None
    if exclude:
        ex = np.zeros(parts[0].shape, dtype=bool)
        ex[..., ::7, ::5] = True
    want = refit.cancelled_entries(xp, parts, pre, ex)
    with np.errstate(invalid="ignore"):
        got = host_refit.refit_pick(parts, pre, ex, False)
    assert got is not None and got.dtype == np.int64
    if want is None:
        assert got.shape[0] == 0
    else:
        np.testing.assert_array_equal(got, want)
    hooked = refit.cancelled_entries(xp, parts, pre, ex, hook=host_refit.refit_pick)
    assert (hooked is None) == (want is None)


def test_every_entry_is_left_to_the_generic_code():
    parts, pre = _case("float64", (), False, False)
    assert host_refit.refit_pick(parts, pre, None, True) is None


def test_the_cpu_backends_declare_it():
    assert npb.refit_pick is host_refit.refit_pick and amx.refit_pick is host_refit.refit_pick
