// Lets the CUDA sources of src_cuda/ run as host C++ (g++ -std=c++20), so the CPU tests
// run the kernels' own code (tests/kernels/fake_cupy.py, native mode): src_amx/cuda_host.hpp
// turns CUDA keywords and intrinsics into plain C++, and `launch` here runs a grid one block at a
// time with one std::thread per CUDA thread (a std::barrier for __syncthreads and one per warp for
// its shuffles and ballots, `static` for __shared__, which is then shared by the block's
// threads).
#pragma once
#include <barrier>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define EMU_STRICT_CP_ASYNC 1  // cp.async as below, not cuda_host.hpp's plain copy
#include "../../src_amx/cuda_host.hpp"  // keywords and intrinsics (shared with the CPU pipeline)

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>

// cp.async with the device's ordering made visible: a copy's bytes reach shared memory only when
// a cp_async_wait<N> retires its group (the slot holds 0x7f bytes until then), groups retire in
// order, and a CUDA thread (a std::thread here) that ends with copies pending aborts. So a kernel
// that reads a slot before waiting for it, or waits for too few groups, reads garbage.
struct EmuCopy {
  void* dst;
  unsigned char bytes[16];
};
struct EmuCopies {
  std::vector<EmuCopy> open;                 // issued, not committed
  std::deque<std::vector<EmuCopy>> groups;   // committed, not retired
  ~EmuCopies() {
    if (!open.empty() || !groups.empty()) {
      std::fputs("cuda_host_shim: a thread ended with cp.async copies pending\n", stderr);
      std::abort();
    }
  }
};
inline thread_local EmuCopies emu_copies;
inline void cp_async16(void* smem, const void* gmem) {
  if ((reinterpret_cast<std::uintptr_t>(gmem) | reinterpret_cast<std::uintptr_t>(smem)) & 15) {
    std::fputs("cuda_host_shim: cp.async of a 16-byte chunk not 16-byte aligned\n", stderr);
    std::abort();  // a misaligned-address fault on the device
  }
  EmuCopy c{smem, {}};
  std::memcpy(c.bytes, gmem, 16);
  std::memset(smem, 0x7f, 16);
  emu_copies.open.push_back(c);
}
inline void cp_async_commit() {
  emu_copies.groups.push_back(std::move(emu_copies.open));
  emu_copies.open.clear();
}
template <int N>
inline void cp_async_wait() {
  while (emu_copies.groups.size() > static_cast<std::size_t>(N)) {
    for (const EmuCopy& c : emu_copies.groups.front()) std::memcpy(c.dst, c.bytes, 16);
    emu_copies.groups.pop_front();
  }
}

inline std::barrier<>* emu_barrier = nullptr;

inline void __syncthreads() { emu_barrier->arrive_and_wait(); }

// Atomics: the threads of a block run concurrently here (kernels with barriers).
inline int atomicMax(int* p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old < v &&
         !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
  unsigned long long old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old > v &&
         !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}

inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
  unsigned long long old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old < v &&
         !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
inline unsigned long long atomicAnd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicOr(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned atomicExch(unsigned* p, unsigned v) {
  return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}

// Warp collectives (shuffles, ballots) through a barrier per warp (32 consecutive threads of the
// block, the last warp possibly fewer): as on the device, every lane of a warp must take part the
// same number of times, while the block's warps may take different numbers of steps. One slot
// array per value type.
inline std::vector<std::barrier<>*> emu_warp_barriers;
inline unsigned emu_tid() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
inline unsigned emu_nthreads() { return blockDim.x * blockDim.y * blockDim.z; }
inline void emu_syncwarp() { emu_warp_barriers[emu_tid() / 32]->arrive_and_wait(); }
// v of lane src(lane) of this warp (this lane's own v where src gives -1 or a lane not there)
template <class T, class F>
inline T emu_warp_read(T v, F src) {
  static T slots[1024];
  const unsigned t = emu_tid(), w0 = t & ~31u;
  slots[t] = v;
  emu_syncwarp();
  const int s = src(static_cast<int>(t & 31u));
  const T r = s >= 0 && w0 + s < emu_nthreads() ? slots[w0 + s] : v;
  emu_syncwarp();
  return r;
}
template <class T>
inline T emu_shfl_down(T v, unsigned o) {
  return emu_warp_read(v, [o](int l) { return l + static_cast<int>(o) < 32 ? l + static_cast<int>(o) : -1; });
}
template <class T>
inline T emu_shfl_up(T v, unsigned o) {
  return emu_warp_read(v, [o](int l) { return l >= static_cast<int>(o) ? l - static_cast<int>(o) : -1; });
}
template <class T>
inline T emu_shfl(T v, int src) {
  return emu_warp_read(v, [src](int) { return src & 31; });
}
inline unsigned long long __shfl_down_sync(unsigned, unsigned long long v, unsigned o) {
  return emu_shfl_down(v, o);
}
inline unsigned __shfl_down_sync(unsigned, unsigned v, unsigned o) { return emu_shfl_down(v, o); }
inline double __shfl_down_sync(unsigned, double v, unsigned o) { return emu_shfl_down(v, o); }
inline unsigned __shfl_up_sync(unsigned, unsigned v, unsigned o) { return emu_shfl_up(v, o); }
inline unsigned __shfl_sync(unsigned, unsigned v, int src) { return emu_shfl(v, src); }
inline long long __shfl_sync(unsigned, long long v, int src) { return emu_shfl(v, src); }
inline unsigned long long __shfl_sync(unsigned, unsigned long long v, int src) {
  return emu_shfl(v, src);
}
inline unsigned __ballot_sync(unsigned, bool p) {
  static bool flags[1024];
  const unsigned t = emu_tid(), w0 = t & ~31u;
  flags[t] = p;
  emu_syncwarp();
  unsigned r = 0;
  for (unsigned l = 0; l < 32 && w0 + l < emu_nthreads(); ++l) r |= flags[w0 + l] ? 1u << l : 0u;
  emu_syncwarp();
  return r;
}

// __byte_perm (PRMT): byte n of the result is byte (s >> 4n) & 7 of the 8 bytes y:x.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long v = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned r = 0;
  for (int n = 0; n < 4; ++n)
    r |= static_cast<unsigned>((v >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
  return r;
}

// __funnelshift_r: the low word of (hi:lo) >> (s & 31).
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  return static_cast<unsigned>(((static_cast<unsigned long long>(hi) << 32) | lo) >> (s & 31));
}

// __dadd_rz: a + b rounded toward zero, from the nearest sum and its exact error (TwoSum; the
// shim builds with -ffp-contract=off): a nearest sum beyond the exact one steps back toward 0.
inline double __dadd_rz(double a, double b) {
  const double s = a + b;
  if (!std::isfinite(s)) return s;
  const double bb = s - a, err = (a - (s - bb)) + (b - bb);
  return (err != 0 && (err < 0) != (s < 0)) ? std::nextafter(s, 0.0) : s;
}

// mma.sync.aligned.m16n8k16.row.col.s32.s8.u8.s32 (ozaki2_residues_mma.cu), c in every
// accumulator, with the PTX ISA's fragment layouts (lane = 4 g + q): a0 = A[g][4q .. 4q + 3],
// a1 = A[g + 8][..] (int8), b = B[4q .. 4q + 3][g] (uint8), d = D[g][2q], D[g][2q + 1],
// D[g + 8][2q], D[g + 8][2q + 1]. The warp's fragments meet through its barrier, so every lane
// of the warp must make the call equally often (as mma.sync.aligned requires on the device).
inline void emu_mma_m16n8k16_s8u8(int (&d)[4], unsigned a0, unsigned a1, unsigned b, int c) {
  struct Frag {
    unsigned a0, a1, b;
  };
  static Frag slots[1024];
  const unsigned t = emu_tid();
  slots[t] = {a0, a1, b};
  emu_syncwarp();
  const unsigned warp = t & ~31u, g = (t & 31) >> 2, q = t & 3;
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned row = g + 8 * (i >> 1), col = 2 * q + (i & 1);
    long long s = c;
    for (unsigned k = 0; k < 16; ++k) {
      const Frag& fa = slots[warp + 4 * (row & 7) + k / 4];
      const int av = static_cast<signed char>((row < 8 ? fa.a0 : fa.a1) >> (8 * (k % 4)));
      const int bv = static_cast<unsigned char>(slots[warp + 4 * col + k / 4].b >> (8 * (k % 4)));
      s += av * bv;
    }
    d[i] = static_cast<int>(s);
  }
  emu_syncwarp();
}

// Runs kernel() for every thread of every block of the grid.
inline void emu_launch(emu_uint3 grid, emu_uint3 block, const std::function<void()>& kernel,
                       bool barriers) {
  gridDim = grid;
  blockDim = block;
  const unsigned nt = block.x * block.y * block.z;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = {x, y, z};
        auto body = [&](unsigned t) {
          threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
          kernel();
        };
        if (!barriers) {  // no __syncthreads in the kernel: threads one after another
          for (unsigned t = 0; t < nt; ++t) body(t);
          continue;
        }
        std::barrier<> bar(nt);
        emu_barrier = &bar;
        std::vector<std::unique_ptr<std::barrier<>>> warps;
        emu_warp_barriers.clear();
        for (unsigned w0 = 0; w0 < nt; w0 += 32) {
          warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, nt - w0)));
          emu_warp_barriers.push_back(warps.back().get());
        }
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < nt; ++t) threads.emplace_back(body, t);
        for (auto& th : threads) th.join();
      }
}
