"""The amx backend's complex part-check balance kernels (``amx.balance_sides``,
``amx.balance_fine``: one OpenMP pass each in ``emulinalg._amx``) against the generic code of
``emulinalg.algorithm.parts`` (the reference they must reproduce bit for bit)."""

from __future__ import annotations

import array_api_compat.numpy as xp
import numpy as np
import pytest
from _amx_helpers import _amx

from emulinalg.algorithm import parts
from emulinalg.algorithm.scaling import max_exponent
from emulinalg.backends import amx

pytestmark = pytest.mark.skipif(
    _amx is None or not hasattr(_amx, "balance_sides"), reason="emulinalg._amx not built"
)


def _parts(rng, m, k):
    re = rng.standard_normal((m, k)) * np.exp2(rng.integers(-40, 40, (m, 1)))
    im = rng.standard_normal((m, k)) * np.exp2(rng.integers(-40, 40, (m, 1)))
    re[1] = 0.0
    im[1] = 0.0  # an all-zero line: exponent 0
    re[2, :5] = [5e-324, -5e-324, 2.2250738585072014e-308, 0.0, -0.0]  # subnormal lines
    im[2] = 5e-324 * rng.integers(-8, 8, k)
    re[3] *= 2.0**900
    im[3] = 1.5 * 2.0**1000  # near the top of the range
    return re, im


@pytest.mark.parametrize("order", ["C", "F", "strided"])
@pytest.mark.parametrize("rows", [True, False])
def test_balance_sides_equal_the_generic_code(rng, order, rows):
    re, im = _parts(rng, 7, 150)
    if not rows:  # B: lines are columns
        re, im = re.T.copy(), im.T.copy()
    if order == "F":
        re, im = np.asfortranarray(re), np.asfortranarray(im)
    elif order == "strided":
        re, im = np.repeat(re, 2, axis=1)[:, ::2], np.repeat(im, 2, axis=1)[:, ::2]
    axis = -1 if rows else -2
    e = np.expand_dims(max_exponent(xp, re, im, axis=axis), axis=axis)
    got = amx.balance_sides(re, im, e)
    want = parts.balance_sides(xp, re, im, e)
    assert got is not None
    for g, w in zip(got, want):
        assert g.dtype == np.float64 and g.shape == re.shape
        assert np.array_equal(g, w)  # bit for bit, signed zeros included
        assert np.array_equal(np.signbit(g), np.signbit(w))


def test_balance_sides_declines_what_it_does_not_take(rng):
    re, im = _parts(rng, 4, 8)
    e = np.zeros((4, 1), np.int64)
    assert amx.balance_sides(re[None], im[None], e[None]) is None  # batches
    f32 = rng.standard_normal((4, 8)).astype(np.float32)
    assert amx.balance_sides(f32, f32, e) is None
    assert amx.balance_sides(re, im, np.zeros((4, 8), np.int64)) is None  # not per line


@pytest.mark.parametrize("k", [64, 4096])
@pytest.mark.parametrize("slack", [2.0**4, 2.0**10])
def test_balance_fine_equals_the_generic_code(rng, k, slack):
    m, n = 40, 30
    t_lo = rng.uniform(0.0, 4.0, (m, n)) * np.exp2(rng.integers(-20, 4, (m, n)))
    s = t_lo * rng.uniform(-1.0, 1.0, (m, n))
    terms = parts.balance_terms(k, slack)
    rows = np.zeros((m, 1), bool)
    cols = np.zeros((1, n), bool)
    for case in range(6):
        ss = s.copy()
        if case == 1:
            ss *= 1e-3  # balanced parts: fine everywhere
        if case == 2:
            ss = np.sign(s) * t_lo  # one part empty: fails
        if case in (3, 4, 5):
            ss = s * 1e-3
            ss[5, 6] = t_lo[5, 6]  # a single failing entry ...
        r, c = rows.copy(), cols.copy()
        if case == 4:
            r[5] = True  # ... in an empty row
        if case == 5:
            c[0, 6] = True  # ... in an empty column
        want = parts.balance_fine(xp, t_lo, ss, terms, r, c)
        assert amx.balance_fine(t_lo, ss, terms, r, c) is want
    assert parts.balance_fine(xp, t_lo, s * 1e-3, terms, rows, cols)  # the cases decide both ways
    assert not parts.balance_fine(xp, t_lo, np.sign(s) * t_lo, terms, rows, cols)


def test_balance_hooks_decide_a_complex_product_as_the_numpy_backend(rng, monkeypatch):
    """The part check with the hooks gives the same verdict as without them (numpy backend), on
    balanced parts and on a product whose imaginary part is tiny."""
    from emulinalg._stages import stages
    from emulinalg.algorithm.certificate import magnitude_lower, signed_estimate
    from emulinalg.backends import numpy as npb

    st = stages(npb)
    form = parts.PartForm(slack=2.0**6, native=True, route="test")
    for scale in (1.0, 1e-13):
        ar, br = rng.standard_normal((48, 96)), rng.standard_normal((96, 40))
        ai, bi = rng.standard_normal((48, 96)) * scale, rng.standard_normal((96, 40))

        def lower(x, y):
            return magnitude_lower(xp, st, x, y)

        def signed(x, y):
            return signed_estimate(xp, st, x, y)

        calls = []

        def spy(f, calls=calls):
            return lambda *a: calls.append(f.__name__) or f(*a)

        hooks = (spy(amx.balance_sides), spy(amx.balance_fine), None)
        got = parts.part_check(xp, lower, signed, st.int_matmul, ar, ai, br, bi, form,
                               hooks=hooks)  # fmt: skip
        want = parts.part_check(xp, lower, signed, st.int_matmul, ar, ai, br, bi, form)
        assert got._replace(lower=None) == want._replace(lower=None)
        assert np.array_equal(got.lower, want.lower)  # T's bound, which the certificate takes
        assert calls.count("balance_sides") == 2 and calls.count("balance_fine") == 1


@pytest.mark.parametrize("order", ["C", "F", "strided"])
@pytest.mark.parametrize("cplx", [False, True])
def test_line_scan_exponents_equal_max_exponent(rng, order, cplx):
    """``amx.line_scan``: the NaN/Inf verdict and floor(log2 max(|re|, |im|)) per row of A and
    column of B as ``scaling.max_exponent`` (INT32_MIN for a zero line; a line holding NaN or
    Inf reads 1024)."""
    a, ai = _parts(rng, 9, 70)
    b, bi = (x.T.copy() for x in _parts(rng, 11, 70))
    if order == "F":
        a, ai, b, bi = (np.asfortranarray(x) for x in (a, ai, b, bi))
    elif order == "strided":
        a, ai, b, bi = (np.repeat(x, 2, axis=1)[:, ::2] for x in (a, ai, b, bi))
    if not cplx:
        ai = bi = None
    finite, (ea, eb) = amx.line_scan(a, ai, b, bi)
    assert finite and ea.shape == (1, 9) and eb.shape == (1, 11) and ea.dtype == np.int32
    for got, x, y, axis in ((ea, a, ai, -1), (eb, b, bi, -2)):
        want = max_exponent(xp, x, y, axis=axis)
        zero = np.all(x == 0, axis=axis) & (True if y is None else np.all(y == 0, axis=axis))
        assert np.array_equal(got[0][~zero], want[~zero])
        assert np.all(got[0][zero] == -(2**31))
    for bad in (np.inf, -np.inf, np.nan):
        a2 = a.copy()
        a2[4, 6] = bad
        finite, (ea, _) = amx.line_scan(a2, ai, b, bi)
        assert not finite and ea[0, 4] == 1024 and ea[0, 3] != 1024
    assert amx.line_scan(a[None], None, b[None], None) is None  # batches: the engine's check
