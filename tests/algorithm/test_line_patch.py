"""``refinement.line_patch`` and the step's decision with lines (``step_after``, ``kernel_patch``):
which rows, columns and block of an (m, n) product a patch takes from the native product, against
the failing entries written out by hand, and on random failure sets: every failing entry covered,
the lines and block within (m n) / LINE_SHARE entries, the entries left within the patch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulinalg.algorithm import refinement
from emulinalg.algorithm.refinement import LinePatch, fails_limit, line_patch, patch_limit

M = N = 256  # patch_limit 256, LINE_SHARE 64: lines and block hold at most 1024 entries


def _flat(rows, cols, n=N):
    return np.unique(np.add.outer(np.asarray(rows) * n, np.asarray(cols)).reshape(-1))


def _covered(p, idx, n):
    r, c = idx // n, idx % n
    hit = np.isin(r, p.rows) | np.isin(c, p.cols) | np.isin(idx, p.entries)
    if p.block is not None:
        hit |= np.isin(r, p.block[0]) & np.isin(c, p.block[1])
    return hit


def test_full_rows_are_lines_and_the_rest_entries():
    scattered = np.array([1 * N + 2, 40 * N + 200, 90 * N + 7, 201 * N + 33, 250 * N + 250])
    idx = np.union1d(_flat([3, 7], np.arange(N)), scattered)
    p = line_patch(idx, M, N)
    assert isinstance(p, LinePatch) and p.block is None
    assert p.rows.tolist() == [3, 7] and p.cols.tolist() == []
    assert p.entries.tolist() == scattered.tolist()


def test_a_column_and_a_row_both_taken():
    m = n = 512  # patch_limit 256, lines and block at most 4096 entries
    idx = np.union1d(_flat([10], np.arange(n), n), _flat(np.arange(m), [20], n))
    p = line_patch(np.union1d(idx, [5 * n + 5]), m, n)
    assert p.rows.tolist() == [10] and p.cols.tolist() == [20] and p.entries.tolist() == [5 * n + 5]
    spread = np.unique(np.arange(300) * 1031 % (m * n))  # 300 failures in as many lines
    assert line_patch(np.union1d(idx, spread), m, n) is None


def test_crossing_lines_make_a_block():
    m = n = 512
    R = np.arange(20) * 23 + 3
    C = np.arange(20) * 19 + 1
    idx = np.union1d(_flat([77], np.arange(n), n), _flat(np.arange(m), [100], n))
    idx = np.union1d(idx, _flat(R, C, n))  # 400 crossings: more than the patch takes
    p = line_patch(idx, m, n)
    assert p.rows.tolist() == [77] and p.cols.tolist() == [100] and p.entries.shape == (0,)
    assert p.block is not None
    assert p.block[0].tolist() == R.tolist() and p.block[1].tolist() == C.tolist()
    assert _covered(p, idx, n).all()


def test_a_patch_that_needs_more_than_the_share_is_refused():
    six = _flat(np.arange(6), np.arange(N))  # four lines hold 1024 entries, 512 failures left
    assert line_patch(six, M, N) is None
    p = line_patch(six[N:], M, N)  # five: four lines and 256 entries
    assert p.rows.tolist() == [1, 2, 3, 4] and p.entries.shape == (N,)


@given(st.data())
def test_random_failures_are_covered_within_the_share(data):
    m = data.draw(st.integers(8, 96))
    n = data.draw(st.integers(8, 96))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    parts = [rng.choice(m * n, size=rng.integers(0, m * n // 8 + 1), replace=False)]
    for _ in range(rng.integers(0, 3)):  # a few dense rows / columns
        if rng.random() < 0.5:
            parts.append(_flat([rng.integers(m)], np.arange(n), n))
        else:
            parts.append(_flat(np.arange(m), [rng.integers(n)], n))
    idx = np.unique(np.concatenate(parts)).astype(np.int64)
    p = line_patch(idx, m, n)
    if p is None:
        return
    held = p.rows.shape[0] * n + p.cols.shape[0] * m
    held += 0 if p.block is None else p.block[0].shape[0] * p.block[1].shape[0]
    assert held <= m * n // refinement.LINE_SHARE
    assert p.entries.shape[0] <= patch_limit(m, n)
    assert _covered(p, idx, n).all()
    assert np.all(np.diff(p.rows) > 0) and np.all(np.diff(p.cols) > 0)


@pytest.mark.parametrize("lines", [False, True])
def test_step_takes_lines_only_where_asked(lines):
    idx = np.union1d(_flat([3], np.arange(N)), [9 * N + 9])  # 257 failures: above the patch
    step = refinement.step_after(15, 1000, idx.shape[0], lambda: idx, M, N, True, lines)
    if not lines:
        assert step == refinement.Step(15, False, None)
        return
    assert step.count == 14 and not step.going and isinstance(step.patch, LinePatch)
    assert step.patch.rows.tolist() == [3] and step.patch.entries.tolist() == [9 * N + 9]
    # more failures than a step reports: the count stays
    assert refinement.step_after(15, 10**6, fails_limit(M, N, True) + 1, None, M, N, True,
                                 True) == refinement.Step(15, False, None)  # fmt: skip


def test_kernel_patch_settles_what_the_kernels_took():
    few = np.array([4, 90, 1000])
    assert refinement.kernel_patch(14, few, M, N, True)[0] == 14
    assert refinement.kernel_patch(14, few, M, N, True)[1] is few
    rows = _flat([3], np.arange(N))
    count, patch = refinement.kernel_patch(14, np.union1d(rows, [7]), M, N, True)
    assert count == 14 and patch.rows.tolist() == [3] and patch.entries.tolist() == [7]
    spread = np.arange(600) * 109  # no lines cover these: the count goes back up
    assert refinement.kernel_patch(14, spread, M, N, True) == (15, None)


def test_unsorted_and_repeated_failures_are_covered_once():
    m = n = 512
    idx = np.union1d(_flat([10], np.arange(n), n), np.arange(199) * 1031 % (m * n))
    want = line_patch(idx, m, n)
    rng = np.random.default_rng(0)
    got = line_patch(np.concatenate([rng.permutation(idx), idx[:5]]), m, n)
    assert want.rows.tolist() == got.rows.tolist() == [10]
    assert np.array_equal(got.entries, want.entries) and _covered(got, idx, n).all()


def test_hopeless_failures_stop_early():
    """Scattered failures in a wide product (8 x 2**19): no budget's lines nor block covers
    them, which the greedy loop sees at its first line (without the bound, thousands)."""
    m, n = 8, 1 << 19
    idx = np.random.default_rng(1).choice(m * n, fails_limit(m, n, True), replace=False)
    calls = []
    real = np.subtract.at

    def counted(*args):
        calls.append(1)
        return real(*args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(np.subtract, "at", counted, raising=False)
        assert line_patch(idx, m, n) is None
    assert len(calls) <= 2


@pytest.mark.parametrize("n", [65536, 70000])
def test_columns_past_16_bits_keep_their_index(n):
    """The columns' order is sorted on 16-bit keys where they fit (numpy's radix sort): at
    n = 65536 the last column still fits, at 70,000 columns past 65,535 must not wrap."""
    m = 512  # more failures than the 256 entries a patch takes: two columns are lines
    cols = [5000, n - 1]  # past 16 bits, n - 1 would wrap below 5000
    idx = np.union1d(_flat(np.arange(m), cols, n), [2 * n + 5, 6 * n + 7])
    p = line_patch(idx, m, n)
    assert p.cols.tolist() == cols and p.rows.tolist() == []
    assert p.entries.tolist() == sorted([2 * n + 5, 6 * n + 7])
    assert _covered(p, idx, n).all()
