"""A PySCF wheel trimmed to what the DF-RHF example needs, for the GPU machine (issue #28).

The GPU machine has no PySCF and no network, and what travels to it is limited to 64 MiB, so
the wheel goes there in a trimmed form (``.device/whl-scf/``; ``docs/benchmarks/tools/scf_gpu.sh``
installs it). Kept: everything ``emulinalg.examples.molecules`` reaches — ``pyscf.gto``,
``pyscf.scf``, ``pyscf.df``, ``pyscf.ao2mo``, ``pyscf.symm``, ``pyscf.lib``, ``pyscf.dft`` (imported
by ``df.make_auxbasis`` for ``is_hybrid_xc`` and by the SCF) — with the libraries they load
(libcint, libcgto, libcvhf, libao2mo, libri, libnp_helper, libdft with its libpbc, the bundled
OpenBLAS and runtime libraries) and the all-electron basis sets. Dropped:

- libxc (``lib/deps/lib/libxc.so``, 56 MB, with ``libxc_itrf.so`` and ``dft/libxc.py``): without
  the module PySCF's own fallbacks take XCFun (kept: 6 MB), which answers ``is_hybrid_xc``;
- the periodic code (``pyscf/pbc``; ``libpbc.so`` stays, libdft links it) and the post-HF,
  response, gradient and solvent packages with their libraries (libcc, libccsdt, libfci,
  libmcscf, libmp, libagf2, libpdft, libsolvent and the gfortran 5 runtime only libsolvent
  uses), and ``dft/sap_data.py`` (the SAP guess's table);
- the C sources, headers and CMake files under ``pyscf/lib``;
- relativistic (DK, Dyall), pseudopotential (-PP, ccECP, BFD, CRENB, LANL, Stuttgart, SOECP)
  basis sets.

Nothing kept is changed; ``RECORD`` lists the kept files with their original hashes, and
``TRIMMED`` in the dist-info lists what was dropped and why.

    pip download pyscf==2.14.0 --no-deps -d /tmp/pyscfw
    python docs/benchmarks/tools/trim_pyscf_wheel.py /tmp/pyscfw/pyscf-*.whl .device/whl-scf
"""

from __future__ import annotations

import argparse
import base64
import collections
import hashlib
import re
import sys
import zipfile
from pathlib import Path

# Python packages of pyscf that neither the integrals nor PySCF's DF-RHF import.
PACKAGES = (
    *("adc", "agf2", "cc", "ci", "eph", "fci", "geomopt", "grad", "gw", "hessian", "md"),
    *("mcpdft", "mcscf", "mp", "mrpt", "nac", "pbc", "qmmm", "sgx", "solvent", "tdscf", "tddft"),
)
# Shared libraries under pyscf/lib that only the dropped packages (or libxc's interface) load.
LIBRARIES = (
    *("libagf2.so", "libcc.so", "libccsdt.so", "libfci.so", "libmcscf.so", "libmp.so"),
    *("libpdft.so", "libsolvent.so", "libgfortran-040039e1.so.5.0.0"),
    *("libxc_itrf.so", "deps/lib/libxc.so"),
)
BASIS_DIRS = ("ccecp-basis", "dyall-basis", "soecp")
# relativistic / pseudopotential basis files (the "pp" of def2-tzvpp is polarization: kept)
BASIS_FILES = re.compile(
    r"(-dkh?\d?\.dat|-pp(-nr)?\.dat|^bfd_.*|^crenb.*|^lanl.*|^stuttgart.*|^dyall_.*|"
    r"^burkatzi-.*|^sarc-.*)$",
    re.IGNORECASE,
)


def reason(name):
    """Why a file of the wheel is dropped, or None when it is kept."""
    parts = name.split("/")
    if parts[0] != "pyscf":
        return None
    if len(parts) > 2 and parts[1] in PACKAGES:
        return f"package pyscf.{parts[1]}"
    if name in ("pyscf/dft/libxc.py", "pyscf/lib/deps/lib/libxc.so", "pyscf/lib/libxc_itrf.so"):
        return "libxc (XCFun is kept)"
    if name == "pyscf/dft/sap_data.py":
        return "SAP guess table"
    if parts[1] == "lib" and len(parts) > 2:
        rest = "/".join(parts[2:])
        if rest in LIBRARIES:
            return "library of a dropped package"
        keep = rest.endswith(".py") and "/" not in rest
        keep |= bool(re.search(r"\.so(\.\d+)*$", rest))
        return None if keep else "C sources, headers, CMake files"
    basis_set = parts[1:3] == ["gto", "basis"] and len(parts) > 3
    if basis_set and (parts[3] in BASIS_DIRS or BASIS_FILES.search(parts[-1])):
        return "relativistic / pseudopotential basis sets"
    return None


def _record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()},{len(data)}"


def trim(src, out_dir):
    """Write the trimmed copy of wheel ``src`` into ``out_dir`` (same file name); returns its
    path and ``{reason: (files, bytes uncompressed, bytes compressed)}`` of what was dropped."""
    src, out_dir = Path(src), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dst = out_dir / src.name
    dropped = collections.defaultdict(lambda: [0, 0, 0])
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        record = next(i.filename for i in infos if i.filename.endswith(".dist-info/RECORD"))
        dist_info = record.rsplit("/", 1)[0]
        gone = set()
        for info in infos:
            why = reason(info.filename)
            if why:
                gone.add(info.filename)
                d = dropped[why]
                d[0] += 1
                d[1] += info.file_size
                d[2] += info.compress_size
        lines = [
            f"{why}: {n} files, {u / 2**20:.1f} MiB"
            for why, (n, u, _) in sorted(dropped.items(), key=lambda kv: -kv[1][1])
        ]
        trimmed = (
            "Trimmed by emulinalg's docs/benchmarks/tools/trim_pyscf_wheel.py for the DF-RHF "
            "example (gto, scf, df); dropped:\n" + "\n".join(lines) + "\n"
        ).encode()
        kept_record = [
            line
            for line in zin.read(record).decode().splitlines()
            if line and line.split(",")[0] not in gone
        ]
        kept_record.insert(-1, f"{dist_info}/TRIMMED,{_record_hash(trimmed)}")
        with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            for info in infos:
                if info.filename in gone:
                    continue
                if info.filename == record:
                    zout.writestr(f"{dist_info}/TRIMMED", trimmed)
                    zout.writestr(info, ("\n".join(kept_record) + "\n").encode())
                else:
                    zout.writestr(info, zin.read(info), compresslevel=9)
    return dst, dict(dropped)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", help="PySCF's manylinux wheel")
    ap.add_argument("out_dir", help="folder for the trimmed wheel (same file name)")
    args = ap.parse_args(argv)
    dst, dropped = trim(args.wheel, args.out_dir)
    for why, (n, u, c) in sorted(dropped.items(), key=lambda kv: -kv[1][2]):
        print(f"dropped {why}: {n} files, {u / 2**20:.1f} MiB ({c / 2**20:.1f} MiB compressed)")
    before, after = Path(args.wheel).stat().st_size, dst.stat().st_size
    print(f"{dst}: {after / 2**20:.1f} MiB (from {before / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
