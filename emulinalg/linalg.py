"""``emulinalg.linalg``: the Array API ``linalg`` products (aliases of the top-level ones)."""

from ._api import matmul, tensordot, vecdot

__all__ = ["matmul", "tensordot", "vecdot"]
