"""``xputil.take``: numpy's take on a strided array copies all of it first; the helper gathers
only the lines, with the values of ``xp.take``."""

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
