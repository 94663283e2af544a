"""The amx backend (``emulinalg/backends/amx.py``).

On the scalar tile model everywhere and on AMX where available (marked ``amx``, skipped
elsewhere with the reason): its surface and integer products, and ``emulinalg.matmul`` through
it against the numpy backend bit for bit. Where numpy products take it (``EMULINALG_AMX``), what
the plan says where they do not, and the float32 operands' conversion.
"""

from __future__ import annotations

import numpy as np
import pytest
from _amx_helpers import AMX_AVAILABLE, _amx, amx_only, matmul_amx_and_numpy

import emulinalg
from emulinalg import OzakiII
from emulinalg.inputs import phi_matrix

pytestmark = pytest.mark.skipif(
    _amx is None, reason="emulinalg._amx is not built (not x86-64, or no C++ compiler)"
)


def test_backend_surface():
    from emulinalg.backends import amx

    assert amx.name == "amx"
    assert amx.usable() == AMX_AVAILABLE
    assert amx.MAX_K == _amx.MAX_K_S8
    assert amx.k_block(amx.MAX_K, 2**14) is None
    assert amx.k_block(amx.MAX_K + 1, 2**14) == amx.K_BLOCK <= amx.MAX_K
    assert amx.K_BLOCK % 64 == 0
    # performant: the cost model fitted on the AMX host keeps native at FP64/FP32 levels at
    # N = 4096 (the built-in model itself: on an AMX machine, its measured rates move it)
    from emulinalg import _cost

    model = _cost._BUILTIN["amx"]
    for dt, bits in (("float64", 53), ("float32", 24)):
        guess = _cost.likely_count("ozaki2", bits, 4096)
        shape = (dt, 4096, 4096, 4096)
        assert model.emulated_seconds(guess, *shape) > model.native_seconds(*shape)


def test_backend_int_matmul_batched_residues(rng, backend):
    from emulinalg.backends import numpy as numpy_backend

    a = rng.integers(-128, 128, size=(2, 3, 9, 70)).astype(np.float64)
    b = rng.integers(-128, 128, size=(3, 70, 5)).astype(np.float64)  # batch broadcasts
    got = backend.int_matmul(a, b, 2**14)
    assert got.dtype == np.float64 and got.shape == (2, 3, 9, 5)
    np.testing.assert_array_equal(got, numpy_backend.int_matmul(a, b, 2**14))


def test_backend_blocks_k_beyond_int32(backend):
    """k = 2**17 of (-128)(-128) sums to 2**31, which int32 cannot hold: blocked in int64."""
    k = 2**17
    a = np.full((1, k), -128.0)
    b = np.full((k, 1), -128.0)
    assert backend.int_matmul(a, b, 2**14).tolist() == [[2.0**31]]


def test_backend_sends_wide_operands_to_numpy(rng, backend, monkeypatch):
    def no_tiles(*args, **kwargs):
        raise AssertionError("operands outside int8 must not reach the tiles")

    monkeypatch.setattr(_amx, "gemm_s8s8s32", no_tiles)
    a = rng.integers(0, 256, size=(4, 30)).astype(np.float64)  # Scheme I's unsigned slices
    b = rng.integers(0, 256, size=(30, 3)).astype(np.float64)
    np.testing.assert_array_equal(backend.int_matmul(a, b, 255**2), a @ b)
    np.testing.assert_array_equal(backend.int_matmul(a, b, 2**14), a @ b)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_matmul_through_amx_backend_small(eager, backend, monkeypatch, dtype):
    """Same scheme, same integers: the product is the same to the last bit."""
    a = phi_matrix((21, 70), 1, dtype=dtype, seed=3)
    b = phi_matrix((70, 13), 1, dtype=dtype, seed=4)
    got, want = matmul_amx_and_numpy(monkeypatch, a, b, OzakiII(moduli=16))
    np.testing.assert_array_equal(got, want)


@pytest.mark.amx
@amx_only
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("phi", [0.5, 2])
def test_matmul_through_amx_backend_equals_numpy(eager, amx_backend, monkeypatch, dtype, phi):
    """Same scheme, same integers: the product is the same to the last bit."""
    a = phi_matrix((200, 1000), phi, dtype=dtype, seed=5)
    b = phi_matrix((1000, 150), phi, dtype=dtype, seed=6)
    got, want = matmul_amx_and_numpy(monkeypatch, a, b, OzakiII(moduli=16))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "complex64"])
@pytest.mark.parametrize("shape", [(21, 70, 13), (40, 130, 67)])
def test_float32_level_through_amx_backend_small(eager, backend, monkeypatch, dtype, shape):
    """The float32 level with the parts read as float32 by the C++ stages (narrow_statistics,
    narrow_products) equals the numpy backend's, whose generic code takes float64 copies: same
    count, same integers, the same product to the last bit (zero and tiny lines included)."""
    m, k, n = shape
    a = phi_matrix((m, k), 2, dtype=dtype, seed=13)
    b = phi_matrix((k, n), 2, dtype=dtype, seed=14)
    a[2] = 0
    b[:, 3] *= np.float32(2.0**-120)
    got, want = matmul_amx_and_numpy(monkeypatch, a, b, "float32")
    assert got.dtype == want.dtype == dtype
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_float32_parts_reach_the_stages_as_they_are(eager, backend, monkeypatch):
    """A real float32 product on the amx backend makes no float64 copy of its operands: every
    C++ stage that reads them (line scan, bound operands, certificate, residues) takes the
    float32 arrays themselves."""
    from emulinalg.backends import amx

    def no_copy(x):
        raise AssertionError("a float32 operand was converted to float64")

    monkeypatch.setattr(amx, "as_float64", no_copy)
    seen = []
    for name in ("line_exponents", "ozaki2_bound_operand", "ozaki2_pack", "ozaki2_refine_step"):
        real = getattr(_amx, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            seen.append((_name, args[0].dtype))
            return _real(*args, **kwargs)

        monkeypatch.setattr(_amx, name, spy)
    a = phi_matrix((30, 90), 1, dtype="float32", seed=15)
    b = phi_matrix((90, 20), 1, dtype="float32", seed=16)
    emulinalg.matmul(a, b, precision="float32")
    plan = emulinalg.last_plan()
    assert plan.backend == "amx" and plan.scheme.startswith("OzakiII")
    names = {name for name, _ in seen}
    assert {"line_exponents", "ozaki2_bound_operand", "ozaki2_pack"} <= names
    assert all(dt == np.float32 for _, dt in seen)


def test_row_blocks_with_b_residues_made_once(backend, monkeypatch):
    """The amx backend on a product cut into row blocks (B's int8 residue planes made once and
    passed to every block) equals numpy's one-block product bit for bit."""
    from emulinalg import _engine

    a = phi_matrix((45, 70), 1.0, "float64", seed=31)
    b = phi_matrix((70, 33), 1.0, "float64", seed=32)
    scheme = emulinalg.OzakiII(moduli=16)
    monkeypatch.setattr(_engine, "BLOCK_ENTRIES", 8 * 33)  # rows of 8: 6 blocks
    got = emulinalg.matmul(a, b, precision=scheme)
    assert emulinalg.last_plan().backend == "amx"
    monkeypatch.undo()
    monkeypatch.setenv("EMULINALG_AMX", "0")
    want = emulinalg.matmul(a, b, precision=scheme)
    assert emulinalg.last_plan().backend == "numpy"
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))


def _set_amx_env(monkeypatch, setting):
    """EMULINALG_AMX = setting, or unset for None."""
    if setting is None:
        monkeypatch.delenv("EMULINALG_AMX", raising=False)
    else:
        monkeypatch.setenv("EMULINALG_AMX", setting)


def test_plan_says_why_amx_is_not_used(monkeypatch):
    """numpy products on the numpy backend say why AMX is not running them: off
    (``EMULINALG_AMX=0``) or not usable on an AMX CPU, asked for (``=1``) where it is not
    usable; nothing on CPUs without AMX unless asked for, nor where AMX runs them."""
    from emulinalg.backends import numpy as nb

    asked = []

    def note(state, setting):
        monkeypatch.setattr(nb, "_cpu_has_amx", lambda: state[0])
        monkeypatch.setattr(nb, "_amx_state", lambda: asked.append(setting) or state)
        _set_amx_env(monkeypatch, setting)
        return nb.plan_note()

    amx_cpu, denied, plain = (True, True, ""), (True, False, "no permission"), (False, False, "x")
    assert note(amx_cpu, "0") == "amx backend off (EMULINALG_AMX=0)"
    assert asked == []  # "0": CPUID only, no tile-state request through emulinalg._amx
    assert note(amx_cpu, None) == "" and note(amx_cpu, "1") == ""
    assert note(denied, None) == "amx backend not usable: no permission"
    assert note(plain, None) == "" and note(plain, "0") == ""
    assert note(plain, "1") == "amx backend not usable: x"
    note(amx_cpu, "0")
    emulinalg.matmul(np.ones((2, 3)), np.ones((3, 2)), precision="native")
    assert emulinalg.last_plan().backend == "numpy"
    assert "amx backend off (EMULINALG_AMX=0)" in str(emulinalg.last_plan())


def test_numpy_products_default_to_amx_where_usable(monkeypatch):
    """``EMULINALG_AMX`` unset or "1": numpy arrays take the amx backend where AMX is usable
    (else numpy's); "0" keeps them on numpy's."""
    import emulinalg.backends
    from emulinalg.backends import amx

    def chosen(usable, setting):
        monkeypatch.setattr(amx, "usable", lambda: usable)
        _set_amx_env(monkeypatch, setting)
        return emulinalg.backends.for_namespace(np).name

    assert chosen(True, None) == "amx" and chosen(True, "1") == "amx"
    assert chosen(True, "0") == "numpy"
    assert chosen(False, None) == "numpy" and chosen(False, "1") == "numpy"


def test_to_float64_and_the_backend_conversion(rng):
    """``_amx.to_float64`` (float32 operands' parts on the amx backend) equals numpy's astype,
    views included; other dtypes are refused, never converted silently."""
    from emulinalg.backends import amx

    x = rng.standard_normal((70, 45)).astype(np.float32)
    x[3, 4] = np.float32(1e-45)  # a subnormal
    for v in (x, x.T, x[::-3, 2:], np.asfortranarray(x)):
        got = _amx.to_float64(v)
        assert got.dtype == np.float64 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, v.astype(np.float64))
        np.testing.assert_array_equal(amx.as_float64(v), v.astype(np.float64))
    for bad in (x.astype(np.float64), x[None], x.astype(np.float16)):
        with pytest.raises(ValueError, match="float32"):
            _amx.to_float64(bad)
    y = x.astype(np.float64)
    assert amx.as_float64(y) is y
