"""The dask layer's decision on the count, the in-core engine's on the whole matrices: the
certificate's fallback (the magnitude lower bound), the exact step, the refinement's steps, the
patch, and the refit of the most cancelled entries; the graph's results are the in-core bits.
Dask's synchronous scheduler.
"""

from __future__ import annotations

import collections
import math

import array_api_compat
import numpy as np
import pytest
from _dask_helpers import (
    _PATCH,
    _assert_in_core_bits,
    _bits_equal,
    _count_task_result,
    _counting_ran,
    _eager,
    _engine_certificate,
    _f_only_beyond,
    _key_name,
    _numpy_in_core,
    _patch_inputs,
)

import emulinalg
import emulinalg.backends
from emulinalg import _planner
from emulinalg.algorithm import certificate, operands, refinement, refit
from emulinalg.algorithm.moduli import MAX_MODULI
from emulinalg.algorithm.scaling import ozaki2_prescale
from emulinalg.backends import dask as dask_backend
from emulinalg.backends import numpy as numpy_backend
from emulinalg.backends.dask import certificate as dask_certificate
from emulinalg.backends.dask import refinement as dask_refinement
from emulinalg.backends.dask import statistics as dask_statistics
from emulinalg.inputs import phi_matrix

da = pytest.importorskip("dask.array", reason="dask[array] is not installed")
distributed = pytest.importorskip("distributed", reason="distributed is not installed")
import dask  # noqa: E402

pytestmark = pytest.mark.dask


def _fallback_inputs(kind, dtype):
    phi = 4.0 if kind == "phi4" else 1.0
    A = phi_matrix((90, 160), phi, dtype, seed=71)
    B = phi_matrix((160, 60), phi, dtype, seed=72)
    if kind == "phi4":
        return A, B
    A[::3, 5] *= 2.0**40  # a spike in every third row meeting 2**-40 in every other column:
    B[5, ::2] *= 2.0**-40  # floor(2**(s+1)|x|) is 0 for the lines' other entries, F too weak
    return A, B


@pytest.mark.parametrize(
    ("kind", "dtype", "precision"),
    [
        ("spike", "float64", None),
        pytest.param("spike", "complex128", None, marks=pytest.mark.slow),
        ("spike", "float64", 40),
        pytest.param("phi4", "float64", None, marks=pytest.mark.slow),
        pytest.param("phi4", "float32", None, marks=pytest.mark.slow),
        ("phi4", "complex128", 24),
    ],
)
def test_certificate_fallback_like_in_core(sync, monkeypatch, kind, dtype, precision):
    """Where the bound GEMM's lower bound leaves entries beyond, the engine adds the
    magnitude lower bound; the graph does too (per block triple, summed over K-blocks) and
    makes the same decisions: count, beyond mask (native entries), bits; e and f are the
    engine's bit for bit, the line norms (l2 for the named levels, l1 for bits: K-sums of
    the chunks' partials) the engine's within the rounding of the sums' order."""
    if dtype.startswith("complex"):  # the complex route's certificate: these wide-range
        # operands have parts too small for it, which the part check would split
        monkeypatch.setattr(_planner, "part_checked", lambda request, complex_: False)
    A, B = _fallback_inputs(kind, dtype)
    assert _f_only_beyond(A, B, precision).any()  # the engine's second pass is needed
    count, beyond, _ = _engine_certificate(A, B, precision)
    assert count is not None and beyond.sum() < _f_only_beyond(A, B, precision).sum()
    calls = collections.Counter()
    monkeypatch.setattr(
        dask_statistics, "_lower_block", _counting_ran("_lower_block", "lam", "lower", calls)
    )
    arrays, orig = {}, dask_backend._shared_graph
    monkeypatch.setattr(dask_backend, "_shared_graph",
                        lambda a, b, r, **kw: orig(a, b, r, arrays, **kw))
    a = da.from_array(A, chunks=(31, 41))  # 4 K-blocks (3 x 41 + 37), 3 x 3 output blocks
    b = da.from_array(B, chunks=(41, 25))
    c = _eager(emulinalg.matmul, a, b, precision=precision)
    e, f, need, at, bt = dask.compute(*(arrays[x] for x in ("e", "f", "need", "aterms", "bterms")))
    ar, ai = operands.parts(np, A)
    br, bi = operands.parts(np, B)
    pre = ozaki2_prescale(np, numpy_backend.int_matmul, ar, ai, br, bi, "accurate")
    assert _bits_equal(e, pre[2]).all() and _bits_equal(f, pre[3]).all()
    norm = arrays["norm"]
    assert norm == ("l2" if precision is None else "l1")
    na, nb = dask_certificate._line_norms(np, at, bt, A.shape[-1], norm)
    _, na_core, nb_core = certificate.normalized(np, ar, ai, br, bi, norm)
    np.testing.assert_allclose(na, na_core, rtol=1e-14)
    np.testing.assert_allclose(nb, nb_core, rtol=1e-14)
    assert np.array_equal(need == certificate.BEYOND, beyond)
    cfg = _count_task_result(c)
    assert cfg["count"] == count
    flags = np.add.reduceat(np.add.reduceat(beyond, [0, 31, 62], 0), [0, 25, 50], 1) > 0
    assert np.array_equal(cfg["need"], flags)
    calls.clear()
    out = c.compute()
    assert calls == {"lower ran": 4 * 3 * 3}
    plan = _assert_in_core_bits(out, A, B, precision=precision)
    assert plan.scheme == f"OzakiII(moduli={count}, mode=accurate)"
    assert plan.native_entries == beyond.sum()


def _in_core_count(A, B, precision):
    with _numpy_in_core(), emulinalg.config(strategy="eager"):
        emulinalg.matmul(A, B, precision=precision)
    plan = emulinalg.last_plan()
    return int(plan.scheme.split("=")[1].split(",")[0]), plan


def _even_inputs(m, k, n, seed):
    """Operands whose entries all have nearly the same magnitude: every line has nearly the
    same prescale bound, so where the bisection's bound of the shifts is loose, it is loose on
    every line alike, and the exact step takes one modulus off."""
    rng = np.random.default_rng(seed)
    A = np.sign(rng.standard_normal((m, k))) * (1 + 0.05 * rng.random((m, k)))
    B = np.sign(rng.standard_normal((k, n))) * (1 + 0.05 * rng.random((k, n)))
    return A, B


@pytest.mark.parametrize(
    ("k", "precision", "batch", "chunks"),
    [
        (64, None, False, (10, 20, 6)),  # the native form; K 3 x 20 + 4
        (200, 24, False, (24, 64, 16)),  # the strict form; K 3 x 64 + 8
        (200, 24, True, (1, 12, 64, 8)),  # batched: the exact step, no refinement
    ],
)
def test_exact_step_like_in_core(sync, k, precision, batch, chunks):
    """Where ``certificate.certify_moduli``'s exact step takes one modulus off the bisection's
    count in core (no certifiable entry fails one fewer with the exact shifts), the graph does
    too (one task per output block, one decision): the same count and bits. (The refinement
    that follows tests one modulus fewer again, and keeps the count.)"""
    A, B = _even_inputs(24, k, 16, seed=0)
    if batch:
        A2, B2 = _even_inputs(24, k, 16, seed=1)
        A, B = np.stack([A, A2]), np.stack([B, B2])
    count, plan = _in_core_count(A, B, precision)
    assert not plan.native_entries
    a = da.from_array(A, chunks=chunks[:-1])
    b = da.from_array(B, chunks=chunks[:-3] + chunks[-2:])
    c = _eager(emulinalg.matmul, a, b, precision=precision)
    assert _count_task_result(c, "emulinalg-count")["count"] == count + 1  # the bisection's
    assert _count_task_result(c, "emulinalg-exact")["count"] == count
    assert _count_task_result(c)["count"] == count
    _assert_in_core_bits(c.compute(), A, B, precision=precision)


# Products whose count the refinement lowers in core: (m, k, n), dtype, precision, seed
_REFINE = {
    "native": ((60, 300, 50), "float64", None, 0),  # the native form: with sums of squares
    "strict": ((60, 300, 50), "float64", 53, 2),
    "complex": ((40, 500, 30), "complex128", 33, 1),
}


def _refine_inputs(case):
    (m, k, n), dtype, precision, seed = _REFINE[case]
    A = phi_matrix((m, k), 1.0, dtype, seed=seed)
    return A, phi_matrix((k, n), 1.0, dtype, seed=seed + 50), precision


@pytest.mark.parametrize(
    ("case", "chunks", "q", "split_every"),
    [
        pytest.param("native", (60, 300, 50), 1, 4, marks=pytest.mark.slow),  # one block
        # suspects in 2 row blocks and 2 column blocks
        pytest.param("native", (30, 150, 25), 2, 4, marks=pytest.mark.slow),
        pytest.param("native", (13, 100, 7), 3, 4, marks=pytest.mark.slow),
        # K 101 + 101 + 98, a two-level K tree
        pytest.param("native", (20, 101, 17), 3, 2, marks=pytest.mark.slow),
        ("strict", (20, 101, 17), 3, 2),
        ("complex", (13, 170, 7), 3, 4),  # K 170 + 170 + 160
    ],
)
def test_refinement_like_in_core(sync, monkeypatch, case, chunks, q, split_every):
    """Where ``refinement.refine_and_patch``'s first step takes one modulus fewer in core and its
    second keeps the count (too many suspects fail, no patch), the graph does too (per step, per
    output block its suspects: the entries failing one fewer with the exact shifts; one
    selection task taking the engine's sample of them, the sampled suspects' lines per chunk,
    their sums (and, native form, sums of squares) per K-block added over K-blocks, one
    decision; the later steps' tasks skip): the same suspects, samples, count, native entries
    and bits (in core the count is one lower without the refinement); with the suspects' limit
    below these suspects both keep the count; the native form with samples of 4 suspects
    refines in both."""
    A, B, precision = _refine_inputs(case)
    native = precision is None
    seen = []  # per refine_failures call: (sums of squares given, suspects, sampled)
    sums = []  # and the sampled suspects' sums S
    orig = refinement.refine_failures

    def failures(xp, k, target, cplx, count, lam, S, *rest):
        seen.append((len(rest) > 4 and rest[4] is not None, int(lam.shape[0]), int(S.shape[0])))
        sums.append(np.asarray(S))
        return orig(xp, k, target, cplx, count, lam, S, *rest)

    monkeypatch.setattr(refinement, "refine_failures", failures)
    count, plan = _in_core_count(A, B, precision)
    in_core = list(seen)  # per step of the engine's loop
    assert len(in_core) == 2  # one modulus off, then the suspects of the next stay
    assert all(x[0] == native and x[1] == x[2] for x in in_core)
    with monkeypatch.context() as mp:
        mp.setattr(refinement, "REFINE_ENTRIES", -1)
        mp.setattr(refinement, "SUSPECTS_MAX", -1)
        unrefined, _ = _in_core_count(A, B, precision)
    assert count == unrefined - 1 and not plan.native_entries
    calls = collections.Counter()
    monkeypatch.setattr(
        dask_refinement, "_refine_sums", _counting_ran("_refine_sums", "S", "refine", calls)
    )
    a = da.from_array(A, chunks=chunks[:2])
    b = da.from_array(B, chunks=chunks[1:])
    with dask.config.set(split_every=split_every):
        c = _eager(emulinalg.matmul, a, b, precision=precision)
    assert f"{q} K-block" in str(emulinalg.last_plan())
    bisected = _count_task_result(c, "emulinalg-count")["count"]
    assert bisected == unrefined
    assert _count_task_result(c, "emulinalg-exact")["count"] == unrefined
    cfg = _count_task_result(c)
    assert cfg["count"] == count and not cfg["need"].any()
    calls.clear()
    seen.clear()
    out = c.compute()
    steps = refinement.REFINE_STEPS
    assert calls == {"refine ran": 2 * q, "refine skipped": (steps - 2) * q}
    assert seen == in_core
    _assert_in_core_bits(out, A, B, precision=precision)
    # The suspects' limit below these suspects: no refinement, in core or in the graph.
    with monkeypatch.context() as mp:
        mp.setattr(refinement, "SUSPECTS_MAX" if native else "REFINE_ENTRIES", 4)
        assert _in_core_count(A, B, precision)[0] == unrefined
        assert _count_task_result(c)["count"] == unrefined
        calls.clear()
        _assert_in_core_bits(c.compute(), A, B, precision=precision)
        assert calls == {"refine skipped": steps * q}
    if not native:
        return
    # The native form samples REFINE_ENTRIES of its suspects, in flat order.
    with monkeypatch.context() as mp:
        mp.setattr(refinement, "REFINE_ENTRIES", 4)
        seen.clear()
        sums.clear()
        assert _in_core_count(A, B, precision)[0] == count
        sampled = list(seen)
        assert [x[1] for x in sampled] == [x[1] for x in in_core]
        assert all(x[2] == 4 for x in sampled)
        seen.clear()
        assert _count_task_result(c)["count"] == count and seen == sampled
        for got, want in zip(sums[len(sampled) :], sums[: len(sampled)]):  # the same suspects
            np.testing.assert_allclose(got, want, rtol=1e-13)
        _assert_in_core_bits(c.compute(), A, B, precision=precision)


def test_no_refinement_for_batches(sync):
    """In core the refinement is for 2-D products only; the batch graph has none either (its
    exact step, which batches have, keeps the count here)."""
    A, B, precision = _refine_inputs("native")
    X, Y = np.stack([A, A]), np.stack([B, B])
    count, _ = _in_core_count(X, Y, precision)
    assert count == _in_core_count(A, B, precision)[0] + 1
    x, y = da.from_array(X, chunks=(1, 20, 150)), da.from_array(Y, chunks=(1, 150, 25))
    c = _eager(emulinalg.matmul, x, y, precision=precision)
    names = {_key_name(k) for k in dict(c.__dask_graph__())}
    assert not any(n.startswith(("emulinalg-refine", "emulinalg-suspects")) for n in names)
    assert "emulinalg-exact" in names
    assert _count_task_result(c)["count"] == count
    _assert_in_core_bits(c.compute(), X, Y, precision=precision)


def _refit_notes(sel, count):
    """The plan notes of the in-core engine's refit (``_engine._refit_entries``) for the graph's
    refit selection ``sel`` at ``count`` moduli."""
    scheme = f"OzakiII(moduli={count}, mode=accurate)"
    notes = []
    if sel is not None and sel["patched"]:
        notes.append(f"patch: {sel['patched']} entries {scheme} does not certify recomputed with "
                     f"{MAX_MODULI} moduli")  # fmt: skip
    if sel is not None and sel["cancelled"]:
        notes.append(refit.note(sel["everything"], sel["idx"].shape[0]))
    return notes


def _in_core_refit_notes(plan):
    return [x for x in plan.notes if x.startswith(("patch:", "refit:"))]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.slow) if c in ("float32", "complex64") else c
        for c in _PATCH
    ],
)
def test_patch_like_in_core(sync, monkeypatch, case):
    """Where ``refinement.refine_and_patch`` takes one modulus fewer in core although a few
    suspects still fail it (at most ``patch_limit(m, n)``: the patch), the graph does too
    (``emulinalg-refine``): the same count and patch (flat indices), recomputed with MAX_MODULI
    moduli together with the refit's most cancelled entries (the named levels) or alone (a
    number of bits): the in-core bits, native entries aside, and the in-core plan's notes
    ("patch: ...", "refit: ..."). The patched entries are the most moduli's product's and
    differ from the count's. With the patch's limit at 0 neither patches and both keep the
    count one higher."""
    if case.endswith("complex"):  # the complex route's patch (the part check would split)
        monkeypatch.setattr(_planner, "part_checked", lambda request, complex_: False)
    A, B, precision, chunks = _patch_inputs(case)
    count, beyond, patch = _engine_certificate(A, B, precision)
    assert patch is not None and 0 < patch.shape[0] <= refinement.patch_limit(64, 64)
    assert beyond.any() == (case == "native-entries")
    got, plan = _in_core_count(A, B, precision)
    assert got == count and plan.native_entries == beyond.sum()
    a = da.from_array(A, chunks=chunks[:2])  # 3 x (2 to 4) chunks: K-blocked
    b = da.from_array(B, chunks=chunks[1:])
    c = _eager(emulinalg.matmul, a, b, precision=precision)
    assert "the certificate's patch" in str(emulinalg.last_plan())
    cfg = _count_task_result(c)
    assert cfg["count"] == count and np.array_equal(cfg["patch"], patch)
    sel = _count_task_result(c, "emulinalg-refit-select")
    assert sel["patched"] == patch.shape[0] and np.isin(patch, sel["idx"]).all()
    assert sel["cancelled"] == (precision is None)
    assert _refit_notes(sel, count) == _in_core_refit_notes(plan)
    out = c.compute()
    _assert_in_core_bits(out, A, B, precision=precision)
    with emulinalg.config(strategy="eager"):
        full = emulinalg.matmul(A, B, precision=emulinalg.OzakiII(moduli=MAX_MODULI))
        plain = emulinalg.matmul(A, B, precision=emulinalg.OzakiII(moduli=count))

    def at(x):
        return np.reshape(x, (-1,))[patch]

    assert _bits_equal(at(out), at(full)).all() and not _bits_equal(at(out), at(plain)).all()
    with monkeypatch.context() as mp:
        mp.setattr(refinement, "PATCH_ENTRIES", 0)
        got, plan = _in_core_count(A, B, precision)
        assert got == count + 1 and not any(x.startswith("patch:") for x in plan.notes)
        cfg = _count_task_result(c)
        assert cfg["count"] == count + 1 and cfg["patch"] is None
        sel = _count_task_result(c, "emulinalg-refit-select")
        assert _refit_notes(sel, count + 1) == _in_core_refit_notes(plan)
        _assert_in_core_bits(c.compute(), A, B, precision=precision)


@pytest.mark.parametrize(
    "steps",
    [pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow), None],
)
def test_refine_steps_like_in_core(sync, monkeypatch, steps):
    """``refinement.refine_and_patch`` loops (``REFINE_STEPS``): here its first step takes one
    modulus off and its second one more with a patch; the graph (one set of tasks per step)
    follows the loop with every number of steps: the same count, patch and bits."""
    if steps is not None:
        monkeypatch.setattr(refinement, "REFINE_STEPS", steps)
    A = phi_matrix((64, 200), 2.0, "float64", seed=3)
    B = phi_matrix((200, 48), 2.0, "float64", seed=4)
    count, beyond, patch = _engine_certificate(A, B)
    assert not beyond.any() and (patch is None) == (steps == 1)
    got, plan = _in_core_count(A, B, None)
    assert got == count
    a, b = da.from_array(A, chunks=(24, 70)), da.from_array(B, chunks=(70, 20))
    c = _eager(emulinalg.matmul, a, b)
    names = {_key_name(k) for k in dict(c.__dask_graph__())}
    assert {x for x in names if x.startswith("emulinalg-suspects")} == {
        f"emulinalg-suspects-{t}" for t in range(1, refinement.REFINE_STEPS + 1)
    }
    assert _count_task_result(c, "emulinalg-exact")["count"] == count + 1 + (steps != 1)
    cfg = _count_task_result(c)
    assert cfg["count"] == count and cfg["refining"] == (steps == 1)  # 1: stopped by the cap
    assert (cfg["patch"] is None) if patch is None else np.array_equal(cfg["patch"], patch)
    sel = _count_task_result(c, "emulinalg-refit-select")
    assert _refit_notes(sel, count) == _in_core_refit_notes(plan)
    _assert_in_core_bits(c.compute(), A, B)


@pytest.mark.parametrize(
    ("dtype", "shape", "chunks"),
    [
        pytest.param("float64", (60, 300, 50), (13, 100, 7), marks=pytest.mark.slow),
        ("complex128", (40, 200, 30), (15, 80, 11)),
        ("float32", (2, 30, 150, 20), (1, 11, 60, 7)),  # a batch: picked across its products
    ],
)
@pytest.mark.parametrize(
    "entries",
    [None, pytest.param(5, marks=pytest.mark.slow), pytest.param("all", marks=pytest.mark.slow)],
)
def test_refit_like_in_core(sync, monkeypatch, dtype, shape, chunks, entries):
    """The named levels refit the whole product's most cancelled entries in core (``refit.refit``):
    the graph picks the same entries (per output block the entries the pick can take there, one
    pick over them), recomputes them with the most moduli and patches them in before the native
    entries: the in-core bits, also with ``REFIT_ENTRIES`` lowered (``entries``), and a NaN row
    and a column beyond nothing but zeros (non-finite lines are refit in core too, then
    patched). These products are small (``refit.refits_all``): with ``entries="all"`` every
    entry is refit, otherwise ``REFIT_ALL_WORK`` is lowered to 0 so that the pick chooses."""
    if entries != "all":
        monkeypatch.setattr(refit, "REFIT_ALL_WORK", 0)
    if isinstance(entries, int):
        monkeypatch.setattr(refit, "REFIT_ENTRIES", entries)
    *batch, m, k, n = shape
    A = phi_matrix((*batch, m, k), 1.0, dtype, seed=91)
    B = phi_matrix((*batch, k, n), 1.0, dtype, seed=92)
    A[..., 3, 7] = np.nan
    B[..., :, 2] = 0.0
    bad = np.isnan(A).any(axis=-1)[..., None] & np.ones((*batch, m, n), bool)
    with emulinalg.config(strategy="eager"):
        want = emulinalg.matmul(A, B)
        which = "every entry" if entries == "all" else "the most cancelled"
        assert f"refit: {which}" in str(emulinalg.last_plan())
        with monkeypatch.context() as mp:  # the values the engine refits (NaN/Inf count as 0)
            mp.setattr(_planner, "refits", lambda *args: False)
            plain = emulinalg.matmul(np.where(np.isnan(A), 0, A), B)
    assert not _bits_equal(want, plain)[~bad].all()  # the refit changes bits here
    *bc, mc, kc, nc = chunks
    a = da.from_array(A, chunks=(*bc, mc, kc))
    b = da.from_array(B, chunks=(*bc, kc, nc))
    c = _eager(emulinalg.matmul, a, b)
    assert "refit (refit.refit)" in str(emulinalg.last_plan())
    # the in-core pick, from the unrefit values and the whole matrices' prescale
    ar, ai = operands.parts(np, A)
    br, bi = operands.parts(np, B)
    ar, ai = operands.zero_nonfinite(np, ar, ai)
    pre = ozaki2_prescale(np, numpy_backend.int_matmul, ar, ai, br, bi, "accurate")
    parts = (plain,) if ai is None else (plain.real, plain.imag)
    xp = array_api_compat.array_namespace(plain)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0/0 and x/0 ratios, as in core
        everything = refit.refits_all(math.prod(batch) * m * n, k)
        core = refit.cancelled_entries(xp, parts, tuple(pre), everything=everything)
    sel = _count_task_result(c, "emulinalg-refit-select")
    assert sorted(sel["idx"].tolist()) == sorted(core.tolist())
    _assert_in_core_bits(c.compute(), A, B, native=bad)
