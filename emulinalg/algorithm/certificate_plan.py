"""The certificate's terms and decisions as a backend's certificate kernels take them.

``certificate.certify_moduli`` (the count, the exact step) and ``refinement.refine_and_patch``
(the refinement of suspects, the patch) are the reference. A backend that runs them in its own
kernels (the cupy backend's ``src_cuda/ozaki2_stats.cu``, the amx backend's
``src_amx/ozaki2_stats_host.cpp``) takes every constant, limit and step count from ``plan`` and
every term it evaluates on the host from the functions below, so that the backend computes none
of them itself: its kernels do the reference's float operations in the reference's order, and
the backend only moves data and launches them.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

from . import certificate, refinement
from .certificate import (
    LOWER_K_MAX,
    CertConstants,
    bound_lower_exponents,
    cert_constants,
    exact_line_factors,
)
from .moduli import MIN_MODULI, crt_constants

# The most suspects a refinement step of the CUDA kernels (src_cuda/ozaki2_stats.cu) takes. They
# find them where they lie (no array per suspect) and their uint32 counters would hold 2**32 - 1,
# but taking more than the generic SUSPECTS_MAX (2**24) made float32 16384 x 16384 phi = 1 run
# slower at one modulus fewer (docs/benchmarks/h100/NOTES.md, 2026-12-06): so the same value. A
# constant of its own all the same: ``plan`` takes max(SUSPECTS_MAX, min(m n, this)), so where
# the tests lower SUSPECTS_MAX the kernels still take every suspect of a small product.
CUDA_SUSPECTS_MAX = 2**24


class CertificatePlan(NamedTuple):
    """What a certificate kernel needs for one product (``plan``). Scalars are Python floats
    (float64 values) and ints; per-count sequences run over the counts ``min_count``,
    ``min_count + 1``, ... (``counts`` of them)."""

    constants: CertConstants  # ``cert_constants(k, target, complex_)``, the source of the rest
    complex: bool  # complex operands (c = 2 in the forms)
    native: bool  # the native (l2) form; else strict (l1)
    fexp: int  # ``bound_lower``: F 2**-fexp, lines without an entry with both parts nonzero
    fexp_mixed: int  # F 2**-fexp_mixed where row i or column j has one (real: = fexp)
    lower_terms: tuple  # (factor, abs_term, cR, c4): the count test's constants, in this order
    table: tuple  # float64, 3 counts + 1: the thresholds 2**-L_n (``constants.thresholds``),
    # 1.0 (the exact test's threshold), Q_down per count, and f0 per count: the exact line
    # factor of a line bound Q_down (shift 0), which a line's shift t scales by 2**-t
    counts: int  # how many counts the thresholds cover (MIN_MODULI .. MAX_MODULI)
    min_count: int  # the count of index 0 (MIN_MODULI): a kernel's count index + min_count
    gemm_lower: bool  # whether ``magnitude_lower``'s float32/bf16 GEMM bound applies (else
    # the float64 GEMM of ``certify_moduli``)
    steps: int  # refinement steps: ``refinement.REFINE_STEPS`` for 2-D products, else 0
    suspects_max: int  # the most suspects a step takes (``SUSPECTS_MAX`` native, else
    # ``REFINE_ENTRIES``; the native form's m n where ``streaming`` is True, and at least
    # min(m n, streaming) where it is an int); more end the refinement
    sample: int  # ``REFINE_ENTRIES``: the suspects a step sums (an even sample beyond)
    patch_cap: int  # the most entries the patch takes (``patch_limit(m, n)``, >= 0)
    lines: bool  # whether a patch may take lines (``refinement.takes_lines``; 2-D products)
    fails_cap: int  # the most failing entries a step reports (``fails_limit(m, n, lines)``)
    theta_max: float  # the native form's cap on theta: min(THETA_MAX, sqrt(k))
    refine_terms: tuple  # (native_factor, native_abs_term, l1fac): the suspects' sums' terms


def plan(k, target, complex_, m, n, ndim=2, gaussian=False, streaming=False) -> CertificatePlan:
    """``CertificatePlan`` of an (m, k) @ (k, n) product (per batch) certified for ``target``
    (``certificate.Target``), with ``ndim`` the operands' dimensions (2: the refinement runs;
    batched products stop after the exact step, as ``refinement.refine_and_patch``);
    ``gaussian``: the counts of the Gaussian moduli (``cert_constants``). ``streaming``: the
    backend's step reads its suspects where they lie (no array per suspect), so the native form
    takes all of them (SUSPECTS_MAX bounds the generic step's memory); an int: the native form
    takes max(SUSPECTS_MAX, min(m n, streaming)) (the cupy kernels' ``CUDA_SUSPECTS_MAX``).

    The refinement's limits are read from ``refinement`` at each call (tests change them)."""
    cc = cert_constants(k, target, complex_, gaussian)
    native = cc.norm == "l2"
    fexp, fexp_mixed = bound_lower_exponents(complex_)
    lines = ndim == 2 and refinement.takes_lines(target)
    suspects_max = refinement.suspects_limit(target)
    if native and streaming:
        held = m * n if streaming is True else min(m * n, int(streaming))
        suspects_max = max(suspects_max, held)
    return CertificatePlan(
        constants=cc,
        complex=bool(complex_),
        native=native,
        fexp=fexp,
        fexp_mixed=fexp_mixed,
        lower_terms=(cc.factor, cc.abs_term, cc.cR, cc.c4),
        table=count_table(cc),
        counts=len(cc.thresholds),
        min_count=MIN_MODULI,
        gemm_lower=k <= LOWER_K_MAX and cc.factor > 0,
        steps=refinement.REFINE_STEPS if ndim == 2 else 0,
        suspects_max=suspects_max,
        sample=refinement.REFINE_ENTRIES,
        patch_cap=max(refinement.patch_limit(m, n), 0),
        lines=lines,
        fails_cap=refinement.fails_limit(m, n, lines),
        theta_max=min(refinement.THETA_MAX, math.sqrt(k)),
        refine_terms=(cc.native_factor, cc.native_abs_term, cc.l1fac),
    )


@functools.lru_cache(maxsize=64)
def count_table(cc):
    """``CertificatePlan.table`` for ``cc``: a line's exact factor for ``count`` moduli is
    ``exact_line_factors``' value, f0 2**-t with t = ``scaling.half_log_shift`` of its bound, so
    a kernel needs only f0 (the factor at the bound Q_down, whose shift is 0) and Q_down per
    count. Cached: a dozen small host evaluations per product otherwise."""
    import array_api_compat.numpy as xnp

    counts = range(MIN_MODULI, MIN_MODULI + len(cc.thresholds))
    q_down = [crt_constants(c, cc.gaussian).Q_down for c in counts]
    f0 = [
        float(exact_line_factors(xnp, cc, c, xnp.asarray([q], dtype=xnp.float64), cc.scale)[0])
        for c, q in zip(counts, q_down)
    ]
    return tuple(float(x) for x in cc.thresholds + (1.0,) + tuple(q_down) + tuple(f0))


def line_alpha(xp, cc, e):
    """alpha = scale sqrt(e) per line (``certificate.ozaki2_needed``'s, without its axis) from
    the prescale's line bounds ``e``: float64, the same operations."""
    return cc.scale * xp.sqrt(xp.astype(e, xp.float64))


def norms_from_sums(xp, cc, l1, squares):
    """The line norms of ``cc.norm`` (upper bounds, as ``certificate.line_norm``) from a line's
    float64 sums of magnitudes ``l1`` or of their squares ``squares`` (summed in any order:
    ``cc.l1fac`` covers the rounding)."""
    if cc.norm == "l1":
        return l1 * cc.l1fac
    return xp.sqrt(squares * cc.l1fac) * (1.0 + 2.0**-52)


def line_exponents(xp, shift, complex_):
    """The line exponents floor(log2 max |x|) of the certificate's line normalization from the
    prescale's shifts s = 5 - e - c (``scaling.ozaki2_prescale``), int64."""
    return xp.astype(5 - int(complex_) - shift, xp.int64)


def mixed_lines(xp, mixed, m, n, complex_):
    """``Prescale.mixed`` as a kernel of ``bound_lower`` takes it: int64 counts (m,), (n,) of
    each row of A's and column of B's entries with both parts nonzero. Without the counts
    (None) every line of a complex product counts as mixed (``bound_lower``'s 2**-fexp_mixed
    everywhere); a real product has none."""
    if mixed is None:
        c = int(complex_)
        return xp.full((m,), c, dtype=xp.int64), xp.full((n,), c, dtype=xp.int64)
    return tuple(xp.astype(x, xp.int64) for x in mixed)


def bound_lower_at(xp, F, idx, complex_, mixed=None):
    """``certificate.bound_lower`` at the flat indices ``idx`` of the (m, n) bound GEMM ``F``
    only: 1-D float64, the values of ``bound_lower(xp, F, complex_, mixed)`` there (exact)."""
    n = F.shape[-1]
    both = None
    if complex_ and mixed is not None:
        ma, mb = mixed
        both = (xp.take(ma, idx // n) > 0) | (xp.take(mb, idx % n) > 0)
    return certificate.scaled_lower(xp, xp.take(xp.reshape(F, (-1,)), idx), complex_, both)


def magnitude_lower_of_sums(xp, cc, S):
    """``certificate.magnitude_lower``'s bound from the float32 sums ``S`` of its GEMM (the
    truncated float32 magnitudes' product, computed by the backend): their rounding removed by
    ``cc.factor`` and ``cc.abs_term``, the same operations."""
    return xp.maximum(xp.astype(S, xp.float64) * cc.factor - cc.abs_term, 0.0)
