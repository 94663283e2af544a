"""The graded suite's cases (:mod:`.suite` grades them): each a pair of operands drawn from a
fixed seed (φ-matrices, wide exponent ranges, entries near overflow and in the subnormal range,
rank-deficient and cancellation-heavy products, complex with ``|Re| ~ |Im|``, with one part
1e-4 .. 1e-20 of the other and with exactly zero parts, zero rows/columns, NaN/Inf), named so
that a name always gives the same operands."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from emulinalg._precision import REAL_DTYPE
from emulinalg.inputs import phi_matrix, special_cases

__all__ = ["Case", "cases", "ldexp"]

PHIS = (0, 0.5, 1, 2, 4, 8)
DTYPES = ("float64", "float32", "complex128", "complex64")


@dataclass(frozen=True)
class Case:
    """One input pair of the suite.

    Attributes
    ----------
    name : str
        Unique id, ``family[param]-dtype-MxKxN``.
    family : str
        The generator (a key of ``GENERATORS``, or ``special:<name>`` for the catalogue of
        :func:`emulinalg.inputs.special_cases`).
    dtype : str
        float64, float32, complex128 or complex64.
    m, k, n : int
        A is m x k, B is k x n.
    params : tuple of (str, value)
        Generator parameters (``phi``, ``spread``, ``ratio``, ...).
    quick : bool
        Part of the quick suite (the CI test).
    precision : int or None
        The ``precision=`` the emulated product asks (bits above the dtype's: a level that
        must never be below native either); None: the dtype's own level.
    """

    name: str
    family: str
    dtype: str
    m: int
    k: int
    n: int
    params: tuple = ()
    quick: bool = False
    precision: int | None = None

    @property
    def seed(self) -> int:
        """Fixed seed derived from the name: the same case always gives the same operands."""
        return zlib.crc32(self.name.encode())

    @property
    def phi(self):
        return dict(self.params).get("phi")

    def operands(self) -> tuple[np.ndarray, np.ndarray]:
        """The numpy operands ``(a, b)`` of this case (read-only)."""
        if self.family.startswith("special:"):
            want = self.family.split(":", 1)[1]
            _, a, b = next(c for c in special_cases(seed=0) if c[0] == want)
        else:
            rng = np.random.default_rng(self.seed)
            a, b = GENERATORS[self.family](rng, self, **dict(self.params))
            a, b = np.asarray(a).astype(self.dtype), np.asarray(b).astype(self.dtype)
        for x in (a, b):
            x.setflags(write=False)
        return a, b


def _info(dtype):
    """(emax, emin, p): max = 2**emax (1 - 2**-p), smallest normal 2**emin, p significand bits."""
    fi = np.finfo(REAL_DTYPE[dtype])
    return int(fi.maxexp), int(fi.minexp), int(fi.nmant) + 1


def _cplx(dtype):
    return np.dtype(dtype).kind == "c"


def _signed(rng, shape, low=0.5, high=1.0):
    """Uniform magnitudes in [low, high) with random signs (float64)."""
    mag = rng.uniform(low, high, shape)
    return np.where(rng.random(shape) < 0.5, -mag, mag)


def _draw(rng, shape, dtype, phi=0.5):
    """φ-matrix entries ``(U - 0.5) exp(φ N)``; independent real and imaginary parts."""

    def one():
        return (rng.random(shape) - 0.5) * np.exp(phi * rng.standard_normal(shape))

    return one() + 1j * one() if _cplx(dtype) else one()


def ldexp(x, e):
    """``x * 2**e`` exactly, also where ``2.0**e`` itself would overflow (complex too)."""
    if np.iscomplexobj(x):
        out = np.empty(np.shape(x), dtype=np.complex128)
        out.real, out.imag = np.ldexp(x.real, e), np.ldexp(x.imag, e)
        return out
    return np.ldexp(x, e)


def _signed_like(rng, shape, dtype, low=0.5, high=1.0):
    if _cplx(dtype):
        return _signed(rng, shape, low, high) + 1j * _signed(rng, shape, low, high)
    return _signed(rng, shape, low, high)


def _gen_phi(rng, case, phi):
    """The field's standard test matrices (``inputs.phi_matrix``), seeded per case."""
    a = phi_matrix((case.m, case.k), phi, dtype=case.dtype, seed=case.seed)
    b = phi_matrix((case.k, case.n), phi, dtype=case.dtype, seed=case.seed + 1)
    return a, b


def _gen_row_spread(rng, case, spread):
    """Row i of A scaled by 2**e_i, column j of B by 2**f_j, e and f spread over [-spread,
    spread] (a shuffled even grid): each row and column has its own scale."""

    def grid(count):
        return rng.permutation(np.round(np.linspace(-spread, spread, count)).astype(np.int64))

    a = _draw(rng, (case.m, case.k), case.dtype) * np.exp2(grid(case.m))[:, None]
    b = _draw(rng, (case.k, case.n), case.dtype) * np.exp2(grid(case.n))[None, :]
    return a, b


def _gen_entry_spread(rng, case, spread):
    """Every entry scaled by its own 2**e, e uniform in [-spread, spread]: the exponent range
    is inside each row of A and each column of B."""
    a = _signed_like(rng, (case.m, case.k), case.dtype)
    b = _signed_like(rng, (case.k, case.n), case.dtype)
    a = a * np.exp2(rng.integers(-spread, spread + 1, a.shape))
    b = b * np.exp2(rng.integers(-spread, spread + 1, b.shape))
    return a, b


def _gen_near_overflow(rng, case):
    """Entries of A within a factor 2 of the largest finite number, B scaled so every result
    stays finite; the top-left quarter has equal signs, so those results come near the
    largest finite number themselves."""
    emax, _, _ = _info(case.dtype)
    ea = emax - (1 if _cplx(case.dtype) else 0)  # complex: Re = ar br - ai bi doubles
    eb = -math.ceil(math.log2(case.k))
    a = ldexp(_signed_like(rng, (case.m, case.k), case.dtype, 0.5, 0.99), ea)
    b = ldexp(_signed_like(rng, (case.k, case.n), case.dtype, 0.5, 0.99), eb)
    h, w = case.m // 2, case.n // 2
    a[:h] = np.abs(a[:h].real) + (1j * np.abs(a[:h].imag) if _cplx(case.dtype) else 0)
    b[:, :w] = np.abs(b[:, :w].real) + (1j * np.abs(b[:, :w].imag) if _cplx(case.dtype) else 0)
    if _cplx(case.dtype):  # (x + iy)(u + iv) with x, y, u, v > 0 cancels in Re: keep Im big
        b[:, :w] = b[:, :w].real
    return a, b


def _gen_overflow(rng, case):
    """Results that overflow: the first quarter of A's rows near 2**(emax-1) (positive) times a
    positive column (+inf) and a negative column (-inf) of B of magnitude ~4; every other result
    is finite."""
    emax, _, _ = _info(case.dtype)
    a = _draw(rng, (case.m, case.k), case.dtype)
    b = _draw(rng, (case.k, case.n), case.dtype)
    q = max(1, case.m // 4)
    a[:q] = np.ldexp(rng.uniform(0.5, 0.99, (q, case.k)), emax - 1)
    b[:, 0] = rng.uniform(3.0, 4.0, case.k)
    b[:, 1] = -rng.uniform(3.0, 4.0, case.k)
    b[:, 2:] = ldexp(
        b[:, 2:], -(emax // 2)
    )  # the other columns keep the huge rows' products finite
    return a, b


def _gen_subnormal_entries(rng, case):
    """Normal O(1) entries with a third of each row of A (and of B's rows) subnormal."""
    _, emin, _ = _info(case.dtype)
    tiny = 2.0 ** (emin - 10)
    a = _draw(rng, (case.m, case.k), case.dtype)
    b = _draw(rng, (case.k, case.n), case.dtype)
    a[:, ::3] = _signed_like(rng, a[:, ::3].shape, case.dtype) * tiny
    b[1::3, :] = _signed_like(rng, b[1::3, :].shape, case.dtype) * tiny
    return a, b


def _gen_subnormal_results(rng, case):
    """Normal operands whose products (and sums) lie in the subnormal range."""
    _, emin, p = _info(case.dtype)
    e = (emin - p // 2) // 2  # products near 2**(emin - p/2): about p/2 significant bits
    a = _signed_like(rng, (case.m, case.k), case.dtype) * 2.0**e
    b = _signed_like(rng, (case.k, case.n), case.dtype) * 2.0**e
    return a, b


def _gen_cancellation(rng, case, ratio):
    """``[X, X, S] @ [[Y], [-Y], [T]] = S T`` exactly, with X, Y of magnitude 2**ratio and S, T
    of magnitude 1: the exact result is 2**(2 ratio) times smaller than ``|A||B|``."""
    r = max(1, case.k // 8)
    h = (case.k - r) // 2
    r = case.k - 2 * h
    x = _draw(rng, (case.m, h), case.dtype) * 2.0**ratio
    y = _draw(rng, (h, case.n), case.dtype) * 2.0**ratio
    s = _draw(rng, (case.m, r), case.dtype)
    t = _draw(rng, (r, case.n), case.dtype)
    return np.concatenate([x, x, s], axis=1), np.concatenate([y, -y, t], axis=0)


def _gen_rank_deficient(rng, case, rank):
    """A and B of rank ``rank``, products of thin φ-matrices (rounded once)."""
    a = _draw(rng, (case.m, rank), case.dtype) @ _draw(rng, (rank, case.k), case.dtype)
    b = _draw(rng, (case.k, rank), case.dtype) @ _draw(rng, (rank, case.n), case.dtype)
    return a, b


def _gen_null_product(rng, case, rank):
    """A = P Q of rank ``rank`` and B = N G with the columns of N spanning the null space of Q:
    A B = 0 up to the rounding of A and B's entries, so the exact result is about u ``|A||B|``
    (u of the case's dtype): heavy cancellation in every entry."""
    dt = np.complex128 if _cplx(case.dtype) else np.float64
    p = np.asarray(_draw(rng, (case.m, rank), case.dtype), dtype=dt)
    q = np.asarray(_draw(rng, (rank, case.k), case.dtype), dtype=dt)
    basis, _ = np.linalg.qr(q.conj().T, mode="complete")
    null = basis[:, rank:]
    g = np.asarray(_draw(rng, (case.k - rank, case.n), case.dtype), dtype=dt)
    return p @ q, null @ g


def _gen_equal_parts(rng, case, phi):
    """Complex with ``|Re| ~ |Im|``: x (1 +- i (1 + 1e-3 δ)) for a real φ-matrix x."""

    def one(shape):
        x = (rng.random(shape) - 0.5) * np.exp(phi * rng.standard_normal(shape))
        s = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        return x + 1j * s * x * (1 + 1e-3 * rng.standard_normal(shape))

    return one((case.m, case.k)), one((case.k, case.n))


def _gen_purely_imaginary(rng, case, phi):
    """Both operands purely imaginary: a real result with an exactly zero imaginary part."""
    a = 1j * (
        (rng.random((case.m, case.k)) - 0.5) * np.exp(phi * rng.standard_normal((case.m, case.k)))
    )
    b = 1j * (
        (rng.random((case.k, case.n)) - 0.5) * np.exp(phi * rng.standard_normal((case.k, case.n)))
    )
    return a, b


def _gen_imag_times_real(rng, case, phi):
    """A purely imaginary, B real (stored complex): a purely imaginary result."""
    a, b = _gen_purely_imaginary(rng, case, phi)
    return a, b.imag + 0j


def _gen_small_part(rng, case, ratio, which):
    """Complex with a small imaginary part: ``x + i ratio y`` for φ-matrices x, y (φ = 0.5), in
    both operands (``which="both"``) or in A alone with B real, stored complex (``"one"``): an
    imaginary part of the result ``ratio`` (or ``2 ratio``) times its real part, which a native
    GEMM computes to its own accuracy (issue #26)."""

    def one(shape):
        x = (rng.random(shape) - 0.5) * np.exp(0.5 * rng.standard_normal(shape))
        y = (rng.random(shape) - 0.5) * np.exp(0.5 * rng.standard_normal(shape))
        return x + 1j * ratio * y

    a, b = one((case.m, case.k)), one((case.k, case.n))
    return a, (b.real + 0j if which == "one" else b)


def _gen_real_parts(rng, case, kind):
    """Operands whose parts are exactly zero, stored complex: both purely real (``"real"``), A
    real and B purely imaginary (``"real_imag"``), or every entry of both purely real or purely
    imaginary at random (``"mixed"``): exact zeros in whole parts of the result, or in parts of
    some terms."""
    a = _draw(rng, (case.m, case.k), case.dtype, phi=1.0)
    b = _draw(rng, (case.k, case.n), case.dtype, phi=1.0)
    if kind == "real":
        return a.real + 0j, b.real + 0j
    if kind == "real_imag":
        return a.real + 0j, 1j * b.imag
    return tuple(
        np.where(rng.random(x.shape) < 0.5, x.real + 0j, 1j * x.imag) for x in (a, b)
    )  # kind == "mixed"


def _gen_exact_sums(rng, case):
    """Short significands in a narrow exponent range, so that every partial sum of the product is
    representable: the native product is exact (infinite bits) and the emulated one must be."""
    _, _, p = _info(case.dtype)
    erange = 8 if p > 24 else 2
    spare = p - math.ceil(math.log2(case.k)) - 2 * erange - 1 - _cplx(case.dtype)
    bits = max(1, spare // 2)

    def one(shape):
        x = np.ldexp(rng.integers(1 - 2**bits, 2**bits, shape), rng.integers(-erange, 1, shape))
        return x.astype(np.float64)

    if _cplx(case.dtype):
        return (
            one((case.m, case.k)) + 1j * one((case.m, case.k)),
            one((case.k, case.n)) + 1j * one((case.k, case.n)),
        )
    return one((case.m, case.k)), one((case.k, case.n))


def _gen_zero_lines(rng, case):
    """Zero rows of A, zero columns of B and a zero inner index, in a φ-matrix product."""
    a = _draw(rng, (case.m, case.k), case.dtype, phi=1.0)
    b = _draw(rng, (case.k, case.n), case.dtype, phi=1.0)
    a[[0, case.m // 2], :] = 0
    b[:, [1, case.n - 1]] = 0
    a[:, case.k // 3] = 0
    b[case.k // 2, :] = 0
    return a, b


def _gen_nan_inf(rng, case):
    """NaN, +inf and -inf in a few rows of A and columns of B (+inf and -inf in one row: NaN)."""
    a = _draw(rng, (case.m, case.k), case.dtype, phi=1.0)
    b = _draw(rng, (case.k, case.n), case.dtype, phi=1.0)
    k = case.k
    a[2, 5 % k] = np.nan
    a[4, 1 % k] = np.inf
    a[7, 7 % k] = -np.inf
    a[9, 3 % k] = np.inf
    a[9, 11 % k] = -np.inf
    b[0, 3] = np.nan
    b[6 % k, 6] = np.inf
    if _cplx(case.dtype):
        a[11, 0] = complex(1.0, np.nan)
        b[2 % k, 8] = complex(0.0, -np.inf)
    return a, b


def _gen_inf_times_zero(rng, case):
    """An infinite entry of A against zeros of B: NaN where they meet, inf elsewhere."""
    a = _draw(rng, (case.m, case.k), case.dtype, phi=1.0)
    b = _draw(rng, (case.k, case.n), case.dtype, phi=1.0)
    a[3, 4] = np.inf
    b[4, ::2] = 0
    return a, b


GENERATORS = {
    "phi": _gen_phi,
    "row_spread": _gen_row_spread,
    "entry_spread": _gen_entry_spread,
    "near_overflow": _gen_near_overflow,
    "overflow": _gen_overflow,
    "subnormal_entries": _gen_subnormal_entries,
    "subnormal_results": _gen_subnormal_results,
    "cancellation": _gen_cancellation,
    "rank_deficient": _gen_rank_deficient,
    "null_product": _gen_null_product,
    "equal_parts": _gen_equal_parts,
    "purely_imaginary": _gen_purely_imaginary,
    "imag_times_real": _gen_imag_times_real,
    "small_part": _gen_small_part,
    "real_parts": _gen_real_parts,
    "exact_sums": _gen_exact_sums,
    "zero_lines": _gen_zero_lines,
    "nan_inf": _gen_nan_inf,
    "inf_times_zero": _gen_inf_times_zero,
}
COMPLEX_ONLY = {"equal_parts", "purely_imaginary", "imag_times_real", "small_part", "real_parts"}
# The small-part family's ratios |Im| / |Re| and operands, and the zero-part family's kinds.
SMALL_PART_RATIOS = (1e-4, 1e-8, 1e-12, 1e-16, 1e-20)
SMALL_PART_WHICH = ("both", "one")
REAL_PARTS_KINDS = ("real", "real_imag", "mixed")
# Families with several parameter sets (``cases``), not one per dtype (``_special_params``).
MULTI = {"small_part", "real_parts"}
NONFINITE_INPUTS = {"nan_inf", "inf_times_zero"}
# The levels above float64's the high-level cases ask (``Case.precision``).
HIGH_LEVELS = (54, 80, 106)


def _make(family, dtype, m, k, n, quick, precision=None, **params):
    tag = "".join(f"{v:g}" if isinstance(v, float) else str(v) for v in params.values())
    name = f"{family}{tag}-{dtype}-{m}x{k}x{n}" + ("" if precision is None else f"-p{precision}")
    return Case(name, family, dtype, m, k, n, tuple(params.items()), quick, precision)


def _special_params(family, dtype):
    """Per-dtype parameters of the special families (float32 cannot span 2**+-300)."""
    wide = REAL_DTYPE[dtype] == "float64"
    return {
        "row_spread": {"spread": 300 if wide else 48},
        "entry_spread": {"spread": 300 if wide else 48},
        "cancellation": {"ratio": 20 if wide else 8},
        "rank_deficient": {"rank": 2},
        "null_product": {"rank": 2},
        "equal_parts": {"phi": 1.0},
        "purely_imaginary": {"phi": 1.0},
        "imag_times_real": {"phi": 1.0},
    }.get(family, {})


def cases(quick: bool = False) -> list[Case]:
    """The suite's cases; ``quick=True`` gives the CI subset (every quick case is also in the
    full suite, with the same name, shape and operands).

    Returns
    -------
    list of Case
        φ ∈ {0, 0.5, 1, 2, 4, 8} for each dtype with k = 1, 64, 256, 1024, 4096 and 65536;
        the special families for each dtype where meaningful (complex-only ones for complex
        dtypes) at k = 64, 4096 and, for a few, 65536; and the catalogue of
        :func:`emulinalg.inputs.special_cases` (float64/complex128).
    """
    out: list[Case] = []
    # φ grid: m = n = k at k = 256, m = n = 8 at k = 65536, m = n = 32 otherwise (the exact
    # reference stays quick)
    for dtype in DTYPES:
        cplx = _cplx(dtype)
        few = (1, 8)  # the φ values of the costlier quick shapes
        grid = [  # (k, m = n, in the quick suite for φ)
            (1, 32, PHIS),
            (64, 32, PHIS),
            (256, 256, () if cplx else few),
            (1024, 32, few if cplx else PHIS),
            (4096, 32, () if cplx else PHIS),
            (65536, 8, ()),
        ]
        for phi in PHIS:
            for k, mn, quick_phis in grid:
                out.append(_make("phi", dtype, mn, k, mn, phi in quick_phis, phi=float(phi)))
        # one long-k case per dtype in the quick suite, on thin operands
        q65 = {"float64": 1.0, "float32": 2.0, "complex128": 4.0, "complex64": 0.5}[dtype]
        out.append(_make("phi", dtype, 4, 65536, 4, True, phi=q65))

    # special families, each dtype where meaningful
    for family in GENERATORS:
        if family == "phi" or family in MULTI:
            continue
        for dtype in DTYPES:
            if family in COMPLEX_ONLY and not _cplx(dtype):
                continue
            params = _special_params(family, dtype)
            out.append(_make(family, dtype, 24, 64, 24, True, **params))
            if family != "null_product":  # its complete QR is k x k
                out.append(_make(family, dtype, 16, 4096, 16, False, **params))
            else:
                out.append(_make(family, dtype, 32, 1024, 32, False, **params))
    for family in ("row_spread", "entry_spread", "cancellation", "near_overflow"):
        for dtype in ("float64", "complex64"):
            params = _special_params(family, dtype)
            out.append(_make(family, dtype, 8, 65536, 8, False, **params))
    # complex parts of very different sizes, and exactly zero parts (issue #26): judged per
    # part against native; at k = 1, 64 (quick) and 4096, and m = n = 128 at k = 64, where the
    # product does not refit every entry
    for dtype in ("complex128", "complex64"):
        for ratio in SMALL_PART_RATIOS:
            for which in SMALL_PART_WHICH:
                params = {"ratio": ratio, "which": which}
                out.append(_make("small_part", dtype, 24, 64, 24, True, **params))
                out.append(_make("small_part", dtype, 32, 1, 32, ratio in (1e-8, 1e-16), **params))
                out.append(_make("small_part", dtype, 128, 64, 128, False, **params))
                out.append(_make("small_part", dtype, 16, 4096, 16, False, **params))
        for kind in REAL_PARTS_KINDS:
            out.append(_make("real_parts", dtype, 24, 64, 24, True, kind=kind))
            out.append(_make("real_parts", dtype, 128, 64, 128, False, kind=kind))
            out.append(_make("real_parts", dtype, 16, 4096, 16, False, kind=kind))

    # levels above the dtype's (issue #26): wide exponent ranges, where no count certifies
    # them on every entry and the dtype's level takes some entries from the native product
    for dtype in ("float64", "complex128"):
        for bits in HIGH_LEVELS:
            spread = _special_params("row_spread", dtype)
            out.append(_make("phi", dtype, 32, 64, 32, True, bits, phi=8.0))
            out.append(_make("row_spread", dtype, 24, 64, 24, True, bits, **spread))
            out.append(_make("entry_spread", dtype, 24, 64, 24, True, bits, **spread))
            out.append(_make("phi", dtype, 32, 1024, 32, False, bits, phi=8.0))
            out.append(_make("entry_spread", dtype, 16, 4096, 16, False, bits, **spread))

    # a second, harder cancellation ratio (the exact result below native's rounding errors)
    for dtype in DTYPES:
        ratio = 40 if REAL_DTYPE[dtype] == "float64" else 16
        out.append(_make("cancellation", dtype, 24, 64, 24, True, ratio=ratio))
        out.append(_make("cancellation", dtype, 16, 4096, 16, False, ratio=ratio))

    # the catalogue of inputs.special_cases
    for name, a, b in special_cases(seed=0):
        m, k = a.shape
        n = b.shape[1]
        out.append(
            Case(
                f"special:{name}-{a.dtype}-{m}x{k}x{n}",
                f"special:{name}",
                str(a.dtype),
                m,
                k,
                n,
                (),
                True,
            )
        )

    names = [c.name for c in out]
    assert len(names) == len(set(names)), "duplicate case names"
    return [c for c in out if c.quick] if quick else out
