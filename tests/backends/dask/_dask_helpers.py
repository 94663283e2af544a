"""Shared by the dask tests (``tests/backends/dask/``): the dask layer's task modules, the
numpy chunks' backend, products with ``strategy="eager"``, the in-core engine's decisions and
bits on the whole matrices that the graphs are checked against, the graph's count task, the
patch's inputs, and a task counter."""

from __future__ import annotations

import contextlib
import functools

import numpy as np
import pytest
from _helpers import RTOL, assert_close_to, assert_same_nonfinite_pattern, parts_lower_of

import emulinalg
import emulinalg.backends
from emulinalg import _planner
from emulinalg._precision import level_for_dtype, parse
from emulinalg.algorithm import certificate, operands, refinement
from emulinalg.algorithm.scaling import ozaki2_prescale
from emulinalg.backends import numpy as numpy_backend
from emulinalg.backends.dask import certificate as dask_certificate
from emulinalg.backends.dask import crt as dask_crt
from emulinalg.backends.dask import refinement as dask_refinement
from emulinalg.backends.dask import refit as dask_refit
from emulinalg.backends.dask import statistics as dask_statistics
from emulinalg.inputs import phi_matrix

da = pytest.importorskip("dask.array", reason="dask[array] is not installed")
distributed = pytest.importorskip("distributed", reason="distributed is not installed")
import dask  # noqa: E402

# The modules of the dask layer's tasks: a task is patched where it is defined, since the graph
# code looks it up there (``dask_backend._shared_graph`` in the package itself).
_TASK_MODULES = (dask_statistics, dask_certificate, dask_refinement, dask_crt, dask_refit)


def _task_module(name):
    (mod,) = (m for m in _TASK_MODULES if getattr(getattr(m, name, None), "__module__", None)
              == m.__name__)  # fmt: skip
    return mod


CHUNKS = emulinalg.backends.for_namespace(np).name  # numpy chunks' backend: numpy, amx on AMX


@contextlib.contextmanager
def _numpy_in_core():
    """numpy products inside the block on the numpy backend (``EMULINALG_AMX=0``): the graph's
    decisions are the generic code's (its own tasks), which that backend runs in core; on AMX
    CPUs the amx backend's certificate is another valid bound (its own magnitude GEMM), whose
    entries beyond every count may differ from the generic ones. The dask graphs run complex
    products with 3M (they do not declare ``gaussian_moduli``): so does the in-core product."""
    from emulinalg.backends import numpy as npb

    with pytest.MonkeyPatch.context() as mp:  # the numpy_backend fixture's setting
        mp.setenv("EMULINALG_AMX", "0")
        mp.setattr(npb, "gaussian_moduli", False)
        yield


def _eager(fn, *args, **kw):
    with emulinalg.config(strategy="eager"):
        return fn(*args, **kw)


def _level(A, precision=None):
    """The level of ``precision`` (None: the dtype's) for operands like ``A``."""
    if precision is None:
        return level_for_dtype("float32" if A.dtype in (np.float32, np.complex64) else "float64")
    return parse(precision)


def _target(A, precision=None, complex_=False):
    """The in-core engine's ``Target`` for numpy operands like ``A`` (its rho from the numpy
    chunks' backend and the whole k; ``complex_``: a complex product on the complex route)."""
    return _planner.target_for(
        _level(A, precision), A.shape[-1], emulinalg.backends.for_namespace(np),
        complex_=complex_,
    )  # fmt: skip


def _engine_certificate(A, B, precision=None):
    """``(count, beyond, patch)`` of the in-core engine's certificate on the whole matrices."""
    ar, ai = operands.parts(np, A)
    br, bi = operands.parts(np, B)
    ar, ai = operands.zero_nonfinite(np, ar, ai)
    br, bi = operands.zero_nonfinite(np, br, bi)
    pre = ozaki2_prescale(np, numpy_backend.int_matmul, ar, ai, br, bi, "accurate")
    if _planner.part_checked(_level(A, precision), ai is not None):  # the part check's bound
        pre.parts_lower = parts_lower_of(ar, ai, br, bi)
    target = _target(A, precision, ai is not None)
    return certificate.ozaki2_moduli_needed(np, numpy_backend, ar, ai, br, bi, pre, target)


def _split_certificate(A, B, precision=None, fold=True):
    """``(count, beyond, patch)`` of the in-core engine's split route (``_engine._split``): the
    certificate of the real product of the stacked parts, its beyond mask folded onto the
    complex product's entries (an entry is native where any of its four products is; ``fold``
    False: the stacked product's own)."""
    ar, ai = operands.zero_nonfinite(np, *operands.parts(np, A))
    br, bi = operands.zero_nonfinite(np, *operands.parts(np, B))
    A2, B2 = np.concatenate([ar, ai], axis=-2), np.concatenate([br, bi], axis=-1)
    pre = ozaki2_prescale(np, numpy_backend.int_matmul, A2, None, B2, None, "accurate")
    target = _target(A, precision)
    count, beyond, patch = certificate.ozaki2_moduli_needed(
        np, numpy_backend, A2, None, B2, None, pre, target
    )
    if beyond is not None and fold:
        m, n = A.shape[-2], B.shape[-1]
        beyond = (
            beyond[..., :m, :n] | beyond[..., :m, n:] | beyond[..., m:, :n] | beyond[..., m:, n:]
        )
    return count, beyond, patch


def _split(plan):
    return any(note.startswith("complex parts: split") for note in plan.notes)


def _f_only_beyond(A, B, precision=None):
    """The engine's first pass: the entries the bound GEMM's lower bound alone leaves beyond
    every count (``certificate.bound_lower``), on the whole matrices."""
    ar, ai = operands.parts(np, A)
    br, bi = operands.parts(np, B)
    pre = ozaki2_prescale(np, numpy_backend.int_matmul, ar, ai, br, bi, "accurate")
    k, cplx = ar.shape[-1], ai is not None
    cc = certificate.cert_constants(k, _target(A, precision, cplx), cplx)
    _, na, nb = certificate.normalized(np, ar, ai, br, bi, cc.norm)
    lam = certificate.bound_lower(np, pre.lower, cplx)
    if _planner.part_checked(_level(A, precision), cplx):  # and the part check's bound
        lam = np.maximum(lam, certificate.sums_lower(np, parts_lower_of(ar, ai, br, bi), k))
    R = cc.cR * lam
    return certificate.ozaki2_needed(np, cc, R, na, nb, pre[2], pre[3]) == certificate.BEYOND


def _bits_equal(x, y):
    """Entrywise: the same bits (NaNs included)."""
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    size = x.dtype.itemsize
    return np.all(x.view(np.uint8).reshape(x.shape + (size,)) == y.view(np.uint8).reshape(
        y.shape + (size,)), axis=-1)  # fmt: skip


def _assert_in_core_bits(out, A, B, precision=None, native=None):
    """``out`` has the bits of ``emulinalg.matmul(A, B)`` in core (same scheme, same count; on
    the numpy backend, ``_numpy_in_core``), except where the engine takes the native product
    (beyond its certificate, ``native``): those entries come from dask's blocked native product,
    close to the whole one. Returns the engine's plan."""
    with _numpy_in_core(), emulinalg.config(strategy="eager"):
        want = emulinalg.matmul(A, B, precision=precision)
    plan = emulinalg.last_plan()
    native = np.zeros(want.shape, bool) if native is None else native.copy()
    if precision is None or isinstance(precision, (int, str)):
        bits = _level(A, precision).bits
        certify = _split_certificate if _split(plan) else _engine_certificate
        count, beyond, _ = certify(A, B, precision)
        if count is not None and (bits <= 53 or not beyond.any()):
            assert plan.scheme == f"OzakiII(moduli={count}, mode=accurate)"
            native |= beyond
    same = _bits_equal(out, want)
    assert same[~native].all(), f"{(~same & ~native).sum()} emulated entries differ"
    if native.any():
        with np.errstate(over="ignore", invalid="ignore"):
            nat, bound = np.matmul(A, B), np.abs(A) @ np.abs(B)
        assert_same_nonfinite_pattern(out[native], nat[native])
        with np.errstate(invalid="ignore"):
            assert_close_to(out[native], nat[native], bound[native], RTOL[A.dtype.name])
    return plan


def _count_task_result(c, name=None):
    """The graph's decision on the count (the last of the refinement's steps' tasks, the exact
    step's and the count task's that the graph has, or ``name``'s), computed on its own
    (synchronously)."""
    from dask.optimization import cull

    dsk = dict(c.__dask_graph__())
    names = {_key_name(k) for k in dsk}
    steps = [f"emulinalg-refine-{t}" for t in range(refinement.REFINE_STEPS, 0, -1)]
    last = [x for x in (*steps, "emulinalg-exact", "emulinalg-count") if x in names]
    name = name or last[0]
    (key,) = [k for k in dsk if _key_name(k) == name]
    return dask.get(cull(dsk, [key])[0], key)


def _key_name(key):
    name = key[0] if isinstance(key, tuple) else key
    return str(name).rsplit("-", 1)[0]


# Products whose certificate patches in core: dtype, phi, precision, seed, k, chunks (m, k, n)
_PATCH = {
    "float32": ("float32", 4.0, None, 10, 64, (24, 20, 24)),  # the native form, with the refit
    "complex64": ("complex64", 4.0, None, 9, 64, (24, 20, 24)),
    "native-entries": ("float64", 4.0, None, 2, 64, (24, 20, 24)),  # and one entry beyond
    "strict": ("float32", 4.0, 20, 2, 100, (24, 40, 24)),  # bits: the patch alone
    "strict-complex": ("complex128", 4.0, 24, 0, 64, (16, 30, 40)),
}


def _patch_inputs(case):
    dtype, phi, precision, seed, k, chunks = _PATCH[case]
    A = phi_matrix((64, k), phi, dtype, seed=seed)
    B = phi_matrix((k, 64), phi, dtype, seed=seed + 50)
    return A, B, precision, chunks


def _counting_ran(name, key, label, calls):
    """The dask layer's task ``name`` counted by whether its result's ``key`` was computed: the
    magnitude lower bound's GEMM (``_lower_block``) or the refinement's sums (``_refine_sums``)."""
    orig = getattr(_task_module(name), name)

    @functools.wraps(orig)
    def counted(*args, **kwargs):
        res = orig(*args, **kwargs)
        calls[f"{label} ran" if res[key] is not None else f"{label} skipped"] += 1
        return res

    return counted
