"""The mod GEMMs' K chunk, chosen once per process by timing (``amx.mod_chunks``,
``amx.chunk_choice``): which GEMMs are timed, what the times decide, that a user's K chunk is
left alone, and that the product's result does not depend on the chunk (INT8 sums are exact)."""

from __future__ import annotations

import numpy as np
import pytest
from _amx_helpers import _amx, amx_only

import emulinalg
from emulinalg.backends import amx


class _Blocking:
    """A stand-in module whose blocking has the K chunk ``kc``."""

    def __init__(self, kc=0):
        self.kc = kc

    def blocking(self):
        return {"kc": self.kc, "panels": 1}


def test_the_first_large_product_times_both_chunks_then_keeps_the_choice(monkeypatch):
    monkeypatch.setattr(amx, "_chunk_kc", None)
    big, kc, timed = amx.CHUNK_MIN, amx.CHUNK_KC, amx.CHUNK_TIMED
    chunks, timing = amx.mod_chunks(_Blocking(), big, big, big, 15)
    assert timing and chunks == [kc, 0] * (timed // 2) + [0] * (15 - timed)
    # the timing product holds the lock: a concurrent first product takes the default, untimed
    assert amx.mod_chunks(_Blocking(), big, big, big, 15) == ([0] * 15, False)
    amx._chunk_lock.release()
    # small products, few moduli, plain panels and a user's K chunk are not timed
    assert amx.mod_chunks(_Blocking(), big - 1, big, big, 15) == ([0] * 15, False)
    assert amx.mod_chunks(_Blocking(), big, big, big, 15, chunked=False) == ([0] * 15, False)
    assert amx.mod_chunks(_Blocking(), big, big, big, timed) == ([0] * timed, False)
    assert amx.mod_chunks(_Blocking(kc=3), big, big, big, 15) == ([0] * 15, False)
    assert not amx._chunk_lock.locked()
    # the fastest of each decides, with a margin for the default
    assert amx.chunk_choice({kc: [1.0, 5.0, 1.1], 0: [1.2, 1.3, 1.2]}) == kc
    assert amx.chunk_choice({kc: [1.0, 1.0, 1.0], 0: [1.03, 3.0, 1.1]}) == 0
    assert amx.chunk_choice({kc: [1.3, 1.2, 1.2], 0: [1.0, 1.0, 1.0]}) == 0
    assert amx.mod_chunk() is None
    assert amx._choose_chunk({kc: [1.0], 0: [2.0]}) == kc and amx.mod_chunk() == kc
    # then every product takes the choice, untimed; a user's K chunk still wins
    assert amx.mod_chunks(_Blocking(), 64, 64, 64, 9) == ([kc] * 9, False)
    assert amx.mod_chunks(_Blocking(kc=2), 64, 64, 64, 9) == ([0] * 9, False)
    assert amx.mod_chunks(_Blocking(), 64, 64, 64, 9, chunked=False) == ([0] * 9, False)


def test_chunked_panels_beyond_the_short_inner_dimensions(restore_blocking):
    """Chunked panels for K beyond CHUNKED_MIN_K unless the blocking asks for plain ones, and
    ozaki2_pack packs what it is told (None: the blocking's knob)."""
    assert not amx.chunked_panels(_amx, amx.CHUNKED_MIN_K)
    assert amx.chunked_panels(_amx, amx.CHUNKED_MIN_K + 1)
    a, b = np.ones((4, 8)), np.ones((8, 3))
    mu, nu = np.zeros(4, np.int32), np.zeros(3, np.int32)
    assert _amx.ozaki2_pack(a, b, mu, nu, 3).chunked
    assert not _amx.ozaki2_pack(a, b, mu, nu, 3, chunked=False).chunked
    _amx.set_blocking("panels=0")
    assert not amx.chunked_panels(_amx, amx.CHUNKED_MIN_K + 1)
    assert not _amx.ozaki2_pack(a, b, mu, nu, 3).chunked
    assert _amx.ozaki2_pack(a, b, mu, nu, 3, chunked=True).chunked


@pytest.mark.parametrize("chosen", [0, amx.CHUNK_KC])
def test_a_product_gives_the_same_result_under_the_chosen_chunk(backend, monkeypatch, chosen):
    """A float64 level's product whose first mod GEMMs are timed (CHUNK_MIN lowered to its
    size; K of 18 tiles, more than CHUNK_KC) equals the one under the default chunk bit for bit,
    whichever chunk the times choose; the GEMMs after the timed ones take the choice."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((96, 1100)), rng.standard_normal((1100, 80))
    monkeypatch.setattr(amx, "CHUNK_MIN", 64)
    monkeypatch.setattr(amx, "CHUNKED_MIN_K", 64)
    monkeypatch.setattr(amx, "_chunk_kc", 0)
    with emulinalg.config(strategy="eager"):
        want = emulinalg.matmul(a, b, precision="float64")
    assert emulinalg.last_plan().backend == "amx" and "OzakiII" in str(emulinalg.last_plan())
    seen = []
    real = amx._module()

    class Spy:
        def __getattr__(self, name):
            return getattr(real, name)

        def ozaki2_multiply(self, *args, **kw):
            seen.append(kw["kc"])
            return real.ozaki2_multiply(*args, **kw)

    monkeypatch.setattr(amx, "_module", lambda: Spy())
    monkeypatch.setattr(amx, "_chunk_kc", None)
    monkeypatch.setattr(amx, "chunk_choice", lambda times: chosen)
    with emulinalg.config(strategy="eager"):
        got = emulinalg.matmul(a, b, precision="float64")
    assert amx._chunk_kc == chosen
    kc, timed = amx.CHUNK_KC, amx.CHUNK_TIMED
    assert seen[:timed] == [kc, 0] * (timed // 2) and len(seen) > timed
    assert not amx._chunk_lock.locked()
    assert set(seen[amx.CHUNK_TIMED :]) == {chosen}
    assert np.array_equal(got, want)


def test_the_timed_chunk_is_the_panels_chunk():
    """CHUNK_KC K tiles per GEMM chunk read each chunk of ozaki2_pack's panels as one run."""
    assert amx.CHUNK_KC == _amx.PANEL_CHUNK


def test_ozaki2_multiply_refuses_a_negative_chunk():
    a, b = np.ones((4, 8)), np.ones((8, 3))
    panels = _amx.ozaki2_pack(a, b, np.zeros(4, np.int32), np.zeros(3, np.int32), 3)
    with pytest.raises(ValueError, match="kc in"):
        _amx.ozaki2_multiply(panels, 0, np.zeros((4, 3), np.int8), emulate=True, kc=-1)


@pytest.mark.parametrize(
    "emulate", [True, pytest.param(False, marks=[pytest.mark.amx, amx_only])], ids=["model", "amx"]
)
@pytest.mark.parametrize("kind", ["real", "3M", "gaussian"])
def test_panel_layouts_and_chunks_give_the_same_residues(restore_blocking, emulate, kind):
    """The mod GEMMs on chunked-pair panels (``panels=1``, the default: K in chunks of
    pack.hpp's kPanelChunk tiles, a pair's tiles alternating) equal those on plain panels bit
    for bit, under K chunks that end inside, at or across the panels' chunks (20 K tiles: two
    whole chunks and a short one), on ragged m and n; the plain panels with K in one chunk are
    checked against the exact products in test_amx_host_pipeline.py."""
    rng = np.random.default_rng(11)
    m, k, n, nmod = 70, 64 * 19 + 7, 45, 3
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    ai, bi = (rng.standard_normal((m, k)), rng.standard_normal((k, n))) if kind != "real" else (
        None, None)  # fmt: skip
    mu, nu = np.full(m, 30, np.int32), np.full(n, 30, np.int32)
    gauss = {"gaussian": kind == "gaussian"}

    def residues(panels, kc):
        out = []
        for ell in range(nmod):
            re = np.full((m, n), 99, np.int8)
            im = None if ai is None else np.full((m, n), 99, np.int8)
            _amx.ozaki2_multiply(panels, ell, re, im, emulate=emulate, threads=2, kc=kc)
            out.append((re, im))
        return out

    _amx.set_blocking("default,panels=0")
    want = residues(_amx.ozaki2_pack(a, b, mu, nu, nmod, ai, bi, **gauss), 0)
    assert any(np.any(r != 0) for r, _ in want)
    for panels in (0, 1):
        _amx.set_blocking(f"default,panels={panels}")
        packed = _amx.ozaki2_pack(a, b, mu, nu, nmod, ai, bi, **gauss)
        for kc in (0, 1, 3, 8, 16):
            for (re, im), (wr, wi) in zip(residues(packed, kc), want):
                assert np.array_equal(re, wr), (panels, kc)
                assert im is None or np.array_equal(im, wi), (panels, kc)


def test_the_chunked_panels_threshold_is_the_kernels():
    """amx.py's CHUNKED_MIN_K (ozaki2_pack's panels) is the INT8 GEMM's own threshold."""
    assert amx.CHUNKED_MIN_K == _amx.CHUNKED_MIN_K


def test_plan_names_the_chunked_form_of_long_int8_gemms(restore_blocking):
    """plan() says what gemm_s8s8s32 runs: beyond CHUNKED_MIN_K with kc unset, K chunks of
    PANEL_CHUNK tiles, nest 0 and A packed whatever was set (the chunked C block unless mc / nc
    were); not with K up to the threshold, a K chunk set, or panels=0."""
    long_k, short_k = _amx.CHUNKED_MIN_K + 64, _amx.CHUNKED_MIN_K
    _amx.set_blocking("default,nest=1,pack_a=0")
    p = _amx.plan(4096, 4096, long_k, threads=1)
    assert p["chunked"] and (p["kc"], p["nest"], p["pack_a"]) == (_amx.PANEL_CHUNK, 0, True)
    assert (p["mc"], p["nc"]) == (512, 256)
    q = _amx.plan(4096, 4096, short_k, threads=1)
    assert not q["chunked"] and (q["nest"], q["pack_a"]) == (1, False)
    for spec in ("default,kc=4", "default,panels=0"):
        _amx.set_blocking(spec)
        assert not _amx.plan(4096, 4096, long_k, threads=1)["chunked"], spec


@pytest.mark.parametrize(
    "emulate", [True, pytest.param(False, marks=[pytest.mark.amx, amx_only])], ids=["model", "amx"]
)
@pytest.mark.parametrize("spec", ["default", "default,mc=32,nc=64", "default,panels=0"])
def test_int8_gemm_beyond_the_chunked_threshold_is_exact(restore_blocking, emulate, spec):
    """gemm_s8s8s32 with K beyond CHUNKED_MIN_K (chunked panels, K in chunks, each thread's
    partial sums written to C once; with panels=0 the plain form) equals the exact int64
    product, on ragged m and n, 1 and 3 threads."""
    rng = np.random.default_rng(3)
    m, k, n = 70, _amx.CHUNKED_MIN_K + 64 * 9 + 5, 45
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    want = a.astype(np.int64) @ b.astype(np.int64)
    _amx.set_blocking(spec)
    for threads in (1, 3):
        got = _amx.gemm_s8s8s32(a, b, emulate=emulate, threads=threads)
        assert got.dtype == np.int32 and np.array_equal(got, want), threads
