"""The fused Scheme II INT8 GEMM (``emulinalg._cuda``, ``src_cuda/``) and its CRT pass
(``src_cuda/ozaki2_crt_s8.cu``) through ``emulinalg/backends/cuda/fused.py``.

On the CPU (always): the epilogue's mod-reduce arithmetic (``src_cuda/sym_mod.cuh``, compiled
with g++) against Python's symmetric mod on edge and random int32 values for every modulus, and
the INT8 CRT kernel (compiled as host C++ on the ``fake_cupy`` stand-in) against the INT32 CRT
path bit for bit. On the GPU (marked ``gpu``; skipped without cupy, a compute capability 9.0
device or a build with ``emulinalg._cuda``): the fused GEMM's INT8 residues against cuBLAS's
INT32 products reduced in cupy, its identity epilogue against cuBLAS, and whole Scheme II
products through the fused path against the cuBLAS path, bit for bit.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys

import numpy as np
import pytest
from _gpu_helpers import require_gpu

from emulinalg.algorithm.moduli import GAUSSIAN_MODULI, MODULI, crt_constants
from emulinalg.backends.cuda import source_dir


def _sym(x, m):
    r = np.mod(np.asarray(x, dtype=np.int64), m)
    return np.where(r > (m - 1) // 2, r - m, r)


def _gxx(tmp_path, name, code, flags=()):
    if shutil.which("g++") is None:
        pytest.skip("no g++")
    src, lib = tmp_path / f"{name}.cpp", tmp_path / f"{name}.so"
    src.write_text(code)
    cmd = ["g++", "-std=c++20", "-O1", "-fPIC", "-shared", "-ffp-contract=off", "-w", *flags,
           "-o", str(lib), str(src)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(lib))


# ----------------------------------------------------------------------------------------------
# CPU: the epilogue's arithmetic and the INT8 CRT kernel
# ----------------------------------------------------------------------------------------------


def test_sym_mod_matches_symmetric_mod(tmp_path):
    lib = _gxx(tmp_path, "sym_mod", """
#include "sym_mod.cuh"
extern "C" void run(const int* x, long n, int m, int* out) {
  const float rcp = emu::rcp_rn(static_cast<float>(m));
  for (long i = 0; i < n; ++i) out[i] = emu::sym_mod(x[i], m, rcp);
}
""", flags=("-I", str(source_dir())))  # fmt: skip
    lib.run.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_void_p]
    rng = np.random.default_rng(7)
    i32 = np.iinfo(np.int32)
    edges = np.concatenate([
        np.arange(-70000, 70000), np.arange(i32.min, i32.min + 5000),
        np.arange(i32.max - 5000, i32.max, dtype=np.int64) + 1,
        rng.integers(i32.min, i32.max, 200000, endpoint=True),
    ]).astype(np.int32)  # fmt: skip
    for m in sorted(set(MODULI) | {2, 3, 128, 129, 254}):
        x = edges
        if m % 2 == 0:  # exact ties of the float quotient: x = (q + 1/2) m
            q = rng.integers(i32.min // m, i32.max // m, 20000)
            x = np.concatenate([x, (q * m + m // 2 + np.array([[-1], [0], [1]])).ravel()])
            x = x[(x >= i32.min) & (x <= i32.max)].astype(np.int32)
        out = np.empty_like(x)
        lib.run(x.ctypes.data, x.size, m, out.ctypes.data)
        bad = np.flatnonzero(out != _sym(x, m))
        assert bad.size == 0, (m, x[bad[:5]], out[bad[:5]])


_CRT_S8_PARAMS = (
    "const signed char* res, long long plane, int B, int mc, int n, int ldr, int m_full, int r0, "
    "const int* mu, const int* nu, int kind, void* out0, void* out1, void* out2, void* out3"
)


@pytest.fixture(scope="module")
def fake_native():
    """The fake_cupy stand-in with kernels compiled from their CUDA sources (g++), and the same
    stand-in with the numpy model: emulinalg/backends/cupy/products.py's INT32 ``_crt`` is the
    reference."""
    if shutil.which("g++") is None:
        pytest.skip("no g++ to compile the CUDA sources for the CPU")
    import fake_cupy

    fake_cupy._PARAMS.setdefault("ozaki2_crt_s8", _CRT_S8_PARAMS)
    fake_cupy._BARRIERS.setdefault("ozaki2_crt_s8", False)
    be, cp = fake_cupy.load_backend(native=True)
    return be, cp


@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("planes", [1, pytest.param(2, marks=pytest.mark.slow), 3])
@pytest.mark.parametrize(
    "n", [8, pytest.param(18, marks=pytest.mark.slow), pytest.param(20, marks=pytest.mark.slow)]
)
def test_crt_s8_equals_int32_crt(fake_native, monkeypatch, n, planes, out_dtype):
    """Same residues through ozaki2_crt_s8.cu (int8, padded rows) and ozaki2_crt.cu (int32):
    identical bits, rows r0.. of a larger output, several batch entries. ``planes``: a real
    product (1), complex Re and Im residues (2), or complex 3M's three products (3, the fused
    GEMM's complex output, combined in the kernel)."""
    from emulinalg.backends.cuda import fused

    be, cp = fake_native
    monkeypatch.setitem(sys.modules, "cupy", cp)
    cplx = planes > 1
    rng = np.random.default_rng(n + 2 * planes)
    B, mc, ncols, ldr, m_full, r0 = 2, 5, 7, 16, 9, 3
    NP = planes
    w = np.zeros((NP, n, B, mc, ldr), dtype=np.int8)
    for ell, m in enumerate(MODULI[:n]):
        w[:, ell] = rng.integers(-(m // 2), (m - 1) // 2, (NP, B, mc, ldr), endpoint=True)
    w[..., ncols:] = 77  # padding: never read
    t = w[..., :ncols].astype(np.int32)
    if planes == 1:
        prod = t[None, :1]
    elif planes == 2:  # INT32 "products" with the same residues: (T1, T2, T3) = (Re, 0, Re + Im)
        prod = np.stack([t[0], np.zeros_like(t[0]), t[0] + t[1]])[None]
    else:  # the three products' residues as INT32 "products": the same classes mod m_l
        prod = t[None]
    mu = rng.integers(-40, 40, (B, m_full)).astype(np.int32)
    nu = rng.integers(-40, 40, (B, ncols)).astype(np.int32)
    mu[0, r0] = 1100  # underflow / overflow ranges too
    nu[1, 0] = -1300
    dt = np.float32 if out_dtype == "float32" else np.float64
    nout = (2 if cplx else 1) * (2 if out_dtype == "dd" else 1)

    def outs():
        return [cp.asarray(np.full((B, m_full, ncols), 0.5, dtype=dt)) for _ in range(nout)]

    want, got = outs(), outs()
    crt = be.products._crt
    crt(cp.asarray(np.ascontiguousarray(prod)), n, cplx, cp.asarray(mu), cp.asarray(nu), r0,
        want, out_dtype)  # fmt: skip
    fused.crt_s8(cp.asarray(w), n, cplx, cp.asarray(mu), cp.asarray(nu), r0, got, out_dtype)
    for g, x in zip(got, want):
        g, x = np.asarray(g), np.asarray(x)
        assert np.array_equal(g.view(np.uint8), x.view(np.uint8))
        assert np.all(g[:, :r0] == 0.5) and np.all(g[:, r0 + mc :] == 0.5)
        assert np.count_nonzero(g[:, r0 : r0 + mc] != 0.5) > g[:, r0 : r0 + mc].size // 2


_EDGE_INTS = [0, 1, 3, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1,
              2**64, 2**64 + 1, 2**96 - 1, 2**96]  # fmt: skip


def _edge_targets(rng, n, size, f32, off, gaussian=False):
    """Integers Y (Python ints, |Y| < P / 2) whose rounding with these offsets lands on the
    edges of ozaki2_crt_s8.cu's float64 path: zero, small, around 2**63 and the word
    boundaries, ties and near-ties, and results at the subnormal / overflow thresholds of the
    output format (the integer path's share). P: of the Gaussian moduli with ``gaussian``."""
    P = crt_constants(n, gaussian).P
    bits = P.bit_length() - 2  # |Y| < 2**bits <= P / 2
    edges = (-151, -150, -149, -148, -127, -126, -125, 126, 127, 128) if f32 else (
        -1076, -1075, -1074, -1073, -1023, -1022, -1021, 1022, 1023, 1024)  # fmt: skip
    mant = 24 if f32 else 53
    out = []
    for k in range(size):
        kind = k % 8
        if kind == 0:  # small, zero, 2**63 neighbours, word boundaries
            y = int(rng.choice(_EDGE_INTS))
        else:  # a target exponent (an edge or random), then ties / near-ties below the kept bits
            e = int(rng.choice(edges)) if kind < 5 else int(rng.integers(-1100, 1100))
            L = min(max(e + 1 - int(off[k]), 1), bits)  # bit length giving exponent e
            y = (1 << (L - 1)) | int(rng.integers(0, 2**62)) % (1 << (L - 1)) if L > 1 else 1
            drop = L - mant
            if drop > 0 and kind in (2, 3):  # exact tie, or one above / below it
                y = (y >> drop << drop) | (1 << (drop - 1))
                if kind == 3 and drop > 1:  # a single bit anywhere below the half
                    y += int(rng.choice([-1, 1])) << int(rng.integers(0, drop - 1))
        if y >= 1 << bits:
            y = (1 << bits) - 1 - int(rng.integers(0, 1000))
        out.append(-y if rng.random() < 0.5 else y)
    return out


def _residues_of(rng, ys, n, spread, mods=MODULI):
    """int8 symmetric residues (n, len(ys)) of the integers ys modulo ``mods[:n]``; with
    ``spread``, some moved by +-m_l within int8 (the same class, outside the symmetric
    range)."""
    r = np.array([[(y % m) for y in ys] for m in mods[:n]], dtype=np.int64)
    ms = np.array(mods[:n], dtype=np.int64)[:, None]
    r = np.where(r > (ms - 1) // 2, r - ms, r)
    if spread:
        step = np.where(r < 0, ms, -ms) * (rng.random(r.shape) < 0.3)
        moved = r + step
        r = np.where((moved >= -128) & (moved <= 127), moved, r)
    return r


CRT_S8_EDGE_N = [pytest.param(n, marks=() if n in (8, 16, 20) else pytest.mark.slow)
                 for n in (2, 6, 8, 11, 15, 16, 17, 20)]  # fmt: skip


@pytest.mark.parametrize("out_dtype", ["float64", "float32"])
@pytest.mark.parametrize("ldr", [40, pytest.param(37, marks=pytest.mark.slow)])
@pytest.mark.parametrize("planes", [1, 3])
@pytest.mark.parametrize("n", CRT_S8_EDGE_N)
def test_crt_s8_edges_equal_int32_crt(fake_native, monkeypatch, n, planes, ldr, out_dtype):
    """ozaki2_crt_s8.cu's float64 path (digit sums, rounding to odd, exponent scaling) and its
    integer path for the results it leaves (subnormal, overflow, underflow to zero) against the
    INT32 CRT, bit for bit: integers chosen at the rounding edges of each output format, with
    offsets that put them at the format's thresholds, column counts that leave tails of 1..3
    columns, residues outside the symmetric range (3M: random T2, so every difference class),
    and rows not 4-byte aligned (ldr 37: the integer path only)."""
    from emulinalg.backends.cuda import fused

    be, cp = fake_native
    monkeypatch.setitem(sys.modules, "cupy", cp)
    f32 = out_dtype == "float32"
    rng = np.random.default_rng(1000 * n + 10 * planes + f32)
    B, mc, ncols, m_full, r0 = 2, 7, 35, 10, 2
    cplx = planes == 3
    # offsets -(mu + nu) spread over both thresholds of the format, and the normal range
    span = crt_constants(n).P.bit_length()
    centers = np.array([149, 126, -127, 0] if f32 else [1074, 1022, -1023, 0]) + span // 2
    bands = centers[np.arange(B * m_full).reshape(B, m_full) % len(centers)]  # each, often
    mu = bands + rng.integers(-span // 4, span // 4 + 1, (B, m_full))
    nu = rng.integers(-span // 4, span // 4 + 1, (B, ncols))
    mu, nu = mu.astype(np.int32), nu.astype(np.int32)
    off = -(mu[:, r0 : r0 + mc, None] + nu[:, None, :])  # (B, mc, ncols)
    size = B * mc * ncols
    parts = [_edge_targets(rng, n, size, f32, off.ravel()) for _ in range(2 if cplx else 1)]
    w = np.full((planes, n, B, mc, ldr), 77, dtype=np.int8)  # padding: never used
    if cplx:  # T1 - T2 = Re, T3 - T1 - T2 = Im (mod m_l), T2 anything
        t2 = rng.integers(-128, 128, (n, size))
        re = _residues_of(rng, parts[0], n, False)
        im = _residues_of(rng, parts[1], n, False)
        ms = np.array(MODULI[:n])[:, None]
        t1 = np.mod(re + t2 + 128, ms) - 128  # in [-128, m - 128): any int8 of its class
        t3 = np.mod(im + t1 + t2 + 128, ms) - 128
        t = np.stack([t1, t2, t3])
    else:
        t = _residues_of(rng, parts[0], n, True)[None]
    w[..., :ncols] = t.reshape(planes, n, B, mc, ncols)
    prod = np.ascontiguousarray(w[..., :ncols].astype(np.int32))[None]
    dt = np.float32 if f32 else np.float64
    nout = 2 if cplx else 1

    def outs():
        return [cp.asarray(np.full((B, m_full, ncols), 0.5, dtype=dt)) for _ in range(nout)]

    want, got = outs(), outs()
    be.products._crt(cp.asarray(prod), n, cplx, cp.asarray(mu), cp.asarray(nu), r0, want,
                     out_dtype)  # fmt: skip
    fused.crt_s8(cp.asarray(w), n, cplx, cp.asarray(mu), cp.asarray(nu), r0, got, out_dtype)
    for g, x in zip(got, want):
        g, x = np.asarray(g), np.asarray(x)
        assert np.array_equal(g.view(np.uint8), x.view(np.uint8))
        assert np.all(g[:, :r0] == 0.5) and np.all(g[:, r0 + mc :] == 0.5)
        v = x[:, r0 : r0 + mc]  # the cases are there: subnormal, zero, inf and normal results
        tiny = np.finfo(dt).tiny
        assert np.any(np.isinf(v)) and np.any((v != 0) & (np.abs(v) < tiny))
        normal = np.isfinite(v) & (np.abs(v) >= tiny)
        assert np.any(v == 0) and np.count_nonzero(normal) > v.size // 3


@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize(
    "n", [pytest.param(n, marks=() if n in (8, 16) else pytest.mark.slow) for n in (2, 8, 16, 20)]
)
def test_crt_s8_gaussian_equals_int32_crt_and_3m(fake_native, monkeypatch, n, out_dtype):
    """The Gaussian moduli's CRT (U = Re + iota Im, V = Re - iota Im modulo GAUSSIAN_MODULI, as
    the fused GEMM writes them for complex products): ozaki2_crt_s8.cu and ozaki2_crt.cu give
    the same bits, and the same as the 3M path of the moduli from residues of the same
    integers (an independent route to Re and Im): edge integers as above, residues moved
    outside the symmetric range, a row tail of 3 columns."""
    from emulinalg.backends.cuda import fused

    be, cp = fake_native
    monkeypatch.setitem(sys.modules, "cupy", cp)
    f32 = out_dtype == "float32"
    rng = np.random.default_rng(77 * n + f32)
    B, mc, ncols, ldr, m_full, r0 = 2, 5, 35, 40, 9, 3
    span = crt_constants(n, True).P.bit_length()
    centers = np.array([149, 126, -127, 0] if f32 else [1074, 1022, -1023, 0]) + span // 2
    mu = centers[np.arange(B * m_full).reshape(B, m_full) % 4] + rng.integers(
        -span // 4, span // 4 + 1, (B, m_full))  # fmt: skip
    nu = rng.integers(-span // 4, span // 4 + 1, (B, ncols))
    mu, nu = mu.astype(np.int32), nu.astype(np.int32)
    off = -(mu[:, r0 : r0 + mc, None] + nu[:, None, :])
    size = B * mc * ncols
    parts = [_edge_targets(rng, n, size, f32, off.ravel(), gaussian=True) for _ in range(2)]
    c = crt_constants(n, True)
    gm = np.array(GAUSSIAN_MODULI[:n], dtype=np.int64)[:, None]
    iota = np.array(c.iota, dtype=np.int64)[:, None]
    re, im = (_residues_of(rng, p, n, False, GAUSSIAN_MODULI) for p in parts)
    uv = []
    for sign in (1, -1):  # u, v: symmetric, some moved by +-m within int8
        r = np.mod(re + sign * iota * im, gm)
        r = np.where(r > (gm - 1) // 2, r - gm, r)
        moved = r + np.where(r < 0, gm, -gm) * (rng.random(r.shape) < 0.3)
        uv.append(np.where((moved >= -128) & (moved <= 127), moved, r))
    w = np.full((2, n, B, mc, ldr), 77, dtype=np.int8)
    w[..., :ncols] = np.stack(uv).reshape(2, n, B, mc, ncols)
    prod_uv = np.ascontiguousarray(w[..., :ncols].astype(np.int32))[None]
    # 3M planes of the moduli from the same integers: T1 = Re, T2 = 0, T3 = Re + Im
    re3, im3 = (_residues_of(rng, p, n, False) for p in parts)
    prod_3m = np.stack([re3, np.zeros_like(re3), re3 + im3]).reshape(3, n, B, mc, ncols)
    prod_3m = np.ascontiguousarray(prod_3m.astype(np.int32))[None]
    dt = np.float32 if f32 else np.float64
    nout = 2 * (2 if out_dtype == "dd" else 1)

    def outs():
        return [cp.asarray(np.full((B, m_full, ncols), 0.5, dtype=dt)) for _ in range(nout)]

    args = (cp.asarray(mu), cp.asarray(nu), r0)
    want, got32, got8 = outs(), outs(), outs()
    be.products._crt(cp.asarray(prod_3m), n, True, *args, want, out_dtype)
    be.products._crt(cp.asarray(prod_uv), n, True, *args, got32, out_dtype, True)
    fused.crt_s8(cp.asarray(w), n, True, *args, got8, out_dtype, True)
    for g32, g8, x in zip(got32, got8, want):
        g32, g8, x = np.asarray(g32), np.asarray(g8), np.asarray(x)
        assert np.array_equal(g32.view(np.uint8), x.view(np.uint8))
        assert np.array_equal(g8.view(np.uint8), x.view(np.uint8))
        assert np.all(g8[:, :r0] == 0.5) and np.all(g8[:, r0 + mc :] == 0.5)
    v = np.asarray(want[0])[:, r0 : r0 + mc]
    assert np.count_nonzero(np.isfinite(v) & (v != 0)) > v.size // 3


def test_crt_s8_source_inlines_the_int32_crt():
    from emulinalg.backends.cuda import source

    text = source("ozaki2_crt_s8.cu")
    assert "#include" not in text
    assert "ozaki2_crt_s8(" in text and "__constant__ int emu_wdig" in text


def test_fused_unavailable_declines(monkeypatch):
    from emulinalg.backends.cuda import fused

    monkeypatch.setenv("EMULINALG_FUSED", "0")
    assert not fused.available()
    assert fused.int8_mod_products(None, None, 18) is None
    assert fused.int32_products(None, None) is None


# ----------------------------------------------------------------------------------------------
# GPU
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu():
    """(cupy, emulinalg._cuda, backends.cupy, fused) where the fused kernels can run."""
    cp = require_gpu()
    try:
        from emulinalg import _cuda
    except ImportError as e:
        pytest.skip(f"emulinalg._cuda not built (CUDA + CUTLASS_INCLUDE_DIR at build time): {e}")
    from emulinalg.backends import cupy as cb
    from emulinalg.backends.cuda import fused

    if not fused.available():
        pytest.skip("fused kernels unavailable here (needs compute capability 9.0)")
    return cp, _cuda, cb, fused


def _planes(cp, n, B, rows, kp, k, seed, extreme=False):
    """int8 residue planes (1, n, B, rows, kp) in each modulus' symmetric range, zero past k."""
    rs = cp.random.RandomState(seed)
    lo = cp.asarray([-(m // 2) for m in MODULI[:n]], dtype=cp.int32)[:, None, None, None]
    hi = cp.asarray([(m - 1) // 2 for m in MODULI[:n]], dtype=cp.int32)[:, None, None, None]
    if extreme:  # |r| at its largest, one sign: the INT32 sums at their bound
        x = cp.broadcast_to(lo, (n, B, rows, kp)).copy()
    else:
        u = rs.random_sample((n, B, rows, kp))
        x = cp.floor(lo + u * (hi - lo + 1)).astype(cp.int32)
    x[..., k:] = 0
    return x.astype(cp.int8)[None]


def _reference_mod(cp, prod32, n):
    """symmetric(prod mod m_l) of cuBLAS's INT32 products (1, 1, n, B, m, n_p)."""
    ms = cp.asarray(MODULI[:n], dtype=cp.int64)[:, None, None, None]
    r = cp.mod(prod32[0, 0].astype(cp.int64), ms)
    return cp.where(r > (ms - 1) // 2, r - ms, r).astype(cp.int8)


GEMM_SHAPES = [  # (n moduli, B, m, n_p, k)
    (18, 1, 7, 100, 61),  # ragged M and N (n_p not a multiple of 16), K padded to 64
    (18, 2, 300, 260, 1000),
    (9, 3, 129, 64, 4096),
    (20, 1, 256, 256, 1 << 12),
]


@pytest.mark.gpu
@pytest.mark.parametrize("config", [0, 1, 2])
@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=str)
def test_fused_mod_equals_cublas_mod(gpu, shape, config, monkeypatch):
    cp, _cuda, cb, fused = gpu
    monkeypatch.setattr(fused, "config", config)
    n, B, m, n_p, k = shape
    kp = -(-k // 16) * 16
    pa = _planes(cp, n, B, m, kp, k, seed=1)
    pb = _planes(cp, n, B, n_p, kp, k, seed=2)
    ref32 = cb.gemm._cublas_int8_products(pa, pb)
    got = fused.int8_mod_products(pa, pb, n)
    assert got is not None and got.dtype == cp.int8 and got.shape[:4] == (1, n, B, m)
    assert got.shape[-1] % 16 == 0 and got.shape[-1] >= n_p
    assert bool(cp.all(got[0, ..., :n_p] == _reference_mod(cp, ref32, n)))
    s32 = fused.int32_products(pa, pb)
    assert bool(cp.all(s32 == ref32[0]))


@pytest.mark.gpu
@pytest.mark.parametrize("config", [0, 2])
def test_fused_mod_at_the_k_bound(gpu, monkeypatch, config):
    """k = 2**16 with every residue at -(m // 2): |sum| up to 2**30, still exact."""
    cp, _cuda, cb, fused = gpu
    monkeypatch.setattr(fused, "config", config)
    n, B, m, n_p, k = 4, 1, 64, 48, 1 << 16
    pa = _planes(cp, n, B, m, k, k, seed=3, extreme=True)
    pb = _planes(cp, n, B, n_p, k, k, seed=4, extreme=True)
    ref32 = cb.gemm._cublas_int8_products(pa, pb)
    got = fused.int8_mod_products(pa, pb, n)
    assert bool(cp.all(got[0, ..., :n_p] == _reference_mod(cp, ref32, n)))
    assert fused.int8_mod_products(pa, pb, n + 1) is None  # count must match the planes
    pa2 = cp.zeros((1, n, B, m, k + 16), dtype=cp.int8)
    pb2 = cp.zeros((1, n, B, n_p, k + 16), dtype=cp.int8)
    assert fused.int8_mod_products(pa2, pb2, n) is None  # beyond 2**16: the caller's K-blocks


@pytest.mark.gpu
def test_fused_errors(gpu):
    cp, _cuda, _, _ = gpu
    a = cp.zeros(4096, dtype=cp.int8)
    c = cp.zeros(4096, dtype=cp.int8)
    mods = cp.asarray([255], dtype=cp.int32)
    stream = cp.cuda.get_current_stream().ptr
    args = dict(m=16, n=16, k=32, lda=32, ldb=32, ldc=16, batch=1, stride_a=0, stride_b=0,
                stride_c=0, moduli=mods.data.ptr, stream=stream)  # fmt: skip
    _cuda.gemm_s8_mod_batched(a.data.ptr, a.data.ptr, c.data.ptr, **args)
    with pytest.raises(RuntimeError, match="16-byte aligned"):
        _cuda.gemm_s8_mod_batched(a.data.ptr + 1, a.data.ptr, c.data.ptr, **args)
    with pytest.raises(RuntimeError, match="multiples of 16"):
        _cuda.gemm_s8_mod_batched(a.data.ptr, a.data.ptr, c.data.ptr, **dict(args, k=24))
    with pytest.raises(RuntimeError, match="65536"):
        _cuda.gemm_s8_mod_batched(a.data.ptr, a.data.ptr, c.data.ptr,
                                  **dict(args, k=1 << 17, lda=1 << 17, ldb=1 << 17))  # fmt: skip
    with pytest.raises(ValueError):
        _cuda.gemm_s8_mod_batched(a.data.ptr, a.data.ptr, c.data.ptr, **dict(args, config=99))
    cp.cuda.get_current_stream().synchronize()
    info = _cuda.config_info(0, 1)
    assert info["num_regs"] > 0 and info["local_bytes"] == 0  # no spills


@pytest.mark.gpu
def test_fused_mod_reduces_the_gaussian_moduli(gpu):
    """Complex products modulo the Gaussian moduli: planes u and v (P = 2) in one launch, each
    reduced modulo GAUSSIAN_MODULI[l], as cuBLAS's INT32 products reduced in cupy."""
    cp, _cuda, cb, fused = gpu
    n, B, m, n_p, k = 16, 2, 130, 70, 1000
    kp = -(-k // 16) * 16
    pa = cp.concatenate([_planes(cp, n, B, m, kp, k, seed=s) for s in (7, 8)])
    pb = cp.concatenate([_planes(cp, n, B, n_p, kp, k, seed=s) for s in (9, 10)])
    ref32 = cb.gemm._cublas_int8_products(pa, pb)
    got = fused.int8_mod_products(pa, pb, n, gaussian=True)
    assert got is not None and got.shape[:4] == (2, n, B, m)
    ms = cp.asarray(GAUSSIAN_MODULI[:n], dtype=cp.int64)[:, None, None, None]
    r = cp.mod(ref32[0].astype(cp.int64), ms)
    assert bool(cp.all(got[..., :n_p] == cp.where(r > (ms - 1) // 2, r - ms, r)))
    assert fused.int8_mod_products(pa[:1], pb[:1], n, gaussian=True) is None  # u and v


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["real", "complex", "gaussian"])
@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("case", [((), 1, 1, 1), ((), 7, 68, 61), ((2,), 129, 257, 65),
                                  ((), 300, 1000, 200)], ids=str)  # fmt: skip
def test_scheme2_through_fused_path_is_bit_identical(gpu, monkeypatch, case, out_dtype, kind):
    """Real products, complex 3M (three products per modulus in one fused launch, combined in
    the INT8 CRT) and complex modulo the Gaussian moduli (two) bit for bit as the cuBLAS INT32
    path."""
    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.inputs import phi_matrix

    cp, _cuda, cb, fused = gpu
    batch, m, k, n = case
    cplx, gauss = kind != "real", kind == "gaussian"
    dt = "complex128" if cplx else "float64"
    a = cp.asarray(phi_matrix(batch + (m, k), 1.0, dt, seed=5))
    b = cp.asarray(phi_matrix(batch + (k, n), 1.0, dt, seed=6))
    import array_api_compat.cupy as cxp

    ai = cp.ascontiguousarray(a.imag) if cplx else None
    bi = cp.ascontiguousarray(b.imag) if cplx else None
    a, b = cp.ascontiguousarray(a.real), cp.ascontiguousarray(b.real)
    pre = ozaki2_prescale(cxp, cb.int_matmul, a, ai, b, bi, "accurate")
    # emulinalg/backends/cupy/products.py uses the fused GEMM + INT8 CRT where it applies: compare
    # with the cuBLAS INT32 path (fused switched off) and check the fused path really ran.
    calls = []
    mod_products = fused.int8_mod_products
    monkeypatch.setattr(
        fused, "int8_mod_products", lambda *a_: calls.append(1) or mod_products(*a_)
    )
    got = cb.ozaki2_product(a, ai, b, bi, 18, "accurate", out_dtype, pre, gauss)
    assert calls
    monkeypatch.setattr(fused, "available", lambda: False)
    want = cb.ozaki2_product(a, ai, b, bi, 18, "accurate", out_dtype, pre, gauss)
    flat = lambda r: [x for p in r for x in (p if isinstance(p, tuple) else (p,))]  # noqa: E731
    for g, w in zip(flat(got), flat(want)):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert bool(cp.all(g.view(cp.uint8) == w.view(cp.uint8)))
