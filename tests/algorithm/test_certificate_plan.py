"""``algorithm.certificate_plan`` against the reference it is taken from: every value a backend's
certificate kernels take equals what ``algorithm.certificate`` and ``algorithm.refinement``
compute, bit for bit."""

from __future__ import annotations

import math

import array_api_compat.numpy as xp
import numpy as np
import pytest

from emulinalg.algorithm import certificate, certificate_plan, refinement, scaling
from emulinalg.algorithm.certificate import Target
from emulinalg.algorithm.moduli import MAX_MODULI, MIN_MODULI, crt_constants
from emulinalg.backends import numpy as npb

TARGETS = (Target(24), Target(53), Target(80), Target(24, "native", 0.4), Target(53, "native"))


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("k", [1, 7, 300, 4096, 1 << 17, certificate.LOWER_K_MAX + 1])
def test_plan_values_are_the_references(k, target, cplx):
    m, n = 40, 70
    cc = certificate.cert_constants(k, target, cplx)
    for ndim, steps in ((2, refinement.REFINE_STEPS), (3, 0)):
        p = certificate_plan.plan(k, target, cplx, m, n, ndim)
        assert p.constants == cc and p.complex == cplx
        assert p.native == (target.guarantee == "native")
        assert (p.fexp, p.fexp_mixed) == certificate.bound_lower_exponents(cplx)
        assert p.lower_terms == (cc.factor, cc.abs_term, cc.cR, cc.c4)
        assert p.counts == len(cc.thresholds) == MAX_MODULI - MIN_MODULI + 1
        assert p.min_count == MIN_MODULI
        assert p.gemm_lower == (k <= certificate.LOWER_K_MAX and cc.factor > 0)
        assert p.steps == steps
        native = target.guarantee == "native"
        assert p.suspects_max == (refinement.SUSPECTS_MAX if native else refinement.REFINE_ENTRIES)
        assert p.sample == refinement.REFINE_ENTRIES
        assert p.patch_cap == refinement.patch_limit(m, n)
        assert p.theta_max == min(refinement.THETA_MAX, math.sqrt(k))
        assert p.refine_terms == (cc.native_factor, cc.native_abs_term, cc.l1fac)
    assert certificate_plan.plan(k, target, cplx, 3, 5).patch_cap == 0


def test_plan_reads_the_refinement_limits_at_each_call(monkeypatch):
    monkeypatch.setattr(refinement, "REFINE_STEPS", 1)
    monkeypatch.setattr(refinement, "REFINE_ENTRIES", 7)
    monkeypatch.setattr(refinement, "SUSPECTS_MAX", 9)
    monkeypatch.setattr(refinement, "PATCH_ENTRIES", 3)
    p = certificate_plan.plan(100, Target(53), False, 64, 64)
    assert (p.steps, p.sample, p.suspects_max, p.patch_cap) == (1, 7, 7, 3)
    assert certificate_plan.plan(100, Target(53, "native"), False, 64, 64).suspects_max == 9
    # a backend that streams its suspects takes all of them, or up to its cap (at least
    # SUSPECTS_MAX)
    streamed = certificate_plan.plan(100, Target(53, "native"), False, 64, 64, streaming=True)
    assert streamed.suspects_max == 64 * 64
    held = certificate_plan.plan(100, Target(53, "native"), False, 64, 64, streaming=1000)
    assert held.suspects_max == 1000
    strict = certificate_plan.plan(100, Target(53), False, 64, 64, streaming=True)
    assert strict.suspects_max == 7


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("k", [5, 1000, 1 << 16])
def test_count_table_gives_the_exact_line_factors(k, target, cplx):
    """The table's thresholds, 1.0, Q_down and f0: f0 2**-half_log_shift(e) per line is
    ``exact_line_factors`` bit for bit (0 for a zero line), as the kernels scale it."""
    cc = certificate.cert_constants(k, target, cplx)
    tab = certificate_plan.plan(k, target, cplx, 8, 8).table
    nth = len(cc.thresholds)
    assert len(tab) == 3 * nth + 1
    assert tab[:nth] == cc.thresholds and tab[nth] == 1.0
    rng = np.random.default_rng(k)
    e = np.concatenate([[0.0, 1.0, 0.25, 2.0**-1074, 2.0**1000],
                        rng.random(50) * np.exp2(rng.integers(-300, 300, 50))])  # fmt: skip
    for i, count in enumerate(range(MIN_MODULI, MIN_MODULI + nth)):
        c = crt_constants(count)
        q_down, f0 = tab[nth + 1 + i], tab[2 * nth + 1 + i]
        assert q_down == c.Q_down
        t = scaling.half_log_shift(xp, c.L, c.Q_down, e)
        got = np.where(e > 0, np.ldexp(np.full(e.shape, f0), -np.asarray(t, dtype=np.int32)), 0.0)
        assert _same(got, certificate.exact_line_factors(xp, cc, count, e, cc.scale))


def _parts(rng, m, k, n, cplx):
    def real(shape):
        x = rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape))
        x[rng.random(shape) < 0.2] = 0.0
        return x

    ar, br = real((m, k)), real((k, n))
    ar[1] = 0.0
    ai = bi = None
    if cplx:
        ai, bi = real((m, k)), real((k, n))
        ai[2] = 0.0  # a row without mixed entries
        ai[1] = 0.0
    return ar, ai, br, bi


@pytest.mark.parametrize("norm", ["l1", "l2"])
@pytest.mark.parametrize("cplx", [False, True])
def test_line_terms_are_the_references(norm, cplx):
    """norms_from_sums, line_alpha and line_exponents: the line norms of ``line_norm``, the alpha
    of ``ozaki2_needed`` and the normalization's exponents of ``max_exponent``."""
    rng = np.random.default_rng(3)
    m, k, n = 9, 31, 6
    ar, ai, br, bi = _parts(rng, m, k, n, cplx)
    target = Target(53, "native") if norm == "l2" else Target(53)
    cc = certificate.cert_constants(k, target, cplx)
    (nar, nai, _, _), na, _ = certificate.normalized(xp, ar, ai, br, bi, norm)
    x = np.abs(nar) if nai is None else np.abs(nar) + np.abs(nai)
    got = certificate_plan.norms_from_sums(xp, cc, np.sum(x, axis=-1), np.sum(x * x, axis=-1))
    assert _same(got, na[:, 0])
    s, _, e, _ = scaling.ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
    want = cc.scale * xp.expand_dims(xp.sqrt(xp.astype(e, xp.float64)), axis=-1)
    assert _same(certificate_plan.line_alpha(xp, cc, e)[:, None], want)
    ea = np.asarray(scaling.max_exponent(xp, ar, ai, axis=-1))
    got = certificate_plan.line_exponents(xp, np.asarray(s), cplx)
    assert got.dtype == np.int64
    live = np.abs(ar).max(axis=-1) + (0 if ai is None else np.abs(ai).max(axis=-1)) > 0
    assert (got[live] == ea[live]).all()


@pytest.mark.parametrize("kind", ["real", "complex", "complex-no-counts"])
def test_lower_bounds_at_entries_are_the_references(kind):
    """bound_lower_at and magnitude_lower_of_sums at some entries: the values of
    ``bound_lower`` and of ``magnitude_lower`` (without a backend hook) there."""
    rng = np.random.default_rng(5)
    m, k, n = 12, 40, 10
    cplx = kind != "real"
    ar, ai, br, bi = _parts(rng, m, k, n, cplx)
    pre = scaling.ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
    F = pre.lower
    mixed = None if kind == "complex-no-counts" else pre.mixed
    idx = np.array([0, 3, 17, 25, 26, 60, m * n - 1], dtype=np.int64)
    want = certificate.bound_lower(xp, F, cplx, mixed).reshape(-1)[idx]
    assert _same(certificate_plan.bound_lower_at(xp, F, idx, cplx, mixed), want)
    (nar, nai, nbr, nbi), _, _ = certificate.normalized(xp, ar, ai, br, bi)
    xa, xb = scaling.magnitude(xp, nar, nai), scaling.magnitude(xp, nbr, nbi)
    cc = certificate.cert_constants(k)
    S = npb.native_matmul(certificate.down_to_float32(xp, xa), certificate.down_to_float32(xp, xb))
    want = certificate.magnitude_lower(xp, npb, xa, xb).reshape(-1)[idx]
    got = certificate_plan.magnitude_lower_of_sums(xp, cc, S.reshape(-1)[idx])
    assert _same(got, want)


@pytest.mark.parametrize("kind", ["real", "complex", "complex-no-counts"])
def test_mixed_lines_give_bound_lower(kind):
    """bound_lower_at with mixed_lines' counts: ``bound_lower`` with the prescale's ``mixed``."""
    rng = np.random.default_rng(7)
    m, k, n = 8, 20, 9
    cplx = kind != "real"
    ar, ai, br, bi = _parts(rng, m, k, n, cplx)
    pre = scaling.ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
    mixed = None if kind == "complex-no-counts" else pre.mixed
    ma, mb = certificate_plan.mixed_lines(xp, mixed, m, n, cplx)
    assert ma.shape == (m,) and mb.shape == (n,) and ma.dtype == mb.dtype == np.int64
    idx = np.arange(m * n)
    want = certificate.bound_lower(xp, pre.lower, cplx, mixed).reshape(-1)
    assert _same(certificate_plan.bound_lower_at(xp, pre.lower, idx, cplx, (ma, mb)), want)


def test_exact_step():
    asked = []

    def failing(c):
        asked.append(c)
        return 5 if c == 13 else 6

    def failures(c):  # 5 entries beyond fail every test
        return failing(c) - 5

    assert certificate.exact_step(14, failures) == 13
    assert certificate.exact_step(15, failures) == 15
    assert certificate.exact_step(MIN_MODULI, failures) == MIN_MODULI
    assert asked == [13, 14]
