// AMX tile configuration (the 64-byte LDTILECFG block) and the run-time dispatch decision:
// compiled with AMX support, CPUID says AMX-TILE/INT8/BF16, XCR0 has the tile state enabled,
// and (Linux) the process was granted XTILEDATA with arch_prctl.
//
// LDTILECFG memory layout (Intel SDM Vol. 2B, LDTILECFG, Table "Memory Area Layout"):
//   byte 0 palette (1 = 8 tiles of at most 16 rows x 64 bytes), byte 1 start_row,
//   bytes 2-15 reserved (zero), bytes 16-47 colsb (uint16 bytes per row, tiles 0-15; only 0-7
//   exist in palette 1, the rest must be zero), bytes 48-63 rows (uint8, tiles 0-15).
// Loading a configuration zeroes all tile data; an invalid one raises #GP, hence the static
// checks below and the emulated TileOps checking shapes on every operation.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "cpu_id.hpp"

#if defined(__linux__) && defined(__x86_64__)
#include <cerrno>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace emulinalg::amx {

constexpr int kTileRows = 16;      // palette 1: at most 16 rows
constexpr int kTileBytes = 64;     // palette 1: at most 64 bytes per row
constexpr int kNumTiles = 8;       // tmm0..tmm7
constexpr int kTileSize = kTileRows * kTileBytes;  // 1 KiB

struct alignas(64) TileConfig {
    std::uint8_t palette_id;
    std::uint8_t start_row;
    std::uint8_t reserved0[14];
    std::uint16_t colsb[16];
    std::uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG takes exactly 64 bytes");

// All eight tiles as full 16 x 64-byte tiles. The same shape serves both kernels:
//   INT8  TDPBSSD:   C 16x16 int32, A 16 rows x 64 int8,  B 16 rows (K/4) x 16 cols x 4 int8
//   BF16  TDPBF16PS: C 16x16 fp32,  A 16 rows x 32 bf16,  B 16 rows (K/2) x 16 cols x 2 bf16
inline TileConfig full_tile_config() {
    TileConfig c;
    std::memset(&c, 0, sizeof c);
    c.palette_id = 1;
    for (int t = 0; t < kNumTiles; ++t) {
        c.colsb[t] = kTileBytes;
        c.rows[t] = kTileRows;
    }
    return c;
}

struct Status {
    bool available = false;
    bool permission = false;  // Linux: XTILEDATA granted to this process
    std::string reason;       // why not available ("" when it is)
};

#if defined(__linux__) && defined(__x86_64__)
// From <asm/prctl.h> (Linux 5.16+); spelled out so that older headers still compile.
constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

// Ask the kernel for the AMX tile data state. Process-wide: threads started later inherit it.
// Returns "" on success, else why not.
inline std::string request_tile_permission() {
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
        const int err = errno;
        // ENOSPC: the kernel refuses while some thread's sigaltstack cannot hold the larger
        // signal frame (8 KiB more tile state); EINVAL/ENOSYS: kernel older than 5.16.
        return std::string("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) failed: ") +
               std::strerror(err) +
               (err == ENOSPC ? " (a thread's sigaltstack is too small for the AMX signal frame)"
                              : " (Linux 5.16+ is needed)");
    }
    unsigned long granted = 0;
    if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 ||
        !((granted >> kXfeatureXtiledata) & 1ul)) {
        return "arch_prctl(ARCH_GET_XCOMP_PERM) does not report XTILEDATA after the request";
    }
    return "";
}
#endif

// Decide once per process (thread-safe static initialisation): the Linux permission request
// must happen before the first tile instruction, and before worker threads exist.
// `compiled` says whether this build contains the AMX kernels at all.
inline const Status& status(bool compiled) {
    static const Status s = [compiled] {
        Status r;
        const cpu::Features f = cpu::detect();
        if (!compiled) {
            r.reason = "emulinalg._amx was built without AMX kernels (the compiler lacks "
                       "-mamx-tile/-mamx-int8/-mamx-bf16, or not x86-64)";
        } else if (!(f.amx_tile && f.amx_int8 && f.amx_bf16)) {
            r.reason = "CPU lacks AMX (CPUID: amx_tile=" + std::to_string(f.amx_tile) +
                       " amx_int8=" + std::to_string(f.amx_int8) +
                       " amx_bf16=" + std::to_string(f.amx_bf16) + ")";
        } else if (!f.os_xtiledata) {
            r.reason = "the OS has not enabled the AMX tile state (XCR0 bits 17/18)";
        } else {
#if defined(__linux__) && defined(__x86_64__)
            r.reason = request_tile_permission();
            r.permission = r.reason.empty();
#else
            r.reason = "AMX permission handling is implemented for Linux only";
#endif
        }
        r.available = r.reason.empty();
        return r;
    }();
    return s;
}

}  // namespace emulinalg::amx
