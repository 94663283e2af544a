"""The cupy backend's statistics kernels (``src_cuda/ozaki2_stats.cu``) on the GPU.

Runs only where cupy sees a CUDA GPU (marked ``gpu``); skipped with the reason elsewhere.
The prescale and certificate hooks against the generic code run on the device (and numpy's
prescale), bit for bit: cases, views, the refinement, what they decline, end to end. Their
arithmetic is also checked on the CPU through a numpy model (``tests/kernels/``).
"""

from __future__ import annotations

import numpy as np
import pytest
from _gpu_helpers import _bits_equal, _eager, _operands, require_gpu
from _helpers import same_patch

import emulinalg
from emulinalg.algorithm.certificate import Target
from emulinalg.algorithm.scaling import ozaki2_prescale
from emulinalg.backends import numpy as numpy_backend
from emulinalg.inputs import phi_matrix

cp = require_gpu()

from emulinalg.backends import cupy as cupy_backend  # noqa: E402  (needs cupy)

pytestmark = pytest.mark.gpu


def _cxp():
    import array_api_compat

    return array_api_compat.array_namespace(cp.zeros(1))


def _generic_cert_backend():
    """The backend surface without the statistics hooks: the generic certificate with the same
    bf16 ``magnitude_lower_matmul``."""
    import types

    return types.SimpleNamespace(
        int_matmul=cupy_backend.int_matmul,
        magnitude_lower_matmul=cupy_backend.magnitude_lower_matmul,
        native_matmul=cupy_backend.native_matmul,
    )


TARGETS = (Target(24), Target(53), Target(80), Target(24, "native"), Target(53, "native", 0.5))


def _same_certificate(res, want):
    """The hook's (count, beyond, patch) (beyond None: no entry beyond) equals the generic
    one's."""
    assert res is not None, "the certificate kernels declined"
    count, beyond, patch = want
    assert res[0] == count, (res[0], count)
    got = cp.zeros_like(beyond) if res[1] is None else res[1]  # None: no entry beyond
    assert got.dtype == cp.bool_ and _bits_equal(cp.asnumpy(got), cp.asnumpy(beyond))
    assert same_patch(res[2], patch), (res[2], patch)


def _stats_vs_generic(ar, ai, br, bi, bits=TARGETS, to_gpu=cp.asarray):
    """The hooks equal the generic code run on the device (prescale also numpy's), bit for bit:
    (s, t, e, f) and, per ``Target`` in ``bits``, (count, beyond, patch)."""
    from emulinalg.algorithm import certificate

    xp = _cxp()
    g = [None if x is None else to_gpu(x) for x in (ar, ai, br, bi)]
    want_pre = ozaki2_prescale(xp, cupy_backend.int_matmul, *g, "accurate")
    np_pre = ozaki2_prescale(np, numpy_backend.int_matmul, ar, ai, br, bi, "accurate")
    pre = cupy_backend.ozaki2_prescale(*g, "accurate")
    assert pre is not None, "the prescale kernels declined"
    for got, want, ref in zip(pre, want_pre, np_pre):
        assert isinstance(got, cp.ndarray)
        assert _bits_equal(cp.asnumpy(got), cp.asnumpy(want))
        assert _bits_equal(cp.asnumpy(got), ref)
    generic = _generic_cert_backend()
    for b in bits:
        want = certificate.ozaki2_moduli_needed(xp, generic, *g, want_pre, b)
        _same_certificate(cupy_backend.ozaki2_certificate(*g, pre, b), want)


STAT_CASES = [  # ((batch, m, k, n), phi)
    (((), 1, 1, 1), 1),
    (((), 6, 1, 9), 1),
    (((), 1, 300, 1), 0.5),
    (((), 7, 33, 5), 4),
    (((), 37, 61, 19), 1),
    (((), 130, 3000, 77), 1),  # several chunks of columns, several blocks per line set
    (((3,), 5, 21, 6), 0.5),
    (((2, 2), 9, 10, 4), 4),
]


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("case", STAT_CASES, ids=str)
def test_statistics_kernels_bit_for_bit(case, cplx):
    import gpu_kernel_model as model

    shape, phi = case
    ar, ai, br, bi = model.special_lines(*_operands(shape, phi, cplx, seed=41, zero_lines=False))
    _stats_vs_generic(ar, ai, br, bi)


def test_statistics_kernels_large_and_k_blocks():
    a = phi_matrix((300, 2000), 1, seed=51)
    b = phi_matrix((2000, 257), 1, seed=52)
    _stats_vs_generic(a, None, b, None, bits=(Target(53), Target(53, "native")))
    ar, ai, br, bi = _operands(((), 3, 70000, 2), 1, True, seed=5)  # 2 INT32 K-blocks
    _stats_vs_generic(ar, ai, br, bi, bits=(Target(53, "native"), Target(80)))


def test_statistics_kernels_views():
    ar, ai, br, bi = _operands(((), 45, 40, 9), 1, True, seed=3)
    at, bt = np.ascontiguousarray(ar.T), np.ascontiguousarray(br.T)
    ait, bit = np.ascontiguousarray(ai.T), np.ascontiguousarray(bi.T)

    def gpu_view(x):
        for src, dst in ((ar, at), (br, bt), (ai, ait), (bi, bit)):
            if x is src:  # transposed copy viewed back: rows contiguous in memory
                return cp.asarray(dst).T
        return cp.asarray(x)

    _stats_vs_generic(ar, ai, br, bi, to_gpu=gpu_view)
    rev = ar[::-1]

    def rev_view(x):  # negative row stride on the device
        return cp.asarray(ar)[::-1] if x is rev else cp.asarray(x)

    _stats_vs_generic(rev, None, br, None, bits=(Target(53, "native"),), to_gpu=rev_view)
    a3 = _operands(((4,), 6, 40, 9), 1, False, seed=8)[0]
    b3 = np.broadcast_to(br, (4,) + br.shape)  # one B for every batch: stride 0 on the device
    _stats_vs_generic(a3, None, b3, None, bits=(Target(53, "native"),),
                      to_gpu=lambda x: cp.broadcast_to(cp.asarray(br), b3.shape) if x is b3
                      else cp.asarray(x))  # fmt: skip


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_statistics_kernels_refinement(cplx, monkeypatch):
    """The exact step and the refinement's steps (suspects by the exact test, the native form's
    sampled squares and theta, the patch) on the device, against the generic code on phi = 1
    products of several seeds, also with one step, none, too many suspects (the strict form's
    limit; the native form's SUSPECTS_MAX at 0: the kernels take every suspect of these small
    products, up to certificate_plan.CUDA_SUSPECTS_MAX: the default certificate) and a sample
    of 7 (the native form); some of them refine and some patch."""
    from emulinalg.algorithm import certificate, refinement

    xp = _cxp()
    generic = _generic_cert_backend()
    seen = set()
    for seed in range(12):
        # no zero line: its entries fail every exact test (certificate.exact_line_factors)
        ar, ai, br, bi = _operands(((), 40, 500, 30), 1, cplx, seed=seed, zero_lines=False)
        g = [None if x is None else cp.asarray(x) for x in (ar, ai, br, bi)]
        want_pre = ozaki2_prescale(xp, cupy_backend.int_matmul, *g, "accurate")
        pre = cupy_backend.ozaki2_prescale(*g, "accurate")
        for target in (Target(24), Target(53), Target(24, "native"), Target(53, "native")):
            want = certificate.ozaki2_moduli_needed(xp, generic, *g, want_pre, target)
            _same_certificate(cupy_backend.ozaki2_certificate(*g, pre, target), want)
            limit = "SUSPECTS_MAX" if target.guarantee == "native" else "REFINE_ENTRIES"
            for name, value in (("REFINE_STEPS", 0), ("REFINE_STEPS", 1), (limit, 0),
                                ("REFINE_ENTRIES", 7)):  # fmt: skip
                with monkeypatch.context() as mp:
                    mp.setattr(refinement, name, value)
                    if name == "SUSPECTS_MAX":  # the kernels take all (up to CUDA_SUSPECTS_MAX)
                        got = cupy_backend.ozaki2_certificate(*g, pre, target)
                        _same_certificate(got, want)
                        continue
                    other = certificate.ozaki2_moduli_needed(xp, generic, *g, want_pre, target)
                    _same_certificate(cupy_backend.ozaki2_certificate(*g, pre, target), other)
                    if name == "REFINE_STEPS" and value == 0 and other[0] > want[0]:
                        seen.add("refines")
            if want[2] is not None:
                seen.add("patch")
    assert seen == {"refines", "patch"}


def test_statistics_hooks_decline():
    a = cp.asarray(phi_matrix((5, 7), 1, seed=1))
    b = cp.asarray(phi_matrix((7, 4), 1, seed=2))
    assert cupy_backend.ozaki2_prescale(a, None, b, None, "fast") is None
    assert cupy_backend.ozaki2_certificate(a, None, b, None, None, Target(53)) is None
    assert cupy_backend.ozaki2_prescale(a.astype(cp.float32), None, b, None, "accurate") is None


@pytest.mark.parametrize("precision", ["float64", "float32", 80])
@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
@pytest.mark.parametrize("phi", [0.5, 1, 4])
def test_statistics_hooks_end_to_end(monkeypatch, phi, dtype, precision):
    """emulinalg.matmul at a level: the same plan and bit-identical values with the statistics
    hooks and with them declining (the generic statistics on the device)."""
    a = cp.asarray(phi_matrix((70, 90), phi, dtype, seed=61))
    b = cp.asarray(phi_matrix((90, 50), phi, dtype, seed=62))
    a[3, :] = 0
    calls = []
    for name in ("ozaki2_prescale", "ozaki2_certificate"):
        real = getattr(cupy_backend, name)

        def spy(*args, _real=real, _name=name, **kw):  # the prescale takes line_scan's exponents
            out = _real(*args, **kw)
            calls.append((_name, out is not None))
            return out

        monkeypatch.setattr(cupy_backend, name, spy)
    got, plan = _eager(emulinalg.matmul, a, b, precision=precision)
    assert ("ozaki2_prescale", True) in calls and ("ozaki2_certificate", True) in calls
    monkeypatch.setattr(cupy_backend, "ozaki2_prescale", lambda *args, **kw: None)
    monkeypatch.setattr(cupy_backend, "ozaki2_certificate", lambda *args, **kw: None)
    want, want_plan = _eager(emulinalg.matmul, a, b, precision=precision)
    assert plan == want_plan
    assert _bits_equal(cp.asnumpy(got), cp.asnumpy(want))


def test_stage_marks_of_the_kernels():
    from emulinalg._timing import recording

    a = cp.asarray(phi_matrix((64, 80), 1, seed=71))
    b = cp.asarray(phi_matrix((80, 48), 1, seed=72))
    sync = cp.cuda.get_current_stream().synchronize
    with emulinalg.config(strategy="eager"), recording(sync=sync) as rec:
        emulinalg.matmul(a, b)
    assert {"statistics", "slicing", "products", "reconstruction"} <= set(rec.seconds)
