#include "number_bounds.h"

#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

namespace dpt::cli {

namespace {

// A bound as the messages and --help show it: 1e+06 for a million, 0.5, inf.
std::string shown(double bound) {
  std::ostringstream text;
  text << bound;
  return text.str();
}

// The validator for [low, high], or (low, high] where the low end is open. `bounds` words them in
// its message ("from 0 to 1"), `help` in --help ("in [0, 1]").
CLI::Validator bounded(double low, double high, bool low_open, const std::string& bounds, std::string help) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const char* begin = text.c_str();
        char* end = nullptr;
        const double value = std::strtod(begin, &end);
        if (end == begin || *end != '\0') return {};  // not a number: the option's conversion says so
        // NaN fits nothing; an infinity fits only an infinite bound (the others end at double's largest).
        if ((low_open ? value > low : value >= low) && value <= high) return {};
        return "takes a number " + bounds + ", got " + text;
      },
      std::move(help));
}

}  // namespace

CLI::Validator within(double low, double high) {
  return bounded(low, high, false, "from " + shown(low) + " to " + shown(high),
                 "in [" + shown(low) + ", " + shown(high) + "]");
}

CLI::Validator at_least(double low) {
  return bounded(low, std::numeric_limits<double>::max(), false, "of at least " + shown(low), "at least " + shown(low));
}

CLI::Validator above(double low) {
  return bounded(low, std::numeric_limits<double>::max(), true, "above " + shown(low), "above " + shown(low));
}

}  // namespace dpt::cli
