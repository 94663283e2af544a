"""amx backend: numpy arrays, integer GEMMs on Intel AMX INT8 tiles (``emulinalg._amx``).

An integer GEMM whose operands fit int8 (Scheme II's residues in [-128, 127], the accurate-mode
bound operands in [0, 127]) runs as an exact TDPBSSD tile GEMM: int32 accumulation, exact for
k <= ``MAX_K`` = 2**17 - 1 because every product is at most 2**14 in magnitude; longer K is
cut into blocks whose int32 results are added in int64. Other integer GEMMs (Scheme I's
unsigned [0, 255] slices, for now) and everything else are the numpy backend's.

A whole Scheme II product (``ozaki2_product``) runs in ``emulinalg._amx``'s C++
(``src_amx/ozaki2_host.cpp``): the residues written straight into the tile GEMMs' int8 panels,
one tile GEMM per modulus (complex: three with 3M, two modulo the Gaussian moduli) reduced
modulo m_l in its epilogue, and the CRT (the cupy backend's CUDA sources compiled for the CPU,
vectorized), bit-identical to the generic numpy code, which is tens of times slower at those
stages. The dask shared graph's chunk steps (``chunk_residues``, ``chunk_products``,
``chunk_residue_sum``, ``chunk_crt``: ``host_chunks``) use the same residue and CRT code.

The backend is chosen only where :func:`usable` is True; it never executes an AMX instruction
elsewhere. ``EMULATE = True`` runs the same kernels on ``emulinalg._amx``'s scalar tile model
instead (slow; for tests on machines without AMX).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from . import host_chunks as _host_chunks
from . import numpy as _numpy_backend
from .cuda import OUT_KIND, crt_table_arrays

name = "amx"

INT8_TERM_BOUND = 128 * 128  # |a b| for a, b in [-128, 127]
MAX_K = 2**17 - 1  # k * 2**14 < 2**31: the int32 tile sums cannot overflow
K_BLOCK = (MAX_K // 64) * 64  # whole 64-deep K tiles per block beyond MAX_K

EMULATE = False  # run the scalar tile model instead of AMX (tests)
# ``magnitude_lower_matmul`` runs products of fewer multiply-adds (m n k) in numpy's float64 GEMM
SMALL_BOUND_WORK = 1 << 20

# The mod GEMMs' K chunk, chosen once per process by timing (the residues are exact under any
# blocking): the kernel's default (0: K in one chunk up to 128 K tiles, no partial sums in
# memory; the faster in a round robin on the 16-vCPU host, whose hyperthread pairs share a core's
# L1) or CHUNK_KC K tiles per chunk (A's strip held in L1, C's partial sums in L2; the faster on
# cores of their own: the mod GEMMs 1.3-1.4x on the 2-core workstation). ozaki2_pack's panels
# come in chunks of this many K tiles (``_amx.PANEL_CHUNK``, chunked pairs: one contiguous run
# per register block and chunk), on which CHUNK_KC chunks gain most.
# docs/benchmarks/ci-cpu/README.md (2026-12-06, 2026-12-07) has the figures. Under EMULATE the
# tile model is what is timed (tests).
CHUNK_KC = 8
# Longer K than this packs the chunked panels (and times the K chunk on them); up to it the
# plain panels with K in one chunk (32 K tiles: A's strip of a register block fits L1 anyway,
# and the plain layout measured faster there).
CHUNKED_MIN_K = 2048
CHUNK_TIMED = 6  # the first large product's first mod GEMMs timed, the two alternating
CHUNK_MIN = 2048  # m, n and k of the product that times them
CHUNK_MARGIN = 0.95  # CHUNK_KC where its fastest GEMM is below this share of the default's fastest
_chunk_kc = None  # the choice (0 or CHUNK_KC), None until a product has timed both
_chunk_lock = threading.Lock()  # held by the product that times (others take the default)


def mod_chunk():
    """The mod GEMMs' K chunk this process chose by timing (``mod_chunks``): CHUNK_KC, 0 (the
    kernel's default), or None before a product of at least CHUNK_MIN per side has run."""
    return _chunk_kc


def chunked_panels(amx, k):
    """Whether a product of inner dimension ``k`` packs chunked panels (``ozaki2_pack``'s
    ``chunked``): beyond CHUNKED_MIN_K, unless the blocking's ``panels`` knob asks for plain."""
    return k > CHUNKED_MIN_K and amx.blocking()["panels"] == 1


def mod_chunks(amx, m, n, k, moduli, chunked=True):
    """The K chunk of each of a product's mod GEMMs (``ozaki2_multiply``'s ``kc``; 0: the
    blocking's) and whether their times decide ``_chunk_kc`` (``_choose_chunk``, then releasing
    ``_chunk_lock``): 0 on plain panels (``chunked`` False) and where a user set the K chunk
    (``set_blocking``'s kc, ``EMULINALG_AMX_BLOCKING``; kc=128 pins the kernel's default up to
    K = 8192); the choice once made; else, on a product of at least CHUNK_MIN per side with more
    than CHUNK_TIMED moduli that takes the lock, the first CHUNK_TIMED alternating between
    CHUNK_KC and 0 and the rest the default until they are timed; 0 everywhere on the others."""
    if not chunked or amx.blocking()["kc"] != 0:
        return [0] * moduli, False
    if _chunk_kc is not None:
        return [_chunk_kc] * moduli, False
    if min(m, n, k) < CHUNK_MIN or moduli <= CHUNK_TIMED or not _chunk_lock.acquire(False):
        return [0] * moduli, False
    # CHUNK_KC first: a first GEMM's warm-up then counts against it, not against the default
    timed = [CHUNK_KC * ((ell + 1) % 2) for ell in range(CHUNK_TIMED)]
    return timed + [0] * (moduli - CHUNK_TIMED), True


def chunk_choice(times):
    """``_chunk_kc`` from ``{kc: [seconds, ...]}`` of the timed GEMMs: CHUNK_KC where its
    fastest is below CHUNK_MARGIN of the default's fastest (the fastest of each: a GEMM slowed
    by other work on the machine does not decide), else 0."""
    return CHUNK_KC if min(times[CHUNK_KC]) < CHUNK_MARGIN * min(times[0]) else 0


def _choose_chunk(times):
    """Sets ``_chunk_kc`` (``chunk_choice``) for the rest of the process; returns it."""
    global _chunk_kc
    _chunk_kc = chunk_choice(times)
    return _chunk_kc


quiet = _numpy_backend.quiet
native_matmul = _numpy_backend.native_matmul
refit_pick = _numpy_backend.refit_pick


def _module():
    try:
        from emulinalg import _amx
    except ImportError:
        return None
    return _amx


def usable():
    """Whether AMX kernels can run here.

    Returns
    -------
    bool
        True when ``emulinalg._amx`` is built with AMX kernels, the CPU has AMX-TILE/INT8/BF16,
        the OS enabled the tile state and (Linux) the process was granted it. The first call
        makes the Linux permission request.
    """
    amx = _module()
    return amx is not None and bool(amx.available())


def reason():
    """Why :func:`usable` is False ("" when it is True)."""
    amx = _module()
    if amx is None:
        return "emulinalg._amx is not built (not x86-64, or installed without a C++ compiler)"
    return amx.reason()


def k_block(k, term_bound):
    """K-block size of an integer GEMM with inner dimension ``k``, or None for one pass."""
    if term_bound > INT8_TERM_BOUND:
        return _numpy_backend.k_block(k, term_bound)
    return None if k <= MAX_K else K_BLOCK


def _fits_int8(x):
    if x.dtype == np.int8:  # residue planes made once (``residues.b_residue_planes``)
        return x.size > 0
    return x.size > 0 and float(x.min()) >= -128 and float(x.max()) <= 127


def int_matmul(a, b, term_bound):
    """Exact ``a @ b`` for integer-valued float arrays with ``|a_ih b_hj| <= term_bound``.

    Parameters
    ----------
    a, b : numpy.ndarray, shapes (..., m, k) and (..., k, n)
        Integer-valued arrays; batch dimensions broadcast.
    term_bound : int
        Bound of every product's magnitude. Up to 128 * 128, operands whose entries all lie
        in [-128, 127] run on the INT8 tiles; anything else on the numpy backend.

    Returns
    -------
    numpy.ndarray of float64, shape (..., m, n)
        The exact sums (below 2**53 in magnitude).

    Raises
    ------
    RuntimeError
        When the tiles are needed but AMX is not usable here and ``EMULATE`` is False.
    """
    if term_bound > INT8_TERM_BOUND or not (_fits_int8(a) and _fits_int8(b)):
        return _numpy_backend.int_matmul(a, b, term_bound)
    amx = _module()
    if amx is None or not (EMULATE or amx.available()):
        raise RuntimeError(f"amx backend: AMX is not usable here: {reason()}")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    out = np.empty(batch + (a.shape[-2], b.shape[-1]), dtype=np.float64)
    for idx in np.ndindex(*batch):
        out[idx] = _gemm_s8(amx, a[idx], b[idx])
    return out


def _gemm_s8(amx, a, b):
    """One 2-D product of int8-valued arrays, K-blocked beyond MAX_K."""
    k = a.shape[-1]
    if k <= MAX_K:
        return _tiles(amx, a, b)
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.int64)
    for k0 in range(0, k, K_BLOCK):
        acc += _tiles(amx, a[:, k0 : k0 + K_BLOCK], b[k0 : k0 + K_BLOCK])
    return acc  # |sum| <= k * 2**14: exact in float64 for any k below 2**39


def _crt_arrays(n, gaussian=False):
    """``ozaki2_crt``'s digit tables for n moduli (of the Gaussian moduli with ``gaussian``), in
    its argument order."""
    t = crt_table_arrays(n, gaussian)
    return t["emu_wdig"], t["emu_pdig"], t["emu_ratio"]


def _host_ok(amx, ar, ai, br, bi):
    """Whether the C++ stages (``src_amx/ozaki2_*host.cpp``) cover this call: 2-D aligned
    parts, all float64 or all float32 (``narrow_statistics``, ``narrow_products``: read as they
    are), with whole-element strides (not fields of structured arrays), real or complex on both
    sides with the imaginary parts shaped as the real ones, k <= MAX_K (one tile GEMM pass), and
    AMX (or the tile model) here."""
    if (ai is None) != (bi is None):
        return False
    pairs = [(ar, ar), (br, br)] + ([(ai, ar), (bi, br)] if ai is not None else [])
    return (
        amx is not None
        and hasattr(amx, "ozaki2_pack")
        and ar.dtype in (np.float64, np.float32)
        and all(
            x.shape == like.shape
            and x.dtype == ar.dtype
            and x.flags.aligned
            and all(st % x.itemsize == 0 for st in x.strides)
            for x, like in pairs
        )
        and (EMULATE or amx.available())
        and ar.ndim == 2
        and br.ndim == 2
        and 0 not in ar.shape + br.shape
        and ar.shape[1] <= MAX_K
    )


def ozaki2_product(ar, ai, br, bi, moduli, mode, out_dtype, prescale, gaussian=False):
    """Scheme II product in ``emulinalg._amx``'s C++ (OpenMP): the residues written straight
    into the int8 tile panels (``ozaki2_pack``), one tile GEMM per modulus reduced to int8
    residues in its epilogue (``ozaki2_multiply``; 3M for complex: T1, T2, T3 -> Re, Im, or with
    ``gaussian`` the Gaussian moduli's U, V -> Re, Im), the CRT (the CUDA sources' arithmetic
    compiled for the CPU): same contract and bit-identical output as
    ``emulinalg.algorithm.products.product(numpy, int_matmul, ..., gaussian=gaussian)``. 2-D
    operands with k <= ``MAX_K``; returns None to decline (batches, longer K: generic path)."""
    amx = _module()
    cplx = ai is not None
    if out_dtype not in OUT_KIND or prescale is None:
        return None
    if not _host_ok(amx, ar, ai, br, bi):
        return None
    from emulinalg._timing import stage
    from emulinalg.algorithm.moduli import crt_constants
    from emulinalg.algorithm.scaling import ozaki2_shifts, rounds_to_nearest

    gaussian = bool(gaussian and cplx)
    c = crt_constants(moduli, gaussian)
    mu, nu = ozaki2_shifts(np, prescale, c.L, c.Q_down)
    mu32 = np.ascontiguousarray(mu, dtype=np.int32)
    nu32 = np.ascontiguousarray(nu, dtype=np.int32)
    m, n = ar.shape[0], br.shape[1]
    near = rounds_to_nearest(moduli, ar.shape[-1], mode, gaussian)
    with stage("slicing"):  # the residues straight into the GEMMs' int8 tile panels
        chunked = chunked_panels(amx, ar.shape[1])
        panels = amx.ozaki2_pack(ar, br, mu32, nu32, moduli, ai, bi, nearest=near,
                                 gaussian=gaussian, chunked=chunked)  # fmt: skip
    res = panels.residues  # (parts, moduli, m, n) from the panel cache, alive with the panels
    chunks, timing = mod_chunks(amx, m, n, ar.shape[1], moduli, chunked)
    times = {0: [], CHUNK_KC: []}
    try:
        with stage("products"):  # each GEMM reduced mod m_l in its epilogue (3M: three; u, v: two)
            for ell in range(moduli):
                t0 = time.perf_counter()
                amx.ozaki2_multiply(panels, ell, res[0, ell], res[1, ell] if cplx else None,
                                    emulate=EMULATE, kc=chunks[ell])  # fmt: skip
                if timing and ell < CHUNK_TIMED:
                    times[chunks[ell]].append(time.perf_counter() - t0)
                    if ell + 1 == CHUNK_TIMED:
                        chunks[CHUNK_TIMED:] = [_choose_chunk(times)] * (moduli - CHUNK_TIMED)
    finally:
        if timing:
            _chunk_lock.release()
    panels.release_operands()  # back to the panel cache now; the residues stay for the CRT
    with stage("reconstruction"):
        dt = "float32" if out_dtype == "float32" else "float64"
        outs = [amx.empty((m, n), dt) for _ in range(len(res))]
        los = [amx.empty((m, n), "float64") if out_dtype == "dd" else None for _ in range(len(res))]
        amx.ozaki2_crt(
            res if cplx else res[0], mu32, nu32, OUT_KIND[out_dtype],
            *_crt_arrays(moduli, gaussian),
            outs[0], los[0], outs[-1] if cplx else None, los[-1] if cplx else None,
        )  # fmt: skip
    if out_dtype == "dd":
        return tuple(zip(outs, los))
    return tuple(outs)


def bf16_product(ar, ai, br, bi, scheme, dt):
    """``emulinalg.algorithm.bf16.product``'s backend hook in ``emulinalg._amx``'s C++
    (``src_amx/bf16_host.cpp``): the BF16 split written straight into tile panels
    (``bf16_pack``), one slice-product tile GEMM per output part (``bf16_multiply``: BF16x3's six
    products in the same FP32 tiles; BF16xN's pairs widened to float64 per 1024 of K), the
    unscaling. BF16xN is bit-identical to the generic code; BF16x3 differs from
    it only by the FP32 accumulation. Batches run one product at a time; returns None to
    decline (AMX not usable, operands the C++ stages do not take)."""
    amx = _module()
    if not (_bf16_ok(amx, ar, ai, br, bi)):
        return None
    if ar.ndim > 2:
        parts = [bf16_product(ar[i], None if ai is None else ai[i], br[i],
                              None if bi is None else bi[i], scheme, dt)
                 for i in np.ndindex(*ar.shape[:-2])]  # fmt: skip
        return tuple(
            np.stack([p[q] for p in parts]).reshape(ar.shape[:-2] + parts[0][q].shape)
            for q in range(len(parts[0]))
        )
    from emulinalg._timing import stage
    from emulinalg.algorithm import bf16

    kind = bf16.kind(scheme)
    with stage("slicing"):  # the split written straight into tile panels
        panels = amx.bf16_pack(ar, br, scheme.slices, kind, ai, bi)
    out = []
    for plist in bf16.pair_lists(scheme, ai is not None):
        with stage("products"):
            c = amx.bf16_multiply(panels, np.asarray(plist, dtype=np.int32), emulate=EMULATE)
        with stage("reconstruction"):  # one rounding, as bf16.product's generic code
            if kind == "fixed":
                amx.bf16_unscale(c, panels.ea, panels.eb)
                c = c if c.dtype == dt else c.astype(dt)
            else:
                c = c if c.dtype == dt else c.astype(dt)
                amx.bf16_unscale(c, panels.ea, panels.eb)
        out.append(c)
    return tuple(out)


def as_float64(x):
    """float64 ``x`` (the engine's parts): float64 as it is, a 2-D float32 array converted with
    OpenMP into huge-page memory (``emulinalg._amx.to_float64``), anything else by numpy."""
    if x.dtype == np.float64:
        return x
    amx = _c_matrix("to_float64", x, np.float32)
    return x.astype(np.float64) if amx is None else amx.to_float64(x)


def take_columns(x, cols):
    """float64 ``x[:, cols]`` (C-contiguous) of a 2-D float64 or float32 part, gathered with
    OpenMP (``emulinalg._amx.take_columns``; numpy's take runs on one thread), or None (numpy
    then takes them)."""
    amx = _module()
    if amx is None or not hasattr(amx, "take_columns") or x.ndim != 2 or not x.flags.aligned:
        return None
    if x.dtype not in (np.float64, np.float32) or any(st % x.itemsize for st in x.strides):
        return None
    cols = np.asarray(cols)
    if cols.dtype.kind not in "iu" or (cols.size and cols.min() < 0):  # numpy's take's rules
        return None
    return amx.take_columns(x, cols.astype(np.int64, copy=False))


# The most lines (rows or columns) on the thin side of a product ``line_products`` takes: its
# few-columns pass reads the gathered columns whole for every output row, so beyond a few the
# pieces' GEMMs are faster
LINES_MAX = 8


def line_products(x, y, rows, cols, step):
    """float64 ``x[rows] @ y[:, cols]`` (int indices, None: all) of 2-D float64 or float32 parts,
    each entry summed over pieces of K of ``step`` whose sums are added in order, in one OpenMP
    call (``emulinalg._amx.line_products``: the other operand streamed once), or None (the
    engine then takes a GEMM per piece): the line patch's rows, columns and thin blocks
    (``_engine._native_lines``). Declines more than LINES_MAX lines on the thin side."""
    amx = _module()
    if amx is None or not hasattr(amx, "line_products") or x.ndim != 2 or y.ndim != 2:
        return None
    if x.dtype != y.dtype or x.dtype not in (np.float64, np.float32):
        return None
    if not (x.flags.aligned and y.flags.aligned) or any(
        st % x.itemsize for st in x.strides + y.strides
    ):
        return None
    sizes = [x.shape[0] if rows is None else len(rows), y.shape[1] if cols is None else len(cols)]
    if min(sizes) > LINES_MAX:
        return None
    idx = [None if v is None else np.asarray(v) for v in (rows, cols)]
    if any(v is not None and (v.dtype.kind not in "iu" or (v.size and v.min() < 0)) for v in idx):
        return None
    return amx.line_products(x, y, *idx, int(step))


def all_finite(x):
    """Whether every entry of float64 ``x`` is finite (the engine's NaN/Inf check; OpenMP in
    ``emulinalg._amx`` for 2-D arrays)."""
    amx = _c_matrix("all_finite", x, np.float64)
    return bool(np.isfinite(x).all() if amx is None else amx.all_finite(x))


def _c_matrix(name, x, dtype):
    """``emulinalg._amx`` when its matrix function ``name`` takes ``x`` (2-D ``dtype``, strides of
    whole elements: not fields of a structured array), else None."""
    amx = _module()
    if amx is None or not hasattr(amx, name) or x.dtype != dtype or x.ndim != 2:
        return None
    return None if any(st % x.itemsize for st in x.strides) else amx


def _bf16_ok(amx, ar, ai, br, bi):
    """Whether ``bf16_product``'s C++ takes these operands: float64 parts of one batch shape
    (broadcast already by the front end), real or complex on both sides, AMX (or the tile
    model) here."""
    parts = [x for x in (ar, ai, br, bi) if x is not None]
    return (
        amx is not None
        and hasattr(amx, "bf16_pack")
        and (ai is None) == (bi is None)
        and all(x.dtype == np.float64 for x in parts)
        and ar.shape[:-2] == br.shape[:-2]
        and 0 not in ar.shape + br.shape
        and (EMULATE or amx.available())
    )


def line_scan(ar, ai, br, bi, prepare=False):
    """The engine's NaN/Inf check fused with the line exponents, one OpenMP pass per operand
    (``emulinalg._amx.line_exponents``): floor(log2 max(|re|, |im|)) of every row of A and
    column of B, int32 (1, m) and (1, n) (INT32_MIN for a zero line, 1024 for a line holding NaN
    or Inf), as the cupy backend's ``line_scan``: ``(finite, exponents)``, the exponents the
    complex part check's line normalization (``parts``) then takes instead of numpy passes; or
    None to decline (batches, parts the C++ stages do not take). ``prepare`` is unused here."""
    amx = _module()
    if amx is None or not hasattr(amx, "line_exponents"):
        return None
    parts = [x for x in (ar, ai, br, bi) if x is not None]
    if (ai is None) != (bi is None) or any(
        x.ndim != 2 or x.dtype != ar.dtype or any(st % x.itemsize for st in x.strides)
        for x in parts
    ) or ar.dtype not in (np.float64, np.float32):
        return None
    if (ai is not None and ai.shape != ar.shape) or (bi is not None and bi.shape != br.shape):
        return None
    ea = amx.line_exponents(ar, ai, True)
    eb = amx.line_exponents(br, bi, False)
    top = max(int(ea.max(initial=-(2**31))), int(eb.max(initial=-(2**31))))
    return top < 1024, (ea.reshape(1, -1), eb.reshape(1, -1))


def ozaki2_prescale(ar, ai, br, bi, mode, exponents=None):
    """``emulinalg.algorithm.scaling.ozaki2_prescale(numpy, int_matmul, ar, ai, br, bi,
    "accurate")`` with the line passes in C++ (``src_amx/ozaki2_stats_host.cpp``) and the bound
    GEMM on the INT8 tiles: a ``Prescale`` with the same ``(s, t, e, f)`` (values and dtypes),
    real or complex, and ``lower`` = F (int32 (m, n), the generic code's values). The operand
    passes also take the sums for the certificate's normalized norms (``line_sums``: the l1 sums
    and the sums of squares, float64 ((m,), (n,)) each), so ``ozaki2_certificate`` reads the
    operands only when F leaves entries beyond. None declines (fast mode, batches, what
    ``_host_ok`` refuses). ``exponents``: ``line_scan``'s ((1, m), (1, n) int32), which spare
    the operand passes their first read (each line's largest magnitude)."""
    from emulinalg.algorithm.scaling import Prescale

    amx = _module()
    if mode != "accurate" or not _host_ok(amx, ar, ai, br, bi):
        return None
    ea = eb = None
    if exponents is not None:
        ea, eb = (np.ascontiguousarray(x, dtype=np.int32).reshape(-1) for x in exponents)
        if ea.shape[0] != ar.shape[0] or eb.shape[0] != br.shape[1]:
            ea = eb = None
    s, abar, ra, nza, la, ma, qa = amx.ozaki2_bound_operand(ar, True, ai, ea)  # (m,), (m, k)...
    t, bbar, cb, nzb, lb, mb, qb = amx.ozaki2_bound_operand(
        br.T, False, None if bi is None else bi.T, eb
    )  # (n,), (k, n), (n,) x 5
    # exact: k <= MAX_K (_host_ok) and every term is at most 127 * 127 < 2**14
    F = amx.gemm_s8s8s32(abar, bbar, emulate=EMULATE)
    del abar, bbar
    e, f = amx.ozaki2_bound_max(F, ra, nza, cb, nzb, ai is not None)
    mixed = None if ai is None else (ma, mb)
    return Prescale(s, t, e, f, lower=F, mixed=mixed, line_sums=((la, lb), (qa, qb)))


def ozaki2_certificate(ar, ai, br, bi, prescale, target, gaussian=False):
    """``emulinalg.algorithm.certificate.ozaki2_moduli_needed(numpy, backend, ...,
    gaussian=gaussian)`` with the per-entry certificate in C++: ``(count, beyond, patch)``, or
    None to decline (a prescale not made by ``ozaki2_prescale``, what ``_host_ok`` refuses).
    ``gaussian``: the counts of the Gaussian moduli (their constants, ``certificate_plan``).

    The first pass takes the lower bound of |A||B| from the prescale's bound GEMM F
    (``certificate.bound_lower``; with a complex product's ``Prescale.parts_lower`` in the place of
    the GEMM sums below, the larger per entry) and its line norms (``target``'s form: l1, or l2
    from the sums of squares). Only when it leaves entries beyond every count: the magnitudes of the
    line-normalized operands truncated toward zero (``ozaki2_cert_operand``), their GEMM, as
    ``certificate.magnitude_lower`` with this backend's ``magnitude_lower_matmul`` (bfloat16 on
    the tiles from ``SMALL_BOUND_WORK`` multiply-adds on; below, float32 in numpy's BLAS), and a
    second pass with the larger bound per entry. The counting pass also finds each entry's
    exact need (the fewest moduli whose exact shifts pass ``certificate.exact_passes``, from
    every count's exact line factors: the test falls with the count, so an entry fails the
    exact test of c moduli iff its exact need exceeds c): the exact step's failures and every
    refinement step's suspects come from that one pass (a pass per count where the factors do
    not fall with the count). ``refinement.refine_loop``'s steps run in one C++ call each
    (``ozaki2_refine_step``: the suspects, a sample's dot products of magnitudes, every
    suspect's refined test, which stops once more fail than the plan's ``fails_cap``; the native
    form's step takes all its suspects: none is held in an array). Every term and limit
    comes from ``emulinalg.algorithm.certificate_plan``, every decision from ``refinement``. The
    same decisions as the generic code except where a test is decided within a few ulps (the
    norms' and the sample's sums run in another order)."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import certificate, certificate_plan, refinement

    amx = _module()
    lower = getattr(prescale, "lower", None)
    sums = getattr(prescale, "line_sums", None)
    if lower is None or sums is None or not _host_ok(amx, ar, ai, br, bi):
        return None
    k = ar.shape[-1]
    cplx = ai is not None
    m, n = lower.shape
    plan = certificate_plan.plan(k, target, cplx, m, n, ar.ndim, gaussian, streaming=True)
    cc = plan.constants
    if not plan.gemm_lower:  # never with k <= MAX_K
        return None
    s, t, e, f = prescale
    na, nb = (certificate_plan.norms_from_sums(xp, cc, l1, sq) for l1, sq in zip(*sums))
    alpha, beta = certificate_plan.line_alpha(xp, cc, e), certificate_plan.line_alpha(xp, cc, f)
    mixed = certificate_plan.mixed_lines(xp, getattr(prescale, "mixed", None), m, n, cplx)
    ma, mb = (np.ascontiguousarray(x) for x in mixed)

    def entries(a_terms, b_terms, thr, base, c, exact=(None, None)):
        return amx.ozaki2_cert_entries(lower, plan.fexp, na, a_terms, nb, b_terms,
                                       *plan.lower_terms, np.array(thr), base, ma, mb,
                                       plan.fexp_mixed, c, *exact)  # fmt: skip

    factors = {}

    def line_factors(c):  # the exact line factors (p, q) of c moduli, made once per count
        if c not in factors:
            factors[c] = tuple(np.ascontiguousarray(certificate.exact_line_factors(
                xp, cc, c, v, cc.scale)) for v in (e, f))  # fmt: skip
        return factors[c]

    # Every count's exact factors, for the counting pass to find each entry's exact need too
    # (where they fall with the count, as they do: then one pass gives the exact step's and every
    # refinement step's failures; else a pass per count, below).
    counts_all = range(plan.min_count, plan.min_count + len(cc.thresholds))
    tables = tuple(np.stack([line_factors(c)[side] for c in counts_all]) for side in (0, 1))
    if not all(np.all(t[1:] <= t[:-1]) and np.all(t >= 0) for t in tables):
        tables = (None, None)

    pl = getattr(prescale, "parts_lower", None)  # taken as FP32 sums (the first pass's)
    pl = None if pl is None else np.ascontiguousarray(pl, dtype=np.float32)

    def counts(c32):  # certificate.ozaki2_passes' pass: ((c32, need, count, beyond, x), beyond)
        if c32 is None:
            c32 = pl
        elif pl is not None:  # the larger sums per entry: the lower bound is monotone in them
            c32 = np.maximum(c32, pl, out=c32)
        res = entries(alpha, beta, cc.thresholds, plan.min_count, c32, tables)
        need, count, _, n_out = res[:4]
        return (c32, need, count, n_out, res[4:]), n_out

    def magnitude():  # the magnitudes of the line-normalized operands, their lower-bound GEMM
        ea, eb = (np.ascontiguousarray(certificate_plan.line_exponents(xp, x, cplx))
                  for x in (s, t))  # fmt: skip
        tiles = _lower_on_tiles(amx, m, n, k)
        a_m = amx.ozaki2_cert_operand(ar, ea, True, ai, bf16=tiles)[0]  # float32 as it is
        b_m = amx.ozaki2_cert_operand(br.T, eb, False, None if bi is None else bi.T,
                                      bf16=tiles)[0]  # fmt: skip
        if tiles:  # magnitude_lower_matmul's BF16 tile GEMM: its FP32 sums, factor in C++
            return amx.gemm_bf16bf16f32(a_m, b_m, emulate=EMULATE)
        return np.ascontiguousarray(native_matmul(a_m, b_m))  # certificate's float32 path

    c32, need, count, n_out, xneed = certificate.ozaki2_passes(counts, magnitude)
    beyond = need == certificate.BEYOND if n_out else None  # None: no entry beyond (no m x n pass)
    if n_out == need.size:
        return None, beyond, None

    exact = {}

    def failing(c):  # the exact test of c moduli: (per entry codes, level, certifiable failures)
        if xneed:  # exact needs above c fail it
            codes, hist = xneed
            return codes, c, int(hist[c - plan.min_count + 1:].sum())
        if c not in exact:
            codes, _, _, fails = entries(*line_factors(c), (1.0,), 0, c32)
            exact[c] = codes, 0, fails - n_out  # beyond: fail all
        return exact[c]

    count = certificate.exact_step(count, lambda c: failing(c)[2])
    if count is None or not plan.steps:
        return count, beyond, None
    native = target.guarantee == "native"
    s64, t64 = (np.ascontiguousarray(v, dtype=np.int64).reshape(-1) for v in (s, t))

    def tested(c):  # refinement.refine_loop's step in C++: suspects, sample sums, their test
        p, q = line_factors(c - 1)
        codes, level, _ = failing(c - 1)
        sus, fails, patch = amx.ozaki2_refine_step(
            ar, ai, br, bi, s64, t64, need, certificate.BEYOND, codes, level, lower, c32,
            plan.fexp, plan.fexp_mixed, ma, mb, plan.lower_terms, na, p, nb, q, native,
            plan.refine_terms, plan.theta_max,
            plan.suspects_max, plan.sample, plan.fails_cap,
        )  # fmt: skip
        if sus > plan.suspects_max:
            return None, 0, None
        return sus, max(fails, 0), lambda: patch

    count, patch = refinement.refine_loop(count, tested, m, n, lines=plan.lines)
    return count, beyond, patch


def _lower_on_tiles(amx, m, n, k):
    """Whether a lower bound of a product of magnitudes runs as a BF16 tile GEMM here: the tiles
    (or their model) usable, and at least SMALL_BOUND_WORK multiply-adds (per call, a tile GEMM's
    team costs more)."""
    usable = amx is not None and hasattr(amx, "bf16_lower") and (EMULATE or amx.available())
    return usable and m * n * k >= SMALL_BOUND_WORK


def magnitude_lower_matmul(xa, xb):
    """Certified lower bound ``L <= xa @ xb`` (elementwise, exact arithmetic) for non-negative
    float64 ``xa`` (..., m, k) and ``xb`` (..., k, n) with entries <= 2, as one AMX BF16 tile
    GEMM per matrix (the cupy backend's bfloat16 tensor-core GEMM, on the tiles).

    The entries are truncated toward zero to bfloat16 (``emulinalg._amx.bf16_lower``),
    multiplied by TDPBF16PS (``gemm_bf16bf16f32``: exact products, FP32 sums rounded to nearest,
    subnormals flushed) and the FP32 sums scaled by ``1 - (k + 2) 2**-22`` in float64: every term
    is >= 0, so the truncation only lowers the sum and the factor covers the sums' rounding in
    any order (``certificate.magnitude_lower``; flushes: ``certificate.lower_abs``). Operands of
    either sign are truncated toward zero too (``certificate.signed_estimate``). Where the tiles
    are not usable, and for products of fewer than SMALL_BOUND_WORK multiply-adds (a batch of
    small ones is one numpy call): the float64 GEMM times the native factor (a lower bound as
    well, and within ``signed_error`` for either sign)."""
    from emulinalg.algorithm import certificate

    k = xa.shape[-1]
    batch = tuple(np.broadcast_shapes(xa.shape[:-2], xb.shape[:-2]))
    m, n = xa.shape[-2], xb.shape[-1]
    cc = certificate.cert_constants(k)
    if cc.factor <= 0 or 0 in (k, m, n):
        return np.zeros(batch + (m, n))
    amx = _module()
    if not _lower_on_tiles(amx, m, n, k):
        return native_matmul(xa, xb) * cc.native_factor
    a3 = np.broadcast_to(xa, batch + (m, k)).reshape((-1, m, k))
    b3 = np.broadcast_to(xb, batch + (k, n)).reshape((-1, k, n))
    out = np.empty((a3.shape[0], m, n))
    if a3.shape[0] == 1 and hasattr(amx, "scaled_float64"):  # the scaling with OpenMP
        c = amx.gemm_bf16bf16f32(amx.bf16_lower(a3[0]), amx.bf16_lower(b3[0]), emulate=EMULATE)
        return amx.scaled_float64(c, cc.factor).reshape(batch + (m, n))  # rounded once
    for i in range(a3.shape[0]):
        c = amx.gemm_bf16bf16f32(amx.bf16_lower(a3[i]), amx.bf16_lower(b3[i]), emulate=EMULATE)
        np.multiply(c, cc.factor, out=out[i], dtype=np.float64)  # rounded once
    return out.reshape(batch + (m, n))


def balance_sides(re, im, e):
    """``parts.balance_sides(numpy, re, im, e)`` in one OpenMP pass (``emulinalg._amx``): (t, d)
    float64, or None to decline (batches, float32 parts, exponents not per row (m, 1) or per
    column (1, n))."""
    amx = _module()
    if amx is None or not hasattr(amx, "balance_sides") or re.ndim != 2:
        return None
    if re.dtype != np.float64 or im.dtype != np.float64 or im.shape != re.shape:
        return None
    if any(st % 8 for st in re.strides + im.strides):
        return None
    m, n = re.shape
    rows = e.shape == (m, 1)
    if not (rows or e.shape == (1, n)):
        return None
    return amx.balance_sides(re, im, np.ascontiguousarray(e, dtype=np.int64).reshape(-1), rows)


def balance_fine(t_lo, s, terms, empty_rows, empty_cols):
    """``parts.balance_fine(numpy, ...)`` in one OpenMP pass (``emulinalg._amx``): bool, or None
    to decline (batches, other dtypes)."""
    amx = _module()
    if amx is None or not hasattr(amx, "balance_fine") or t_lo.ndim != 2 or s.shape != t_lo.shape:
        return None
    if t_lo.dtype != np.float64 or s.dtype != np.float64 or t_lo.size == 0:
        return None
    m, n = t_lo.shape
    if empty_rows.shape != (m, 1) or empty_cols.shape != (1, n):
        return None
    return amx.balance_fine(
        np.ascontiguousarray(t_lo), np.ascontiguousarray(s), np.asarray(terms, dtype=np.float64),
        np.ascontiguousarray(empty_rows).reshape(-1), np.ascontiguousarray(empty_cols).reshape(-1),
    )  # fmt: skip


def _chunk_module():
    """``emulinalg._amx`` where its C++ runs here (AMX, or the tile model under ``EMULATE``),
    else None: the dask graph's generic chunk steps then run for the whole graph."""
    amx = _module()
    return amx if amx is not None and hasattr(amx, "ozaki2_residues") and (
        EMULATE or amx.available()) else None  # fmt: skip


def chunk_residues(re, im, shift, axis, moduli, nearest):
    """The dask shared graph's residues of one 2-D chunk (``host_chunks.residues``), or None."""
    amx = _chunk_module()
    if amx is None or re.ndim != 2 or re.dtype != np.float64:
        return None
    return _host_chunks.residues(amx, re, im, shift, axis, moduli, nearest)


def chunk_products(pa, pb, moduli):
    """A block's modular products on the tiles (``host_chunks.products``)."""
    amx = _module()
    return _host_chunks.products(lambda a, b: _gemm_s8(amx, a, b), pa, pb, moduli)


def chunk_residue_sum(ws):
    """The K-blocks' residues added modulo each modulus (``host_chunks.residue_sum``)."""
    return _host_chunks.residue_sum(ws)


def chunk_crt(w, mu, nu, moduli, cplx, out_dtype, cols):
    """An output block's CRT in ``ozaki2_crt`` (``host_chunks.crt``)."""
    return _host_chunks.crt(_module(), _crt_arrays(moduli), w, mu, nu, moduli, cplx, out_dtype,
                            cols)  # fmt: skip


def _tiles(amx, a, b):
    a8 = np.ascontiguousarray(a, dtype=np.int8)  # exact: values checked to lie in [-128, 127]
    b8 = np.ascontiguousarray(b, dtype=np.int8)
    return amx.gemm_s8s8s32(a8, b8, emulate=EMULATE)


# line_scan, ozaki2_prescale, ozaki2_certificate and ozaki2_product read float32 parts as they
# are (src_amx widens each entry exactly in registers): a float32 product makes no float64 copy
# of its inputs, and the operand passes read half the bytes.
narrow_statistics = True
narrow_products = True

# The native product numpy users get here is numpy's OpenBLAS: its error model, as the numpy
# backend's (``emulinalg.algorithm.certificate.native_error``).
native_error_rms = _numpy_backend.native_error_rms
native_error_rms_complex = _numpy_backend.native_error_rms_complex
native_chain_k = _numpy_backend.native_chain_k
# complex Scheme II products modulo the Gaussian moduli (two tile GEMMs per modulus, 3M's three):
# ozaki2_pack writes u = re + iota im and v = re - iota im, ozaki2_multiply combines U and V, and
# the certificate counts with their constants (``ozaki2_certificate``)
gaussian_moduli = True
