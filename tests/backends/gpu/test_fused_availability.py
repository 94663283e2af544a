"""Where the fused CUTLASS kernels (sm_90a) cannot run, the cupy backend says why in every plan
and keeps the cuBLAS INT8 path (``backends.cuda.fused.why_unavailable``); run on the CPU with a
stand-in for cupy's device query."""

from __future__ import annotations

import sys
import types

import pytest

from emulinalg.backends.cuda import fused


def _fake_cupy(monkeypatch, cc):
    dev = types.SimpleNamespace(id=0, compute_capability=cc)
    cuda = types.SimpleNamespace(Device=lambda: dev)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(fused, "_capable", {})
    monkeypatch.setattr(fused, "_module", lambda: object())  # as if emulinalg._cuda were built


@pytest.mark.parametrize("cc,why", [("90", ""), ("80", "compute capability 8.0"),
                                    ("89", "compute capability 8.9"),
                                    ("120", "compute capability 12.0"),
                                    ("100", "compute capability 10.0")])  # fmt: skip
def test_only_compute_capability_9_0_runs_the_fused_kernels(monkeypatch, cc, why):
    _fake_cupy(monkeypatch, cc)
    got = fused.why_unavailable()
    assert got.startswith(why) if why else got == ""
    assert fused.available() == (why == "")


def test_the_reasons_before_the_device(monkeypatch):
    _fake_cupy(monkeypatch, "90")
    monkeypatch.setenv("EMULINALG_FUSED", "0")
    assert fused.why_unavailable() == "EMULINALG_FUSED=0"
    monkeypatch.delenv("EMULINALG_FUSED")
    monkeypatch.setattr(fused, "_module", lambda: None)
    assert "not built" in fused.why_unavailable()
    assert not fused.available()
