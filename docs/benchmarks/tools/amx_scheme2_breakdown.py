"""Where a Scheme II product's time goes on the AMX backend, piece by piece (AMX host).

Times each C++ call of the amx backend's float64 level on one N x N x N product of phi-matrices
(median of ``--repeat`` after one untimed call, 16 threads unless OMP_NUM_THREADS says otherwise):
the statistics' passes (``all_finite``, ``line_exponents``, ``ozaki2_bound_operand`` of A and of B
given them, the bound GEMM ``gemm_s8s8s32``, ``ozaki2_bound_max``, the certificate), the residue
panels (``ozaki2_pack``), the per-modulus tile GEMMs with their mod epilogue (``ozaki2_multiply``,
all moduli, under the default blocking and under each ``--specs`` entry), a plain ``gemm_s8s8s32``
of the same size (packing included) for comparison, and the CRT (``ozaki2_crt``, into fresh outputs
as the backend does and into reused ones). One JSON line per piece (``"bench":
"amx_scheme2_breakdown"``) with seconds and, for the GEMMs, Top/s (2 N^3 per GEMM).
``--rounds R`` times the GEMM specs round-robin R times (the host drifts between consecutive
specs; each record then lists every round, the plain GEMM too, per spec) and
``--products-only`` skips the statistics and the CRT.

Usage (from the repository root, emulinalg installed with its AMX module, on the AMX machine):
    python3 docs/benchmarks/tools/amx_scheme2_breakdown.py -N 8192 \\
        --specs "kc=32" "mc=512,nc=1024" --out breakdown.jsonl
``--emulate`` runs the GEMMs on the scalar tile model (small N only: a dry run of the tool).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

import numpy as np


def timed(fn, repeat):
    """(median seconds of `repeat` calls after an untimed one, the last result)."""
    out = fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-N", type=int, default=8192)
    parser.add_argument("--moduli", type=int, default=18)
    parser.add_argument("--phi", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--specs", nargs="*", default=[], help="blocking specs for the GEMMs")
    parser.add_argument("--rounds", type=int, default=1,
                        help="time the GEMM specs round-robin this many rounds (the host drifts "
                        "between consecutive specs); each record then has every round's seconds")
    parser.add_argument("--products-only", action="store_true",
                        help="skip the statistics and the CRT (the plain GEMM is still timed "
                        "per spec with --rounds)")
    parser.add_argument("--emulate", action="store_true", help="tile model (tiny N only)")
    parser.add_argument("--out", default=None, help="append JSON lines here (else stdout)")
    args = parser.parse_args(argv)

    from emulinalg import _amx
    from emulinalg.backends import amx
    from emulinalg.inputs import phi_matrix

    if not (args.emulate or _amx.available()):
        sys.exit(f"AMX is not usable here: {_amx.reason()} (--emulate runs the tile model)")
    amx.EMULATE = args.emulate
    n, nmod, rep = args.N, args.moduli, args.repeat
    a = phi_matrix((n, n), args.phi, "float64", seed=1)
    b = phi_matrix((n, n), args.phi, "float64", seed=2)
    sink = open(args.out, "a") if args.out else sys.stdout  # noqa: SIM115
    base = {
        "bench": "amx_scheme2_breakdown",
        "N": n,
        "moduli": nmod,
        "phi": args.phi,
        "emulate": args.emulate,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "blocking": _amx.blocking()["spec"],
    }

    def record(piece, seconds, gemms=0, **extra):
        r = dict(base, piece=piece, seconds=round(seconds, 5), **extra)
        if gemms:
            r["tops"] = round(gemms * 2 * n**3 / seconds / 1e12, 2)
        print(json.dumps(r), file=sink, flush=True)

    if args.products_only:
        pre = amx.ozaki2_prescale(a, None, b, None, "accurate")
    else:
        pre = statistics_pieces(a, b, args, rep, record)
    products_pieces(a, b, pre, args, rep, record)


def statistics_pieces(a, b, args, rep, record):
    """The statistics' passes, as amx.ozaki2_prescale / ozaki2_certificate run them."""
    from emulinalg import _amx, _planner
    from emulinalg._precision import Level
    from emulinalg.backends import amx

    record("all_finite A+B", timed(lambda: (_amx.all_finite(a), _amx.all_finite(b)), rep)[0])
    # the engine's line scan (NaN/Inf check and line exponents), whose exponents the operand
    # passes take, as in the level
    t, ea = timed(lambda: _amx.line_exponents(a, None, True), rep)
    t2, eb = timed(lambda: _amx.line_exponents(b, None, False), rep)
    record("line_exponents A+B", t + t2)
    t, ra = timed(lambda: _amx.ozaki2_bound_operand(a, True, None, ea), rep)
    record("bound_operand A", t)
    t, rb = timed(lambda: _amx.ozaki2_bound_operand(b.T, False, None, eb), rep)
    record("bound_operand B", t)
    t, F = timed(lambda: _amx.gemm_s8s8s32(ra[1], rb[1], emulate=args.emulate), rep)
    record("bound GEMM (gemm_s8s8s32, packing included)", t, gemms=1)
    t, _ = timed(lambda: _amx.ozaki2_bound_max(F, ra[2], ra[3], rb[2], rb[3], False), rep)
    record("bound_max", t)
    exps = (ea.reshape(1, -1), eb.reshape(1, -1))
    pre = amx.ozaki2_prescale(a, None, b, None, "accurate", exps)
    target = _planner.target_for(Level(53, "float64"), a.shape[-1], amx)
    t, cert = timed(lambda: amx.ozaki2_certificate(a, None, b, None, pre, target), rep)
    record("certificate", t, count=None if cert[0] is None else int(cert[0]))
    t, pre = timed(lambda: amx.ozaki2_prescale(a, None, b, None, "accurate", exps), rep)
    record("prescale (all of the above but the certificate)", t)
    return pre


def products_pieces(a, b, pre, args, rep, record):
    """Residue panels, the mod GEMMs under each blocking, a plain GEMM and the CRT."""
    from emulinalg import _amx
    from emulinalg.algorithm.moduli import crt_constants
    from emulinalg.algorithm.scaling import ozaki2_shifts
    from emulinalg.backends import amx

    n, nmod = args.N, args.moduli
    c = crt_constants(nmod)
    mu, nu = ozaki2_shifts(np, pre, c.L, c.Q_down)
    mu32, nu32 = (np.ascontiguousarray(x, dtype=np.int32) for x in (mu, nu))
    t, panels = timed(lambda: _amx.ozaki2_pack(a, b, mu32, nu32, nmod), rep)
    record("ozaki2_pack (both operands)", t)
    res = _amx.empty((nmod, n, n), "int8")

    def products():
        for ell in range(nmod):
            _amx.ozaki2_multiply(panels, ell, res[ell], emulate=args.emulate)

    rng = np.random.default_rng(3)
    x8 = rng.integers(-128, 128, (n, n), dtype=np.int8)
    y8 = rng.integers(-128, 128, (n, n), dtype=np.int8)
    before = _amx.blocking()["spec"]
    specs = [""] + list(args.specs)
    plain = lambda: _amx.gemm_s8s8s32(x8, y8, emulate=args.emulate)  # noqa: E731
    rounds = {spec: ([], []) for spec in specs}
    for _ in range(args.rounds):
        for spec in specs:
            _amx.set_blocking("default," + spec if spec else "default")
            rounds[spec][0].append(timed(products, rep)[0])
            if args.rounds > 1:  # the plain GEMM (the bound GEMM's kernel) under each spec too
                rounds[spec][1].append(timed(plain, rep)[0])
    for spec in specs:
        mod, gemm = rounds[spec]
        extra = {"rounds": [round(x, 5) for x in mod]} if args.rounds > 1 else {}
        record("ozaki2_multiply x moduli", statistics.median(mod), gemms=nmod,
               spec=spec or "default", **extra)
        if gemm:
            record("gemm_s8s8s32 (one, packing included) per spec", statistics.median(gemm),
                   gemms=1, spec=spec or "default", rounds=[round(x, 5) for x in gemm])
    _amx.set_blocking(before)
    if args.products_only:
        return
    t, _ = timed(lambda: _amx.gemm_s8s8s32(x8, y8, emulate=args.emulate), rep)
    record("gemm_s8s8s32 (one, packing included)", t, gemms=1)
    tables = amx._crt_arrays(nmod)
    hi = _amx.empty((n, n), "float64")
    t, _ = timed(lambda: _amx.ozaki2_crt(res, mu32, nu32, 0, *tables, hi), rep)
    record("ozaki2_crt (reused output)", t)
    t, _ = timed(
        lambda: _amx.ozaki2_crt(res, mu32, nu32, 0, *tables, _amx.empty((n, n), "float64")), rep
    )
    record("ozaki2_crt (fresh output)", t)
    t, _ = timed(lambda: _amx.empty((nmod, n, n), "int8").fill(0), rep)
    record("fresh residue planes, first touch", t)


if __name__ == "__main__":
    main()
