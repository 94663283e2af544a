"""The NVRTC kernels of ``src_cuda/`` (what the cupy backend compiles at first use) build for
every NVIDIA architecture the backend serves, not only the H200's: sm_80 (A100), sm_86/sm_89
(RTX 30/40, L40), sm_90 (H100/H200), sm_100 (B200), sm_120 (RTX 50). The fused CUTLASS GEMM is
sm_90a only (the backend then runs cuBLAS, and says so in the plan:
``test_fused_availability.py``). Each source is compiled by nvcc with the kernels the backend
names instantiated, for all of them at once; skipped where nvcc is not installed."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from emulinalg.backends import cuda

ARCHES = ("80", "86", "89", "90", "100", "120")

# the name expressions the cupy backend compiles (emulinalg/backends/cupy/, cuda/fused.py)
KERNELS = {
    "ozaki2_stats.cu": cuda.STATS_KERNELS,
    **{
        f"{k}.cu": tuple(
            f"{k}<{n}, {c}, {r}{t}>" for n in (2, 8, 20) for c in ("false", "true")
            for r in ("false", "true") for t in ("", ", float")
        ) + tuple(  # the Gaussian moduli's planes
            f"{k}<{n}, true, {r}, {t}, true>" for n in (2, 8, 16, 20) for r in ("false", "true")
            for t in ("double", "float")
        )
        for k in ("ozaki2_residues", "ozaki2_residues_mma")
    },
    "ozaki2_crt.cu": tuple(
        f"ozaki2_crt<{n}, {cuda.crt_words(n)}, {c}>" for n in (2, 15, 20)
        for c in ("false", "true")
    ) + tuple(f"ozaki2_crt<{n}, {cuda.crt_words(n)}, true, true>" for n in (2, 16, 20)),
    "ozaki2_crt_s8.cu": tuple(
        f"ozaki2_crt_s8<{n}, {cuda.crt_words(n)}, {p}>" for n in (2, 15, 20) for p in (1, 3)
    ) + tuple(f"ozaki2_crt_s8<{n}, {cuda.crt_words(n)}, 2, true>" for n in (2, 16, 20)),
    "bf16_lower.cu": ("bf16_lower",),
    "balance.cu": ("balance_sides<double>", "balance_sides<float>", "balance_out"),
    "refit_pick.cu": tuple(
        f"{k}<{t}, {c}>" for k in ("refit_low", "refit_select") for t in ("double", "float")
        for c in ("false", "true")
    ),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_nvrtc_sources_build_for_every_architecture(name, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    uses = "".join(f"  (void)&{expr};\n" for expr in KERNELS[name])
    src = tmp_path / name
    src.write_text(f"{cuda.source(name)}\nvoid emulinalg_instantiate() {{\n{uses}}}\n")
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in ARCHES]
    run = subprocess.run(
        [nvcc, "-std=c++17", "-w", "-c", str(src), "-o", str(tmp_path / "k.o"), *gencode],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]


def test_every_source_the_backend_loads_is_listed():
    """A new NVRTC source must join KERNELS (the fused GEMM's sources build through CMake)."""
    nvrtc = {p.name for p in cuda.source_dir().glob("*.cu")} - {"gemm_s8_inst.cu", "sanity.cu"}
    assert nvrtc == set(KERNELS)
