"""The amx backend's chunk steps for the dask shared graph (``emulinalg/backends/host_chunks.py``:
``emulinalg._amx``'s residues and CRT, tile GEMMs per modulus, on the tile model where AMX is
absent): a product cut into row, K and column chunks, each chunk's residues made once, the block
products added over K modulo each modulus and one CRT per output block, must be the in-core
product of the whole matrices bit for bit (as the generic steps of
``emulinalg/backends/dask/crt.py`` are), and as accurate as numpy's own product against the
exact one; and through the graph itself, the shared graph's product.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from _amx_helpers import _amx
from _helpers import chunk_steps_case

import emulinalg
from emulinalg.backends import amx
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy

pytestmark = pytest.mark.skipif(_amx is None, reason="emulinalg._amx is not built")


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32", "complex64"])
def test_chunk_steps_give_the_in_core_product(monkeypatch, dtype):
    monkeypatch.setattr(amx, "EMULATE", not _amx.available())
    got, whole, A, B = chunk_steps_case(amx, dtype)
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


def test_block_product_refuses_mixed_layouts():
    """A block product whose chunks' residues came from different backends (workers with other
    EMULINALG_AMX settings) raises a clear error instead of multiplying mismatched layouts."""
    from emulinalg.backends.dask import crt

    planes = np.zeros((1, 2, 4, 4), dtype=np.int8)
    ra = {"planes": planes, "raw": None, "layout": "backend"}
    rb = {"planes": planes, "raw": None, "layout": "generic"}
    cfg = {"need": np.zeros((1, 1), dtype=bool), "count": 2}
    with pytest.raises(RuntimeError, match="EMULINALG_AMX"):
        crt._product_block(ra, rb, cfg, np.array([0]), np.array([0]))
