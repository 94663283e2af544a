"""Helpers shared by the tests (comparison against numpy, non-finite patterns, the demos)."""

from __future__ import annotations

import logging

import numpy as np

from emulinalg.harness.suite import nonfinite_codes

# Tolerances relative to |A||B| for comparing values with numpy's own product. numpy's error is
# at most about k*u*|A||B| and the emulated one no larger, so these only catch real mistakes.
RTOL = {
    "float64": 1e-12,
    "complex128": 1e-12,
    "float32": 2e-5,
    "complex64": 2e-5,
    "float16": 3e-2,
}


def graded_case(a, b, bits):
    """``(a, b, ref, native)``: the operands made read-only (cached cases are shared), their exact
    product and ``bits(accuracy)`` of numpy's native product on them."""
    from emulinalg.reference import accuracy, exact_matmul

    for x in (a, b):
        x.setflags(write=False)
    ref = exact_matmul(a, b)
    return a, b, ref, bits(accuracy(np.matmul(a, b), a, b, ref))


def nonfinite_mask(x):
    """True where any real component is NaN or infinite."""
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return ~(np.isfinite(x.real) & np.isfinite(x.imag))
    return ~np.isfinite(x)


def assert_same_nonfinite_pattern(got, want, *, complex_positions_only=True):
    """Same positions of NaN, +inf and -inf as ``want`` (numpy's own result).

    For complex results only the positions of non-finite entries are compared by default: which
    component becomes NaN rather than inf depends on the BLAS kernel (OpenBLAS's zgemm, for
    instance, turns ``inf + 0j`` into ``inf + nan j`` when it applies alpha).
    """
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.kind == "c" and complex_positions_only:
        g, w = nonfinite_mask(got), nonfinite_mask(want)
    else:
        g, w = nonfinite_codes(got), nonfinite_codes(want)
    bad = np.argwhere(g != w)
    assert bad.size == 0, (
        f"{len(bad)} entries differ in their non-finite pattern, first at {tuple(bad[0])}: "
        f"got {got[tuple(bad[0])]}, numpy {want[tuple(bad[0])]}"
    )


def assert_close_to(got, want, bound, rtol):
    """``|got - want| <= rtol * bound`` entrywise, where both are finite."""
    got = np.asarray(got).astype(np.complex128 if np.asarray(got).dtype.kind == "c" else np.float64)
    want = np.asarray(want).astype(got.dtype)
    bound = np.asarray(bound, dtype=np.float64)
    both = ~nonfinite_mask(got) & ~nonfinite_mask(want)
    err = np.abs(got - want)
    # an absolute floor for results in the subnormal range of the result dtype
    tiny = np.finfo(np.float64).tiny
    ok = ~both | (err <= rtol * bound + tiny)
    if not ok.all():
        idx = tuple(np.argwhere(~ok)[0])
        raise AssertionError(
            f"{(~ok).sum()} entries off: first at {idx}: got {got[idx]!r}, want {want[idx]!r}, "
            f"|A||B| = {bound[idx]!r}, rtol = {rtol}"
        )


def plain_numpy(x):
    """True for a numpy ndarray or numpy scalar (what numpy's matmul itself returns)."""
    return type(x) is np.ndarray or isinstance(x, np.generic)


# ----------------------------------------------------------------------------------------------
# Scheme II's scaled integers: entries where rounding to nearest (ties to even) and truncation
# differ, or sit on an edge of either (every backend's residues must give the generic integers)
# ----------------------------------------------------------------------------------------------


def scaled_integer(x, shift, nearest):
    """x * 2**shift rounded to nearest, ties to even (``nearest``), or toward zero: a Python
    int computed exactly (``round`` of a Fraction rounds half to even)."""
    from fractions import Fraction

    v = Fraction(float(x)) * Fraction(2) ** int(shift)
    return round(v) if nearest else int(v)


def rounding_cases(rng, count=300):
    """(x, shift): float64 entries and per-entry shifts with |x 2**shift| < 2**81: n + 1/2 for
    even and odd n of either sign, just beside such ties, exactly 1/2 and 3/2, below 1/2,
    integers, subnormal x, x near 2**1023 with shifts below -1022, shifts beyond 1023, and
    random significands shifted right by 1 to 70 bits (ties among them)."""
    targets = [0.5, 1.5, 2.5, 3.5, 4.5, 0.25, 0.75, 1.0, 0.0, 2.0**-60, 0.5 + 2.0**-53,
               0.5 - 2.0**-54, 1.5 - 2.0**-52, 2.5 + 2.0**-51, 2.0**51 + 0.5, 2.0**52 - 0.5,
               2.0**52 + 2, 12345.5, 12346.5, 2.0**80 + 2.0**28]  # fmt: skip
    xs, ss = [], []
    for t in targets:
        for s in (0, 7, -300, 900, 1040):
            x = np.ldexp(t, -s)
            if np.ldexp(x, s) == t:  # exactly representable
                xs += [x, -x]
                ss += [s, s]
    for j in (1, 2, 3, 5, 7, 2**20 + 1, 2**52 - 1, 2**52 + 1):  # subnormal and smallest normal
        for s in (1072, 1073, 1074, 1075) + ((1074 + 60,) if j < 2**20 else ()):
            xs += [j * 5e-324, -j * 5e-324]
            ss += [s, s]
    for x, s in ((1.5 * 2.0**1000, -1000), (1.25 * 2.0**1023, -1022), (1.75 * 2.0**1023, -1024),
                 (1.5 * 2.0**1023, -1024), (2.0**1023, -1024), (2.0**1023, -1023),
                 (1.75 * 2.0**1023, -1025), (2.0**-1000 * (1 + 2.0**-52), 1051),
                 (2.0**-1020 * 1.5, 1020), (2.5 * 2.0**-1010, 1010)):  # fmt: skip
        xs += [x, -x]
        ss += [s, s]
    d = rng.integers(1, 71, count)  # bits shifted out
    M = rng.integers(2**52, 2**53, count)
    ties = rng.random(count) < 0.5  # ...1000 below the point: an exact tie
    dd = np.minimum(d, 52)
    M = np.where(ties, (M >> dd << dd) | (1 << (dd - 1)), M)
    e = rng.integers(-1000, 900, count)
    xs += list(np.ldexp(M.astype(np.float64), e) * rng.choice([-1.0, 1.0], count))
    ss += list(-d - e)
    return np.array(xs, dtype=np.float64), np.array(ss, dtype=np.int64)


def tie_operands(shape, cplx, moduli, mode, seed, scale_a=0, scale_b=0):
    """(ar, ai, br, bi, prescale): random operands ((batch, m, k, n) = ``shape``, entries
    spanning 2**+-4, times 2**scale_a and 2**scale_b) and their Scheme II prescale, then about
    half the entries replaced by smaller ones whose scaled values (by the shifts of ``moduli``)
    are n + 1/2 for even and odd n of either sign, beside such ties, exactly 1/2, below 1/2 or
    the smallest subnormal. Smaller magnitudes keep the prescale's bounds valid, so the
    products with it stay exact (pass it to both sides)."""
    from emulinalg.algorithm.moduli import crt_constants
    from emulinalg.algorithm.scaling import ozaki2_prescale, ozaki2_shifts
    from emulinalg.backends import numpy as npb

    rng = np.random.default_rng(seed)
    batch, m, k, n = shape

    def draw(sh, scale):
        return np.ldexp(rng.standard_normal(sh) * np.exp2(rng.integers(-4, 5, sh)), scale)

    ar, br = draw(batch + (m, k), scale_a), draw(batch + (k, n), scale_b)
    ai = draw(batch + (m, k), scale_a) if cplx else None
    bi = draw(batch + (k, n), scale_b) if cplx else None
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, mode)
    c = crt_constants(moduli)
    mu, nu = ozaki2_shifts(np, pre, c.L, c.Q_down)
    targets = np.array([0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 0.25, 0.75, 1.0, 2.0**-60,
                        0.5 + 2.0**-40, 2.5 - 2.0**-40, 3.5 + 2.0**-45])  # fmt: skip

    def ties(x, s):
        t = rng.choice(targets, x.shape) * rng.choice([-1.0, 1.0], x.shape)
        y = np.ldexp(t, -s)
        ok = (np.abs(y) <= np.abs(x)) & (np.ldexp(y, s) == t) & (rng.random(x.shape) < 0.5)
        y = np.where(ok, y, x)
        return np.where(rng.random(x.shape) < 0.03, np.copysign(5e-324, x), y)

    mu_, nu_ = np.expand_dims(mu, -1), np.expand_dims(nu, -2)
    ar, br = ties(ar, mu_), ties(br, nu_)
    ai = None if ai is None else ties(ai, mu_)
    bi = None if bi is None else ties(bi, nu_)
    return ar, ai, br, bi, pre


def certificate_counts(xp, backend, ar, ai, br, bi, prescale, target):
    """The generic certificate (``certificate.ozaki2_moduli_needed``) on these operands with this
    backend's lower bounds: ``(count, patch, count without the refinement)`` (REFINE_STEPS 0)."""
    from emulinalg.algorithm import certificate, refinement

    needed = certificate.ozaki2_moduli_needed
    count, _, patch = needed(xp, backend, ar, ai, br, bi, prescale, target)
    steps = refinement.REFINE_STEPS
    try:
        refinement.REFINE_STEPS = 0
        unrefined = needed(xp, backend, ar, ai, br, bi, prescale, target)[0]
    finally:
        refinement.REFINE_STEPS = steps
    return count, patch, unrefined


def assert_quiet_demo(argv, recwarn, caplog, capfd, main=None):
    """Run ``python -m emulinalg demo ...`` (or another command line's ``main``) in process:
    exit status 0, no warning raised (``warnings``), none logged at WARNING or above
    (``logging``: distributed's loggers do not propagate to the root, so the handler is on them
    too), and none in the output of any process that shares stderr (a LocalCluster's workers
    log there). Returns stdout and the lines of stderr (the progress lines)."""
    if main is None:
        from emulinalg.harness.cli import main

    loggers = [logging.getLogger(name) for name in ("distributed", "dask", "emulinalg")]
    for logger in loggers:
        logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING):
            rc = main(argv)
    finally:
        for logger in loggers:
            logger.removeHandler(caplog.handler)
    out, err = capfd.readouterr()
    assert rc == 0, err[-3000:]
    warned = [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in recwarn]
    assert not warned, warned
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not logged, logged
    noisy = ("warn", "pausing worker", "sending large graph", "traceback")
    printed = [line for line in (out + err).splitlines() if any(w in line.lower() for w in noisy)]
    assert not printed, printed
    return out, err.splitlines()


def refit_case(m, k, n, dtype, seed):
    """A product for the refit tests: the float64 parts of A and B (``ar, ai, br, bi``, None
    for a real operand's imaginary part), their Scheme II prescale, the native product's parts
    (contiguous, a row of exact zeros) standing in for a level's output, and its dtype's name;
    and the generic refit of those parts (``refit.refit`` on numpy: values and count)."""
    import array_api_compat.numpy as xnp

    from emulinalg.algorithm import refit
    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.backends import numpy as npb
    from emulinalg.inputs import phi_matrix

    a = phi_matrix((m, k), 1.0, dtype, seed=seed)
    b = phi_matrix((k, n), 1.0, dtype, seed=seed + 1)
    cplx = a.dtype.kind == "c"
    split = [a.real, a.imag if cplx else None, b.real, b.imag if cplx else None]
    split = [None if x is None else np.ascontiguousarray(x, dtype=np.float64) for x in split]
    pre = ozaki2_prescale(np, npb.int_matmul, *split, "accurate")
    c = np.matmul(a, b)
    c[5, :4] = 0
    out = "float32" if dtype == "float32" else "float64"
    parts = [np.ascontiguousarray(x) for x in ((c.real, c.imag) if cplx else (c,))]
    want = refit.refit(xnp, *split, tuple(p.copy() for p in parts), pre, "accurate", out)
    return split, pre, parts, out, want


# refit_buffers' kinds of ratios and indices
REFIT_BUFFER_KINDS = ("spread", "ties", "equal", "narrow", "subnormal", "zero_q", "huge", "nan")


def refit_buffers(rng, W, cap, count, kind):
    """A cupy backend refit selection's buffers (``backends/cupy/refit.py``, host numpy arrays):
    ``counts`` (2W,) int64 (per measure the zeros' and the candidates' counts: ``count``, an int
    or "cap", or "over" beyond the buffers, for the candidates of every measure; the zeros' vary
    per measure), ``zero`` and ``cand`` (W, cap) int64 and ``q`` (W, cap) float64, garbage
    beyond the counts (NaN ratios, negative indices). ``kind``: ``spread`` ratios over 13
    octaves, indices up to 2**40; ``ties`` 4 ratio values; ``equal`` one ratio, 4 index values
    shared by the zeros, one of them in most slots (identical keys, zeros among the
    candidates); ``narrow`` indices below 400 (repeats, overlaps); ``subnormal`` subnormal
    ratios, some at the spread's edge and some inf; ``zero_q`` exact zero ratios among the
    candidates; ``huge`` ratios whose spread overflows; ``nan`` a NaN ratio in the first
    measure."""
    n = {"cap": cap, "over": cap + 17}.get(count, count)
    counts = []
    for w in range(W):
        nz = (n, min(n, 5), 2**40 if count == "over" else n)[w % 3]
        counts += [nz, n]
    counts = np.array(counts, dtype=np.int64)
    size = (W, cap)
    wide = kind in ("spread", "ties", "subnormal", "zero_q", "huge", "nan")
    zero, cand = (rng.integers(0, 2**40 if wide else 400, size) for _ in range(2))
    if kind == "equal":  # the least index in most slots: its key repeated past a kernel's group
        zero, cand = (rng.choice([0, 0, 0, 0, 1, 3, 4], size) for _ in range(2))
    q = np.ldexp(rng.random(size) + 0.5, rng.integers(-12, 1, size))
    if kind == "ties":
        q = rng.choice([0.75, 1.0, 1.5, 3.0], size)
    elif kind == "equal":
        q = np.full(size, 0.375)
    elif kind == "subnormal":
        q = rng.integers(1, 600, size) * 5e-324
        q[:, 0] = 5e-324  # the least subnormal: its spread's edge is 256 of them
        q[:, 1::7] = 256 * 5e-324
        q[:, 2::11] = np.inf
    elif kind == "zero_q":
        q[:, ::9] = 0.0
    elif kind == "huge":
        q = np.ldexp(rng.random(size) + 0.5, rng.integers(1010, 1024, size))
    elif kind == "nan":
        q[0, max(0, min(n, cap)) // 2] = np.nan
    slot = np.arange(cap)
    for w in range(W):  # garbage beyond the counts
        nz, nc = (min(max(int(c), 0), cap) for c in counts[2 * w : 2 * w + 2])
        zero[w, slot >= nz] = -rng.integers(1, 9, cap - nz)
        cand[w, slot >= nc] = -rng.integers(1, 9, cap - nc)
        q[w, slot >= nc] = np.nan
    return counts, zero, cand, q


def chosen_fixed(xp, zero, nz, idx, q, nc):
    """``refit.chosen``'s rule in fixed-size arrays of any Array API namespace, as a device that
    does not wait for the counts would apply it: the reference of the cupy backend's one-launch
    ``refit_choose`` (``refit_chain``).
    ``zero`` (cap,) int64 the flat positions of exact zeros, the first ``nz`` valid, ``idx`` and
    ``q`` (cap,) the candidates (positions and ratios), the first ``nc`` valid, each in any
    order (``nz``/``nc`` 0-d integer arrays, at most cap). The candidates are trimmed to the
    spread of their smallest ratio (``spread_threshold``) first. Returns ``(picked, valid)``,
    both (2 REFIT_ENTRIES,): ``chosen``'s indices ascending in the first ``sum(valid)`` slots,
    int64 max in the others."""
    from emulinalg.algorithm import refit

    E, none = refit.REFIT_ENTRIES, refit._NO_INDEX
    cap = zero.shape[0]
    slot = xp.arange(cap, dtype=xp.int64)
    big = xp.asarray(none, dtype=xp.int64)
    zs = xp.sort(xp.where(slot < nz, zero, big))[:E]
    qv = xp.where(slot < nc, q, xp.inf)
    qv = xp.where(qv <= refit.spread_threshold(xp.min(qv)), qv, xp.inf)
    iv = xp.where(qv < xp.inf, idx, big)
    by_idx = xp.argsort(iv, stable=True)  # ties of q in flat order: sort by index first
    by_q = xp.argsort(xp.take(qv, by_idx), stable=True)[:E]
    top = xp.take(iv, xp.take(by_idx, by_q))
    picked = xp.sort(xp.concat([zs, top]))
    n = picked.shape[0]
    if n < 2 * E:  # cap < REFIT_ENTRIES: padded to the fixed size
        picked = xp.concat([picked, xp.full(2 * E - n, none, dtype=xp.int64)])
    return picked, picked < big


def refit_chain(xp, counts, zero, cand, q):
    """The host chain ``backends/cupy/refit.py``'s ``refit_choose`` replaces: each measure's
    ``chosen_fixed`` of the buffers (``refit_buffers``' form, arrays of ``xp``), their union
    by ``refit.merged``. Returns ``(idx, valid)``."""
    from emulinalg.algorithm import refit

    idx = valid = None
    with np.errstate(over="ignore"):  # a huge ratio's spread: inf
        for w in range(zero.shape[0]):
            pick, pv = chosen_fixed(xp, zero[w], counts[2 * w], cand[w], q[w],
                                    counts[2 * w + 1])  # fmt: skip
            idx, valid = (pick, pv) if idx is None else refit.merged(xp, idx, valid, pick)
    return idx, valid


def parts_lower_of(ar, ai, br, bi):
    """A complex product's ``Prescale.parts_lower`` as the engine makes it on the numpy backend:
    the part check's stage 0 lower bound of T (``parts.balance_sides``' sides, the backend's
    ``certificate.magnitude_lower``) through ``certificate.parts_lower``."""
    from emulinalg._stages import stages
    from emulinalg.algorithm import certificate, parts
    from emulinalg.backends import numpy as npb

    ea, eb = parts._line_exponents(np, ar, ai, br, bi)
    ta, tb = parts.balance_sides(np, ar, ai, ea)[0], parts.balance_sides(np, br, bi, eb)[0]
    t_lo = certificate.magnitude_lower(np, stages(npb), ta, tb)
    return certificate.parts_lower(np, t_lo, ar.shape[-1])


def same_patch(got, want):
    """Whether two certificates' patches are equal: None, flat indices (any array library) or
    ``refinement.LinePatch`` (rows, columns, block and entries alike)."""
    from emulinalg.algorithm.refinement import LinePatch
    from emulinalg.algorithm.xputil import to_host

    if got is None or want is None:
        return got is None and want is None
    if isinstance(got, LinePatch) or isinstance(want, LinePatch):
        if not (isinstance(got, LinePatch) and isinstance(want, LinePatch)):
            return False
        if (got.block is None) != (want.block is None):
            return False
        pairs = [(got.rows, want.rows), (got.cols, want.cols), (got.entries, want.entries)]
        pairs += list(zip(got.block, want.block)) if got.block is not None else []
        return all(np.array_equal(to_host(x), to_host(y)) for x, y in pairs)
    return np.array_equal(to_host(got), to_host(want))


def line_patch_case(name):
    """Operands whose level takes a line patch (``refinement.line_patch``): "float32", phi
    = 1 matrices whose row 328 fails throughout one modulus below; "float64", row 5 and a block
    where rows and columns of raised entries cross."""
    from emulinalg.inputs import phi_matrix

    if name == "float32":
        return (phi_matrix((512, 512), 1.0, "float32", seed=1),
                phi_matrix((512, 512), 1.0, "float32", seed=101))  # fmt: skip
    a, b = phi_matrix((256, 256), 0.5, seed=3), phi_matrix((256, 256), 0.5, seed=4)
    a[5, 7] *= 100.0
    b[11, 9] *= 100.0
    return a, b


def level_lines(monkeypatch, a, b, setup=None):
    """``(c, plan, lines)``: the dtype's level of ``a @ b`` (eager; ``setup(mp)`` picks the
    backend, else the numpy backend) and the ``LinePatch`` its ``_engine._native_lines`` took
    (exactly one)."""
    import emulinalg
    from emulinalg import _engine

    seen = []
    real = _engine._native_lines

    def spy(*args):
        seen.append(args[7])
        return real(*args)

    with monkeypatch.context() as mp:
        mp.setattr(_engine, "_native_lines", spy)
        if setup is not None:
            setup(mp)
        else:
            mp.setenv("EMULINALG_AMX", "0")
        with emulinalg.config(strategy="eager"):
            c = emulinalg.matmul(a, b, precision="float32" if a.dtype == np.float32 else "float64")
        plan = emulinalg.last_plan()
    assert len(seen) == 1, str(plan)
    return c, plan, seen[0]


def assert_lines_reach(c, native, a, b, lines):
    """A ``LinePatch``'s rows, columns (where it has some) and block of the product ``c`` at or
    above ``native``'s bits (max-rel and componentwise) on the same entries, against the exact
    product (host arrays)."""
    from emulinalg.algorithm.xputil import to_host
    from emulinalg.reference import accuracy, exact_matmul

    every = slice(None)
    sel = [(to_host(lines.rows), every)]
    if len(lines.cols):
        sel.append((every, to_host(lines.cols)))
    if lines.block is not None:
        sel.append(tuple(to_host(x) for x in lines.block))
    for r, cl in sel:
        ta, tb = a[r], b[:, cl]
        ref = exact_matmul(ta, tb)
        got, nat = (accuracy(x[r][:, cl], ta, tb, ref) for x in (c, native))
        assert got["nonfinite_mismatch"] == nat["nonfinite_mismatch"] == 0
        assert got["bits_maxrel"] >= nat["bits_maxrel"], (r, cl, got, nat)
        assert got["bits_cw"] >= nat["bits_cw"], (r, cl, got, nat)


def chunk_steps_case(stages, dtype, asarray=lambda x: x, moduli=None):
    """``(got, whole, A, B)``: a product cut into 2 row, 3 (uneven) K and 2 column chunks through
    a backend's chunk steps for the dask shared graph (``stages``: an object with
    ``chunk_residues``, ``chunk_products``, ``chunk_residue_sum``, ``chunk_crt``; ``asarray``
    moves a host array to its device), each chunk's residues made once, the block products
    added over K and one CRT per output block, beside the generic in-core product of the whole
    matrices (``products.product``) with the same count and shifts. The parts are float64, as
    the graph's tasks give them (``blocks._finite_parts``)."""
    import itertools

    from emulinalg.algorithm import products
    from emulinalg.algorithm.moduli import crt_constants
    from emulinalg.algorithm.scaling import ozaki2_prescale, ozaki2_shifts, rounds_to_nearest
    from emulinalg.backends import numpy as npb
    from emulinalg.inputs import phi_matrix

    def parts(x):
        if np.iscomplexobj(x):
            return x.real.astype(np.float64), x.imag.astype(np.float64)
        return x.astype(np.float64), None

    def cuts(size, count):
        edges = np.linspace(0, size, count + 1).astype(int)
        return [slice(a, b) for a, b in itertools.pairwise(edges)]

    m, k, n, mode = 37, 150, 29, "accurate"
    moduli = moduli or (10 if dtype in ("float32", "complex64") else 18)
    out = "float32" if dtype in ("float32", "complex64") else "float64"
    A = phi_matrix((m, k), 1.0, dtype, seed=5)
    B = phi_matrix((k, n), 1.0, dtype, seed=6)
    (ar, ai), (br, bi) = parts(A), parts(B)
    cplx = ai is not None
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, mode)
    c = crt_constants(moduli)
    mu, nu = ozaki2_shifts(np, pre, c.L, c.Q_down)
    with npb.quiet():
        whole = products.product(np, npb.int_matmul, ar, ai, br, bi, moduli, mode, out, pre)
    whole = whole[0] if not cplx else whole[0] + 1j * whole[1]
    near = rounds_to_nearest(moduli, k, mode)

    def residues(re, im, shift, axis):
        x = [None if v is None else asarray(np.ascontiguousarray(v)) for v in (re, im)]
        planes = stages.chunk_residues(x[0], x[1], asarray(shift), axis, moduli, near)
        assert planes.dtype == np.int8 and planes.shape[:2] == (3 if cplx else 1, moduli)
        return planes

    got = np.full((m, n), np.nan, dtype=whole.dtype)
    kcuts = cuts(k, 3)  # uneven K chunks, none a multiple of 16 columns
    for rows in cuts(m, 2):
        pas = [residues(ar[rows, q], None if ai is None else ai[rows, q], mu[rows], -1)
               for q in kcuts]  # fmt: skip
        for cols in cuts(n, 2):
            ws = []
            for q, pa in zip(kcuts, pas):
                pb = residues(br[q, cols], None if bi is None else bi[q, cols], nu[cols], -2)
                ws.append(stages.chunk_products(pa, pb, moduli))
            w = stages.chunk_residue_sum(ws)
            ncols = cols.stop - cols.start
            blk = stages.chunk_crt(w, asarray(mu[rows]), asarray(nu[cols]), moduli, cplx, out,
                                   ncols)  # fmt: skip
            got[rows, cols] = np.asarray(blk)
    return got, whole, A, B
