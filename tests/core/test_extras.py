"""``emulinalg._extras``: the one line that names a missing extra (issue #28), and its table
of modules against pyproject.toml's extras."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from emulinalg import _extras

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_hint_names_module_extra_and_what_needs_it():
    assert (
        _extras.extra_hint("bench", "matplotlib", needed_by="bench --plot")
        == 'bench --plot needs matplotlib (not installed): pip install ".[bench]"'
    )
    assert (
        _extras.extra_hint("scf", "pyscf")
        == 'emulinalg needs pyscf (not installed): pip install ".[scf]"'
    )


def test_a_module_that_fails_to_import_is_quoted_on_the_same_line():
    error = ImportError("cannot import name 'x' from 'y'\nsecond line")
    hint = _extras.extra_hint("dask", "dask.array", needed_by="demo dask", error=error)
    assert hint == (
        "demo dask needs dask.array (ImportError: cannot import name 'x' from 'y'): "
        'pip install ".[dask]"'
    )
    # an absent package above the module is "not installed", a dependency of it is not
    above = ModuleNotFoundError("No module named 'dask'", name="dask")
    assert "(not installed)" in _extras.extra_hint("dask", "dask.array", error=above)
    other = ModuleNotFoundError("No module named 'toolz'", name="toolz")
    assert "(ModuleNotFoundError: No module named 'toolz')" in _extras.extra_hint(
        "dask", "dask.array", error=other
    )


def test_require_raises_module_not_found_with_the_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyscf", None)  # import pyscf -> ModuleNotFoundError
    with pytest.raises(ModuleNotFoundError) as info:
        _extras.require("pyscf", needed_by="demo scf")
    assert str(info.value) == 'demo scf needs pyscf (not installed): pip install ".[scf]"'
    assert info.value.name == "pyscf"
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_require_raises_import_error_for_a_broken_module(tmp_path, monkeypatch):
    (tmp_path / "_emulinalg_broken.py").write_text("raise ImportError('libfoo.so: not found')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError) as info:
        _extras.require("_emulinalg_broken", "bench")
    assert type(info.value) is ImportError  # present, so not ModuleNotFoundError
    assert str(info.value) == (
        "emulinalg needs _emulinalg_broken (ImportError: libfoo.so: not found): "
        'pip install ".[bench]"'
    )


def test_missing_returns_the_first_hint_or_none(monkeypatch):
    assert _extras.missing("json", "math", extra="test") is None
    monkeypatch.setitem(sys.modules, "distributed", None)
    hint = _extras.missing("json", "distributed", needed_by="demo dask")
    assert hint == 'demo dask needs distributed (not installed): pip install ".[dask]"'
    assert _extras.require("json", "test").__name__ == "json"


def test_every_module_maps_to_an_extra_that_brings_it():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert set(_extras.EXTRAS.values()) <= set(extras)
    for module, extra in _extras.EXTRAS.items():
        dist = module.split(".")[0].replace("_", "-")
        names = [re.split(r"[<>=\[ ]", req)[0] for req in extras[extra]]
        assert any(name.startswith(dist) for name in names), (module, extra, names)
    # and every extra is named by some module (all six give the hint somewhere)
    assert set(_extras.EXTRAS.values()) == set(extras)


def test_the_exit_status_is_the_usage_error_status():
    assert _extras.MISSING_EXTRA == 2
