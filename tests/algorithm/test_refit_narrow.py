"""``refit.narrowed_thresholds``: the spread of the refit's pick narrowed to a bin edge of
log2(q / low) (what a backend's one-pass ``refit_pick`` does where its buffers are too small)
still holds the REFIT_ENTRIES smallest ratios, so ``chosen`` picks what ``pick`` picks."""

from __future__ import annotations

import array_api_compat.numpy as xnp
import numpy as np
import pytest

from emulinalg.algorithm import refit


def _narrowed(low, hist, cap):
    """``narrowed_thresholds`` of one measure: the threshold, or None where it declines."""
    thr, ok = refit.narrowed_thresholds(xnp, np.array([low]), np.asarray(hist)[None], cap)
    return float(thr[0]) if bool(ok[0]) else None


def _bins(q, low, thr):
    """The kernel's histogram (src_cuda/refit_pick.cu: refit_select) of 0 < q <= thr."""
    c = q[(q > 0) & (q <= thr)]
    b = np.floor(np.log2(c / low) * refit.NARROW_BINS_PER_BIT).astype(np.int64)
    return np.bincount(np.clip(b, 0, refit.NARROW_BINS - 1), minlength=refit.NARROW_BINS)


@pytest.mark.parametrize("dist", ["modulus", "part", "ties", "grid"])
@pytest.mark.parametrize("seed", range(6))
def test_narrowed_threshold_keeps_the_pick(dist, seed):
    rng = np.random.default_rng(seed)
    size = 50_000
    if dist == "modulus":  # |x + iy|: few entries near 0, many within the spread
        q = np.hypot(rng.standard_normal(size), rng.standard_normal(size))
    elif dist == "part":
        q = np.abs(rng.standard_normal(size))
    elif dist == "ties":  # many equal ratios at the edge
        q = rng.integers(1, 40, size).astype(np.float64)
    else:  # ratios exactly on bin edges (log2 rounds either way), 1 + 3i of the i-th
        q = np.repeat(2.0 ** (np.arange(64) / 8.0) * 1e-3, 1 + 3 * np.arange(64))
        q = np.concatenate([rng.permutation(q), rng.uniform(1.0, 2.0, size)])
    q[rng.integers(0, size, 20)] = np.inf
    low = q[q > 0].min()
    thr = low * 2.0**refit.REFIT_SPREAD_BITS
    cap = 4 * refit.REFIT_ENTRIES + seed * 300
    narrowed = _narrowed(low, _bins(q, low, thr), cap)
    want = refit.pick(np, q)
    if narrowed is None:  # only where no bin edge holds them within the cap
        assert dist == "ties" or int(((q > 0) & (q <= thr)).sum()) <= cap
        return
    assert narrowed <= thr
    sel = np.nonzero((q > 0) & (q <= narrowed))[0]
    assert refit.REFIT_ENTRIES <= sel.shape[0] <= cap
    got = refit.chosen(np, np.zeros(0, dtype=np.int64), sel, q[sel])
    np.testing.assert_array_equal(got, want)


def test_narrowed_threshold_declines():
    hist = np.zeros(refit.NARROW_BINS, dtype=np.int64)
    assert _narrowed(1.0, hist, 1000) is None  # fewer than REFIT_ENTRIES
    hist[0] = 10_000  # the smallest bin alone beyond the cap
    assert _narrowed(1.0, hist, 1000) is None
    hist[:] = 0
    hist[refit.NARROW_BINS - 2] = 100  # reached only at the spread's last bins
    assert _narrowed(1.0, hist, 1000) is None
    hist[:] = 0
    hist[3] = 100
    assert _narrowed(2.0, hist, 1000) == 2.0 * 2.0 ** (5 / 8)


def test_put_copies_unless_in_place():
    """The refit writes its values into a copy, or into the product's own output (``inplace``,
    the engine's case: a second copy of the output per product is what it saves)."""
    x = np.arange(12.0).reshape(3, 4)
    idx = np.array([1, 6])
    got = refit._put(np, x, idx, np.array([-1.0, -2.0]))
    assert x[0, 1] == 1.0 and got[0, 1] == -1.0 and got[1, 2] == -2.0
    same = refit._put(np, x, idx, np.array([-1.0, -2.0]), inplace=True)
    np.testing.assert_array_equal(same, got)
    assert np.shares_memory(same, x) and x[1, 2] == -2.0
    xt = np.arange(12.0).reshape(4, 3).T  # not contiguous: a copy, the values the same
    got = refit._put(np, xt, idx, np.array([-1.0, -2.0]), inplace=True)
    assert got[0, 1] == -1.0 and got[1, 2] == -2.0 and got.shape == xt.shape


def test_narrowed_thresholds_of_several_measures():
    """Each row of the histograms decides for its own measure (a complex result's three)."""
    rng = np.random.default_rng(5)
    hists = rng.integers(0, 40, (3, refit.NARROW_BINS))
    hists[1, :5] = 0
    hists[2] = 0  # declines
    lows = np.array([1.0, 3.0, 0.5])
    thr, ok = refit.narrowed_thresholds(xnp, lows, hists, 500)
    for w in range(3):
        one = _loop(lows[w], hists[w], 500)
        assert bool(ok[w]) == (one is not None) and (one is None or thr[w] == one)
    assert bool(ok[0]) and not bool(ok[2])


def _loop(low, hist, cap):
    """The rule written as a loop over the bins (the form the host code had)."""
    cum = [0]
    for h in hist:
        cum.append(cum[-1] + int(h))
    b = next((i for i in range(len(hist)) if cum[i + 1] >= refit.REFIT_ENTRIES), None)
    if b is None or b + 2 >= len(hist) or cum[b + 2] > cap:
        return None
    return float(low) * 2.0 ** ((b + 2) / refit.NARROW_BINS_PER_BIT)


@pytest.mark.parametrize("seed", range(30))
def test_narrowed_thresholds_as_the_loop(seed):
    rng = np.random.default_rng(seed)
    hist = rng.integers(0, rng.integers(2, 60), refit.NARROW_BINS) * (rng.random(64) < 0.6)
    low, cap = float(rng.uniform(1e-9, 1.0)), int(rng.integers(64, 800))
    assert _narrowed(low, hist, cap) == _loop(low, hist, cap)
