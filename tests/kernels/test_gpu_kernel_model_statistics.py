"""CPU checks of the cupy backend's statistics kernels (``src_cuda/ozaki2_stats.cu``: the
accurate-mode prescale and the certificate) through their numpy model.

``gpu_kernel_model`` gives ``scaling.ozaki2_prescale``'s values and
``certificate.ozaki2_moduli_needed``'s count, mask and patch bit for bit: the float32 GEMM
fallback, the refinement, the exact step's line factors, the line terms.
"""

from __future__ import annotations

import itertools

import gpu_kernel_model as model
import numpy as np
import pytest
from _helpers import parts_lower_of
from _kernel_model_helpers import (
    REFINE_CASES,
    TARGETS,
    _generic_cert_backend,
    _refined_case,
    _same,
    _same_certificate,
    _same_prescale,
    _stat_operands,
)

from emulinalg.algorithm import certificate, certificate_plan, refinement, scaling
from emulinalg.algorithm.certificate import Target
from emulinalg.algorithm.moduli import crt_constants
from emulinalg.algorithm.scaling import ozaki2_prescale
from emulinalg.backends import numpy as npb

STAT_CASES = [  # ((batch, m, k, n), phi)
    (((), 1, 1, 1), 1),
    (((), 1, 13, 1), 0.5),
    (((), 7, 33, 5), 1),
    (((), 9, 19, 17), 4),
    (((), 6, 1, 9), 1),  # k = 1
    (((3,), 5, 21, 6), 0.5),
    (((2, 2), 4, 10, 4), 4),
    (((), 8, 700, 7), 1),  # several chunks of columns (chunk 32 below)
]


def test_exponent_and_scale_helpers():
    rng = np.random.default_rng(2)
    x = np.ldexp(rng.uniform(-1, 1, 500), rng.integers(-1100, 1024, 500))
    x[:6] = [0.0, -0.0, 5e-324, 2.0**-1022, np.nextafter(2.0**-1022, 0), 1.7e308]
    e = model.exponent_of(x)
    want = np.where(x == 0, model.INT_MIN, np.frexp(x)[1] - 1)
    assert np.array_equal(e, want)
    p = rng.integers(-1074, 1100, 500)
    v = np.ldexp(rng.uniform(0, 1, 500), np.minimum(-p + 6, 1023))
    assert _same(model.scale2(v, p), np.ldexp(v, p))


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("case", STAT_CASES, ids=str)
def test_model_prescale_equals_generic(case, cplx):
    shape, phi = case
    ar, ai, br, bi = _stat_operands(shape, phi, cplx, seed=13)
    want = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    _same_prescale(model.ozaki2_prescale(ar, ai, br, bi, k_block=16), want)


@pytest.mark.parametrize("target", TARGETS, ids=str)
@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("case", STAT_CASES, ids=str)
def test_model_certificate_equals_generic(case, cplx, target):
    shape, phi = case
    ar, ai, br, bi = _stat_operands(shape, phi, cplx, seed=17 + target.bits)
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    be = _generic_cert_backend(model.magnitude_lower_matmul)
    want = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)
    mpre = model.ozaki2_prescale(ar, ai, br, bi, k_block=16)
    got = model.ozaki2_certificate(ar, ai, br, bi, mpre, target, chunk=32)
    _same_certificate(got, want)


def test_model_certificate_parts_lower_equals_generic():
    """A complex product's part-check bound (``Prescale.parts_lower``) in the first pass and,
    with it, in the bf16 GEMM's pass (rows spanning 2**+-40 leave entries beyond F's bound): the
    model's decisions are the generic code's, and the bound takes counts off."""
    moved = 0
    cases = [(STAT_CASES[2], 0), (STAT_CASES[5], 0), (STAT_CASES[7], 0), ((((), 40, 500, 30), 1),
             0), ((((), 6, 40, 5), 1), 40)]  # fmt: skip
    for (case, spread), target in itertools.product(cases, TARGETS):
        shape, phi = case
        ar, ai, br, bi = _stat_operands(shape, phi, True, seed=31 + target.bits)
        if spread:
            rng = np.random.default_rng(5)
            for x in (ar, ai):
                x *= np.ldexp(1.0, rng.integers(-spread, spread, x.shape))
        be = _generic_cert_backend(model.magnitude_lower_matmul)
        pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
        without = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)
        pre.parts_lower = parts_lower_of(ar, ai, br, bi)
        want = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)
        mpre = model.ozaki2_prescale(ar, ai, br, bi, k_block=16)
        mpre.parts_lower = pre.parts_lower
        _same_certificate(model.ozaki2_certificate(ar, ai, br, bi, mpre, target, chunk=32), want)
        moved += repr(want) != repr(without)
    assert moved  # the bound decides somewhere


def test_model_certificate_gemm_fallback():
    """Rows spanning 2**+-40: the bound GEMM's lower bound (fixed point per line) leaves entries
    beyond every count, so the bf16 GEMM runs; the decisions equal the generic code's, and are
    better than the bound GEMM's alone."""
    rng = np.random.default_rng(4)
    ar = np.ldexp(rng.uniform(-1, 1, (6, 40)), rng.integers(-40, 40, (6, 40)))
    br = np.ldexp(rng.uniform(-1, 1, (40, 5)), rng.integers(-40, 40, (40, 5)))
    pre = ozaki2_prescale(np, npb.int_matmul, ar, None, br, None, "accurate")
    mpre = model.ozaki2_prescale(ar, None, br, None)
    be = _generic_cert_backend(model.magnitude_lower_matmul)
    for target in (Target(53), Target(53, "native")):
        cc = certificate.cert_constants(40, target)
        _, na, nb = certificate.normalized(np, ar, None, br, None, cc.norm)
        lam = certificate.bound_lower(np, pre.lower, False)
        need_f = certificate.ozaki2_needed(np, cc, cc.cR * lam, na, nb, pre[2], pre[3])
        beyond_f = need_f == certificate.BEYOND
        assert beyond_f.any()
        want = certificate.ozaki2_moduli_needed(np, be, ar, None, br, None, pre, target)
        assert want[1].sum() < beyond_f.sum()
        _same_certificate(model.ozaki2_certificate(ar, None, br, None, mpre, target), want)


@pytest.mark.parametrize("cplx,target,shape,want", REFINE_CASES, ids=str)
def test_refinement_lowers_the_count_and_is_certified(cplx, target, shape, want, monkeypatch):
    """The suspect refinement takes moduli off the bound GEMM's bound alone, the model takes
    the same count, mask and patch (also with one step, and with none), and, strict form, the
    count still certifies every entry but the patch's with the exact shifts and |A||B| (float64
    products of the magnitudes, line-normalized). (The native form tests its suspects against
    theta |A||B|: the generic decisions are the reference.)"""
    ar, ai, br, bi = _refined_case(cplx, target, shape, want)
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    be = _generic_cert_backend(model.magnitude_lower_matmul)
    mpre = model.ozaki2_prescale(ar, ai, br, bi)
    for steps in (0, 1, refinement.REFINE_STEPS):
        with monkeypatch.context() as mp:
            mp.setattr(refinement, "REFINE_STEPS", steps)
            want_ = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)
            _same_certificate(model.ozaki2_certificate(ar, ai, br, bi, mpre, target), want_)
        if steps == 0:
            count_f = want_[0]
    # the kernels take every suspect they rank, up to certificate_plan.CUDA_SUSPECTS_MAX
    if target.guarantee == "native":
        with monkeypatch.context() as mp:
            mp.setattr(refinement, "SUSPECTS_MAX", 0)
            _same_certificate(model.ozaki2_certificate(ar, ai, br, bi, mpre, target), want_)
            # ... and no more than the cap: at 1, what the generic step takes at SUSPECTS_MAX 1
            mp.setattr(certificate_plan, "CUDA_SUSPECTS_MAX", 1)
            capped = model.ozaki2_certificate(ar, ai, br, bi, mpre, target)
            mp.setattr(refinement, "SUSPECTS_MAX", 1)
            one = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)
            _same_certificate(capped, one)
            assert one[0] > want_[0]  # the cap binds: the step cannot take its suspects
    count, beyond, patch = want_
    assert count < count_f and not beyond.any() and (patch is not None) == (want == "patch")
    if target.guarantee == "native":
        return
    k = ar.shape[-1]
    cc = certificate.cert_constants(k, target, cplx)
    parts, na, nb = certificate.normalized(np, ar, ai, br, bi, cc.norm)
    mag = np.abs(parts[0] + 1j * parts[1]) if cplx else np.abs(parts[0])
    magb = np.abs(parts[2] + 1j * parts[3]) if cplx else np.abs(parts[2])
    R = cc.cR * (mag @ magb) * (1 - 2.0**-40)
    ok = certificate.exact_passes(np, cc, count, R, na, nb, pre[2], pre[3]).reshape(-1)
    if patch is not None:
        ok[patch] = True
    assert ok.all()


def test_refinement_skipped_when_too_many_suspects(monkeypatch):
    target = Target(24)
    ar, ai, br, bi = _refined_case(True, target, (40, 500, 30), "refines")
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    be = _generic_cert_backend(model.magnitude_lower_matmul)
    full = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)[0]
    monkeypatch.setattr(refinement, "REFINE_ENTRIES", 0)  # no suspect fits
    skipped = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)[0]
    assert skipped > full
    mpre = model.ozaki2_prescale(ar, ai, br, bi)
    assert model.ozaki2_certificate(ar, ai, br, bi, mpre, target)[0] == skipped


def test_model_exact_factors_equal_generic():
    """cert_exact_factors' shifts (from the exponents, one exact comparison) and factors equal
    certificate.exact_line_factors for every count and both guarantees, on line bounds at and next
    to the shifts' steps, zero (a zero line) and the extremes."""
    import array_api_compat.numpy as xnp

    from emulinalg.algorithm.moduli import MAX_MODULI, MIN_MODULI

    rng = np.random.default_rng(5)
    e = [0.0, 0.25, 0.5, 1.0, 3.75, 2.0**52, 2.0**60]
    e += list(rng.integers(1, 2**40, 200) * 0.25)
    for n in range(MIN_MODULI, MAX_MODULI + 1):
        q = crt_constants(n).Q_down
        for t in range(-25, 40):  # v 4**t == Q_down exactly, and its neighbours
            v = np.ldexp(q, -2 * t)
            if 0.25 <= v <= 2.0**60:
                e += [v, np.nextafter(v, 0), np.nextafter(v, np.inf)]
    e = np.array(e)
    for k, target, cplx in ((10, Target(53), False), (4000, Target(53), True),
                            (10**6, Target(24), False), (4000, Target(53, "native"), True),
                            (10**6, Target(24, "native"), False)):  # fmt: skip
        cc = certificate.cert_constants(k, target, cplx)
        q_down, f0 = model.exact_table(cc)
        for i, n in enumerate(range(MIN_MODULI, MAX_MODULI + 1)):
            want = certificate.exact_line_factors(xnp, cc, n, e, cc.scale)
            assert _same(model.exact_factors(e, q_down[i], f0[i]), want), (k, target, n)


def test_model_certificate_line_terms():
    """The l1 and l2 norms: the generic ones (certificate.line_norm) up to the order of the sums
    (both are upper bounds); the bf16 operands: those of the generic lower-bound hook."""
    ar, ai, br, bi = _stat_operands(((2,), 9, 1000, 7), 1, True, seed=3)
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    a = ar, ai
    s = pre[0]
    l1fac = certificate.cert_constants(1000).l1fac
    out, part = model.cert_operand(*a, s, 9, 1000, False, chunk=64)
    na, _ = model.cert_line_terms(part[None], l1fac, pre[2], 2.0**-4)  # its l1 sums only
    ea = np.expand_dims(5 - 1 - s, -1)
    arn, ain = np.ldexp(ar, -ea), np.ldexp(ai, -ea)
    want = certificate.line_norm(np, arn, ain, -1, "l1")
    assert np.allclose(na, want, rtol=1000 * 2.0**-52, atol=0)
    mag = np.maximum(np.abs(arn), np.abs(ain))
    assert np.array_equal(out, model.bf16_rz(mag))
    # the bound pass's partials (by chunks of 128 columns) and line terms, l1 and l2
    emax = model.line_max_exponent(ar, ai)
    s2, planes, sums, nz, mixed, part128 = model.bound_operand(ar, ai, emax, 9, 1008)
    assert np.array_equal(s2, s) and part128.shape == (2, 2, 8, 9)
    na128, _ = model.cert_line_terms(part128, l1fac, pre[2], 2.0**-4)
    assert np.allclose(na128, want, rtol=1000 * 2.0**-52, atol=0)
    want2 = certificate.line_norm(np, arn, ain, -1, "l2")
    na2, _ = model.cert_line_terms(part128, l1fac, pre[2], 2.0**-4, l2=True)
    assert np.allclose(na2, want2, rtol=1000 * 2.0**-52, atol=0)
    live = na128 > 0  # (a zero row: 0 both)
    assert (na2[live] < 0.9 * na128[live]).all()  # a different norm, not the l1 one
    gen, gsum, gnz = scaling.bound_operand(np, ar, ai, s, axis=-1)
    assert np.array_equal(planes[..., :1000], gen) and np.array_equal(sums, gsum)
    assert np.array_equal(nz, gnz)
    assert np.array_equal(mixed, scaling.mixed_lines(np, ar, ai, axis=-1))


@pytest.mark.parametrize("k", [1, 2, 31, 64, 1000])
def test_model_certificate_k_and_overflowing_bits(k):
    """All entries beyond (count None) at a level no count reaches; exact entries (k = 1)."""
    ar, ai, br, bi = _stat_operands(((), 5, k, 4), 1, False, seed=k)
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    mpre = model.ozaki2_prescale(ar, ai, br, bi)
    be = _generic_cert_backend(model.magnitude_lower_matmul)
    for bits in (10, 53, 120, 200):
        for target in (Target(bits), Target(bits, "native")):
            want = certificate.ozaki2_moduli_needed(np, be, ar, ai, br, bi, pre, target)
            _same_certificate(model.ozaki2_certificate(ar, ai, br, bi, mpre, target), want)
