"""The numpy and amx backends' refit choice (``backends.host_refit.refit_pick``): the same
entries as the generic ``refit.cancelled_entries`` on the same parts, real and complex (each
part's measure too), float64 and float32 parts, batches, entries taken from the native product,
exact zeros (more than the refit takes), ties, NaN and inf, lines of zero bound, more candidates
than the refit takes; by ``emulinalg._amx.refit_candidates``' one pass (split among several
threads too) and by the Python blocks of rows (blocks that cross no batch boundary) where the
compiled module is absent or the parts are not contiguous."""

from __future__ import annotations

import functools

import array_api_compat.numpy as xp
import numpy as np
import pytest

from emulinalg.algorithm import refit
from emulinalg.algorithm.scaling import ozaki2_prescale
from emulinalg.backends import amx, host_refit
from emulinalg.backends import numpy as npb
from emulinalg.inputs import phi_matrix

_NATIVE = host_refit._native()
needs_native = pytest.mark.skipif(_NATIVE is None, reason="emulinalg._amx lacks refit_candidates")


def _blocks_only(monkeypatch, block=host_refit.BLOCK_ENTRIES):
    """refit_pick by the Python blocks of rows (as without the compiled module)."""
    monkeypatch.setattr(host_refit, "_native", lambda: None)
    monkeypatch.setattr(host_refit, "BLOCK_ENTRIES", block)


def _native_only(monkeypatch, threads=0):
    """refit_pick by refit_candidates on ``threads`` threads (0: OpenMP's default); the Python
    blocks raise."""
    monkeypatch.setattr(host_refit, "_native", lambda: functools.partial(_NATIVE, threads=threads))

    def no_blocks(*args):
        raise AssertionError("refit_pick took the Python blocks")

    monkeypatch.setattr(host_refit, "_by_blocks", no_blocks)


def _prescale(a, b):
    cplx = np.iscomplexobj(a)
    split = [a.real, a.imag if cplx else None, b.real, b.imag if cplx else None]
    return ozaki2_prescale(xp, npb.int_matmul, *(None if x is None else
                                                 np.ascontiguousarray(x, dtype=np.float64)
                                                 for x in split), "accurate")  # fmt: skip


def _split(c):
    if np.iscomplexobj(c):
        return [np.ascontiguousarray(c.real), np.ascontiguousarray(c.imag)]
    return [np.ascontiguousarray(c)]


def _case(dtype, batch, zeros, nan, flat_ratios=False):
    m, k, n = 70, 40, 52
    cplx = dtype.startswith("complex")
    a = phi_matrix(batch + (m, k), 1.0, dtype, seed=3)
    b = phi_matrix(batch + (k, n), 1.0, dtype, seed=4)
    c = np.matmul(a, b)
    if flat_ratios:  # thousands of candidates within the spread of the smallest ratio
        c = np.ones_like(c) + 1e-3 * np.arange(c.size).reshape(c.shape) / c.size
    if zeros:
        c[..., 5, :7] = 0
        c[..., 60, 50:] = 0
        if cplx:
            c[..., 9, :] = c[..., 9, :].real
    if nan:
        c[..., 3, 4] = np.nan
    return _split(c), _prescale(a, b)


@pytest.mark.parametrize("path,block", [("native", None), ("blocks", host_refit.BLOCK_ENTRIES),
                                        ("blocks", 100)])  # fmt: skip
@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("zeros,nan,flat", [(False, False, False), (True, True, False),
                                            (False, False, True)])  # fmt: skip
@pytest.mark.parametrize("batch", [(), (3,)])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "complex64"])
def test_refit_pick_is_the_generic_choice(dtype, batch, zeros, nan, flat, exclude, path, block,
                                          monkeypatch):  # fmt: skip
    if path == "native":
        if _NATIVE is None:
            pytest.skip("emulinalg._amx lacks refit_candidates")
        _native_only(monkeypatch)
    else:
        _blocks_only(monkeypatch, block)  # 100: a block of 1 or 2 rows
    parts, pre = _case(dtype, batch, zeros, nan, flat)
    ex = None
    if exclude:
        ex = np.zeros(parts[0].shape, dtype=bool)
        ex[..., ::7, ::5] = True
    want = refit.cancelled_entries(xp, parts, pre, ex)
    with np.errstate(invalid="ignore"):
        got = host_refit.refit_pick(parts, pre, ex, False)
    _assert_same_entries(got, want)
    hooked = refit.cancelled_entries(xp, parts, pre, ex, hook=host_refit.refit_pick)
    assert (hooked is None) == (want is None)


def _assert_same_entries(got, want):
    """refit_pick's indices (int64, possibly empty) equal cancelled_entries' (None: none)."""
    assert got is not None and got.dtype == np.int64
    if want is None:
        assert got.shape[0] == 0
    else:
        np.testing.assert_array_equal(got, want)


def test_every_entry_is_left_to_the_generic_code():
    parts, pre = _case("float64", (), False, False)
    assert host_refit.refit_pick(parts, pre, None, True) is None


def test_the_cpu_backends_declare_it():
    assert npb.refit_pick is host_refit.refit_pick and amx.refit_pick is host_refit.refit_pick


def _special(kind, dtype, batch):
    """(parts, prescale, exclude) of a product made to test one corner of the choice."""
    m, k, n = 70, 40, 52
    cplx = dtype.startswith("complex")
    a = phi_matrix(batch + (m, k), 1.0, dtype, seed=5)
    b = phi_matrix(batch + (k, n), 1.0, dtype, seed=6)
    if kind in ("ties", "ties_late"):  # equal rows of A: each column's q repeats down the rows
        a = np.ascontiguousarray(np.broadcast_to(a[..., :1, :], a.shape))
    if kind == "ties_late":  # and equal columns of B: one q per matrix of the batch
        b = np.ascontiguousarray(np.broadcast_to(b[..., :1], b.shape))
    if kind == "zero_lines":  # lines of zero bound: factor inf, so q = nan (0 inf) or inf
        a[..., 11, :] = 0
        b[..., :, 17] = 0
    c = np.matmul(a, b)
    ex = None
    if kind == "zeros":  # more exact zeros than the refit takes, after the candidates fill up
        c[..., 30, ::3] = 0
        c[..., 60:63, :] = 0
        c[..., 66, 1] = 0
    elif kind == "ties_late":  # smaller q after the tied ones fill up, in rows with a tie too
        c[..., 60:, 0] *= 0.5
    elif kind == "nan_inf":
        c[..., 3, 4] = np.nan
        c[..., 6, 7] = np.inf
        c[..., 8, 9] = -np.inf
        if cplx:
            c[..., 12, 13] = complex(1.0, np.inf)
            c[..., 14, 15] = complex(np.nan, 0.5)
    elif kind == "exclude":
        ex = np.zeros(c.shape, dtype=bool)
        ex[..., ::3, ::2] = True
        ex[..., 20:30, :] = True
    elif kind == "within_spread":  # every q within 2**8 of the smallest: thousands of candidates
        c = np.ones_like(c) * (1 + 1e-4 * np.arange(c.shape[-1]))[::-1]
    elif kind == "all_zero":
        c = np.zeros_like(c)
    elif kind == "zero_lines":
        c[..., 11, 3] = 1.0  # a value where the bound is 0: q inf
    return _split(c.astype(dtype)), _prescale(a, b), ex


_KINDS = ["random", "zeros", "ties", "ties_late", "nan_inf", "exclude", "within_spread",
          "all_zero", "zero_lines"]  # fmt: skip


@needs_native
@pytest.mark.parametrize("threads", [0, 1, 3, 8])
@pytest.mark.parametrize("batch", [(), (3,)])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "complex64"])
@pytest.mark.parametrize("kind", _KINDS)
def test_one_pass_is_the_generic_choice(kind, dtype, batch, threads, monkeypatch):
    parts, pre, ex = _special(kind, dtype, batch)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        want = refit.cancelled_entries(xp, parts, pre, ex, False)
        _native_only(monkeypatch, threads)
        got = host_refit.refit_pick(parts, pre, ex, False)
    _assert_same_entries(got, want)


@needs_native
@pytest.mark.parametrize("keep", [0, 1, 7, 64])
@pytest.mark.parametrize("threads", [1, 2, 5])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
@pytest.mark.parametrize("kind", ["random", "zeros", "ties", "ties_late", "nan_inf", "exclude"])
def test_candidates_are_the_smallest_pairs(kind, dtype, threads, keep):
    """refit_candidates against the generic ratios: per measure the first ``keep`` zeros and the
    ``keep`` smallest (q, index) pairs of 0 < q < inf, with q bit for bit."""
    batch = (2,)
    parts, pre, ex = _special(kind, dtype, batch)
    m, n = parts[0].shape[-2:]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ratios = refit.cancel_ratios(xp, parts, pre, ex)
        a1, a2, b1, b2 = (np.ascontiguousarray(np.broadcast_to(v, s)).reshape(-1)
                          for v, s in zip(refit.line_factors(xp, pre),
                                          [batch + (m, 1)] * 2 + [batch + (1, n)] * 2))  # fmt: skip
    exu = None if ex is None else ex.view(np.uint8)
    im = parts[1] if len(parts) > 1 else None
    got = _NATIVE(parts[0], im, a1, a2, b1, b2, exu, 2, m, n, keep, threads=threads)
    assert len(got) == len(ratios)
    for (zeros, idx, q), r in zip(got, ratios):
        r = r.reshape(-1)
        np.testing.assert_array_equal(zeros, np.flatnonzero(r == 0)[:keep])
        pos = np.flatnonzero((r > 0) & (r < np.inf))
        best = np.sort(pos[np.lexsort((pos, r[pos]))][:keep])
        np.testing.assert_array_equal(idx, best)
        assert idx.dtype == np.int64 and q.dtype == np.float64
        np.testing.assert_array_equal(q.view(np.uint64), r[best].view(np.uint64))


@needs_native
def test_refit_candidates_checks_its_arguments():
    x, f, g = np.ones(6), np.ones(2), np.ones(3)
    for bad in (x.astype(np.float16), x.astype(">f8"), np.ones((3, 2)).T, x[:5]):
        with pytest.raises(ValueError):
            _NATIVE(bad, None, f, f, g, g, None, 1, 2, 3, 4)
    with pytest.raises(ValueError):  # im of another dtype
        _NATIVE(x, x.astype(np.float32), f, f, g, g, None, 1, 2, 3, 4)
    with pytest.raises(ValueError):  # a line factor short
        _NATIVE(x, None, f[:1], f, g, g, None, 1, 2, 3, 4)


def test_parts_the_one_pass_does_not_take(monkeypatch):
    """Parts that are not C-contiguous (or of two dtypes) go by the Python blocks."""
    parts, pre = _case("complex128", (2,), True, True)
    calls = []
    blocks = host_refit._by_blocks
    monkeypatch.setattr(host_refit, "_by_blocks", lambda *a: calls.append(1) or blocks(*a))
    for odd in ([np.asfortranarray(p) for p in parts], [parts[0], parts[1].astype(np.float32)]):
        with np.errstate(invalid="ignore"):
            want = refit.cancelled_entries(xp, odd, pre)
            got = host_refit.refit_pick(odd, pre, None, False)
        np.testing.assert_array_equal(got, want)
    assert len(calls) == 2
