"""A CPU stand-in for the few cupy pieces ``emulinalg/backends/cupy/``'s Scheme II path uses,
so its host code (shapes, strides, pointers, chunks, cuBLAS arguments, output mapping) runs here.

Device memory is host memory: arrays are numpy arrays whose ``.data.ptr`` is their address.
``cublas.gemmStridedBatchedEx`` does the column-major strided-batched GEMM from raw pointers.
``RawModule`` kernels run in one of two ways (``make_module(native=...)``):

- model: the numpy model of ``gpu_kernel_model`` reading and writing through the pointers and
  element strides they are given, exactly as the CUDA kernels' parameters say;
- native: the CUDA sources themselves, compiled as host C++ with g++ (``cuda_host_shim.h``), a
  grid run block by block with one std::thread per CUDA thread.

Nothing here is fast; it only checks that the host code drives the kernels as specified and, in
native mode, that the CUDA code computes what the model does.
"""

from __future__ import annotations

import ctypes
import re
import sys
import types

import gpu_kernel_model as model
import numpy as np
from numpy.lib.stride_tricks import as_strided

from emulinalg.algorithm.moduli import GAUSSIAN_MODULI, MODULI, crt_constants


class _Ptr:
    def __init__(self, ptr):
        self.ptr = ptr


class ndarray(np.ndarray):
    """numpy array with cupy's ``.data.ptr`` (the address of element 0, as cupy's)."""

    @property
    def data(self):
        return _Ptr(self.ctypes.data)

    def get(self):
        """cupy's copy to the host: a plain numpy array."""
        return np.array(self)


def _wrap(x):
    return np.asarray(x).view(ndarray)


def _buffer(ptr, dtype, count):
    """``count`` elements of ``dtype`` at address ``ptr``, writable."""
    dtype = np.dtype(dtype)
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype)


def _view(arg, dtype, shape, strides):
    """The memory a kernel sees through pointer ``arg`` (an array: its element 0) with element
    ``strides`` (non-negative here)."""
    itemsize = np.dtype(dtype).itemsize
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides) if n > 0)
    buf = _buffer(arg.ctypes.data, dtype, extent)
    return as_strided(buf, shape, [s * itemsize for s in strides])


def _strided_any(arg, dtype, shape, strides):
    """Like _view for element strides of any sign (a negative-stride operand)."""
    x = np.asarray(arg)
    return as_strided(x.view(dtype), shape, [s * np.dtype(dtype).itemsize for s in strides])


def _is_pairs(re_, im, strides, size):
    """statistics._interleaved: the parts a complex array's, each entry aligned to its pair."""
    re_a, im_a = np.asarray(re_), np.asarray(im)
    return (im_a.ctypes.data == re_a.ctypes.data + size and re_a.ctypes.data % (2 * size) == 0
            and all(int(s) % 2 == 0 for s in strides))  # fmt: skip


def _assert_lines(re_, im, strides, rows_contig, cplx, narrow):
    """kernels._rows_contiguous: the lines' axis walked along memory where its stride is 1, or 2
    for interleaved complex parts, and the contraction axis' is not."""
    _, sr, sc = (int(s) for s in strides)
    unit = 2 if cplx and _is_pairs(re_, im, strides, 4 if narrow else 8) else 1
    assert int(rows_contig) == int(sr == unit and sc != unit)


def _assert_pairs(targs, re_, im, strides):
    """A kernel's pair mode: the parts interleaved as a complex array's, each entry aligned to
    its pair (statistics._interleaved), so that one load takes both."""
    assert targs[-1] == "true" and _is_pairs(re_, im, strides, 4 if targs[0] == "float" else 8)


# ----------------------------------------------------------------------------------------------
# kernels
# ----------------------------------------------------------------------------------------------


_THREADS_1D = 256  # emulinalg/backends/cupy/kernels.py's _THREADS


class _Kernel:
    def __init__(self, module, expr):
        self.module, self.expr = module, expr
        self.attributes = {"num_regs": 128, "shared_size_bytes": 13824}  # as ptxas (sm_90)

    def __call__(self, grid, block, args):
        if self.module.native:
            return _native_call(self.module, self.expr, grid, block, args)
        name, targs = re.fullmatch(r"(\w+)(?:<(.*)>)?", self.expr).groups()
        targs = [t.strip() for t in (targs or "").split(",") if t.strip()]
        getattr(self, "_" + name)(grid, block, targs, *args)

    def _ozaki2_residues(self, grid, block, targs, *args):
        assert block == (256,) and len(grid) == 3 and grid[1] <= 65535 and grid[2] <= 65535
        assert grid[0] * 32 >= int(args[9])  # 32 x 32 tiles over Cp
        self._residues(targs, *args, digits=False)

    def _ozaki2_residues_mma(self, grid, block, targs, *args):
        B, Rpad, Cp = int(args[5]), int(args[8]), int(args[9])
        tiles = B * -(-Rpad // 16) * -(-Cp // 64)  # 16 x 64 tiles, grid-strided
        assert block == (256,) and len(grid) == 1 and 1 <= grid[0] <= tiles
        self._residues(targs, *args, digits=True)

    def _residues(self, targs, re_, im, sb, sr, sc, B, R, C, Rpad, Cp, rows_contig, shift,
                  shift_sb, planes, digits):  # fmt: skip
        """Either residue kernel through the model (``digits``: the MMA kernel's arithmetic);
        targs [NMOD, CPLX, NEAR(, In(, GAUSS))]: GAUSS the Gaussian moduli's planes u, v."""
        nmod, cplx, near = int(targs[0]), targs[1] == "true", targs[2] == "true"
        assert targs[3:4] in ([], ["double"], ["float"]) and targs[4:] in ([], ["false"], ["true"])
        gauss = targs[4:] == ["true"]
        assert cplx or not gauss
        B, R, C, Rpad, Cp = int(B), int(R), int(C), int(Rpad), int(Cp)
        assert Cp % 16 == 0 and Rpad >= R and Cp >= C
        narrow = "float" in targs[3:4]
        _assert_lines(re_, im, (sb, sr, sc), rows_contig, cplx, narrow)
        dt = np.float32 if narrow else np.float64  # the kernels' In
        X = _strided_any(re_, dt, (B, R, C), (int(sb), int(sr), int(sc))).astype(np.float64)
        Xi = (_strided_any(im, dt, (B, R, C), (int(sb), int(sr), int(sc))).astype(np.float64)
              if cplx else None)  # fmt: skip
        S = _view(shift, np.int32, (B, R), (int(shift_sb), 1)).astype(np.int64)
        P = 1 if not cplx else 2 if gauss else 3
        out = _view(planes, np.int8, (P, nmod, B, Rpad, Cp),
                    (nmod * B * Rpad * Cp, B * Rpad * Cp, Rpad * Cp, Cp, 1))  # fmt: skip
        moduli = (GAUSSIAN_MODULI if gauss else MODULI)[:nmod]
        iota = crt_constants(nmod, True).iota if gauss else None
        out[...] = model.residue_planes(X, Xi, S, moduli, Rpad, Cp, near, digits, iota)

    def _ozaki2_crt(self, grid, block, targs, prod, kb_stride, nkb, plane, B, mc, n, n_p,
                    m_full, r0, mu, nu, kind, o0, o1, o2, o3):  # fmt: skip
        nmod, nw, cplx = int(targs[0]), int(targs[1]), targs[2] == "true"
        assert targs[3:] in ([], ["false"], ["true"])
        gauss = targs[3:] == ["true"]  # the Gaussian moduli's U, V per modulus
        assert cplx or not gauss
        B, mc, n, n_p, m_full, r0, nkb = (int(v) for v in (B, mc, n, n_p, m_full, r0, nkb))
        assert block == (32, 8) and grid[0] * 32 >= n and grid[1] <= 65535
        P = 1 if not cplx else 2 if gauss else 3
        C = _view(prod, np.int32, (nkb, P, nmod, B, mc, n_p),
                  (int(kb_stride), nmod * int(plane), int(plane), mc * n_p, n_p, 1))  # fmt: skip
        mu_flat = _view(mu, np.int32, (B * m_full,), (1,))
        mus = np.stack([mu_flat[b * m_full + r0 : b * m_full + r0 + mc] for b in range(B)])
        nus = _view(nu, np.int32, (B, n), (n, 1))
        g = self.module.globals
        tables = {
            "nw": nw,
            "wdig": g["emu_wdig"].reshape(20, 6).tolist(),
            "pdig": g["emu_pdig"].tolist(),
            "ratios": g["emu_ratio"].tolist(),
        }
        moduli = (GAUSSIAN_MODULI if gauss else MODULI)[:nmod]
        W = model.reduced_products(np.asarray(C)[..., :n], moduli, cplx, gauss)
        off = -(mus[:, :, None].astype(np.int64) + nus[:, None, :].astype(np.int64))
        kind = int(kind)
        out_dtype = {0: "float64", 1: "float32", 2: "dd"}[kind]
        dt = np.float32 if kind == 1 else np.float64
        ptrs = [(o0, o1), (o2, o3)]
        for p in range(2 if cplx else 1):
            res = model.crt_entry([W[ell][p] for ell in range(nmod)], tables, off, out_dtype)
            res = res if kind == 2 else (res,)
            for ptr, val in zip(ptrs[p], res):
                full = _view(ptr, dt, (B, m_full, n), (m_full * n, n, 1))
                full[:, r0 : r0 + mc] = val

    def _bf16_lower(self, grid, block, targs, x, sb, sr, sc, B, R, C, Rpad, Cp, out):
        B, R, C, Rpad, Cp = int(B), int(R), int(C), int(Rpad), int(Cp)
        X = np.zeros((B, Rpad, Cp))
        X[:, :R, :C] = _strided_any(x, np.float64, (B, R, C), (int(sb), int(sr), int(sc)))
        f = X.astype(np.float32)
        f = np.where(f.astype(np.float64) > X, np.nextafter(f, np.float32(0)), f)  # rz
        bits = (f.view(np.uint32) >> 16).astype(np.uint16)
        _view(out, np.uint16, (B, Rpad, Cp), (Rpad * Cp, Cp, 1))[...] = bits

    # balance.cu -------------------------------------------------------------------------------

    def _balance_sides(self, grid, block, targs, re, im, sb, sr, sc, B, R, C, Rpad, Cp, rows,
                       e, t16, d16, nonzero):  # fmt: skip
        B, R, C, Rpad, Cp, rows = (int(x) for x in (B, R, C, Rpad, Cp, rows))
        dt = np.float32 if targs[0] == "float" else np.float64
        st = (int(sb), int(sr), int(sc))
        x, y = (np.abs(_strided_any(v, dt, (B, R, C), st).astype(np.float64)) for v in (re, im))
        lines = _view(e, np.int64, (B * (R if rows else C),), (1,))
        ex = lines.reshape((B, R, 1) if rows else (B, 1, C))
        x, y = np.ldexp(x, -ex), np.ldexp(y, -ex)
        for v, out in ((x + y, t16), (x - y, d16)):
            f = v.astype(np.float32)
            rose = np.abs(f.astype(np.float64)) > np.abs(v)  # the cast toward zero
            f = np.where(rose, np.nextafter(f, np.float32(0)), f)
            full = np.zeros((B, Rpad, Cp), dtype=np.uint16)
            full[:, :R, :C] = (f.view(np.uint32) >> 16).astype(np.uint16)
            _view(out, np.uint16, (B, Rpad, Cp), (Rpad * Cp, Cp, 1))[...] = full
        nz = (x + y != 0).any(axis=2 if rows else 1).reshape(-1)
        flags = _view(nonzero, np.int32, (nz.size,), (1,))
        flags[nz] = 1

    def _balance_out(self, grid, block, targs, cT, cD, pitch, B, m, n, nz_rows, nz_cols, c,
                     factor, abs_term, pl, bad):  # fmt: skip
        B, m, n, pitch = int(B), int(m), int(n), int(pitch)
        sums = [_view(v, np.float32, (B, m, n), (m * pitch, pitch, 1)).astype(np.float64)
                for v in (cT, cD)]  # fmt: skip
        c = _view(c, np.float64, (12,), (1,))
        t_lo = np.maximum(sums[0] * float(factor) - float(abs_term), 0.0)
        s = sums[1] * float(factor)
        t_hi = (((t_lo + c[0]) / c[1] + c[2]) / c[3]) * c[4]
        d_hi = ((np.abs(s) + c[5] * t_hi) + c[6]) * c[7]
        part_lo = (t_lo * c[8] - d_hi * c[9]) * c[10]
        empty = (_view(nz_rows, np.int32, (B, m, 1), (m, 1, 1)) == 0) | (
            _view(nz_cols, np.int32, (B, 1, n), (n, 1, 1)) == 0
        )
        if not (empty | (part_lo >= t_hi * c[11])).all():
            _view(bad, np.uint32, (1,), (1,))[0] = 1
        out = _view(pl, np.float32, (B, m, pitch), (m * pitch, pitch, 1))
        out[...] = 0.0
        out[..., :n] = (t_lo * (0.5 - 2.0**-24)).astype(np.float32)

    # refit_pick.cu ----------------------------------------------------------------------------

    def _refit_ratios(self, targs, re_, im, a1, a2, b1, b2, exclude, total, B, m, n, rstep):
        """refit.cancel_ratios of every rstep-th row of the (B, m, n) parts with the kernels'
        line factors: the flat indices and ratios of the entries the walk visits."""
        from emulinalg.algorithm import refit

        B, m, n, rstep = int(B), int(m), int(n), int(rstep)
        assert int(total) == B * -(-m // rstep) * n  # the entries walked
        dt = np.float32 if targs[0] == "float" else np.float64
        parts = [_view(x, dt, (B, m, n), (m * n, n, 1))[:, ::rstep]
                 for x in ((re_, im) if targs[1] == "true" else (re_,))]  # fmt: skip
        fa = [_view(x, np.float64, (B, m, 1), (m, 1, 1))[:, ::rstep] for x in (a1, a2)]
        fb = [_view(x, np.float64, (B, 1, n), (n, n, 1)) for x in (b1, b2)]
        ex = None
        if isinstance(exclude, np.ndarray):
            ex = (_view(exclude, np.uint8, (B, m, n), (m * n, n, 1)) != 0)[:, ::rstep]
        qs = refit.cancel_ratios(np, parts, None, ex, factors=(fa[0], fa[1], fb[0], fb[1]))
        flat = np.arange(B * m * n).reshape(B, m, n)[:, ::rstep].reshape(-1)
        return flat, [q.reshape(-1) for q in qs]

    def _refit_low(self, grid, block, targs, *args):
        n = int(args[10])
        assert block == (32, 8) and grid[0] == -(-n // 128) and 1 <= grid[1] <= 65535
        out = _view(args[-1], np.uint64, (3,), (1,))
        for w, q in enumerate(self._refit_ratios(targs, *args[:-1])[1]):
            pos = q[q > 0]
            if pos.size:  # atomicMin of the bits
                out[w] = min(int(out[w]), int(np.float64(pos.min()).view(np.uint64)))

    def _refit_select(self, grid, block, targs, *args):
        n = int(args[10])
        assert block == (32, 8) and grid[0] == -(-n // 128) and 1 <= grid[1] <= 65535
        thr, low, cap, counts, zero_idx, cand_idx, cand_q, hist, skip = args[12:]
        if isinstance(skip, np.ndarray) and int(_view(skip, np.uint64, (1,), (1,))[0]):
            return  # the launch returns at once
        cap = int(cap)
        flat, qs = self._refit_ratios(targs, *args[:12])
        W = len(qs)
        th, lo = (_view(x, np.float64, (W,), (1,)) for x in (thr, low))
        cnt = _view(counts, np.uint64, (2 * W,), (1,))
        zi, ci = (_view(x, np.int64, (W, cap), (cap, 1)) for x in (zero_idx, cand_idx))
        cq = _view(cand_q, np.float64, (W, cap), (cap, 1))
        h = _view(hist, np.uint64, (W, 64), (64, 1))
        for w, q in enumerate(qs):
            zeros = np.nonzero(q == 0)[0][::-1]  # appended in any order: here the reverse
            cand = np.nonzero((q > 0) & (q <= th[w]))[0][::-1]
            for x, out, ratios, c in ((zeros, zi, None, 2 * w), (cand, ci, cq, 2 * w + 1)):
                s0 = int(cnt[c])
                take = x[: max(0, cap - s0)]
                out[w, s0 : s0 + take.size] = flat[take]
                if ratios is not None:
                    ratios[w, s0 : s0 + take.size] = q[take]
                cnt[c] += np.uint64(x.size)
            if cand.size:
                b = np.floor(np.log2(q[cand] / lo[w]) * 8).astype(np.int64).clip(0, 63)
                h[w] += np.bincount(b, minlength=64).astype(np.uint64)

    def _refit_choose(self, grid, block, targs, counts, zero_idx, cand_idx, cand_q, cap, spread,
                      idx, valid):  # fmt: skip
        W, cap = int(targs[0]), int(cap)
        assert tuple(grid) == (1,) and tuple(block) == (512,)
        got = model.refit_choose(
            _view(counts, np.int64, (2 * W,), (1,)),
            *(_view(x, np.int64, (W, cap), (cap, 1)) for x in (zero_idx, cand_idx)),
            _view(cand_q, np.float64, (W, cap), (cap, 1)), float(spread), int(targs[1]),
        )  # fmt: skip
        _view(idx, np.int64, got[0].shape, (1,))[...] = got[0]  # 2 W REFIT_ENTRIES slots
        _view(valid, np.bool_, got[1].shape, (1,))[...] = got[1]

    # ozaki2_stats.cu --------------------------------------------------------------------------

    def _operand(self, targs, re_, im, sb, sr, sc, B, R, C):
        """The (B, R, C) operand as float64 (targs: [In, CPLX], or [CPLX] for double)."""
        dt = np.float32 if targs[0] == "float" else np.float64
        cplx = targs[-1] == "true"
        st = (int(sb), int(sr), int(sc))
        X = _strided_any(re_, dt, (B, R, C), st).astype(np.float64)
        Xi = _strided_any(im, dt, (B, R, C), st).astype(np.float64) if cplx else None
        return X, Xi

    def _line_max_exponent(self, grid, block, targs, re_, im, sb, sr, sc, B, R, C, rows_contig,
                           chunk, pair, emax):  # fmt: skip
        B, R, C, chunk = int(B), int(R), int(C), int(chunk)
        assert block == (256,) and chunk % 32 == 0 and grid[0] == -(-C // chunk)
        assert grid[1] <= 65535 and grid[2] <= 65535
        _assert_lines(re_, im, (sb, sr, sc), rows_contig, targs[1] == "true", targs[0] == "float")
        if int(pair):  # the parts interleaved, each entry aligned to its pair
            _assert_pairs(targs, re_, im, (sb, sr, sc))
        X, Xi = self._operand(targs, re_, im, sb, sr, sc, B, R, C)
        out = _view(emax, np.int32, (B, R), (R, 1))
        out[...] = np.maximum(out, model.line_max_exponent(X, Xi))  # atomicMax

    def _bound_operand(self, grid, block, targs, re_, im, sb, sr, sc, B, R, C, Rpad, Cp,
                       rows_contig, vec, emax, shift, planes, sums, nz, mixed,
                       partial):  # fmt: skip
        B, R, C, Rpad, Cp = int(B), int(R), int(C), int(Rpad), int(Cp)
        assert block == (32,) and len(grid) == 1
        assert 1 <= grid[0] <= max(1, B * -(-Rpad // 32) * -(-Cp // 128))
        assert Cp % 16 == 0 and Rpad >= R and Cp >= C
        _assert_lines(re_, im, (sb, sr, sc), rows_contig, targs[1] == "true", targs[0] == "float")
        if int(vec):  # 16-byte chunks along the contiguous axis (2: of interleaved pairs)
            e = 16 // np.dtype(np.float32 if targs[0] == "float" else np.float64).itemsize
            inner, outer = (sr, sc) if int(rows_contig) else (sc, sr)
            assert int(inner) == int(vec) and int(outer) % e == 0 and int(sb) % e == 0
            if int(vec) == 2:
                _assert_pairs(targs, re_, im, (sb, sr, sc))
        X, Xi = self._operand(targs, re_, im, sb, sr, sc, B, R, C)
        em = _view(emax, np.int32, (B, R), (R, 1))
        s, p, vs, zs, mx, part = model.bound_operand(X, Xi, em, Rpad, Cp)
        _view(shift, np.int64, (B, R), (R, 1))[...] = s
        _view(planes, np.int8, (B, Rpad, Cp), (Rpad * Cp, Cp, 1))[...] = p
        _view(sums, np.uint64, (B, R), (R, 1))[...] += vs.astype(np.uint64)  # atomicAdd
        _view(nz, np.uint64, (B, R), (R, 1))[...] += zs.astype(np.uint64)
        _view(mixed, np.uint64, (B, R), (R, 1))[...] += mx.astype(np.uint64)
        nt = -(-Cp // 128)
        _view(partial, np.float64, (2, B, nt, R), (B * nt * R, nt * R, R, 1))[...] = part

    def _bound_max(self, grid, block, targs, F, n_p, B, m, n, rows_per_block, ra, nza, cb, nzb,
                   c, ua, ub):  # fmt: skip
        B, m, n, n_p, rpb = int(B), int(m), int(n), int(n_p), int(rows_per_block)
        assert block == (32, 8) and grid[0] * 128 >= n and grid[1] * rpb >= B * m
        assert grid[1] <= 65535
        dt = np.int32 if targs[0] == "int" else np.int64
        Fv = _view(F, dt, (B, m, n_p), (m * n_p, n_p, 1))[..., :n].astype(np.int64)
        lines = [_view(x, np.uint64, (B, r), (r, 1)) for x, r in ((ra, m), (nza, m), (cb, n),
                                                                  (nzb, n))]  # fmt: skip
        U = model.bound_upper(Fv, *lines, int(c))
        out_a = _view(ua, np.uint64, (B, m), (m, 1))
        out_b = _view(ub, np.uint64, (B, n), (n, 1))
        out_a[...] = np.maximum(out_a, U.max(axis=-1).astype(np.uint64))  # atomicMax
        out_b[...] = np.maximum(out_b, U.max(axis=-2).astype(np.uint64))

    def _cert_operand(self, grid, block, targs, re_, im, sb, sr, sc, B, R, C, Rpad, Cp,
                      rows_contig, k_major, chunk, shift, partial, out):  # fmt: skip
        B, R, C, Rpad, Cp, chunk = (int(v) for v in (B, R, C, Rpad, Cp, chunk))
        assert block == (256,) and chunk % 32 == 0 and grid[0] == -(-Cp // chunk)
        assert grid[1] <= 65535 and grid[2] <= 65535 and Rpad >= R and Cp >= C
        assert (Rpad if int(k_major) else Cp) % 4 == 0  # 4 entries per 8-byte store
        _assert_lines(re_, im, (sb, sr, sc), rows_contig, targs[0] == "true", False)
        X, Xi = self._operand(targs, re_, im, sb, sr, sc, B, R, C)
        sh = _view(shift, np.int64, (B, R), (R, 1))
        o, part = model.cert_operand(X, Xi, sh, Rpad, Cp, bool(int(k_major)), chunk)
        shape = (B, Cp, Rpad) if int(k_major) else (B, Rpad, Cp)
        _view(out, np.uint16, shape, (shape[1] * shape[2], shape[2], 1))[...] = o
        _view(partial, np.float64, (B, grid[0], R), (grid[0] * R, R, 1))[...] = part

    def _cert_line_terms(self, grid, block, targs, partial, nchunks, B, R, l1fac, l2, e, scale,
                         norm, alpha):  # fmt: skip
        B, R, nchunks = int(B), int(R), int(nchunks)
        part = _view(partial, np.float64, (2, B, nchunks, R), (B * nchunks * R, nchunks * R, R, 1))
        ev = _view(e, np.float64, (B, R), (R, 1))
        nv, av = model.cert_line_terms(part, float(l1fac), ev, float(scale), bool(int(l2)))
        _view(norm, np.float64, (B, R), (R, 1))[...] = nv
        _view(alpha, np.float64, (B, R), (R, 1))[...] = av

    def _cert_entries(self, grid, block, targs, F, c32, n_p, c_pitch, B, m, n, rows_per_block,
                      fexp, na, alpha, nb, beta, factor, abs_term, cR, c4, thr, nth, base, mixa,
                      mixb, fexp_mixed, need, hist, skip):  # fmt: skip
        B, m, n, n_p, c_pitch, nth = (int(v) for v in (B, m, n, n_p, c_pitch, nth))
        assert block == (32, 8) and grid[0] * 128 >= n and grid[1] <= 65535 and nth <= 32
        if int(_view(skip, np.uint64, (1,), (1,))[0]):
            return
        assert grid[1] * int(rows_per_block) >= B * m
        dt = np.int32 if targs[0] == "int" else np.int64
        Fv = _view(F, dt, (B, m, n_p), (m * n_p, n_p, 1))
        c = None
        if targs[1] == "true":
            assert c_pitch >= n
            c = _view(c32, np.float32, (B, m, c_pitch), (m * c_pitch, c_pitch, 1))
        lines = [_view(x, np.float64, (B, r), (r, 1)) for x, r in ((na, m), (alpha, m), (nb, n),
                                                                   (beta, n))]  # fmt: skip
        consts = [float(v) for v in (factor, abs_term, cR, c4)]
        th = _view(thr, np.float64, (nth,), (1,))
        mx = [_view(x, np.uint64, (B, r), (r, 1)) for x, r in ((mixa, m), (mixb, n))]
        nd, h = model.cert_entries(Fv, c, n, (int(fexp), int(fexp_mixed), *mx), *lines, *consts,
                                   th, int(base))  # fmt: skip
        _view(need, np.uint8, (B, m, n), (m * n, n, 1))[...] = nd
        out = _view(hist, np.uint64, (nth + 2,), (1,))
        out[...] = h  # the grid's atomics, in one step

    def _line_shifts(self, grid, block, targs, s, v, n, q_down, out):
        """scaling.line_shift: its log2 estimate (here from Q_down's, L) corrected exactly."""
        from emulinalg.algorithm.scaling import half_log_shift

        n = int(n)
        assert block == (_THREADS_1D,) and grid[0] >= 1
        q = float(q_down)
        sv, vv = _view(s, np.int64, (n,), (1,)), _view(v, np.float64, (n,), (1,))
        t = half_log_shift(np, 0.5 * np.log2(q), q, vv)
        _view(out, np.int64, (n,), (1,))[...] = sv + t

    def _cert_exact_factors(self, grid, block, targs, e, la, f, lb, tab, nth, mode, last,
                            refine, steps, words, p, q):  # fmt: skip
        la, lb, nth, steps = int(la), int(lb), int(nth), int(steps)
        assert block == (_THREADS_1D,) and int(mode) in (0, 1)
        w = _view(words, np.uint64, (model.cw_step(nth, steps),), (1,))
        t = _view(tab, np.float64, (2 * nth,), (1,))
        ev, fv = _view(e, np.float64, (la,), (1,)), _view(f, np.float64, (lb,), (1,))
        pq = model.cert_exact_factors(w, nth, int(mode), int(last), int(refine), steps, ev, fv,
                                      t[:nth], t[nth:])  # fmt: skip
        if pq is not None:
            _view(p, np.float64, (la,), (1,))[...] = pq[0]
            _view(q, np.float64, (lb,), (1,))[...] = pq[1]

    @staticmethod
    def _words(words, nth, s):
        """The words up to refinement step s's (all a kernel of step s reads or writes, but the
        patch)."""
        return _view(words, np.uint64, (model.cw_step(int(nth), int(s) + 1),), (1,))

    def _suspect_ranks(self, grid, block, targs, need0, need1, total, words, nth, s, base,
                       limit, re, seg, nseg, boff):  # fmt: skip
        total, nth, s, nseg = int(total), int(nth), int(s), int(nseg)
        assert block == (_THREADS_1D,) and nseg == -(-total // 128)
        n0, n1 = (_view(x, np.uint8, (total,), (1,)) for x in (need0, need1))
        got = model.suspect_ranks(n0, n1, self._words(words, nth, s), nth, s, int(base),
                                  int(limit), int(re), grid[0])  # fmt: skip
        if got is not None:
            _view(seg, np.uint32, (nseg,), (1,))[...] = got[0]
            _view(boff, np.uint32, (grid[0],), (1,))[...] = got[1]

    def _refine_suspects(self, grid, block, targs, are, aim, asr, asc, bre, bim, bsr, bsc, k,
                         shift_a, shift_b, n, need0, need1, total, words, nth, s, base, limit, re,
                         seg, nseg, boff, nblk, native, native_factor, tiny, l1fac, sums,
                         cap):  # fmt: skip
        cplx = targs[0] == "true"
        k, n, total, nth, s, cap = (int(v) for v in (k, n, total, nth, s, cap))
        assert block == (_THREADS_1D,) and grid[0] <= 2**31 - 1
        w = self._words(words, nth, s)
        if not model.cert_step(w, nth, s, int(limit), int(re))[2]:
            return
        n0, n1 = (_view(x, np.uint8, (total,), (1,)) for x in (need0, need1))
        m = total // n
        dt = np.float32 if targs[1] == "float" else np.float64  # the operands' type, In
        A = [_strided_any(x, dt, (m, k), (int(asr), int(asc))).astype(np.float64)
             for x in ((are, aim) if cplx else (are,))]  # fmt: skip
        Bm = [_strided_any(x, dt, (k, n), (int(bsr), int(bsc))).astype(np.float64)
              for x in ((bre, bim) if cplx else (bre,))]  # fmt: skip
        sa = _view(shift_a, np.int64, (m,), (1,))
        sb = _view(shift_b, np.int64, (n,), (1,))
        got = model.refine_suspects(A, Bm, sa, sb, n, n0, n1, w, nth, s, int(base), int(limit),
                                    int(re), int(native), float(native_factor), float(tiny),
                                    float(l1fac), k, cplx)  # fmt: skip
        out = _view(sums, np.float64, (2 * cap,), (1,))
        out[: got[0].size], out[cap : cap + got[1].size] = got

    def _refine_test(self, grid, block, targs, F, c32, n_p, c_pitch, n, fexp, fexp_mixed, mixa,
                     mixb, factor, abs_term, na, p, nb, q, cR, c4, need0, need1, total, words,
                     nth, s, steps, base, limit, re, boff, native, theta_cap, sums, cap,
                     patch_cap, e, la, f, lb, tab):  # fmt: skip
        n, n_p, c_pitch, total, nth, s, steps, cap, patch_cap, la, lb = (
            int(v) for v in (n, n_p, c_pitch, total, nth, s, steps, cap, patch_cap, la, lb)
        )
        assert block == (_THREADS_1D,)
        m = total // n
        w = _view(words, np.uint64, (model.cw_step(nth, steps) + patch_cap,), (1,))
        n0, n1 = (_view(x, np.uint8, (total,), (1,)) for x in (need0, need1))
        Fv = _view(F, np.int32 if targs[0] == "int" else np.int64, (m, n_p), (n_p, 1))
        cv = _view(c32, np.float32, (m, c_pitch), (c_pitch, 1)) if targs[1] == "true" else None
        ma, mb = _view(mixa, np.uint64, (m,), (1,)), _view(mixb, np.uint64, (n,), (1,))

        def lam(i, j):
            x = float(Fv[i, j]) * 2.0 ** -int(fexp_mixed if int(ma[i]) or int(mb[j]) else fexp)
            if cv is not None:
                x = max(x, max(float(cv[i, j]) * float(factor) - float(abs_term), 0.0))
            return x

        t = _view(tab, np.float64, (2 * nth,), (1,))
        ev, fv = _view(e, np.float64, (la,), (1,)), _view(f, np.float64, (lb,), (1,))

        def factors(c):
            return tuple(model.exact_factors(x, t[c], t[nth + c]) for x in (ev, fv))

        sv = _view(sums, np.float64, (2 * cap,), (1,))
        pv, qv = _view(p, np.float64, (m,), (1,)), _view(q, np.float64, (n,), (1,))
        got = model.refine_test(
            lam, _view(na, np.float64, (m,), (1,)), pv, _view(nb, np.float64, (n,), (1,)), qv,
            float(cR), float(c4), n0, n1, n, w, nth, s, steps, int(base), int(limit), int(re),
            int(native), float(theta_cap), (sv[:cap], sv[cap:]), patch_cap, factors, grid[0],
        )  # fmt: skip
        if got is not None:
            pv[...], qv[...] = got


class RawModule:
    native = False  # set by make_module

    def __init__(self, code, options=(), name_expressions=None):
        assert "__global__" in code and "--std=c++17" in options
        self.code, self.names, self.globals = code, name_expressions, {}

    def get_function(self, expr):
        # cupy looks a name up among the name expressions, else takes it as the symbol itself
        # (extern "C" kernels)
        plain = rf'extern "C" __global__ void (__launch_bounds__\(\w*\))?\s*{expr}\('
        assert (self.names is not None and expr in self.names) or (
            "<" not in expr and re.search(plain, self.code)
        )
        return _Kernel(self, expr)

    def get_global(self, sym):
        assert "__constant__" in self.code and sym in self.code
        return ("global", self, sym)


class _ConstantHolder:
    def __init__(self, memptr, shape, dtype):
        _, self.module, self.sym = memptr
        self.shape, self.dtype = shape, np.dtype(dtype)

    def set(self, arr):
        arr = np.asarray(arr)
        assert arr.shape == tuple(self.shape) and arr.dtype == self.dtype
        self.module.globals[self.sym] = arr.copy()


def _ndarray_factory(shape, dtype=float, memptr=None, **kw):
    assert memptr is not None and memptr[0] == "global"
    return _ConstantHolder(memptr, shape, dtype)


# ----------------------------------------------------------------------------------------------
# native mode: the .cu sources compiled for the CPU
# ----------------------------------------------------------------------------------------------

_RESIDUE_PARAMS = (
    "const In* re, const In* im, long long sb, long long sr, long long sc, int B, int R, "
    "int C, int Rpad, int Cp, int rows_contiguous, const int* shift, long long shift_sb, "
    "unsigned* planes"
)
_REFIT_PARAMS = (
    "const T* re, const T* im, const double* a1, const double* a2, const double* b1, "
    "const double* b2, const unsigned char* exclude, long long total, int B, int m, int n, "
    "int rstep"
)
_PARAMS = {  # the kernels' parameter lists, as in src_cuda/*.cu
    "ozaki2_residues": _RESIDUE_PARAMS,
    "ozaki2_residues_mma": _RESIDUE_PARAMS,
    "ozaki2_crt_s8": "const signed char* res, long long plane, int B, int mc, int n, int ldr, "
    "int m_full, int r0, const int* mu, const int* nu, int kind, void* out0, void* out1, "
    "void* out2, void* out3",
    "ozaki2_crt": "const int* prod, long long kb_stride, int nkb, long long plane, int B, int mc, "
    "int n, int n_p, int m_full, int r0, const int* mu, const int* nu, int kind, void* out0, "
    "void* out1, void* out2, void* out3",
    "bf16_lower": "const double* x, long long sb, long long sr, long long sc, int B, int R, "
    "int C, int Rpad, int Cp, unsigned short* out",
    "balance_sides": "const In* re, const In* im, long long sb, long long sr, long long sc, "
    "int B, int R, int C, int Rpad, int Cp, int rows_are_lines, const long long* e, "
    "unsigned short* t16, unsigned short* d16, int* nonzero",
    "balance_out": "const float* cT, const float* cD, long long pitch, int B, int m, int n, "
    "const int* nz_rows, const int* nz_cols, const double* c, double factor, double abs_term, "
    "float* pl, unsigned* bad",
    "line_max_exponent": "const In* re, const In* im, long long sb, long long sr, "
    "long long sc, int B, int R, int C, int rows_contiguous, int chunk, int pair, int* emax",
    "bound_operand": "const In* re, const In* im, long long sb, long long sr, "
    "long long sc, int B, int R, int C, int Rpad, int Cp, int rows_contiguous, int vec, "
    "const int* emax, long long* shift, unsigned* out, unsigned long long* sums, "
    "unsigned long long* nz, unsigned long long* mixed, double* partial",
    "bound_max": "const T* F, long long n_p, int B, int m, int n, int rows_per_block, "
    "const unsigned long long* ra, const unsigned long long* nza, const unsigned long long* cb, "
    "const unsigned long long* nzb, long long c, unsigned long long* ua, "
    "unsigned long long* ub",
    "cert_operand": "const double* re, const double* im, long long sb, long long sr, "
    "long long sc, int B, int R, int C, int Rpad, int Cp, int rows_contiguous, int k_major, "
    "int chunk, const long long* shift, double* partial, unsigned short* out",
    "refine_suspects": "const In* are, const In* aim, long long asr, long long asc, "
    "const In* bre, const In* bim, long long bsr, long long bsc, int k, "
    "const long long* shift_a, const long long* shift_b, int n, const unsigned char* need0, "
    "const unsigned char* need1, long long total, unsigned long long* words, int nth, int s, "
    "int base, long long limit, long long re, const unsigned* seg, long long nseg, "
    "const unsigned* boff, long long nblk, int native, double native_factor, double tiny, "
    "double l1fac, double* sums, long long cap",
    "refine_test": "const T* F, const float* c32, long long n_p, long long c_pitch, int n, "
    "int fexp, int fexp_mixed, const unsigned long long* mixa, const unsigned long long* mixb, "
    "double factor, double abs_term, const double* na, double* p, const double* nb, double* q, "
    "double cR, double c4, const unsigned char* need0, const unsigned char* need1, "
    "long long total, unsigned long long* words, int nth, int s, int steps, int base, "
    "long long limit, long long re, const unsigned* boff, int native, double theta_cap, "
    "const double* sums, long long cap, long long patch_cap, const double* e, long long la, "
    "const double* f, long long lb, const double* tab",
    "suspect_ranks": "const unsigned char* need0, const unsigned char* need1, long long total, "
    "unsigned long long* words, int nth, int s, int base, long long limit, long long re, "
    "unsigned* seg, long long nseg, unsigned* boff",
    "cert_exact_factors": "const double* e, long long la, const double* f, long long lb, "
    "const double* tab, int nth, int mode, int last, int refine, int steps, "
    "unsigned long long* words, double* p, double* q",
    "line_shifts": "const long long* s, const double* v, long long n, double q_down, "
    "long long* out",
    "refit_low": _REFIT_PARAMS + ", unsigned long long* low",
    "refit_select": _REFIT_PARAMS + ", const double* thr, const double* low, int cap, "
    "unsigned long long* counts, long long* zero_idx, long long* cand_idx, double* cand_q, "
    "unsigned long long* hist, const unsigned long long* skip",
    "refit_choose": "const long long* counts, const long long* zero_idx, "
    "const long long* cand_idx, const double* cand_q, int cap, double spread, long long* idx, "
    "bool* valid",
    "cert_line_terms": "const double* partial, int nchunks, int B, int R, double l1fac, int l2, "
    "const double* e, double scale, double* norm, double* alpha",
    "cert_entries": "const T* F, const float* c32, long long n_p, long long c_pitch, int B, "
    "int m, int n, int rows_per_block, int fexp, const double* na, const double* alpha, "
    "const double* nb, const double* beta, double factor, double abs_term, double cR, double c4, "
    "const double* thr, int nth, int base, const unsigned long long* mixa, "
    "const unsigned long long* mixb, int fexp_mixed, unsigned char* need, "
    "unsigned long long* hist, const unsigned long long* skip",
}
_BARRIERS = {"ozaki2_residues": True, "ozaki2_residues_mma": True, "ozaki2_crt": False,
             "ozaki2_crt_s8": False,
             "bf16_lower": False, "balance_sides": True, "balance_out": False,
             "line_max_exponent": True, "bound_operand": True,
             "cert_operand": True, "cert_line_terms": False, "cert_entries": True,
             "bound_max": True, "suspect_ranks": True, "refine_suspects": True,
             "refine_test": True, "cert_exact_factors": False, "line_shifts": False,
             "refit_low": True, "refit_select": True, "refit_choose": True}  # fmt: skip
_CTYPES = {"long long": ctypes.c_longlong, "int": ctypes.c_int, "double": ctypes.c_double}
_LIBS: dict = {}


def _native_lib(code, expr):
    """The shared library with ``expr``'s wrapper ``run`` (and ``set_table``), built once."""
    import hashlib
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    key = hashlib.sha256((code + expr).encode()).hexdigest()[:16]
    if key in _LIBS:
        return _LIBS[key]
    name = expr.split("<")[0]
    targs = [t.strip(" >") for t in expr.split("<")[1].split(",")] if "<" in expr else [""]
    T = targs[0]  # the first template argument; In: the operands' type (the last float/double)
    In = next((t for t in reversed(targs) if t in ("float", "double")), "double")
    decl = _PARAMS[name].replace("const T*", f"const {T}*").replace("const In*", f"const {In}*")
    params = [p.strip() for p in decl.split(",")]
    names = [p.split()[-1].lstrip("*") for p in params]
    tables = ""
    if "emu_wdig" in code:
        tables = """
extern "C" void set_table(const char* sym, const void* src, unsigned long bytes) {
  if (!std::strcmp(sym, "emu_wdig")) std::memcpy(emu_wdig, src, bytes);
  if (!std::strcmp(sym, "emu_pdig")) std::memcpy(emu_pdig, src, bytes);
  if (!std::strcmp(sym, "emu_ratio")) std::memcpy(emu_ratio, src, bytes);
}"""
        if "emu_wdig_f64" in code:  # ozaki2_crt_s8.cu's own tables
            tables = tables[: tables.rindex("}")] + (
                '  if (!std::strcmp(sym, "emu_wdig_f64")) '
                "std::memcpy(emu_wdig_f64, src, bytes);\n"
                '  if (!std::strcmp(sym, "emu_pdig_f64")) '
                "std::memcpy(emu_pdig_f64, src, bytes);\n}"
            )
    wrapper = f"""
extern "C" void run(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                    unsigned bz, {", ".join(params)}) {{
  emu_launch({{gx, gy, gz}}, {{bx, by, bz}}, [&] {{ {expr}({", ".join(names)}); }},
             {"true" if _BARRIERS[name] else "false"});
}}{tables}
"""
    tmp = Path(tempfile.mkdtemp(prefix="emul_native_"))
    (tmp / "k.cpp").write_text(code + wrapper)
    shim = Path(__file__).resolve().parent / "cuda_host_shim.h"
    # -fno-gnu-unique: a template's local statics (the kernels' __shared__ arrays) would
    # otherwise be one object across every loaded library (a kernel compiled with a patched
    # kStage would lend its arrays to later builds)
    cmd = ["g++", "-std=c++20", "-O1", "-fPIC", "-shared", "-pthread", "-ffp-contract=off",
           "-fno-gnu-unique", "-w", "-include", str(shim), "-o", str(tmp / "k.so"),
           str(tmp / "k.cpp")]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    lib = ctypes.CDLL(str(tmp / "k.so"))
    shutil.rmtree(tmp, ignore_errors=True)  # loaded: the files are no longer needed
    argtypes = [ctypes.c_uint] * 6
    for p in params:
        argtypes.append(ctypes.c_void_p if "*" in p else _CTYPES[p.rsplit(" ", 1)[0]])
    lib.run.argtypes, lib.run.restype = argtypes, None
    if tables:
        lib.set_table.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_ulong]
        lib.set_table.restype = None
    _LIBS[key] = lib
    return lib


def _native_call(module, expr, grid, block, args):
    lib = _native_lib(module.code, expr)
    for sym, arr in module.globals.items():  # __constant__ tables: this module's values
        lib.set_table(sym.encode(), arr.ctypes.data, arr.nbytes)
    grid, block = tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block))
    conv = [
        a.ctypes.data if isinstance(a, np.ndarray) else float(a) if t is ctypes.c_double else int(a)
        for a, t in zip(args, lib.run.argtypes[6:])
    ]
    lib.run(*grid, *block, *conv)


# ----------------------------------------------------------------------------------------------
# cuBLAS
# ----------------------------------------------------------------------------------------------

_TYPES = {3: np.int8, 10: np.int32, 14: np.uint16, 0: np.float32}


def _as_compute(x, code):
    if code == 14:  # bfloat16 bits -> float32
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return x.astype(np.int64 if code in (3, 10) else np.float64)


def gemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B,
                         Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, count, compute,
                         algo):  # fmt: skip
    """Column-major C_z (m x n, ldc) = op(A_z) (m x k) op(B_z) (k x n), z < count; alpha = 1,
    beta = 0 (all the backend uses)."""
    assert compute in (72, 68) and (Atype, Ctype) in ((3, 10), (14, 0)) and Atype == Btype
    assert m % 4 == 0 and lda % 4 == 0 and ldb % 4 == 0 and ldc % 4 == 0
    ta, tc = _TYPES[Atype], _TYPES[Ctype]
    # op(A)[z, i, p]: transa -> A[z*sA + i*lda + p], else A[z*sA + p*lda + i]
    sa = (strideA, lda, 1) if transa else (strideA, 1, lda)
    sb = (strideB, ldb, 1) if transb else (strideB, 1, ldb)
    ea = 1 + (count - 1) * strideA + max((m - 1) * sa[1] + (k - 1) * sa[2], 0)
    eb = 1 + (count - 1) * strideB + max((k - 1) * sb[1] + (n - 1) * sb[2], 0)
    isz_a = np.dtype(ta).itemsize
    opA = as_strided(_buffer(A, ta, ea), (count, m, k), [s * isz_a for s in sa])
    opB = as_strided(_buffer(B, ta, eb), (count, k, n), [s * isz_a for s in sb])
    res = np.matmul(_as_compute(opA, Atype), _as_compute(opB, Btype))
    if Ctype == 10:
        assert np.abs(res).max(initial=0) < 2**31
    ec = 1 + (count - 1) * strideC + (n - 1) * ldc + m - 1
    isz_c = np.dtype(tc).itemsize
    Cv = as_strided(_buffer(C, tc, ec), (count, m, n), (strideC * isz_c, isz_c, ldc * isz_c))
    Cv[...] = res.astype(tc)


def gemmEx(*args):
    raise AssertionError("the Scheme II path uses the batched GEMM only")


# ----------------------------------------------------------------------------------------------
# the module
# ----------------------------------------------------------------------------------------------


# The backend's cupy ElementwiseKernels the stand-in runs, by name: what each computes, in numpy
def _make_complex(dtype):
    def make(re, im):
        z = np.empty(np.shape(re), dtype=dtype)
        z.real, z.imag = re, im
        return z

    return make


_ELEMENTWISE = {
    "emulinalg_scaled_sums": lambda c, f: np.asarray(c).astype(np.float64) * np.float64(f),
    "emulinalg_make_complex128": _make_complex(np.complex128),
    "emulinalg_make_complex64": _make_complex(np.complex64),
}


class _ElementwiseKernel:
    def __init__(self, in_params, out_params, operation, name, **kwargs):
        self.fn = _ELEMENTWISE[name]

    def __call__(self, *args):
        return _wrap(self.fn(*args))


def make_module(native=False):
    """A ``cupy`` module object (with ``cupy.cuda`` and ``cupy.cuda.cublas``); ``native``: run
    the kernels' CUDA sources compiled for the CPU instead of their numpy model."""
    cp = types.ModuleType("cupy")
    names = ("int8", "uint8", "int32", "int64", "uint16", "uint32", "uint64", "float32",
             "float64", "complex64", "complex128")  # fmt: skip
    for name in names:
        setattr(cp, name, getattr(np, name))

    def empty(shape, dtype=np.float64):
        dtype = np.dtype(dtype)
        buf = np.full(int(np.prod(shape)) * dtype.itemsize, 0x5A, dtype=np.uint8)
        return _wrap(buf.view(dtype).reshape(shape))

    cp.empty = empty  # garbage-filled: every element the kernels own must be written
    cp.empty_like = lambda x, dtype=None: empty(x.shape, x.dtype if dtype is None else dtype)
    cp.ndarray = ndarray
    cp.bool_ = np.bool_
    cp.full = lambda shape, value, dtype=None: _wrap(np.full(shape, value, dtype=dtype))
    cp.zeros = lambda shape, dtype=np.float64: _wrap(np.zeros(shape, dtype))
    cp.asarray = _wrap
    cp.astype = lambda x, dtype, copy=True: _wrap(np.asarray(x).astype(dtype, copy=copy))
    cp.asnumpy = lambda x: np.array(x)  # a host copy, a plain numpy array
    cp.ascontiguousarray = lambda x, dtype=None: _wrap(np.ascontiguousarray(x, dtype=dtype))
    cp.broadcast_to = lambda x, shape: _wrap(np.broadcast_to(x, shape))
    cp.matmul = lambda a, b: _wrap(np.matmul(a, b))
    cp.maximum = lambda a, b: _wrap(np.maximum(a, b))
    cp.where = lambda c, a, b: _wrap(np.where(c, a, b))
    cp.sort = lambda x: _wrap(np.sort(x))
    cp.any, cp.all = (lambda x: _wrap(np.any(x))), (lambda x: _wrap(np.all(x)))
    cp.minimum = lambda a, b: _wrap(np.minimum(a, b))
    cp.zeros_like = lambda x: _wrap(np.zeros_like(x))
    cp.argsort = lambda x: _wrap(np.argsort(x, kind="stable"))
    cp.ndarray = _ndarray_factory
    cp.RawModule = type("RawModule", (RawModule,), {"native": native})
    cp.ElementwiseKernel = _ElementwiseKernel
    cuda = types.ModuleType("cupy.cuda")
    cublas = types.ModuleType("cupy.cuda.cublas")
    cublas.gemmStridedBatchedEx = gemmStridedBatchedEx
    cublas.gemmEx = gemmEx
    cuda.cublas = cublas
    cuda.device = types.SimpleNamespace(get_cublas_handle=lambda: 1)
    # an SM of sm_90's limits; two of them (bound_operand sizes its grid from these)
    attributes = {"MultiProcessorCount": 2, "MaxBlocksPerMultiprocessor": 32,
                  "MaxSharedMemoryPerMultiprocessor": 233472,
                  "MaxRegistersPerMultiprocessor": 65536}  # fmt: skip
    cuda.Device = lambda *a: types.SimpleNamespace(id=0, attributes=attributes)
    cuda.runtime = types.SimpleNamespace(deviceSynchronize=lambda: None)
    cp.cuda = cuda
    return cp


def load_backend(native=False):
    """The package ``emulinalg/backends/cupy/`` imported against the stand-in (under a private
    name, with its own modules: the real cupy backend, where imported, is left as it is)."""
    import importlib.util
    from pathlib import Path

    import emulinalg.backends

    cp = make_module(native)
    saved = {k: sys.modules.get(k) for k in ("cupy", "cupy.cuda", "cupy.cuda.cublas")}
    sys.modules.update({"cupy": cp, "cupy.cuda": cp.cuda, "cupy.cuda.cublas": cp.cuda.cublas})
    try:
        path = Path(emulinalg.backends.__path__[0]) / "cupy"
        name = "emulinalg.backends._cupy_on_cpu" + ("_native" if native else "")
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]  # a second load imports its modules afresh
        spec = importlib.util.spec_from_file_location(
            name, path / "__init__.py", submodule_search_locations=[str(path)]
        )
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # its relative imports find the package here
        spec.loader.exec_module(mod)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mod, cp
