// The SVG chart writer behind `outbox-dev bench --svg`: plain string building, no plotting library.

#include "svg_plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace outbox::cli {
namespace {

// Canvas and plot area, in pixels. The legend sits to the right of the plot area.
constexpr double kWidth = 800, kHeight = 450;
constexpr double kPlotLeft = 70, kPlotRight = 630, kPlotTop = 40, kPlotBottom = 395;
constexpr int kMaxTicks = 8, kMinTicks = 5;
constexpr std::size_t kMaxMarkedPoints = 50;  // denser series get a line without dots

// Tableau 10: distinct, colour-blind friendly; series beyond ten reuse colours.
constexpr std::array<std::string_view, 10> kPalette = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                       "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                                                       "#9c755f", "#bab0ac"};

// Text safe in element content and in attribute values (which this file always double-quotes).
std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    const std::string_view entity = c == '&'   ? "&amp;"
                                    : c == '<' ? "&lt;"
                                    : c == '>' ? "&gt;"
                                    : c == '"' ? "&quot;"
                                               : "";
    out += entity.empty() ? std::string_view(&c, 1) : entity;
  }
  return out;
}

// `v` to `digits` significant digits with a k/M/G/T suffix: 1500 -> "1.5k", 0.25 -> "0.25".
std::string compact(double v, int digits) {
  if (v == 0) return "0";  // also catches -0
  // Round before picking the suffix, so that 999999 reads "1M" rather than "1e+03k".
  const std::string rounded_text = fmt::format("{:.{}g}", v, digits);
  double rounded = v;
  std::from_chars(rounded_text.data(), rounded_text.data() + rounded_text.size(), rounded);
  constexpr std::pair<double, std::string_view> kSuffixes[] = {
      {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  if (std::abs(rounded) < 1e15) {
    for (const auto& [scale, suffix] : kSuffixes)
      if (std::abs(rounded) >= scale)
        return fmt::format("{:.{}g}{}", rounded / scale, digits, suffix);
  }
  return fmt::format("{:.{}g}", rounded, digits);
}

// Labels for sorted ticks: three significant digits, more if neighbours would read the same.
std::vector<std::string> tick_labels(const std::vector<double>& ticks) {
  for (int digits = 3;; ++digits) {
    std::vector<std::string> labels;
    for (double t : ticks) labels.push_back(compact(t, digits));
    if (digits >= 15 || std::adjacent_find(labels.begin(), labels.end()) == labels.end())
      return labels;
  }
}

// One axis: its extent (which always ends on ticks) and how values map to pixels.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;

  // Maps `v` in [lo, hi] linearly (or logarithmically) onto [px_lo, px_hi].
  double to_px(double v, double px_lo, double px_hi) const {
    const double f = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
                         : (v - lo) / (hi - lo);
    return px_lo + f * (px_hi - px_lo);
  }
};

// A linear axis covering [lo, hi], widened to whole steps of the smallest 1-2-5 x 10^k step that
// yields at most kMaxTicks ticks, then (if that left fewer than kMinTicks) widened upwards.
Axis linear_axis(double lo, double hi) {
  if (!(hi > lo)) {  // one value: give it a non-zero range around itself
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  // range / base is in [10, 100), so the search starts at too many ticks and ends within six steps.
  const double base = std::pow(10.0, std::floor(std::log10(hi - lo)) - 1);
  constexpr double kMultipliers[] = {1, 2, 5};
  Axis axis;
  for (int i = 0;; ++i) {
    const double step = base * kMultipliers[i % 3] * std::pow(10.0, i / 3);
    // The epsilon absorbs rounding, so that 0.3 / 0.1 counts as 3 steps rather than 4.
    const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
    const int count = static_cast<int>(last - first) + 1;
    if (count > kMaxTicks) continue;
    for (int k = 0; k < std::max(count, kMinTicks); ++k) axis.ticks.push_back((first + k) * step);
    break;
  }
  axis.lo = axis.ticks.front();
  axis.hi = axis.ticks.back();
  return axis;
}

// A log axis from the decade at or below lo to the decade at or above hi. Narrow spans (at most two
// decades) also get 2x and 5x ticks; wide ones label every n-th decade to stay within kMaxTicks.
Axis log_axis(double lo, double hi) {
  double first = std::floor(std::log10(lo)), last = std::ceil(std::log10(hi));
  if (first == last) {  // every x is the same power of ten: centre it in two decades
    first -= 1;
    last += 1;
  }
  Axis axis;
  axis.log = true;
  const double decades = last - first;
  if (decades <= 2) {
    for (double d = first; d < last; ++d)
      for (double m : {1.0, 2.0, 5.0}) axis.ticks.push_back(m * std::pow(10.0, d));
    axis.ticks.push_back(std::pow(10.0, last));
  } else {
    const double stride = std::ceil(decades / (kMaxTicks - 1));
    const int count = static_cast<int>(std::ceil(decades / stride)) + 1;
    for (int k = 0; k < count; ++k) axis.ticks.push_back(std::pow(10.0, first + k * stride));
  }
  axis.lo = axis.ticks.front();
  axis.hi = axis.ticks.back();
  return axis;
}

// The points of `series` that can be drawn: finite, and with x > 0 on a log axis.
std::vector<std::pair<double, double>> drawable(const Series& series, bool log_x) {
  std::vector<std::pair<double, double>> out;
  for (const auto& [x, y] : series.points)
    if (std::isfinite(x) && std::isfinite(y) && (!log_x || x > 0)) out.emplace_back(x, y);
  return out;
}

// Opening tag, white background and title: shared by charts with and without data.
std::string document_head(const std::string& title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">{3}</text>\n",
      kWidth, kHeight, kWidth / 2, escape(title));
}

}  // namespace

std::string render_svg(const Chart& chart) {
  // Keep only drawable points, and find the data's extent.
  std::vector<std::vector<std::pair<double, double>>> points;
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const Series& series : chart.series) {
    points.push_back(drawable(series, chart.log_x));
    for (const auto& [x, y] : points.back()) {
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  }

  std::string svg = document_head(chart.title);
  if (!(x_lo <= x_hi)) {  // not a single drawable point
    svg += fmt::format(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\" fill=\"#666\">no "
        "data</text>\n</svg>\n",
        kWidth / 2, kHeight / 2);
    return svg;
  }

  const Axis x_axis = chart.log_x ? log_axis(x_lo, x_hi) : linear_axis(x_lo, x_hi);
  const Axis y_axis = linear_axis(y_lo, y_hi);
  const auto px = [&](double x) { return x_axis.to_px(x, kPlotLeft, kPlotRight); };
  const auto py = [&](double y) { return y_axis.to_px(y, kPlotBottom, kPlotTop); };

  // Grid lines and tick labels.
  const std::vector<std::string> x_labels = tick_labels(x_axis.ticks);
  for (std::size_t i = 0; i < x_axis.ticks.size(); ++i) {
    const double x = px(x_axis.ticks[i]);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        x, kPlotTop, kPlotBottom, kPlotBottom + 18, x_labels[i]);
  }
  const std::vector<std::string> y_labels = tick_labels(y_axis.ticks);
  for (std::size_t i = 0; i < y_axis.ticks.size(); ++i) {
    const double y = py(y_axis.ticks[i]);
    svg += fmt::format(
        "<line x1=\"{1}\" y1=\"{0:.1f}\" x2=\"{2}\" y2=\"{0:.1f}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{3}\" y=\"{0:.1f}\" dy=\"0.35em\" text-anchor=\"end\">{4}</text>\n",
        y, kPlotLeft, kPlotRight, kPlotLeft - 8, y_labels[i]);
  }

  // Axes and their labels (the y label reads bottom to top).
  svg += fmt::format(
      "<path d=\"M{0} {2}V{3}H{1}\" fill=\"none\" stroke=\"#333\"/>\n"
      "<text x=\"{4}\" y=\"{5}\" text-anchor=\"middle\">{6}</text>\n"
      "<text transform=\"translate(18 {7}) rotate(-90)\" text-anchor=\"middle\">{8}</text>\n",
      kPlotLeft, kPlotRight, kPlotTop, kPlotBottom, (kPlotLeft + kPlotRight) / 2, kHeight - 14,
      escape(chart.x_label), (kPlotTop + kPlotBottom) / 2, escape(chart.y_label));

  // One polyline per series (dots mark sparse ones), and its legend entry.
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const std::string_view colour = kPalette[i % kPalette.size()];
    const double legend_y = kPlotTop + 10 + 20 * static_cast<double>(i);
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"/>\n"
        "<text x=\"{4}\" y=\"{1}\" dy=\"0.35em\">{5}{6}</text>\n",
        kPlotRight + 15, legend_y, kPlotRight + 35, colour, kPlotRight + 40,
        escape(chart.series[i].name), points[i].empty() ? " (no data)" : "");
    if (points[i].empty()) continue;
    std::string coords;
    for (const auto& [x, y] : points[i])
      coords += fmt::format("{}{:.1f},{:.1f}", coords.empty() ? "" : " ", px(x), py(y));
    svg += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" "
        "stroke-linejoin=\"round\"/>\n",
        coords, colour);
    if (points[i].size() > kMaxMarkedPoints) continue;
    for (const auto& [x, y] : points[i])
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(x),
                         py(y), colour);
  }
  svg += "</svg>\n";
  return svg;
}

void write_svg(const std::string& path, const Chart& chart) {
  const std::string svg = render_svg(chart);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr)
    throw std::runtime_error(
        fmt::format("cannot open {} for writing: {}", path, std::strerror(errno)));
  const bool written = std::fwrite(svg.data(), 1, svg.size(), file) == svg.size();
  const int write_errno = errno;
  if (std::fclose(file) != 0 || !written)
    throw std::runtime_error(fmt::format("cannot write chart to {}: {}", path,
                                         std::strerror(written ? errno : write_errno)));
}

}  // namespace outbox::cli
