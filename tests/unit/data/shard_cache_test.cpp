#include "dptrain/data/shard_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "support/temp_dir.h"

using namespace dpt::data;
namespace fs = std::filesystem;

namespace {

// Sets an environment variable for a scope, then puts back what was there.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedVariable() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

// Options without a folder (what the commands pass unless --data-cache is given) name the default
// one, which the cache creates; a folder given is kept.
TEST(ShardCache, WithoutAFolderUsesAndCreatesTheDefaultOne) {
  dpt::testing::TempDir dir;
  const ScopedVariable xdg("XDG_CACHE_HOME", dir.path());
  const ShardCache cache{ShardCacheOptions()};
  EXPECT_EQ(cache.options().folder(), dir.path() + "/dptrain/shards");
  EXPECT_EQ(default_shard_cache_folder(), dir.path() + "/dptrain/shards");
  EXPECT_TRUE(fs::is_directory(dir.path() + "/dptrain/shards"));
  const ShardCache given{ShardCacheOptions(dir.path() + "/mine")};
  EXPECT_EQ(given.options().folder(), dir.path() + "/mine");
  EXPECT_TRUE(fs::is_directory(dir.path() + "/mine"));
}
