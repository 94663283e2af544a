"""The Gaussian moduli of complex Scheme II products (``moduli.GAUSSIAN_MODULI``): their
constants, the two residue planes u = re + iota im, v = re - iota im, the parts from the two
products U, V, and the level's products on the numpy backend (two INT8 GEMMs per modulus),
against Python's integers and the exact product."""

from __future__ import annotations

import math

import array_api_compat.numpy as xp
import numpy as np
import pytest

import emulinalg
from emulinalg import OzakiII
from emulinalg._cost import _parse_scheme
from emulinalg.algorithm import certificate, products, residues, scaling
from emulinalg.algorithm.moduli import (
    GAUSSIAN_MODULI,
    MAX_MODULI,
    MIN_MODULI,
    MODULI,
    check_pairwise_coprime,
    crt_constants,
    sqrt_minus_one,
)
from emulinalg.backends import numpy as npb
from emulinalg.harness.bench import parse_method
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy, exact_matmul


def _prime_factors(m):
    out, p = [], 2
    while p * p <= m:
        while m % p == 0:
            out.append(p)
            m //= p
        p += 1
    return out + ([m] if m > 1 else [])


def _symmetric(x, m):
    r = x % m
    return r - m if r > (m - 1) // 2 else r


def test_gaussian_moduli_take_the_complex_product_apart():
    """Odd, pairwise coprime, every prime factor 1 mod 4 (so iota exists), residues within
    INT8, decreasing, each the largest such number coprime to those before (the largest
    product for every count); iota**2 = -1 and the two inverses hold modulo each."""
    g = GAUSSIAN_MODULI
    assert len(g) == MAX_MODULI and check_pairwise_coprime(g) and list(g) == sorted(g)[::-1]
    assert all(m % 2 == 1 and m <= 255 for m in g)
    assert all(p % 4 == 1 for m in g for p in _prime_factors(m))
    ok = [m for m in range(255, 2, -2) if all(p % 4 == 1 for p in _prime_factors(m))]
    greedy = []
    for m in ok:
        if all(math.gcd(m, x) == 1 for x in greedy):
            greedy.append(m)
    assert tuple(greedy[:MAX_MODULI]) == g
    c = crt_constants(MAX_MODULI, gaussian=True)
    assert c.gaussian and not crt_constants(MAX_MODULI).gaussian and c.moduli == g
    for m, i, h, hi in zip(c.moduli, c.iota, c.inv2, c.inv2iota):
        assert (i * i + 1) % m == 0 and sqrt_minus_one(m) == i
        assert (2 * h) % m == 1 and (2 * i * hi) % m == 1
    assert math.prod(g) == c.P and sum(c.weights) % c.P == 1
    with pytest.raises(ValueError, match="not a square"):
        sqrt_minus_one(MODULI[1])  # 255 = 3 5 17


def test_gaussian_counts_hold_about_one_modulus_fewer_bits():
    """n Gaussian moduli hold the bits of about n - 1 others (the price of the smaller moduli),
    and the certificate's thresholds are theirs."""
    for n in range(MIN_MODULI + 2, MAX_MODULI + 1):
        lg, ls = crt_constants(n, True).log2_P, crt_constants(n).log2_P
        assert crt_constants(n - 2).log2_P < lg < ls
    assert certificate.GAUSSIAN_THRESHOLDS[14] == 2.0 ** -crt_constants(16, True).L
    cc = certificate.cert_constants(1024, complex_=True, gaussian=True)
    assert cc.gaussian and cc.thresholds[14] == certificate.GAUSSIAN_THRESHOLDS[14]
    assert not certificate.cert_constants(1024, complex_=False, gaussian=True).gaussian


def test_gaussian_residue_planes_are_u_and_v():
    """``residues`` with iota: (re + iota im, re - iota im) mod m, symmetric, for scaled
    integers up to 2**82 of either sign (Python's integers as the reference)."""
    rng = np.random.default_rng(3)
    mant = rng.integers(-(2**52), 2**52, size=(2, 300)).astype(np.float64)
    X = np.ldexp(mant, rng.integers(0, 30, size=(2, 300)))
    X[:, :4] = [[0.0, -1.0, 2.0**82, -(2.0**81) - 2.0**40], [5.0, 0.0, -(2.0**82), 1.0]]
    Xr, Xi = residues.split(xp, X[0]), residues.split(xp, X[1])
    c = crt_constants(MAX_MODULI, True)
    for m, i in zip(c.moduli, c.iota):
        u, v = residues.residues(xp, Xr, Xi, m, i)
        for t in range(X.shape[1]):
            a, b = int(X[0, t]), int(X[1, t])
            assert u[t] == _symmetric(a + i * b, m) and v[t] == _symmetric(a - i * b, m)
    mv = residues.moduli_axis(xp, c.moduli, 1)
    iv = residues.moduli_axis(xp, c.iota, 1)
    u, v = residues.residues(xp, Xr, Xi, mv, iv)  # several moduli at once: the same
    for ell, (m, i) in enumerate(zip(c.moduli, c.iota)):
        assert np.array_equal(u[ell], residues.residues(xp, Xr, Xi, m, i)[0])
        assert np.array_equal(v[ell], residues.residues(xp, Xr, Xi, m, i)[1])


def _integer_operands(rng, shape_a, shape_b, top):
    return [rng.integers(-top, top, size=s).astype(np.float64)
            for s in (shape_a, shape_a, shape_b, shape_b)]  # fmt: skip


@pytest.mark.parametrize("n", [4, 9, 16, 20])
@pytest.mark.parametrize("out_dtype", ["float64", "dd"])
def test_gaussian_product_of_integers_is_exact(n, out_dtype):
    """Integer operands whose product the scaling keeps whole: the two-GEMM product is the
    exact complex product (numpy's integer matmul), batched, for every count."""
    rng = np.random.default_rng(n)
    top = 2 ** (3 * n // 2)  # P holds the products with room to spare at every count
    ar, ai, br, bi = _integer_operands(rng, (2, 5, 23), (2, 23, 4), top)
    ar_, ai_, br_, bi_ = (x.astype(np.int64).astype(object) for x in (ar, ai, br, bi))
    wants = (np.matmul(ar_, br_) - np.matmul(ai_, bi_), np.matmul(ar_, bi_) + np.matmul(ai_, br_))
    got = products.product(xp, npb.int_matmul, ar, ai, br, bi, n, "accurate", out_dtype,
                           gaussian=True)  # fmt: skip
    for part, want in zip(got, wants):
        if out_dtype == "dd":  # hi + lo: the integer itself
            exact = np.vectorize(lambda h, lo: int(h) + int(lo), otypes=[object])(*part)
            assert np.array_equal(exact, want), n
        else:  # the integer rounded once (Python's int -> float rounds correctly)
            assert np.array_equal(part, np.vectorize(float)(want).astype(np.float64)), n


@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
def test_gaussian_entries_are_the_product_entries(out_dtype):
    """``products.entries`` (the refit's recomputation) with the Gaussian moduli: the bits of
    the whole product's entries at the same shifts, one modulus per pass and all at once."""
    m, k, n, count = 6, 130, 7, 16
    ar, br = phi_matrix((m, k), 2.0, seed=1), phi_matrix((k, n), 2.0, seed=2)
    ai, bi = phi_matrix((m, k), 1.0, seed=3), phi_matrix((k, n), 1.0, seed=4)
    pre = scaling.ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
    near = scaling.rounds_to_nearest(count, k, "accurate", True)
    whole = products.product(xp, npb.int_matmul, ar, ai, br, bi, count, "accurate", out_dtype,
                             pre, gaussian=True)  # fmt: skip
    s, t, e, f = pre
    rows, cols = np.repeat(np.arange(m), n), np.tile(np.arange(n), m)
    args = (ar[rows], ai[rows], np.ascontiguousarray(br[:, cols].T),
            np.ascontiguousarray(bi[:, cols].T))  # fmt: skip
    sub = (s[rows], t[cols], e[rows], f[cols])
    for work in (m * n * k, products.ENTRY_WORK):
        got = products.entries(xp, *args, count, out_dtype, sub, near, work, gaussian=True)
        for g, w in zip(got, whole):
            for gg, ww in zip(g if out_dtype == "dd" else (g,), w if out_dtype == "dd" else (w,)):
                assert np.array_equal(gg, np.reshape(ww, (-1,))), work


def test_complex_level_on_numpy_takes_two_gemms_per_modulus(numpy_backend):
    """The float64 level of a complex128 product on the numpy backend (``gaussian_moduli``):
    the Gaussian moduli, 2 n + 1 GEMMs, each part's bits at least native's (numpy.matmul on
    the same inputs) against the exact product; the same inputs' real product keeps the
    moduli."""
    N = 256
    a = phi_matrix((N, N), 1.0, "complex128", seed=1)
    b = phi_matrix((N, N), 1.0, "complex128", seed=2)
    A, B = a[:8], b[:, :64]
    ref = exact_matmul(A, B)
    with emulinalg.config(strategy="eager"):
        c, plan = emulinalg.matmul(a, b, explain=True)
        _, plan_r = emulinalg.matmul(a.real, b.real, explain=True)
    assert plan.scheme.endswith("gaussian)") and "gaussian" not in plan_r.scheme
    count = int(plan.scheme.split("=")[1].split(",")[0])
    assert plan.gemms == 2 * count + 1
    got, nat = accuracy(c[:8, :64], A, B, ref), accuracy((a @ b)[:8, :64], A, B, ref)
    for key in ("bits_cw_re", "bits_cw_im", "bits_cw"):
        assert got[key] >= nat[key], (key, got[key], nat[key])


def test_explicit_gaussian_scheme(numpy_backend):
    """``OzakiII(gaussian=True)`` asked for: complex products take it (the plan says so),
    real ones the moduli; it validates its argument and its text parses back."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((9, 40)) + 1j * rng.standard_normal((9, 40))
    b = rng.standard_normal((40, 5)) + 1j * rng.standard_normal((40, 5))
    c, plan = emulinalg.matmul(a, b, precision=OzakiII(16, gaussian=True), explain=True)
    assert plan.scheme == "OzakiII(moduli=16, mode=accurate, gaussian)" and plan.gemms == 33
    want = products.product(xp, npb.int_matmul, a.real, a.imag, b.real, b.imag, 16, "accurate",
                            "float64", gaussian=True)  # fmt: skip
    assert np.array_equal(c.real, want[0]) and np.array_equal(c.imag, want[1])
    _, plan = emulinalg.matmul(a.real, b.real, precision=OzakiII(16, gaussian=True), explain=True)
    assert plan.scheme == "OzakiII(moduli=16, mode=accurate)" and plan.gemms == 17
    with pytest.raises(TypeError, match="gaussian"):
        OzakiII(16, gaussian=1)
    assert OzakiII(16, gaussian=np.True_) == OzakiII(16, gaussian=True)
    assert _parse_scheme(str(OzakiII(12, "fast", True))) == OzakiII(12, "fast", True)
    for text in ("OzakiII(16, gaussian)", "OzakiII(moduli=16, gaussian=true)"):  # the bench's
        assert parse_method(text).precision == OzakiII(16, gaussian=True)


def test_cost_and_performant_guess_count_the_gaussian_moduli(monkeypatch):
    """The cost model charges the Gaussian moduli two GEMMs each (3M: three), and the
    performant verdict's guess for a complex product on a backend with ``gaussian_moduli`` is
    the Gaussian count holding the bits of the moduli's guess."""
    from emulinalg import _cost, _planner
    from emulinalg._precision import parse

    model = _cost.CostModel(native_flops={"complex128": 1e12}, int_gemm_ops=8e12,
                            entry_seconds=0.0)  # fmt: skip
    N = 4096
    t3m = model.emulated_seconds(OzakiII(16), "complex128", N, N, N)
    tg = model.emulated_seconds(OzakiII(16, gaussian=True), "complex128", N, N, N)
    assert tg / t3m == pytest.approx((2 * 16 + 1) / (3 * 16 + 1))
    monkeypatch.setattr(_cost, "get_cost_model", lambda name, flops=None: model)
    args = (npb, "numpy", parse("float64"), "ozaki2", "complex128", N, N, N)

    def guessed(gaussian):
        monkeypatch.setattr(npb, "gaussian_moduli", gaussian)
        why = _planner.likely_faster(*args)[1]
        assert ("gaussian)" in why) == gaussian, why
        return int(why.split("OzakiII(moduli=")[1].split(",")[0])

    n, g = guessed(False), guessed(True)  # each the fewest of its family and one of margin
    assert crt_constants(g - 1, True).L >= crt_constants(n - 1).L > crt_constants(g - 2, True).L


def test_entries_beyond_the_gaussian_moduli_take_the_moduli(numpy_backend):
    """Entries whose exponents spread over 2**+-20 within rows and columns: the Gaussian
    moduli's 20 (70 bits of L) leave some beyond every count, the moduli's (76.7) do not, so
    the level certifies with the moduli (3M) instead of taking those entries natively; its
    bits reach native's per part."""
    rng = np.random.default_rng(1)
    m, k, n, s = 96, 128, 96, 20

    def spread(shape):
        x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        return x * 2.0 ** rng.uniform(-s, s, shape)

    a, b = spread((m, k)), spread((k, n))
    with emulinalg.config(strategy="eager"):
        c, plan = emulinalg.matmul(a, b, explain=True)
    assert plan.native_entries == 0 and "gaussian" not in plan.scheme, str(plan)
    ref = exact_matmul(a, b)
    got, nat = accuracy(c, a, b, ref), accuracy(a @ b, a, b, ref)
    for key in ("bits_maxrel", "bits_cw", "bits_cw_re", "bits_cw_im"):
        assert got[key] >= nat[key], (key, got[key], nat[key])
