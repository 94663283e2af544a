"""Issue-3 records on the GPU machine: default precision vs cuBLAS at N = 8192.

Inputs are ``phi_matrix`` (seeds 11, 12) and the exact reference for the first rows comes
precomputed (``.gpuref/ref_<dtype>_<phi>.npz``, made on the CPU with ``emulinalg.reference``;
the input hashes are checked). Writes benchmark JSON lines (docs/performance.md) to the path given.

    python3 tools/device/gpu_records.py OUT.jsonl [N [dtype,... [phi,...]]]
"""

import contextlib
import datetime
import hashlib
import json
import sys
import time

import cupy as cp
import numpy as np

import emulinalg
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy


def emit(rec, out=None):
    """Print one record as a JSON line (and append it to ``out``), then give the row's device
    memory back to the pool's host."""
    print(json.dumps(rec), flush=True)
    if out:
        with open(out, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
    cp.get_default_memory_pool().free_all_blocks()


def timed(fn, *args, repeat=5, warmup=1):
    """Median seconds of ``repeat`` CUDA-event-timed calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn(*args)
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(repeat):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        fn(*args)
        e.record()
        e.synchronize()
        ts.append(cp.cuda.get_elapsed_time(s, e) / 1e3)
    return float(np.median(ts))


@contextlib.contextmanager
def records(path, script, argv, summary, **common):
    """``emit(rec)`` for the kernel-level scripts: ``rec`` plus the device, date, command
    (``script``: the script's path from the repository root) and ``common`` as one JSON line in
    ``path``, and ``summary(rec)`` printed."""
    common = {
        "backend": "cupy", **common,
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "date": datetime.date.today().isoformat(),
        "command": f"python3 {script} " + " ".join(argv or sys.argv[1:]),
    }  # fmt: skip
    with open(path, "w") as f:

        def emit(rec):
            rec.update(common)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(summary(rec), flush=True)

        yield emit


def constant_ab(module, attr, variants, rows, out, check=None, rounds=7):
    """A/B of a module constant in one process: for each row ``"dtype:N:phi"`` (``phi_matrix``
    seeds 1, 2) the eager level with ``module.attr`` set to each value of ``variants`` (name ->
    value), ``rounds`` interleaved rounds of three timed calls each (the median round:
    ``<name>_s``), cuBLAS before and after. ``check(rec, run)`` adds fields before the timing
    (``run(value)``: the level's result with that value). One JSON line per row in ``out``."""
    shipped = getattr(module, attr)
    for row in rows:
        dt, n, phi = row.split(":")
        n, phi = int(n), float(phi)
        a = cp.asarray(phi_matrix((n, n), phi, dt, seed=1))
        b = cp.asarray(phi_matrix((n, n), phi, dt, seed=2))

        def native(a=a, b=b):
            return cp.matmul(a, b)

        def level(value, a=a, b=b):
            setattr(module, attr, value)
            try:
                return emulinalg.matmul(a, b)
            finally:
                setattr(module, attr, shipped)

        rec = {"dtype": dt, "n": n, "phi": phi, attr: {k: str(v) for k, v in variants.items()}}
        with emulinalg.config(strategy="eager"):
            if check is not None:
                check(rec, level)
            rec["native_before_s"] = timed(native, repeat=5)
            got = {name: [] for name in variants}
            for _ in range(rounds):
                for name, value in variants.items():
                    got[name].append(timed(level, value, repeat=3))
            rec["plan"] = str(emulinalg.last_plan())[:300]
        for name, ts in got.items():
            rec[f"{name}_s"] = sorted(ts)[len(ts) // 2]
        rec["native_after_s"] = timed(native, repeat=5)
        del a, b, native, level  # (the closures hold the inputs) before emit frees the pool
        emit(rec, out)


def median_ms(fn, repeat):
    """``timed`` in milliseconds after two warm-up calls (the kernel-level scripts)."""
    return 1e3 * timed(fn, repeat=repeat, warmup=2)


def _sha(x):
    return hashlib.sha256(x.tobytes()).hexdigest()


def main(path, n=8192, only=None, phis=(0.5, 1, 2, 4)):
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    with open(path, "w") as out:
        for dtype in only or ("float64", "float32", "complex128"):
            for phi in phis:
                t0 = time.time()
                a = phi_matrix((n, n), phi, dtype, seed=11)
                b = phi_matrix((n, n), phi, dtype, seed=12)
                try:
                    ref = np.load(f".gpuref/ref_{dtype}_{phi}.npz")
                except FileNotFoundError:
                    ref = None
                ok = ref is not None and (
                    _sha(a) == str(ref["a_hash"]) and _sha(b) == str(ref["b_hash"])
                )
                rows = ref["hi"].shape[0] if ref is not None else 8
                ga, gb = cp.asarray(a), cp.asarray(b)
                tn = timed(cp.matmul, ga, gb, repeat=10)
                cn = cp.asnumpy((ga @ gb)[:rows])
                with emulinalg.config(strategy="eager"):
                    te = timed(emulinalg.matmul, ga, gb, repeat=3)
                    ce = cp.asnumpy(emulinalg.matmul(ga, gb)[:rows])
                    plan = emulinalg.last_plan()
                flops = (8 if dtype.startswith("complex") else 2) * n**3
                rec = {
                    "backend": "cupy", "op": "matmul", "dtype": dtype, "precision": dtype[:7]
                    if dtype != "complex128" else "float64", "scheme": plan.scheme,
                    "m": n, "n": n, "k": n, "batch": 1, "phi": phi, "seconds": te,
                    "tflops": flops / te / 1e12, "native_tflops": flops / tn / 1e12,
                    "speedup": tn / te, "native_entries": plan.native_entries,
                    "reference": "exact" if ok else "none (no reference for these inputs)",
                    "reference_rows": rows, "device": device,
                    "date": datetime.date.today().isoformat(),
                    "command": f"python3 tools/device/gpu_records.py {path} {n}",
                }  # fmt: skip
                if ok:
                    sub = (a[:rows], b)
                    r = (ref["hi"], ref["lo"])
                    e_acc = accuracy(ce, *sub, ref=r)
                    n_acc = accuracy(cn, *sub, ref=r)
                    rec.update(
                        bits_maxrel=e_acc["bits_maxrel"], native_bits_maxrel=n_acc["bits_maxrel"],
                        bits_cw=e_acc["bits_cw"], native_bits_cw=n_acc["bits_cw"],
                    )  # fmt: skip
                out.write(json.dumps(rec) + "\n")
                out.flush()
                print(json.dumps(rec), f"[{time.time() - t0:.1f} s]", flush=True)
                del ga, gb
                cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    dtypes = sys.argv[3].split(",") if len(sys.argv) > 3 else None
    phis = (
        [float(x) if "." in x else int(x) for x in sys.argv[4].split(",")]
        if len(sys.argv) > 4
        else (0.5, 1, 2, 4)
    )
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8192, dtypes, phis)
