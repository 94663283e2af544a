"""dask backend: lazy graphs of emulated products on the chunks' own backend.

``emulinalg.matmul`` (and ``tensordot``/``vecdot``, which the front end reduces to one batched
matmul) on dask arrays builds a dask graph and computes nothing. The contraction chunks of the
two operands are aligned first (the operand with more K-blocks is rechunked to the other's K
chunks; batch chunks follow the first operand). Two graphs exist:

Shared preprocessing (Scheme II: the default family's levels and explicit ``OzakiII``)
-------------------------------------------------------------------------------------
The whole product is computed as the in-core engine computes it on the whole matrices, with
the work split over chunks and every chunk preprocessed once (``_shared_graph``). With ``I x Q``
chunks of A and ``Q x J`` of B (batch blocks multiply every count):

1. Statistics over the whole matrices, as reductions over chunks. One task per chunk gives its
   lines' max magnitude and whether they hold NaN/Inf (NaN/Inf entries count as 0, as in the
   engine); a max over K-chunks gives each row's (column's) exponent, hence the prescale
   shifts ``s``, ``t`` of ``scaling.ozaki2_prescale``. Accurate mode: one task per chunk makes
   the int8 bound operand ``Ā = floor(2**(s+1) |A|)`` (entries <= 127,
   ``scaling.bound_operand``) and one its lines' terms (sum of Ā, count of nonzero parts);
   one task per block triple the integer GEMM (``backend.int_matmul(.., 127*127)``) and tree
   sums over K-blocks give the exact ``F = Ā B̄`` and line terms (integers below 2**53 add
   exactly in any order), then per output block ``U = scaling.bound_upper`` and
   ``e_i = max_j U_ij / 4``, ``f_j = max_i U_ij / 4``: the engine's values exactly. Fast mode:
   per-chunk sums of squares.
   The certificate of a level (``certificate.certify_moduli``) is evaluated on operands normalized
   by the GLOBAL line exponents, with the Target of the whole matrices
   (``_planner.target_for(level, k, chunk backend)``: a number of bits takes the strict l1 form,
   a named level the native l2 form, whose weight models the chunks' backend's native GEMM
   over the whole k) and ``certificate.cert_constants(k, target, complex)``. The line-terms task
   also gives each chunk's partial of the norm the form asks for (``cc.norm``: the l1 sums of
   |Re| + |Im|, or their sums of squares); the K-sums are finished as ``certificate.line_norm``
   does (``l1fac`` covers any summation order of non-negative terms). First pass:
   ``certificate.bound_lower`` of F (exact) and ``certificate.ozaki2_needed`` (the count each entry
   needs) per output block, its ``(largest need, any beyond, all beyond)``, and one task
   (``emulinalg-fallback``) whether any entry of the whole product is beyond. Second pass, only
   if so (the graph is built before any data is seen, so its tasks always exist and return
   None otherwise, without work): per chunk the normalized magnitudes (truncated to float32,
   as ``certificate.magnitude_lower`` does), per block triple ``certificate.magnitude_lower`` (a
   lower bound of ``|A_k||B_k|``), summed over K-blocks in float64 and multiplied by
   ``1 - q 2**-52`` (still a lower bound of ``|A||B|``), and the needs again with the larger
   of the two lower bounds per entry. Then per output block its summary and ONE task
   (``emulinalg-count``) the count of moduli, exactly as ``certificate.certify_moduli`` (before
   its exact step) and the in-core engine decide it, plus a flag per output block: whether
   any of its entries is taken from the native product. The exact step follows (tasks that
   always exist and return at once when it does not run): per output block how many
   certifiable entries fail one modulus fewer with the exact shifts
   (``certificate.exact_passes``), and one task (``emulinalg-exact``) taking one modulus off
   where none does. 2-D products then take ``refinement.refine_and_patch``'s steps (its loop, up
   to ``REFINE_STEPS``: one set of tasks per step, each returning at once where the loop has
   stopped), each one modulus fewer: per output block its suspects (the certifiable entries
   failing one fewer than the count with the exact shifts, with their lower bound and terms,
   ``emulinalg-suspects-<step>``), one task applying the engine's limit to the whole product's
   suspects (``REFINE_ENTRIES``; the native form's ``SUSPECTS_MAX``) and taking its sample of
   them in flat order (``refinement.refine_sample``), per chunk the sampled suspects' rows
   (columns) as normalized float64 magnitudes, per K-block each sampled suspect's sum of
   magnitude products and, for the native form, of their squares (``refinement.suspect_sums``'
   operations), summed over K-blocks (non-negative terms: ``refine_failures``' factor covers
   any order), and one task (``emulinalg-refine-<step>``) deciding the count from the suspects
   that still fail (``refinement.refine_failures``): one fewer where none does (the next step then
   runs), and also where at most ``refinement.patch_limit(m, n)`` do, which it then names as the
   patch (their flat indices, on the host) for step 4; the last step's decision is the count
   that the later stages use.
2. Residues once per chunk (``emulinalg-residues``, I·Q + Q·J tasks): the shifts ``mu``, ``nu``
   (``scaling.ozaki2_shifts``' formula, from the count), ``scale_to_integers`` (rounded to
   nearest or truncated as ``scaling.rounds_to_nearest`` says for the count and the WHOLE
   inner dimension, as ``products.product`` does), ``split`` and ``residues`` for every
   modulus, stored as int8 planes (n per entry, 3n for complex: 3M). dask deduplicates by
   key, so every block product reading a chunk reads the same planes.
3. Block products (``emulinalg-products``, I·Q·J tasks): ``products.modular_products`` per
   modulus, kept as int8 residues, and a tree reduction over K-blocks (``split_every``) adding
   them modulo each ``m_l``: the sums are congruent to the whole products, so their symmetric
   residues are the engine's ``W_l`` exactly.
4. One CRT per output block (I·J tasks): the engine's exact limb accumulation and
   ``crt.reconstruct`` (rounded once to the result dtype, float32 included): the result
   is bit for bit the engine's on the whole matrices with the same count. The certificate's
   patch (2-D products) and, for the named levels (the native form), the whole product's most
   cancelled entries are then recomputed with the most moduli as the engine does
   (``refit.refit(..., extra=patch, cancelled=...)``; tasks that return at once where there
   is nothing to recompute): for the named levels, per output block the entries the whole
   product's pick can take there (the block's own pick of ``refit.cancelled_entries``'
   ratios: an entry of the whole pick is in it, since fewer than ``REFIT_ENTRIES`` of the
   block's entries come before it); one task (``emulinalg-refit-select``) taking the pick
   among them and the union with the patch; per chunk the entries' rows of A (columns of B),
   one task (``emulinalg-refit``) recomputing them (``products.entries`` on their whole
   lines), and per output block (``emulinalg-final``) the emulated values with them patched
   in. The output blocks wait for that one task; for the named levels it waits for every
   output block's pick, so every output block's emulated values are held until it is done
   (a number of bits: the patch alone, known from the decision).
5. Native patch: entries beyond the certificate (for a level above the dtype's, where the
   maximum count runs: those beyond the dtype's own level's certificate, computed beside it
   from the same lower bounds), or in rows/columns with NaN/Inf, take dask's
   blocked native product (block products in the chunks' dtype, plain sums over K-blocks),
   computed only for the output blocks that have such entries: the count task's flags tell
   the residue tasks to keep the raw chunk alongside the planes and the product tasks to add
   the native block product to their partial.

The count and statistics are data-dependent, so the graph is built from ``dask.array``
operations with known shapes (``blockwise``, reductions) wherever an array results, and from
``blockwise`` layers whose chunks are Python objects (``meta=np.empty((0,)*nd, object)``,
``concatenate=False``) for the residue planes, the count and the partial sums. The object
layers are never concatenated; the graph's output is an ordinary array. Per-chunk layers carry
the annotation ``{"emulinalg": "chunks"}`` and block layers ``{"emulinalg": "blocks"}``: dask's
blockwise fusion does not merge layers with different annotations, so a per-chunk task is never
inlined (and so recomputed) into the block products that read it. Which output block a task
belongs to comes from small index arrays (``da.arange(nblocks, chunks=1)``).

The Scheme I family, explicit ``OzakiI`` and ``EMULINALG_DASK_MODE=dd`` use the double-double
graph below instead.

Double-double graph (Scheme I, or ``EMULINALG_DASK_MODE=dd``)
--------------------------------------------------------------
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

Plans
-----
``emulinalg.last_plan()`` after the call describes the graph without computing anything:
backend ``"dask"``, scheme ``"blocked: ..."`` with the chunk backend and the scheme or level,
and notes with the chunking, the number of K-blocks and of tasks per stage, and
``split_every``. Data-dependent decisions (the count of moduli, native entries) are made on the
workers and stay there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np

from emulinalg import get_config
from emulinalg._engine import matmul as engine_matmul
from emulinalg._plan import Plan
from emulinalg._planner import (
    above_dtype,
    family,
    fixed_scheme,
    gemm_count,
    likely_faster,
    needs_own_level,
    performant,
    refit_count,
    refit_form,
    settle,
    target_for,
)
from emulinalg._precision import NATIVE, REAL_DTYPE, SCHEMES, OzakiII, level_for_dtype
from emulinalg.algorithm import certificate, crt, operands, products, refinement, refit, residues
from emulinalg.algorithm.moduli import MAX_MODULI, MIN_MODULI, crt_constants
from emulinalg.algorithm.scaling import (
    BOUND_MAX,
    bound_operand,
    bound_upper,
    half_log_shift,
    magnitude,
    max_exponent,
    mixed_lines,
    rounds_to_nearest,
    scale_to_integers,
)
from emulinalg.algorithm.xputil import ldexp, make_complex

name = "dask"

MODE_ENV = "EMULINALG_DASK_MODE"  # "shared" (default; "dd" for cupy chunks) or "dd"

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
    if shared:
        c, notes = _shared_graph(a, b, request)
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


def _align(a, b):
    """Contraction chunks aligned (K follows the operand with fewer, larger K-blocks), batch
    chunks of b following a's."""
    ka, kb = a.chunks[-1], b.chunks[-2]
    kchunks = ka if len(ka) <= len(kb) else kb
    if a.chunks[-1] != kchunks:
        a = a.rechunk(a.chunks[:-1] + (kchunks,))
    want_b = a.chunks[:-2] + (kchunks, b.chunks[-1])
    if b.chunks != want_b:
        b = b.rechunk(want_b)
    return a, b, kchunks


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
    if name_ not in REAL_DTYPE:
        raise TypeError(f"internal: unsupported dtype {dt}")
    return name_


def _chunk_backend(x):
    """The emulinalg backend of a dask array's chunks (from its meta), or None."""
    import array_api_compat

    from .. import for_namespace

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


# --------------------------------------------------------------------------------------------
# The shared-preprocessing Scheme II graph
# --------------------------------------------------------------------------------------------

_CHUNKS = {"emulinalg": "chunks"}  # per-chunk layers: never fused into the block products
_BLOCKS = {"emulinalg": "blocks"}


def _shared_config(request, k, cplx, real_name):
    """``(fixed, mode)``: the count of moduli when the graph knows it (explicit ``OzakiII``, or
    a level's configuration without a certificate, ``_planner.fixed_scheme``; None: the
    certificate's) and the scaling mode."""
    if isinstance(request, OzakiII):
        return request.moduli, request.mode
    fixed = fixed_scheme(request, "ozaki2", k, cplx, real_name)
    if fixed is not None:
        return fixed.scheme.moduli, "accurate"
    return None, "accurate"


def _shared_graph(a, b, request, arrays=None):
    """The lazy Scheme II product with shared preprocessing (module docstring) and notes.
    ``arrays``: a dict that receives the lazy statistics ``e``, ``f`` and ``need`` (None where
    not made) and, with a certificate, the K-summed line terms ``aterms``, ``bterms`` and the
    ``norm`` they hold, for tests that compare them with the engine's."""
    import dask
    import dask.array as da
    from dask.array.utils import meta_from_array

    a, b, kchunks = _align(a, b)
    dtype_name = _dtype_name(a.dtype)
    real_name = REAL_DTYPE[dtype_name]
    cplx = dtype_name.startswith("complex")
    nd = a.ndim
    bt = tuple(range(nd - 2))  # batch indices
    i, kk, j, p = nd - 2, nd - 1, nd, nd + 1
    k, q = a.shape[-1], len(kchunks)
    split_every = dask.config.get("split_every", None) or 4
    fixed, mode = _shared_config(request, k, cplx, real_name)
    certify = fixed is None
    # the engine's Target: its weight models the chunks' backend's native GEMM over the whole k
    outputs = math.prod(a.shape[:-1]) * b.shape[-1]
    target = target_for(request, k, _chunk_backend(a), outputs) if certify else None
    norm = certificate.cert_constants(k, target, cplx).norm if certify else None
    # above the dtype's level: the dtype level's certificate too (as the in-core engine)
    above = certify and above_dtype(request, real_name)
    own = None
    if above:
        own = target_for(level_for_dtype(real_name), k, _chunk_backend(a), outputs)
    f64 = np.float64

    def meta(ndim, dtype):
        real = cplx and np.dtype(dtype).kind != "c"  # no complex -> real cast warning
        return meta_from_array(a._meta.real if real else a._meta, ndim=ndim, dtype=dtype)

    def obj(ndim):
        return np.empty((0,) * ndim, dtype=object)

    def k_sum(x, fn, name):  # a tree sum of per-block-triple objects over the K-blocks
        return da.reduction(x, _identity, fn, combine=fn, axis=nd - 1, keepdims=False,
                            dtype=object, split_every=split_every, concatenate=False,
                            meta=obj(nd), name=name)  # fmt: skip

    def one(*axes):  # every block of these axes becomes one entry
        return {d: 1 for d in axes}

    ai, bi = bt + (i, kk), bt + (kk, j)  # operand indices
    rows, cols, out = bt + (i,), bt + (j,), bt + (i, j)

    # 1. Statistics. Per chunk: [max magnitude, has NaN/Inf] per line; max over K-chunks.
    with dask.annotate(**_CHUNKS):
        amb = da.blockwise(
            _line_stats,
            ai + (p,),
            a,
            ai,
            adjust_chunks={kk: 1},
            new_axes={p: 2},
            dtype=f64,
            meta=meta(nd + 1, f64),
            token="emulinalg-stats",
            axis=-1,
        ).max(axis=nd - 1, split_every=split_every)  # (..., m, 2)
        bmb = da.blockwise(
            _line_stats,
            bi + (p,),
            b,
            bi,
            adjust_chunks={kk: 1},
            new_axes={p: 2},
            dtype=f64,
            meta=meta(nd + 1, f64),
            token="emulinalg-stats",
            axis=-2,
        ).max(axis=nd - 2, split_every=split_every)  # (..., n, 2)

        def per_chunk(fn, x, xi, lines, li, dtype, reduce_k=False, **kw):
            return da.blockwise(
                fn,
                xi,
                x,
                xi,
                lines,
                li + (p,),
                dtype=dtype,
                concatenate=True,
                adjust_chunks={kk: 1} if reduce_k else None,
                meta=meta(len(xi), dtype),
                token=f"emulinalg-{fn.__name__.strip('_')}",
                **kw,
            )

        # per line [sum of Ā, nonzero parts(, norm partial(, entries with both parts nonzero))]
        nt = (4 if cplx else 3) if certify else 2

        def line_terms(x, xi, lines, li, axis, norm=norm):
            return da.blockwise(
                _line_terms,
                xi + (p,),
                x,
                xi,
                lines,
                li + (p,),
                adjust_chunks={kk: 1},
                new_axes={p: nt},
                dtype=f64,
                concatenate=True,
                meta=meta(nd + 1, f64),
                token="emulinalg-line-terms",
                axis=axis,
                cplx=cplx,
                norm=norm,
            ).sum(axis=nd - 1 if axis == -1 else nd - 2, split_every=split_every)

        if mode == "accurate":
            abar = per_chunk(_bound_chunk, a, ai, amb, rows, np.int8, axis=-1, cplx=cplx)
            bbar = per_chunk(_bound_chunk, b, bi, bmb, cols, np.int8, axis=-2, cplx=cplx)
            aterms = line_terms(a, ai, amb, rows, axis=-1)  # (..., m, nt): exact but the norm's
            bterms = line_terms(b, bi, bmb, cols, axis=-2)  # (..., n, nt)
            own_terms = (aterms, bterms)
            own_norm = certificate.cert_constants(k, own, cplx).norm if above else norm
            if own_norm != norm:
                own_terms = (line_terms(a, ai, amb, rows, axis=-1, norm=own_norm),
                             line_terms(b, bi, bmb, cols, axis=-2, norm=own_norm))  # fmt: skip
        else:
            asq = per_chunk(_sq_chunk, a, ai, amb, rows, f64, True, axis=-1, cplx=cplx)
            bsq = per_chunk(_sq_chunk, b, bi, bmb, cols, f64, True, axis=-2, cplx=cplx)

    def per_block(fn, xs, ys, dtype=f64):  # one task per block triple (i, k, j)
        args = [v for x in xs for v in (x, ai)] + [v for y in ys for v in (y, bi)]
        with dask.annotate(**_BLOCKS):
            return da.blockwise(
                fn,
                ai[:-1] + (kk, j),
                *args,
                adjust_chunks={kk: 1},
                dtype=dtype,
                concatenate=False,
                meta=obj(nd + 1) if dtype is object else meta(nd + 1, dtype),
                token=f"emulinalg-{fn.__name__.strip('_')}",
            )

    if mode == "accurate":  # exact integer sums and maxima: the engine's F, U, e and f
        with dask.annotate(**_BLOCKS):
            F = per_block(_bound_block, [abar], [bbar]).sum(axis=nd - 1, split_every=split_every)
        U = da.blockwise(_upper_block, out, F, out, aterms, rows + (p,), bterms, cols + (p,),
                         dtype=f64, concatenate=True, meta=meta(nd, f64),
                         token="emulinalg-bound-upper", cplx=cplx)  # fmt: skip
        e = U.max(axis=-1, split_every=split_every) * 0.25
        f = U.max(axis=-2, split_every=split_every) * 0.25
    else:
        e = asq.sum(axis=nd - 1) * (1.0 + (k + 4) * 2.0**-52)
        f = bsq.sum(axis=nd - 2) * (1.0 + (k + 4) * 2.0**-52)
    count_args = [
        da.blockwise(_any_bad, rows, amb, rows + (p,), adjust_chunks=one(*rows), dtype=bool,
                     concatenate=True, meta=np.empty((0,) * len(rows), bool)),
        rows,
        da.blockwise(_any_bad, cols, bmb, cols + (p,), adjust_chunks=one(*cols), dtype=bool,
                     concatenate=True, meta=np.empty((0,) * len(cols), bool)),
        cols,
    ]  # fmt: skip
    need = own_need = None
    if certify:
        cert_kw = {"dtype": np.int64, "concatenate": True, "meta": meta(nd, np.int64), "k": k,
                   "cplx": cplx, "target": target}  # fmt: skip
        terms = [F, out, e, rows, f, cols, aterms, rows + (p,), bterms, cols + (p,)]

        def summarize(ns, token):
            return da.blockwise(_cert_summary, out + (p,), ns, out, adjust_chunks=one(*out),
                                new_axes={p: 3}, dtype=f64, concatenate=True,
                                meta=np.empty((0,) * (nd + 1)), token=token)  # fmt: skip

        # First the lower bound from F alone (no GEMM), as certificate.ozaki2_moduli_needed.
        need1 = da.blockwise(_cert_block, out, *terms, token="emulinalg-certificate", **cert_kw)
        fallback = da.blockwise(
            _fallback_task, (), summarize(need1, "emulinalg-cert-summary"), out + (p,),
            dtype=object, concatenate=True, meta=np.empty((), object),
            token="emulinalg-fallback",
        )  # fmt: skip
        # Only if some entry of the whole product is beyond: the magnitude lower bound (per
        # block triple, summed over K-blocks) and max(F bound, it) per entry. The graph cannot
        # know beforehand, so these tasks always exist and return None when not needed.
        with dask.annotate(**_CHUNKS):
            nrm_kw = {"dtype": object, "meta": obj(nd), "token": "emulinalg-normmag"}
            anrm = da.blockwise(_normmag_chunk, ai, a, ai, amb, rows + (p,), fallback, (),
                                concatenate=True, axis=-1, **nrm_kw)  # fmt: skip
            bnrm = da.blockwise(_normmag_chunk, bi, b, bi, bmb, cols + (p,), fallback, (),
                                concatenate=True, axis=-2, **nrm_kw)  # fmt: skip
        with dask.annotate(**_BLOCKS):
            lower = k_sum(per_block(_lower_block, [anrm], [bnrm], dtype=object), _lsum,
                          "emulinalg-lower-sum")  # fmt: skip
        need = da.blockwise(_cert_fallback_block, out, need1, out, fallback, (), lower, out,
                            *terms, token="emulinalg-certificate-fallback", q=q,
                            **cert_kw)  # fmt: skip
        count_args += [summarize(need, "emulinalg-cert-summary-final"), out + (p,)]
        if above:  # the entries the dtype's level takes natively (the same lower bounds)
            oterms = terms[:6] + [own_terms[0], rows + (p,), own_terms[1], cols + (p,)]
            okw = dict(cert_kw, target=own)
            own_need = da.blockwise(_cert_block, out, *oterms, token="emulinalg-own-cert", **okw)
            own_need = da.blockwise(_cert_fallback_block, out, own_need, out, fallback, (), lower,
                                    out, *oterms, token="emulinalg-own-cert-fallback", q=q,
                                    **okw)  # fmt: skip
            count_args += [summarize(own_need, "emulinalg-own-cert-summary"), out + (p,)]
    if arrays is not None:
        arrays.update(e=e, f=f, need=need)
        if certify:
            arrays.update(aterms=aterms, bterms=bterms, norm=norm)
    cfg = da.blockwise(
        _count_task,
        (),
        *count_args,
        dtype=object,
        concatenate=True,
        meta=np.empty((), object),
        token="emulinalg-count",
        fixed=fixed,
        level=request,
        real_name=real_name,
    )

    # Block indices of the output grid: the count task's per-block flags are looked up by them.
    grid = {d: a.numblocks[d] for d in bt}
    grid[i], grid[j] = a.numblocks[-2], b.numblocks[-1]
    grid[kk] = q
    index = {d: da.arange(nblk, chunks=1) for d, nblk in grid.items()}

    def ix(*axes):
        return [x for d in axes for x in (index[d], (d,))]

    if certify:  # certificate.certify_moduli's exact step, then (2-D only) its refinement
        cert = (need, lower, fallback, terms)
        cfg = _exact_graph(cfg, *cert, out, k=k, q=q, cplx=cplx, target=target)
        if nd == 2:
            cfg = _refine_graph(a, b, cfg, *cert, amb, bmb, ix, k=k, q=q, cplx=cplx,
                                target=target, split_every=split_every)  # fmt: skip
    shift_kw = {"dtype": np.int64, "concatenate": True, "token": "emulinalg-shifts", "cplx": cplx}
    mu = da.blockwise(_shift_task, rows, amb, rows + (p,), e, rows, cfg, (), **shift_kw,
                      meta=meta(len(rows), np.int64))  # fmt: skip
    nu = da.blockwise(_shift_task, cols, bmb, cols + (p,), f, cols, cfg, (), **shift_kw,
                      meta=meta(len(cols), np.int64))  # fmt: skip

    # 2. Residues once per chunk.
    with dask.annotate(**_CHUNKS):
        res_kw = {"dtype": object, "meta": obj(nd), "token": "emulinalg-residues", "cplx": cplx,
                  "k": k, "mode": mode}  # fmt: skip
        res_kw["align_arrays"] = False  # the index arrays' chunks are block counts
        ra = da.blockwise(_residues_chunk, ai, a, ai, mu, rows, cfg, (), *ix(*rows),
                          axis=-1, **res_kw)  # fmt: skip
        rb = da.blockwise(_residues_chunk, bi, b, bi, nu, cols, cfg, (), *ix(*cols),
                          axis=-2, **res_kw)  # fmt: skip
    # 3. Block products, added over K-blocks modulo each modulus.
    with dask.annotate(**_BLOCKS):
        prods = da.blockwise(
            _product_block,
            ai[:-1] + (kk, j),
            ra,
            ai,
            rb,
            bi,
            cfg,
            (),
            *ix(*out),
            adjust_chunks={kk: 1},
            dtype=object,
            concatenate=False,
            align_arrays=False,
            meta=obj(nd + 1),
            token="emulinalg-products",
        )
        wsum = k_sum(prods, _wsum, "emulinalg-wsum")
    # 4./5. One CRT per output block, and the native patch.
    # the native entries: above the dtype's level, those its own level does not certify (a
    # subset of the requested level's beyond entries, none where those are none)
    patch = [amb, rows + (p,), bmb, cols + (p,), own_need if above else need,
             out if certify else None, cfg, ()]  # fmt: skip
    fin_kw = {"dtype": dtype_name, "concatenate": True, "meta": meta(nd, dtype_name),
              "align_arrays": False, "dtype_name": dtype_name}  # fmt: skip
    # the engine refits the most cancelled entries of a product of the native form
    # (``_planner.refits``) and the certificate's patch (2-D products, ``refine_and_patch``)
    cancelled = certify and refit_form(request, k)
    refits = cancelled or (certify and nd == 2)
    if not refits:
        c = da.blockwise(_crt_block, out, wsum, out, mu, rows, nu, cols, *patch, *ix(*out),
                         token="emulinalg-crt", **fin_kw)  # fmt: skip
    else:
        c = _refit_graph(a, b, wsum, mu, nu, e, f, patch, ix, kchunks, fin_kw, k=k, cplx=cplx,
                         mode=mode, real_name=real_name, cancelled=cancelled)  # fmt: skip

    nbatch = math.prod(a.numblocks[:-2])
    ni, nj = a.numblocks[-2], b.numblocks[-1]
    chunks_a, chunks_b = nbatch * ni * q, nbatch * q * nj
    planes = "3n (3M)" if cplx else "n"
    how = (
        f"OzakiII(moduli={fixed}, mode={mode})" if fixed is not None
        else "the count of moduli from a certificate over the whole matrices (one count task)"
    )  # fmt: skip
    notes = [
        f"chunks: m {_fmt(a.chunks[-2])}, n {_fmt(b.chunks[-1])}, k {_fmt(kchunks)}",
        f"{q} K-block{'s' if q != 1 else ''}, {nbatch * ni * q * nj} block products, "
        f"split_every={split_every}",
        f"shared preprocessing: {how}; residues once per chunk ({chunks_a} + {chunks_b} "
        f"residue tasks, {planes} int8 planes per entry), {nbatch * ni * q * nj} modular block "
        f"products added mod m over K-blocks, one CRT per output block ({nbatch * ni * nj}): "
        "the in-core engine's product of the whole matrices (bit for bit for the same count; "
        "docs/dask.md)",
    ]
    if mode == "accurate":
        what = (
            "bound GEMM; the magnitude lower bound's GEMM blocks only if F's certificate "
            "leaves entries beyond"
            if certify else "bound GEMM"
        )  # fmt: skip
        notes.append(f"statistics: {nbatch * ni * q * nj} block tasks ({what})")
    if certify:
        notes.append(
            f"exact step (certificate.exact_passes): {nbatch * ni * nj} block tasks testing one "
            "modulus fewer with the exact shifts"
        )
    if certify and nd == 2:
        notes.append(
            f"refinement (refinement.refine_and_patch): up to {refinement.REFINE_STEPS} steps, one "
            f"modulus each, of {q} task{'s' if q != 1 else ''} of the suspects' dot products, "
            "working only when a few entries hold back one modulus fewer; one modulus fewer "
            f"also where at most {refinement.patch_limit(a.shape[-2], b.shape[-1])} still do (the "
            "patch, which ends the steps)"
        )
    if refits:
        what = [
            "the certificate's patch" if certify and nd == 2 else None,
            ("every entry (a small product)"
             if refit.refits_all(math.prod(a.shape[:-1]) * b.shape[-1], a.shape[-1])
             else f"the whole product's most cancelled entries (at most {refit.REFIT_ENTRIES})")
            if cancelled else None,
        ]  # fmt: skip
        notes.append(
            f"refit (refit.refit): {' and '.join(w for w in what if w)} recomputed with "
            f"{MAX_MODULI} moduli in one task, from their lines picked per chunk; the output "
            "blocks wait for it"
        )
    return c, notes


# --------------------------------------------------------------------------------------------
# Its tasks (run on the workers, on numpy or cupy chunks)
# --------------------------------------------------------------------------------------------


def _xp_backend(x):
    import array_api_compat

    from .. import for_namespace

    xp = array_api_compat.array_namespace(x)
    return xp, for_namespace(xp)


def _finite_parts(xp, x):
    """float64 real/imaginary parts with NaN/Inf entries zeroed (as the engine computes its
    statistics and products), and the elementwise finiteness."""
    re, im = operands.parts(xp, x)
    ok = xp.isfinite(re) if im is None else xp.isfinite(re) & xp.isfinite(im)
    if not bool(xp.all(ok)):
        re, im = operands.zero_nonfinite(xp, re, im)
    return re, im, ok


def _line_exponent(xp, lines):
    """floor(log2 max |x|) per line (0 for zero lines) from the lines' [max, bad] stats: the
    engine's ``max_exponent`` of the whole line (the max over K-chunks is the line's max)."""
    return max_exponent(xp, xp.expand_dims(lines[..., 0], axis=-1), None, axis=-1)


def _line_stats(x, axis):
    """[max magnitude, has NaN/Inf] per line of one chunk (A: axis -1, B: axis -2), with a
    size-1 K axis: (..., m, 1, 2) for A, (..., 1, n, 2) for B."""
    xp, backend = _xp_backend(x)
    with _chunk_quiet(xp, backend):
        re, im, ok = _finite_parts(xp, x)
        mx = xp.max(magnitude(xp, re, im), axis=axis)
        bad = xp.astype(~xp.all(ok, axis=axis), xp.float64)
        return xp.expand_dims(xp.stack([mx, bad], axis=-1), axis=-2 if axis == -1 else -3)


def _bound_chunk(x, lines, axis, cplx):
    """int8 ``Ā = floor(2**(s+1) |x|)`` (entries <= 127, ``scaling.bound_operand``) with the
    global prescale shift s = 5 - e - cplx."""
    xp, backend = _xp_backend(x)
    with _chunk_quiet(xp, backend):
        re, im, _ = _finite_parts(xp, x)
        s = 5 - _line_exponent(xp, lines) - int(cplx)
        return xp.astype(bound_operand(xp, re, im, s, axis)[0], xp.int8)


def _line_terms(x, lines, axis, cplx, norm):
    """Partial line terms of one chunk, (..., m, 1, 2 to 4) for A, (..., 1, n, .) for B: the
    sum of Ā and the count of nonzero parts (``scaling.bound_operand``'s, exact integers, so
    their K-sums are the whole lines'), and with ``norm`` ("l1" or "l2", the certificate's)
    the partial sum of ``certificate.line_norm`` on the normalized line (of |Re| + |Im|, or of
    its squares; finished by ``_line_norms``) and, complex, ``scaling.mixed_lines``."""
    xp, backend = _xp_backend(x)
    with _chunk_quiet(xp, backend):
        re, im, _ = _finite_parts(xp, x)
        s = 5 - _line_exponent(xp, lines) - int(cplx)
        _, sums, nz = bound_operand(xp, re, im, s, axis)
        terms = [sums, nz]
        if norm is not None:
            if im is not None:  # entries with both parts nonzero: certificate.bound_lower
                mixed = xp.astype(mixed_lines(xp, re, im, axis), sums.dtype)
            re, im = _normalized(xp, re, im, lines, axis)
            v = xp.abs(re) if im is None else xp.abs(re) + xp.abs(im)
            terms.append(xp.sum(v if norm == "l1" else v * v, axis=axis))
            if im is not None:
                terms.append(mixed)
        return xp.expand_dims(xp.stack(terms, axis=-1), axis=-2 if axis == -1 else -3)


def _sq_chunk(x, lines, axis, cplx):
    """The fast mode's partial sums of squares at the global shift (``_sqnorm_bound`` without
    its rounding factor, applied to the total)."""
    xp, backend = _xp_backend(x)
    with _chunk_quiet(xp, backend):
        re, im, _ = _finite_parts(xp, x)
        s = xp.expand_dims(5 - _line_exponent(xp, lines) - int(cplx), axis=axis)
        v = ldexp(xp, xp.abs(re), s)
        if im is not None:
            v = v + ldexp(xp, xp.abs(im), s)
        return xp.sum(v * v, axis=axis, keepdims=True)


def _normalized(xp, re, im, lines, axis):
    ea = xp.expand_dims(_line_exponent(xp, lines), axis=axis)
    return ldexp(xp, re, -ea), None if im is None else ldexp(xp, im, -ea)


def _normmag_chunk(x, lines, fallback, axis):
    """Magnitudes normalized by the global line exponents, truncated to float32 (what
    ``certificate.magnitude_lower`` multiplies): 4 bytes per entry; None when the bound GEMM's
    certificate left no entry beyond (``fallback`` False)."""
    if not fallback:
        return None
    xp, backend = _xp_backend(x)
    with _chunk_quiet(xp, backend):
        re, im, _ = _finite_parts(xp, x)
        re, im = _normalized(xp, re, im, lines, axis)
        return certificate.down_to_float32(xp, magnitude(xp, re, im))


def _gemm_operand(xp, backend, x):
    """int8 planes as ``backend.int_matmul`` takes them: as they are for cupy (its GEMM reads
    int8), integer-valued float64 otherwise (the numpy/AMX contract)."""
    return x if backend.name == "cupy" else xp.astype(x, xp.float64)


def _bound_block(xa, xb):
    """One block of the accurate-mode bound GEMM F = Ā B̄ (exact integers), (..., m, 1, n)."""
    xp, backend = _xp_backend(xa)
    c = backend.int_matmul(
        _gemm_operand(xp, backend, xa), _gemm_operand(xp, backend, xb), BOUND_MAX * BOUND_MAX
    )
    return xp.expand_dims(xp.astype(c, xp.float64), axis=-2)


def _upper_block(F, aterms, bterms, cplx):
    """U = ``scaling.bound_upper`` of one output block from the K-summed F and line terms
    (exact integers: the engine's U, so max U / 4 gives its e and f)."""
    xp, _ = _xp_backend(F)
    return bound_upper(xp, F, aterms[..., 0], aterms[..., 1], bterms[..., 0], bterms[..., 1], cplx)


def _lower_block(ma, mb):
    """``{"lam": certificate.magnitude_lower of one block triple's normalized magnitudes (a lower
    bound of |A_k||B_k|), (..., m, n)}``, the K axis implied; lam None when not needed."""
    if ma is None:
        return {"lam": None}
    xp, backend = _xp_backend(ma)
    with _chunk_quiet(xp, backend):
        lam = certificate.magnitude_lower(
            xp, backend, xp.astype(ma, xp.float64), xp.astype(mb, xp.float64)
        )
    return {"lam": lam}


def _lsum(parts, axis=None, keepdims=False, computing_meta=False, **kwargs):
    """K-block partials ``{key: float64 array or None}`` added in float64 (the caller's factor
    covers the rounding: all terms are >= 0); None stays None (nothing was computed)."""
    parts = [x for x in _flatten(parts) if isinstance(x, dict)]
    if computing_meta or not parts:  # dask asking for the meta
        return np.empty((0,) * 2, dtype=object)
    out = dict(parts[0])
    for key, v in out.items():
        if v is not None:
            for x in parts[1:]:
                v = v + x[key]
            out[key] = v
    return out


def _line_norms(xp, aterms, bterms, k, norm):
    """na (..., m, 1), nb (..., 1, n): ``certificate.line_norm``'s bounds finished from the
    K-summed partials (of non-negative terms: any order of the sums has the error bound that
    ``l1fac`` covers)."""
    fac = certificate.cert_constants(k).l1fac

    def finish(v):
        return v * fac if norm == "l1" else xp.sqrt(v * fac) * (1.0 + 2.0**-52)

    return (xp.expand_dims(finish(aterms[..., 2]), axis=-1),
            xp.expand_dims(finish(bterms[..., 2]), axis=-2))  # fmt: skip


def _lam(xp, F, fallback, low, q, cplx, aterms, bterms):
    """The lower bound of the normalized |A||B| of one output block: F's bound (with the lines'
    mixed counts for complex), and with the second pass (``fallback``) the larger of it and the
    K-summed magnitude lower bound ``low`` (``certificate.certify_moduli``'s lam)."""
    mixed = (aterms[..., 3], bterms[..., 3]) if cplx else None
    lam = certificate.bound_lower(xp, F, cplx, mixed)
    if not fallback:
        return lam
    gl = low["lam"]
    if q > 1:  # q float sums of lower bounds: (q - 1) u relative at most
        gl = gl * (1.0 - q * 2.0**-52)
    return xp.maximum(lam, gl)


def _block_terms(xp, F, fallback, low, q, cplx, aterms, bterms, k, target):
    """The certificate's terms of one output block: ``(cc, lam, na, nb)``, the constants of
    ``certificate.cert_constants`` for the whole k, the lower bound of the normalized |A||B|
    (``_lam``) and the whole lines' norms in the form the target asks."""
    cc = certificate.cert_constants(k, target, cplx)
    lam = _lam(xp, F, fallback, low, q, cplx, aterms, bterms)
    na, nb = _line_norms(xp, aterms, bterms, k, cc.norm)
    return cc, lam, na, nb


def _certified_need(xp, F, fallback, low, q, e, f, aterms, bterms, k, cplx, target):
    """The count each entry of one output block needs (``certificate.ozaki2_needed``) from its
    lower bound of the normalized |A||B| and the whole-matrix terms of its rows and columns."""
    cc, lam, na, nb = _block_terms(xp, F, fallback, low, q, cplx, aterms, bterms, k, target)
    return certificate.ozaki2_needed(xp, cc, cc.cR * lam, na, nb, e, f)


def _cert_block(F, e, f, aterms, bterms, k, cplx, target):
    """The needed count per entry of one output block with the bound GEMM's lower bound alone
    (``certificate.bound_lower``: exact, the engine's first pass)."""
    xp, backend = _xp_backend(F)
    with _chunk_quiet(xp, backend):
        return _certified_need(xp, F, False, None, 1, e, f, aterms, bterms, k, cplx, target)


def _fallback_task(summary):
    """Whether any entry of the whole product is beyond with F's bound alone: the engine's
    condition for its ``magnitude_lower`` pass."""
    return bool((np.asarray(summary)[..., 1] > 0).any())


def _cert_fallback_block(need, fallback, low, F, e, f, aterms, bterms, k, q, cplx, target):
    """The final needed counts of one output block: the first pass's where no entry of the
    whole product was beyond, else with lam = max(F's bound, the K-summed magnitude lower
    bound) per entry (``certificate.ozaki2_moduli_needed``'s second pass)."""
    if not fallback:
        return need
    xp, backend = _xp_backend(F)
    with _chunk_quiet(xp, backend):
        return _certified_need(xp, F, fallback, low, q, e, f, aterms, bterms, k, cplx, target)


def _beyond(xp, need):
    return need == certificate.BEYOND


def _cert_summary(need):
    """[largest need over certifiable entries (0: none), any beyond, all beyond] of one output
    block, as a host array of shape (1, ..., 1, 3)."""
    xp, _ = _xp_backend(need)
    beyond = _beyond(xp, need)
    top = int(xp.max(xp.where(beyond, 0, need)))
    out = np.array([top, float(bool(xp.any(beyond))), float(bool(xp.all(beyond)))])
    return out.reshape((1,) * need.ndim + (3,))


def _any_bad(lines):
    """Whether a block of lines holds NaN/Inf, as a host array of shape (1, ..., 1)."""
    xp, _ = _xp_backend(lines)
    return np.full((1,) * (lines.ndim - 1), bool(xp.any(lines[..., 1] > 0)))


def _count_task(abad, bbad, summary=None, own=None, *, fixed, level, real_name):
    """The one count task: ``{"count": n (0: none, every entry native), "mask": whether the
    certificate's beyond entries are native, "need": per output block, whether any entry is
    taken from the native product, "certified": whether the count is the certificate's (its
    exact step and refinement may then take moduli off), "refining": the same, for the
    refinement's steps (``_refine_task`` clears it where the engine's loop stops), "patch":
    None (the refinement's patch, ``_refine_task``)}`` -- ``_planner.settle`` on the whole
    matrices' certificate (before its exact step); ``own`` the summary of the dtype's own level
    (levels above it)."""
    abad = np.asarray(abad, dtype=bool)  # (batch blocks..., I)
    bbad = np.asarray(bbad, dtype=bool)  # (batch blocks..., J)
    lines = abad[..., :, None] | bbad[..., None, :]

    def decision(count, mask, need, certified=False):
        return {"count": count, "mask": mask, "need": need, "certified": certified,
                "refining": certified, "patch": None}  # fmt: skip

    if fixed is not None:
        return decision(int(fixed), False, lines)
    summary = np.asarray(summary)  # (batch blocks..., I, J, 3)
    any_beyond = summary[..., 1] > 0
    all_beyond = bool((summary[..., 2] > 0).all())
    own_all = False
    if needs_own_level(level, real_name, any_beyond.any()):
        own = np.asarray(own)
        own_all = bool((own[..., 2] > 0).all())
    count = None if all_beyond else int(summary[..., 0].max())
    settled = settle(
        level, "ozaki2", real_name, count, all_beyond, bool(any_beyond.any()), own_all
    )
    if settled.count is None:  # nothing certifiable: the native product
        return decision(0, True, np.ones_like(lines))
    if settled.native == "own":
        return decision(settled.count, True, lines | (own[..., 1] > 0))
    return decision(settled.count, True, lines | any_beyond, True)


def _exact_runs(cfg):
    """Whether ``certificate.certify_moduli`` tests one modulus fewer at this decision."""
    return cfg["certified"] and cfg["count"] > MIN_MODULI


def _refine_runs(cfg):
    """Whether ``refinement.refine_and_patch``'s loop takes a step at this decision."""
    return cfg["refining"] and cfg["count"] > MIN_MODULI


def _exact_fails(xp, need, count, low, fallback, F, e, f, aterms, bterms, k, q, cplx, target):
    """``(fail, lam, na, nb)`` of one output block: the certifiable entries that ``count``
    moduli do not certify with the exact shifts (``certificate.exact_passes``), and the terms."""
    cc, lam, na, nb = _block_terms(xp, F, fallback, low, q, cplx, aterms, bterms, k, target)
    ok = certificate.exact_passes(xp, cc, count, cc.cR * lam, na, nb, e, f)
    return ~ok & ~_beyond(xp, need), lam, na, nb


# The exact step over blocks: per output block how many certifiable entries fail one modulus
# fewer with the exact shifts, and one task taking that count where none does.


def _exact_block(need, cfg, low, fallback, F, e, f, aterms, bterms, *, k, q, cplx, target):
    """The number of failures at the count task's count - 1 of one output block, as a host
    array of shape (1, ..., 1); -1 where the exact step does not run."""
    n = -1
    if _exact_runs(cfg):
        xp, backend = _xp_backend(need)
        with _chunk_quiet(xp, backend):
            fail, *_ = _exact_fails(xp, need, cfg["count"] - 1, low, fallback, F, e, f, aterms,
                                    bterms, k, q, cplx, target)  # fmt: skip
            n = int(xp.count_nonzero(fail))
    return np.full((1,) * need.ndim, n, dtype=np.int64)


def _exact_task(cfg, fails):
    """The count task's decision, one modulus fewer where no output block has a failure."""
    if _exact_runs(cfg) and not bool((np.asarray(fails) != 0).any()):
        return dict(cfg, count=cfg["count"] - 1)
    return cfg


def _exact_graph(cfg, need, lower, fallback, terms, out, *, k, q, cplx, target):
    """The tasks of the exact step: the decision ``cfg`` of the count task, after the step,
    as a 0-d object array."""
    import dask.array as da

    fails = da.blockwise(_exact_block, out, need, out, cfg, (), lower, out, fallback, (), *terms,
                         adjust_chunks={d: 1 for d in out}, dtype=np.int64, concatenate=True,
                         meta=np.empty((0,) * len(out), np.int64),
                         token="emulinalg-exact-block", k=k, q=q, cplx=cplx,
                         target=target)  # fmt: skip
    return da.blockwise(_exact_task, (), cfg, (), fails, out, dtype=object, concatenate=True,
                        meta=np.empty((), object), token="emulinalg-exact")  # fmt: skip


# The suspect refinement (``refinement.refine_and_patch``) over blocks, 2-D products only: after
# the exact step, per step of the engine's loop (``REFINE_STEPS``, one set of tasks each), the
# entries that fail one modulus fewer (per output block), one task applying the suspects' limit
# to the whole product and taking its sample, the sampled suspects' rows of A and columns of B
# per chunk (normalized by the global line exponents), their dot products (and sums of squares)
# per K-block summed over K-blocks, and one task deciding the count (and whether the loop goes
# on) and the patch (the suspects that still fail, recomputed by the refit's tasks). Every task
# returns at once when its step does not run (None).


def _suspects_limit(target):
    """The most suspects ``certificate.certify_moduli`` refines (the native form samples them)."""
    return refinement.SUSPECTS_MAX if target.guarantee == "native" else refinement.REFINE_ENTRIES


def _suspects_block(need, cfg, low, fallback, F, e, f, aterms, bterms, *ix, k, q, cplx, target,
                    row0, col0):  # fmt: skip
    """The entries of one output block that fail the count - 1 with the exact shifts
    (``certificate.certify_moduli``'s suspects): ``{"n": how many, "rows", "cols": their global
    indices, "terms": [lam, na, nb, e, f] per entry}`` (only "n" when there are too many for
    the whole product anyway); None when the refinement does not run at this decision."""
    if not _refine_runs(cfg):
        return None
    xp, backend = _xp_backend(need)
    with _chunk_quiet(xp, backend):
        fail, lam, na, nb = _exact_fails(xp, need, cfg["count"] - 1, low, fallback, F, e, f,
                                         aterms, bterms, k, q, cplx, target)  # fmt: skip
        total = int(xp.count_nonzero(fail))
        if total > _suspects_limit(target):
            return {"n": total}
        r, c = xp.nonzero(fail)
        lam = xp.take(xp.reshape(lam, (-1,)), r * need.shape[-1] + c)
        terms = xp.stack([lam, xp.take(na[:, 0], r), xp.take(nb[0, :], c),
                          xp.take(e, r), xp.take(f, c)])  # fmt: skip
    bi, bj = _block_index(ix)
    return {"n": total, "rows": r + row0[bi], "cols": c + col0[bj], "terms": terms}


def _refine_select(sus, *, n, target):
    """The whole product's suspects in flat order and the sample ``refinement.refine_sample``
    takes of them, or None where there are too many (``_suspects_limit``) or the refinement
    does not run: ``{"n": how many, "idx": their flat indices, "terms": [lam, na, nb, e, f] per
    suspect, "pick": the sample's positions, "rows", "cols": the sample's distinct rows and
    columns (sorted), "ri", "ci": each sampled suspect's position in them}`` (only "n" when it
    is 0: then one modulus fewer, as ``refine_and_patch`` decides)."""
    parts = [x for x in _flatten(sus) if x is not None]
    if not parts or sum(x["n"] for x in parts) > _suspects_limit(target):
        return None
    parts = [x for x in parts if x["n"]]
    if not parts:
        return {"n": 0}
    xp, _ = _xp_backend(parts[0]["rows"])
    rows = xp.concat([x["rows"] for x in parts])
    cols = xp.concat([x["cols"] for x in parts])
    flat = rows * n + cols
    order = xp.argsort(flat)  # the engine's flat order: the sample and the patch depend on it
    terms = xp.take(xp.concat([x["terms"] for x in parts], axis=1), order, axis=1)
    pick = refinement.refine_sample(xp, int(rows.shape[0]))
    rows, cols = xp.take(xp.take(rows, order), pick), xp.take(xp.take(cols, order), pick)
    ur, uc = xp.sort(xp.unique_values(rows)), xp.sort(xp.unique_values(cols))
    return {"n": int(order.shape[0]), "idx": xp.take(flat, order), "terms": terms,
            "pick": pick, "rows": ur, "cols": uc, "ri": xp.searchsorted(ur, rows),
            "ci": xp.searchsorted(uc, cols)}  # fmt: skip


def _refine_lines(x, lines, sel, *ix, axis, starts):
    """The suspects' rows of one A chunk (``axis`` -1) or columns of one B chunk (-2): their
    magnitudes normalized by the global line exponents, in float64 (``refinement.suspect_sums``'
    operands, restricted to the chunk); None without refinement."""
    if sel is None or not sel["n"]:
        return None
    xp, backend = _xp_backend(x)
    blk = _block_index(ix)[0]
    lo, hi = starts[blk], starts[blk + 1]
    u = sel["rows" if axis == -1 else "cols"]
    local = u[(u >= lo) & (u < hi)] - lo  # sorted: the pieces concatenate in u's order
    with _chunk_quiet(xp, backend):
        re, im, _ = _finite_parts(xp, xp.take(x, local, axis=-2 if axis == -1 else -1))
        ea = xp.expand_dims(_line_exponent(xp, xp.take(lines, local, axis=0)), axis=axis)
        return ldexp(xp, magnitude(xp, re, im), -ea)


def _refine_sums(pa, pb, sel, *, squares):
    """``{"S", "S2"}`` of one K-block: per suspect the sum of its normalized magnitude products
    over the block and (``squares``) of their squares, ``refinement.suspect_sums``' operations
    (the pieces of every row and column block concatenated in order); None without
    refinement. Non-negative terms: the K-blocks' sums added in any order keep its bounds."""
    pa, pb = _flatten(pa), _flatten(pb)
    if pa[0] is None:
        return {"S": None, "S2": None}
    xp, backend = _xp_backend(pa[0])
    with _chunk_quiet(xp, backend):
        xa, xb = xp.concat(pa, axis=0), xp.permute_dims(xp.concat(pb, axis=1), (1, 0))
        ri, ci = sel["ri"], sel["ci"]
        step = max(1, (1 << 22) // max(xa.shape[-1], 1))  # suspect_sums' memory bound
        S, S2 = [], []
        for t0 in range(0, ri.shape[0], step):
            x = xp.take(xa, ri[t0 : t0 + step], axis=0) * xp.take(xb, ci[t0 : t0 + step], axis=0)
            S.append(xp.sum(x, axis=-1))
            if squares:
                S2.append(xp.sum(x * x, axis=-1))
        return {"S": xp.concat(S), "S2": xp.concat(S2) if squares else None}


def _refine_task(cfg, sel, sums, *, k, cplx, target, m, n):
    """The decision after one step of ``refinement.refine_and_patch``'s loop on the (m, n)
    product: one modulus fewer where no suspect fails it with its larger lower bound
    (``refinement.refine_failures``), and the loop goes on; one fewer where at most
    ``refinement.patch_limit(m, n)`` do, with ``"patch"`` their flat indices (ascending, on the
    host) for the refit's tasks, and the loop stops; else the same count, and it stops."""
    if not _refine_runs(cfg):
        return cfg
    if sel is None:  # too many suspects
        return dict(cfg, refining=False)
    if not sel["n"]:
        return dict(cfg, count=cfg["count"] - 1)
    xp, backend = _xp_backend(sums["S"])
    with _chunk_quiet(xp, backend):
        lam, na, nb, e, f = (sel["terms"][t] for t in range(5))
        fail = refinement.refine_failures(xp, k, target, cplx, cfg["count"], lam, sums["S"], e, f,
                                       na, nb, sums["S2"], sel["pick"])  # fmt: skip
        failing = int(xp.count_nonzero(fail))
        if failing == 0:
            return dict(cfg, count=cfg["count"] - 1)
        if failing <= refinement.patch_limit(m, n):
            patch = _host(xp.take(sel["idx"], xp.nonzero(fail)[0]))
            return dict(cfg, count=cfg["count"] - 1, refining=False, patch=patch)
    return dict(cfg, refining=False)


def _refine_graph(a, b, cfg, need, lower, fallback, terms, amb, bmb, ix, *, k, q, cplx, target,
                  split_every):  # fmt: skip
    """The tasks of the suspect refinement of a 2-D product (above), one set per step of
    ``refinement.refine_and_patch``'s loop (named with the step, 1 to ``REFINE_STEPS``, e.g.
    ``emulinalg-refine-1``): the decision ``cfg`` of the exact step, refined, as a 0-d object
    array."""
    import dask
    import dask.array as da

    i, kk, j, p = 0, 1, 2, 3
    ai, bi, out = (i, kk), (kk, j), (i, j)

    def obj(ndim):
        return np.empty((0,) * ndim, dtype=object)

    def starts(chunks):  # first global index of each block
        return tuple(int(v) for v in np.cumsum((0,) + tuple(chunks)))

    kw = {"dtype": object, "align_arrays": False}  # the index arrays' chunks are block counts
    for step in range(1, refinement.REFINE_STEPS + 1):
        sus = da.blockwise(_suspects_block, out, need, out, cfg, (), lower, out, fallback, (),
                           *terms, *ix(i, j), concatenate=True, meta=obj(2),
                           token=f"emulinalg-suspects-{step}", k=k, q=q, cplx=cplx,
                           target=target, row0=starts(a.chunks[-2]), col0=starts(b.chunks[-1]),
                           **kw)  # fmt: skip
        sel = da.blockwise(_refine_select, (), sus, out, dtype=object, concatenate=False,
                           meta=obj(0), token=f"emulinalg-refine-select-{step}", n=b.shape[-1],
                           target=target)  # fmt: skip
        with dask.annotate(**_CHUNKS):
            line_kw = {"concatenate": True, "meta": obj(2),
                       "token": f"emulinalg-refine-lines-{step}", **kw}  # fmt: skip
            pa = da.blockwise(_refine_lines, ai, a, ai, amb, (i, p), sel, (), *ix(i), axis=-1,
                              starts=starts(a.chunks[-2]), **line_kw)  # fmt: skip
            pb = da.blockwise(_refine_lines, bi, b, bi, bmb, (j, p), sel, (), *ix(j), axis=-2,
                              starts=starts(b.chunks[-1]), **line_kw)  # fmt: skip
        with dask.annotate(**_BLOCKS):
            partial = da.blockwise(_refine_sums, (kk,), pa, ai, pb, bi, sel, (), dtype=object,
                                   concatenate=False, meta=obj(1),
                                   token=f"emulinalg-refine-sums-{step}",
                                   squares=target.guarantee == "native")  # fmt: skip
            S = da.reduction(partial, _identity, _lsum, combine=_lsum, axis=0, keepdims=False,
                             dtype=object, split_every=split_every, concatenate=False,
                             meta=obj(0), name=f"emulinalg-refine-sum-{step}")  # fmt: skip
        cfg = da.blockwise(_refine_task, (), cfg, (), sel, (), S, (), dtype=object, meta=obj(0),
                           token=f"emulinalg-refine-{step}", k=k, cplx=cplx, target=target,
                           m=a.shape[-2], n=b.shape[-1])  # fmt: skip
    return cfg


def _refit_graph(a, b, wsum, mu, nu, e, f, patch, ix, kchunks, fin_kw, *, k, cplx, mode,
                 real_name, cancelled):  # fmt: skip
    """The CRT and the refit (``refit.refit``; the tasks below ``_crt_block``) of the certificate's
    patch and, with ``cancelled`` (the engine's ``_refits`` but for the count), the most
    cancelled entries, then the native patch: the product as a dask array. Without
    ``cancelled`` the pick needs no output block: it waits for the decision alone."""
    import dask
    import dask.array as da

    nd = a.ndim
    bt = tuple(range(nd - 2))
    i, kk, j, p = nd - 2, nd - 1, nd, nd + 1
    rows, cols, out = bt + (i,), bt + (j,), bt + (i, j)
    shape = a.shape[:-1] + (b.shape[-1],)
    batch = a.shape[:-2]

    def obj(ndim):
        return np.empty((0,) * ndim, dtype=object)

    def starts(chunks):  # first global index of each block, per axis
        return tuple(tuple(int(v) for v in np.cumsum((0,) + tuple(c))) for c in chunks)

    out_starts = starts(a.chunks[:-1] + (b.chunks[-1],))
    kw = {"dtype": object, "concatenate": True, "align_arrays": False}
    amb, _, bmb, _, need, _, cfg, _ = patch
    emul = da.blockwise(_crt_emulated, out, wsum, out, mu, rows, nu, cols, cfg, (),
                        meta=obj(nd), token="emulinalg-crt", dtype_name=fin_kw["dtype_name"],
                        **kw)  # fmt: skip
    cands = []
    every = refit.refits_all(math.prod(shape), a.shape[-1])  # small: every entry
    if cancelled:
        cands = [da.blockwise(_refit_candidates, out, emul, out, amb, rows + (p,), bmb,
                              cols + (p,), e, rows, f, cols, need, out, cfg, (), *ix(*out),
                              meta=obj(nd), token="emulinalg-refit-candidates", cplx=cplx,
                              starts=out_starts, shape=shape, every=every, **kw), out]  # fmt: skip
    sel = da.blockwise(_refit_select, (), cfg, (), *cands, dtype=object, concatenate=False,
                       meta=obj(0), token="emulinalg-refit-select", m=shape[-2], n=shape[-1],
                       every=every, cancelled=cancelled)  # fmt: skip
    line_kw = {"cplx": cplx, "batch": batch, "token": "emulinalg-refit-lines", **kw}
    with dask.annotate(**_CHUNKS):
        pa = da.blockwise(_refit_lines, bt + (i, kk), a, bt + (i, kk), amb, rows + (p,), e, rows,
                          sel, (), *ix(*bt, i, kk), meta=obj(nd), axis=-1, size=shape[-2],
                          starts=starts(a.chunks[:-1] + (kchunks,)), **line_kw)  # fmt: skip
        pb = da.blockwise(_refit_lines, bt + (kk, j), b, bt + (kk, j), bmb, cols + (p,), f, cols,
                          sel, (), *ix(*bt, j, kk), meta=obj(nd), axis=-2, size=shape[-1],
                          starts=starts(b.chunks[:-2] + (b.chunks[-1], kchunks)),
                          **line_kw)  # fmt: skip
    vals = da.blockwise(_refit_entries, (), pa, bt + (i, kk), pb, bt + (kk, j), sel, (),
                        dtype=object, concatenate=False, meta=obj(0),
                        token="emulinalg-refit", k=k, mode=mode, real_name=real_name)  # fmt: skip
    return da.blockwise(_final_block, out, emul, out, *patch[:6], cfg, (), vals, (), *ix(*out),
                        token="emulinalg-final", starts=out_starts, shape=shape,
                        **fin_kw)  # fmt: skip


def _shift_task(lines, bound, cfg, cplx):
    """mu (or nu) of ``scaling.ozaki2_shifts``: s + the largest t with bound * 4**t <= Q."""
    xp, _ = _xp_backend(lines)
    s = 5 - _line_exponent(xp, lines) - int(cplx)
    if not cfg["count"]:
        return s
    c = crt_constants(cfg["count"])
    return s + half_log_shift(xp, c.L, c.Q_down, bound)


def _block_index(ix):
    return tuple(int(v[0]) for v in ix)


def _residues_chunk(x, shift, cfg, *ix, axis, cplx, k, mode):
    """``{"planes": int8 (n, 1 or 3, ..., rows, cols), "raw": the chunk or None}``: the
    residues of the scaled chunk for every modulus (shared by every block product that reads
    the chunk), and the chunk itself when a block product of its row (column) block needs the
    native product. The scaled chunk is rounded as ``products.product`` rounds the whole
    operand (``scaling.rounds_to_nearest`` of the whole inner dimension ``k``)."""
    xp, backend = _xp_backend(x)
    where = _block_index(ix)
    need = cfg["need"][where] if axis == -1 else cfg["need"][where[:-1] + (slice(None), where[-1])]
    out = {"planes": None, "raw": x if bool(np.any(need)) else None}
    n = cfg["count"]
    if n:
        with _chunk_quiet(xp, backend):
            re, im, _ = _finite_parts(xp, x)
            near = rounds_to_nearest(n, k, mode)
            Xr = residues.split(xp, scale_to_integers(xp, re, shift, axis, near))
            Xi = residues.split(xp, scale_to_integers(xp, im, shift, axis, near))
            out["planes"] = xp.stack([
                xp.stack([xp.astype(r, xp.int8) for r in residues.residues(xp, Xr, Xi, m)])
                for m in crt_constants(n).moduli
            ])  # fmt: skip
    return out


def _product_block(ra, rb, cfg, *ix):
    """``{"W": int8 (n, parts, ..., m_i, n_j) residues of A_ik B_kj mod each m_l, "nat": the
    native block product or None}`` with a size-1 K axis implied (the reduction drops it)."""
    need = bool(cfg["need"][_block_index(ix)])
    n = cfg["count"]
    out = {"W": None, "nat": None}
    x = ra["raw"] if ra["planes"] is None else ra["planes"]
    xp, backend = _xp_backend(x)
    with _chunk_quiet(xp, backend):
        if n:
            pa, pb = ra["planes"], rb["planes"]
            W = []
            for ell, m in enumerate(crt_constants(n).moduli):
                planes_a = tuple(_gemm_operand(xp, backend, pa[ell, t]) for t in range(pa.shape[1]))
                planes_b = tuple(_gemm_operand(xp, backend, pb[ell, t]) for t in range(pb.shape[1]))
                w = products.modular_products(xp, backend.int_matmul, planes_a, planes_b, m)
                W.append(xp.stack([xp.astype(v, xp.int8) for v in w]))
            out["W"] = xp.stack(W)
        if need:
            out["nat"] = backend.native_matmul(ra["raw"], rb["raw"])
    return out


def _wsum(parts, axis=None, keepdims=False, computing_meta=False, **kwargs):
    """Partial products of K-blocks added: residues modulo each m_l (exact small integers, kept
    in the symmetric range as int8), native block products as plain sums."""
    parts = [x for x in _flatten(parts) if isinstance(x, dict)]
    if computing_meta or not parts:  # dask asking for the meta
        return np.empty((0,) * 2, dtype=object)
    out = dict(parts[0])
    if len(parts) > 1:
        W = parts[0]["W"]
        if W is not None:
            xp, _ = _xp_backend(W)
            total = xp.astype(W, xp.int32)
            for x in parts[1:]:
                total = total + xp.astype(x["W"], xp.int32)
            mods = crt_constants(W.shape[0]).moduli
            m = xp.reshape(xp.asarray(mods, dtype=xp.int32), (-1,) + (1,) * (W.ndim - 1))
            r = xp.remainder(total, m)  # in [0, m)
            out["W"] = xp.astype(xp.where(r > (m - 1) // 2, r - m, r), xp.int8)
        if parts[0]["nat"] is not None:
            nat = parts[0]["nat"]
            xp, backend = _xp_backend(nat)
            with _chunk_quiet(xp, backend):  # inf - inf is NaN, as in the native product
                for x in parts[1:]:
                    nat = nat + x["nat"]
            out["nat"] = nat
    return out


def _crt_out(xp, w, mu, nu, cfg, dtype_name):
    """The emulated values of one output block (None when nothing is emulated): the exact CRT
    of its K-summed residues (the engine's limb accumulation and ``crt.reconstruct``),
    unscaled and rounded once to the result dtype."""
    n = cfg["count"]
    if not n:
        return None
    c = crt_constants(n)
    W = w["W"]
    nparts = W.shape[1]
    limbs, quotient = crt.accumulators(xp, c, W.shape[2:], nparts)
    for ell in range(n):
        crt.accumulate(xp, c, limbs, quotient, ell, [W[ell, t] for t in range(nparts)])
    parts = crt.reconstruct(xp, c, limbs, quotient, mu, nu, REAL_DTYPE[dtype_name])
    dt = getattr(xp, dtype_name)
    return parts[0] if nparts == 1 else make_complex(xp, parts[0], parts[1], dt)


def _native_patch(xp, out, nat, amb, bmb, need, cfg, where):
    """``out`` with the native entries of output block ``where`` patched in (beyond the
    certificate, or in rows/columns with NaN/Inf)."""
    if not bool(cfg["need"][where]):
        return out
    if out is None:
        return nat
    mask = xp.expand_dims(amb[..., 1] > 0, axis=-1) | xp.expand_dims(bmb[..., 1] > 0, axis=-2)
    if cfg["mask"] and need is not None:
        mask = mask | _beyond(xp, need)
    return xp.where(mask, nat, out)


def _crt_block(w, mu, nu, amb, bmb, need, cfg, *ix, dtype_name):
    """One output block: the emulated values (``_crt_out``) with the native entries patched in."""
    xp, backend = _xp_backend(mu)
    with _chunk_quiet(xp, backend):
        out = _crt_out(xp, w, mu, nu, cfg, dtype_name)
        return _native_patch(xp, out, w["nat"], amb, bmb, need, cfg, _block_index(ix))


# The refit (``refit.refit``) of the certificate's patch and of the most cancelled entries (the
# native form's levels): the CRT per output block keeps its emulated values, per output block
# the entries the whole product's pick can take there, one task picking them and adding the
# patch, per chunk the picked entries' rows of A (columns of B), one task recomputing the
# entries with MAX_MODULI moduli (``products.entries`` on their whole lines), and per output
# block the values with those entries and the native ones patched in. The tasks return at once
# where the refit does not run (None).


def _crt_emulated(w, mu, nu, cfg, *, dtype_name):
    """``{"out": one output block's emulated values (``_crt_out``), "nat": its native block
    product or None}``, for the refit before the native patch."""
    xp, backend = _xp_backend(mu)
    with _chunk_quiet(xp, backend):
        return {"out": _crt_out(xp, w, mu, nu, cfg, dtype_name), "nat": w["nat"]}


def _refit_runs(cfg):
    """Whether the in-core engine refits a level's most cancelled entries at this decision
    (``_planner.refit_count``; the form is checked at build, ``_planner.refit_form``)."""
    return refit_count(cfg["count"])


def _host(x):
    """A small device array on the host (numpy arrays as they are)."""
    return x.get() if hasattr(x, "get") else np.asarray(x)


def _cancel_ratio(xp, parts, s, t, e, f, exclude):
    """``refit.cancel_ratio`` of one output block from its lines' prescale values."""
    return refit.cancel_ratio(xp, parts, (s, t, e, f), exclude)


def _pick_cancelled(xp, ratio, everything):
    """``refit.pick`` among entries in ascending order of their flat index."""
    return refit.pick(xp, ratio, everything)


def _refit_candidates(emul, amb, bmb, e, f, need, cfg, *ix, cplx, starts, shape, every):
    """The entries of one output block that the whole product's pick can take: the block's own
    pick (``_pick_cancelled`` of its ratios; an entry of the whole pick in this block is in it,
    since fewer than REFIT_ENTRIES of the block's entries come before it), as host arrays
    ``{"ratio", "idx": flat indices into the whole output}``; None without refit."""
    out = emul["out"]
    if out is None or not _refit_runs(cfg):
        return None
    xp, backend = _xp_backend(out)
    with _chunk_quiet(xp, backend):
        parts = (out,) if not cplx else (xp.real(out), xp.imag(out))
        s = 5 - _line_exponent(xp, amb) - int(cplx)
        t = 5 - _line_exponent(xp, bmb) - int(cplx)
        exclude = _beyond(xp, need) if cfg["mask"] else None
        ratio = xp.reshape(_cancel_ratio(xp, parts, s, t, e, f, exclude), (-1,))
        local = _pick_cancelled(xp, ratio, every)
        if local is None:
            return None
        ratio, local = _host(xp.take(ratio, local)), _host(local)
    where = _block_index(ix)
    coords = np.unravel_index(local, out.shape)
    glob = tuple(c + starts[d][b] for d, (c, b) in enumerate(zip(coords, where)))
    return {"ratio": ratio, "idx": np.ravel_multi_index(glob, shape)}


def _refit_select(cfg, *cands, m, n, every, cancelled):
    """The entries to recompute, as ``refit.refit`` takes them: the decision's patch and
    (``cancelled``) the whole product's pick (``_pick_cancelled`` of the blocks' candidates in
    ascending order of their flat index), their union sorted where both are there:
    ``{"idx": flat indices, "rows", "cols": their lines' indices in the batch-flattened rows
    of A and columns of B, "urows", "ucols": those sorted, once, "patched": how many the patch
    holds, "cancelled": ``cancelled``, "everything": ``every``}`` (the last three say which
    plan notes the engine writes), host arrays; None without refit."""
    idx = None
    parts = [x for x in _flatten(list(cands)) if x is not None]
    if parts:
        idx = np.concatenate([x["idx"] for x in parts])
        ratio = np.concatenate([x["ratio"] for x in parts])
        order = np.argsort(idx, kind="stable")
        pick = _pick_cancelled(_xp_backend(ratio)[0], ratio[order], every)
        idx = None if pick is None else idx[order][pick]
    patch = cfg["patch"]
    if patch is not None:
        idx = patch if idx is None else np.unique(np.concatenate([patch, idx]))
    if idx is None:
        return None
    bat, i, j = idx // (m * n), (idx // n) % m, idx % n
    rows, cols = bat * m + i, bat * n + j
    return {"idx": idx, "rows": rows, "cols": cols, "urows": np.unique(rows),
            "ucols": np.unique(cols), "patched": 0 if patch is None else int(patch.shape[0]),
            "cancelled": cancelled, "everything": every}  # fmt: skip


def _refit_lines(x, lines, bound, sel, *ix, axis, cplx, starts, batch, size):
    """The picked entries' rows of one A chunk (``axis`` -1) or columns of one B chunk (-2, as
    rows): ``{"ids": their indices in the batch-flattened lines (ascending), "group": the
    chunk's block indices but K's, "k0": its K offset, "re", "im": their finite float64 parts
    (L, k_c), "s", "e": their prescale shifts and bounds}``; None without refit."""
    if sel is None:
        return None
    xp, backend = _xp_backend(x)
    where = _block_index(ix)  # batch blocks..., the line block, the K block
    nb = len(batch)
    rng = [np.arange(starts[d][where[d]], starts[d][where[d] + 1]) for d in range(nb + 1)]
    flat_batch = np.ravel_multi_index(np.ix_(*rng[:nb]), batch) if nb else np.zeros((), int)
    ids = np.reshape(flat_batch[..., None] * size + rng[nb], (-1,))
    pos = np.nonzero(np.isin(ids, sel["urows" if axis == -1 else "ucols"]))[0]
    with _chunk_quiet(xp, backend):
        if axis == -2:  # B's columns as rows
            x = xp.permute_dims(x, tuple(range(nb)) + (nb + 1, nb))
        take = xp.asarray(pos)
        re, im, _ = _finite_parts(xp, xp.take(xp.reshape(x, (-1, x.shape[-1])), take, axis=0))
        lin = xp.take(xp.reshape(lines, (-1, lines.shape[-1])), take, axis=0)
        return {"ids": ids[pos], "group": where[:-1], "k0": starts[nb + 1][where[-1]],
                "re": re, "im": im, "s": 5 - _line_exponent(xp, lin) - int(cplx),
                "e": xp.take(xp.reshape(bound, (-1,)), take)}  # fmt: skip


def _whole_lines(xp, pieces):
    """The picked lines over the whole K from their chunks' pieces: ``(ids, re, im, s, e)`` in
    ascending order of the ids."""
    groups = {}
    for x in pieces:
        if x["ids"].shape[0]:
            groups.setdefault(x["group"], []).append(x)
    out = []
    for g in sorted(groups.values(), key=lambda g: int(g[0]["ids"][0])):
        g = sorted(g, key=lambda x: x["k0"])
        im = None if g[0]["im"] is None else xp.concat([x["im"] for x in g], axis=-1)
        out.append((g[0]["ids"], xp.concat([x["re"] for x in g], axis=-1), im, g[0]["s"],
                    g[0]["e"]))  # fmt: skip
    ids = np.concatenate([o[0] for o in out])
    order = np.argsort(ids)  # groups of batch blocks interleave their ids
    take = xp.asarray(order)
    cat = [None if out[0][t] is None else xp.take(xp.concat([o[t] for o in out]), take, axis=0)
           for t in (1, 2, 3, 4)]  # fmt: skip
    return (ids[order], *cat)


def _refit_entries(pa, pb, sel, *, k, mode, real_name):
    """``{"idx", "parts"}``: the picked entries recomputed with MAX_MODULI moduli as in core
    (``products.entries`` on their whole lines, with the prescale of those lines); None
    without refit."""
    if sel is None:
        return None
    pa, pb = _flatten(pa), _flatten(pb)
    xp, backend = _xp_backend(pa[0]["re"])
    with _chunk_quiet(xp, backend):
        rid, ar, ai, s, e = _whole_lines(xp, pa)
        cid, br, bi, t, f = _whole_lines(xp, pb)
        pr = xp.asarray(np.searchsorted(rid, sel["rows"]))
        pc = xp.asarray(np.searchsorted(cid, sel["cols"]))

        def pick(x, p):
            return None if x is None else xp.take(x, p, axis=0)

        sub = (pick(s, pr), pick(t, pc), pick(e, pr), pick(f, pc))
        near = rounds_to_nearest(MAX_MODULI, k, mode)
        parts = products.entries(xp, pick(ar, pr), pick(ai, pr), pick(br, pc), pick(bi, pc),
                                MAX_MODULI, real_name, sub, near)  # fmt: skip
    return {"idx": sel["idx"], "parts": parts}


def _final_block(emul, amb, bmb, need, cfg, refitted, *ix, dtype_name, starts, shape):
    """One output block: its emulated values with the refit entries (``_refit_entries``) and
    then the native ones patched in, as the engine orders them."""
    out, nat = emul["out"], emul["nat"]
    xp, backend = _xp_backend(out if out is not None else nat)
    where = _block_index(ix)
    with _chunk_quiet(xp, backend):
        if refitted is not None and out is not None:
            coords = np.unravel_index(refitted["idx"], shape)
            lo = [starts[d][b] for d, b in enumerate(where)]
            inside = np.ones(refitted["idx"].shape, bool)
            for c, a, size in zip(coords, lo, out.shape):
                inside &= (c >= a) & (c < a + size)
            if inside.any():
                local = np.ravel_multi_index(
                    tuple(c[inside] - a for c, a in zip(coords, lo)), out.shape
                )
                hit = xp.asarray(np.nonzero(inside)[0])
                vals = [xp.take(v, hit) for v in refitted["parts"]]
                dt = getattr(xp, dtype_name)
                v = vals[0] if len(vals) == 1 else make_complex(xp, vals[0], vals[1], dt)
                flat = xp.reshape(xp.asarray(out, copy=True), (-1,))
                flat[xp.asarray(local)] = xp.astype(v, flat.dtype)
                out = xp.reshape(flat, out.shape)
        return _native_patch(xp, out, nat, amb, bmb, need, cfg, where)
