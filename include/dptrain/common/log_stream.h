#pragma once
// Where a component writes its text output, in options structs: `TORCH_ARG(LogStream, log)`. An
// alias, because TORCH_ARG cannot take a pointer type as written. Null means nowhere.

#include <ostream>

namespace dpt {

using LogStream = std::ostream*;

}  // namespace dpt
