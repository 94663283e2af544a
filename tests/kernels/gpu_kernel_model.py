"""numpy model of the cupy backend's Scheme II kernels (``src_cuda/*.cu``), step for step.

Each function does, per entry, the integer and float operations that the CUDA kernel does, in the
same order and with the same word widths (uint64/int64 numpy arrays standing for the kernel's
registers; shifts are guarded exactly where the kernel guards them). The CPU tests
(``test_gpu_kernel_model_*.py``) check this model against the generic
``emulinalg.algorithm.products`` path bit for bit, so on the GPU only the transcription into CUDA
remains untested here.
"""

from __future__ import annotations

import numpy as np

from emulinalg.algorithm.moduli import GAUSSIAN_MODULI, MIN_MODULI, crt_constants
from emulinalg.algorithm.scaling import BOUND_MAX, ozaki2_shifts, rounds_to_nearest
from emulinalg.backends.cuda import MAX_WORDS, crt_tables

U64 = np.uint64
K_BLOCK = 1 << 16  # as emulinalg/backends/cupy/gemm.py: |r_a r_b| <= 2**14, so INT32 sums are exact
KP_ALIGN = 16  # k padding (int8 rows 16-byte aligned for IMMA)
NP_ALIGN = 4  # n padding (INT32 output rows 16-byte aligned)


def _ceil(x, a):
    return (x + a - 1) // a * a


def _u(x):
    return np.asarray(x).astype(U64)


def _shl(x, s):
    """x << s for 0 <= s < 64 (s array), as the kernel's guarded shifts."""
    return np.left_shift(_u(x), _u(s))


def _shr(x, s):
    return np.right_shift(_u(x), _u(s))


# ----------------------------------------------------------------------------------------------
# residues: ozaki2_residues.cu (element_words, residue_of, residue_sum) and
# ozaki2_residues_mma.cu (entry_digits, the MMA's digit sums, reduce_sum)
# ----------------------------------------------------------------------------------------------


def _magnitude(x, shift, nearest):
    """(neg, lo, hi, e2 >= 0): sign and |X| = hi 2**64 + lo, X = x * 2**shift rounded to nearest,
    ties to even (``nearest``), or toward zero (hi wraps beyond 2**128 as the kernel's shifts
    do), and whether x 2**shift is an integer already (the significand shifted left)."""
    bits = np.ascontiguousarray(x, dtype=np.float64).view(U64)
    shift = np.asarray(shift, dtype=np.int64)
    neg = (bits >> U64(63)) != 0
    eb = ((bits >> U64(52)) & U64(0x7FF)).astype(np.int64)
    M = bits & U64((1 << 52) - 1)
    M = np.where(eb != 0, M | U64(1 << 52), M)
    E = np.where(eb != 0, eb - 1075, -1074)
    e2 = E + shift
    pos = e2 >= 0
    # e2 >= 0: lo = M << e2 (e2 < 64), hi = M >> (64 - e2) (0 < e2 < 64) or M << (e2 - 64)
    lo_pos = np.where(e2 < 64, _shl(M, np.clip(e2, 0, 63)), U64(0))
    hi_pos = np.where(
        e2 == 0,
        U64(0),
        np.where(
            e2 < 64,
            _shr(M, np.clip(64 - e2, 0, 63)),
            np.where(e2 < 128, _shl(M, np.clip(e2 - 64, 0, 63)), U64(0)),
        ),
    )
    # e2 < 0: M >> d (d = -e2 < 64), after adding half - 1 + (bit d of M) to round to nearest
    d = np.clip(-e2, 1, 63)
    bias = _shl(1, d - 1) - U64(1) + (_shr(M, d) & U64(1))
    lo_neg = np.where(e2 > -64, _shr(M + np.where(nearest, bias, U64(0)), d), U64(0))
    return neg, np.where(pos, lo_pos, lo_neg), np.where(pos, hi_pos, U64(0)), pos


def element_words(x, shift, nearest=False):
    """(neg, w0..w5): sign and the six 16-bit words of |X| mod 2**96, X = x * 2**shift rounded
    to nearest, ties to even (``nearest``), or toward zero."""
    neg, lo, hi, _ = _magnitude(x, shift, nearest)
    lo32 = lo & U64(0xFFFFFFFF)
    lh32 = lo >> U64(32)
    hi32 = hi & U64(0xFFFFFFFF)
    words = [
        lo32 & U64(0xFFFF),
        lo32 >> U64(16),
        lh32 & U64(0xFFFF),
        lh32 >> U64(16),
        hi32 & U64(0xFFFF),
        hi32 >> U64(16),
    ]
    return neg, words


def residue_of(neg, words, m):
    """Symmetric residue in [-(m//2), (m-1)//2] of the signed integer given by element_words."""
    S = words[0].copy()
    for i in range(1, 6):
        S = S + words[i] * U64(pow(2, 16 * i, m))  # < 2**16 * (1 + 5 * 255) < 2**27 (u32)
    assert int(S.max(initial=0)) < 1 << 32
    u = (S % U64(m)).astype(np.int64)
    v = np.where(neg, m - u, u)
    return np.where(v > (m - 1) // 2, v - m, v)


def residue_sum(rr, ri, m):
    """Symmetric residue of rr + ri (both symmetric residues): one correction suffices."""
    t = rr + ri
    t = np.where(t > (m - 1) // 2, t - m, t)
    return np.where(t < -(m // 2), t + m, t)


def entry_digits(x, shift, nearest=False):
    """The kernel's four 32-bit words per entry (uint64 arrays): |X| mod 2**96 = hi 2**52 + lo,
    lo's 7 bytes and hi's 6, complemented where x < 0, and the sign (bytes 0-6, 7-12, 13). hi is
    floor(|x| 2**shift / 2**52), as the kernel's float64 path takes it: below 2**52 hi = 0 and lo
    may be 2**52 where rounding carries."""
    neg, lo, hi, whole = _magnitude(x, shift, nearest)
    H = np.where(whole, (lo >> U64(52)) | ((hi & U64(0xFFFFFFFF)) << U64(12)), U64(0))
    L = np.where(whole, lo & U64((1 << 52) - 1), lo)
    m32 = U64(0xFFFFFFFF)
    flip = np.where(neg, m32, U64(0))
    return [
        (L & m32) ^ flip,
        ((L >> U64(32)) | ((H & U64(0xFF)) << U64(24))) ^ flip,
        ((H >> U64(8)) & m32) ^ flip,
        ((H >> U64(40)) ^ (flip & U64(0xFF))) | (neg.astype(U64) << U64(8)),
    ]


def digit_places():
    """The digit bytes' place values (lo's 7 bytes, hi's 6 at 2**52) and C = sum 255 place: a
    complemented digit d' = 255 - d, so -A = sum d'_k place_k - C."""
    places = [2 ** (8 * k) for k in range(7)] + [2 ** (52 + 8 * k) for k in range(6)]
    return places, 255 * sum(places)


def _symmetric_int(u, m):
    return u - m if u > (m - 1) // 2 else u


def digit_weights(m):
    """The 16 int8 weights of modulus ``m`` (the MMA's A row): the places mod m, -C mod m for
    the sign byte, 0 for the last two; symmetric representatives."""
    places, C = digit_places()
    return [_symmetric_int(p % m, m) for p in places] + [_symmetric_int(-C % m, m), 0, 0]


def digit_sum(words, m):
    """s = sum_k byte_k w_k (int64): the MMA's dot product of an entry's digit bytes with the
    weights of ``m``, without the accumulator's start."""
    s = np.zeros(np.shape(words[0]), dtype=np.int64)
    for k, w in enumerate(digit_weights(m)):
        if w:
            s += ((words[k // 4] >> U64(8 * (k % 4))) & U64(0xFF)).astype(np.int64) * w
    return s


def reduce_sum(s, m):
    """The residue byte (as int8) of a digit sum s (|s| < 2**22), as the kernel reduces it: q =
    fma(f, rn(1/m), M) - M = rint(s rn(1/m)) (the product is exact inside the FMA; rn(1/m) = 0
    for 256), the low byte of s - m q."""
    s = np.asarray(s, dtype=np.int64)
    assert np.abs(s).max(initial=0) < 2**22
    inv = np.float32(0) if m == 256 else np.float32(1) / np.float32(m)
    q = np.rint(s.astype(np.float64) * np.float64(inv)).astype(np.int64)  # exact product
    return ((s - m * q) & 0xFF).astype(np.uint8).view(np.int8).astype(np.int64)


def digit_residue(words, m):
    """Symmetric residue in [-(m//2), (m-1)//2] of the integer given by ``entry_digits``."""
    return reduce_sum(digit_sum(words, m), m)


def _symmetric(u, m):
    return np.where(u > (m - 1) // 2, u - m, u)


def gaussian_sum(rr, ri, iota, m):
    """Symmetric residue of rr + iota ri (symmetric residues rr, ri; iota a signed int, |iota|
    < m): the word kernel's Gaussian planes (its residue_lin), |rr + iota ri| < 2**16."""
    return _symmetric(np.mod(rr + np.int64(iota) * ri, m), m)


def residue_planes(re, im, shift, moduli, rows_pad, kp, nearest=False, digits=False, iota=None):
    """Planes (P, n_mod, B, rows_pad, kp) int8 of the logical operand (B, R, C) (rows = lines
    scaled by ``shift`` (B, R) and rounded as ``element_words``, C the contraction axis),
    zero-padded: either kernel's output, by the arithmetic of ``ozaki2_residues.cu``'s words or
    (``digits``) of ``ozaki2_residues_mma.cu``'s digit sums (3M's third plane: the digit sums of
    re and im added, one reduction). ``iota`` (one per modulus, with ``im``): the Gaussian
    planes u = re + iota im, v = re - iota im (P = 2); the MMA kernel reduces the imaginary
    digit sum to r_im, then s_re + iota r_im and s_re - iota r_im, each by reduce_sum; the word
    kernel adds the symmetric residues (gaussian_sum)."""
    B, R, C = re.shape
    gauss = iota is not None and im is not None
    P = 1 if im is None else 2 if gauss else 3
    out = np.zeros((P, len(moduli), B, rows_pad, kp), dtype=np.int8)
    sh = np.broadcast_to(np.asarray(shift)[:, :, None], (B, R, C))
    parts = [x for x in (re, im) if x is not None]
    if digits:
        words = [entry_digits(x, sh, nearest) for x in parts]
    else:
        words = [element_words(x, sh, nearest) for x in parts]
    for ell, m in enumerate(moduli):
        if digits:
            sums = [digit_sum(w, m) for w in words]
            if gauss:
                r_im = reduce_sum(sums[1], m)
                t = np.int64(int(iota[ell])) * r_im
                res = [reduce_sum(sums[0] + t, m), reduce_sum(sums[0] - t, m)]
            else:
                res = [reduce_sum(s, m) for s in sums]
                if im is not None:
                    res.append(reduce_sum(sums[0] + sums[1], m))
        else:
            res = [residue_of(neg, w, m) for neg, w in words]
            if gauss:
                io = int(iota[ell])
                res = [gaussian_sum(res[0], res[1], io, m), gaussian_sum(res[0], res[1], -io, m)]
            elif im is not None:
                res.append(residue_sum(res[0], res[1], m))
        for p, r in enumerate(res):
            out[p, ell, :, :R, :C] = r
    return out


# ----------------------------------------------------------------------------------------------
# INT8 GEMMs (cuBLAS strided batched, K-blocked)
# ----------------------------------------------------------------------------------------------


def int8_gemms(pa, pb, k_block=K_BLOCK):
    """INT32 products (nkb, P, n_mod, B, m, n_p) of A planes (.., m, kp) and B planes (.., n_p,
    kp), one per K-block of ``k_block`` columns: what the batched cuBLAS calls write."""
    kp = pa.shape[-1]
    outs = []
    for k0 in range(0, kp, k_block):
        a = pa[..., k0 : k0 + k_block].astype(np.int64)
        b = pb[..., k0 : k0 + k_block].astype(np.int64)
        c = np.matmul(a, np.swapaxes(b, -1, -2))
        assert np.abs(c).max(initial=0) < 2**31
        outs.append(c.astype(np.int32))
    return np.stack(outs)


# ----------------------------------------------------------------------------------------------
# CRT and rounding (ozaki2_crt.cu)
# ----------------------------------------------------------------------------------------------

_FMT = {"float64": (53, -1074, 1023, 64), "float32": (24, -149, 127, 32)}


def mod_pos(T, m):
    """T mod m in [0, m) for int32 T (C's truncating % then + m)."""
    T = np.asarray(T, dtype=np.int64)
    r = np.fmod(T, m)
    return np.where(r < 0, r + m, r)


def _accumulated(C, p, ell, m):
    """Product p of modulus ell added over the K-blocks mod m, in [0, m)."""
    u = mod_pos(C[0, p, ell], m)
    for kb in range(1, C.shape[0]):
        u = u + mod_pos(C[kb, p, ell], m)
        u = np.where(u >= m, u - m, u)
    return u


def reduced_products(C, moduli, cplx, gaussian=False):
    """Per modulus and part: W_l (symmetric) from the K-blocked INT32 products; ``gaussian``
    (complex, ``moduli`` the Gaussian ones): the two products U, V per modulus give
    Re = (U + V) / 2 and Im = (U - V) / (2 iota) mod m."""
    W = []
    gauss = cplx and gaussian
    if gauss:
        c = crt_constants(len(moduli), True)
        assert tuple(moduli) == c.moduli == GAUSSIAN_MODULI[: len(moduli)]
    for ell, m in enumerate(moduli):
        us = [_accumulated(C, p, ell, m) for p in range(1 if not cplx else 2 if gauss else 3)]
        if gauss:
            U, V = us  # in [0, m): U + V < 2m, U - V + m in (0, 2m), times an inverse < m
            re = np.mod((U + V) * np.int64(c.inv2[ell]), m)
            im = np.mod((U - V + m) * np.int64(c.inv2iota[ell]), m)
            parts = [re, im]
        elif cplx:
            re = us[0] - us[1]
            re = np.where(re < 0, re + m, re)
            im = us[2] - us[0] - us[1] + 2 * m
            im = np.where(im >= m, im - m, im)
            im = np.where(im >= m, im - m, im)
            parts = [re, im]
        else:
            parts = [us[0]]
        W.append([_symmetric(u, m) for u in parts])
    return W


def carry(acc):
    """Normalize int64 accumulators: words 0..nw-2 in [0, 2**32), the top one signed."""
    acc = list(acc)
    for i in range(len(acc) - 1):
        c = acc[i] >> np.int64(32)  # arithmetic shift
        acc[i] = acc[i] & np.int64(0xFFFFFFFF)
        acc[i + 1] = acc[i + 1] + c
    return acc


def signed_magnitude(acc):
    """(neg, words): sign and magnitude words (uint64 < 2**32) of the accumulated integer."""
    acc = carry(acc)
    neg = acc[-1] < 0
    acc = carry([np.where(neg, -a, a) for a in acc])
    return neg, [a.astype(U64) for a in acc]


def _bitlen32(v):
    v = _u(v)
    out = np.zeros(v.shape, dtype=np.int64)
    for b in range(32):
        out = np.where((v >> U64(b)) != 0, b + 1, out)
    return out


def round_words(v, off, fmt):
    """Correctly rounded (RNE, gradual underflow, overflow to inf) V * 2**off, V given by the
    magnitude words ``v``; returns (bits, keep, s, inf): the float's bits (unsigned), the kept
    significand, the shift with |rounded| = keep * 2**s * 2**off, and the overflow flag."""
    mant, emin, emax, _ = _FMT[fmt]
    off = np.asarray(off, dtype=np.int64)
    nw = len(v)
    bl = np.zeros(v[0].shape, dtype=np.int64)
    for i in range(nw):
        bl = np.where(v[i] != 0, 32 * i + _bitlen32(v[i]), bl)
    sh = bl - 64
    T = np.zeros(v[0].shape, dtype=U64)
    sticky = np.zeros(v[0].shape, dtype=bool)
    for i in range(nw):
        d = 32 * i - sh
        up = _shl(v[i], np.clip(d, 0, 63))
        dn = _shr(v[i], np.clip(-d, 0, 31))
        lost = v[i] & (_shl(1, np.clip(-d, 0, 31)) - U64(1))
        T = T | np.where(d >= 64, U64(0), np.where(d >= 0, up, np.where(d > -32, dn, U64(0))))
        sticky = sticky | np.where(d >= 0, False, np.where(d > -32, lost != 0, v[i] != 0))
    e_res = bl - 1 + off
    q = np.clip(e_res - emin + 1, 0, mant)
    qq = np.maximum(q, 1)
    drop = 64 - qq
    keep = _shr(T, drop)
    rem = T & (_shl(1, drop) - U64(1))
    half = _shl(1, drop - 1)
    up = (rem > half) | ((rem == half) & (sticky | ((keep & U64(1)) != 0)))
    keep_n = keep + up.astype(U64)
    # q == 0: below the smallest subnormal; rounds up to it only from above half of it
    keep_u = ((e_res == emin - 1) & ((U64(1 << 63) != T) | sticky)).astype(U64)
    keep = np.where(q > 0, keep_n, keep_u)
    E = np.where(q > 0, e_res - q + 1, emin)
    zero = bl == 0
    keep = np.where(zero, U64(0), keep)
    E = np.where(zero, emin, E)
    inf = (e_res > emax) & ~zero
    Eb = np.clip(E - emin, 0, 4095).astype(U64)
    bits = (Eb << U64(mant - 1)) + keep
    inf_bits = U64(0x7FF0000000000000) if fmt == "float64" else U64(0x7F800000)
    bits = np.where(inf, inf_bits, bits)
    return bits, keep, E - off, inf


def _word_of_shifted(x, s, i):
    """Word i (bits [32i, 32i+32)) of x * 2**s for uint64 x, s >= 0."""
    d = 32 * i - s
    dn = _shr(x, np.clip(d, 0, 63)) & U64(0xFFFFFFFF)
    up = _shl(x, np.clip(-d, 0, 31)) & U64(0xFFFFFFFF)
    return np.where(d >= 64, U64(0), np.where(d >= 0, dn, np.where(d > -32, up, U64(0))))


def _to_float(bits, neg, fmt):
    if fmt == "float64":
        return (bits | (neg.astype(U64) << U64(63))).view(np.float64)
    b32 = (bits | (neg.astype(U64) << U64(31))).astype(np.uint32)
    return b32.view(np.float32)


def crt_entry(W, tables, off, out_dtype):
    """One part: exact X = sum W_l w_l - qP, rounded (``out_dtype``) or (hi, lo) for "dd"."""
    nw = tables["nw"]
    shape = W[0].shape
    acc = [np.zeros(shape, dtype=np.int64) for _ in range(nw)]
    qf = np.zeros(shape, dtype=np.float64)
    for ell, w in enumerate(W):
        for i in range(nw):
            acc[i] = acc[i] + w * np.int64(tables["wdig"][ell][i])
        qf = qf + w.astype(np.float64) * tables["ratios"][ell]  # no FMA: __dmul_rn, __dadd_rn
    q = np.rint(qf).astype(np.int64)
    for i in range(nw):
        acc[i] = acc[i] - q * np.int64(tables["pdig"][i])
    neg, v = signed_magnitude(acc)
    return finish(neg, v, off, out_dtype)


def finish(neg, v, off, out_dtype):
    """The float (or "dd" pair) of the signed integer (neg, magnitude words v) times 2**off."""
    nw = len(v)
    fmt = "float32" if out_dtype == "float32" else "float64"
    bits, keep, s, inf = round_words(v, off, fmt)
    hi = _to_float(bits, neg, fmt)
    if out_dtype != "dd":
        return hi
    # lo = RN(exact - hi): the integer remainder R = V - keep * 2**s, rounded at the same offset
    # and signed like rounding.unscale_dd: +0 where hi is exact by construction (s < 0) or inf;
    # otherwise the sign of Y times that of R, so a zero remainder of a negative Y gives -0.
    exact = (s < 0) | inf
    ss = np.maximum(s, 0)
    racc = [v[i].astype(np.int64) - _word_of_shifted(keep, ss, i).astype(np.int64)
            for i in range(nw)]  # fmt: skip
    rneg, r = signed_magnitude(racc)
    rbits, _, _, _ = round_words(r, off, "float64")
    lo = _to_float(rbits, neg ^ rneg, "float64")
    lo = np.where(exact, 0.0, lo)
    return hi, lo


def crt(C, mu, nu, n, cplx, out_dtype, gaussian=False):
    """Parts (..., m, n) from INT32 products C (nkb, P, n_mod, B, m, n_p); mu (B, m), nu (B, n);
    ``gaussian`` (complex): the Gaussian moduli's products U, V (P = 2) and their tables."""
    gauss = cplx and gaussian
    c = crt_constants(n, gauss)
    tables = crt_tables(n, gauss)
    assert len(tables["wdig"][0]) == MAX_WORDS
    ncols = nu.shape[-1]
    W = reduced_products(C[..., :ncols], c.moduli, cplx, gauss)
    off = -(mu[:, :, None].astype(np.int64) + nu[:, None, :].astype(np.int64))
    return tuple(
        crt_entry([W[ell][p] for ell in range(n)], tables, off, out_dtype)
        for p in range(2 if cplx else 1)
    )


# ----------------------------------------------------------------------------------------------
# the refit's deferred pick (refit_pick.cu: refit_choose)
# ----------------------------------------------------------------------------------------------


def refit_choose(counts, zero_idx, cand_idx, cand_q, spread, entries):
    """``refit_choose``'s rule, stated on the buffers' valid prefixes with ``refit.chosen``:
    ``counts`` (2W,) int64 (per measure the zeros' and the candidates' counts, clamped to
    [0, cap]), ``zero_idx``/``cand_idx`` (W, cap) int64, ``cand_q`` (W, cap) float64, ``spread``
    the factor of ``refit.spread_threshold``, ``entries`` REFIT_ENTRIES. Each measure's
    candidates are trimmed to the spread of their smallest ratio (NaN: none), then ``chosen``
    picks; W = 1 keeps its pick as it is, W > 1 takes each index once. Returns ``(idx, valid)``,
    (2 W REFIT_ENTRIES,): the indices ascending padded with int64 max, and idx < int64 max."""
    import array_api_compat.numpy as xnp

    from emulinalg.algorithm import refit

    W, cap = zero_idx.shape
    assert spread == refit.spread_threshold(1.0) and entries == refit.REFIT_ENTRIES
    big = np.iinfo(np.int64).max
    picks = []
    for w in range(W):
        nz, nc = (min(max(int(c), 0), cap) for c in counts[2 * w : 2 * w + 2])
        q, idx = cand_q[w, :nc], cand_idx[w, :nc]
        low = q.min() if nc else np.inf
        with np.errstate(over="ignore"):  # a huge ratio's spread: inf
            keep = (q <= refit.spread_threshold(low)) & (q < np.inf)
        order = np.argsort(idx[keep], kind="stable")  # ``chosen`` wants them in flat order
        got = refit.chosen(xnp, np.sort(zero_idx[w, :nz]), idx[keep][order], q[keep][order])
        if got is not None:
            picks.append(got)
    both = np.concatenate(picks) if picks else np.zeros(0, dtype=np.int64)
    both = np.sort(both) if W == 1 else np.unique(both)
    both = both[both < big]
    out = np.full(2 * W * refit.REFIT_ENTRIES, big, dtype=np.int64)
    out[: both.size] = both
    return out, out < big


# ----------------------------------------------------------------------------------------------
# the whole hook
# ----------------------------------------------------------------------------------------------


def ozaki2_product(ar, ai, br, bi, moduli, mode, out_dtype, prescale, k_block=K_BLOCK,
                   gaussian=False):  # fmt: skip
    """The model of ``backends.cupy.ozaki2_product`` on numpy arrays (``gaussian``: complex
    operands modulo the Gaussian moduli, two planes and products per modulus)."""
    gauss = gaussian and ai is not None
    c = crt_constants(moduli, gauss)
    mu, nu = ozaki2_shifts(np, prescale, c.L, c.Q_down)
    batch = ar.shape[:-2]
    m, k = ar.shape[-2:]
    n = br.shape[-1]
    B = int(np.prod(batch, dtype=np.int64))
    kp, n_p = _ceil(k, KP_ALIGN), _ceil(n, NP_ALIGN)
    a3 = ar.reshape(B, m, k)
    b3 = np.swapaxes(br.reshape(B, k, n), -1, -2)  # B as the logical (B, n, k) operand
    ai3 = None if ai is None else ai.reshape(B, m, k)
    bi3 = None if bi is None else np.swapaxes(bi.reshape(B, k, n), -1, -2)
    mu2, nu2 = mu.reshape(B, m), nu.reshape(B, n)
    near = rounds_to_nearest(moduli, k, mode, gauss)
    iota = c.iota if gauss else None
    pa = residue_planes(a3, ai3, mu2, c.moduli, m, kp, near, iota=iota)
    pb = residue_planes(b3, bi3, nu2, c.moduli, n_p, kp, near, iota=iota)
    C = int8_gemms(pa, pb, k_block)
    parts = crt(C, mu2, nu2, moduli, ai is not None, out_dtype, gauss)
    shape = batch + (m, n)
    if out_dtype == "dd":
        return tuple((h.reshape(shape), l_.reshape(shape)) for h, l_ in parts)
    return tuple(p.reshape(shape) for p in parts)


# ----------------------------------------------------------------------------------------------
# crafted integers for the rounding paths (ties, sticky bits, subnormals, overflow)
# ----------------------------------------------------------------------------------------------

_TARGETS = (-1080, -1074, -1060, -1022, -160, -149, -126, 0, 100, 127, 128, 1023, 1024)


def crafted_integers(rng, count, max_bits):
    """(ys, offs): signed Python ints below 2**max_bits, many with exact ties at 53 or 24
    significant bits or only a far sticky bit, and exponent offsets that put y * 2**off near the
    subnormal, float32 and overflow boundaries."""
    ys, offs = [], []
    for _ in range(count):
        bl = int(rng.integers(1, max_bits))
        y = int(rng.integers(1, 2**62)) | 1 << 61
        y = y >> max(0, 62 - bl) if bl < 62 else y << (bl - 62)
        kind = rng.integers(0, 4)
        if kind == 1:  # exact tie: ...1 followed by zeros at the rounding position
            cut = max(0, y.bit_length() - int(rng.choice([54, 25])))
            y = (y >> cut << cut) | (1 << cut >> 1) if cut else y
        elif kind == 2:  # a tie broken only by the last bit
            y |= 1
        y = -y if rng.integers(0, 2) else y
        target = int(rng.choice(_TARGETS))
        offs.append(target - y.bit_length() + int(rng.integers(-2, 3)))
        ys.append(y)
    return ys, np.array(offs, dtype=np.int64)


def words_of(ys, nw):
    """(neg, magnitude words) of Python ints, as signed_magnitude returns them."""
    mag = [abs(y) for y in ys]
    v = [np.array([(x >> (32 * i)) & 0xFFFFFFFF for x in mag], dtype=np.uint64) for i in range(nw)]
    return np.array([y < 0 for y in ys]), v


def residue_products(ys, moduli):
    """INT32 "products" whose CRT reconstruction is y: the symmetric residues y mod m_l, shaped
    (1, 1, n_mod, 1, len(ys), 1) like one K-block of real products of a single column."""
    out = np.zeros((1, 1, len(moduli), 1, len(ys), 1), dtype=np.int32)
    for ell, m in enumerate(moduli):
        r = [y % m for y in ys]
        out[0, 0, ell, 0, :, 0] = [v - m if v > (m - 1) // 2 else v for v in r]
    return out


# ----------------------------------------------------------------------------------------------
# statistics (ozaki2_stats.cu): accurate-mode prescale and the certificate
# ----------------------------------------------------------------------------------------------

INT_MIN = -(2**31)
ALL_ONES = (1 << 64) - 1
STAT_CHUNK = 512  # as emulinalg/backends/cupy/statistics.py's _STAT_CHUNK
BF16_ALIGN = 8


def exponent_of(x):
    """floor(log2 |x|) from the bits (INT_MIN for 0), as the kernel's exponent_of."""
    b = np.ascontiguousarray(x, dtype=np.float64).view(U64) & U64(0x7FFFFFFFFFFFFFFF)
    eb = (b >> U64(52)).astype(np.int64)
    bitlen = np.frexp(b.astype(np.float64))[1].astype(np.int64)  # exact: b < 2**52 there
    e = np.where(eb != 0, eb - 1023, bitlen - 1075)
    return np.where(b == 0, INT_MIN, e)


def pow2(p):
    """2**p (p in [-1074, 1023]) built from its bits."""
    p = np.asarray(p, dtype=np.int64)
    normal = _shl(np.clip(p + 1023, 1, 2046), 52)
    sub = _shl(1, np.clip(p + 1074, 0, 63))
    return np.where(p >= -1022, normal, sub).view(np.float64)


def scale2(x, p):
    """RN(x * 2**p) as the kernel: one multiplication, two (the first exact) above 2**1023."""
    p = np.asarray(p, dtype=np.int64)
    big = p > 1023
    with np.errstate(over="ignore"):  # the branch not taken may overflow
        one = x * pow2(np.where(big, 0, p))
        two = (x * pow2(np.where(big, p - 64, 0))) * pow2(64)
    return np.where(big, two, one)


def floor_small(v):
    return np.trunc(v).astype(np.int64)


def bound_upper(F, ra, nza, cb, nzb, c):
    """The kernel's bound_upper in int64: F (B, m, n), line terms (B, m) and (B, n)."""
    ra, nza = ra[:, :, None].astype(np.int64), nza[:, :, None].astype(np.int64)
    cb, nzb = cb[:, None, :].astype(np.int64), nzb[:, None, :].astype(np.int64)
    return (F + np.minimum(c * ra, BOUND_MAX * nzb) + np.minimum(c * cb, BOUND_MAX * nza)
            + c * np.minimum(nza, nzb))  # fmt: skip


def bf16_rz(v):
    """bfloat16 bits of v >= 0 truncated toward zero (float32 rz, then the top 16 bits)."""
    f = np.asarray(v, dtype=np.float64).astype(np.float32)
    f = np.where(f.astype(np.float64) > v, np.nextafter(f, np.float32(0)), f)
    return (f.view(np.uint32) >> 16).astype(np.uint16)


def line_max_exponent(re, im):
    """int32 (B, R) of the logical (B, R, C) operand: max exponent per line, INT_MIN if zero."""
    e = exponent_of(re)
    if im is not None:
        e = np.maximum(e, exponent_of(im))
    return e.max(axis=-1).astype(np.int32)


def bound_operand(re, im, emax, rows_pad, cols_pad):
    """(s, planes, sums, nz, mixed, partial): shifts 5 - e - cplx (int64 (B, R)), the int8 bound
    operand floor(RN(|re| 2**(s+1))) (+ the same of |im|) zero-padded to (B, rows_pad,
    cols_pad), per line its sum, the count of nonzero parts and of entries with both parts
    nonzero (int64), and the norms' partials (2, B, ceil(cols_pad / 128), R): per 128 columns
    of x = (|re| + |im|) 2**-e, 32 sequential sums of 4 columns added in order, and the sum of
    x**2 in column order."""
    B, R, C = re.shape
    cplx = im is not None
    e = np.where(emax == INT_MIN, 0, emax).astype(np.int64)
    s = 5 - e - int(cplx)
    v = floor_small(scale2(np.abs(re), s[:, :, None] + 1))
    nz = (re != 0).astype(np.int64)
    mx = np.zeros(re.shape, dtype=np.int64) if im is None else ((re != 0) & (im != 0))
    p = (s - 5 + int(cplx))[:, :, None]
    x = scale2(np.abs(re), p)
    if cplx:
        v = v + floor_small(scale2(np.abs(im), s[:, :, None] + 1))
        nz = nz + (im != 0)
        x = x + scale2(np.abs(im), p)
    out = np.zeros((B, rows_pad, cols_pad), dtype=np.int8)
    out[:, :R, :C] = v
    chunks = -(-cols_pad // 128)
    partial = np.zeros((2, B, chunks, R))
    xp_ = np.zeros((B, R, chunks * 128))
    xp_[:, :, :C] = x  # padded columns add +0
    for ch in range(chunks):
        acc, acc2 = np.zeros((B, R)), np.zeros((B, R))
        for g in range(32):  # groups of 4 columns, each in order, then the 32 in order
            c0 = ch * 128 + 4 * g
            part = ((xp_[:, :, c0] + xp_[:, :, c0 + 1]) + xp_[:, :, c0 + 2]) + xp_[:, :, c0 + 3]
            acc = acc + part
            for c in range(c0, c0 + 4):
                acc2 = acc2 + xp_[:, :, c] * xp_[:, :, c]
        partial[0, :, ch], partial[1, :, ch] = acc, acc2
    return s, out, v.sum(axis=-1), nz.sum(axis=-1), mx.sum(axis=-1), partial


def cert_operand(re, im, shift, rows_pad, cols_pad, k_major, chunk=STAT_CHUNK):
    """(bf16 bits, partial sums) of cert_operand: the truncated magnitudes of the operand
    normalized by 2**-e (e = 5 - cplx - shift), (B, rows_pad, cols_pad) or its transpose when
    ``k_major``; the l1 sums per chunk of columns, each in column order (B, chunks, R)."""
    B, R, C = re.shape
    cplx = im is not None
    p = (np.asarray(shift, dtype=np.int64) - 5 + int(cplx))[:, :, None]
    mag = np.abs(re) if im is None else np.maximum(np.abs(re), np.abs(im))
    out = np.zeros((B, rows_pad, cols_pad), dtype=np.uint16)
    out[:, :R, :C] = bf16_rz(scale2(mag, p))
    if k_major:
        out = np.ascontiguousarray(np.swapaxes(out, -1, -2))
    x = scale2(np.abs(re), p)
    if cplx:
        x = x + scale2(np.abs(im), p)
    chunks = -(-cols_pad // chunk)
    partial = np.zeros((B, chunks, R))
    for ch in range(chunks):
        acc = np.zeros((B, R))
        for c in range(ch * chunk, min(C, (ch + 1) * chunk)):  # padded columns add +0
            acc = acc + x[:, :, c]
        partial[:, ch] = acc
    return out, partial


def cert_line_terms(partial, l1fac, e, scale, l2=False):
    """(norm, alpha) per line from bound_operand's partials (2, B, chunks, R): the chunks' l1
    sums (``l2``: their sums of squares) added in order, times l1fac (``l2``: its root, times
    1 + 2**-52); scale sqrt(e)."""
    part = partial[1 if l2 else 0]
    s = np.zeros(part[:, 0].shape)
    for ch in range(part.shape[1]):
        s = s + part[:, ch]
    s = s * l1fac
    norm = np.sqrt(s) * (1.0 + 2.0**-52) if l2 else s
    return norm, scale * np.sqrt(np.asarray(e, dtype=np.float64))


def cert_entries(F, c32, n, fexp, na, alpha, nb, beta, factor, abs_term, cR, c4, thr, base):
    """``fexp``: an int, or (fexp, fexp_mixed, mixa (B, m), mixb (B, n)) as the kernel takes them
    (2**-fexp_mixed where mixa or mixb is nonzero)."""
    return _cert_entries(F, c32, n, fexp, na, alpha, nb, beta, factor, abs_term, cR, c4, thr, base)


def _fscale(fexp, shape):
    if isinstance(fexp, int):
        return 2.0**-fexp
    lo, hi, ma, mb = fexp
    mixed = (np.asarray(ma)[:, :, None] > 0) | (np.asarray(mb)[:, None, :] > 0)
    return np.where(mixed, 2.0**-hi, 2.0**-lo)


def _cert_entries(F, c32, n, fexp, na, alpha, nb, beta, factor, abs_term, cR, c4, thr, base):
    """(need (B, m, n) uint8, hist): certificate.ozaki2_needed's float64 operations, as cert_entries
    does them, on lam = F 2**-fexp (F (B, m, n_p) the bound GEMM) or, with the bf16 GEMM's FP32
    sums c32 (B, m, pitch), the larger of that and their bound; hist as the kernel leaves it
    (the largest certified index at [nth + 1], its entries at that index, beyond at [nth])."""
    Fn = np.asarray(F)[..., :n].astype(np.float64)
    lam = Fn * _fscale(fexp, Fn.shape)
    if c32 is not None:
        x = np.asarray(c32)[..., :n].astype(np.float64)
        g = x * factor - abs_term
        g = np.where(g > 0.0, g, 0.0)
        lam = np.where(g > lam, g, lam)
    R = cR * lam
    a_i, na_i = alpha[:, :, None], na[:, :, None]
    b_j, nb_j = beta[:, None, :], nb[:, None, :]
    G2 = 2.0 * (a_i * nb_j + b_j * na_i)
    Q = (c4 * a_i) * b_j
    thr = np.asarray(thr, dtype=np.float64)
    nth = thr.size
    lo = np.zeros(R.shape, dtype=np.int64)
    hi = np.full(R.shape, nth, dtype=np.int64)
    with np.errstate(over="ignore"):  # an unreachable level's threshold: inf fails the test
        for _ in range(nth.bit_length()):
            mid = (lo + hi) >> 1
            t = thr[np.minimum(mid, nth - 1)]
            ok = (mid < nth) & (t * (G2 + t * Q) <= R)
            hi = np.where(ok, mid, hi)
            lo = np.where(ok, lo, mid + 1)
    hist = np.zeros(nth + 2, dtype=np.uint64)
    certified = hi[hi < nth]
    hist[nth] = (hi == nth).sum()
    if certified.size:
        top = int(certified.max())
        hist[nth + 1] = top
        hist[top] = (certified == top).sum()
    return (hi + base).astype(np.uint8), hist


def suspect_dot(A, B, i, j, ea_i, eb_j):
    """refine_suspects' sums for one suspect, (S, S2): its terms and their squares; A = [re(,
    im)] (m, k), B = [re(, im)] (k, n); lane l sums terms l, l + 32, ... in order, then the
    lanes are added by the shuffle tree."""
    x = np.abs(A[0][i])
    y = np.abs(B[0][:, j])
    if len(A) > 1:
        x = np.maximum(x, np.abs(A[1][i]))
        y = np.maximum(y, np.abs(B[1][:, j]))
    terms = scale2(x, -ea_i) * scale2(y, -eb_j)
    out = []
    for v in (terms, terms * terms):
        lanes = np.zeros(32)
        for h in range(v.size):
            lanes[h % 32] = lanes[h % 32] + v[h]
        for o in (16, 8, 4, 2, 1):
            lanes = lanes + np.concatenate([lanes[o:], lanes[32 - o :]])  # shfl_down: own value
        out.append(float(lanes[0]))
    return tuple(out)


def half_log_shift(q_down, v):
    """cert_exact_factors' scaling.half_log_shift: the exponents put the largest t with
    v 4**t <= q_down at floor((eq - ev) / 2) or one below; one exact comparison decides."""
    v = np.where(np.asarray(v, dtype=np.float64) > 0, v, 1.0)
    t = (exponent_of(q_down) - exponent_of(v)) // 2
    return np.where(scale2(v, 2 * t) > q_down, t - 1, t)


def exact_factors(e, q_down, f0):
    """cert_exact_factors: f0 2**-half_log_shift(q_down, e) per line (0 where e is 0)."""
    e = np.asarray(e, dtype=np.float64)
    return np.where(e > 0, scale2(np.full(e.shape, f0), -half_log_shift(q_down, e)), 0.0)


def exact_table(cc):
    """cert_exact_factors' table as ``emulinalg.algorithm.certificate_plan.count_table`` makes
    it: per count Q_down, and f0, the value of certificate.exact_line_factors for a line bound
    of Q_down (shift 0)."""
    import array_api_compat.numpy as xnp

    from emulinalg.algorithm import certificate

    counts = range(MIN_MODULI, MIN_MODULI + len(cc.thresholds))
    q_down = [crt_constants(c).Q_down for c in counts]
    f0 = [float(certificate.exact_line_factors(xnp, cc, c, np.array([q]), cc.scale)[0])
          for c, q in zip(counts, q_down)]  # fmt: skip
    return q_down, f0


def cw_step(nth, s):
    """ozaki2_stats.cu's cw_step: the first of refinement step s's words."""
    return nth + 10 + 9 * s


def cert_exact_factors(w, nth, mode, last, refine, steps, e, f, q_down, f0):
    """cert_exact_factors on the words ``w`` (uint64, updated): the factors (p, q) where it
    computes them, else None."""
    W, top = nth + 2, int(w[nth + 1])
    step1 = top > 0 and bool(last or w[nth] == 0)
    if mode == 0:
        w[W + 4] = 0 if step1 else 1
        c = top - 1 if step1 else None
    else:
        c = top - int(step1 and w[W + 1] == w[nth])
        go = bool(refine) and steps > 0 and c > 0 and bool(last or w[nth] == 0)
        w[W + 5] = c
        if steps > 0:
            w[cw_step(nth, 0) + 3] = 0 if go else 1
        c = c - 1 if go else None
    if c is None:
        return None
    return exact_factors(e, q_down[c], f0[c]), exact_factors(f, q_down[c], f0[c])


def cert_step(w, nth, s, limit, re):
    """cert_step: (run, suspects, work, sample step) of refinement step s."""
    P = cw_step(nth, s)
    run = int(w[P + 3]) == 0
    sus = int(w[P + 1]) - int(w[nth])  # meaningful where run
    work = run and 1 <= sus <= limit and re >= 1
    return run, sus, work, (-(-sus // re) if work else 1)


def suspect_flat(need0, need1, base, nth):
    """The suspects' flat indices, in flat order."""
    need0, need1 = np.asarray(need0).reshape(-1), np.asarray(need1).reshape(-1)
    return np.flatnonzero((need1 == 1) & (need0 != base + nth))


def suspect_ranks(need0, need1, w, nth, s, base, limit, re, blocks):
    """suspect_ranks on a grid of ``blocks``: (the suspects per 128-entry segment, the blocks'
    exclusive offsets in flat order: block b takes the 1024-entry groups [G b / blocks,
    G (b + 1) / blocks)), uint32, or None where the step does not refine; the blocks' counter
    in w."""
    if not cert_step(w, nth, s, limit, re)[2]:
        return None
    total = np.asarray(need0).size
    flat = suspect_flat(need0, need1, base, nth)
    seg = np.bincount(flat // 128, minlength=-(-total // 128)).astype(np.uint32)
    groups = -(-total // 1024)
    ends = [groups * (b + 1) // blocks * 1024 for b in range(blocks)]
    counts = np.diff(np.searchsorted(flat, [0] + ends))
    w[cw_step(nth, s) + 7] += np.uint64(blocks)
    return seg, (np.cumsum(counts) - counts).astype(np.uint32)


def refine_suspects(A, Bm, shift_a, shift_b, n, need0, need1, w, nth, s, base, limit, re,
                    native, native_factor, tiny, l1fac, k, cplx):  # fmt: skip
    """refine_suspects: (S', scale) per sample slot (every step-th suspect in flat order; scale
    only for the native form), the sample's largest kappa into w; None where the step does not
    refine. A = [re(, im)] (m, k), Bm = [re(, im)] (k, n), the operands as they are."""
    _, _, work, step = cert_step(w, nth, s, limit, re)
    if not work:
        return None
    sample = suspect_flat(need0, need1, base, nth)[::step]
    S_out, scale_out = np.zeros(sample.size), np.zeros(sample.size)
    kmax = 0.0
    for slot, at in enumerate(sample):
        i, j = int(at) // n, int(at) % n
        S, S2 = suspect_dot(A, Bm, i, j, 5 - int(cplx) - int(shift_a[i]),
                            5 - int(cplx) - int(shift_b[j]))  # fmt: skip
        S_out[slot] = max(S * native_factor - tiny, 0.0)
        if native:
            S2 = max(S2 * native_factor - tiny, 0.0)
            scale_out[slot] = float(np.sqrt(S2 * float(k))) * (1.0 - 2.0**-52)
            upper = S_out[slot] * l1fac + tiny
            kappa = (scale_out[slot] / upper if upper > 0 else 1.0) * (1.0 - 2.0**-50)
            kmax = max(kmax, kappa)
    if native:
        P = cw_step(nth, s)
        w[P + 4] = max(int(w[P + 4]), int(np.float64(kmax).view(U64)))
    return S_out, scale_out


def refine_test(lam, na, p, nb, q, cR, c4, need0, need1, n, w, nth, s, steps, base, limit, re,
                native, theta_cap, sums, patch_cap, next_factors, blocks):  # fmt: skip
    """refine_test on the words ``w`` (updated: the failures, the patch's indices, the
    decision); ``lam(i, j)`` the entry's lower bound as cert_entries makes it, ``sums`` the
    sample's (S', scale) from refine_suspects, ``next_factors(c)`` the factors of count index c
    (p, q then take them). Returns the factors the last block writes, or None."""
    run, sus, work, step = cert_step(w, nth, s, limit, re)
    W, P = nth + 2, cw_step(nth, s)
    more = s + 1 < steps
    if not run:
        if more:
            w[cw_step(nth, s + 1) + 3] = 1
        return None
    patch = cw_step(nth, steps)
    if work:
        theta = 1.0
        if native:
            kmax = float(np.uint64(w[P + 4]).view(np.float64))
            theta = min(max(kmax, 1.0), theta_cap)
        for r, at in enumerate(suspect_flat(need0, need1, base, nth)):
            i, j = int(at) // n, int(at) % n
            x = lam(i, j)
            sampled = r % step == 0
            S = sums[0][r // step] if sampled else 0.0
            if native:
                x = x * theta
                if sampled:
                    x = max(x, max(S, sums[1][r // step]))
            elif sampled:
                x = max(x, S)
            G2 = 2.0 * (p[i] * nb[j] + q[j] * na[i])
            Q = (c4 * p[i]) * q[j]
            if not cR * x >= 1.0 * (G2 + 1.0 * Q):
                pos = int(w[P + 5])
                w[P + 5] = pos + 1
                if pos < patch_cap:
                    w[patch + pos] = at
            w[P + 6] += np.uint64(1)
    w[P + 8] += np.uint64(blocks)
    fails = int(w[P + 5])
    nxt = (sus == 0 and limit >= 0) or (work and fails == 0)
    patched = work and 0 < fails <= patch_cap
    c = int(w[W + 5]) - int(nxt or patched)
    go = nxt and more and c > 0
    w[W + 5] = c
    if patched:
        w[W + 6], w[W + 7] = 1, fails
    if more:
        w[cw_step(nth, s + 1) + 3] = 0 if go else 1
    return next_factors(c - 1) if go else None


def _logical(ar, ai, br, bi):
    """A as (B, m, k) and B as its transposed lines (B, n, k), real and imaginary parts."""
    m, k = ar.shape[-2:]
    n = br.shape[-1]
    B = int(np.prod(ar.shape[:-2], dtype=np.int64))
    a = [None if x is None else x.reshape(B, m, k) for x in (ar, ai)]
    shape = ar.shape[:-2] + (k, n)
    b = [None if x is None else np.swapaxes(np.broadcast_to(x, shape).reshape(B, k, n), -1, -2)
         for x in (br, bi)]  # fmt: skip
    return B, m, k, n, a, b


class Bound:
    """The model's ``Prescale.lower``: F (B, m, n_p), the l1 partials of A and B and their
    mixed_lines counts."""

    def __init__(self, F, pa, pb, ma, mb):
        self.F, self.pa, self.pb, self.ma, self.mb = F, pa, pb, ma, mb


def ozaki2_prescale(ar, ai, br, bi, k_block=K_BLOCK):
    """The model of ``backends.cupy.ozaki2_prescale(..., "accurate")`` on numpy arrays."""
    from emulinalg.algorithm.scaling import Prescale

    _, m, k, n, a, b = _logical(ar, ai, br, bi)
    kp, n_p = _ceil(k, KP_ALIGN), _ceil(n, NP_ALIGN)
    s, pa, ra, nza, ma, la = bound_operand(*a, line_max_exponent(*a), m, kp)
    t, pb, cb, nzb, mb, lb = bound_operand(*b, line_max_exponent(*b), n_p, kp)
    C = int8_gemms(pa[None, None], pb[None, None], k_block).astype(np.int64).sum(axis=0)
    F = C[0, 0]  # (B, m, n_p)
    U = bound_upper(F[..., :n], ra, nza, cb, nzb, 2 if ai is not None else 1)
    batch = ar.shape[:-2]
    e = U.max(axis=-1).astype(np.float64) * 0.25
    f = U.max(axis=-2).astype(np.float64) * 0.25
    mixed = None if ai is None else (ma.reshape(batch + (m,)), mb.reshape(batch + (n,)))
    return Prescale(s.reshape(batch + (m,)), t.reshape(batch + (n,)),
                    e.reshape(batch + (m,)), f.reshape(batch + (n,)),
                    lower=Bound(F, la, lb, ma, mb), mixed=mixed)  # fmt: skip


def bf16_gemm(a16, b16):
    """FP32 sums of bf16 operands (B, m, kp) @ (B, kp, n_p): exact float64 sums rounded to
    float32, as the CPU stand-in for cuBLAS computes them (the GPU's may differ in the last
    bits; both paths of a comparison use the same GEMM)."""
    fa = (a16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    fb = (b16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return np.matmul(fa, fb).astype(np.float32)


def magnitude_lower_matmul(xa, xb):
    """``backends.cupy.magnitude_lower_matmul`` with ``bf16_gemm`` (for the generic path)."""
    k = xa.shape[-1]
    m, n = xa.shape[-2], xb.shape[-1]
    batch = np.broadcast_shapes(xa.shape[:-2], xb.shape[:-2])
    B = int(np.prod(batch, dtype=np.int64))
    kp, n_p = _ceil(k, BF16_ALIGN), _ceil(n, BF16_ALIGN)
    a = np.zeros((B, m, kp))
    a[:, :, :k] = np.broadcast_to(xa, batch + (m, k)).reshape(B, m, k)
    b = np.zeros((B, kp, n_p))
    b[:, :k, :n] = np.broadcast_to(xb, batch + (k, n)).reshape(B, k, n)
    c = bf16_gemm(bf16_rz(a), bf16_rz(b))
    out = c[..., :n].astype(np.float64) * (1.0 - (k + 2) * 2.0**-22)
    return out.reshape(batch + (m, n))


def ozaki2_certificate(ar, ai, br, bi, prescale, target, chunk=STAT_CHUNK):
    """The model of ``backends.cupy.ozaki2_certificate``: ``(count, beyond, patch)``; the
    prescale must come from this model's ``ozaki2_prescale``. Every pass the kernels run, on the
    certificate's words as they leave them."""
    import math

    from emulinalg.algorithm import certificate, certificate_plan, refinement
    from emulinalg.algorithm.moduli import MAX_MODULI, MIN_MODULI

    B, m, k, n, a, b = _logical(ar, ai, br, bi)
    cplx = ai is not None
    cc = certificate.cert_constants(k, target, cplx)
    s, t, e, f = (np.asarray(x) for x in prescale)
    e, f = e.reshape(-1), f.reshape(-1)
    low = prescale.lower
    l2 = cc.norm == "l2"
    na, alpha = cert_line_terms(low.pa, cc.l1fac, e.reshape(B, m), cc.scale, l2)
    nb, beta = cert_line_terms(low.pb, cc.l1fac, f.reshape(B, n), cc.scale, l2)
    th = np.array(cc.thresholds)
    nth = th.size
    W = nth + 2
    q_down, f0 = exact_table(cc)
    fexp = (10, 11, low.ma, low.mb) if cplx else 12  # certificate.bound_lower
    consts = (cc.factor, cc.abs_term, cc.cR, cc.c4)
    steps = refinement.REFINE_STEPS if ar.ndim == 2 and br.ndim == 2 else 0
    # the kernels' step takes every suspect, up to certificate_plan.CUDA_SUSPECTS_MAX
    held = min(B * m * n, certificate_plan.CUDA_SUSPECTS_MAX)
    limit = max(refinement.SUSPECTS_MAX, held) if l2 else refinement.REFINE_ENTRIES
    re = refinement.REFINE_ENTRIES
    lines = steps > 0 and refinement.takes_lines(target)
    patch_cap = refinement.fails_limit(m, n, lines)  # the kernels' patch; kernel_patch decides
    theta_cap = min(refinement.THETA_MAX, math.sqrt(k))

    def entries(c32, last):
        w = np.zeros(cw_step(nth, steps) + patch_cap, dtype=np.uint64)
        need, w[: nth + 2] = cert_entries(low.F, c32, n, fexp, na, alpha, nb, beta, *consts,
                                          th, MIN_MODULI)  # fmt: skip
        fails = None

        def exact(pq, h):
            nonlocal fails
            if pq is not None:
                p, q = (x.reshape(B, -1) for x in pq)
                fails, w[h : h + 3] = cert_entries(low.F, c32, n, fexp, na, p, nb, q, *consts,
                                                   np.array([1.0]), 0)  # fmt: skip

        pq = cert_exact_factors(w, nth, 0, last, steps > 0, steps, e, f, q_down, f0)
        exact(pq, W)
        pq = cert_exact_factors(w, nth, 1, last, steps > 0, steps, e, f, q_down, f0)
        if steps:
            A = [x[0] for x in a if x is not None]
            Bm = [np.swapaxes(x[0], 0, 1) for x in b if x is not None]

            def lam(i, j):
                return entry_lower(low, c32, i, j, cplx, cc)

            def factors(c):
                return exact_factors(e, q_down[c], f0[c]), exact_factors(f, q_down[c], f0[c])

        for i in range(steps):
            P = cw_step(nth, i)
            if not w[P + 3]:
                exact(pq, P)
            sel = (MIN_MODULI, limit, re)
            suspect_ranks(need, fails, w, nth, i, *sel, 1)
            sums = refine_suspects(A, Bm, s.reshape(-1), t.reshape(-1), n, need, fails, w, nth,
                                   i, *sel, l2, cc.native_factor, cc.native_abs_term, cc.l1fac,
                                   k, cplx)  # fmt: skip
            p, q = (None, None) if pq is None else pq
            got = refine_test(lam, na[0], p, nb[0], q, cc.cR, cc.c4, need, fails, n, w, nth, i,
                              steps, *sel, l2, theta_cap, sums, patch_cap, factors, 1)  # fmt: skip
            pq = got if got is not None else pq
        return [int(v) for v in w], need

    pl = getattr(prescale, "parts_lower", None)  # the first pass's FP32 sums where given
    if pl is not None:
        pl = np.ascontiguousarray(np.broadcast_to(pl, ar.shape[:-2] + (m, n)).reshape(B, m, n))
    w, need = entries(pl, False)
    if w[nth]:
        kp, nb16 = _ceil(k, BF16_ALIGN), _ceil(n, BF16_ALIGN)
        a16, _ = cert_operand(*a, s.reshape(B, m), m, kp, False, chunk)
        b16, _ = cert_operand(*b, t.reshape(B, n), nb16, kp, True, chunk)
        c32 = bf16_gemm(a16, b16)
        if pl is not None:
            c32[..., :n] = np.maximum(c32[..., :n], pl)
        w, need = entries(c32, True)
    beyond = (need == MAX_MODULI + 1).reshape(ar.shape[:-2] + (m, n))
    if w[nth] == need.size:
        return None, beyond, None
    count = w[W + 5] + MIN_MODULI
    if not w[W + 6]:
        return count, beyond, None
    at = cw_step(nth, steps)
    failed = np.sort(np.array(w[at : at + w[W + 7]], dtype=np.int64))
    count, patch = refinement.kernel_patch(count, failed, m, n, lines)
    return count, beyond, patch


def entry_lower(low, c32, i, j, cplx, cc):
    """entry_lower of entry (i, j) of a 2-D product (B = 1): F 2**-fexp (2**-fexp_mixed where
    its row or column has an entry with both parts nonzero), and the larger of that and the
    bf16 GEMM's bound when c32 is given."""
    lam = float(low.F[0, i, j])
    if cplx:
        mixed = int(low.ma[0, i]) > 0 or int(low.mb[0, j]) > 0
        lam = lam * (2.0**-11 if mixed else 2.0**-10)
    else:
        lam = lam * 2.0**-12
    if c32 is not None:
        g = float(c32[0, i, j]) * cc.factor - cc.abs_term
        lam = max(lam, g if g > 0.0 else 0.0)
    return lam


def special_lines(ar, ai, br, bi):
    """The operands (modified in place) with, where there is room, a zero row of A and a zero
    column of B, a row of A holding a huge entry beside subnormal ones (bounds that underflow, a
    tie at 2**-1075), a row of A and a column of B of subnormals only (shifts above 1023) and a
    column of B near the overflow threshold."""
    m, k = ar.shape[-2:]
    n = br.shape[-1]
    if m < 4 or k < 6 or n < 4:
        return ar, ai, br, bi
    for x in (ar, ai):
        if x is not None:
            x[..., 1, :] = 0.0
            x[..., 0, :6] = [2.0**10, 2.0**-1060, 2.0**-1070, 3 * 2.0**-1076, 5e-324, -(2.0**9)]
            x[..., 3, :] = np.ldexp(x[..., 3, :], -1060)
    for x in (br, bi):
        if x is not None:
            x[..., :, 2] = 0.0
            x[..., :, 0] = np.ldexp(x[..., :, 0] / np.abs(x[..., :, 0]).max(), 1023) * 0.9
            x[..., :, 3] = np.ldexp(x[..., :, 3], -1070)
    return ar, ai, br, bi
