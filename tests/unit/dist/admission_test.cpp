#include "dptrain/dist/admission.h"

#include <gtest/gtest.h>

#include <string>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "dptrain/common/error.h"
#include "support/error_of.h"

using namespace std::chrono_literals;
using dpt::dist::Admission;
using dpt::dist::AdmissionOptions;

namespace {

AdmissionOptions with_token(std::optional<std::string> token) {
  return AdmissionOptions("job/", 2s).token(std::move(token)).address("10.0.0.1:29500");
}

std::string entering(c10d::Store& store, std::optional<std::string> token) {
  return dpt::testing::error_of<dpt::Error>([&] { Admission::enter(store, "rank 1", with_token(std::move(token))); });
}

}  // namespace

TEST(Admission, TheSameTokenIsAdmittedAndItsProofsCheck) {
  c10d::HashStore store;
  const Admission host = Admission::open(store, "rank 0", with_token("secret"));
  const Admission joiner = Admission::enter(store, "rank 1", with_token("secret"));
  const std::string proof = joiner.proof("rank 1");
  EXPECT_EQ(proof.size(), 64u);
  EXPECT_TRUE(host.verify("rank 1", proof));
  // A proof holds for its place only, and for this job's nonce only.
  EXPECT_FALSE(host.verify("rank 2", proof));
  EXPECT_FALSE(host.verify("rank 1", ""));
  c10d::HashStore other_job;
  const Admission other = Admission::open(other_job, "rank 0", with_token("secret"));
  EXPECT_NE(other.proof("rank 1"), proof);
}

TEST(Admission, EachMismatchIsRefusedWithItsReasonAndTheHostLogsIt) {
  c10d::HashStore store;
  Admission host = Admission::open(store, "rank 0", with_token("secret"));
  EXPECT_EQ(entering(store, "guess"),
            "rank 1: not admitted to the job at 10.0.0.1:29500: this process holds a different job token. A job's "
            "processes share one token (DPTRAIN_JOB_TOKEN; `dptrain launch` makes one for a job on one host and "
            "passes it to its workers, --job-token FILE gives every node the same). Check that this process was "
            "pointed at its own job's address and port.");
  EXPECT_NE(entering(store, std::nullopt).find("the job requires a job token and this process has none"),
            std::string::npos);
  const auto refusals = host.take_refusals(store);
  ASSERT_EQ(refusals.size(), 2u);
  EXPECT_EQ(refusals[0],
            "refused a process that tried to join 10.0.0.1:29500 (rank 1: this process holds a different job "
            "token); the job goes on");
  EXPECT_NE(refusals[1].find("(rank 1: the job requires a job token and this process has none)"), std::string::npos);
  EXPECT_TRUE(host.take_refusals(store).empty());  // each is told once
  EXPECT_EQ(entering(store, "secret"), "(no error)");  // and the job still admits its own

  c10d::HashStore open_job;
  Admission::open(open_job, "rank 0", with_token(std::nullopt));
  EXPECT_NE(entering(open_job, "secret").find("the job runs without a job token and this process has one"),
            std::string::npos);
  EXPECT_EQ(entering(open_job, std::nullopt), "(no error)");
}

TEST(Admission, AJobWithoutATokenNeedsNoProofs) {
  c10d::HashStore store;
  const Admission host = Admission::open(store, "rank 0", with_token(std::nullopt));
  EXPECT_FALSE(host.has_token());
  EXPECT_EQ(host.proof("rank 1"), "");
  EXPECT_TRUE(host.verify("rank 1", ""));
}

TEST(Admission, AJoinerGivesUpWhenNoHostPublishes) {
  c10d::HashStore store;
  const auto message = dpt::testing::error_of<dpt::Error>(
      [&] { Admission::enter(store, "rank 1", AdmissionOptions("job/", 100ms).token("secret")); });
  EXPECT_NE(message.find("rank 1: the job serves its store but did not publish its admission within 0.1 s"),
            std::string::npos)
      << message;
}

TEST(Admission, ASecondHostEntersInstead) {
  c10d::HashStore store;
  const Admission first = Admission::open(store, "rank 0", with_token("secret"));
  const Admission second = Admission::open(store, "rank 0", with_token("secret"));
  EXPECT_TRUE(first.verify("rank 0", second.proof("rank 0")));  // the first one's nonce stands
  EXPECT_NE(dpt::testing::error_of<dpt::Error>([&] { Admission::open(store, "rank 0", with_token("other")); })
                .find("rank 0: not admitted"),
            std::string::npos);
}
