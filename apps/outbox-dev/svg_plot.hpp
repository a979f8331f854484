#pragma once
// A small, dependency-free SVG line-chart writer for `outbox-dev bench` results.

#include <string>
#include <utility>
#include <vector>

namespace outbox::cli {

struct Series {
  std::string name;                               // legend label
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;  // logarithmic x axis (values must be > 0; non-positive points are skipped)
  std::vector<Series> series;
};

// A complete standalone SVG document (width 800, height 450 px): axes with 5-8 "nice" tick values
// (1, 2, 5 x 10^k steps; for log axes decades 1,10,100...), tick labels, axis labels, title, a
// polyline per series in distinct colours, a legend. Empty charts or series still produce a valid
// document saying "no data". Points with a NaN or infinite coordinate are skipped.
std::string render_svg(const Chart& chart);

// Writes render_svg(chart) to `path`; throws std::runtime_error naming the path on failure.
void write_svg(const std::string& path, const Chart& chart);

}  // namespace outbox::cli
