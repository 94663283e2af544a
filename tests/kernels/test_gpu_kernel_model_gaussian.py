"""CPU checks of the cupy backend's Scheme II kernels with the Gaussian moduli
(``moduli.GAUSSIAN_MODULI``: complex products, planes u = re + iota im and v = re - iota im,
two INT8 GEMMs per modulus, Re = (U + V) / 2, Im = (U - V) / (2 iota) mod m).

As ``test_gpu_kernel_model_products.py`` for 3M: the numpy model (``gpu_kernel_model``) must
give the generic ``residues.residues(..., iota)`` planes and ``products.product(...,
gaussian=True)`` bit for bit; the residue kernels' Gaussian builds (``<NMOD, true, NEAR, In,
true>``) and ``ozaki2_crt<NMOD, NW, true, true>``, launched directly through the CPU stand-in for
cupy (``fake_cupy``: the model, or the CUDA sources compiled as host C++), must give the model's
planes and the generic product; and the host code's ``ozaki2_product(..., gaussian=True)`` the
generic product.
"""

from __future__ import annotations

import gpu_kernel_model as model
import numpy as np
import pytest
from _kernel_model_helpers import _operands, _same

from emulinalg.algorithm import products, residues, scaling
from emulinalg.algorithm.moduli import GAUSSIAN_MODULI, crt_constants
from emulinalg.algorithm.scaling import ozaki2_prescale, ozaki2_shifts, scale_to_integers
from emulinalg.backends import numpy as npb
from emulinalg.backends.cuda import OUT_KIND, crt_table_arrays, crt_words, out_pointers

KERNELS = {"ozaki2_residues": False, "ozaki2_residues_mma": True}  # kernel: model's ``digits``


def _flat(parts):
    return [x for p in parts for x in (p if isinstance(p, tuple) else (p,))]


def _generic(ar, ai, br, bi, n, mode, out_dtype, gaussian=True):
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, mode)
    with npb.quiet():
        want = products.product(np, npb.int_matmul, ar, ai, br, bi, n, mode, out_dtype, pre,
                                gaussian=gaussian)  # fmt: skip
    return pre, want


def _assert_same_parts(got, want):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert _same(np.asarray(g), w), i


def test_model_tables_are_the_gaussian_constants():
    """The model's CRT tables with ``gaussian``: the Gaussian weights, P and ratios."""
    from emulinalg.backends.cuda import crt_tables

    for n in range(2, 21):
        c, t = crt_constants(n, True), crt_tables(n, gaussian=True)
        assert c.moduli == GAUSSIAN_MODULI[:n]

        def val(d):
            return sum(v << (32 * i) for i, v in enumerate(d))

        assert [val(t["wdig"][ell]) for ell in range(n)] == list(c.weights)
        assert val(t["pdig"]) == c.P and t["ratios"][:n] == list(c.weight_ratios)
        assert not any(any(d) for d in t["wdig"][n:]) and not any(t["ratios"][n:])
        assert 2 ** (32 * t["nw"] - 1) > c.P


@pytest.mark.parametrize("digits", [False, True])
@pytest.mark.parametrize("nearest", [False, True])
@pytest.mark.parametrize("n", [2, 8, 16, 20])
def test_model_gaussian_planes_equal_generic_residues(n, nearest, digits):
    """Both kernels' arithmetic (words; digit sums reduced as the MMA kernel does) gives the
    generic Gaussian planes (u, v) of the scaled operand, and zeros in the padding."""
    ar, ai, br, bi = _operands(((2,), 5, 37, 6), 4, True, seed=n)
    ai[0, 1, :5] = 0.0  # entries with a zero part, and a purely imaginary one
    ar[1, 2, :3] = 0.0
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    c = crt_constants(n, True)
    mu, _ = ozaki2_shifts(np, pre, c.L, c.Q_down)
    X = [residues.split(np, scale_to_integers(np, x, mu, -1, nearest)) for x in (ar, ai)]
    planes = model.residue_planes(ar, ai, mu, c.moduli, 7, 48, nearest, digits, iota=c.iota)
    assert planes.shape == (2, n, 2, 7, 48)
    assert not planes[..., 37:].any() and not planes[..., 5:, :].any()
    for ell, m in enumerate(c.moduli):
        want = residues.residues(np, X[0], X[1], m, c.iota[ell])
        assert len(want) == 2
        for p, w in enumerate(want):
            assert np.array_equal(planes[p, ell, :, :5, :37], w.astype(np.int8)), (p, m)


def test_model_gaussian_digit_sums_stay_in_reach():
    """The MMA kernel's reduction (``reduce_sum``: |s| < 2**22) of s_re +- iota r_im for the
    largest digit sums any entry gives, at every Gaussian modulus, and its result there."""
    c = crt_constants(20, True)
    for m, iota in zip(c.moduli, c.iota):
        w = model.digit_weights(m)
        top = 255 * sum(abs(x) for x in w)  # |s| of any 16 digit bytes
        for s in (top, -top, top - 1, 0):
            for r in (-(m // 2), (m - 1) // 2, 0, 1):
                for t in (s + iota * r, s - iota * r):
                    got = int(model.reduce_sum(np.array([t]), m)[0])
                    want = t % m
                    assert got == (want - m if want > (m - 1) // 2 else want)


# (batch, m, k, n), phi
CASES = [
    (((), 1, 1, 1), 1),
    (((), 1, 13, 1), 0.5),
    (((), 7, 33, 5), 1),
    (((), 9, 19, 17), 4),
    (((3,), 5, 21, 6), 1),
    (((2, 2), 3, 10, 4), 0.5),
]


@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("n", [4, 16, 20])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_model_gaussian_product_equals_generic(case, n, mode, out_dtype):
    """The model's Gaussian product (K-blocks of 16 columns: U, V added mod m) equals
    ``products.product(..., gaussian=True)`` bit for bit."""
    shape, phi = case
    ar, ai, br, bi = _operands(shape, phi, True, seed=n + 3 * len(shape[0]))
    pre, want = _generic(ar, ai, br, bi, n, mode, out_dtype)
    got = model.ozaki2_product(ar, ai, br, bi, n, mode, out_dtype, pre, k_block=16,
                               gaussian=True)  # fmt: skip
    _assert_same_parts(got, want)


def test_model_gaussian_ignored_for_real_operands():
    ar, _, br, _ = _operands(((2,), 5, 21, 6), 1, False, seed=1)
    pre, want = _generic(ar, None, br, None, 9, "accurate", "dd", gaussian=False)
    got = model.ozaki2_product(ar, None, br, None, 9, "accurate", "dd", pre, gaussian=True)
    _assert_same_parts(got, want)


@pytest.mark.parametrize(
    "what,scale_a,scale_b",
    [("subnormal", -1000, -60), ("near-overflow", 510, 511), ("overflow", 512, 514)],
)
@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
def test_model_gaussian_extreme_ranges(what, scale_a, scale_b, out_dtype):
    if out_dtype == "float32":  # the same situations in float32's range
        scale_a, scale_b = (scale_a * 149) // 1074, (scale_b * 149) // 1074
    ar, ai, br, bi = _operands(((), 6, 9, 7), 1, True, seed=11, scale_a=scale_a, scale_b=scale_b)
    ar[2], ai[2], br[:, 3], bi[:, 3] = 0.0, 0.0, 0.0, 0.0  # a zero row and column
    pre, want = _generic(ar, ai, br, bi, 17, "accurate", out_dtype)
    got = model.ozaki2_product(ar, ai, br, bi, 17, "accurate", out_dtype, pre, gaussian=True)
    _assert_same_parts(got, want)
    vals = np.concatenate([np.ravel(g[0] if out_dtype == "dd" else g) for g in got])
    if what == "overflow":
        assert np.isinf(vals).any()
    if what == "subnormal":
        tiny = np.finfo(np.float32 if out_dtype == "float32" else np.float64).tiny
        assert (np.abs(vals[np.isfinite(vals) & (vals != 0)]) < tiny).any()


# ----------------------------------------------------------------------------------------------
# the kernels through the CPU stand-in for cupy (model, or the CUDA sources as host C++)
# ----------------------------------------------------------------------------------------------


def _tf(b):
    return "true" if b else "false"


def _gaussian_planes(be, cp, kernel, n, nearest, re, im, strides, rows, rows_pad, k, kp, shift,
                     shift_sb):  # fmt: skip
    """The Gaussian build of ``kernel`` launched as the host launches the residue kernels (the
    same arguments; planes (2, n, B, rows_pad, kp))."""
    In = "float" if re.dtype == np.float32 else "double"
    fn = be.products._kernel(f"{kernel}.cu", f"{kernel}<{n}, true, {_tf(nearest)}, {In}, true>")
    B = re.shape[0]
    planes = cp.empty((2, n, B, rows_pad, kp), dtype=cp.int8)
    if kernel == "ozaki2_residues_mma":
        tiles = B * -(-rows_pad // 16) * -(-kp // 64)
        grid = (min(tiles, be.products._resident(fn, be.products._THREADS)),)
    else:
        grid = (-(-kp // 32), -(-rows_pad // 32), B)
    sb, sr, sc = strides
    args = (re, im, np.int64(sb), np.int64(sr), np.int64(sc), np.int32(B), np.int32(rows),
            np.int32(k), np.int32(rows_pad), np.int32(kp),
            be.kernels._rows_contiguous(re, im, strides), shift, np.int64(shift_sb),
            planes)  # fmt: skip
    fn(grid, (be.products._THREADS,), args)
    return np.asarray(planes)


def _check_kernel_planes(be, cp, ops, host, c, nearest, kernel):
    """Both operands' Gaussian planes from ``kernel`` equal the model's (the MMA kernel's digit
    sums or the word kernel's words, per ``KERNELS``; the model equals the generic planes)."""
    ar, ai, br, bi = host
    B, m, k, n, kp, n_p = ops.B, ops.m, ops.k, ops.n, ops.kp, ops.n_p
    nmod = len(c.moduli)
    sides = (
        (ops.a, ops.a_strides, m, m, ops.mu, m, ar, ai, False),
        (ops.b, ops.b_strides, n, n_p, ops.nu, n, br, bi, True),
    )
    for dev, strides, rows, rows_pad, shift, shift_sb, x, xi, trans in sides:
        got = _gaussian_planes(be, cp, kernel, nmod, nearest, dev[0], dev[1], strides, rows,
                               rows_pad, k, kp, shift, shift_sb)  # fmt: skip
        logical = [v.reshape((B,) + v.shape[-2:]).astype(np.float64) for v in (x, xi)]
        if trans:  # B's planes are those of B'^T
            logical = [np.swapaxes(v, -1, -2) for v in logical]
        want = model.residue_planes(*logical, np.asarray(shift).astype(np.int64), c.moduli,
                                    rows_pad, kp, nearest, KERNELS[kernel], c.iota)  # fmt: skip
        assert np.array_equal(got, want), (kernel, trans)


# (moduli, nearest, (batch, m, k, n), float32 operands): 16- and 32-row tiles, 32- and 64-column
# units with tails, B's rows padded, batches, one and two MMA tiles of moduli
GAUSS_KERNEL_CASES = [
    (16, False, ((2,), 21, 70, 19), False),
    (20, True, ((), 19, 67, 13), True),
    pytest.param(8, True, ((3,), 17, 64, 16), False, marks=pytest.mark.slow),
    pytest.param(17, False, ((), 33, 130, 18), True, marks=pytest.mark.slow),
    pytest.param(2, True, ((), 5, 9, 3), False, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize(("n", "nearest", "shape", "narrow"), GAUSS_KERNEL_CASES)
def test_residue_kernels_gaussian_planes(native_backend, n, nearest, shape, narrow, kernel):
    """Each residue kernel's Gaussian build, compiled for the CPU and launched as the host
    launches it, writes the model's planes (u, v) bit for bit, zeros in the padding; complex
    operands as separate parts (A's rows along k, B's columns contiguous) and as a complex
    array's interleaved parts; float32 operands (the kernels' In = float) too."""
    be, cp = native_backend
    _kernel_planes_case(be, cp, n, nearest, shape, narrow, kernel)


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_residue_kernels_gaussian_dispatch(cpu_backend, kernel):
    """The same through the stand-in's dispatch (the model in the fast tier)."""
    be, cp = cpu_backend
    _kernel_planes_case(be, cp, 16, True, ((2,), 21, 70, 19), False, kernel)
    _kernel_planes_case(be, cp, 5, False, ((), 6, 20, 5), True, kernel)


def _kernel_planes_case(be, cp, n, nearest, shape, narrow, kernel):
    ar, ai, br, bi = _operands(shape, 4, True, seed=n)
    if narrow:
        ar, ai, br, bi = (x.astype(np.float32) for x in (ar, ai, br, bi))
    wide = [x.astype(np.float64) for x in (ar, ai, br, bi)]
    pre = ozaki2_prescale(np, npb.int_matmul, *wide, "accurate")
    c = crt_constants(n, True)
    mu, nu = ozaki2_shifts(np, pre, c.L, c.Q_down)
    A, B_ = cp.asarray(ar + 1j * ai), cp.asarray(br + 1j * bi)
    layouts = [[cp.asarray(v) for v in (ar, ai, br, bi)], [A.real, A.imag, B_.real, B_.imag]]
    for dev in layouts:
        ops = be.kernels._Operands(*dev, cp.asarray(mu), cp.asarray(nu))
        _check_kernel_planes(be, cp, ops, (ar, ai, br, bi), c, nearest, kernel)


def _gaussian_crt(be, cp, prod, n, mu32, nu32, r0, outs, out_dtype):
    """``ozaki2_crt<n, nw, true, true>`` launched as the host launches the CRT kernel, its
    tables the Gaussian ones."""
    nkb, _, _, B, mc, n_p = prod.shape
    m_full, ncols = outs[0].shape[-2:]
    nw = crt_words(n)
    fn = be.products._kernel("ozaki2_crt.cu", f"ozaki2_crt<{n}, {nw}, true, true>",
                             tables=lambda: crt_table_arrays(n, gaussian=True))  # fmt: skip
    o = out_pointers(outs, out_dtype, True)
    rows = B * mc
    grid = (-(-ncols // 32), min(-(-rows // 8), 65535))
    args = (prod, np.int64(prod[0].size), np.int32(nkb), np.int64(B * mc * n_p), np.int32(B),
            np.int32(mc), np.int32(ncols), np.int32(n_p), np.int32(m_full), np.int32(r0),
            mu32, nu32, np.int32(OUT_KIND[out_dtype]), *o)  # fmt: skip
    fn(grid, (32, 8), args)


def _crt_case(be, cp, n, shape, out_dtype, seed):
    """The CRT kernel on the model's U, V products (K-blocks of 16, A's rows in two chunks)
    against the generic Gaussian product."""
    ar, ai, br, bi = _operands(shape, 1, True, seed=seed)
    pre, want = _generic(ar, ai, br, bi, n, "accurate", out_dtype)
    c = crt_constants(n, True)
    mu, nu = ozaki2_shifts(np, pre, c.L, c.Q_down)
    near = scaling.rounds_to_nearest(n, shape[2], "accurate", True)
    batch, m, k, nn = shape
    B = int(np.prod(batch, dtype=np.int64))
    kp, n_p = -(-k // 16) * 16, -(-nn // 4) * 4
    a = [x.reshape(B, m, k) for x in (ar, ai)]
    b = [np.swapaxes(x.reshape(B, k, nn), -1, -2) for x in (br, bi)]
    mu2, nu2 = mu.reshape(B, m), nu.reshape(B, nn)
    pb = model.residue_planes(*b, nu2, c.moduli, n_p, kp, near, iota=c.iota)
    dt = np.float32 if out_dtype == "float32" else np.float64
    outs = [cp.empty((B, m, nn), dtype=dt) for _ in range(4 if out_dtype == "dd" else 2)]
    mu32, nu32 = (cp.asarray(np.ascontiguousarray(x.astype(np.int32))) for x in (mu2, nu2))
    cut = max(1, m // 2)
    for r0, r1 in ((0, cut), (cut, m)):
        if r0 == r1:
            continue
        pa = model.residue_planes(*(x[:, r0:r1] for x in a), mu2[:, r0:r1], c.moduli, r1 - r0,
                                  kp, near, iota=c.iota)  # fmt: skip
        prod = cp.asarray(model.int8_gemms(pa, pb, k_block=16))
        assert prod.shape[1] == 2
        _gaussian_crt(be, cp, prod, n, mu32, nu32, r0, outs, out_dtype)
    outs = [np.asarray(x).reshape(batch + (m, nn)) for x in outs]
    got = [(outs[0], outs[1]), (outs[2], outs[3])] if out_dtype == "dd" else outs
    _assert_same_parts(got, want)


@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("n,shape", [(20, ((2,), 7, 40, 9)), (4, ((), 5, 21, 3))])
def test_crt_kernel_gaussian(cpu_backend, n, shape, out_dtype):
    """``ozaki2_crt<n, nw, true, true>`` (the stand-in's model, or the CUDA source) turns the
    U, V products into the generic Gaussian product bit for bit."""
    be, cp = cpu_backend
    _crt_case(be, cp, n, shape, out_dtype, seed=n)


def test_crt_kernel_gaussian_native(native_backend):
    """As ``test_crt_kernel_gaussian``, the CUDA source in the fast tier."""
    be, cp = native_backend
    _crt_case(be, cp, 16, ((2,), 6, 40, 7), "dd", seed=3)


# ----------------------------------------------------------------------------------------------
# the host code: products.ozaki2_product(..., gaussian=True)
# ----------------------------------------------------------------------------------------------


def _host_vs_generic(be, cp, monkeypatch, ar, ai, br, bi, n, mode, out_dtype, to_dev=None):
    """The host code's Gaussian product equals the generic one, through the Gaussian builds of
    the residue and CRT kernels (or the fused GEMM's CRT, where it runs)."""
    to_dev = to_dev or cp.asarray
    exprs = []
    real = be.products._kernel

    def spy(file, expr, **kw):
        exprs.append(expr)
        return real(file, expr, **kw)

    monkeypatch.setattr(be.products, "_kernel", spy)
    pre, want = _generic(ar, ai, br, bi, n, mode, out_dtype)
    dev = [to_dev(x) for x in (ar, ai, br, bi)]
    got = be.products.ozaki2_product(*dev, n, mode, out_dtype, tuple(cp.asarray(x) for x in pre),
                                     gaussian=True)  # fmt: skip
    assert got is not None
    _assert_same_parts(got, want)
    res = [e for e in exprs if e.startswith("ozaki2_residues")]
    assert res and all(e.endswith(", true>") and e.count(",") == 4 for e in res), res
    crt = [e for e in exprs if e.startswith("ozaki2_crt")]
    assert crt and all(e.endswith(", true, true>") for e in crt), crt


@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("case", [(((), 1, 1, 1), 1), (((), 7, 33, 5), 4), (((3,), 5, 21, 6), 1)],
                         ids=str)  # fmt: skip
def test_host_code_gaussian_product(cpu_backend, monkeypatch, case, out_dtype):
    be, cp = cpu_backend
    shape, phi = case
    ar, ai, br, bi = _operands(shape, phi, True, seed=2)
    _host_vs_generic(be, cp, monkeypatch, ar, ai, br, bi, 16, "accurate", out_dtype)


def test_host_code_gaussian_rounding_and_float32(cpu_backend, monkeypatch):
    """Counts where the Gaussian moduli truncate and the moduli round (n = 3, k = 55: the host
    must ask ``rounds_to_nearest`` with ``gaussian``), fast mode, float32 operands."""
    be, cp = cpu_backend
    assert scaling.rounds_to_nearest(3, 55, "accurate") != scaling.rounds_to_nearest(
        3, 55, "accurate", True
    )
    ops = _operands(((2,), 5, 55, 4), 1, True, seed=9)
    _host_vs_generic(be, cp, monkeypatch, *ops, 3, "accurate", "dd")
    _host_vs_generic(be, cp, monkeypatch, *ops, 12, "fast", "float64")
    narrow = [x.astype(np.float32) for x in ops]
    wide = [x.astype(np.float64) for x in narrow]
    pre, want = _generic(*wide, 9, "accurate", "float32")
    got = be.products.ozaki2_product(*(cp.asarray(x) for x in narrow), 9, "accurate", "float32",
                                     tuple(cp.asarray(x) for x in pre), gaussian=True)  # fmt: skip
    _assert_same_parts(got, want)


def test_host_code_gaussian_chunks_and_k_blocks(cpu_backend, monkeypatch):
    """Row chunks of A (the CRT's r0), three K-blocks (U, V added mod m), rows contiguous in
    memory, and a complex array's interleaved parts."""
    be, cp = cpu_backend
    ar, ai, br, bi = _operands(((), 13, 40, 9), 1, True, seed=3)
    monkeypatch.setattr(be.products, "chunk_bytes", 3000)  # one or two rows of A per chunk
    monkeypatch.setattr(be.gemm, "_K_BLOCK", 16)
    tr = {id(x): np.ascontiguousarray(x.T) for x in (ar, ai, br, bi)}
    _host_vs_generic(be, cp, monkeypatch, ar, ai, br, bi, 15, "accurate", "dd",
                     to_dev=lambda x: cp.asarray(tr[id(x)]).T)  # fmt: skip
    A, B_ = cp.asarray(ar + 1j * ai), cp.asarray(br + 1j * bi)
    parts = {id(ar): A.real, id(ai): A.imag, id(br): B_.real, id(bi): B_.imag}
    _host_vs_generic(be, cp, monkeypatch, ar, ai, br, bi, 20, "accurate", "float64",
                     to_dev=lambda x: parts[id(x)])  # fmt: skip
