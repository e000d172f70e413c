#include "dptrain/common/job_token.h"

#include <sys/random.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "dptrain/common/error.h"
#include "dptrain/common/sha256.h"

namespace dpt {

std::string make_job_token() {
  std::uint8_t bytes[32];
  size_t filled = 0;
  while (filled < sizeof bytes) {
    const ssize_t got = ::getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    DPT_CHECK(got > 0, ConfigError, "cannot make a job token: getrandom failed (", std::strerror(errno), ")");
    filled += static_cast<size_t>(got);
  }
  return hex(bytes, sizeof bytes);
}

std::string read_job_token_file(const std::string& path) {
  struct stat status {};
  DPT_CHECK(::stat(path.c_str(), &status) == 0, ConfigError, "cannot read the job token file '", path,
            "': ", std::strerror(errno));
  DPT_CHECK(S_ISREG(status.st_mode), ConfigError, "the job token file '", path, "' is not a regular file");
  DPT_CHECK((status.st_mode & (S_IRWXG | S_IRWXO)) == 0, ConfigError, "the job token file '", path,
            "' may be read or written by others than its owner (mode ", std::oct, (status.st_mode & 0777),
            "): a token others can read keeps no one out. Run: chmod 600 ", path);
  std::ifstream file(path);
  std::string token;
  DPT_CHECK(file && std::getline(file, token), ConfigError, "cannot read the job token file '", path, "'");
  if (!token.empty() && token.back() == '\r') token.pop_back();
  DPT_CHECK(!token.empty(), ConfigError, "the job token file '", path,
            "' has an empty first line; write the token there (e.g. head -c 32 /dev/urandom | xxd -p -c 64)");
  return token;
}

}  // namespace dpt
