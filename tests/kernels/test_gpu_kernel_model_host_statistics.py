"""The cupy backend's statistics host code (``emulinalg/backends/cupy/``: the prescale and
certificate hooks, line scans, bound planes, the engine's use of the hooks) run on the CPU
through ``fake_cupy``, with the kernels either the numpy model or the CUDA sources compiled as
host C++ (g++), against the generic ``scaling.ozaki2_prescale`` and
``certificate.ozaki2_moduli_needed``.
"""

from __future__ import annotations

import functools

import gpu_kernel_model as model
import numpy as np
import pytest
from _helpers import line_patch_case, parts_lower_of
from _kernel_model_helpers import (
    REFINE_CASES,
    TARGETS,
    _generic_cert_backend,
    _generic_counts,
    _refined_case,
    _same,
    _same_certificate,
    _same_prescale,
    _stat_operands,
)

from emulinalg._precision import OzakiII
from emulinalg.algorithm import certificate, certificate_plan, refinement
from emulinalg.algorithm.certificate import Target
from emulinalg.algorithm.scaling import ozaki2_prescale
from emulinalg.backends import numpy as npb
from emulinalg.inputs import phi_matrix

HOST_STAT_CASES = [(((), 1, 1, 1), 1), (((), 9, 70, 17), 4), (((3,), 5, 21, 6), 0.5)]
# F's passes (bound_max, cert_entries): three groups of 128 columns, the last partial, with
# need stored 4 bytes at once (n % 4 == 0) or byte by byte; several blocks of rows, a batch
# boundary inside a block's rows
WIDE_STAT_CASES = [(((), 70, 6, 260), 1), (((2,), 37, 5, 259), 1)]


def _stat_vs_generic(be, cp, ar, ai, br, bi, targets, to_dev=None, parts=False, dev=None):
    """emulinalg/backends/cupy/'s prescale and certificate hooks (on the CPU stand-in) against the
    generic code, which uses the same bf16 lower-bound hook: bit for bit, per ``Target``;
    ``parts``: with a complex product's part-check bound (``Prescale.parts_lower``) on both;
    ``dev``: the device parts to hand the hooks (default ``to_dev`` of each part). Returns the
    certificates."""
    to_dev = to_dev or cp.asarray
    want_pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    g = dev or [None if x is None else to_dev(x) for x in (ar, ai, br, bi)]
    pre = be.ozaki2_prescale(*g, "accurate")
    assert pre is not None
    _same_prescale(pre, want_pre)
    assert be.ozaki2_prescale(*g, "fast") is None  # left to the generic code
    if parts:
        want_pre.parts_lower = pl = parts_lower_of(ar, ai, br, bi)
        pre.parts_lower = cp.asarray(pl)
        if parts == "padded":  # a view of rows padded as the bf16 GEMM's (balance_stage's)
            n_p = -(-pl.shape[-1] // 8) * 8
            base = cp.asarray(np.full(pl.shape[:-1] + (n_p,), -1.0, dtype=np.float32))
            base[..., : pl.shape[-1]] = pl
            pre.parts_lower = base[..., : pl.shape[-1]]
    generic = _generic_cert_backend(be.magnitude_lower_matmul)
    got = []
    for b in targets:
        want = certificate.ozaki2_moduli_needed(np, generic, ar, ai, br, bi, want_pre, b)
        _same_certificate(be.ozaki2_certificate(*g, pre, b), want)
        got.append(want)
    return got


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("case", HOST_STAT_CASES, ids=str)
def test_host_code_statistics(cpu_backend, case, cplx):
    be, cp = cpu_backend
    shape, phi = case
    ar, ai, br, bi = _stat_operands(shape, phi, cplx, seed=23)
    _stat_vs_generic(be, cp, ar, ai, br, bi, TARGETS)


@pytest.mark.parametrize("case", HOST_STAT_CASES[1:] + WIDE_STAT_CASES, ids=str)
def test_host_code_statistics_interleaved(cpu_backend, case):
    """The prescale and certificate hooks given a complex array's parts as the engine hands them
    over (views at stride 2: line scans and bound operands in pair mode, B's columns walked
    along memory) equal the generic code bit for bit."""
    be, cp = cpu_backend
    shape, phi = case
    ar, ai, br, bi = _stat_operands(shape, phi, True, seed=29)
    A, B = cp.asarray(ar + 1j * ai), cp.asarray(br + 1j * bi)
    dev = [A.real, A.imag, B.real, B.imag]
    assert be.kernels._interleaved(dev[2], dev[3], be.kernels._strides(dev[2]))
    _stat_vs_generic(be, cp, ar, ai, br, bi, TARGETS, dev=dev)


def test_host_code_statistics_parts_lower(cpu_backend):
    """A complex product's part-check bound (``Prescale.parts_lower``) as the first pass's FP32
    sums in the kernels: the generic decisions, which it changes."""
    be, cp = cpu_backend
    ar, ai, br, bi = _stat_operands(((), 40, 500, 30), 1, True, seed=84)
    with_parts = _stat_vs_generic(be, cp, ar, ai, br, bi, TARGETS, parts=True)
    assert repr(_stat_vs_generic(be, cp, ar, ai, br, bi, TARGETS, parts="padded")) == repr(
        with_parts
    )
    without = _stat_vs_generic(be, cp, ar, ai, br, bi, TARGETS)
    assert repr(with_parts) != repr(without)


@pytest.mark.parametrize("case", WIDE_STAT_CASES, ids=str)
def test_host_code_statistics_wide(cpu_backend, case):
    be, cp = cpu_backend
    ar, ai, br, bi = _stat_operands(*case, False, seed=29)
    _stat_vs_generic(be, cp, ar, ai, br, bi, (Target(24), Target(53, "native")))


def test_host_code_statistics_staged_rows(cpu_backend, monkeypatch):
    """F's passes stage the line terms of kStage rows at a time in shared memory: with kStage
    16 (the source patched), a block's rows span several stages, one boundary inside a batch
    entry and one between two."""
    be, cp = cpu_backend
    source = be.kernels._cuda.source

    def staged(name):
        code = source(name)
        return code.replace("constexpr int kStage = 256;", "constexpr int kStage = 16;")

    assert "constexpr int kStage = 256;" in source("ozaki2_stats.cu")
    monkeypatch.setattr(be.kernels._cuda, "source", staged)
    monkeypatch.setattr(be.kernels, "_modules", {})
    ar, ai, br, bi = _stat_operands(((3,), 13, 9, 10), 1, False, seed=31)
    _stat_vs_generic(be, cp, ar, ai, br, bi, (Target(24), Target(53, "native")))


@pytest.mark.parametrize("cplx,target,shape,want", REFINE_CASES, ids=str)
def test_host_code_statistics_refinement(cpu_backend, cplx, target, shape, want, monkeypatch):
    """The exact step, the suspects and their refinement steps (the sample's squares and theta:
    the native form) and the patch in the kernels, as the generic code, also with the steps
    launched one at a time (a read-back each) and none before the first read-back; also with
    no step, one step, too many suspects (the strict form's limit: the kernels refine none; the
    native form's SUSPECTS_MAX at 0: the kernels take them all, up to
    ``certificate_plan.CUDA_SUSPECTS_MAX``), and a sample of 7 suspects (every
    ceil(suspects / 7)-th in flat order: the native form)."""
    be, cp = cpu_backend
    ar, ai, br, bi = _refined_case(cplx, target, shape, want)
    full = _stat_vs_generic(be, cp, ar, ai, br, bi, (target,))[0]
    for speculative in (1, 0):
        with monkeypatch.context() as mp:
            mp.setattr(be.certificate, "_SPECULATIVE_STEPS", speculative)
            _stat_vs_generic(be, cp, ar, ai, br, bi, (target,))
    limit = "SUSPECTS_MAX" if target.guarantee == "native" else "REFINE_ENTRIES"
    for name, value in (("REFINE_STEPS", 0), ("REFINE_STEPS", 1), (limit, 0),
                        ("REFINE_ENTRIES", 7)):  # fmt: skip
        with monkeypatch.context() as mp:
            mp.setattr(refinement, name, value)
            if name == "SUSPECTS_MAX":  # the kernels' step holds no suspect: it takes them all
                dev = [None if x is None else cp.asarray(x) for x in (ar, ai, br, bi)]
                pre = be.ozaki2_prescale(*dev, "accurate")
                _same_certificate(be.ozaki2_certificate(*dev, pre, target), full)
                # ... up to the cap: at 1, the generic step's count at SUSPECTS_MAX 1
                mp.setattr(certificate_plan, "CUDA_SUSPECTS_MAX", 1)
                capped = be.ozaki2_certificate(*dev, pre, target)
                mp.setattr(refinement, "SUSPECTS_MAX", 1)
                assert capped[0] > full[0]  # the cap binds
                _same_certificate(capped, _stat_vs_generic(be, cp, ar, ai, br, bi, (target,))[0])
            else:
                _stat_vs_generic(be, cp, ar, ai, br, bi, (target,))


def _second_pass_case(seed):
    """Complex phi = 1 operands, 41 x 300 x 31, with a zero bound-GEMM entry (the first pass
    leaves it beyond)."""
    m, k, n = 41, 300, 31
    a = phi_matrix((m, k), 1, "complex128", seed=seed)
    b = phi_matrix((k, n), 1, "complex128", seed=seed + 50)
    a[0, k // 2 :], b[: k // 2, 0] = 0, 0
    return a.real.copy(), a.imag.copy(), b.real.copy(), b.imag.copy()


@functools.cache
def _second_pass_refines():
    """(seed, target) of the first _second_pass_case whose refinement takes counts off."""
    for seed in range(10, 26):
        for target in (Target(24, "native"), Target(53, "native"), Target(24), Target(53)):
            full, _, unrefined = _generic_counts(*_second_pass_case(seed), target)
            if full < unrefined:
                return seed, target
    raise AssertionError("no second-pass case refines")


def test_host_code_statistics_refinement_second_pass(cpu_backend, monkeypatch):
    """The refinement after the bf16 GEMM pass (the GEMM and complex kernel variants), on an
    output of 41 x 31 entries (the suspect scans' last, partial group): the generic
    count, below the count without the refinement."""
    be, cp = cpu_backend
    seed, target = _second_pass_refines()
    ar, ai, br, bi = _second_pass_case(seed)
    calls = []
    real = be.gemm._bf16_gemm
    monkeypatch.setattr(be.certificate, "_bf16_gemm", lambda *x: calls.append(1) or real(*x))
    targets = tuple(dict.fromkeys((Target(24), Target(53, "native"), target)))
    _stat_vs_generic(be, cp, ar, ai, br, bi, targets)
    assert calls  # the second pass ran
    dev = [cp.asarray(x) for x in (ar, ai, br, bi)]
    pre = be.ozaki2_prescale(*dev, "accurate")
    count = be.ozaki2_certificate(*dev, pre, target)[0]
    monkeypatch.setattr(refinement, "REFINE_STEPS", 0)
    assert be.ozaki2_certificate(*dev, pre, target)[0] > count


@pytest.mark.parametrize("blocks, patch_entries", [(1, 256), (2, 3)])
def test_host_code_statistics_refinement_scan_blocks(cpu_backend, blocks, patch_entries,
                                                     monkeypatch):  # fmt: skip
    """The suspect scans (suspect_ranks, refine_test, and suspect_at in refine_suspects) with a
    block's range of 17 (9) groups of 1024 entries: several 4096-entry chunks per block and more
    than 32 segments per block to walk; a patch of 251 entries, or failures past a patch limit of
    3 (the test's atomics then stop at the limit, the count goes on)."""
    be, cp = cpu_backend
    monkeypatch.setattr(be.certificate, "_SEG_BLOCKS", blocks)
    monkeypatch.setattr(refinement, "PATCH_ENTRIES", patch_entries)
    ar, ai, br, bi = _stat_operands(((), 130, 64, 131), 1, False, seed=23)
    _stat_vs_generic(be, cp, ar, ai, br, bi, (Target(53, "native"),))


@pytest.mark.parametrize("which", ["real-part", "imag-a"])
def test_host_code_statistics_complex_one_part(cpu_backend, which):
    """Complex operands whose entries have one part zero (real data held as complex, a purely
    imaginary A), one row with both parts: the mixed counts make the kernels' lower bound the
    generic one (2**-10 where neither line has such an entry)."""
    be, cp = cpu_backend
    rng = np.random.default_rng(7)
    ar, br = rng.standard_normal((9, 40)), rng.standard_normal((40, 7))
    ai, bi = np.zeros_like(ar), np.zeros_like(br)
    if which == "imag-a":
        ar, ai = ai, ar
    (ai if which == "real-part" else ar)[2] = rng.standard_normal(40)  # row 2: both parts
    _stat_vs_generic(be, cp, ar, ai, br, bi, (Target(24), Target(53, "native")))
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    lam = certificate.bound_lower(np, pre.lower, True, pre.mixed)
    loose = certificate.bound_lower(np, pre.lower, True)
    assert np.array_equal(lam[2], loose[2]) and np.array_equal(lam[3:], 2.0 * loose[3:])


def test_host_code_statistics_views_chunks_and_k_blocks(cpu_backend, monkeypatch):
    be, cp = cpu_backend
    monkeypatch.setattr(be.statistics, "_STAT_CHUNK", 32)  # three chunks of columns
    monkeypatch.setattr(be.gemm, "_K_BLOCK", 16)  # five K-blocks of the bound GEMM
    ar, ai, br, bi = _stat_operands(((), 13, 70, 9), 1, True, seed=3)
    tr = {id(x): np.ascontiguousarray(x.T) for x in (ar, ai, br, bi)}

    def transposed_view(x):  # same values, rows contiguous in memory
        return cp.asarray(tr[id(x)]).T

    _stat_vs_generic(be, cp, ar, ai, br, bi, (Target(53), Target(53, "native")),
                     to_dev=transposed_view)  # fmt: skip
    rev = ar[::-1]  # negative row stride on the device too

    def rev_view(x):
        return cp.asarray(ar)[::-1] if x is rev else cp.asarray(x)

    _stat_vs_generic(be, cp, rev, None, br, None, (Target(24), Target(80)), to_dev=rev_view)
    a3 = _stat_operands(((4,), 6, 40, 9), 1, False, seed=8)[0]
    b2 = _stat_operands(((), 6, 40, 9), 1, False, seed=9)[2]
    b3 = np.broadcast_to(b2, (4,) + b2.shape)  # one B for every batch: stride 0

    def bcast(x):
        return cp.broadcast_to(cp.asarray(b2), b3.shape) if x is b3 else cp.asarray(x)

    _stat_vs_generic(be, cp, a3, None, b3, None, (Target(53, "native"),), to_dev=bcast)


def _same_bound_planes(got, want):
    """``statistics._bound_planes``' result equals the model's ``bound_operand`` bit for bit:
    shifts, int8 operand, line terms (sums, nonzero parts, mixed entries) and partials."""
    shift, planes, sums, nz, mixed, partial = (np.asarray(x) for x in got)
    assert _same(shift, want[0]) and _same(planes[0, 0], want[1])
    for g, w in zip((sums, nz, mixed), want[2:5]):
        assert _same(g, w.astype(np.uint64))
    assert _same(partial, want[5])


@pytest.mark.parametrize("warps", [1, 3, 100])
@pytest.mark.parametrize("dtype, n", [("float64", 33), ("float64", 36), ("float32", 36)])
@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_host_code_bound_planes_warps(cpu_backend, cplx, dtype, n, warps, monkeypatch):
    """bound_operand on a grid of `warps` warps (k = 170, padded to 176: 6 column tiles, the last
    one half padding, in 2 chunks of 4 and 2 tiles; 2 x 2 row tiles for A, 2 x 2 for B: 8 chunks,
    so a warp's share starts and ends inside row tiles, or is one chunk) over a batch of 2: the
    shifts, int8 operand, line terms and l1 partials of A's rows (k contiguous) and of B's
    columns (lines contiguous), the model's bit for bit. B's rows of 33 entries are not 16-byte
    aligned (entry by entry loads), rows of 36 are; A's rows are 172 entries apart (16-byte
    copies, but for a chunk that k = 170 cuts, float32)."""
    be, cp = cpu_backend
    monkeypatch.setattr(be.statistics, "_BOUND_WARPS", warps)
    # float32: the special lines' 2**+-300 would not fit; a zero row, a subnormal, a tiny column
    ops64 = _stat_operands(((2,), 37, 170, n), 1, cplx, seed=5, special=dtype == "float64")
    ar, ai, br, bi = (None if x is None else x.astype(dtype) for x in ops64)
    if dtype == "float32":
        ar[0, 1] = 0
        ar[1, 2, 3] = np.float32(1e-42)
        br[:, :, 4] *= np.float32(2.0**-100)

    def pitched(x):  # A's rows 172 entries apart: 16-byte aligned, the last chunk cut (float32)
        buf = cp.asarray(np.zeros(x.shape[:-1] + (172,), dtype=x.dtype))
        buf[..., :170] = x
        return buf[..., :170]

    ops = be.kernels._Operands(*(None if x is None else (pitched(x) if i < 2 else cp.asarray(x))
                         for i, x in enumerate((ar, ai, br, bi))))  # fmt: skip
    assert ops.a_strides == (37 * 172, 172, 1)
    B, m, k, kp, n_p = ops.B, ops.m, ops.k, ops.kp, ops.n_p
    assert kp % 32 != 0 and ops.b_strides[1] == 1 and n_p == (36 if n == 33 else n)
    sides = (
        (ops.a, ops.a_strides, m, m, (ar, ai)),
        (ops.b, ops.b_strides, n, n_p, [None if x is None else np.swapaxes(x, -1, -2)
                                        for x in (br, bi)]),
    )  # fmt: skip
    assert be.statistics._chunk_aligned(*ops.a, ops.a_strides)
    assert be.statistics._chunk_aligned(*ops.b, ops.b_strides) == (n == 36)
    for dev, strides, R, Rpad, (X, Xi) in sides:
        X, Xi = (None if x is None else x.astype(np.float64) for x in (X, Xi))
        emax = model.line_max_exponent(X, Xi)
        got = be.statistics._bound_planes(*dev, strides, B, R, Rpad, k, kp, cp.asarray(emax))
        want = model.bound_operand(X, Xi, emax, Rpad, kp)
        _same_bound_planes(got, want)


@pytest.mark.parametrize("warps", [1, 3])
@pytest.mark.parametrize("dtype, n", [("float64", 33), ("float64", 36), ("float32", 33),
                                      ("float32", 36)])  # fmt: skip
def test_host_code_interleaved_parts(cpu_backend, dtype, n, warps, monkeypatch):
    """A complex array's parts as the engine hands them over (views at stride 2, im one entry
    after re): line_max_exponent and bound_operand load each entry's pair at once (pair mode;
    bound_operand copies chunks of pairs where they are 16-byte aligned: A's rows 172 entries
    apart, B's rows of 36, not float32 rows of 33) and give the model's values bit for bit
    (k = 170: a chunk cut by k, padding rows and columns, a batch of 2, special lines)."""
    be, cp = cpu_backend
    monkeypatch.setattr(be.statistics, "_BOUND_WARPS", warps)
    ops64 = _stat_operands(((2,), 37, 170, n), 1, True, seed=6, special=dtype == "float64")
    ar, ai, br, bi = (x.astype(dtype) for x in ops64)
    ctype = np.complex64 if dtype == "float32" else np.complex128
    abuf = cp.asarray(np.zeros((2, 37, 172), dtype=ctype))  # rows 172 entries apart
    abuf[..., :170] = ar + 1j * ai
    A = abuf[..., :170]
    Bm = cp.asarray((br + 1j * bi).astype(ctype))
    ops = be.kernels._Operands(A.real, A.imag, Bm.real, Bm.imag)
    B, m, k, kp, n_p = ops.B, ops.m, ops.k, ops.kp, ops.n_p
    assert be.statistics._interleaved(*ops.a, ops.a_strides)
    assert be.statistics._interleaved(*ops.b, ops.b_strides)
    assert be.statistics._chunk_aligned(*ops.a, ops.a_strides) == 2
    aligned_b = n == 36 or dtype == "float64"
    assert be.statistics._chunk_aligned(*ops.b, ops.b_strides) == (2 if aligned_b else 0)
    sides = (
        (ops.a, ops.a_strides, m, m, (ar, ai)),
        (ops.b, ops.b_strides, n, n_p, [np.swapaxes(x, -1, -2) for x in (br, bi)]),
    )
    for dev, strides, R, Rpad, (X, Xi) in sides:
        X, Xi = X.astype(np.float64), Xi.astype(np.float64)
        emax = model.line_max_exponent(X, Xi)
        assert _same(np.asarray(be.statistics._line_max_exponent(*dev, strides, B, R, k)), emax)
        got = be.statistics._bound_planes(*dev, strides, B, R, Rpad, k, kp, cp.asarray(emax))
        want = model.bound_operand(X, Xi, emax, Rpad, kp)
        _same_bound_planes(got, want)


@pytest.mark.parametrize("warps", [1, 2, 5])
@pytest.mark.parametrize("R, Rpad", [(32, 36), (32, 64), (33, 40)])
def test_host_code_bound_planes_padded_rows(cpu_backend, R, Rpad, warps, monkeypatch):
    """bound_operand with padding rows (Rpad > R) over a batch of 3: where R is a multiple of 32,
    a row tile of padding rows is followed by batch b + 1's first rows, whose line index b R + r
    the padding rows' b R + R + l would equal; a warp walking from one into the other must still
    take them as a new row tile (shifts, line terms, int8 values and partials as the model's)."""
    be, cp = cpu_backend
    monkeypatch.setattr(be.statistics, "_BOUND_WARPS", warps)
    B, C, Cp = 3, 40, 48
    X = np.random.default_rng(R + Rpad).standard_normal((B, R, C))
    X[1] *= 2.0**40  # batches of different exponents: a wrong shift shows
    emax = model.line_max_exponent(X, None)
    want = model.bound_operand(X, None, emax, Rpad, Cp)
    got = be.statistics._bound_planes(cp.asarray(X), None, (R * C, C, 1), B, R, Rpad, C, Cp,
                           cp.asarray(emax))  # fmt: skip
    _same_bound_planes(got, want)


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_host_code_line_scan(cpu_backend, cplx):
    """line_scan (the engine's NaN/Inf check fused with the prescale's first pass): its line
    exponents are the model's, the prescale given them equals the generic one, and a NaN or
    Inf in any part of a line makes it not finite (exponent 1024 on that line)."""
    be, cp = cpu_backend
    ar, ai, br, bi = _stat_operands(((), 13, 70, 9), 1, cplx, seed=4)
    g = [None if x is None else cp.asarray(x) for x in (ar, ai, br, bi)]
    finite, (ea, eb) = be.line_scan(*g)
    assert finite is True
    ta = [None if x is None else x[None] for x in (ar, ai)]
    tb = [None if x is None else np.swapaxes(x, -1, -2)[None] for x in (br, bi)]
    assert _same(np.asarray(ea), model.line_max_exponent(*ta))
    assert _same(np.asarray(eb), model.line_max_exponent(*tb))
    want = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    _same_prescale(be.ozaki2_prescale(*g, "accurate", exponents=(ea, eb)), want)
    for where, value in (("a", np.nan), ("b", np.inf), ("a", -np.inf)):
        x = [None if v is None else v.copy() for v in (ar, ai, br, bi)]
        if where == "a":
            x[1 if cplx else 0][2, 5] = value
        else:
            x[2][7, 4] = value
        finite, (ea, eb) = be.line_scan(*[None if v is None else cp.asarray(v) for v in x])
        assert finite is False
        assert (np.asarray(ea)[0, 2] if where == "a" else np.asarray(eb)[0, 4]) == 1024
    assert be.line_scan(cp.asarray(ar.astype(np.float32)), None, g[2], None) is None


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_host_code_line_scan_prepares_prescale(cpu_backend, cplx):
    """line_scan(prepare=True) prepares the prescale's first launches; the prescale given those
    exponents takes them once and equals the generic one; with other arrays (the engine's
    float64 parts where the scan read float32), or a second time, it prepares its own."""
    be, cp = cpu_backend
    ar, ai, br, bi = _stat_operands(((2,), 13, 70, 9), 1, cplx, seed=6)
    g = [None if x is None else cp.asarray(x) for x in (ar, ai, br, bi)]
    want = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    finite, exps = be.line_scan(*g, prepare=True)
    assert finite is True and exps.prep is not None and exps.prep.matches(*g)
    assert be.line_scan(*g)[1].prep is None  # not asked: nothing prepared
    pre = be.ozaki2_prescale(*g, "accurate", exponents=exps)
    _same_prescale(pre, want)
    assert exps.prep is None  # taken once
    # the certificate on the prepared prescale: the prescale's own certificate's count and mask
    for target in (Target(24), Target(53, "native")):
        got = be.ozaki2_certificate(*g, pre, target)
        ref = be.ozaki2_certificate(*g, be.ozaki2_prescale(*g, "accurate"), target)
        assert got[0] == ref[0]
        assert (got[1] is None) == (ref[1] is None)
        if got[1] is not None:
            assert _same(np.asarray(got[1]), np.asarray(ref[1]))
    _same_prescale(be.ozaki2_prescale(*g, "accurate", exponents=exps), want)
    other = [None if x is None else x.copy() for x in g]
    finite, exps = be.line_scan(*g, prepare=True)
    assert not exps.prep.matches(*other)
    _same_prescale(be.ozaki2_prescale(*other, "accurate", exponents=exps), want)
    assert exps.prep is None
    finite, exps = be.line_scan(*g, prepare=True)
    assert be.ozaki2_prescale(*g, "fast", exponents=exps) is None and exps.prep is None


def test_host_code_statistics_decline(cpu_backend, monkeypatch):
    be, cp = cpu_backend
    ar, _, br, _ = _stat_operands(((), 4, 8, 5), 1, False, seed=1)
    g = cp.asarray(ar), None, cp.asarray(br), None
    pre = be.ozaki2_prescale(*g, "accurate")
    assert be.ozaki2_certificate(*g, None, Target(53)) is None
    a32 = cp.asarray(ar.astype(np.float32))
    assert be.ozaki2_prescale(a32, None, g[2], None, "accurate") is None
    monkeypatch.setenv("EMULINALG_CUPY_KERNELS", "0")
    assert be.ozaki2_prescale(*g, "accurate") is None
    assert be.ozaki2_certificate(*g, pre, Target(53)) is None


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_engine_choose_uses_the_hooks(cpu_backend, cplx):
    """emulinalg._engine._choose with the hooks equals it without them (the generic code with
    the same bf16 lower bound, and the same family of moduli: complex products modulo the
    Gaussian moduli, which the cupy backend declares): scheme, prescale and mask."""
    import types

    from emulinalg import _engine
    from emulinalg._precision import Level

    be, cp = cpu_backend
    ar, ai, br, bi = _stat_operands(((2,), 11, 45, 8), 1, cplx, seed=31)
    generic = types.SimpleNamespace(
        int_matmul=npb.int_matmul, magnitude_lower_matmul=be.magnitude_lower_matmul,
        native_matmul=np.matmul, gaussian_moduli=be.gaussian_moduli,
    )  # fmt: skip
    assert be.gaussian_moduli
    g = [None if x is None else cp.asarray(x) for x in (ar, ai, br, bi)]
    for level in (Level(53, "float64"), Level(24, "float32"), Level(80, "80 bits")):
        want = _engine._choose(np, generic, ar, ai, br, bi, level, "ozaki2", "float64")
        got = _engine._choose(np, be, *g, level, "ozaki2", "float64")
        assert got[0] == want[0]
        _same_prescale(got[1], want[1])
        beyond = np.zeros_like(want[2]) if got[2] is None else np.asarray(got[2])  # None: none
        assert _same(beyond, want[2])
        assert (got[3] is None) == (want[3] is None)  # the patch
        assert got[3] is None or _same(np.asarray(got[3]), want[3])


def test_engine_run_uses_the_prescale_hook(cpu_backend, monkeypatch):
    """emulinalg._engine._run for an explicit accurate-mode scheme takes the prescale from the
    hook (then the fused product) and equals the generic numpy product bit for bit, for the
    moduli and (complex) the Gaussian moduli."""
    import types

    from emulinalg import _engine
    from emulinalg._precision import OzakiII

    be, cp = cpu_backend
    calls = []
    real = be.ozaki2_prescale
    monkeypatch.setattr(be, "ozaki2_prescale", lambda *a: calls.append(a[-1]) or real(*a))
    generic = types.SimpleNamespace(int_matmul=npb.int_matmul, native_matmul=np.matmul)
    ar, ai, br, bi = _stat_operands(((), 9, 30, 7), 1, True, seed=5)
    g = [cp.asarray(x) for x in (ar, ai, br, bi)]
    for mode in ("accurate", "fast"):
        for gaussian in (False, True):
            scheme = OzakiII(moduli=13, mode=mode, gaussian=gaussian)
            with npb.quiet():
                want = _engine._run(np, generic, ar, ai, br, bi, scheme, "float64", None)[0]
            got = _engine._run(np, be, *g, scheme, "float64", None)[0]
            for x, y in zip(got, want, strict=True):
                assert _same(np.asarray(x), y)
    assert calls == ["accurate", "accurate", "fast", "fast"]


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize(
    "second_pass", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["one-pass", "two-pass"]
)
def test_host_code_statistics_float32(cpu_backend, cplx, second_pass):
    """narrow_statistics: line_scan, the prescale and the certificate given float32 operands
    (complex64: the strided real and imaginary views) equal the generic code on their float64
    copies, with zero, float32-subnormal and tiny lines; two-pass: a zero bound-GEMM entry
    leaves entries beyond on the first pass (the bf16 pass then reads float64 copies)."""
    be, cp = cpu_backend
    assert be.narrow_statistics
    m, k, n = (41, 300, 31) if second_pass else (9, 40, 11)
    ar, ai, br, bi = _stat_operands(((), m, k, n), 1, cplx, seed=41, special=False)
    narrow = [None if x is None else x.astype(np.float32) for x in (ar, ai, br, bi)]
    narrow[0][1] = 0  # a zero row
    narrow[0][2, 3] = np.float32(1e-42)  # float32 subnormal
    narrow[2][:, 4] *= np.float32(2.0**-100)  # a tiny column
    if second_pass:
        for x in narrow[:2] if cplx else narrow[:1]:
            x[0, k // 2 :] = 0
        for x in narrow[2:] if cplx else narrow[2:3]:
            x[: k // 2, 0] = 0
    wide = [None if x is None else x.astype(np.float64) for x in narrow]
    if cplx:
        a = cp.asarray((narrow[0] + 1j * narrow[1]).astype(np.complex64))
        b = cp.asarray((narrow[2] + 1j * narrow[3]).astype(np.complex64))
        dev = [a.real, a.imag, b.real, b.imag]
        assert dev[0].dtype == np.float32 and dev[0].strides[-1] == 8  # views, not copies
    else:
        dev = [cp.asarray(narrow[0]), None, cp.asarray(narrow[2]), None]
    finite, (ea, eb) = be.line_scan(*dev)
    finite64, (ea64, eb64) = be.line_scan(*(None if x is None else cp.asarray(x) for x in wide))
    assert finite and finite64
    assert _same(np.asarray(ea), np.asarray(ea64)) and _same(np.asarray(eb), np.asarray(eb64))
    want_pre = ozaki2_prescale(np, npb.int_matmul, *wide, "accurate")
    pre = be.ozaki2_prescale(*dev, "accurate", exponents=(ea, eb))
    _same_prescale(pre, want_pre)
    generic = _generic_cert_backend(be.magnitude_lower_matmul)
    calls = []
    real = be.gemm._bf16_gemm
    be_gemm = lambda *x: calls.append(1) or real(*x)  # noqa: E731
    try:
        be.certificate._bf16_gemm = be_gemm
        for target in (Target(24), Target(53), Target(24, "native"), Target(53, "native")):
            want = certificate.ozaki2_moduli_needed(np, generic, *wide, want_pre, target)
            _same_certificate(be.ozaki2_certificate(*dev, pre, target), want)
    finally:
        be.certificate._bf16_gemm = real
    assert bool(calls) == second_pass


def test_engine_hook_operands():
    """_engine._hook_operands: float32 and complex64 inputs' own parts (views) for a backend
    with narrow_statistics, the float64 parts otherwise."""
    import types

    from emulinalg import _engine

    narrow = types.SimpleNamespace(narrow_statistics=True)
    a32 = np.ones((3, 4), dtype=np.float32)
    parts = (a32.astype(np.float64), None, a32.astype(np.float64), None)
    got = _engine._hook_operands(np, narrow, a32, a32, parts, "float32")
    assert got[0] is a32 and got[1] is None and got[2] is a32
    c64 = (a32 + 2j * a32).astype(np.complex64)
    got = _engine._hook_operands(np, narrow, c64, c64, parts, "float32")
    assert got[0].dtype == np.float32 and np.shares_memory(got[1], c64)
    assert _engine._hook_operands(np, types.SimpleNamespace(), a32, a32, parts, "float32") is parts
    a64 = parts[0]
    assert _engine._hook_operands(np, narrow, a64, a64, parts, "float64") is parts


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_engine_choose_float32_hook_operands(cpu_backend, cplx):
    """_engine._choose given float32 hook operands equals it given their float64 copies."""
    from emulinalg import _engine
    from emulinalg._precision import Level

    be, cp = cpu_backend
    ops = _stat_operands(((2,), 11, 45, 8), 1, cplx, seed=37, special=False)
    narrow = [None if x is None else cp.asarray(x.astype(np.float32)) for x in ops]
    wide = [None if x is None else cp.asarray(np.asarray(x).astype(np.float64)) for x in narrow]
    for level in (Level(24, "float32"), Level(53, "float64")):
        want = _engine._choose(np, be, *wide, level, "ozaki2", "float32")
        got = _engine._choose(np, be, *wide, level, "ozaki2", "float32", None, tuple(narrow))
        assert got[0] == want[0]
        _same_prescale(got[1], want[1])
        assert (got[2] is None) == (want[2] is None)


@pytest.mark.parametrize(
    "request_",
    ["float32", "float64", OzakiII(moduli=8), OzakiII(moduli=9, mode="fast")],
    ids=str,
)
def test_engine_float32_parts_stay_narrow(cpu_backend, monkeypatch, request_):
    """narrow_products: a real float32 product on the cupy backend's host code hands the inputs'
    own float32 parts to its stages (no float64 copy of the operands is made) and gives the
    product computed from float64 parts bit for bit, with the same plan (levels with the
    certificate and refit, fixed Scheme II schemes in both modes)."""
    import dataclasses

    from emulinalg import _engine, get_config
    from emulinalg._precision import parse
    from emulinalg._stages import stages
    from emulinalg.algorithm import operands

    be, cp = cpu_backend
    assert stages(be).narrow_products
    wide_be = dataclasses.replace(  # the float64 copies, as device arrays of the stand-in
        stages(be), narrow_products=False,
        as_float64=lambda v: cp.asarray(np.asarray(v).astype(np.float64)),
    )  # fmt: skip
    rng = np.random.default_rng(11)
    a = rng.standard_normal((24, 70)).astype(np.float32)
    b = (rng.standard_normal((70, 18)) * 2.0**-30).astype(np.float32)
    a[3] *= 2.0**-100  # a tiny row: float32-subnormal and tiny entries
    a, b = cp.asarray(a), cp.asarray(b)
    request = parse(request_)
    want, want_plan = _engine.matmul(np, wide_be, a, b, request, get_config())
    widened = []
    real = operands.parts
    monkeypatch.setattr(operands, "parts", lambda *x, **kw: widened.append(1) or real(*x, **kw))
    got, plan = _engine.matmul(np, be, a, b, request, get_config())
    assert not widened
    assert got.dtype == np.float32 and _same(np.asarray(got), np.asarray(want))
    assert str(plan) == str(want_plan)


def test_cert_operand_takes_float64_only(cpu_backend):
    """cert_operand (the certificate's bf16 pass) reads float64: a float32 operand is refused,
    not read at the wrong width (the certificate hands it float64 copies)."""
    be, cp = cpu_backend
    a = cp.asarray(np.ones((4, 16), dtype=np.float32))
    ops = be.kernels._Operands(a, None, cp.asarray(np.ones((16, 4))), None)
    shift = cp.asarray(np.zeros(4, dtype=np.int64))
    with pytest.raises(TypeError, match="float64"):
        be.statistics._cert_operand(*ops.a, ops.a_strides, 1, 4, 4, 16, 16, False, shift)


def test_engine_line_patch_takes_one_gemm_over_k(cpu_backend, monkeypatch):
    """The native form's line patch on the cupy backend's host code: its certificate kernels
    and ``refinement.kernel_patch`` give the numpy backend's count and lines, and the lines come
    from one native GEMM of the line over all of k (``line_pieces`` off: cuBLAS splits k
    itself), the numpy backend's from pieces of K."""
    import emulinalg
    from emulinalg import _engine, get_config
    from emulinalg._precision import parse
    from emulinalg.backends import numpy as numpy_backend

    be, cp = cpu_backend
    a, b = line_patch_case("float64")  # row 5 and a block where raised lines cross
    seen = []
    real = _engine._native_lines

    def spy(*args):
        seen.append(args[7])
        return real(*args)

    monkeypatch.setattr(_engine, "_native_lines", spy)
    with emulinalg.config(strategy="eager"):
        want, want_plan = _engine.matmul(np, numpy_backend, a, b, parse("float64"), get_config())
        got, plan = _engine.matmul(np, be, cp.asarray(a), cp.asarray(b), parse("float64"),
                                   get_config())  # fmt: skip
    assert len(seen) == 2 and "refinement.line_patch" in str(plan), str(plan)
    (lines_np, lines_cp), got = seen, np.asarray(got)
    assert plan.scheme == want_plan.scheme
    assert [np.asarray(x).tolist() for x in lines_cp[:2]] == [x.tolist() for x in lines_np[:2]]
    assert np.array_equal(np.asarray(lines_cp.entries), lines_np.entries)
    rows = lines_np.rows
    assert rows.tolist() == [5]
    assert np.array_equal(got[rows], np.matmul(a[rows], b))  # one GEMM of the line over k
    assert not np.array_equal(want[rows], np.matmul(a[rows], b))  # numpy's: pieces of K
