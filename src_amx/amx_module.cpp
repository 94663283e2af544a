// emulinalg._amx: exact INT8 and BF16 tile GEMMs on Intel AMX, chosen at run time, plus the
// same kernels on a scalar tile model (emulate=True) that runs on any CPU.
//
// Compiled without AMX flags: nothing here executes a tile instruction. The AMX kernels live in
// gemm_amx.cpp and are called only when status(compiled).available, which also performs the
// Linux permission request (once per process, before any worker thread starts).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cpu_id.hpp"
#include "gemm.hpp"
#include "kernel.hpp"
#include "tile_config.hpp"

namespace py = pybind11;
namespace amx = emulinalg::amx;

namespace {

#ifdef EMULINALG_AMX_COMPILED
constexpr bool kCompiled = true;
#else
constexpr bool kCompiled = false;
#endif

const amx::Status& status() { return amx::status(kCompiled); }

template <class T>
using CArray = py::array_t<T, py::array::c_style>;

// (m, k, n) of a 2-D x 2-D product, or ValueError.
template <class T>
void shapes(const CArray<T>& a, const CArray<T>& b, std::int64_t& m, std::int64_t& k,
            std::int64_t& n, const char* name) {
    if (a.ndim() != 2 || b.ndim() != 2) {
        throw py::value_error(std::string(name) + ": a and b must be 2-D arrays");
    }
    m = a.shape(0);
    k = a.shape(1);
    n = b.shape(1);
    if (b.shape(0) != k) {
        throw py::value_error(std::string(name) + ": inner dimensions differ (a is " +
                              std::to_string(m) + "x" + std::to_string(k) + ", b is " +
                              std::to_string(b.shape(0)) + "x" + std::to_string(n) + ")");
    }
}

void require_amx(bool emulate, const char* name) {
    if (!emulate && !status().available) {
        throw std::runtime_error(std::string(name) + ": AMX is not available: " +
                                 status().reason + " (emulate=True runs the scalar tile model)");
    }
}

void check_ok(bool ok, const char* name) {
    if (!ok) {
        throw std::runtime_error(std::string(name) +
                                 ": internal error: tile shapes violate the instruction rules");
    }
}

CArray<std::int32_t> gemm_s8s8s32(const CArray<std::int8_t>& a, const CArray<std::int8_t>& b,
                                  bool emulate, int threads) {
    const char* name = "gemm_s8s8s32";
    std::int64_t m, k, n;
    shapes(a, b, m, k, n, name);
    if (k > amx::kMaxKS8) {
        throw py::value_error(std::string(name) + ": k = " + std::to_string(k) +
                              " exceeds MAX_K_S8 = " + std::to_string(amx::kMaxKS8) +
                              ": int32 sums of int8 products could overflow; block K");
    }
    require_amx(emulate, name);
    CArray<std::int32_t> c({m, n});
    const std::int8_t* pa = a.data();
    const std::int8_t* pb = b.data();
    std::int32_t* pc = c.mutable_data();
    bool ok;
    {
        py::gil_scoped_release release;
#ifdef EMULINALG_AMX_COMPILED
        ok = emulate ? amx::gemm_s8s8s32_emulated(pa, pb, pc, m, n, k, threads)
                     : amx::gemm_s8s8s32_amx(pa, pb, pc, m, n, k, threads);
#else
        ok = amx::gemm_s8s8s32_emulated(pa, pb, pc, m, n, k, threads);
#endif
    }
    check_ok(ok, name);
    return c;
}

CArray<float> gemm_bf16bf16f32(const CArray<std::uint16_t>& a, const CArray<std::uint16_t>& b,
                               bool emulate, int threads) {
    const char* name = "gemm_bf16bf16f32";
    std::int64_t m, k, n;
    shapes(a, b, m, k, n, name);
    require_amx(emulate, name);
    CArray<float> c({m, n});
    const std::uint16_t* pa = a.data();
    const std::uint16_t* pb = b.data();
    float* pc = c.mutable_data();
    bool ok;
    {
        py::gil_scoped_release release;
#ifdef EMULINALG_AMX_COMPILED
        ok = emulate ? amx::gemm_bf16bf16f32_emulated(pa, pb, pc, m, n, k, threads)
                     : amx::gemm_bf16bf16f32_amx(pa, pb, pc, m, n, k, threads);
#else
        ok = amx::gemm_bf16bf16f32_emulated(pa, pb, pc, m, n, k, threads);
#endif
    }
    check_ok(ok, name);
    return c;
}

py::dict features() {
    const emulinalg::cpu::Features f = emulinalg::cpu::detect();
    const amx::Status& s = status();
    py::dict d;
    d["amx_tile"] = f.amx_tile;
    d["amx_int8"] = f.amx_int8;
    d["amx_bf16"] = f.amx_bf16;
    d["os_xtiledata"] = f.os_xtiledata;
    d["compiled_amx"] = kCompiled;
    d["permission"] = s.permission;
    d["available"] = s.available;
#ifdef _OPENMP
    d["openmp"] = true;
#else
    d["openmp"] = false;
#endif
    d["max_threads"] = amx::resolve_threads(0);
    return d;
}

}  // namespace

PYBIND11_MODULE(_amx, m) {
    m.doc() =
        "Exact INT8 (TDPBSSD) and BF16 (TDPBF16PS) tile GEMMs on Intel AMX, dispatched at run "
        "time (CPUID, XCR0, Linux arch_prctl permission), and the same kernels on a scalar tile "
        "model (emulate=True) that runs on any CPU.";
    m.attr("MAX_K_S8") = amx::kMaxKS8;
    m.def(
        "available", [] { return status().available; },
        "True when the AMX kernels can run here: built with AMX support, CPUID reports "
        "AMX-TILE/INT8/BF16, the OS enabled the tile state, and (Linux) the process was granted "
        "XTILEDATA. The first call makes the permission request.");
    m.def(
        "reason", [] { return status().reason; },
        "Why available() is False ('' when it is True).");
    m.def("features", &features,
          "Dict: amx_tile, amx_int8, amx_bf16 (CPUID), os_xtiledata (XCR0), compiled_amx, "
          "permission (Linux XTILEDATA granted), available, openmp, max_threads.");
    m.def("gemm_s8s8s32", &gemm_s8s8s32, py::arg("a"), py::arg("b"), py::kw_only(),
          py::arg("emulate") = false, py::arg("threads") = 0,
          "Exact int8 (m, k) @ int8 (k, n) -> int32 (m, n) with TDPBSSD.\n\n"
          "Exact for k <= MAX_K_S8 = 2**17 - 1 (every |a b| <= 2**14, so every partial sum fits "
          "int32); larger k raises ValueError (block K and add the blocks in int64). "
          "emulate=True runs the scalar tile model instead of AMX. threads <= 0: OpenMP's "
          "default (OMP_NUM_THREADS).");
    m.def("gemm_bf16bf16f32", &gemm_bf16bf16f32, py::arg("a"), py::arg("b"), py::kw_only(),
          py::arg("emulate") = false, py::arg("threads") = 0,
          "bf16 (m, k) @ bf16 (k, n) -> float32 (m, n) with TDPBF16PS; bf16 values are given "
          "as uint16 bit patterns. Products are exact in fp32, sums round to nearest even, "
          "subnormal inputs and outputs are flushed to zero.");
}
