#pragma once
// The report page's line charts, as inline SVG: axes at round numbers, the legend above the plot,
// and data attributes (the plot's ranges and edges, each series' name) that tests and scripts
// read the chart back by.
//
//   dpt::report::Points loss = {{100, 2.31}, {200, 2.02}};
//   html += dpt::report::line_chart("loss", {{"train", "#1f77b4", &loss, /*markers=*/false}});

#include <string>
#include <utility>
#include <vector>

namespace dpt::report {

// A metric over training: (x, value) points, x a global step or an epoch's last global step.
using Points = std::vector<std::pair<double, double>>;

struct Series {
  std::string name;   // data-series, and the legend's text
  std::string color;
  const Points* points;
  bool markers;       // a dot per point (epochs), else a line alone (steps)
};

// How a chart's y axis is scaled: from 0 to round numbers above the data, or percent, 0 to 100.
enum class YAxis { FromZero, Percent };

// A line chart of `series` over one x axis (global steps). The y axis starts at 0: every metric
// here is non-negative, and a zero-based axis does not exaggerate small changes.
std::string line_chart(const std::string& title, const std::vector<Series>& series, YAxis y_axis = YAxis::FromZero);

// An axis's ticks at round numbers, as plotting libraries place them: a step of 1, 2, 2.5 or 5
// times a power of ten giving at most `most` intervals, the axis widened to whole steps.
struct Ticks {
  double first = 0, last = 1, step = 1;
};
Ticks round_ticks(double lo, double hi, int most);

// A tick's label: whole numbers written out (1220, not 1.22e+03), fractions with the step's
// decimals (0.25, 0.0005), very large or small values in scientific notation.
std::string tick_label(double value, double step);

// `text` with &, <, > and " as HTML writes them, for text and attribute values alike.
std::string escape_html(const std::string& text);

}  // namespace dpt::report
