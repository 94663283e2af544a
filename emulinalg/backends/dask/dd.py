"""The double-double graph (Scheme I, or ``EMULINALG_DASK_MODE=dd``).

1. ``dask.array.blockwise(..., concatenate=False)`` makes one task per block triple (i, k, j):
   ``A[i, k] @ B[k, j]`` computed by ``emulinalg._engine.matmul`` on the chunks' own backend
   (``backends.for_namespace`` of the chunk's array module: numpy -> CPU reference / AMX, cupy ->
   GPU), with an explicit ``meta`` so cupy chunks stay cupy. The engine returns the block result
   as a double-double pair ``(hi, lo)`` (``dd=True``): ``hi`` is the block's usual rounded
   result and ``lo`` the rounded remainder of the block's exact emulated value (0 for entries
   the engine computed natively). The pair travels as one array with a trailing axis of size 2.
2. ``dask.array.reduction(..., split_every=...)`` adds the K-block partials in a tree with an
   error-free double-double addition (TwoSum on the high and the low parts, renormalised);
   ``split_every`` comes from dask's config (``dask.config.set(split_every=...)``, default 4).
3. One ``map_blocks`` rounds ``hi + lo`` once to the result dtype.

float32/complex64 operands are cast to float64/complex128 inside each block task and the block
products run at the requested level (by default the float32 level: 24 bits relative to
``|A_k||B_k|``), so no partial is rounded to float32; the partials are added in double-double
like the others and the sum is rounded to float32 once at the end.

Accuracy across K-blocks (double-double graph)
----------------------------------------------
Split the contraction index into the K-blocks ``K_1, ..., K_q``: ``C = sum_k A_k B_k`` with
``A_k = A[:, K_k]``, ``B_k = B[K_k, :]``, and, entry by entry, ``sum_k |A_k||B_k| = |A||B|``
exactly (the K-blocks partition the terms of every dot product). For a level of ``b`` bits the
engine certifies each emulated block entry: ``|C^_k - C_k| <= eps_k * (|A_k||B_k|)`` with
``eps_k = tau * 2^-b`` (a number of bits: the strict form) or the native form's
deterministic factor for inner dimension ``|K_k|`` (a named level, ``certificate.guarantee_note``:
it does not decrease with the inner dimension, so no block's factor exceeds the whole
product's, ``eps``), where
``C^_k`` is the block's exact emulated value, of which ``hi_k + lo_k`` is the double-double
rounding (``|hi_k + lo_k - C^_k| <= 2^-106 |C^_k|``). Entries the engine computes natively in a
block (non-finite inputs, entries no configuration certifies) carry the native error of that
block only, ``gamma_{|K_k|} |A_k||B_k|``, smaller than native's on the whole ``k``. The tree of
``q - 1`` double-double additions adds at most ``c * q * 2^-104 * sum_k |C^_k|`` and the final
rounding ``u |C|``. Altogether, per entry,

    |C^ - C| <= u |C| + (1 + u) * (eps * |A||B| + c * q * 2^-104 * |A||B|),

the engine's own bound on the whole matrices plus a term far below ``u |A||B|`` (for ``q`` far
below ``2^50``): the blocking loses nothing of what the emulation gains, unlike a plain float
sum of rounded partials, which would add ``q`` roundings of size ``u |C_k|``.

Non-finite values: where a partial sum of the high parts is not finite (an infinite or NaN
block entry, or an overflow), the double-double sum is replaced by the plain float sum of the
high parts, which is what the native product does with those terms.
"""

from __future__ import annotations

import math

import numpy as np

from emulinalg._engine import matmul as engine_matmul
from emulinalg.algorithm.xputil import ldexp, make_complex

from .blocks import _align, _chunk_quiet, _dtype_name, _flatten, _fmt, _identity, _squeeze, task

_ACC = {
    "float64": "float64",
    "float32": "float64",
    "complex128": "complex128",
    "complex64": "complex128",
}


def _graph(a, b, request, cfg, native):
    """The lazy product and notes describing its graph."""
    import dask
    import dask.array as da
    from dask.array.utils import meta_from_array

    dtype_name = _dtype_name(a.dtype)
    nd = a.ndim
    a, b, kchunks = _align(a, b)

    batch_ind = tuple(range(nd - 2))
    i, kk, j, p = nd - 2, nd - 1, nd, nd + 1
    acc = dtype_name if native else _ACC[dtype_name]
    out_ind = batch_ind + (i, kk, j) + (() if native else (p,))
    rows, cols = batch_ind + (i,), batch_ind + (j,)
    scale = []  # emulated float64 partials: the lines' maxima, for the overflow shifts
    if not native and acc in ("float64", "complex128"):
        amax, bmax = (da.where(da.isfinite(x), x, 0).max(axis=ax)
                      for x, ax in ((da.abs(a), -1), (da.abs(b), -2)))  # fmt: skip
        scale = [amax, rows, bmax, cols]
    blocks = da.blockwise(
        _native_block if native else _emulated_block,
        out_ind,
        a,
        batch_ind + (i, kk),
        b,
        batch_ind + (kk, j),
        *scale,
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
        c = da.blockwise(
            _round,
            batch_ind + (i, j),
            summed,
            batch_ind + (i, j, p),
            *scale,
            concatenate=True,
            dtype=dtype_name,
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


# Lines whose largest magnitude is above 2**OVERFLOW_EXP enter the dd graph's block products
# scaled down to it by a power of two (the same for every K-block, undone after the sum): a
# K-block's partial of such lines can overflow where the whole sum does not (1e308 - 1e308).
# Below it nothing is scaled; partial sums stay below 2**(2 OVERFLOW_EXP + 2) k.
OVERFLOW_EXP = 480


def _overflow_shift(xp, mx):
    """Per line, the power of two ``_emulated_block`` scales it down by: 0 up to
    2**OVERFLOW_EXP, else the line maximum's exponent above it (int64)."""
    e = xp.astype(xp.ceil(xp.log2(xp.where(mx > 0, mx, 1.0))), xp.int64)
    return xp.where(e > OVERFLOW_EXP, e - OVERFLOW_EXP, 0)


@task
def _emulated_block(a, b, amax=None, bmax=None, *, request, cfg):
    """``(hi, lo)`` of one emulated block product, stacked on a trailing axis, with a size-1
    axis for the K-block: shape (..., m_i, 1, n_j, 2); with the lines' maxima ``amax`` (...,
    m_i), ``bmax`` (..., n_j), the product of the lines scaled by ``_overflow_shift``."""
    import array_api_compat

    from .. import for_namespace

    xp = array_api_compat.array_namespace(a, b)
    backend = for_namespace(xp)
    name_ = _dtype_name(a.dtype)
    acc = _ACC[name_]
    if acc != name_:  # float32 blocks run in float64: no partial is rounded to float32
        a, b = xp.astype(a, getattr(xp, acc)), xp.astype(b, getattr(xp, acc))
    if amax is not None:  # powers of two: exact (an entry 2**-1074 below its line's max aside)
        a = _scaled(xp, a, -xp.expand_dims(_overflow_shift(xp, amax), axis=-1))
        b = _scaled(xp, b, -xp.expand_dims(_overflow_shift(xp, bmax), axis=-2))
    with _chunk_quiet(xp, backend):
        (hi, lo), _ = engine_matmul(xp, backend, a, b, request, cfg, dd=True)
    pair = xp.stack([hi, lo], axis=-1)
    return xp.expand_dims(pair, axis=-3)


@task
def _native_block(a, b):
    import array_api_compat

    xp = array_api_compat.array_namespace(a, b)
    return xp.expand_dims(xp.matmul(a, b), axis=-2)


@task
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


@task
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


@task
def _round(x, amax=None, bmax=None, *, dtype_name):
    """``hi + lo`` rounded once to the result dtype (and scaled back by the lines'
    ``_overflow_shift``: a power of two >= 1, exact up to overflow, which is the result's)."""
    import array_api_compat

    xp = array_api_compat.array_namespace(x)
    with np.errstate(over="ignore", invalid="ignore"):
        s = x[..., 0] + x[..., 1]
        s = xp.where(xp.isfinite(s), s, x[..., 0])  # inf + nan from a non-finite entry
        if amax is not None:
            shift = (xp.expand_dims(_overflow_shift(xp, amax), axis=-1)
                     + xp.expand_dims(_overflow_shift(xp, bmax), axis=-2))  # fmt: skip
            s = _scaled(xp, s, shift)
        return xp.astype(s, getattr(xp, dtype_name))


def _scaled(xp, x, shift):
    """``x * 2**shift`` per entry (real or complex; ``shift`` int64, broadcasting)."""
    if xp.isdtype(x.dtype, "complex floating"):
        return make_complex(xp, ldexp(xp, xp.real(x), shift), ldexp(xp, xp.imag(x), shift), x.dtype)
    return ldexp(xp, x, shift)
