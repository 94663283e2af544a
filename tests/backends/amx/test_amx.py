"""emulinalg._amx tile GEMMs and the amx backend.

Everywhere (CI has no AMX): the kernels on the scalar tile model (``emulate=True``) against
exact integer / float64 references, and the amx backend running on that model against the numpy
backend. On an AMX machine (marked ``amx``, skipped elsewhere with the reason): the AMX kernels
against the model and the references, and ``emulinalg.matmul`` through the amx backend against
the numpy backend bit for bit.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from _helpers import certificate_counts, rounding_cases, scaled_integer, tie_operands

import emulinalg
from emulinalg import OzakiII
from emulinalg.algorithm.certificate import Target
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
# Blocking knobs (blocking.hpp): results never depend on them
# ----------------------------------------------------------------------------------------------

# Small blocks so that the shapes below cross every loop boundary (C blocks, K chunks, edge
# register blocks, thread regions), both loop orders, schedules, prefetch modes, partitions and
# the unpacked-A path.
TUNINGS = [
    "default",
    "mc=32,nc=32,kc=1",
    "mc=64,nc=32,kc=3,order=1",
    "kc=2,sched=1,prefetch=3",
    "mc=32,nc=64,kc=4,sched=2,prefetch=2,partition=1",
    "mc=32,nc=32,kc=1,order=1,prefetch=3,partition=1",
    "kc=3,pack_a=0",
    "mc=32,nc=32,kc=2,order=1,prefetch=3,pack_a=0",
    "kc=100000,prefetch=0",
    "mc=32,nc=64,kc=2,nest=1",
    "mc=64,nc=32,kc=3,nest=1,order=1,partition=1,prefetch=3",
    "kc=2,stream=1,sched=2",
    "mc=32,nc=32,kc=5,order=1,stream=1,pack_a=0",
]
TUNING_SHAPES = [(33, 129, 17), (64, 256, 96), (96, 640, 160), (128, 1280, 64)]
# the larger two in the long tier, for the tests that run many products per shape
TUNING_SHAPES_TIERED = [
    s if s[1] <= 256 else pytest.param(*s, marks=pytest.mark.slow) for s in TUNING_SHAPES
]


@pytest.fixture
def restore_blocking():
    """Give each test the default knobs and put back whatever was set before."""
    before = _amx.set_blocking("default")
    yield
    _amx.set_blocking(before["spec"])


@pytest.mark.parametrize("spec", TUNINGS)
@pytest.mark.parametrize(("m", "k", "n"), TUNING_SHAPES)
def test_s8_model_exact_under_every_blocking(rng, restore_blocking, spec, m, k, n):
    a, b = random_int8(rng, (m, k)), random_int8(rng, (k, n))
    want = exact_int(a, b)
    _amx.set_blocking(spec)
    for threads in (1, 3, 4):
        np.testing.assert_array_equal(_amx.gemm_s8s8s32(a, b, emulate=True, threads=threads), want)


@pytest.mark.parametrize(("m", "k", "n"), TUNING_SHAPES_TIERED)
def test_bf16_model_bit_identical_under_every_blocking(rng, restore_blocking, m, k, n):
    """Each entry sums its K tiles in ascending order whatever the blocking and threads."""
    a = to_bf16_bits(rng.standard_normal((m, k)))
    b = to_bf16_bits(rng.standard_normal((k, n)))
    want = _amx.gemm_bf16bf16f32(a, b, emulate=True, threads=1).view(np.uint32)
    for spec in TUNINGS:
        _amx.set_blocking("default," + spec)
        for threads in (1, 3):
            got = _amx.gemm_bf16bf16f32(a, b, emulate=True, threads=threads)
            np.testing.assert_array_equal(got.view(np.uint32), want, err_msg=spec)


def test_set_blocking_interface(restore_blocking):
    assert _amx.blocking()["spec"] == (
        "mc=0,nc=0,kc=0,order=0,sched=2,prefetch=1,partition=1,pack_a=1,nest=1,stream=0,widen=1"
    )  # the defaults: the sweep's best on the AMX host (blocking.hpp)
    before = _amx.set_blocking("mc=64,kc=4", order=1)
    assert before["mc"] == 0 and before["order"] == 0
    now = _amx.blocking()
    assert (now["mc"], now["kc"], now["order"], now["nc"]) == (64, 4, 1, 0)
    assert _amx.set_blocking(prefetch=0)["spec"] == now["spec"]  # returns the previous
    for bad in ("mc=33", "order=2", "sched=3", "prefetch=4", "nc=-32", "kc=x", "mc", "nest=2"):
        with pytest.raises(ValueError):
            _amx.set_blocking(bad)
    with pytest.raises(ValueError, match="unknown"):
        _amx.set_blocking(bogus=1)
    with pytest.raises(ValueError, match="unknown"):
        _amx.set_blocking("kc=2,foo=1")
    assert _amx.blocking()["prefetch"] == 0  # a failed call changes nothing
    _amx.set_blocking("default")
    assert _amx.blocking()["spec"] == before["spec"]


def test_plan_thread_grid(restore_blocking):
    """Static partition: near-square regions, idle threads only when blocks run out."""
    _amx.set_blocking("default,partition=0,nest=0,sched=0,nc=512,kc=8")
    assert _amx.plan(8192, 8192, 8192, threads=16)["grid"] == (4, 4)
    assert _amx.plan(4096, 4096, 4096, threads=1)["grid"] == (1, 1)
    assert _amx.plan(32, 8192, 64, threads=16)["grid"] == (1, 16)
    assert _amx.plan(8192, 64, 64, threads=16)["grid"] == (16, 1)
    p = _amx.plan(1, 1, 1, threads=16)
    assert p["grid"] == (1, 1) and p["team"] == 1
    p = _amx.plan(8192, 4096, 8192, threads=8)
    assert p["grid"] == (4, 2) and p["team"] == 8
    p = _amx.plan(4096, 4096, 4096, threads=16)
    assert (p["mc"], p["nc"], p["kc"]) == (256, 512, 8) and p["ktiles"] == 64
    assert _amx.plan(4096, 4096, 4096, dtype="bf16", threads=16)["ktiles"] == 128
    assert _amx.plan(64, 64, 100, threads=1)["kc"] == 2  # never more than the K tiles
    _amx.set_blocking(partition=1)
    p = _amx.plan(1024, 1024, 1024, threads=16)
    assert p["tasks"] >= 32 and p["team"] == 16
    _amx.set_blocking(pack_a=0)
    assert not _amx.plan(64, 64, 128)["pack_a"]
    assert _amx.plan(63, 64, 128)["pack_a"]  # padding needed: packed anyway
    assert _amx.plan(64, 64, 100)["pack_a"]


@pytest.mark.parametrize(
    ("env", "want", "warns"),
    [("kc=3,order=1", "kc=3", False), ("mc=31", "mc=0", True), ("junk", "mc=0", True)],
)
def test_blocking_from_environment(env, want, warns):
    import os
    import subprocess
    import sys

    code = (
        "import warnings; warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    from emulinalg import _amx\n"
        "print(_amx.blocking()['spec']); print(len(w))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, EMULINALG_AMX_BLOCKING=env),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert want in out[0]
    assert (int(out[1]) > 0) == warns


def test_output_alignment_and_ownership(rng):
    a, b = random_int8(rng, (7, 64)), random_int8(rng, (64, 33))
    c = _amx.gemm_s8s8s32(a, b, emulate=True)
    assert c.ctypes.data % 64 == 0 and c.flags.c_contiguous and c.flags.writeable
    c[0, 0] += 1  # the array owns its buffer: writable, freed with it
    big = _amx.gemm_s8s8s32(
        np.zeros((1024, 1), np.int8), np.zeros((1, 1024), np.int8), emulate=True
    )
    assert big.ctypes.data % (2 << 20) == 0 and not big.any()
    del c, big


def test_panel_cache(rng):
    a, b = random_int8(rng, (64, 640)), random_int8(rng, (640, 64))
    _amx.gemm_s8s8s32(a, b, emulate=True)
    info = _amx.cache_info()
    assert info["limit_bytes"] > 0 and 0 < info["cached_bytes"] <= info["limit_bytes"]
    np.testing.assert_array_equal(_amx.gemm_s8s8s32(a, b, emulate=True), exact_int(a, b))
    assert _amx.clear_cache() > 0 and _amx.cache_info()["cached_bytes"] == 0


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
    monkeypatch.setenv("EMULINALG_AMX", "0")  # numpy's backend also where AMX is the default
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
@pytest.mark.parametrize("spec", TUNINGS)
def test_s8_amx_exact_under_every_blocking(rng, restore_blocking, spec):
    """Every loop order, schedule, prefetch mode, partition and the unpacked-A path on AMX."""
    _amx.set_blocking(spec)
    for m, k, n in [(300, 1000, 500), (256, 2048, 320), (33, 129, 17)]:
        a, b = random_int8(rng, (m, k)), random_int8(rng, (k, n))
        want = a.astype(np.float64) @ b.astype(np.float64)  # exact: |sum| <= k 2**14 < 2**53
        for threads in (1, 0):
            np.testing.assert_array_equal(_amx.gemm_s8s8s32(a, b, threads=threads), want)


@pytest.mark.amx
@amx_only
@pytest.mark.parametrize("spec", ["default", "mc=32,nc=32,kc=3,order=1,prefetch=3,partition=1"])
@pytest.mark.parametrize(("m", "k", "n"), [(97, 1000, 130), (64, 4096, 64), (33, 129, 17)])
def test_bf16_amx_bit_identical_to_model(rng, restore_blocking, spec, m, k, n):
    """The tile model runs the AMX kernel's accumulation order with TDPBF16PS as the SDM's
    pseudo-code has it; a mismatch here means hardware rounds differently from the SDM (the
    model's dpbf16ps), not that the kernel's order changed (that is checked on the model)."""
    _amx.set_blocking(spec)
    a = to_bf16_bits(rng.standard_normal((m, k)))
    b = to_bf16_bits(rng.standard_normal((k, n)))
    got = _amx.gemm_bf16bf16f32(a, b, threads=0)
    want = _amx.gemm_bf16bf16f32(a, b, emulate=True)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


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


# ----------------------------------------------------------------------------------------------
# the C++ residue/CRT pipeline (src_amx/ozaki2_host.cpp) behind the amx backend's product hook
# ----------------------------------------------------------------------------------------------


def _pipeline_inputs(case, rng):
    m, k, n = 37, 150, 29
    if case == "phi":
        a = phi_matrix((m, k), 2.0, "float64", seed=41)
        b = phi_matrix((k, n), 2.0, "float64", seed=42)
    elif case == "wide":  # rows/columns spanning 2**+-300, zero lines, subnormals
        a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-300, 300, (m, 1)))
        b = rng.standard_normal((k, n)) * np.exp2(rng.integers(-300, 300, (1, n)))
        a[3] = 0.0
        b[:, 5] = 0.0
        a[7, :5] = 5e-324
    else:  # huge: results near overflow
        a = rng.uniform(-1, 1, (m, k)) * 2.0**1000
        b = rng.uniform(-1, 1, (k, n)) * 2.0**20
    return a, b


def _assert_product_equal(ar, ai, br, bi, moduli, out_dtype):
    """amx.ozaki2_product == products.product (numpy) byte for byte, part by part (dtype
    included), on the generic prescale; returns the hook's parts."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import products
    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    pre = ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
    got = amx.ozaki2_product(ar, ai, br, bi, moduli, "accurate", out_dtype, pre)
    with np.errstate(over="ignore"):  # float32 results beyond range round to inf, as native
        want = products.product(
            xp, npb.int_matmul, ar, ai, br, bi, moduli, "accurate", out_dtype, pre
        )
    assert got is not None and len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and np.array_equal(g.view(np.uint8), w.view(np.uint8))
    return got


@pytest.mark.parametrize("case", ["phi", "wide", "huge"])
@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("moduli", [2, 9, 17, 20])
def test_host_pipeline_equals_the_generic_product(case, out_dtype, moduli, monkeypatch, rng):
    """amx.ozaki2_product (C++ residues and CRT, tile-model INT8 GEMMs) against
    emulinalg.algorithm.products.product on numpy, bit for bit, views included."""
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    a, b = _pipeline_inputs(case, rng)
    _assert_product_equal(np.asfortranarray(a)[::-1], None, b, None, moduli, out_dtype)


def test_host_pipeline_declines_what_it_does_not_cover(monkeypatch):
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    a, b = np.ones((4, 8)), np.ones((8, 3))
    pre = (np.zeros(4, np.int64), np.zeros(3, np.int64), np.ones(4), np.ones(3))
    assert amx.ozaki2_product(a, a, b, None, 9, "accurate", "float64", pre) is None  # half complex
    assert amx.ozaki2_product(a[None], None, b[None], None, 9, "accurate", "float64", pre) is None
    assert amx.ozaki2_product(a, None, b, None, 9, "accurate", "float64", None) is None


def test_level_products_use_the_host_pipeline(backend, monkeypatch):
    """The default level through the amx backend runs the hook and equals numpy's product."""
    from emulinalg.backends import amx

    calls = []
    real = amx.ozaki2_product
    monkeypatch.setattr(amx, "ozaki2_product", lambda *args: calls.append(1) or real(*args))
    a = phi_matrix((60, 90), 1.0, "float64", seed=51)
    b = phi_matrix((90, 40), 1.0, "float64", seed=52)
    with emulinalg.config(strategy="eager"):
        got, want = matmul_amx_and_numpy(monkeypatch, a, b, None)
    assert calls
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))


def _assert_statistics_equal(ar, ai, br, bi, target):
    """amx.ozaki2_prescale == scaling.ozaki2_prescale (values and dtypes), and
    amx.ozaki2_certificate's (count, beyond) == certificate.ozaki2_moduli_needed's for ``target``
    (a ``certificate.Target``, or a number of bits: the strict form, then the native one)."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import certificate
    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    want_pre = ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
    pre = amx.ozaki2_prescale(ar, ai, br, bi, "accurate")
    assert pre is not None and len(pre) == 4
    for got, want in zip(pre, want_pre):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert pre.lower.dtype == np.int32 and np.array_equal(pre.lower, want_pre.lower)  # F
    targets = (target,)
    if not isinstance(target, certificate.Target):
        targets = (certificate.Target(target), certificate.Target(target, "native"))
    for t in targets:
        want = certificate.ozaki2_moduli_needed(xp, npb, ar, ai, br, bi, want_pre, t)
        got = amx.ozaki2_certificate(ar, ai, br, bi, pre, t)
        assert got is not None and got[0] == want[0], (t, got[0], want[0])
        assert np.array_equal(got[1], want[1])
        assert (got[2] is None) == (want[2] is None)  # the patch
        assert got[2] is None or np.array_equal(got[2], want[2])
    return want_pre, want


@pytest.mark.parametrize("case", ["phi", "wide", "huge", "phi4"])
@pytest.mark.parametrize("bits", [24, 53, 70])
def test_host_statistics_equal_the_generic_ones(case, bits, monkeypatch, rng):
    """amx.ozaki2_prescale equals scaling.ozaki2_prescale exactly, and amx.ozaki2_certificate
    gives certificate.ozaki2_moduli_needed's count and mask (same float32 lower bound), strided
    views included."""

    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    if case == "phi4":
        a = phi_matrix((41, 300), 4.0, "float64", seed=61)
        b = phi_matrix((300, 27), 4.0, "float64", seed=62)
    else:
        a, b = _pipeline_inputs(case, rng)
    _assert_statistics_equal(np.asfortranarray(a)[::-1], None, b, None, bits)


def test_host_statistics_decline_what_they_do_not_cover(monkeypatch):
    import array_api_compat.numpy as xp

    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    monkeypatch.setattr(amx, "EMULATE", True)
    a, b = np.ones((4, 8)), np.ones((8, 3))
    assert amx.ozaki2_prescale(a, None, b, None, "fast") is None
    assert amx.ozaki2_prescale(a, a, b, None, "accurate") is None  # half complex
    assert amx.ozaki2_prescale(a, np.ones((1, 8)), b, b, "accurate") is None  # broadcast im
    assert amx.ozaki2_prescale(a, a.astype(np.float32), b, b, "accurate") is None
    pre = amx.ozaki2_prescale(a, None, b, None, "accurate")
    target = Target(53)
    assert amx.ozaki2_certificate(a, None, b, b, pre, target) is None
    assert amx.ozaki2_certificate(a, None, b, None, None, target) is None
    assert amx.ozaki2_certificate(a, None, b, None, tuple(pre), target) is None  # no .lower
    generic = ozaki2_prescale(xp, npb.int_matmul, a, None, b, None, "accurate")
    assert amx.ozaki2_certificate(a, None, b, None, generic, target) is None  # not made here


def _spanning_inputs(rng, cplx, n=23):
    """Entries spanning 2**+-40 within every line (most floor to 0 in the bound operands, so
    F leaves entries beyond), one line of A zero."""
    m, k = 29, 160
    a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-40, 41, (m, k)))
    b = rng.standard_normal((k, n)) * np.exp2(rng.integers(-40, 41, (k, n)))
    if cplx:
        a = a + 1j * rng.standard_normal((m, k)) * np.exp2(rng.integers(-40, 41, (m, k)))
        b = b + 1j * rng.standard_normal((k, n)) * np.exp2(rng.integers(-40, 41, (k, n)))
    a[6] = 0
    return a, b


def _phi_operands(cplx, seed, shape):
    m, k, n = shape
    dt = "complex128" if cplx else "float64"
    a = phi_matrix((m, k), 1, dt, seed=seed)
    b = phi_matrix((k, n), 1, dt, seed=seed + 50)
    ar, ai = (a.real.copy(), a.imag.copy()) if cplx else (a, None)
    br, bi = (b.real.copy(), b.imag.copy()) if cplx else (b, None)
    return ar, ai, br, bi


def _generic_steps(ar, ai, br, bi, target):
    """The generic certificate (numpy backend: the float32 lower bound, as the AMX backend's)
    on these operands: (count, patch, count without the refinement (REFINE_STEPS 0), whether the
    exact step took a count off the bisection's)."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import certificate
    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.backends import numpy as npb

    pre = ozaki2_prescale(xp, npb.int_matmul, ar, ai, br, bi, "accurate")
    count, patch, unrefined = certificate_counts(xp, npb, ar, ai, br, bi, pre, target)
    cc = certificate.cert_constants(ar.shape[-1], target, ai is not None)
    _, na, nb = certificate.normalized(xp, ar, ai, br, bi, cc.norm)
    R = cc.cR * certificate.bound_lower(xp, pre.lower, ai is not None, pre.mixed)
    need = certificate.ozaki2_needed(xp, cc, R, na, nb, pre[2], pre[3])
    top = int(need[need != certificate.BEYOND].max())
    step = bool(certificate.exact_passes(xp, cc, top - 1, R, na, nb, pre[2], pre[3]).all())
    return count, patch, unrefined, step


# (cplx, target, want): the refinement takes counts off ("refines"), also after a successful
# exact step ("after-step": the suspects fail two counts below the bisection's count), and with
# a patch ("patch"); the first phi = 1 seed that shows it
_REFINE_CASES = [
    (False, Target(53), "refines"),
    (True, Target(24), "after-step"),
    (False, Target(24, "native"), "refines"),
    (True, Target(53, "native"), "refines"),
    (False, Target(53), "patch"),
    (True, Target(24, "native"), "patch"),
]


@pytest.mark.parametrize("cplx,target,want", _REFINE_CASES, ids=str)
def test_host_certificate_refinement(cplx, target, want, monkeypatch):
    """phi = 1 inputs where the suspect refinement (refinement.refine_and_patch, on the entries that
    fail the C++ exact pass one count lower) takes counts off the bound GEMM's bound alone:
    amx.ozaki2_certificate gives the generic count, mask and patch, also without the
    refinement (no step), with too many suspects (none refined) and with one step only."""
    from emulinalg.algorithm import refinement
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    for seed in range(24):
        ops = _phi_operands(cplx, seed, (40, 500, 30))
        full, patch, unrefined, step = _generic_steps(*ops, target)
        if (
            full < unrefined
            and (patch is not None) == (want == "patch")
            and (want != "after-step" or step)
        ):
            break
    else:
        raise AssertionError(f"no seed shows {want!r}")
    _, (count, _, _) = _assert_statistics_equal(*ops, target)
    assert count == full
    limit = "SUSPECTS_MAX" if target.guarantee == "native" else "REFINE_ENTRIES"
    for name, value in (("REFINE_STEPS", 0), (limit, 0), ("REFINE_STEPS", 1)):
        with monkeypatch.context() as mp:
            mp.setattr(refinement, name, value)
            _assert_statistics_equal(*ops, target)


@pytest.mark.parametrize("cplx", [False, True])
def test_host_certificate_exact_step(cplx, monkeypatch):
    """Inputs where the exact step (the C++ pass at threshold 1 with the exact line factors)
    takes a count off the bisection's: the generic count and mask, for both forms."""
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    found = set()
    for seed in range(12):
        ops = _phi_operands(cplx, seed, (20, 64, 20))
        for target in (Target(53), Target(53, "native")):
            if target.guarantee not in found and _generic_steps(*ops, target)[3]:
                _assert_statistics_equal(*ops, target)
                found.add(target.guarantee)
    assert found == {"strict", "native"}


@pytest.mark.parametrize("case", ["spanning", "spanning-complex", "phi4"])
@pytest.mark.parametrize("guarantee", ["strict", "native"])
@pytest.mark.parametrize("bits", [24, 53, 70])
def test_host_certificate_gemm_fallback(case, bits, guarantee, monkeypatch, rng):
    """Inputs where the bound GEMM F alone leaves entries beyond every count (checked on the
    generic code): amx.ozaki2_certificate runs the float32 GEMM once (the fallback) and its
    count and mask equal certificate.ozaki2_moduli_needed's."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import certificate
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    if case == "phi4":
        a = phi_matrix((41, 300), 4.0, "float64", seed=61)
        b = phi_matrix((300, 27), 4.0, "float64", seed=62)
    else:
        a, b = _spanning_inputs(rng, case.endswith("complex"))
    ar, br = np.real(a), np.real(b)
    ai, bi = (np.imag(a), np.imag(b)) if np.iscomplexobj(a) else (None, None)
    calls = []
    real = amx.native_matmul
    monkeypatch.setattr(amx, "native_matmul", lambda x, y: calls.append(1) or real(x, y))
    target = Target(bits, guarantee)
    pre, (_, beyond, _) = _assert_statistics_equal(ar, ai, br, bi, target)
    assert len(calls) == 1
    # the fallback was needed: the F bound alone (the certificate's first pass) leaves more beyond
    cplx = ai is not None
    k = ar.shape[-1]
    cc = certificate.cert_constants(k, target, cplx)
    _, na, nb = certificate.normalized(xp, ar, ai, br, bi, cc.norm)
    R = cc.cR * certificate.bound_lower(xp, pre.lower, cplx, pre.mixed)
    beyond_f = certificate.ozaki2_needed(xp, cc, R, na, nb, pre[2], pre[3]) == certificate.BEYOND
    assert beyond_f.any() and beyond_f.sum() > beyond.sum()
    assert not (beyond & ~beyond_f).any()


@pytest.mark.parametrize("case", ["phi", "phi-complex", "spanning", "spanning-complex"])
@pytest.mark.parametrize("bits", [24, 53])
def test_host_certificate_runs_of_64_columns(case, bits, monkeypatch, rng):
    """n = 150 columns: cert_entries' vectorized runs of 64 (on F alone, and with the float32
    GEMM's sums for the spanning inputs) and its scalar tail give the certificate's count and
    mask."""
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    cplx = case.endswith("complex")
    if case.startswith("phi"):
        dt = "complex128" if cplx else "float64"
        a = phi_matrix((33, 200), 1.0, dt, seed=91)
        b = phi_matrix((200, 150), 1.0, dt, seed=92)
    else:
        a, b = _spanning_inputs(rng, cplx, n=150)
    ar, br = np.ascontiguousarray(np.real(a)), np.ascontiguousarray(np.real(b))
    ai = np.ascontiguousarray(np.imag(a)) if cplx else None
    bi = np.ascontiguousarray(np.imag(b)) if cplx else None
    _assert_statistics_equal(ar, ai, br, bi, bits)


def test_host_certificate_without_fallback_reads_no_operand(monkeypatch):
    """Where F certifies every entry, the certificate runs no GEMM and no operand pass (the l1
    norms come from the prescale's pass)."""
    from emulinalg import _amx
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    a = phi_matrix((37, 150), 1.0, "float64", seed=41)
    b = phi_matrix((150, 29), 1.0, "float64", seed=42)
    calls = []
    monkeypatch.setattr(amx, "native_matmul", lambda *x: calls.append("gemm"))
    real = _amx.ozaki2_cert_operand
    monkeypatch.setattr(_amx, "ozaki2_cert_operand", lambda *x: calls.append("op") or real(*x))
    _, (count, beyond, _) = _assert_statistics_equal(a, None, b, None, 53)
    assert count is not None and not beyond.any() and calls == []


def test_host_bound_max_equals_bound_upper(rng):
    """ozaki2_bound_max: the row and column maxima of scaling.bound_upper over F, / 4, exactly
    (single rows and columns included: the per-thread column maxima are merged)."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import scaling

    for m, n in ((1, 1), (1, 300), (300, 1), (257, 131)):
        F = rng.integers(0, 2**30, (m, n)).astype(np.int32)
        ra, nza = rng.integers(0, 10**6, m), rng.integers(0, 3000, m)
        cb, nzb = rng.integers(0, 10**6, n), rng.integers(0, 3000, n)
        nza[0] = 0  # a zero line
        for cplx in (False, True):
            e, f = _amx.ozaki2_bound_max(F, ra, nza, cb, nzb, cplx)
            U = scaling.bound_upper(
                xp, F.astype(np.float64), *(v.astype(np.float64) for v in (ra, nza, cb, nzb)), cplx
            )
            assert e.dtype == f.dtype == np.float64
            assert np.array_equal(e, U.max(axis=1) * 0.25)
            assert np.array_equal(f, U.max(axis=0) * 0.25)


def test_host_bound_operand_line_terms(rng):
    """ozaki2_bound_operand's operand, sums and nonzero counts equal scaling.bound_operand's;
    its l1 and sq are the column-order sums of the normalized x = |re| + |im| and of x**2
    (certificate.line_norm's, before its factor and root, summed in another order)."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import scaling

    a = rng.standard_normal((13, 70)) * np.exp2(rng.integers(-60, 60, (13, 70)))
    ai = rng.standard_normal((13, 70))
    a[2] = 0
    ai[2, 5] = -0.0
    a[4, 3:9] = 5e-324
    for im in (None, ai):
        cplx = im is not None
        s, bound, sums, nz, l1, mixed, sq = _amx.ozaki2_bound_operand(a, True, im)
        ea = scaling.max_exponent(xp, a, im, axis=-1)
        assert s.dtype == np.int64 and np.array_equal(s, 5 - int(cplx) - ea)
        want, wsums, wnz = scaling.bound_operand(xp, a, im, s, axis=-1)
        assert bound.dtype == np.int8 and np.array_equal(bound, want)
        assert sums.dtype == np.int64 and np.array_equal(sums, wsums)
        assert nz.dtype == np.int64 and np.array_equal(nz, wnz)
        if cplx:
            assert np.array_equal(mixed, scaling.mixed_lines(xp, a, im, axis=-1))
        x = np.abs(np.ldexp(a, -ea[:, None]))
        if cplx:
            x = x + np.abs(np.ldexp(im, -ea[:, None]))
        seq, seq2 = np.zeros(13), np.zeros(13)
        for c in range(70):
            seq = seq + x[:, c]
            seq2 = seq2 + x[:, c] * x[:, c]
        assert np.array_equal(l1, seq) and np.array_equal(sq, seq2)
        # lines across memory (the other loop order) and the (C, R) layout: same values
        t, bound_t, *terms = _amx.ozaki2_bound_operand(
            np.asfortranarray(a), False, None if im is None else np.asfortranarray(im)
        )
        assert np.array_equal(t, s) and np.array_equal(bound_t, bound.T)
        for got, w in zip(terms, (sums, nz, l1, mixed, sq)):
            assert np.array_equal(got, w)


def test_host_crt_from_two_threads_at_once(monkeypatch):
    """Two Python threads in the C++ CRT together (it releases the GIL, then takes the lock of
    its digit tables): both finish, with the generic results."""
    import threading

    import array_api_compat.numpy as xp

    from emulinalg.algorithm import products
    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    monkeypatch.setattr(amx, "EMULATE", True)
    a = phi_matrix((400, 3), 1.0, "float64", seed=71)
    b = phi_matrix((3, 400), 1.0, "float64", seed=72)
    pre = ozaki2_prescale(xp, npb.int_matmul, a, None, b, None, "accurate")
    want = products.product(xp, npb.int_matmul, a, None, b, None, 20, "accurate", "float64", pre)
    results, errors = [], []

    def work():
        try:
            for _ in range(5):
                results.append(amx.ozaki2_product(a, None, b, None, 20, "accurate", "float64", pre))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "the CRT calls did not finish (deadlock?)"
    assert not errors and len(results) == 10
    assert all(np.array_equal(r[0], want[0]) for r in results)


def test_host_crt_with_fewer_openmp_threads_than_asked(tmp_path):
    """OMP_THREAD_LIMIT below OMP_NUM_THREADS: every output row is still written."""
    import subprocess
    import sys

    code = (
        "import numpy as np, array_api_compat.numpy as xp\n"
        "from emulinalg.algorithm import products\n"
        "from emulinalg.algorithm.scaling import ozaki2_prescale\n"
        "from emulinalg.backends import amx, numpy as npb\n"
        "from emulinalg.inputs import phi_matrix\n"
        "amx.EMULATE = True\n"
        "a = phi_matrix((64, 50), 1.0, 'float64', seed=1)\n"
        "b = phi_matrix((50, 9), 1.0, 'float64', seed=2)\n"
        "pre = ozaki2_prescale(xp, npb.int_matmul, a, None, b, None, 'accurate')\n"
        "imm = npb.int_matmul\n"
        "w = products.product(xp, imm, a, None, b, None, 14, 'accurate', 'float64', pre)\n"
        "g = amx.ozaki2_product(a, None, b, None, 14, 'accurate', 'float64', pre)\n"
        "print(int(np.sum(g[0] != w[0])))\n"
    )
    import os

    env = dict(os.environ, OMP_NUM_THREADS="4", OMP_THREAD_LIMIT="2", OMP_DYNAMIC="true")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


def test_host_stages_refuse_fields_of_structured_arrays(monkeypatch):
    """A float64 field of a structured array (12-byte strides): the hooks decline, the C++
    refuses it directly, and the product through the amx backend equals numpy's."""
    from emulinalg import _amx
    from emulinalg.backends import amx

    s = np.zeros((40, 60), [("a", "<f8"), ("b", "<i4")])
    s["a"] = phi_matrix((40, 60), 1.0, "float64", seed=81)
    a = s["a"]
    b = phi_matrix((60, 30), 1.0, "float64", seed=82)
    assert amx.ozaki2_prescale(a, None, b, None, "accurate") is None
    with pytest.raises(ValueError, match="multiple of 8"):
        _amx.ozaki2_residues(a, np.zeros(40, np.int32), 5)
    with pytest.raises(ValueError, match="multiples of 8"):
        _amx.ozaki2_bound_operand(a)
    force_amx_backend(monkeypatch, emulate=True)
    got, want = matmul_amx_and_numpy(monkeypatch, a, b, OzakiII(moduli=14))
    assert np.array_equal(got, want)


@pytest.mark.parametrize("case", ["phi", "imaginary", "wide"])
@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("moduli", [2, 11, 20])
def test_host_pipeline_complex_3m_equals_the_generic_product(
    case, out_dtype, moduli, monkeypatch, rng
):
    """Complex products in the C++ stages (3M residue planes, T1/T2/T3 -> Re/Im per modulus, a
    two-part CRT) against emulinalg.algorithm.products.product, bit for bit, views included."""
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    a = phi_matrix((23, 70), 1.0, "complex128", seed=91)
    b = phi_matrix((70, 17), 1.0, "complex128", seed=92)
    if case == "imaginary":
        a = 1j * a.imag
    elif case == "wide":
        a = a * np.exp2(rng.integers(-300, 300, (23, 1)))
        b = b * np.exp2(rng.integers(-300, 300, (1, 17)))
        b[:, 3] = 0
    ar, ai = np.real(a)[::-1], np.imag(a)[::-1]  # strided views
    br, bi = np.asfortranarray(np.real(b)), np.asfortranarray(np.imag(b))
    assert len(_assert_product_equal(ar, ai, br, bi, moduli, out_dtype)) == 2


@pytest.mark.parametrize("case", ["phi", "imaginary", "wide"])
@pytest.mark.parametrize("bits", [24, 53])
def test_host_statistics_complex_equal_the_generic_ones(case, bits, monkeypatch, rng):
    """The C++ statistics on complex operands (max(|re|, |im|) exponents and magnitudes,
    floor(|re|) + floor(|im|) bounds, |re| + |im| norms): prescale identical, certificate
    decisions equal to certificate.ozaki2_moduli_needed's."""
    from emulinalg.backends import amx

    monkeypatch.setattr(amx, "EMULATE", True)
    a = phi_matrix((31, 90), 1.0, "complex128", seed=101)
    b = phi_matrix((90, 19), 1.0, "complex128", seed=102)
    if case == "imaginary":
        b = 1j * b.imag
    elif case == "wide":
        a = a * np.exp2(rng.integers(-300, 300, (31, 1)))
        a[4] = 0
    _assert_statistics_equal(np.real(a)[::-1], np.imag(a)[::-1], np.real(b), np.imag(b), bits)


@pytest.mark.parametrize("nearest", [False, True])
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize(("m", "k", "n"), TUNING_SHAPES_TIERED)
def test_host_panel_products_equal_reduced_exact_products(
    rng, restore_blocking, cplx, nearest, m, k, n
):
    """ozaki2_pack + ozaki2_multiply (residues straight into the tile panels, every GEMM reduced
    modulo m_l in its epilogue; 3M for complex) against the exact int64 products of the residue
    planes (ozaki2_residues, checked against Python integers below) reduced in numpy, under
    every blocking (K in one chunk or several, edge blocks, static and dynamic grids) and 1 or
    3 threads, on the tile model; the scaled operands rounded to nearest or toward zero."""
    from emulinalg.algorithm.moduli import MODULI

    nmod = 5
    a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-30, 30, (m, 1)))
    b = rng.standard_normal((k, n)) * np.exp2(rng.integers(-30, 30, (1, n)))
    ai = rng.standard_normal((m, k)) * np.abs(a).max(1, keepdims=True) if cplx else None
    bi = rng.standard_normal((k, n)) * np.abs(b).max(0, keepdims=True) if cplx else None
    mu = (40 - np.frexp(np.abs(a).max(1) * 3)[1]).astype(np.int32)
    nu = (40 - np.frexp(np.abs(b).max(0) * 3)[1]).astype(np.int32)
    near = {"nearest": nearest}
    if cplx:
        pa = _amx.ozaki2_residues3(a, ai, mu, nmod, True, **near).astype(np.int64)
        pb = _amx.ozaki2_residues3(b.T, bi.T, nu, nmod, False, **near).astype(np.int64)
    else:
        pa = _amx.ozaki2_residues(a, mu, nmod, True, **near)[None].astype(np.int64)
        pb = _amx.ozaki2_residues(b.T, nu, nmod, False, **near)[None].astype(np.int64)
    want = []
    for ell, mm in enumerate(MODULI[:nmod]):
        t = [pa[p, ell] @ pb[p, ell] for p in range(len(pa))]
        parts = [t[0] - t[1], t[2] - t[0] - t[1]] if cplx else [t[0]]
        want.append([_symmetric(x, mm) for x in parts])
    for spec in TUNINGS[:4] + TUNINGS[-2:]:
        _amx.set_blocking("default," + spec)
        stream = spec == TUNINGS[-1]  # non-temporal panel stores: the same bytes
        panels = _amx.ozaki2_pack(a, b, mu, nu, nmod, ai, bi, stream=stream, **near)
        for threads in (1, 3):
            for ell in range(nmod):
                re = np.full((m, n), 99, np.int8)
                im = np.full((m, n), 99, np.int8) if cplx else None
                _amx.ozaki2_multiply(panels, ell, re, im, emulate=True, threads=threads)
                assert np.array_equal(re, want[ell][0]), (spec, threads, ell)
                if cplx:
                    assert np.array_equal(im, want[ell][1]), (spec, threads, ell)


@amx_only
@pytest.mark.amx
@pytest.mark.parametrize("spec", ["", "kc=2", "mc=32,nc=32,kc=1,partition=1"])
def test_host_panel_products_amx_equal_the_model(rng, restore_blocking, spec):
    """ozaki2_multiply on real tiles (its AVX-512 epilogue) equals the tile model's, real and
    3M, with K in one chunk or several."""
    a = rng.standard_normal((100, 700))
    b = rng.standard_normal((700, 90))
    ai, bi = rng.standard_normal(a.shape), rng.standard_normal(b.shape)
    mu, nu = np.full(100, 30, np.int32), np.full(90, 30, np.int32)
    if spec:
        _amx.set_blocking("default," + spec)
    for im_a, im_b in ((None, None), (ai, bi)):
        panels = _amx.ozaki2_pack(a, b, mu, nu, 18, im_a, im_b)
        for ell in range(18):
            got = [np.empty((100, 90), np.int8) for _ in range(2)]
            want = [np.empty((100, 90), np.int8) for _ in range(2)]
            cplx = im_a is not None
            _amx.ozaki2_multiply(panels, ell, got[0], got[1] if cplx else None)
            _amx.ozaki2_multiply(panels, ell, want[0], want[1] if cplx else None, emulate=True)
            assert np.array_equal(got[0], want[0])
            assert not cplx or np.array_equal(got[1], want[1])


def test_host_panel_products_refuse_bad_outputs():
    a, b = np.ones((4, 8)), np.ones((8, 3))
    mu, nu = np.zeros(4, np.int32), np.zeros(3, np.int32)
    panels = _amx.ozaki2_pack(a, b, mu, nu, 3)
    with pytest.raises(ValueError, match="writable C-contiguous"):
        _amx.ozaki2_multiply(panels, 0, np.zeros((4, 3), np.int32), emulate=True)
    with pytest.raises(ValueError, match="no such modulus"):
        _amx.ozaki2_multiply(panels, 3, np.zeros((4, 3), np.int8), emulate=True)
    with pytest.raises(ValueError, match="im is needed"):
        _amx.ozaki2_multiply(panels, 0, np.zeros((4, 3), np.int8), np.zeros((4, 3), np.int8),
                             emulate=True)  # fmt: skip
    with pytest.raises(ValueError, match="inner dimensions"):
        _amx.ozaki2_pack(a, b.T, mu, nu, 3)
    res = panels.residues
    assert res.shape == (1, 3, 4, 3) and res.dtype == np.int8
    panels.release_operands()
    with pytest.raises(ValueError, match="released"):
        _amx.ozaki2_multiply(panels, 0, res[0, 0], emulate=True)
    del panels
    res[0, 2] = 7  # the residues outlive the panels object: the array holds it
    assert res.sum() == 7 * 12 + int(res[0, :2].astype(np.int64).sum())
    with pytest.raises(ValueError, match="both imaginary parts"):
        _amx.ozaki2_pack(a, b, mu, nu, 3, a)


def test_host_panel_products_survive_a_release_from_another_thread():
    """release_operands while an ozaki2_multiply runs in another thread: the multiply keeps its
    own references to the panels, so its residues are still right (and nothing crashes)."""
    import threading

    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((256, 640)), rng.standard_normal((640, 256))
    mu, nu = np.full(256, 30, np.int32), np.full(256, 30, np.int32)
    want = np.empty((256, 256), np.int8)
    _amx.ozaki2_multiply(_amx.ozaki2_pack(a, b, mu, nu, 3), 2, want, emulate=True)
    panels = _amx.ozaki2_pack(a, b, mu, nu, 3)
    got = np.zeros((256, 256), np.int8)
    worker = threading.Thread(
        target=lambda: _amx.ozaki2_multiply(panels, 2, got, emulate=True, threads=1)
    )
    worker.start()
    panels.release_operands()
    for _ in range(3):  # reuse the freed buffers while the multiply may still read its own
        _amx.ozaki2_pack(b.T.copy(), a.T.copy(), nu, mu, 3)
    worker.join()
    assert np.array_equal(got, want)


def test_host_cert_entries_refuses_thresholds_it_cannot_count():
    """The vectorized certificate counts failing thresholds, which equals the first passing
    one only for finite, positive, non-increasing thresholds: anything else is refused."""
    F = np.ones((2, 70), np.int32)
    line = (np.ones(2), np.ones(2), np.ones(70), np.ones(70))
    mix = (np.zeros(2, np.int64), np.zeros(70, np.int64))
    for thr in ([1.0, 0.0], [0.5, 1.0], [np.inf, 1.0], [np.nan]):
        with pytest.raises(ValueError, match="non-increasing"):
            _amx.ozaki2_cert_entries(F, 0, *line, 1.0, 0.0, 1.0, 1.0, np.array(thr), 2, *mix, 0)
    need, *_ = _amx.ozaki2_cert_entries(F, 0, *line, 1.0, 0.0, 1.0, 1.0, np.array([1.0, 0.5]),
                                        2, *mix, 0)  # fmt: skip
    assert need.shape == (2, 70)


def _symmetric(x, m):
    """Symmetric residue in [-(m // 2), (m - 1) // 2] of Python or numpy integers."""
    return (x + m // 2) % m - m // 2


def _exact_residue(x, shift, m, nearest=False):
    """Symmetric residue of x 2**shift rounded to nearest (ties to even) or toward zero, mod m,
    in Python integers."""
    return _symmetric(scaled_integer(x, shift, nearest), m)


@pytest.mark.parametrize("nearest", [False, True])
@pytest.mark.parametrize("order", ["C", "F"])
def test_host_residues_equal_python_integers(order, nearest, rng):
    """ozaki2_residues and ozaki2_residues3 (vectorized float64 pieces, runs along either memory
    axis, lines of 70 entries: a whole run of 64 and a partial one) against x 2**shift rounded
    to nearest or toward zero, mod m, in Python integers for all 20 moduli: integers up to
    2**81, subnormals, +-0, shifts beyond 1023 and below -1022, lines whose integers are all 0
    or 1."""
    from emulinalg.algorithm.moduli import MODULI

    R, C = 9, 70
    x = rng.standard_normal((R, C)) * np.exp2(rng.integers(-60, 60, (R, C)))
    x[0, :6] = [5e-324, -5e-324, 0.0, -0.0, 2.2250738585072014e-308, -1.5]
    x[1] = rng.standard_normal(C) * 2.0**1000
    x[2] = 2.0**-1074 * rng.integers(-(2**20), 2**20, C)  # subnormals
    x[3] = rng.uniform(-2, 2, C)  # integers 0 and +-1 at shift 0
    x[5] = [m * (c + 1) * (-1) ** c for c, m in enumerate(MODULI[:20] * 4)][:C]  # m divides X
    x[5, :3] = [2.0**70, -(2.0**70), 2.0**79 + 2.0**27]
    shift = (80 - np.frexp(np.abs(x).max(1))[1]).astype(np.int32)  # max |X| in [2**79, 2**80)
    shift[2] = 1074 + 40  # beyond 1023: two scale factors
    shift[3] = 0
    shift[4] = -1100  # every integer 0
    shift[5] = 0
    y = x[:, ::-1] * rng.uniform(-1, 1, (R, C))  # imaginary parts within each line's range
    xs, ys = (x, y) if order == "C" else (np.asfortranarray(x), np.asfortranarray(y))
    got = _amx.ozaki2_residues(xs, shift, 20, True, nearest=nearest)
    got_t = _amx.ozaki2_residues(xs, shift, 20, False, nearest=nearest)  # planes (moduli, C, R)
    got3 = _amx.ozaki2_residues3(xs, ys, shift, 20, True, nearest=nearest)
    for ell, m in enumerate(MODULI[:20]):
        want = np.array([[_exact_residue(x[r, c], shift[r], m, nearest) for c in range(C)]
                         for r in range(R)])  # fmt: skip
        want_y = np.array([[_exact_residue(y[r, c], shift[r], m, nearest) for c in range(C)]
                           for r in range(R)])  # fmt: skip
        assert np.array_equal(got[ell], want), m
        assert np.array_equal(got_t[ell], want.T), m
        assert np.array_equal(got3[0, ell], want) and np.array_equal(got3[1, ell], want_y)
        assert np.array_equal(got3[2, ell], _symmetric(want + want_y, m)), m


@pytest.mark.parametrize("nearest", [False, True])
def test_host_residues_round_crafted_entries(nearest):
    """ozaki2_residues(3) on entries built for the rounding (``_helpers.rounding_cases``: ties
    n + 1/2 of both parities and signs, 1/2 -> 0, 3/2 -> 2, below 1/2, subnormals, shifts below
    -1022 and beyond 1023, 1 to 70 bits below the point), one entry per line with its own shift,
    in runs along lines and across lines, against Python's integers."""
    from emulinalg.algorithm.moduli import MODULI

    x, shift = rounding_cases(np.random.default_rng(3))
    y = x * 0.375
    s32 = shift.astype(np.int32)
    col = x.reshape(-1, 1)  # runs of one entry along each line
    across = np.asfortranarray(np.stack([x, y], axis=1))  # runs across lines
    got = _amx.ozaki2_residues(col, s32, 20, True, nearest=nearest)[:, :, 0]
    got_across = _amx.ozaki2_residues(across, s32, 20, True, nearest=nearest)
    got3 = _amx.ozaki2_residues3(col, y.reshape(-1, 1), s32, 20, True, nearest=nearest)[..., 0]
    for ell, m in enumerate(MODULI[:20]):
        want = np.array([_exact_residue(v, s, m, nearest) for v, s in zip(x, shift)])
        want_y = np.array([_exact_residue(v, s, m, nearest) for v, s in zip(y, shift)])
        assert np.array_equal(got[ell], want), m
        assert np.array_equal(got_across[ell, :, 0], want), m
        assert np.array_equal(got_across[ell, :, 1], want_y), m
        assert np.array_equal(got3[0, ell], want) and np.array_equal(got3[1, ell], want_y), m
        assert np.array_equal(got3[2, ell], _symmetric(want + want_y, m)), m


# (moduli, k, rounds): accurate mode on both sides of scaling.rounds_to_nearest
ROUNDING_SWITCH = [(3, 62, True), (3, 63, False), (2, 80, False), (11, 200, True)]


@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize(("moduli", "k", "rounds"), ROUNDING_SWITCH)
def test_host_pipeline_rounds_ties_as_the_generic_product(moduli, k, rounds, cplx, monkeypatch):
    """amx.ozaki2_product on operands whose scaled entries are ties n + 1/2 (both parities and
    signs), 1/2, below 1/2 or subnormal, for counts that round and counts that truncate (the
    tile model's GEMMs): products.product's bits, real and complex, float64 and double-double."""
    from emulinalg.algorithm import products
    from emulinalg.algorithm.moduli import crt_constants
    from emulinalg.algorithm.scaling import ozaki2_shifts, rounds_to_nearest
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    monkeypatch.setattr(amx, "EMULATE", True)
    assert rounds_to_nearest(moduli, k, "accurate") == rounds
    ar, ai, br, bi, pre = tie_operands(((), 37, k, 29), cplx, moduli, "accurate", seed=k)
    c = crt_constants(moduli)
    _, nu = ozaki2_shifts(np, pre, c.L, c.Q_down)
    v = np.ldexp(br, nu[None, :])
    assert (np.abs(v - np.trunc(v)) == 0.5).sum() > br.size // 20  # ties in B (and A)
    for out_dtype in ("float64", "dd"):
        got = amx.ozaki2_product(ar, ai, br, bi, moduli, "accurate", out_dtype, pre)
        with npb.quiet():
            want = products.product(
                np, npb.int_matmul, ar, ai, br, bi, moduli, "accurate", out_dtype, pre
            )
        assert got is not None and len(got) == len(want)
        flat = [[x for p in r for x in (p if isinstance(p, tuple) else (p,))] for r in (got, want)]
        for g, w in zip(*flat):
            assert g.dtype == w.dtype and np.array_equal(g.view(np.uint8), w.view(np.uint8))


def _round_float32(v):
    """Fraction v rounded to the nearest float32 (ties to even; inf beyond range)."""
    from fractions import Fraction

    if v == 0:
        return 0.0
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2**e <= a < 2**(e + 2)
    e += Fraction(2) ** (e + 1) <= a
    ulp = Fraction(2) ** max(e - 23, -149)
    q, r = divmod(a, ulp)
    q += (r > ulp / 2) or (r == ulp / 2 and q % 2 == 1)
    out = np.inf if q * ulp >= 2**128 else float(q * ulp)  # exact: a float32 value
    return float(np.float32(-out if v < 0 else out))


@pytest.mark.parametrize("moduli", [2, 9, 18, 20])
def test_host_crt_rounds_known_integers_exactly(moduli, rng):
    """ozaki2_crt from the residues of known integers Y (|Y| <= P/4, magnitudes spread over the
    whole range) against Y 2**-(mu_i + nu_j) rounded once in Python (float64 and float32),
    with shifts that put results of one run among normal numbers, subnormals, zeros and
    overflow: the vectorized rounding and its fallback to finish() agree with exact rounding."""
    from fractions import Fraction

    from emulinalg.algorithm.moduli import MODULI, crt_constants
    from emulinalg.backends.amx import _crt_arrays

    P = crt_constants(moduli).P
    m, n = 3, 150
    bits = rng.integers(0, P.bit_length() - 2, (m, n))
    Y = [[int(rng.integers(0, 2**62)) * 2 ** max(0, int(b) - 62) % (P // 4 + 1)
          * (1 if rng.random() < 0.5 else -1) for b in row] for row in bits]  # fmt: skip
    ties = [
        (2**53 + 1) << 40,
        -((2**53 + 3) << 41),
        (2**24 + 1) << 40,
        -((2**24 + 3) << 3),
        ((2**53 + 1) << 40) + 1,
        (2**54 + 2) << 30,
    ]  # ties to even, and just above one
    # in the second run of 64 columns (the first has the extreme shifts: it takes finish())
    Y[0][70 : 70 + len(ties)] = [v if abs(v) <= P // 4 else v % (P // 4) for v in ties]
    res = np.array([[[_symmetric(v, mm) for v in row] for row in Y] for mm in MODULI[:moduli]],
                   dtype=np.int8)  # fmt: skip
    mu = np.array([0, 900, -200], np.int32)  # row 1: tiny results; row 2: huge ones
    nu = rng.integers(-40, 240, n).astype(np.int32)
    nu[:3] = [1100, 1074 + 120, -1024]
    for kind, dt in ((0, np.float64), (1, np.float32)):
        out = np.empty((m, n), dt)
        _amx.ozaki2_crt(res, mu, nu, kind, *_crt_arrays(moduli), out)
        for i in range(m):
            for j in range(n):
                v = Fraction(Y[i][j]) * Fraction(2) ** -int(mu[i] + nu[j])
                if kind == 1:
                    want = _round_float32(v)
                else:
                    try:
                        want = float(v)
                    except OverflowError:
                        want = np.inf if v > 0 else -np.inf
                assert out[i, j] == want and np.signbit(out[i, j]) == np.signbit(want), (i, j)


def test_host_crt_word_counts_match_the_tables():
    """The CRT accumulator sizes compiled into emulinalg._amx (kCrtWords of
    src_cuda/ozaki2_tables.h, generated from crt_words) equal crt_words, from which the digit
    tables are built: the module was built from the current header."""
    from emulinalg import _amx
    from emulinalg.backends.cuda import crt_words

    assert [_amx.crt_words(n) for n in range(2, 21)] == [crt_words(n) for n in range(2, 21)]


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


def test_empty_arrays_in_huge_page_memory():
    """``_amx.empty``: C-contiguous, writeable, 2 MiB-aligned from 2 MiB on, the asked dtype."""
    for shape, dt in (((3, 1024, 1024), "int8"), ((5, 7), "float64"), ((2, 1 << 20), "float32")):
        x = _amx.empty(shape, dt)
        assert x.shape == shape and x.dtype == np.dtype(dt) and x.flags.c_contiguous
        x[...] = 1
        assert x.sum() == np.prod(shape)
        if x.nbytes >= 2 << 20:
            assert x.ctypes.data % (2 << 20) == 0
    with pytest.raises(ValueError, match="dtype"):
        _amx.empty((2, 2), "int16")


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


def test_cgroup_memory_limit(tmp_path):
    """The panel cache's default limit reads the cgroup's memory limit (v2 memory.max, v1
    memory.limit_in_bytes; at the process's path and at the root; the smallest set)."""
    root = tmp_path / "cg"
    (root / "job").mkdir(parents=True)
    (root / "memory" / "job").mkdir(parents=True)
    v2 = "0::/job\n"
    assert _amx.cgroup_memory_limit(v2, str(root)) == 0  # nothing set
    (root / "job" / "memory.max").write_text("max\n")
    assert _amx.cgroup_memory_limit(v2, str(root)) == 0  # "max": no limit
    (root / "job" / "memory.max").write_text("3221225472\n")
    assert _amx.cgroup_memory_limit(v2, str(root)) == 3 << 30
    (root / "memory.max").write_text("2147483648\n")  # the namespace's root: smaller
    assert _amx.cgroup_memory_limit(v2, str(root)) == 2 << 30
    v1 = "4:memory:/job\n3:cpu,cpuacct:/job\n"
    (root / "memory" / "job" / "memory.limit_in_bytes").write_text("1073741824\n")
    assert _amx.cgroup_memory_limit(v1, str(root)) == 1 << 30
    assert _amx.cgroup_memory_limit(v1 + v2, str(root)) == 1 << 30  # hybrid: the smallest
    assert _amx.cgroup_memory_limit("garbage\n3:cpu:/x\n", str(root)) == 0
    info = _amx.cache_info()
    if "EMULINALG_AMX_CACHE_MB" not in os.environ:
        phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        with open("/proc/self/cgroup") as f:
            cg = _amx.cgroup_memory_limit(f.read())
        mem = min(phys, cg) if cg else phys
        assert info["limit_bytes"] == max(256 << 20, mem // 8)
