"""Symmetry zeros: products whose entries pair significant terms with rounding noise.

Operands with a mirror-plane structure (rows, contraction index and columns of two parities,
the entries across parities at rounding-noise level, as a molecule's integrals in a basis that
follows the plane) have entries whose every term is noise on one side: one Scheme II product
cannot certify them. The level splits the contraction index into its classes
(``emulinalg.algorithm.support``) and sums the classes' products: checked here against the exact
product (python-flint / Fractions, ``emulinalg.reference``) and numpy's product on the same
inputs, with the plain-product behaviour (``K_SPLITS = 0``: those entries native) beside it.
"""

from __future__ import annotations

import dataclasses

import array_api_compat.numpy as xp
import numpy as np
import pytest

import emulinalg
from emulinalg import _engine, _planner
from emulinalg.algorithm import support
from emulinalg.reference import accuracy, exact_matmul

MEASURES = ("bits_maxrel", "bits_cw")
PART_MEASURES = ("bits_maxrel_re", "bits_cw_re", "bits_maxrel_im", "bits_cw_im")


def mirrored(rng, m, k, n, planes=1, dtype=np.float64, noise=2.0**-52):
    """``(a, b, classes)``: random operands whose entries across parity classes (``planes``
    independent parities per row, index and column) are ``noise`` times random, and the
    contraction index's parity class of each index (an int in ``range(2**planes)``)."""
    pr, pk, pc = (rng.integers(0, 2**planes, size) for size in (m, k, n))

    def make(rows, cols):
        shape = (rows.shape[0], cols.shape[0])
        x = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        cross = rows[:, None] != cols[None, :]
        return np.where(cross, x * noise, x).astype(dtype)

    return make(pr, pk), make(pk, pc), pk


def emulation_predicted_faster(monkeypatch):
    """The cost model's verdicts before and after the statistics: emulation faster."""
    monkeypatch.setattr(_planner, "faster", lambda *args, **kw: (True, "test: faster"))
    monkeypatch.setattr(_planner, "likely_faster", lambda *args, **kw: (True, "test: faster"))


def run(a, b, strategy="eager"):
    with emulinalg.config(strategy=strategy):
        c = emulinalg.namespace(a).matmul(a, b)
    return c, emulinalg.last_plan()


def bits(c, a, b, ref, names=MEASURES):
    acc = accuracy(c, a, b, ref)
    return {name: acc[name] for name in names}


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("planes", [1, 2])
def test_symmetry_zeros_are_emulated_as_accurately_as_native(dtype, planes):
    rng = np.random.default_rng(planes)
    a, b, _ = mirrored(rng, 40, 96, 48, planes, dtype)
    ref = exact_matmul(a, b)
    names = MEASURES + (PART_MEASURES if np.dtype(dtype).kind == "c" else ())
    native = bits(a @ b, a, b, ref, names)

    c, plan = run(a, b)
    assert plan.native_entries == 0, plan
    assert "symmetry zeros" in str(plan) and plan.scheme.startswith("OzakiII"), plan
    got = bits(c, a, b, ref, names)
    for name in names:
        assert got[name] >= native[name], (name, got, native, str(plan))


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_without_the_split_those_entries_are_native(monkeypatch, dtype):
    rng = np.random.default_rng(7)
    a, b, _ = mirrored(rng, 40, 96, 48, 1, dtype)
    split, _ = run(a, b)
    monkeypatch.setattr(_engine, "K_SPLITS", 0)
    c, plan = run(a, b)
    assert plan.native_entries > 0.2 * c.size, plan  # the cross-parity entries, about half
    assert "symmetry zeros" not in str(plan)
    # both certified at the level on every entry: agree within twice the level's bound
    ab = np.abs(a) @ np.abs(b)
    assert np.all(np.abs(split - c) <= 2 * 96 * 2.0**-53 * ab)


def test_double_double_results_sum_the_classes_exactly():
    """``dd=True`` (the dask layer's K-blocks) returns hi + lo, the classes' emulated values
    summed in double-double: within the level's bound of the exact product, ``lo`` within half
    an ulp of ``hi``, and ``hi`` the plain product's result."""
    rng = np.random.default_rng(3)
    a, b, _ = mirrored(rng, 24, 64, 32, 1)
    with emulinalg.config(strategy="eager"):
        cfg = emulinalg.get_config()
    (hi, lo), plan = _engine.matmul(xp, emulinalg.backends.for_namespace(xp), a, b, None, cfg,
                                    dd=True)  # fmt: skip
    assert "symmetry zeros" in str(plan) and plan.native_entries == 0
    ex_hi, ex_lo = exact_matmul(a, b)
    err = np.abs((hi - ex_hi) + (lo - ex_lo))
    assert np.all(err <= 64 * 0.502 * 2.0**-53 * (np.abs(a) @ np.abs(b)))
    assert np.all(np.abs(lo) <= 0.5 * np.spacing(np.abs(hi))) and np.any(lo != 0)
    plain, _ = run(a, b)
    assert np.array_equal(hi, plain)


def test_performant_splits_only_where_the_model_says_it_pays(monkeypatch):
    rng = np.random.default_rng(5)
    a, b, _ = mirrored(rng, 40, 96, 48, 1)
    emulation_predicted_faster(monkeypatch)
    monkeypatch.setattr(_planner, "k_split_faster", lambda *args: False)
    # the entries beyond would take the native product on top of the emulation: native
    c, plan = run(a, b, "performant")
    assert plan.scheme == "native" and "entries beyond" in plan.fallback, plan
    np.testing.assert_array_equal(c, a @ b)
    monkeypatch.setattr(_planner, "k_split_faster", lambda *args: True)
    _, plan = run(a, b, "performant")
    assert plan.native_entries == 0 and "symmetry zeros" in str(plan), plan


def test_performant_runs_native_where_entries_stay_beyond(monkeypatch):
    """Under "performant" a product whose certificate leaves entries beyond and that no split
    takes (float32 products do not split) runs natively: its beyond entries would come from the
    whole native product, computed on top of the emulation (float64 N = 16384, phi = 4 on an
    H100: the emulation with them took 2.9x cuBLAS's time). Under "eager" it emulates."""
    rng = np.random.default_rng(5)
    a, b, _ = mirrored(rng, 40, 96, 48, 1, dtype=np.float32, noise=2.0**-60)
    emulation_predicted_faster(monkeypatch)
    c, plan = run(a, b)
    assert plan.scheme.startswith("OzakiII") and plan.native_entries > 0, plan
    c, plan = run(a, b, "performant")
    assert plan.scheme == "native" and "entries beyond" in plan.fallback, plan
    np.testing.assert_array_equal(c, a @ b)


def test_performant_splits_only_where_every_sampled_entry_is_fixed(monkeypatch):
    """``k_classes(..., complete=True)`` (``strategy="performant"``) takes a split only where it
    fixes every sampled entry beyond; the eager first split also where the classes fit the
    entries' sides (``MIN_FIT``) with none fixed, and where half of them are fixed."""
    rng = np.random.default_rng(3)
    a, b, _ = mirrored(rng, 40, 96, 48, 1)
    # the symmetry zeros: |A||B| far below the product of the lines' largest magnitudes
    scale = np.max(np.abs(a), axis=1)[:, None] * np.max(np.abs(b), axis=0)[None, :]
    beyond = (np.abs(a) @ np.abs(b)) < 2.0**-30 * scale
    assert beyond.any()
    assert support.k_classes(xp, a, None, b, None, beyond, complete=True) is not None
    monkeypatch.setattr(support, "FIX_BITS", -1000)  # no sampled entry counts as fixed
    assert support.k_classes(xp, a, None, b, None, beyond) is not None  # (MIN_FIT)
    assert support.k_classes(xp, a, None, b, None, beyond, complete=True) is None
    monkeypatch.setattr(support, "MIN_FIT", 2.0)  # no fit either: MIN_FIXED alone decides
    monkeypatch.setattr(support, "MIN_FIXED", 0.0)
    assert support.k_classes(xp, a, None, b, None, beyond) is not None
    assert support.k_classes(xp, a, None, b, None, beyond, complete=True) is None


def test_k_split_faster_weighs_the_classes_against_the_native_product(monkeypatch):
    from emulinalg import OzakiII, _cost

    scheme = OzakiII(moduli=15)
    model = _cost.CostModel(
        native_flops={"float64": 1e12}, int_gemm_ops=1e14, entry_seconds=1e-10,
        stats_flops=1e14, fixed_seconds=1e-3, source="test",
    )  # fmt: skip
    monkeypatch.setattr(_cost, "get_cost_model", lambda name, flops=None: model)
    # large products: the native GEMM costs more than the classes' fixed costs
    assert _planner.k_split_faster("x", scheme, "float64", 8192, 8192, [4096, 4096])
    # small ones: a second product's fixed cost is more than the native GEMM
    assert not _planner.k_split_faster("x", scheme, "float64", 64, 64, [32, 32])
    # slower integer GEMMs: the classes (2.07 s) beat the emulation plus the native product its
    # beyond entries take (3.06 s) but not the native product alone (1.10 s), its only rival
    slow = dataclasses.replace(model, int_gemm_ops=1e13)
    monkeypatch.setattr(_cost, "get_cost_model", lambda name, flops=None: slow)
    assert not _planner.k_split_faster("x", scheme, "float64", 8192, 8192, [4096, 4096])
    monkeypatch.setattr(_cost, "get_cost_model", lambda name, flops=None: None)
    assert _planner.k_split_faster("x", scheme, "float64", 64, 64, [32, 32])


def test_classes_follow_the_parity_of_the_contraction_index():
    rng = np.random.default_rng(11)
    a, b, pk = mirrored(rng, 30, 80, 20, 1)
    # each row's and column's parity is that of its largest entry's index; the entries across
    # parities are those one product cannot certify
    pr = pk[np.argmax(np.abs(a), axis=1)]
    pc = pk[np.argmax(np.abs(b), axis=0)]
    beyond = pr[:, None] != pc[None, :]
    classes = support.k_classes(xp, a, None, b, None, beyond)
    assert classes is not None and len(classes) == 2
    got = [set(c.tolist()) for c in classes]
    want = [set(np.nonzero(pk == pk[0])[0].tolist()), set(np.nonzero(pk != pk[0])[0].tolist())]
    assert got == want  # the class holding index 0 first
    assert all(c.dtype == np.int64 for c in classes)


def test_classes_decline_where_no_split_exists():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((8, 1)), rng.standard_normal((1, 8))
    assert support.k_classes(xp, a, None, b, None, np.ones((8, 8), dtype=bool)) is None  # k = 1
    a, b = rng.standard_normal((8, 16)), rng.standard_normal((16, 8))
    assert support.k_classes(xp, a, None, b, None, np.zeros((8, 8), dtype=bool)) is None
    # dense operands: no index has a noise side, no vote, one class
    assert support.k_classes(xp, a, None, b, None, np.ones((8, 8), dtype=bool)) is None


def test_batched_and_nonfinite_products_keep_native_entries():
    rng = np.random.default_rng(4)
    a, b, _ = mirrored(rng, 24, 48, 24, 1)
    c, plan = run(np.stack([a, a]), np.stack([b, b]))
    assert plan.native_entries > 0 and "symmetry zeros" not in str(plan)
    a = a.copy()
    a[3, 5] = np.nan
    c, plan = run(a, b)
    assert "symmetry zeros" not in str(plan) and np.isnan(c[3]).all()
    np.testing.assert_array_equal(np.isnan(c), np.isnan(a @ b))


def test_no_split_where_it_fixes_nothing():
    """Entries beyond for other reasons than symmetry zeros (near-identity operands with noise
    off the diagonal: a class's largest terms meet only noise) are not split: the native
    entries are the whole native product's, as accurate as numpy's."""
    rng = np.random.default_rng(10)
    a = np.eye(64, 128) + 2.0**-52 * rng.standard_normal((64, 128))
    b = np.eye(128, 64) + 2.0**-52 * rng.standard_normal((128, 64))
    ref = exact_matmul(a, b)
    c, plan = run(a, b)
    assert "symmetry zeros" not in str(plan) and plan.native_entries > 0
    got, native = bits(c, a, b, ref), bits(a @ b, a, b, ref)
    assert all(got[m] >= native[m] for m in MEASURES), (got, native)


def test_a_class_sum_that_overflows_is_native_not_nan():
    rng = np.random.default_rng(0)
    a, b, pk = mirrored(rng, 32, 64, 32, 1)
    big = 8e306
    a[0] = np.where(pk == pk[0], big, -big)  # each class's sum overflows, the whole one not
    a[0, 0] += big
    b[:, 0] = 1.0
    c, _ = run(a, b)
    assert np.isfinite(c[0, 0]) and c[0, 0] == (a @ b)[0, 0]


@pytest.mark.parametrize("precision", [60, 80])
def test_levels_above_float64_split_too(precision):
    """A level above the dtype's is never less accurate than the dtype's own: it splits the
    symmetry zeros as the float64 level does."""
    rng = np.random.default_rng(0)
    a, b, _ = mirrored(rng, 40, 96, 48, 1)
    ref = exact_matmul(a, b)
    level, _ = run(a, b)
    with emulinalg.config(precision=precision):
        c, plan = run(a, b)
    assert plan.native_entries == 0 and "symmetry zeros" in str(plan), plan
    got, own = bits(c, a, b, ref), bits(level, a, b, ref)
    assert all(got[m] >= own[m] for m in MEASURES), (got, own)


def test_prepared_operands_split_as_unprepared_and_say_so():
    """A prepared operand takes the same split (bit-identical result), and the plan says the
    classes' products make their own pieces."""
    rng = np.random.default_rng(11)
    a, b, _ = mirrored(rng, 32, 80, 40, 1)
    plain, plan = run(a, b)
    assert "symmetry zeros" in str(plan) and plan.native_entries == 0, plan
    with emulinalg.config(strategy="eager"):
        c = emulinalg.matmul(emulinalg.prepare(a), b)
    got = emulinalg.last_plan()
    assert np.array_equal(c, plain)
    assert "symmetry zeros" in str(got) and got.native_entries == 0, got
    assert "the prepared pieces serve the whole product only" in str(got), got


def stray_pairs(rng, m=300, k=120, hidden=12, sampled_scale=2.0**-60, everywhere=False):
    """``(a, b, pk, beyond)``: a Coulomb-like product (A's row i of parity q_i has zeros at
    indices of the other parity, B a column whose odd-parity entries are noise): the rows of
    parity 1 are beyond one product's certificate. ``hidden`` odd indices are significant in
    A only in rows that ``k_classes``' sampled entries skip (``sampled_scale`` times random in
    the sampled rows and half the others, or, ``everywhere``, in every row)."""
    q = np.arange(m) % 2
    pk = rng.integers(0, 2, k)
    a = rng.standard_normal((m, k)) * (q[:, None] == pk[None, :])
    b = rng.standard_normal((k, 1))
    b[pk == 1] *= 2.0**-52
    beyond = np.broadcast_to((q == 1)[:, None], (m, 1))
    held = np.nonzero(q == 1)[0]
    step = max(1, held.shape[0] // support.VOTERS)
    sampled = held[::step][: support.VOTERS]
    others = np.setdiff1d(held, sampled)
    odd = np.nonzero(pk == 1)[0][:hidden]
    a[np.ix_(sampled, odd)] *= sampled_scale
    a[np.ix_(others if everywhere else others[1::2], odd)] *= sampled_scale
    return a, b, pk, beyond, odd


@pytest.mark.parametrize(
    "sampled_scale, everywhere", [(2.0**-60, False), (0.0, False), (2.0**-60, True)]
)
def test_indices_no_sampled_entry_informs_follow_the_held_lines(sampled_scale, everywhere):
    """An odd index whose A entries are noise (or zero) in every sampled row but significant in
    others, or noise in every row (a pair of distant functions in a Coulomb vector), goes to
    the odd class, not with the even indices, whose rows are zero there: its terms would set
    those rows' scaling and be noise beside the class's column maximum."""
    rng = np.random.default_rng(5)
    a, b, pk, beyond, _ = stray_pairs(rng, sampled_scale=sampled_scale, everywhere=everywhere)
    classes = support.k_classes(xp, a, None, b, None, beyond)
    assert classes is not None
    got = [set(c.tolist()) for c in classes]
    want = [set(np.nonzero(pk == pk[0])[0].tolist()), set(np.nonzero(pk != pk[0])[0].tolist())]
    assert got == want
    c, plan = run(a, b)
    assert plan.native_entries == 0, plan
    ref = exact_matmul(a, b)
    got, native = bits(c, a, b, ref), bits(a @ b, a, b, ref)
    assert all(got[n] >= native[n] for n in MEASURES), (got, native, str(plan))


def test_held_lines_are_read_a_few_at_a_time(monkeypatch):
    """The held lines' maxima read in pieces of a few lines (long contraction dimensions) give
    the same classes as read at once."""
    rng = np.random.default_rng(5)
    a, b, _, beyond, _ = stray_pairs(rng, sampled_scale=0.0)
    whole = support.k_classes(xp, a, None, b, None, beyond)
    monkeypatch.setattr(support, "SPREAD_ENTRIES", 3 * a.shape[1] + 1)  # 3 rows, 1 column
    pieces = support.k_classes(xp, a, None, b, None, beyond)
    assert all(np.array_equal(x, y) for x, y in zip(whole, pieces, strict=True))


@pytest.mark.parametrize("seed, shape", [(9057, (17, 17, 5)), (9039, (96, 17, 96))])
def test_tied_votes_do_not_take_the_uninformed_fallbacks(seed, shape):
    """Three mirror planes: indices whose sampled votes tie (informed by some entries, +1 and -1
    cancelling) keep the clear-gap votes; the fallbacks for indices nothing informs
    (``_spread_votes``, ``_quiet_votes``) placed them so that no split was taken (52 and 4,647
    native entries)."""
    rng = np.random.default_rng(seed)
    rng.choice([5, 17, 40, 64, 96, 150], 3)  # the sweep drew the shape here: same noise, operands
    noise = float(rng.choice([2.0**-52, 2.0**-45, 2.0**-60]))
    a, b, _ = mirrored(rng, *shape, planes=3, noise=noise)
    c, plan = run(a, b)
    assert plan.native_entries == 0, plan
    ref = exact_matmul(a, b)
    got, native = bits(c, a, b, ref), bits(a @ b, a, b, ref)
    assert all(got[n] >= native[n] for n in MEASURES), (got, native, str(plan))


def test_wide_exponent_ranges_run_native_under_performant(monkeypatch):
    """phi = 4 inputs (exponents spread over a wide range, no symmetry zeros): the eager level
    splits and still leaves entries beyond every class's certificate (native entries of the
    whole native product); under "performant", even where the model predicts the split and the
    emulation faster, the split does not fix every sampled entry, so the product runs natively
    (the H100's float64 N = 16384, phi = 4 default took the split: 0.35x cuBLAS)."""
    from emulinalg.inputs import phi_matrix

    a = phi_matrix((384, 384), 4.0, "float64", seed=1)
    b = phi_matrix((384, 384), 4.0, "float64", seed=2)
    _, plan = run(a, b)
    assert "symmetry zeros" in str(plan) and plan.native_entries > 0, plan
    emulation_predicted_faster(monkeypatch)
    monkeypatch.setattr(_planner, "k_split_faster", lambda *args: True)
    c, plan = run(a, b, "performant")
    assert plan.scheme == "native" and "entries beyond" in plan.fallback, plan
    np.testing.assert_array_equal(c, a @ b)


def test_two_mirror_planes_run_native_under_performant(monkeypatch):
    """Symmetry zeros of two mirror planes: the eager level splits twice and emulates every
    entry; "performant" takes no split that leaves sampled entries for its classes' own splits
    (``k_classes(complete=True)``: wide exponent ranges pass that fit test too), so the product
    runs natively, as fast as native and as accurate."""
    rng = np.random.default_rng(0)
    a, b, _ = mirrored(rng, 40, 96, 48, 2)
    _, plan = run(a, b)
    assert plan.native_entries == 0 and "a class split again" in str(plan), plan
    emulation_predicted_faster(monkeypatch)
    monkeypatch.setattr(_planner, "k_split_faster", lambda *args: True)
    c, plan = run(a, b, "performant")
    assert plan.scheme == "native" and "entries beyond" in plan.fallback, plan
    np.testing.assert_array_equal(c, a @ b)
