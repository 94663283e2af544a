// Epilogue visitor trees of the INT8 GEMM (CUTLASS sm90 EVT, TMA warp-specialized epilogue).
//
// Mod: D = symmetric(acc mod m_l) as int8, with m_l read per batch index l from a device
// table by the stock Sm90ScalarBroadcast (stride (0, 0, s): element l * s). Its output is
// already in [-128, 127], so Sm90Compute's saturating int32 -> int8 conversion is exact.
// S32: D = acc, the same tree without the reduction (the plain GEMM, for comparison).
#pragma once

#include "cutlass/array.h"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "sym_mod.cuh"

namespace emu {

// Sm90Compute instantiates the functor with the element type (to look for an Arguments member)
// and with Array fragments (to call it), so it takes exactly one template parameter.
template <class T>
struct SymModFn {
  CUTLASS_HOST_DEVICE T operator()(T x, T m) const { return sym_mod(x, m); }
};

template <class T, int N>
struct SymModFn<cutlass::Array<T, N>> {
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x,
                                                      cutlass::Array<T, N> const& m) const {
    cutlass::Array<T, N> r;
    // m comes from a scalar broadcast (every element the same register), so the compiler
    // shares one reciprocal across the fragment.
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) r[i] = sym_mod(x[i], m[i]);
    return r;
  }
};

namespace evt = cutlass::epilogue::fusion;

using ModuliBroadcast = evt::Sm90ScalarBroadcast<int32_t, cute::Stride<cute::_0, cute::_0, int64_t>>;

using ModEVT = evt::Sm90EVT<
    evt::Sm90Compute<SymModFn, int8_t, int32_t, cutlass::FloatRoundStyle::round_to_nearest>,
    evt::Sm90AccFetch, ModuliBroadcast>;

using S32EVT = evt::Sm90EVT<evt::Sm90Compute<cutlass::epilogue::thread::Identity, int32_t, int32_t,
                                             cutlass::FloatRoundStyle::round_to_nearest>,
                            evt::Sm90AccFetch>;

}  // namespace emu
