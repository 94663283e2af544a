"""dask backend: lazy graphs of emulated products on the chunks' own backend.

``emulinalg.matmul`` (and ``tensordot``/``vecdot``, which the front end reduces to one batched
matmul) on dask arrays builds a dask graph and computes nothing. The contraction chunks of the
two operands are aligned first (the operand with more K-blocks is rechunked to the other's K
chunks; batch chunks follow the first operand). Two graphs exist:

Shared preprocessing (Scheme II: the default family's levels and explicit ``OzakiII``):
``shared`` builds the graph of the in-core product of the whole matrices, every chunk
preprocessed once; its tasks live by stage in ``statistics`` (line statistics, prescale, bound
GEMM, shifts), ``certificate`` (the count of moduli and the exact step), ``refinement`` (the
suspects' steps and the patch), ``crt`` (residues per chunk, modular block products, CRT per
output block, the native patch) and ``refit``. Each stage calls the reference step of
``emulinalg.algorithm`` on blocks; the decisions are the planner's (``emulinalg._planner``).

Double-double graph (Scheme I, or ``EMULINALG_DASK_MODE=dd``): ``dd``, the engine's product per
block triple, added over K-blocks in double-double and rounded once. ``blocks`` holds what both
graphs share (alignment of the contraction chunks, the chunks' backend, object chunks).

Plans
-----
``emulinalg.last_plan()`` after the call describes the graph without computing anything:
backend ``"dask"``, scheme ``"blocked: ..."`` with the chunk backend and the scheme or level,
and notes with the chunking, the number of K-blocks and of tasks per stage, and
``split_every``. Data-dependent decisions (the count of moduli, native entries) are made on the
workers and stay there.
"""

from __future__ import annotations

import dataclasses
import math
import types

import numpy as np

from emulinalg import _planner, get_config
from emulinalg._plan import Plan
from emulinalg._planner import family, gemm_count, likely_faster, performant
from emulinalg._precision import NATIVE, REAL_DTYPE, SCHEMES, OzakiII, level_for_dtype
from emulinalg.algorithm import operands
from emulinalg.algorithm import parts as complex_parts
from emulinalg.algorithm.certificate import magnitude_lower, signed_estimate
from emulinalg.algorithm.xputil import dd_to_float32, make_complex

from .blocks import _chunk_backend, _dtype_name, task
from .dd import _ACC, _graph
from .shared import _shared_graph

name = "dask"

MODE_ENV = "EMULINALG_DASK_MODE"  # "shared" (default; "dd" for cupy chunks) or "dd"


# --------------------------------------------------------------------------------------------
# The backend surface shared with the other backends
# --------------------------------------------------------------------------------------------


def native_matmul(a, b):
    """dask's own blocked product (lazy): block products in the chunks' library, plain sums."""
    return _graph(a, b, None, None, native=True)[0]


def quiet():
    """Nothing is computed while a graph is built; the block tasks silence their own warnings."""
    return np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore")


def coerce_operands(x1, x2):
    """A numpy/cupy operand beside a dask array becomes a dask array (one chunk per axis), as
    ``dask.array.matmul`` accepts it; anything else is returned unchanged."""
    import sys

    da = sys.modules.get("dask.array")
    if da is None:
        return x1, x2
    d1, d2 = _is_dask(x1), _is_dask(x2)
    if d1 == d2:
        return x1, x2
    other = x2 if d1 else x1
    if not hasattr(other, "__array_namespace__") and not hasattr(other, "__array__"):
        return x1, x2  # the front end reports the non-array
    if type(other).__module__.startswith("numpy.ma"):
        return x1, x2  # the front end reports masked arrays
    wrapped = da.asarray(other)
    return (x1, wrapped) if d1 else (wrapped, x2)


def _is_dask(x):
    import array_api_compat

    return array_api_compat.is_dask_array(x)


# --------------------------------------------------------------------------------------------
# The graph
# --------------------------------------------------------------------------------------------


def _mode(chunk_backend=None):
    """The graph for Scheme II products: ``EMULINALG_DASK_MODE``; by default "shared", except
    for chunks whose backend asks for "dd" (``dask_mode``: cupy, whose generic residue/CRT
    steps in the shared graph would bypass its kernels and run several times slower). The AMX
    backend keeps the shared graph: its integer GEMMs run on the tiles there, and the results
    stay bit-identical to the in-core product."""
    default = getattr(chunk_backend, "dask_mode", "shared")
    mode = get_config().dask_mode or default
    if mode not in ("shared", "dd"):
        raise ValueError(f"{MODE_ENV}={mode!r}: expected 'shared' or 'dd'")
    return mode


def matmul(xp, backend, a, b, request, cfg):
    """``(c, plan)``: the lazy dask array of the batched product ``a @ b`` and the graph's plan.

    ``a`` (..., m, k) and ``b`` (..., k, n) are dask arrays of one floating dtype and the same
    batch shape (the front end validated and broadcast them).
    """
    dtype_name = _dtype_name(a.dtype)
    real_name = REAL_DTYPE[dtype_name]
    for x, which in ((a, "x1"), (b, "x2")):
        if any(isinstance(s, float) and math.isnan(s) for s in x.shape):
            raise ValueError(
                f"matmul: {which} has unknown chunk sizes (shape {x.shape}); call "
                "x.compute_chunk_sizes() first"
            )
    if type(a._meta) is not type(b._meta):
        raise TypeError(
            f"matmul: the operands' chunks come from different array libraries "
            f"({type(a._meta).__module__} and {type(b._meta).__module__}); move one first, "
            "e.g. x.map_blocks(cupy.asarray)"
        )
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = math.prod(a.shape[:-2])
    if request is None:
        request = level_for_dtype(real_name)
    plan = Plan(backend=name, precision=str(request), shape=(batch, m, n, k))
    chunk_backend = _chunk_backend(a)

    def native(reason):
        c, notes = _graph(a, b, None, None, native=True)
        plan.notes.extend(notes)
        if reason:
            plan.fallback = reason
        return c, plan

    if request == NATIVE:
        return native(None)
    if chunk_backend is None:
        return native(
            f"no backend: no emulation backend for {type(a._meta).__module__} chunks; "
            "dask's blocked native product"
        )
    if batch * m * n * k == 0:
        plan.notes.append("empty product")
        return native(None)
    explicit = isinstance(request, SCHEMES)
    mb, kb, nb = max(a.chunks[-2]), max(a.chunks[-1]), max(b.chunks[-1])
    bb = math.prod(max(c) for c in a.chunks[:-2]) if a.ndim > 2 else 1
    scheme_family = family(cfg.scheme)
    shared = (isinstance(request, OzakiII) or (not explicit and scheme_family == "ozaki2")) and (
        _mode(chunk_backend) == "shared"
    )
    if performant(cfg.strategy, request, real_name):
        ok, why = likely_faster(
            chunk_backend, chunk_backend.name, request, scheme_family, dtype_name, mb, nb, kb, bb,
            cert_k=k if shared else None,
        )  # fmt: skip
        if not ok:
            return native(f"{why}; the chunks' block products")
    if explicit:
        what = str(request)
        plan.gemms = gemm_count(request, complex_=dtype_name.startswith("complex"))
    elif shared:
        what = f"{request} level, Scheme II moduli chosen at compute time for the whole matrices"
    else:
        fam = "Scheme I" if scheme_family == "ozaki1" else "Scheme II"
        what = f"{request} level, {fam} configuration chosen per block at compute time"
    plan.scheme = f"blocked: [{chunk_backend.name}] {what}"
    t_lower = None
    if shared and _planner.part_checked(request, dtype_name.startswith("complex")):
        ops, bad, check = _part_route(a, b, request, real_name, chunk_backend)
        t_lower = check.lower
        if check.split:
            plan.scheme += "; complex parts split: one real product of the stacked parts"
            plan.notes.append(_planner.split_note(check))
            c, notes = _split_graph(a, b, request, dtype_name, ops, bad)
            plan.notes.extend(notes)
            return c, plan
    if shared:
        c, notes = _shared_graph(a, b, request, t_lower=t_lower)
        plan.notes.extend(notes)
        return c, plan
    # The graph decided to emulate: every block does (an edge block must not turn native).
    block_cfg = dataclasses.replace(cfg, strategy="eager")
    c, notes = _graph(a, b, request, block_cfg, native=False)
    plan.notes.extend(notes)
    plan.notes.append(
        "K-block partials added in double-double (TwoSum tree), rounded once"
        + (f"; blocks computed in {_ACC[dtype_name]}" if _ACC[dtype_name] != dtype_name else "")
    )
    plan.notes.append("preprocessing per block product (dd graph: no reuse across blocks)")
    return c, plan


# --------------------------------------------------------------------------------------------
# Complex products: the part check and the split route
# --------------------------------------------------------------------------------------------


def _part_route(a, b, request, real_name, chunk_backend):
    """``(parts, nonfinite, check)``: the operands' finite float64 parts (lazy; entries with a
    NaN/Inf part zeroed in both parts, as the engine's), whether any entry is not finite, and
    the part check (``algorithm.parts.part_check``) of the whole matrices: computed now, when
    the graph is built (one pass over the operands: one GEMM of the stacked magnitudes, and the
    exact zeros and squares only where the sums leave a part of some entry not fine), since the
    split route is another graph. The exact zeros are the engine's; the float32 sums differ
    from its in their last bits only (docs/dask.md)."""
    import array_api_compat
    import dask
    import dask.array as da

    dxp = array_api_compat.array_namespace(a)
    f64 = np.float64
    ar, ai = operands.zero_nonfinite(dxp, a.real.astype(f64), a.imag.astype(f64))
    br, bi = operands.zero_nonfinite(dxp, b.real.astype(f64), b.imag.astype(f64))
    k = a.shape[-1]
    outputs = math.prod(a.shape[:-1]) * b.shape[-1]
    form = _planner.part_form(request, "ozaki2", k, outputs, real_name, chunk_backend)
    pending = [da.isfinite(a).all() & da.isfinite(b).all()]  # computed with the first bounds
    finite = []

    def materialize(bounds):
        flat = [*bounds.lo, *bounds.hi, *bounds.zero, *(bounds.kappa or (None, None))]
        got = dask.compute(*flat, *pending)
        if pending:
            finite.append(bool(got[-1]))
            pending.clear()
        kappa = tuple(got[6:8]) if bounds.kappa is not None else None
        return np, complex_parts.PartBounds(tuple(got[0:2]), tuple(got[2:4]), tuple(got[4:6]),
                                            kappa)  # fmt: skip

    def lower(xa, xb):
        return magnitude_lower(dxp, _BLOCKED, xa, xb)

    def signed(xa, xb):
        return signed_estimate(dxp, _BLOCKED, xa, xb)

    check = complex_parts.part_check(
        dxp, lower, signed, _exact_matmul, ar, ai, br, bi, form, materialize=materialize
    )
    if pending:  # decided before any bounds were computed
        finite.append(bool(pending[0].compute()))
    return (ar, ai, br, bi), not finite[0], check


# The dask layer's GEMMs for the part check: dask's blocked products of the chunks.
_BLOCKED = types.SimpleNamespace(name="dask", native_matmul=lambda x, y: x @ y)


def _exact_matmul(x, y, term_bound):
    """dask's blocked product of integer-valued float64 operands: exact (sums below 2**53)."""
    return x @ y


def _split_graph(a, b, request, dtype_name, ops, nonfinite):
    """The split route (``_engine._split``) as a graph: the shared graph of the real product of
    the stacked parts [Ar; Ai] (..., 2m, k), [Br, Bi] (..., k, 2n) in double-double, with its
    refit of the entries whose combined parts cancel, combined per output block
    (``parts.combine``) and rounded once; entries in rows and columns with NaN/Inf from dask's
    blocked native product, as in core. Returns the array and the notes."""
    import dask.array as da

    ar, ai, br, bi = ops
    m, n = a.shape[-2], b.shape[-1]
    a2, b2 = da.concatenate([ar, ai], axis=-2), da.concatenate([br, bi], axis=-1)
    c2, notes = _shared_graph(a2, b2, request, split=(m, n))
    ni, nj = c2.numblocks[-2] // 2, c2.numblocks[-1] // 2

    def quad(r, c):
        return c2.blocks[(Ellipsis, slice(r * ni, (r + 1) * ni), slice(c * nj, (c + 1) * nj))]

    quads = [quad(r, c) for r, c in complex_parts.BLOCKS]
    meta = np.empty((0,) * c2.ndim, dtype=dtype_name)
    c = da.map_blocks(_combine_block, *quads, dtype=dtype_name, meta=meta, dtype_name=dtype_name)
    if nonfinite:
        rows = da.all(da.isfinite(a), axis=-1)
        cols = da.all(da.isfinite(b), axis=-2)
        bad = ~(da.expand_dims(rows, axis=-1) & da.expand_dims(cols, axis=-2))
        c = da.where(bad, native_matmul(a, b), c)
        notes.append("non-finite: entries in rows/columns with NaN/Inf from the native product")
    notes.append(
        "split: the stacked product's blocks combined per output block in double-double "
        "(Re = Ar Br - Ai Bi, Im = Ar Bi + Ai Br), rounded once"
    )
    return c, notes


@task
def _combine_block(rr, ii, ri, ir, dtype_name):
    """One output block of the split route from the stacked product's four blocks (hi + i lo):
    ``parts.combine``, rounded once to ``dtype_name`` as the engine rounds it."""
    import array_api_compat

    xp = array_api_compat.array_namespace(rr)
    with np.errstate(over="ignore", invalid="ignore"):
        pairs = [(xp.real(x), xp.imag(x)) for x in (rr, ii, ri, ir)]
        re, im = complex_parts.combine(xp, *pairs)
        dt = getattr(xp, dtype_name)
        if dtype_name == "complex64":
            return make_complex(xp, dd_to_float32(xp, *re), dd_to_float32(xp, *im), dt)
        return make_complex(xp, re[0], im[0], dt)
