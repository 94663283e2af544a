"""Shared by the CPU checks of the cupy backend's kernels (``tests/kernels/``): bitwise
comparison, operands, the statistics' operands and comparisons with the generic certificate,
its targets, and the phi = 1 cases the refinement takes counts off."""

from __future__ import annotations

import functools

import gpu_kernel_model as model
import numpy as np
import pytest
from _helpers import certificate_counts, same_patch

from emulinalg.algorithm import certificate
from emulinalg.algorithm.certificate import Target
from emulinalg.algorithm.scaling import ozaki2_prescale
from emulinalg.backends import numpy as npb
from emulinalg.inputs import phi_matrix


def _bits(x):
    x = np.asarray(x)
    return x.view({8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}[x.dtype.itemsize])


def _same(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(_bits(x), _bits(y))


def _operands(shape, phi, cplx, seed, scale_a=0, scale_b=0):
    batch, m, k, n = shape
    dt = "complex128" if cplx else "float64"
    a = phi_matrix(batch + (m, k), phi, dt, seed=seed)
    b = phi_matrix(batch + (k, n), phi, dt, seed=seed + 1)
    ar, br = np.ldexp(a.real, scale_a), np.ldexp(b.real, scale_b)
    if not cplx:
        return ar, None, br, None
    return ar, np.ldexp(a.imag, scale_a), br, np.ldexp(b.imag, scale_b)


def _stat_operands(shape, phi, cplx, seed, special=True):
    ar, ai, br, bi = _operands(shape, phi, cplx, seed)
    return model.special_lines(ar, ai, br, bi) if special else (ar, ai, br, bi)


def _generic_cert_backend(lower):
    """A backend surface without ``ozaki2_certificate``: the generic certificate with ``lower``
    as its ``magnitude_lower_matmul`` hook."""
    import types

    return types.SimpleNamespace(magnitude_lower_matmul=lower, native_matmul=np.matmul)


def _same_certificate(got, want):
    """A certificate hook's ``(count, beyond, patch)`` (beyond None: no entry beyond) equals the
    generic one's."""
    assert got is not None and got[0] == want[0], (got[0], want[0])
    beyond = np.zeros_like(want[1]) if got[1] is None else np.asarray(got[1])
    assert _same(beyond, want[1])
    assert same_patch(got[2], want[2]), (got[2], want[2])


def _same_prescale(got, want):
    assert len(got) == 4
    for g, w in zip(got, want):
        assert _same(np.asarray(g), np.asarray(w)), (g, w)


# both guarantees; the native form's rho below 1 (a blocked native GEMM, certificate.native_error)
TARGETS = [Target(24), Target(53), Target(80), Target(24, "native"), Target(53, "native", 0.5)]


def _phi_case(cplx, seed, shape=(40, 500, 30), batch=()):
    """phi = 1 operands (batch + (m, k), batch + (k, n))."""
    m, k, n = shape
    dt = "complex128" if cplx else "float64"
    a = phi_matrix(batch + (m, k), 1, dt, seed=seed)
    b = phi_matrix(batch + (k, n), 1, dt, seed=seed + 50)
    if cplx:
        return a.real.copy(), a.imag.copy(), b.real.copy(), b.imag.copy()
    return a, None, b, None


def _exact_step_drops(ar, ai, br, bi, target):
    """Whether the certificate's exact step takes a count off the bisection's on these operands (F's
    lower bound only: the cases have no entry beyond)."""
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    cc = certificate.cert_constants(ar.shape[-1], target, ai is not None)
    _, na, nb = certificate.normalized(np, ar, ai, br, bi, cc.norm)
    R = cc.cR * certificate.bound_lower(np, pre.lower, ai is not None, pre.mixed)
    need = certificate.ozaki2_needed(np, cc, R, na, nb, pre[2], pre[3])
    assert not (need == certificate.BEYOND).any()
    top = int(need.max())
    return bool(certificate.exact_passes(np, cc, top - 1, R, na, nb, pre[2], pre[3]).all())


def _generic_counts(ar, ai, br, bi, target):
    """The generic certificate's (count, patch) as it is and its count without the refinement
    (no step: REFINE_STEPS 0)."""
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, "accurate")
    be = _generic_cert_backend(model.magnitude_lower_matmul)
    return certificate_counts(np, be, ar, ai, br, bi, pre, target)


@functools.cache
def _seed_showing(cplx, target, shape, want, batch=()):
    """The first seed whose phi = 1 operands show ``want`` in the generic certificate (the
    cases follow the certificate's constants): "refines" (the refinement takes counts off, no
    patch), "after-step" (after a successful exact step: the suspects come from the refinement's
    own exact pass two counts below the bisection's), "patch" (a count off with a patch), "step"
    (the exact step takes a count off; batched: no refinement)."""
    for seed in range(24):
        ops = _phi_case(cplx, seed, shape, batch)
        if want == "step":
            if _exact_step_drops(*ops, target):
                return seed
            continue
        full, patch, unrefined = _generic_counts(*ops, target)
        if full == unrefined or (patch is not None) != (want == "patch"):
            continue
        if want != "after-step" or _exact_step_drops(*ops, target):
            return seed
    raise AssertionError(f"no seed shows {want!r} for {cplx, target, shape}")


# (cplx, target, shape, want): the refinement takes counts off, strict and native, also after a
# successful exact step, and with a patch
REFINE_CASES = [
    pytest.param(False, Target(53), (40, 500, 30), "refines", marks=pytest.mark.slow),
    pytest.param(True, Target(24), (40, 500, 30), "refines", marks=pytest.mark.slow),
    pytest.param(True, Target(24), (40, 500, 30), "after-step", marks=pytest.mark.slow),
    pytest.param(False, Target(24, "native"), (40, 500, 30), "refines", marks=pytest.mark.slow),
    pytest.param(True, Target(53, "native"), (40, 500, 30), "refines", marks=pytest.mark.slow),
    (True, Target(24, "native"), (30, 200, 20), "after-step"),
    (False, Target(53), (40, 500, 30), "patch"),
    (True, Target(24, "native"), (40, 500, 30), "patch"),
]


def _refined_case(cplx, target, shape, want):
    return _phi_case(cplx, _seed_showing(cplx, target, shape, want), shape)
