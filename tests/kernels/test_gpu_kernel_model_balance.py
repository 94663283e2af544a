"""The cupy backend's fused stage 0 of the complex part check (``backends.cupy.balance.
balance_stage``: ``src_cuda/balance.cu`` and the bf16 GEMMs) on the CPU stand-in, with the
kernels' numpy model or their CUDA source compiled as host C++: the generic ``parts.balanced``'s
decision and certificate bound (``certificate.parts_lower``) bit for bit, with the same bf16
lower-bound GEMMs."""

from __future__ import annotations

import numpy as np
import pytest
from _kernel_model_helpers import _generic_cert_backend

from emulinalg.algorithm import certificate, parts


def _operands(batch, m, k, n, ratio, dtype, seed):
    rng = np.random.default_rng(seed)

    def parts_of(shape, lines):  # lines scaled apart, both parts
        scale = 2.0 ** rng.integers(-20, 20, lines)
        re = rng.standard_normal(shape) * scale
        return re.astype(dtype), (rng.standard_normal(shape) * ratio * scale).astype(dtype)

    ar, ai = parts_of(batch + (m, k), batch + (m, 1))
    br, bi = parts_of(batch + (k, n), batch + (1, n))
    ar[..., 3, :] = ai[..., 3, :] = 0.0  # a zero row of A
    br[..., :, 2] = bi[..., :, 2] = 0.0  # a zero column of B
    ai[..., 1, :5] = 0.0  # entries with one part zero
    return ar, ai, br, bi


CASES = [  # (batch, m, k, n, ratio, dtype)
    ((), 9, 24, 8, 1.0, np.float64),
    ((), 11, 37, 13, 1.0, np.float64),  # k and n off the bf16 rows' multiple of 8
    ((2,), 6, 19, 5, 1.0, np.float32),
    ((), 7, 30, 9, 1e-3, np.float64),  # small imaginary parts: not fine
    ((), 7, 30, 9, 1e-12, np.float64),
]


def _layouts(cp, ar, ai, br, bi):
    """The operands as separate parts, and as a complex array's interleaved parts (views at
    stride 2: the kernels load an entry's two parts at once)."""
    yield [cp.asarray(x) for x in (ar, ai, br, bi)]
    A, B = cp.asarray(ar + 1j * ai), cp.asarray(br + 1j * bi)
    yield [A.real, A.imag, B.real, B.imag]


@pytest.mark.parametrize("blocks", [None, 1], ids=["grid", "one-block-row"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_balance_stage_is_the_generic_stage(cpu_backend, case, blocks, monkeypatch):
    """Both layouts of the parts, on the backend's grid and on one block row (each block row
    then walks every row and batch entry)."""
    be, cp = cpu_backend
    if blocks is not None:
        monkeypatch.setattr(be.balance, "_BLOCKS", blocks)
    ar, ai, br, bi = _operands(*case, seed=len(str(case)))
    k = ar.shape[-1]
    st = _generic_cert_backend(be.magnitude_lower_matmul)

    def lower(x, y):
        return certificate.magnitude_lower(np, st, x, y)

    def signed(x, y):
        return certificate.signed_estimate(np, st, x, y)

    wide = [x.astype(np.float64) for x in (ar, ai, br, bi)]  # the kernels widen each entry
    ea, eb = parts._line_exponents(np, *wide)
    decisions = []
    for slack in (1.5, 4.0, 1e6):
        want = parts.balanced(np, lower, signed, *wide, parts.PartForm(slack, True, ""))
        for dev in _layouts(cp, ar, ai, br, bi):
            got = be.balance.balance_stage(*dev, cp.asarray(ea), cp.asarray(eb),
                                           parts.balance_terms(k, slack))  # fmt: skip
            assert got is not None and got[0] == want[0], (slack, want[0])
            pl = np.asarray(got[1])
            assert pl.dtype == np.float32 and pl.shape == want[1].shape
            assert np.array_equal(pl, want[1])
        decisions.append(want[0])
    assert decisions[-1] == (case[4] == 1.0)  # balanced parts pass at a large slack only


def test_balance_stage_declines(cpu_backend):
    """Batches that broadcast, or k beyond the bf16 bound's range: the generic stage runs."""
    be, cp = cpu_backend
    ar, ai, br, bi = _operands((2,), 5, 12, 4, 1.0, np.float64, seed=3)
    ea, eb = parts._line_exponents(np, ar, ai, br, bi)
    terms = parts.balance_terms(12, 4.0)
    args = [cp.asarray(x) for x in (ar, ai, br[:1], bi[:1])]
    assert be.balance.balance_stage(*args, cp.asarray(ea), cp.asarray(eb[:1]), terms) is None
    big = certificate.LOWER_K_MAX + 1
    z = cp.asarray(np.zeros((1, big)))
    w = cp.asarray(np.zeros((big, 1)))
    e = cp.asarray(np.zeros((1, 1), np.int64))
    assert be.balance.balance_stage(z, z, w, w, e, e, terms) is None
