"""Working memory of an eager product on the CPU (issue #26, class 5): the generic engine's row
blocks (``_engine.block_rows``), B's residue planes by column blocks, the certificate's counts by
blocks of rows and the refinement's test by blocks of suspects. Each blocking is checked bit for
bit against the unblocked computation, and the peak (tracemalloc: numpy's arrays) against the
bound docs/limitations.md states."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import emulinalg
from emulinalg import _engine
from emulinalg.algorithm import certificate, refinement
from emulinalg.inputs import phi_matrix

pytestmark = pytest.mark.usefixtures("numpy_backend")


def _operands(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    if dtype.startswith("complex"):
        a = a + 1j * rng.standard_normal((n, n))
        b = b + 1j * rng.standard_normal((n, n))
    return a.astype(dtype), b.astype(dtype)


def _peak(a, b, precision=None):
    """(result, plan, peak bytes allocated during the call, the inputs' and output's bytes).
    A small product first: the process's one-time allocations (imports, cached constants) are
    not the product's working memory, and would make the figure depend on the tests before."""
    with emulinalg.config(strategy="eager"):
        emulinalg.matmul(a[:64, :64], b[:64, :64], precision=precision)
    tracemalloc.start()
    try:
        with emulinalg.config(strategy="eager"):
            c = emulinalg.matmul(a, b, precision=precision)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return c, emulinalg.last_plan(), peak, a.nbytes + b.nbytes + c.nbytes


# docs/limitations.md: the peak working memory, in multiples of the inputs' and output's bytes,
# from N = 512 up (smaller products keep fixed-size work arrays of up to a few MiB)
BOUND = {"float64": 4.5, "complex128": 4.5, "float32": 10.0}


@pytest.mark.parametrize(
    "dtype", ["float64", pytest.param("complex128", marks=pytest.mark.slow), "float32"]
)
def test_peak_working_memory_within_the_documented_bound(dtype):
    a, b = _operands(512, dtype)
    c, plan, peak, io = _peak(a, b)
    assert plan.scheme.startswith("OzakiII")
    assert any(note.startswith("memory: the product in") for note in plan.notes), plan.notes
    assert peak <= BOUND[dtype] * io, (peak / io, plan)
    # the blocks change nothing: the native product's accuracy holds (a sanity check on c)
    ref = a.astype(np.complex256 if dtype.startswith("complex") else np.longdouble) @ b
    err = np.max(np.abs(c - ref)) / np.max(np.abs(ref))
    assert err < (1e-13 if dtype != "float32" else 1e-5)


def test_without_the_blocks_the_peak_is_the_old_one(monkeypatch):
    """The bound is the blocks' doing: one block of the whole output (the old rule, at most
    BLOCK_ENTRIES entries) takes several times more at the same size."""
    a, b = _operands(512, "float64")
    _, _, blocked, io = _peak(a, b, emulinalg.OzakiII(moduli=15))
    monkeypatch.setattr(_engine, "MIN_BLOCK_ENTRIES", 1 << 22)
    _, plan, whole, _ = _peak(a, b, emulinalg.OzakiII(moduli=15))
    assert not any(note.startswith("memory:") for note in plan.notes)
    assert whole > 3 * blocked, (whole / io, blocked / io)


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
def test_blocked_counts_and_product_change_no_bit(dtype, monkeypatch):
    """Row blocks of the product and B's planes, blocks of rows of the certificate's counts
    and blocks of suspects in the refinement's test give the bits and the plan of the
    computation at once."""
    a = phi_matrix((300, 90), 1.0, dtype, seed=1)
    b = phi_matrix((90, 260), 2.0, dtype, seed=2)
    with emulinalg.config(strategy="eager"):
        blocked = emulinalg.matmul(a, b)
        plan_blocked = emulinalg.last_plan()
        monkeypatch.setattr(_engine, "MIN_BLOCK_ENTRIES", 1 << 22)
        monkeypatch.setattr(certificate, "NEED_MIN_ENTRIES", 1 << 30)
        monkeypatch.setattr(refinement, "TEST_MIN_ENTRIES", 1 << 30)
        whole = emulinalg.matmul(a, b)
        plan_whole = emulinalg.last_plan()
        # and the other way: every blocking at its finest
        monkeypatch.setattr(_engine, "MIN_BLOCK_ENTRIES", 1)
        monkeypatch.setattr(_engine, "WORK_SHARE", 1e-4)
        monkeypatch.setattr(certificate, "NEED_MIN_ENTRIES", 1)
        monkeypatch.setattr(refinement, "TEST_MIN_ENTRIES", 1)
        monkeypatch.setattr(refinement, "TEST_BLOCKS", 97)
        finest = emulinalg.matmul(a, b)
        plan_finest = emulinalg.last_plan()
    assert np.array_equal(whole.view(np.uint8), blocked.view(np.uint8))
    assert np.array_equal(whole.view(np.uint8), finest.view(np.uint8))
    for plan in (plan_blocked, plan_finest):
        assert (plan.scheme, plan.native_entries, plan.fallback) == (
            plan_whole.scheme,
            plan_whole.native_entries,
            plan_whole.fallback,
        )
    assert any(note.startswith("memory:") for note in plan_finest.notes)


def test_block_rows_follow_the_inputs_and_output():
    """More rows per block for a larger product, one block for a small one, at most
    BLOCK_ENTRIES entries, and a backend's declared ``block_entries`` as given."""
    x = np.zeros((1, 1))

    def rows(m, k, n, itemsize_name="float64", backend=None):
        ar, br = np.broadcast_to(x, (m, k)), np.broadcast_to(x, (k, n))
        return _engine.block_rows(backend, ar, None, br, itemsize_name)

    assert rows(64, 64, 64) == 64
    assert 8 <= rows(4096, 4096, 4096) < 4096
    assert rows(4096, 4096, 4096) * 4096 <= _engine.BLOCK_ENTRIES
    assert rows(4096, 4096, 4096, "float32") < rows(4096, 4096, 4096)

    class Declared:
        name = "declared"
        block_entries = 10 * 4096

        @staticmethod
        def int_matmul(a, b, bound):
            return a @ b

        native_matmul = int_matmul

        @staticmethod
        def quiet():
            return np.errstate()

    assert rows(4096, 4096, 4096, backend=Declared) == 10


def test_no_memory_note_where_the_backend_runs_the_product(monkeypatch):
    """A backend's own Scheme II product (``ozaki2_product``: amx, cupy) bounds its own memory:
    the plan names the generic loop's row blocks only where that loop ran them."""
    from emulinalg.algorithm import products
    from emulinalg.backends import numpy as npb

    def fused(ar, ai, br, bi, moduli, mode, out_dtype, prescale):
        return products.product(
            np, npb.int_matmul, ar, ai, br, bi, moduli, mode, out_dtype, tuple(prescale)
        )

    a, b = _operands(512, "float64")
    with emulinalg.config(strategy="eager"):
        blocked = emulinalg.matmul(a, b, precision=emulinalg.OzakiII(moduli=15))
        assert any(note.startswith("memory:") for note in emulinalg.last_plan().notes)
        monkeypatch.setattr(npb, "ozaki2_product", fused, raising=False)
        whole = emulinalg.matmul(a, b, precision=emulinalg.OzakiII(moduli=15))
        assert not any(note.startswith("memory:") for note in emulinalg.last_plan().notes)
    assert np.array_equal(whole.view(np.uint8), blocked.view(np.uint8))
