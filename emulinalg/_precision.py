"""The ``precision=`` argument: parsing, validation and the explicit scheme specs."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from .algorithm.moduli import MAX_MODULI, MIN_MODULI

MIN_SLICES, MAX_SLICES = 1, 13
LEVELS = {"float64": 53, "float32": 24}  # significand bits of each named level (and its GEMM)
# the real dtype of each floating dtype (the precision of its parts)
REAL_DTYPE = {"float64": "float64", "float32": "float32", "complex128": "float64",
              "complex64": "float32"}  # fmt: skip
MAX_BITS = 106  # the widest level an integer request may ask for (double-double)
MIN_BF16_SLICES, MAX_BF16_SLICES = 1, 8  # BF16xN: 8 signed 8-bit digits hold 64 bits

ACCEPTED = (
    "precision must be one of: None (the inputs' own dtype), 'float64', 'float32', 'native', "
    f"an int number of mantissa bits in [1, {MAX_BITS}], emulinalg.OzakiI(slices=p) with "
    f"{MIN_SLICES} <= p <= {MAX_SLICES}, or emulinalg.OzakiII(moduli=n, mode='fast'|'accurate') "
    f"with {MIN_MODULI} <= n <= {MAX_MODULI}, emulinalg.BF16x3(), or emulinalg.BF16xN(slices=s, "
    f"products=d(d+1)/2) with {MIN_BF16_SLICES} <= d <= s <= {MAX_BF16_SLICES}"
)


def _count(value: Any, lo: int, hi: int, what: str) -> int:  # Any: validated here
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {value!r}; {ACCEPTED}") from None
    if isinstance(value, bool) or not lo <= v <= hi:
        raise ValueError(f"{what} must be in [{lo}, {hi}], got {value!r}; {ACCEPTED}")
    return v


@dataclass(frozen=True)
class OzakiI:
    """Ozaki Scheme I with ``slices`` INT8 slices per operand (signed leading slice, unsigned
    lower slices, p(p+1)/2 slice products).

    Parameters
    ----------
    slices : int
        Number of 8-bit slices p, 1 <= p <= 13; each operand keeps about 8p - 1 bits of its
        row/column maximum.

    Raises
    ------
    TypeError, ValueError
        For a non-integer or out-of-range count.

    Notes
    -----
    Ozaki, Ogita, Oishi, Rump, Numer. Algorithms 2012; Ootomo, Ozaki, Yokota, IJHPCA 2024.
    """

    slices: int

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "slices", _count(self.slices, MIN_SLICES, MAX_SLICES, "OzakiI slices")
        )

    @property
    def gemms(self) -> int:
        """Slice products per real product: the triangle p(p+1)/2."""
        return self.slices * (self.slices + 1) // 2

    def __str__(self) -> str:
        return f"OzakiI(slices={self.slices})"


def gemms_per_modulus(complex_: bool, gaussian: bool = False) -> int:
    """INT8 GEMMs (and residue planes) per modulus of a Scheme II product: one for real
    products, 3M's three for complex ones, two with the Gaussian moduli."""
    return (2 if gaussian else 3) if complex_ else 1


@dataclass(frozen=True)
class OzakiII:
    """Ozaki Scheme II with the first ``moduli`` INT8 moduli (256, 255, 253, 251, ...).

    Parameters
    ----------
    moduli : int
        Number of moduli n, 2 <= n <= 20; one INT8 GEMM per modulus (three for complex, 3M).
    mode : {"accurate", "fast"}
        Scaling: "accurate" bounds ``|A||B|`` with one extra INT8 GEMM; "fast" uses Cauchy-Schwarz
        on row/column norms (scale-invariant form).
    gaussian : bool
        Complex products modulo the Gaussian moduli (241, 233, 229, 221, ...: odd, every prime
        factor 1 mod 4), where the complex product splits into two real ones: two INT8 GEMMs
        per modulus instead of 3M's three (``emulinalg.algorithm.moduli``). Their moduli are
        smaller: n Gaussian moduli hold about as many bits as n - 1 of the others. Real
        products take the first moduli whatever this says.

    Raises
    ------
    TypeError, ValueError
        For a non-integer or out-of-range count or an unknown mode.

    Notes
    -----
    Ozaki, Uchino, Imamura, arXiv:2504.08009; Uchino et al., SC-W 2025 (GEMMul8);
    Uchino et al., arXiv:2512.08321 (complex 3M).
    """

    moduli: int
    mode: str = "accurate"
    gaussian: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "moduli", _count(self.moduli, MIN_MODULI, MAX_MODULI, "OzakiII moduli")
        )
        if self.mode not in ("accurate", "fast"):
            raise ValueError(
                f"OzakiII mode must be 'accurate' or 'fast', got {self.mode!r}; {ACCEPTED}"
            )
        g = self.gaussian
        if type(g).__module__ == "numpy" and type(g).__name__ in ("bool", "bool_"):
            object.__setattr__(self, "gaussian", bool(g))  # a numpy bool scalar
        elif not isinstance(g, bool):
            raise TypeError(f"OzakiII gaussian must be a bool, got {g!r}")

    @property
    def gemms(self) -> int:
        """INT8 GEMMs per real product: one per modulus, plus the accurate-mode bound GEMM."""
        return self.moduli + (self.mode == "accurate")

    def gemms_per_modulus(self, complex_: bool) -> int:
        """INT8 GEMMs per modulus of this scheme's products (``gemms_per_modulus``)."""
        return gemms_per_modulus(complex_, self.gaussian)

    def __str__(self) -> str:
        g = ", gaussian" if self.gaussian else ""
        return f"OzakiII(moduli={self.moduli}, mode={self.mode}{g})"


@dataclass(frozen=True)
class BF16x3:
    """The AMX paper's FP32 schedule: three BF16 components per operand (round-to-nearest
    residual split), the six products of the first three diagonals (A0B0, A0B1, A0B2, A1B1,
    A1B0, A2B0) accumulated together in FP32 tiles.

    Its own accuracy, FP32-like but not certified: products run in FP32 on every backend's AMX
    path (``emulinalg.BF16xN`` with float64 reconstruction is the exact-sum alternative).
    Rows of A and columns of B are first scaled by powers of two (exact), so operands of any
    float64 or float32 exponent range are taken without overflow; components below 2**-126 of
    their line's maximum, and products below 2**-126 of their row's and column's maxima
    together, are dropped (FP32 tiles flush subnormals).

    Notes
    -----
    Henry, Tang, Heinecke, ARITH 2019 (bf16x3, six products); Cui, Liu, "BF16 Component-Product
    Emulation of FP32 and FP64 GEMM on Intel AMX", arXiv:2609.04663, §4.2, Algorithm 1.
    """

    @property
    def slices(self) -> int:
        return 3

    @property
    def gemms(self) -> int:
        """BF16 products per real product."""
        return 6

    def __str__(self) -> str:
        return "BF16x3()"


@dataclass(frozen=True)
class BF16xN:
    """The AMX paper's FP64 schedules: ``slices`` BF16 slices per operand and the ``products``
    slice pairs of the first d diagonals (i + j < d, products = d (d + 1) / 2), each pair's FP32
    partial sums added in FP64.

    Slices are signed 8-bit digits (|d| <= 128) on a grid fixed per row of A / column of B (a
    power of two times 2**-(8s+7) for slice s), so every FP32 partial sum over 1024 of K is
    exact: the result is the exact sum of the kept products, rounded only by the FP64 additions.
    The paper's settings are slices=6, products in {6, 10, 15, 21}; each slice adds about 8
    bits of each line's maximum.

    Parameters
    ----------
    slices : int
        1 <= slices <= 8 (default 6).
    products : int
        A triangular number d (d + 1) / 2 with 1 <= d <= slices (default 10).

    Raises
    ------
    TypeError, ValueError
        For non-integer or out-of-range counts, or a product count that is not triangular.

    Notes
    -----
    Cui, Liu, "BF16 Component-Product Emulation of FP32 and FP64 GEMM on Intel AMX",
    arXiv:2609.04663, §4.3, Algorithm 2; per-line power-of-two grids instead of the paper's
    unscaled slices (Ozaki, Ogita, Oishi, Rump, Numer. Algorithms 2012), which removes its
    BF16 exponent-range restriction.
    """

    slices: int = 6
    products: int = 10

    def __post_init__(self) -> None:
        s = _count(self.slices, MIN_BF16_SLICES, MAX_BF16_SLICES, "BF16xN slices")
        p = _count(self.products, 1, s * (s + 1) // 2, f"BF16xN products (with slices={s})")
        d = next((d for d in range(1, s + 1) if d * (d + 1) // 2 == p), None)
        if d is None:
            raise ValueError(
                f"BF16xN products must be a triangular number d(d+1)/2 with d <= slices = {s} "
                f"(the first d diagonals), got {self.products!r}; {ACCEPTED}"
            )
        object.__setattr__(self, "slices", s)
        object.__setattr__(self, "products", p)

    @property
    def diagonals(self) -> int:
        """d: the pairs kept are those with i + j < d."""
        return next(d for d in range(1, self.slices + 1) if d * (d + 1) // 2 == self.products)

    @property
    def gemms(self) -> int:
        """BF16 products per real product."""
        return self.products

    def __str__(self) -> str:
        return f"BF16xN(slices={self.slices}, products={self.products})"


SCHEMES = (OzakiI, OzakiII, BF16x3, BF16xN)  # the explicit specs
# An explicit scheme spec (``isinstance(x, SCHEMES)``).
Scheme: TypeAlias = OzakiI | OzakiII | BF16x3 | BF16xN


@dataclass(frozen=True)
class Level:
    """A target accuracy: ``bits`` correct bits relative to the componentwise bound ``|A||B|``;
    ``name`` is "float64"/"float32" for the named levels (no worse than that native GEMM)."""

    bits: int
    name: str

    def __str__(self) -> str:
        return self.name


NATIVE: Final = "native"

# What ``precision=`` accepts (the products, ``prepare``, ``namespace``, ``config``): None (the
# level of the inputs' dtype), a named level, "native", a bit count in [1, MAX_BITS], or an
# explicit scheme; ``parse`` validates it.
Precision: TypeAlias = Literal["float64", "float32", "native"] | int | Scheme | None
# What ``parse`` makes of it: the request the planner works with.
Request: TypeAlias = Level | Scheme | Literal["native"] | None


def parse(precision: Any) -> Request:
    """Validate ``precision`` (any value: this is where a bad one is refused).

    Returns
    -------
    Request
        None (decide from the dtype), NATIVE, a :class:`Level`, or the scheme itself.

    Raises
    ------
    TypeError, ValueError
        For a value ``precision=`` does not accept (the message lists what it does).
    """
    if precision is None:
        return None
    if isinstance(precision, str) and precision == NATIVE:
        return NATIVE
    if isinstance(precision, SCHEMES):
        return precision
    if isinstance(precision, str):
        if precision in LEVELS:
            return Level(LEVELS[precision], precision)
        raise ValueError(f"unknown precision {precision!r}; {ACCEPTED}")
    if isinstance(precision, (bool, float)):
        raise TypeError(f"precision={precision!r} is not valid; {ACCEPTED}")
    try:
        bits = operator.index(precision)
    except TypeError:
        raise TypeError(f"precision={precision!r} is not valid; {ACCEPTED}") from None
    if not 1 <= bits <= MAX_BITS:
        raise ValueError(f"precision={precision!r} bits out of range; {ACCEPTED}")
    return Level(bits, f"{bits} bits")


def level_for_dtype(real_dtype_name: str) -> Level:
    """The default level of an input dtype ('float64' or 'float32')."""
    return Level(LEVELS[real_dtype_name], real_dtype_name)
