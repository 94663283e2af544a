"""The refit over blocks (``refit.refit``): the certificate's patch and the most cancelled
entries recomputed with the most moduli, patched into the output blocks.
"""

from __future__ import annotations

import math

import numpy as np

from emulinalg._planner import (
    refit_count,
)
from emulinalg.algorithm import parts as complex_parts
from emulinalg.algorithm import refit
from emulinalg.algorithm.xputil import make_complex, to_host

from . import crt as modular
from .blocks import (
    _CHUNKS,
    _block_index,
    _chunk_quiet,
    _finite_parts,
    _flatten,
    _prescale_shift,
    _xp_backend,
    idle,
    task,
)
from .certificate import _beyond
from .crt import _native_patch

# The refit (``refit.refit``) of the certificate's patch and of the most cancelled entries (the
# native form's levels): the CRT per output block keeps its emulated values, per output block
# the entries the whole product's pick can take there, one task picking them and adding the
# patch, per chunk the picked entries' rows of A (columns of B), one task recomputing the
# entries with MAX_MODULI moduli (``products.entries`` on their whole lines), and per output
# block the values with those entries and the native ones patched in. The tasks return at once
# where the refit does not run (None).


def _refit_graph(a, b, wsum, mu, nu, e, f, patch, ix, kchunks, fin_kw, *, cplx, mode, real_name,
                 cancelled, split=None):  # fmt: skip
    """The CRT and the refit (``refit.refit``; the tasks below) of the certificate's
    patch and, with ``cancelled`` (the engine's ``_refits`` but for the count), the most
    cancelled entries, then the native patch: the product as a dask array. Without
    ``cancelled`` the pick needs no output block: it waits for the decision alone.
    ``split=(m, n)``: the stacked product of a complex product's split route (``_engine._split``,
    ``a`` = [Ar; Ai], ``b`` = [Br, Bi] in double-double, ``real_name`` "dd"), whose refit also
    takes the entries whose combined parts cancel most (``_split_candidates``)."""
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
    emul = da.blockwise(modular._crt_emulated, out, wsum, out, mu, rows, nu, cols, cfg, (),
                        meta=obj(nd), token="emulinalg-crt", dtype_name=fin_kw["dtype_name"],
                        **kw)  # fmt: skip
    cands = []
    every = refit.refits_all(math.prod(shape), a.shape[-1])  # small: every entry
    if cancelled:
        cands = [da.blockwise(_refit_candidates, out, emul, out, amb, rows + (p,), bmb,
                              cols + (p,), e, rows, f, cols, need, out, cfg, (), *ix(*out),
                              meta=obj(nd), token="emulinalg-refit-candidates", cplx=cplx,
                              starts=out_starts, shape=shape, every=every,
                              dd=real_name == "dd", **kw), out]  # fmt: skip
    if cancelled and split is not None:
        cands += _split_graph_candidates(emul, amb, bmb, e, f, need, cfg, split, obj, kw)
    sel = da.blockwise(_refit_select, (), cfg, (), *cands, dtype=object, concatenate=False,
                       meta=obj(0), token="emulinalg-refit-select", m=shape[-2], n=shape[-1],
                       every=every, cancelled=cancelled,
                       split=split if cancelled else None)  # fmt: skip
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
                        token="emulinalg-refit", mode=mode, real_name=real_name)  # fmt: skip
    return da.blockwise(_final_block, out, emul, out, *patch[:6], cfg, (), vals, (), *ix(*out),
                        token="emulinalg-final", starts=out_starts, shape=shape,
                        **fin_kw)  # fmt: skip


def _refit_runs(cfg):
    """Whether the in-core engine refits a level's most cancelled entries at this decision
    (``_planner.refit_count``; the form is checked at build, ``_planner.refit_form``)."""
    return refit_count(cfg["count"])


@task
def _refit_candidates(emul, amb, bmb, e, f, need, cfg, *ix, cplx, starts, shape, every,
                      dd=False):  # fmt: skip
    """The entries of one output block that the whole product's picks can take: per measure
    of ``refit.cancel_ratios`` the block's own pick (``refit.pick``; an entry of the whole
    pick in this block is in it, since fewer than REFIT_ENTRIES of the block's entries come
    before it), as ``{"measures": [one per measure: host arrays {"ratio", "idx": flat indices
    into the whole output}, None where it has none]}``; None without refit."""
    out = emul["out"]
    if out is None or not _refit_runs(cfg):
        return idle(None)
    xp, backend = _xp_backend(out)
    with _chunk_quiet(xp, backend):
        parts = (xp.real(out),) if dd else (out,) if not cplx else (xp.real(out), xp.imag(out))
        s, t = _prescale_shift(xp, amb, cplx), _prescale_shift(xp, bmb, cplx)
        exclude = _beyond(xp, need) if cfg["mask"] else None
        ratios = refit.cancel_ratios(xp, parts, (s, t, e, f), exclude)
        if every:  # as refit.cancelled_entries: the modulus's holds every finite entry
            ratios = ratios[:1]
        found = []
        for ratio in ratios:
            ratio = xp.reshape(ratio, (-1,))
            local = refit.pick(xp, ratio, every)
            taken = None if local is None else (to_host(xp.take(ratio, local)), to_host(local))
            found.append(taken)
    where = _block_index(ix)
    res = []
    for x in found:
        if x is not None:
            coords = np.unravel_index(x[1], out.shape)
            glob = tuple(c + starts[d][b] for d, (c, b) in enumerate(zip(coords, where)))
            x = {"ratio": x[0], "idx": np.ravel_multi_index(glob, shape)}
        res.append(x)
    return {"measures": res}


@task
def _refit_select(cfg, *cands, m, n, every, cancelled, split=None):
    """The entries to recompute, as ``refit.refit`` takes them: the decision's patch and
    (``cancelled``) the whole product's pick (``refit.pick`` of the blocks' candidates in
    ascending order of their flat index), their union sorted where both are there:
    ``{"idx": flat indices, "rows", "cols": their lines' indices in the batch-flattened rows
    of A and columns of B, "urows", "ucols": those sorted, once, "patched": how many the patch
    holds, "cancelled": ``cancelled``, "everything": ``every``}`` (the last three say which
    plan notes the engine writes), host arrays; None without refit. ``split=(m, n)``: the last
    of ``cands`` are the split route's candidates (``_split_candidates``), picked apart as
    ``_engine.split_cancelled`` picks them and added (their four products each)."""
    cands = list(cands)
    more = cands.pop() if split is not None else None
    blocks = [x["measures"] for x in _flatten(list(cands)) if x is not None]
    picks = []
    for measure in zip(*blocks):  # refit.cancelled_entries: the union of each measure's pick
        parts = [x for x in measure if x is not None]
        if parts:
            idx = np.concatenate([x["idx"] for x in parts])
            ratio = np.concatenate([x["ratio"] for x in parts])
            order = np.argsort(idx, kind="stable")
            pick = refit.pick(_xp_backend(ratio)[0], ratio[order], every)
            picks.append(None if pick is None else idx[order][pick])
    idx = refit.union(np, picks)
    patch = cfg["patch"]
    if patch is not None:
        idx = patch if idx is None else np.unique(np.concatenate([patch, idx]))
    more = [] if more is None else [x for x in _flatten([more]) if x is not None]
    if more:
        sidx = np.concatenate([x["idx"] for x in more])
        ratio = np.concatenate([x["ratio"] for x in more])
        order = np.argsort(sidx, kind="stable")
        pick = refit.pick(_xp_backend(ratio)[0], ratio[order])
        if pick is not None:
            four = complex_parts.stacked_indices(np, sidx[order][pick], *split)
            idx = four if idx is None else np.unique(np.concatenate([idx, four]))
    if idx is None:
        return idle(None)
    rows, cols = refit.entry_lines(idx, m, n)
    return {"idx": idx, "rows": rows, "cols": cols, "urows": np.unique(rows),
            "ucols": np.unique(cols), "patched": 0 if patch is None else int(patch.shape[0]),
            "cancelled": cancelled, "everything": every}  # fmt: skip


def _split_graph_candidates(emul, amb, bmb, e, f, need, cfg, split, obj, kw):
    """The split route's candidate tasks (``_split_candidates``) on the complex product's
    output grid, from the stacked product's blocks: ``[array, indices]`` for ``_refit_select``
    (indices of their own: the grid is half the stacked one)."""
    import dask.array as da

    nd = emul.ndim
    bt = tuple(range(nd - 2))
    i2, j2, p = nd + 2, nd + 3, nd + 4  # the complex grid's own indices
    rows, cols, out = bt + (i2,), bt + (j2,), bt + (i2, j2)
    ni, nj = emul.numblocks[-2] // 2, emul.numblocks[-1] // 2

    def quad(x, r, c):
        return x.blocks[(Ellipsis, slice(r * ni, (r + 1) * ni), slice(c * nj, (c + 1) * nj))]

    def half(x, r, count, trailing):  # the top (r = 0) or bottom half of a line array's blocks
        return x.blocks[(Ellipsis, slice(r * count, (r + 1) * count)) + (slice(None),) * trailing]

    args = []
    for r, c in complex_parts.BLOCKS:
        args += [quad(emul, r, c), out, quad(need, r, c), out]
    for r in (0, 1):
        args += [half(amb, r, ni, 1), rows + (p,), half(e, r, ni, 0), rows]
    for c in (0, 1):
        args += [half(bmb, c, nj, 1), cols + (p,), half(f, c, nj, 0), cols]
    shape = emul.shape[:-2] + split
    out_starts = tuple(
        tuple(int(v) for v in np.cumsum((0,) + tuple(ch))) for ch in quad(emul, 0, 0).chunks
    )
    index = [da.arange(nb, chunks=1) for nb in quad(emul, 0, 0).numblocks]
    ix = [x for d, idx in zip(out, index) for x in (idx, (d,))]
    cand = da.blockwise(_split_candidates, out, *args, cfg, (), *ix, meta=obj(nd),
                        token="emulinalg-split-candidates", starts=out_starts, shape=shape,
                        **kw)  # fmt: skip
    # gathered into one object first: beside the stacked grid's candidates, indices of their own
    # in the selection's blockwise would count (and warn of) the cross product of both grids
    gathered = da.blockwise(_gathered, (), cand, out, dtype=object, concatenate=False,
                            meta=obj(0), token="emulinalg-split-gather")  # fmt: skip
    return [gathered, ()]


@task
def _gathered(blocks):
    """The candidate blocks of a grid (nested lists) as one flat list."""
    return _flatten([blocks])


@task
def _split_candidates(rr, nrr, ii, nii, ri, nri, ir, nir, a0, e0, a1, e1, b0, f0, b1, f1, cfg,
                      *ix, starts, shape):  # fmt: skip
    """The entries of one block of the complex product's output whose combined parts the split
    route's pick (``_engine.split_cancelled``) can take: the block's own pick of
    ``parts.combined_ratio`` from the stacked product's four blocks (double-double as hi + i lo,
    before the refit) and their lines, as ``_refit_candidates`` (flat indices into the complex
    product's output); None without refit."""
    emuls, needs = (rr, ii, ri, ir), (nrr, nii, nri, nir)
    if any(x["out"] is None for x in emuls) or not _refit_runs(cfg):
        return idle(None)
    xp, backend = _xp_backend(rr["out"])
    with _chunk_quiet(xp, backend):
        pairs = [(xp.real(x["out"]), xp.imag(x["out"])) for x in emuls]
        re, im = complex_parts.combine(xp, *pairs)
        a, b = ((a0, e0), (a1, e1)), ((b0, f0), (b1, f1))

        def lines(r, c):
            return (_prescale_shift(xp, a[r][0], False), _prescale_shift(xp, b[c][0], False),
                    a[r][1], b[c][1])  # fmt: skip

        q = complex_parts.combined_ratio(
            xp, re[0], im[0], [lines(r, c) for r, c in complex_parts.BLOCKS]
        )
        if cfg["mask"]:
            exclude = None
            for need in needs:
                if need is not None:
                    x = _beyond(xp, need)
                    exclude = x if exclude is None else exclude | x
            if exclude is not None:
                q = xp.where(exclude, xp.inf, q)
        q = xp.reshape(q, (-1,))
        local = refit.pick(xp, q)
        if local is None:
            return None
        ratio, local = to_host(xp.take(q, local)), to_host(local)
    where = _block_index(ix)
    coords = np.unravel_index(local, re[0].shape)
    glob = tuple(c + starts[d][bl] for d, (c, bl) in enumerate(zip(coords, where)))
    return {"ratio": ratio, "idx": np.ravel_multi_index(glob, shape)}


@task
def _refit_lines(x, lines, bound, sel, *ix, axis, cplx, starts, batch, size):
    """The picked entries' rows of one A chunk (``axis`` -1) or columns of one B chunk (-2, as
    rows): ``{"ids": their indices in the batch-flattened lines (ascending), "group": the
    chunk's block indices but K's, "k0": its K offset, "re", "im": their finite float64 parts
    (L, k_c), "s", "e": their prescale shifts and bounds}``; None without refit."""
    if sel is None:
        return idle(None)
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
                "re": re, "im": im, "s": _prescale_shift(xp, lin, cplx),
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


@task
def _refit_entries(pa, pb, sel, *, mode, real_name):
    """``{"idx", "parts"}``: the picked entries recomputed with MAX_MODULI moduli as in core
    (``refit.recomputed`` on their whole lines, with the prescale of those lines); None
    without refit."""
    if sel is None:
        return idle(None)
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
        parts = refit.recomputed(xp, pick(ar, pr), pick(ai, pr), pick(br, pc), pick(bi, pc),
                                 sub, mode, real_name)  # fmt: skip
    return {"idx": sel["idx"], "parts": parts}


@task
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
                if dtype_name == "dd":  # the pair (hi, lo) as hi + i lo
                    hi, lo = (xp.take(v, hit) for v in refitted["parts"][0])
                    v = make_complex(xp, hi, lo, xp.complex128)
                else:
                    vals = [xp.take(v, hit) for v in refitted["parts"]]
                    dt = getattr(xp, dtype_name)
                    v = vals[0] if len(vals) == 1 else make_complex(xp, vals[0], vals[1], dt)
                flat = xp.reshape(xp.asarray(out, copy=True), (-1,))
                flat[xp.asarray(local)] = xp.astype(v, flat.dtype)
                out = xp.reshape(flat, out.shape)
        return _native_patch(xp, out, nat, amb, bmb, need, cfg, where)
