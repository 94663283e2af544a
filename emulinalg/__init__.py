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

import os as _os

__version__ = "0.1.0.dev0"

# In an installed wheel ``backends/`` lives inside the package; in a source checkout it is the
# top-level folder beside ``emulinalg/`` (the repository layout), reached through the package path.
_here = _os.path.dirname(__file__)
if not _os.path.isdir(_os.path.join(_here, "backends")):
    _src_backends = _os.path.join(_os.path.dirname(_here), "backends")
    if _os.path.isdir(_src_backends):
        __path__.append(_os.path.dirname(_here))
        # ...and an installed copy's compiled modules (emulinalg._cpu, ...) stay importable.
        import pkgutil as _pkgutil

        __path__ = _pkgutil.extend_path(__path__, __name__)

from . import linalg  # noqa: E402
from ._api import matmul, tensordot, vecdot  # noqa: E402
from ._config import config, get_config  # noqa: E402
from ._cost import CostModel, get_cost_model, set_cost_model  # noqa: E402
from ._namespace import namespace  # noqa: E402
from ._plan import Plan, fallback_counts, last_plan  # noqa: E402
from ._precision import BF16x3, BF16xN, OzakiI, OzakiII  # noqa: E402

__all__ = [
    "BF16x3",
    "BF16xN",
    "CostModel",
    "OzakiI",
    "OzakiII",
    "Plan",
    "config",
    "fallback_counts",
    "get_config",
    "get_cost_model",
    "last_plan",
    "linalg",
    "matmul",
    "namespace",
    "set_cost_model",
    "tensordot",
    "vecdot",
]
