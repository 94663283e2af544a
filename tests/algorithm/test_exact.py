"""The exact-integer core: limb accumulation, correct rounding, CRT constants, residues.

References are Python ints and fractions.Fraction, independent of the array code.
"""

import math
from fractions import Fraction

import array_api_compat.numpy as xp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulinalg.algorithm import crt, moduli, residues, rounding
from emulinalg.algorithm.moduli import LIMB_BITS, crt_constants

FORMATS = {"float64": (53, -1074, 1024), "float32": (24, -149, 128)}


def round_fraction(fr, dtype):
    """Round-to-nearest-even of an exact rational to the binary format (inf past the range)."""
    mant, emin_sub, emax = FORMATS[dtype]
    if fr == 0:
        return 0.0
    sign, a = (-1 if fr < 0 else 1), abs(fr)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    e += 1 if Fraction(2) ** (e + 1) <= a else 0
    e -= 1 if Fraction(2) ** e > a else 0
    ulp = max(e - mant + 1, emin_sub)
    q = a / Fraction(2) ** ulp
    n, r = divmod(q.numerator, q.denominator)
    r = Fraction(r, q.denominator)
    if r > Fraction(1, 2) or (r == Fraction(1, 2) and n % 2):
        n += 1
    val = Fraction(n) * Fraction(2) ** ulp
    if val >= Fraction(2) ** emax:
        return sign * math.inf
    return sign * float(val)


def load(values, n_limbs):
    """Put Python ints into limbs through add_shifted in 50-bit pieces."""
    limbs = rounding.zeros(xp, (len(values),), n_limbs)
    for s in range(0, n_limbs * LIMB_BITS, 50):
        part = [(abs(v) >> s) & ((1 << 50) - 1) for v in values]
        part = np.array([p if v >= 0 else -p for p, v in zip(part, values)], dtype=np.int64)
        rounding.add_shifted(xp, limbs, part, s)
    return limbs


def value_of(negative, limbs):
    return [
        (-1 if negative[i] else 1)
        * sum(int(limb[i]) << (LIMB_BITS * j) for j, limb in enumerate(limbs))
        for i in range(len(negative))
    ]


big_ints = st.integers(min_value=-(2**180), max_value=2**180)
exponents = st.integers(min_value=-1400, max_value=1100)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(big_ints, exponents), min_size=1, max_size=40),
    st.sampled_from(["float64", "float32"]),
)
def test_round_to_float_is_correctly_rounded(pairs, dtype):
    values = [v for v, _ in pairs]
    exps = np.array([e for _, e in pairs], dtype=np.int64)
    negative, mag = rounding.normalize(xp, load(values, 10))
    assert value_of(negative, mag) == values
    with np.errstate(over="ignore"):
        out = rounding.round_to_float(xp, negative, mag, exps, dtype)
    assert out.dtype == np.dtype(dtype)
    for v, e, o in zip(values, exps, out):
        assert float(o) == round_fraction(Fraction(v) * Fraction(2) ** int(e), dtype), (v, e)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(big_ints, st.integers(min_value=-1300, max_value=1100)), min_size=1,
                max_size=40))
def test_unscale_dd_is_hi_plus_correctly_rounded_remainder(pairs):
    values = [v for v, _ in pairs] + [2**53 + 1, 2**60 + 2**7 + 1, 3, -(2**170) - 1]
    exps = [e for _, e in pairs] + [0, -10, -1076, -100]
    # unscale multiplies by 2**(shift - mu - nu): put the exponent in mu (one column, nu = 0)
    mu = -np.array(exps, dtype=np.int64)
    limbs = [x[:, None] for x in load(values, 10)]
    with np.errstate(over="ignore"):
        hi, lo = rounding.unscale_dd(xp, limbs, mu, np.zeros(1, dtype=np.int64))
        ref_hi = rounding.unscale(xp, limbs, mu, np.zeros(1, dtype=np.int64), "float64")
    assert np.array_equal(hi, ref_hi)  # hi is exactly the float64 result
    for v, e, h, low in zip(values, exps, hi[:, 0], lo[:, 0]):
        exact = Fraction(v) * Fraction(2) ** e
        if math.isinf(h):
            assert low == 0.0
            continue
        assert float(low) == round_fraction(exact - Fraction(float(h)), "float64"), (v, e)


def test_round_to_float_ties_and_boundaries():
    # ties to even at 53 bits, carry into the next binade, smallest subnormal, half of it
    values = [2**53 + 1, 2**53 + 3, 2**54 - 1, 1, 1, 3, -(2**53 + 1)]
    exps = np.array([0, 0, 0, -1074, -1075, -1076, 10], dtype=np.int64)
    negative, mag = rounding.normalize(xp, load(values, 4))
    out = rounding.round_to_float(xp, negative, mag, exps, "float64")
    expect = [
        round_fraction(Fraction(v) * Fraction(2) ** int(e), "float64") for v, e in zip(values, exps)
    ]
    assert out.tolist() == expect
    assert out[3] == 5e-324 and out[4] == 0.0 and out[5] == 5e-324


def test_moduli_pairwise_coprime_and_int8():
    assert moduli.check_pairwise_coprime()
    assert all(m <= 256 for m in moduli.MODULI) and len(moduli.MODULI) == 20


@pytest.mark.parametrize("n", range(2, 21))
def test_crt_constants_exact(n):
    c = crt_constants(n)
    assert math.prod(moduli.MODULI[:n]) == c.P
    for w, m in zip(c.weights, c.moduli):
        for m2 in c.moduli:  # w = 1 mod m, 0 mod every other modulus
            assert w % m2 == (1 if m2 == m else 0)
    assert sum(limb << (LIMB_BITS * i) for i, limb in enumerate(c.P_limbs)) == c.P
    assert 2 ** (2 * c.L) <= (c.P - 1) / 4 * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=2, max_value=20), st.data())
def test_crt_reconstruction_matches_python_ints(n, data):
    """Residues of known integers |Y| <= P/4 go through the same reconstruction as the product."""
    c = crt_constants(n)
    bound = (c.P - 1) // 4
    ys = data.draw(st.lists(st.integers(-bound, bound), min_size=1, max_size=20))
    shape = (len(ys),)
    limbs = [rounding.zeros(xp, shape, c.n_limbs)]
    quotient = [xp.zeros(shape, dtype=xp.float64)]
    for ell, m in enumerate(c.moduli):
        w = np.array([((y + m // 2) % m) - m // 2 for y in ys], dtype=np.float64)  # symmetric
        w = np.where(w > (m - 1) // 2, w - m, w)
        rounding.add_multiple(xp, limbs[0], w.astype(np.int64), c.weight_limbs[ell])
        quotient[0] = quotient[0] + w * c.weight_ratios[ell]
    zero = np.zeros(1, dtype=np.int64)
    (out,) = crt.reconstruct(xp, c, limbs, quotient, zero, zero[:, None][0], "float64")
    assert out.reshape(-1).tolist() == [float(Fraction(y)) for y in ys]


def test_residues_of_large_scaled_integers():
    rng = np.random.default_rng(0)
    X = np.trunc(np.ldexp(rng.random(200) - 0.5, 84))  # up to 2**83, as with 20 moduli
    X[:3] = [0.0, -(2.0**83) + 2.0**40, 2.0**52 + 1]
    parts = residues.split(xp, X)
    for m in moduli.MODULI:
        (r,) = residues.residues(xp, parts, None, m)
        expect = []
        for x in X:
            v = int(x) % m
            expect.append(v - m if v > (m - 1) // 2 else v)
        assert r.tolist() == expect


@settings(max_examples=30, deadline=None)
@given(
    st.integers(min_value=2, max_value=20), st.lists(st.integers(0, 2**40), min_size=1, max_size=30)
)
def test_scheme2_shift_is_exact_floor(n, vs):
    """t = max{t : v 4**t <= (P-1)/4}, decided exactly (the same on every backend)."""
    from emulinalg.algorithm.scaling import half_log_shift

    c = crt_constants(n)
    Q = (c.P - 1) // 4
    t = half_log_shift(xp, c.L, c.Q_down, np.array(vs, dtype=np.float64))
    for v, ti in zip(vs, t.tolist()):
        v = max(v, 1)
        lhs = Fraction(v) * Fraction(4) ** ti
        assert lhs <= Q < lhs * 4, (v, ti)


@pytest.mark.usefixtures("numpy_backend")  # the generic engine's row blocks
@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
def test_row_blocks_reuse_b_residues_and_change_no_bit(dtype, monkeypatch):
    """A product cut into row blocks (B's residue planes made once, ``b_residue_planes``) equals
    the one-block product bit for bit; with 20 moduli (float64) both are the exact product
    correctly rounded."""
    import emulinalg
    from emulinalg import _engine
    from emulinalg.inputs import phi_matrix
    from emulinalg.reference import exact_matmul

    a = phi_matrix((37, 40), 1.0, dtype, seed=3)
    b = phi_matrix((40, 23), 1.0, dtype, seed=4)
    calls = []
    real = residues.b_residue_planes
    monkeypatch.setattr(
        residues, "b_residue_planes", lambda *args: calls.append(1) or real(*args)
    )
    for precision in (None, emulinalg.OzakiII(moduli=20)):
        with emulinalg.config(strategy="eager"):
            whole = emulinalg.matmul(a, b, precision=precision)
            monkeypatch.setattr(_engine, "BLOCK_ENTRIES", 5 * 23)  # rows of 5: 8 blocks
            blocked = emulinalg.matmul(a, b, precision=precision)
            monkeypatch.setattr(_engine, "BLOCK_ENTRIES", 1 << 22)
        assert np.array_equal(whole.view(np.uint8), blocked.view(np.uint8))
    assert len(calls) == 2  # once per blocked product, none for the one-block ones
    if dtype == "float64":  # 20 moduli keep every bit of these 40-term sums at phi = 1
        hi, _ = exact_matmul(a, b)
        assert np.array_equal(blocked, hi)
