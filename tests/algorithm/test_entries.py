"""``products.entries`` (the refit's and the patch's recomputed entries): the same bits as the
entries of the whole Scheme II product at the same shifts, whether it takes one modulus per
pass or several (``work``), real and complex, every output form."""

from __future__ import annotations

import array_api_compat.numpy as xp
import numpy as np
import pytest

from emulinalg.algorithm import products, refit, scaling
from emulinalg.backends import numpy as npb
from emulinalg.inputs import phi_matrix


def _same(x, y):
    return np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))


def _flat(parts):
    out = []
    for p in parts:
        out += list(p) if isinstance(p, tuple) else [p]
    return out


@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("moduli", [8, 15, 20])
def test_entries_are_the_product_entries_in_any_grouping(cplx, out_dtype, moduli):
    m, k, n = 7, 150, 9
    ar, br = phi_matrix((m, k), 2.0, seed=1), phi_matrix((k, n), 2.0, seed=2)
    ai = phi_matrix((m, k), 1.0, seed=3) if cplx else None
    bi = phi_matrix((k, n), 1.0, seed=4) if cplx else None
    pre = scaling.ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
    near = scaling.rounds_to_nearest(moduli, k, "accurate")
    whole = _flat(products.product(xp, npb.int_matmul, ar, ai, br, bi, moduli, "accurate",
                                   out_dtype, pre))  # fmt: skip
    s, t, e, f = pre
    rows, cols = np.repeat(np.arange(m), n), np.tile(np.arange(n), m)

    def lines(x, idx, axis):
        return None if x is None else np.ascontiguousarray(np.take(x, idx, axis=axis))

    args = (lines(ar, rows, 0), lines(ai, rows, 0), lines(br, cols, 1).T, None)
    if cplx:
        args = args[:3] + (lines(bi, cols, 1).T,)
    sub = (s[rows], t[cols], e[rows], f[cols])
    for work in (m * n * k, 3 * m * n * k, products.ENTRY_WORK):  # 1, 3, all moduli per pass
        got = _flat(products.entries(xp, *args, moduli, out_dtype, sub, near, work))
        assert len(got) == len(whole)
        for g, w in zip(got, whole):
            assert _same(g, np.reshape(w, (-1,))), (work, out_dtype)


@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
def test_recomputed_by_a_backends_product_is_the_same(cplx, out_dtype, monkeypatch):
    """``refit.recomputed`` through a backend's Scheme II product (the diagonals of its products
    of blocks of lines; blocks of 5 here, so three blocks and a short one) gives the bits of
    ``products.entries``; a declining product leaves the generic path."""
    K, k = 13, 150
    ar, br = phi_matrix((K, k), 2.0, seed=5), phi_matrix((K, k), 2.0, seed=6)
    ai = phi_matrix((K, k), 1.0, seed=7) if cplx else None
    bi = phi_matrix((K, k), 1.0, seed=8) if cplx else None
    # the lines' prescale, as the refit takes it from the whole product's
    s, t, e, f = scaling.ozaki2_prescale(xp, npb.int_matmul, ar, ai, br.T, None if bi is None
                                         else bi.T, "accurate")  # fmt: skip
    pre = (s, t, e, f)
    calls = []

    def product(a_r, a_i, b_r, b_i, moduli, mode, out, prescale):
        calls.append(a_r.shape)
        return products.product(xp, npb.int_matmul, a_r, a_i, b_r, b_i, moduli, mode, out,
                                prescale)  # fmt: skip

    monkeypatch.setattr(refit, "PRODUCT_BLOCK", 5)
    want = _flat(refit.recomputed(xp, ar, ai, br, bi, pre, "accurate", out_dtype))
    got = _flat(refit.recomputed(xp, ar, ai, br, bi, pre, "accurate", out_dtype, product=product))
    assert calls == [(5, k), (5, k), (3, k)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == (K,) and _same(g, w), out_dtype
    declined = _flat(refit.recomputed(xp, ar, ai, br, bi, pre, "accurate", out_dtype,
                                      product=lambda *a: None))  # fmt: skip
    for g, w in zip(declined, want):
        assert _same(g, w)


@pytest.mark.parametrize("cplx", [False, True])
def test_refit_takes_the_same_lines_from_any_layout_of_b(cplx):
    """refit.refit recomputes the same entries with the same bits from a C-ordered, an
    F-ordered and a batched B (its lines are taken by different paths), equal to the whole
    product's entries at MAX_MODULI."""
    m, k, n = 23, 70, 19
    a = phi_matrix((m, k), 1.0, "complex128" if cplx else "float64", seed=81)
    b = phi_matrix((k, n), 1.0, "complex128" if cplx else "float64", seed=82)
    parts = lambda x: (np.real(x), np.imag(x)) if cplx else (x, None)  # noqa: E731
    ar, ai = parts(a)
    pre = scaling.ozaki2_prescale(xp, npb.int_matmul, ar, ai, *parts(b), "accurate")
    zero = tuple(np.zeros((m, n)) for _ in range(2 if cplx else 1))
    idx = np.array([0, 5, m * n - 1, 7 * n + 3])

    def run(bb, aa=(ar, ai), pp=pre, zz=zero):
        br, bi = bb
        got, count = refit.refit(xp, *aa[:1], aa[1], br, bi, zz, pp, "accurate", "float64",
                                 extra=idx, cancelled=False)  # fmt: skip
        assert count == idx.size
        return [p.reshape(-1)[idx] for p in got]

    want = run(parts(b))
    fortran = tuple(None if x is None else np.asfortranarray(x) for x in parts(b))
    assert all(_same(x, y) for x, y in zip(run(fortran), want))
    batched = tuple(None if x is None else x[None] for x in parts(b))
    got_b = run(batched, (ar[None], None if ai is None else ai[None]),
                tuple(v[None] for v in pre), tuple(z[None] for z in zero))  # fmt: skip
    assert all(_same(x, y) for x, y in zip(got_b, want))
    whole = products.product(xp, npb.int_matmul, ar, ai, *parts(b), 20, "accurate", "float64",
                             pre)  # fmt: skip
    assert all(_same(w.reshape(-1)[idx], y) for w, y in zip(whole, want))
