"""dask backend: a lazy graph of emulated block products on the chunks' own backend.

``emulinalg.matmul`` (and ``tensordot``/``vecdot``, which the front end reduces to one batched
matmul) on dask arrays builds a dask graph and computes nothing:

1. The contraction chunks of the two operands are aligned (the operand with more K-blocks is
   rechunked to the other's K chunks; batch chunks follow the first operand).
2. ``dask.array.blockwise(..., concatenate=False)`` makes one task per block triple (i, k, j):
   ``A[i, k] @ B[k, j]`` computed by ``emulinalg._engine.matmul`` on the chunks' own backend
   (``backends.for_namespace`` of the chunk's array module: numpy -> CPU reference / AMX, cupy ->
   GPU), with an explicit ``meta`` so cupy chunks stay cupy. The engine returns the block result
   as a double-double pair ``(hi, lo)`` (``dd=True``): ``hi`` is the block's usual rounded
   result and ``lo`` the rounded remainder of the block's exact emulated value (0 for entries
   the engine computed natively). The pair travels as one array with a trailing axis of size 2.
3. ``dask.array.reduction(..., split_every=...)`` adds the K-block partials in a tree with an
   error-free double-double addition (TwoSum on the high and the low parts, renormalised);
   ``split_every`` comes from dask's config (``dask.config.set(split_every=...)``, default 4).
4. One ``map_blocks`` rounds ``hi + lo`` once to the result dtype.

float32/complex64 operands are cast to float64/complex128 inside each block task and the block
products run at the requested level (by default the float32 level: 24 bits relative to
``|A_k||B_k|``), so no partial is rounded to float32; the partials are added in double-double
like the others and the sum is rounded to float32 once at the end.

Accuracy across K-blocks
------------------------
Split the contraction index into the K-blocks ``K_1, ..., K_q``: ``C = sum_k A_k B_k`` with
``A_k = A[:, K_k]``, ``B_k = B[K_k, :]``, and, entry by entry, ``sum_k |A_k||B_k| = |A||B|``
exactly (the K-blocks partition the terms of every dot product). For a level of ``b`` bits the
engine certifies each emulated block entry: ``|C^_k - C_k| <= tau * 2^-b * (|A_k||B_k|)``, where
``C^_k`` is the block's exact emulated value, of which ``hi_k + lo_k`` is the double-double
rounding (``|hi_k + lo_k - C^_k| <= 2^-106 |C^_k|``). Entries the engine computes natively in a
block (non-finite inputs, entries no configuration certifies) carry the native error of that
block only, ``gamma_{|K_k|} |A_k||B_k|``, smaller than native's on the whole ``k``. The tree of
``q - 1`` double-double additions adds at most ``c * q * 2^-104 * sum_k |C^_k|`` and the final
rounding ``u |C|``. Altogether, per entry,

    |C^ - C| <= u |C| + (1 + u) * (tau * 2^-b * |A||B| + c * q * 2^-104 * |A||B|),

the engine's own bound on the whole matrices plus a term far below ``u |A||B|`` (for ``q`` far
below ``2^50``): the blocking loses nothing of what the emulation gains, unlike a plain float
sum of rounded partials, which would add ``q`` roundings of size ``u |C_k|``.

Non-finite values: where a partial sum of the high parts is not finite (an infinite or NaN
block entry, or an overflow), the double-double sum is replaced by the plain float sum of the
high parts, which is what the native product does with those terms.

Plans
-----
The scheme of each block is chosen on the worker when the block is computed (the chunk data
decide it); ``emulinalg.last_plan()`` after the call describes the graph: backend ``"dask"``,
scheme ``"blocked: ..."`` with the chunk backend and the scheme or level of each block, and
notes with the chunking, the number of K-blocks and ``split_every``. Nothing is computed to
make it.

Not yet
-------
Preprocessing reuse: each block product scales and slices/reduces its two chunks itself, so a
chunk of A is preprocessed once per column block of B (and a chunk of B once per row block of
A). Caching the scaled residues per chunk (with column/row scaling common to a K-block row) is
the next step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np

from emulinalg import _engine
from emulinalg._plan import Plan
from emulinalg._precision import NATIVE, OzakiI, OzakiII, level_for_dtype

name = "dask"

_NATIVE_BITS = {"float64": 53, "float32": 24}
_REAL = {
    "float64": "float64",
    "float32": "float32",
    "complex128": "float64",
    "complex64": "float32",
}
_ACC = {
    "float64": "float64",
    "float32": "float64",
    "complex128": "complex128",
    "complex64": "complex128",
}


# --------------------------------------------------------------------------------------------
# The backend surface shared with the other backends
# --------------------------------------------------------------------------------------------


def native_matmul(a, b):
    """dask's own blocked product (lazy): block products in the chunks' library, plain sums."""
    return _graph(a, b, None, None, native=True)[0]


def quiet():
    """Nothing is computed while a graph is built; the block tasks silence their own warnings."""
    return np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore")


def emulation_faster(request, dtype, m, n, k, batch=1, chunk_backend="numpy", family="ozaki2"):
    """Whether block products of these sizes are predicted to emulate faster than native on
    the chunks' backend (``emulinalg._cost``, with the fewest moduli/slices the level can need:
    the scheme itself is chosen from the chunk data at compute time). False without a model."""
    try:
        from emulinalg import _cost
    except ImportError:  # pragma: no cover - an engine without a cost model: native is safe
        return False
    guess = _cost.likely_count(family, request.bits, k)
    return bool(_cost.emulation_faster(chunk_backend, guess, dtype, m, n, k, batch))


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


def matmul(xp, backend, a, b, request, cfg):
    """``(c, plan)``: the lazy dask array of the batched product ``a @ b`` and the graph's plan.

    ``a`` (..., m, k) and ``b`` (..., k, n) are dask arrays of one floating dtype and the same
    batch shape (the front end validated and broadcast them).
    """
    dtype_name = _dtype_name(a.dtype)
    real_name = _REAL[dtype_name]
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
    explicit = isinstance(request, (OzakiI, OzakiII))
    mb, kb, nb = max(a.chunks[-2]), max(a.chunks[-1]), max(b.chunks[-1])
    bb = math.prod(max(c) for c in a.chunks[:-2]) if a.ndim > 2 else 1
    family = "ozaki1" if cfg.scheme == "ozaki1" else "ozaki2"
    if (
        cfg.strategy == "performant"
        and not explicit
        and request.bits <= _NATIVE_BITS[real_name]
        and not emulation_faster(request, dtype_name, mb, nb, kb, bb, chunk_backend.name, family)
    ):
        return native(
            f"performant: native is faster than emulation on the {chunk_backend.name} backend "
            "of the chunks at this precision (strategy='eager' emulates anyway)"
        )
    # The graph decided to emulate: every block does (an edge block must not turn native).
    block_cfg = dataclasses.replace(cfg, strategy="eager")
    c, notes = _graph(a, b, request, block_cfg, native=False)
    if explicit:
        what = str(request)
        plan.gemms = _engine._gemm_count(request, complex_=dtype_name.startswith("complex"))
    else:
        fam = "Scheme I" if family == "ozaki1" else "Scheme II"
        what = f"{request} level, {fam} configuration chosen per block at compute time"
    plan.scheme = f"blocked: [{chunk_backend.name}] {what}"
    plan.notes.extend(notes)
    plan.notes.append(
        "K-block partials added in double-double (TwoSum tree), rounded once"
        + (f"; blocks computed in {_ACC[dtype_name]}" if _ACC[dtype_name] != dtype_name else "")
    )
    plan.notes.append("preprocessing per block product (no reuse across blocks yet)")
    return c, plan


def _graph(a, b, request, cfg, native):
    """The lazy product and notes describing its graph."""
    import dask
    import dask.array as da
    from dask.array.utils import meta_from_array

    dtype_name = _dtype_name(a.dtype)
    nd = a.ndim
    # Align chunks: batch axes follow a; K follows the operand with fewer (larger) K-blocks.
    ka, kb = a.chunks[-1], b.chunks[-2]
    kchunks = ka if len(ka) <= len(kb) else kb
    if a.chunks[-1] != kchunks:
        a = a.rechunk(a.chunks[:-1] + (kchunks,))
    want_b = a.chunks[:-2] + (kchunks, b.chunks[-1])
    if b.chunks != want_b:
        b = b.rechunk(want_b)

    batch_ind = tuple(range(nd - 2))
    i, kk, j, p = nd - 2, nd - 1, nd, nd + 1
    acc = dtype_name if native else _ACC[dtype_name]
    out_ind = batch_ind + (i, kk, j) + (() if native else (p,))
    blocks = da.blockwise(
        _native_block if native else _emulated_block,
        out_ind,
        a,
        batch_ind + (i, kk),
        b,
        batch_ind + (kk, j),
        adjust_chunks={kk: 1},
        new_axes={} if native else {p: 2},
        concatenate=False,
        align_arrays=False,
        dtype=acc,
        meta=meta_from_array(a._meta, ndim=len(out_ind), dtype=acc),
        token="emulinalg-native-block" if native else "emulinalg-block",
        **({} if native else {"request": request, "cfg": cfg}),
    )
    split_every = dask.config.get("split_every", None) or 4
    summed = da.reduction(
        blocks,
        _identity,
        _plain_sum if native else _dd_sum,
        combine=_plain_sum if native else _dd_sum,
        axis=kk,
        keepdims=False,
        dtype=acc,
        split_every=split_every,
        concatenate=False,
        meta=meta_from_array(a._meta, ndim=len(out_ind) - 1, dtype=acc),
        name="emulinalg-ksum" if not native else "emulinalg-native-ksum",
    )
    if native:
        c = summed
    else:
        c = da.map_blocks(
            _round,
            summed,
            dtype=dtype_name,
            drop_axis=summed.ndim - 1,
            meta=meta_from_array(a._meta, ndim=nd, dtype=dtype_name),
            dtype_name=dtype_name,
        )
    nk = len(kchunks)
    nblocks = math.prod(a.numblocks[:-1]) * nk * b.numblocks[-1]
    notes = [
        f"chunks: m {_fmt(a.chunks[-2])}, n {_fmt(b.chunks[-1])}, k {_fmt(kchunks)}",
        f"{nk} K-block{'s' if nk != 1 else ''}, {nblocks} block products, "
        f"split_every={split_every}",
    ]
    return c, notes


def _fmt(chunks):
    """``(64, 64, 64, 32)`` -> ``"3x64+32"``: chunk sizes, compactly."""
    out, prev, count = [], None, 0
    for c in [*chunks, None]:
        if c == prev:
            count += 1
            continue
        if prev is not None:
            out.append(f"{count}x{prev}" if count > 1 else f"{prev}")
        prev, count = c, 1
    return "+".join(out)


def _dtype_name(dt):
    name_ = np.dtype(dt).name if not hasattr(dt, "name") else dt.name
    if name_ not in _REAL:
        raise TypeError(f"internal: unsupported dtype {dt}")
    return name_


def _chunk_backend(x):
    """The emulinalg backend of a dask array's chunks (from its meta), or None."""
    import array_api_compat

    from . import for_namespace

    meta = x._meta
    try:
        xp = array_api_compat.array_namespace(meta)
    except TypeError:
        return None
    if array_api_compat.is_dask_namespace(xp):
        return None
    return for_namespace(xp)


# --------------------------------------------------------------------------------------------
# The tasks (run on the workers, on numpy or cupy chunks)
# --------------------------------------------------------------------------------------------


def _chunk_quiet(xp, backend):
    return backend.quiet() if backend is not None else contextlib.nullcontext()


def _emulated_block(a, b, request, cfg):
    """``(hi, lo)`` of one emulated block product, stacked on a trailing axis, with a size-1
    axis for the K-block: shape (..., m_i, 1, n_j, 2)."""
    import array_api_compat

    from . import for_namespace

    xp = array_api_compat.array_namespace(a, b)
    backend = for_namespace(xp)
    name_ = _dtype_name(a.dtype)
    acc = _ACC[name_]
    if acc != name_:  # float32 blocks run in float64: no partial is rounded to float32
        a, b = xp.astype(a, getattr(xp, acc)), xp.astype(b, getattr(xp, acc))
    with _chunk_quiet(xp, backend):
        (hi, lo), _ = _engine.matmul(xp, backend, a, b, request, cfg, dd=True)
    pair = xp.stack([hi, lo], axis=-1)
    return xp.expand_dims(pair, axis=-3)


def _native_block(a, b):
    import array_api_compat

    xp = array_api_compat.array_namespace(a, b)
    return xp.expand_dims(xp.matmul(a, b), axis=-2)


def _identity(x, axis=None, keepdims=None):
    return x


def _flatten(parts):
    if isinstance(parts, (list, tuple)):
        out = []
        for q in parts:
            out.extend(_flatten(q))
        return out
    return [parts]


def _squeeze(x, axis, keepdims):
    if keepdims:
        return x
    import array_api_compat

    xp = array_api_compat.array_namespace(x)
    return xp.squeeze(x, axis=tuple(axis))


def _plain_sum(parts, axis=None, keepdims=False):
    parts = _flatten(parts)
    out = parts[0]
    for q in parts[1:]:
        out = out + q
    return _squeeze(out, axis, keepdims)


def _two_sum(a, b):
    """Knuth's TwoSum: ``s + e == a + b`` exactly, ``s = fl(a + b)`` (componentwise for
    complex: complex addition rounds the two parts separately)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def _dd_add(x, y, xp):
    """Double-double sum of two stacked (hi, lo) arrays (QD's accurate addition with TwoSum
    renormalisation); the plain sum of the high parts where it is not finite."""
    xh, xl, yh, yl = x[..., 0], x[..., 1], y[..., 0], y[..., 1]
    s, e = _two_sum(xh, yh)
    t, f = _two_sum(xl, yl)
    s, e = _two_sum(s, e + t)
    s, e = _two_sum(s, e + f)
    bad = ~(xp.isfinite(s) & xp.isfinite(e))
    if bool(xp.any(bad)):
        plain = xh + yh
        s = xp.where(bad, plain, s)
        e = xp.where(bad, xp.zeros_like(e), e)
    return xp.stack([s, e], axis=-1)


def _dd_sum(parts, axis=None, keepdims=False):
    import array_api_compat

    parts = _flatten(parts)
    xp = array_api_compat.array_namespace(parts[0])
    out = parts[0]
    if len(parts) > 1:
        with np.errstate(over="ignore", invalid="ignore"):
            for q in parts[1:]:
                out = _dd_add(out, q, xp)
    return _squeeze(out, axis, keepdims)


def _round(x, dtype_name):
    """``hi + lo`` rounded once to the result dtype."""
    import array_api_compat

    xp = array_api_compat.array_namespace(x)
    with np.errstate(over="ignore", invalid="ignore"):
        s = x[..., 0] + x[..., 1]
        s = xp.where(xp.isfinite(s), s, x[..., 0])  # inf + nan from a non-finite entry
        return xp.astype(s, getattr(xp, dtype_name))
