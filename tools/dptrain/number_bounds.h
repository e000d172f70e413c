#pragma once
// Bounds on a flag's number, checked while CLI11 parses it:
//
//   app.add_option("--label-smoothing", smoothing)->check(within(0, 1));
//   app.add_option("--lr", lr)->check(above(0));
//
// CLI11's own Range, PositiveNumber and NonNegativeNumber compare, and every comparison with NaN is
// false: `--label-smoothing nan` passed them and the run went on with whatever NaN made of it
// (here, no smoothing), `--bucket-cap-mb nan` reached the reducer. These refuse NaN, and the
// infinities unless a bound is one. A value that is not a number at all is left to the option's
// own conversion, which names the type it wanted.

#include <CLI/CLI.hpp>

namespace dpt::cli {

CLI::Validator within(double low, double high);  // from low to high, both included
CLI::Validator at_least(double low);             // low or more, finite
CLI::Validator above(double low);                // more than low, finite

}  // namespace dpt::cli
