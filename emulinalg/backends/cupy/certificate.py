"""The cupy backend's certificate in the kernels of ``src_cuda/ozaki2_stats.cu``:
``emulinalg.algorithm.certificate.ozaki2_moduli_needed``'s count, beyond mask and patch from the
prescale's bound GEMM, with every constant, limit and step count from
``emulinalg.algorithm.certificate_plan``.
"""

from __future__ import annotations

import array_api_compat
import cupy as cp
import numpy as np

from emulinalg.algorithm import certificate, certificate_plan, refinement

from .gemm import _bf16_gemm, magnitude_lower_matmul, native_matmul
from .kernels import (
    _BF16_ALIGN,
    _MAX_GRID_YZ,
    _THREADS,
    _ceil,
    _i32,
    _i64,
    _in_type,
    _Operands,
    _stats_kernel,
    _tf,
)
from .statistics import _Bound, _cert_operand, _f_type, _usable

# cert_entries' grid over F (128 columns by row chunks, as bound_max's in statistics.py; any grid
# gives the same results): the number of blocks it aims at (each block's histogram is one atomic)
_CERT_BLOCKS = 4096
# refine_suspects' blocks (8 warps each, a warp per sample slot, grid-stride over the slots; any
# count gives the same results): enough for refinement.REFINE_ENTRIES slots at once
_SAMPLE_BLOCKS = 512
# suspect_ranks' and refine_test's blocks, each a contiguous range of 1024-entry groups of the
# output (any count gives the same results)
_SEG_BLOCKS = 4096
# The certificate's refinement steps launched before its read-back: a step mostly ends the
# refinement, and each launch of the (gated) kernels costs host time; more steps follow only
# where these all took their counts off (one more read-back)
_SPECULATIVE_STEPS = 2


def _line_terms(partial, B, R, ev, scale, l1fac, l2):
    """The line norms (B, R) (upper bounds, ``certificate.line_norm``'s: l1, or ``l2`` from the sums
    of squares) from the partials (2, B, chunks, R) and alpha = scale sqrt(e) (ev: (B, R))."""
    chunks = partial.shape[2]
    norm = cp.empty((B, R), dtype=cp.float64)
    alpha = cp.empty((B, R), dtype=cp.float64)
    fn = _stats_kernel("cert_line_terms")
    args = (partial, _i32(chunks), _i32(B), _i32(R), np.float64(l1fac), _i32(l2), ev,
            np.float64(scale), norm, alpha)  # fmt: skip
    fn((min(-(-(B * R) // _THREADS), 4096),), (_THREADS,), args)
    return norm, alpha


def ozaki2_certificate(ar, ai, br, bi, prescale, target, gaussian=False):
    """``emulinalg.algorithm.certificate.ozaki2_moduli_needed(cupy, backend, ar, ai, br, bi,
    prescale, target, gaussian=gaussian)`` (with this backend's bf16 ``magnitude_lower_matmul``)
    in the kernels of ``ozaki2_stats.cu``: ``(count, beyond, patch)``, or None to decline (a
    prescale not made by ``ozaki2_prescale``). ``gaussian``: the counts of the Gaussian moduli
    (complex products; their constants, ``certificate_plan.plan``).

    The line norms of ``target``'s form (l1, or l2 from the prescale's sums of squares). One pass
    over the prescale's bound GEMM F applies ``certificate.bound_lower`` (a complex product's
    ``Prescale.parts_lower`` taken as the bf16 GEMM's sums: the larger bound per entry), finds
    each entry's smallest certifying count in the certificate's float64 operations (in order, no
    FMA) and counts the entries at the largest one and beyond every count. The exact step
    (``certificate.exact_passes`` one count lower: the exact line factors of that count,
    ``cert_exact_factors``, and the counts' kernel again with those in place of alpha, beta at
    threshold 1) takes a count off where it fails on the beyond entries only. For 2-D products
    ``refinement.refine_and_patch`` follows, up to the plan's steps: the exact pass
    one count lower, the suspects' ranks in flat order (``suspect_ranks``), the sample's products
    one warp each (with their squares for the native form, ``refine_suspects``), and every suspect's
    test with the decision (``refine_test``: one count off, on to the next step; a patch; or stop).
    Those passes decide on the device from the words of the passes before them whether they run, and
    one read-back takes all their results. Only when some entry is beyond: one pass per operand
    writes the truncated bf16 magnitudes of the line-normalized operand, the bf16 GEMM is
    ``magnitude_lower_matmul``'s, and the passes run again with the larger lower bound per entry.
    ``beyond`` is None when no entry is beyond every count. Every float operation is the generic one
    except the order of the norms' sums (here: by 128-column chunks) and of the suspects' products;
    all are bounds, and a decision can only differ where a test is decided within a few ulps.
    """
    lower = getattr(prescale, "lower", None)
    if not isinstance(lower, _Bound) or not _usable(ar, ai, br, bi):
        return None
    k = ar.shape[-1]
    cplx = ai is not None
    ops = _Operands(ar, ai, br, bi)
    B, m, n = ops.B, ops.m, ops.n
    if 0 in (B, m, k, n):
        return None
    plan = certificate_plan.plan(k, target, cplx, m, n, max(ar.ndim, br.ndim), gaussian,
                                 streaming=certificate_plan.CUDA_SUSPECTS_MAX)  # fmt: skip
    cc = plan.constants
    s, t, e, f = prescale
    l2 = plan.native
    ev = cp.ascontiguousarray(e.reshape(B * m).astype(cp.float64, copy=False))
    fv = cp.ascontiguousarray(f.reshape(B * n).astype(cp.float64, copy=False))
    na, alpha = _line_terms(lower.pa, B, m, ev, cc.scale, cc.l1fac, l2)
    nb, beta = _line_terms(lower.pb, B, n, fv, cc.scale, cc.l1fac, l2)
    F = lower.F
    n_p = F.shape[-1]
    need = cp.empty((B, m, n), dtype=cp.uint8)  # the counts
    fails = cp.empty((B, m, n), dtype=cp.uint8)  # the exact test: 1 where an entry fails it
    p = cp.empty((B * m,), dtype=cp.float64)  # the exact line factors
    q = cp.empty((B * n,), dtype=cp.float64)
    gx = -(-n // 128)  # cert_entries: 4 columns per thread
    gy = min(-(-(B * m) // 64), max(1, _CERT_BLOCKS // gx), _MAX_GRID_YZ)
    rows_per_block = -(-(B * m) // gy)
    nth = plan.counts
    # ozaki2_stats.cu's control words (the kernels' layout): W + 5 the count index, W + 6
    # patched, ...; step i's from step_word(i), the patch's indices from step_word(steps)
    W = nth + 2
    tab = cp.asarray(np.array(plan.table, dtype=np.float64))
    th, one, exact_tab = tab[:nth], tab[nth : nth + 1], tab[nth + 1 :]
    fexp, fexp_mixed = plan.fexp, plan.fexp_mixed
    consts = tuple(np.float64(x) for x in plan.lower_terms)  # factor, abs_term, cR, c4
    factor, abs_term, cR, c4 = consts
    line_grid = (min(-(-(B * (m + n)) // _THREADS), 4096),)

    # refinement.refine_and_patch's steps (none for batched products)
    # (the kernels take a patch of up to fails_cap entries; refinement.kernel_patch decides)
    steps, limit, re, patch_cap = plan.steps, plan.suspects_max, plan.sample, plan.fails_cap
    total, nseg = m * n, -(-(m * n) // 128)
    cap = max(re, 1)  # sample slots
    grid_seg = (min(-(-total // 1024), _SEG_BLOCKS),)  # suspect_ranks and refine_test: the same
    (are, aim), (bre, bim) = ops.a, ops.b  # B^T lines: (batch, j, k) strides
    _, asr, asc = ops.a_strides
    _, bsc, bsr = ops.b_strides

    def step_word(i):
        return nth + 10 + 9 * i  # cw_step

    words = []  # the last pass's control words on the device

    def entries(c32, last):
        """The counts' pass, the exact step, then (2-D products) the refinement's steps, each
        conditioned on the device by the words of the passes before it, and one read-back of
        the words (ozaki2_stats.cu); the steps past _SPECULATIVE_STEPS are launched (and read
        back) only where the ones before took their counts off."""
        gemm = c32 is not None
        last = _i32(last)  # a first pass with beyond entries is followed by a second one
        w = cp.zeros((step_word(steps) + patch_cap,), dtype=cp.uint64)
        words[:] = [w]  # the patch's indices are read from the last pass's words
        head = (F, c32 if gemm else F, _i64(n_p), _i64(c32.shape[-1] if gemm else 0), _i32(B),
                _i32(m), _i32(n), _i32(rows_per_block), _i32(fexp))  # fmt: skip
        counts = _stats_kernel(f"cert_entries<{_f_type(F)}, {_tf(gemm)}>")

        def test(a_terms, b_terms, thr, nthr, base, out, h, skip):
            args = head + (na, a_terms, nb, b_terms) + consts + (
                thr, _i32(nthr), _i32(base), lower.ma, lower.mb, _i32(fexp_mixed), out, w[h:],
                w[skip:],
            )  # fmt: skip
            counts((gx, gy), (32, 8), args)

        def factors(mode):
            args = (ev, _i64(B * m), fv, _i64(B * n), exact_tab, _i32(nth), _i32(mode), last,
                    _i32(steps > 0), _i32(steps), w, p, q)  # fmt: skip
            _stats_kernel("cert_exact_factors")(line_grid, (_THREADS,), args)

        test(alpha, beta, th, nth, plan.min_count, need, 0, W + 3)  # the counts
        factors(0)
        test(p, q, one, 1, 0, fails, W, W + 4)  # the exact step
        factors(1)
        if steps:
            seg = cp.empty((nseg + grid_seg[0],), dtype=cp.uint32)  # per segment; per block
            seg, boff = seg[:nseg], seg[nseg:]
            sums = cp.empty((2 * cap,), dtype=cp.float64)
            cq = c32 if gemm else F
            gate = (need, fails, _i64(total), w, _i32(nth))
            sel = (_i32(plan.min_count), _i64(limit), _i64(re))
            ranks = _stats_kernel("suspect_ranks")
            sample = _stats_kernel(f"refine_suspects<{_tf(cplx)}, {_in_type(are)}>")
            decide = _stats_kernel(f"refine_test<{_f_type(F)}, {_tf(gemm)}>")
            sample_grid = (min(-(-cap // (_THREADS // 32)), _SAMPLE_BLOCKS),)

        def refine_steps(lo, hi):
            for i in range(lo, hi):
                P = step_word(i)
                test(p, q, one, 1, 0, fails, P, P + 3)
                ranks(grid_seg, (_THREADS,), gate + (_i32(i),) + sel + (seg, _i64(nseg), boff))
                args = (
                    are, are if aim is None else aim, _i64(asr), _i64(asc), bre,
                    bre if bim is None else bim, _i64(bsr), _i64(bsc), _i32(k), s.reshape(-1),
                    t.reshape(-1), _i32(n),
                ) + gate + (_i32(i),) + sel + (seg, _i64(nseg), boff, _i64(grid_seg[0])) + (
                    _i32(l2), *(np.float64(x) for x in plan.refine_terms), sums, _i64(cap),
                )  # fmt: skip
                sample(sample_grid, (_THREADS,), args)
                args = (
                    F, cq, _i64(n_p), _i64(cq.shape[-1] if gemm else 0), _i32(n), _i32(fexp),
                    _i32(fexp_mixed), lower.ma, lower.mb, factor, abs_term, na, p, nb, q, cR, c4,
                    need, fails, _i64(total), w, _i32(nth), _i32(i), _i32(steps),
                ) + sel + (boff,) + (
                    _i32(l2), np.float64(plan.theta_max), sums, _i64(cap), _i64(patch_cap), ev,
                    _i64(B * m), fv, _i64(B * n), exact_tab,
                )  # fmt: skip
                decide(grid_seg, (_THREADS,), args)

        first = min(steps, _SPECULATIVE_STEPS)
        refine_steps(0, first)
        control = step_word(steps)  # the control words; the patch's indices only where taken
        got = [int(v) for v in cp.asnumpy(w[:control])]
        if first < steps and not got[step_word(first) + 3]:  # the steps so far all went on
            refine_steps(first, steps)
            got = [int(v) for v in cp.asnumpy(w[:control])]
        return got

    pl = getattr(prescale, "parts_lower", None)  # FP32 sums as the bf16 GEMM's: the first pass's
    if pl is not None:
        pl = _padded_rows(pl, ops.batch, B, m, n)

    def counts(c32):  # certificate.ozaki2_passes' pass: (the words, entries beyond)
        last = c32 is not None
        if c32 is None:
            c32 = pl
        elif pl is not None:  # the larger sums per entry: gemm_lower is monotone
            c32[..., :n] = cp.maximum(c32[..., :n], pl[..., :n])
        w = entries(c32, last)
        return w, w[nth]

    def wide():  # the rarer passes below read float64 operands
        return (None if x is None else x.astype(cp.float64, copy=False) for x in (ar, ai, br, bi))

    def magnitude():  # the truncated bf16 magnitudes of the line-normalized operands, their GEMM
        if not plan.gemm_lower:  # beyond the bf16 bound's range
            return None
        w_ops = _Operands(*wide())
        kp, nb16 = _ceil(k, _BF16_ALIGN), _ceil(n, _BF16_ALIGN)
        a16 = _cert_operand(*w_ops.a, w_ops.a_strides, B, m, m, k, kp, False, s)
        b16 = _cert_operand(*w_ops.b, w_ops.b_strides, B, n, nb16, k, kp, True, t)
        return _bf16_gemm(a16, b16)

    w = certificate.ozaki2_passes(counts, magnitude)
    if w is None:  # the generic code (its float64 GEMM bound) from F
        Fv = F[..., :n].reshape(ops.batch + (m, n))
        a64, ai64, b64, bi64 = wide()
        xp = array_api_compat.array_namespace(a64)
        return certificate.certify_moduli(
            xp, _this(), a64, ai64, b64, bi64, prescale, target, Fv, gaussian=gaussian
        )
    n_out = w[nth]
    if n_out == B * m * n:
        return None, (need == certificate.BEYOND).reshape(ops.batch + (m, n)), None
    beyond = (need == certificate.BEYOND).reshape(ops.batch + (m, n)) if n_out else None
    for i in range(steps):  # every step that refined tested all its suspects
        P = step_word(i)
        sus = w[P + 1] - n_out
        if not w[P + 3] and 1 <= sus <= limit and re >= 1 and w[P + 6] != sus:
            raise RuntimeError("internal: the certificate's suspects were not all tested")
    count = w[W + 5] + plan.min_count
    if not w[W + 6]:
        return count, beyond, None
    at = step_word(steps)
    # sorted on the device (the kernels append them in any order; up to fails_limit, millions)
    failed = cp.asnumpy(cp.sort(words[0][at : at + w[W + 7]])).astype(np.int64)
    count, patch = refinement.kernel_patch(count, failed, m, n, plan.lines)
    if isinstance(patch, np.ndarray):
        patch = cp.asarray(patch)
    return count, beyond, patch


def _padded_rows(pl, batch, B, m, n):
    """``Prescale.parts_lower`` (..., m, n) float32 in rows padded as the bf16 GEMM's output
    (B, m, n_p) (the kernels load 16 bytes at once): the array it is a view of where
    ``balance.balance_stage`` made it so, else a padded copy."""
    n_p = _ceil(n, _BF16_ALIGN)
    base = getattr(pl, "base", None)
    if (base is not None and base.size == B * m * n_p and base.dtype == cp.float32
            and base.flags.c_contiguous and pl.data.ptr == base.data.ptr
            and pl.shape == batch + (m, n) and pl.strides[-2:] == (4 * n_p, 4)):  # fmt: skip
        return base.reshape(B, m, n_p)
    sums = cp.zeros((B, m, n_p), dtype=cp.float32)
    sums[..., :n] = cp.broadcast_to(pl, batch + (m, n)).reshape(B, m, n)
    return sums


def _this():
    """This backend's GEMM hooks for the generic certificate code (without its own hooks)."""
    import types

    return types.SimpleNamespace(
        native_matmul=native_matmul, magnitude_lower_matmul=magnitude_lower_matmul
    )
