"""The cupy backend's refit choice (``backends/cupy/refit.py``, ``src_cuda/refit_pick.cu``) on the
CPU stand-in: the kernels' numpy model and their CUDA code compiled as host C++ give the generic
``refit.cancelled_entries`` entries, synchronously and deferred (``refit.Deferred``: chosen on
the device, ``ok`` false where the bounded buffers cannot hold the pick); and ``refit.refit``
with the deferred pick writes what the generic refit writes. The deferred pick's last step, the
choice from the selection's buffers (``refit_choose``), gives the host chain's arrays
(``_helpers.chosen_fixed`` per measure, ``refit.merged``) on random buffers."""

from __future__ import annotations

import zlib

import array_api_compat.numpy as xnp
import numpy as np
import pytest
from _helpers import REFIT_BUFFER_KINDS, refit_buffers, refit_case, refit_chain

from emulinalg.algorithm import refit
from emulinalg.algorithm.scaling import ozaki2_prescale
from emulinalg.backends import numpy as npb
from emulinalg.inputs import phi_matrix


def _case(cp, dtype, m, zeros=True, seed=3, n=29, batch=()):
    k = 24
    cplx = dtype.startswith("complex")
    a = phi_matrix(batch + (m, k), 1.0, dtype, seed=seed)
    b = phi_matrix(batch + (k, n), 1.0, dtype, seed=seed + 1)
    c = np.matmul(a, b)
    if zeros:
        c[..., 5, : min(n, 7)] = 0
        c[..., 3, min(n - 1, 4)] = np.nan
    parts = [c.real, c.imag] if cplx else [c]
    split = [a.real, a.imag if cplx else None, b.real, b.imag if cplx else None]
    pre = ozaki2_prescale(np, npb.int_matmul, *(None if x is None else x.astype(np.float64)
                                              for x in split), "accurate")  # fmt: skip
    return [cp.asarray(np.ascontiguousarray(p)) for p in parts], tuple(map(cp.asarray, pre))


def _resolved(got):
    """A ``refit_pick`` answer as indices: a Deferred's valid slots where ``ok``, else its
    ``redo()``'s answer."""
    if isinstance(got, refit.Deferred):
        if not bool(got.ok):
            return got.redo()
        assert (
            np.all(np.diff(got.idx[got.valid]) > 0) and not got.valid[int(got.valid.sum()) :].any()
        )
        return got.idx[got.valid]
    return got


@pytest.mark.parametrize("defer", [False, True])
@pytest.mark.parametrize("zeros", [False, True])
@pytest.mark.parametrize("m", [70, 40])  # one pass from 64 rows on (real), else two
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_refit_pick_is_the_generic_choice(cpu_backend, dtype, m, zeros, defer):
    be, cp = cpu_backend
    parts, pre = _case(cp, dtype, m, zeros)
    ex = None
    if zeros:  # entries taken from the native product (with the zeros: fewer cases)
        ex = np.zeros(parts[0].shape, dtype=bool)
        ex[::7, ::5] = True
    want = refit.cancelled_entries(xnp, [np.asarray(p) for p in parts], pre, ex)
    if ex is not None:
        ex = cp.asarray(ex)
    got = be.refit.refit_pick(parts, pre, ex, False, defer=defer)
    assert isinstance(got, refit.Deferred) == defer
    got = _resolved(got)
    assert got is not None and want is not None
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n,batch", [(1, ()), (3, ()), (5, (2,)), (29, (3,)), (32, ()), (36, (2,))])
@pytest.mark.parametrize("dtype", ["float32", "complex64", "float64", "complex128"])
def test_refit_pick_walks_narrow_and_batched_results(cpu_backend, dtype, n, batch):
    """Results of fewer columns than a thread's group of entries (a group spans rows),
    batches (a group crosses into the next matrix), and rows of a multiple of the group (its
    entries loaded as 16-byte vectors)."""
    be, cp = cpu_backend
    parts, pre = _case(cp, dtype, 66, n=n, batch=batch)
    want = refit.cancelled_entries(xnp, [np.asarray(p) for p in parts], pre)
    got = _resolved(be.refit.refit_pick(parts, pre, None, False))
    assert got is not None and want is not None
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("defer", [False, True])
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_refit_pick_narrows_a_wide_spread(cpu_backend, monkeypatch, dtype, defer):
    """More candidates within a measure's spread than the buffers hold (a complex result's
    modulus): the spread narrowed to a bin edge, on the device where deferred, keeps the
    generic choice."""
    be, cp = cpu_backend
    parts, pre = _case(cp, dtype, 70, zeros=False, batch=(3,))
    want = refit.cancelled_entries(xnp, [np.asarray(p) for p in parts], pre)
    q = refit.cancel_ratios(xnp, [np.asarray(p) for p in parts], pre)[0].reshape(-1)
    low = q[q > 0].min()
    cap = 2 * refit.REFIT_ENTRIES
    assert np.count_nonzero((q > 0) & (q <= low * 2.0**refit.REFIT_SPREAD_BITS)) > 4 * cap
    monkeypatch.setattr(be.refit, "CAP", cap)
    got = be.refit.refit_pick(parts, pre, None, False, defer=defer)
    if defer:
        assert bool(got.ok)
    np.testing.assert_array_equal(_resolved(got), want)


@pytest.mark.parametrize("dtype,m", [("float64", 70), ("float64", 40), ("complex128", 70)])
def test_deferred_pick_is_not_ok_beyond_its_buffers(cpu_backend, monkeypatch, dtype, m):
    """More candidates within the spread than the buffers hold, narrowed or not: ``ok``
    false, and the synchronous pick (``redo``) gives the generic entries or declines."""
    be, cp = cpu_backend
    parts, pre = _case(cp, dtype, m, zeros=False)
    want = refit.cancelled_entries(xnp, [np.asarray(p) for p in parts], pre)
    monkeypatch.setattr(be.refit, "CAP", 3)
    got = be.refit.refit_pick(parts, pre, None, False)
    assert isinstance(got, refit.Deferred) and not bool(got.ok)
    redo = got.redo()
    assert redo is None or np.array_equal(redo, want)  # None: the generic code's turn


@pytest.mark.parametrize("cap", [None, 3])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_refit_with_the_deferred_pick_writes_the_generic_refit(cpu_backend, monkeypatch, dtype,
                                                               cap):  # fmt: skip
    """``refit.refit`` with the backend's hooks (the deferred pick and its Scheme II product)
    against the generic refit: the same entries, bit for bit, and the same count; with tiny
    buffers (``cap``) the deferred pick is not ok and the refit picks again."""
    be, cp = cpu_backend
    monkeypatch.setattr(refit, "REFIT_ALL_WORK", 0)  # the most cancelled, not every entry
    if cap is not None:
        monkeypatch.setattr(be.refit, "CAP", cap)
    split, pre, parts, out, (want, n_want) = refit_case(70, 24, 29, dtype, 21)
    dev = [None if x is None else cp.asarray(x) for x in split]
    got, n_got = refit.refit(xnp, *dev, tuple(cp.asarray(p.copy()) for p in parts),
                             tuple(map(cp.asarray, pre)), "accurate", out, inplace=True,
                             product=be.ozaki2_product, pick_hook=be.refit_pick)  # fmt: skip
    assert n_got == n_want > 0
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)


def _choose_cases():
    """(kind, count) pairs: every count for the plain kinds, a few for the special ones."""
    plain = ("spread", "ties", "equal", "narrow")
    counts = (-1, 0, 1, 63, 64, 65, 200, "cap", "over")
    return [(k, c) for k in REFIT_BUFFER_KINDS for c in (counts if k in plain else (1, 65, "over"))]


def _assert_choose_is_the_chain(be, cp, W, cap, count, kind, seed):
    rng = np.random.default_rng(seed)
    bufs = refit_buffers(rng, W, cap, count, kind)
    want = refit_chain(xnp, *bufs)
    got = be.refit.choose(*(cp.asarray(x) for x in bufs))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape == (2 * W * refit.REFIT_ENTRIES,)
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("W", [1, 3])
@pytest.mark.parametrize("kind,count", _choose_cases())
def test_refit_choose_is_the_host_chain(cpu_backend, W, kind, count):
    """The deferred pick's choice in one launch against the host chain it replaces, on buffers
    of 300 slots: counts beyond the buffers (clamped) or none, ties of ratios and identical keys
    (the REFIT_ENTRIES-th among them), zeros among the candidates, special ratios."""
    be, cp = cpu_backend
    seed = [W, zlib.crc32(f"{kind} {count}".encode())]
    _assert_choose_is_the_chain(be, cp, W, 300, count, kind, seed)


@pytest.fixture(scope="module")
def model_backend():
    import fake_cupy

    return fake_cupy.load_backend()


@pytest.mark.parametrize("count", ["cap", 5000, "over"])
@pytest.mark.parametrize("kind", ["spread", "ties", "equal"])
def test_refit_choose_is_the_host_chain_at_full_size(model_backend, kind, count):
    """As above on the backend's buffers (CAP slots per measure, complex: three measures), on
    the model (the CUDA compiled for the CPU runs a thread per CUDA thread: slow at this size)."""
    be, cp = model_backend
    _assert_choose_is_the_chain(be, cp, 3, be.refit.CAP, count, kind, [7, len(kind)])


@pytest.mark.slow
def test_refit_choose_native_at_full_size(native_backend):
    """One full-size case on the CUDA code: full buffers of tied ratios (the rounds that skip
    the bytes a group's keys share)."""
    be, cp = native_backend
    _assert_choose_is_the_chain(be, cp, 3, be.refit.CAP, "cap", "ties", [7, 4])


@pytest.mark.parametrize("W,kind,count", [(3, "equal", "cap"), (1, "narrow", "over"),
                                          (3, "spread", "cap")])  # fmt: skip
def test_refit_choose_native_samples(native_backend, W, kind, count):
    """A few of ``test_refit_choose_is_the_host_chain``'s cases on the CUDA code in the fast
    tier (narrowing rounds over both key words, identical keys beyond the group)."""
    be, cp = native_backend
    _assert_choose_is_the_chain(be, cp, W, 300, count, kind, [W, 11])
