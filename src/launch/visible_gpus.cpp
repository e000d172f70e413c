#include "dptrain/launch/visible_gpus.h"

#include <filesystem>

namespace dpt::launch {

std::vector<std::string> visible_gpus(const Environment& env) {
  std::vector<std::string> gpus;
  if (auto visible = env.get("CUDA_VISIBLE_DEVICES")) {
    size_t start = 0;
    while (!visible->empty() && start <= visible->size()) {
      const size_t comma = visible->find(',', start);
      gpus.push_back(visible->substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return gpus;
  }
  int count = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.compare(0, 6, "nvidia") == 0 &&
        name.find_first_not_of("0123456789", 6) == std::string::npos) {
      ++count;
    }
  }
  for (int i = 0; i < count; ++i) gpus.push_back(std::to_string(i));
  return gpus;
}

}  // namespace dpt::launch
