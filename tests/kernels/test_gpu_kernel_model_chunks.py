"""CPU checks of the cupy backend's chunk steps for the dask shared graph
(``emulinalg/backends/cupy/chunks.py``) on the stand-in for cupy, their kernels the CUDA sources
compiled as host C++: a product cut into row, K and column chunks, each chunk's residues made
once, the block products added over K modulo each modulus and one CRT per output block, must be
the in-core product of the whole matrices bit for bit (as the generic steps of
``emulinalg/backends/dask/crt.py`` are), and as accurate as numpy's own product against the
exact one. ``tests/backends/dask/test_dask_in_core_bits.py`` runs the graph on a GPU.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest

from emulinalg.algorithm import products
from emulinalg.algorithm.moduli import crt_constants
from emulinalg.algorithm.scaling import ozaki2_prescale, ozaki2_shifts, rounds_to_nearest
from emulinalg.backends import numpy as npb
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy

_OUT = {"float64": "float64", "float32": "float32", "complex128": "float64", "complex64": "float32"}


def _parts(x):
    """float64 parts, as the graph's tasks give them (``blocks._finite_parts``)."""
    if np.iscomplexobj(x):
        return x.real.astype(np.float64), x.imag.astype(np.float64)
    return x.astype(np.float64), None


def _cuts(size, parts):
    edges = np.linspace(0, size, parts + 1).astype(int)
    return [slice(a, b) for a, b in itertools.pairwise(edges)]


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32", "complex64"])
def test_chunk_steps_give_the_in_core_product(native_backend, monkeypatch, dtype):
    be, cp = native_backend
    monkeypatch.setitem(sys.modules, "cupy", cp)  # backends/cuda/fused imports it in its calls
    m, k, n, moduli, mode = 37, 150, 29, 18 if dtype != "float32" else 10, "accurate"
    A = phi_matrix((m, k), 1.0, dtype, seed=5)
    B = phi_matrix((k, n), 1.0, dtype, seed=6)
    (ar, ai), (br, bi) = _parts(A), _parts(B)
    cplx = ai is not None
    pre = ozaki2_prescale(np, npb.int_matmul, ar, ai, br, bi, mode)
    c = crt_constants(moduli)
    mu, nu = ozaki2_shifts(np, pre, c.L, c.Q_down)
    out = _OUT[dtype]
    with npb.quiet():
        whole = products.product(np, npb.int_matmul, ar, ai, br, bi, moduli, mode, out, pre)
    whole = whole[0] if not cplx else whole[0] + 1j * whole[1]
    near = rounds_to_nearest(moduli, k, mode)

    def residues(re, im, shift, axis):
        x = [None if v is None else cp.asarray(np.ascontiguousarray(v)) for v in (re, im)]
        planes = be.chunk_residues(x[0], x[1], cp.asarray(shift), axis, moduli, near)
        assert planes.dtype == np.int8 and planes.shape[:3] == (3 if cplx else 1, moduli, 1)
        return planes

    got = np.full((m, n), np.nan, dtype=whole.dtype)
    kcuts = _cuts(k, 3)  # uneven K chunks, none a multiple of the 16-column alignment
    for rows in _cuts(m, 2):
        pas = [residues(ar[rows, q], None if ai is None else ai[rows, q], mu[rows], -1)
               for q in kcuts]  # fmt: skip
        for cols in _cuts(n, 2):
            ws = []
            for q, pa in zip(kcuts, pas):
                pb = residues(br[q, cols], None if bi is None else bi[q, cols], nu[cols], -2)
                ws.append(be.chunk_products(pa, pb, moduli))
            w = be.chunk_residue_sum(ws)
            ncols = cols.stop - cols.start
            blk = be.chunk_crt(w, cp.asarray(mu[rows]), cp.asarray(nu[cols]), moduli, cplx, out,
                               ncols)  # fmt: skip
            got[rows, cols] = np.asarray(blk)
    assert np.array_equal(got.view(np.uint8), whole.view(np.uint8))
    ours, native = accuracy(got, A, B), accuracy(A @ B, A, B)
    assert ours["bits_maxrel"] >= native["bits_maxrel"]
    assert ours["bits_cw"] >= native["bits_cw"]


def test_chunk_residue_sum_is_the_sum_modulo_each_modulus(native_backend, monkeypatch):
    be, cp = native_backend
    monkeypatch.setitem(sys.modules, "cupy", cp)
    moduli = crt_constants(5).moduli
    rng = np.random.default_rng(3)
    ws = []
    for _ in range(4):
        w = [rng.integers(-(p // 2), (p - 1) // 2 + 1, size=(1, 1, 6, 16)) for p in moduli]
        w = np.stack(w, axis=1).astype(np.int8)
        ws.append(w)
    got = np.asarray(be.chunk_residue_sum([cp.asarray(w) for w in ws]))
    total = sum(w.astype(np.int64) for w in ws)
    for ell, p in enumerate(moduli):
        r = total[:, ell] % p
        want = np.where(r > (p - 1) // 2, r - p, r)
        assert np.array_equal(got[:, ell], want)
