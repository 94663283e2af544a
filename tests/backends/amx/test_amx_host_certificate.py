"""The C++ statistics behind the amx backend's prescale and certificate hooks
(``src_amx/ozaki2_stats_host.cpp``: ``amx.ozaki2_prescale``, ``amx.ozaki2_certificate``), on the
tile model.

The prescale equals ``scaling.ozaki2_prescale`` exactly, and the certificate gives
``certificate.ozaki2_moduli_needed``'s count, mask and patch (the refinement, the exact step,
the float32 GEMM fallback), real and complex; the bound GEMM's operands and line terms. Every
test runs on both forms of the C++ loops (explicit AVX-512 where the CPU has it, portable).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _amx_helpers import _amx, _pipeline_inputs
from _helpers import certificate_counts, parts_lower_of, same_patch

from emulinalg.algorithm.certificate import Target
from emulinalg.inputs import phi_matrix

pytestmark = [
    pytest.mark.skipif(
        _amx is None, reason="emulinalg._amx is not built (not x86-64, or no C++ compiler)"
    ),
    pytest.mark.usefixtures("host_loops"),  # the refinement's scans: both loops
]


def _assert_statistics_equal(ar, ai, br, bi, target, reference=None, parts=False):
    """amx.ozaki2_prescale == scaling.ozaki2_prescale (values and dtypes), and
    amx.ozaki2_certificate's (count, beyond) == certificate.ozaki2_moduli_needed's for ``target``
    (a ``certificate.Target``, or a number of bits: the strict form, then the native one), the
    generic code on the numpy backend's stages (or ``reference``'s); ``parts``: with a complex
    product's part-check bound (``Prescale.parts_lower``) on both."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import certificate
    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    want_pre = ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
    pre = amx.ozaki2_prescale(ar, ai, br, bi, "accurate")
    assert pre is not None and len(pre) == 4
    for got, want in zip(pre, want_pre):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert pre.lower.dtype == np.int32 and np.array_equal(pre.lower, want_pre.lower)  # F
    if parts:
        pre.parts_lower = want_pre.parts_lower = parts_lower_of(ar, ai, br, bi)
    targets = (target,)
    if not isinstance(target, certificate.Target):
        targets = (certificate.Target(target), certificate.Target(target, "native"))
    for t in targets:
        want = certificate.ozaki2_moduli_needed(
            xp, reference or npb, ar, ai, br, bi, want_pre, t
        )
        got = amx.ozaki2_certificate(ar, ai, br, bi, pre, t)
        assert got is not None and got[0] == want[0], (t, got[0], want[0])
        # the hook's beyond None: no entry beyond (no m x n mask made)
        assert np.array_equal(np.zeros_like(want[1]) if got[1] is None else got[1], want[1])
        assert same_patch(got[2], want[2]), (got[2], want[2])  # the patch
    return want_pre, want


@pytest.mark.parametrize("case", ["phi", "wide", "huge", "phi4"])
@pytest.mark.parametrize("bits", [24, 53, 70])
def test_host_statistics_equal_the_generic_ones(case, bits, monkeypatch, rng):
    """amx.ozaki2_prescale equals scaling.ozaki2_prescale exactly, and amx.ozaki2_certificate
    gives certificate.ozaki2_moduli_needed's count and mask (same float32 lower bound), strided
    views included."""

    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    if case == "phi4":
        a = phi_matrix((41, 300), 4.0, "float64", seed=61)
        b = phi_matrix((300, 27), 4.0, "float64", seed=62)
    else:
        a, b = _pipeline_inputs(case, rng)
    _assert_statistics_equal(np.asfortranarray(a)[::-1], None, b, None, bits)


def test_host_statistics_decline_what_they_do_not_cover(monkeypatch):
    import array_api_compat.numpy as xp

    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    monkeypatch.setattr(amx, "EMULATE", True)
    a, b = np.ones((4, 8)), np.ones((8, 3))
    assert amx.ozaki2_prescale(a, None, b, None, "fast") is None
    assert amx.ozaki2_prescale(a, a, b, None, "accurate") is None  # half complex
    assert amx.ozaki2_prescale(a, np.ones((1, 8)), b, b, "accurate") is None  # broadcast im
    assert amx.ozaki2_prescale(a, a.astype(np.float32), b, b, "accurate") is None
    pre = amx.ozaki2_prescale(a, None, b, None, "accurate")
    target = Target(53)
    assert amx.ozaki2_certificate(a, None, b, b, pre, target) is None
    assert amx.ozaki2_certificate(a, None, b, None, None, target) is None
    assert amx.ozaki2_certificate(a, None, b, None, tuple(pre), target) is None  # no .lower
    generic = ozaki2_prescale(xp, npb.int_matmul, a, None, b, None, "accurate")
    assert amx.ozaki2_certificate(a, None, b, None, generic, target) is None  # not made here


def _spanning_inputs(rng, cplx, n=23):
    """Entries spanning 2**+-40 within every line (most floor to 0 in the bound operands, so
    F leaves entries beyond), one line of A zero."""
    m, k = 29, 160
    a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-40, 41, (m, k)))
    b = rng.standard_normal((k, n)) * np.exp2(rng.integers(-40, 41, (k, n)))
    if cplx:
        a = a + 1j * rng.standard_normal((m, k)) * np.exp2(rng.integers(-40, 41, (m, k)))
        b = b + 1j * rng.standard_normal((k, n)) * np.exp2(rng.integers(-40, 41, (k, n)))
    a[6] = 0
    return a, b


def _phi_operands(cplx, seed, shape):
    m, k, n = shape
    dt = "complex128" if cplx else "float64"
    a = phi_matrix((m, k), 1, dt, seed=seed)
    b = phi_matrix((k, n), 1, dt, seed=seed + 50)
    ar, ai = (a.real.copy(), a.imag.copy()) if cplx else (a, None)
    br, bi = (b.real.copy(), b.imag.copy()) if cplx else (b, None)
    return ar, ai, br, bi


def _generic_steps(ar, ai, br, bi, target):
    """The generic certificate (numpy backend: the float32 lower bound, as the AMX backend's)
    on these operands: (count, patch, count without the refinement (REFINE_STEPS 0), whether the
    exact step took a count off the bisection's)."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import certificate
    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.backends import numpy as npb

    pre = ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
    count, patch, unrefined = certificate_counts(xp, npb, ar, ai, br, bi, pre, target)
    cc = certificate.cert_constants(ar.shape[-1], target, ai is not None)
    _, na, nb = certificate.normalized(xp, ar, ai, br, bi, cc.norm)
    R = cc.cR * certificate.bound_lower(xp, pre.lower, ai is not None, pre.mixed)
    need = certificate.ozaki2_needed(xp, cc, R, na, nb, pre[2], pre[3])
    top = int(need[need != certificate.BEYOND].max())
    step = bool(certificate.exact_passes(xp, cc, top - 1, R, na, nb, pre[2], pre[3]).all())
    return count, patch, unrefined, step


# (cplx, target, want): the refinement takes counts off ("refines"), also after a successful
# exact step ("after-step": the suspects fail two counts below the bisection's count), and with
# a patch ("patch"); the first phi = 1 seed that shows it
_REFINE_CASES = [
    (False, Target(53), "refines"),
    (True, Target(24), "after-step"),
    (False, Target(24, "native"), "refines"),
    (True, Target(53, "native"), "refines"),
    (False, Target(53), "patch"),
    (True, Target(24, "native"), "patch"),
]


@pytest.mark.parametrize("cplx,target,want", _REFINE_CASES, ids=str)
def test_host_certificate_refinement(cplx, target, want, monkeypatch):
    """phi = 1 inputs where the suspect refinement (refinement.refine_and_patch, on the entries that
    fail the C++ exact pass one count lower) takes counts off the bound GEMM's bound alone:
    amx.ozaki2_certificate (its steps in ozaki2_refine_step) gives the generic count, mask and
    patch, also without the refinement (no step), with too many suspects for the strict form (none
    refined; the native form's C++ step holds no suspect, so it takes all: the count of no limit),
    with one step only and with a sample of the suspects summed."""
    from emulinalg.algorithm import refinement
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    for seed in range(24):
        ops = _phi_operands(cplx, seed, (40, 500, 30))
        full, patch, unrefined, step = _generic_steps(*ops, target)
        if (
            full < unrefined
            and (patch is not None) == (want == "patch")
            and (want != "after-step" or step)
        ):
            break
    else:
        raise AssertionError(f"no seed shows {want!r}")
    _, (count, _, _) = _assert_statistics_equal(*ops, target)
    assert count == full
    limit = "SUSPECTS_MAX" if target.guarantee == "native" else "REFINE_ENTRIES"
    # REFINE_ENTRIES = 5: the native form sums an even sample of the suspects (the C++ step's
    # ranks and sampled entries), the strict one stops at more than 5
    cases = (("REFINE_STEPS", 0), (limit, 0), ("REFINE_STEPS", 1), ("REFINE_ENTRIES", 5))
    for name, value in cases:
        with monkeypatch.context() as mp:
            mp.setattr(refinement, name, value)
            if name == "SUSPECTS_MAX":  # the C++ step holds no suspect: it takes them all
                pre = amx.ozaki2_prescale(*ops, "accurate")
                assert amx.ozaki2_certificate(*ops, pre, target)[0] == full
            else:
                _assert_statistics_equal(*ops, target)


@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize(
    "target", [Target(24), Target(24, "native"), Target(53, "native")], ids=str
)
def test_host_statistics_read_float32_parts_as_their_float64_copies(cplx, target, monkeypatch):
    """narrow_statistics: the line scan, the prescale (bound operands, sums, F) and the
    certificate (count, beyond, patch: its exact passes and the refinement's sampled sums read
    the operands) on float32 parts, read as they are, equal the same on their float64 copies;
    zero, tiny and subnormal lines included, and the float32 parts of complex64 (strided views)."""
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    for seed in range(6):
        m, k, n = 40, 500, 30
        dt = "complex64" if cplx else "float32"
        a = phi_matrix((m, k), 1, dt, seed=seed)
        b = phi_matrix((k, n), 1, dt, seed=seed + 50)
        a[3] = 0
        a[5] *= np.float32(2.0**-130)  # subnormal in float32
        b[:, 4] *= np.float32(2.0**-100)
        ops32 = (a.real, a.imag, b.real, b.imag) if cplx else (a, None, b, None)
        ops64 = tuple(None if x is None else x.astype(np.float64) for x in ops32)
        assert all(x is None or x.dtype == np.float32 for x in ops32)
        scan32, scan64 = amx.line_scan(*ops32), amx.line_scan(*ops64)
        assert scan32[0] == scan64[0]
        assert all(np.array_equal(x, y) for x, y in zip(scan32[1], scan64[1]))
        pre32 = amx.ozaki2_prescale(*ops32, "accurate", exponents=scan32[1])
        pre64 = amx.ozaki2_prescale(*ops64, "accurate", exponents=scan64[1])
        for got, want in zip(pre32, pre64):
            assert got.dtype == want.dtype and np.array_equal(got, want)
        assert np.array_equal(pre32.lower, pre64.lower)
        for (x1, x2), (y1, y2) in zip(pre32.line_sums, pre64.line_sums):
            assert np.array_equal(x1, y1) and np.array_equal(x2, y2)
        got = amx.ozaki2_certificate(*ops32, pre32, target)
        want = amx.ozaki2_certificate(*ops64, pre64, target)
        assert got[0] == want[0] and np.array_equal(got[1], want[1])
        # the second pass's operands (A's rows, B's columns): float32 read as they are
        ea = np.arange(m, dtype=np.int64) % 7 - 3  # any line exponents
        eb = np.arange(n, dtype=np.int64) % 5 - 2
        t32 = None if not cplx else ops32[3].T
        t64 = None if not cplx else ops64[3].T
        for bf16 in (False, True):
            for g, w in (
                (_amx.ozaki2_cert_operand(ops32[0], ea, True, ops32[1], bf16=bf16),
                 _amx.ozaki2_cert_operand(ops64[0], ea, True, ops64[1], bf16=bf16)),
                (_amx.ozaki2_cert_operand(ops32[2].T, eb, False, t32, bf16=bf16),
                 _amx.ozaki2_cert_operand(ops64[2].T, eb, False, t64, bf16=bf16)),
            ):  # fmt: skip
                assert g[0].dtype == w[0].dtype == (np.uint16 if bf16 else np.float32)
                assert np.array_equal(g[0], w[0]) and np.array_equal(g[1], w[1])
        assert (got[2] is None) == (want[2] is None)
        assert got[2] is None or np.array_equal(got[2], want[2])


def test_host_stages_refuse_float32_with_a_float64_imaginary_part():
    """The C++ stages read float32 parts as they are; a float64 imaginary part beside a float32
    real part is refused (narrowing it would lose its range), never cast."""
    x = np.zeros((3, 4), np.float32)
    y = np.full((3, 4), 1e-300)
    y[1] = 1e300
    for call in (
        lambda: _amx.line_exponents(x, y, True),
        lambda: _amx.ozaki2_bound_operand(x, True, y),
        lambda: _amx.ozaki2_cert_operand(x, np.zeros(3, np.int64), True, y),
        lambda: _amx.ozaki2_pack(x, x.T.copy(), np.zeros(3, np.int32), np.zeros(3, np.int32), 4,
                                 y, y.T.copy()),
    ):  # fmt: skip
        with pytest.raises(ValueError, match="dtype"):
            call()
    # float64 throughout: the line exponents of the pair
    got = _amx.line_exponents(x.astype(np.float64), y, True)
    assert got.tolist() == [-997, 996, -997]


@pytest.mark.parametrize("cplx", [False, True])
def test_host_certificate_exact_step(cplx, monkeypatch):
    """Inputs where the exact step (the C++ pass at threshold 1 with the exact line factors)
    takes a count off the bisection's: the generic count and mask, for both forms."""
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    found = set()
    for seed in range(12):
        ops = _phi_operands(cplx, seed, (20, 64, 20))
        for target in (Target(53), Target(53, "native")):
            if target.guarantee not in found and _generic_steps(*ops, target)[3]:
                _assert_statistics_equal(*ops, target)
                found.add(target.guarantee)
    assert found == {"strict", "native"}


@pytest.mark.parametrize("case", ["spanning", "spanning-complex", "phi4"])
@pytest.mark.parametrize("guarantee", ["strict", "native"])
@pytest.mark.parametrize("bits", [24, 53, 70])
def test_host_certificate_gemm_fallback(case, bits, guarantee, monkeypatch, rng):
    """Inputs where the bound GEMM F alone leaves entries beyond every count (checked on the
    generic code): amx.ozaki2_certificate runs the float32 GEMM once (the fallback) and its
    count and mask equal certificate.ozaki2_moduli_needed's."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import certificate
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    if case == "phi4":
        a = phi_matrix((41, 300), 4.0, "float64", seed=61)
        b = phi_matrix((300, 27), 4.0, "float64", seed=62)
    else:
        a, b = _spanning_inputs(rng, case.endswith("complex"))
    ar, br = np.real(a), np.real(b)
    ai, bi = (np.imag(a), np.imag(b)) if np.iscomplexobj(a) else (None, None)
    calls = []
    real = amx.native_matmul
    monkeypatch.setattr(amx, "native_matmul", lambda x, y: calls.append(1) or real(x, y))
    target = Target(bits, guarantee)
    pre, (_, beyond, _) = _assert_statistics_equal(ar, ai, br, bi, target)
    assert len(calls) == 1
    # the fallback was needed: the F bound alone (the certificate's first pass) leaves more beyond
    cplx = ai is not None
    k = ar.shape[-1]
    cc = certificate.cert_constants(k, target, cplx)
    _, na, nb = certificate.normalized(xp, ar, ai, br, bi, cc.norm)
    R = cc.cR * certificate.bound_lower(xp, pre.lower, cplx, pre.mixed)
    beyond_f = certificate.ozaki2_needed(xp, cc, R, na, nb, pre[2], pre[3]) == certificate.BEYOND
    assert beyond_f.any() and beyond_f.sum() > beyond.sum()
    assert not (beyond & ~beyond_f).any()


@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("guarantee", ["strict", "native"])
@pytest.mark.parametrize("bits", [24, 53])
def test_host_certificate_bf16_fallback(cplx, bits, guarantee, monkeypatch):
    """From SMALL_BOUND_WORK multiply-adds on, the certificate's second pass takes its lower
    bound of |A||B| from one BF16 tile GEMM of the magnitudes (ozaki2_cert_operand's bfloat16
    bits, as magnitude_lower_matmul's bf16_lower), not from numpy's float32 GEMM: the generic
    certificate with this backend's magnitude_lower_matmul gives the same count, mask and patch."""
    import dataclasses

    from emulinalg._stages import stages
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    monkeypatch.setattr(amx, "EMULATE", True)
    dt = "complex128" if cplx else "float64"
    a = phi_matrix((72, 300), 4.0, dt, seed=63)
    b = phi_matrix((300, 64), 4.0, dt, seed=64)
    assert a.shape[0] * a.shape[1] * b.shape[1] >= amx.SMALL_BOUND_WORK
    ar, br = np.ascontiguousarray(np.real(a)), np.ascontiguousarray(np.real(b))
    ai = np.ascontiguousarray(np.imag(a)) if cplx else None
    bi = np.ascontiguousarray(np.imag(b)) if cplx else None
    calls = []
    real_gemm = _amx.gemm_bf16bf16f32
    monkeypatch.setattr(
        _amx, "gemm_bf16bf16f32", lambda *x, **y: calls.append(1) or real_gemm(*x, **y)
    )
    monkeypatch.setattr(amx, "native_matmul", lambda x, y: pytest.fail("float32 GEMM fallback"))
    hooked = dataclasses.replace(stages(npb), magnitude_lower_matmul=amx.magnitude_lower_matmul)
    pre = amx.ozaki2_prescale(ar, ai, br, bi, "accurate")
    got = amx.ozaki2_certificate(ar, ai, br, bi, pre, Target(bits, guarantee))
    assert calls, "the inputs must need the second pass"
    calls.clear()
    _assert_statistics_equal(ar, ai, br, bi, Target(bits, guarantee), reference=hooked)
    assert got[0] is not None


@pytest.mark.parametrize("case", ["phi", "phi-complex", "spanning", "spanning-complex"])
@pytest.mark.parametrize("bits", [24, 53])
def test_host_certificate_runs_of_64_columns(case, bits, monkeypatch, rng):
    """n = 150 columns: cert_entries' vectorized runs of 64 (on F alone, and with the float32
    GEMM's sums for the spanning inputs) and its scalar tail give the certificate's count and
    mask."""
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    cplx = case.endswith("complex")
    if case.startswith("phi"):
        dt = "complex128" if cplx else "float64"
        a = phi_matrix((33, 200), 1.0, dt, seed=91)
        b = phi_matrix((200, 150), 1.0, dt, seed=92)
    else:
        a, b = _spanning_inputs(rng, cplx, n=150)
    ar, br = np.ascontiguousarray(np.real(a)), np.ascontiguousarray(np.real(b))
    ai = np.ascontiguousarray(np.imag(a)) if cplx else None
    bi = np.ascontiguousarray(np.imag(b)) if cplx else None
    _assert_statistics_equal(ar, ai, br, bi, bits)


def test_host_certificate_without_fallback_reads_no_operand(monkeypatch):
    """Where F certifies every entry, the certificate runs no GEMM and no operand pass (the l1
    norms come from the prescale's pass)."""
    from emulinalg import _amx
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    a = phi_matrix((37, 150), 1.0, "float64", seed=41)
    b = phi_matrix((150, 29), 1.0, "float64", seed=42)
    calls = []
    monkeypatch.setattr(amx, "native_matmul", lambda *x: calls.append("gemm"))
    real = _amx.ozaki2_cert_operand
    monkeypatch.setattr(_amx, "ozaki2_cert_operand", lambda *x: calls.append("op") or real(*x))
    _, (count, beyond, _) = _assert_statistics_equal(a, None, b, None, 53)
    assert count is not None and not beyond.any() and calls == []


def test_host_bound_max_equals_bound_upper(rng):
    """ozaki2_bound_max: the row and column maxima of scaling.bound_upper over F, / 4, exactly
    (single rows and columns included: the per-thread column maxima are merged)."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import scaling

    for m, n in ((1, 1), (1, 300), (300, 1), (257, 131)):
        F = rng.integers(0, 2**30, (m, n)).astype(np.int32)
        ra, nza = rng.integers(0, 10**6, m), rng.integers(0, 3000, m)
        cb, nzb = rng.integers(0, 10**6, n), rng.integers(0, 3000, n)
        nza[0] = 0  # a zero line
        for cplx in (False, True):
            e, f = _amx.ozaki2_bound_max(F, ra, nza, cb, nzb, cplx)
            U = scaling.bound_upper(
                xp, F.astype(np.float64), *(v.astype(np.float64) for v in (ra, nza, cb, nzb)), cplx
            )
            assert e.dtype == f.dtype == np.float64
            assert np.array_equal(e, U.max(axis=1) * 0.25)
            assert np.array_equal(f, U.max(axis=0) * 0.25)


@pytest.mark.parametrize(("dtype", "C"), [("float64", 70), ("float32", 70), ("float64", 150)])
def test_host_bound_operand_line_terms(rng, dtype, C):
    """ozaki2_bound_operand's operand, sums and nonzero counts equal scaling.bound_operand's;
    its l1 and sq are the sums of the normalized x = |re| + |im| and of x**2 (certificate.
    line_norm's, before its factor and root) in 8 partial sums per line, the same in either
    memory layout (lines across memory: runs of rows, 8 lines at a time, then the tail past the
    last 8 entries). float32 operands are read as they are."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import scaling

    a = rng.standard_normal((13, C)) * np.exp2(rng.integers(-60, 60, (13, C)))
    ai = rng.standard_normal((13, C))
    a[2] = 0
    ai[2, 5] = -0.0
    a[4, 3:9] = 5e-324 if dtype == "float64" else 1e-45
    a, ai = (x.astype(dtype) for x in (a, ai))
    for im in (None, ai):
        cplx = im is not None
        s, bound, sums, nz, l1, mixed, sq = _amx.ozaki2_bound_operand(a, True, im)
        a, ai = a.astype(np.float64), ai.astype(np.float64)  # exact: the references widen them
        im = None if im is None else ai
        ea = scaling.max_exponent(xp, a, im, axis=-1)
        assert s.dtype == np.int64 and np.array_equal(s, 5 - int(cplx) - ea)
        want, wsums, wnz = scaling.bound_operand(xp, a, im, s, axis=-1)
        assert bound.dtype == np.int8 and np.array_equal(bound, want)
        assert sums.dtype == np.int64 and np.array_equal(sums, wsums)
        assert nz.dtype == np.int64 and np.array_equal(nz, wnz)
        if cplx:
            assert np.array_equal(mixed, scaling.mixed_lines(xp, a, im, axis=-1))
        x = np.abs(np.ldexp(a, -ea[:, None]))
        if cplx:
            x = x + np.abs(np.ldexp(im, -ea[:, None]))
        # 8 partial sums per line: entry c in lane c % 8, the tail past 64 in lane 0, then the
        # lanes in order (any order is covered: certificate_plan.norms_from_sums)
        lanes, lanes2 = np.zeros((8, 13)), np.zeros((8, 13))
        for c in range(C):
            j = c % 8 if c < C // 8 * 8 else 0
            lanes[j] = lanes[j] + x[:, c]
            lanes2[j] = lanes2[j] + x[:, c] * x[:, c]
        seq, seq2 = np.zeros(13), np.zeros(13)
        for j in range(8):
            seq, seq2 = seq + lanes[j], seq2 + lanes2[j]
        assert np.array_equal(l1, seq) and np.array_equal(sq, seq2)
        for r in range(13):  # within the recursive sum's bound of the exact sums
            exact, exact2 = math.fsum(x[r]), math.fsum(x[r] * x[r])  # of the same rounded squares
            assert abs(l1[r] - exact) <= C * 2.0**-53 * exact
            assert abs(sq[r] - exact2) <= C * 2.0**-53 * exact2
        # lines across memory (the other loop order) and the (C, R) layout: same values
        t, bound_t, *terms = _amx.ozaki2_bound_operand(
            np.asfortranarray(a.astype(dtype)), False,
            None if im is None else np.asfortranarray(im.astype(dtype)),
        )  # fmt: skip
        a, ai = a.astype(dtype), ai.astype(dtype)
        assert np.array_equal(t, s) and np.array_equal(bound_t, bound.T)
        for got, w in zip(terms, (sums, nz, l1, mixed, sq)):
            assert np.array_equal(got, w)


def test_host_bound_operand_takes_the_scanned_exponents(rng):
    """With line_exponents' exponents given (the engine's line scan), ozaki2_bound_operand skips
    its own pass for each line's largest magnitude and returns the same shifts, operand and
    sums, real and complex, in both loop orders (zero, subnormal and huge lines; more lines
    than one block of 16, a ragged last block); exponents of the wrong size or of a line with
    NaN/Inf are refused."""
    a = rng.standard_normal((37, 70)) * np.exp2(rng.integers(-60, 60, (37, 70)))
    ai = rng.standard_normal((37, 70))
    a[2] = 0
    ai[2] = 0
    a[4, 3:9] = 5e-324
    a[30] *= 2.0**900
    for im in (None, ai):
        for x, y, rows in ((a, im, True), (np.asfortranarray(a), None if im is None else
                                            np.asfortranarray(im), True),
                           (a.T, None if im is None else im.T, False)):  # fmt: skip
            ex = _amx.line_exponents(x, y, True)
            want = _amx.ozaki2_bound_operand(x, rows, y)
            got = _amx.ozaki2_bound_operand(x, rows, y, ex)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and np.array_equal(g, w)
    with pytest.raises(ValueError, match="one per line"):
        _amx.ozaki2_bound_operand(a, True, None, np.zeros(36, np.int32))
    bad = _amx.line_exponents(a, None, True)
    bad[3] = 1024
    with pytest.raises(ValueError, match="NaN or Inf"):
        _amx.ozaki2_bound_operand(a, True, None, bad)


@pytest.mark.parametrize("parts", [False, True], ids=["", "parts_lower"])
@pytest.mark.parametrize("case", ["phi", "imaginary", "wide"])
@pytest.mark.parametrize("bits", [24, 53])
def test_host_statistics_complex_equal_the_generic_ones(case, bits, parts, monkeypatch, rng):
    """The C++ statistics on complex operands (max(|re|, |im|) exponents and magnitudes,
    floor(|re|) + floor(|im|) bounds, |re| + |im| norms): prescale identical, certificate
    decisions equal to certificate.ozaki2_moduli_needed's."""
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    a = phi_matrix((31, 90), 1.0, "complex128", seed=101)
    b = phi_matrix((90, 19), 1.0, "complex128", seed=102)
    if case == "imaginary":
        b = 1j * b.imag
    elif case == "wide":
        a = a * np.exp2(rng.integers(-300, 300, (31, 1)))
        a[4] = 0
    _assert_statistics_equal(np.real(a)[::-1], np.imag(a)[::-1], np.real(b), np.imag(b), bits,
                             parts=parts)  # fmt: skip


def test_host_cert_entries_refuses_thresholds_it_cannot_count():
    """The vectorized certificate counts failing thresholds, which equals the first passing
    one only for finite, positive, non-increasing thresholds: anything else is refused."""
    F = np.ones((2, 70), np.int32)
    line = (np.ones(2), np.ones(2), np.ones(70), np.ones(70))
    mix = (np.zeros(2, np.int64), np.zeros(70, np.int64))
    for thr in ([1.0, 0.0], [0.5, 1.0], [np.inf, 1.0], [np.nan]):
        with pytest.raises(ValueError, match="non-increasing"):
            _amx.ozaki2_cert_entries(F, 0, *line, 1.0, 0.0, 1.0, 1.0, np.array(thr), 2, *mix, 0)
    need, *_ = _amx.ozaki2_cert_entries(F, 0, *line, 1.0, 0.0, 1.0, 1.0, np.array([1.0, 0.5]),
                                        2, *mix, 0)  # fmt: skip
    assert need.shape == (2, 70)


@pytest.mark.parametrize("scale", [2.0**-2, 2.0**-40], ids=["above", "below"])
@pytest.mark.parametrize("n", [64, 70, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cert_entries_exact_needs_match_a_pass_per_count(seed, n, scale):
    """With every count's exact line factors, ozaki2_cert_entries' one pass gives each entry's
    exact need: for every count c, the entries whose exact need exceeds c are exactly those the
    pass of that count alone (threshold 1, its factors: the exact step's own test) fails, and
    the histogram counts the certifiable ones; the counts themselves are numpy's test of every
    threshold (the pass starts each run's count where the last run's ended: neighbouring entries
    of very different needs here). Random factors (non-increasing in the count but unrelated to
    the bound's thresholds) put exact needs far below and above the bound's too."""
    from emulinalg.algorithm import certificate

    rng = np.random.default_rng(seed)
    m, base = 9, certificate.MIN_MODULI
    th = np.array(certificate.THRESHOLDS)
    nth = th.shape[0]
    F = rng.integers(0, 1 << 20, (m, n)).astype(np.int32)
    F[0, : n // 2] = 0  # zero lower bounds: beyond every count
    na, nb = rng.random(m) * 4, rng.random(n) * 4
    nb[-1] = 0.0
    alpha = rng.random(m) * np.exp2(rng.integers(-8, 8, m))
    beta = rng.random(n) * np.exp2(rng.integers(-8, 8, n))
    mix = (np.zeros(m, np.int64), (rng.random(n) < 0.3).astype(np.int64))

    def table(lines, scale):  # non-increasing in the count per line, some lines all zero
        x = np.sort(rng.random((nth, lines)) * np.exp2(rng.integers(-40, 0, (nth, lines))), axis=0)
        x = x[::-1] * scale
        x[:, 0] = 0.0
        return np.ascontiguousarray(x)

    P, Q = table(m, scale), table(n, scale)
    terms = (1.0, 0.0, 2.0**-20, 8.0)  # factor, abs_term, cR, c4
    need, _count, _at, out, xneed, xhist = _amx.ozaki2_cert_entries(
        F, 12, na, alpha, nb, beta, *terms, th, base, *mix, 12, None, P, Q
    )
    need0, *_ = _amx.ozaki2_cert_entries(F, 12, na, alpha, nb, beta, *terms, th, base, *mix, 12)
    np.testing.assert_array_equal(need, need0)
    _, _, cR, c4 = terms  # numpy's test of each threshold, cert_test's operation order
    R = cR * (F * 2.0**-12)
    G2 = 2.0 * (alpha[:, None] * nb[None, :] + beta[None, :] * na[:, None])
    Qt = (c4 * alpha)[:, None] * beta[None, :]
    passes = np.stack([t * (G2 + t * Qt) <= R for t in th])
    first = np.where(passes.any(axis=0), passes.argmax(axis=0), nth)
    np.testing.assert_array_equal(need, base + first)
    assert len(np.unique(first)) > 3
    certifiable = need != base + nth
    assert out == int(np.count_nonzero(~certifiable)) > 0
    np.testing.assert_array_equal(xneed[~certifiable], 255)
    x = xneed[certifiable].astype(np.int64) - base
    np.testing.assert_array_equal(xhist, np.bincount(x, minlength=nth + 1))
    for idx in range(nth):
        codes, *_ = _amx.ozaki2_cert_entries(F, 12, na, P[idx], nb, Q[idx], *terms,
                                             np.array([1.0]), 0, *mix, 12)  # fmt: skip
        np.testing.assert_array_equal((xneed > base + idx)[certifiable],
                                      (codes == 1)[certifiable])  # fmt: skip
    q = need[certifiable].astype(np.int64) - base
    assert np.count_nonzero((x < q - 1) | (x > q)) > 0  # far from the bound's index


def test_cert_entries_refuses_exact_factors_it_cannot_search():
    """Exact factor tables must have the thresholds' count of rows, one column per line, be
    non-negative and non-increasing in the count: else ValueError (the search needs that)."""
    m, n, nth = 2, 3, 3
    F = np.ones((m, n), np.int32)
    line = (np.ones(m), np.ones(m), np.ones(n), np.ones(n))
    mix = (np.zeros(m, np.int64), np.zeros(n, np.int64))
    thr = np.array([1.0, 0.5, 0.25])
    good = (np.ones((nth, m)), np.ones((nth, n)))

    def call(P, Q):
        return _amx.ozaki2_cert_entries(F, 0, *line, 1.0, 0.0, 1.0, 1.0, thr, 2, *mix, 0, None,
                                        P, Q)  # fmt: skip

    assert len(call(*good)) == 6
    rising = np.ones((nth, m))
    rising[2, 1] = 2.0
    for P, Q in ((rising, good[1]), (good[0], -good[1]), (good[0][:2], good[1]),
                 (good[0], np.full((nth, n), np.nan)), (good[0], np.ones((nth, n + 1)))):
        with pytest.raises(ValueError):
            call(P, Q)
    with pytest.raises(ValueError, match="both"):
        call(good[0], None)
    with pytest.raises(ValueError, match="below 255"):
        _amx.ozaki2_cert_entries(F, 0, *line, 1.0, 0.0, 1.0, 1.0, thr, 252, *mix, 0, None, *good)


def test_refine_step_rejects_bad_arguments():
    """ozaki2_refine_step raises ValueError (no crash) for operands or terms that do not fit."""
    amx = _amx
    if not hasattr(amx, "ozaki2_refine_step"):
        pytest.skip("emulinalg._amx is not built")
    m, k, n = 3, 5, 4
    a, b = np.ones((m, k)), np.ones((k, n))
    i64 = lambda size: np.zeros(size, dtype=np.int64)  # noqa: E731
    f64 = lambda size: np.ones(size)  # noqa: E731
    u8 = np.zeros((m, n), dtype=np.uint8)
    F = np.zeros((m, n), dtype=np.int32)

    def call(**kw):
        args = dict(ar=a, ai=None, br=b, bi=None, shift_a=i64(m), shift_b=i64(n), need=u8,
                    beyond=21, fails=u8, level=0, F=F, c=None, fexp=12, fexp_mixed=12, mixa=i64(m),
                    mixb=i64(n), lower_terms=(1.0, 0.0, 1.0, 1.0), na=f64(m), p=f64(m),
                    nb=f64(n), q=f64(n), native=True, refine_terms=(1.0, 0.0, 1.0),
                    theta_cap=2.0, limit=10, sample=4, patch_cap=2)  # fmt: skip
        args.update(kw)
        return amx.ozaki2_refine_step(**args)

    assert tuple(call()[:2]) == (0, -1)  # no suspect: nothing tested
    for bad in (dict(br=np.ones((k + 1, n))), dict(ai=a), dict(need=u8[:2]), dict(p=f64(m + 1)),
                dict(fexp=99), dict(sample=0), dict(lower_terms=(1.0,)), dict(beyond=300),
                dict(level=255), dict(level=-1),
                dict(c=np.zeros((m, n + 1), np.float32))):  # fmt: skip
        with pytest.raises(ValueError):
            call(**bad)


@pytest.mark.parametrize("cap", [0, 3, 10**6])
def test_refine_step_stops_testing_past_the_patch_cap(cap):
    """Where more suspects fail than the patch takes, ozaki2_refine_step may stop testing (the
    step's decision is the same: the count stays); it reports more than patch_cap failures, and
    below the cap every failure with the first ones as the patch. Suspects: codes above level,
    not beyond; every one fails here (cR = 0)."""
    m, k, n = 200, 8, 33
    rng = np.random.default_rng(5)
    a, b = rng.random((m, k)), rng.random((k, n))
    need = np.full((m, n), 20, np.uint8)
    need[0] = 21  # beyond
    codes = rng.integers(15, 19, (m, n)).astype(np.uint8)  # exact needs: fail 16 above 16
    sus_mask = (codes > 16) & (need != 21)
    ones = lambda size: np.ones(size)  # noqa: E731
    sus, failing, patch = _amx.ozaki2_refine_step(
        a, None, b, None, np.zeros(m, np.int64), np.zeros(n, np.int64), need, 21, codes, 16,
        np.ones((m, n), np.int32), None, 12, 12, np.zeros(m, np.int64), np.zeros(n, np.int64),
        (1.0, 0.0, 0.0, 1.0), ones(m), ones(m), ones(n), ones(n), True, (1.0, 0.0, 1.0), 4.0,
        m * n, 64, cap)  # fmt: skip
    total = int(np.count_nonzero(sus_mask))
    assert sus == total
    if cap >= total:
        assert failing == total
        np.testing.assert_array_equal(patch, np.flatnonzero(sus_mask))
    else:
        assert cap < failing <= total
        assert patch.shape[0] <= cap


@pytest.mark.parametrize("tiles", [True, False], ids=["tiles", "small-products"])
@pytest.mark.parametrize("shape", [(7, 300, 5), (2, 33, 64, 17)])
def test_magnitude_lower_matmul_bounds_the_product(shape, tiles, monkeypatch, rng):
    """amx.magnitude_lower_matmul (bf16 truncation, the BF16 tile GEMM on the tile model) is a
    lower bound of the exact product of non-negative operands (entries <= 2, some tiny or zero)
    within the bf16 truncation's loss, and as certificate.signed_estimate it stays within
    signed_error of operands of either sign; the exact products by python-flint."""
    from emulinalg.algorithm import certificate
    from emulinalg.backends import amx

    if _amx is None or not hasattr(_amx, "bf16_lower"):
        pytest.skip("emulinalg._amx is not built")
    monkeypatch.setattr(amx, "EMULATE", True)
    calls = []
    real = _amx.gemm_bf16bf16f32
    monkeypatch.setattr(
        _amx, "gemm_bf16bf16f32", lambda *a, **kw: calls.append(a) or real(*a, **kw)
    )
    monkeypatch.setattr(amx, "SMALL_BOUND_WORK", 0 if tiles else 1 << 30)
    *batch, m, k, n = shape

    def operand(*dims):
        x = rng.random(tuple(batch) + dims) * 2.0 * np.exp2(-rng.integers(0, 8, dims))
        x[..., 0, :] = 0.0
        x.flat[1] = 2.0**-140
        return x

    xa, xb = operand(m, k), operand(k, n)

    def exact(a, b):  # the exact sums, rounded once to float64 (Fractions)
        from fractions import Fraction

        a2, b2 = a.reshape(-1, m, k), b.reshape(-1, k, n)
        out = np.empty((a2.shape[0], m, n))
        for t in range(a2.shape[0]):
            for i in range(m):
                row = [Fraction(float(v)) for v in a2[t, i]]
                for j in range(n):
                    col = b2[t, :, j]
                    out[t, i, j] = float(sum(x * Fraction(float(y)) for x, y in zip(row, col)))
        return out.reshape(tuple(batch) + (m, n))

    ab = exact(xa, xb)
    lo = amx.magnitude_lower_matmul(xa, xb)
    assert lo.shape == ab.shape and lo.dtype == np.float64
    assert np.all(lo <= ab * (1 - 2.0**-53))  # below the exact sums (their rounding removed)
    assert np.all(lo >= ab * (1 - 2.0**-7) ** 2 * (1 - (k + 2) * 2.0**-22) - 1e-30)
    signs = np.where(rng.random(xa.shape) < 0.5, -1.0, 1.0)
    sa = xa * signs
    est = certificate.signed_estimate(np, amx, sa, xb)
    bound = certificate.signed_error(k) * ab + certificate.lower_abs(k)
    assert np.all(np.abs(exact(sa, xb) - est) <= bound)
    assert bool(calls) == tiles  # the BF16 tile GEMM, or numpy's for small products


@pytest.mark.parametrize("order", ["C", "F", "view"])
def test_bf16_lower_truncates_toward_zero(order, rng):
    """_amx.bf16_lower's bits are numpy's float32 truncation toward zero of each float64 entry
    (the cast, stepped toward zero where it rounded away), high half: signed zeros, float32
    subnormals and underflow, overflow to the largest float, +-inf, NaN kept a NaN; rows whose
    length is no multiple of the vector's 8 entries; C and Fortran order and a strided view."""
    x = rng.standard_normal((5, 203)) * np.exp2(rng.integers(-170, 140, (5, 203)))
    x[0, :14] = [0.0, -0.0, 2.0**-149, 2.0**-150, -(2.0**-149) * 1.5, 2.0**-126 * 0.999, 3.4e38,
                 3.5e38, -1e300, np.inf, -np.inf, 1.0 + 2.0**-30, -1.9999999, 5e-324]  # fmt: skip
    x[1, 3] = np.nan
    if order == "F":
        x = np.asfortranarray(x)
    elif order == "view":
        x = np.ascontiguousarray(np.repeat(x, 2, axis=1))[:, ::2]
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)
    f = np.where(np.abs(f.astype(np.float64)) > np.abs(x), np.nextafter(f, np.float32(0)), f)
    want = (f.view(np.uint32) >> 16).astype(np.uint16)
    got = _amx.bf16_lower(x)
    nan = np.isnan(x)
    assert got.shape == x.shape and got.dtype == np.uint16
    assert np.array_equal(got[~nan], want[~nan])
    assert np.all((got[nan] & 0x7F80) == 0x7F80) and np.all((got[nan] & 0x7F) != 0)
