#pragma once
// The job token: the secret every process of one job holds (DPTRAIN_JOB_TOKEN), checked before a
// process joins the job (dist/admission.h).
//
//   std::string token = dpt::make_job_token();                 // dptrain launch, one host
//   std::string token = dpt::read_job_token_file("/secrets/job.token");   // --job-token FILE

#include <string>

namespace dpt {

// The variable a job's processes find their token in.
constexpr const char* kJobTokenVariable = "DPTRAIN_JOB_TOKEN";

// A fresh random token: 32 bytes from the kernel's generator (getrandom), in hexadecimal.
std::string make_job_token();

// The token in `path`: its first line, without the line end. Throws ConfigError when the file
// cannot be read, its first line is empty, or others than its owner may read or write it (a token
// anyone on the host can read keeps no one out: chmod 600 it, as ssh asks of its keys).
std::string read_job_token_file(const std::string& path);

}  // namespace dpt
