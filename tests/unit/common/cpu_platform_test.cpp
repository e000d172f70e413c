#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "dptrain/common/cpu_platform.h"
#include "dptrain/compat/compat.h"

using dpt::BlasLibrary;
using dpt::blas_from_maps;
using dpt::cpu_features_from;

namespace {

// Two processors as /proc/cpuinfo lists them; only the first counts.
const char* kSapphireRapids =
    "processor\t: 0\n"
    "vendor_id\t: GenuineIntel\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\n"
    "flags\t\t: fpu vme avx2 avx512f avx512dq avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8\n"
    "\n"
    "processor\t: 1\n"
    "model name\t: something else\n"
    "flags\t\t: fpu\n";

TEST(CpuFeatures, ReadsTheFirstProcessorsModelAndMatrixUnits) {
  const auto cpu = cpu_features_from(kSapphireRapids);
  EXPECT_EQ(cpu.model, "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz");
  EXPECT_TRUE(cpu.avx2);
  EXPECT_TRUE(cpu.avx512f);
  EXPECT_TRUE(cpu.avx512_bf16);
  EXPECT_TRUE(cpu.amx_bf16);
  EXPECT_TRUE(cpu.amx_tile);
  EXPECT_TRUE(cpu.has_bf16_units());
  EXPECT_EQ(cpu.describe(), "AVX2, AVX-512, AVX512-BF16, AMX-BF16");
}

TEST(CpuFeatures, MatchesWholeFlagsOnly) {
  // avx512fp16 is not avx512f, and amx_bf16x is no flag at all.
  const auto cpu = cpu_features_from("model name : X\nflags : sse avx512fp16 amx_bf16x avx2\n");
  EXPECT_TRUE(cpu.avx2);
  EXPECT_FALSE(cpu.avx512f);
  EXPECT_FALSE(cpu.amx_bf16);
  EXPECT_FALSE(cpu.has_bf16_units());
  EXPECT_EQ(cpu.describe(), "AVX2");
  EXPECT_EQ(cpu_features_from("").describe(), "none of AVX2, AVX-512, AMX");
}

std::string mapping(const std::string& path) {
  return "7f5c2a000000-7f5c2a021000 r-xp 00002000 08:01 1185922                    " + path + "\n";
}

TEST(BlasLibrary, NamesDebiansAlternativesByTheirFolder) {
  const std::string torch = mapping("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13");
  const auto reference = blas_from_maps(torch + mapping("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0"));
  EXPECT_EQ(reference.kind, BlasLibrary::Kind::kReference);
  EXPECT_TRUE(reference.is_reference());
  EXPECT_NE(reference.advice().find("libopenblas0-openmp"), std::string::npos);
  EXPECT_NE(reference.advice().find("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0"), std::string::npos);

  const auto openblas =
      blas_from_maps(torch + mapping("/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3") +
                     mapping("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblasp-r0.3.21.so"));
  EXPECT_EQ(openblas.kind, BlasLibrary::Kind::kOpenBlas);
  EXPECT_EQ(openblas.path, "/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3");
  EXPECT_FALSE(openblas.is_reference());
  EXPECT_EQ(openblas.advice(), "");

  EXPECT_EQ(blas_from_maps(mapping("/usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3")).kind,
            BlasLibrary::Kind::kBlis);
  EXPECT_EQ(blas_from_maps(mapping("/opt/intel/lib/libmkl_rt.so.2")).kind, BlasLibrary::Kind::kMkl);
}

TEST(BlasLibrary, ANamedImplementationWinsOverABareLibblas) {
  const auto blas = blas_from_maps(mapping("/opt/lib/libblas.so.3") + mapping("/opt/lib/libopenblas.so.0"));
  EXPECT_EQ(blas.kind, BlasLibrary::Kind::kOpenBlas);
  EXPECT_EQ(blas.path, "/opt/lib/libopenblas.so.0");
  EXPECT_EQ(blas_from_maps(mapping("/usr/lib/libtorch.so") + "7f00-7f01 rw-p 00000000 00:00 0 \n").kind,
            BlasLibrary::Kind::kNone);
  EXPECT_EQ(BlasLibrary{}.describe(), "none loaded");
}

}  // namespace

namespace {

bool sleep_from(const std::string& entries) {
  return dpt::openmp_threads_sleep_from(dpt::Environment::from_entries(entries));
}

TEST(OpenMp, ThreadsSleepOnlyWhenTheStartingEnvironmentSaysPassive) {
  using namespace std::string_literals;
  EXPECT_TRUE(sleep_from("PATH=/usr/bin\0OMP_WAIT_POLICY=passive\0HOME=/root\0"s));
  EXPECT_TRUE(sleep_from("OMP_WAIT_POLICY= PASSIVE \0"s));
  EXPECT_TRUE(sleep_from("OMP_WAIT_POLICY=Passive"s)) << "the last entry needs no NUL";
  EXPECT_FALSE(sleep_from("OMP_WAIT_POLICY=active\0"s));
  EXPECT_FALSE(sleep_from("PATH=/usr/bin\0HOME=/root\0"s)) << "unset: they spin first";
  EXPECT_FALSE(sleep_from("MY_OMP_WAIT_POLICY=passive\0"s));
  EXPECT_FALSE(sleep_from("OMP_WAIT_POLICY=passive-ish\0"s));
  EXPECT_FALSE(sleep_from(""s));
}

// What this process started with (ctest gives every test OMP_WAIT_POLICY=passive,
// tests/CMakeLists.txt; run alone, the binary has whatever its shell gave it).
TEST(OpenMp, ThisProcessReadsItsStartingEnvironment) {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const std::string entry = policy == nullptr ? "" : std::string("OMP_WAIT_POLICY=") + policy;
  EXPECT_EQ(dpt::openmp_threads_sleep(), sleep_from(entry));
}

// This binary links LibTorch. Debian's loads libblas.so.3 and oneDNN as libraries of their own;
// PyTorch's wheels link MKL and oneDNN into libtorch_cpu, where only LibTorch's build report
// names them (a GPU machine's PyTorch 2.11: BLAS_INFO=mkl, and no BLAS or oneDNN in the maps).
TEST(CpuPlatform, FindsTheLibrariesThisProcessLoaded) {
  const auto build = dpt::compat::torch_build();
  const auto blas = dpt::blas_in_use();
  const auto onednn = dpt::onednn_version();
  if (build.blas == "mkl" && blas.kind == BlasLibrary::Kind::kNone) {
    EXPECT_FALSE(onednn.has_value() && *onednn != build.onednn) << *onednn << " vs " << build.onednn;
    return;
  }
  EXPECT_NE(blas.kind, BlasLibrary::Kind::kNone) << blas.describe();
  EXPECT_NE(blas.path.find("blas"), std::string::npos) << blas.path;
  ASSERT_TRUE(onednn.has_value());
  EXPECT_EQ(std::count(onednn->begin(), onednn->end(), '.'), 2) << *onednn;
  EXPECT_EQ(*onednn, build.onednn);
}

}  // namespace
