// emulinalg._amx: exact INT8 and BF16 tile GEMMs on Intel AMX, chosen at run time, plus the
// same kernels on a scalar tile model (emulate=True) that runs on any CPU.
//
// Compiled without AMX flags: nothing here executes a tile instruction. The AMX kernels live in
// gemm_amx.cpp and are called only when status(compiled).available, which also performs the
// Linux permission request (once per process, before any worker thread starts).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cpu_id.hpp"
#include "gemm.hpp"
#include "host_loops.hpp"
#include "blocking.hpp"
#include "kernel.hpp"
#include "pack.hpp"
#include "tile_config.hpp"

namespace py = pybind11;
namespace amx = emulinalg::amx;

namespace {

const amx::Status& status() { return amx::status(amx::kAmxCompiled); }

template <class T>
using CArray = py::array_t<T, py::array::c_style>;

// (m, k, n) of a 2-D x 2-D product, or ValueError.
template <class T>
void shapes(const CArray<T>& a, const CArray<T>& b, std::int64_t& m, std::int64_t& k,
            std::int64_t& n, const char* name) {
    if (a.ndim() != 2 || b.ndim() != 2) {
        throw py::value_error(std::string(name) + ": a and b must be 2-D arrays");
    }
    m = a.shape(0);
    k = a.shape(1);
    n = b.shape(1);
    if (b.shape(0) != k) {
        throw py::value_error(std::string(name) + ": inner dimensions differ (a is " +
                              std::to_string(m) + "x" + std::to_string(k) + ", b is " +
                              std::to_string(b.shape(0)) + "x" + std::to_string(n) + ")");
    }
}

void require_amx(bool emulate, const char* name) {
    if (!emulate && !status().available) {
        throw std::runtime_error(std::string(name) + ": AMX is not available: " +
                                 status().reason + " (emulate=True runs the scalar tile model)");
    }
}

// An uninitialised (m, n) result (host_loops.hpp: 2 MiB aligned huge pages from 2 MiB on, so
// fewer page faults while the tiles store into it), owned by the array.
template <class T>
CArray<T> new_output(std::int64_t m, std::int64_t n) {
    return emu_host::huge_page_array<T>({static_cast<py::ssize_t>(m), static_cast<py::ssize_t>(n)});
}

void check_ok(bool ok, const char* name) {
    if (!ok) {
        throw std::runtime_error(std::string(name) +
                                 ": internal error: tile shapes violate the instruction rules");
    }
}

CArray<std::int32_t> gemm_s8s8s32(const CArray<std::int8_t>& a, const CArray<std::int8_t>& b,
                                  bool emulate, int threads) {
    const char* name = "gemm_s8s8s32";
    std::int64_t m, k, n;
    shapes(a, b, m, k, n, name);
    if (k > amx::kMaxKS8) {
        throw py::value_error(std::string(name) + ": k = " + std::to_string(k) +
                              " exceeds MAX_K_S8 = " + std::to_string(amx::kMaxKS8) +
                              ": int32 sums of int8 products could overflow; block K");
    }
    require_amx(emulate, name);
    CArray<std::int32_t> c = new_output<std::int32_t>(m, n);
    const std::int8_t* pa = a.data();
    const std::int8_t* pb = b.data();
    std::int32_t* pc = c.mutable_data();
    bool ok;
    {
        py::gil_scoped_release release;
#ifdef EMULINALG_AMX_COMPILED
        ok = emulate ? amx::gemm_s8s8s32_emulated(pa, pb, pc, m, n, k, threads)
                     : amx::gemm_s8s8s32_amx(pa, pb, pc, m, n, k, threads);
#else
        ok = amx::gemm_s8s8s32_emulated(pa, pb, pc, m, n, k, threads);
#endif
    }
    check_ok(ok, name);
    return c;
}

CArray<float> gemm_bf16bf16f32(const CArray<std::uint16_t>& a, const CArray<std::uint16_t>& b,
                               bool emulate, int threads) {
    const char* name = "gemm_bf16bf16f32";
    std::int64_t m, k, n;
    shapes(a, b, m, k, n, name);
    require_amx(emulate, name);
    CArray<float> c = new_output<float>(m, n);
    const std::uint16_t* pa = a.data();
    const std::uint16_t* pb = b.data();
    float* pc = c.mutable_data();
    bool ok;
    {
        py::gil_scoped_release release;
#ifdef EMULINALG_AMX_COMPILED
        ok = emulate ? amx::gemm_bf16bf16f32_emulated(pa, pb, pc, m, n, k, threads)
                     : amx::gemm_bf16bf16f32_amx(pa, pb, pc, m, n, k, threads);
#else
        ok = amx::gemm_bf16bf16f32_emulated(pa, pb, pc, m, n, k, threads);
#endif
    }
    check_ok(ok, name);
    return c;
}

py::array gemm_bf16_slices(const CArray<std::uint16_t>& a, const CArray<std::uint16_t>& b,
                           const CArray<std::int32_t>& pairs, bool widen, bool emulate,
                           int threads) {
    const char* name = "gemm_bf16_slices";
    if (a.ndim() != 3 || b.ndim() != 3) {
        throw py::value_error(std::string(name) + ": a and b must be 3-D stacks of slices");
    }
    const std::int64_t na = a.shape(0), m = a.shape(1), k = a.shape(2);
    const std::int64_t nb = b.shape(0), n = b.shape(2);
    if (b.shape(1) != k) {
        throw py::value_error(std::string(name) + ": inner dimensions differ (" +
                              std::to_string(k) + " vs " + std::to_string(b.shape(1)) + ")");
    }
    if (na < 1 || nb < 1 || na > 64 || nb > 64) {
        throw py::value_error(std::string(name) + ": 1 to 64 slices per operand");
    }
    if (pairs.ndim() != 2 || pairs.shape(1) != 2 || pairs.shape(0) < 1 || pairs.shape(0) > 4096) {
        throw py::value_error(std::string(name) + ": pairs must be (count, 2), 1 <= count <= 4096");
    }
    const std::int32_t* pp = pairs.data();
    const int count = static_cast<int>(pairs.shape(0));
    for (int q = 0; q < count; ++q) {
        if (pp[2 * q] < 0 || pp[2 * q] >= na || pp[2 * q + 1] < 0 || pp[2 * q + 1] >= nb) {
            throw py::value_error(std::string(name) + ": pair " + std::to_string(q) +
                                  " names a slice that is not there");
        }
    }
    require_amx(emulate, name);
    py::array c;
    void* pc;
    if (widen) {
        auto out = new_output<double>(m, n);
        pc = out.mutable_data();
        c = out;
    } else {
        auto out = new_output<float>(m, n);
        pc = out.mutable_data();
        c = out;
    }
    const std::uint16_t* pa = a.data();
    const std::uint16_t* pb = b.data();
    bool ok;
    {
        py::gil_scoped_release release;
#ifdef EMULINALG_AMX_COMPILED
        ok = emulate ? amx::gemm_bf16_slices_emulated(pa, int(na), pb, int(nb), pp, count, widen,
                                                      pc, m, n, k, threads)
                     : amx::gemm_bf16_slices_amx(pa, int(na), pb, int(nb), pp, count, widen, pc,
                                                 m, n, k, threads);
#else
        ok = amx::gemm_bf16_slices_emulated(pa, int(na), pb, int(nb), pp, count, widen, pc, m, n,
                                            k, threads);
#endif
    }
    check_ok(ok, name);
    return c;
}

py::dict features() {
    const emulinalg::cpu::Features f = emulinalg::cpu::detect();
    const amx::Status& s = status();
    py::dict d;
    d["amx_tile"] = f.amx_tile;
    d["amx_int8"] = f.amx_int8;
    d["amx_bf16"] = f.amx_bf16;
    d["os_xtiledata"] = f.os_xtiledata;
    d["compiled_amx"] = amx::kAmxCompiled;
    d["permission"] = s.permission;
    d["available"] = s.available;
#ifdef _OPENMP
    d["openmp"] = true;
#else
    d["openmp"] = false;
#endif
    d["max_threads"] = amx::resolve_threads(0);
    return d;
}

py::dict tuning_dict(const amx::Tuning& t) {
    py::dict d;
    d["mc"] = t.mc;
    d["nc"] = t.nc;
    d["kc"] = t.kc;
    d["order"] = t.order;
    d["sched"] = t.sched;
    d["prefetch"] = t.prefetch;
    d["partition"] = t.partition;
    d["pack_a"] = t.pack_a;
    d["nest"] = t.nest;
    d["stream"] = t.stream;
    d["widen"] = t.widen;
    d["panels"] = t.panels;
    d["spec"] = amx::format_tuning(t);
    return d;
}

py::dict blocking() { return tuning_dict(amx::current_tuning()); }

py::dict set_blocking(const py::object& spec, const py::kwargs& kw) {
    const amx::Tuning old = amx::current_tuning();
    amx::Tuning t = old;
    if (!spec.is_none()) {
        const std::string err = amx::parse_tuning(spec.cast<std::string>(), t);
        if (!err.empty()) throw py::value_error("set_blocking: " + err);
    }
    for (auto item : kw) {
        const std::string key = item.first.cast<std::string>();
        const std::string err = amx::set_knob(t, key, item.second.cast<long long>());
        if (!err.empty()) throw py::value_error("set_blocking: " + err);
    }
    const std::string err = amx::validate(t);
    if (!err.empty()) throw py::value_error("set_blocking: " + err);
    amx::set_current_tuning(t);
    return tuning_dict(old);
}

py::dict plan(std::int64_t m, std::int64_t n, std::int64_t k, const std::string& dtype,
              int threads) {
    if (m < 0 || n < 0 || k < 0) throw py::value_error("plan: negative size");
    std::int64_t kt;
    if (dtype == "int8") kt = amx::k_per_tile<std::int8_t>();
    else if (dtype == "bf16") kt = amx::k_per_tile<std::uint16_t>();
    else throw py::value_error("plan: dtype must be 'int8' or 'bf16'");
    amx::Tuning t = amx::current_tuning();
    bool chunked = false;
    if (dtype == "int8") t = amx::int8_gemm_tuning(t, amx::ceil_div(k, kt), chunked);
    const std::int64_t mp = amx::ceil_div(m, amx::kRegRows) * amx::kRegRows;
    const std::int64_t np = amx::ceil_div(n, amx::kRegCols) * amx::kRegCols;
    const amx::Plan p = amx::make_plan(t, mp, np, amx::ceil_div(k, kt), amx::resolve_threads(threads));
    py::dict d;
    d["chunked"] = chunked;  // chunked panels and each thread's partial sums (INT8, long K)
    d["rows"] = p.rows;
    d["cols"] = p.cols;
    d["ktiles"] = p.ktiles;
    d["mc"] = p.mcr * amx::kRegRows;
    d["nc"] = p.ncr * amx::kRegCols;
    d["kc"] = p.kc;
    d["order"] = p.order;
    d["sched"] = p.sched;
    d["prefetch"] = p.prefetch;
    d["partition"] = p.partition;
    d["nest"] = p.nest;
    d["stream"] = p.stream;
    d["widen"] = p.widen;
    d["pack_a"] = t.pack_a != 0 || m % amx::kRegRows != 0 || k % kt != 0;
    d["grid"] = py::make_tuple(p.grid_rows, p.grid_cols);
    d["team"] = p.team;
    d["tasks"] = p.tasks;
    return d;
}

py::dict cache_info() {
    const auto s = amx::BufferPool::instance().stats();
    py::dict d;
    d["cached_bytes"] = s.cached;
    d["limit_bytes"] = s.limit;
    d["peak_bytes"] = s.peak;
    d["in_use_bytes"] = s.in_use;
    return d;
}

}  // namespace

void register_ozaki2_host(py::module_& m);  // ozaki2_host.cpp: Scheme II residues and CRT
void register_ozaki2_stats_host(py::module_& m);  // ozaki2_stats_host.cpp: prescale, certificate
void register_bf16_host(py::module_& m);  // bf16_host.cpp: BF16 slices, unscaling
void register_lines_host(py::module_& m);  // lines_host.cpp: the line patch's native products
void register_refit_host(py::module_& m);  // refit_host.cpp: the refit's choice of entries

PYBIND11_MODULE(_amx, m) {
    if (const char* env = std::getenv("EMULINALG_AMX_BLOCKING")) {
        amx::Tuning t;
        const std::string err = amx::parse_tuning(env, t);
        if (err.empty()) {
            amx::set_current_tuning(t);
        } else if (PyErr_WarnEx(PyExc_RuntimeWarning,
                                ("EMULINALG_AMX_BLOCKING ignored: " + err).c_str(), 1) != 0) {
            throw py::error_already_set();
        }
    }
    m.doc() =
        "Exact INT8 (TDPBSSD) and BF16 (TDPBF16PS) tile GEMMs on Intel AMX, dispatched at run "
        "time (CPUID, XCR0, Linux arch_prctl permission), and the same kernels on a scalar tile "
        "model (emulate=True) that runs on any CPU.";
    m.attr("MAX_K_S8") = amx::kMaxKS8;
    m.attr("PANEL_CHUNK") = amx::kPanelChunk;  // K tiles per chunk of ozaki2_pack's panels
    // INT8 GEMMs of a longer K take chunked panels (K in elements)
    m.attr("CHUNKED_MIN_K") = amx::kChunkedMinTiles * amx::k_per_tile<std::int8_t>();
    m.def(
        "available", [] { return status().available; },
        "True when the AMX kernels can run here: built with AMX support, CPUID reports "
        "AMX-TILE/INT8/BF16, the OS enabled the tile state, and (Linux) the process was granted "
        "XTILEDATA. The first call makes the permission request.");
    m.def(
        "reason", [] { return status().reason; },
        "Why available() is False ('' when it is True).");
    m.def("features", &features,
          "Dict: amx_tile, amx_int8, amx_bf16 (CPUID), os_xtiledata (XCR0), compiled_amx, "
          "permission (Linux XTILEDATA granted), available, openmp, max_threads.");
    m.def("blocking", &blocking,
          "The blocking knobs the GEMMs use now (dict; 'spec' is the string form that "
          "set_blocking and the EMULINALG_AMX_BLOCKING variable accept). 0 in mc/nc/kc and -1 "
          "in nest mean the kernel's default (blocking.hpp).");
    m.def("set_blocking", &set_blocking, py::arg("spec") = py::none(),
          "Set blocking knobs for the following GEMM calls (process-wide): a spec string "
          "'mc=256,nc=512,kc=8,order=0,sched=0,prefetch=1,partition=0,pack_a=1,nest=0,stream=0' ('default' "
          "resets) and/or keyword arguments of the same names. mc, nc: rows / columns of the C "
          "block and B panel kept in L2 (multiples of 32); kc: K tiles per chunk (C tiles "
          "reloaded between chunks; kc >= K tiles keeps C in the tiles); order: 0 = A strip "
          "L1-resident (j innermost), 1 = B pair L1-resident; sched: load/dot order (0-3); "
          "prefetch: bit 0 next strip into L2, bit 1 next block into L1; partition: 0 static "
          "2-D thread grid, 1 dynamic tasks; pack_a: 0 loads A tiles from the input when no "
          "padding is needed; nest: 0 = loops jc, ic, pc (C block in L2), 1 = jc, pc, ic, -1 = "
          "the kernel's default; "
          "stream: 1 loads the streamed operand with TILELOADDT1; widen: 1 overlaps a widened slice "
          "product's float64 additions with the next block's dot products; panels: 1 = Scheme "
          "II's residue panels (and an INT8 GEMM's beyond K = CHUNKED_MIN_K with kc unset, which "
          "then runs K chunks of PANEL_CHUNK tiles, nest 0, A packed) in chunked pairs, 0 = plain. "
          "Results do not depend on the knobs (INT8 exact; BF16 sums each "
          "entry's K tiles in ascending order). Returns the previous settings.");
    m.def("plan", &plan, py::arg("m"), py::arg("n"), py::arg("k"), py::kw_only(),
          py::arg("dtype") = "int8", py::arg("threads") = 0,
          "The blocking a plain GEMM (gemm_s8s8s32, gemm_bf16bf16f32) of this size would run "
          "with the current knobs (dict: grid, team, resolved mc/nc/kc, chunked, ...).");
    m.def("cache_info", &cache_info,
          "Packed-panel buffers cached between calls: cached_bytes (at most the smaller of "
          "limit_bytes and peak_bytes), limit_bytes (EMULINALG_AMX_CACHE_MB; default an eighth "
          "of the physical memory or of the cgroup's memory limit where smaller, at least "
          "256 MiB), peak_bytes (the most in use at once), "
          "in_use_bytes (held by live panels now; cached + in use stays within the peak).");
    m.def("cgroup_memory_limit", &amx::cgroup_memory_limit, py::arg("proc_cgroup"),
          py::arg("root") = "/sys/fs/cgroup",
          "The cgroup memory limit (bytes; 0: none) that the panel cache's default limit "
          "reads, from /proc/self/cgroup's text and the cgroup tree under root (v2 memory.max, "
          "v1 memory.limit_in_bytes; the smallest set).");
    m.def(
        "clear_cache", [] { return amx::BufferPool::instance().clear(); },
        "Free the cached packed-panel buffers; returns the bytes freed.");
    m.def("gemm_s8s8s32", &gemm_s8s8s32, py::arg("a"), py::arg("b"), py::kw_only(),
          py::arg("emulate") = false, py::arg("threads") = 0,
          "Exact int8 (m, k) @ int8 (k, n) -> int32 (m, n) with TDPBSSD.\n\n"
          "Exact for k <= MAX_K_S8 = 2**17 - 1 (every |a b| <= 2**14, so every partial sum fits "
          "int32); larger k raises ValueError (block K and add the blocks in int64). "
          "emulate=True runs the scalar tile model instead of AMX. threads <= 0: OpenMP's "
          "default (OMP_NUM_THREADS).");
    m.def("gemm_bf16bf16f32", &gemm_bf16bf16f32, py::arg("a"), py::arg("b"), py::kw_only(),
          py::arg("emulate") = false, py::arg("threads") = 0,
          "bf16 (m, k) @ bf16 (k, n) -> float32 (m, n) with TDPBF16PS; bf16 values are given "
          "as uint16 bit patterns. Products are exact in fp32, sums round to nearest even, "
          "subnormal inputs and outputs are flushed to zero.");
    m.def("gemm_bf16_slices", &gemm_bf16_slices, py::arg("a"), py::arg("b"), py::arg("pairs"),
          py::kw_only(), py::arg("widen") = false, py::arg("emulate") = false,
          py::arg("threads") = 0,
          "Slice products sum_q A[i_q] @ B[j_q] for bf16 stacks a (na, m, k), b (nb, k, n) "
          "(uint16 bit patterns) and pairs (count, 2) int32 (i_q, j_q). widen=False: all pairs "
          "in the same FP32 tiles, per 32-deep K tile in the pairs' order -> float32 (m, n). "
          "widen=True: each pair's FP32 sum over WIDEN_K = 1024 of K is added to a float64 C "
          "in the order (K chunk, pair) -> float64 (m, n).");
    m.attr("WIDEN_K") = amx::kWidenTiles * amx::k_per_tile<std::uint16_t>();
    register_ozaki2_host(m);
    register_ozaki2_stats_host(m);
    register_bf16_host(m);
    register_lines_host(m);
    register_refit_host(m);
}
