"""``_helpers.chosen_fixed``: ``chosen``'s entries from fixed-size buffers (padded, any order)."""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import chosen_fixed

from emulinalg.algorithm import refit


@pytest.mark.parametrize("seed", range(40))
def test_chosen_fixed_picks_what_chosen_picks(seed):
    rng = np.random.default_rng(seed)
    cap = int(rng.choice([16, 100, 300, 1000]))
    nz = int(rng.integers(0, min(cap, 90) + 1))
    nc = int(rng.integers(0, cap + 1))
    pos = rng.permutation(10**6)[: nz + nc].astype(np.int64)
    zero_pos, cand = pos[:nz], pos[nz:]
    q = np.ldexp(rng.random(nc) + 0.5, rng.integers(-12, 2, nc))
    if nc > 3:
        q[1] = q[0]  # a tie
    if seed % 4 == 0:  # ties across the REFIT_ENTRIES-th place: the first in flat order win
        q[:] = q[0] if nc else q
    zero = np.concatenate([rng.permutation(zero_pos), rng.integers(0, 9, cap - nz)])
    idx = np.concatenate([cand, rng.integers(0, 9, cap - nc)])
    qq = np.concatenate([q, rng.random(cap - nc)])  # garbage beyond nc
    got, valid = chosen_fixed(np, zero, np.asarray(nz), idx, qq, np.asarray(nc))
    assert got.shape == valid.shape == (2 * refit.REFIT_ENTRIES,)
    within = q <= refit.spread_threshold(q.min()) if nc else np.zeros(0, dtype=bool)
    order = np.argsort(cand[within])
    want = refit.chosen(np, np.sort(zero_pos), cand[within][order], q[within][order])
    want = np.zeros(0, dtype=np.int64) if want is None else want
    assert int(valid.sum()) == want.shape[0]
    np.testing.assert_array_equal(got[valid], want)
    assert not valid[want.shape[0] :].any()


def _case(seed, dtype="float64", m=40, k=30, n=33):
    from emulinalg.algorithm import products, scaling
    from emulinalg.backends import numpy as npb
    from emulinalg.inputs import phi_matrix

    a = phi_matrix((m, k), 1.0, dtype, seed=seed)
    b = phi_matrix((k, n), 1.0, dtype, seed=seed + 1)
    c = np.matmul(a, b)
    b[:, 4] = 0  # exact zeros in the product (the zeros' own pick)
    split = [np.real(a), np.imag(a) if c.dtype.kind == "c" else None, np.real(b),
             np.imag(b) if c.dtype.kind == "c" else None]  # fmt: skip
    pre = scaling.ozaki2_prescale(np, npb.int_matmul, *split, "accurate")
    parts = products.product(np, npb.int_matmul, *split, 7, "accurate", "float64", pre)
    return split, tuple(parts), pre


def _deferred(good=True):
    """A hook with the generic pick as a ``refit.Deferred`` (``good``), or garbage with ``ok``
    false; ``redo`` the generic pick. ``calls`` counts the redos."""
    calls = []

    def hook(parts, prescale, exclude, everything):
        want = refit.cancelled_entries(np, parts, prescale, exclude, everything)
        want = np.zeros(0, dtype=np.int64) if want is None else want
        size = want.shape[0] + 7
        idx = np.full(size, refit._NO_INDEX, dtype=np.int64)
        idx[: want.shape[0]] = want
        if not good:  # what an overflowed buffer may hold: any entries, in any slots
            idx = np.sort(np.random.default_rng(size).integers(0, parts[0].size, size))

        def redo():
            calls.append(1)
            return refit.cancelled_entries(np, parts, prescale, exclude, everything)

        return refit.Deferred(idx, idx < refit._NO_INDEX, np.asarray(good), redo)

    return hook, calls


@pytest.mark.parametrize("good", [True, False])
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("extra", [False, True])
@pytest.mark.parametrize("out", ["float64", "dd"])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_deferred_pick_refits_what_the_generic_pick_refits(good, inplace, extra, out, dtype,
                                                           monkeypatch):  # fmt: skip
    """``refit.refit`` with a hook that leaves its pick on the device (``refit.Deferred``):
    the same values and count as the generic pick; where the pick's ``ok`` is false its
    garbage entries are written back and the pick made again (``redo``)."""
    monkeypatch.setattr(refit, "REFIT_ALL_WORK", 0)  # the most cancelled, not every entry
    split, parts, pre = _case(7, dtype)
    if out == "dd":
        parts = tuple((p, np.zeros_like(p)) for p in parts)
    more = np.array([5, 0, 17, 5, parts[0][0].size - 1]) if extra else None
    want, want_n = refit.refit(np, *split, _copy(parts), pre, "accurate", out, extra=more)
    hook, calls = _deferred(good)
    mine = _copy(parts)
    got, n = refit.refit(np, *split, mine, pre, "accurate", out, extra=more, pick_hook=hook,
                         inplace=inplace)  # fmt: skip
    assert n == want_n > 0 and len(calls) == (0 if good else 1)
    for g, w in zip(_arrays(got), _arrays(want)):
        np.testing.assert_array_equal(g, w)
    if not inplace:  # the caller's parts as they were
        for p, q in zip(_arrays(mine), _arrays(parts)):
            np.testing.assert_array_equal(p, q)


def _copy(parts):
    return tuple(tuple(map(np.copy, p)) if isinstance(p, tuple) else np.copy(p) for p in parts)


def _arrays(parts):
    return [x for p in parts for x in (p if isinstance(p, tuple) else (p,))]


def test_deferred_pick_of_no_entries_writes_nothing(monkeypatch):
    """A deferred pick with no valid slot (every entry excluded) leaves the output as it is."""
    monkeypatch.setattr(refit, "REFIT_ALL_WORK", 0)
    split, parts, pre = _case(9)
    hook, _ = _deferred()
    ex = np.ones(parts[0].shape, dtype=bool)
    got, n = refit.refit(np, *split, tuple(np.copy(p) for p in parts), pre, "accurate",
                         "float64", exclude=ex, pick_hook=hook, inplace=True)  # fmt: skip
    assert n == 0
    np.testing.assert_array_equal(got[0], parts[0])


def test_deferred_pick_of_a_small_output_recomputes_at_most_its_entries(monkeypatch):
    """A product of fewer output entries than the deferred pick's slots (a few long dot
    products): the padded slots beyond the output's size are not recomputed (each slot gathers
    a line of A and of B of length k)."""
    monkeypatch.setattr(refit, "REFIT_ALL_WORK", 0)
    split, parts, pre = _case(4, m=1, k=50, n=5)
    seen = []
    real = refit._recompute
    monkeypatch.setattr(refit, "_recompute", lambda *a: seen.append(a[8].shape[0]) or real(*a))
    want, n_want = refit.refit(np, *split, _copy(parts), pre, "accurate", "float64")
    hook, _ = _deferred()

    def padded(*args):  # the backends' fixed size: 2 REFIT_ENTRIES slots
        d = hook(*args)
        pad = np.full(2 * refit.REFIT_ENTRIES - d.idx.shape[0], refit._NO_INDEX, dtype=np.int64)
        idx = np.concatenate([d.idx, pad])
        return refit.Deferred(idx, idx < refit._NO_INDEX, d.ok, d.redo)

    seen.clear()
    got, n = refit.refit(np, *split, _copy(parts), pre, "accurate", "float64", pick_hook=padded)
    assert n == n_want and seen == [5]
    np.testing.assert_array_equal(got[0], want[0])
