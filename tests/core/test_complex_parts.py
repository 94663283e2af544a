"""Each part of a complex product keeps its own accuracy (issue #26, class 1).

A native complex GEMM computes the real and the imaginary part of every entry to an accuracy of
that part's own sums (|Re A||Re B| + |Im A||Im B| and |Re A||Im B| + |Im A||Re B|). The
emulation scales and certifies the complex magnitudes, so where one part is much smaller than
the other (here |Im| = 1e-4 .. 1e-20 |Re|, in both operands or in one) the part check
(``algorithm.parts``) sends the product to the split route: one real product of the stacked
parts, combined in double-double.

Against the exact product (python-flint, ``emulinalg.reference``) and numpy's native product on
the same inputs, per part (``bits_maxrel_re`` ... ``bits_cw_im``):

* the level (``precision=None``, complex128 and complex64) keeps native's bits per part, less
  ``MARGIN``, for k in {1, 7, 64, 300}, matmul and vecdot, on every route (the fixed
  configuration of k = 1, the strict form of small k, the native form, a product refitting
  every entry);
* the plan says so where the product is split, and ordinary complex inputs (parts of similar
  size, purely real or purely imaginary operands stored as complex) keep the complex route;
* Scheme I and levels above the dtype's (``precision=80``) are split too, and never worse per
  part than the dtype's own level;
* the part check's bounds hold (``parts.stage_sums``, ``exact_zeros``, ``with_kappa``);
* dask arrays take the same route and give the in-core bits.

``MARGIN``: the level promises an error whose standard deviation is at most the native GEMM's
(docs/precision.md); the maxima over an output compared here are single realizations, which
scatter by a fraction of a bit between the two products (the split route's measured margins
are 0-11 bits per part, docs/precision.md; 0 where both are correctly rounded, at k = 1), so a
test allows half a bit. On main the small parts lose up to 55 bits against native.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import array_api_compat.numpy as xp
import numpy as np
import pytest
from _helpers import graded_case

import emulinalg
from emulinalg import _planner
from emulinalg._precision import level_for_dtype
from emulinalg.algorithm import certificate, parts
from emulinalg.backends import numpy as npb
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy, exact_matmul

MARGIN = 0.5
PARTS = ("bits_maxrel_re", "bits_cw_re", "bits_maxrel_im", "bits_cw_im")
RATIOS = [1e-4, 1e-8, 1e-12, 1e-16, 1e-20]
# (m, k, n): k = 1 (the fixed configuration), 7 (strict form), 64 and 300 (native form; the
# 64 x 300 x 64 product does not refit every entry, 24 x 300 x 24 does)
SHAPES = {1: (48, 1, 40), 7: (48, 7, 40), 64: (160, 64, 160), 300: (64, 300, 64)}


@pytest.fixture(autouse=True)
def _numpy_backend(monkeypatch):
    """The numpy backend (OpenBLAS's native product) on every CPU."""
    monkeypatch.setenv("EMULINALG_AMX", "0")


def small_part(shape, dtype, ratio, seed, which="both"):
    """``x + 1j ratio y`` for φ-matrices x, y (φ = 0.5); ``which="a"``: B real (stored complex)."""
    m, k, n = shape

    def op(sh, s):
        re = phi_matrix(sh, 0.5, "float64", seed=s)
        return (re + 1j * ratio * phi_matrix(sh, 0.5, "float64", seed=s + 1)).astype(dtype)

    a, b = op((m, k), seed), op((k, n), seed + 7)
    if which == "a":
        b = b.real.astype(dtype)
    return a, b


@functools.cache
def _case(shape, dtype, ratio, which="both"):
    a, b = small_part(shape, dtype, ratio, seed=int(-np.log10(ratio)) + 31 * shape[1], which=which)
    return graded_case(a, b, _bits)


def _bits(acc):
    assert acc["nonfinite_mismatch"] == 0
    return tuple(acc[key] for key in PARTS)


def _level(a, b, precision=None, **cfg):
    with emulinalg.config(strategy="eager", **cfg):
        c = emulinalg.matmul(a, b, precision=precision)
    return c, emulinalg.last_plan()


def _split(plan):
    return any(note.startswith("complex parts: split") for note in plan.notes)


def _assert_keeps(got, want, info, margin=MARGIN):
    for name, g, w in zip(PARTS, got, want):
        assert g >= w - margin, f"{name}: {g:.2f} < {w:.2f} - {margin}\n{info}"


@pytest.mark.parametrize("which", ["both", "a"])
@pytest.mark.parametrize("ratio", RATIOS)
@pytest.mark.parametrize("k", sorted(SHAPES))
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_small_part_keeps_native_bits(dtype, k, ratio, which):
    a, b, ref, native = _case(SHAPES[k], dtype, ratio, which)
    c, plan = _level(a, b)
    got = _bits(accuracy(c, a, b, ref))
    _assert_keeps(
        got, native, f"{dtype} k={k} ratio={ratio} {which}: {got} native {native}\n{plan}"
    )


@pytest.mark.parametrize("ratio", [1e-8, 1e-16])
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_plan_says_the_product_is_split(dtype, ratio):
    a, b, _, _ = _case(SHAPES[300], dtype, ratio)
    _, plan = _level(a, b)
    assert _split(plan), str(plan)
    note = next(n for n in plan.notes if n.startswith("complex parts"))
    assert "imaginary part" in note and "4 real products" in note
    assert plan.scheme.startswith("OzakiII(")


def _vecdot_bits(x1, x2, v):
    """Per part, the smallest bits over the vectors of ``vecdot(x1, x2)`` = ``v``."""
    out = None
    for i in range(x1.shape[0]):
        a, b = np.conj(x1[i : i + 1]), x2[i][:, None]
        got = _bits(accuracy(v[i : i + 1, None], a, b))
        out = got if out is None else tuple(min(p, q) for p, q in zip(out, got))
    return out


@pytest.mark.parametrize("ratio", [1e-8, 1e-20])
@pytest.mark.parametrize("k", [1, 64])
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_vecdot_keeps_native_bits(dtype, k, ratio):
    x1, x2 = small_part((24, k, 24), dtype, ratio, seed=5)
    x2 = x2.T.copy()  # (24, k): vectors along the last axis
    with emulinalg.config(strategy="eager"):
        v = emulinalg.vecdot(x1, x2)
    native = np.sum(np.conj(x1) * x2, axis=-1)
    got, want = _vecdot_bits(x1, x2, v), _vecdot_bits(x1, x2, native)
    _assert_keeps(got, want, f"{dtype} k={k} ratio={ratio}: {got} native {want}")


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
@pytest.mark.parametrize(
    "kind", ["phi0.5", "phi1", "equal", "real", "imaginary", "real-times-imaginary"]
)
def test_ordinary_complex_inputs_keep_the_complex_route(dtype, kind):
    """Parts of similar size, and parts that are exactly zero: no split (the results are those
    of the complex route, bit for bit: tools/corpus_hash.py)."""
    m, k, n = 64, 300, 48
    phi = 1.0 if kind == "phi1" else 0.5
    a = phi_matrix((m, k), phi, dtype, seed=3)
    b = phi_matrix((k, n), phi, dtype, seed=4)
    if kind == "equal":
        a = (a.real + 1j * a.real).astype(dtype)
    elif kind == "real":
        a, b = a.real.astype(dtype), b.real.astype(dtype)
    elif kind == "imaginary":
        a, b = (1j * a.imag).astype(dtype), (1j * b.imag).astype(dtype)
    elif kind == "real-times-imaginary":
        a, b = a.real.astype(dtype), (1j * b.imag).astype(dtype)
    c, plan = _level(a, b)
    assert not _split(plan), str(plan)
    ref = exact_matmul(a, b)
    got, native = _bits(accuracy(c, a, b, ref)), _bits(accuracy(a @ b, a, b, ref))
    _assert_keeps(got, native, f"{kind}: {got} native {native}\n{plan}")
    if kind in ("real", "imaginary"):
        assert not np.any(c.imag), "an exactly zero part stays exactly zero"
    if kind == "real-times-imaginary":
        assert not np.any(c.real)


@pytest.mark.parametrize("which", ["imag", "real"])
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_a_part_cancelled_where_the_modulus_is_not_is_refit(dtype, which):
    """An ordinary complex product (the complex route, not refitting every entry) whose entries
    (0, 0) and (5, 3) have one part cancelled to the rounding of its terms while the other part,
    and so the modulus, is not: the refit takes them by that part's own ratio
    (``refit.cancel_ratios``), so the part's elementwise relative error stays far above
    native's there. On the modulus's pick alone the part kept native's bits at best (one random
    draw of an error of native's size)."""
    m, k, n = 32, 2048, 32
    a = phi_matrix((m, k), 0.5, dtype, seed=13)
    b = phi_matrix((k, n), 0.5, dtype, seed=14)
    unit = 1j if which == "imag" else 1.0
    part = np.imag if which == "imag" else np.real
    for i, j in ((0, 0), (5, 3)):  # cancel the part through the sum's term of largest |b|
        h = int(np.argmax(np.abs(b[:, j])))
        c = complex(np.sum(a[i].astype(np.complex128) * b[:, j]))
        a[i, h] -= unit * part(c) / b[h, j]
    c, plan = _level(a, b)
    assert not _split(plan) and "refit: the most cancelled" in str(plan), str(plan)
    ref = exact_matmul(a, b)
    got, native = (accuracy(x, a, b, ref) for x in (c, a @ b))
    key = f"bits_maxrel_{which[:2]}"
    assert got[key] >= native[key] + 8, f"{key}: {got[key]:.2f}, native {native[key]:.2f}\n{plan}"
    _assert_keeps(_bits(got), _bits(native), f"{_bits(got)} native {_bits(native)}\n{plan}")


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_scheme_i_and_levels_above_the_dtype_split_too(dtype):
    a, b, ref, native = _case(SHAPES[300], dtype, 1e-12)
    own = _bits(accuracy(_level(a, b)[0], a, b, ref))
    c1, plan1 = _level(a, b, scheme="ozaki1")
    c80, plan80 = _level(a, b, precision=80)
    for c, plan in ((c1, plan1), (c80, plan80)):
        assert _split(plan), str(plan)
        got = _bits(accuracy(c, a, b, ref))
        _assert_keeps(got, native, f"{got} native {native}\n{plan}")
    assert plan1.scheme.startswith("OzakiI(")
    got80 = _bits(accuracy(c80, a, b, ref))
    _assert_keeps(got80, own, f"precision=80 {got80} below the dtype's level {own}", 0.0)


def test_complex64_split_rounds_once():
    """The double-double parts round to float32 once: ties broken by the low part."""
    from emulinalg.algorithm.xputil import dd_to_float32

    hi = np.array([1.0 + 2.0**-24, 1.0 + 2.0**-24, 1.0 + 3 * 2.0**-24, 1.0 + 2.0**-23, 0.0])
    lo = np.array([2.0**-60, -(2.0**-60), -(2.0**-60), 2.0**-60, 0.0])
    got = dd_to_float32(xp, hi, lo)
    want = [np.float32(1 + 2.0**-23), np.float32(1.0), np.float32(1 + 2.0**-23), hi[3], 0.0]
    assert got.dtype == np.float32 and list(got) == [np.float32(w) for w in want]


# --------------------------------------------------------------------------------------------
# The part check's bounds
# --------------------------------------------------------------------------------------------


def _exact_sums(ar, ai, br, bi):
    """P_re, P_im and sqrt(k) ||terms||_2 per part, normalized as ``parts`` normalizes them."""
    ea = parts._line_exponents(xp, ar, ai, br, bi)
    A = [np.ldexp(np.abs(x), -ea[0]) for x in (ar, ai)]
    B = [np.ldexp(np.abs(x), -ea[1]) for x in (br, bi)]
    k = ar.shape[-1]
    P = (A[0] @ B[0] + A[1] @ B[1], A[0] @ B[1] + A[1] @ B[0])
    K2 = ((A[0] ** 2) @ (B[0] ** 2) + (A[1] ** 2) @ (B[1] ** 2),
          (A[0] ** 2) @ (B[1] ** 2) + (A[1] ** 2) @ (B[0] ** 2))  # fmt: skip
    return P, tuple(np.sqrt(k * x) for x in K2)


@pytest.mark.parametrize("phi", [0.5, 4, 12])
@pytest.mark.parametrize("ratio", [1.0, 1e-6, 1e-30])
def test_part_bounds_hold(phi, ratio):
    rng = np.random.default_rng(int(phi * 10))
    a, b = small_part((20, 50, 30), "complex128", ratio, seed=int(phi))
    a = a * np.exp(phi * rng.standard_normal(a.shape))
    a[3] = 0  # a zero row; and a row whose imaginary part is zero
    a[5] = a[5].real
    ar, ai, br, bi = (np.ascontiguousarray(x) for x in (a.real, a.imag, b.real, b.imag))

    def lower(x, y):
        return certificate.magnitude_lower(xp, npb, x, y)

    one = parts.stage_sums(xp, lower, ar, ai, br, bi)
    two = parts.exact_zeros(xp, npb.int_matmul, ar, ai, br, bi, one)
    three = parts.with_kappa(xp, lower, ar, ai, br, bi, two)
    P, K = _exact_sums(ar, ai, br, bi)
    tol = 1 + 2.0**-40  # the float64 reference sums' own rounding
    assert one.zero == (None, None) and one.kappa is None
    for p in range(2):
        assert np.all(one.lo[p] <= P[p] * tol) and np.all(one.hi[p] * tol >= P[p])
        # tight: the upper bound allows bfloat16's truncation, the float32 GEMM is finer
        assert np.all(one.hi[p] <= P[p] * 1.04 + 1e-30)
        assert np.array_equal(two.zero[p], P[p] == 0)
        assert np.all(three.kappa[p] <= K[p] * tol)
        # tight too, where the squares stay in float32's range
        assert np.all((three.kappa[p] >= K[p] * 0.999) | (K[p] < 1e-15))


@pytest.mark.parametrize(
    "case", ["ordinary", "zero lines", "one part small", "disjoint", "phi 1, k 2048"]
)
def test_balance_of_the_parts_decides_only_what_holds(case):
    """``parts.balanced`` (stage 0) says every part of every entry is fine only where the exact
    sums say so (P_p >= T / slack for both parts), and says it for ordinary complex inputs,
    zero rows and columns included; a small part or parts with disjoint supports are left to
    the stages (as are heavier tails, φ >= 1 at small k: a part's share of T falls to 0.2
    there, which only kappa, stage 3, shows fine)."""
    form = parts.PartForm(_planner.PART_SLACK, True, "native form")
    rng = np.random.default_rng(3)
    a = phi_matrix((40, 64), 0.5, "complex128", seed=11)
    b = phi_matrix((64, 30), 0.5, "complex128", seed=12)
    if case == "zero lines":
        a[4] = 0
        b[:, 7] = 0
    elif case == "one part small":
        a, b = small_part((40, 64, 30), "complex128", 1e-6, seed=5)
    elif case == "phi 1, k 2048":  # heavier tails at large k: D cancels, the balance holds
        a = phi_matrix((24, 2048), 1.0, "complex128", seed=13)
        b = phi_matrix((2048, 16), 1.0, "complex128", seed=14)
    elif case == "disjoint":  # Re A only where Re B is zero: P_re = |Ai||Bi| << P_im at places
        mask = rng.random(64) < 0.5
        a = a.real * mask + 1j * a.imag
        b = b.real * ~mask[:, None] + 1e-9j * b.imag
    ar, ai, br, bi = (np.ascontiguousarray(x) for x in (a.real, a.imag, b.real, b.imag))

    def lower(x, y):
        return certificate.magnitude_lower(xp, npb, x, y)

    def signed(x, y):
        return certificate.signed_estimate(xp, npb, x, y)

    got = parts.balanced(xp, lower, signed, ar, ai, br, bi, form)[0]
    P, _ = _exact_sums(ar, ai, br, bi)
    T = P[0] + P[1]
    holds = bool(np.all(np.minimum(P[0], P[1]) >= T / form.slack))
    assert got <= holds  # never claims what does not hold
    assert got == (case in ("ordinary", "zero lines", "phi 1, k 2048"))
    check = parts.part_check(xp, lower, signed, npb.int_matmul, ar, ai, br, bi, form)
    assert (check.stages == 0) == got


def _bf16_hook(x, y):
    """The GPU's magnitude_lower_matmul on the CPU: bfloat16 truncation toward zero (the low 16
    bits of the float32 truncation dropped, float32 subnormals flushed to zero as cupy's -ftz
    build does), float32 sums, times the lower-bound factor."""

    def trunc(v):
        f = v.astype(np.float32)
        f = np.where(np.abs(f.astype(np.float64)) > np.abs(v), np.nextafter(f, np.float32(0)), f)
        f = np.where(np.abs(f) < np.float32(2.0**-126), np.float32(0), f)
        return (f.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)

    c = np.matmul(trunc(x), trunc(y))
    return c.astype(np.float64) * certificate.cert_constants(x.shape[-1]).factor


@pytest.mark.parametrize("path", ["float32", "bfloat16"])
@pytest.mark.parametrize("k", [1, 64, 3000])
def test_signed_estimate_is_within_its_bound(path, k):
    """``certificate.signed_estimate`` on operands of either sign (the balance's D), through
    the native float32 GEMM and through a bfloat16 hook like the GPU's: within
    ``signed_error(k)`` of |x||y| (plus its absolute term) of the exact sums."""
    import types

    rng = np.random.default_rng(k)
    x = rng.uniform(-2, 2, (30, k)) * np.exp(rng.normal(0, 2, (30, k))) / 60
    y = rng.uniform(-2, 2, (k, 20)) * np.exp(rng.normal(0, 2, (k, 20))) / 60
    x, y = np.clip(x, -1.99, 1.99), np.clip(y, -1.99, 1.99)
    x[0, :] = 1.0 + 2.0**-7 * (1 - 2.0**-20)  # the largest truncation loss
    be = npb
    if path == "bfloat16":
        be = types.SimpleNamespace(
            name="bf16", native_matmul=npb.native_matmul, magnitude_lower_matmul=_bf16_hook
        )
    s = certificate.signed_estimate(xp, be, x, y)
    exact = np.array([[float(sum(Fraction(a) * Fraction(b) for a, b in zip(x[i], y[:, j])))
                       for j in range(y.shape[1])] for i in range(x.shape[0])])  # fmt: skip
    bound = certificate.signed_error(k) * (np.abs(x) @ np.abs(y)) + certificate.lower_abs(k)
    assert np.all(np.abs(exact - s) <= bound)
    assert np.any(exact != s)  # an estimate indeed (the bound is bfloat16's: float32 is finer)


@pytest.mark.parametrize("hidden,slack", [(1, _planner.PART_SLACK), (2, _planner.PART_SLACK),
                                           (20, _planner.PART_SLACK_STRICT)])  # fmt: skip
def test_flushed_subnormals_do_not_hide_a_part(hidden, slack):
    """The GPU's bfloat16 conversion flushes float32 subnormals: entries below 2**-126 after
    line normalization vanish from its GEMMs. Terms of the real part made only of such entries
    (1.99 x 0.99 2**-126, ``hidden`` of them) beside a balanced term of 2**-128 must still show
    the imaginary part small: the balance and the stages may not call it fine (a review's
    counterexample: the bounds' absolute term assumed a loss below 2**-133)."""
    import types

    ar = np.array([[0.0, 2.0**-64] + [1.99] * hidden])
    ai = np.array([[0.0, 2.0**-64] + [0.0] * hidden])
    br = np.array([[1.0, 2.0**-64] + [0.99 * 2.0**-126] * hidden]).T.copy()
    bi = np.array([[0.0, 2.0**-64] + [0.0] * hidden]).T.copy()
    P, _ = _exact_sums(ar, ai, br, bi)
    assert min(P[0][0, 0], P[1][0, 0]) * slack < P[0][0, 0] + P[1][0, 0]  # not fine
    be = types.SimpleNamespace(
        name="bf16", native_matmul=npb.native_matmul, int_matmul=npb.int_matmul,
        magnitude_lower_matmul=_bf16_hook,
    )  # fmt: skip

    def lower(x, y):
        return certificate.magnitude_lower(xp, be, x, y)

    def signed(x, y):
        return certificate.signed_estimate(xp, be, x, y)

    form = parts.PartForm(slack, slack == _planner.PART_SLACK, "")
    assert not parts.balanced(xp, lower, signed, ar, ai, br, bi, form)[0]
    assert parts.part_check(xp, lower, signed, be.int_matmul, ar, ai, br, bi, form).split
    one = parts.stage_sums(xp, lower, ar, ai, br, bi)
    assert one.hi[0][0, 0] >= P[0][0, 0]


def test_part_check_edges_raise_and_warn_nothing():
    """Parts whose sum |Re| + |Im| exceeds the float64 range (normalized before they are
    added) and k = 0 (no terms: nothing to split)."""
    import warnings

    form = parts.PartForm(_planner.PART_SLACK, True, "native form")

    def lower(x, y):
        return certificate.magnitude_lower(xp, npb, x, y)

    def signed(x, y):
        return certificate.signed_estimate(xp, npb, x, y)

    ar = np.full((3, 4), 1.7e308)
    br = np.full((4, 2), 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parts.balanced(xp, lower, signed, ar, ar.copy(), br, br.copy(), form)[0]
        e = np.zeros((3, 0))
        f = np.zeros((0, 2))
        assert not parts.part_check(xp, lower, signed, npb.int_matmul, e, e, f, f, form).split


def test_magnitude_upper_covers_bfloat16_truncation():
    """``magnitude_upper`` bounds the exact product from a lower bound of bfloat16-truncated
    operands (the GPU's path) summed in float32, at the largest truncation loss."""
    k = 64
    x = 1.0 + 2.0**-7 * (1 - 2.0**-20)  # truncated to 8 significant bits: 1.0
    s = float(np.float32(k * 1.0 * 1.0))  # the float32 sum of the truncated products
    cc = certificate.cert_constants(k)
    lower = max(s * cc.factor - cc.abs_term, 0.0)
    exact = Fraction(x) ** 2 * k
    upper = float(certificate.magnitude_upper(xp, np.array(lower), k))
    assert lower <= exact <= Fraction(upper)
    assert upper <= float(exact) * 1.001  # and tight


def test_part_form_of_each_route():
    f64 = level_for_dtype("float64")
    assert _planner.part_form(f64, "ozaki2", 1, 100, "float64").route.startswith("k=1")
    assert _planner.part_form(f64, "ozaki2", 64, 100, "float64").route.startswith("every")
    native = _planner.part_form(f64, "ozaki2", 64, 1 << 20, "float64", npb)
    assert (native.slack, native.native) == (_planner.PART_SLACK, True)
    strict = _planner.part_form(emulinalg._precision.parse(80), "ozaki2", 300, 1 << 20, "float64")
    assert (strict.slack, strict.native) == (_planner.PART_SLACK_STRICT, False)
    assert _planner.part_form(f64, "ozaki1", 1, 100, "float64").slack == _planner.PART_SLACK_STRICT


# --------------------------------------------------------------------------------------------
# dask arrays: the same route, the in-core bits
# --------------------------------------------------------------------------------------------


@pytest.mark.dask
@pytest.mark.parametrize(
    "ratio,shape,chunks",
    [
        (1e-12, (96, 300, 80), (40, 128, 48)),  # split, native form, K-blocked
        (1.0, (96, 300, 80), (40, 128, 48)),  # the complex route
        (1e-8, (160, 64, 160), (64, 32, 64)),  # split, refit of the combined parts
        (1e-16, (48, 1, 40), (24, 1, 24)),  # k = 1
        (1e-20, (24, 300, 24), (12, 100, 16)),  # split, every entry refitted
    ],
)
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_dask_takes_the_same_route_bit_for_bit(dtype, ratio, shape, chunks, monkeypatch):
    da = pytest.importorskip("dask.array")
    import dask

    from emulinalg.backends import numpy as npb

    monkeypatch.setattr(npb, "gaussian_moduli", False)  # the dask graphs' complex route: 3M

    a, b = small_part(shape, dtype, ratio, seed=9)
    a[3, 0] = np.nan if ratio == 1e-8 else a[3, 0]  # rows with NaN: native, as in core
    c, plan = _level(a, b)
    with dask.config.set(scheduler="sync"):
        lazy, dplan = _level(
            da.from_array(a, chunks=chunks[:2]), da.from_array(b, chunks=chunks[1:])
        )
        got = lazy.compute()
    assert _split(plan) == _split(dplan), f"{plan}\n{dplan}"
    assert got.dtype == c.dtype and got.shape == c.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(c))
    finite = np.isfinite(c)
    if ratio == 1e-8:  # the NaN row's entries come from dask's blocked native product
        finite[3] = False
    np.testing.assert_array_equal(got[finite], c[finite])
