"""The cupy backend's fused balance test (``backends.cupy.balance``): ``balance_sides`` gives the
generic ``parts.balance_sides`` bit for bit, and ``balance_fine`` the generic decision, for
operands whose parts are balanced or far apart, zero lines, batches, slacks around the
decisions' edges."""

from __future__ import annotations

import numpy as np
import pytest
from _gpu_helpers import require_gpu

from emulinalg._stages import stages
from emulinalg.algorithm import certificate, parts

cp = require_gpu()

import array_api_compat.cupy as cxp  # noqa: E402  (needs cupy)

from emulinalg.backends import cupy as cupy_backend  # noqa: E402
from emulinalg.backends.cupy import balance  # noqa: E402

pytestmark = pytest.mark.gpu


def _operands(batch, k, ratio, seed):
    rng = np.random.default_rng(seed)
    m, n = 37, 29

    def parts_of(shape, lines):  # lines of A (rows) and B (columns) scaled apart, both parts
        scale = 2.0 ** rng.integers(-20, 20, lines)
        return (rng.standard_normal(shape) * scale, rng.standard_normal(shape) * ratio * scale)

    ar, ai = parts_of(batch + (m, k), batch + (m, 1))
    br, bi = parts_of(batch + (k, n), batch + (1, n))
    ar[..., 3, :] = ai[..., 3, :] = 0.0  # a zero row of A
    br[..., :, 5] = bi[..., :, 5] = 0.0  # a zero column of B
    return [cp.asarray(x) for x in (ar, ai, br, bi)]


@pytest.mark.parametrize("k", [24, 300])
@pytest.mark.parametrize("batch", [(), (2,)])
@pytest.mark.parametrize("ratio", [1.0, 1e-3, 1e-12])
def test_fused_balance_is_the_generic_one(k, batch, ratio):
    ar, ai, br, bi = _operands(batch, k, ratio, seed=k + len(batch))
    ea, eb = parts._line_exponents(cxp, ar, ai, br, bi)
    sides = []
    for re, im, e in ((ar, ai, ea), (br, bi, eb)):
        want = parts.balance_sides(cxp, re, im, e)
        got = balance.balance_sides(re, im, e)
        for g, w in zip(got, want):
            assert g.dtype == cp.float64 and cp.array_equal(g, w)
        sides.append(want)
    (ta, da), (tb, db) = sides
    st = stages(cupy_backend)
    t_lo = certificate.magnitude_lower(cxp, st, ta, tb)
    s = certificate.signed_estimate(cxp, st, da, db)
    empty = (cp.expand_dims(cp.max(ta, axis=-1) == 0, -1),
             cp.expand_dims(cp.max(tb, axis=-2) == 0, -2))  # fmt: skip
    decisions = []
    for slack in (1.0 + 2.0**-20, 1.5, 2.0, 2.5, 4.0, 64.0, 1e6, 1e30):
        terms = parts.balance_terms(k, slack)
        want = parts.balance_fine(cxp, t_lo, s, terms, *empty)
        assert balance.balance_fine(t_lo, s, terms, *empty) == want, (slack, want)
        decisions.append(want)
    assert not decisions[0]  # a part's sums are never all of T's at slack ~1
    # parts of one size pass at a large slack; a part 1e-3 of the other is within the signed
    # estimate's error (about 1 %) of nothing: it never passes
    assert decisions[-1] == (ratio == 1.0)


def test_fused_balance_declines_what_it_does_not_take():
    x = cp.ones((3, 4))
    assert balance.balance_sides(x, x.astype(cp.float32), cp.zeros((3, 1), dtype=cp.int64)) is None
    e = cp.zeros((0, 1), dtype=bool)
    assert balance.balance_fine(cp.zeros((0, 4)), cp.zeros((0, 4)), (1.0,) * 12, e, e.T) is None


@pytest.mark.parametrize("k", [24, 300])
@pytest.mark.parametrize("batch", [(), (2,)])
@pytest.mark.parametrize("ratio", [1.0, 1e-3])
def test_balance_stage_is_the_generic_stage(k, batch, ratio):
    """``balance_stage`` (bf16 sides written by the sides' pass, one pass over the GEMMs' sums):
    the generic ``parts.balanced``'s decision and certificate bound bit for bit."""
    ar, ai, br, bi = _operands(batch, k, ratio, seed=k + 7 * len(batch))
    ea, eb = parts._line_exponents(cxp, ar, ai, br, bi)
    st = stages(cupy_backend)

    def lower(x, y):
        return certificate.magnitude_lower(cxp, st, x, y)

    def signed(x, y):
        return certificate.signed_estimate(cxp, st, x, y)

    for slack in (1.5, 4.0, 1e6):
        form = parts.PartForm(slack, True, "")
        want = parts.balanced(cxp, lower, signed, ar, ai, br, bi, form)
        got = balance.balance_stage(ar, ai, br, bi, ea, eb, parts.balance_terms(k, slack))
        assert got is not None and got[0] == want[0], (slack, want[0])
        assert got[1].dtype == cp.float32 and cp.array_equal(got[1], want[1])
