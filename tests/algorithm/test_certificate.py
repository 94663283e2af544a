"""The certificate's bounds of |A||B| from the accurate-mode bound GEMM, against exact references:
``scaling.bound_upper`` (the prescale's upper bound) with Python Fractions, and
``certificate.bound_lower`` (the certificate's lower bound) with python-flint balls (the complex
modulus is irrational)."""

from __future__ import annotations

from fractions import Fraction

import array_api_compat.numpy as xp
import flint
import numpy as np
import pytest

import emulinalg
from emulinalg.algorithm import certificate, scaling
from emulinalg.backends import numpy as npb
from emulinalg.reference import exact_matmul


def _operands(rng, m, k, n, kind):
    """Real or complex operands with zeros, subnormals, entries on the bound grid, lines spanning
    2**+-40, and (kind) complex entries with one part zero."""

    def real(shape):
        x = rng.standard_normal(shape) * np.exp2(rng.integers(-40, 40, shape))
        x[rng.random(shape) < 0.15] = 0.0
        x.flat[0] = 5e-324
        return x

    ar, br = real((m, k)), real((k, n))
    ar[1] = 0.0  # a zero row
    br[:, 2] = 0.0  # a zero column
    ar[0, :3] = [1.0, 0.5, 2.0**-7]  # on the grid of floor(2**(s+1) |x|)
    if kind == "real":
        return ar, None, br, None
    ai, bi = real((m, k)), real((k, n))
    if kind == "one-part":  # real or imaginary data held as complex: no mixed entries
        ai[:] = 0.0
        ai[3] = ar[3]
        ar[3] = 0.0
        bi[:] = 0.0
    elif kind == "some-mixed":  # row 4 only has entries with both parts nonzero
        ai[:] = 0.0
        ai[4] = real((k,))
        ai[4][ar[4] == 0] = 0.0
        bi[:] = 0.0
    return ar, ai, br, bi


def _frac(x):
    return Fraction(float(x))


@pytest.mark.parametrize("kind", ["real", "complex", "one-part", "some-mixed"])
@pytest.mark.parametrize("seed", [0, 1])
def test_bound_gemm_bounds_are_exact_bounds(kind, seed):
    rng = np.random.default_rng(seed)
    m, k, n = 6, 23, 5
    ar, ai, br, bi = _operands(rng, m, k, n, kind)
    cplx = ai is not None
    pre = scaling.ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
    s, t, e, f = pre
    (nar, nai, nbr, nbi), _, _ = certificate.normalized(xp, ar, ai, br, bi)
    lam = certificate.bound_lower(xp, pre.lower, cplx, pre.mixed)
    loose = certificate.bound_lower(xp, pre.lower, cplx)  # without the mixed counts
    for i in range(m):
        for j in range(n):
            # upper: 2**(s_i + t_j) sum (|Re a| + |Im a|)(|Re b| + |Im b|) <= U / 4 <= e_i, f_j
            up = Fraction(0)
            for h in range(k):
                pa = abs(_frac(ar[i, h])) + (abs(_frac(ai[i, h])) if cplx else 0)
                pb = abs(_frac(br[h, j])) + (abs(_frac(bi[h, j])) if cplx else 0)
                up += pa * pb
            up *= Fraction(2) ** int(s[i] + t[j])
            assert up <= _frac(e[i]) and up <= _frac(f[j])
            # lower: F 2**-10/-11/-12 <= sum |a| |b| on the line-normalized operands
            exact = flint.arb(0)
            for h in range(k):
                a = flint.arb(float(nar[i, h])) ** 2
                b = flint.arb(float(nbr[h, j])) ** 2
                if cplx:
                    a += flint.arb(float(nai[i, h])) ** 2
                    b += flint.arb(float(nbi[h, j])) ** 2
                exact += a.sqrt() * b.sqrt()
            assert flint.arb(float(lam[i, j])) <= exact.lower() or lam[i, j] == 0
            assert loose[i, j] <= lam[i, j]
    if kind == "one-part":  # no entry has both parts nonzero: the factor-2 better bound
        assert np.array_equal(lam, 2.0 * loose)
    if kind == "some-mixed":
        assert np.array_equal(lam[4], loose[4]) and np.array_equal(lam[:4], 2.0 * loose[:4])


@pytest.mark.parametrize("kind", ["complex", "one-part", "some-mixed", "balanced"])
@pytest.mark.parametrize("seed", [0, 1])
def test_parts_lower_bounds_the_moduli_product(kind, seed):
    """``certificate.parts_lower`` of the part check's lower bound of T (the engine's, through
    ``_helpers.parts_lower_of``) is below the exact line-normalized sum of |a||b| (python-flint
    balls), and equals it within the float32 sums' factor where every entry has |Re| = |Im|
    (the case where T / 2 is |A||B|); above the bound GEMM's on most entries of ordinary inputs."""
    from _helpers import parts_lower_of

    rng = np.random.default_rng(seed)
    m, k, n = 6, 23, 5
    if kind == "balanced":  # |Re| = |Im|: |a| |b| = (|Re a| + |Im a|)(|Re b| + |Im b|) / 2
        ar = rng.integers(-8, 9, (m, k)) * np.exp2(rng.integers(-6, 6, (m, k)))
        br = rng.integers(-8, 9, (k, n)) * np.exp2(rng.integers(-6, 6, (k, n)))
        ai, bi = ar * rng.choice([-1.0, 1.0], (m, k)), br * rng.choice([-1.0, 1.0], (k, n))
    else:
        ar, ai, br, bi = _operands(rng, m, k, n, kind)
    (nar, nai, nbr, nbi), _, _ = certificate.normalized(xp, ar, ai, br, bi)
    g = certificate.sums_lower(xp, parts_lower_of(ar, ai, br, bi), k)
    factor = 1 - 3 * (k + 2) * 2.0**-22  # the sums, the bound GEMM and sums_lower each
    for i in range(m):
        for j in range(n):
            exact = flint.arb(0)
            for h in range(k):
                a = flint.arb(float(nar[i, h])) ** 2 + flint.arb(float(nai[i, h])) ** 2
                b = flint.arb(float(nbr[h, j])) ** 2 + flint.arb(float(nbi[h, j])) ** 2
                exact += a.sqrt() * b.sqrt()
            assert flint.arb(float(g[i, j])) <= exact.lower() or g[i, j] == 0
            if kind == "balanced":
                assert flint.arb(float(g[i, j])) >= exact.upper() * factor
    if kind == "complex":  # ordinary complex entries: mostly above the bound GEMM's
        pre = scaling.ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
        lam = certificate.bound_lower(xp, pre.lower, True, pre.mixed)
        assert np.mean(g > lam) > 0.5


def test_real_data_held_as_complex_takes_no_extra_modulus(monkeypatch):
    """A real product and the same product held as complex128 with zero imaginary parts: the
    certificate's bounds are as tight for the complex operands (the per-line count of entries
    with both parts nonzero), so the float64 level takes the real product's count for both
    guarantees; the result's real part is within the level's bound of the exact product (the
    complex path scales differently, so not bit for bit) and its imaginary part is zero. The
    complex product with the moduli and 3M (the Gaussian moduli hold fewer bits per count:
    tests/algorithm/test_gaussian_moduli.py)."""
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    for backend in (npb, amx):  # numpy arrays' backend here, either
        monkeypatch.setattr(backend, "gaussian_moduli", False)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((200, 200)), rng.standard_normal((200, 200))
    ref = exact_matmul(a, b)
    lam = np.abs(a) @ np.abs(b)
    for precision in ("float64", 53):
        with emulinalg.config(strategy="eager"):
            real = emulinalg.matmul(a, b, precision=precision)
            real_scheme = emulinalg.last_plan().scheme
            c = emulinalg.matmul(a + 0j, b + 0j, precision=precision)
            assert emulinalg.last_plan().scheme == real_scheme
        for got in (real, c.real):
            err = np.abs((got - ref[0]) - ref[1])
            # the deterministic bound of either guarantee: k 2**-53 |A||B|, plus the rounding
            assert np.all(err <= 200 * 2.0**-53 * lam + 2.0**-53 * np.abs(ref[0]))
        assert not np.any(c.imag)
