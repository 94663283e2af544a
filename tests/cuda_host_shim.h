// Lets the CUDA sources of backends/cuda/ compile as host C++ (g++ -std=c++20), so the CPU tests
// run the kernels' own code (tests/fake_cupy.py, native mode): CUDA keywords become plain C++,
// the intrinsics they use get exact host equivalents, and `launch` runs a grid one block at a
// time with one std::thread per CUDA thread (a std::barrier for __syncthreads, `static` for
// __shared__, which is then shared by the block's threads).
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __constant__
#define __shared__ static
#define __launch_bounds__(...)

struct emu_uint3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local emu_uint3 threadIdx;
inline emu_uint3 blockIdx, blockDim, gridDim;
inline std::barrier<>* emu_barrier = nullptr;

inline void __syncthreads() { emu_barrier->arrive_and_wait(); }

template <class T>
inline T emu_bits(const void* p) {
  T t;
  std::memcpy(&t, p, sizeof t);
  return t;
}
inline long long __double_as_longlong(double x) { return emu_bits<long long>(&x); }
inline double __longlong_as_double(long long x) { return emu_bits<double>(&x); }
inline float __uint_as_float(unsigned x) { return emu_bits<float>(&x); }
inline unsigned __float_as_uint(float x) { return emu_bits<unsigned>(&x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __double2int_rn(double x) { return static_cast<int>(std::nearbyint(x)); }  // RNE
inline double __dadd_rn(double a, double b) { return a + b; }  // built with -ffp-contract=off
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }  // correctly rounded (IEEE)
inline float __double2float_rz(double x) {
  float f = static_cast<float>(x);
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  return f;
}
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
inline int min(int a, int b) { return std::min(a, b); }
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
inline int max(int a, int b) { return std::max(a, b); }

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
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < nt; ++t) threads.emplace_back(body, t);
        for (auto& th : threads) th.join();
      }
}
