"""``emulinalg.numpy``: an Array API namespace for numpy arrays with emulated products.

``import emulinalg.numpy as xp`` gives array_api_compat's numpy namespace in which ``matmul``,
``tensordot``, ``vecdot``, ``einsum``, ``dot`` and ``linalg.matmul/tensordot/vecdot`` are
emulinalg's.
"""

from array_api_compat import numpy as _base
from array_api_compat.numpy import *  # noqa: F403

from . import _api, _einsum
from ._namespace import EmulatedNamespace as _EmulatedNamespace

matmul = _api.matmul
tensordot = _api.tensordot
vecdot = _api.vecdot
einsum = _einsum.einsum
dot = _einsum.dot
linalg = _EmulatedNamespace(_base).linalg

__array_api_version__ = _base.__array_api_version__
