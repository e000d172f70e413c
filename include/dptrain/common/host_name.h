#pragma once
// This machine's name, as the logs name a host (gethostname; "localhost" when it fails).

#include <string>

namespace dpt {

std::string host_name();

}  // namespace dpt
