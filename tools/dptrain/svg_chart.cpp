#include "svg_chart.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace dpt::report {

std::string escape_html(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

Ticks round_ticks(double lo, double hi, int most) {
  if (hi <= lo) hi = lo + 1;
  const double rough = (hi - lo) / most;
  const double power = std::pow(10.0, std::floor(std::log10(rough)));
  double step = 10 * power;
  for (const double m : {1.0, 2.0, 2.5, 5.0}) {
    if (m * power >= rough * (1 - 1e-9)) {
      step = m * power;
      break;
    }
  }
  return {std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step, step};
}

std::string tick_label(double value, double step) {
  if (std::abs(value) < step * 1e-6) value = 0;
  if (value != 0 && (std::abs(value) >= 1e9 || std::abs(value) < 1e-4)) return fmt::format("{:.2g}", value);
  int decimals = 0;  // as many as the step has: 2.5 -> 1, 0.0005 -> 4
  for (double scaled = step; decimals < 8 && std::abs(scaled - std::round(scaled)) > 1e-6; scaled *= 10) ++decimals;
  return fmt::format("{:.{}f}", value, decimals);
}

std::string line_chart(const std::string& title, const std::vector<Series>& series, YAxis y_axis) {
  constexpr double kWidth = 560, kHeight = 250, kLeft = 64, kRight = kWidth - 12, kTop = 30, kBottom = kHeight - 34;
  double x_min = 0, x_max = 0, y_top = 0;
  bool any = false;
  for (const auto& s : series) {
    for (const auto& [x, y] : *s.points) {
      x_min = any ? std::min(x_min, x) : x;
      x_max = any ? std::max(x_max, x) : x;
      y_top = std::max(y_top, y);
      any = true;
    }
  }
  const Ticks x_ticks = round_ticks(x_min, x_max, 6);
  x_min = x_ticks.first;
  x_max = x_ticks.last;
  const Ticks y_ticks = y_axis == YAxis::Percent ? Ticks{0, 100, 20} : round_ticks(0, y_top > 0 ? y_top : 1, 5);
  const double y_min = 0, y_max = y_ticks.last;
  auto px = [&](double x) { return kLeft + (x - x_min) / (x_max - x_min) * (kRight - kLeft); };
  auto py = [&](double y) { return kBottom - (y - y_min) / (y_max - y_min) * (kBottom - kTop); };

  std::string svg = fmt::format(
      R"(<svg class="chart" width="{}" height="{}" viewBox="0 0 {} {}" data-title="{}" data-x-min="{}" )"
      R"(data-x-max="{}" data-y-min="{}" data-y-max="{}" )"
      R"(data-left="{}" data-right="{}" data-top="{}" data-bottom="{}">)",
      kWidth, kHeight, kWidth, kHeight, escape_html(title), x_min, x_max, y_min, y_max, kLeft, kRight, kTop, kBottom);
  svg += fmt::format(R"(<text x="{}" y="18" class="title">{}</text>)", kLeft, escape_html(title));
  for (double y = y_ticks.first; y <= y_ticks.last + y_ticks.step * 1e-6; y += y_ticks.step) {
    svg += fmt::format(R"(<line x1="{}" x2="{}" y1="{:.2f}" y2="{:.2f}" class="grid"/>)", kLeft, kRight, py(y), py(y));
    svg += fmt::format(R"(<text x="{}" y="{:.2f}" class="tick y" text-anchor="end">{}</text>)", kLeft - 6, py(y) + 4,
                       tick_label(y, y_ticks.step));
  }
  for (double x = x_ticks.first; x <= x_ticks.last + x_ticks.step * 1e-6; x += x_ticks.step) {
    svg += fmt::format(R"(<text x="{:.2f}" y="{}" class="tick x" text-anchor="middle">{}</text>)", px(x), kBottom + 16,
                       tick_label(x, x_ticks.step));
  }
  svg += fmt::format(R"(<text x="{}" y="{}" class="tick" text-anchor="middle">global step</text>)",
                     (kLeft + kRight) / 2, kHeight - 4);
  // The legend follows the title, above the plot, where no point can hide it.
  double legend_x = kLeft + 9.0 * static_cast<double>(title.size()) + 20;
  for (const auto& s : series) {
    if (s.points->empty()) continue;
    std::string points;
    for (const auto& [x, y] : *s.points) points += fmt::format("{:.2f},{:.2f} ", px(x), py(y));
    points.pop_back();
    svg += fmt::format(R"(<polyline class="series" data-series="{}" points="{}" stroke="{}"/>)", escape_html(s.name),
                       points, s.color);
    // A line of one point has no length and would not be drawn: it gets its dot.
    if (s.markers || s.points->size() == 1) {
      for (const auto& [x, y] : *s.points) {
        svg += fmt::format(
            R"(<circle cx="{:.2f}" cy="{:.2f}" r="3" fill="{}"><title>{} at step {:.0f}: {:.6g}</title></circle>)",
            px(x), py(y), s.color, escape_html(s.name), x, y);
      }
    }
    svg += fmt::format(R"(<text x="{:.0f}" y="18" class="legend" fill="{}">{}</text>)", legend_x, s.color,
                       escape_html(s.name));
    legend_x += 6.5 * static_cast<double>(s.name.size()) + 14;
  }
  if (!any) svg += fmt::format(R"(<text x="{}" y="{}" class="tick">no records</text>)", kLeft + 10, kHeight / 2);
  return svg + "</svg>\n";
}

}  // namespace dpt::report
