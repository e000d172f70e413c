#pragma once
// What this process computes with on the CPU: the matrix instructions the processor has, and the
// BLAS and oneDNN libraries LibTorch loaded. `dptrain check` prints them, and the trainer's hints
// use them, because they decide a training step's speed more than anything dptrain does: bf16 runs
// on AVX512-BF16 or AMX units at several times fp32's rate, and an fp32 matrix product that does
// not go through oneDNN runs in the BLAS, where Debian's reference BLAS is some 20x slower than
// OpenBLAS (a ViT-B/32 step: 40.5 s against 1.7 s).
//
//   auto cpu = dpt::cpu_features();
//   if (!cpu.has_bf16_units()) ...;
//   auto blas = dpt::blas_in_use();
//   if (blas.is_reference()) std::cerr << blas.advice();

#include <optional>
#include <string>
#include <string_view>

#include "dptrain/common/environment.h"

namespace dpt {

struct CpuFeatures {
  std::string model;  // /proc/cpuinfo's "model name"
  bool avx2 = false;
  bool avx512f = false;
  bool avx512_bf16 = false;  // bf16 dot products in vector registers
  bool amx_bf16 = false;     // bf16 tile matrix multiply (Sapphire Rapids and later)
  bool amx_tile = false;

  // Matrix units that make bf16 faster than fp32.
  bool has_bf16_units() const { return avx512_bf16 || amx_bf16; }
  // "AVX2, AVX-512, AVX512-BF16, AMX-BF16", or "none of AVX2, AVX-512, AMX".
  std::string describe() const;
};

// The CPU this process runs on, from /proc/cpuinfo (its first processor).
CpuFeatures cpu_features();
// The same from the text of a /proc/cpuinfo.
CpuFeatures cpu_features_from(std::string_view cpuinfo);

struct BlasLibrary {
  enum class Kind { kReference, kOpenBlas, kBlis, kMkl, kAtlas, kOther, kNone };
  Kind kind = Kind::kNone;
  std::string path;     // the file mapped into this process, its links resolved
  std::string version;  // OpenBLAS's own description where it gives one ("OpenBLAS 0.3.21 ...")

  bool is_reference() const { return kind == Kind::kReference; }
  // "OpenBLAS 0.3.21 ... (/usr/lib/.../libopenblasp-r0.3.21.so)", "reference BLAS (...)", "none loaded".
  std::string describe() const;
  // What to do about a slow BLAS: which package to install, and why it matters.
  std::string advice() const;
};

// The BLAS library mapped into this process (LibTorch links libblas.so.3; Debian's alternatives
// decide which implementation that is).
BlasLibrary blas_in_use();
// The same from the text of a /proc/PID/maps.
BlasLibrary blas_from_maps(std::string_view maps);

// The oneDNN library loaded into this process, "2.6.3", or nullopt when none is.
std::optional<std::string> onednn_version();

// Whether the OpenMP runtime's idle threads sleep between parallel regions (OMP_WAIT_POLICY=passive)
// rather than spin, as the runtime read the variable when it loaded: from the environment the
// process started with (/proc/self/environ); setting it later changes nothing. Spinning threads
// keep their cores busy, which costs whatever else runs there: DataParallel's replica threads took
// 1.2 to 1.8 times as long per step beside them (bench/data_parallel).
bool openmp_threads_sleep();
// The same from a process's starting environment.
bool openmp_threads_sleep_from(const Environment& environment);

}  // namespace dpt
