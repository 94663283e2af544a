// emulinalg._cpu: which x86-64 matrix/vector extensions this CPU has and the OS has enabled.
//
// Pure CPUID/XGETBV queries (cpu_id.hpp): no AMX or AVX-512 instruction is executed, so the
// module is safe to import on any x86-64 CPU. On Linux a process must still ask for XTILEDATA
// with arch_prctl(ARCH_REQ_XCOMP_PERM) before its first AMX instruction; that belongs to the AMX
// kernels (emulinalg._amx, tile_config.hpp), not to this query.

#include <pybind11/pybind11.h>

#include "cpu_id.hpp"

namespace py = pybind11;

namespace {

py::dict features() {
    const emulinalg::cpu::Features f = emulinalg::cpu::detect();
    py::dict d;
    d["amx_tile"] = f.amx_tile;
    d["amx_int8"] = f.amx_int8;
    d["amx_bf16"] = f.amx_bf16;
    d["avx512f"] = f.avx512f;
    d["avx512_vnni"] = f.avx512_vnni;
    d["avx512_bf16"] = f.avx512_bf16;
    d["osxsave"] = f.osxsave;
    d["os_avx512"] = f.os_avx512;
    d["os_xtiledata"] = f.os_xtiledata;
    return d;
}

}  // namespace

PYBIND11_MODULE(_cpu, m) {
    m.doc() = "CPU feature flags from CPUID/XGETBV (x86-64 only; no AMX instruction is executed).";
    m.def("features", &features,
          "Return a dict of bools: amx_tile, amx_int8, amx_bf16, avx512f, avx512_vnni, avx512_bf16 "
          "(CPUID: the CPU has them), osxsave, os_avx512, os_xtiledata (XCR0: the OS saves the "
          "register state they need).");
}
