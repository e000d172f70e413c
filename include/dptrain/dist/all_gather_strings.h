#pragma once
// Every rank's text, for what only strings say (a model's description, a host name); collective.
//
//   const auto hosts = dpt::dist::all_gather_strings(*comm, this_host);   // hosts[r]: rank r's

#include <string>
#include <vector>

#include "dptrain/dist/communicator.h"

namespace dpt::dist {

// Each rank's `text`, in rank order: the lengths gathered first, then the padded bytes.
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& text);

}  // namespace dpt::dist
