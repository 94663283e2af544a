"""One emulated (batched) GEMM: plan, split finite/non-finite, run the scheme, patch, assemble.

The front end (``_api``) has already validated shapes and dtypes and broadcast the batch
dimensions: ``a`` is (..., m, k), ``b`` is (..., k, n) with the same batch shape and a floating
or complex dtype of the same library.
"""

from __future__ import annotations

import math

from . import _bf16, _cost, _ozaki1, _ozaki2, _refit, _select
from ._moduli import MAX_MODULI, MIN_MODULI, crt_constants
from ._plan import Plan
from ._precision import (
    LEVELS,
    MAX_SLICES,
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
from ._scaling import ozaki2_prescale
from ._timing import stage
from ._xputil import make_complex


def _dtype_name(xp, dt):
    for name in ("float64", "float32", "complex128", "complex64"):
        if dt == getattr(xp, name):
            return name
    raise TypeError(f"internal: unsupported dtype {dt}")


def _parts(xp, x, backend=None):
    """float64 real and imaginary parts (None when real); float64 operands are used as they are
    (nothing writes into them: a copy would cost a pass over each and its memory). A backend may
    convert in its own way (``backend.as_float64``, e.g. multithreaded)."""
    conv = getattr(backend, "as_float64", None)
    if conv is None:

        def conv(v):
            return xp.astype(v, xp.float64, copy=False)

    re, im = _split(xp, x)
    return conv(re), None if im is None else conv(im)


def _split(xp, x):
    """Real and imaginary parts as they are (None when real)."""
    if xp.isdtype(x.dtype, "complex floating"):
        return xp.real(x), xp.imag(x)
    return x, None


def _hook_operands(xp, backend, a, b, parts, real_name):
    """The operands for the backend's statistics hooks (``line_scan``, ``ozaki2_prescale``,
    ``ozaki2_certificate``): ``parts`` (float64), or, for float32 and complex64 inputs on a
    backend with ``narrow_statistics``, the inputs' own float32 parts (views): the hooks then
    read half the bytes and give the results of the float64 parts (every float32 is a
    float64)."""
    if real_name != "float32" or not getattr(backend, "narrow_statistics", False):
        return parts
    return _split(xp, a) + _split(xp, b)


def _all_finite(xp, backend, re, im):
    """True when every entry is finite: the backend's own check (``backend.all_finite``, e.g.
    multithreaded) or one sum per part: NaN and Inf entries make the sum non-finite; a sum that
    overflows (finite entries) only sends the caller to the per-line check."""
    check = getattr(backend, "all_finite", None)
    if check is not None:
        return check(re) and (im is None or check(im))
    ok = bool(xp.isfinite(xp.sum(re)))
    return ok and (im is None or bool(xp.isfinite(xp.sum(im))))


def _finite_lines(xp, re, im, axis):
    ok = xp.isfinite(re) if im is None else xp.isfinite(re) & xp.isfinite(im)
    return xp.all(ok, axis=axis)


def _zero_nonfinite(xp, re, im):
    ok = xp.isfinite(re) if im is None else xp.isfinite(re) & xp.isfinite(im)
    re = xp.where(ok, re, 0.0)
    return re, (None if im is None else xp.where(ok, im, 0.0))


def matmul(xp, backend, a, b, request, cfg, dd=False):
    """Return ``(c, plan)`` for the batched product of validated operands.

    ``dd=True`` (float64/complex128 only) returns ``c`` as a double-double pair ``(hi, lo)``:
    ``hi`` is the usual result and ``lo`` the correctly rounded remainder of the exact emulated
    value (0 for entries computed natively), so that partial products (the dask layer's K-blocks)
    can be summed without losing the emulation's accuracy.
    """
    if dd:
        c, plan = _matmul(xp, backend, a, b, request, cfg, "dd")
        if not isinstance(c, tuple):
            c = (c, xp.zeros_like(c))
        return c, plan
    return _matmul(xp, backend, a, b, request, cfg, None)


def _matmul(xp, backend, a, b, request, cfg, out):
    """``matmul``; ``out="dd"`` returns a (hi, lo) pair when emulated (a plain array otherwise)."""
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
    note = getattr(backend, "plan_note", None)
    if note is not None and note():
        plan.notes.append(note())
    if request == NATIVE:
        return backend_native(xp, backend, a, b), plan
    if backend is None:
        plan.fallback = "no backend: no emulation backend for this array library yet"
        return xp.matmul(a, b), plan
    if batch * m * n * k == 0:
        plan.notes.append("empty product")
        return xp.matmul(a, b), plan
    explicit = isinstance(request, SCHEMES)
    performant = cfg.strategy == "performant" and not explicit and request.bits <= LEVELS[real_name]
    if performant:
        # Even the fewest moduli/slices the level can need lose to native: skip the statistics.
        family = "ozaki1" if cfg.scheme == "ozaki1" else "ozaki2"
        target = _select.target_for(request, k, backend, batch * m * n)
        weight = target.weight if target.guarantee == "native" else None
        guess = _cost.likely_count(family, request.bits, k, weight)
        if not _faster(backend, guess, dtype_name, m, n, k, batch, plan):
            return backend.native_matmul(a, b), plan

    # The output's memory first, as the native product takes it: an output that cannot be
    # allocated raises MemoryError before the operands are scanned (a broadcast view is cheap
    # to make and slow to read).
    xp.empty(a.shape[:-2] + (m, n), dtype=a.dtype)
    ar, ai = _parts(xp, a, backend)
    br, bi = _parts(xp, b, backend)  # the front end gave both operands the result dtype
    hook_ops = _hook_operands(xp, backend, a, b, (ar, ai, br, bi), real_name)
    # A backend may fuse the NaN/Inf check with the statistics' first pass (``line_scan``:
    # ``(finite, exponents)`` or None), the line exponents then go to its prescale.
    scan = getattr(backend, "line_scan", None)
    # a level's Scheme II statistics follow: the backend may prepare them during the scan
    prepare = not isinstance(request, SCHEMES) and cfg.scheme != "ozaki1"
    with backend.quiet():
        scanned = None if scan is None else scan(*hook_ops, prepare=prepare)
        if scanned is not None:
            nonfinite = not scanned[0]
        else:
            nonfinite = not (_all_finite(xp, backend, ar, ai) and _all_finite(xp, backend, br, bi))
    exponents = None if scanned is None or nonfinite else scanned[1]
    del scanned  # unused exponents (non-finite inputs) free what the scan prepared
    if nonfinite:
        rows_ok = _finite_lines(xp, ar, ai, axis=-1)
        cols_ok = _finite_lines(xp, br, bi, axis=-2)
        nonfinite = not (bool(xp.all(rows_ok)) and bool(xp.all(cols_ok)))
    if nonfinite:
        ar, ai = _zero_nonfinite(xp, ar, ai)
        br, bi = _zero_nonfinite(xp, br, bi)
        hook_ops = (ar, ai, br, bi)

    # Stage timings (off unless recording): emulation work not marked otherwise is scaling.
    with backend.quiet(), stage("scaling"):
        c, native_mask = _emulate(
            xp, backend, ar, ai, br, bi, request, cfg.scheme, plan, real_name, dtype_name, out,
            performant, exponents, hook_ops,
        )  # fmt: skip
    if c is None:
        return backend.native_matmul(a, b), plan
    if nonfinite:
        bad = ~(xp.expand_dims(rows_ok, axis=-1) & xp.expand_dims(cols_ok, axis=-2))
        plan.fallback = (plan.fallback + "; " if plan.fallback else "") + (
            "non-finite: entries in rows/columns with NaN/Inf computed natively"
        )
        native_mask = bad if native_mask is None else (native_mask | bad)
    if native_mask is not None:
        plan.native_entries = int(xp.count_nonzero(native_mask))
        with backend.quiet():  # the native product's own overflows are the result here
            nat = backend.native_matmul(a, b)
            if isinstance(c, tuple):
                c = (xp.where(native_mask, nat, c[0]), xp.where(native_mask, 0.0, c[1]))
            else:
                c = xp.where(native_mask, nat, c)
    return c, plan


def _faster(backend, scheme, dtype_name, m, n, k, batch, plan):
    """The cost model's verdict; a slower prediction is recorded as the plan's fallback."""
    model = _cost.get_cost_model(backend.name)
    if model is not None:
        t_emu = model.emulated_seconds(scheme, dtype_name, m, n, k, batch)
        t_nat = model.native_seconds(dtype_name, m, n, k, batch)
        if t_emu < t_nat:
            plan.notes.append(
                f"performant: {scheme} predicted {t_emu:.3g} s < native {t_nat:.3g} s"
            )
            return True
        why = f"{scheme} predicted {t_emu:.3g} s vs native {t_nat:.3g} s ({model.source})"
    else:
        why = "no cost model"
    plan.fallback = (
        f"performant: native is faster than emulation on the {backend.name} backend at this "
        f"precision: {why} (strategy='eager' emulates anyway)"
    )
    return False


def _emulate(
    xp, backend, ar, ai, br, bi, request, family, plan, real_name, dtype_name, out, performant,
    exponents=None, hook_ops=None,
):  # fmt: skip
    """Run the requested scheme (or choose one for a level); returns ``(c, native_mask)`` with
    ``c`` None when nothing can be emulated, and ``native_mask`` marking entries to take from
    the native product (None when there are none). ``exponents``: the backend's ``line_scan``
    line exponents of these operands, for its prescale; ``hook_ops``: the operands for its
    statistics hooks (``_hook_operands``; default: the float64 parts)."""
    native_mask = prescale = patch = None
    if isinstance(request, SCHEMES):
        scheme = request
    else:
        family = "ozaki1" if family == "ozaki1" else "ozaki2"
        with stage("statistics"):
            scheme, prescale, native_mask, patch, own_mask = _choose(
                xp, backend, ar, ai, br, bi, request, family, real_name, exponents, hook_ops
            )
        certified = True
        beyond_note = ""
        if own_mask is not None:
            # Beyond the native precision the native product is the worse choice for the
            # entries no configuration certifies: take the most accurate configuration, but
            # never below the dtype's own level: what that level takes natively, so does this.
            scheme = OzakiII(moduli=MAX_MODULI) if family == "ozaki2" else OzakiI(slices=MAX_SLICES)
            own = level_for_dtype(real_name)
            plan.fallback = (
                f"precision: {request} is not certified on every entry; used the most accurate "
                f"configuration, {scheme}"
            )
            beyond_note = f" (the {own} level certifies none of them)"
            native_mask, certified, patch = own_mask, False, None
            if bool(xp.all(native_mask)):
                scheme = None
        if scheme is None:
            plan.fallback = (
                f"precision: no {family} configuration certifies {request} on these inputs"
            )
            plan.native_entries = math.prod(plan.shape[:3])
            return None, None
        if _exact_k1(ar, ai, request) and certified:
            plan.notes.append("k=1: exact product, rounded once")
        elif _complex_k1(ar, ai, request, family) and certified:
            plan.notes.append(
                "k=1, complex: not certified (the most moduli; a part whose two products cancel "
                "can lose the bits its smaller operand part dropped in the line scaling)"
            )
        elif certified:
            target = _select.target_for(request, ar.shape[-1], backend, _outputs(ar, br))
            plan.notes.append(_select.guarantee_note(target, family))
        m, n, k = ar.shape[-2], br.shape[-1], ar.shape[-1]
        if performant and not _faster(backend, scheme, dtype_name, m, n, k, plan.shape[0], plan):
            return None, None  # the statistics asked for more than native's time allows
        count = 0 if native_mask is None else int(xp.count_nonzero(native_mask))
        if count:
            done = plan.fallback + "; " if plan.fallback else "precision: "
            plan.fallback = f"{done}{count} entries beyond {scheme} computed natively{beyond_note}"
        else:
            native_mask = None
    parts = _run(xp, backend, ar, ai, br, bi, scheme, out or real_name, prescale, exponents)
    cancelled = _refits(request, scheme, prescale, ar)
    if cancelled or patch is not None:
        parts = _refit_entries(xp, ar, ai, br, bi, parts, prescale, scheme, out, native_mask,
                               patch, cancelled, plan)  # fmt: skip
    plan.scheme = str(scheme)
    plan.gemms = _gemm_count(scheme, complex_=ai is not None)
    plan.k_block = _k_block(backend, scheme, ar.shape[-1])
    dt = getattr(xp, dtype_name)
    if out == "dd":  # parts: (re_hi, re_lo[, im_hi, im_lo])
        if len(parts) == 2:
            return (parts[0], parts[1]), native_mask
        return (
            make_complex(xp, parts[0], parts[2], dt),
            make_complex(xp, parts[1], parts[3], dt),
        ), native_mask
    c = parts[0] if len(parts) == 1 else make_complex(xp, parts[0], parts[1], dt)
    return c, native_mask


def _outputs(ar, br):
    """The number of output entries of a (batched) product of these operands."""
    return math.prod(ar.shape[:-1]) * br.shape[-1]


def _refits(request, scheme, prescale, ar):
    """Whether a product refits its most cancelled entries (``_refit``): the dtype's own level
    (the native guarantee), Scheme II below the maximum count, k > 1."""
    return (
        isinstance(request, Level)
        and _select.target_for(request, ar.shape[-1]).guarantee == "native"
        and isinstance(scheme, OzakiII)
        and scheme.moduli < MAX_MODULI
        and prescale is not None
        and ar.shape[-1] > 1
    )


def _refit_entries(xp, ar, ai, br, bi, parts, prescale, scheme, out, native_mask, patch,
                   cancelled, plan):  # fmt: skip
    """``parts`` with entries recomputed with MAX_MODULI moduli (``_refit``): the certificate's
    ``patch`` and (``cancelled``) the most cancelled entries, those taken from the native product
    excluded; the plan says how many."""
    dd = out == "dd"
    grouped = [tuple(parts[i : i + 2]) for i in range(0, len(parts), 2)] if dd else list(parts)
    grouped, count = _refit.refit(
        xp, ar, ai, br, bi, grouped, tuple(prescale), scheme.mode, out or _real_of(parts),
        exclude=native_mask, extra=patch, cancelled=cancelled,
    )  # fmt: skip
    if patch is not None:
        plan.notes.append(
            f"patch: {int(patch.shape[0])} entries {scheme} does not certify recomputed with "
            f"{MAX_MODULI} moduli"
        )
    if count and cancelled:
        small = _refit.refits_all(math.prod(parts[0].shape), ar.shape[-1])
        plan.notes.append(_refit.note(small, count))
    return tuple(x for g in grouped for x in g) if dd else tuple(grouped)


def _real_of(parts):
    return "float32" if parts[0].dtype.itemsize == 4 else "float64"


def _gemm_count(scheme, complex_):
    if isinstance(scheme, (BF16x3, BF16xN)):  # BF16 products, 4M
        return scheme.gemms * (4 if complex_ else 1)
    if isinstance(scheme, OzakiII):  # 3M per modulus, plus the accurate-mode bound GEMM
        return scheme.moduli * (3 if complex_ else 1) + (scheme.mode == "accurate")
    return scheme.gemms * (4 if complex_ else 1)  # 4M per slice pair


def _library_name(xp):
    return getattr(xp, "__name__", "unknown").split(".")[-1]


def backend_native(xp, backend, a, b):
    return backend.native_matmul(a, b) if backend else xp.matmul(a, b)


# Output entries per row block: the exact accumulators hold ~10 int64 limbs per entry.
BLOCK_ENTRIES = 1 << 22


def _backend_prescale(backend, ar, ai, br, bi, mode, exponents=None):
    """The backend's ``ozaki2_prescale`` hook (same contract as ``_scaling.ozaki2_prescale``;
    None: absent or declined). A backend with ``line_scan`` takes its ``exponents``."""
    hook = getattr(backend, "ozaki2_prescale", None)
    if hook is None:
        return None
    if exponents is None:
        return hook(ar, ai, br, bi, mode)
    return hook(ar, ai, br, bi, mode, exponents=exponents)


def _run(xp, backend, ar, ai, br, bi, scheme, out_dtype, prescale, exponents=None):
    """The scheme's product, by blocks of rows of A so the exact accumulators stay bounded.
    Scaling that couples rows (Scheme II's column shifts) is computed once, on the whole A.

    Returns the parts (real[, imaginary]); with ``out_dtype="dd"`` each part is flattened into
    its (hi, lo) pair. A backend may run a whole Scheme II product in its own kernels
    (``backend.ozaki2_product``, same contract and bit-identical output as
    ``_ozaki2.product``, on the whole operands; it returns None to decline)."""
    if isinstance(scheme, (BF16x3, BF16xN)):  # its own kernels: no exact accumulators
        res = _bf16.product(xp, backend, ar, ai, br, bi, scheme, out_dtype)
        return tuple(x for part in res for x in part) if out_dtype == "dd" else res
    imm = backend.int_matmul
    fused = getattr(backend, "ozaki2_product", None)
    if isinstance(scheme, OzakiII) and prescale is None:
        prescale = _backend_prescale(backend, ar, ai, br, bi, scheme.mode, exponents)
        if prescale is None:
            prescale = ozaki2_prescale(xp, imm, ar, ai, br, bi, scheme.mode)
    if isinstance(scheme, OzakiII) and fused is not None:
        # The backend's kernels bound their own memory: B's residues are made once.
        res = fused(ar, ai, br, bi, scheme.moduli, scheme.mode, out_dtype, prescale)
        if res is not None:
            return tuple(x for part in res for x in part) if out_dtype == "dd" else res
    m = ar.shape[-2]
    budget = getattr(backend, "block_entries", BLOCK_ENTRIES)
    rows = max(1, budget // max(1, math.prod(ar.shape[:-2]) * br.shape[-1]))
    b_planes = None
    if isinstance(scheme, OzakiII) and rows < m:  # B's residues once for all row blocks
        b_planes = _ozaki2.b_residue_planes(xp, br, bi, prescale, scheme.moduli, scheme.mode)
    blocks = []
    for r0 in range(0, m, rows):
        sl = slice(r0, min(m, r0 + rows))
        a_r = ar[..., sl, :]
        a_i = None if ai is None else ai[..., sl, :]
        if isinstance(scheme, OzakiII):
            s, t, e, f = prescale
            pre = (s[..., sl], t, e[..., sl], f)
            blocks.append(
                _ozaki2.product(
                    xp,
                    imm,
                    a_r,
                    a_i,
                    br,
                    bi,
                    scheme.moduli,
                    scheme.mode,
                    out_dtype,
                    pre,
                    b_planes,
                )
            )
        else:
            blocks.append(_ozaki1.product(xp, imm, a_r, a_i, br, bi, scheme.slices, out_dtype))
    if out_dtype == "dd":
        blocks = [tuple(x for part in blk for x in part) for blk in blocks]
    if len(blocks) == 1:
        return blocks[0]
    return tuple(xp.concat([b[p] for b in blocks], axis=-2) for p in range(len(blocks[0])))


def _exact_at_k1(level, family, real_name):
    """For a real product with k = 1 native is the correctly rounded exact product, which a
    bound cannot match (any nonzero error flips some roundings): take the smallest
    configuration that is exact for every input of that dtype instead."""
    b = LEVELS[real_name]  # significand bits of the inputs
    if family == "ozaki1":  # slices holding b bits: z = b//8 + 1; the triangle needs 2z - 1
        return OzakiI(slices=2 * (b // 8 + 1) - 1)
    # Scheme II keeps floor(L - 6) + 6 bits of an entry at k = 1 (e <= 128 * 128 / 4 = 64 * 64)
    n = next(
        n for n in range(MIN_MODULI, MAX_MODULI + 1) if math.floor(crt_constants(n).L - 6) + 6 >= b
    )
    return OzakiII(moduli=n, mode="accurate")


def _exact_k1(ar, ai, level):
    """Whether ``_choose`` takes ``_exact_at_k1``'s configuration (no certificate)."""
    return ar.shape[-1] == 1 and ai is None and level.name in ("float64", "float32")


def _complex_k1(ar, ai, level, family):
    """Complex products with k = 1 at a named level take the moduli that would hold the exact
    products of two significands (the most for float64) and are not certified: the native
    product is two products and a sum, which a bound of the parts' error relative to |a||b|
    cannot track where Re and Im cancel, and the line scaling keeps an entry's smaller part to
    the bits its larger part leaves (a = 1 + 2**-60 i loses its imaginary part)."""
    return (
        ar.shape[-1] == 1 and ai is not None and level.name in ("float64", "float32")
        and family == "ozaki2"
    )  # fmt: skip


def _choose(
    xp, backend, ar, ai, br, bi, level: Level, family, real_name, exponents=None, hook_ops=None
):
    """Smallest scheme of the family certifying the level on every entry it can; the entries it
    cannot are returned as a mask for the native product (None scheme: none at all). For a
    level above the dtype's with such entries, also the mask of the entries the dtype's own
    level cannot certify (None otherwise): ``(scheme, prescale, beyond, patch, own_beyond)``."""
    if _exact_k1(ar, ai, level):
        return _exact_at_k1(level, family, real_name), None, None, None, None
    if _complex_k1(ar, ai, level, family):
        # room for the exact products of two significands (2b bits) and the shifts' margin
        b2 = 2 * LEVELS[real_name] + 8
        n = next((n for n in range(MIN_MODULI, MAX_MODULI) if b2 <= crt_constants(n).L), MAX_MODULI)
        return OzakiII(moduli=n, mode="accurate"), None, None, None, None
    k, outputs = ar.shape[-1], _outputs(ar, br)
    prescale = None
    if family == "ozaki2":
        hook_ops = hook_ops or (ar, ai, br, bi)
        prescale = _backend_prescale(backend, *hook_ops, "accurate", exponents)
        if prescale is None:
            prescale = ozaki2_prescale(xp, backend.int_matmul, ar, ai, br, bi, "accurate")

    def certify(lev):  # (count, beyond, patch) of the family's certificate for a level
        target = _select.target_for(lev, k, backend, outputs)
        if family == "ozaki2":
            return _select.ozaki2_moduli_needed(
                xp, backend, ar, ai, br, bi, prescale, target, hook_ops
            )
        return (*_select.ozaki1_slices_needed(xp, backend, ar, ai, br, bi, target), None)

    count, beyond, patch = certify(level)
    own_beyond = None
    if level.bits > LEVELS[real_name] and beyond is not None and bool(xp.any(beyond)):
        own_beyond = certify(level_for_dtype(real_name))[1]
        if own_beyond is None:
            own_beyond = xp.zeros(beyond.shape, dtype=xp.bool)
    if hasattr(prescale, "lower"):
        prescale.lower = None  # the bound GEMM's sums (m x n): not needed by the product
    if count is None:
        scheme = None
    elif family == "ozaki2":
        scheme = OzakiII(moduli=count, mode="accurate")
    else:
        scheme = OzakiI(slices=count)
    return scheme, prescale, beyond, patch, own_beyond


def _k_block(backend, scheme, k):
    kb = getattr(backend, "k_block", None)
    if isinstance(scheme, (BF16x3, BF16xN)):  # BF16xN's FP32 sums: 1024 of K at a time
        return _bf16.WIDEN_K if isinstance(scheme, BF16xN) and k > _bf16.WIDEN_K else None
    if kb is None:
        return None
    if isinstance(scheme, OzakiII):
        return kb(k, _ozaki2.RESIDUE_PRODUCT_BOUND)
    return kb(k * scheme.slices * 2, _ozaki1.SLICE_PRODUCT_BOUND)
