"""The suspect refinement over blocks (``refinement.refine_and_patch``'s steps, 2-D products):
per output block the suspects, one task sampling them, their lines per chunk, their dot
products per K-block, one task deciding the count and the patch.
"""

from __future__ import annotations

import numpy as np

from emulinalg.algorithm import refinement
from emulinalg.algorithm.scaling import (
    magnitude,
)
from emulinalg.algorithm.xputil import ldexp, to_host

from .blocks import (
    _BLOCKS,
    _CHUNKS,
    _block_index,
    _chunk_quiet,
    _finite_parts,
    _flatten,
    _identity,
    _line_exponent,
    _lsum,
    _xp_backend,
    idle,
    task,
)
from .certificate import _exact_fails


def _refine_runs(cfg):
    """Whether ``refinement.refine_and_patch``'s loop takes a step at this decision."""
    return cfg["refining"] and refinement.step_runs(cfg["count"])


# The suspect refinement (``refinement.refine_and_patch``) over blocks, 2-D products only: after
# the exact step, per step of the engine's loop (``REFINE_STEPS``, one set of tasks each), the
# entries that fail one modulus fewer (per output block), one task applying the suspects' limit
# to the whole product and taking its sample, the sampled suspects' rows of A and columns of B
# per chunk (normalized by the global line exponents), their dot products (and sums of squares)
# per K-block summed over K-blocks, and one task deciding the count (and whether the loop goes
# on) and the patch (the suspects that still fail, recomputed by the refit's tasks). Every task
# returns at once when its step does not run (None).


@task
def _suspects_block(need, cfg, low, fallback, F, pl, e, f, aterms, bterms, *ix, k, q, cplx, target,
                    row0, col0):  # fmt: skip
    """The entries of one output block that fail the count - 1 with the exact shifts
    (``certificate.certify_moduli``'s suspects): ``{"n": how many, "rows", "cols": their global
    indices, "terms": [lam, na, nb, e, f] per entry}`` (only "n" when there are too many for
    the whole product anyway); None when the refinement does not run at this decision."""
    if not _refine_runs(cfg):
        return idle(None)
    xp, backend = _xp_backend(need)
    with _chunk_quiet(xp, backend):
        fail, lam, na, nb = _exact_fails(xp, need, cfg["count"] - 1, low, fallback, F, pl, e, f,
                                         aterms, bterms, k, q, cplx, target)  # fmt: skip
        total = int(xp.count_nonzero(fail))
        if total > refinement.suspects_limit(target):
            return {"n": total}
        r, c = xp.nonzero(fail)
        lam = xp.take(xp.reshape(lam, (-1,)), r * need.shape[-1] + c)
        terms = xp.stack([lam, xp.take(na[:, 0], r), xp.take(nb[0, :], c),
                          xp.take(e, r), xp.take(f, c)])  # fmt: skip
    bi, bj = _block_index(ix)
    return {"n": total, "rows": r + row0[bi], "cols": c + col0[bj], "terms": terms}


@task
def _refine_select(sus, *, n, target):
    """The whole product's suspects in flat order and the sample ``refinement.refine_sample``
    takes of them, or None where there are too many (``refinement.suspects_limit``) or the
    refinement does not run: ``{"n": how many, "idx": their flat indices, "terms": [lam, na,
    nb, e, f] per suspect, "pick": the sample's positions, "rows", "cols": the sample's distinct
    rows and columns (sorted), "ri", "ci": each sampled suspect's position in them}`` (only "n"
    when it is 0: then one modulus fewer, as ``refine_and_patch`` decides)."""
    parts = [x for x in _flatten(sus) if x is not None]
    if not parts or sum(x["n"] for x in parts) > refinement.suspects_limit(target):
        return idle(None)
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


@task
def _refine_lines(x, lines, sel, *ix, axis, starts):
    """The suspects' rows of one A chunk (``axis`` -1) or columns of one B chunk (-2): their
    magnitudes normalized by the global line exponents, in float64 (``refinement.suspect_sums``'
    operands, restricted to the chunk); None without refinement."""
    if sel is None or not sel["n"]:
        return idle(None)
    xp, backend = _xp_backend(x)
    blk = _block_index(ix)[0]
    lo, hi = starts[blk], starts[blk + 1]
    u = sel["rows" if axis == -1 else "cols"]
    local = u[(u >= lo) & (u < hi)] - lo  # sorted: the pieces concatenate in u's order
    with _chunk_quiet(xp, backend):
        re, im, _ = _finite_parts(xp, xp.take(x, local, axis=-2 if axis == -1 else -1))
        ea = xp.expand_dims(_line_exponent(xp, xp.take(lines, local, axis=0)), axis=axis)
        return ldexp(xp, magnitude(xp, re, im), -ea)


@task
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

        def factors(t0, t1):
            return xp.take(xa, ri[t0:t1], axis=0), xp.take(xb, ci[t0:t1], axis=0)

        S, S2 = refinement.product_sums(xp, ri.shape[0], xa.shape[-1], factors, squares)
        return {"S": S, "S2": S2}


@task
def _refine_task(cfg, sel, sums, *, k, cplx, target, m, n):
    """The decision after one step of ``refinement.refine_and_patch``'s loop on the (m, n)
    product: one modulus fewer where no suspect fails it with its larger lower bound
    (``refinement.refine_failures``), and the loop goes on; one fewer where at most
    ``refinement.patch_limit(m, n)`` do, with ``"patch"`` their flat indices (ascending, on the
    host) for the refit's tasks, and the loop stops; else the same count, and it stops."""
    if not _refine_runs(cfg):
        return idle(cfg)
    count = cfg["count"]
    if sel is None:  # too many suspects
        step = refinement.next_step(np, count, None)
    elif not sel["n"]:
        step = refinement.next_step(np, count, np.empty(0, np.int64))
    else:
        xp, backend = _xp_backend(sums["S"])
        with _chunk_quiet(xp, backend):
            lam, na, nb, e, f = (sel["terms"][t] for t in range(5))
            fail = refinement.refine_failures(xp, k, target, cplx, count, lam, sums["S"], e, f,
                                              na, nb, sums["S2"], sel["pick"])  # fmt: skip
            step = refinement.next_step(xp, count, sel["idx"], fail, m, n)
    patch = None if step.patch is None else to_host(step.patch)
    return dict(cfg, count=step.count, refining=step.going, patch=patch)


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
