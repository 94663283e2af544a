"""Choosing slices / moduli for a precision level, with a per-entry certificate.

For a level of ``bits`` the plan asks every output entry to satisfy the a-priori truncation
bound

    |C_emulated - C|_ij  <=  tau * 2**-bits * (|A||B|)_ij          (before the final rounding)

Scheme II (Uchino, Ozaki, Imamura, arXiv:2602.02549, Lemma 2 form): A' = trunc(2**mu A) is off by
less than one unit per entry, so with 2**-mu_i <= 2 * 2**-L * alpha_i (alpha_i = 2**-s_i sqrt(e_i)
from the N-independent prescale)

    err_ij <= 2y (alpha_i ||b_j||_1 + beta_j ||a_i||_1) + 4 c k alpha_i beta_j y**2,  y = 2**-L_N,

c = 1 (real) or 2 (complex). Scheme I (row-max scaling, p slices, x = 2**-8p) adds the dropped
triangle, at most 1.01 (p-1) 2**8p per term in integer units:

    err_ij <= x (alpha_i ||b_j||_1 + beta_j ||a_i||_1 + c p k alpha_i beta_j).

(|A||B|) is bounded below cheaply. Scheme II first takes the accurate-mode prescale's bound GEMM
F = Ā B̄ (``bound_lower``: the entries of Ā are floors, so F 2**-12 is a lower bound, exact, at
no extra cost); only when that leaves entries beyond every count does it also run
``magnitude_lower``: magnitudes of the line-normalized operands truncated toward zero to float32
(or to bfloat16 by a backend's tensor-core hook), one low-precision GEMM, and its rounding
removed by the factor 1 - (k+2) 2**-22 and an absolute (k+2) 2**-149 for the subnormal range:
all terms are >= 0, so truncation only lowers the sum. Scheme I always uses ``magnitude_lower``.
The smallest count that certifies every entry is used; entries no count up to the
maximum can certify (or with a zero lower bound but a nonzero upper bound) are taken from the
native product, and the plan says how many. With y = 2**-L_n, G = alpha_i ||b_j||_1 +
beta_j ||a_i||_1 and Q = 4 c k alpha_i beta_j, n moduli certify an entry iff
y (2 G + y Q) <= R = tau 2**-bits lam (lam a lower bound of |A||B|): a comparison per count, no
square root or division; the left side grows with y, so the smallest such n is found by
bisection (``ozaki2_needed``).
"""

from __future__ import annotations

from typing import NamedTuple

from ._moduli import MAX_MODULI, MIN_MODULI, crt_constants
from ._precision import MAX_SLICES, MIN_SLICES
from ._scaling import magnitude, max_exponent
from ._xputil import ldexp

TAU = 0.25
# 2**-L_n for n = MIN_MODULI .. MAX_MODULI (decreasing): the certificate's per-count thresholds
THRESHOLDS = tuple(2.0 ** -crt_constants(n).L for n in range(MIN_MODULI, MAX_MODULI + 1))
BEYOND = MAX_MODULI + 1  # ``ozaki2_needed``'s value for entries no count certifies


class CertConstants(NamedTuple):
    """The scalars of the certificate, written once: the generic code below, the backends'
    certificate kernels (``cert_need`` in backends/cuda/ozaki2_stats.cu and its CPU build) and the
    dask graph take them from ``cert_constants``."""

    factor: float  # removes a float32/bf16 GEMM's rounding from the lower bound: 1 - (k+2) 2**-22
    native_factor: float  # the same for a float64 GEMM (k beyond _LOWER_K_MAX): 1 - (k+2) 2**-52
    native_abs_term: float  # the refinement's float64 sums, subnormal range: (2k+2) 2**-1074
    abs_term: float  # the subnormal range of that GEMM: (k+2) 2**-149
    l1fac: float  # makes float64 l1 sums upper bounds: 1 + (k+2) 2**-52
    scale: float  # alpha = scale sqrt(e): 2**(cplx - 5)
    c4: float  # 4 c k, c = 1 (real) or 2 (complex)
    cR: float | None  # R = cR lam: TAU 2**-bits (None without bits)


def cert_constants(k, bits=None, complex_=False) -> CertConstants:
    """``CertConstants`` for inner dimension ``k``, the level's ``bits`` and the operands' kind."""
    return CertConstants(
        factor=1.0 - (k + 2) * 2.0**-22,
        native_factor=1.0 - (k + 2) * 2.0**-52,
        native_abs_term=(2 * k + 2) * 2.0**-1074,
        abs_term=(k + 2) * 2.0**-149,
        l1fac=1.0 + (k + 2) * 2.0**-52,
        scale=2.0 ** (int(complex_) - 5),
        c4=4.0 * (2.0 if complex_ else 1.0) * k,
        cR=None if bits is None else TAU * 2.0**-bits,
    )


def _l1_upper(xp, re, im, axis):
    x = xp.abs(re) if im is None else xp.abs(re) + xp.abs(im)
    k = re.shape[axis]
    return xp.sum(x, axis=axis) * cert_constants(k).l1fac


def _down_to_float32(xp, x):
    """float32 values <= x (x >= 0): the cast rounds to nearest, so step down where it rose."""
    f = xp.astype(x, xp.float32)
    return xp.where(xp.astype(f, xp.float64) > x, xp.nextafter(f, xp.zeros_like(f)), f)


_LOWER_K_MAX = 1 << 20  # beyond this the float32 rounding factor is no longer tight


def magnitude_lower(xp, backend, xa, xb):
    """Elementwise lower bound of ``xa @ xb`` for non-negative operands whose entries are <= 2
    (line-normalized magnitudes), at a fraction of a native GEMM's cost."""
    k = xa.shape[-1]
    cc = cert_constants(k)
    if k > _LOWER_K_MAX:
        return backend.native_matmul(xa, xb) * cc.native_factor
    hook = getattr(backend, "magnitude_lower_matmul", None)
    if hook is not None:  # e.g. one bfloat16 tensor-core GEMM, already a lower bound
        s = xp.astype(hook(xa, xb), xp.float64)
    else:
        s = xp.astype(
            backend.native_matmul(_down_to_float32(xp, xa), _down_to_float32(xp, xb)), xp.float64
        )
        s = s * cc.factor
    return xp.maximum(s - cc.abs_term, 0.0)


def _normalized(xp, ar, ai, br, bi):
    """Both sides of the certificate are homogeneous in each row's and column's scale, so they
    are evaluated on operands normalized by 2**-floor(log2 max) per line: no overflow, and
    underflow only lowers the lower bound (the safe side). Returns the normalized parts and
    the l1 upper bounds na (..., m, 1), nb (..., 1, n)."""
    ea = xp.expand_dims(max_exponent(xp, ar, ai, axis=-1), axis=-1)
    eb = xp.expand_dims(max_exponent(xp, br, bi, axis=-2), axis=-2)
    ar, br = ldexp(xp, ar, -ea), ldexp(xp, br, -eb)
    ai = None if ai is None else ldexp(xp, ai, -ea)
    bi = None if bi is None else ldexp(xp, bi, -eb)
    na = xp.expand_dims(_l1_upper(xp, ar, ai, -1), axis=-1)  # (..., m, 1)
    nb = xp.expand_dims(_l1_upper(xp, br, bi, -2), axis=-2)  # (..., 1, n)
    return (ar, ai, br, bi), na, nb


def _gemm_lower(xp, backend, parts):
    ar, ai, br, bi = parts
    return magnitude_lower(xp, backend, magnitude(xp, ar, ai), magnitude(xp, br, bi))


def _normalized_terms(xp, backend, ar, ai, br, bi, bits):
    parts, na, nb = _normalized(xp, ar, ai, br, bi)
    k = ar.shape[-1]
    R = cert_constants(k, bits).cR * _gemm_lower(xp, backend, parts)
    c = 1.0 if ai is None else 2.0
    return k, R, na, nb, c


def bound_lower_exponents(complex_):
    """``bound_lower``'s scale F 2**-fexp as ``(fexp, fexp_mixed)``: fexp where row i of A and
    column j of B have no entry with both parts nonzero, fexp_mixed where they do (real: 12, 12;
    complex: 10, 11). The backends' kernels take these."""
    return (10, 11) if complex_ else (12, 12)


def bound_lower(xp, F, complex_, mixed=None):
    """Lower bound of the line-normalized |A||B| from the accurate-mode bound GEMM F = Ā B̄
    (``_scaling.ozaki2_prescale``): Ā <= 64 |a| (real) per normalized entry, so F 2**-12 <=
    |A||B|. Complex: Ā <= 32 (|Re a| + |Im a|), which is 32 |a| where a part is zero and at most
    32 sqrt(2) |a| otherwise, so F 2**-10 where row i of A and column j of B have no entry with
    both parts nonzero (``mixed`` = ``Prescale.mixed``, the counts per line), else F 2**-11
    (everywhere when ``mixed`` is None). Exact."""
    F = xp.astype(F, xp.float64)
    fexp, fexp_mixed = bound_lower_exponents(complex_)
    if not complex_:
        return ldexp(xp, F, -fexp)
    if mixed is None:
        return ldexp(xp, F, -fexp_mixed)
    ma, mb = mixed
    both = (xp.expand_dims(ma, axis=-1) > 0) | (xp.expand_dims(mb, axis=-2) > 0)
    return xp.where(both, ldexp(xp, F, -fexp_mixed), ldexp(xp, F, -fexp))


def ozaki2_moduli_needed(xp, backend, ar, ai, br, bi, prescale, bits, hook_ops=None):
    """``(count, beyond)``: the smallest number of moduli certifying every entry that the
    maximum certifies, and the mask of entries it does not (count None: no entry at all; a
    backend's hook may give beyond None when no entry is beyond).

    The lower bound of |A||B| comes first from the prescale's bound GEMM (``bound_lower``, no
    extra GEMM); only when it leaves entries beyond every count is the tighter
    ``magnitude_lower`` GEMM run, and the larger of the two bounds used per entry.

    A backend may compute this in its own kernels (``backend.ozaki2_certificate``, same
    arguments and result; it returns None to decline), given ``hook_ops`` in place of ``(ar,
    ai, br, bi)`` when not None (the same values, float32 for a backend with
    ``narrow_statistics``)."""
    hook = getattr(backend, "ozaki2_certificate", None)
    res = None if hook is None else hook(*(hook_ops or (ar, ai, br, bi)), prescale, bits)
    if res is not None:
        return res
    return certify_moduli(
        xp, backend, ar, ai, br, bi, prescale, bits, getattr(prescale, "lower", None)
    )


def certify_moduli(xp, backend, ar, ai, br, bi, prescale, bits, lower):
    """``ozaki2_moduli_needed`` in Array API code, with ``lower`` the bound GEMM F (..., m, n)
    (or None: the GEMM lower bound alone); a backend's certificate hook may call it for the
    cases its kernels do not take."""
    _, _, e, f = prescale
    cplx = ai is not None
    k = ar.shape[-1]
    cR = cert_constants(k, bits).cR
    parts, na, nb = _normalized(xp, ar, ai, br, bi)
    lam = None
    if lower is not None:
        lam = bound_lower(xp, lower, cplx, getattr(prescale, "mixed", None))
        need = ozaki2_needed(xp, k, cR * lam, na, nb, e, f, cplx)
    if lam is None or bool(xp.any(need == BEYOND)):
        gl = _gemm_lower(xp, backend, parts)
        lam = gl if lam is None else xp.maximum(lam, gl)
        need = ozaki2_needed(xp, k, cR * lam, na, nb, e, f, cplx)
    beyond = need == BEYOND
    if bool(xp.all(beyond)):
        return None, beyond
    count = int(xp.max(xp.where(beyond, 0, need)))

    def suspects(count):
        mask = xp.reshape(need == count, (-1,))
        if int(xp.count_nonzero(mask)) > REFINE_ENTRIES:
            return None
        idx = xp.nonzero(mask)[0]
        flat = xp.take(xp.reshape(lam, (-1,)), idx)
        n = need.shape[-1]
        return idx, flat, xp.take(xp.reshape(na, (-1,)), idx // n), \
            xp.take(xp.reshape(nb, (-1,)), idx % n)  # fmt: skip

    return refine_moduli(xp, backend, ar, ai, br, bi, prescale, bits, count, suspects), beyond


# The suspect refinement (``refine_moduli``) runs when at most this many entries stand in the
# way of one modulus fewer, and their rows times their columns are at most REFINE_SHARE of the
# output: its native GEMM then costs a small fraction of one INT8 GEMM of the product.
REFINE_ENTRIES = 4096
REFINE_SHARE = 1.0 / 64


def _need_of(xp, k, R, alpha, beta, na, nb, complex_):
    """The smallest count n of moduli certifying each entry (``BEYOND`` where none does): the
    smallest n with y_n (2 G + y_n Q) <= R, y_n = 2**-L_n, by bisection over the counts (the
    left side grows with y_n, and so does its floating-point value: every operation is
    monotonic). Broadcast terms; the kernels do these operations in this order."""
    cc = cert_constants(k, complex_=complex_)
    G2 = 2.0 * (alpha * nb + beta * na)
    Q = cc.c4 * alpha * beta
    shape = xp.broadcast_arrays(R, G2)[0].shape
    lo = xp.zeros(shape, dtype=xp.int64)  # index into THRESHOLDS
    hi = xp.full(lo.shape, len(THRESHOLDS), dtype=xp.int64)  # len: beyond
    t_all = xp.asarray(THRESHOLDS, dtype=xp.float64)
    for _ in range(len(THRESHOLDS).bit_length()):  # the first index whose threshold passes
        mid = (lo + hi) // 2
        t = xp.take(t_all, xp.minimum(mid, len(THRESHOLDS) - 1))
        ok = (mid < len(THRESHOLDS)) & (t * (G2 + t * Q) <= R)
        hi = xp.where(ok, mid, hi)
        lo = xp.where(ok, lo, mid + 1)
    return hi + MIN_MODULI  # index len(THRESHOLDS) -> BEYOND


def refine_moduli(xp, backend, ar, ai, br, bi, prescale, bits, count, suspects):
    """The count after the suspect refinement: when one modulus fewer is held back by a few
    entries only (``suspects(count)``: the entries that need ``count``, their flat indices in the
    (m, n) output, their lower bound of |A||B| so far and their l1 terms na, nb; None when there
    are too many), their rows of A and columns of B are multiplied natively in float64
    (magnitudes of the line-normalized operands, the rounding removed by ``1 - (k+2) 2**-52`` and
    an absolute ``(2k+2) 2**-1074``: all terms are >= 0, so this holds for any order of the sums)
    and the certificate re-evaluated there with the larger lower bound. The bound GEMM's
    fixed-point lower bound is loose for entries whose terms are far below their lines' maxima;
    on phi = 1 inputs one such entry in 10**6 can cost a modulus. One step (the next modulus is
    held back by far more entries), only 2-D products: one native GEMM of the suspects' distinct
    rows times their distinct columns (the cupy backend runs the same steps in its kernels)."""
    if count is None or count <= MIN_MODULI or ar.ndim != 2 or br.ndim != 2:
        return count
    m, k = ar.shape
    n = br.shape[-1]
    _, _, e, f = prescale
    cplx = ai is not None
    sus = suspects(count)
    if sus is None:
        return count
    idx, lam, na, nb = sus
    rows, cols = idx // n, idx % n
    sel = refine_selection(xp, rows, cols, m, n)
    if sel is None:
        return count
    ur, ri, uc, ci = sel
    a_r = xp.take(ar, ur, axis=0)
    a_i = None if ai is None else xp.take(ai, ur, axis=0)
    b_r = xp.take(br, uc, axis=1)
    b_i = None if bi is None else xp.take(bi, uc, axis=1)
    (a_r, a_i, b_r, b_i), _, _ = _normalized(xp, a_r, a_i, b_r, b_i)
    S = backend.native_matmul(magnitude(xp, a_r, a_i), magnitude(xp, b_r, b_i))
    S = xp.take(xp.reshape(S, (-1,)), ri * uc.shape[0] + ci)
    e_r, f_c = xp.take(e, rows), xp.take(f, cols)
    if refine_certifies(xp, k, bits, cplx, count, lam, S, e_r, f_c, na, nb):
        return count - 1
    return count


def refine_selection(xp, rows, cols, m, n):
    """``refine_moduli``'s limit on the suspects' rows and columns (1-D index arrays of the
    entries): ``(distinct rows, each entry's position in them, distinct columns, positions)``,
    or None when the distinct rows times columns exceed ``REFINE_SHARE`` of the (m, n) output."""
    ur, ri = xp.unique_inverse(rows)
    uc, ci = xp.unique_inverse(cols)
    if not refine_spread_ok(ur.shape[0], uc.shape[0], m, n):
        return None
    return ur, ri, uc, ci


def refine_spread_ok(rows, cols, m, n):
    """Whether suspects on ``rows`` distinct rows and ``cols`` distinct columns of an (m, n)
    output are refined: rows x columns at most ``REFINE_SHARE`` of the output (the generic
    code's native GEMM of those lines stays small)."""
    return rows * cols <= REFINE_SHARE * m * n


def refine_certifies(xp, k, bits, complex_, count, lam, S, e, f, na, nb):
    """Whether every suspect (1-D arrays per entry: its lower bound ``lam`` so far, its float64
    sum ``S`` of the line-normalized magnitude products in any order, the prescale's e_i, f_j and
    the l1 terms) is certified by ``count - 1`` moduli with the larger bound: S's rounding is
    removed by ``1 - (k+2) 2**-52`` and ``(2k+2) 2**-1074`` (all terms >= 0), then the
    certificate's test at that count's threshold, as ``_need_of`` makes it."""
    cc = cert_constants(k, bits, complex_)
    S = xp.maximum(S * cc.native_factor - cc.native_abs_term, 0.0)
    lam = xp.maximum(lam, S)
    alpha = cc.scale * xp.sqrt(xp.astype(e, xp.float64))
    beta = cc.scale * xp.sqrt(xp.astype(f, xp.float64))
    t = THRESHOLDS[count - 1 - MIN_MODULI]
    Q = cc.c4 * alpha * beta
    return bool(xp.all(t * (2.0 * (alpha * nb + beta * na) + t * Q) <= cc.cR * lam))


def ozaki2_needed(xp, k, R, na, nb, e, f, complex_):
    """The smallest number of moduli certifying each entry (int64, ``BEYOND`` where no count up to
    the maximum does) from the certificate's terms.

    ``R = TAU 2**-bits lam`` (..., m, n), ``na`` (..., m, 1) and ``nb`` (..., 1, n) are the
    line-normalized l1 terms of ``_normalized``, ``e`` (..., m) and ``f`` (..., n) the
    prescale's bounds and ``k`` the whole inner dimension: any rows/columns of the output (the
    dask layer's output blocks, with terms summed over K-blocks) give the same entries as the
    whole product from the same terms."""
    # alpha_i = 2**-s_i sqrt(e_i) with s_i = 5 - ea_i - cplx, normalized by 2**ea_i
    cc = cert_constants(k, complex_=complex_)
    alpha = cc.scale * xp.expand_dims(xp.sqrt(xp.astype(e, xp.float64)), axis=-1)
    beta = cc.scale * xp.expand_dims(xp.sqrt(xp.astype(f, xp.float64)), axis=-2)
    return _need_of(xp, k, R, alpha, beta, na, nb, complex_)


def ozaki1_slices_needed(xp, backend, ar, ai, br, bi, bits):
    """``(count, beyond)`` as ``ozaki2_moduli_needed``, for Scheme I slices."""
    k, R, na, nb, c = _normalized_terms(xp, backend, ar, ai, br, bi, bits)
    # 2**-mu_i = 2**(ea_i + 2) 2**-8p: alpha_i = 4 after normalization (0 for zero lines)
    alpha = 4.0 * xp.astype(na > 0, xp.float64)
    beta = 4.0 * xp.astype(nb > 0, xp.float64)
    G = alpha * nb + beta * na
    needed = xp.full(R.shape, MAX_SLICES + 1, dtype=xp.int64)
    for p in range(MAX_SLICES, MIN_SLICES - 1, -1):
        err = 2.0 ** (-8 * p) * (G + c * p * k * alpha * beta)
        needed = xp.where(err <= R, p, needed)
    beyond = needed > MAX_SLICES
    if bool(xp.all(beyond)):
        return None, beyond
    return int(xp.max(xp.where(beyond, 0, needed))), beyond
