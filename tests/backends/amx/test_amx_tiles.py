"""``emulinalg._amx``'s tile GEMMs (INT8 and BF16).

Everywhere (CI has no AMX): the kernels on the scalar tile model (``emulate=True``) against
exact integer / float64 references, under every blocking knob. On an AMX machine (marked
``amx``, skipped elsewhere with the reason): the AMX kernels against the model and the
references. Also the module's memory: huge-page arrays and the panel cache's cgroup limit.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from _amx_helpers import AMX_AVAILABLE, TUNING_SHAPES, TUNING_SHAPES_TIERED, TUNINGS, _amx, amx_only

pytestmark = pytest.mark.skipif(
    _amx is None, reason="emulinalg._amx is not built (not x86-64, or no C++ compiler)"
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
        "mc=0,nc=0,kc=0,order=0,sched=2,prefetch=1,partition=1,pack_a=1,nest=-1,stream=0,widen=1,"
        "panels=1"
    )  # the defaults: the sweep's best on the AMX host (blocking.hpp)
    before = _amx.set_blocking("mc=64,kc=4", order=1)
    assert before["mc"] == 0 and before["order"] == 0
    now = _amx.blocking()
    assert (now["mc"], now["kc"], now["order"], now["nc"]) == (64, 4, 1, 0)
    assert _amx.set_blocking(prefetch=0)["spec"] == now["spec"]  # returns the previous
    bad_specs = ("mc=33", "order=2", "sched=4", "prefetch=4", "nc=-32", "kc=x", "mc", "nest=2",
                 "panels=2")  # fmt: skip
    for bad in bad_specs + ("nest=-2",):
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
    assert (p["mc"], p["nc"], p["kc"]) == (128, 512, 8) and p["ktiles"] == 64  # INT8: mc 128
    p = _amx.plan(4096, 4096, 4096, dtype="bf16", threads=16)
    assert p["ktiles"] == 128 and p["mc"] == 256  # the BF16 GEMMs keep the general defaults
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


# ----------------------------------------------------------------------------------------------
# Memory: huge pages, the panel cache's limit
# ----------------------------------------------------------------------------------------------


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
