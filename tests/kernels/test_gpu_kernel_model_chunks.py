"""CPU checks of the cupy backend's chunk steps for the dask shared graph
(``emulinalg/backends/cupy/chunks.py``) on the stand-in for cupy, their kernels the CUDA sources
compiled as host C++: a product cut into row, K and column chunks, each chunk's residues made
once, the block products added over K modulo each modulus and one CRT per output block, must be
the in-core product of the whole matrices bit for bit (as the generic steps of
``emulinalg/backends/dask/crt.py`` are), and as accurate as numpy's own product against the
exact one. ``tests/backends/dask/test_dask_in_core_bits.py`` runs the graph on a GPU.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from _helpers import chunk_steps_case

from emulinalg.algorithm.moduli import crt_constants
from emulinalg.reference import accuracy


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32", "complex64"])
def test_chunk_steps_give_the_in_core_product(native_backend, monkeypatch, dtype):
    be, cp = native_backend
    monkeypatch.setitem(sys.modules, "cupy", cp)  # backends/cuda/fused imports it in its calls
    got, whole, A, B = chunk_steps_case(be, dtype, asarray=cp.asarray)
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
