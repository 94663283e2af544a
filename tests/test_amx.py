"""emulinalg._amx tile GEMMs and the amx backend.

Everywhere (CI has no AMX): the kernels on the scalar tile model (``emulate=True``) against
exact integer / float64 references, and the amx backend running on that model against the numpy
backend. On an AMX machine (marked ``amx``, skipped elsewhere with the reason): the AMX kernels
against the model and the references, and ``emulinalg.matmul`` through the amx backend against
the numpy backend bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import emulinalg
from emulinalg import OzakiII
from emulinalg.inputs import phi_matrix

try:
    from emulinalg import _amx
except ImportError:
    _amx = None

pytestmark = pytest.mark.skipif(
    _amx is None, reason="emulinalg._amx is not built (not x86-64, or no C++ compiler)"
)

AMX_AVAILABLE = _amx is not None and _amx.available()
amx_only = pytest.mark.skipif(
    not AMX_AVAILABLE,
    reason=f"no usable AMX here: {_amx.reason() if _amx is not None else 'not built'}",
)

# (m, k, n): degenerate, odd, around the 16-row / 64-deep / 32-column tile multiples, several
# K blocks (32 tiles each) and several parallel tasks.
SHAPES = [
    (1, 1, 1),
    (7, 68, 61),
    (33, 129, 17),
    (64, 256, 48),
    (16, 64, 16),
    (32, 63, 32),
    (31, 65, 33),
    (5, 127, 3),
    (3, 128, 2),
    (2, 192, 5),
    (48, 4160, 70),
]


def random_int8(rng, shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def exact_int(a, b):
    return a.astype(np.int64) @ b.astype(np.int64)


def to_bf16_bits(x):
    """float32 -> bf16 bit patterns (uint16), rounded to nearest even."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


# ----------------------------------------------------------------------------------------------
# INT8 kernel on the tile model
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_s8_model_is_exact(rng, m, k, n):
    a, b = random_int8(rng, (m, k)), random_int8(rng, (k, n))
    c = _amx.gemm_s8s8s32(a, b, emulate=True)
    assert c.dtype == np.int32 and c.shape == (m, n)
    np.testing.assert_array_equal(c, exact_int(a, b))


def test_s8_model_thread_counts_agree(rng):
    """Different thread counts give different task blockings (blocking.hpp); all exact."""
    a, b = random_int8(rng, (100, 300)), random_int8(rng, (300, 90))
    want = exact_int(a, b)
    for threads in (1, 2, 3):
        np.testing.assert_array_equal(_amx.gemm_s8s8s32(a, b, emulate=True, threads=threads), want)


def test_s8_largest_exact_k():
    """At k = MAX_K_S8 the all -128 product reaches (2**17 - 1) 2**14, just below 2**31."""
    k = _amx.MAX_K_S8
    assert k == 2**17 - 1
    a = np.full((1, k), -128, dtype=np.int8)
    b = np.full((k, 2), -128, dtype=np.int8)
    b[:, 1] = 127
    c = _amx.gemm_s8s8s32(a, b, emulate=True)
    assert c.tolist() == [[k * 2**14, -k * 128 * 127]]


def test_s8_rejects_k_beyond_bound():
    k = _amx.MAX_K_S8 + 1
    with pytest.raises(ValueError, match="MAX_K_S8"):
        _amx.gemm_s8s8s32(np.zeros((1, k), np.int8), np.zeros((k, 1), np.int8), emulate=True)


def test_s8_shape_and_dtype_errors():
    a = np.zeros((3, 4), np.int8)
    with pytest.raises(ValueError, match="inner dimensions"):
        _amx.gemm_s8s8s32(a, np.zeros((5, 2), np.int8), emulate=True)
    with pytest.raises(ValueError, match="2-D"):
        _amx.gemm_s8s8s32(np.zeros(4, np.int8), np.zeros((4, 2), np.int8), emulate=True)
    with pytest.raises(TypeError):  # no silent float -> int8 truncation
        _amx.gemm_s8s8s32(a.astype(np.float64), np.zeros((4, 2)), emulate=True)


def test_s8_empty_and_k0():
    assert _amx.gemm_s8s8s32(
        np.zeros((0, 3), np.int8), np.zeros((3, 4), np.int8), emulate=True
    ).shape == (0, 4)
    c = _amx.gemm_s8s8s32(np.zeros((2, 0), np.int8), np.zeros((0, 3), np.int8), emulate=True)
    assert c.tolist() == [[0, 0, 0], [0, 0, 0]]


def test_no_amx_call_without_amx():
    if AMX_AVAILABLE:
        pytest.skip("AMX is available here")
    from emulinalg.backends import amx

    assert _amx.reason() and amx.reason() == _amx.reason()
    assert not amx.usable()
    with pytest.raises(RuntimeError, match="not available"):
        _amx.gemm_s8s8s32(np.zeros((2, 2), np.int8), np.zeros((2, 2), np.int8))
    with pytest.raises(RuntimeError, match="not usable"):
        amx.int_matmul(np.ones((2, 2)), np.ones((2, 2)), 2**14)


# ----------------------------------------------------------------------------------------------
# BF16 kernel on the tile model
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "k", "n"), [s for s in SHAPES if s[1] <= 512])
def test_bf16_model_small_integers_exact(rng, m, k, n):
    """Integers in [-16, 16]: every partial sum is an integer below 2**24, exact in any order."""
    a = to_bf16_bits(rng.integers(-16, 17, size=(m, k)))
    b = to_bf16_bits(rng.integers(-16, 17, size=(k, n)))
    c = _amx.gemm_bf16bf16f32(a, b, emulate=True)
    assert c.dtype == np.float32 and c.shape == (m, n)
    np.testing.assert_array_equal(c, (bf16_value(a) @ bf16_value(b)).astype(np.float32))


@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_bf16_model_within_fp32_accumulation_bound(rng, m, k, n):
    """Products of bf16 values are exact in fp32; only the k additions round (u = 2**-24)."""
    a = to_bf16_bits(rng.standard_normal((m, k)))
    b = to_bf16_bits(rng.standard_normal((k, n)))
    c = _amx.gemm_bf16bf16f32(a, b, emulate=True).astype(np.float64)
    av, bv = bf16_value(a), bf16_value(b)
    err = np.abs(c - av @ bv)
    bound = (k + 2) * 2.0**-24 * (np.abs(av) @ np.abs(bv))
    assert np.all(err <= bound)


def test_bf16_model_flushes_subnormals():
    """TDPBF16PS treats subnormal inputs as zero and flushes subnormal results (SDM)."""
    one = to_bf16_bits(np.float32(1.0))
    sub = np.uint16(0x0040)  # 2**-127, a bf16 subnormal
    big = to_bf16_bits(np.float32(2.0**10))
    c = _amx.gemm_bf16bf16f32(
        np.array([[sub, one]]), np.array([[big], [0]], np.uint16), emulate=True
    )
    assert c[0, 0] == 0.0  # 2**-117 without DAZ
    tiny = to_bf16_bits(np.float32([[2.0**-100]]))
    c = _amx.gemm_bf16bf16f32(tiny, to_bf16_bits(np.float32([[2.0**-30]])), emulate=True)
    assert c[0, 0] == 0.0  # 2**-130 is subnormal in fp32


# ----------------------------------------------------------------------------------------------
# amx backend: on the tile model everywhere, and on AMX where available
# ----------------------------------------------------------------------------------------------


def force_amx_backend(monkeypatch, emulate):
    """Make numpy products use the amx backend, on the tile model or on AMX."""
    import emulinalg.backends
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", emulate)
    monkeypatch.setattr(emulinalg.backends, "for_namespace", lambda xp: amx)
    return amx


@pytest.fixture(
    params=[True, pytest.param(False, marks=[pytest.mark.amx, amx_only])], ids=["model", "amx"]
)
def backend(request, monkeypatch):
    """The amx backend on the tile model (no AMX instruction, runs everywhere), and on AMX."""
    return force_amx_backend(monkeypatch, emulate=request.param)


@pytest.fixture
def amx_backend(monkeypatch):
    """The amx backend on the AMX tiles."""
    return force_amx_backend(monkeypatch, emulate=False)


def matmul_amx_and_numpy(monkeypatch, a, b, precision):
    """emulinalg.matmul through the (already forced) amx backend, then through numpy's."""
    got = emulinalg.matmul(a, b, precision=precision)
    assert emulinalg.last_plan().backend == "amx"
    monkeypatch.undo()
    want = emulinalg.matmul(a, b, precision=precision)
    assert emulinalg.last_plan().backend == "numpy"
    return got, want


def test_backend_surface():
    from emulinalg.backends import amx

    assert amx.name == "amx"
    assert amx.usable() == AMX_AVAILABLE
    assert amx.MAX_K == _amx.MAX_K_S8
    assert amx.k_block(amx.MAX_K, 2**14) is None
    assert amx.k_block(amx.MAX_K + 1, 2**14) == amx.K_BLOCK <= amx.MAX_K
    assert amx.K_BLOCK % 64 == 0
    # performant: the cost model fitted on the AMX host keeps native at FP64/FP32 levels
    from emulinalg import _cost

    for dt, bits in (("float64", 53), ("float32", 24)):
        guess = _cost.likely_count("ozaki2", bits, 4096)
        assert not _cost.emulation_faster("amx", guess, dt, 4096, 4096, 4096)


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


# ----------------------------------------------------------------------------------------------
# On AMX hardware
# ----------------------------------------------------------------------------------------------

AMX_SHAPES = SHAPES + [(300, 1000, 500), (513, 2049, 257), (256, 8192, 256)]


@pytest.mark.amx
@amx_only
@pytest.mark.parametrize("threads", [1, 0])
@pytest.mark.parametrize(("m", "k", "n"), AMX_SHAPES)
def test_s8_amx_equals_model_and_exact(rng, m, k, n, threads):
    a, b = random_int8(rng, (m, k)), random_int8(rng, (k, n))
    c = _amx.gemm_s8s8s32(a, b, threads=threads)
    assert c.dtype == np.int32 and c.shape == (m, n)
    np.testing.assert_array_equal(c, _amx.gemm_s8s8s32(a, b, emulate=True))
    np.testing.assert_array_equal(c, exact_int(a, b))


@pytest.mark.amx
@amx_only
def test_s8_amx_largest_exact_k():
    k = _amx.MAX_K_S8
    a = np.full((1, k), -128, dtype=np.int8)
    b = np.full((k, 2), -128, dtype=np.int8)
    b[:, 1] = 127
    assert _amx.gemm_s8s8s32(a, b).tolist() == [[k * 2**14, -k * 128 * 127]]


@pytest.mark.amx
@amx_only
@pytest.mark.parametrize(("m", "k", "n"), AMX_SHAPES)
def test_bf16_amx_within_fp32_accumulation_bound(rng, m, k, n):
    a = to_bf16_bits(rng.standard_normal((m, k)))
    b = to_bf16_bits(rng.standard_normal((k, n)))
    c = _amx.gemm_bf16bf16f32(a, b).astype(np.float64)
    av, bv = bf16_value(a), bf16_value(b)
    bound = (k + 2) * 2.0**-24 * (np.abs(av) @ np.abs(bv))
    assert np.all(np.abs(c - av @ bv) <= bound)


@pytest.mark.amx
@amx_only
def test_bf16_amx_small_integers_exact_and_flushes(rng):
    a = to_bf16_bits(rng.integers(-16, 17, size=(70, 300)))
    b = to_bf16_bits(rng.integers(-16, 17, size=(300, 45)))
    want = (bf16_value(a) @ bf16_value(b)).astype(np.float32)
    np.testing.assert_array_equal(_amx.gemm_bf16bf16f32(a, b), want)
    sub = np.array([[0x0040, 0x3F80]], np.uint16)  # [2**-127 (subnormal), 1.0]
    big = np.array([[0x4480], [0]], np.uint16)  # [2**10, 0]
    assert _amx.gemm_bf16bf16f32(sub, big)[0, 0] == 0.0


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
