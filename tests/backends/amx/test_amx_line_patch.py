"""The amx backend's certificate takes the native form's line patch (``refinement.line_patch``)
as the generic one does: its C++ refinement step reports up to ``fails_limit`` failing entries,
and the level through the amx backend (the tile model, and AMX where present) takes the numpy
backend's count and lines, whose entries are the native product's."""

from __future__ import annotations

import numpy as np
import pytest
from _amx_helpers import AMX_AVAILABLE, _amx, force_amx_backend
from _helpers import level_lines, line_patch_case

pytestmark = [
    pytest.mark.skipif(
        _amx is None, reason="emulinalg._amx is not built (not x86-64, or no C++ compiler)"
    ),
    pytest.mark.usefixtures("host_loops"),
]


def _level(monkeypatch, a, b, emulate):
    return level_lines(
        monkeypatch, a, b, None if emulate is None else lambda mp: force_amx_backend(mp, emulate)
    )


@pytest.mark.parametrize("emulate", [True, pytest.param(False, marks=pytest.mark.amx)])
@pytest.mark.parametrize("name", ["float64", "float32"])
def test_amx_level_takes_the_generic_lines(name, emulate, monkeypatch):
    if not emulate and not AMX_AVAILABLE:
        pytest.skip("no AMX tiles on this CPU")
    a, b = line_patch_case(name)
    c, plan, lines = _level(monkeypatch, a, b, emulate)
    want, want_plan, want_lines = _level(monkeypatch, a, b, None)
    assert plan.backend == "amx" and want_plan.backend == "numpy"
    assert plan.scheme == want_plan.scheme
    assert lines.rows.tolist() == want_lines.rows.tolist()
    assert lines.cols.tolist() == want_lines.cols.tolist()
    assert (lines.block is None) == (want_lines.block is None)
    if lines.block is not None:
        assert all(np.array_equal(x, y) for x, y in zip(lines.block, want_lines.block))
    assert np.array_equal(c[lines.rows], want[lines.rows])  # both from float64 products
    assert np.array_equal(lines.entries, want_lines.entries)
