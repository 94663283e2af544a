"""The shared-preprocessing Scheme II graph (``_shared_graph``).

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
"""

from __future__ import annotations

import math

import numpy as np

from emulinalg._planner import (
    above_dtype,
    fixed_scheme,
    refit_form,
    target_for,
)
from emulinalg._precision import REAL_DTYPE, OzakiII, level_for_dtype
from emulinalg.algorithm import certificate, refinement, refit
from emulinalg.algorithm.moduli import MAX_MODULI
from emulinalg.algorithm.scaling import line_bound, sqnorm_factor

from . import certificate as cert
from . import crt as modular
from . import refinement as refine
from . import refit as refitting
from . import statistics as stats
from .blocks import _BLOCKS, _CHUNKS, _align, _chunk_backend, _dtype_name, _fmt, _identity, _lsum


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


def _shared_graph(a, b, request, arrays=None, split=None, t_lower=None):
    """The lazy Scheme II product with shared preprocessing (module docstring) and notes.
    ``arrays``: a dict that receives the lazy statistics ``e``, ``f`` and ``need`` (None where
    not made) and, with a certificate, the K-summed line terms ``aterms``, ``bterms`` and the
    ``norm`` they hold, for tests that compare them with the engine's. ``split=(m, n)``: ``a``
    and ``b`` are the stacked float64 parts [Ar; Ai], [Br, Bi] of a complex product's split
    route (``_engine._split``): the product in double-double (complex128 hi + i lo), its refit
    as the engine's with the entries whose combined parts cancel most. ``t_lower``: a complex
    product's part check's lower bound of T as the certificate takes it (lazy,
    ``parts.PartCheck.lower``), as the engine's."""
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
    target = target_for(request, k, _chunk_backend(a), outputs, cplx) if certify else None
    norm = certificate.cert_constants(k, target, cplx).norm if certify else None
    # above the dtype's level: the dtype level's certificate too (as the in-core engine)
    above = certify and above_dtype(request, real_name)
    own = None
    if above:
        own = target_for(level_for_dtype(real_name), k, _chunk_backend(a), outputs, cplx)
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

        def line_stats(x, xi, axis):  # (..., m, 2) for A (axis -1), (..., n, 2) for B
            chunk_stats = da.blockwise(stats._line_stats, xi + (p,), x, xi, adjust_chunks={kk: 1},
                                       new_axes={p: 2}, dtype=f64, meta=meta(nd + 1, f64),
                                       token="emulinalg-stats", axis=axis)  # fmt: skip
            return chunk_stats.max(axis=nd - 1 if axis == -1 else nd - 2, split_every=split_every)

        amb, bmb = line_stats(a, ai, -1), line_stats(b, bi, -2)

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
                stats._line_terms,
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
            abar = per_chunk(stats._bound_chunk, a, ai, amb, rows, np.int8, axis=-1, cplx=cplx)
            bbar = per_chunk(stats._bound_chunk, b, bi, bmb, cols, np.int8, axis=-2, cplx=cplx)
            aterms = line_terms(a, ai, amb, rows, axis=-1)  # (..., m, nt): exact but the norm's
            bterms = line_terms(b, bi, bmb, cols, axis=-2)  # (..., n, nt)
            own_terms = (aterms, bterms)
            own_norm = certificate.cert_constants(k, own, cplx).norm if above else norm
            if own_norm != norm:
                own_terms = (line_terms(a, ai, amb, rows, axis=-1, norm=own_norm),
                             line_terms(b, bi, bmb, cols, axis=-2, norm=own_norm))  # fmt: skip
        else:
            asq = per_chunk(stats._sq_chunk, a, ai, amb, rows, f64, True, axis=-1, cplx=cplx)
            bsq = per_chunk(stats._sq_chunk, b, bi, bmb, cols, f64, True, axis=-2, cplx=cplx)

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
            F = per_block(stats._bound_block, [abar], [bbar])
            F = F.sum(axis=nd - 1, split_every=split_every)
        U = da.blockwise(stats._upper_block, out, F, out, aterms, rows + (p,), bterms,
                         cols + (p,), dtype=f64, concatenate=True, meta=meta(nd, f64),
                         token="emulinalg-bound-upper", cplx=cplx)  # fmt: skip
        e = line_bound(U.max(axis=-1, split_every=split_every))
        f = line_bound(U.max(axis=-2, split_every=split_every))
    else:
        e = asq.sum(axis=nd - 1) * sqnorm_factor(k)
        f = bsq.sum(axis=nd - 2) * sqnorm_factor(k)
    count_args = [
        da.blockwise(cert._any_bad, rows, amb, rows + (p,), adjust_chunks=one(*rows), dtype=bool,
                     concatenate=True, meta=np.empty((0,) * len(rows), bool)),
        rows,
        da.blockwise(cert._any_bad, cols, bmb, cols + (p,), adjust_chunks=one(*cols), dtype=bool,
                     concatenate=True, meta=np.empty((0,) * len(cols), bool)),
        cols,
    ]  # fmt: skip
    need = own_need = None
    if certify:
        cert_kw = {"dtype": np.int64, "concatenate": True, "meta": meta(nd, np.int64), "k": k,
                   "cplx": cplx, "target": target}  # fmt: skip
        pl = t_lower
        if pl is not None:  # the output blocks' chunks
            shape = tuple(max(x, y) for x, y in zip(a.shape[:-2], b.shape[:-2]))
            pl = da.broadcast_to(pl, shape + (a.shape[-2], b.shape[-1]))
            pl = pl.rechunk(tuple(F.chunks[d] for d in range(nd)))
        terms = [F, out, pl, None if pl is None else out, e, rows, f, cols, aterms, rows + (p,),
                 bterms, cols + (p,)]  # fmt: skip

        def summarize(ns, token):
            return da.blockwise(cert._cert_summary, out + (p,), ns, out, adjust_chunks=one(*out),
                                new_axes={p: 3}, dtype=f64, concatenate=True,
                                meta=np.empty((0,) * (nd + 1)), token=token)  # fmt: skip

        # First the lower bound from F alone (no GEMM), as certificate.ozaki2_moduli_needed.
        need1 = da.blockwise(cert._cert_block, out, *terms, token="emulinalg-certificate",
                             **cert_kw)  # fmt: skip
        fallback = da.blockwise(
            cert._fallback_task, (), summarize(need1, "emulinalg-cert-summary"), out + (p,),
            dtype=object, concatenate=True, meta=np.empty((), object),
            token="emulinalg-fallback",
        )  # fmt: skip
        # Only if some entry of the whole product is beyond: the magnitude lower bound (per
        # block triple, summed over K-blocks) and max(F bound, it) per entry. The graph cannot
        # know beforehand, so these tasks always exist and return None when not needed.
        with dask.annotate(**_CHUNKS):
            nrm_kw = {"dtype": object, "meta": obj(nd), "token": "emulinalg-normmag"}
            anrm = da.blockwise(stats._normmag_chunk, ai, a, ai, amb, rows + (p,), fallback, (),
                                concatenate=True, axis=-1, **nrm_kw)  # fmt: skip
            bnrm = da.blockwise(stats._normmag_chunk, bi, b, bi, bmb, cols + (p,), fallback, (),
                                concatenate=True, axis=-2, **nrm_kw)  # fmt: skip
        with dask.annotate(**_BLOCKS):
            lower = k_sum(per_block(stats._lower_block, [anrm], [bnrm], dtype=object), _lsum,
                          "emulinalg-lower-sum")  # fmt: skip
        need = da.blockwise(cert._cert_fallback_block, out, need1, out, fallback, (), lower, out,
                            *terms, token="emulinalg-certificate-fallback", q=q,
                            **cert_kw)  # fmt: skip
        count_args += [summarize(need, "emulinalg-cert-summary-final"), out + (p,)]
        if above:  # the entries the dtype's level takes natively (the same lower bounds)
            oterms = terms[:8] + [own_terms[0], rows + (p,), own_terms[1], cols + (p,)]
            okw = dict(cert_kw, target=own)
            own_need = da.blockwise(cert._cert_block, out, *oterms, token="emulinalg-own-cert",
                                    **okw)  # fmt: skip
            own_need = da.blockwise(cert._cert_fallback_block, out, own_need, out, fallback, (),
                                    lower, out, *oterms, token="emulinalg-own-cert-fallback", q=q,
                                    **okw)  # fmt: skip
            count_args += [summarize(own_need, "emulinalg-own-cert-summary"), out + (p,)]
    if arrays is not None:
        arrays.update(e=e, f=f, need=need)
        if certify:
            arrays.update(aterms=aterms, bterms=bterms, norm=norm)
    cfg = da.blockwise(
        cert._count_task,
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
        cert_args = (need, lower, fallback, terms)
        cfg = cert._exact_graph(cfg, *cert_args, out, k=k, q=q, cplx=cplx, target=target)
        if nd == 2:
            cfg = refine._refine_graph(a, b, cfg, *cert_args, amb, bmb, ix, k=k, q=q, cplx=cplx,
                                target=target, split_every=split_every)  # fmt: skip
    shift_kw = {"dtype": np.int64, "concatenate": True, "token": "emulinalg-shifts", "cplx": cplx}
    mu = da.blockwise(stats._shift_task, rows, amb, rows + (p,), e, rows, cfg, (), **shift_kw,
                      meta=meta(len(rows), np.int64))  # fmt: skip
    nu = da.blockwise(stats._shift_task, cols, bmb, cols + (p,), f, cols, cfg, (), **shift_kw,
                      meta=meta(len(cols), np.int64))  # fmt: skip

    # 2. Residues once per chunk.
    with dask.annotate(**_CHUNKS):
        res_kw = {"dtype": object, "meta": obj(nd), "token": "emulinalg-residues", "cplx": cplx,
                  "k": k, "mode": mode, "kernels": nd == 2}  # fmt: skip
        res_kw["align_arrays"] = False  # the index arrays' chunks are block counts
        ra = da.blockwise(modular._residues_chunk, ai, a, ai, mu, rows, cfg, (), *ix(*rows),
                          axis=-1, **res_kw)  # fmt: skip
        rb = da.blockwise(modular._residues_chunk, bi, b, bi, nu, cols, cfg, (), *ix(*cols),
                          axis=-2, **res_kw)  # fmt: skip
    # 3. Block products, added over K-blocks modulo each modulus.
    with dask.annotate(**_BLOCKS):
        prods = da.blockwise(
            modular._product_block,
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
        wsum = k_sum(prods, modular._wsum, "emulinalg-wsum")
    # 4./5. One CRT per output block, and the native patch.
    # the native entries: above the dtype's level, those its own level does not certify (a
    # subset of the requested level's beyond entries, none where those are none)
    patch = [amb, rows + (p,), bmb, cols + (p,), own_need if above else need,
             out if certify else None, cfg, ()]  # fmt: skip
    out_name = "dd" if split is not None else dtype_name
    out_dtype = "complex128" if split is not None else dtype_name
    fin_kw = {"dtype": out_dtype, "concatenate": True, "meta": meta(nd, out_dtype),
              "align_arrays": False, "dtype_name": out_name}  # fmt: skip
    # the engine refits the most cancelled entries of a product of the native form
    # (``_planner.refits``) and the certificate's patch (2-D products, ``refine_and_patch``)
    cancelled = certify and refit_form(request, k)
    refits = cancelled or (certify and nd == 2)
    if not refits:
        c = da.blockwise(modular._crt_block, out, wsum, out, mu, rows, nu, cols, *patch, *ix(*out),
                         token="emulinalg-crt", **fin_kw)  # fmt: skip
    else:
        c = refitting._refit_graph(a, b, wsum, mu, nu, e, f, patch, ix, kchunks, fin_kw,
                                   cplx=cplx, mode=mode,
                                   real_name="dd" if split is not None else real_name,
                                   cancelled=cancelled, split=split)  # fmt: skip

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
        "entries taken from the native product are dask's blocked native product: within "
        "native's error bound, not the in-core call's bits; docs/dask.md)",
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
             else f"the whole product's most cancelled entries (at most {refit.REFIT_ENTRIES} per "
                  "measure: the modulus and, complex, each part)")
            if cancelled else None,
        ]  # fmt: skip
        notes.append(
            f"refit (refit.refit): {' and '.join(w for w in what if w)} recomputed with "
            f"{MAX_MODULI} moduli in one task, from their lines picked per chunk; the output "
            "blocks wait for it"
        )
    return c, notes
