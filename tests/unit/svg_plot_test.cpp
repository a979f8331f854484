// render_svg / write_svg: the document is complete, text is escaped, every drawable point is
// plotted and nothing else is, and the axes read as round numbers.

#include "outbox-dev/svg_plot.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "contains.hpp"

namespace outbox::cli {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size()))
    ++n;
  return n;
}

// The number of points in each <polyline points="..."> of the document, in order.
std::vector<int> polyline_sizes(const std::string& svg) {
  const std::string open = "<polyline points=\"";
  std::vector<int> sizes;
  for (auto at = svg.find(open); at != std::string::npos; at = svg.find(open, at + 1)) {
    const auto begin = at + open.size();
    const std::string coords = svg.substr(begin, svg.find('"', begin) - begin);
    sizes.push_back(coords.empty() ? 0 : count_of(coords, " ") + 1);
  }
  return sizes;
}

// The texts of the y axis's tick labels (the only right-aligned text in a chart).
std::vector<std::string> y_tick_labels(const std::string& svg) {
  const std::string open = "text-anchor=\"end\">";
  std::vector<std::string> labels;
  for (auto at = svg.find(open); at != std::string::npos; at = svg.find(open, at + 1)) {
    const auto begin = at + open.size();
    labels.push_back(svg.substr(begin, svg.find('<', begin) - begin));
  }
  return labels;
}

Chart line_chart(std::vector<std::pair<double, double>> points) {
  Chart chart;
  chart.title = "throughput";
  chart.series.push_back({"relay", std::move(points)});
  return chart;
}

void expect_document(const std::string& svg) {
  EXPECT_EQ(svg.rfind("<svg", 0), 0u) << svg.substr(0, 40);
  ASSERT_GE(svg.size(), 7u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count_of(svg, "<svg"), 1);
  EXPECT_FALSE(contains(svg, "nan")) << "a NaN reached the document";
  EXPECT_FALSE(contains(svg, "inf")) << "an infinity reached the document";
}

TEST(SvgPlot, IsOneCompleteDocumentOfTheStatedSize) {
  const std::string svg = render_svg(line_chart({{1, 10}, {2, 20}, {3, 15}}));
  expect_document(svg);
  EXPECT_TRUE(contains(svg, "width=\"800\" height=\"450\""));
  EXPECT_TRUE(contains(svg, ">throughput</text>"));
}

TEST(SvgPlot, EscapesTitleLabelsAndLegendNames) {
  Chart chart = line_chart({{1, 1}, {2, 2}});
  chart.title = "<a&b>";
  chart.x_label = "batch \"size\"";
  chart.y_label = "events/s > 0";
  chart.series[0].name = "p99 <ms> & more";
  const std::string svg = render_svg(chart);
  expect_document(svg);
  EXPECT_TRUE(contains(svg, "&lt;a&amp;b&gt;"));
  EXPECT_FALSE(contains(svg, "<a&b>"));
  EXPECT_TRUE(contains(svg, "batch &quot;size&quot;"));
  EXPECT_TRUE(contains(svg, "events/s &gt; 0"));
  EXPECT_TRUE(contains(svg, "p99 &lt;ms&gt; &amp; more"));
}

TEST(SvgPlot, DrawsOnePolylinePerSeriesWithEveryPointAndALegend) {
  Chart chart;
  chart.series.push_back({"one relay", {{1, 100}, {2, 180}, {4, 300}}});
  chart.series.push_back({"two relays", {{1, 150}, {2, 290}, {4, 500}, {8, 800}, {16, 900}}});
  chart.series.push_back({"three relays", {{1, 160}, {2, 300}}});
  const std::string svg = render_svg(chart);
  expect_document(svg);
  EXPECT_EQ(polyline_sizes(svg), (std::vector<int>{3, 5, 2}));
  EXPECT_TRUE(contains(svg, ">one relay</text>"));
  EXPECT_TRUE(contains(svg, ">two relays</text>"));
  EXPECT_TRUE(contains(svg, ">three relays</text>"));

  // Each series has its own colour.
  std::set<std::string> colours;
  const std::string stroke = "fill=\"none\" stroke=\"";
  for (auto at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    const auto begin = svg.find(stroke, at) + stroke.size();
    colours.insert(svg.substr(begin, svg.find('"', begin) - begin));
  }
  EXPECT_EQ(colours.size(), 3u);
}

TEST(SvgPlot, LogAxisSkipsNonPositiveXAndTicksDecades) {
  Chart chart = line_chart({{-5, 1}, {0, 2}, {1, 3}, {10, 4}, {100, 5}, {1000, 6}});
  chart.log_x = true;
  const std::string svg = render_svg(chart);
  expect_document(svg);
  EXPECT_EQ(polyline_sizes(svg), std::vector<int>{4});
  for (const char* decade : {">1</text>", ">10</text>", ">100</text>", ">1k</text>"})
    EXPECT_TRUE(contains(svg, decade));

  // The same points on a linear axis keep all six.
  chart.log_x = false;
  EXPECT_EQ(polyline_sizes(render_svg(chart)), std::vector<int>{6});
}

TEST(SvgPlot, SaysNoDataForAnEmptyChartOrSeries) {
  for (const Chart& chart : {Chart{}, line_chart({}), line_chart({{kNaN, 1}, {2, kInf}})}) {
    const std::string svg = render_svg(chart);
    expect_document(svg);
    EXPECT_TRUE(contains(svg, "no data"));
    EXPECT_TRUE(polyline_sizes(svg).empty());
  }

  // An empty series beside a drawn one: the legend says so.
  Chart chart = line_chart({{1, 1}, {2, 2}});
  chart.series.push_back({"idle", {}});
  const std::string svg = render_svg(chart);
  expect_document(svg);
  EXPECT_EQ(polyline_sizes(svg), std::vector<int>{2});
  EXPECT_TRUE(contains(svg, ">idle (no data)</text>"));
}

TEST(SvgPlot, TicksAreFiveToEightRoundCompactNumbers) {
  const std::string svg = render_svg(line_chart({{0, 0}, {1500, 900}, {3000, 2000}}));
  expect_document(svg);
  const std::vector<std::string> labels = y_tick_labels(svg);
  EXPECT_GE(labels.size(), 5u);
  EXPECT_LE(labels.size(), 8u);
  EXPECT_TRUE(contains(svg, ">1k</text>") || contains(svg, ">2k</text>")) << svg;
  EXPECT_TRUE(contains(svg, ">1.5k</text>")) << "x axis 0..3000 in steps of 500";

  // 0..1500 fits neither 200s (nine ticks) nor 500s (four): the axis widens to 0..2000.
  const std::vector<std::string> widened =
      y_tick_labels(render_svg(line_chart({{0, 0}, {1, 1500}})));
  EXPECT_GE(widened.size(), 5u);
  EXPECT_LE(widened.size(), 8u);

  const std::string big = render_svg(line_chart({{0, 0}, {2000000, 0.25}}));
  EXPECT_TRUE(contains(big, ">2M</text>"));
  EXPECT_TRUE(contains(big, ">0.25</text>"));
}

TEST(SvgPlot, SkipsNaNAndInfinitePoints) {
  const std::string svg =
      render_svg(line_chart({{1, 10}, {2, kNaN}, {kNaN, 5}, {3, kInf}, {-kInf, 1}, {4, 40}}));
  expect_document(svg);
  EXPECT_EQ(polyline_sizes(svg), std::vector<int>{2});
  // The y axis spans the finite values only: 10..40, not up to infinity.
  const std::vector<std::string> labels = y_tick_labels(svg);
  ASSERT_FALSE(labels.empty());
  EXPECT_EQ(labels.back(), "40");
}

TEST(SvgPlot, GivesASinglePointOrFlatSeriesANonZeroRange) {
  for (const Chart& chart :
       {line_chart({{5, 7}}), line_chart({{1, 3}, {2, 3}, {3, 3}}), line_chart({{1, 0}, {2, 0}})}) {
    const std::string svg = render_svg(chart);
    expect_document(svg);
    EXPECT_EQ(polyline_sizes(svg).size(), 1u);
    const std::vector<std::string> labels = y_tick_labels(svg);
    EXPECT_GE(labels.size(), 5u) << svg;
    EXPECT_EQ(std::set<std::string>(labels.begin(), labels.end()).size(), labels.size())
        << "tick labels repeat";
  }
}

TEST(SvgPlot, WriteNamesThePathItCouldNotWrite) {
  const std::string path = "/nonexistent-outbox-dir/chart.svg";
  try {
    write_svg(path, line_chart({{1, 1}}));
    FAIL() << "wrote to " << path;
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), path));
  }
}

}  // namespace
}  // namespace outbox::cli
