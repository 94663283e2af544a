"""Residues once per chunk, modular block products added over K-blocks, one CRT per output
block (``residues``, ``products.modular_products``, ``crt``), and the native patch.
"""

from __future__ import annotations

import numpy as np

from emulinalg._precision import REAL_DTYPE
from emulinalg._stages import stages
from emulinalg.algorithm import crt, products, residues
from emulinalg.algorithm.moduli import crt_constants
from emulinalg.algorithm.scaling import (
    rounds_to_nearest,
)
from emulinalg.algorithm.xputil import make_complex

from .blocks import (
    _block_index,
    _chunk_quiet,
    _finite_parts,
    _flatten,
    _gemm_operand,
    _xp_backend,
    task,
)
from .certificate import _beyond


def _hooks(backend):
    """The backend's kernels for the chunk steps (``_stages``: ``chunk_residues``,
    ``chunk_products``, ``chunk_residue_sum``, ``chunk_crt``), or None: the generic steps."""
    st = stages(backend)
    return st if st.chunk_residues is not None else None


@task
def _residues_chunk(x, shift, cfg, *ix, axis, cplx, k, mode, kernels=False):
    """``{"planes": int8 planes, "raw": the chunk or None, "layout": "backend" or
    "generic"}``: the residues of the scaled chunk for every modulus (shared by every block
    product that reads the chunk), and the chunk itself when a block product of its row
    (column) block needs the native product. The scaled chunk is rounded as
    ``products.product`` rounds the whole operand (``scaling.rounds_to_nearest`` of the whole
    inner dimension ``k``). ``kernels`` (2-D graphs): the backend's ``chunk_residues`` makes the
    planes in its own layout where it has one (every chunk of a graph has the same backend and
    dtype, so every chunk takes the same layout); else ``residues.int8_planes`` (n, 1 or 3, ...,
    rows, cols)."""
    xp, backend = _xp_backend(x)
    where = _block_index(ix)
    need = cfg["need"][where] if axis == -1 else cfg["need"][where[:-1] + (slice(None), where[-1])]
    out = {"planes": None, "raw": x if bool(np.any(need)) else None, "layout": "generic"}
    n = cfg["count"]
    if n:
        with _chunk_quiet(xp, backend):
            re, im, _ = _finite_parts(xp, x)
            near = rounds_to_nearest(n, k, mode)
            hooks = _hooks(backend) if kernels else None
            planes = None if hooks is None else hooks.chunk_residues(re, im, shift, axis, n, near)
            if planes is not None:
                out.update(planes=planes, layout="backend")
            else:
                planes = residues.int8_planes(xp, re, im, shift, axis, n, near)
                out["planes"] = xp.stack([xp.stack(p) for p in planes])
    return out


@task
def _product_block(ra, rb, cfg, *ix):
    """``{"W": int8 residues of A_ik B_kj mod each m_l, "nat": the native block product or
    None, "layout"}`` with a size-1 K axis implied (the reduction drops it): W (n, parts, ...,
    m_i, n_j) in the generic layout, else in the backend's (``chunk_products``)."""
    need = bool(cfg["need"][_block_index(ix)])
    n = cfg["count"]
    if n and ra["layout"] != rb["layout"]:  # workers whose numpy chunks took other backends
        raise RuntimeError(
            f"emulinalg: the chunks of one product took different backends ({ra['layout']} and "
            f"{rb['layout']} residues): give every dask worker the same EMULINALG_AMX and "
            "EMULINALG_CUPY_KERNELS settings"
        )
    out = {"W": None, "nat": None, "layout": ra["layout"]}
    x = ra["raw"] if ra["planes"] is None else ra["planes"]
    xp, backend = _xp_backend(x)
    with _chunk_quiet(xp, backend):
        if n and ra["layout"] == "backend":
            out["W"] = _hooks(backend).chunk_products(ra["planes"], rb["planes"], n)
        elif n:
            pa, pb = ra["planes"], rb["planes"]
            W = []
            for ell, m in enumerate(crt_constants(n).moduli):
                planes_a = tuple(_gemm_operand(xp, backend, pa[ell, t]) for t in range(pa.shape[1]))
                planes_b = tuple(_gemm_operand(xp, backend, pb[ell, t]) for t in range(pb.shape[1]))
                w = products.modular_products(xp, backend.int_matmul, planes_a, planes_b, m)
                W.append(xp.stack([xp.astype(v, xp.int8) for v in w]))
            out["W"] = xp.stack(W)
        if need:
            out["nat"] = backend.native_matmul(ra["raw"], rb["raw"])
    return out


@task
def _wsum(parts, axis=None, keepdims=False, computing_meta=False, **kwargs):
    """Partial products of K-blocks added: residues modulo each m_l (exact small integers, kept
    in the symmetric range as int8), native block products as plain sums."""
    parts = [x for x in _flatten(parts) if isinstance(x, dict)]
    if computing_meta or not parts:  # dask asking for the meta
        return np.empty((0,) * 2, dtype=object)
    out = dict(parts[0])
    if len(parts) > 1:
        W = parts[0]["W"]
        if W is not None and parts[0]["layout"] == "backend":
            _, backend = _xp_backend(W)
            out["W"] = _hooks(backend).chunk_residue_sum([x["W"] for x in parts])
        elif W is not None:
            xp, _ = _xp_backend(W)
            total = xp.astype(W, xp.float64)  # small integers: exact sums
            for x in parts[1:]:
                total = total + xp.astype(x["W"], xp.float64)
            mods = crt_constants(W.shape[0]).moduli
            out["W"] = xp.stack([xp.astype(residues.symmetric_mod(xp, total[ell], m), xp.int8)
                                 for ell, m in enumerate(mods)])  # fmt: skip
        if parts[0]["nat"] is not None:
            nat = parts[0]["nat"]
            xp, backend = _xp_backend(nat)
            with _chunk_quiet(xp, backend):  # inf - inf is NaN, as in the native product
                for x in parts[1:]:
                    nat = nat + x["nat"]
            out["nat"] = nat
    return out


def _crt_out(xp, w, mu, nu, cfg, dtype_name):
    """The emulated values of one output block (None when nothing is emulated): the exact CRT
    of its K-summed residues (``crt.from_residues``, as ``products.product``), unscaled and
    rounded once to the result dtype; ``dtype_name="dd"`` (real products): the double-double
    pair (hi, lo) of ``rounding.unscale_dd`` as the complex128 hi + i lo."""
    n = cfg["count"]
    if not n:
        return None
    W = w["W"]
    out = "dd" if dtype_name == "dd" else REAL_DTYPE[dtype_name]
    if w["layout"] == "backend":
        _, backend = _xp_backend(W)
        return _hooks(backend).chunk_crt(W, mu, nu, n, W.shape[0] != 1, out, nu.shape[-1])
    nparts = W.shape[1]
    per_modulus = ([W[ell, t] for t in range(nparts)] for ell in range(n))
    parts = crt.from_residues(xp, crt_constants(n), per_modulus, W.shape[2:], nparts, mu, nu,
                              out)  # fmt: skip
    if out == "dd":
        return make_complex(xp, parts[0][0], parts[0][1], xp.complex128)
    dt = getattr(xp, dtype_name)
    return parts[0] if nparts == 1 else make_complex(xp, parts[0], parts[1], dt)


def _native_patch(xp, out, nat, amb, bmb, need, cfg, where):
    """``out`` with the native entries of output block ``where`` patched in (beyond the
    certificate, or in rows/columns with NaN/Inf)."""
    if not bool(cfg["need"][where]):
        return out
    if out is None:
        return nat
    mask = xp.expand_dims(amb[..., 1] > 0, axis=-1) | xp.expand_dims(bmb[..., 1] > 0, axis=-2)
    if cfg["mask"] and need is not None:
        mask = mask | _beyond(xp, need)
    return xp.where(mask, nat, out)


@task
def _crt_block(w, mu, nu, amb, bmb, need, cfg, *ix, dtype_name):
    """One output block: the emulated values (``_crt_out``) with the native entries patched in."""
    xp, backend = _xp_backend(mu)
    with _chunk_quiet(xp, backend):
        out = _crt_out(xp, w, mu, nu, cfg, dtype_name)
        return _native_patch(xp, out, w["nat"], amb, bmb, need, cfg, _block_index(ix))


@task
def _crt_emulated(w, mu, nu, cfg, *, dtype_name):
    """``{"out": one output block's emulated values (``_crt_out``), "nat": its native block
    product or None}``, for the refit before the native patch."""
    xp, backend = _xp_backend(mu)
    with _chunk_quiet(xp, backend):
        return {"out": _crt_out(xp, w, mu, nu, cfg, dtype_name), "nat": w["nat"]}
