"""The cupy backend's refit choice (``backends.cupy.refit.refit_pick``, ``src_cuda/refit_pick.cu``):
the same entries as the generic ``refit.cancelled_entries`` on the same parts, real and complex
(each part's measure too), float64 and float32 parts, entries taken from the native product,
exact zeros and NaN; more candidates than the buffers hold send it back to the generic code.
The deferred pick's choice from the buffers (``refit_choose``) gives the host chain's arrays."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from _gpu_helpers import require_gpu
from _helpers import REFIT_BUFFER_KINDS, refit_buffers, refit_case, refit_chain

from emulinalg.algorithm import refit
from emulinalg.algorithm.scaling import ozaki2_prescale
from emulinalg.backends import numpy as npb
from emulinalg.inputs import phi_matrix

cp = require_gpu()

import array_api_compat.cupy as cxp  # noqa: E402  (needs cupy)

from emulinalg.backends.cupy import refit as cupy_refit  # noqa: E402

pytestmark = pytest.mark.gpu


def _case(dtype, batch, zeros, nan, m=70):
    k, n = 40, 52
    cplx = dtype.startswith("complex")
    a = phi_matrix(batch + (m, k), 1.0, dtype, seed=3)
    b = phi_matrix(batch + (k, n), 1.0, dtype, seed=4)
    c = np.matmul(a, b)
    if zeros:
        c[..., 5, :7] = 0  # exact zeros (the computed zeros' own pick)
        if cplx:
            c[..., 9, :] = c[..., 9, :].real  # a part exactly zero
    if nan:
        c[..., 3, 4] = np.nan
    parts = [c.real, c.imag] if cplx else [c]
    split = [a.real, a.imag if cplx else None, b.real, b.imag if cplx else None]
    pre = ozaki2_prescale(np, npb.int_matmul, *(None if x is None else x.astype(np.float64)
                                              for x in split), "accurate")  # fmt: skip
    return [cp.ascontiguousarray(cp.asarray(p)) for p in parts], tuple(cp.asarray(v) for v in pre)


@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("zeros,nan", [(False, False), (True, True)])
@pytest.mark.parametrize("batch", [(), (3,)])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "complex64"])
@pytest.mark.parametrize("m", [70, 40])  # a real result: one pass from 64 rows on, else two
def test_refit_pick_is_the_generic_choice(dtype, batch, zeros, nan, exclude, m):
    parts, pre = _case(dtype, batch, zeros, nan, m)
    ex = None
    if exclude:
        ex = cp.zeros(parts[0].shape, dtype=cp.bool_)
        ex[..., ::7, ::5] = True
    want = refit.cancelled_entries(cxp, parts, pre, ex)
    got = cupy_refit.refit_pick(parts, pre, ex, False, defer=False)
    assert got is not None
    if want is None:
        assert got.shape[0] == 0
    else:
        assert got.dtype == cp.int64 and cp.array_equal(got, want), (got, want)
    # deferred: chosen on the device, the same entries
    deferred = cupy_refit.refit_pick(parts, pre, ex, False)
    assert isinstance(deferred, refit.Deferred) and bool(deferred.ok)
    assert cp.array_equal(deferred.idx[deferred.valid], got)
    assert not deferred.valid[int(deferred.valid.sum()) :].any()
    # the engine's route: the hook through cancelled_entries
    hooked = refit.cancelled_entries(cxp, parts, pre, ex, hook=cupy_refit.refit_pick)
    assert isinstance(hooked, refit.Deferred)


def test_refit_pick_declines_beyond_its_buffers(monkeypatch):
    parts, pre = _case("float64", (), True, False)
    monkeypatch.setattr(cupy_refit, "CAP", 2)
    assert cupy_refit.refit_pick(parts, pre, None, False, defer=False) is None
    assert cupy_refit.refit_pick(parts, pre, None, True) is None  # every entry: generic
    deferred = cupy_refit.refit_pick(parts, pre, None, False)
    assert not bool(deferred.ok) and deferred.redo() is None


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_refit_pick_narrows_a_wide_spread(dtype, monkeypatch):
    """More candidates within the spread than the buffers hold (a complex result's modulus
    rarely cancels, so a large share of its entries lie within 2**8 of the smallest ratio): the
    spread narrowed to a bin edge (``refit.narrowed_threshold``) keeps the generic choice."""
    parts, pre = _case(dtype, (3,), False, False)
    want = refit.cancelled_entries(cxp, parts, pre, None)
    q = refit.cancel_ratios(cxp, parts, pre)[0].reshape(-1)
    low = float(cp.min(cp.where(q > 0, q, cp.inf)))
    wide = int(cp.count_nonzero((q > 0) & (q <= low * 2.0**refit.REFIT_SPREAD_BITS)))
    cap = 2 * refit.REFIT_ENTRIES
    assert wide > 4 * cap  # the modulus's spread holds far more than the buffer
    monkeypatch.setattr(cupy_refit, "CAP", cap)
    got = cupy_refit.refit_pick(parts, pre, None, False, defer=False)
    assert got is not None and want is not None
    assert cp.array_equal(got, want), (got, want)
    deferred = cupy_refit.refit_pick(parts, pre, None, False)  # narrowed on the device
    assert bool(deferred.ok) and cp.array_equal(deferred.idx[deferred.valid], want)


def _full_passes(monkeypatch):
    """The launches of ``refit_pick``'s kernels over the whole output, by name (a list)."""
    seen = []
    real = cupy_refit._kernel

    def counting(path, name):
        fn = real(path, name)

        def launch(grid, block, args):
            seen.append((name.split("<")[0], int(args[7])))
            return fn(grid, block, args)

        return launch

    monkeypatch.setattr(cupy_refit, "_kernel", counting)
    return seen


@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_refit_pick_reads_a_real_result_once(dtype, exclude, monkeypatch):
    """A real result of many rows: the smallest ratio of every SAMPLE_STEP-th row bounds the
    spread, one selection pass over the output gives the generic choice."""
    parts, pre = _case(dtype, (2,), True, True)
    ex = None
    if exclude:
        ex = cp.zeros(parts[0].shape, dtype=cp.bool_)
        ex[..., ::3, ::5] = True
    want = refit.cancelled_entries(cxp, parts, pre, ex)
    seen = _full_passes(monkeypatch)
    got = cupy_refit.refit_pick(parts, pre, ex, False, defer=False)
    assert want is not None and cp.array_equal(got, want), (got, want)
    total = parts[0].size
    assert [s for s in seen if s[1] == total] == [("refit_select", total)]
    assert ("refit_low", -(-70 // cupy_refit.SAMPLE_STEP) * 52 * 2) in seen


def _takes_two_passes(parts, pre, monkeypatch):
    """``refit_pick`` gives the generic choice after the bounded selection, the smallest ratio of
    the whole output and the selection again."""
    want = refit.cancelled_entries(cxp, parts, pre, None)
    seen = _full_passes(monkeypatch)
    got = cupy_refit.refit_pick(parts, pre, None, False, defer=False)
    assert want is not None and cp.array_equal(got, want), (got, want)
    total = parts[0].size
    assert [s[0] for s in seen if s[1] == total] == ["refit_select", "refit_low", "refit_select"]


def test_refit_pick_two_passes_without_a_sampled_ratio(monkeypatch):
    """The sampled rows hold no positive ratio (zeros there): the bounded selection finds no
    candidate."""
    parts, pre = _case("float64", (), False, False)
    parts[0][:: cupy_refit.SAMPLE_STEP] = 0
    _takes_two_passes(parts, pre, monkeypatch)


def test_refit_pick_two_passes_where_the_bounded_spread_overflows(monkeypatch):
    """More entries within the sample's spread than the buffers hold, but not within the true
    one."""
    parts, pre = _case("float64", (), False, False)
    q = refit.cancel_ratios(cxp, parts, pre)[0].reshape(-1)
    pos = q[q > 0]
    spread = 2.0**refit.REFIT_SPREAD_BITS
    true_n = int(cp.count_nonzero(pos <= float(cp.min(pos)) * spread))
    m = parts[0].shape[0]
    sample = q.reshape(m, -1)[:: cupy_refit.SAMPLE_STEP].reshape(-1)
    bounded_n = int(cp.count_nonzero((q > 0) & (q <= float(cp.min(sample[sample > 0])) * spread)))
    assert true_n < bounded_n  # the case separates the two
    monkeypatch.setattr(cupy_refit, "CAP", true_n)
    _takes_two_passes(parts, pre, monkeypatch)


@pytest.mark.parametrize("cap", [None, 3])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_refit_with_the_deferred_pick_writes_the_generic_refit(dtype, cap, monkeypatch):
    """``refit.refit`` with the backend's hooks (the deferred pick, its Scheme II product) on a
    result in place: the generic refit's values bit for bit and its count; with tiny buffers
    (``cap``) the deferred pick is not ok, its writes are undone and the refit picks again."""
    from emulinalg.backends.cupy import products as cupy_products

    monkeypatch.setattr(refit, "REFIT_ALL_WORK", 0)  # the most cancelled, not every entry
    if cap is not None:
        monkeypatch.setattr(cupy_refit, "CAP", cap)
    split, pre, parts, out, (want, n_want) = refit_case(300, 40, 260, dtype, 21)
    dev = [None if x is None else cp.asarray(x) for x in split]
    got, n_got = refit.refit(cxp, *dev, tuple(cp.asarray(p) for p in parts),
                             tuple(map(cp.asarray, pre)), "accurate", out, inplace=True,
                             product=cupy_products.ozaki2_product,
                             pick_hook=cupy_refit.refit_pick)  # fmt: skip
    assert n_got == n_want > 0
    for g, w in zip(got, want):
        np.testing.assert_array_equal(cp.asnumpy(g), w)


@pytest.mark.parametrize("cap", [300, cupy_refit.CAP])
@pytest.mark.parametrize("count", [-1, 0, 1, 63, 64, 65, 200, "cap", "over"])
@pytest.mark.parametrize("kind", REFIT_BUFFER_KINDS)
@pytest.mark.parametrize("W", [1, 3])
def test_refit_choose_is_the_host_chain(W, kind, count, cap):
    """``choose`` (one launch of ``refit_choose``) against the chain of cupy sorts it replaces
    (``_helpers.chosen_fixed`` per measure, ``refit.merged``) on random buffers: counts beyond the
    buffers or none, ties, identical keys, zeros among the candidates, special ratios."""
    rng = np.random.default_rng([W, cap, zlib.crc32(f"{kind} {count}".encode())])
    bufs = [cp.asarray(x) for x in refit_buffers(rng, W, cap, count, kind)]
    want = refit_chain(cxp, *bufs)
    got = cupy_refit.choose(*bufs)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape == (2 * W * refit.REFIT_ENTRIES,)
        assert cp.array_equal(g, w), (g, w)
