"""The certificate: the number of slices / moduli a precision level needs, per entry.

Scheme II (Uchino, Ozaki, Imamura, arXiv:2602.02549, Lemma 2 form, with rounding to nearest):
A' = round(2**mu A) is off by ``delta`` with |delta| <= 1/2 per entry (1 where the operands are
truncated, ``scaling.rounds_to_nearest``), so per entry of the product

    2**(mu_i+nu_j) |C_emulated - C|_ij = |sum_h X_h|,  |X_h| <= r_h = d |b_hj|' + d |a_ih|' + c d**2

(before the final rounding; ' marks the scaled entries, |z| = |Re z| + |Im z|, c = 1 real, 2
complex, d the bound on |delta|). The certificate bounds the sum in one of two ways:

``strict`` (``precision=<bits>``): ``sum r_h``, the l1 form: worst case, deterministic,

    err_ij <= d (2**-mu_i ||b_j||_1 + 2**-nu_j ||a_i||_1) + c k d**2 2**-(mu_i+nu_j)
           <= TAU 2**-bits (|A||B|)_ij.

``native`` (``precision="float64"``/``"float32"``, the dtype's own level, k >= NATIVE_MIN_K): the
l2 form

    sigma_ij = 1/2 (2**-mu_i ||b_j||_2 + 2**-nu_j ||a_i||_2) + c/4 sqrt(k) 2**-(mu_i+nu_j)
             <= w 2**-bits max(theta (|A||B|)_ij, sqrt(k) ||a_i o b_j||_2)   (rounding to nearest)

sigma >= ||r||_2. Where the rounding errors delta are independent with mean zero (Higham &
Mary's model of rounding errors, SIAM J. Sci. Comput. 2019, applied to the conversion to
integers), Hoeffding's inequality gives err <= lambda sigma with probability at least
1 - 2 exp(-lambda**2 / 2) per entry (lambda = 6: 1 - 3.1e-8), and the error's standard deviation
is at most sigma / sqrt(3) where they are uniform. ``w = sqrt(3) NATIVE_STD_RATIO rho_k``
(``native_weight``) makes that at most the native GEMM's rms error ``rho_k u sqrt(k)
||a_i o b_j||_2`` (``native_error``: the backend's measured ``native_error_rms`` and
``native_chain_k``). The cheap test takes theta = 1 and (|A||B|)_ij for the max (Cauchy-Schwarz:
sqrt(k) ||a_i o b_j||_2 >= (|A||B|)_ij); the refinement raises theta to the largest
kappa = sqrt(k) ||a_i o b_j||_2 / (|A||B|)_ij of a sample of its suspects (one value for the
product, at most min(THETA_MAX, sqrt(k)): a product-wide figure, not a per-entry one). Without
any model, Cauchy-Schwarz gives err <= sqrt(k) sigma <= k w 2**-bits (|A||B|)_ij, within native's
own worst case k 2**-bits |A||B| since w < 1 (docs/precision.md).

Scheme I (row-max scaling, p slices, x = 2**-8p, truncation) adds the dropped triangle, at most
1.01 (p-1) 2**8p per term in integer units:

    err_ij <= x (alpha_i ||b_j||_1 + beta_j ||a_i||_1 + c p k alpha_i beta_j),

certified against TAU 2**-bits (strict) or w 2**-bits (native) |A||B|: a worst case, no model.

(|A||B|) is bounded below cheaply. Scheme II first takes the accurate-mode prescale's bound GEMM
F = Ā B̄ (``bound_lower``: the entries of Ā are floors, so F 2**-12 is a lower bound, exact, at
no extra cost); only when that leaves entries beyond every count does it also run
``magnitude_lower``: magnitudes of the line-normalized operands truncated toward zero to float32
(or to bfloat16 by a backend's tensor-core hook), one low-precision GEMM, and its rounding
removed by the factor 1 - (k+2) 2**-22 and an absolute (k+2) 2**-149 for the subnormal range:
all terms are >= 0, so truncation only lowers the sum. A complex product on the complex route
also has its part check's lower bound of T = (|Ar| + |Ai|)(|Br| + |Bi|), whose half bounds the
moduli's |A||B| (``parts_lower``): the larger of the two per entry, from the first pass on.
Scheme I always uses ``magnitude_lower``.

The count: with y = 2**-L_n the shifts satisfy 2**-mu_i <= 2 y alpha_i (alpha_i = 2**-s_i
sqrt(e_i) from the N-independent prescale), so both forms read y (2 G + y Q) <= R per entry
(G = alpha_i N(b_j) + beta_j N(a_i) with the form's norm N, Q = c4 alpha_i beta_j, R = cR lam,
constants from ``cert_constants``): a comparison per count, no square root or division; the
left side grows with y, so the smallest such count is found by bisection (``ozaki2_needed``).
Then one count lower is tested with the exact shifts (``exact_passes``: the floor in mu_i
costs up to a bit), and the suspect refinement and patch (``refinement.refine_and_patch``) take
off further counts where only a few entries stand in the way. Entries no count up to the maximum
certifies (or with a zero lower bound but a nonzero upper bound) are taken from the native
product, and the plan says how many.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .._precision import MAX_SLICES, MIN_SLICES
from .._stages import NATIVE_ERROR_RMS, gaussian_keywords, stages
from . import operands
from .moduli import MAX_MODULI, MIN_MODULI, crt_constants
from .operands import once
from .scaling import half_log_shift, magnitude, max_exponent, rounds_to_nearest
from .xputil import ldexp

TAU = 0.25  # the strict certificate's share of 2**-bits
# 2**-L_n for n = MIN_MODULI .. MAX_MODULI (decreasing): the certificate's per-count thresholds,
# of the moduli (``MODULI``) and of the Gaussian moduli (complex products, ``GAUSSIAN_MODULI``)
THRESHOLDS = tuple(2.0 ** -crt_constants(n).L for n in range(MIN_MODULI, MAX_MODULI + 1))
GAUSSIAN_THRESHOLDS = tuple(
    2.0 ** -crt_constants(n, True).L for n in range(MIN_MODULI, MAX_MODULI + 1)
)
BEYOND = MAX_MODULI + 1  # ``ozaki2_needed``'s value for entries no count certifies
EXCLUDED = 2.0**512  # a threshold no entry passes (a count the guarantee cannot use)
# The native form asks the emulation's rounding-error standard deviation to be at most this
# multiple of the native GEMM's (both under the model of random rounding errors): the
# componentwise measure compares maxima over many entries, which follow the deviations.
NATIVE_STD_RATIO = 1.0


class Target(NamedTuple):
    """What the certificate asks of every entry: ``bits`` below |A||B|, in the ``guarantee``'s
    form ("strict": the l1 worst case within TAU 2**-bits |A||B|; "native": the l2 form within
    weight 2**-bits sqrt(k) ||a_i o b_j||_2, ``weight`` from ``native_weight``)."""

    bits: int
    guarantee: str = "strict"
    weight: float = 1.0


# What the final rounding to the output dtype adds to every certified entry: u |c_ij|, and where
# c_ij is subnormal up to half the smallest subnormal (2**-1075 float64, 2**-150 float32) instead.
FINAL_ROUNDING = "then the rounding to the output dtype: + u |c| + half its smallest subnormal"


def guarantee_note(target, family="ozaki2"):
    """The plan's line saying what the certificate guarantees per entry (before the final
    rounding, ``FINAL_ROUNDING``, which the line states too)."""
    b, w = target.bits, target.weight
    if target.guarantee == "strict":
        return f"certified |err| <= {TAU:g} * 2^-{b} |A||B| per entry, {FINAL_ROUNDING}"
    if family == "ozaki1":
        return f"certified |err| <= {w:.3g} * 2^-{b} |A||B| per entry, {FINAL_ROUNDING}"
    return (
        f"certified per entry: |err| <= k * {w:.3g} * 2^-{b} |A||B| always, and <= 6 sigma "
        f"with probability >= 1 - 3.1e-8, sigma <= {w:.3g} * 2^-{b} sqrt(k) |a_i o b_j|_2 "
        f"(error std <= {NATIVE_STD_RATIO:g}x the native GEMM's; docs/precision.md), "
        f"{FINAL_ROUNDING}"
    )


def native_error(backend, k, outputs=None, complex_=False):
    """The native GEMM's rounding-error rms at inner dimension ``k`` relative to
    u sqrt(k) ||a_i o b_j||_2 (Higham & Mary's model: independent rounding errors of the
    partial sums; ``complex_``: per part of a complex GEMM's entries, with the moduli in
    ||a_i o b_j||_2), from the backend's ``native_error_rms`` (``native_error_rms_complex``
    where it declares one) and ``native_chain_k`` (a number, or a function of k and the number
    of output entries ``outputs``, None when not known: a GEMM library may split k where the
    output is too small to fill the device)."""
    if backend is None:
        return NATIVE_ERROR_RMS
    st = stages(backend)
    rms, kb = st.native_error_rms, st.native_chain_k
    if complex_ and st.native_error_rms_complex is not None:
        rms = st.native_error_rms_complex
    if callable(kb):
        kb = kb(k, outputs)
    if kb is None or k <= kb:
        return rms
    return rms * math.sqrt(kb / k)


def native_weight(backend, k, outputs=None, complex_=False):
    """``Target.weight`` of the native form: sigma (the Hoeffding scale of the emulation's
    error, >= sqrt(3) times its standard deviation where the rounding errors are uniform) at
    most sqrt(3) NATIVE_STD_RATIO times the native GEMM's rms (``native_error``; ``complex_``:
    a complex product's, per part)."""
    return math.sqrt(3.0) * NATIVE_STD_RATIO * native_error(backend, k, outputs, complex_)


class CertConstants(NamedTuple):
    """The scalars of the certificate, written once: the generic code below, the backends'
    certificate kernels (``cert_need`` in src_cuda/ozaki2_stats.cu and its CPU build) and the
    dask graph take them from ``cert_constants``."""

    factor: float  # removes a float32/bf16 GEMM's rounding from the lower bound: 1 - (k+2) 2**-22
    native_factor: float  # the same for a float64 GEMM (k beyond LOWER_K_MAX): 1 - (k+2) 2**-52
    native_abs_term: float  # the refinement's float64 sums, subnormal range: (2k+2) 2**-1074
    abs_term: float  # the subnormal range of that GEMM: (k+2) 2**-149
    l1fac: float  # makes float64 l1 sums (and sums of squares) upper bounds: 1 + (k+2) 2**-52
    scale: float  # alpha = scale sqrt(e): 2**(cplx - 5)
    c4: float  # Q = c4 alpha beta (strict: 2 c k, native: 2 c sqrt(k); truncating: at 2 y)
    cR: float | None  # R = cR lam (strict: 2 TAU 2**-bits, native: 2 w 2**-bits)
    norm: str  # the line norms of G: "l1" (strict) or "l2" (native)
    thresholds: tuple  # per count n = MIN_MODULI..: 2**-L_n, 2 2**-L_n where truncating, or
    # EXCLUDED (a count the form cannot use: the native form needs rounding to nearest)
    gaussian: bool = False  # the counts are of the Gaussian moduli (complex products)


def cert_constants(k, target=None, complex_=False, gaussian=False) -> CertConstants:
    """``CertConstants`` for inner dimension ``k``, the ``Target`` (None: only the guarantee-free
    fields are meaningful) and the operands' kind (``gaussian``: complex operands whose counts
    are of ``moduli.GAUSSIAN_MODULI``).

    The forms are written as y (2 G + y Q) <= cR lam with y = 2**-L_n: rounding to nearest
    (d = 1/2) gives y G + c k y**2 alpha beta (strict) or y G + c sqrt(k) y**2 alpha beta
    (native, l2 norms in G), hence c4 = 2 c k or 2 c sqrt(k) and cR = 2 TAU 2**-bits or
    2 w 2**-bits (w the target's weight); a truncating count (d = 1, strict only) is the same
    test at 2 y."""
    c = 2.0 if complex_ else 1.0
    bits = None if target is None else target.bits
    native = target is not None and target.guarantee == "native"
    if native:
        c4 = 2.0 * c * math.sqrt(k) * (1.0 + 2.0**-52)  # rounded up: an upper bound
        cR = 2.0 * target.weight * 2.0**-bits
    else:
        c4 = 2.0 * c * k
        cR = None if bits is None else 2.0 * TAU * 2.0**-bits
    gaussian = bool(gaussian and complex_)
    base = GAUSSIAN_THRESHOLDS if gaussian else THRESHOLDS
    th = []
    for i, n in enumerate(range(MIN_MODULI, MAX_MODULI + 1)):
        if rounds_to_nearest(n, k, "accurate", gaussian):
            th.append(base[i])
        else:
            th.append(EXCLUDED if native else 2.0 * base[i])
    return CertConstants(
        factor=1.0 - (k + 2) * 2.0**-22,
        native_factor=1.0 - (k + 2) * 2.0**-52,
        native_abs_term=(2 * k + 2) * 2.0**-1074,
        abs_term=(k + 2) * 2.0**-149,
        l1fac=1.0 + (k + 2) * 2.0**-52,
        scale=2.0 ** (int(complex_) - 5),
        c4=c4,
        cR=cR,
        norm="l2" if native else "l1",
        thresholds=tuple(th),
        gaussian=gaussian,
    )


def line_norm(xp, re, im, axis, norm):
    """Upper bound of each line's l1 or l2 norm of |Re| + |Im| (float64 sums; every operation
    rounds up by at most a factor the l1fac covers, and the l2 root is rounded up)."""
    return line_norm_of(xp, line_norm_sums(xp, re, im, axis, norm), re.shape[axis], norm)


def line_norm_sums(xp, re, im, axis, norm):
    """``line_norm``'s float64 sums of |Re| + |Im| ("l1") or of their squares ("l2") per line,
    before ``line_norm_of`` (the dask layer sums them over chunks in between)."""
    x = xp.abs(re) if im is None else xp.abs(re) + xp.abs(im)
    return xp.sum(x if norm == "l1" else x * x, axis=axis)


def line_norm_of(xp, sums, k, norm):
    """``line_norm`` from its sums over lines of length k (non-negative terms: the factor
    covers any order of the sums)."""
    fac = cert_constants(k).l1fac
    if norm == "l1":
        return sums * fac
    # squares below 2**-1022 lose at most k 2**-1074 in all, far below a relative 2**-52 of a
    # line whose largest entry is >= 1 (line-normalized operands)
    return xp.sqrt(sums * fac) * (1.0 + 2.0**-52)


def down_to_float32(xp, x):
    """float32 values <= x (x >= 0): the cast rounds to nearest, so step down where it rose."""
    f = xp.astype(x, xp.float32)
    return xp.where(xp.astype(f, xp.float64) > x, xp.nextafter(f, xp.zeros_like(f)), f)


LOWER_K_MAX = 1 << 20  # beyond this the float32 rounding factor is no longer tight


def magnitude_lower(xp, backend, xa, xb):
    """Elementwise lower bound of ``xa @ xb`` for non-negative operands whose entries are <= 2
    (line-normalized magnitudes), at a fraction of a native GEMM's cost."""
    k = xa.shape[-1]
    cc = cert_constants(k)
    if k > LOWER_K_MAX:
        return backend.native_matmul(xa, xb) * cc.native_factor
    hook = stages(backend).magnitude_lower_matmul
    if hook is None:
        return sums_lower(
            xp, backend.native_matmul(down_to_float32(xp, xa), down_to_float32(xp, xb)), k
        )
    # e.g. one bfloat16 tensor-core GEMM, its sums already a lower bound
    return _minus_abs(xp, xp.astype(hook(xa, xb), xp.float64, copy=False), cc.abs_term)


def _minus_abs(xp, s, abs_term):
    """max(s - abs_term, 0), in place where s is a numpy array made by the caller (no
    output-sized temporaries)."""
    if isinstance(s, np.ndarray):
        s -= abs_term
        return np.maximum(s, 0.0, out=s)
    return xp.maximum(s - abs_term, 0.0)


# bfloat16 truncation keeps 8 significant bits: a truncated entry is above (1 - 2**-7) times the
# entry, or below it by less than 2**-126 (the GPU's conversion flushes float32 subnormals to
# zero, and its float32 products and sums may too: each loses less than 2**-126); the float32
# rounding of the hook-free path is finer on both counts. Operands here have entries below 4.
_LOWER_REL = 2.0**-7
_LOWER_ABS = 2.0**-126


def lower_abs(k):
    """The absolute part of ``magnitude_upper``'s and ``signed_estimate``'s bounds: per term
    the flushed or truncated amounts of two entries below 4 (8 * 2**-126), and of the product."""
    return 9 * k * _LOWER_ABS


def magnitude_upper(xp, lower, k):
    """Elementwise upper bound of ``xa @ xb`` from ``lower = magnitude_lower(xp, backend, xa,
    xb)`` (non-negative operands with entries below 4, inner dimension ``k``), on any of its
    paths: the truncation of the operands (bfloat16 at worst, float32 subnormals flushed) and the
    rounding of the sums (the factor and absolute term ``magnitude_lower`` took off) put back,
    rounded up."""
    return upper_of(lower, upper_terms(k))


def upper_of(lower, terms):
    """``magnitude_upper`` with its scalars ``terms`` (``upper_terms``) given."""
    a, f2, absolute, r2, up = terms
    return (((lower + a) / f2 + absolute) / r2) * up


def upper_terms(k):
    """``magnitude_upper``'s scalars ``(a, f2, absolute, r2, up)`` in its order of operations,
    ((lower + a) / f2 + absolute) / r2 * up (a fused kernel of a backend takes them): for
    k > LOWER_K_MAX the float64 sums' (absolute 0, r2 1: exact steps)."""
    cc = cert_constants(k)
    if k > LOWER_K_MAX:  # float64 sums times native_factor
        return cc.native_abs_term, cc.native_factor**2, 0.0, 1.0, 1.0 + 2.0**-50
    return cc.abs_term, cc.factor**2, lower_abs(k), (1.0 - _LOWER_REL) ** 2, 1.0 + 2.0**-50


def signed_estimate(xp, backend, xa, xb):
    """``s`` with ``|xa @ xb - s| <= signed_error(k) * (|xa| @ |xb|) + lower_abs(k)``
    elementwise, for operands of either sign with entries below 4 in magnitude, at
    ``magnitude_lower``'s cost: the backend's ``magnitude_lower_matmul`` (bfloat16 truncation
    keeps the signs; its factor is within the error) or its native GEMM of float32 roundings."""
    hook = stages(backend).magnitude_lower_matmul
    if hook is not None and xa.shape[-1] <= LOWER_K_MAX:
        return xp.astype(hook(xa, xb), xp.float64, copy=False)
    f32 = [xp.astype(x, xp.float32) for x in (xa, xb)]
    return xp.astype(backend.native_matmul(*f32), xp.float64)


def signed_error(k):
    """``signed_estimate``'s relative error bound: each operand's truncation (2**-7 of it), the
    float32 sums' rounding in any order and the lower-bound factor (each (k + 2) 2**-22)."""
    return 2.0 * _LOWER_REL + 3.0 * (k + 2) * 2.0**-22


def summed_lower(s, q):
    """A lower bound of a sum of ``q`` non-negative lower bounds from their float64 sum ``s`` (in
    any order: (q - 1) u relative at most), as the dask layer sums ``magnitude_lower`` over
    K-blocks."""
    return s * (1.0 - q * 2.0**-52) if q > 1 else s


def normalized(xp, ar, ai, br, bi, norm="l1", sides=(None, None)):
    """Both sides of the certificate are homogeneous in each row's and column's scale, so they
    are evaluated on operands normalized by 2**-floor(log2 max) per line: no overflow, and
    underflow only lowers the lower bound (the safe side). Returns the normalized parts and
    the line norms (``norm`` "l1" or "l2", upper bounds) na (..., m, 1), nb (..., 1, n).
    ``sides``: the ``operands.SideUse`` of a prepared A and B (or None), which keep each one's
    ``normalized_side``."""
    key = ("certificate norms", norm)
    ar, ai, na = once(sides[0], key, lambda: normalized_side(xp, ar, ai, -1, norm))
    br, bi, nb = once(sides[1], key, lambda: normalized_side(xp, br, bi, -2, norm))
    return (ar, ai, br, bi), na, nb


def normalized_side(xp, re, im, axis, norm):
    """One operand's part of ``normalized`` along ``axis`` (-1: rows of A, -2: columns of B):
    its normalized parts and its line norms, the line axis kept (``(re, im, norms)``)."""
    ex = xp.expand_dims(max_exponent(xp, re, im, axis=axis), axis=axis)
    re = ldexp(xp, re, -ex)
    im = None if im is None else ldexp(xp, im, -ex)
    return re, im, xp.expand_dims(line_norm(xp, re, im, axis, norm), axis=axis)


def _gemm_lower(xp, backend, parts):
    ar, ai, br, bi = parts
    return magnitude_lower(xp, backend, magnitude(xp, ar, ai), magnitude(xp, br, bi))


def bound_lower_exponents(complex_):
    """``bound_lower``'s scale F 2**-fexp as ``(fexp, fexp_mixed)``: fexp where row i of A and
    column j of B have no entry with both parts nonzero, fexp_mixed where they do (real: 12, 12;
    complex: 10, 11). The backends' kernels take these."""
    return (10, 11) if complex_ else (12, 12)


def bound_lower(xp, F, complex_, mixed=None):
    """Lower bound of the line-normalized |A||B| from the accurate-mode bound GEMM F = Ā B̄
    (``scaling.ozaki2_prescale``): Ā <= 64 |a| (real) per normalized entry, so F 2**-12 <=
    |A||B|. Complex: Ā <= 32 (|Re a| + |Im a|), which is 32 |a| where a part is zero and at most
    32 sqrt(2) |a| otherwise, so F 2**-10 where row i of A and column j of B have no entry with
    both parts nonzero (``mixed`` = ``Prescale.mixed``, the counts per line), else F 2**-11
    (everywhere when ``mixed`` is None). Exact."""
    both = None
    if complex_ and mixed is not None:
        ma, mb = mixed
        both = (xp.expand_dims(ma, axis=-1) > 0) | (xp.expand_dims(mb, axis=-2) > 0)
    return scaled_lower(xp, F, complex_, both)


def scaled_lower(xp, F, complex_, both=None):
    """``bound_lower``'s scaling of bound GEMM values ``F`` (any shape), given ``both``: whether
    each value's row and column hold an entry with both parts nonzero (None: every value, as
    ``mixed=None``; real products ignore it)."""
    F = xp.astype(F, xp.float64)
    fexp, fexp_mixed = bound_lower_exponents(complex_)
    if not complex_:
        return ldexp(xp, F, -fexp)
    if both is None:
        return ldexp(xp, F, -fexp_mixed)
    return xp.where(both, ldexp(xp, F, -fexp_mixed), ldexp(xp, F, -fexp))


def parts_lower(xp, t_lower, k):
    """The complex part check's lower bound of T = (|Ar| + |Ai|)(|Br| + |Bi|) (``t_lower``,
    line-normalized by the complex line exponents, as the certificate's operands: ``parts.
    PartCheck.lower``) as a lower bound of the line-normalized |A||B| of the moduli, in the form
    the certificate takes a GEMM's FP32 sums: float32 values c whose ``sums_lower`` is the bound
    (so a backend's certificate kernels take it where they take the bf16 GEMM's sums). Per term
    |a| |b| >= (|Re a| + |Im a|)(|Re b| + |Im b|) / 2 (|z| >= (|Re z| + |Im z|) / sqrt(2)), so
    T / 2 <= |A||B|: on ordinary complex inputs about 0.7 |A||B|, where the bound GEMM's
    ``bound_lower`` (a floor of 5 bits per entry, and 2**-11 for the sqrt(2)) is about 0.4 and
    falls to a few percent on entries far below their lines' maxima. None where the sums'
    factor leaves nothing (k > LOWER_K_MAX).

    One product and one cast: T (1/2 - 2**-24) rounded to float32 is at most T / 2 in float32's
    normal range (the rounding adds at most 2**-24 relative) and above it by at most 2**-150 in
    its subnormal range, which ``sums_lower``'s absolute term, (k + 2) 2**-149, takes off."""
    if t_lower is None or k > LOWER_K_MAX:
        return None
    return xp.astype(t_lower * (0.5 - 2.0**-24), xp.float32)


def sums_lower(xp, c, k):
    """The lower bound of a product of non-negative operands from its FP32 sums ``c`` (any order
    of the sums, operands truncated toward zero): max(float64(c) (1 - (k+2) 2**-22) - (k+2)
    2**-149, 0), ``magnitude_lower``'s float32 path and the kernels' ``gemm_lower``."""
    cc = cert_constants(k)
    s = xp.astype(c, xp.float64)  # a new array: scaled in place below
    if isinstance(s, np.ndarray):
        s *= cc.factor
    else:
        s = s * cc.factor
    return _minus_abs(xp, s, cc.abs_term)


def ozaki2_moduli_needed(
    xp, backend, ar, ai, br, bi, prescale, target, hook_ops=None, sides=(None, None),
    gaussian=False,
):  # fmt: skip
    """``(count, beyond, patch)``: the smallest number of moduli certifying ``target`` (a
    ``Target``) on every entry that the maximum certifies, except the entries ``patch`` (flat
    indices, or None) that the level recomputes with MAX_MODULI moduli, and the mask of entries
    no count certifies (count None: no entry at all; a backend's hook may give beyond None when
    no entry is beyond, and may return ``(count, beyond)`` alone: no patch).

    The lower bound of |A||B| comes first from the prescale's bound GEMM (``bound_lower``, no
    extra GEMM); only when it leaves entries beyond every count is the tighter
    ``magnitude_lower`` GEMM run, and the larger of the two bounds used per entry.

    A backend may compute this in its own kernels (``backend.ozaki2_certificate``, same
    arguments and result; it returns None to decline), given ``hook_ops`` in place of ``(ar,
    ai, br, bi)`` when not None (the same values, float32 for a backend with
    ``narrow_statistics``). ``sides``: the prepared operands' ``operands.SideUse`` (or None),
    which keep their line norms (``normalized``). ``gaussian``: the counts of a complex product
    modulo ``moduli.GAUSSIAN_MODULI`` (the hook of a backend that declares ``gaussian_moduli``
    is given ``gaussian=True``; other backends' hooks count the moduli: the generic code)."""
    st = stages(backend)
    hook = None if gaussian and not st.gaussian_moduli else st.ozaki2_certificate
    extra = gaussian_keywords(gaussian)
    res = None if hook is None else hook(*(hook_ops or (ar, ai, br, bi)), prescale, target, **extra)
    if res is not None:
        return tuple(res) + (None,) * (3 - len(res))
    ar, ai, br, bi = operands.wide(xp, ar, ai, br, bi)  # a narrow_products backend's parts
    return certify_moduli(
        xp, backend, ar, ai, br, bi, prescale, target, getattr(prescale, "lower", None), sides,
        gaussian,
    )  # fmt: skip


def certify_moduli(xp, backend, ar, ai, br, bi, prescale, target, lower, sides=(None, None),
                   gaussian=False):  # fmt: skip
    """``ozaki2_moduli_needed`` in Array API code, with ``lower`` the bound GEMM F (..., m, n)
    (or None: the GEMM lower bound alone); a backend's certificate hook may call it for the
    cases its kernels do not take."""
    from . import refinement  # the step after the count (it builds on this module)

    _, _, e, f = prescale
    cplx = ai is not None
    k = ar.shape[-1]
    cc = cert_constants(k, target, cplx, gaussian)
    parts, na, nb = normalized(xp, ar, ai, br, bi, cc.norm, sides)
    mixed = getattr(prescale, "mixed", None)
    first = None if lower is None else bound_lower(xp, lower, cplx, mixed)
    pl = getattr(prescale, "parts_lower", None)
    if pl is not None:  # the part check's (``parts_lower``): the larger per entry
        g = sums_lower(xp, pl, k)
        first = g if first is None else xp.maximum(first, g)

    def counts(gl):
        lam = first if gl is None else (gl if first is None else xp.maximum(first, gl))
        if lam is None:  # no bound GEMM: every entry is beyond what it bounds
            return None, 1
        need = ozaki2_needed(xp, cc, cc.cR * lam, na, nb, e, f)
        return (lam, need), int(xp.count_nonzero(need == BEYOND))

    lam, need = ozaki2_passes(counts, lambda: _gemm_lower(xp, backend, parts))
    parts = None  # the normalized operands' copies: the steps below read the operands
    count, beyond = count_of(xp, need)
    if count is None:
        return None, beyond, None
    count = exact_step(count, lambda c: int(xp.count_nonzero(
        exact_failures(xp, cc, c, cc.cR * lam, na, nb, e, f, beyond))))  # fmt: skip

    def suspects(count):
        fail = exact_failures(xp, cc, count - 1, cc.cR * lam, na, nb, e, f, beyond)
        mask = xp.reshape(fail, (-1,))
        if int(xp.count_nonzero(mask)) > refinement.suspects_limit(target):
            return None
        idx = xp.nonzero(mask)[0]
        flat = xp.take(xp.reshape(lam, (-1,)), idx)
        n = need.shape[-1]
        return idx, flat, xp.take(xp.reshape(na, (-1,)), idx // n), \
            xp.take(xp.reshape(nb, (-1,)), idx % n)  # fmt: skip

    count, patch = refinement.refine_and_patch(xp, backend, ar, ai, br, bi, prescale, target,
                                               count, suspects, gaussian=cc.gaussian)  # fmt: skip
    return count, beyond, patch


def ozaki2_passes(counts, magnitude):
    """The certificate's counting passes in their order (``certify_moduli``'s and every
    backend's): ``counts(None)``, the count per entry with the bound GEMM's lower bound
    (``bound_lower``) alone, returns ``(result, beyond)`` (beyond: how many entries no count
    certifies); only where some are, ``magnitude()`` (the lower bound of ``magnitude_lower``'s
    GEMM, or None where a backend's kernels cannot take it) and ``counts(bound)`` again with the
    larger bound per entry. Returns the last pass's result, or None where the second pass was
    needed and ``magnitude()`` declined (the caller then runs ``certify_moduli``)."""
    result, beyond = counts(None)
    if not beyond:
        return result
    bound = magnitude()
    return None if bound is None else counts(bound)[0]


def passes(xp, cc, t, R, alpha, beta, na, nb):
    """The certificate's test t (2 G + t Q) <= R, G = alpha nb + beta na, Q = c4 alpha beta
    (broadcast terms); the kernels do these operations in this order."""
    G2 = 2.0 * (alpha * nb + beta * na)
    Q = cc.c4 * alpha * beta
    return t * (G2 + t * Q) <= R


# ``_need_of`` works on blocks of about 1/NEED_BLOCKS of the rows of products of at least
# NEED_MIN_ENTRIES entries: its work arrays then stay a fraction of the output's size.
NEED_BLOCKS = 8
NEED_MIN_ENTRIES = 1 << 16


def _need_of(xp, cc, R, alpha, beta, na, nb):
    """The smallest count n of moduli certifying each entry (``BEYOND`` where none does): the
    smallest n passing ``passes`` at cc.thresholds[n], by bisection over the counts (the left
    side grows with the threshold, and so does its floating-point value: every operation is
    monotonic; the thresholds do not increase with n). Entry by entry, so blocks of rows give
    the same counts."""
    terms = (R, alpha, beta, na, nb)
    shape = xp.broadcast_arrays(*terms)[0].shape
    size = math.prod(shape)
    if len(shape) < 2 or any(x.ndim != len(shape) for x in terms) or size < NEED_MIN_ENTRIES:
        return _need_block(xp, cc, *terms)
    m = shape[-2]
    rows = -(-m // NEED_BLOCKS)
    out = xp.empty(shape, dtype=xp.int64, device=R.device)
    for r0 in range(0, m, rows):
        sl = slice(r0, min(m, r0 + rows))
        out[..., sl, :] = _need_block(
            xp, cc, *(x[..., sl, :] if x.shape[-2] == m else x for x in terms)
        )
    return out


def _need_block(xp, cc, R, alpha, beta, na, nb):
    """``_need_of`` at once."""
    th = cc.thresholds
    G2 = 2.0 * (alpha * nb + beta * na)
    Q = cc.c4 * alpha * beta
    shape = xp.broadcast_arrays(R, G2)[0].shape
    lo = xp.zeros(shape, dtype=xp.int64)  # index into the thresholds
    hi = xp.full(lo.shape, len(th), dtype=xp.int64)  # len: beyond
    t_all = xp.asarray(th, dtype=xp.float64)
    # a threshold of a level no count reaches overflows to inf, which fails the test as it must
    with np.errstate(over="ignore"):
        for _ in range(len(th).bit_length()):  # the first index whose threshold passes
            mid = (lo + hi) // 2
            t = xp.take(t_all, xp.minimum(mid, len(th) - 1))
            ok = (mid < len(th)) & (t * (G2 + t * Q) <= R)
            hi = xp.where(ok, mid, hi)
            lo = xp.where(ok, lo, mid + 1)
    return hi + MIN_MODULI  # index len(thresholds) -> BEYOND


def ozaki2_needed(xp, cc, R, na, nb, e, f):
    """The smallest number of moduli certifying each entry (int64, ``BEYOND`` where no count up to
    the maximum does) from the certificate's terms, with ``cc`` = ``cert_constants`` of the
    whole inner dimension and the target.

    ``R = cc.cR lam`` (..., m, n), ``na`` (..., m, 1) and ``nb`` (..., 1, n) are the
    line-normalized norms of ``normalized``, ``e`` (..., m) and ``f`` (..., n) the
    prescale's bounds: any rows/columns of the output (the dask layer's output blocks, with
    terms summed over K-blocks) give the same entries as the whole product from the same terms."""
    # alpha_i = 2**-s_i sqrt(e_i) with s_i = 5 - ea_i - cplx, normalized by 2**ea_i
    alpha = cc.scale * xp.expand_dims(xp.sqrt(xp.astype(e, xp.float64)), axis=-1)
    beta = cc.scale * xp.expand_dims(xp.sqrt(xp.astype(f, xp.float64)), axis=-2)
    return _need_of(xp, cc, R, alpha, beta, na, nb)


def exact_line_factors(xp, cc, count, e, scale):
    """The exact 2**-(mu_i + ea_i) / 2 per line for ``count`` moduli (``scaling.ozaki2_shifts``
    less the line-normalization; ``e`` the prescale's line bounds), in the place of the
    bisection's y alpha_i: the test at threshold 1 is then the test of the exact shifts, and a
    truncating count (threshold 2 y) doubles it. A count the form cannot use gives EXCLUDED; a
    zero line bound 0 (the line and its products are zero, as is its alpha)."""
    c = crt_constants(count, cc.gaussian)
    e = xp.astype(e, xp.float64)
    t = half_log_shift(xp, c.L, c.Q_down, e)
    base = GAUSSIAN_THRESHOLDS if cc.gaussian else THRESHOLDS
    rel = cc.thresholds[count - MIN_MODULI] / base[count - MIN_MODULI]
    x = ldexp(xp, xp.full(t.shape, 0.5 * scale * min(rel, EXCLUDED), dtype=xp.float64), -t)
    return xp.where(e > 0, x, 0.0)


def exact_passes(xp, cc, count, R, na, nb, e, f):
    """Per entry, whether ``count`` moduli certify it with the exact shifts (``R``, ``na``,
    ``nb``, ``e``, ``f`` as for ``ozaki2_needed``). exact <= bound: the exact count is the
    bisection's or one less (consecutive L_n differ by more than 3.7, the bound is at most 2x)."""
    p = xp.expand_dims(exact_line_factors(xp, cc, count, e, cc.scale), axis=-1)
    q = xp.expand_dims(exact_line_factors(xp, cc, count, f, cc.scale), axis=-2)
    return passes(xp, cc, 1.0, R, p, q, na, nb)


def count_of(xp, need):
    """``(count, beyond)``: the largest need over the certifiable entries (None where no entry
    is) and the mask of the entries no count certifies."""
    beyond = need == BEYOND
    if bool(xp.all(beyond)):
        return None, beyond
    return int(xp.max(xp.where(beyond, 0, need))), beyond


def exact_step_runs(count):
    """Whether the exact step tests ``count - 1`` moduli (a count above the fewest)."""
    return count > MIN_MODULI


def exact_step(count, failures):
    """The count after the exact step: one lower where no certifiable entry fails the exact
    shifts' test at ``count - 1`` (``failures(c)``: how many do, asked only where the step runs;
    ``exact_failures``): the bisection's bound 2**-mu <= 2 y alpha can cost a count."""
    if exact_step_runs(count) and failures(count - 1) == 0:
        return count - 1
    return count


def exact_failures(xp, cc, count, R, na, nb, e, f, beyond):
    """Per entry, whether it is certifiable (not ``beyond``) and ``count`` moduli do not certify
    it with the exact shifts (``exact_passes``): the exact step's test and the suspects."""
    return ~exact_passes(xp, cc, count, R, na, nb, e, f) & ~beyond


def ozaki1_slices_needed(xp, backend, ar, ai, br, bi, target):
    """``(count, beyond)`` as ``ozaki2_moduli_needed``, for Scheme I slices (truncated operands,
    the l1 worst case; a native-form target asks its weight w 2**-bits instead of TAU 2**-bits)."""
    parts, na, nb = normalized(xp, ar, ai, br, bi)
    k = ar.shape[-1]
    share = target.weight if target.guarantee == "native" else TAU
    R = share * 2.0**-target.bits * _gemm_lower(xp, backend, parts)
    c = 1.0 if ai is None else 2.0
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
