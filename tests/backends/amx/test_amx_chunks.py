"""The amx backend's chunk steps for the dask shared graph (``emulinalg/backends/host_chunks.py``:
``emulinalg._amx``'s residues and CRT, tile GEMMs per modulus, on the tile model where AMX is
absent): a product cut into row, K and column chunks, each chunk's residues made once, the block
products added over K modulo each modulus and one CRT per output block, must be the in-core
product of the whole matrices bit for bit (as the generic steps of
``emulinalg/backends/dask/crt.py`` are), and as accurate as numpy's own product against the
exact one; and through the graph itself, the shared graph's product.
"""

from __future__ import annotations

import itertools

import dask
import dask.array as da
import numpy as np
import pytest
from _amx_helpers import _amx

import emulinalg
from emulinalg.algorithm import products
from emulinalg.algorithm.moduli import crt_constants
from emulinalg.algorithm.scaling import ozaki2_prescale, ozaki2_shifts, rounds_to_nearest
from emulinalg.backends import amx
from emulinalg.backends import numpy as npb
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy

pytestmark = pytest.mark.skipif(_amx is None, reason="emulinalg._amx is not built")

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
def test_chunk_steps_give_the_in_core_product(monkeypatch, dtype):
    monkeypatch.setattr(amx, "EMULATE", not _amx.available())
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
        planes = amx.chunk_residues(re, im, shift, axis, moduli, near)
        assert planes.dtype == np.int8 and planes.shape[:2] == (3 if cplx else 1, moduli)
        return planes

    got = np.full((m, n), np.nan, dtype=whole.dtype)
    kcuts = _cuts(k, 3)  # uneven K chunks
    for rows in _cuts(m, 2):
        pas = [residues(ar[rows, q], None if ai is None else ai[rows, q], mu[rows], -1)
               for q in kcuts]  # fmt: skip
        for cols in _cuts(n, 2):
            ws = []
            for q, pa in zip(kcuts, pas):
                pb = residues(br[q, cols], None if bi is None else bi[q, cols], nu[cols], -2)
                ws.append(amx.chunk_products(pa, pb, moduli))
            w = amx.chunk_residue_sum(ws)
            ncols = cols.stop - cols.start
            got[rows, cols] = amx.chunk_crt(w, mu[rows], nu[cols], moduli, cplx, out, ncols)
    assert np.array_equal(got.view(np.uint8), whole.view(np.uint8))
    ours, native = accuracy(got, A, B), accuracy(A @ B, A, B)
    assert ours["bits_maxrel"] >= native["bits_maxrel"]
    assert ours["bits_cw"] >= native["bits_cw"]


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_shared_graph_takes_the_chunk_steps(monkeypatch, dtype):
    """The shared graph over numpy chunks on the amx backend runs the chunk steps (each called)
    and gives the in-core product's bits for an explicit count."""
    monkeypatch.setattr(amx, "EMULATE", not _amx.available())
    monkeypatch.setattr(emulinalg.backends, "amx_wanted", lambda: True)
    monkeypatch.setattr(amx, "usable", lambda: True)
    calls = {}
    for name in ("chunk_residues", "chunk_products", "chunk_residue_sum", "chunk_crt"):
        fn = getattr(amx, name)

        def counted(*a, _fn=fn, _name=name, **kw):
            calls[_name] = calls.get(_name, 0) + 1
            return _fn(*a, **kw)

        monkeypatch.setattr(amx, name, counted)
    A = phi_matrix((96, 200), 1.0, dtype, seed=7)
    B = phi_matrix((200, 80), 1.0, dtype, seed=8)
    scheme = emulinalg.OzakiII(moduli=16)
    monkeypatch.setenv("EMULINALG_DASK_MODE", "shared")
    c = emulinalg.matmul(da.from_array(A, chunks=(48, 100)), da.from_array(B, chunks=(100, 40)),
                         precision=scheme)  # fmt: skip
    with dask.config.set(scheduler="sync"):
        got = c.compute()
    whole = emulinalg.matmul(A, B, precision=scheme)
    assert np.array_equal(got.view(np.uint8), whole.view(np.uint8))
    # 2 x 2 A chunks and 2 x 2 B chunks; 2 x 2 x 2 block products; 2 x 2 output blocks
    assert calls == {"chunk_residues": 8, "chunk_products": 8, "chunk_residue_sum": 4,
                     "chunk_crt": 4}  # fmt: skip
