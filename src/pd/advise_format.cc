// The reports of `toposched advise`: the text table, the JSON document and the transfer-time
// SVG, and the number formats they share with the advice's reasons (advise_internal.h).

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "advise_internal.h"
#include "toposched/pd/advise.h"

namespace toposched::pd {

namespace advise_internal {

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}
std::string Ms(double seconds) {
  const double ms = seconds * 1000.0;
  if (ms >= 100) return Fmt("%.0f ms", ms);
  if (ms >= 1) return Fmt("%.1f ms", ms);
  return Fmt("%.2f ms", ms);
}
std::string Pct(double f) {
  return f < 0.01 && f > 0 ? Fmt("%.1f%%", 100.0 * f) : Fmt("%.0f%%", 100.0 * f);
}
std::string Rps(double r) {
  return r >= 10 ? Fmt("%.1f rps", r) : Fmt("%.2f rps", r);
}
std::string Ratio(const OptionEstimate& o) {
  return std::to_string(o.prefill_instances) + ":" + std::to_string(o.decode_instances);
}

}  // namespace advise_internal

using advise_internal::EndpointsOf;
using advise_internal::Fmt;
using advise_internal::PathsOf;
using advise_internal::Pct;
using advise_internal::Ratio;
using advise_internal::Rps;

std::string FormatAdviceTable(const AdviseInput& in, const Advice& advice) {
  std::ostringstream s;
  s << "model:    " << in.model.name << Fmt(" (%.1fB params, ", in.model.params_billion)
    << Fmt("%.0f KiB KV/token)\n", advice.kv_bytes_per_token / 1024.0);
  s << "cluster:  " << in.total_gpus << " x " << in.gpu.name << ", " << in.gpus_per_instance
    << " per instance" << (in.cluster_description.empty() ? "" : "; " + in.cluster_description) << "\n";
  s << "workload: prompt " << in.prompt.spec << Fmt(" (mean %.0f", in.prompt.Mean())
    << Fmt(", P99 %.0f)", in.prompt.Quantile(0.99)) << ", output " << in.output.spec
    << Fmt(" (mean %.0f)", in.output.Mean()) << ", " << Rps(in.rate_rps) << "; targets P99 TTFT "
    << Fmt("%.0f ms", in.ttft_p99_ms) << ", P99 TPOT " << Fmt("%.0f ms", in.tpot_p99_ms) << "\n";
  s << "(an analytic estimate, not a measurement: see 'uncertain' below and docs/advise.md)\n\n";
  constexpr int kNameWidth = 34;
  char line[256];
  std::snprintf(line, sizeof line, "%-*s %5s %9s %9s %6s %9s %9s %6s %6s %8s %4s\n", kNameWidth, "option",
                "P:D", "KV mean", "KV P99", "KV/TT", "TTFT P99", "TPOT P99", "util", "batch", "max rps",
                "SLO");
  s << line;
  for (const OptionEstimate& o : advice.options) {
    const bool co = o.name == "co-located";
    const std::string ratio = co ? "-" : Ratio(o);
    auto ms = [&](double v, bool show) { return show ? Fmt("%.1f", v) : std::string("-"); };
    std::snprintf(
        line, sizeof line, "%-*s %5s %9s %9s %6s %9s %9s %6s %6s %8s %4s\n", kNameWidth, o.name.c_str(),
        ratio.c_str(), ms(o.kv_transfer_ms_mean, !co).c_str(), ms(o.kv_transfer_ms_p99, !co).c_str(),
        co || !o.stable ? "-" : Pct(o.kv_share_of_ttft).c_str(), ms(o.ttft_p99_ms, o.stable).c_str(),
        ms(o.tpot_p99_ms, o.stable).c_str(), Pct(std::min(o.prefill_utilisation, 9.99)).c_str(),
        o.stable ? Fmt("%.1f", o.decode_batch).c_str() : "-", Fmt("%.2f", o.max_rate_rps).c_str(),
        o.meets_slo ? "yes" : "no");
    s << line;
  }
  s << "(KV, TTFT and TPOT in ms; KV/TT: share of the P99 TTFT; util: prefill utilisation; batch: decode "
       "batch;\n"
       " max rps: the highest rate meeting both targets, P:D re-chosen at each rate)\n\n";
  s << "verdict: " << advice.verdict << "\n\nwhy:\n";
  for (const std::string& r : advice.reasons) s << "  - " << r << "\n";
  s << "\nuncertain:\n";
  for (const std::string& u : advice.uncertain) s << "  - " << u << "\n";
  return s.str();
}

std::string FormatAdviceJson(const AdviseInput& in, const Advice& advice) {
  nlohmann::json j;
  j["meaning"] = "analytic estimate, not a measurement";
  j["model"] = {{"name", in.model.name},
                {"layers", in.model.layers},
                {"kvHeads", in.model.kv_heads},
                {"headDim", in.model.head_dim},
                {"dtypeBytes", in.model.dtype_bytes},
                {"paramsBillion", in.model.params_billion}};
  j["gpu"] = {{"name", in.gpu.name},        {"peakTflops", in.gpu.peak_tflops},
              {"hbmGBps", in.gpu.hbm_gbps}, {"hbmGiB", in.gpu.hbm_gib},
              {"mfu", in.gpu.mfu},          {"mbu", in.gpu.mbu}};
  j["cluster"] = {{"totalGpus", in.total_gpus},
                  {"gpusPerInstance", in.gpus_per_instance},
                  {"description", in.cluster_description}};
  j["workload"] = {{"prompt", in.prompt.spec},
                   {"promptMean", in.prompt.Mean()},
                   {"promptP99", in.prompt.Quantile(0.99)},
                   {"output", in.output.spec},
                   {"outputMean", in.output.Mean()},
                   {"rateRps", in.rate_rps},
                   {"ttftP99Ms", in.ttft_p99_ms},
                   {"tpotP99Ms", in.tpot_p99_ms}};
  j["kvBytesPerToken"] = advice.kv_bytes_per_token;
  j["options"] = nlohmann::json::array();
  for (const OptionEstimate& o : advice.options) {
    const bool co = o.name == "co-located";
    nlohmann::json e = {{"name", o.name},
                        {"prefillInstances", o.prefill_instances},
                        {"decodeInstances", o.decode_instances},
                        {"stable", o.stable},
                        {"meetsSlo", o.meets_slo},
                        {"maxRateRps", o.max_rate_rps},
                        {"prefillUtilisation", o.prefill_utilisation}};
    if (!co) {
      e["path"] = std::string(ToString(o.path));
      e["kvTransferMsMean"] = o.kv_transfer_ms_mean;
      e["kvTransferMsP99"] = o.kv_transfer_ms_p99;
    }
    if (o.stable) {
      e["ttftP99Ms"] = o.ttft_p99_ms;
      e["tpotP99Ms"] = o.tpot_p99_ms;
      e["tpotMeanMs"] = o.tpot_mean_ms;
      e["decodeBatch"] = o.decode_batch;
      if (!co) e["kvShareOfTtft"] = o.kv_share_of_ttft;
    }
    j["options"].push_back(std::move(e));
  }
  j["verdict"] = advice.verdict;
  j["reasons"] = advice.reasons;
  j["uncertain"] = advice.uncertain;
  return j.dump(2) + "\n";
}

std::string RenderTransferSvg(const AdviseInput& in) {
  std::vector<PathKind> paths = PathsOf(in);
  if (paths.empty()) {
    for (std::size_t p = 0; p < kPathKinds; ++p) paths.push_back(static_cast<PathKind>(p));
  }
  const auto [pe, de] = EndpointsOf(in);
  const double kv = KvBytesPerToken(in.model) > 0 ? static_cast<double>(KvBytesPerToken(in.model)) : 1.0;
  constexpr double kMinTokens = 64, kMaxTokens = 131072;
  constexpr int kSamples = 48;
  std::vector<std::vector<double>> ms(paths.size());
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (std::size_t p = 0; p < paths.size(); ++p) {
    const PathEstimate e = Estimate(in.network, paths[p], pe, de);
    for (int i = 0; i <= kSamples; ++i) {
      const double tokens = kMinTokens * std::pow(kMaxTokens / kMinTokens, static_cast<double>(i) / kSamples);
      const double v = std::max(1e-3, TransferSeconds(e, tokens * kv) * 1000.0);
      ms[p].push_back(v);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (!(lo < hi)) hi = lo * 10 + 1;
  const double ylo = std::pow(10.0, std::floor(std::log10(lo))),
               yhi = std::pow(10.0, std::ceil(std::log10(hi)));
  constexpr int kWidth = 760, kHeight = 460, kLeft = 70, kRight = 200, kTop = 56, kBottom = 56;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto x_of = [&](double tokens) {
    return kLeft + pw * std::log(tokens / kMinTokens) / std::log(kMaxTokens / kMinTokens);
  };
  auto y_of = [&](double v) { return kTop + ph * (1 - std::log(v / ylo) / std::log(yhi / ylo)); };
  constexpr const char* kColours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                      "#E69F00", "#56B4E9", "#000000"};
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" viewBox=\"0 0 " << kWidth << ' ' << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  std::string title = "KV transfer time vs prompt length: " + in.model.name;
  std::string escaped;
  for (char c : title)
    escaped += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  s << "<text x=\"" << kLeft << "\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << escaped
    << "</text>\n";
  s << "<text x=\"" << kLeft << "\" y=\"40\" font-size=\"11\" fill=\"#555555\">"
    << Fmt("%.0f KiB per token", kv / 1024.0) << ", " << in.gpus_per_instance
    << " GPUs per instance; estimated from the network cost model, not measured</text>\n";
  s << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#999999\"/>\n";
  for (double t = 128; t <= kMaxTokens; t *= 4) {
    const double x = x_of(t);
    s << "<line x1=\"" << x << "\" y1=\"" << kTop << "\" x2=\"" << x << "\" y2=\"" << kTop + ph
      << "\" stroke=\"#eeeeee\"/><text x=\"" << x << "\" y=\"" << kTop + ph + 16
      << "\" text-anchor=\"middle\">"
      << (t >= 1024 ? std::to_string(static_cast<int>(t / 1024)) + "k" : std::to_string(static_cast<int>(t)))
      << "</text>\n";
  }
  for (double v = ylo; v <= yhi * 1.0001; v *= 10) {
    const double y = y_of(v);
    s << "<line x1=\"" << kLeft << "\" y1=\"" << y << "\" x2=\"" << kLeft + pw << "\" y2=\"" << y
      << "\" stroke=\"#eeeeee\"/><text x=\"" << kLeft - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
      << (v >= 1 ? Fmt("%.0f", v) : Fmt("%g", v)) << "</text>\n";
  }
  s << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << kHeight - 14
    << "\" text-anchor=\"middle\">prompt length (tokens, log)</text>\n";
  s << "<text x=\"18\" y=\"" << kTop + ph / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 18 "
    << kTop + ph / 2 << ")\">transfer time (ms, log)</text>\n";
  // The workload's median and P99 prompt, when given.
  if (!in.prompt.quantiles.empty()) {
    for (const auto& [q, label] : {std::pair{0.5, "P50 prompt"}, std::pair{0.99, "P99 prompt"}}) {
      const double t = std::clamp(in.prompt.Quantile(q), kMinTokens, kMaxTokens);
      const double x = x_of(t);
      s << "<line x1=\"" << x << "\" y1=\"" << kTop << "\" x2=\"" << x << "\" y2=\"" << kTop + ph
        << "\" stroke=\"#555555\" stroke-dasharray=\"4 3\"/><text x=\"" << x + 3 << "\" y=\"" << kTop + 12
        << "\" font-size=\"10\" fill=\"#555555\">" << label << "</text>\n";
    }
  }
  for (std::size_t p = 0; p < paths.size(); ++p) {
    const char* colour = kColours[p % std::size(kColours)];
    s << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\" points=\"";
    for (int i = 0; i <= kSamples; ++i) {
      const double tokens = kMinTokens * std::pow(kMaxTokens / kMinTokens, static_cast<double>(i) / kSamples);
      s << (i ? " " : "") << Fmt("%.1f", x_of(tokens)) << ','
        << Fmt("%.1f", y_of(ms[p][static_cast<std::size_t>(i)]));
    }
    s << "\"><title>" << ToString(paths[p]) << "</title></polyline>\n";
    const int ly = kTop + 10 + static_cast<int>(p) * 20;
    s << "<rect x=\"" << kLeft + pw + 16 << "\" y=\"" << ly - 10 << "\" width=\"12\" height=\"12\" fill=\""
      << colour << "\"/><text x=\"" << kLeft + pw + 32 << "\" y=\"" << ly << "\">" << ToString(paths[p])
      << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace toposched::pd
