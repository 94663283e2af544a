"""CPU checks of the cupy backend's Scheme II kernels through their numpy model.

``gpu_kernel_model`` mirrors ``src_cuda/ozaki2_residues.cu`` and ``ozaki2_crt.cu`` operation for
operation; here it must reproduce the generic ``emulinalg.algorithm.products.product`` bit for bit
(and the exact double-double rounding for "dd"), so the algorithm of the GPU path is tested without
a GPU. ``fake_cupy`` then runs ``emulinalg/backends/cupy/``'s host code on the CPU, with the
kernels either the model or the CUDA sources themselves compiled as host C++ (g++), against the same
generic path. ``tests/test_gpu.py`` compares the real kernels with the generic path on the GPU.
"""

from __future__ import annotations

import functools

import gpu_kernel_model as model
import numpy as np
import pytest
from _helpers import certificate_counts, rounding_cases, scaled_integer, tie_operands

from emulinalg.algorithm import certificate, products, refinement, residues, rounding, scaling
from emulinalg.algorithm.certificate import Target
from emulinalg.algorithm.moduli import LIMB_BITS, MODULI, crt_constants
from emulinalg.algorithm.scaling import ozaki2_prescale, ozaki2_shifts, scale_to_integers
from emulinalg.backends import numpy as npb
from emulinalg.backends.cuda import crt_tables, crt_words, source, source_dir, tables_header
from emulinalg.inputs import phi_matrix
from emulinalg.reference import _round_hi_lo


def _bits(x):
    x = np.asarray(x)
    return x.view({8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}[x.dtype.itemsize])


def _same(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(_bits(x), _bits(y))


def _same_value(x, y):
    """Bitwise equal except that a zero may have either sign (``unscale_dd`` gives a zero
    remainder the sign of the product, ``reference._round_hi_lo`` gives +0)."""
    x, y = np.asarray(x), np.asarray(y)
    nz = (x != 0) | (y != 0)
    return np.array_equal(x, y) and _same(x[nz], y[nz])


def _operands(shape, phi, cplx, seed, scale_a=0, scale_b=0):
    batch, m, k, n = shape
    dt = "complex128" if cplx else "float64"
    a = phi_matrix(batch + (m, k), phi, dt, seed=seed)
    b = phi_matrix(batch + (k, n), phi, dt, seed=seed + 1)
    ar, br = np.ldexp(a.real, scale_a), np.ldexp(b.real, scale_b)
    if not cplx:
        return ar, None, br, None
    return ar, np.ldexp(a.imag, scale_a), br, np.ldexp(b.imag, scale_b)


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


def test_sources_inline_their_headers():
    for name in ("ozaki2_residues.cu", "ozaki2_crt.cu", "ozaki2_crt_s8.cu", "ozaki2_stats.cu",
                 "bf16_lower.cu"):  # fmt: skip
        text = source(name)
        assert '#include "' not in text and "__global__" in text


@pytest.mark.parametrize("nearest", [False, True])
@pytest.mark.parametrize("n", [2, 8, 17, 20])
@pytest.mark.parametrize("cplx", [False, True])
def test_residue_planes_equal_generic_residues(n, cplx, nearest):
    ar, ai, br, bi = _operands(((2,), 5, 37, 6), 4, cplx, seed=n)
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    c = crt_constants(n)
    mu, _ = ozaki2_shifts(np, pre, c.L, c.Q_down)
    X = [residues.split(np, scale_to_integers(np, x, mu, -1, nearest)) for x in (ar, ai)]
    planes = model.residue_planes(ar, ai, mu, c.moduli, 5, 48, nearest)
    assert not planes[..., 37:].any()
    for ell, m in enumerate(c.moduli):
        want = residues.residues(np, X[0], X[1], m)
        for p, w in enumerate(want):
            assert np.array_equal(planes[p, ell, :, :, :37], w.astype(np.int8))


def test_residues_of_extreme_integers():
    # |X| up to 2**82 (the scaling's bound for 20 moduli), negative, odd, subnormal inputs
    rng = np.random.default_rng(0)
    mant = rng.integers(1, 2**53, size=400).astype(np.float64) * rng.choice([-1, 1], size=400)
    shift = rng.integers(-20, 60, size=400)
    x = np.ldexp(mant, rng.integers(-60, 30, size=400) - shift)  # |x| 2**shift < 2**82
    x[:5] = [5e-324, -5e-324, 2.5e-310, -0.0, 0.0]
    shift[:5] = [1074 + 81, 1074 + 40, 1074, 3, 0]
    X = np.trunc(np.ldexp(x, shift))
    assert np.abs(X).max() < 2.0**83
    neg, words = model.element_words(x, shift)
    for m in MODULI:
        got = model.residue_of(neg, words, m)
        want = [int(v) % m for v in X]  # float64 holds these integers exactly
        want = np.array([w - m if w > (m - 1) // 2 else w for w in want])
        assert np.array_equal(got, want), m


def _exact_residues(x, shift, nearest, m):
    return np.array([_symmetric(scaled_integer(v, s, nearest), m) for v, s in zip(x, shift)])


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


@pytest.mark.parametrize("nearest", [False, True])
def test_element_words_round_to_nearest_or_truncate(nearest):
    """element_words rounds x 2**shift to nearest, ties to even, or toward zero, exactly as
    Python's integers: ties n + 1/2 of both parities and signs, 1/2 -> 0, 3/2 -> 2, below 1/2,
    subnormals, shifts from -1100 on, 1 to 70 bits shifted out."""
    x, shift = rounding_cases(np.random.default_rng(1))
    neg, words = model.element_words(x, shift, nearest)
    for m in MODULI:
        want = _exact_residues(x, shift, nearest, m)
        assert np.array_equal(model.residue_of(neg, words, m), want), m


@pytest.mark.parametrize("nearest", [False, True])
@pytest.mark.parametrize("cplx", [False, True])
def test_host_code_residue_kernel_rounds(cpu_backend, cplx, nearest):
    """The residue kernel (model, or the CUDA source compiled for the CPU) on the crafted
    entries, one per line with its own shift, against Python's integers."""
    be, cp = cpu_backend
    x, shift = rounding_cases(np.random.default_rng(2))
    y = x * 0.375 if cplx else None
    N = len(x)
    planes = be.products._residue_planes(
        cp.asarray(x.reshape(1, N, 1)), None if y is None else cp.asarray(y.reshape(1, N, 1)),
        (N, 1, 1), N, N, 1, 16, cp.asarray(shift.astype(np.int32).reshape(1, N)), N, 20, nearest,
    )  # fmt: skip
    planes = np.asarray(planes)
    assert planes.shape == (3 if cplx else 1, 20, 1, N, 16) and not planes[..., 1:].any()
    for ell, m in enumerate(MODULI):
        want = _exact_residues(x, shift, nearest, m)
        assert np.array_equal(planes[0, ell, 0, :, 0], want), m
        if cplx:
            want_y = _exact_residues(y, shift, nearest, m)
            assert np.array_equal(planes[1, ell, 0, :, 0], want_y), m
            assert np.array_equal(planes[2, ell, 0, :, 0], _symmetric(want + want_y, m)), m


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


@pytest.fixture(scope="module", params=["model", pytest.param("native", marks=pytest.mark.slow)])
def cpu_backend(request):
    """emulinalg/backends/cupy/ on a CPU stand-in for cupy whose kernels are the numpy model,
    or the CUDA sources themselves compiled as host C++ (needs g++ with C++20)."""
    import shutil

    import fake_cupy

    if request.param == "native" and shutil.which("g++") is None:
        pytest.skip("no g++ to compile the CUDA sources for the CPU")
    be, cp = fake_cupy.load_backend(native=request.param == "native")
    # a block per 256 threads here: few, grid-stride over the slots
    be.certificate._SAMPLE_BLOCKS = 3
    return be, cp


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


# ----------------------------------------------------------------------------------------------
# statistics (ozaki2_stats.cu): the accurate-mode prescale and the certificate
# ----------------------------------------------------------------------------------------------


def _stat_operands(shape, phi, cplx, seed, special=True):
    ar, ai, br, bi = _operands(shape, phi, cplx, seed)
    return model.special_lines(ar, ai, br, bi) if special else (ar, ai, br, bi)


def _generic_cert_backend(lower):
    """A backend surface without ``ozaki2_certificate``: the generic certificate with ``lower``
    as its ``magnitude_lower_matmul`` hook."""
    import types

    return types.SimpleNamespace(magnitude_lower_matmul=lower, native_matmul=np.matmul)


def _same_certificate(got, want):
    """A certificate hook's ``(count, beyond, patch)`` (beyond None: no entry beyond) equals the
    generic one's."""
    assert got is not None and got[0] == want[0], (got[0], want[0])
    beyond = np.zeros_like(want[1]) if got[1] is None else np.asarray(got[1])
    assert _same(beyond, want[1])
    assert (got[2] is None) == (want[2] is None), (got[2], want[2])
    assert got[2] is None or _same(np.asarray(got[2]), want[2])


def _same_prescale(got, want):
    assert len(got) == 4
    for g, w in zip(got, want):
        assert _same(np.asarray(g), np.asarray(w)), (g, w)


STAT_CASES = [  # ((batch, m, k, n), phi)
    (((), 1, 1, 1), 1),
    (((), 1, 13, 1), 0.5),
    (((), 7, 33, 5), 1),
    (((), 9, 19, 17), 4),
    (((), 6, 1, 9), 1),  # k = 1
    (((3,), 5, 21, 6), 0.5),
    (((2, 2), 4, 10, 4), 4),
    (((), 8, 700, 7), 1),  # several chunks of columns (chunk 32 below)
]


def test_exponent_and_scale_helpers():
    rng = np.random.default_rng(2)
    x = np.ldexp(rng.uniform(-1, 1, 500), rng.integers(-1100, 1024, 500))
    x[:6] = [0.0, -0.0, 5e-324, 2.0**-1022, np.nextafter(2.0**-1022, 0), 1.7e308]
    e = model.exponent_of(x)
    want = np.where(x == 0, model.INT_MIN, np.frexp(x)[1] - 1)
    assert np.array_equal(e, want)
    p = rng.integers(-1074, 1100, 500)
    v = np.ldexp(rng.uniform(0, 1, 500), np.minimum(-p + 6, 1023))
    assert _same(model.scale2(v, p), np.ldexp(v, p))


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("case", STAT_CASES, ids=str)
def test_model_prescale_equals_generic(case, cplx):
    shape, phi = case
    ar, ai, br, bi = _stat_operands(shape, phi, cplx, seed=13)
    want = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    _same_prescale(model.ozaki2_prescale(ar, ai, br, bi, k_block=16), want)


# both guarantees; the native form's rho below 1 (a blocked native GEMM, certificate.native_error)
TARGETS = [Target(24), Target(53), Target(80), Target(24, "native"), Target(53, "native", 0.5)]


@pytest.mark.parametrize("target", TARGETS, ids=str)
@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("case", STAT_CASES, ids=str)
def test_model_certificate_equals_generic(case, cplx, target):
    shape, phi = case
    ar, ai, br, bi = _stat_operands(shape, phi, cplx, seed=17 + target.bits)
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    be = _generic_cert_backend(model.magnitude_lower_matmul)
    want = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)
    mpre = model.ozaki2_prescale(ar, ai, br, bi, k_block=16)
    got = model.ozaki2_certificate(ar, ai, br, bi, mpre, target, chunk=32)
    _same_certificate(got, want)


def test_model_certificate_gemm_fallback():
    """Rows spanning 2**+-40: the bound GEMM's lower bound (fixed point per line) leaves entries
    beyond every count, so the bf16 GEMM runs; the decisions equal the generic code's, and are
    better than the bound GEMM's alone."""
    rng = np.random.default_rng(4)
    ar = np.ldexp(rng.uniform(-1, 1, (6, 40)), rng.integers(-40, 40, (6, 40)))
    br = np.ldexp(rng.uniform(-1, 1, (40, 5)), rng.integers(-40, 40, (40, 5)))
    pre = ozaki2_prescale(np, npb.int_matmul, ar, None, br, None, "accurate")
    mpre = model.ozaki2_prescale(ar, None, br, None)
    be = _generic_cert_backend(model.magnitude_lower_matmul)
    for target in (Target(53), Target(53, "native")):
        cc = certificate.cert_constants(40, target)
        _, na, nb = certificate.normalized(np, ar, None, br, None, cc.norm)
        lam = certificate.bound_lower(np, pre.lower, False)
        need_f = certificate.ozaki2_needed(np, cc, cc.cR * lam, na, nb, pre[2], pre[3])
        beyond_f = need_f == certificate.BEYOND
        assert beyond_f.any()
        want = certificate.ozaki2_moduli_needed(np, be, ar, None, br, None, pre, target)
        assert want[1].sum() < beyond_f.sum()
        _same_certificate(model.ozaki2_certificate(ar, None, br, None, mpre, target), want)


def _phi_case(cplx, seed, shape=(40, 500, 30), batch=()):
    """phi = 1 operands (batch + (m, k), batch + (k, n))."""
    m, k, n = shape
    dt = "complex128" if cplx else "float64"
    a = phi_matrix(batch + (m, k), 1, dt, seed=seed)
    b = phi_matrix(batch + (k, n), 1, dt, seed=seed + 50)
    if cplx:
        return a.real.copy(), a.imag.copy(), b.real.copy(), b.imag.copy()
    return a, None, b, None


def _exact_step_drops(ar, ai, br, bi, target):
    """Whether the certificate's exact step takes a count off the bisection's on these operands (F's
    lower bound only: the cases have no entry beyond)."""
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    cc = certificate.cert_constants(ar.shape[-1], target, ai is not None)
    _, na, nb = certificate.normalized(np, ar, ai, br, bi, cc.norm)
    R = cc.cR * certificate.bound_lower(np, pre.lower, ai is not None, pre.mixed)
    need = certificate.ozaki2_needed(np, cc, R, na, nb, pre[2], pre[3])
    assert not (need == certificate.BEYOND).any()
    top = int(need.max())
    return bool(certificate.exact_passes(np, cc, top - 1, R, na, nb, pre[2], pre[3]).all())


def _generic_counts(ar, ai, br, bi, target):
    """The generic certificate's (count, patch) as it is and its count without the refinement
    (no step: REFINE_STEPS 0)."""
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    be = _generic_cert_backend(model.magnitude_lower_matmul)
    return certificate_counts(np, be, ar, ai, br, bi, pre, target)


@functools.cache
def _seed_showing(cplx, target, shape, want, batch=()):
    """The first seed whose phi = 1 operands show ``want`` in the generic certificate (the
    cases follow the certificate's constants): "refines" (the refinement takes counts off, no
    patch), "after-step" (after a successful exact step: the suspects come from the refinement's
    own exact pass two counts below the bisection's), "patch" (a count off with a patch), "step"
    (the exact step takes a count off; batched: no refinement)."""
    for seed in range(24):
        ops = _phi_case(cplx, seed, shape, batch)
        if want == "step":
            if _exact_step_drops(*ops, target):
                return seed
            continue
        full, patch, unrefined = _generic_counts(*ops, target)
        if full == unrefined or (patch is not None) != (want == "patch"):
            continue
        if want != "after-step" or _exact_step_drops(*ops, target):
            return seed
    raise AssertionError(f"no seed shows {want!r} for {cplx, target, shape}")


# (cplx, target, shape, want): the refinement takes counts off, strict and native, also after a
# successful exact step, and with a patch
REFINE_CASES = [
    pytest.param(False, Target(53), (40, 500, 30), "refines", marks=pytest.mark.slow),
    pytest.param(True, Target(24), (40, 500, 30), "refines", marks=pytest.mark.slow),
    pytest.param(True, Target(24), (40, 500, 30), "after-step", marks=pytest.mark.slow),
    pytest.param(False, Target(24, "native"), (40, 500, 30), "refines", marks=pytest.mark.slow),
    pytest.param(True, Target(53, "native"), (40, 500, 30), "refines", marks=pytest.mark.slow),
    (True, Target(24, "native"), (30, 200, 20), "after-step"),
    (False, Target(53), (40, 500, 30), "patch"),
    (True, Target(24, "native"), (40, 500, 30), "patch"),
]


def _refined_case(cplx, target, shape, want):
    return _phi_case(cplx, _seed_showing(cplx, target, shape, want), shape)


@pytest.mark.parametrize("cplx,target,shape,want", REFINE_CASES, ids=str)
def test_refinement_lowers_the_count_and_is_certified(cplx, target, shape, want, monkeypatch):
    """The suspect refinement takes moduli off the bound GEMM's bound alone, the model takes
    the same count, mask and patch (also with one step, and with none), and, strict form, the
    count still certifies every entry but the patch's with the exact shifts and |A||B| (float64
    products of the magnitudes, line-normalized). (The native form tests its suspects against
    theta |A||B|: the generic decisions are the reference.)"""
    ar, ai, br, bi = _refined_case(cplx, target, shape, want)
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    be = _generic_cert_backend(model.magnitude_lower_matmul)
    mpre = model.ozaki2_prescale(ar, ai, br, bi)
    for steps in (0, 1, refinement.REFINE_STEPS):
        with monkeypatch.context() as mp:
            mp.setattr(refinement, "REFINE_STEPS", steps)
            want_ = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)
            _same_certificate(model.ozaki2_certificate(ar, ai, br, bi, mpre, target), want_)
        if steps == 0:
            count_f = want_[0]
    count, beyond, patch = want_
    assert count < count_f and not beyond.any() and (patch is not None) == (want == "patch")
    if target.guarantee == "native":
        return
    k = ar.shape[-1]
    cc = certificate.cert_constants(k, target, cplx)
    parts, na, nb = certificate.normalized(np, ar, ai, br, bi, cc.norm)
    mag = np.abs(parts[0] + 1j * parts[1]) if cplx else np.abs(parts[0])
    magb = np.abs(parts[2] + 1j * parts[3]) if cplx else np.abs(parts[2])
    R = cc.cR * (mag @ magb) * (1 - 2.0**-40)
    ok = certificate.exact_passes(np, cc, count, R, na, nb, pre[2], pre[3]).reshape(-1)
    if patch is not None:
        ok[patch] = True
    assert ok.all()


def test_refinement_skipped_when_too_many_suspects(monkeypatch):
    target = Target(24)
    ar, ai, br, bi = _refined_case(True, target, (40, 500, 30), "refines")
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    be = _generic_cert_backend(model.magnitude_lower_matmul)
    full = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)[0]
    monkeypatch.setattr(refinement, "REFINE_ENTRIES", 0)  # no suspect fits
    skipped = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)[0]
    assert skipped > full
    mpre = model.ozaki2_prescale(ar, ai, br, bi)
    assert model.ozaki2_certificate(ar, ai, br, bi, mpre, target)[0] == skipped


def test_model_exact_factors_equal_generic():
    """cert_exact_factors' shifts (from the exponents, one exact comparison) and factors equal
    certificate.exact_line_factors for every count and both guarantees, on line bounds at and next
    to the shifts' steps, zero (a zero line) and the extremes."""
    import array_api_compat.numpy as xnp

    from emulinalg.algorithm.moduli import MAX_MODULI, MIN_MODULI

    rng = np.random.default_rng(5)
    e = [0.0, 0.25, 0.5, 1.0, 3.75, 2.0**52, 2.0**60]
    e += list(rng.integers(1, 2**40, 200) * 0.25)
    for n in range(MIN_MODULI, MAX_MODULI + 1):
        q = crt_constants(n).Q_down
        for t in range(-25, 40):  # v 4**t == Q_down exactly, and its neighbours
            v = np.ldexp(q, -2 * t)
            if 0.25 <= v <= 2.0**60:
                e += [v, np.nextafter(v, 0), np.nextafter(v, np.inf)]
    e = np.array(e)
    for k, target, cplx in ((10, Target(53), False), (4000, Target(53), True),
                            (10**6, Target(24), False), (4000, Target(53, "native"), True),
                            (10**6, Target(24, "native"), False)):  # fmt: skip
        cc = certificate.cert_constants(k, target, cplx)
        q_down, f0 = model.exact_table(cc)
        for i, n in enumerate(range(MIN_MODULI, MAX_MODULI + 1)):
            want = certificate.exact_line_factors(xnp, cc, n, e, cc.scale)
            assert _same(model.exact_factors(e, q_down[i], f0[i]), want), (k, target, n)


def test_model_certificate_line_terms():
    """The l1 and l2 norms: the generic ones (certificate.line_norm) up to the order of the sums
    (both are upper bounds); the bf16 operands: those of the generic lower-bound hook."""
    ar, ai, br, bi = _stat_operands(((2,), 9, 1000, 7), 1, True, seed=3)
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    a = ar, ai
    s = pre[0]
    l1fac = certificate.cert_constants(1000).l1fac
    out, part = model.cert_operand(*a, s, 9, 1000, False, chunk=64)
    na, _ = model.cert_line_terms(part[None], l1fac, pre[2], 2.0**-4)  # its l1 sums only
    ea = np.expand_dims(5 - 1 - s, -1)
    arn, ain = np.ldexp(ar, -ea), np.ldexp(ai, -ea)
    want = certificate.line_norm(np, arn, ain, -1, "l1")
    assert np.allclose(na, want, rtol=1000 * 2.0**-52, atol=0)
    mag = np.maximum(np.abs(arn), np.abs(ain))
    assert np.array_equal(out, model.bf16_rz(mag))
    # the bound pass's partials (by chunks of 128 columns) and line terms, l1 and l2
    emax = model.line_max_exponent(ar, ai)
    s2, planes, sums, nz, mixed, part128 = model.bound_operand(ar, ai, emax, 9, 1008)
    assert np.array_equal(s2, s) and part128.shape == (2, 2, 8, 9)
    na128, _ = model.cert_line_terms(part128, l1fac, pre[2], 2.0**-4)
    assert np.allclose(na128, want, rtol=1000 * 2.0**-52, atol=0)
    want2 = certificate.line_norm(np, arn, ain, -1, "l2")
    na2, _ = model.cert_line_terms(part128, l1fac, pre[2], 2.0**-4, l2=True)
    assert np.allclose(na2, want2, rtol=1000 * 2.0**-52, atol=0)
    live = na128 > 0  # (a zero row: 0 both)
    assert (na2[live] < 0.9 * na128[live]).all()  # a different norm, not the l1 one
    gen, gsum, gnz = scaling.bound_operand(np, ar, ai, s, axis=-1)
    assert np.array_equal(planes[..., :1000], gen) and np.array_equal(sums, gsum)
    assert np.array_equal(nz, gnz)
    assert np.array_equal(mixed, scaling.mixed_lines(np, ar, ai, axis=-1))


@pytest.mark.parametrize("k", [1, 2, 31, 64, 1000])
def test_model_certificate_k_and_overflowing_bits(k):
    """All entries beyond (count None) at a level no count reaches; exact entries (k = 1)."""
    ar, ai, br, bi = _stat_operands(((), 5, k, 4), 1, False, seed=k)
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    mpre = model.ozaki2_prescale(ar, ai, br, bi)
    be = _generic_cert_backend(model.magnitude_lower_matmul)
    for bits in (10, 53, 120, 200):
        for target in (Target(bits), Target(bits, "native")):
            want = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)
            _same_certificate(model.ozaki2_certificate(ar, ai, br, bi, mpre, target), want)


HOST_STAT_CASES = [(((), 1, 1, 1), 1), (((), 9, 70, 17), 4), (((3,), 5, 21, 6), 0.5)]
# F's passes (bound_max, cert_entries): three groups of 128 columns, the last partial, with
# need stored 4 bytes at once (n % 4 == 0) or byte by byte; several blocks of rows, a batch
# boundary inside a block's rows
WIDE_STAT_CASES = [(((), 70, 6, 260), 1), (((2,), 37, 5, 259), 1)]


def _stat_vs_generic(be, cp, ar, ai, br, bi, targets, to_dev=None):
    """emulinalg/backends/cupy/'s prescale and certificate hooks (on the CPU stand-in) against the
    generic code, which uses the same bf16 lower-bound hook: bit for bit, per ``Target``."""
    to_dev = to_dev or cp.asarray
    want_pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    g = [None if x is None else to_dev(x) for x in (ar, ai, br, bi)]
    pre = be.ozaki2_prescale(*g, "accurate")
    assert pre is not None
    _same_prescale(pre, want_pre)
    assert be.ozaki2_prescale(*g, "fast") is None  # left to the generic code
    generic = _generic_cert_backend(be.magnitude_lower_matmul)
    for b in targets:
        want = certificate.ozaki2_moduli_needed(np, generic, ar, ai, br, bi, want_pre, b)
        _same_certificate(be.ozaki2_certificate(*g, pre, b), want)


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("case", HOST_STAT_CASES, ids=str)
def test_host_code_statistics(cpu_backend, case, cplx):
    be, cp = cpu_backend
    shape, phi = case
    ar, ai, br, bi = _stat_operands(shape, phi, cplx, seed=23)
    _stat_vs_generic(be, cp, ar, ai, br, bi, TARGETS)


@pytest.mark.parametrize("case", WIDE_STAT_CASES, ids=str)
def test_host_code_statistics_wide(cpu_backend, case):
    be, cp = cpu_backend
    ar, ai, br, bi = _stat_operands(*case, False, seed=29)
    _stat_vs_generic(be, cp, ar, ai, br, bi, (Target(24), Target(53, "native")))


def test_host_code_statistics_staged_rows(cpu_backend, monkeypatch):
    """F's passes stage the line terms of kStage rows at a time in shared memory: with kStage
    16 (the source patched), a block's rows span several stages, one boundary inside a batch
    entry and one between two."""
    be, cp = cpu_backend
    source = be.kernels._cuda.source

    def staged(name):
        code = source(name)
        return code.replace("constexpr int kStage = 256;", "constexpr int kStage = 16;")

    assert "constexpr int kStage = 256;" in source("ozaki2_stats.cu")
    monkeypatch.setattr(be.kernels._cuda, "source", staged)
    monkeypatch.setattr(be.kernels, "_modules", {})
    ar, ai, br, bi = _stat_operands(((3,), 13, 9, 10), 1, False, seed=31)
    _stat_vs_generic(be, cp, ar, ai, br, bi, (Target(24), Target(53, "native")))


@pytest.mark.parametrize("cplx,target,shape,want", REFINE_CASES, ids=str)
def test_host_code_statistics_refinement(cpu_backend, cplx, target, shape, want, monkeypatch):
    """The exact step, the suspects and their refinement steps (the sample's squares and theta:
    the native form) and the patch in the kernels, as the generic code, also with the steps
    launched one at a time (a read-back each) and none before the first read-back; also with
    no step, one step, too many suspects (the kernels refine none), and a sample of 7 suspects
    (every ceil(suspects / 7)-th in flat order: the native form)."""
    be, cp = cpu_backend
    ar, ai, br, bi = _refined_case(cplx, target, shape, want)
    _stat_vs_generic(be, cp, ar, ai, br, bi, (target,))
    for speculative in (1, 0):
        with monkeypatch.context() as mp:
            mp.setattr(be.certificate, "_SPECULATIVE_STEPS", speculative)
            _stat_vs_generic(be, cp, ar, ai, br, bi, (target,))
    limit = "SUSPECTS_MAX" if target.guarantee == "native" else "REFINE_ENTRIES"
    for name, value in (("REFINE_STEPS", 0), ("REFINE_STEPS", 1), (limit, 0),
                        ("REFINE_ENTRIES", 7)):  # fmt: skip
        with monkeypatch.context() as mp:
            mp.setattr(refinement, name, value)
            _stat_vs_generic(be, cp, ar, ai, br, bi, (target,))


def _second_pass_case(seed):
    """Complex phi = 1 operands, 41 x 300 x 31, with a zero bound-GEMM entry (the first pass
    leaves it beyond)."""
    m, k, n = 41, 300, 31
    a = phi_matrix((m, k), 1, "complex128", seed=seed)
    b = phi_matrix((k, n), 1, "complex128", seed=seed + 50)
    a[0, k // 2 :], b[: k // 2, 0] = 0, 0
    return a.real.copy(), a.imag.copy(), b.real.copy(), b.imag.copy()


@functools.cache
def _second_pass_refines():
    """(seed, target) of the first _second_pass_case whose refinement takes counts off."""
    for seed in range(10, 26):
        for target in (Target(24, "native"), Target(53, "native"), Target(24), Target(53)):
            full, _, unrefined = _generic_counts(*_second_pass_case(seed), target)
            if full < unrefined:
                return seed, target
    raise AssertionError("no second-pass case refines")


def test_host_code_statistics_refinement_second_pass(cpu_backend, monkeypatch):
    """The refinement after the bf16 GEMM pass (the GEMM and complex kernel variants), on an
    output of 41 x 31 entries (the suspect scans' last, partial group): the generic
    count, below the count without the refinement."""
    be, cp = cpu_backend
    seed, target = _second_pass_refines()
    ar, ai, br, bi = _second_pass_case(seed)
    calls = []
    real = be.gemm._bf16_gemm
    monkeypatch.setattr(be.certificate, "_bf16_gemm", lambda *x: calls.append(1) or real(*x))
    targets = tuple(dict.fromkeys((Target(24), Target(53, "native"), target)))
    _stat_vs_generic(be, cp, ar, ai, br, bi, targets)
    assert calls  # the second pass ran
    dev = [cp.asarray(x) for x in (ar, ai, br, bi)]
    pre = be.ozaki2_prescale(*dev, "accurate")
    count = be.ozaki2_certificate(*dev, pre, target)[0]
    monkeypatch.setattr(refinement, "REFINE_STEPS", 0)
    assert be.ozaki2_certificate(*dev, pre, target)[0] > count


@pytest.mark.parametrize("which", ["real-part", "imag-a"])
def test_host_code_statistics_complex_one_part(cpu_backend, which):
    """Complex operands whose entries have one part zero (real data held as complex, a purely
    imaginary A), one row with both parts: the mixed counts make the kernels' lower bound the
    generic one (2**-10 where neither line has such an entry)."""
    be, cp = cpu_backend
    rng = np.random.default_rng(7)
    ar, br = rng.standard_normal((9, 40)), rng.standard_normal((40, 7))
    ai, bi = np.zeros_like(ar), np.zeros_like(br)
    if which == "imag-a":
        ar, ai = ai, ar
    (ai if which == "real-part" else ar)[2] = rng.standard_normal(40)  # row 2: both parts
    _stat_vs_generic(be, cp, ar, ai, br, bi, (Target(24), Target(53, "native")))
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    lam = certificate.bound_lower(np, pre.lower, True, pre.mixed)
    loose = certificate.bound_lower(np, pre.lower, True)
    assert np.array_equal(lam[2], loose[2]) and np.array_equal(lam[3:], 2.0 * loose[3:])


def test_host_code_statistics_views_chunks_and_k_blocks(cpu_backend, monkeypatch):
    be, cp = cpu_backend
    monkeypatch.setattr(be.statistics, "_STAT_CHUNK", 32)  # three chunks of columns
    monkeypatch.setattr(be.gemm, "_K_BLOCK", 16)  # five K-blocks of the bound GEMM
    ar, ai, br, bi = _stat_operands(((), 13, 70, 9), 1, True, seed=3)
    tr = {id(x): np.ascontiguousarray(x.T) for x in (ar, ai, br, bi)}

    def transposed_view(x):  # same values, rows contiguous in memory
        return cp.asarray(tr[id(x)]).T

    _stat_vs_generic(be, cp, ar, ai, br, bi, (Target(53), Target(53, "native")),
                     to_dev=transposed_view)  # fmt: skip
    rev = ar[::-1]  # negative row stride on the device too

    def rev_view(x):
        return cp.asarray(ar)[::-1] if x is rev else cp.asarray(x)

    _stat_vs_generic(be, cp, rev, None, br, None, (Target(24), Target(80)), to_dev=rev_view)
    a3 = _stat_operands(((4,), 6, 40, 9), 1, False, seed=8)[0]
    b2 = _stat_operands(((), 6, 40, 9), 1, False, seed=9)[2]
    b3 = np.broadcast_to(b2, (4,) + b2.shape)  # one B for every batch: stride 0

    def bcast(x):
        return cp.broadcast_to(cp.asarray(b2), b3.shape) if x is b3 else cp.asarray(x)

    _stat_vs_generic(be, cp, a3, None, b3, None, (Target(53, "native"),), to_dev=bcast)


@pytest.mark.parametrize("warps", [1, 3, 100])
@pytest.mark.parametrize("dtype, n", [("float64", 33), ("float64", 36), ("float32", 36)])
@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_host_code_bound_planes_warps(cpu_backend, cplx, dtype, n, warps, monkeypatch):
    """bound_operand on a grid of `warps` warps (k = 170, padded to 176: 6 column tiles, the last
    one half padding, in 2 chunks of 4 and 2 tiles; 2 x 2 row tiles for A, 2 x 2 for B: 8 chunks,
    so a warp's share starts and ends inside row tiles, or is one chunk) over a batch of 2: the
    shifts, int8 operand, line terms and l1 partials of A's rows (k contiguous) and of B's
    columns (lines contiguous), the model's bit for bit. B's rows of 33 entries are not 16-byte
    aligned (entry by entry loads), rows of 36 are; A's rows are 172 entries apart (16-byte
    copies, but for a chunk that k = 170 cuts, float32)."""
    be, cp = cpu_backend
    monkeypatch.setattr(be.statistics, "_BOUND_WARPS", warps)
    # float32: the special lines' 2**+-300 would not fit; a zero row, a subnormal, a tiny column
    ops64 = _stat_operands(((2,), 37, 170, n), 1, cplx, seed=5, special=dtype == "float64")
    ar, ai, br, bi = (None if x is None else x.astype(dtype) for x in ops64)
    if dtype == "float32":
        ar[0, 1] = 0
        ar[1, 2, 3] = np.float32(1e-42)
        br[:, :, 4] *= np.float32(2.0**-100)

    def pitched(x):  # A's rows 172 entries apart: 16-byte aligned, the last chunk cut (float32)
        buf = cp.asarray(np.zeros(x.shape[:-1] + (172,), dtype=x.dtype))
        buf[..., :170] = x
        return buf[..., :170]

    ops = be.kernels._Operands(*(None if x is None else (pitched(x) if i < 2 else cp.asarray(x))
                         for i, x in enumerate((ar, ai, br, bi))))  # fmt: skip
    assert ops.a_strides == (37 * 172, 172, 1)
    B, m, k, kp, n_p = ops.B, ops.m, ops.k, ops.kp, ops.n_p
    assert kp % 32 != 0 and ops.b_strides[1] == 1 and n_p == (36 if n == 33 else n)
    sides = (
        (ops.a, ops.a_strides, m, m, (ar, ai)),
        (ops.b, ops.b_strides, n, n_p, [None if x is None else np.swapaxes(x, -1, -2)
                                        for x in (br, bi)]),
    )  # fmt: skip
    assert be.statistics._chunk_aligned(*ops.a, ops.a_strides)
    assert be.statistics._chunk_aligned(*ops.b, ops.b_strides) == (n == 36)
    for dev, strides, R, Rpad, (X, Xi) in sides:
        X, Xi = (None if x is None else x.astype(np.float64) for x in (X, Xi))
        emax = model.line_max_exponent(X, Xi)
        got = be.statistics._bound_planes(*dev, strides, B, R, Rpad, k, kp, cp.asarray(emax))
        want = model.bound_operand(X, Xi, emax, Rpad, kp)
        shift, planes, sums, nz, mixed, partial = (np.asarray(x) for x in got)
        assert _same(shift, want[0]) and _same(planes[0, 0], want[1])
        for g, w in zip((sums, nz, mixed), want[2:5]):
            assert _same(g, w.astype(np.uint64))
        assert _same(partial, want[5])


@pytest.mark.parametrize("warps", [1, 2, 5])
@pytest.mark.parametrize("R, Rpad", [(32, 36), (32, 64), (33, 40)])
def test_host_code_bound_planes_padded_rows(cpu_backend, R, Rpad, warps, monkeypatch):
    """bound_operand with padding rows (Rpad > R) over a batch of 3: where R is a multiple of 32,
    a row tile of padding rows is followed by batch b + 1's first rows, whose line index b R + r
    the padding rows' b R + R + l would equal; a warp walking from one into the other must still
    take them as a new row tile (shifts, line terms, int8 values and partials as the model's)."""
    be, cp = cpu_backend
    monkeypatch.setattr(be.statistics, "_BOUND_WARPS", warps)
    B, C, Cp = 3, 40, 48
    X = np.random.default_rng(R + Rpad).standard_normal((B, R, C))
    X[1] *= 2.0**40  # batches of different exponents: a wrong shift shows
    emax = model.line_max_exponent(X, None)
    want = model.bound_operand(X, None, emax, Rpad, Cp)
    got = be.statistics._bound_planes(cp.asarray(X), None, (R * C, C, 1), B, R, Rpad, C, Cp,
                           cp.asarray(emax))  # fmt: skip
    shift, planes, sums, nz, mixed, partial = (np.asarray(x) for x in got)
    assert _same(shift, want[0]) and _same(planes[0, 0], want[1])
    for g, w in zip((sums, nz, mixed), want[2:5]):
        assert _same(g, w.astype(np.uint64))
    assert _same(partial, want[5])


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_host_code_line_scan(cpu_backend, cplx):
    """line_scan (the engine's NaN/Inf check fused with the prescale's first pass): its line
    exponents are the model's, the prescale given them equals the generic one, and a NaN or
    Inf in any part of a line makes it not finite (exponent 1024 on that line)."""
    be, cp = cpu_backend
    ar, ai, br, bi = _stat_operands(((), 13, 70, 9), 1, cplx, seed=4)
    g = [None if x is None else cp.asarray(x) for x in (ar, ai, br, bi)]
    finite, (ea, eb) = be.line_scan(*g)
    assert finite is True
    ta = [None if x is None else x[None] for x in (ar, ai)]
    tb = [None if x is None else np.swapaxes(x, -1, -2)[None] for x in (br, bi)]
    assert _same(np.asarray(ea), model.line_max_exponent(*ta))
    assert _same(np.asarray(eb), model.line_max_exponent(*tb))
    want = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    _same_prescale(be.ozaki2_prescale(*g, "accurate", exponents=(ea, eb)), want)
    for where, value in (("a", np.nan), ("b", np.inf), ("a", -np.inf)):
        x = [None if v is None else v.copy() for v in (ar, ai, br, bi)]
        if where == "a":
            x[1 if cplx else 0][2, 5] = value
        else:
            x[2][7, 4] = value
        finite, (ea, eb) = be.line_scan(*[None if v is None else cp.asarray(v) for v in x])
        assert finite is False
        assert (np.asarray(ea)[0, 2] if where == "a" else np.asarray(eb)[0, 4]) == 1024
    assert be.line_scan(cp.asarray(ar.astype(np.float32)), None, g[2], None) is None


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_host_code_line_scan_prepares_prescale(cpu_backend, cplx):
    """line_scan(prepare=True) prepares the prescale's first launches; the prescale given those
    exponents takes them once and equals the generic one; with other arrays (the engine's
    float64 parts where the scan read float32), or a second time, it prepares its own."""
    be, cp = cpu_backend
    ar, ai, br, bi = _stat_operands(((2,), 13, 70, 9), 1, cplx, seed=6)
    g = [None if x is None else cp.asarray(x) for x in (ar, ai, br, bi)]
    want = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    finite, exps = be.line_scan(*g, prepare=True)
    assert finite is True and exps.prep is not None and exps.prep.matches(*g)
    assert be.line_scan(*g)[1].prep is None  # not asked: nothing prepared
    pre = be.ozaki2_prescale(*g, "accurate", exponents=exps)
    _same_prescale(pre, want)
    assert exps.prep is None  # taken once
    # the certificate on the prepared prescale: the prescale's own certificate's count and mask
    for target in (Target(24), Target(53, "native")):
        got = be.ozaki2_certificate(*g, pre, target)
        ref = be.ozaki2_certificate(*g, be.ozaki2_prescale(*g, "accurate"), target)
        assert got[0] == ref[0]
        assert (got[1] is None) == (ref[1] is None)
        if got[1] is not None:
            assert _same(np.asarray(got[1]), np.asarray(ref[1]))
    _same_prescale(be.ozaki2_prescale(*g, "accurate", exponents=exps), want)
    other = [None if x is None else x.copy() for x in g]
    finite, exps = be.line_scan(*g, prepare=True)
    assert not exps.prep.matches(*other)
    _same_prescale(be.ozaki2_prescale(*other, "accurate", exponents=exps), want)
    assert exps.prep is None
    finite, exps = be.line_scan(*g, prepare=True)
    assert be.ozaki2_prescale(*g, "fast", exponents=exps) is None and exps.prep is None


def test_host_code_statistics_decline(cpu_backend, monkeypatch):
    be, cp = cpu_backend
    ar, _, br, _ = _stat_operands(((), 4, 8, 5), 1, False, seed=1)
    g = cp.asarray(ar), None, cp.asarray(br), None
    pre = be.ozaki2_prescale(*g, "accurate")
    assert be.ozaki2_certificate(*g, None, Target(53)) is None
    a32 = cp.asarray(ar.astype(np.float32))
    assert be.ozaki2_prescale(a32, None, g[2], None, "accurate") is None
    monkeypatch.setenv("EMULINALG_CUPY_KERNELS", "0")
    assert be.ozaki2_prescale(*g, "accurate") is None
    assert be.ozaki2_certificate(*g, pre, Target(53)) is None


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_engine_choose_uses_the_hooks(cpu_backend, cplx):
    """emulinalg._engine._choose with the hooks equals it without them (the generic code with
    the same bf16 lower bound): scheme, prescale and mask."""
    import types

    from emulinalg import _engine
    from emulinalg._precision import Level

    be, cp = cpu_backend
    ar, ai, br, bi = _stat_operands(((2,), 11, 45, 8), 1, cplx, seed=31)
    generic = types.SimpleNamespace(
        int_matmul=npb.int_matmul, magnitude_lower_matmul=be.magnitude_lower_matmul,
        native_matmul=np.matmul,
    )  # fmt: skip
    g = [None if x is None else cp.asarray(x) for x in (ar, ai, br, bi)]
    for level in (Level(53, "float64"), Level(24, "float32"), Level(80, "80 bits")):
        want = _engine._choose(np, generic, ar, ai, br, bi, level, "ozaki2", "float64")
        got = _engine._choose(np, be, *g, level, "ozaki2", "float64")
        assert got[0] == want[0]
        _same_prescale(got[1], want[1])
        beyond = np.zeros_like(want[2]) if got[2] is None else np.asarray(got[2])  # None: none
        assert _same(beyond, want[2])
        assert (got[3] is None) == (want[3] is None)  # the patch
        assert got[3] is None or _same(np.asarray(got[3]), want[3])


def test_engine_run_uses_the_prescale_hook(cpu_backend, monkeypatch):
    """emulinalg._engine._run for an explicit accurate-mode scheme takes the prescale from the
    hook (then the fused product) and equals the generic numpy product bit for bit."""
    import types

    from emulinalg import _engine
    from emulinalg._precision import OzakiII

    be, cp = cpu_backend
    calls = []
    real = be.ozaki2_prescale
    monkeypatch.setattr(be, "ozaki2_prescale", lambda *a: calls.append(a[-1]) or real(*a))
    generic = types.SimpleNamespace(int_matmul=npb.int_matmul, native_matmul=np.matmul)
    ar, ai, br, bi = _stat_operands(((), 9, 30, 7), 1, True, seed=5)
    g = [cp.asarray(x) for x in (ar, ai, br, bi)]
    for mode in ("accurate", "fast"):
        scheme = OzakiII(moduli=13, mode=mode)
        with npb.quiet():
            want = _engine._run(np, generic, ar, ai, br, bi, scheme, "float64", None)[0]
        got = _engine._run(np, be, *g, scheme, "float64", None)[0]
        for x, y in zip(got, want):
            assert _same(np.asarray(x), y)
    assert calls == ["accurate", "fast"]


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize(
    "second_pass", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["one-pass", "two-pass"]
)
def test_host_code_statistics_float32(cpu_backend, cplx, second_pass):
    """narrow_statistics: line_scan, the prescale and the certificate given float32 operands
    (complex64: the strided real and imaginary views) equal the generic code on their float64
    copies, with zero, float32-subnormal and tiny lines; two-pass: a zero bound-GEMM entry
    leaves entries beyond on the first pass (the bf16 pass then reads float64 copies)."""
    be, cp = cpu_backend
    assert be.narrow_statistics
    m, k, n = (41, 300, 31) if second_pass else (9, 40, 11)
    ar, ai, br, bi = _stat_operands(((), m, k, n), 1, cplx, seed=41, special=False)
    narrow = [None if x is None else x.astype(np.float32) for x in (ar, ai, br, bi)]
    narrow[0][1] = 0  # a zero row
    narrow[0][2, 3] = np.float32(1e-42)  # float32 subnormal
    narrow[2][:, 4] *= np.float32(2.0**-100)  # a tiny column
    if second_pass:
        for x in narrow[:2] if cplx else narrow[:1]:
            x[0, k // 2 :] = 0
        for x in narrow[2:] if cplx else narrow[2:3]:
            x[: k // 2, 0] = 0
    wide = [None if x is None else x.astype(np.float64) for x in narrow]
    if cplx:
        a = cp.asarray((narrow[0] + 1j * narrow[1]).astype(np.complex64))
        b = cp.asarray((narrow[2] + 1j * narrow[3]).astype(np.complex64))
        dev = [a.real, a.imag, b.real, b.imag]
        assert dev[0].dtype == np.float32 and dev[0].strides[-1] == 8  # views, not copies
    else:
        dev = [cp.asarray(narrow[0]), None, cp.asarray(narrow[2]), None]
    finite, (ea, eb) = be.line_scan(*dev)
    finite64, (ea64, eb64) = be.line_scan(*(None if x is None else cp.asarray(x) for x in wide))
    assert finite and finite64
    assert _same(np.asarray(ea), np.asarray(ea64)) and _same(np.asarray(eb), np.asarray(eb64))
    want_pre = ozaki2_prescale(np, npb.int_matmul, *wide, "accurate")
    pre = be.ozaki2_prescale(*dev, "accurate", exponents=(ea, eb))
    _same_prescale(pre, want_pre)
    generic = _generic_cert_backend(be.magnitude_lower_matmul)
    calls = []
    real = be.gemm._bf16_gemm
    be_gemm = lambda *x: calls.append(1) or real(*x)  # noqa: E731
    try:
        be.certificate._bf16_gemm = be_gemm
        for target in (Target(24), Target(53), Target(24, "native"), Target(53, "native")):
            want = certificate.ozaki2_moduli_needed(np, generic, *wide, want_pre, target)
            _same_certificate(be.ozaki2_certificate(*dev, pre, target), want)
    finally:
        be.certificate._bf16_gemm = real
    assert bool(calls) == second_pass


def test_engine_hook_operands():
    """_engine._hook_operands: float32 and complex64 inputs' own parts (views) for a backend
    with narrow_statistics, the float64 parts otherwise."""
    import types

    from emulinalg import _engine

    narrow = types.SimpleNamespace(narrow_statistics=True)
    a32 = np.ones((3, 4), dtype=np.float32)
    parts = (a32.astype(np.float64), None, a32.astype(np.float64), None)
    got = _engine._hook_operands(np, narrow, a32, a32, parts, "float32")
    assert got[0] is a32 and got[1] is None and got[2] is a32
    c64 = (a32 + 2j * a32).astype(np.complex64)
    got = _engine._hook_operands(np, narrow, c64, c64, parts, "float32")
    assert got[0].dtype == np.float32 and np.shares_memory(got[1], c64)
    assert _engine._hook_operands(np, types.SimpleNamespace(), a32, a32, parts, "float32") is parts
    a64 = parts[0]
    assert _engine._hook_operands(np, narrow, a64, a64, parts, "float64") is parts


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_engine_choose_float32_hook_operands(cpu_backend, cplx):
    """_engine._choose given float32 hook operands equals it given their float64 copies."""
    from emulinalg import _engine
    from emulinalg._precision import Level

    be, cp = cpu_backend
    ops = _stat_operands(((2,), 11, 45, 8), 1, cplx, seed=37, special=False)
    narrow = [None if x is None else cp.asarray(x.astype(np.float32)) for x in ops]
    wide = [None if x is None else cp.asarray(np.asarray(x).astype(np.float64)) for x in narrow]
    for level in (Level(24, "float32"), Level(53, "float64")):
        want = _engine._choose(np, be, *wide, level, "ozaki2", "float32")
        got = _engine._choose(np, be, *wide, level, "ozaki2", "float32", None, tuple(narrow))
        assert got[0] == want[0]
        _same_prescale(got[1], want[1])
        assert (got[2] is None) == (want[2] is None)


def test_cert_operand_takes_float64_only(cpu_backend):
    """cert_operand (the certificate's bf16 pass) reads float64: a float32 operand is refused,
    not read at the wrong width (the certificate hands it float64 copies)."""
    be, cp = cpu_backend
    a = cp.asarray(np.ones((4, 16), dtype=np.float32))
    ops = be.kernels._Operands(a, None, cp.asarray(np.ones((16, 4))), None)
    shift = cp.asarray(np.zeros(4, dtype=np.int64))
    with pytest.raises(TypeError, match="float64"):
        be.statistics._cert_operand(*ops.a, ops.a_strides, 1, 4, 4, 16, 16, False, shift)
