"""The mod GEMMs' K chunk, chosen once per process by timing (``amx.mod_chunks``,
``amx.chunk_choice``): which GEMMs are timed, what the times decide, that a user's K chunk is
left alone, and that the product's result does not depend on the chunk (INT8 sums are exact)."""

from __future__ import annotations

import numpy as np
import pytest
from _amx_helpers import _amx

import emulinalg
from emulinalg.backends import amx


class _Blocking:
    """A stand-in module whose blocking has the K chunk ``kc``."""

    def __init__(self, kc=0):
        self.kc = kc

    def blocking(self):
        return {"kc": self.kc}


def test_the_first_large_product_times_both_chunks_then_keeps_the_choice(monkeypatch):
    monkeypatch.setattr(amx, "_chunk_kc", None)
    big, kc, timed = amx.CHUNK_MIN, amx.CHUNK_KC, amx.CHUNK_TIMED
    chunks, timing = amx.mod_chunks(_Blocking(), big, big, big, 15)
    assert timing and chunks == [kc, 0] * (timed // 2) + [0] * (15 - timed)
    # the timing product holds the lock: a concurrent first product takes the default, untimed
    assert amx.mod_chunks(_Blocking(), big, big, big, 15) == ([0] * 15, False)
    amx._chunk_lock.release()
    # small products, few moduli and a user's K chunk are not timed
    assert amx.mod_chunks(_Blocking(), big - 1, big, big, 15) == ([0] * 15, False)
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


@pytest.mark.parametrize("chosen", [0, amx.CHUNK_KC])
def test_a_product_gives_the_same_result_under_the_chosen_chunk(backend, monkeypatch, chosen):
    """A float64 level's product whose first mod GEMMs are timed (CHUNK_MIN lowered to its
    size; K of 18 tiles, more than CHUNK_KC) equals the one under the default chunk bit for bit,
    whichever chunk the times choose; the GEMMs after the timed ones take the choice."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((96, 1100)), rng.standard_normal((1100, 80))
    monkeypatch.setattr(amx, "CHUNK_MIN", 64)
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


def test_ozaki2_multiply_refuses_a_negative_chunk():
    a, b = np.ones((4, 8)), np.ones((8, 3))
    panels = _amx.ozaki2_pack(a, b, np.zeros(4, np.int32), np.zeros(3, np.int32), 3)
    with pytest.raises(ValueError, match="kc in"):
        _amx.ozaki2_multiply(panels, 0, np.zeros((4, 3), np.int8), emulate=True, kc=-1)
