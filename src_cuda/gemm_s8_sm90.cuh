// The sm90a INT8 "TN" GEMM, batched over L matrices: C_l = A_l B_l^T, A_l (M x K) and B_l
// (N x K) int8 row-major (K contiguous: int8 wgmma reads both operands K-major), INT32
// accumulation, and the epilogue of mod_epilogue.cuh (INT8 residues mod m_l, or INT32).
//
// CUTLASS 3 pieces: the CollectiveBuilder mainloop (TMA loads into a multistage smem ring,
// wgmma s32.s8.s8), the TMA warp-specialized epilogue with an EVT, GemmUniversal over the
// problem shape (M, N, K, L) whose persistent tile scheduler walks M-tiles x N-tiles x L, so one
// launch covers every modulus (and batch entry). Host side: GemmUniversalAdapter (TMA
// descriptors, cluster launch on the caller's stream).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "gemm_s8_api.h"
#include "gemm_s8_configs.cuh"
#include "mod_epilogue.cuh"

namespace emu {

template <int CFG, int EPI>
struct GemmS8 {
  using Cfg = GemmS8Config<CFG>;
  static constexpr bool kMod = EPI == kEpilogueMod;
  using ElementD = cute::conditional_t<kMod, int8_t, int32_t>;
  static constexpr int kAlignD = 16 / sizeof(ElementD);  // elements per 16 bytes (TMA)
  using Layout = cutlass::layout::RowMajor;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Cfg::Tile,
      typename Cfg::Cluster, cutlass::epilogue::collective::EpilogueTileAuto, int32_t, int32_t,
      void, Layout, kAlignD,  // no source C
      ElementD, Layout, kAlignD, typename Cfg::EpilogueSchedule,
      cute::conditional_t<kMod, ModEVT, S32EVT>>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, cutlass::layout::RowMajor, 16,
      int8_t, cutlass::layout::ColumnMajor, 16, int32_t, typename Cfg::Tile,
      typename Cfg::Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Cfg::MainloopSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                      CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

namespace detail {

inline int sm_count(int device) {
  static int cache[64] = {};  // per device; the module is called under the GIL
  if (device < 0 || device >= 64) return cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  if (cache[device] == 0)
    cache[device] = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  return cache[device];
}

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// The TMA constraints, checked here so that the message says which argument breaks them.
inline std::string check(const GemmS8Problem& p, int d_bytes, bool mod) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.batch <= 0) return "m, n, k and batch must be positive";
  if (!aligned16(p.a) || !aligned16(p.b) || !aligned16(p.c))
    return "a, b and c must be 16-byte aligned device pointers";
  if (p.k % 16 || p.lda % 16 || p.ldb % 16 || p.stride_a % 16 || p.stride_b % 16)
    return "k, lda, ldb, stride_a and stride_b must be multiples of 16 (pad K with zeros)";
  if ((p.ldc * d_bytes) % 16 || (p.stride_c * d_bytes) % 16)
    return "ldc and stride_c must be multiples of 16 bytes";
  if (p.lda < p.k || p.ldb < p.k || p.ldc < p.n) return "leading dimensions smaller than the rows";
  if (p.swizzle != 1 && p.swizzle != 2 && p.swizzle != 4 && p.swizzle != 8)
    return "swizzle must be 1, 2, 4 or 8";
  if (p.raster < 0 || p.raster > 2) return "raster must be 0 (heuristic), 1 (along M) or 2 (along N)";
  if (mod) {
    // |a b| <= 2**14 per term: the INT32 sums are exact for k < 2**17; the mod epilogue is
    // specified for exact sums (the caller splits K beyond 2**16, as for cuBLAS).
    if (p.k > (1 << 16)) return "k must be at most 65536 for the mod epilogue";
    if (p.moduli == nullptr) return "the mod epilogue needs a device table of moduli";
  }
  return "";
}

inline std::string cuda_error(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
}

inline std::string cutlass_error(const char* what, cutlass::Status s) {
  std::string msg = std::string(what) + ": " + cutlassGetStatusString(s);
  const cudaError_t e = cudaPeekAtLastError();
  if (e != cudaSuccess) msg += std::string(" (") + cudaGetErrorString(e) + ")";
  return msg;
}

}  // namespace detail

template <int CFG, int EPI>
std::string gemm_s8_run(const GemmS8Problem& p) {
  using G = GemmS8<CFG, EPI>;
  using Gemm = typename G::Gemm;
  using Kernel = typename G::Kernel;
  using ElementD = typename G::ElementD;

  std::string err = detail::check(p, sizeof(ElementD), G::kMod);
  if (!err.empty()) return err;

  typename Kernel::StrideA sa{};
  typename Kernel::StrideB sb{};
  typename Kernel::StrideD sd{};
  cute::get<0>(sa) = p.lda;
  cute::get<2>(sa) = p.stride_a;
  cute::get<0>(sb) = p.ldb;
  cute::get<2>(sb) = p.stride_b;
  cute::get<0>(sd) = p.ldc;
  cute::get<2>(sd) = p.stride_c;

  int device = 0;
  cudaError_t ce = cudaGetDevice(&device);
  if (ce != cudaSuccess) return detail::cuda_error("cudaGetDevice", ce);
  cutlass::KernelHardwareInfo hw;
  hw.device_id = device;
  hw.sm_count = detail::sm_count(device);

  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {p.m, p.n, p.k, p.batch},
      {static_cast<const int8_t*>(p.a), sa, static_cast<const int8_t*>(p.b), sb},
      {{}, nullptr, sd, static_cast<ElementD*>(p.c), sd},
      hw};
  if constexpr (G::kMod) {
    typename ModuliBroadcast::Arguments moduli{};
    moduli.scalar_ptrs[0] = p.moduli;
    moduli.dScalar[0] = cute::make_stride(cute::_0{}, cute::_0{}, p.moduli_stride);
    args.epilogue.thread = {{}, moduli, {}};
  }
  args.scheduler.max_swizzle_size = p.swizzle;
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
  args.scheduler.raster_order =
      p.raster == 1 ? Raster::AlongM : (p.raster == 2 ? Raster::AlongN : Raster::Heuristic);

  // can_implement also asks D's contiguous extent (N) to be a multiple of 16 bytes. The TMA
  // store needs that only of the strides (checked above): its box is clipped at N. So the
  // check runs on N rounded up; the kernel runs on the true N
  // (tests/backends/gpu/test_fused_gpu.py covers ragged N).
  typename Gemm::Arguments probe = args;
  cute::get<1>(probe.problem_shape) = (p.n + G::kAlignD - 1) / G::kAlignD * G::kAlignD;
  cutlass::Status st = Gemm::can_implement(probe);
  if (st != cutlass::Status::kSuccess) return detail::cutlass_error("can_implement", st);

  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  const size_t ws_bytes = Gemm::get_workspace_size(args);
  void* ws = nullptr;
  if (ws_bytes > 0) {
    ce = cudaMallocAsync(&ws, ws_bytes, stream);
    if (ce != cudaSuccess) return detail::cuda_error("cudaMallocAsync (workspace)", ce);
  }
  Gemm gemm;
  st = gemm.initialize(args, ws, stream);
  if (st == cutlass::Status::kSuccess) {
    st = gemm.run(stream);
    err = st == cutlass::Status::kSuccess ? "" : detail::cutlass_error("run", st);
  } else {
    err = detail::cutlass_error("initialize", st);
  }
  if (ws != nullptr) cudaFreeAsync(ws, stream);  // stream-ordered: after the kernel
  if (err.empty()) {
    ce = cudaGetLastError();
    if (ce != cudaSuccess) err = detail::cuda_error("launch", ce);
  }
  return err;
}

template <int CFG, int EPI>
GemmS8Info gemm_s8_info() {
  using G = GemmS8<CFG, EPI>;
  using Cfg = typename G::Cfg;
  using Kernel = typename G::Kernel;
  GemmS8Info info;
  info.name = Cfg::name;
  info.tile_m = cute::size<0>(typename Cfg::Tile{});
  info.tile_n = cute::size<1>(typename Cfg::Tile{});
  info.tile_k = cute::size<2>(typename Cfg::Tile{});
  info.cluster_m = cute::size<0>(typename Cfg::Cluster{});
  info.cluster_n = cute::size<1>(typename Cfg::Cluster{});
  info.stages = G::CollectiveMainloop::DispatchPolicy::Stages;
  info.threads = Kernel::MaxThreadsPerBlock;
  info.smem_bytes = Kernel::SharedStorageSize;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, cutlass::device_kernel<Kernel>) == cudaSuccess) {
    info.num_regs = attr.numRegs;
    info.local_bytes = static_cast<int>(attr.localSizeBytes);
  } else {
    cudaGetLastError();  // no device here: not an error of the caller's
  }
  return info;
}

}  // namespace emu
