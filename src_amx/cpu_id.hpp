// CPUID / XGETBV queries shared by emulinalg._cpu and emulinalg._amx.
//
// Pure queries: no AMX or AVX-512 instruction is executed, so this is safe on any x86-64 CPU.
// On other architectures (or compilers without <cpuid.h>) every flag reads false.
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
#pragma once

#include <cstdint>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define EMULINALG_X86_CPUID 1
#else
#define EMULINALG_X86_CPUID 0
#endif

namespace emulinalg::cpu {

struct Regs {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// CPUID leaf/subleaf, all zeros when the leaf is above the CPU's maximum (or not x86).
inline Regs cpuid(unsigned int leaf, unsigned int subleaf) {
    Regs r;
#if EMULINALG_X86_CPUID
    if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) {
        r = Regs{};
    }
#else
    (void)leaf;
    (void)subleaf;
#endif
    return r;
}

inline bool bit(unsigned int reg, int n) { return ((reg >> n) & 1u) != 0; }

// XGETBV(0) without requiring -mxsave: the raw encoding works with any GCC/Clang.
// Only call when OSXSAVE is set (otherwise the instruction faults).
inline std::uint64_t xcr0() {
#if EMULINALG_X86_CPUID
    std::uint32_t lo = 0, hi = 0;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<std::uint64_t>(hi) << 32) | lo;
#else
    return 0;
#endif
}

struct Features {
    bool amx_tile = false, amx_int8 = false, amx_bf16 = false;
    bool avx512f = false, avx512_vnni = false, avx512_bf16 = false;
    bool osxsave = false, os_avx512 = false, os_xtiledata = false;
};

inline Features detect() {
    Features f;
    const Regs l1 = cpuid(1, 0);
    const Regs l7 = cpuid(7, 0);
    // Subleaf 1 exists only when leaf 7/0 EAX (max subleaf) >= 1.
    const Regs l7s1 = l7.eax >= 1 ? cpuid(7, 1) : Regs{};
    f.osxsave = bit(l1.ecx, 27);
    const std::uint64_t x = f.osxsave ? xcr0() : 0;
    const std::uint64_t avx512_state = (1u << 1) | (1u << 2) | (1u << 5) | (1u << 6) | (1u << 7);
    const std::uint64_t amx_state = (1u << 17) | (1u << 18);
    f.amx_tile = bit(l7.edx, 24);
    f.amx_int8 = bit(l7.edx, 25);
    f.amx_bf16 = bit(l7.edx, 22);
    f.avx512f = bit(l7.ebx, 16);
    f.avx512_vnni = bit(l7.ecx, 11);
    f.avx512_bf16 = bit(l7s1.eax, 5);
    f.os_avx512 = (x & avx512_state) == avx512_state;
    f.os_xtiledata = (x & amx_state) == amx_state;
    return f;
}

}  // namespace emulinalg::cpu
