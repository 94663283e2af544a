"""xputil's numpy fast paths: ``take`` (numpy's take on a strided array copies all of it first;
the helper gathers only the lines, with the values of ``xp.take``) and ``make_complex`` (one
OpenMP pass, every bit of numpy's)."""

from __future__ import annotations

import array_api_compat.numpy as xp
import numpy as np
import pytest

from emulinalg.algorithm.xputil import take


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("layout", ["C", "F", "real part", "batched real part"])
def test_take_equals_numpy_take(rng, axis, layout):
    z = rng.standard_normal((3, 40, 30)) + 1j * rng.standard_normal((3, 40, 30))
    x = {
        "C": np.ascontiguousarray(z[0].real),
        "F": np.asfortranarray(z[0].real),
        "real part": z[0].real,
        "batched real part": z.real,
    }[layout]
    idx = np.array([1, 0, 1, x.shape[axis] - 1, 2])
    got = take(xp, x, idx, axis)
    want = np.take(x, idx, axis=axis)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_make_complex_host_path_keeps_every_bit(rng, layout):
    """``make_complex`` of large 2-D float64 numpy parts (one OpenMP pass in emulinalg._amx)
    equals numpy's astype and imaginary assignment bit for bit: inf, nan and signed zeros kept
    in either part."""
    from emulinalg.algorithm.xputil import _host_make_complex, make_complex

    re, im = rng.standard_normal((2, 300, 500))
    re[0, :3], im[0, :3] = [np.inf, -0.0, np.nan], [np.nan, -np.inf, -0.0]
    if layout == "F":
        re, im = np.asfortranarray(re), np.asfortranarray(im)
    elif layout == "strided":
        re, im = re[:, ::2], im[:, ::2]
    want = re.astype(np.complex128)
    want.imag = im
    got = make_complex(xp, re, im, "complex128")
    assert _host_make_complex(xp, re, im, "complex128") is not None or re.size < 1 << 16
    assert got.dtype == np.complex128 and got.shape == re.shape
    got, want = (np.ascontiguousarray(x).view(np.float64) for x in (got, want))
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))
