"""The C++ residue/CRT pipeline (``src_amx/ozaki2_host.cpp``) behind the amx backend's product
hook (``amx.ozaki2_product``), on the tile model.

Bit for bit the generic ``emulinalg.algorithm.products.product`` (real and complex 3M, ties,
float64, float32 and double-double, strided views); its residues against Python integers, its
CRT against exact rounding; the panel products (``ozaki2_pack`` / ``ozaki2_multiply``) under
every blocking, on AMX where available (marked ``amx``); calls from several threads. Every test
runs on both forms of the C++ residue and CRT loops: the explicit AVX-512 ones (where the CPU
has them) and the portable ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from _amx_helpers import (
    NEST0_TUNINGS,
    TUNING_SHAPES_TIERED,
    TUNINGS,
    _amx,
    _pipeline_inputs,
    amx_only,
    force_amx_backend,
    matmul_amx_and_numpy,
)
from _helpers import rounding_cases, scaled_integer, tie_operands

import emulinalg
from emulinalg import OzakiII
from emulinalg.inputs import phi_matrix

pytestmark = [
    pytest.mark.skipif(
        _amx is None, reason="emulinalg._amx is not built (not x86-64, or no C++ compiler)"
    ),
    pytest.mark.usefixtures("host_loops"),
]


def _assert_product_equal(ar, ai, br, bi, moduli, out_dtype):
    """amx.ozaki2_product == products.product (numpy) byte for byte, part by part (dtype
    included), on the generic prescale; returns the hook's parts."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import products
    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    pre = ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
    got = amx.ozaki2_product(ar, ai, br, bi, moduli, "accurate", out_dtype, pre)
    with np.errstate(over="ignore"):  # float32 results beyond range round to inf, as native
        want = products.product(
            xp, npb.int_matmul, ar, ai, br, bi, moduli, "accurate", out_dtype, pre
        )
    assert got is not None and len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and np.array_equal(g.view(np.uint8), w.view(np.uint8))
    return got


@pytest.mark.parametrize("case", ["phi", "wide", "huge"])
@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("moduli", [2, 9, 17, 20])
def test_host_pipeline_equals_the_generic_product(case, out_dtype, moduli, monkeypatch, rng):
    """amx.ozaki2_product (C++ residues and CRT, tile-model INT8 GEMMs) against
    emulinalg.algorithm.products.product on numpy, bit for bit, views included."""
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    a, b = _pipeline_inputs(case, rng)
    _assert_product_equal(np.asfortranarray(a)[::-1], None, b, None, moduli, out_dtype)


def test_host_pipeline_declines_what_it_does_not_cover(monkeypatch):
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    a, b = np.ones((4, 8)), np.ones((8, 3))
    pre = (np.zeros(4, np.int64), np.zeros(3, np.int64), np.ones(4), np.ones(3))
    assert amx.ozaki2_product(a, a, b, None, 9, "accurate", "float64", pre) is None  # half complex
    assert amx.ozaki2_product(a[None], None, b[None], None, 9, "accurate", "float64", pre) is None
    assert amx.ozaki2_product(a, None, b, None, 9, "accurate", "float64", None) is None


def test_level_products_use_the_host_pipeline(backend, monkeypatch):
    """The default level through the amx backend runs the hook and equals numpy's product."""
    from emulinalg.backends import amx

    calls = []
    real = amx.ozaki2_product
    monkeypatch.setattr(amx, "ozaki2_product", lambda *args: calls.append(1) or real(*args))
    a = phi_matrix((60, 90), 1.0, "float64", seed=51)
    b = phi_matrix((90, 40), 1.0, "float64", seed=52)
    with emulinalg.config(strategy="eager"):
        got, want = matmul_amx_and_numpy(monkeypatch, a, b, None)
    assert calls
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))


def test_host_crt_from_two_threads_at_once(monkeypatch):
    """Two Python threads in the C++ CRT together (it releases the GIL, then takes the lock of
    its digit tables): both finish, with the generic results."""
    import threading

    import array_api_compat.numpy as xp

    from emulinalg.algorithm import products
    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    monkeypatch.setattr(amx, "EMULATE", True)
    a = phi_matrix((400, 3), 1.0, "float64", seed=71)
    b = phi_matrix((3, 400), 1.0, "float64", seed=72)
    pre = ozaki2_prescale(xp, npb.int_matmul, a, None, b, None, "accurate")
    want = products.product(xp, npb.int_matmul, a, None, b, None, 20, "accurate", "float64", pre)
    results, errors = [], []

    def work():
        try:
            for _ in range(5):
                results.append(amx.ozaki2_product(a, None, b, None, 20, "accurate", "float64", pre))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "the CRT calls did not finish (deadlock?)"
    assert not errors and len(results) == 10
    assert all(np.array_equal(r[0], want[0]) for r in results)


def test_host_crt_with_fewer_openmp_threads_than_asked(tmp_path):
    """OMP_THREAD_LIMIT below OMP_NUM_THREADS: every output row is still written."""
    import subprocess
    import sys

    code = (
        "import numpy as np, array_api_compat.numpy as xp\n"
        "from emulinalg.algorithm import products\n"
        "from emulinalg.algorithm.scaling import ozaki2_prescale\n"
        "from emulinalg.backends import amx, numpy as npb\n"
        "from emulinalg.inputs import phi_matrix\n"
        "amx.EMULATE = True\n"
        "a = phi_matrix((64, 50), 1.0, 'float64', seed=1)\n"
        "b = phi_matrix((50, 9), 1.0, 'float64', seed=2)\n"
        "pre = ozaki2_prescale(xp, npb.int_matmul, a, None, b, None, 'accurate')\n"
        "imm = npb.int_matmul\n"
        "w = products.product(xp, imm, a, None, b, None, 14, 'accurate', 'float64', pre)\n"
        "g = amx.ozaki2_product(a, None, b, None, 14, 'accurate', 'float64', pre)\n"
        "print(int(np.sum(g[0] != w[0])))\n"
    )
    import os

    env = dict(os.environ, OMP_NUM_THREADS="4", OMP_THREAD_LIMIT="2", OMP_DYNAMIC="true")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


def test_host_stages_refuse_fields_of_structured_arrays(monkeypatch):
    """A float64 field of a structured array (12-byte strides): the hooks decline, the C++
    refuses it directly, and the product through the amx backend equals numpy's."""
    from emulinalg import _amx
    from emulinalg.backends import amx

    s = np.zeros((40, 60), [("a", "<f8"), ("b", "<i4")])
    s["a"] = phi_matrix((40, 60), 1.0, "float64", seed=81)
    a = s["a"]
    b = phi_matrix((60, 30), 1.0, "float64", seed=82)
    assert amx.ozaki2_prescale(a, None, b, None, "accurate") is None
    with pytest.raises(ValueError, match="multiple of 8"):
        _amx.ozaki2_residues(a, np.zeros(40, np.int32), 5)
    with pytest.raises(ValueError, match="multiples of 8"):
        _amx.ozaki2_bound_operand(a)
    force_amx_backend(monkeypatch, emulate=True)
    got, want = matmul_amx_and_numpy(monkeypatch, a, b, OzakiII(moduli=14))
    assert np.array_equal(got, want)


@pytest.mark.parametrize("case", ["phi", "imaginary", "wide"])
@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("moduli", [2, 11, 20])
def test_host_pipeline_complex_3m_equals_the_generic_product(
    case, out_dtype, moduli, monkeypatch, rng
):
    """Complex products in the C++ stages (3M residue planes, T1/T2/T3 -> Re/Im per modulus, a
    two-part CRT) against emulinalg.algorithm.products.product, bit for bit, views included."""
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    a = phi_matrix((23, 70), 1.0, "complex128", seed=91)
    b = phi_matrix((70, 17), 1.0, "complex128", seed=92)
    if case == "imaginary":
        a = 1j * a.imag
    elif case == "wide":
        a = a * np.exp2(rng.integers(-300, 300, (23, 1)))
        b = b * np.exp2(rng.integers(-300, 300, (1, 17)))
        b[:, 3] = 0
    ar, ai = np.real(a)[::-1], np.imag(a)[::-1]  # strided views
    br, bi = np.asfortranarray(np.real(b)), np.asfortranarray(np.imag(b))
    assert len(_assert_product_equal(ar, ai, br, bi, moduli, out_dtype)) == 2


@pytest.mark.parametrize("nearest", [False, True])
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize(("m", "k", "n"), TUNING_SHAPES_TIERED)
def test_host_panel_products_equal_reduced_exact_products(
    rng, restore_blocking, cplx, nearest, m, k, n
):
    """ozaki2_pack + ozaki2_multiply (residues straight into the tile panels, every GEMM reduced
    modulo m_l in its epilogue; 3M for complex) against the exact int64 products of the residue
    planes (ozaki2_residues, checked against Python integers below) reduced in numpy, under
    every blocking (K in one chunk or several, edge blocks, static and dynamic grids) and 1 or
    3 threads, on the tile model; the scaled operands rounded to nearest or toward zero."""
    from emulinalg.algorithm.moduli import MODULI

    nmod = 5
    a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-30, 30, (m, 1)))
    b = rng.standard_normal((k, n)) * np.exp2(rng.integers(-30, 30, (1, n)))
    ai = rng.standard_normal((m, k)) * np.abs(a).max(1, keepdims=True) if cplx else None
    bi = rng.standard_normal((k, n)) * np.abs(b).max(0, keepdims=True) if cplx else None
    mu = (40 - np.frexp(np.abs(a).max(1) * 3)[1]).astype(np.int32)
    nu = (40 - np.frexp(np.abs(b).max(0) * 3)[1]).astype(np.int32)
    near = {"nearest": nearest}
    if cplx:
        pa = _amx.ozaki2_residues3(a, ai, mu, nmod, True, **near).astype(np.int64)
        pb = _amx.ozaki2_residues3(b.T, bi.T, nu, nmod, False, **near).astype(np.int64)
    else:
        pa = _amx.ozaki2_residues(a, mu, nmod, True, **near)[None].astype(np.int64)
        pb = _amx.ozaki2_residues(b.T, nu, nmod, False, **near)[None].astype(np.int64)
    want = []
    for ell, mm in enumerate(MODULI[:nmod]):
        t = [pa[p, ell] @ pb[p, ell] for p in range(len(pa))]
        parts = [t[0] - t[1], t[2] - t[0] - t[1]] if cplx else [t[0]]
        want.append([_symmetric(x, mm) for x in parts])
    for spec in TUNINGS[:4] + TUNINGS[-2:] + NEST0_TUNINGS:
        _amx.set_blocking("default," + spec)
        stream = spec == TUNINGS[-1]  # non-temporal panel stores: the same bytes
        panels = _amx.ozaki2_pack(a, b, mu, nu, nmod, ai, bi, stream=stream, **near)
        for threads in (1, 3):
            for ell in range(nmod):
                re = np.full((m, n), 99, np.int8)
                im = np.full((m, n), 99, np.int8) if cplx else None
                _amx.ozaki2_multiply(panels, ell, re, im, emulate=True, threads=threads)
                assert np.array_equal(re, want[ell][0]), (spec, threads, ell)
                if cplx:
                    assert np.array_equal(im, want[ell][1]), (spec, threads, ell)
    _amx.set_blocking("default")
    panels = _amx.ozaki2_pack(a, b, mu, nu, nmod, ai, bi, **near)
    for kc in (1, 3, 8):  # a call's own K chunk (the amx backend's timed choice)
        for ell in range(nmod):
            re = np.full((m, n), 99, np.int8)
            im = np.full((m, n), 99, np.int8) if cplx else None
            _amx.ozaki2_multiply(panels, ell, re, im, emulate=True, kc=kc)
            assert np.array_equal(re, want[ell][0]), (kc, ell)
            assert not cplx or np.array_equal(im, want[ell][1]), (kc, ell)


@amx_only
@pytest.mark.amx
@pytest.mark.parametrize(
    "spec", ["", "kc=2", "mc=32,nc=32,kc=1,partition=1", "kc=2,nest=0", "mc=32,nc=64,kc=1,nest=0"]
)
def test_host_panel_products_amx_equal_the_model(rng, restore_blocking, spec):
    """ozaki2_multiply on real tiles (its AVX-512 epilogue) equals the tile model's, real and
    3M, with K in one chunk or several."""
    a = rng.standard_normal((100, 700))
    b = rng.standard_normal((700, 90))
    ai, bi = rng.standard_normal(a.shape), rng.standard_normal(b.shape)
    mu, nu = np.full(100, 30, np.int32), np.full(90, 30, np.int32)
    if spec:
        _amx.set_blocking("default," + spec)
    for im_a, im_b in ((None, None), (ai, bi)):
        panels = _amx.ozaki2_pack(a, b, mu, nu, 18, im_a, im_b)
        for ell in range(18):
            got = [np.empty((100, 90), np.int8) for _ in range(2)]
            want = [np.empty((100, 90), np.int8) for _ in range(2)]
            cplx = im_a is not None
            _amx.ozaki2_multiply(panels, ell, got[0], got[1] if cplx else None)
            _amx.ozaki2_multiply(panels, ell, want[0], want[1] if cplx else None, emulate=True)
            assert np.array_equal(got[0], want[0])
            assert not cplx or np.array_equal(got[1], want[1])


def test_host_panel_products_refuse_bad_outputs():
    a, b = np.ones((4, 8)), np.ones((8, 3))
    mu, nu = np.zeros(4, np.int32), np.zeros(3, np.int32)
    panels = _amx.ozaki2_pack(a, b, mu, nu, 3)
    with pytest.raises(ValueError, match="writable C-contiguous"):
        _amx.ozaki2_multiply(panels, 0, np.zeros((4, 3), np.int32), emulate=True)
    with pytest.raises(ValueError, match="no such modulus"):
        _amx.ozaki2_multiply(panels, 3, np.zeros((4, 3), np.int8), emulate=True)
    with pytest.raises(ValueError, match="im is needed"):
        _amx.ozaki2_multiply(panels, 0, np.zeros((4, 3), np.int8), np.zeros((4, 3), np.int8),
                             emulate=True)  # fmt: skip
    with pytest.raises(ValueError, match="inner dimensions"):
        _amx.ozaki2_pack(a, b.T, mu, nu, 3)
    res = panels.residues
    assert res.shape == (1, 3, 4, 3) and res.dtype == np.int8
    panels.release_operands()
    with pytest.raises(ValueError, match="released"):
        _amx.ozaki2_multiply(panels, 0, res[0, 0], emulate=True)
    del panels
    res[0, 2] = 7  # the residues outlive the panels object: the array holds it
    assert res.sum() == 7 * 12 + int(res[0, :2].astype(np.int64).sum())
    with pytest.raises(ValueError, match="both imaginary parts"):
        _amx.ozaki2_pack(a, b, mu, nu, 3, a)


def test_host_panel_products_survive_a_release_from_another_thread():
    """release_operands while an ozaki2_multiply runs in another thread: the multiply keeps its
    own references to the panels, so its residues are still right (and nothing crashes)."""
    import threading

    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((256, 640)), rng.standard_normal((640, 256))
    mu, nu = np.full(256, 30, np.int32), np.full(256, 30, np.int32)
    want = np.empty((256, 256), np.int8)
    _amx.ozaki2_multiply(_amx.ozaki2_pack(a, b, mu, nu, 3), 2, want, emulate=True)
    panels = _amx.ozaki2_pack(a, b, mu, nu, 3)
    got = np.zeros((256, 256), np.int8)
    worker = threading.Thread(
        target=lambda: _amx.ozaki2_multiply(panels, 2, got, emulate=True, threads=1)
    )
    worker.start()
    panels.release_operands()
    for _ in range(3):  # reuse the freed buffers while the multiply may still read its own
        _amx.ozaki2_pack(b.T.copy(), a.T.copy(), nu, mu, 3)
    worker.join()
    assert np.array_equal(got, want)


def _symmetric(x, m):
    """Symmetric residue in [-(m // 2), (m - 1) // 2] of Python or numpy integers."""
    return (x + m // 2) % m - m // 2


def _exact_residue(x, shift, m, nearest=False):
    """Symmetric residue of x 2**shift rounded to nearest (ties to even) or toward zero, mod m,
    in Python integers."""
    return _symmetric(scaled_integer(x, shift, nearest), m)


@pytest.mark.parametrize("nearest", [False, True])
@pytest.mark.parametrize("order", ["C", "F"])
def test_host_residues_equal_python_integers(order, nearest, rng):
    """ozaki2_residues and ozaki2_residues3 (vectorized float64 pieces, runs along either memory
    axis, lines of 70 entries: a whole run of 64 and a partial one) against x 2**shift rounded
    to nearest or toward zero, mod m, in Python integers for all 20 moduli: integers up to
    2**81 and a line up to the documented 2**96, subnormals, +-0, shifts beyond 1023 and below
    -1022, lines whose integers are all 0 or 1."""
    from emulinalg.algorithm.moduli import MODULI

    R, C = 9, 70
    x = rng.standard_normal((R, C)) * np.exp2(rng.integers(-60, 60, (R, C)))
    x[0, :6] = [5e-324, -5e-324, 0.0, -0.0, 2.2250738585072014e-308, -1.5]
    x[1] = rng.standard_normal(C) * 2.0**1000
    x[2] = 2.0**-1074 * rng.integers(-(2**20), 2**20, C)  # subnormals
    x[3] = rng.uniform(-2, 2, C)  # integers 0 and +-1 at shift 0
    x[5] = [m * (c + 1) * (-1) ** c for c, m in enumerate(MODULI[:20] * 4)][:C]  # m divides X
    x[5, :3] = [2.0**70, -(2.0**70), 2.0**79 + 2.0**27]
    x[5, 3:6] = [128.0, -384.0, 2.0**52 + 128]  # m = 256: s / m a half-integer, residue -128
    shift = (80 - np.frexp(np.abs(x).max(1))[1]).astype(np.int32)  # max |X| in [2**79, 2**80)
    shift[2] = 1074 + 40  # beyond 1023: two scale factors
    shift[3] = 0
    shift[4] = -1100  # every integer 0
    shift[5] = 0
    shift[6] = 96 - np.frexp(np.abs(x[6]).max())[1]  # max |X| in [2**95, 2**96)
    y = x[:, ::-1] * rng.uniform(-1, 1, (R, C))  # imaginary parts within each line's range
    xs, ys = (x, y) if order == "C" else (np.asfortranarray(x), np.asfortranarray(y))
    got = _amx.ozaki2_residues(xs, shift, 20, True, nearest=nearest)
    got_t = _amx.ozaki2_residues(xs, shift, 20, False, nearest=nearest)  # planes (moduli, C, R)
    got3 = _amx.ozaki2_residues3(xs, ys, shift, 20, True, nearest=nearest)
    for ell, m in enumerate(MODULI[:20]):
        want = np.array([[_exact_residue(x[r, c], shift[r], m, nearest) for c in range(C)]
                         for r in range(R)])  # fmt: skip
        want_y = np.array([[_exact_residue(y[r, c], shift[r], m, nearest) for c in range(C)]
                           for r in range(R)])  # fmt: skip
        assert np.array_equal(got[ell], want), m
        assert np.array_equal(got_t[ell], want.T), m
        assert np.array_equal(got3[0, ell], want) and np.array_equal(got3[1, ell], want_y)
        assert np.array_equal(got3[2, ell], _symmetric(want + want_y, m)), m


@pytest.mark.parametrize("nearest", [False, True])
def test_host_residues_round_crafted_entries(nearest):
    """ozaki2_residues(3) on entries built for the rounding (``_helpers.rounding_cases``: ties
    n + 1/2 of both parities and signs, 1/2 -> 0, 3/2 -> 2, below 1/2, subnormals, shifts below
    -1022 and beyond 1023, 1 to 70 bits below the point), one entry per line with its own shift,
    in runs along lines and across lines, against Python's integers."""
    from emulinalg.algorithm.moduli import MODULI

    x, shift = rounding_cases(np.random.default_rng(3))
    y = x * 0.375
    s32 = shift.astype(np.int32)
    col = x.reshape(-1, 1)  # runs of one entry along each line
    across = np.asfortranarray(np.stack([x, y], axis=1))  # runs across lines
    got = _amx.ozaki2_residues(col, s32, 20, True, nearest=nearest)[:, :, 0]
    got_across = _amx.ozaki2_residues(across, s32, 20, True, nearest=nearest)
    got3 = _amx.ozaki2_residues3(col, y.reshape(-1, 1), s32, 20, True, nearest=nearest)[..., 0]
    for ell, m in enumerate(MODULI[:20]):
        want = np.array([_exact_residue(v, s, m, nearest) for v, s in zip(x, shift)])
        want_y = np.array([_exact_residue(v, s, m, nearest) for v, s in zip(y, shift)])
        assert np.array_equal(got[ell], want), m
        assert np.array_equal(got_across[ell, :, 0], want), m
        assert np.array_equal(got_across[ell, :, 1], want_y), m
        assert np.array_equal(got3[0, ell], want) and np.array_equal(got3[1, ell], want_y), m
        assert np.array_equal(got3[2, ell], _symmetric(want + want_y, m)), m


# (moduli, k, rounds): accurate mode on both sides of scaling.rounds_to_nearest
ROUNDING_SWITCH = [(3, 62, True), (3, 63, False), (2, 80, False), (11, 200, True)]


@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize(("moduli", "k", "rounds"), ROUNDING_SWITCH)
def test_host_pipeline_rounds_ties_as_the_generic_product(moduli, k, rounds, cplx, monkeypatch):
    """amx.ozaki2_product on operands whose scaled entries are ties n + 1/2 (both parities and
    signs), 1/2, below 1/2 or subnormal, for counts that round and counts that truncate (the
    tile model's GEMMs): products.product's bits, real and complex, float64 and double-double."""
    from emulinalg.algorithm import products
    from emulinalg.algorithm.moduli import crt_constants
    from emulinalg.algorithm.scaling import ozaki2_shifts, rounds_to_nearest
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    monkeypatch.setattr(amx, "EMULATE", True)
    assert rounds_to_nearest(moduli, k, "accurate") == rounds
    ar, ai, br, bi, pre = tie_operands(((), 37, k, 29), cplx, moduli, "accurate", seed=k)
    c = crt_constants(moduli)
    _, nu = ozaki2_shifts(np, pre, c.L, c.Q_down)
    v = np.ldexp(br, nu[None, :])
    assert (np.abs(v - np.trunc(v)) == 0.5).sum() > br.size // 20  # ties in B (and A)
    for out_dtype in ("float64", "dd"):
        got = amx.ozaki2_product(ar, ai, br, bi, moduli, "accurate", out_dtype, pre)
        with npb.quiet():
            want = products.product(
                np, npb.int_matmul, ar, ai, br, bi, moduli, "accurate", out_dtype, pre
            )
        assert got is not None and len(got) == len(want)
        flat = [[x for p in r for x in (p if isinstance(p, tuple) else (p,))] for r in (got, want)]
        for g, w in zip(*flat):
            assert g.dtype == w.dtype and np.array_equal(g.view(np.uint8), w.view(np.uint8))


def _round_float32(v):
    """Fraction v rounded to the nearest float32 (ties to even; inf beyond range)."""
    from fractions import Fraction

    if v == 0:
        return 0.0
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2**e <= a < 2**(e + 2)
    e += Fraction(2) ** (e + 1) <= a
    ulp = Fraction(2) ** max(e - 23, -149)
    q, r = divmod(a, ulp)
    q += (r > ulp / 2) or (r == ulp / 2 and q % 2 == 1)
    out = np.inf if q * ulp >= 2**128 else float(q * ulp)  # exact: a float32 value
    return float(np.float32(-out if v < 0 else out))


@pytest.mark.parametrize("moduli", [2, 9, 18, 20])
def test_host_crt_rounds_known_integers_exactly(moduli, rng):
    """ozaki2_crt from the residues of known integers Y (|Y| <= P/4, magnitudes spread over the
    whole range) against Y 2**-(mu_i + nu_j) rounded once in Python (float64 and float32),
    with shifts that put results of one run among normal numbers, subnormals, zeros and
    overflow: the vectorized rounding and its fallback to finish() agree with exact rounding."""
    from fractions import Fraction

    from emulinalg.algorithm.moduli import MODULI, crt_constants
    from emulinalg.backends.amx import _crt_arrays

    P = crt_constants(moduli).P
    m, n = 3, 150
    bits = rng.integers(0, P.bit_length() - 2, (m, n))
    Y = [[int(rng.integers(0, 2**62)) * 2 ** max(0, int(b) - 62) % (P // 4 + 1)
          * (1 if rng.random() < 0.5 else -1) for b in row] for row in bits]  # fmt: skip
    ties = [
        (2**53 + 1) << 40,
        -((2**53 + 3) << 41),
        (2**24 + 1) << 40,
        -((2**24 + 3) << 3),
        ((2**53 + 1) << 40) + 1,
        (2**54 + 2) << 30,
    ]  # ties to even, and just above one
    # in the second run of 64 columns (the first has the extreme shifts: it takes finish())
    Y[0][70 : 70 + len(ties)] = [v if abs(v) <= P // 4 else v % (P // 4) for v in ties]
    res = np.array([[[_symmetric(v, mm) for v in row] for row in Y] for mm in MODULI[:moduli]],
                   dtype=np.int8)  # fmt: skip
    mu = np.array([0, 900, -200], np.int32)  # row 1: tiny results; row 2: huge ones
    nu = rng.integers(-40, 240, n).astype(np.int32)
    nu[:3] = [1100, 1074 + 120, -1024]
    for kind, dt in ((0, np.float64), (1, np.float32)):
        out = np.empty((m, n), dt)
        _amx.ozaki2_crt(res, mu, nu, kind, *_crt_arrays(moduli), out)
        for i in range(m):
            for j in range(n):
                v = Fraction(Y[i][j]) * Fraction(2) ** -int(mu[i] + nu[j])
                if kind == 1:
                    want = _round_float32(v)
                else:
                    try:
                        want = float(v)
                    except OverflowError:
                        want = np.inf if v > 0 else -np.inf
                assert out[i, j] == want and np.signbit(out[i, j]) == np.signbit(want), (i, j)


def test_host_crt_word_counts_match_the_tables():
    """The CRT accumulator sizes compiled into emulinalg._amx (kCrtWords of
    src_cuda/ozaki2_tables.h, generated from crt_words) equal crt_words, from which the digit
    tables are built: the module was built from the current header."""
    from emulinalg import _amx
    from emulinalg.backends.cuda import crt_words

    assert [_amx.crt_words(n) for n in range(2, 21)] == [crt_words(n) for n in range(2, 21)]
