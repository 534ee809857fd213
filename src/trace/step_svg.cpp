#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "lockstep/trace/summary.h"
#include "report_style.h"

namespace lockstep::trace {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A tick step of 1, 2 or 5 x 10^k giving about five ticks up to `top`.
double tick_step(double top) {
  if (top <= 0) return 1;
  const double raw = top / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

}  // namespace

std::string step_breakdown_svg(const ProfileSummary& s) {
  constexpr double kWidth = 900, kHeight = 380;
  constexpr double kLeft = 64, kRight = 700, kTop = 44, kBottom = 320;
  std::string out =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"380\" "
      "viewBox=\"0 0 900 380\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out += "<rect width=\"" + num(kWidth) + "\" height=\"" + num(kHeight) + "\" fill=\"white\"/>\n";
  out += "<text x=\"" + num(kLeft) +
         "\" y=\"22\" font-size=\"15\" font-weight=\"bold\">"
         "Step time by phase (worker 0, the thread that ran each step)</text>\n";
  const auto& steps = s.timeline;
  if (steps.empty()) {
    out += "<text x=\"" + num(kLeft) + "\" y=\"80\">No step was recorded.</text>\n</svg>\n";
    return out;
  }
  // Many steps: bars of consecutive steps (their mean), at most 300.
  const size_t bins = std::min<size_t>(steps.size(), 300);
  const size_t per = (steps.size() + bins - 1) / bins;
  struct Bar {
    int64_t first, last;
    std::array<double, profiler::kNumPhases> ms{};
    double total = 0;
  };
  std::vector<Bar> bars;
  for (size_t i = 0; i < steps.size(); i += per) {
    Bar b;
    b.first = steps[i].step;
    const size_t end = std::min(steps.size(), i + per);
    b.last = steps[end - 1].step;
    for (size_t j = i; j < end; ++j)
      for (size_t p = 0; p < b.ms.size(); ++p) b.ms[p] += steps[j].ms[p];
    for (double& v : b.ms) v /= static_cast<double>(end - i);
    for (double v : b.ms) b.total += v;
    bars.push_back(b);
  }
  double top = 0;
  for (const Bar& b : bars) top = std::max(top, b.total);
  const double step_ms = tick_step(top);
  top = std::max(step_ms, std::ceil(top / step_ms) * step_ms);
  const double plot_h = kBottom - kTop, plot_w = kRight - kLeft;
  auto y_of = [&](double v) { return kBottom - v / top * plot_h; };

  // Axes and grid.
  for (double v = 0; v <= top + step_ms / 2; v += step_ms) {
    out += "<line x1=\"" + num(kLeft) + "\" x2=\"" + num(kRight) + "\" y1=\"" + num(y_of(v)) +
           "\" y2=\"" + num(y_of(v)) + "\" stroke=\"#e5e5e5\"/>\n";
    out += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(y_of(v) + 4) +
           "\" text-anchor=\"end\">" + report_style::short_number(v) + "</text>\n";
  }
  out += "<text transform=\"translate(16," + num((kTop + kBottom) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">ms per step</text>\n";

  const double w = plot_w / static_cast<double>(bars.size());
  const double gap = bars.size() < 60 ? w * 0.15 : 0;
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const double x = kLeft + static_cast<double>(i) * w + gap / 2;
    double base = 0;
    std::string label = b.first == b.last
                            ? "step " + std::to_string(b.first)
                            : "steps " + std::to_string(b.first) + "-" + std::to_string(b.last);
    out += "<g><title>" + label + ": " + num(b.total) + " ms</title>\n";
    for (const report_style::PhaseStyle& ps : report_style::phases()) {
      const double v = b.ms[static_cast<size_t>(ps.phase)];
      if (v <= 0) continue;
      out += "<rect x=\"" + num(x) + "\" y=\"" + num(y_of(base + v)) + "\" width=\"" +
             num(std::max(w - gap, 0.5)) + "\" height=\"" + num(v / top * plot_h) + "\" fill=\"" +
             ps.color + "\"/>\n";
      base += v;
    }
    out += "</g>\n";
  }
  out += "<line x1=\"" + num(kLeft) + "\" x2=\"" + num(kRight) + "\" y1=\"" + num(kBottom) +
         "\" y2=\"" + num(kBottom) + "\" stroke=\"black\"/>\n";
  // Step numbers under the first, middle and last bars.
  for (size_t i : {size_t{0}, bars.size() / 2, bars.size() - 1}) {
    const double x = kLeft + (static_cast<double>(i) + 0.5) * w;
    out += "<text x=\"" + num(x) + "\" y=\"" + num(kBottom + 16) + "\" text-anchor=\"middle\">" +
           std::to_string(bars[i].first) + "</text>\n";
    if (bars.size() == 1) break;
  }
  out += "<text x=\"" + num((kLeft + kRight) / 2) + "\" y=\"" + num(kBottom + 36) +
         "\" text-anchor=\"middle\">step" +
         (per > 1 ? " (each bar the mean of " + std::to_string(per) + " steps)" : std::string()) +
         "</text>\n";
  // Legend, top to bottom as the bars stack bottom to top.
  double ly = kTop;
  const auto& styles = report_style::phases();
  for (auto it = styles.rbegin(); it != styles.rend(); ++it) {
    out += "<rect x=\"720\" y=\"" + num(ly) + "\" width=\"14\" height=\"14\" fill=\"" + it->color +
           "\"/><text x=\"740\" y=\"" + num(ly + 11) + "\">" + it->label + "</text>\n";
    ly += 22;
  }
  out += "</svg>\n";
  return out;
}

}  // namespace lockstep::trace
