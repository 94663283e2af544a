// One instance of the sm90a INT8 GEMM: configuration EMU_GEMM_CFG (gemm_s8_configs.cuh) with
// epilogue EMU_GEMM_EPI (gemm_s8_api.h). CMakeLists.txt compiles this file once per pair, so
// the instances (each ~30 s of nvcc) build in parallel.
#include "gemm_s8_sm90.cuh"

#if !defined(EMU_GEMM_CFG) || !defined(EMU_GEMM_EPI)
#error "compile with -DEMU_GEMM_CFG=<config> -DEMU_GEMM_EPI=<epilogue>"
#endif

#define EMU_GEMM_S8_DEFINE(CFG, EPI)                                         \
  namespace emu {                                                            \
  std::string gemm_s8_run_##CFG##_##EPI(const GemmS8Problem& problem) {      \
    return gemm_s8_run<CFG, EPI>(problem);                                   \
  }                                                                          \
  GemmS8Info gemm_s8_info_##CFG##_##EPI() { return gemm_s8_info<CFG, EPI>(); } \
  }
#define EMU_GEMM_S8_DEFINE_(CFG, EPI) EMU_GEMM_S8_DEFINE(CFG, EPI)

EMU_GEMM_S8_DEFINE_(EMU_GEMM_CFG, EMU_GEMM_EPI)
