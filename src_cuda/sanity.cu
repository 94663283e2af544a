// Build-pipeline sanity unit: proves nvcc and the host compiler work together for this build.
// Nothing from it is installed; the Ozaki kernels replace it with the CUDA backend.
#include <cstdint>

__global__ void emulinalg_sanity_int8_dot(const std::int8_t* a, const std::int8_t* b,
                                          std::int32_t* c, int n) {
    std::int32_t acc = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        acc += static_cast<std::int32_t>(a[i]) * static_cast<std::int32_t>(b[i]);
    }
    atomicAdd(c, acc);
}
