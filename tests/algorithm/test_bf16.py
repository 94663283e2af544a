"""BF16 slice schedules (``emulinalg.BF16x3``, ``emulinalg.BF16xN``): the generic code against the
exact product and a derived truncation bound, and the amx backend's C++ split and slice-product
tile GEMM (on the scalar tile model everywhere, on AMX where present) against the generic code
and against the plain BF16 tile GEMM on interleaved operands."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import emulinalg
from emulinalg.algorithm import bf16
from emulinalg.reference import exact_matmul

try:
    from emulinalg import _amx
except ImportError:  # pragma: no cover - only where the module is not built
    _amx = None

needs_amx_module = pytest.mark.skipif(
    _amx is None or not hasattr(_amx, "gemm_bf16_slices"),
    reason="emulinalg._amx (with the BF16 slice kernels) is not built",
)
AMX_AVAILABLE = _amx is not None and _amx.available()
amx_only = pytest.mark.skipif(
    not AMX_AVAILABLE,
    reason=f"no usable AMX here: {_amx.reason() if _amx is not None else 'not built'}",
)
MODEL_AND_AMX = pytest.mark.parametrize(
    "emulate", [True, pytest.param(False, marks=[pytest.mark.amx, amx_only])], ids=["model", "amx"]
)


def _wide(rng, shape, span):
    """Gaussian entries times 2**U(-span, span): rows/columns with spread exponents."""
    return rng.standard_normal(shape) * np.exp2(rng.integers(-span, span + 1, size=shape))


# ---- specs -----------------------------------------------------------------------------------


def test_specs_validate_and_print():
    assert str(emulinalg.BF16xN()) == "BF16xN(slices=6, products=10)"
    assert emulinalg.BF16xN(slices=6, products=21).diagonals == 6
    assert str(emulinalg.BF16x3()) == "BF16x3()" and emulinalg.BF16x3().gemms == 6
    for bad in (dict(products=7), dict(slices=3, products=10), dict(slices=0), dict(slices=9)):
        with pytest.raises(ValueError, match="BF16xN"):
            emulinalg.BF16xN(**bad)
    with pytest.raises(TypeError):
        emulinalg.BF16xN(slices=6.0)
    assert bf16.pairs(emulinalg.BF16xN(6, 6)) == ((0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (2, 0))


# ---- generic code against the exact product --------------------------------------------------


def _fixed_bound(a, b, spec):
    """|C - AB| bound of BF16xN on real operands: omitted diagonals t >= d (at most t + 1
    pairs of entries <= 2**-8t each, scaled), the residuals below s slices, and the float64
    additions of the (chunk, pair) sums; in units of each entry's line scales."""
    s, d, k = spec.slices, spec.diagonals, a.shape[1]
    ea = bf16.line_exponents(np, a, None, axis=-1)
    eb = bf16.line_exponents(np, b, None, axis=-2)
    scale = np.exp2(ea[:, None] + eb[None, :])
    trunc = sum((t + 1) * 2.0 ** (-8 * t) for t in range(d, 2 * s - 1)) + 3 * 2.0 ** (-8 * s)
    adds = -(-k // bf16.WIDEN_K) * spec.products * 2.0**-52
    return k * scale * (trunc + adds)


@pytest.mark.parametrize("products", [1, 6, 10, 15, 21])
@pytest.mark.parametrize("span", [0, 20])
def test_bf16xn_within_its_truncation_bound(products, span, rng):
    spec = emulinalg.BF16xN(slices=6, products=products)
    a, b = _wide(rng, (23, 1500), span), _wide(rng, (1500, 19), span)
    c = emulinalg.matmul(a, b, precision=spec)
    hi, lo = exact_matmul(a, b)
    err = np.abs((c - hi) - lo)
    assert np.all(err <= _fixed_bound(a, b, spec)), np.max(err / _fixed_bound(a, b, spec))
    assert emulinalg.last_plan().scheme == str(spec)


def test_bf16xn_more_products_more_bits(rng):
    """Each diagonal adds about 8 bits: the measured error falls by at least 2**6 per step."""
    a, b = rng.standard_normal((30, 700)), rng.standard_normal((700, 30))
    hi, lo = exact_matmul(a, b)
    errs = [
        np.max(np.abs((emulinalg.matmul(a, b, precision=emulinalg.BF16xN(6, p)) - hi) - lo))
        for p in (3, 6, 10, 15, 21)
    ]
    assert all(e2 <= e1 * 2.0**-6 for e1, e2 in itertools.pairwise(errs)), errs


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def _bf16x3_bound(a, b):
    """(6k + 8) 2**-24 |A||B| (split residuals 2**-24, omitted products, FP32 sums) plus the
    products flushed below 2**-126 of the line scales and the output's own rounding."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    k = a.shape[1]
    ea = bf16.line_exponents(np, a, None, axis=-1)
    eb = bf16.line_exponents(np, b, None, axis=-2)
    flush = k * 2.0**-126 * np.exp2(ea[:, None] + eb[None, :])
    return (6 * k + 8) * 2.0**-24 * (np.abs(a) @ np.abs(b)) + flush + 2.0**-149


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("span", [0, 30, 70])
def test_bf16x3_fp32_level(dtype, span, rng):
    """Within the FP32-level bound, whatever the exponent spread of rows and columns (70: many
    products flushed below 2**-126 of their line scales)."""
    a = _wide(rng, (17, 400), span).astype(dtype)
    b = _wide(rng, (400, 21), span).astype(dtype)
    c = emulinalg.matmul(a, b, precision=emulinalg.BF16x3())
    assert c.dtype == dtype
    hi, lo = exact_matmul(a, b)
    big = float(np.finfo(dtype).max)
    fits = np.abs(hi) < big / 2  # beyond: inf, as native
    err = np.abs((c.astype(np.float64) - hi) - lo)
    assert np.all(err[fits] <= _bf16x3_bound(a, b)[fits])
    assert np.all(np.isinf(c[np.abs(hi) > 2 * big]))


def test_bf16x3_flushes_tiny_scaled_products():
    """A product 2**-202 below its row's and column's maxima is lost (FP32 tiles flush it), as
    the docstring says; float64 would keep it."""
    a = np.asarray([[2.0**60, 2.0**-40, 0.0]])
    b = np.asarray([[0.0], [2.0**-40], [2.0**60]])
    assert emulinalg.matmul(a, b, precision=emulinalg.BF16x3())[0, 0] == 0.0
    assert emulinalg.matmul(a, b, precision=emulinalg.BF16xN(6, 21))[0, 0] == 0.0  # digits too
    assert (a @ b)[0, 0] == 2.0**-80


def test_complex_4m(rng):
    a = rng.standard_normal((9, 1100)) + 1j * rng.standard_normal((9, 1100))
    b = rng.standard_normal((1100, 7)) - 1j * rng.standard_normal((1100, 7))
    hi, lo = exact_matmul(a, b)
    spec = emulinalg.BF16xN(6, 21)
    c = emulinalg.matmul(a, b, precision=spec)
    # |Re|, |Im| each of two real products with the shared line scales of max(|re|, |im|)
    mag = np.maximum(np.abs(a.real), np.abs(a.imag)), np.maximum(np.abs(b.real), np.abs(b.imag))
    bound = 2 * _fixed_bound(mag[0], mag[1], spec)
    assert np.all(np.abs((c.real - hi.real) - lo.real) <= bound)
    assert np.all(np.abs((c.imag - hi.imag) - lo.imag) <= bound)
    assert emulinalg.last_plan().gemms == 4 * 21


def test_nonfinite_rows_match_native(rng):
    a, b = rng.standard_normal((5, 40)), rng.standard_normal((40, 4))
    a[2, 3] = np.nan
    b[7, 1] = np.inf
    c = emulinalg.matmul(a, b, precision=emulinalg.BF16xN(6, 15))
    with np.errstate(invalid="ignore"):
        want = a @ b
    np.testing.assert_array_equal(np.isnan(c), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(c), np.isinf(want))
    assert "non-finite" in emulinalg.last_plan().fallback


# ---- the C++ stages and the slice-product kernel ----------------------------------------------


def _edge_matrix(rng, shape):
    x = _wide(rng, shape, 40)
    x[0] = 0.0  # a zero line
    x[1, :3] = [5e-324, -2.0**-1030, 1e300]  # subnormals next to a huge entry
    x[2] = -0.0
    x[3] *= 2.0**900
    x[4] *= 2.0**-1000
    x[5] = rng.uniform(-0.5, 0.5, size=shape[1])  # line maximum 0.75: scaled by 1
    x[5, 1] = 0.75
    x[5, 0] = 2.0**-126 * (1 - 2.0**-10)  # rounds up to the smallest normal BF16
    x[5, 2] = -(2.0**-126) * (1 - 2.0**-7)  # a second slice just below it
    return x


@needs_amx_module
@pytest.mark.parametrize("how", ["fixed", "float"])
@pytest.mark.parametrize("rows", [True, False])
def test_split_equals_the_generic_split(how, rows, rng):
    x = _edge_matrix(rng, (37, 29))
    if not rows:
        x = np.ascontiguousarray(x.T)
    im = _wide(rng, x.shape, 5)
    view = np.asfortranarray(x)[::-1]  # strided input
    axis = -1 if rows else -2
    s = 6 if how == "fixed" else 3
    for re, imag in ((x, None), (view, None), (x, im), (view, im)):
        pr, pi, e = _amx.bf16_split(re, s, rows, how, imag)
        want_e = bf16.line_exponents(np, re, imag, axis=axis)
        np.testing.assert_array_equal(e, want_e)
        for got, part in ((pr, re), (pi, imag)):
            if part is None:
                assert got is None
                continue
            want = bf16.split(np, part, want_e, axis, s, how)
            vals = (got.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            np.testing.assert_array_equal(vals, np.stack(want))
            np.testing.assert_array_equal(np.signbit(vals), np.signbit(np.stack(want)))


def _layout_a(planes, blocks, ktiles):
    """pack_a's tile layout of planes (slices, m, k), zero padded: tile (ib, kt) after tile,
    its row r = A[16 ib + r, 32 kt : 32 kt + 32]."""
    s, m, k = planes.shape
    p = np.zeros((s, blocks * 16, ktiles * 32), np.uint16)
    p[:, :m, :k] = planes
    return p.reshape(s, blocks, 16, ktiles, 32).transpose(0, 1, 3, 2, 4).reshape(s, -1)


def _layout_b(planes, blocks, ktiles):
    """pack_b_vnni's layout of planes (slices, k, n), zero padded: tile (jb, kt) after tile,
    its row r = for c < 16 the pair B[32 kt + 2 r + g, 16 jb + c], g = 0, 1."""
    s, k, n = planes.shape
    p = np.zeros((s, ktiles * 32, blocks * 16), np.uint16)
    p[:, :k, :n] = planes
    return p.reshape(s, ktiles, 16, 2, blocks, 16).transpose(0, 4, 1, 2, 5, 3).reshape(s, -1)


PACK_CASES = [  # (m, k, n), complex, streaming stores, operand layout: large, small, large again
    ((70, 130, 45), False, None, "c"),
    ((6, 5, 7), True, True, "c"),
    ((33, 64, 17), False, True, "f"),
    ((70, 130, 45), True, False, "strided"),
    ((40, 300, 66), False, True, "c"),
    ((7, 3, 6), False, None, "c"),
]


@needs_amx_module
@pytest.mark.parametrize("how", ["fixed", "float"])
def test_pack_writes_the_tile_layout_of_the_split(how, rng):
    """bf16_pack's panels are, bit for bit, the tile layouts of bf16_split's planes (which equal
    the generic split): zero padding included, -Bi being Bi with every sign bit flipped, with and
    without streaming stores, in cached buffers that earlier (larger) calls left dirty."""
    s = 6 if how == "fixed" else 3
    for (m, k, n), cplx, stream, order in PACK_CASES:
        a, b = _edge_matrix(rng, (m, k)), _edge_matrix(rng, (n, k)).T
        ai = _wide(rng, (m, k), 30) if cplx else None
        bi = _wide(rng, (k, n), 30) if cplx else None
        if order == "f":
            a, b = np.asfortranarray(a), np.asfortranarray(b)
        elif order == "strided":
            a, b = np.asfortranarray(a)[::-1], np.ascontiguousarray(b)[:, ::-1]
        p = _amx.bf16_pack(a, b, s, how, ai, bi, stream=stream)
        pa, pai, ea = _amx.bf16_split(a, s, True, how, ai)
        pb, pbi, eb = _amx.bf16_split(b, s, False, how, bi)
        np.testing.assert_array_equal(p.ea, bf16.line_exponents(np, a, ai, axis=-1))
        np.testing.assert_array_equal(p.eb, bf16.line_exponents(np, b, bi, axis=-2))
        np.testing.assert_array_equal(p.ea, ea)
        np.testing.assert_array_equal(p.eb, eb)
        kt = -(-k // 32)
        want_a = _layout_a(pa if not cplx else np.concatenate([pa, pai]), -(-m // 32) * 2, kt)
        want_b = [_layout_b(pb, -(-n // 32) * 2, kt)]
        if cplx:
            lb = _layout_b(pbi, -(-n // 32) * 2, kt)
            want_b += [lb, lb ^ np.uint16(0x8000)]
        want_b = np.concatenate(want_b)
        for side, want in (("a", want_a), ("b", want_b)):
            for i, w in enumerate(want):
                np.testing.assert_array_equal(p.panel(side, i), w, err_msg=f"{side}[{i}]")
        with pytest.raises(ValueError, match="panel index"):
            p.panel("a", len(want_a))


@needs_amx_module
def test_pack_reuses_cached_panels(rng):
    """A repeated product of one size writes into the panels the last one left in the cache (no
    new memory, the same bits); a larger one replaces them (cached plus in use never exceeds
    the most that was in use at once, also while it runs); clear_cache gives them back."""
    a, b = _wide(rng, (64, 256), 4), _wide(rng, (256, 48), 4)
    pairs = np.asarray(bf16.pairs(emulinalg.BF16xN(6, 6)), np.int32)
    first = _amx.bf16_multiply(_amx.bf16_pack(a, b, 6, "fixed"), pairs, emulate=True)
    again = _amx.bf16_multiply(_amx.bf16_pack(a, b, 6, "fixed"), pairs, emulate=True)
    np.testing.assert_array_equal(again, first)
    _amx.clear_cache()
    _amx.bf16_pack(a, b, 6, "fixed")
    info = _amx.cache_info()
    assert 0 < info["cached_bytes"] == info["peak_bytes"] <= info["limit_bytes"]
    _amx.bf16_pack(a, b, 6, "fixed")
    assert _amx.cache_info() == info
    held = _amx.bf16_pack(_wide(rng, (256, 1024), 4), _wide(rng, (1024, 96), 4), 6, "fixed")
    live = _amx.cache_info()  # the cache is trimmed as the larger panels are allocated
    assert live["in_use_bytes"] > 0
    assert live["cached_bytes"] + live["in_use_bytes"] <= live["peak_bytes"]
    del held
    bigger = _amx.cache_info()
    assert bigger["peak_bytes"] > info["peak_bytes"]
    assert bigger["cached_bytes"] == bigger["peak_bytes"]  # the smaller panels were dropped
    assert _amx.clear_cache() == bigger["cached_bytes"]
    assert _amx.cache_info()["cached_bytes"] == 0


def _bf16_bits(x):
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


@needs_amx_module
@MODEL_AND_AMX
@pytest.mark.parametrize("shape", [(45, 37, 100), (64, 96, 2048), (3, 5, 7)])
def test_fused_products_equal_one_gemm_on_interleaved_slices(shape, emulate, rng):
    """gemm_bf16_slices(widen=False) accumulates per K tile the pairs in order: the same as one
    BF16 tile GEMM over the pairs' slices interleaved along K, 32 at a time."""
    m, n, k = shape
    a = _bf16_bits(rng.standard_normal((3, m, k)))
    b = _bf16_bits(rng.standard_normal((3, k, n)))
    pairs = np.asarray(bf16.HENRY_PAIRS, np.int32)
    got = _amx.gemm_bf16_slices(a, b, pairs, widen=False, emulate=emulate)
    kt = -(-k // 32) * 32
    ap = np.zeros((3, m, kt), np.uint16)
    bp = np.zeros((3, kt, n), np.uint16)
    ap[:, :, :k], bp[:, :k] = a, b
    ai = np.concatenate([ap[i, :, t : t + 32] for t in range(0, kt, 32) for i, _ in pairs], axis=1)
    bi = np.concatenate([bp[j, t : t + 32] for t in range(0, kt, 32) for _, j in pairs], axis=0)
    want = _amx.gemm_bf16bf16f32(ai, bi, emulate=True)
    np.testing.assert_array_equal(got, want)


@needs_amx_module
@MODEL_AND_AMX
@pytest.mark.parametrize(
    "shape",
    [
        pytest.param((33, 40, 2100), marks=pytest.mark.slow),
        (5, 3, 1024),
        pytest.param((70, 64, 1025), marks=pytest.mark.slow),
    ],
)
def test_widened_products_equal_the_generic_sum(shape, emulate, rng):
    """Fixed-point slices: each (1024-chunk, pair) FP32 sum is exact, so the kernel's float64 C
    equals the generic float64 code bit for bit, for any blocking."""
    m, n, k = shape
    spec = emulinalg.BF16xN(6, 15)
    a, b = _wide(rng, (m, k), 10), _wide(rng, (k, n), 10)
    ea, eb = bf16.line_exponents(np, a, None, -1), bf16.line_exponents(np, b, None, -2)
    A, B = bf16.split(np, a, ea, -1, 6, "fixed"), bf16.split(np, b, eb, -2, 6, "fixed")
    plist = bf16.pairs(spec)
    want = bf16.slice_products(np, A, B, plist, "fixed", k)
    got = _amx.gemm_bf16_slices(
        _bf16_bits(np.stack(A)), _bf16_bits(np.stack(B)), np.asarray(plist, np.int32),
        widen=True, emulate=emulate,
    )  # fmt: skip
    np.testing.assert_array_equal(got, want)
    for spec in ("mc=64,nc=64,kc=32,nest=0", "widen=0", "widen=0,kc=64,order=1,sched=1"):
        before = _amx.set_blocking(spec)
        try:
            again = _amx.gemm_bf16_slices(
                _bf16_bits(np.stack(A)), _bf16_bits(np.stack(B)), np.asarray(plist, np.int32),
                widen=True, emulate=emulate, threads=2,
            )  # fmt: skip
        finally:
            _amx.set_blocking(before["spec"])
        np.testing.assert_array_equal(again, want)


def _amx_and_generic(monkeypatch, emulate, a, b, spec):
    import emulinalg.backends
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", emulate)
    with monkeypatch.context() as mp:
        mp.setattr(emulinalg.backends, "for_namespace", lambda xp: amx)
        got = emulinalg.matmul(a, b, precision=spec)
        assert emulinalg.last_plan().backend == "amx"
    return got, emulinalg.matmul(a, b, precision=spec)


@needs_amx_module
@MODEL_AND_AMX
@pytest.mark.parametrize("kind", ["real", "complex", "float32", "batch"])
def test_amx_backend_bf16xn_equals_numpy(kind, emulate, monkeypatch, rng):
    k = 1100
    a, b = _wide(rng, (2, 21, k), 8), _wide(rng, (2, k, 18), 8)
    if kind != "batch":
        a, b = a[0], b[0]
    if kind == "complex":
        a = a + 1j * _wide(rng, a.shape, 8)
        b = b - 1j * _wide(rng, b.shape, 8)
    if kind == "float32":
        a, b = a.astype(np.float32), b.astype(np.float32)
    got, want = _amx_and_generic(monkeypatch, emulate, a, b, emulinalg.BF16xN(6, 10))
    assert got.dtype == want.dtype == a.dtype
    np.testing.assert_array_equal(got, want)


@needs_amx_module
@MODEL_AND_AMX
def test_amx_backend_bf16x3_close_to_numpy(emulate, monkeypatch, rng):
    """BF16x3 on the tiles sums in FP32 (the generic code in float64): within the FP32 sums'
    error of each other, and within the FP32-level bound of the exact product."""
    a, b = _wide(rng, (40, 300), 20).astype(np.float32), _wide(rng, (300, 33), 20)
    b = b.astype(np.float32)
    got, want = _amx_and_generic(monkeypatch, emulate, a, b, emulinalg.BF16x3())
    bound = _bf16x3_bound(a, b)
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound)
    hi, lo = exact_matmul(a, b)
    assert np.all(np.abs((got - hi) - lo) <= bound)


@needs_amx_module
def test_kernel_refuses_bad_arguments():
    a, b = np.zeros((2, 3, 4), np.uint16), np.zeros((2, 4, 5), np.uint16)
    ok = np.asarray([[0, 1]], np.int32)
    with pytest.raises(ValueError, match="not there"):
        _amx.gemm_bf16_slices(a, b, np.asarray([[0, 2]], np.int32), emulate=True)
    with pytest.raises(ValueError, match="inner dimensions"):
        _amx.gemm_bf16_slices(a, b[:, :3], ok, emulate=True)
    with pytest.raises(ValueError, match="3-D"):
        _amx.gemm_bf16_slices(a[0], b, ok, emulate=True)
    with pytest.raises(ValueError, match="pairs"):
        _amx.gemm_bf16_slices(a, b, np.zeros((1, 3), np.int32), emulate=True)
    with pytest.raises(ValueError, match="kind"):
        _amx.bf16_split(np.zeros((2, 2)), 3, True, "both")
    assert _amx.WIDEN_K == bf16.WIDEN_K


@needs_amx_module
def test_bf16_pack_and_multiply_refuse_bad_arguments():
    a, b = np.ones((3, 4)), np.ones((4, 2))
    with pytest.raises(ValueError, match="inner dimensions"):
        _amx.bf16_pack(a, b[:3], 2, "fixed")
    with pytest.raises(ValueError, match="kind"):
        _amx.bf16_pack(a, b, 2, "both")
    with pytest.raises(ValueError, match="imaginary"):
        _amx.bf16_pack(a, b, 2, "fixed", a, None)
    with pytest.raises(ValueError, match="slices"):
        _amx.bf16_pack(a, b, 9, "fixed")
    p = _amx.bf16_pack(a, b, 2, "fixed")
    with pytest.raises(ValueError, match="not there"):
        _amx.bf16_multiply(p, np.asarray([[0, 2]], np.int32), emulate=True)
    with pytest.raises(ValueError, match="pairs"):
        _amx.bf16_multiply(p, np.zeros((1, 3), np.int32), emulate=True)
    if not AMX_AVAILABLE:
        with pytest.raises(RuntimeError, match="AMX is not available"):
            _amx.bf16_multiply(p, np.asarray([[0, 0]], np.int32))
    np.testing.assert_array_equal(p.ea, [1, 1, 1])  # max |a| = 1 < 2**1


@needs_amx_module
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, None])
def test_all_finite(bad, rng):
    x = rng.standard_normal((70, 33))
    if bad is not None:
        x[41, 17] = bad
    for v in (x, x.T, x[::-2, 1:]):
        assert _amx.all_finite(np.asarray(v)) == bool(np.isfinite(v).all())


def test_dask_blocks(rng):
    """BF16xN on dask operands: block products through the engine, K-block sums in
    double-double; within the in-core truncation bound (block line maxima are at most the
    whole lines')."""
    da = pytest.importorskip("dask.array")
    a, b = _wide(rng, (40, 3000), 6), _wide(rng, (3000, 30), 6)
    spec = emulinalg.BF16xN(6, 15)
    c = emulinalg.matmul(da.from_array(a, chunks=(20, 1000)), da.from_array(b, chunks=(1000, 15)),
                         precision=spec).compute()  # fmt: skip
    hi, lo = exact_matmul(a, b)
    assert np.all(np.abs((c - hi) - lo) <= _fixed_bound(a, b, spec) + 2.0**-50 * np.abs(hi))
    assert str(spec) in emulinalg.last_plan().scheme
