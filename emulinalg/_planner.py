"""Every decision of a product, in one place: the in-core engine (``_engine``) and the dask
graph (``emulinalg/backends/dask/``) ask the same functions.

- ``family``: which scheme family a level runs (the config's ``scheme``).
- ``target_for``: the level's certificate form (strict l1 or the native form,
  ``algorithm.certificate``).
- ``likely_faster`` / ``faster``: the performant verdict, from the backend's cost model
  (``_cost``): before the statistics with the fewest moduli/slices the level can need (one
  modulus more for Scheme II: a product native wins anyway skips them), then with the count
  the certificate chose.
- ``fixed_scheme``: the configurations a level takes without a certificate (k = 1).
- ``needs_own_level`` / ``settle``: what the certificate's count and beyond-entries become:
  the level's count with its beyond entries native, or, above the dtype's own precision, the
  most accurate configuration with native entries only where the dtype's level takes them.
- ``refit_form`` / ``refit_count`` / ``refits``: whether a product refits its most cancelled
  entries (``algorithm.refit``).
- ``gemm_count``: the low-precision GEMMs a scheme runs (for the plan).
- ``part_checked`` / ``part_form`` / ``split_faster`` / ``split_note``: whether a complex
  product checks each part's accuracy on its route (``algorithm.parts``), the slack of the
  route, and the split into real products where a part falls short.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from . import _cost
from ._precision import (
    LEVELS,
    MAX_SLICES,
    BF16x3,
    BF16xN,
    Level,
    OzakiI,
    OzakiII,
)
from ._stages import stages
from .algorithm import refit
from .algorithm.certificate import Target, native_weight
from .algorithm.moduli import MAX_MODULI, MIN_MODULI, crt_constants
from .algorithm.parts import PartForm

# Below this inner dimension the named levels take the strict certificate: the native product
# of a few terms is within a rounding or two of the exact one, closer than a statistical bound
# can follow, and such products cost little whatever the count.
NATIVE_MIN_K = 64


def family(scheme_setting):
    """The family a level runs: ``"ozaki1"`` where the config asks for Scheme I, else
    ``"ozaki2"``."""
    return "ozaki1" if scheme_setting == "ozaki1" else "ozaki2"


def target_for(level, k, backend=None, outputs=None, complex_=False):
    """The certificate's ``certificate.Target`` for a ``_precision.Level``: the named levels
    ("float64", "float32": as accurate as the native GEMM of that precision) take the native
    form with the backend's ``native_weight`` (of its complex GEMM for a complex product,
    ``complex_``) from k = NATIVE_MIN_K on; a number of bits (and a named level at smaller k)
    takes the strict certificate."""
    if level.name in LEVELS and k >= NATIVE_MIN_K:
        return Target(level.bits, "native", native_weight(backend, k, outputs, complex_))
    return Target(level.bits, "strict")


def performant(strategy, request, real_name):
    """Whether the cost model decides between emulation and native: ``strategy="performant"``,
    a level (an explicit scheme always runs) no finer than the dtype's own."""
    return (
        strategy == "performant"
        and isinstance(request, Level)
        and request.bits <= LEVELS[real_name]
    )


def likely_faster(
    backend, backend_name, level, fam, dtype_name, m, n, k, batch=1, cert_k=None, outputs=None
):
    """``(faster, why)`` before any statistics: whether the fewest moduli/slices ``level`` can
    need (``_cost.likely_count``, with the native form's weight as ``target_for`` gives it; one
    modulus more for Scheme II) are predicted faster than native for a product (..., m, k) x
    (..., k, n). ``cert_k``: the inner
    dimension the certificate sees (None: ``k``; the dask graph certifies over the whole k and
    multiplies blocks of it). ``backend``: the module whose native error the weight models
    (None: the default), ``outputs`` the product's output entries (``certificate.native_error``)."""
    ck = k if cert_k is None else cert_k
    target = target_for(level, ck, backend, outputs, dtype_name.startswith("complex"))
    weight = target.weight if target.guarantee == "native" else None
    guess = _cost.likely_count(fam, level.bits, ck, weight)
    if isinstance(guess, OzakiII) and dtype_name.startswith("complex") and (
        backend is not None and stages(backend).gaussian_moduli
    ):  # the fewest Gaussian moduli holding as many bits (two GEMMs per modulus)
        L = crt_constants(guess.moduli).L
        g = next((g for g in range(guess.moduli, MAX_MODULI + 1)
                  if crt_constants(g, True).L >= L), MAX_MODULI)  # fmt: skip
        guess = OzakiII(moduli=g, mode=guess.mode, gaussian=True)
    if isinstance(guess, OzakiII) and guess.moduli < MAX_MODULI:
        # one modulus of margin: the certificate often asks one more than the fewest, and a
        # verdict the statistics turn round costs their time on top of the native product
        guess = OzakiII(moduli=guess.moduli + 1, mode=guess.mode, gaussian=guess.gaussian)
    return faster(backend_name, guess, dtype_name, m, n, k, batch)


# The native product each backend's verdicts weigh the emulation against (what its users would
# otherwise get): the plan's verdict line names it
NATIVE_PRODUCT = {"numpy": "numpy.matmul", "amx": "numpy.matmul", "cupy": "cuBLAS"}


def _native(backend_name):
    name = NATIVE_PRODUCT.get(backend_name)
    return f"native ({name})" if name else "native"


def faster(backend_name, scheme, dtype_name, m, n, k, batch=1, native_share=0.0):
    """``(faster, why)``: the cost model's verdict on ``scheme`` against the native product,
    with the line the plan records (a note when faster, the fallback reason otherwise).
    ``native_share``: the share of the output a line patch takes from native products (their
    time, that share of the native product's, is added to the emulation's)."""
    model = _cost.get_cost_model(backend_name, _cost._flops(dtype_name, m, n, k, batch))
    if model is None:
        return False, native_note(backend_name, "no cost model")
    t_nat = model.native_seconds(dtype_name, m, n, k, batch)
    t_emu = model.emulated_seconds(scheme, dtype_name, m, n, k, batch) + native_share * t_nat
    what = f"{scheme}{_lines_share(native_share)}"
    if t_emu < t_nat:
        return True, (
            f"performant: {what} predicted {t_emu:.3g} s < {_native(backend_name)} {t_nat:.3g} s "
            f"({model.source})"
        )
    return False, native_note(
        backend_name,
        f"{what} predicted {t_emu:.3g} s vs {_native(backend_name)} {t_nat:.3g} s ({model.source})",
    )


def _lines_share(share):
    return f" with its line patch ({share:.2g} of the output native)" if share else ""


class Fixed(NamedTuple):
    """A configuration taken without a certificate, and what the plan says of it."""

    scheme: OzakiI | OzakiII
    note: str


def exact_at_k1(level, fam, real_name):
    """For a real product with k = 1 native is the correctly rounded exact product, which a
    bound cannot match (any nonzero error flips some roundings): the smallest configuration
    that is exact for every input of that dtype."""
    b = LEVELS[real_name]  # significand bits of the inputs
    if fam == "ozaki1":  # slices holding b bits: z = b//8 + 1; the triangle needs 2z - 1
        return OzakiI(slices=2 * (b // 8 + 1) - 1)
    # Scheme II keeps floor(L - 6) + 6 bits of an entry at k = 1 (e <= 128 * 128 / 4 = 64 * 64)
    n = next(
        n for n in range(MIN_MODULI, MAX_MODULI + 1) if math.floor(crt_constants(n).L - 6) + 6 >= b
    )
    return OzakiII(moduli=n, mode="accurate")


def fixed_scheme(level, fam, k, complex_, real_name):
    """The configuration a level takes at k = 1 without a certificate (None: certify):

    - real products at a named level: ``exact_at_k1`` (exact, rounded once);
    - complex products at a named level (Scheme II): the moduli that would hold the exact
      products of two significands (the most for float64), not certified: the native product
      is two products and a sum, which a bound of the parts' error relative to |a||b| cannot
      track where Re and Im cancel, and the line scaling keeps an entry's smaller part to the
      bits its larger part leaves (a = 1 + 2**-60 i loses its imaginary part)."""
    if k != 1 or level.name not in ("float64", "float32"):
        return None
    if not complex_:
        return Fixed(exact_at_k1(level, fam, real_name), "k=1: exact product, rounded once")
    if fam != "ozaki2":
        return None
    b2 = 2 * LEVELS[real_name] + 8  # the exact products of two significands, and the margin
    n = next((n for n in range(MIN_MODULI, MAX_MODULI) if b2 <= crt_constants(n).L), MAX_MODULI)
    return Fixed(
        OzakiII(moduli=n, mode="accurate"),
        "k=1, complex: not certified (the most moduli; a part whose two products cancel can "
        "lose the bits its smaller operand part dropped in the line scaling)",
    )


def most_accurate(fam):
    """The family's most accurate configuration."""
    return OzakiII(moduli=MAX_MODULI) if fam == "ozaki2" else OzakiI(slices=MAX_SLICES)


def above_dtype(level, real_name):
    """Whether ``level`` asks for more bits than the dtype's own level."""
    return level.bits > LEVELS[real_name]


def needs_own_level(level, real_name, any_beyond):
    """Whether the dtype's own level must be certified too: a level above the dtype's whose
    certificate leaves entries beyond every count (``settle`` then decides from both)."""
    return above_dtype(level, real_name) and bool(any_beyond)


class Settled(NamedTuple):
    """What runs after the certificate: ``count`` moduli/slices (None: nothing is emulated,
    every entry native), ``native`` the entries taken from the native product ("level": the
    level's beyond entries, "own": the dtype level's beyond entries, "all"), ``certified``
    whether the count is the certificate's (its exact step and refinement may lower it, and
    the plan states its guarantee)."""

    count: int | None
    native: str
    certified: bool


def settle(level, fam, real_name, count, all_beyond, any_beyond, own_all_beyond=False):
    """The decision on a certificate's result: ``count`` the smallest count certifying every
    certifiable entry (None when ``all_beyond``), ``any_beyond`` / ``all_beyond`` whether some /
    every entry is beyond every count, ``own_all_beyond`` the same of the dtype's own level
    (asked only where ``needs_own_level``).

    Beyond the native precision the native product is the worse choice for the entries no
    configuration certifies: the most accurate configuration runs, and the entries the dtype's
    own level would take natively are taken natively here too (never below that level)."""
    if needs_own_level(level, real_name, any_beyond):
        if own_all_beyond:
            return Settled(None, "all", False)
        mx = most_accurate(fam)
        return Settled(mx.moduli if fam == "ozaki2" else mx.slices, "own", False)
    if all_beyond:
        return Settled(None, "all", False)
    return Settled(count, "level", True)


def refit_form(request, k):
    """Whether products of ``request`` at inner dimension ``k`` refit their most cancelled
    entries (``algorithm.refit``) when their count allows (``refit_count``): the dtype's own
    level (the native guarantee), k > 1."""
    return isinstance(request, Level) and target_for(request, k).guarantee == "native" and k > 1


def refit_count(moduli):
    """Whether a Scheme II product of ``moduli`` refits (below the maximum count; 0: none)."""
    return 0 < moduli < MAX_MODULI


def refits(request, scheme, k, prescaled):
    """Whether a product refits its most cancelled entries: ``refit_form`` and ``refit_count``
    for a Scheme II product with the accurate prescale's statistics at hand (``prescaled``)."""
    return (
        refit_form(request, k)
        and isinstance(scheme, OzakiII)
        and refit_count(scheme.moduli)
        and prescaled
    )


def gemm_count(scheme, complex_):
    """The low-precision GEMMs ``scheme`` runs: BF16 products and Scheme I slice pairs 4M for
    complex, Scheme II 3M per modulus (2 with the Gaussian moduli) plus the accurate mode's
    bound GEMM."""
    if isinstance(scheme, (BF16x3, BF16xN)):
        return scheme.gemms * (4 if complex_ else 1)
    if isinstance(scheme, OzakiII):
        return scheme.moduli * scheme.gemms_per_modulus(complex_) + (scheme.mode == "accurate")
    return scheme.gemms * (4 if complex_ else 1)


# The per-part check of complex products (``algorithm.parts``): a part is fine where the route's
# bound on the entry's |A||B| (T = P_re + P_im) is within PART_SLACK of the part's own bound in
# the native form (error rms: the measured per-part bits of the complex route fall below native
# ZGEMM/CGEMM's from a factor of 5-6 on), within PART_SLACK_STRICT in the strict form (a worst
# case the realized errors stay far below: they fall below native from a factor of 100-200 on),
# and, for a route whose every entry runs at a known count n (k = 1's fixed configuration,
# a product refitting every entry), within 2**(floor(L_n) - bits - FIXED_PART_BITS): the
# scaled operands hold L_n bits, of which the measured loss leaves that many above the level.
# docs/precision.md gives the figures.
PART_SLACK = 4.0
PART_SLACK_STRICT = 32.0
FIXED_PART_BITS = 8


def part_checked(request, complex_):
    """Whether a product checks each part of a complex result (``algorithm.parts``): complex
    products at a level (explicit schemes run as asked)."""
    return complex_ and isinstance(request, Level)


def part_form(level, fam, k, outputs, real_name, backend=None):
    """The ``parts.PartForm`` of a complex product's route at ``level``: the fixed configuration
    at k = 1 (``fixed_scheme``) and a product refitting every entry (``refit.refits_all`` at the
    native form, Scheme II) compute every entry at a known count; the other routes are bound by
    their certificate's form (``target_for``)."""
    fixed = fixed_scheme(level, fam, k, True, real_name)
    count, route = None, ""
    if fixed is not None:
        count, route = fixed.scheme.moduli, "k=1"
    elif fam == "ozaki2" and refit_form(level, k) and refit.refits_all(outputs, k):
        count, route = MAX_MODULI, "every entry refitted"
    if count is not None:
        bits = math.floor(crt_constants(count).L) - level.bits - FIXED_PART_BITS
        return PartForm(2.0 ** max(bits, 0), False, f"{route}: {count} moduli")
    native = target_for(level, k, backend, outputs).guarantee == "native"
    if native:
        return PartForm(PART_SLACK, True, "native form")
    return PartForm(PART_SLACK_STRICT, False, "strict form")


def split_faster(backend_name, scheme, dtype_name, m, n, k, batch=1, native_share=0.0):
    """``(faster, why)`` as ``faster``, for the split route: ``scheme`` on the real (..., 2m, k)
    x (..., k, 2n) product of the stacked parts against the native complex product."""
    model = _cost.get_cost_model(backend_name, _cost._flops(dtype_name, m, n, k, batch))
    if model is None:
        return faster(backend_name, scheme, dtype_name, m, n, k, batch, native_share)
    t_nat = model.native_seconds(dtype_name, m, n, k, batch)
    t_emu = model.emulated_seconds(scheme, "float64", 2 * m, 2 * n, k, batch) + native_share * t_nat
    what = f"{scheme} on the split parts{_lines_share(native_share)}"
    if t_emu < t_nat:
        why = f"{what} predicted {t_emu:.3g} s < {_native(backend_name)} {t_nat:.3g} s"
        return True, f"performant: {why}"
    return False, native_note(
        backend_name,
        f"{what} predicted {t_emu:.3g} s vs {_native(backend_name)} {t_nat:.3g} s ({model.source})",
    )


def split_note(check):
    """The plan's line for a product split by the part check (``parts.PartCheck``)."""
    return (
        "complex parts: split into 4 real products (Ar Br, Ai Bi, Ar Bi, Ai Br: one real "
        "product of the stacked parts, each part certified on its own sums), combined in "
        f"double-double: the {check.part} part's sums fall to {check.share:.0e} of an entry's "
        "|A||B|, below what the complex route keeps at the level (docs/precision.md)"
    )


def k_split_faster(backend_name, scheme, dtype_name, m, n, sizes):
    """Whether a product with entries beyond its certificate runs faster as its contraction
    classes' products (``sizes``: each class's k; ``scheme`` for each) than natively (the cost
    model's prediction; without a model, the split: it keeps every entry emulated). The
    emulated product with its beyond entries from the native product (``_engine._with_native``)
    costs the native product and more, so native is the split's only rival."""
    model = _cost.get_cost_model(backend_name, _cost._flops(dtype_name, m, n, sum(sizes), 1))
    if model is None:
        return True
    t_split = sum(model.emulated_seconds(scheme, dtype_name, m, n, kc, 1) for kc in sizes)
    return t_split < model.native_seconds(dtype_name, m, n, sum(sizes), 1)


def beyond_note(backend_name, count, scheme):
    """The plan's fallback reason where ``strategy="performant"`` runs a product natively
    because ``count`` of its entries are beyond ``scheme``'s certificate (and no split of the
    contraction takes them): they would come from the native product, run on top of the
    emulation."""
    return native_note(
        backend_name,
        f"{count} entries beyond {scheme}'s certificate would take the native product on top of "
        "the emulation",
    )


def native_note(backend_name, why):
    """A performant verdict's fallback reason where native runs: ``why``, in the one form every
    such verdict takes."""
    return (
        f"performant: native is faster than emulation on the {backend_name} backend at this "
        f"precision: {why} (strategy='eager' emulates anyway)"
    )
