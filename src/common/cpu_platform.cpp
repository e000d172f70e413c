#include "dptrain/common/cpu_platform.h"

#include <dlfcn.h>
#include <sys/utsname.h>

#include <cctype>
#include <vector>

#include "dptrain/common/read_file.h"

namespace dpt {
namespace {

std::string_view trimmed(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r");
  return s.substr(first, last - first + 1);
}

// The value of the first "key<tabs>: value" line of a /proc/cpuinfo.
std::string_view cpuinfo_field(std::string_view cpuinfo, std::string_view key) {
  size_t start = 0;
  while (start < cpuinfo.size()) {
    size_t end = cpuinfo.find('\n', start);
    if (end == std::string_view::npos) end = cpuinfo.size();
    const std::string_view line = cpuinfo.substr(start, end - start);
    const auto colon = line.find(':');
    if (colon != std::string_view::npos && trimmed(line.substr(0, colon)) == key) {
      return trimmed(line.substr(colon + 1));
    }
    start = end + 1;
  }
  return {};
}

bool has_word(std::string_view words, std::string_view word) {
  size_t at = 0;
  while ((at = words.find(word, at)) != std::string_view::npos) {
    const bool starts = at == 0 || words[at - 1] == ' ';
    const bool ends = at + word.size() == words.size() || words[at + word.size()] == ' ';
    if (starts && ends) return true;
    at += word.size();
  }
  return false;
}

std::string_view file_name(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

// Which implementation a mapped BLAS file is, from where Debian (and vendors) install each.
BlasLibrary::Kind blas_kind(std::string_view path) {
  using Kind = BlasLibrary::Kind;
  const std::string_view name = file_name(path);
  if (contains(name, "openblas") || contains(path, "/openblas")) return Kind::kOpenBlas;
  if (contains(name, "blis") || contains(path, "/blis")) return Kind::kBlis;
  if (contains(name, "libmkl")) return Kind::kMkl;
  if (contains(path, "/atlas/")) return Kind::kAtlas;
  if (contains(path, "/blas/libblas.so")) return Kind::kReference;
  if (name.rfind("libblas.so", 0) == 0) return Kind::kOther;
  return Kind::kNone;
}

}  // namespace

std::string CpuFeatures::describe() const {
  std::vector<const char*> found;
  if (avx2) found.push_back("AVX2");
  if (avx512f) found.push_back("AVX-512");
  if (avx512_bf16) found.push_back("AVX512-BF16");
  if (amx_bf16) found.push_back("AMX-BF16");
  if (found.empty()) return "none of AVX2, AVX-512, AMX";
  std::string text = found[0];
  for (size_t i = 1; i < found.size(); ++i) text += std::string(", ") + found[i];
  return text;
}

CpuFeatures cpu_features_from(std::string_view cpuinfo) {
  CpuFeatures cpu;
  cpu.model = std::string(cpuinfo_field(cpuinfo, "model name"));
  const std::string_view flags = cpuinfo_field(cpuinfo, "flags");
  cpu.avx2 = has_word(flags, "avx2");
  cpu.avx512f = has_word(flags, "avx512f");
  cpu.avx512_bf16 = has_word(flags, "avx512_bf16");
  cpu.amx_bf16 = has_word(flags, "amx_bf16");
  cpu.amx_tile = has_word(flags, "amx_tile");
  return cpu;
}

CpuFeatures cpu_features() { return cpu_features_from(read_file<std::string>("/proc/cpuinfo").value_or("")); }

std::string BlasLibrary::describe() const {
  const char* name = "";
  switch (kind) {
    case Kind::kReference: name = "reference BLAS"; break;
    case Kind::kOpenBlas: name = "OpenBLAS"; break;
    case Kind::kBlis: name = "BLIS"; break;
    case Kind::kMkl: name = "MKL"; break;
    case Kind::kAtlas: name = "ATLAS"; break;
    case Kind::kOther: name = "a BLAS"; break;
    case Kind::kNone: return "none loaded";
  }
  return (version.empty() ? std::string(name) : version) + " (" + path + ")";
}

std::string BlasLibrary::advice() const {
  if (!is_reference()) return "";
  struct utsname machine {};
  ::uname(&machine);
  return "the reference BLAS is active (" + path +
         "): every fp32 matrix product that does not go through oneDNN (linear layers, attention) runs "
         "its textbook loops, some 20x slower than OpenBLAS. Install libopenblas0-openmp (it matches "
         "LibTorch's OpenMP threads; scripts/install-deps does it) or select another BLAS with "
         "update-alternatives --config libblas.so.3-" +
         machine.machine + "-linux-gnu";
}

BlasLibrary blas_from_maps(std::string_view maps) {
  BlasLibrary found;
  size_t start = 0;
  while (start < maps.size()) {
    size_t end = maps.find('\n', start);
    if (end == std::string_view::npos) end = maps.size();
    const std::string_view line = maps.substr(start, end - start);
    start = end + 1;
    const auto slash = line.find('/');
    if (slash == std::string_view::npos) continue;
    const std::string_view path = trimmed(line.substr(slash));
    const BlasLibrary::Kind kind = blas_kind(path);
    // libblas.so.3 names the implementation by its folder; OpenBLAS's own library, mapped beside
    // it, says the same more plainly. The first named implementation wins over a bare libblas.
    if (kind == BlasLibrary::Kind::kNone) continue;
    if (found.kind == BlasLibrary::Kind::kNone || found.kind == BlasLibrary::Kind::kOther) {
      found.kind = kind;
      found.path = std::string(path);
    }
  }
  return found;
}

BlasLibrary blas_in_use() {
  BlasLibrary blas = blas_from_maps(read_file<std::string>("/proc/self/maps").value_or(""));
  using ConfigFunction = const char* (*)();
  if (auto config = reinterpret_cast<ConfigFunction>(::dlsym(RTLD_DEFAULT, "openblas_get_config"))) {
    blas.version = trimmed(config());
  }
  return blas;
}

bool openmp_threads_sleep_from(const Environment& environment) {
  const auto policy = environment.get("OMP_WAIT_POLICY");
  if (!policy) return false;
  // As the runtimes read it: "passive" in any case, spaces around it ignored.
  std::string value(trimmed(*policy));
  for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return value == "passive";
}

bool openmp_threads_sleep() { return openmp_threads_sleep_from(Environment::at_start()); }

std::optional<std::string> onednn_version() {
  // oneDNN's dnnl_version_t begins with three ints (major, minor, patch) in every release.
  struct VersionPrefix {
    int major, minor, patch;
  };
  using VersionFunction = const VersionPrefix* (*)();
  auto version = reinterpret_cast<VersionFunction>(::dlsym(RTLD_DEFAULT, "dnnl_version"));
  if (version == nullptr) return std::nullopt;
  const VersionPrefix* v = version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace dpt
