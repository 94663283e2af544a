"""The cupy line scan's exponents (``line_max_exponent``, here its numpy model) serve the complex
part check as its line exponents (``_engine._scanned_lines``): the same as the part check's own
``parts._line_exponents``, zero lines, subnormal and batched operands included; a broadcast
batch is declined."""

from __future__ import annotations

import gpu_kernel_model as model
import numpy as np
import pytest

from emulinalg import _engine
from emulinalg.algorithm import parts


def _operands(batch, seed):
    rng = np.random.default_rng(seed)
    m, k, n = 9, 13, 7

    def part(shape):
        x = rng.standard_normal(shape) * 2.0 ** rng.integers(-1070, 1000, shape)
        x[rng.random(shape) < 0.3] = 0.0
        return x

    ar, ai = part(batch + (m, k)), part(batch + (m, k))
    br, bi = part(batch + (k, n)), part(batch + (k, n))
    ar[..., 2, :] = ai[..., 2, :] = 0.0  # zero lines
    br[..., :, 3] = bi[..., :, 3] = 0.0
    ai[..., 4, :] = 0.0  # a line with one part zero
    ar[..., 5, 0] = 2.0**-1074  # a subnormal line maximum
    ar[..., 5, 1:] = ai[..., 5, :] = 0.0
    return ar, ai, br, bi


@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
@pytest.mark.parametrize("seed", range(3))
def test_scanned_lines_are_the_part_checks_own(batch, seed):
    ar, ai, br, bi = _operands(batch, seed)
    m, k, n = ar.shape[-2], ar.shape[-1], br.shape[-1]
    B = int(np.prod(batch, dtype=np.int64))
    ea = model.line_max_exponent(ar.reshape(B, m, k), ai.reshape(B, m, k))
    bt = np.swapaxes(br, -1, -2).reshape(B, n, k)
    eb = model.line_max_exponent(bt, np.swapaxes(bi, -1, -2).reshape(B, n, k))
    got = _engine._scanned_lines(np, (ea, eb), ar, br)
    want = parts._line_exponents(np, ar, ai, br, bi)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == np.int64
        np.testing.assert_array_equal(g, w)


def test_scanned_lines_decline_a_broadcast_batch():
    ar, _, br, _ = _operands((), 0)
    bb = np.broadcast_to(br, (3,) + br.shape)
    ea = np.zeros((3, ar.shape[-2]), dtype=np.int32)  # the scan's batch: the broadcast one
    eb = np.zeros((3, br.shape[-1]), dtype=np.int32)
    assert _engine._scanned_lines(np, (ea, eb), ar, bb) is None
    assert _engine._scanned_lines(np, None, ar, br) is None
