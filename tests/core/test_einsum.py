"""``einsum`` and ``dot`` of the emulated namespaces (``emulinalg._einsum``).

Three independent references: numpy's own ``einsum``/``dot`` for shapes, dtypes and values (to
a tolerance relative to the same contraction of absolute values), exact sums of products in
Python Fractions for a few small cases (within the level's bound), and, bit for bit, the
explicit ``emulinalg.matmul``/``tensordot`` call on the operands as the docstring says they are
rearranged. Every floating case also checks that the plan names the einsum/dot product, which
numpy's own functions (the namespace's before) never record.
"""

from __future__ import annotations

import itertools
import sys
import typing
from fractions import Fraction

import numpy as np
import pytest
from _helpers import RTOL, assert_close_to, plain_numpy

import emulinalg
from emulinalg import matmul

MOD8 = emulinalg.OzakiII(moduli=8)


def randn(rng, shape, dtype="float64"):
    """Entries spread over 2^-12..2^12 (float16: 2^-3..2^3), so that products and sums round
    visibly."""
    e = 3 if dtype == "float16" else 12
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(-e, e + 1, shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape) * 2.0 ** rng.integers(-e, e + 1, shape)
    return x.astype(dtype)


def bits(x):
    """The bytes of an array: equality of these is bit-identity (NaN and -0.0 included)."""
    x = np.ascontiguousarray(x)
    return x.dtype, x.shape, x.tobytes()


def absolute(subscripts, *ops):
    """The contraction of |operands| in float64: the scale errors are measured against."""
    return np.einsum(subscripts, *(np.abs(x).astype(np.float64) for x in ops))


def exact_einsum(subscripts, *ops):
    """Explicit subscripts (letters only) summed in Fractions, each entry rounded once to
    float64 (complex: each part). Independent of numpy's einsum and of emulinalg."""
    lhs, out = subscripts.split("->")
    terms = lhs.split(",")
    size = {}
    for term, x in zip(terms, ops):
        size.update(zip(term, x.shape))
    labels = sorted(size)
    shape = tuple(size[c] for c in out)
    sums = {}
    for values in itertools.product(*(range(size[c]) for c in labels)):
        at = dict(zip(labels, values))
        re, im = Fraction(1), Fraction(0)
        for term, x in zip(terms, ops):
            v = complex(x[tuple(at[c] for c in term)])
            vr, vi = Fraction(v.real), Fraction(v.imag)
            re, im = re * vr - im * vi, re * vi + im * vr
        key = tuple(at[c] for c in out)
        r0, i0 = sums.get(key, (0, 0))
        sums[key] = (r0 + re, i0 + im)
    cplx = any(np.asarray(x).dtype.kind == "c" for x in ops)
    vals = [complex(float(r), float(i)) if cplx else float(r) for r, i in map(sums.get,
            np.ndindex(shape))]  # fmt: skip
    return np.array(vals, dtype=np.complex128 if cplx else np.float64).reshape(shape)


@pytest.fixture
def xp():
    return emulinalg.namespace(np.ones(1))


# ----------------------------------------------------------------------------------------------
# the namespace offers them (numpy's own functions before)
# ----------------------------------------------------------------------------------------------


def test_namespaces_route_einsum_and_dot_through_the_engine(rng, eager):
    a, b = randn(rng, (4, 5)), randn(rng, (5, 3))
    import emulinalg.numpy as np_ns

    for ns in (emulinalg.namespace(a), np_ns):
        assert ns.einsum is not np.einsum and ns.dot is not np.dot
        emulinalg.matmul(a, b, precision="native")  # a plan that is not einsum's
        ns.einsum("ij,jk->ik", a, b)
        plan = emulinalg.last_plan()
        assert plan.emulated and plan.notes[0] == "einsum: product 1 of 1", plan
        ns.dot(a, b)
        plan = emulinalg.last_plan()
        assert plan.emulated and plan.notes[0] == "dot", plan
    # the namespace's default precision reaches them; a call's own overrides it
    ns = emulinalg.namespace(a, precision=MOD8)
    for fn in (lambda **kw: ns.einsum("ij,jk", a, b, **kw), lambda **kw: ns.dot(a, b, **kw)):
        fn()
        assert emulinalg.last_plan().scheme.startswith("OzakiII(moduli=8,")
        fn(precision="native")
        assert not emulinalg.last_plan().emulated


def test_namespace_without_dot_or_einsum_does_not_invent_them():
    xs = pytest.importorskip("array_api_strict")
    ns = emulinalg.namespace(xs.asarray([1.0]))
    assert not hasattr(xs, "einsum") and not hasattr(ns, "einsum")
    assert not hasattr(ns, "dot")


# ----------------------------------------------------------------------------------------------
# einsum: numpy's semantics, and the bits of the explicit matmul
# ----------------------------------------------------------------------------------------------

# (subscripts, operand shapes, the explicit emulinalg.matmul formulation the docstring describes)
# fmt: off
CASES = [
    ("ij,jk->ik", [(4, 5), (5, 3)], lambda a, b: matmul(a, b)),
    ("ij,jk", [(4, 5), (5, 3)], lambda a, b: matmul(a, b)),
    ("ij,jk->ki", [(4, 5), (5, 3)], lambda a, b: matmul(a, b).T),
    ("ji,jk->ik", [(5, 4), (5, 3)], lambda a, b: matmul(a.T, b)),
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)], lambda a, b: matmul(a, b)),
    ("...ij,...jk->...ik", [(2, 1, 4, 5), (3, 5, 2)], lambda a, b: matmul(a, b)),
    ("...ij,...jk", [(2, 4, 5), (5, 2)], lambda a, b: matmul(a, b)),
    ("ijk,jkl->il", [(2, 3, 4), (3, 4, 5)],
     lambda a, b: matmul(a.reshape(2, 12), b.reshape(12, 5))),
    ("i,j->ij", [(4,), (3,)], lambda a, b: matmul(a[:, None], b[None, :])),
    ("i,i->", [(6,), (6,)], lambda a, b: matmul(a[None, :], b[:, None])[0, 0]),
    ("i,i", [(6,), (6,)], lambda a, b: matmul(a[None, :], b[:, None])[0, 0]),
    ("bi,bi->b", [(3, 6), (3, 6)], lambda a, b: matmul(a[:, None, :], b[:, :, None])[:, 0, 0]),
    ("ij,j->i", [(4, 5), (5,)], lambda a, b: matmul(a, b[:, None])[:, 0]),
    # a label of one operand only, summed natively first; a diagonal taken natively first
    ("ij,jk->k", [(4, 5), (5, 3)], lambda a, b: matmul(np.einsum("ij->j", a)[None, :], b)[0]),
    ("iij,jk->ik", [(3, 3, 4), (4, 2)], lambda a, b: matmul(np.einsum("iij->ij", a), b)),
    # size-1 broadcasting of a summed and of a batch label, as numpy's einsum does
    ("ij,jk->ik", [(4, 1), (5, 3)], lambda a, b: matmul(np.broadcast_to(a, (4, 5)), b)),
    ("bij,bjk->bik", [(1, 4, 5), (3, 5, 2)], lambda a, b: matmul(a, b)),
    # three operands: numpy.einsum_path's greedy order, here (b c) first
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], lambda a, b, c: matmul(a, matmul(b, c))),
    ("ij,jk,kl", [(2, 3), (3, 4), (4, 5)], lambda a, b, c: matmul(a, matmul(b, c))),
    # 0-D operand: a product with k = 1
    ("...,...", [(), (3, 2)], lambda a, b: matmul(a.reshape(1, 1), b.reshape(1, 6)).reshape(3, 2)),
]
# fmt: on


@pytest.mark.parametrize("subscripts,shapes,explicit", CASES, ids=[c[0] for c in CASES])
def test_einsum_matches_numpy_and_the_explicit_matmul(subscripts, shapes, explicit, rng, xp,
                                                     eager):  # fmt: skip
    ops = [randn(rng, s) for s in shapes]
    got, plans = xp.einsum(subscripts, *ops, explain=True)
    assert len(plans) == len(ops) - 1 and plans[-1] is emulinalg.last_plan()
    for i, plan in enumerate(plans, 1):
        assert plan.emulated and plan.notes[0] == f"einsum: product {i} of {len(plans)}"
    want = np.einsum(subscripts, *ops)
    assert plain_numpy(got) and got.shape == np.shape(want) and got.dtype == want.dtype
    assert_close_to(got, want, absolute(subscripts, *ops), RTOL["float64"])
    assert bits(got) == bits(explicit(*ops))


@pytest.mark.parametrize("dtype", ["float32", "complex64", "complex128", "float16"])
@pytest.mark.parametrize("subscripts,shapes,explicit", [CASES[0], CASES[4], CASES[7]],
                         ids=["ij,jk->ik", "bij,bjk->bik", "ijk,jkl->il"])  # fmt: skip
def test_einsum_dtypes(dtype, subscripts, shapes, explicit, rng, xp, eager):
    ops = [randn(rng, s, dtype) for s in shapes]
    got, (plan,) = xp.einsum(subscripts, *ops, explain=True)
    want = np.einsum(subscripts, *ops)
    assert got.dtype == want.dtype == np.dtype(dtype)
    assert_close_to(got, want, absolute(subscripts, *ops), RTOL[dtype])
    assert bits(got) == bits(explicit(*ops))
    assert plan.emulated
    assert plan.precision == ("float64" if dtype == "complex128" else "float32")


def test_einsum_mixed_dtypes_promote_as_matmul(rng, xp, eager):
    a = randn(rng, (4, 5), "float32")
    b = randn(rng, (5, 3))
    i = rng.integers(-5, 5, (3, 2))
    got = xp.einsum("ij,jk,kl->il", a, b, i, optimize=False)
    assert got.dtype == np.einsum("ij,jk,kl->il", a, b, i).dtype == np.float64
    assert bits(got) == bits(matmul(matmul(a, b), i))
    got = xp.einsum("ij,jk", a.astype(np.complex64), b)
    assert bits(got) == bits(matmul(a.astype(np.complex64), b)) and got.dtype == np.complex128


@pytest.mark.parametrize("dtype", ["int64", "int8", "bool"])
def test_einsum_integer_and_bool_operands_run_natively(dtype, rng, xp, eager):
    a = rng.integers(-100, 100, (4, 5)).astype(dtype)
    b = rng.integers(-100, 100, (5, 3)).astype(dtype)
    c = rng.integers(-100, 100, (3, 2)).astype(dtype)
    got, plans = xp.einsum("ij,jk,kl->il", a, b, c, explain=True)
    want = np.einsum("ij,jk,kl->il", a, b, c)
    assert got.dtype == want.dtype and np.array_equal(got, want)  # wrap-around included
    assert plans == [emulinalg.last_plan()] and not plans[0].emulated
    assert plans[0].notes == ["einsum", "integer/bool inputs: exact natively"]


@pytest.mark.parametrize("subscripts,shape", [("ii->i", (4, 4)), ("ii", (4, 4)),
                         ("ij->ji", (3, 4)), ("ijk->j", (2, 3, 4)), ("aB", (2, 3))])  # fmt: skip
def test_einsum_of_one_operand_is_numpys(subscripts, shape, rng, xp, eager):
    a = randn(rng, shape)
    got, plans = xp.einsum(subscripts, a, explain=True)
    assert bits(got) == bits(np.einsum(subscripts, a))
    assert plans[0].notes == ["einsum", "one operand: no product"] and not plans[0].emulated


def test_einsum_three_operands_order(rng, xp, eager):
    """optimize=False: left to right; default and "greedy"/True: numpy.einsum_path's order;
    a given path as is (the lower-numbered operand of each pair first)."""
    a, b, c = randn(rng, (2, 3)), randn(rng, (3, 4)), randn(rng, (4, 5))
    s = "ij,jk,kl->il"
    assert np.einsum_path(s, a, b, c, optimize="greedy")[0] == ["einsum_path", (1, 2), (0, 1)]
    greedy = bits(matmul(a, matmul(b, c)))
    for opt in ("greedy", True, ["einsum_path", (1, 2), (0, 1)]):
        assert bits(xp.einsum(s, a, b, c, optimize=opt)) == greedy
    assert bits(xp.einsum(s, a, b, c, optimize=False)) == bits(matmul(matmul(a, b), c))
    assert bits(xp.einsum(s, a, b, c, optimize="optimal")) == bits(
        xp.einsum(s, a, b, c, optimize=np.einsum_path(s, a, b, c, optimize="optimal")[0])
    )
    # (a c) first: an outer product (no shared label), then b (position 0) times it
    ac = matmul(a.reshape(6, 1), c.reshape(1, 20)).reshape(2, 3, 4, 5)  # labels i j k l
    bac = matmul(b.reshape(1, 12), ac.transpose(1, 2, 0, 3).reshape(12, 10)).reshape(2, 5)
    got, plans = xp.einsum(s, a, b, c, optimize=["einsum_path", (0, 2), (0, 1)], explain=True)
    assert bits(got) == bits(bac)
    assert [p.notes[0] for p in plans] == ["einsum: product 1 of 2", "einsum: product 2 of 2"]


def test_einsum_explicit_scheme_differs_from_native(rng, xp, eager):
    a, b = randn(rng, (8, 40)), randn(rng, (40, 6))
    got, plans = xp.einsum("ij,jk->ik", a, b, precision=MOD8, explain=True)
    assert plans[0].scheme.startswith("OzakiII(moduli=8,") and plans[0].gemms > 0
    assert bits(got) == bits(matmul(a, b, precision=MOD8))
    assert bits(got) != bits(np.einsum("ij,jk->ik", a, b))  # 8 moduli: far below float64
    with emulinalg.config(strategy="performant"):  # an explicit scheme runs whatever the cost
        xp.einsum("ij,jk->ik", a, b, precision=MOD8)
        assert emulinalg.last_plan().scheme.startswith("OzakiII(moduli=8,")


# ----------------------------------------------------------------------------------------------
# exact references (Fractions)
# ----------------------------------------------------------------------------------------------

EXACT = [
    ("ij,jk->ik", [(3, 7), (7, 2)]),
    ("bij,bjk->bik", [(2, 3, 5), (2, 5, 2)]),
    ("ijk,jkl->il", [(2, 3, 4), (3, 4, 2)]),
    ("i,i->", [(9,), (9,)]),
    ("i,j->ij", [(3,), (4,)]),
]


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
@pytest.mark.parametrize("subscripts,shapes", EXACT, ids=[c[0] for c in EXACT])
def test_einsum_within_the_level_of_the_exact_sum(subscripts, shapes, dtype, rng, xp, eager):
    """The float64 (float32) level: |err| <= w u |A||B| + u |c| with w < 1 (real), and the
    componentwise bound of both real products for complex; here checked with room: 2u(|A||B|
    + |c|) (u = 2^-53, 2^-24)."""
    ops = [randn(rng, s, dtype) for s in shapes]
    got = xp.einsum(subscripts, *ops)
    assert emulinalg.last_plan().notes[0] == "einsum: product 1 of 1"
    exact = exact_einsum(subscripts, *ops)
    u = 2.0**-24 if dtype == "float32" else 2.0**-53
    bound = absolute(subscripts, *ops) + np.abs(exact)
    assert np.all(np.abs(got.astype(exact.dtype) - exact) <= 2 * u * bound)
    if subscripts == "i,j->ij" and dtype != "complex128":  # k = 1: each entry rounded once
        assert bits(got) == bits(exact.astype(dtype))


def test_einsum_three_operands_against_the_exact_sum(rng, xp, eager):
    """Two rounded products: |err| <= (2 + 2) u |A||B||C| with room to spare."""
    ops = [randn(rng, s) for s in [(3, 4), (4, 3), (3, 2)]]
    got = xp.einsum("ij,jk,kl->il", *ops)
    assert emulinalg.last_plan().notes[0] == "einsum: product 2 of 2"
    exact = exact_einsum("ij,jk,kl->il", *ops)
    assert np.all(np.abs(got - exact) <= 4 * 2.0**-53 * absolute("ij,jk,kl->il", *ops))


# ----------------------------------------------------------------------------------------------
# einsum errors: numpy rejects the same subscripts, with the einsum's own message
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "subscripts,shapes,match",
    [
        ("ij,jk->iz", [(2, 3), (3, 4)], "output subscript 'z' appears in no operand"),
        ("ij,jk->ii", [(2, 3), (3, 4)], "output subscript 'i' repeated"),
        ("i1,jk", [(2, 3), (3, 4)], "invalid subscript '1' in operand 0"),
        ("ij,jk->->ik", [(2, 3), (3, 4)], "invalid subscript '-' in the output"),
        ("i.j,jk", [(2, 3), (3, 4)], "operand 0 has a '.' that is not part of one '...'"),
        ("ijk,jk", [(2, 3), (3, 4)], "name 3 dimensions, the operand has 2"),
        ("ij,jk,kl", [(2, 3), (3, 4)], "name 3 operand.s., 2 given"),
        ("ij,jk", [(2, 3), (4, 4)], "'j' has size 3 in operand 0 and 4 in operand 1"),
        ("ii->i", [(3, 4)], "'i' repeats in operand 0 with sizes 3 and 4"),
        ("...ij,...jk->ik", [(2, 2, 3), (2, 3, 4)], "need a '...' in the output"),
        ("...i,...i", [(2, 3), (4, 3)], "'...' dimension -1 has size 2 in operand 0 and 4"),
    ],
)
def test_einsum_bad_subscripts_and_sizes(subscripts, shapes, match, xp, eager):
    ops = [np.ones(s) for s in shapes]
    with pytest.raises(ValueError):
        np.einsum(subscripts, *ops)
    emulinalg.matmul(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="einsum: .*" + match):
        xp.einsum(subscripts, *ops)
    assert emulinalg.last_plan() is None


def test_einsum_bad_calls(xp):
    a = np.ones((2, 2))
    with pytest.raises(TypeError, match="subscripts must be a string"):
        xp.einsum(a, [0, 1], a, [1, 2])  # numpy's interleaved form
    with pytest.raises(ValueError, match="no operands"):
        xp.einsum("ij")
    with pytest.raises(ValueError, match="optimize must be"):
        xp.einsum("ij,jk", a, a, optimize="dp")
    with pytest.raises(ValueError, match="bad contraction path"):
        xp.einsum("ij,jk,kl", a, a, a, optimize=["einsum_path", (0, 5), (0, 1)])
    with pytest.raises(ValueError, match="bad contraction path step"):
        xp.einsum("ij,jk,kl", a, a, a, optimize=["einsum_path", (1, 1), (0, 1)])
    with pytest.raises(ValueError, match="leaves 2 operands"):
        xp.einsum("ij,jk,kl", a, a, a, optimize=["einsum_path", (0, 1)])
    with pytest.raises(TypeError, match="einsum: operands must be arrays"):
        xp.einsum("ij,jk", a, [[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ValueError, match="precision"):
        xp.einsum("ij,jk", a, a, precision="float99")


# ----------------------------------------------------------------------------------------------
# dot
# ----------------------------------------------------------------------------------------------

DOT = [
    ((6,), (6,)),  # inner product
    ((4, 6), (6, 3)),  # matrix product
    ((2, 3, 6), (6,)),  # N-D . 1-D: over the last axis
    ((2, 3, 6), (5, 6, 4)),  # N-D . M-D: a's last with b's second-to-last, no broadcasting
    ((6,), (2, 6, 3)),
    ((1, 6), (2, 6, 3)),
]


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
@pytest.mark.parametrize("sa,sb", DOT, ids=[f"{a}.{b}" for a, b in DOT])
def test_dot_matches_numpy_and_tensordot(sa, sb, dtype, rng, xp, eager):
    a, b = randn(rng, sa, dtype), randn(rng, sb, dtype)
    got, plan = xp.dot(a, b, explain=True)
    assert plan is emulinalg.last_plan() and plan.emulated and plan.notes[0] == "dot"
    want = np.dot(a, b)
    assert plain_numpy(got) and got.shape == want.shape and got.dtype == want.dtype
    bound = np.dot(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    assert_close_to(got, want, bound, RTOL[dtype])
    axes = ([a.ndim - 1], [max(b.ndim - 2, 0)])
    assert bits(got) == bits(emulinalg.tensordot(a, b, axes=axes))
    if a.ndim <= 2 and b.ndim <= 2:
        assert bits(got) == bits(matmul(a, b))
    if dtype == "float64" and a.ndim == b.ndim == 1:  # complex: no conjugation, as numpy
        exact = exact_einsum("i,i->", a, b)
        assert abs(got - exact) <= 2 * 2.0**-53 * (bound + abs(exact))


@pytest.mark.parametrize("sa,sb", [((), (3, 2)), ((3, 2), ()), ((), ())])
def test_dot_of_a_0d_operand_is_a_native_multiple(sa, sb, rng, xp, eager):
    a, b = np.asarray(randn(rng, sa)), np.asarray(randn(rng, sb, "float32"))
    got, plan = xp.dot(a, b, explain=True)
    want = np.dot(a, b)
    assert bits(got) == bits(want)
    assert not plan.emulated and plan.notes == ["dot", "0-D operand: a scalar multiple"]


def test_dot_integers_natively_and_errors(rng, xp, eager):
    a, b = rng.integers(-9, 9, (2, 3, 4)), rng.integers(-9, 9, (5, 4, 2))
    got = xp.dot(a, b)
    assert got.dtype == np.dot(a, b).dtype and np.array_equal(got, np.dot(a, b))
    assert "integer/bool inputs" in emulinalg.last_plan().notes[1]
    got = xp.dot(a.astype(np.float32), b)  # promoted to float64 as numpy does, then emulated
    assert got.dtype == np.float64 and emulinalg.last_plan().emulated
    for x, y in [((4, 5), (4, 5)), ((3,), (4,)), ((2, 4), (1, 2))]:  # no size-1 broadcasting
        with pytest.raises(ValueError):
            np.dot(np.ones(x), np.ones(y))
        with pytest.raises(ValueError, match=r"dot: shapes .* not aligned"):
            xp.dot(np.ones(x), np.ones(y))
        assert emulinalg.last_plan() is None


# ----------------------------------------------------------------------------------------------
# dask: the same functions on lazy arrays
# ----------------------------------------------------------------------------------------------


def test_dask_einsum_and_dot(rng, eager):
    da = pytest.importorskip("dask.array")
    a, b, c = randn(rng, (6, 5)), randn(rng, (5, 4)), randn(rng, (4, 3))
    da_a, da_b = da.from_array(a, chunks=3), da.from_array(b, chunks=3)
    import emulinalg.dask as dxp

    got = dxp.einsum("ij,jk,kl->il", da_a, da_b, c)  # a numpy operand beside dask ones
    assert isinstance(got, da.Array) and "einsum: product 2 of 2" in emulinalg.last_plan().notes
    assert_close_to(got.compute(), a @ b @ c, absolute("ij,jk,kl->il", a, b, c), 1e-12)
    got = emulinalg.namespace(da_a).dot(da_a, da_b)
    assert isinstance(got, da.Array)
    assert_close_to(got.compute(), a @ b, absolute("ij,jk", a, b), 1e-12)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="typing.get_overloads is 3.11+")
def test_typed_for_both_explain_forms():
    from emulinalg import _einsum

    for fn, plans in ((_einsum.einsum, "list[Plan]"), (_einsum.dot, "Plan")):
        forms = typing.get_overloads(fn)
        returns = {f.__annotations__["explain"]: f.__annotations__["return"] for f in forms}
        assert returns == {"Literal[False]": "Array", "Literal[True]": f"tuple[Array, {plans}]"}
