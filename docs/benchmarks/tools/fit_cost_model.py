"""Fit a backend's cost model from one start's bench rows and show its verdicts (issue #25).

Joins the bench records given (eager level rows with their native times and stage breakdowns)
into one file, the model's ``source``; fits it as the built-in model of that backend is fitted
(``_cost._FIT``); prints the ``CostModel`` and, from the calibration records of the same start
(``_calibration.measure``'s rates, one JSON object per line), the mean rates as the
``DeviceRates`` of ``_cost.FITTED_ON``; then each emulated row's time and its ratio to the
median native time of its dtype and size, measured against predicted.

    python docs/benchmarks/tools/fit_cost_model.py --backend amx \
        --rows 'out/rows_*.jsonl' --calibration out/calibration.jsonl \
        --out docs/benchmarks/xeon-amx-16c/cost_fit_2026-12-08.jsonl
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics

from emulinalg import _cost


def mean_rates(path):
    """The mean of a calibration file's rates, as a ``DeviceRates``."""
    with open(path) as fh:
        recs = [json.loads(line) for line in fh if line.strip()]
    dts = recs[0]["native_flops"].keys()
    return _cost.DeviceRates(
        recs[0]["name"],
        {d: statistics.fmean(r["native_flops"][d] for r in recs) for d in dts},
        int8_ops=statistics.fmean(r["int8_ops"] for r in recs),
        bandwidth=statistics.fmean(r["bandwidth"] for r in recs),
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="amx", choices=sorted(_cost._FIT))
    p.add_argument("--rows", required=True, help="bench record files (a glob, quoted)")
    p.add_argument("--calibration", help="calibration records of the same start")
    p.add_argument("--out", required=True, help="the joined records: the model's source")
    args = p.parse_args(argv)
    records = []
    for path in sorted(glob.glob(args.rows)):
        with open(path) as fh:
            records += [json.loads(line) for line in fh if line.strip()]
    with open(args.out, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    model = _cost.calibrate(args.out, source=args.out, **_cost._FIT[args.backend])
    print(model)
    if args.calibration:
        print(mean_rates(args.calibration))
    native: dict = {}
    for r in records:
        if r.get("native_seconds"):
            native.setdefault((r["dtype"], r["m"], r["n"], r["k"]), []).append(r["native_seconds"])
    print("dtype       N      phi  scheme                                  measured  predicted")
    for r in records:
        scheme = _cost._parse_scheme(r.get("scheme", "native"))
        if scheme is None or not r.get("native_seconds"):
            continue
        shape = (r["dtype"], r["m"], r["n"], r["k"])
        t_nat = statistics.median(native[shape])
        predicted = model.native_seconds(*shape) / model.emulated_seconds(scheme, *shape)
        print(f"{r['dtype']:11s} {r['m']:<6d} {r.get('phi', '')!s:4s} {scheme!s:40s}"
              f"{t_nat / r['seconds']:6.2f}x {predicted:8.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
