"""The certificate over blocks: per output block the count each entry needs
(``certificate.ozaki2_needed`` on the whole matrices' terms), one count task (the planner's
``settle``), and the exact step (``certificate.exact_passes`` at one modulus fewer).
"""

from __future__ import annotations

import numpy as np

from emulinalg._planner import (
    needs_own_level,
    settle,
)
from emulinalg.algorithm import certificate

from .blocks import _chunk_quiet, _xp_backend, idle, task


def _line_norms(xp, aterms, bterms, k, norm):
    """na (..., m, 1), nb (..., 1, n): ``certificate.line_norm``'s bounds finished
    (``certificate.line_norm_of``) from the K-summed partials of ``line_norm_sums``."""
    na = certificate.line_norm_of(xp, aterms[..., 2], k, norm)
    nb = certificate.line_norm_of(xp, bterms[..., 2], k, norm)
    return xp.expand_dims(na, axis=-1), xp.expand_dims(nb, axis=-2)


def _lam(xp, F, pl, fallback, low, q, cplx, aterms, bterms, k):
    """The lower bound of the normalized |A||B| of one output block: F's bound (with the lines'
    mixed counts for complex), the larger of it and the part check's ``pl`` where given
    (``certificate.parts_lower``'s block), and with the second pass (``fallback``) the larger of
    that and the K-summed magnitude lower bound ``low`` (``certificate.certify_moduli``'s lam)."""
    mixed = (aterms[..., 3], bterms[..., 3]) if cplx else None
    lam = certificate.bound_lower(xp, F, cplx, mixed)
    if pl is not None:
        lam = xp.maximum(lam, certificate.sums_lower(xp, pl, k))
    if not fallback:
        return lam
    return xp.maximum(lam, certificate.summed_lower(low["lam"], q))


def _block_terms(xp, F, pl, fallback, low, q, cplx, aterms, bterms, k, target):
    """The certificate's terms of one output block: ``(cc, lam, na, nb)``, the constants of
    ``certificate.cert_constants`` for the whole k, the lower bound of the normalized |A||B|
    (``_lam``) and the whole lines' norms in the form the target asks."""
    cc = certificate.cert_constants(k, target, cplx)
    lam = _lam(xp, F, pl, fallback, low, q, cplx, aterms, bterms, k)
    na, nb = _line_norms(xp, aterms, bterms, k, cc.norm)
    return cc, lam, na, nb


def _certified_need(xp, F, pl, fallback, low, q, e, f, aterms, bterms, k, cplx, target):
    """The count each entry of one output block needs (``certificate.ozaki2_needed``) from its
    lower bound of the normalized |A||B| and the whole-matrix terms of its rows and columns."""
    cc, lam, na, nb = _block_terms(xp, F, pl, fallback, low, q, cplx, aterms, bterms, k, target)
    return certificate.ozaki2_needed(xp, cc, cc.cR * lam, na, nb, e, f)


@task
def _cert_block(F, pl, e, f, aterms, bterms, k, cplx, target):
    """The needed count per entry of one output block with the first pass's lower bound: the
    bound GEMM's (``certificate.bound_lower``: exact) and, for a complex product on the complex
    route, the part check's ``pl`` (``_lam``), as the engine's first pass."""
    xp, backend = _xp_backend(F)
    with _chunk_quiet(xp, backend):
        return _certified_need(xp, F, pl, False, None, 1, e, f, aterms, bterms, k, cplx, target)


@task
def _fallback_task(summary):
    """Whether any entry of the whole product is beyond with F's bound alone: the engine's
    condition for its ``magnitude_lower`` pass."""
    return bool((np.asarray(summary)[..., 1] > 0).any())


@task
def _cert_fallback_block(need, fallback, low, F, pl, e, f, aterms, bterms, k, q, cplx, target):
    """The final needed counts of one output block: the first pass's where no entry of the
    whole product was beyond, else with lam = max(the first pass's bound, the K-summed
    magnitude lower bound) per entry (``certificate.ozaki2_moduli_needed``'s second pass)."""
    if not fallback:
        return need
    xp, backend = _xp_backend(F)
    with _chunk_quiet(xp, backend):
        return _certified_need(xp, F, pl, fallback, low, q, e, f, aterms, bterms, k, cplx,
                               target)  # fmt: skip


def _beyond(xp, need):
    return need == certificate.BEYOND


@task
def _cert_summary(need):
    """[largest need over certifiable entries (0: none), any beyond, all beyond] of one output
    block, as a host array of shape (1, ..., 1, 3)."""
    xp, _ = _xp_backend(need)
    top, beyond = certificate.count_of(xp, need)
    out = np.array([top or 0, float(bool(xp.any(beyond))), float(top is None)])
    return out.reshape((1,) * need.ndim + (3,))


@task
def _any_bad(lines):
    """Whether a block of lines holds NaN/Inf, as a host array of shape (1, ..., 1)."""
    xp, _ = _xp_backend(lines)
    return np.full((1,) * (lines.ndim - 1), bool(xp.any(lines[..., 1] > 0)))


@task
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
    """Whether the exact step runs at this decision (``certificate.exact_step_runs`` on a
    count the certificate made)."""
    return cfg["certified"] and certificate.exact_step_runs(cfg["count"])


def _exact_fails(xp, need, count, low, fallback, F, pl, e, f, aterms, bterms, k, q, cplx,
                 target):  # fmt: skip
    """``(fail, lam, na, nb)`` of one output block: the certifiable entries that ``count``
    moduli do not certify with the exact shifts (``certificate.exact_failures``), and the
    terms."""
    cc, lam, na, nb = _block_terms(xp, F, pl, fallback, low, q, cplx, aterms, bterms, k, target)
    fail = certificate.exact_failures(xp, cc, count, cc.cR * lam, na, nb, e, f, _beyond(xp, need))
    return fail, lam, na, nb


# The exact step over blocks: per output block how many certifiable entries fail one modulus
# fewer with the exact shifts, and one task taking that count where none does.


@task
def _exact_block(need, cfg, low, fallback, F, pl, e, f, aterms, bterms, *, k, q, cplx, target):
    """The number of failures at the count task's count - 1 of one output block, as a host
    array of shape (1, ..., 1); -1 where the exact step does not run."""
    n = -1
    if _exact_runs(cfg):
        xp, backend = _xp_backend(need)
        with _chunk_quiet(xp, backend):
            fail, *_ = _exact_fails(xp, need, cfg["count"] - 1, low, fallback, F, pl, e, f,
                                    aterms, bterms, k, q, cplx, target)  # fmt: skip
            n = int(xp.count_nonzero(fail))
    out = np.full((1,) * need.ndim, n, dtype=np.int64)
    return out if n >= 0 else idle(out)


@task
def _exact_task(cfg, fails):
    """The count task's decision after ``certificate.exact_step`` on the output blocks'
    failures ``fails`` (each block's count of certifiable failures at count - 1)."""
    if not _exact_runs(cfg):
        return cfg
    return dict(cfg, count=certificate.exact_step(cfg["count"], lambda c: int(np.sum(fails))))


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
