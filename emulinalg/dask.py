"""``emulinalg.dask``: an Array API namespace for dask arrays with emulated products.

``import emulinalg.dask as xp`` gives array_api_compat's dask namespace in which ``matmul``,
``tensordot``, ``vecdot``, ``einsum``, ``dot`` and ``linalg.matmul/tensordot/vecdot`` are
emulinalg's: they build a lazy graph of emulated block products on the chunks' own backend
(numpy chunks on the CPU, cupy chunks on the GPU) whose K-block partials are added in
double-double (see docs/dask.md and ``emulinalg.backends.dask``). A numpy or cupy operand beside
a dask array is wrapped with ``dask.array.asarray``, as ``dask.array.matmul`` does.

Without dask (``pip install ".[dask]"``), importing it raises :class:`ModuleNotFoundError` whose
message is the one line that says so.
"""

from . import _api, _einsum, _extras
from ._namespace import EmulatedNamespace as _EmulatedNamespace

# before array_api_compat's dask modules, whose own error would not name the extra
_extras.require("dask.array", needed_by="emulinalg.dask")

from array_api_compat.dask import array as _base  # noqa: E402
from array_api_compat.dask.array import *  # noqa: E402, F403

matmul = _api.matmul
tensordot = _api.tensordot
vecdot = _api.vecdot
einsum = _einsum.einsum
dot = _einsum.dot
linalg = _EmulatedNamespace(_base).linalg

__array_api_version__ = _base.__array_api_version__
