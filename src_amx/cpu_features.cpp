// emulinalg._cpu: which x86-64 matrix/vector extensions this CPU has and the OS has enabled.
//
// Pure CPUID/XGETBV queries: no AMX or AVX-512 instruction is executed, so the module is safe to
// import on any x86-64 CPU. The AMX kernels (src_amx/, later) dispatch on these flags at run time.
//
// Bit positions (Intel SDM Vol. 2A, CPUID; Vol. 1 ch. 13, XSAVE state components):
//   leaf 1, ECX bit 27          OSXSAVE     (XGETBV usable)
//   leaf 7/0, EBX bit 16        AVX512F
//   leaf 7/0, ECX bit 11        AVX512_VNNI
//   leaf 7/0, EDX bit 22        AMX-BF16
//   leaf 7/0, EDX bit 24        AMX-TILE
//   leaf 7/0, EDX bit 25        AMX-INT8
//   leaf 7/1, EAX bit 5         AVX512_BF16
//   XCR0 bits 1,2               SSE, AVX (YMM) state
//   XCR0 bits 5,6,7             opmask, ZMM_Hi256, Hi16_ZMM state (AVX-512 usable)
//   XCR0 bits 17,18             XTILECFG, XTILEDATA state (AMX usable)
// On Linux a process must still ask for XTILEDATA with arch_prctl(ARCH_REQ_XCOMP_PERM) before
// its first AMX instruction; that belongs to the AMX kernels, not to this query.

#include <pybind11/pybind11.h>

#include <cpuid.h>
#include <cstdint>

namespace py = pybind11;

namespace {

struct Regs {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// CPUID leaf/subleaf, all zeros when the leaf is above the CPU's maximum.
Regs cpuid(unsigned int leaf, unsigned int subleaf) {
    Regs r;
    if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) {
        r = Regs{};
    }
    return r;
}

bool bit(unsigned int reg, int n) { return ((reg >> n) & 1u) != 0; }

// XGETBV(0) without requiring -mxsave: the raw encoding works with any GCC/Clang.
std::uint64_t xcr0() {
    std::uint32_t lo = 0, hi = 0;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

py::dict features() {
    const Regs l1 = cpuid(1, 0);
    const Regs l7 = cpuid(7, 0);
    // Subleaf 1 exists only when leaf 7/0 EAX (max subleaf) >= 1.
    const Regs l7s1 = l7.eax >= 1 ? cpuid(7, 1) : Regs{};

    const bool osxsave = bit(l1.ecx, 27);
    const std::uint64_t x = osxsave ? xcr0() : 0;
    const std::uint64_t avx512_state = (1u << 1) | (1u << 2) | (1u << 5) | (1u << 6) | (1u << 7);
    const std::uint64_t amx_state = (1u << 17) | (1u << 18);

    py::dict d;
    d["amx_tile"] = bit(l7.edx, 24);
    d["amx_int8"] = bit(l7.edx, 25);
    d["amx_bf16"] = bit(l7.edx, 22);
    d["avx512f"] = bit(l7.ebx, 16);
    d["avx512_vnni"] = bit(l7.ecx, 11);
    d["avx512_bf16"] = bit(l7s1.eax, 5);
    d["osxsave"] = osxsave;
    d["os_avx512"] = (x & avx512_state) == avx512_state;
    d["os_xtiledata"] = (x & amx_state) == amx_state;
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
