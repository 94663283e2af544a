"""CPU checks of the cupy backend's Scheme II product kernels (``src_cuda/ozaki2_residues.cu``,
``ozaki2_crt.cu``) through their numpy model.

``gpu_kernel_model`` mirrors the kernels operation for operation; here it must reproduce the
generic ``emulinalg.algorithm.products.product`` bit for bit (and the exact double-double
rounding for "dd"), so the algorithm of the GPU path is tested without a GPU; the generated
tables header and the sources' inlined headers too. ``fake_cupy`` then runs
``emulinalg/backends/cupy/``'s host code on the CPU, with the kernels either the model or the
CUDA sources themselves compiled as host C++ (g++), against the same generic path.
``tests/backends/gpu/`` compares the real kernels with the generic path on the GPU.
"""

from __future__ import annotations

import gpu_kernel_model as model
import numpy as np
import pytest
from _helpers import rounding_cases, scaled_integer, tie_operands
from _kernel_model_helpers import _operands, _same

from emulinalg.algorithm import products, residues, rounding, scaling
from emulinalg.algorithm.moduli import LIMB_BITS, MODULI, crt_constants
from emulinalg.algorithm.scaling import ozaki2_prescale, ozaki2_shifts, scale_to_integers
from emulinalg.backends import numpy as npb
from emulinalg.backends.cuda import (
    F64_DIGIT_BITS,
    MAX_F64_WORDS,
    _f64_digits_exact,
    crt_f64_table_arrays,
    crt_f64_words,
    crt_tables,
    crt_words,
    source,
    source_dir,
    tables_header,
)
from emulinalg.reference import _round_hi_lo


def _same_value(x, y):
    """Bitwise equal except that a zero may have either sign (``unscale_dd`` gives a zero
    remainder the sign of the product, ``reference._round_hi_lo`` gives +0)."""
    x, y = np.asarray(x), np.asarray(y)
    nz = (x != 0) | (y != 0)
    return np.array_equal(x, y) and _same(x[nz], y[nz])


def _generic(ar, ai, br, bi, n, mode, out_dtype):
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, mode)
    with npb.quiet():
        return pre, products.product(np, npb.int_matmul, ar, ai, br, bi, n, mode, out_dtype, pre)


def _exact_dd(ar, ai, br, bi, n, pre):
    """(hi, lo) per part from the exact integer product A'B' (Python ints; accurate mode's
    rounding of the scaled operands) and the reference's correct double-double rounding."""
    c = crt_constants(n)
    mu, nu = ozaki2_shifts(np, pre, c.L, c.Q_down)
    near = scaling.rounds_to_nearest(n, ar.shape[-1], "accurate")

    def ints(x, s, axis):
        if x is None:
            return None
        return np.vectorize(int, otypes=[object])(scale_to_integers(np, x, s, axis, near))

    Ar, Ai = ints(ar, mu, -1), ints(ai, mu, -1)
    Br, Bi = ints(br, nu, -2), ints(bi, nu, -2)
    parts = [Ar @ Br] if Ai is None else [Ar @ Br - Ai @ Bi, Ar @ Bi + Ai @ Br]
    off = -(mu[..., :, None] + nu[..., None, :])
    out = []
    for Y in parts:
        hl = [
            _round_hi_lo(int(y), int(e))
            for y, e in zip(Y.ravel(), np.broadcast_to(off, Y.shape).ravel())
        ]
        hi = np.array([h for h, _ in hl], dtype=np.float64).reshape(Y.shape)
        lo = np.array([l_ for _, l_ in hl], dtype=np.float64).reshape(Y.shape)
        out.append((hi, lo))
    return tuple(out)


def test_tables_header_is_generated():
    """src_cuda/ozaki2_tables.h (kModuli, kCrtWords, ... for the kernels and src_amx) is the
    generator's output from the Python tables now: an edit of one side alone fails here.
    Regenerate with ``python -m emulinalg.backends.cuda > src_cuda/ozaki2_tables.h``."""
    assert (source_dir() / "ozaki2_tables.h").read_text() == tables_header()


def test_tables_match_the_python_constants():
    for n in range(2, 21):
        c, t = crt_constants(n), crt_tables(n)
        nw = crt_words(n)
        assert t["nw"] == nw and nw <= 5

        def val(d):
            return sum(v << (32 * i) for i, v in enumerate(d))

        for ell in range(n):
            assert val(t["wdig"][ell]) == c.weights[ell]
            assert all(-(2**31) <= d < 2**31 for d in t["wdig"][ell])
        assert val(t["pdig"]) == c.P
        assert t["ratios"][:n] == list(c.weight_ratios)
        assert 2 ** (32 * nw - 1) > c.P


def test_f64_tables_hold_the_constants_exactly():
    """ozaki2_crt_s8.cu's float64 digits: exact integers summing to the weights and P, few
    enough bits that any int8 residues' sums (and the quotient's qP) stay below 2**53."""
    for n in range(2, 21):
        c, t, kw = crt_constants(n), crt_f64_table_arrays(n), crt_f64_words(n)
        wd = t["emu_wdig_f64"].reshape(len(MODULI), MAX_F64_WORDS)
        pd = t["emu_pdig_f64"]
        assert kw <= MAX_F64_WORDS and not wd[n:].any() and not wd[:, kw:].any()
        assert not pd[kw:].any()

        def val(d):
            assert all(float(int(v)) == v for v in d)
            return sum(int(v) << (F64_DIGIT_BITS * i) for i, v in enumerate(d))

        for ell in range(n):
            assert val(wd[ell]) == c.weights[ell]
        assert val(pd) == c.P
        q = sum(128 * r for r in c.weight_ratios) + 1  # |rint(qf)| for any int8 residues
        for i in range(kw):
            assert 128 * sum(abs(int(v)) for v in wd[:n, i]) + q * abs(int(pd[i])) < 2**53
        assert kw == 1 or not _f64_digits_exact(n, kw - 1)  # the fewest digits


def test_sources_inline_their_headers():
    for name in ("ozaki2_residues.cu", "ozaki2_residues_mma.cu", "ozaki2_crt.cu",
                 "ozaki2_crt_s8.cu", "ozaki2_stats.cu", "bf16_lower.cu",
                 "refit_pick.cu"):  # fmt: skip
        text = source(name)
        assert '#include "' not in text and "__global__" in text


# The residue kernels, as ``products._residue_planes`` names them, and whether the model takes
# the MMA kernel's digit sums (``model.residue_planes(..., digits)``).
KERNELS = {"ozaki2_residues": False, "ozaki2_residues_mma": True}


@pytest.mark.parametrize("digits", [False, True])
@pytest.mark.parametrize("nearest", [False, True])
@pytest.mark.parametrize("n", [2, 8, 17, 20])
@pytest.mark.parametrize("cplx", [False, True])
def test_residue_planes_equal_generic_residues(n, cplx, nearest, digits):
    ar, ai, br, bi = _operands(((2,), 5, 37, 6), 4, cplx, seed=n)
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    c = crt_constants(n)
    mu, _ = ozaki2_shifts(np, pre, c.L, c.Q_down)
    X = [residues.split(np, scale_to_integers(np, x, mu, -1, nearest)) for x in (ar, ai)]
    planes = model.residue_planes(ar, ai, mu, c.moduli, 5, 48, nearest, digits)
    assert not planes[..., 37:].any()
    for ell, m in enumerate(c.moduli):
        want = residues.residues(np, X[0], X[1], m)
        for p, w in enumerate(want):
            assert np.array_equal(planes[p, ell, :, :, :37], w.astype(np.int8))


def _model_residues(x, shift, nearest, m, digits):
    """Residues of the scaled entries by the model of either kernel's arithmetic."""
    if digits:
        return model.digit_residue(model.entry_digits(x, shift, nearest), m)
    neg, words = model.element_words(x, shift, nearest)
    return model.residue_of(neg, words, m)


@pytest.mark.parametrize("digits", [False, True])
def test_residues_of_extreme_integers(digits):
    # |X| up to 2**82 (the scaling's bound for 20 moduli), negative, odd, subnormal inputs
    rng = np.random.default_rng(0)
    mant = rng.integers(1, 2**53, size=400).astype(np.float64) * rng.choice([-1, 1], size=400)
    shift = rng.integers(-20, 60, size=400)
    x = np.ldexp(mant, rng.integers(-60, 30, size=400) - shift)  # |x| 2**shift < 2**82
    x[:5] = [5e-324, -5e-324, 2.5e-310, -0.0, 0.0]
    shift[:5] = [1074 + 81, 1074 + 40, 1074, 3, 0]
    X = np.trunc(np.ldexp(x, shift))
    assert np.abs(X).max() < 2.0**83
    for m in MODULI:
        got = _model_residues(x, shift, False, m, digits)
        want = [int(v) % m for v in X]  # float64 holds these integers exactly
        want = np.array([w - m if w > (m - 1) // 2 else w for w in want])
        assert np.array_equal(got, want), m


def _exact_residues(x, shift, nearest, m):
    return np.array([_symmetric(scaled_integer(v, s, nearest), m) for v, s in zip(x, shift)])


def _wrapped_integers(x, shift, nearest):
    """What both kernels reduce for any finite entry: sign(x) (|X| mod 2**96) (Python ints),
    which is X below the scaling's bound |X| <= 2**82."""
    out = []
    for v, s in zip(np.ravel(x), np.ravel(shift)):
        Y = abs(scaled_integer(v, s, nearest)) % 2**96
        out.append(-Y if np.signbit(v) else Y)
    return np.array(out, dtype=object).reshape(np.shape(x))


def _symmetric(y, m):
    return (y + m // 2) % m - m // 2


def test_rounding_cases_hit_ties_and_agree_with_the_generic_integers():
    """The crafted entries have ties to both parities and entries where the two roundings
    differ, and ``scale_to_integers`` (numpy's round/trunc) gives their exact integers."""
    x, shift = rounding_cases(np.random.default_rng(0))
    v = np.ldexp(x, shift)
    tie = (np.abs(v - np.trunc(v)) == 0.5) & (np.abs(v) < 2.0**52)
    assert (tie & (np.trunc(v) % 2 == 0)).sum() > 50 and (tie & (np.trunc(v) % 2 != 0)).sum() > 50
    for nearest in (False, True):
        got = scale_to_integers(np, x[:, None], shift, -1, nearest)[:, 0]
        assert [int(g) for g in got] == [scaled_integer(a, s, nearest) for a, s in zip(x, shift)]
    assert (np.round(v) != np.trunc(v)).sum() > 100


@pytest.mark.parametrize("digits", [False, True])
@pytest.mark.parametrize("nearest", [False, True])
def test_scaled_entries_round_to_nearest_or_truncate(nearest, digits):
    """element_words and entry_digits round x 2**shift to nearest, ties to even, or toward zero,
    exactly as Python's integers: ties n + 1/2 of both parities and signs, 1/2 -> 0, 3/2 -> 2,
    below 1/2, subnormals, shifts from -1100 on, 1 to 70 bits shifted out."""
    x, shift = rounding_cases(np.random.default_rng(1))
    for m in MODULI:
        want = _exact_residues(x, shift, nearest, m)
        assert np.array_equal(_model_residues(x, shift, nearest, m, digits), want), m


def _beyond_bound_cases(rng, count=200):
    """Entries whose scaled integers pass 2**96 (and 2**128, 2**180): no scaling makes them,
    the kernels reduce sign(x) (|X| mod 2**96)."""
    M = rng.integers(2**52, 2**53, count).astype(np.float64) * rng.choice([-1.0, 1.0], count)
    e2 = rng.integers(30, 140, count)  # |X| = |M| 2**e2
    e = rng.integers(-900, 900, count)
    return np.ldexp(M, e), e2 - e


@pytest.mark.parametrize("nearest", [False, True])
def test_entry_words_and_digits_spell_the_integer_mod_2_96(nearest):
    """Both kernels' representations of an entry are sign(x) (|X| mod 2**96) for every finite
    entry: element_words' 16-bit words with the sign, entry_digits' digits sum_k byte_k place_k
    - sign C; the weights give it mod m."""
    rng = np.random.default_rng(7)
    x1, s1 = rounding_cases(rng)
    x2, s2 = _beyond_bound_cases(rng)
    x, shift = np.concatenate([x1, x2]), np.concatenate([s1, s2])
    neg, words = model.element_words(x, shift, nearest)
    digits = model.entry_digits(x, shift, nearest)
    places, C = model.digit_places()
    for i in range(len(x)):
        Y = abs(scaled_integer(x[i], shift[i], nearest)) % 2**96
        Y = -Y if np.signbit(x[i]) else Y
        w = sum(int(words[j][i]) << (16 * j) for j in range(6))
        assert (-w if neg[i] else w) == Y, (x[i], shift[i])
        byte = [int(digits[k // 4][i]) >> (8 * (k % 4)) & 0xFF for k in range(16)]
        val = sum(b * p for b, p in zip(byte, places)) - byte[13] * C
        assert val == Y and byte[14:] == [0, 0], (x[i], shift[i])
    for m in MODULI:
        w = model.digit_weights(m)
        assert all(-128 <= v <= 127 for v in w) and w[14:] == [0, 0]
        assert all((v - p) % m == 0 for v, p in zip(w, places)) and (w[13] + C) % m == 0
        want = _symmetric(_wrapped_integers(x, shift, nearest), m).astype(np.int64)
        assert np.array_equal(model.digit_residue(digits, m), want)
        assert np.array_equal(model.residue_of(neg, words, m), want)


def test_digit_sum_reduction_is_exact_for_every_sum():
    """The MMA kernel's reduction of a digit sum s (its accumulator's float M + s, one FMA for
    the quotient) gives the symmetric residue of s for every s an entry (or 3M's re + im) can
    reach, for every modulus."""
    for m in MODULI:
        w = model.digit_weights(m)
        bound = 2 * (255 * sum(abs(v) for v in w[:13]) + abs(w[13]))  # re + im
        assert bound < 2**22  # M + s exact in float32, |s| rn(1/m) error < 1/(2m)
        s = np.arange(-bound, bound + 1, dtype=np.int64)
        assert np.array_equal(model.reduce_sum(s, m), _symmetric(s, m)), m


def _crafted_matrix(nearest, cols, seed):
    """The crafted entries of ``rounding_cases`` and ``_beyond_bound_cases`` as column 0 of a
    (N, cols) matrix, one shift per row; column c > 0 holds another row's entry rescaled to this
    row's shift (its integer where that is exact), zeros where the rescaling is not exact: ties,
    subnormals and huge integers across every column position of the kernels' tiles."""
    rng = np.random.default_rng(seed)
    x1, s1 = rounding_cases(rng)
    x2, s2 = _beyond_bound_cases(rng, 60)
    x, shift = np.concatenate([x1, x2]), np.concatenate([s1, s2])
    N = len(x)
    rng = np.random.default_rng(seed + 1)
    mat = np.zeros((N, cols))
    mat[:, 0] = x
    for c in range(1, cols):
        src = rng.permutation(N)
        with np.errstate(over="ignore"):
            v = np.ldexp(x[src], (shift[src] - shift).clip(-2000, 2000))
            ok = np.ldexp(v, shift - shift[src]) == x[src]
        mat[:, c] = np.where(ok, v, 0.0)
    return mat, shift


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("nearest", [False, True])
@pytest.mark.parametrize("cplx", [False, True])
def test_host_code_residue_kernel_rounds(cpu_backend, cplx, nearest, layout, kernel):
    """Each residue kernel (model, or the CUDA source compiled for the CPU) on the crafted
    entries (one shift per line, 37 columns: one 64-column tile and a tail, two 32-column ones),
    stored with rows or columns contiguous, against Python's integers."""
    be, cp = cpu_backend
    x, shift = _crafted_matrix(nearest, 37, 2)
    y = x * 0.375 if cplx else None
    N, C = x.shape

    def stored(v):  # (1, ...) arrays: the batch axis first
        if v is None:
            return None
        return cp.asarray((v.T if layout == "rows" else v).copy()[None])

    strides = (N * C, 1, N) if layout == "rows" else (N * C, C, 1)  # rows: as B's columns
    xs, ys = stored(x), stored(y)
    planes = be.products._residue_planes(
        xs, ys, strides, N, N, C, 48,
        cp.asarray(shift.astype(np.int32).reshape(1, N)), N, 20, nearest, kernel=kernel,
    )  # fmt: skip
    planes = np.asarray(planes)
    assert planes.shape == (3 if cplx else 1, 20, 1, N, 48) and not planes[..., C:].any()
    sh = np.broadcast_to(shift[:, None], x.shape)
    X = _wrapped_integers(x, sh, nearest)
    Y = None if y is None else _wrapped_integers(y, sh, nearest)
    for ell, m in enumerate(MODULI):
        want = _symmetric(X, m).astype(np.int64)
        small = np.abs(np.ldexp(x[:, 0], shift)) < 2.0**83  # X itself
        exact = _exact_residues(x[small, 0], shift[small], nearest, m)
        assert np.array_equal(want[small, 0], exact)
        assert np.array_equal(planes[0, ell, 0, :, :C], want), m
        if cplx:
            want_y = _symmetric(Y, m).astype(np.int64)
            assert np.array_equal(planes[1, ell, 0, :, :C], want_y), m
            assert np.array_equal(planes[2, ell, 0, :, :C], _symmetric(want + want_y, m)), m


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("cplx", [pytest.param(False, marks=pytest.mark.slow), True])
def test_residue_kernel_special_entries_as_the_model(native_backend, cplx, kernel):
    """Entries no scaling makes (inf, NaN, +-0, huge and subnormal x with shifts beyond +-2044,
    integers beyond 2**96: the MMA kernel's integer path) give the model's planes, the same for
    both kernels (sign(x) (|X| mod 2**96) of the significand's bits)."""
    be, cp = native_backend
    rng = np.random.default_rng(5)
    special = [np.inf, -np.inf, np.nan, 0.0, -0.0, 5e-324, -5e-324, 2.0**1023, -1.5 * 2.0**1023]
    pool = np.concatenate([special, rng.standard_normal(9) * 2.0 ** rng.integers(-60, 60, 9)])
    rows, cols = 37, 21
    x = rng.choice(pool, (1, rows, cols))
    y = rng.choice(pool, (1, rows, cols)) if cplx else None
    shifts = [-3000, -2045, -2044, -1100, 0, 40, 95, 1100, 1134, 2046, 2047, 3000]
    shift = rng.choice(shifts, (1, rows)).astype(np.int32)
    for nearest in (False, True):
        planes = be.products._residue_planes(
            cp.asarray(x), None if y is None else cp.asarray(y), (rows * cols, cols, 1), rows,
            rows, cols, 32, cp.asarray(shift), rows, 20, nearest, kernel=kernel,
        )  # fmt: skip
        for digits in (False, True):
            want = model.residue_planes(
                x, y, shift.astype(np.int64), MODULI, rows, 32, nearest, digits
            )
            assert np.array_equal(np.asarray(planes), want), (nearest, digits)


# (moduli, complex, nearest, (batch, m, k, n)): 16-row and 32-row tiles, 32- and 64-column
# units with tails, B's rows padded to n_p, batches, one and two MMA tiles of moduli (8, 16, 17,
# 20)
RESIDUE_KERNEL_CASES = [
    (15, False, True, ((2,), 37, 133, 45)),
    (16, True, False, ((2,), 21, 70, 19)),
    pytest.param(20, True, True, ((2,), 19, 67, 37), marks=pytest.mark.slow),
    pytest.param(17, False, False, ((), 40, 200, 33), marks=pytest.mark.slow),
    pytest.param(8, True, True, ((3,), 17, 64, 16), marks=pytest.mark.slow),
    pytest.param(8, False, False, ((), 33, 96, 20), marks=pytest.mark.slow),
    pytest.param(2, False, True, ((), 5, 9, 3), marks=pytest.mark.slow),
    pytest.param(20, False, True, ((2,), 33, 130, 18), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize(("n", "cplx", "nearest", "shape"), RESIDUE_KERNEL_CASES)
def test_residue_kernel_planes_equal_generic_residues(
    native_backend, n, cplx, nearest, shape, kernel
):
    """Each residue kernel compiled for the CPU, driven as ``ozaki2_product`` drives it (A's
    rows and B's columns, which are contiguous in memory, with their shifts and paddings),
    writes the generic ``residues`` of the scaled operands bit for bit, and zeros beyond;
    complex operands as separate parts and as a complex array's interleaved ones (B's columns
    then walked along memory at stride 2)."""
    be, cp = native_backend
    ar, ai, br, bi = _operands(shape, 4, cplx, seed=n)
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    c = crt_constants(n)
    mu, nu = ozaki2_shifts(np, pre, c.L, c.Q_down)
    layouts = [[None if v is None else cp.asarray(v) for v in (ar, ai, br, bi)]]
    if cplx:
        A, B_ = cp.asarray(ar + 1j * ai), cp.asarray(br + 1j * bi)
        layouts.append([A.real, A.imag, B_.real, B_.imag])
    for dev in layouts:
        _check_residue_planes(be, cp, dev, (ar, ai, br, bi), (mu, nu), c, n, nearest, kernel)


def _check_residue_planes(be, cp, dev, host, shifts, c, n, nearest, kernel):
    """``test_residue_kernel_planes_equal_generic_residues`` on one layout of the operands."""
    ar, ai, br, bi = host
    mu, nu = shifts
    cplx = ai is not None
    ops = be.kernels._Operands(*dev, cp.asarray(mu), cp.asarray(nu))
    if cplx and dev[0].base is not None and dev[0].base is dev[1].base:  # interleaved
        assert be.kernels._rows_contiguous(*ops.b, ops.b_strides) == 1
    B, m, k, nn, kp, n_p = ops.B, ops.m, ops.k, ops.n, ops.kp, ops.n_p
    pa = be.products._residue_planes(
        ops.a[0], ops.a[1], ops.a_strides, m, m, k, kp, ops.mu, m, n, nearest, kernel=kernel
    )
    pb = be.products._residue_planes(
        ops.b[0], ops.b[1], ops.b_strides, nn, n_p, k, kp, ops.nu, nn, n, nearest, kernel=kernel
    )
    for planes, x, xi, s, axis, rows, rows_pad in (
        (pa, ar, ai, mu, -1, m, m),
        (pb, br, bi, nu, -2, nn, n_p),
    ):
        planes = np.asarray(planes)
        assert planes.shape == (3 if cplx else 1, n, B, rows_pad, kp)
        X = [None if v is None else residues.split(np, scale_to_integers(np, v, s, axis, nearest))
             for v in (x, xi)]  # fmt: skip
        for ell, mod in enumerate(c.moduli):
            for p, w in enumerate(residues.residues(np, X[0], X[1], mod)):
                w = w.reshape(B, *w.shape[-2:])
                w = np.swapaxes(w, -1, -2) if axis == -2 else w  # B's planes are B'^T
                assert np.array_equal(planes[p, ell, :, :rows, :k], w.astype(np.int8)), (p, mod)
        assert not planes[..., rows:, :].any() and not planes[..., k:].any()


@pytest.mark.parametrize("n", [8, 15])
@pytest.mark.parametrize("cplx", [False, True])
def test_product_uses_the_tensor_core_residue_kernel(cpu_backend, monkeypatch, cplx, n):
    """``ozaki2_product`` makes both operands' planes by ``RESIDUE_KERNEL``,
    the tensor-core kernel, for float64/complex128 sources (result dtype float64 or dd) and
    float32/complex64 ones (result float32), 8 moduli included; the result is the generic
    product's either way."""
    be, cp = cpu_backend
    kernel = be.products.RESIDUE_KERNEL
    assert kernel == "ozaki2_residues_mma"
    assert set(be.products.RESIDUE_KERNELS) == set(KERNELS)
    files = []
    real = be.products._kernel

    def spy(file, expr, **kw):
        files.append(file)
        return real(file, expr, **kw)

    monkeypatch.setattr(be.products, "_kernel", spy)
    ar, ai, br, bi = _operands(((2,), 5, 37, 6), 4, cplx, seed=n)
    for out_dtype, narrow in (("float64", False), ("dd", False), ("float32", True)):
        if narrow:  # the float64 parts of float32 operands
            ar, ai, br, bi = (None if x is None else x.astype(np.float32).astype(np.float64)
                              for x in (ar, ai, br, bi))  # fmt: skip
        pre, want = _generic(ar, ai, br, bi, n, "accurate", out_dtype)
        files.clear()
        dev = [None if x is None else cp.asarray(x) for x in (ar, ai, br, bi)]
        got = be.ozaki2_product(*dev, n, "accurate", out_dtype, tuple(cp.asarray(x) for x in pre))
        used = [f for f in files if f.startswith("ozaki2_residues")]
        assert used == [f"{kernel}.cu"] * 2, (out_dtype, used)
        flat = [[x for p in r for x in (p if isinstance(p, tuple) else (p,))] for r in (want, got)]
        for w, g in zip(*flat):
            assert _same(np.asarray(g), w)


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("cplx", [False, True])
def test_product_takes_float32_operands(cpu_backend, monkeypatch, cplx, kernel):
    """narrow_products: ``ozaki2_product`` given float32 operands (complex64: their parts)
    equals it given their float64 copies bit for bit, with either residue kernel (its float32
    build reads the half-width entries), and the generic product of those copies."""
    be, cp = cpu_backend
    monkeypatch.setattr(be.products, "RESIDUE_KERNEL", kernel)
    ops = _operands(((2,), 5, 37, 6), 4, cplx, seed=3)
    narrow = [None if x is None else x.astype(np.float32) for x in ops]
    wide = [None if x is None else x.astype(np.float64) for x in narrow]
    pre, want = _generic(*wide, 9, "accurate", "float32")
    pre = tuple(cp.asarray(x) for x in pre)
    got = {}
    for name, xs in (("wide", wide), ("narrow", narrow)):
        dev = [None if x is None else cp.asarray(x) for x in xs]
        got[name] = be.ozaki2_product(*dev, 9, "accurate", "float32", pre)
    for w, g64, g32 in zip(want, got["wide"], got["narrow"]):
        assert _same(np.asarray(g64), w) and _same(np.asarray(g32), w)


@pytest.mark.parametrize("n", [2, 8, 15, 20])
def test_line_shifts_equal_generic_shifts(native_backend, n):
    """``products._shifts`` (``line_shifts`` of ``ozaki2_stats.cu``, the CUDA source compiled
    for the CPU) equals the generic ``scaling.ozaki2_shifts`` on line bounds of every size:
    zeros, powers of two, Q_down and its neighbours at 4**t, and random ones."""
    be, cp = native_backend
    c = crt_constants(n)
    rng = np.random.default_rng(n)
    edge = [c.Q_down * 4.0**-t for t in range(0, 60, 7)]
    v = np.concatenate([
        [0.0, 0.25, 1.0, 1.5, 2.0**40, 2.0**100],
        edge, np.nextafter(edge, np.inf), np.nextafter(edge, 0.0),
        np.ldexp(rng.uniform(1, 2, 64), rng.integers(-2, 120, 64)),
    ])  # fmt: skip
    s = rng.integers(-60, 60, v.shape).astype(np.int64)
    pre = (s, s[::-1].copy(), v, v[::-1].copy())
    want = ozaki2_shifts(np, pre, c.L, c.Q_down)
    got = be.products._shifts(tuple(cp.asarray(x) for x in pre), c)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.int64 and np.array_equal(np.asarray(g), w)


# (moduli, k, mode, rounds): both sides of scaling.rounds_to_nearest
ROUNDING_SWITCH = [
    (3, 62, "accurate", True),
    (3, 63, "accurate", False),
    (2, 20, "accurate", False),
    (14, 40, "accurate", True),
    (14, 40, "fast", False),
]


@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("n,k,mode,rounds", ROUNDING_SWITCH)
def test_model_and_host_code_round_ties(cpu_backend, n, k, mode, rounds, cplx):
    """Operands whose scaled entries are ties n + 1/2 (both parities, both signs), 1/2, below
    1/2 and subnormal, for counts that round and counts that truncate: the model and the host
    code over the kernels (model or CUDA source) equal ``products.product`` bit for bit."""
    be, cp = cpu_backend
    assert scaling.rounds_to_nearest(n, k, mode) == rounds
    ar, ai, br, bi, pre = tie_operands(((2,), 5, k, 4), cplx, n, mode, seed=n + k)
    c = crt_constants(n)
    mu, _ = ozaki2_shifts(np, pre, c.L, c.Q_down)
    near, trunc = (scale_to_integers(np, ar, mu, -1, r) for r in (True, False))
    assert (near != trunc).sum() > ar.size // 5  # the two roundings differ on these operands
    for out_dtype in ("float64", "dd"):
        with npb.quiet():
            want = products.product(np, npb.int_matmul, ar, ai, br, bi, n, mode, out_dtype, pre)
        got_model = model.ozaki2_product(ar, ai, br, bi, n, mode, out_dtype, pre, k_block=16)
        dev = [None if x is None else cp.asarray(x) for x in (ar, ai, br, bi)]
        got = be.ozaki2_product(*dev, n, mode, out_dtype, tuple(cp.asarray(x) for x in pre))
        flat = [[x for p in r for x in (p if isinstance(p, tuple) else (p,))]
                for r in (want, got_model, got)]  # fmt: skip
        for w, gm, g in zip(*flat):
            assert _same(gm, w) and _same(np.asarray(g), w)


@pytest.mark.parametrize("n,scale_a,scale_b", [(3, -1040, 1000), (17, -1000, 900), (17, 500, 400)])
def test_host_code_round_ties_at_large_exponents(cpu_backend, n, scale_a, scale_b):
    """Ties in lines of subnormal, tiny and huge entries (shifts far from 0)."""
    be, cp = cpu_backend
    ar, ai, br, bi, pre = tie_operands(((), 6, 30, 5), True, n, "accurate", seed=4,
                                       scale_a=scale_a, scale_b=scale_b)  # fmt: skip
    assert scaling.rounds_to_nearest(n, 30, "accurate")
    c = crt_constants(n)
    mu, _ = ozaki2_shifts(np, pre, c.L, c.Q_down)
    v = np.ldexp(ar, mu[:, None])
    assert (np.abs(v - np.trunc(v)) == 0.5).sum() > 10
    with npb.quiet():
        want = products.product(np, npb.int_matmul, ar, ai, br, bi, n, "accurate", "dd", pre)
    got = be.ozaki2_product(*(cp.asarray(x) for x in (ar, ai, br, bi)), n, "accurate", "dd",
                            tuple(cp.asarray(x) for x in pre))  # fmt: skip
    for (h, l_), (wh, wl) in zip(got, want):
        assert _same(np.asarray(h), wh) and _same(np.asarray(l_), wl)


CASES = [
    # (batch, m, k, n), phi
    (((), 1, 1, 1), 1),
    (((), 1, 13, 1), 0.5),
    (((), 7, 33, 5), 1),
    (((), 9, 19, 17), 4),
    (((3,), 5, 21, 6), 1),
    (((2, 2), 3, 10, 4), 0.5),
]


@pytest.mark.parametrize("out_dtype", ["float64", "float32"])
@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("n", [2, 8, 14, 17, 20])
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_model_equals_generic(case, cplx, n, mode, out_dtype):
    shape, phi = case
    ar, ai, br, bi = _operands(shape, phi, cplx, seed=n + 3 * len(shape[0]))
    pre, want = _generic(ar, ai, br, bi, n, mode, out_dtype)
    got = model.ozaki2_product(ar, ai, br, bi, n, mode, out_dtype, pre, k_block=16)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert _same(g, w)


@pytest.mark.parametrize("n", [2, 14, 20])
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_model_dd_is_exact_double_double(case, cplx, n):
    shape, phi = case
    ar, ai, br, bi = _operands(shape, phi, cplx, seed=7 * n)
    pre, want = _generic(ar, ai, br, bi, n, "accurate", "dd")
    got = model.ozaki2_product(ar, ai, br, bi, n, "accurate", "dd", pre)
    ref = _exact_dd(ar, ai, br, bi, n, pre)
    for (h, l_), (rh, rl), (wh, wl) in zip(got, ref, want):
        assert _same(h, wh) and _same(l_, wl)
        assert _same(h, rh) and _same_value(l_, rl)


@pytest.mark.parametrize(
    "what,scale_a,scale_b",
    [
        ("subnormal", -1000, -60),
        ("deep-subnormal", -1030, -40),
        ("near-overflow", 510, 511),
        ("overflow", 512, 514),
    ],
)
@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("cplx", [False, True])
def test_model_extreme_ranges(what, scale_a, scale_b, out_dtype, cplx):
    if out_dtype == "float32":  # bring the same situations to float32's range
        scale_a, scale_b = (scale_a * 149) // 1074, (scale_b * 149) // 1074
    ar, ai, br, bi = _operands(((), 6, 9, 7), 1, cplx, seed=11, scale_a=scale_a, scale_b=scale_b)
    ar[2] = 0.0  # a zero row
    br[:, 3] = 0.0
    if ai is not None:
        ai[2] = 0.0
        bi[:, 3] = 0.0
    n = 17
    pre, want = _generic(ar, ai, br, bi, n, "accurate", out_dtype)
    got = model.ozaki2_product(ar, ai, br, bi, n, "accurate", out_dtype, pre)
    if out_dtype == "dd":
        ref = _exact_dd(ar, ai, br, bi, n, pre)
        for (h, l_), (rh, rl), (wh, wl) in zip(got, ref, want):
            assert _same(h, wh) and _same(l_, wl)
            assert _same(h, rh) and _same_value(l_, rl)
    else:
        for g, w in zip(got, want):
            assert _same(g, w)
    vals = np.concatenate([np.ravel(g[0] if out_dtype == "dd" else g) for g in got])
    finite = vals[np.isfinite(vals) & (vals != 0)]
    tiny = np.finfo(np.float32 if out_dtype == "float32" else np.float64).tiny
    if what.endswith("subnormal"):
        assert (np.abs(finite) < tiny).any()
    if what == "overflow":
        assert np.isinf(vals).any()


def test_model_k_blocks():
    ar, _, br, _ = _operands(((), 2, 70000, 3), 1, False, seed=5)
    pre, want = _generic(ar, None, br, None, 20, "accurate", "float64")
    got = model.ozaki2_product(ar, None, br, None, 20, "accurate", "float64", pre)
    assert _same(got[0], want[0])


def _f32_reference(y: int, e: int) -> np.float32:
    """RNE float32 of y * 2**e by brute force: the nearest of the float32 neighbours (exact
    Fraction comparisons), ties to the even significand; inf beyond the largest float32."""
    from fractions import Fraction

    x = Fraction(y) * Fraction(2) ** e
    with np.errstate(over="ignore"):
        c = np.float32(float(x)) if abs(x) < 2**200 else np.float32(np.inf if y > 0 else -np.inf)
    best = None
    for cand in (np.nextafter(c, np.float32(-np.inf)), c, np.nextafter(c, np.float32(np.inf))):
        if not np.isfinite(cand):
            continue
        d = abs(Fraction(float(cand)) - x)
        if best is None or d < best[0] or (d == best[0] and int(cand.view(np.uint32)) % 2 == 0):
            best = (d, cand)
    big = Fraction(float(np.finfo(np.float32).max)) + Fraction(2) ** (127 - 24)
    if abs(x) >= big:  # beyond max + half an ulp: RNE overflows
        return np.float32(np.inf if y > 0 else -np.inf)
    r = best[1]
    return np.float32(-0.0) if r == 0 and y < 0 else r


def test_rounding_ties_boundaries_and_dd():
    """finish() on integers built to hit ties, sticky bits, the subnormal boundary and overflow."""
    rng = np.random.default_rng(1)
    ys, es = [], []
    for _ in range(3000):
        bl = int(rng.integers(1, 157))
        y = int(rng.integers(1, 2**62)) | 1 << 61
        y = y >> max(0, 62 - bl) if bl < 62 else y << (bl - 62)
        kind = rng.integers(0, 4)
        if kind == 1:  # exact tie at 53 or 24 bits: ...1 followed by zeros
            cut = max(0, y.bit_length() - int(rng.choice([54, 25])))
            y = (y >> cut << cut) | (1 << cut >> 1) if cut else y
        elif kind == 2:  # only a far sticky bit beyond a tie
            y |= 1
        y = -y if rng.integers(0, 2) else y
        target = int(
            rng.choice([-1080, -1074, -1060, -1022, -160, -149, -126, 0, 100, 127, 128, 1023, 1024])
        )
        es.append(target - y.bit_length() + int(rng.integers(-2, 3)))
        ys.append(y)
    nw = 5
    mag = [abs(y) for y in ys]
    v = [np.array([(x >> (32 * i)) & 0xFFFFFFFF for x in mag], dtype=np.uint64) for i in range(nw)]
    neg = np.array([y < 0 for y in ys])
    off = np.array(es, dtype=np.int64)
    with np.errstate(over="ignore"):
        hi, lo = model.finish(neg, v, off, "dd")
        f32 = model.finish(neg, v, off, "float32")
        f64 = model.finish(neg, v, off, "float64")
    ref = [_round_hi_lo(y, e) for y, e in zip(ys, es)]
    assert _same(hi, np.array([h for h, _ in ref])) and _same(f64, hi)
    assert _same_value(lo, np.array([l_ for _, l_ in ref]))
    # ... and exactly the generic double-double conversion, signs of zero included
    limbs = [np.array([[(abs(y) >> (LIMB_BITS * i)) & ((1 << LIMB_BITS) - 1)] for y in ys])
             for i in range(8)]  # fmt: skip
    limbs = [np.where(neg[:, None], -x, x).astype(np.int64) for x in limbs]
    with np.errstate(over="ignore"):
        ghi, glo = rounding.unscale_dd(np, limbs, -off, np.zeros(1, dtype=np.int64))
    assert _same(hi, ghi[:, 0]) and _same(lo, glo[:, 0])
    assert _same(f32, np.array([_f32_reference(y, e) for y, e in zip(ys, es)], dtype=np.float32))


# ----------------------------------------------------------------------------------------------
# emulinalg/backends/cupy/'s host code, driven on the CPU through a stand-in for cupy
# ----------------------------------------------------------------------------------------------


def _fake_vs_generic(be, cp, ar, ai, br, bi, n, mode, out_dtype, to_dev=None):
    to_dev = to_dev or cp.asarray
    pre, want = _generic(ar, ai, br, bi, n, mode, out_dtype)
    g = [None if x is None else to_dev(x) for x in (ar, ai, br, bi)]
    got = be.ozaki2_product(*g, n, mode, out_dtype, tuple(cp.asarray(x) for x in pre))
    assert got is not None
    flat = [x for p in got for x in (p if isinstance(p, tuple) else (p,))]
    wflat = [x for p in want for x in (p if isinstance(p, tuple) else (p,))]
    assert len(flat) == len(wflat)
    for g_, w in zip(flat, wflat):
        assert _same(np.asarray(g_), w)


@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("case", [(((), 1, 1, 1), 1), (((), 7, 33, 5), 4), (((3,), 5, 21, 6), 1)],
                         ids=str)  # fmt: skip
def test_host_code_drives_the_kernels(cpu_backend, case, cplx, out_dtype):
    be, cp = cpu_backend
    shape, phi = case
    ar, ai, br, bi = _operands(shape, phi, cplx, seed=2)
    _fake_vs_generic(be, cp, ar, ai, br, bi, 17, "accurate", out_dtype)


def test_host_code_views_chunks_and_k_blocks(cpu_backend, monkeypatch):
    be, cp = cpu_backend
    ar, ai, br, bi = _operands(((), 13, 40, 9), 1, True, seed=3)
    monkeypatch.setattr(be.products, "chunk_bytes", 3000)  # one or two rows of A per chunk
    monkeypatch.setattr(be.gemm, "_K_BLOCK", 16)  # three K-blocks
    tr = {id(x): np.ascontiguousarray(x.T) for x in (ar, ai, br, bi)}

    def transposed_view(x):  # same values, rows contiguous in memory
        return cp.asarray(tr[id(x)]).T

    _fake_vs_generic(be, cp, ar, ai, br, bi, 15, "accurate", "dd", to_dev=transposed_view)
    _fake_vs_generic(be, cp, ar, None, br, None, 12, "fast", "float64",
                     to_dev=lambda x: cp.asarray(x)[::-1][::-1])  # fmt: skip
    rev = ar[::-1]  # negative row stride on the device too

    def rev_view(x):
        return cp.asarray(ar)[::-1] if x is rev else cp.asarray(x)

    _fake_vs_generic(be, cp, rev, None, br, None, 12, "fast", "float32", to_dev=rev_view)
    a3 = _operands(((4,), 6, 40, 9), 1, False, seed=8)[0]
    b3 = np.broadcast_to(br, (4,) + br.shape)  # one B for every batch: stride 0
    _fake_vs_generic(be, cp, a3, None, b3, None, 14, "accurate", "float64",
                     to_dev=lambda x: cp.broadcast_to(cp.asarray(br), b3.shape) if x is b3
                     else cp.asarray(x))  # fmt: skip


def test_host_code_magnitude_lower(cpu_backend):
    from fractions import Fraction

    be, cp = cpu_backend
    rng = np.random.default_rng(3)
    xa = rng.uniform(0, 2, size=(2, 5, 37))
    xb = rng.uniform(0, 2, size=(37, 6))
    xa[0, 0, :3] = [1e-40, 5e-324, 0.0]
    got = np.asarray(be.magnitude_lower_matmul(cp.asarray(xa), cp.asarray(xb)))
    assert got.shape == (2, 5, 6) and got.dtype == np.float64
    ref = np.matmul(xa, xb)
    assert np.all(got >= 0.97 * ref)
    for idx in np.ndindex(got.shape):
        b, i, j = idx
        exact = sum(Fraction(float(p)) * Fraction(float(q)) for p, q in zip(xa[b, i], xb[:, j]))
        assert Fraction(float(got[idx])) <= exact


@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
def test_crt_kernel_rounding_on_crafted_integers(cpu_backend, out_dtype):
    """The CRT kernel (model or CUDA source) on products whose reconstruction is a chosen
    integer: ties, sticky bits and range boundaries, against the rounding checked above."""
    be, cp = cpu_backend
    n = 20
    c = crt_constants(n)
    rng = np.random.default_rng(5)
    ys, offs = model.crafted_integers(rng, 1500, c.P.bit_length() - 3)  # |y| <= P/4
    prod = cp.asarray(model.residue_products(ys, c.moduli))
    mu = cp.asarray((-offs).astype(np.int32)[None, :])
    nu = cp.asarray(np.zeros((1, 1), dtype=np.int32))
    dt = np.float32 if out_dtype == "float32" else np.float64
    outs = [
        cp.asarray(np.zeros((1, len(ys), 1), dtype=dt))
        for _ in range(2 if out_dtype == "dd" else 1)
    ]
    be.products._crt(prod, n, False, mu, nu, 0, outs, out_dtype)
    neg, v = model.words_of(ys, crt_tables(n)["nw"])
    with np.errstate(over="ignore"):
        want = model.finish(neg, v, offs, out_dtype)
    want = want if out_dtype == "dd" else (want,)
    for g, w in zip(outs, want):
        assert _same(np.asarray(g)[0, :, 0], w)
