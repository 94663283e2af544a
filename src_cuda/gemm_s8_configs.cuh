// Tile configurations of the sm90a INT8 GEMM (the only place that picks them).
//
// All are TMA warp-specialized persistent kernels from the CollectiveBuilder with a 128-byte K
// tile (int8: 128 elements, 128 B swizzle) and 2-CTA clusters (the partner CTA shares the
// other operand's tile through TMA multicast). Per consumer thread the INT32 accumulator costs
// tile_m * tile_n / (threads of the consumer warpgroups) registers: 128 in all three.
//
//   0: cooperative 256x128, cluster 2x1 -- two consumer warpgroups split the 256 rows; 48 KiB per
//      stage, 4 stages.
//   1: cooperative 128x256, cluster 1x2 -- the same work cut the other way (64x256 per warpgroup).
//   2: ping-pong 128x128, cluster 1x2 -- each consumer warpgroup owns a whole tile and its
//      epilogue overlaps the other's mainloop; 32 KiB per stage.
//
// Which is fastest for the moduli-batched shapes is measured
// (docs/benchmarks/tools/fused_bench.py); emulinalg/backends/cuda/fused.py holds the default.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"

namespace emu {

template <int I>
struct GemmS8Config;

template <>
struct GemmS8Config<0> {
  using Tile = cute::Shape<cute::_256, cute::_128, cute::_128>;
  using Cluster = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  static constexpr const char* name = "cooperative 256x128x128 cluster 2x1";
};

template <>
struct GemmS8Config<1> {
  using Tile = cute::Shape<cute::_128, cute::_256, cute::_128>;
  using Cluster = cute::Shape<cute::_1, cute::_2, cute::_1>;
  using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  static constexpr const char* name = "cooperative 128x256x128 cluster 1x2";
};

template <>
struct GemmS8Config<2> {
  using Tile = cute::Shape<cute::_128, cute::_128, cute::_128>;
  using Cluster = cute::Shape<cute::_1, cute::_2, cute::_1>;
  using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  static constexpr const char* name = "ping-pong 128x128x128 cluster 1x2";
};

}  // namespace emu
