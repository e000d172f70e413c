#include <gtest/gtest.h>

#include <string>

#include "svg_chart.h"

using namespace dpt::report;

// Ticks at 1, 2, 2.5 or 5 times a power of ten, the axis widened to whole steps.
TEST(SvgChart, TicksFallOnRoundNumbers) {
  const Ticks steps = round_ticks(0, 1220, 6);  // 203 per interval at the least: 250
  EXPECT_DOUBLE_EQ(steps.step, 250);
  EXPECT_DOUBLE_EQ(steps.first, 0);
  EXPECT_DOUBLE_EQ(steps.last, 1250);
  const Ticks loss = round_ticks(0, 2.31, 5);  // 0.462 at the least: 0.5
  EXPECT_DOUBLE_EQ(loss.step, 0.5);
  EXPECT_DOUBLE_EQ(loss.last, 2.5);
  const Ticks offset = round_ticks(1003, 1997, 6);  // 165.7 at the least: 200, from 1000 to 2000
  EXPECT_DOUBLE_EQ(offset.step, 200);
  EXPECT_DOUBLE_EQ(offset.first, 1000);
  EXPECT_DOUBLE_EQ(offset.last, 2000);
  const Ticks flat = round_ticks(3, 3, 5);  // one value: an axis of width 1 above it
  EXPECT_DOUBLE_EQ(flat.first, 3);
  EXPECT_DOUBLE_EQ(flat.last, 4);
  EXPECT_DOUBLE_EQ(flat.step, 0.2);
}

// As many decimals as the step has; whole numbers in full; the extremes in scientific notation.
TEST(SvgChart, TickLabelsShowTheStepsDecimals) {
  EXPECT_EQ(tick_label(1250, 250), "1250");
  EXPECT_EQ(tick_label(1.5, 0.5), "1.5");
  EXPECT_EQ(tick_label(0.25, 0.25), "0.25");
  EXPECT_EQ(tick_label(0.0005, 0.0005), "0.0005");
  EXPECT_EQ(tick_label(2, 0.5), "2.0");
  EXPECT_EQ(tick_label(1e-12, 0.5), "0.0") << "a sum's rounding error is zero";
  EXPECT_EQ(tick_label(2e9, 1e9), "2e+09");
  EXPECT_EQ(tick_label(5e-5, 5e-5), "5e-05");
}

TEST(SvgChart, EscapesTextForHtml) {
  EXPECT_EQ(escape_html(R"(<b class="x">a & b</b>)"), "&lt;b class=&quot;x&quot;&gt;a &amp; b&lt;/b&gt;");
  EXPECT_EQ(escape_html("plain"), "plain");
}

// The chart's data attributes carry its ranges; a series' points land inside the plot.
TEST(SvgChart, ChartsSayTheirRangesAndDrawEverySeries) {
  const Points loss = {{100, 2.31}, {200, 2.02}, {300, 1.5}};
  const Points none;
  const std::string svg =
      line_chart("loss <train>", {{"train", "#1f77b4", &loss, false}, {"val", "#ff7f0e", &none, true}});
  EXPECT_NE(svg.find(R"(data-title="loss &lt;train&gt;" data-x-min="100" data-x-max="300" )"
                     R"(data-y-min="0" data-y-max="2.5")"),
            std::string::npos)
      << svg;
  EXPECT_NE(svg.find(R"(<polyline class="series" data-series="train" points=")"), std::string::npos) << svg;
  EXPECT_EQ(svg.find(R"(data-series="val")"), std::string::npos) << "a series without points draws nothing";
  EXPECT_EQ(svg.find("<circle"), std::string::npos) << "steps are a line without dots";
  const std::string percent = line_chart("top-1 (%)", {{"val", "#ff7f0e", &loss, true}}, YAxis::Percent);
  EXPECT_NE(percent.find(R"(data-y-max="100")"), std::string::npos) << percent;
  EXPECT_NE(percent.find("<circle"), std::string::npos) << "epochs get a dot each";
  EXPECT_NE(line_chart("empty", {}).find("no records"), std::string::npos);
}
