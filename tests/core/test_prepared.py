"""Prepared operands (``emulinalg.prepare``): bit-identical to the unprepared products, what they
reuse, the snapshot, and the refusals where a product breaks what they were prepared for. The
tests of what the generic stages reuse (and of a backend mismatch) run on the numpy backend
(``numpy_backend``: on AMX CPUs numpy arrays default to the amx backend, whose statistics and
residues are its own code)."""

from __future__ import annotations

import numpy as np
import pytest

import emulinalg
from emulinalg import OzakiI, OzakiII
from emulinalg.algorithm import scaling
from emulinalg.inputs import phi_matrix


def _same_plan(p0, p1):
    """The plans of the unprepared and the prepared product agree but for the prepared note."""
    notes = [n for n in p1.notes if not n.startswith("prepared ")]
    assert notes == p0.notes
    for field in ("backend", "precision", "scheme", "gemms", "fallback", "native_entries"):
        assert getattr(p1, field) == getattr(p0, field), field
    assert any(n.startswith("prepared ") for n in p1.notes)


def _check(fn, x, precision, which=0, other=None):
    """fn(array) unprepared, then twice with the prepared array: the same bits and plans."""
    want, p0 = fn(x, explain=True)
    p = emulinalg.prepare(x, precision=precision)
    for _ in range(2):
        got, p1 = fn(p, explain=True)
        np.testing.assert_array_equal(got, want, strict=True)
        _same_plan(p0, p1)
    return p1


PRECISIONS = [None, 53, OzakiII(moduli=14), OzakiII(moduli=12, mode="fast"), OzakiI(slices=7)]


@pytest.mark.parametrize("precision", PRECISIONS, ids=str)
@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
def test_matmul_either_side_bit_identical(eager, precision, dtype):
    a = phi_matrix((37, 90), 1, dtype=dtype, seed=1)
    b = phi_matrix((90, 23), 1, dtype=dtype, seed=2)
    _check(lambda x, **kw: emulinalg.matmul(x, b, precision=precision, **kw), a, precision)
    _check(lambda x, **kw: emulinalg.matmul(a, x, precision=precision, **kw), b, precision)


def test_tensordot_and_vecdot_layouts_bit_identical(eager):
    """One prepared operand in several layouts (as the SCF's DF tensor): each its own."""
    L = phi_matrix((12, 9, 9), 1, seed=3)
    d = phi_matrix((9, 9), 1, seed=4)
    rho = phi_matrix((12,), 1, seed=5)
    c = phi_matrix((9, 4), 1, seed=6)
    p = emulinalg.prepare(L)
    uses = [
        lambda x: emulinalg.tensordot(x, d, axes=2),
        lambda x: emulinalg.tensordot(rho, x, axes=1),
        lambda x: emulinalg.tensordot(x, c, axes=([2], [0])),
        lambda x: emulinalg.tensordot(d, x, axes=([0, 1], [1, 2])),
        lambda x: emulinalg.vecdot(x, d, axis=-1),
        lambda x: emulinalg.matmul(x, d),
    ]
    for _ in range(2):
        for f in uses:
            np.testing.assert_array_equal(f(p), f(L), strict=True)
    assert p.layouts == len(uses)
    cp = emulinalg.prepare(phi_matrix((5, 8), 1, dtype="complex128", seed=7))
    y = phi_matrix((5, 8), 1, dtype="complex128", seed=8)
    for _ in range(2):  # vecdot conjugates x1
        np.testing.assert_array_equal(
            emulinalg.vecdot(cp, y), emulinalg.vecdot(cp.data, y), strict=True
        )


def test_namespace_takes_prepared_and_exact_reference(eager):
    """Integer-valued inputs: the exact product, through a namespace, prepared or not."""
    rng = np.random.default_rng(0)
    a = rng.integers(-1000, 1000, size=(20, 50)).astype(np.float64)
    b = rng.integers(-1000, 1000, size=(50, 30)).astype(np.float64)
    xp = emulinalg.namespace(a, precision=OzakiII(moduli=14))
    p = emulinalg.prepare(b, precision=OzakiII(moduli=14))
    for _ in range(2):
        np.testing.assert_array_equal(xp.matmul(a, p), a @ b)


def test_reuse_is_real(eager, numpy_backend, monkeypatch):
    """The second product takes the prepared side's line statistics and residues from the
    preparation: line_statistics runs for the other operand only."""
    a = phi_matrix((40, 64), 1, seed=9)
    b = phi_matrix((64, 30), 1, seed=10)
    calls = []
    real = scaling.line_statistics
    monkeypatch.setattr(
        scaling, "line_statistics", lambda xp, re, *r: calls.append(re.shape) or real(xp, re, *r)
    )
    p = emulinalg.prepare(a, precision=OzakiII(moduli=14))
    emulinalg.matmul(p, b, precision=OzakiII(moduli=14))
    assert calls == [a.shape, b.shape]
    calls.clear()
    _, plan = emulinalg.matmul(p, b, precision=OzakiII(moduli=14), explain=True)
    assert calls == [b.shape]
    note = plan.notes[-1]
    assert note.startswith("prepared x1 (A): reused ")
    assert "line statistics" in note and "residues of 40/40 lines" in note


def test_residues_follow_changed_shifts(eager, numpy_backend):
    """Scheme II's shifts depend on the other operand: the lines whose shift changed get new
    residues, the others keep theirs, and the result is the unprepared one's."""
    a = phi_matrix((30, 64), 1, seed=11)
    b = phi_matrix((64, 20), 1, seed=12)
    p = emulinalg.prepare(a, precision=OzakiII(moduli=14))
    emulinalg.matmul(p, b, precision=OzakiII(moduli=14))
    b2 = phi_matrix((64, 20), 2, seed=99)  # other line bounds e_i for some rows of A
    got, plan = emulinalg.matmul(p, b2, precision=OzakiII(moduli=14), explain=True)
    np.testing.assert_array_equal(got, emulinalg.matmul(a, b2, precision=OzakiII(moduli=14)))
    note = plan.notes[-1]
    kept = int(note.split("residues of ")[1].split("/")[0])
    assert 0 < kept < 30


def test_nonfinite_prepared_operand(eager):
    a = phi_matrix((20, 70), 1, seed=13)
    a[3, 5] = np.nan
    a[7, 1] = np.inf
    b = phi_matrix((70, 9), 1, seed=14)
    _check(lambda x, **kw: emulinalg.matmul(x, b, **kw), a, None)
    b[2, 4] = np.nan
    _check(lambda x, **kw: emulinalg.matmul(x, b, **kw), a, None)


def test_snapshot_is_not_the_callers_array(eager, numpy_backend):
    a = phi_matrix((16, 70), 1, seed=15)
    b = phi_matrix((70, 8), 1, seed=16)
    want = emulinalg.matmul(a, b)
    p = emulinalg.prepare(a)
    a[:] = 0.0  # the caller changes its array: the prepared operand keeps the old values
    np.testing.assert_array_equal(emulinalg.matmul(p, b), want)
    assert not p.data.flags.writeable
    assert p.shape == (16, 70) and p.dtype == np.float64 and p.backend == "numpy"
    assert "float64" in repr(p)


def test_refusals(eager, numpy_backend):
    a = phi_matrix((16, 70), 1, seed=17)
    b = phi_matrix((70, 8), 1, seed=18)
    p = emulinalg.prepare(a, precision="float64")
    emulinalg.matmul(p, b)  # None: the float64 level, as prepared
    with pytest.raises(ValueError, match=r"prepared for precision float64.*float32"):
        emulinalg.matmul(p, b, precision="float32")
    with pytest.raises(ValueError, match=r"precision float64.*OzakiII"):
        emulinalg.matmul(p, b, precision=OzakiII(moduli=14))
    with pytest.raises(ValueError, match=r"prepared for dtype float64.*complex128"):
        emulinalg.matmul(p, b.astype(np.complex128))
    with emulinalg.config(scheme="ozaki1"), pytest.raises(ValueError, match="scheme family"):
        emulinalg.matmul(p, b)
    p.backend = "amx"  # as if prepared with AMX on, used with it off
    with pytest.raises(ValueError, match="prepared for backend amx"):
        emulinalg.matmul(p, b)
    p32 = emulinalg.prepare(a.astype(np.float32))
    with pytest.raises(ValueError, match=r"dtype float32.*float64"):
        emulinalg.matmul(p32, b)
    with pytest.raises(ValueError, match="native"):
        emulinalg.prepare(a, precision="native")
    with pytest.raises(TypeError, match="dtype int64"):
        emulinalg.prepare(np.ones((3, 3), dtype=np.int64))
    with pytest.raises(TypeError, match="must be an array"):
        emulinalg.prepare([[1.0]])
    with pytest.raises(TypeError, match="prepared operands are taken by"):
        emulinalg.namespace(a).einsum("ij,jk->ik", emulinalg.prepare(a), b)


@pytest.mark.parametrize("precision", [40, OzakiII(moduli=14), "float32"], ids=str)
def test_prepared_precision_is_the_default(eager, precision):
    """A product given a prepared operand and no precision= takes the one it was prepared
    for (the same bits and plan as asking for it); precision= and the config still win."""
    a = phi_matrix((21, 60), 1, seed=31)
    b = phi_matrix((60, 13), 1, seed=32)
    p, q = emulinalg.prepare(a, precision=precision), emulinalg.prepare(b, precision=precision)
    want, plan = emulinalg.matmul(a, b, precision=precision, explain=True)
    for got, used in (emulinalg.matmul(p, b, explain=True), emulinalg.matmul(a, q, explain=True),
                      emulinalg.tensordot(p, b, axes=1, explain=True)):  # fmt: skip
        np.testing.assert_array_equal(got, want, strict=True)
        assert used.precision == plan.precision and used.scheme == plan.scheme
    with pytest.raises(ValueError, match="prepared for precision"):
        emulinalg.matmul(p, b, precision=41)
    with emulinalg.config(precision=41), pytest.raises(ValueError, match="prepared for precision"):
        emulinalg.matmul(p, b)


def test_matmul_operator(eager):
    """``p @ b`` and ``a @ p`` are emulinalg.matmul (numpy on the left defers to the prepared
    operand), bit for bit, vectors included."""
    a = phi_matrix((17, 50), 1, seed=33)
    b = phi_matrix((50, 11), 1, seed=34)
    v = phi_matrix((50,), 1, seed=35)
    p, q = emulinalg.prepare(a, precision=45), emulinalg.prepare(b, precision=45)
    want = emulinalg.matmul(a, b, precision=45)
    for got in (p @ b, a @ q, p @ q):
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, want, strict=True)
    pv = emulinalg.prepare(v, precision=45)
    np.testing.assert_array_equal(a @ pv, emulinalg.matmul(a, v, precision=45), strict=True)
    with pytest.raises(ValueError, match="contraction dimensions differ"):
        p @ a


def test_kept_pieces_are_read_only(eager, numpy_backend):
    """A step writing into a kept piece would corrupt the next product: numpy refuses."""
    a = phi_matrix((16, 70), 1, seed=19)
    b = phi_matrix((70, 8), 1, seed=20)
    p = emulinalg.prepare(a)
    emulinalg.matmul(p, b)
    (side,) = p._sides.values()
    stats = side.peek(("line statistics", "accurate", False))
    assert stats is not None and not stats.bar.flags.writeable
