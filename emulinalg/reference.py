"""Exact reference products and accuracy metrics.

This module is the yardstick every emulated product is measured against, so it
shares no code with the emulation schemes: it uses only numpy, Python integers
and (when installed) python-flint's ``fmpz_mat`` for fast exact integer matrix
products.

Method
------
Every finite binary floating-point number is ``M * 2**E`` with an integer
``M``.  Row ``i`` of ``A`` is multiplied by ``2**-alpha_i`` and column ``j`` of
``B`` by ``2**-beta_j``, where ``alpha_i`` (``beta_j``) is the smallest binary
exponent of a nonzero entry of that row (column).  All scaled entries are then
exact integers, their integer product ``Z`` is exact, and

    C_ij = Z_ij * 2**(alpha_i + beta_j)

exactly.  The exact value is rounded once, correctly, with Python's integer
true division (``int / int`` is correctly rounded in CPython, subnormal results
included), so no double rounding occurs anywhere.

Non-finite inputs are not representable as integers; their effect follows the
IEEE rules of a sum of products (NaN if any product is NaN or if both ``+inf``
and ``-inf`` products occur, otherwise the sign of the infinite products) and is
computed separately from indicator matrices.

References
----------
J. Demmel et al., "How to grade the accuracy of an implementation of the
BLAS" (the componentwise measure ``|C^ - C| / (|A||B|)``).
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

_flint: ModuleType | None
try:  # python-flint is the expected, fast path
    import flint as _flint
except ImportError:  # pragma: no cover - exercised only without python-flint
    _flint = None

__all__ = ["accuracy", "effective_bits", "exact_matmul"]

_INF = math.inf


# --------------------------------------------------------------------------
# operands -> exact integers with one power-of-two exponent per row / column
# --------------------------------------------------------------------------


def _real_parts(x: np.ndarray, name: str) -> list[np.ndarray]:
    """Split ``x`` into its real components: ``[x]`` or ``[x.real, x.imag]``.

    Floating components are returned as float64 (exact for float16/32/64);
    integer and bool components are returned as they are.
    """
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array, got shape {x.shape}")
    kind = x.dtype.kind
    if kind == "c":
        if x.dtype.itemsize > 16:
            raise TypeError(f"{name}: {x.dtype} is not supported (use complex64/complex128)")
        return [np.asarray(x.real, dtype=np.float64), np.asarray(x.imag, dtype=np.float64)]
    if kind == "f":
        if x.dtype.itemsize > 8:
            raise TypeError(f"{name}: {x.dtype} is not supported (use float16/32/64)")
        return [np.asarray(x, dtype=np.float64)]
    if kind in "iub":
        return [x]
    raise TypeError(f"{name}: unsupported dtype {x.dtype}")


def _bit_length(v: np.ndarray) -> np.ndarray:
    """Bit length of ``|v|`` for an int64 array with ``|v| < 2**53`` (0 for 0)."""
    return np.frexp(np.abs(v).astype(np.float64))[1].astype(np.int64)


_LIMB = 62  # bits per limb when wide integers are built from int64 pieces
_MAX_LIMBS = 6  # beyond this, building Python big ints directly is cheaper


def _imat(values: list[int], rows: int, cols: int):
    """Integer matrix (``fmpz_mat``, or a numpy object array) from a flat list."""
    if _flint is not None:
        return _flint.fmpz_mat(rows, cols, values)
    arr = np.empty(rows * cols, dtype=object)
    arr[:] = values
    return arr.reshape(rows, cols)


def _imul(x, y):
    return x * y if _flint is not None else np.matmul(x, y)


def _ilist(x) -> list[int]:
    if _flint is not None:
        return [int(v) for v in x.entries()]
    return [int(v) for v in x.ravel().tolist()]


def _shifted_matrix(mant: np.ndarray, shift: np.ndarray):
    """Integer matrix with entries ``mant * 2**shift`` (``|mant| < 2**53``, ``shift >= 0``).

    Converting wide Python integers one by one dominates the cost of the
    reference, so wide entries are cut into signed 62-bit limbs with numpy and
    the matrix is reassembled as ``sum_t L_t * 2**(62 t)`` inside flint.
    """
    rows, cols = mant.shape
    nbits = int((_bit_length(mant) + shift).max()) if mant.size else 0
    if nbits <= _LIMB:
        return _imat((mant << shift).ravel().tolist(), rows, cols)
    nlimbs = -(-nbits // _LIMB)
    if _flint is None or nlimbs > _MAX_LIMBS:
        flat = [m << s for m, s in zip(mant.ravel().tolist(), shift.ravel().tolist())]
        return _imat(flat, rows, cols)
    mag = np.abs(mant)
    sign = np.sign(mant)
    mask = (1 << _LIMB) - 1
    total = None
    for t in range(nlimbs):
        d = shift - _LIMB * t  # where the mantissa's bit 0 lands in limb t
        up = np.clip(d, 0, _LIMB)  # d >= 0: low bits of mag, moved up by d
        down = np.clip(-d, 0, 63)  # d < 0: high bits of mag, moved down by -d
        low_part = (mag & ((np.int64(1) << (_LIMB - up)) - 1)) << up
        limb = np.where(d >= 0, np.where(d < _LIMB, low_part, 0), (mag >> down) & mask)
        if not limb.any():
            continue
        term = _imat((sign * limb).ravel().tolist(), rows, cols)
        if t:
            term = term * (_flint.fmpz(1) << (_LIMB * t))
        total = term if total is None else total + term
    return total if total is not None else _imat([0] * (rows * cols), rows, cols)


def _to_integers(parts: list[np.ndarray], axis: int) -> tuple[list, np.ndarray]:
    """Scale real components to exact integer matrices sharing one exponent per line.

    Parameters
    ----------
    parts : list of 2-D arrays
        Real components (float64 finite, or integer/bool) of one operand.
    axis : int
        The contracted axis: 1 for ``A`` (one exponent per row), 0 for ``B``
        (one exponent per column).

    Returns
    -------
    mats : list
        For each component, the integer matrix ``N`` (``fmpz_mat``, or a numpy
        object array of Python ints without python-flint).
    exps : ndarray of int64
        ``exps[l]`` such that entry ``x`` on line ``l`` equals ``N * 2**exps[l]``.
    """
    rows, cols = parts[0].shape
    nlines = (rows, cols)[1 - axis]
    if parts[0].dtype.kind in "iub":
        # .tolist() gives exact Python ints for every integer dtype (uint64 too)
        mats = [
            _imat((p.astype(np.int64) if p.dtype.kind == "b" else p).ravel().tolist(), rows, cols)
            for p in parts
        ]
        return mats, np.zeros(nlines, dtype=np.int64)

    mants, exps, nonzero = [], [], []
    for p in parts:
        m, e = np.frexp(p)
        mant = (m * 2.0**53).astype(np.int64)  # exact: |m| in [0.5, 1)
        ex = e.astype(np.int64) - 53
        nz = mant != 0
        # Strip trailing zero bits so float32/float16 data and small integers
        # give short integers (keeps the exact product cheap).
        low = np.where(nz, mant & -mant, 1)
        tz = np.frexp(low.astype(np.float64))[1].astype(np.int64) - 1
        mants.append(mant >> tz)
        exps.append(ex + tz)
        nonzero.append(nz)

    big = np.iinfo(np.int64).max
    line_min = np.full(nlines, big, dtype=np.int64)
    for ex, nz in zip(exps, nonzero):
        if ex.size:
            line_min = np.minimum(line_min, np.where(nz, ex, big).min(axis=axis))
    line_min[line_min == big] = 0  # all-zero line: its exponent is irrelevant
    lm = line_min[:, None] if axis == 1 else line_min[None, :]

    mats = [
        _shifted_matrix(mant, np.where(nz, ex - lm, 0))
        for mant, ex, nz in zip(mants, exps, nonzero)
    ]
    return mats, line_min


# --------------------------------------------------------------------------
# exact integer matrix products (python-flint, or Python ints as a fallback)
# --------------------------------------------------------------------------


def _integer_product(A: list, B: list) -> list[list[int]]:
    """Exact integer product of (real or complex) integer matrices.

    ``A`` and ``B`` hold one matrix per real component.  Returns ``[Re]`` or
    ``[Re, Im]`` as flat row-major lists of Python ints.  Complex x complex
    uses the 3M form, which is exact in integer arithmetic.
    """
    if len(A) == 1 and len(B) == 1:
        return [_ilist(_imul(A[0], B[0]))]
    if len(A) == 1:
        return [_ilist(_imul(A[0], B[0])), _ilist(_imul(A[0], B[1]))]
    if len(B) == 1:
        return [_ilist(_imul(A[0], B[0])), _ilist(_imul(A[1], B[0]))]
    t1 = _imul(A[0], B[0])
    t2 = _imul(A[1], B[1])
    t3 = _imul(A[0] + A[1], B[0] + B[1])
    return [_ilist(t1 - t2), _ilist(t3 - t1 - t2)]


# --------------------------------------------------------------------------
# correct rounding of N * 2**e
# --------------------------------------------------------------------------


def _round_hi_lo(n: int, e: int) -> tuple[float, float]:
    """``(hi, lo)``: ``hi = fl(n * 2**e)`` and ``lo = fl(n * 2**e - hi)``.

    Both roundings are correct (round to nearest even), subnormals included.
    ``hi`` is ``+-inf`` (and ``lo`` 0) when ``n * 2**e`` overflows float64.
    """
    if n == 0:
        return 0.0, 0.0
    if e >= 0:
        big = n << e
        try:
            hi = float(big)
        except OverflowError:
            return (_INF if n > 0 else -_INF), 0.0
        # |big| >= 1, so hi is an integer-valued double
        return hi, float(big - int(hi))
    d = 1 << -e
    try:
        hi = n / d
    except OverflowError:
        return (_INF if n > 0 else -_INF), 0.0
    p, q = hi.as_integer_ratio()  # q is a power of two, like d
    if q >= d:
        return hi, (n * (q // d) - p) / q
    return hi, (n - p * (d // q)) / d


def _round_all(ints: list[int], exps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hl = [_round_hi_lo(v, e) for v, e in zip(ints, exps.ravel().tolist())]
    hi = np.array([h for h, _ in hl], dtype=np.float64).reshape(exps.shape)
    lo = np.array([l_ for _, l_ in hl], dtype=np.float64).reshape(exps.shape)
    return hi, lo


# --------------------------------------------------------------------------
# non-finite pattern of a floating-point sum of products
# --------------------------------------------------------------------------


def _nonfinite_pattern_real(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Value (NaN, +inf, -inf) or 0 (finite) per entry of the IEEE ``a @ b``.

    Assumes exact accumulation of the finite products (so no spurious
    overflow); the counts are exact small integers computed with float GEMMs.
    """
    f = np.float64
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    fin_a = np.isfinite(a) & (a != 0)
    zero_a, zero_b = a == 0, b == 0
    pos_a, neg_a, pos_b, neg_b = a > 0, a < 0, b > 0, b < 0
    nan_count = (
        nan_a.sum(axis=1, dtype=f)[:, None]
        + nan_b.sum(axis=0, dtype=f)[None, :]
        + inf_a.astype(f) @ zero_b.astype(f)
        + zero_a.astype(f) @ inf_b.astype(f)
    )

    def ind(x):
        return x.astype(f)

    plus = (
        ind(inf_a & pos_a) @ ind(pos_b)
        + ind(inf_a & neg_a) @ ind(neg_b)
        + ind(fin_a & pos_a) @ ind(inf_b & pos_b)
        + ind(fin_a & neg_a) @ ind(inf_b & neg_b)
    )
    minus = (
        ind(inf_a & pos_a) @ ind(neg_b)
        + ind(inf_a & neg_a) @ ind(pos_b)
        + ind(fin_a & pos_a) @ ind(inf_b & neg_b)
        + ind(fin_a & neg_a) @ ind(inf_b & pos_b)
    )
    out = np.zeros(nan_count.shape)
    out[plus > 0] = np.inf
    out[minus > 0] = -np.inf
    out[(nan_count > 0) | ((plus > 0) & (minus > 0))] = np.nan
    return out


def _nonfinite_pattern(pa: list[np.ndarray], pb: list[np.ndarray]) -> list[np.ndarray]:
    """Per real component of the product: NaN/+inf/-inf where non-finite, else 0.

    Complex products follow the conventional (BLAS) formula
    ``Re = Ar Br - Ai Bi``, ``Im = Ar Bi + Ai Br`` with no Annex G recovery.
    """
    if len(pa) == 1 and len(pb) == 1:
        return [_nonfinite_pattern_real(pa[0], pb[0])]
    ar, ai = pa if len(pa) == 2 else (pa[0], np.zeros_like(pa[0]))
    br, bi = pb if len(pb) == 2 else (pb[0], np.zeros_like(pb[0]))
    if len(pa) == 1:  # real A: no Ai terms at all
        return [_nonfinite_pattern_real(ar, br), _nonfinite_pattern_real(ar, bi)]
    if len(pb) == 1:
        return [_nonfinite_pattern_real(ar, br), _nonfinite_pattern_real(ai, br)]
    lhs = np.concatenate([ar, ai], axis=1)
    return [
        _nonfinite_pattern_real(lhs, np.concatenate([br, -bi], axis=0)),
        _nonfinite_pattern_real(lhs, np.concatenate([bi, br], axis=0)),
    ]


# --------------------------------------------------------------------------
# public functions
# --------------------------------------------------------------------------


def _exact_components(a, b, extra_exp=None):
    """Shared work of :func:`exact_matmul` and :func:`accuracy`.

    Returns ``(his, los)``: lists with one float64 array per real component
    of the product, the correctly rounded ``C * 2**extra_exp`` and its
    correctly rounded remainder.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    pa = _real_parts(a, "a")
    pb = _real_parts(b, "b")
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"contraction sizes differ: a is {a.shape}, b is {b.shape}")
    ncomp = 2 if (len(pa) == 2 or len(pb) == 2) else 1
    if m == 0 or n == 0 or k == 0:
        z = np.zeros((m, n))
        return [z] * ncomp, [z] * ncomp

    pattern = None
    floating = [p for p in pa + pb if p.dtype.kind == "f"]
    if any(not np.isfinite(p).all() for p in floating):
        pattern = _nonfinite_pattern(pa, pb)
        pa = [np.where(np.isfinite(p), p, 0.0) for p in pa]
        pb = [np.where(np.isfinite(p), p, 0.0) for p in pb]

    ia, ea = _to_integers(pa, axis=1)
    ib, eb = _to_integers(pb, axis=0)
    exps = ea[:, None] + eb[None, :]
    if extra_exp is not None:
        exps = exps + extra_exp
    his, los = [], []
    for z in _integer_product(ia, ib):
        hi, lo = _round_all(z, exps)
        his.append(hi)
        los.append(lo)
    if pattern is not None:
        for hi, lo, pat in zip(his, los, pattern):
            bad = pat != 0
            hi[bad] = pat[bad]
            lo[bad] = 0.0
    return his, los


def exact_matmul(a: ArrayLike, b: ArrayLike) -> tuple[NDArray[Any], NDArray[Any]]:
    """Exact product of two matrices as a correctly rounded double-double.

    Parameters
    ----------
    a : array_like, shape (m, k)
        float16/32/64, complex64/128, integer or bool matrix.
    b : array_like, shape (k, n)
        Same kinds as ``a``.

    Returns
    -------
    hi : ndarray, shape (m, n)
        The exact product ``C = a @ b`` correctly rounded (to nearest even) to
        float64, or complex128 when either operand is complex (real and
        imaginary parts rounded separately).
    lo : ndarray, shape (m, n)
        The exact remainder ``C - hi`` correctly rounded, so that ``hi + lo``
        represents ``C`` to about 106 bits (less when ``C`` is near the
        subnormal range, where ``lo`` underflows).

    Raises
    ------
    ValueError
        If the operands are not 2-D or the contraction sizes differ.
    TypeError
        For unsupported dtypes (object, str, longdouble, ...).

    Notes
    -----
    Rows of ``a`` and columns of ``b`` are scaled by powers of two to exact
    integers and multiplied exactly (python-flint ``fmpz_mat`` when available,
    Python integers otherwise); the result is rounded once with correctly
    rounded integer division.  Where the exact product overflows float64,
    ``hi`` is ``+-inf`` and ``lo`` is 0.  Entries that depend on NaN or Inf
    inputs get the IEEE value of the sum of products (NaN, ``+inf`` or
    ``-inf``; complex entries per real component of the conventional formula)
    and ``lo = 0``.  Exact zeros are returned as ``+0.0``: the sign of a zero
    result is not modelled.
    """
    his, los = _exact_components(a, b)
    if len(his) == 2:
        return _combine(his), _combine(los)
    return his[0], los[0]


def _combine(parts):
    out = np.empty(parts[0].shape, dtype=np.complex128)
    out.real = parts[0]
    out.imag = parts[1]
    return out


def effective_bits(x: float) -> float:
    """Effective bits ``-log2(x)`` of a relative error ``x`` (``inf`` for 0).

    Parameters
    ----------
    x : float
        A nonnegative error measure (NaN propagates).

    Returns
    -------
    float
        ``-log2(x)``; ``math.inf`` when ``x == 0`` and ``-math.inf`` when
        ``x`` is infinite.
    """
    x = float(x)
    if x == 0.0:
        return _INF
    if math.isinf(x):
        return -_INF
    if math.isnan(x):
        return math.nan
    return -math.log2(x)


def _frexp_exp(x: np.ndarray) -> np.ndarray:
    """Binary exponent ``e`` with ``x = f * 2**e``, ``f`` in [0.5, 1); 0 for 0."""
    return np.frexp(x)[1].astype(np.int64)


def _components(x: np.ndarray, ncomp: int) -> list[np.ndarray]:
    if ncomp == 1:
        return [np.asarray(x, dtype=np.float64)]
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return [np.asarray(x.real, np.float64), np.asarray(x.imag, np.float64)]
    return [np.asarray(x, np.float64), np.zeros(x.shape)]


def _scaled_abs(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """``(|x| * 2**-e, e)``: moduli scaled by one power of two per line.

    ``e`` holds, per line (row for ``axis=1``, column for ``axis=0``), the
    binary exponent of the largest finite real component, so the scaled moduli
    are at most ``sqrt(2)`` and cannot overflow, not even for complex entries
    near 1e308.  Non-finite entries count as 0.
    """
    x = np.asarray(x)
    parts = [x.real, x.imag] if x.dtype.kind == "c" else [x]
    parts = [np.where(np.isfinite(p), p, 0).astype(np.float64) for p in parts]
    big = np.zeros(x.shape[1 - axis])
    if x.shape[axis]:
        for p in parts:
            big = np.maximum(big, np.abs(p).max(axis=axis))
    e = _frexp_exp(big)
    shift = -(e[:, None] if axis == 1 else e[None, :]).astype(np.int32)
    scaled = [np.ldexp(p, shift) for p in parts]
    mod = np.abs(scaled[0]) if len(scaled) == 1 else np.hypot(scaled[0], scaled[1])
    return mod, e


def _scaled_part_abs(x: np.ndarray, e: np.ndarray, axis: int) -> list[np.ndarray]:
    """``[|Re x|, |Im x|] * 2**-e`` per line (``e`` from :func:`_scaled_abs`; ``|Im x|`` is 0
    for a real ``x``), non-finite entries as 0."""
    x = np.asarray(x)
    parts = [x.real, x.imag] if x.dtype.kind == "c" else [x, np.zeros(x.shape)]
    shift = -(e[:, None] if axis == 1 else e[None, :]).astype(np.int32)
    return [
        np.ldexp(np.abs(np.where(np.isfinite(p), p, 0)).astype(np.float64), shift) for p in parts
    ]


def _part_measures(errs, mags, finite, a, b, s, t) -> dict:
    """Per-part measures of a complex product (``accuracy``'s keys with ``_re`` / ``_im``): the
    real part against ``|Re A||Re B| + |Im A||Im B|``, the imaginary part against ``|Re A||Im B|
    + |Im A||Re B|`` (the sums each part of a product is a sum of), both scaled per entry by
    ``2**-(s_i + t_j)`` as ``errs`` and ``mags`` are. A part whose sum is 0 (every term zero)
    counts its error as infinite relative to it unless the error is 0."""
    with np.errstate(under="ignore"):
        ar, ai = _scaled_part_abs(a, s, axis=1)
        br, bi = _scaled_part_abs(b, t, axis=0)
        dens = (ar @ br + ai @ bi, ar @ bi + ai @ br)
    out = {}
    for name, err, mag, den in zip(("re", "im"), errs, mags, dens):
        err, mag = np.abs(err), np.abs(mag)
        rel_mask = finite & (mag != 0)
        rel = err[rel_mask] / mag[rel_mask]
        cw = np.where(den[finite] != 0, err[finite] / np.where(den[finite] != 0, den[finite], 1),
                      np.where(err[finite] != 0, _INF, 0.0))  # fmt: skip
        maxrel = float(rel.max()) if rel.size else 0.0
        maxcw = float(cw.max()) if cw.size else 0.0
        out.update({
            f"bits_maxrel_{name}": effective_bits(maxrel),
            f"bits_cw_{name}": effective_bits(maxcw),
            f"maxrel_{name}": maxrel,
            f"maxcw_{name}": maxcw,
        })  # fmt: skip
    return out


def _classify(parts: list[np.ndarray]) -> np.ndarray:
    """Code per entry: per component 0 finite, 1 NaN, 2 +inf, 3 -inf."""
    code = np.zeros(parts[0].shape, dtype=np.int64)
    for i, p in enumerate(parts):
        c = np.where(np.isnan(p), 1, np.where(p == np.inf, 2, np.where(p == -np.inf, 3, 0)))
        code += c * 4**i
    return code


def accuracy(
    c: ArrayLike,
    a: ArrayLike,
    b: ArrayLike,
    ref: tuple[ArrayLike, ArrayLike] | None = None,
) -> dict[str, float]:
    """Accuracy of a computed product ``c`` of ``a @ b`` against the exact one.

    Parameters
    ----------
    c : array_like, shape (m, n)
        The computed product (any real or complex floating dtype).
    a, b : array_like, shapes (m, k) and (k, n)
        The operands ``c`` was computed from.
    ref : tuple of ndarray, optional
        ``(hi, lo)`` from :func:`exact_matmul` of the same operands, to avoid
        recomputing it.  Without it the exact product is computed here, with
        the rounding done after scaling each entry by ``2**-(s_i + t_j)`` (the
        row/column maximum exponents), which also keeps the bits of results in
        the subnormal range; with it, those bits are lost to ``lo``'s underflow.

    Returns
    -------
    dict
        ``maxrel``
            ``max |c - C| / |C|`` over entries with ``C != 0``.
        ``maxcw``
            ``max |c - C| / (|A||B|)`` over entries with ``(|A||B|) != 0``.
        ``bits_maxrel``, ``bits_cw``
            ``-log2`` of the above (``math.inf`` when the error is 0).
        ``medrel``
            Median of ``|c - C| / |C|`` over the same entries as ``maxrel``.
        ``normwise``
            ``||c - C||_F / ||C||_F`` (0 when both are 0, inf when only
            ``C`` is 0).
        ``nonfinite_mismatch``
            Number of entries whose NaN/+inf/-inf pattern (per real
            component) differs from the exact product's.
        ``compared``
            Number of entries entering the finite metrics.
        ``bits_maxrel_re``, ``bits_cw_re``, ``bits_maxrel_im``, ``bits_cw_im``
            Complex products only: the same measures for each part on
            its own (``maxrel_re`` ... also): ``max |Re c - Re C| /
            |Re C|`` over ``Re C != 0``, and ``max |Re c - Re C| /
            (|Re A||Re B| + |Im A||Im B|)``; the imaginary part against
            ``|Re A||Im B| + |Im A||Re B|``. A part whose sum is 0 has an
            infinite componentwise error where ``c``'s part is not 0.
            Native complex GEMMs compute each part to its own accuracy, so
            a small part is judged on its own, not against the modulus.

    Notes
    -----
    Entries where ``C`` or ``c`` is non-finite are excluded from the finite
    metrics; a non-finite ``c`` where ``C`` is finite only shows up in
    ``nonfinite_mismatch``, so check that count too.  Complex errors use the
    modulus, and ``|A||B|`` uses the moduli of the entries.  The errors are
    evaluated in float64 after exact power-of-two scaling, accurate to a few
    bits, which is all an error measure needs.  For operands with NaN/Inf,
    the exact pattern assumes exact accumulation; a floating-point GEMM may
    also overflow to inf (or NaN) from finite products.  For complex operands
    the pattern follows the conventional formula, whereas BLAS kernels differ
    in which component of a non-finite entry becomes NaN (OpenBLAS's zgemm
    gives ``nan + nan j`` for ``(inf + 0j)(1 + 1j)``): compare complex
    non-finite positions with the native product instead.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    c = np.asarray(c)
    m, n = a.shape[0], b.shape[1]
    if c.shape != (m, n):
        raise ValueError(f"c has shape {c.shape}, expected {(m, n)}")
    ncomp = 2 if (a.dtype.kind == "c" or b.dtype.kind == "c" or c.dtype.kind == "c") else 1

    # Exact power-of-two scaling per entry: sigma_ij = s_i + t_j from the row
    # maxima of |A| and column maxima of |B| keeps |A||B| near 1.
    with np.errstate(under="ignore"):
        abs_a, s = _scaled_abs(a, axis=1)
        abs_b, t = _scaled_abs(b, axis=0)
        den = abs_a @ abs_b
    sigma = s[:, None] + t[None, :]

    with np.errstate(over="ignore", under="ignore"):
        if ref is None:
            his, los = _exact_components(a, b, extra_exp=-sigma)
            pad = [np.zeros((m, n))] * (ncomp - len(his))
            his, los = his + pad, los + pad
            # unscaled, for the non-finite pattern only (overflow to inf is the right answer)
            ref_parts = [np.ldexp(h, sigma.astype(np.int32)) for h in his]
        else:
            hi, lo = (np.asarray(r) for r in ref)
            ref_parts = _components(hi, ncomp)
            his = [np.ldexp(h, -sigma.astype(np.int32)) for h in ref_parts]
            los = [np.ldexp(x, -sigma.astype(np.int32)) for x in _components(lo, ncomp)]

    c_parts = _components(c, ncomp)
    mismatch = int(np.count_nonzero(_classify(c_parts) != _classify(ref_parts)))
    finite = np.ones((m, n), dtype=bool)
    for p in c_parts + ref_parts:
        finite &= np.isfinite(p)

    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        errs, mags = [], []
        for cp, h, lo in zip(c_parts, his, los):
            cs = np.ldexp(np.where(finite, cp, 0.0), -sigma.astype(np.int32))
            errs.append((cs - np.where(finite, h, 0.0)) - np.where(finite, lo, 0.0))
            mags.append(np.where(finite, h, 0.0) + np.where(finite, lo, 0.0))
        err = np.abs(errs[0]) if ncomp == 1 else np.hypot(errs[0], errs[1])
        mag = np.abs(mags[0]) if ncomp == 1 else np.hypot(mags[0], mags[1])

        rel_mask = finite & (mag != 0)
        rel = err[rel_mask] / mag[rel_mask]
        cw_mask = finite & (den != 0)
        cw = err[cw_mask] / den[cw_mask]
        maxrel = float(rel.max()) if rel.size else 0.0
        medrel = float(np.median(rel)) if rel.size else 0.0
        maxcw = float(cw.max()) if cw.size else 0.0

        # normwise: undo the per-entry scaling relative to the largest |C|
        if finite.any():
            log_mag = np.where(finite & (mag != 0), _frexp_exp(mag) + sigma, np.iinfo(np.int64).min)
            g = int(log_mag.max()) if (finite & (mag != 0)).any() else int(sigma[finite].max())
            shift = np.where(finite, sigma - g, 0).astype(np.int32)
            e_n = np.linalg.norm(np.ldexp(np.where(finite, err, 0.0), shift))
            c_n = np.linalg.norm(np.ldexp(np.where(finite, mag, 0.0), shift))
            normwise = 0.0 if e_n == 0 else (float(e_n / c_n) if c_n != 0 else _INF)
        else:
            normwise = 0.0

        parts = {}
        if ncomp == 2:
            parts = _part_measures(errs, mags, finite, a, b, s, t)

    return {
        **parts,
        "bits_maxrel": effective_bits(maxrel),
        "bits_cw": effective_bits(maxcw),
        "maxrel": maxrel,
        "maxcw": maxcw,
        "medrel": medrel,
        "normwise": normwise,
        "nonfinite_mismatch": mismatch,
        "compared": int(finite.sum()),
    }
