"""emulinalg: FP64/FP32 (real and complex) matrix products on low-precision matrix engines.

The products follow the Array API (``matmul``, ``tensordot``, ``vecdot``) and take a
``precision=`` keyword; they are computed with the Ozaki schemes (INT8 slices, Scheme I, or
INT8 moduli with the CRT, Scheme II) on the backend of the arrays' own library.

>>> import numpy as np, emulinalg
>>> a = np.arange(6.0).reshape(2, 3)
>>> b = np.ones((3, 2))
>>> emulinalg.matmul(a, b, precision=emulinalg.OzakiII(moduli=16)).tolist()
[[3.0, 3.0], [12.0, 12.0]]
"""

from __future__ import annotations

import pkgutil as _pkgutil

__version__ = "0.1.0.dev0"

# From a source checkout, the compiled modules (_cpu, _amx, _cuda) come from an installed copy.
__path__ = _pkgutil.extend_path(__path__, __name__)

from . import linalg
from ._api import matmul, tensordot, vecdot
from ._config import config, get_config
from ._cost import CostModel, get_cost_model, set_cost_model
from ._einsum import dot, einsum
from ._namespace import EmulatedNamespace, namespace
from ._plan import Plan, fallback_counts, last_plan
from ._precision import BF16x3, BF16xN, OzakiI, OzakiII
from ._prepared import Prepared, prepare

__all__ = [
    "BF16x3",
    "BF16xN",
    "CostModel",
    "EmulatedNamespace",
    "OzakiI",
    "OzakiII",
    "Plan",
    "Prepared",
    "config",
    "dot",
    "einsum",
    "fallback_counts",
    "get_config",
    "get_cost_model",
    "last_plan",
    "linalg",
    "matmul",
    "namespace",
    "prepare",
    "set_cost_model",
    "tensordot",
    "vecdot",
]
