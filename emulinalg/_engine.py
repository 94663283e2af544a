"""One emulated (batched) GEMM: plan, split finite/non-finite, run the scheme, patch, assemble.

The front end (``_api``) has already validated shapes and dtypes and broadcast the batch
dimensions: ``a`` is (..., m, k), ``b`` is (..., k, n) with the same batch shape and a floating
or complex dtype of the same library.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from . import _planner
from ._plan import Plan
from ._precision import (
    NATIVE,
    REAL_DTYPE,
    SCHEMES,
    BF16x3,
    BF16xN,
    Level,
    OzakiI,
    OzakiII,
    level_for_dtype,
)
from ._stages import UNGATED, gaussian_keywords, stages
from ._timing import stage
from .algorithm import (
    bf16,
    certificate,
    operands,
    products,
    refinement,
    refit,
    residues,
    scaling,
    slices,
    support,
)
from .algorithm import parts as complex_parts
from .algorithm.moduli import MAX_MODULI, crt_constants
from .algorithm.operands import once
from .algorithm.scaling import ozaki2_prescale, ozaki2_shifts
from .algorithm.xputil import dd_add, dd_to_float32, make_complex

# Times a product's contraction index may split in two for entries beyond its certificate
# (``_k_split``): a molecule's symmetry zeros need about one split per mirror plane its basis
# functions follow (water's orbital products need three; docs/scf.md)
K_SPLITS = 3


def _dtype_name(xp, dt):
    for name in ("float64", "float32", "complex128", "complex64"):
        if dt == getattr(xp, name):
            return name
    raise TypeError(f"internal: unsupported dtype {dt}")


def _hook_operands(xp, backend, a, b, parts, real_name):
    """The operands for the backend's statistics hooks (``line_scan``, ``ozaki2_prescale``,
    ``ozaki2_certificate``): ``parts`` (float64), or, for float32 and complex64 inputs on a
    backend with ``narrow_statistics``, the inputs' own float32 parts (views): the hooks then
    read half the bytes and give the results of the float64 parts (every float32 is a
    float64)."""
    if real_name != "float32" or not stages(backend).narrow_statistics:
        return parts
    return operands.real_imag(xp, a) + operands.real_imag(xp, b)


def matmul(xp, backend, a, b, request, cfg, dd=False, sides=None):
    """Return ``(c, plan)`` for the batched product of validated operands.

    ``sides``: ``(side_a, side_b)``, the ``operands.Side`` of a prepared operand in this layout
    or None (``emulinalg.prepare``): the one-sided steps take their pieces from there (computed
    on first use), and the plan names what was reused.

    ``dd=True`` (float64/complex128 only) returns ``c`` as a double-double pair ``(hi, lo)``:
    ``hi`` is the usual result and ``lo`` the correctly rounded remainder of the exact emulated
    value (0 for entries computed natively), so that partial products (the dask layer's K-blocks)
    can be summed without losing the emulation's accuracy.
    """
    # a backend compiling kernels at first use runs the first product of a kind alone (the
    # kernels differ with the dtypes, batching, the requested scheme and family)
    kind = ("matmul", str(a.dtype), str(b.dtype), a.ndim > 2, dd, str(request), cfg.scheme)
    with contextlib.nullcontext(UNGATED) if backend is None else stages(backend).first_use(
        kind
    ) as gate:  # fmt: skip
        c, plan = _matmul(xp, backend, a, b, request, cfg, "dd" if dd else None, sides)
        if plan.scheme == "native":  # nothing emulated: the kind's kernels are still to come
            gate.idle()
    if dd and not isinstance(c, tuple):
        c = (c, xp.zeros_like(c))
    return c, plan


def _matmul(xp, backend, a, b, request, cfg, out, sides=None):
    """``matmul``; ``out="dd"`` returns a (hi, lo) pair when emulated (a plain array otherwise)."""
    uses = (None, None) if sides is None else tuple(None if s is None else s.use() for s in sides)
    c, plan = _product(xp, backend, a, b, request, cfg, out, uses)
    for which, use in zip(("x1 (A)", "x2 (B)"), uses):
        if use is not None:
            plan.notes.append(_prepared_note(which, use))
    return c, plan


def _prepared_note(which, use):
    """The plan's line on a prepared operand: the pieces the product reused and computed."""
    reused = ", ".join(use.reused) or "nothing"
    made = f"; computed and kept: {', '.join(use.computed)}" if use.computed else ""
    return f"prepared {which}: reused {reused}{made}"


def _product(xp, backend, a, b, request, cfg, out, uses, k_splits=None, native_out=None):
    """``_matmul`` with the prepared operands' ``operands.SideUse`` (None: not prepared);
    ``k_splits``: how many times more entries beyond the certificate may split the contraction
    index (``_k_split``) before the native product supplies them (None: ``K_SPLITS``);
    ``native_out``: a list that an emulated product appends its native entries' mask to (None:
    none; True: all), leaving those entries to the caller (None: the native product fills
    them here)."""
    dtype_name = _dtype_name(xp, a.dtype)
    real_name = REAL_DTYPE[dtype_name]
    if out == "dd" and real_name != "float64":
        raise ValueError("internal: double-double results are for float64/complex128 products")
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    batch = math.prod(a.shape[:-2])
    if request is None:
        request = level_for_dtype(real_name)
    plan = Plan(
        backend=backend.name if backend else _library_name(xp),
        precision=str(request),
        shape=(batch, m, n, k),
    )
    own_backend = backend
    backend = None if backend is None else stages(backend)
    note = backend.plan_note() if backend else ""
    if note:
        plan.notes.append(note)
    if request == NATIVE:
        return backend_native(xp, backend, a, b), plan
    if backend is None:
        plan.fallback = "no backend: no emulation backend for this array library yet"
        return xp.matmul(a, b), plan
    if batch * m * n * k == 0:
        plan.notes.append("empty product")
        return xp.matmul(a, b), plan
    performant = _planner.performant(cfg.strategy, request, real_name)
    if performant:
        # Even the fewest moduli/slices the level can need (plus one modulus: see
        # _planner.likely_faster) lose to native: skip the statistics.
        ok, why = _planner.likely_faster(
            backend, backend.name, request, _planner.family(cfg.scheme), dtype_name, m, n, k,
            batch, outputs=batch * m * n,
        )  # fmt: skip
        if not _record_verdict(plan, ok, why):
            plan._shape_verdict = True
            return backend.native_matmul(a, b), plan

    # The output's memory first, as the native product takes it: an output that cannot be
    # allocated raises MemoryError before the operands are scanned (a broadcast view is cheap
    # to make and slow to read).
    xp.empty(a.shape[:-2] + (m, n), dtype=a.dtype)
    ua, ub = uses
    if _narrow(backend, dtype_name, uses):  # every stage takes float32 parts (operands.wide)
        (ar, ai), (br, bi) = operands.real_imag(xp, a), operands.real_imag(xp, b)
    else:
        ar, ai = once(ua, ("float64 parts",), lambda: operands.parts(xp, a, backend))
        # the front end gave both operands the result dtype
        br, bi = once(ub, ("float64 parts",), lambda: operands.parts(xp, b, backend))
    hook_ops = _hook_operands(xp, backend, a, b, (ar, ai, br, bi), real_name)
    # A backend may fuse the NaN/Inf check with the statistics' first pass (``line_scan``:
    # ``(finite, exponents)`` or None), the line exponents then go to its prescale.
    scan = backend.line_scan
    # a level's Scheme II statistics follow: the backend may prepare them during the scan
    prepare = not isinstance(request, SCHEMES) and cfg.scheme != "ozaki1"
    with backend.quiet():
        scanned = None if scan is None else scan(*hook_ops, prepare=prepare)
        if scanned is not None:
            nonfinite = not scanned[0]
        else:
            finite = _finite(xp, backend, ua, ar, ai)
            nonfinite = not (finite and _finite(xp, backend, ub, br, bi))
    exponents = None if scanned is None or nonfinite else scanned[1]
    del scanned  # unused exponents (non-finite inputs) free what the scan prepared
    if nonfinite:
        rows_ok = once(ua, ("finite lines",), lambda: operands.finite_lines(xp, ar, ai, axis=-1))
        cols_ok = once(ub, ("finite lines",), lambda: operands.finite_lines(xp, br, bi, axis=-2))
        nonfinite = not (bool(xp.all(rows_ok)) and bool(xp.all(cols_ok)))
    if nonfinite:
        ar, ai = once(ua, ("finite parts",), lambda: operands.zero_nonfinite(xp, ar, ai))
        br, bi = once(ub, ("finite parts",), lambda: operands.zero_nonfinite(xp, br, bi))
        # (an operand without NaN/Inf keeps its values, and one with them is zeroed in every
        # product: a prepared operand's statistics are those of its zeroed parts either way)
        hook_ops = (ar, ai, br, bi)

    # the splits of the contraction index left (``_k_split``); a product with non-finite lines
    # keeps its native entries: its classes' products would each find them again
    first_split = k_splits is None
    k_splits = K_SPLITS if first_split else k_splits
    k_split = k_splits if a.ndim == b.ndim == 2 and real_name == "float64" and not nonfinite else 0
    # Stage timings (off unless recording): emulation work not marked otherwise is scaling.
    with backend.quiet(), stage("scaling"):
        c, native_mask = _emulate(
            xp, backend, ar, ai, br, bi, request, cfg.scheme, plan, real_name, dtype_name, out,
            performant, exponents, hook_ops, sides=uses, k_split=k_split,
            first_split=first_split,
        )  # fmt: skip
    if c is None:
        if native_out is not None:
            native_out.append(True)
        return backend.native_matmul(a, b), plan
    if isinstance(c, _KSplit):
        return _k_split(xp, own_backend, a, b, request, cfg, out, c.classes, plan, k_splits - 1,
                        native_out, prepared=uses != (None, None))  # fmt: skip
    if nonfinite:
        bad = ~(xp.expand_dims(rows_ok, axis=-1) & xp.expand_dims(cols_ok, axis=-2))
        plan.fallback = (plan.fallback + "; " if plan.fallback else "") + (
            "non-finite: entries in rows/columns with NaN/Inf computed natively"
        )
        native_mask = bad if native_mask is None else (native_mask | bad)
    if native_mask is not None:
        plan.native_entries = int(xp.count_nonzero(native_mask))
    if plan._lines is not None:  # a line patch's entries (those not also in the mask)
        plan.native_entries += _line_entries(xp, plan._lines, native_mask, m, n)
    if native_mask is not None and native_out is None:  # else the caller (_k_split) takes
        c = _with_native(xp, backend, a, b, c, native_mask)  # them from its whole product
    if native_out is not None:
        native_out.append(native_mask)
    return c, plan


def _with_native(xp, backend, a, b, c, native_mask):
    """``c`` (an array, or a double-double pair) with the entries of ``native_mask`` taken from
    the native product of ``a`` and ``b`` (a pair's low part 0 there)."""
    with backend.quiet():  # the native product's own overflows are the result here
        nat = backend.native_matmul(a, b)
    if isinstance(c, tuple):
        return (xp.where(native_mask, nat, c[0]), xp.where(native_mask, 0.0, c[1]))
    return xp.where(native_mask, nat, c)


def _narrow(backend, dtype_name, uses):
    """Whether the product's parts stay the float32 inputs' own (a backend with
    ``narrow_products``, a real float32 product, no prepared operand): generic code then widens
    them where it runs (``operands.wide``), and the backend's stages read half the bytes of a
    float64 copy and skip the pass that would make it."""
    st = stages(backend)
    narrow = st.narrow_products and st.narrow_statistics
    return narrow and dtype_name == "float32" and uses == (None, None)


def _finite(xp, backend, use, re, im):
    """``operands.all_finite`` of one operand, kept by a prepared one."""
    return once(use, ("finite check",), lambda: operands.all_finite(xp, backend, re, im))


def _record_verdict(plan, faster, why):
    """The plan records the cost model's verdict: a note when emulation is faster, else the
    fallback reason."""
    if faster:
        plan.notes.append(why)
    else:
        plan.fallback = why
    return faster


def _emulate(
    xp, backend, ar, ai, br, bi, request, family, plan, real_name, dtype_name, out, performant,
    exponents=None, hook_ops=None, verdict=None, fold=None, more=None, sides=(None, None),
    k_split=0, first_split=False,
):  # fmt: skip
    """Run the requested scheme (or choose one for a level); returns ``(c, native_mask)`` with
    ``c`` None when nothing can be emulated, and ``native_mask`` marking entries to take from
    the native product (None when there are none). ``exponents``: the backend's ``line_scan``
    line exponents of these operands, for its prescale; ``hook_ops``: the operands for its
    statistics hooks (``_hook_operands``; default: the float64 parts). A complex product at a
    level whose parts the complex route cannot keep runs split (``_split``), which passes the
    cost model's ``verdict(scheme, native_share)`` (default ``_planner.faster``), ``fold``,
    mapping its native mask onto the output's, and ``more(parts, prescale, native_mask)``, more
    entries for the refit (flat indices or None). ``sides``: the prepared operands'
    ``operands.SideUse``. ``k_split``: the contraction splits left (0: entries beyond stay
    native), ``first_split``: whether this is a product's first (``support.k_classes``'
    ``progress``); where the split is taken, ``c`` is a ``_KSplit``."""
    native_mask = prescale = patch = t_lower = None
    if isinstance(request, SCHEMES):
        scheme = request
        if isinstance(scheme, OzakiII) and scheme.gaussian and ai is None:  # real: the moduli
            scheme = OzakiII(moduli=scheme.moduli, mode=scheme.mode)
    else:
        family = _planner.family(family)
        if family != "ozaki2":  # Scheme I's certificate (_choose) and product are generic
            ar, ai, br, bi = operands.wide(xp, ar, ai, br, bi)
        if _planner.part_checked(request, ai is not None):
            with stage("statistics"):
                check = _part_check(xp, backend, ar, ai, br, bi, request, family, real_name,
                                    exponents)  # fmt: skip
            if check.split:
                return _split(xp, backend, ar, ai, br, bi, request, family, plan, dtype_name,
                              out, performant, check)  # fmt: skip
            t_lower, check = check.lower, None  # m x n: for the certificate only
        with stage("statistics"):
            choice = _choose(
                xp, backend, ar, ai, br, bi, request, family, real_name, exponents, hook_ops,
                sides, t_lower,
            )  # fmt: skip
        t_lower = None
        scheme, prescale, native_mask, patch = choice[:4]
        beyond_note = ""
        if choice.own:
            plan.fallback = (
                f"precision: {request} is not certified on every entry; used the most accurate "
                f"configuration, {scheme}"
            )
            beyond_note = f" (the {level_for_dtype(real_name)} level certifies none of them)"
        if scheme is None:
            plan.fallback = (
                f"precision: no {family} configuration certifies {request} on these inputs"
            )
            plan.native_entries = math.prod(plan.shape[:3])
            return None, None
        if choice.note:
            plan.notes.append(choice.note)
        elif choice.certified:
            target = _planner.target_for(request, ar.shape[-1], backend, _outputs(ar, br),
                                         ai is not None)  # fmt: skip
            plan.notes.append(certificate.guarantee_note(target, family))
        m, n, k = ar.shape[-2], br.shape[-1], ar.shape[-1]
        if verdict is None:

            def verdict(scheme, share):
                return _planner.faster(backend.name, scheme, dtype_name, m, n, k, plan.shape[0],
                                       share)  # fmt: skip

        if performant:
            share = 0.0  # of the output, a line patch's native products
            if isinstance(patch, refinement.LinePatch):
                share = _line_entries(xp, patch, None, m, n) / (m * n)
            if not _record_verdict(plan, *verdict(scheme, share)):
                return None, None  # the statistics asked for more than native's time allows
        shown = native_mask if fold is None or native_mask is None else fold(native_mask)
        count = 0 if native_mask is None else int(xp.count_nonzero(shown))
        if count and k_split:
            # performant: only a split predicted to fix every entry and to beat native
            classes = support.k_classes(xp, ar, ai, br, bi, native_mask, first_split,
                                        complete=performant)  # fmt: skip
            if classes is not None and (
                not performant or _planner.k_split_faster(
                    backend.name, scheme, dtype_name, m, n, [c.shape[0] for c in classes]
                )
            ):  # fmt: skip
                return _KSplit(classes), None
        if count and performant:  # the entries beyond take the whole native product
            plan.fallback = _planner.beyond_note(backend.name, count, scheme)
            return None, None
        if count:
            done = plan.fallback + "; " if plan.fallback else "precision: "
            plan.fallback = f"{done}{count} entries beyond {scheme} computed natively{beyond_note}"
        else:
            native_mask = None
    parts, rows, workspace = _run(xp, backend, ar, ai, br, bi, scheme, out or real_name,
                                  prescale, exponents, sides)  # fmt: skip
    if workspace is not None:
        plan.notes.append(
            f"workspace: {workspace / 2**30:.3g} GiB of device memory besides the inputs and "
            "output (residue planes and products, chunked by the backend; docs/limitations.md)"
        )
    if rows < ar.shape[-2]:
        plan.notes.append(
            f"memory: the product in {-(-ar.shape[-2] // rows)} blocks of {rows} rows of A, its "
            "working memory sized to the inputs and output (docs/limitations.md)"
        )
    cancelled = _planner.refits(request, scheme, ar.shape[-1], prescale is not None)
    extra = None
    if isinstance(patch, refinement.LinePatch):
        # the lines first: the refit's pick then sees their native values (and recomputes the
        # most cancelled of them too)
        lines, patch = patch, None
        if lines.entries.shape[0]:
            patch = xp.asarray(lines.entries, device=parts[0].device)
        parts = _native_lines(xp, backend, ar, ai, br, bi, parts, lines, out)
        plan.notes.append(_lines_note(lines, scheme))
        if fold is None:  # (a split's lines are of its stacked real product)
            plan._lines = lines
    if more is not None and cancelled:
        extra = more(parts, prescale, native_mask)
    if cancelled or patch is not None:
        parts = _refit_entries(xp, ar, ai, br, bi, parts, prescale, scheme, out, native_mask,
                               patch, cancelled, plan, extra, backend)  # fmt: skip
    plan.scheme = str(scheme)
    plan.gemms = _planner.gemm_count(scheme, complex_=ai is not None)
    plan.k_block = _k_block(backend, scheme, ar.shape[-1])
    dt = getattr(xp, dtype_name)
    if fold is not None and native_mask is not None:
        native_mask = fold(native_mask)
    if out == "dd":  # parts: (re_hi, re_lo[, im_hi, im_lo])
        if len(parts) == 2:
            return (parts[0], parts[1]), native_mask
        return (
            make_complex(xp, parts[0], parts[2], dt),
            make_complex(xp, parts[1], parts[3], dt),
        ), native_mask
    c = parts[0] if len(parts) == 1 else make_complex(xp, parts[0], parts[1], dt)
    return c, native_mask


def _schemes_text(schemes):
    """One scheme text for several products' (``OzakiII(moduli=14..17, mode=accurate)`` where
    they differ only in their counts; joined by " + " otherwise)."""
    uniq = list(dict.fromkeys(schemes))
    forms = {re.sub(r"=\d+(\.\.\d+)?,", "=#,", s, count=1) for s in uniq}
    counts = [int(x) for s in uniq for x in re.findall(r"=(\d+)(?:\.\.(\d+))?,", s)[0] if x] if (
        len(forms) == 1 and "#" in next(iter(forms))
    ) else []  # fmt: skip
    if len(uniq) == 1 or not counts:
        return " + ".join(uniq)
    lo, hi = min(counts), max(counts)
    return next(iter(forms)).replace("#", f"{lo}..{hi}" if lo < hi else str(lo))


class _KSplit(NamedTuple):
    """``_emulate``'s answer where the product runs as its contraction classes' products."""

    classes: list


def _k_split(
    xp, backend, a, b, request, cfg, out, classes, plan, k_splits, native_out=None, prepared=False
):  # fmt: skip
    """The product as the sum of its contraction classes' products ``a[:, K_c] @ b[K_c, :]``
    (``support``), each run at ``request`` with its own scaling vectors and certificate
    (``strategy="eager"``: the split was chosen against the native product already; a class
    with entries beyond its certificate splits again while ``k_splits`` > 0), as double-double
    and summed in double-double before one rounding to the output. Returns ``(c, plan)``; the
    plan names the classes, their schemes and their native entries (an entry native in some
    class's product is counted once; ``native_out`` as ``_product``'s). ``prepared``: whether
    an operand was prepared (the classes' products make their own pieces; the plan says so)."""
    total = native = None
    schemes, gemms, again = [], 0, False
    sub_cfg = replace(cfg, strategy="eager")
    quiet = stages(backend).quiet
    for idx in classes:
        ac, bc = xp.take(a, idx, axis=-1), xp.take(b, idx, axis=-2)
        masks = []
        part, sub = _product(
            xp, backend, ac, bc, request, sub_cfg, "dd", (None, None), k_splits, masks
        )
        del ac, bc
        if not isinstance(part, tuple):  # the class's product was native
            part = (part, xp.zeros_like(part))
        with quiet():  # a class's sum may overflow where the whole product does not
            total = part if total is None else dd_add(xp, total, part)
        mask = masks[0] if masks else True
        if mask is True:
            mask = xp.ones(part[0].shape, dtype=xp.bool)
        if mask is not None:
            native = mask if native is None else (native | mask)
        schemes.append(sub.scheme)
        plan.notes.extend(f"class {len(schemes)}: {x}" for x in sub.notes if x.startswith("patch:"))
        gemms += sub.gemms
        again = again or any(note.startswith("symmetry zeros") for note in sub.notes)
    # entries a class did not certify, and sums that overflowed in a class, are the native
    # product's (the whole product's, as without the split: a class's native sum beside
    # another's emulated one would be neither)
    with quiet():
        bad = ~(xp.isfinite(total[0]) & xp.isfinite(total[1]))
    if bool(xp.any(bad)):
        native = bad if native is None else (native | bad)
    plan.scheme = _schemes_text(schemes)
    plan.gemms = gemms
    plan.native_entries = 0 if native is None else int(xp.count_nonzero(native))
    if native is not None:
        plan.fallback = (
            f"precision: {plan.native_entries} entries beyond every class's certificate "
            "computed natively"
        )
        total = _with_native(xp, stages(backend), a, b, total, native)
    if native_out is not None:
        native_out.append(native)
    sizes = ", ".join(str(int(idx.shape[0])) for idx in classes)
    plan.notes.append(
        f"symmetry zeros: entries beyond one product's certificate (their terms small on one "
        f"side) run as the sum of the contraction index's {len(classes)} classes' products "
        f"(k = {sizes}{'; a class split again' if again else ''}; docs/precision.md)"
    )
    if prepared:
        plan.notes.append(
            "prepared operands: the contraction split's classes quantize their own column/row "
            "subsets (the prepared pieces serve the whole product only)"
        )
    if out == "dd":
        return total, plan
    return total[0], plan


def _part_check(xp, backend, ar, ai, br, bi, level, family, real_name, exponents=None):
    """``parts.PartCheck`` of a complex product at ``level`` on its route
    (``_planner.part_form``), with the backend's integer GEMM and native product; the line
    exponents of the backend's ``line_scan`` (``exponents``) where it made them."""
    st = stages(backend)
    form = _planner.part_form(level, family, ar.shape[-1], _outputs(ar, br), real_name, backend)

    def lower(xa, xb):
        return certificate.magnitude_lower(xp, st, xa, xb)

    def signed(xa, xb):
        return certificate.signed_estimate(xp, st, xa, xb)

    lines = _scanned_lines(xp, exponents, ar, br)
    return complex_parts.part_check(xp, lower, signed, st.int_matmul, ar, ai, br, bi, form,
                                    lines=lines, hooks=(st.balance_sides, st.balance_fine,
                                                        st.balance_stage))  # fmt: skip


def _scanned_lines(xp, exponents, ar, br):
    """``line_scan``'s exponents ((B, m), (B, n); INT32_MIN for a zero line) as the part
    check's line exponents ((..., m, 1), (..., 1, n) int64, 0 for a zero line), or None where
    there are none or their batch is not the operands' own (a broadcast one)."""
    if exponents is None:
        return None
    ea, eb = exponents[0], exponents[1]
    m, n = ar.shape[-2], br.shape[-1]
    if ea.size != math.prod(ar.shape[:-1]) or eb.size != math.prod(br.shape[:-2]) * n:
        return None

    def lines(e, shape):
        e = xp.astype(xp.reshape(e, shape), xp.int64)
        return xp.where(e == -(2**31), 0, e)

    return lines(ea, ar.shape[:-2] + (m, 1)), lines(eb, br.shape[:-2] + (1, n))


def _split(xp, backend, ar, ai, br, bi, request, family, plan, dtype_name, out, performant,
           check):  # fmt: skip
    """The split route of a complex product (``check``: its ``parts.PartCheck``): one real
    product of the stacked parts [Ar; Ai] (..., 2m, k) and [Br, Bi] (..., k, 2n) at ``request``
    (its blocks are Ar Br, Ar Bi, Ai Br, Ai Bi, each entry certified on its own sums: every part
    scaled and certified on its own), run as double-double and combined in double-double
    (Re = Ar Br - Ai Bi, Im = Ar Bi + Ai Br) before one rounding to the output: each part of the
    result is as accurate, relative to its own sums, as a real product at that level. Returns
    ``_emulate``'s ``(c, native_mask)``, an output entry native where any of its four is."""
    m, n, k = ar.shape[-2], br.shape[-1], ar.shape[-1]
    plan.notes.append(_planner.split_note(check))

    def block(x, r, c):
        return x[..., r * m : (r + 1) * m, c * n : (c + 1) * n]

    def fold(mask):
        return block(mask, 0, 0) | block(mask, 0, 1) | block(mask, 1, 0) | block(mask, 1, 1)

    def verdict(scheme, share):
        return _planner.split_faster(backend.name, scheme, dtype_name, m, n, k, plan.shape[0],
                                     share)  # fmt: skip

    def combine(hi, lo):
        return complex_parts.combine(
            xp, *((block(hi, r, c), block(lo, r, c)) for r, c in complex_parts.BLOCKS)
        )

    def more(parts, prescale, mask):  # the entries whose combined parts cancel most
        re, im = combine(*parts)
        exclude = None if mask is None else fold(mask)
        return split_cancelled(xp, re[0], im[0], prescale, m, n, exclude)

    a2, b2 = xp.concat([ar, ai], axis=-2), xp.concat([br, bi], axis=-1)
    c2, mask = _emulate(xp, backend, a2, None, b2, None, request, family, plan, "float64",
                        "float64", "dd", performant, verdict=verdict, fold=fold,
                        more=more)  # fmt: skip
    del a2, b2
    if c2 is None:
        return None, None
    re, im = combine(*c2)
    dt = getattr(xp, dtype_name)
    if out == "dd":
        return (make_complex(xp, re[0], im[0], dt), make_complex(xp, re[1], im[1], dt)), mask
    if dtype_name == "complex64":
        return make_complex(xp, dd_to_float32(xp, *re), dd_to_float32(xp, *im), dt), mask
    return make_complex(xp, re[0], im[0], dt), mask


def split_cancelled(xp, re, im, prescale, m, n, exclude=None):
    """Flat indices into the split route's stacked (..., 2m, 2n) output of the four products of
    the entries whose combined parts cancel most (``refit.pick`` of ``parts.combined_ratio``;
    None: none), the native ones (``exclude``, (..., m, n)) left out: the refit of the stacked
    product picks its own most cancelled entries, which are not those where Ar Br and Ai Bi
    (Ar Bi and Ai Br) cancel."""
    s, t, e, f = prescale

    def lines(r, c):
        rows, cols = slice(r * m, (r + 1) * m), slice(c * n, (c + 1) * n)
        return s[..., rows], t[..., cols], e[..., rows], f[..., cols]

    q = complex_parts.combined_ratio(xp, re, im, [lines(r, c) for r, c in complex_parts.BLOCKS])
    if exclude is not None:
        q = xp.where(exclude, xp.inf, q)
    idx = refit.pick(xp, xp.reshape(q, (-1,)))
    return None if idx is None else complex_parts.stacked_indices(xp, idx, m, n)


def _outputs(ar, br):
    """The number of output entries of a (batched) product of these operands."""
    return math.prod(ar.shape[:-1]) * br.shape[-1]


def _refit_entries(xp, ar, ai, br, bi, parts, prescale, scheme, out, native_mask, patch,
                   cancelled, plan, extra=None, backend=None):  # fmt: skip
    """``parts`` with entries recomputed with MAX_MODULI moduli (``refit.refit``): the certificate's
    ``patch``, ``extra`` flat indices and (``cancelled``) the most cancelled entries, those taken
    from the native product excluded; the plan says how many. A ``backend`` with its own Scheme
    II product recomputes them there (``refit.recomputed``)."""
    dd = out == "dd"
    grouped = [tuple(parts[i : i + 2]) for i in range(0, len(parts), 2)] if dd else list(parts)
    both = patch if extra is None else extra
    if patch is not None and extra is not None:
        both = xp.unique_values(xp.concat([patch, extra]))
    grouped, count = refit.refit(
        xp, ar, ai, br, bi, grouped, tuple(prescale), scheme.mode, out or _real_of(parts),
        exclude=native_mask, extra=both, cancelled=cancelled,
        product=None if backend is None else stages(backend).ozaki2_product,
        pick_hook=None if backend is None else stages(backend).refit_pick,
        inplace=True,  # the product's own outputs
    )  # fmt: skip
    if patch is not None:
        plan.notes.append(
            f"patch: {int(patch.shape[0])} entries {scheme} does not certify recomputed with "
            f"{MAX_MODULI} moduli"
        )
    if count and cancelled:
        small = refit.refits_all(math.prod(parts[0].shape), ar.shape[-1])
        plan.notes.append(refit.note(small, count))
    return tuple(x for g in grouped for x in g) if dd else tuple(grouped)


def _native_lines(xp, backend, ar, ai, br, bi, parts, lines, out):
    """``parts`` (a 2-D product's, written in place; "dd": (hi, lo) pairs flattened, the low
    parts 0 there) with the rows ``lines.rows`` and columns ``lines.cols`` of the output and the
    entries of its block (a ``refinement.LinePatch``'s) taken from float64 native products of
    the operands' parts (float32 parts widened: at or above either level's native product).
    Complex: Re = Ar Br - Ai Bi and Im = Ar Bi + Ai Br, the four real products of a native
    complex GEMM. Where the backend declares ``line_pieces``, each product is summed over pieces
    of K of about sqrt(k) (at least LINE_K_MIN), so that its rounding errors stay below the
    native GEMM's blocked sums (a GEMV's one chain of k does not); elsewhere its GEMM of the
    lines splits k itself. Only the lines are copied (and widened where the parts are
    float32), a piece of K at a time; columns are the rows of the transposed product (a BLAS
    GEMM of a few output columns is the slow shape). A backend's ``line_products`` takes a
    whole product of few lines (rows, columns, a block thinner than LINE_K_MIN) in one call, by
    the same pieces."""
    dd = out == "dd"
    pieces = stages(backend).line_pieces
    take_columns = stages(backend).take_columns
    line_products = stages(backend).line_products
    targets = [parts[i : i + 2] for i in range(0, len(parts), 2)] if dd else [(p,) for p in parts]

    def conv(x):  # float64 products (float32 parts widened: above either level's native)
        return x if x is None or x.dtype == xp.float64 else xp.astype(x, xp.float64)

    def products(a_r, a_i, b_r, b_i, mm=backend.native_matmul):
        re = mm(a_r, b_r)
        if a_i is not None and b_i is not None:
            re = re - mm(a_i, b_i)
        if len(targets) == 1:
            return [re]
        im = [mm(x, y) for x, y in ((a_r, b_i), (a_i, b_r)) if x is not None and y is not None]
        return [re, xp.zeros_like(re) if not im else im[0] if len(im) == 1 else im[0] + im[1]]

    def native(i, j):
        thin = i is None or j is None or min(len(i), len(j)) < LINE_K_MIN
        if pieces and thin and line_products is not None:
            got = whole_lines(i, j)
            if got is not None:
                return got
        if i is None and j is not None and pieces:  # columns: rows of the transposed product
            t = xp.matrix_transpose
            tops = [None if x is None else t(x) for x in (br, bi, ar, ai)]
            return [t(q) for q in native_of(*tops, j, None)]
        return native_of(ar, ai, br, bi, i, j)

    def whole_lines(i, j):  # the backend's product of the lines (None: it declines one)
        step = line_step(ar.shape[-1])

        def mm(x, y):
            got = line_products(x, y, i, j, step)
            if got is None:
                raise _Declined
            return got

        try:
            return products(ar, ai, br, bi, mm)
        except _Declined:
            return None

    def native_of(ar, ai, br, bi, i, j):
        # by pieces of K of about sqrt(k): a line's GEMM (a GEMV for one line) sums all of k in
        # one chain, above the native GEMM's blocked chains; these chains are shorter. Each
        # piece gathers its own lines: small buffers that the allocator reuses (fresh pages
        # of a whole gathered operand cost more than its copy), widened piece by piece. A block
        # of at least LINE_K_MIN rows and columns is a GEMM like the native one (its blocked
        # chains): pieces only as long as its gathered lines fit LINE_BLOCK_BYTES.
        k = ar.shape[-1]
        step = k
        if pieces and (i is None or j is None or min(len(i), len(j)) < LINE_K_MIN):
            step = line_step(k)
        elif pieces:
            step = block_step(k, len(i) + len(j))
        total = None
        for k0 in range(0, k, step):
            ks = slice(k0, k0 + step)
            ops = [lines_of(x, (slice(None), ks), i, 0) for x in (ar, ai)]
            ops += [lines_of(x, (ks, slice(None)), j, 1) for x in (br, bi)]
            part = products(*ops)
            if total is None:
                total = part
            else:
                for t, q in zip(total, part):
                    t += q
        return total

    def lines_of(x, piece, idx, axis):  # the lines idx (along axis) of a piece of K
        if x is None:
            return None
        if idx is None:
            return conv(x[piece])
        if axis == 0:  # indexed, not taken: a take copies a strided piece whole first
            return conv(x[idx, piece[1]])
        y = x[piece]  # the rows of a C-ordered B: taken (its gather and GEMM are the faster)
        took = None if take_columns is None else take_columns(y, idx)
        if took is not None:  # the backend's gather (float64)
            return took
        flags = getattr(y, "flags", None)
        strided = flags is not None and not flags.c_contiguous  # B.T's, a complex part's
        return conv(y[:, idx] if strided else xp.take(y, idx, axis=1))

    dev = parts[0].device
    block = lines.block if lines.block is not None else (lines.rows[:0], lines.cols[:0])
    for rows, cols in ((lines.rows, None), (None, lines.cols), block):
        if 0 in (len(x) for x in (rows, cols) if x is not None):
            continue
        i = None if rows is None else xp.asarray(rows, device=dev)
        j = None if cols is None else xp.asarray(cols, device=dev)
        if i is None:
            at = (slice(None), j)
        elif j is None:
            at = (i, slice(None))
        else:
            at = (xp.reshape(i, (-1, 1)), xp.reshape(j, (1, -1)))
        for group, v in zip(targets, native(i, j)):
            for x, val in zip(group, (xp.astype(v, group[0].dtype), 0.0)):  # (hi, lo): lo 0
                x[at] = val
    return parts


class _Declined(Exception):
    """A backend's ``line_products`` declined one of a line patch's products."""


# The shortest pieces of K of a line patch's native products (``_native_lines``)
LINE_K_MIN = 32


# The bytes of a line patch block's gathered lines per piece of K (``_native_lines``)
LINE_BLOCK_BYTES = 64 << 20


def block_step(k, lines):
    """The pieces of K of a line patch block's native product of ``lines`` rows and columns in
    all: as long as their float64 copies fit LINE_BLOCK_BYTES, a power of two of at least
    ``line_step(k)`` (or all of k)."""
    step = line_step(k)
    while step < k and 2 * step * lines * 8 <= LINE_BLOCK_BYTES:
        step *= 2
    return min(step, k)


def line_step(k):
    """The pieces of K of a line patch's native products (``line_pieces``): about sqrt(k), at
    least LINE_K_MIN."""
    return max(LINE_K_MIN, 1 << math.ceil(math.log2(max(1.0, math.sqrt(k)))))


def _line_entries(xp, lines, native_mask, m, n):
    """How many entries of an (m, n) output a ``refinement.LinePatch``'s lines and block hold
    outside ``native_mask`` (None: none)."""
    rows, cols = lines.rows, lines.cols
    r_b, c_b = lines.block if lines.block is not None else (rows[:0], cols[:0])
    r_b, c_b = r_b[~np.isin(r_b, rows)], c_b[~np.isin(c_b, cols)]
    held = len(rows) * n + len(cols) * m - len(rows) * len(cols) + len(r_b) * len(c_b)
    if native_mask is None:
        return held
    dev = native_mask.device

    def count(r, c):
        x = native_mask
        x = x if r is None else xp.take(x, xp.asarray(r, device=dev), axis=0)
        x = x if c is None else xp.take(x, xp.asarray(c, device=dev), axis=1)
        return int(xp.count_nonzero(x))

    masked = count(rows, None) + count(None, cols) - count(rows, cols) + count(r_b, c_b)
    return held - masked


def _lines_note(lines, scheme):
    """The plan's note of a ``refinement.LinePatch``."""

    def count(n, word):
        return f"{n} {word}{'' if n == 1 else 's'}"

    what = [count(len(lines.rows), "row"), count(len(lines.cols), "column")]
    if lines.block is not None:
        what.append(f"a block of {len(lines.block[0])} x {len(lines.block[1])} entries")
    return (
        f"patch: {', '.join(what)} where {scheme} does not certify the native product's error "
        "taken from the native product (refinement.line_patch)"
    )


def _real_of(parts):
    return "float32" if parts[0].dtype.itemsize == 4 else "float64"


def _library_name(xp):
    return getattr(xp, "__name__", "unknown").split(".")[-1]


def backend_native(xp, backend, a, b):
    return backend.native_matmul(a, b) if backend else xp.matmul(a, b)


# Output entries per row block at most: the exact accumulators hold ~10 int64 limbs per entry.
BLOCK_ENTRIES = 1 << 22
# Bytes of working memory per output entry and part in a row block of the generic loop (the CRT
# limbs and quotient, the modular product and its reduction, the block's split and residue
# planes of A), and the blocks' share of the product's inputs and output (the peaks this gives:
# docs/limitations.md, tests/core/test_memory.py).
WORK_BYTES_PER_ENTRY = 320
WORK_SHARE = 1.0
# Fewer rows per block than this make the GEMMs inefficient: the bound gives way below it.
MIN_BLOCK_ENTRIES = 1 << 15


def block_rows(backend, ar, ai, br, out_dtype):
    """Rows of A per block of the generic Scheme I/II loop (``_run``): a backend's declared
    ``block_entries``, or as many rows as keep the block's working memory within ``WORK_SHARE``
    times the product's inputs and output (their dtype: float32 parts for ``out_dtype``
    "float32"), between ``MIN_BLOCK_ENTRIES`` and ``BLOCK_ENTRIES`` output entries."""
    batch, (m, k), n = math.prod(ar.shape[:-2]), ar.shape[-2:], br.shape[-1]
    nparts = 1 if ai is None else 2
    budget = stages(backend).block_entries
    if budget is None:
        itemsize = 4 if out_dtype == "float32" else 8
        io = itemsize * nparts * batch * (m * k + k * n + m * n)
        fit = int(WORK_SHARE * io) // (WORK_BYTES_PER_ENTRY * nparts)
        budget = min(BLOCK_ENTRIES, max(MIN_BLOCK_ENTRIES, fit))
    return min(m, max(1, budget // max(1, batch * n)))


def _backend_prescale(backend, ar, ai, br, bi, mode, exponents=None):
    """The backend's ``ozaki2_prescale`` hook (same contract as ``scaling.ozaki2_prescale``;
    None: absent or declined). A backend with ``line_scan`` takes its ``exponents``."""
    hook = stages(backend).ozaki2_prescale
    if hook is None:
        return None
    if exponents is None:
        return hook(ar, ai, br, bi, mode)
    return hook(ar, ai, br, bi, mode, exponents=exponents)


def _run(xp, backend, ar, ai, br, bi, scheme, out_dtype, prescale, exponents=None,
         sides=(None, None)):  # fmt: skip
    """The scheme's product, by blocks of rows of A (``block_rows``) so the exact accumulators
    stay bounded; the blocks are written into the output as they finish. Scaling that couples
    rows (Scheme II's column shifts) is computed once, on the whole A.

    Returns ``(parts, rows, workspace)``: the parts (real[, imaginary]; with ``out_dtype="dd"``
    each part flattened into its (hi, lo) pair), the rows per block (all of A's rows where the
    product ran at once or in the backend's own kernels) and the bytes the backend's own product
    allocated besides inputs and output (its ``product_workspace``; None otherwise). A backend
    may run a whole Scheme II product in its own kernels (``backend.ozaki2_product``, same
    contract and bit-identical output as ``products.product``, on the whole operands; it
    returns None to decline).
    ``sides``: the prepared operands' ``operands.SideUse``, which keep their line statistics
    and the residue planes of their last shifts (``residues.kept_planes``)."""
    m = ar.shape[-2]
    backend = stages(backend)
    fused = backend.ozaki2_product
    gaussian = isinstance(scheme, OzakiII) and scheme.gaussian and ai is not None
    if gaussian and not backend.gaussian_moduli:  # its own product takes the moduli: generic
        fused = None
    extra = gaussian_keywords(gaussian)
    if not (isinstance(scheme, OzakiII) and fused is not None):
        ar, ai, br, bi = operands.wide(xp, ar, ai, br, bi)
    if isinstance(scheme, (BF16x3, BF16xN)):  # its own kernels: no exact accumulators
        res = bf16.product(xp, backend, ar, ai, br, bi, scheme, out_dtype)
        return (tuple(x for part in res for x in part) if out_dtype == "dd" else res), m, None
    imm = backend.int_matmul
    if isinstance(scheme, OzakiII) and prescale is None:
        prescale = _backend_prescale(backend, ar, ai, br, bi, scheme.mode, exponents)
        if prescale is None:  # generic from here on: widened once
            ar, ai, br, bi = operands.wide(xp, ar, ai, br, bi)
            prescale = ozaki2_prescale(xp, imm, ar, ai, br, bi, scheme.mode, sides)
    if isinstance(scheme, OzakiII) and fused is not None:
        # The backend's kernels bound their own memory: B's residues are made once.
        res = fused(ar, ai, br, bi, scheme.moduli, scheme.mode, out_dtype, prescale, **extra)
        if res is not None:
            size = backend.product_workspace
            ws = None if size is None else size(ar, ai, br, bi, scheme.moduli, **extra)
            return (tuple(x for part in res for x in part) if out_dtype == "dd" else res), m, ws
    ar, ai, br, bi = operands.wide(xp, ar, ai, br, bi)  # the generic loop's
    rows = block_rows(backend, ar, ai, br, out_dtype)
    b_planes = a_planes = None
    if isinstance(scheme, OzakiII):
        a_planes, b_planes = _kept_planes(xp, ar, ai, br, bi, scheme, prescale, sides)
    if isinstance(scheme, OzakiII) and rows < m and b_planes is None:
        # B's residues once for all row blocks
        b_planes = residues.b_residue_planes(
            xp, br, bi, prescale, scheme.moduli, scheme.mode, rows * br.shape[-1], gaussian
        )
    out = None
    for r0 in range(0, m, rows):
        sl = slice(r0, min(m, r0 + rows))
        a_r = ar[..., sl, :]
        a_i = None if ai is None else ai[..., sl, :]
        if isinstance(scheme, OzakiII):
            s, t, e, f = prescale
            pre = (s[..., sl], t, e[..., sl], f)
            a_p = None if a_planes is None else [tuple(p[..., sl, :] for p in g) for g in a_planes]
            blk = products.product(
                xp, imm, a_r, a_i, br, bi, scheme.moduli, scheme.mode, out_dtype, pre, b_planes,
                a_p, gaussian,
            )  # fmt: skip
        else:
            blk = slices.product(xp, imm, a_r, a_i, br, bi, scheme.slices, out_dtype)
        if out_dtype == "dd":
            blk = tuple(x for part in blk for x in part)
        if rows >= m:
            return blk, m, None
        if out is None:  # the whole output, filled block by block (no concatenation copy)
            shape = ar.shape[:-1] + (br.shape[-1],)
            out = tuple(xp.empty(shape, dtype=x.dtype, device=x.device) for x in blk)
        for o, x in zip(out, blk):
            o[..., sl, :] = x
    return out, rows, None


def _kept_planes(xp, ar, ai, br, bi, scheme, prescale, sides):
    """``(a_planes, b_planes)``: the residue planes of the prepared operands
    (``residues.kept_planes``), None for the others."""
    if sides == (None, None):
        return None, None
    gaussian = scheme.gaussian and ai is not None
    c = crt_constants(scheme.moduli, gaussian)
    mu, nu = ozaki2_shifts(xp, prescale, c.L, c.Q_down)
    near = scaling.rounds_to_nearest(scheme.moduli, ar.shape[-1], scheme.mode, gaussian)
    ops = ((ar, ai, mu, -1), (br, bi, nu, -2))
    return tuple(
        None if use is None else residues.kept_planes(xp, use, *op, scheme.moduli, near, gaussian)
        for use, op in zip(sides, ops)
    )


class _Choice(NamedTuple):
    """``_choose``'s result: the scheme (None: every entry native), the accurate prescale (None
    for a fixed configuration or Scheme I), the mask of entries taken from the native product
    (None: none), the certificate's patch (flat indices or None), whether the count is
    certified, the plan's note of a fixed configuration, and whether the native entries are
    the dtype's own level's (a level above it, ``_planner.settle``)."""

    scheme: object
    prescale: object
    native: object
    patch: object
    certified: bool
    note: str
    own: bool


def _choose(
    xp, backend, ar, ai, br, bi, level: Level, family, real_name, exponents=None, hook_ops=None,
    sides=(None, None), t_lower=None,
):  # fmt: skip
    """The level's configuration on these operands: a fixed one (``_planner.fixed_scheme``) or
    the certificate's (the smallest count of the family certifying the level on every entry it
    can, settled by ``_planner.settle``). ``t_lower``: a complex product's part check's lower
    bound of T as the certificate takes it (``parts.PartCheck.lower``, from
    ``certificate.parts_lower``), for Scheme II's certificate."""
    backend = stages(backend)
    k, outputs = ar.shape[-1], _outputs(ar, br)
    fixed = _planner.fixed_scheme(level, family, k, ai is not None, real_name)
    if fixed is not None:
        return _Choice(fixed.scheme, None, None, None, False, fixed.note, False)
    prescale = None
    # complex products modulo the Gaussian moduli where the backend's stages take them
    gaussian = family == "ozaki2" and ai is not None and backend.gaussian_moduli
    if family == "ozaki2":
        hook_ops = hook_ops or (ar, ai, br, bi)
        prescale = _backend_prescale(backend, *hook_ops, "accurate", exponents)
        if prescale is None:  # generic: the certificate's fallback then takes these too
            ar, ai, br, bi = operands.wide(xp, ar, ai, br, bi)
            prescale = ozaki2_prescale(xp, backend.int_matmul, ar, ai, br, bi, "accurate", sides)
        prescale.parts_lower = t_lower

    def certify(lev):  # (count, beyond, patch) of the family's certificate for a level
        target = _planner.target_for(lev, k, backend, outputs, ai is not None)
        if family == "ozaki2":
            return certificate.ozaki2_moduli_needed(
                xp, backend, ar, ai, br, bi, prescale, target, hook_ops, sides, gaussian
            )
        return (*certificate.ozaki1_slices_needed(xp, backend, ar, ai, br, bi, target), None)

    count, beyond, patch = certify(level)
    any_beyond = beyond is not None and bool(xp.any(beyond))
    if gaussian and any_beyond:  # the moduli's 20 hold more bits than the Gaussian 20: 3M
        gaussian = False
        count, beyond, patch = certify(level)
        any_beyond = beyond is not None and bool(xp.any(beyond))
    own_beyond = None
    if _planner.needs_own_level(level, real_name, any_beyond):
        own_beyond = certify(level_for_dtype(real_name))[1]
        if own_beyond is None:
            own_beyond = xp.zeros(beyond.shape, dtype=xp.bool)
    if prescale is not None:
        prescale.release()  # the bound GEMM's sums (m x n): not needed by the product
    own_all = own_beyond is not None and bool(xp.all(own_beyond))
    settled = _planner.settle(level, family, real_name, count, count is None, any_beyond, own_all)
    scheme = None
    if settled.count is not None:
        scheme = (
            OzakiII(moduli=settled.count, mode="accurate", gaussian=gaussian)
            if family == "ozaki2"
            else OzakiI(slices=settled.count)
        )
    native = {"level": beyond, "own": own_beyond, "all": None}[settled.native]
    patch = patch if settled.certified else None
    return _Choice(scheme, prescale, native, patch, settled.certified, "", settled.native == "own")


def _k_block(backend, scheme, k):
    kb = backend.k_block
    if isinstance(scheme, (BF16x3, BF16xN)):  # BF16xN's FP32 sums: 1024 of K at a time
        return bf16.WIDEN_K if isinstance(scheme, BF16xN) and k > bf16.WIDEN_K else None
    if kb is None:
        return None
    if isinstance(scheme, OzakiII):
        return kb(k, products.RESIDUE_PRODUCT_BOUND)
    return kb(k * scheme.slices * 2, slices.SLICE_PRODUCT_BOUND)
