// emulinalg._cuda: the sm90a CUTLASS INT8 GEMMs of gemm_s8_inst.cu behind a small Python API
// of raw device pointers (ints, e.g. cupy's ``x.data.ptr``) and a stream handle (cupy's
// ``stream.ptr``); errors become Python exceptions. Plain C++: the CUDA parts live in the
// instances, reached through gemm_s8_api.h.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "gemm_s8_api.h"

namespace py = pybind11;

namespace {

using RunFn = std::string (*)(const emu::GemmS8Problem&);
using InfoFn = emu::GemmS8Info (*)();

// [config][epilogue]; keep in step with emu::kGemmS8Configs and gemm_s8_configs.cuh
constexpr RunFn kRun[emu::kGemmS8Configs][2] = {
    {emu::gemm_s8_run_0_0, emu::gemm_s8_run_0_1},
    {emu::gemm_s8_run_1_0, emu::gemm_s8_run_1_1},
    {emu::gemm_s8_run_2_0, emu::gemm_s8_run_2_1},
};
constexpr InfoFn kInfo[emu::kGemmS8Configs][2] = {
    {emu::gemm_s8_info_0_0, emu::gemm_s8_info_0_1},
    {emu::gemm_s8_info_1_0, emu::gemm_s8_info_1_1},
    {emu::gemm_s8_info_2_0, emu::gemm_s8_info_2_1},
};

void check_config(int config) {
  if (config < 0 || config >= emu::kGemmS8Configs)
    throw py::value_error("config must be in [0, " + std::to_string(emu::kGemmS8Configs) + ")");
}

emu::GemmS8Problem problem(std::uintptr_t a, std::uintptr_t b, std::uintptr_t c, int m, int n,
                           int k, std::int64_t lda, std::int64_t ldb, std::int64_t ldc, int batch,
                           std::int64_t stride_a, std::int64_t stride_b, std::int64_t stride_c,
                           std::uintptr_t stream, int swizzle, int raster) {
  emu::GemmS8Problem p;
  p.a = reinterpret_cast<const void*>(a);
  p.b = reinterpret_cast<const void*>(b);
  p.c = reinterpret_cast<void*>(c);
  p.m = m, p.n = n, p.k = k, p.batch = batch;
  p.lda = lda, p.ldb = ldb, p.ldc = ldc;
  p.stride_a = stride_a, p.stride_b = stride_b, p.stride_c = stride_c;
  p.stream = reinterpret_cast<void*>(stream);
  p.swizzle = swizzle, p.raster = raster;
  return p;
}

void run(int config, int epilogue, const emu::GemmS8Problem& p) {
  check_config(config);
  std::string err;
  {
    py::gil_scoped_release release;  // host work (TMA descriptors) and the async launch
    err = kRun[config][epilogue](p);
  }
  if (!err.empty()) throw std::runtime_error("emulinalg._cuda: " + err);
}

}  // namespace

PYBIND11_MODULE(_cuda, mod) {
  mod.doc() =
      "CUTLASS sm90a INT8 tensor-core GEMMs for Ozaki Scheme II (src_cuda/): batched 'TN' "
      "products C_l = A_l B_l^T of int8 row-major A_l (m x k) and B_l (n x k) with the INT32 "
      "accumulator reduced modulo m_l into int8 in the epilogue (gemm_s8_mod_batched), or "
      "returned as INT32 (gemm_s8_s32_batched). Arguments are raw device pointers and a CUDA "
      "stream handle; runs only on compute capability 9.0 (sm_90a code).";
  mod.attr("arch") = "sm_90a";
  mod.attr("num_configs") = emu::kGemmS8Configs;
  mod.attr("max_k_mod") = 1 << 16;

  mod.def(
      "gemm_s8_mod_batched",
      [](std::uintptr_t a, std::uintptr_t b, std::uintptr_t c, int m, int n, int k,
         std::int64_t lda, std::int64_t ldb, std::int64_t ldc, int batch, std::int64_t stride_a,
         std::int64_t stride_b, std::int64_t stride_c, std::uintptr_t moduli,
         std::int64_t moduli_stride, std::uintptr_t stream, int config, int swizzle,
         int raster) {
        emu::GemmS8Problem p = problem(a, b, c, m, n, k, lda, ldb, ldc, batch, stride_a,
                                       stride_b, stride_c, stream, swizzle, raster);
        p.moduli = reinterpret_cast<const int*>(moduli);
        p.moduli_stride = moduli_stride;
        run(config, emu::kEpilogueMod, p);
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("m"), py::arg("n"), py::arg("k"),
      py::arg("lda"), py::arg("ldb"), py::arg("ldc"), py::arg("batch"), py::arg("stride_a"),
      py::arg("stride_b"), py::arg("stride_c"), py::arg("moduli"), py::arg("moduli_stride") = 1,
      py::arg("stream") = 0, py::arg("config") = 0, py::arg("swizzle") = 1, py::arg("raster") = 0,
      "int8 C_l (m x n, rows ldc apart) = symmetric((A_l B_l^T) mod moduli[l * moduli_stride]) "
      "for l < batch: A_l (m x k, lda), B_l (n x k, ldb) int8, matrices stride_* elements "
      "apart; moduli an int32 device array with values in [2, 256]. k <= 65536 (exact INT32 "
      "sums); k, lda, ldb, ldc, strides multiples of 16; pointers 16-byte aligned. Queued on "
      "``stream``; raises RuntimeError/ValueError (nothing launched) on bad arguments.");

  mod.def(
      "gemm_s8_s32_batched",
      [](std::uintptr_t a, std::uintptr_t b, std::uintptr_t c, int m, int n, int k,
         std::int64_t lda, std::int64_t ldb, std::int64_t ldc, int batch, std::int64_t stride_a,
         std::int64_t stride_b, std::int64_t stride_c, std::uintptr_t stream, int config,
         int swizzle, int raster) {
        run(config, emu::kEpilogueS32,
            problem(a, b, c, m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c, stream,
                    swizzle, raster));
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("m"), py::arg("n"), py::arg("k"),
      py::arg("lda"), py::arg("ldb"), py::arg("ldc"), py::arg("batch"), py::arg("stride_a"),
      py::arg("stride_b"), py::arg("stride_c"), py::arg("stream") = 0, py::arg("config") = 0,
      py::arg("swizzle") = 1, py::arg("raster") = 0,
      "int32 C_l = A_l B_l^T, the same kernel as gemm_s8_mod_batched with an identity "
      "epilogue (ldc, stride_c multiples of 4 elements).");

  mod.def(
      "config_info",
      [](int config, int epilogue) {
        check_config(config);
        if (epilogue != 0 && epilogue != 1) throw py::value_error("epilogue: 0 (s32) or 1 (mod)");
        const emu::GemmS8Info i = kInfo[config][epilogue]();
        py::dict d;
        d["name"] = i.name;
        d["tile"] = py::make_tuple(i.tile_m, i.tile_n, i.tile_k);
        d["cluster"] = py::make_tuple(i.cluster_m, i.cluster_n);
        d["stages"] = i.stages;
        d["threads"] = i.threads;
        d["smem_bytes"] = i.smem_bytes;
        d["num_regs"] = i.num_regs;  // -1 without a device
        d["local_bytes"] = i.local_bytes;
        return d;
      },
      py::arg("config"), py::arg("epilogue") = 1,
      "Tile configuration and, on a device, the kernel's registers and local (spill) bytes.");
}
