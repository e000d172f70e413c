#include "dptrain/common/job_token.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <set>

#include "dptrain/common/error.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace dpt {
namespace {

TEST(JobToken, FreshTokensAreHexOfThirtyTwoRandomBytes) {
  std::set<std::string> tokens;
  for (int i = 0; i < 16; ++i) {
    const std::string token = make_job_token();
    EXPECT_EQ(token.size(), 64u);
    EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
    tokens.insert(token);
  }
  EXPECT_EQ(tokens.size(), 16u);
}

TEST(JobToken, AFileGivesItsFirstLine) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/token";
  std::ofstream(path) << "s3cret value\r\nsecond line\n";
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(read_job_token_file(path), "s3cret value");
  ::chmod(path.c_str(), 0400);
  EXPECT_EQ(read_job_token_file(path), "s3cret value");
}

TEST(JobToken, AFileOthersMayReadOrThatIsEmptyOrMissingIsRefused) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/token";
  std::ofstream(path) << "secret\n";
  ::chmod(path.c_str(), 0640);
  EXPECT_EQ(testing::error_of<ConfigError>([&] { read_job_token_file(path); }),
            "the job token file '" + path + "' may be read or written by others than its owner (mode 640): a token "
            "others can read keeps no one out. Run: chmod 600 " + path);
  ::chmod(path.c_str(), 0602);
  EXPECT_NE(testing::error_of<ConfigError>([&] { read_job_token_file(path); }).find("(mode 602)"), std::string::npos);
  std::ofstream(path, std::ios::trunc) << "\nsecret\n";
  ::chmod(path.c_str(), 0600);
  EXPECT_NE(testing::error_of<ConfigError>([&] { read_job_token_file(path); }).find("has an empty first line"),
            std::string::npos);
  EXPECT_NE(testing::error_of<ConfigError>([&] { read_job_token_file(dir.path() + "/none"); })
                .find("cannot read the job token file '" + dir.path() + "/none': No such file or directory"),
            std::string::npos);
  EXPECT_NE(testing::error_of<ConfigError>([&] { read_job_token_file(dir.path()); }).find("is not a regular file"),
            std::string::npos);
}

}  // namespace
}  // namespace dpt
