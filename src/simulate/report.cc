// Reports of a simulation: the side-by-side table, JSON, and an SVG picture.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "toposched/simulate/simulator.h"

namespace toposched::simulate {
namespace {

constexpr std::string_view kMeaning =
    "simulated placements on a virtual cluster; decision times are measured wall time on this machine";

std::string Printf(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string Percent(double fraction) {
  return Printf("%.1f%%", 100.0 * fraction);
}

std::string Micros(double us) {
  if (us >= 1000) return Printf("%.2f ms", us / 1000.0);
  if (us >= 100) return Printf("%.0f us", us);
  return Printf("%.1f us", us);
}

std::string Millis(double ms) {
  return ms >= 100 ? Printf("%.0f ms", ms) : Printf("%.2f ms", ms);
}

// Whether the run had Prefill/Decode pools at all: the P/D figures are printed only then.
bool HasPools(const SimulationResult& r) {
  return std::any_of(r.policies.begin(), r.policies.end(),
                     [](const PolicyResult& p) { return p.pd.ratio_samples > 0 || p.pd.pairs > 0; });
}

class Table {
 public:
  explicit Table(const SimulationResult& r) : result_(r) {
    for (const PolicyResult& p : r.policies) width_ = std::max(width_, p.policy.size() + 2);
  }
  template <typename F>
  void Row(const std::string& label, F cell) {
    out_ << label;
    for (std::size_t k = label.size(); k < kLabelWidth; ++k) out_ << ' ';
    for (const PolicyResult& p : result_.policies) {
      const std::string c = cell(p);
      for (std::size_t k = c.size(); k < width_; ++k) out_ << ' ';
      out_ << c;
    }
    out_ << '\n';
  }
  void Line(const std::string& text) { out_ << text << '\n'; }
  std::string Text() const { return out_.str(); }

 private:
  static constexpr std::size_t kLabelWidth = 36;
  const SimulationResult& result_;
  std::size_t width_ = 14;
  std::ostringstream out_;
};

// `text` in lines of at most `max_chars` characters, broken at spaces (a word longer than a line
// gets a line of its own).
std::vector<std::string> Wrap(std::string_view text, std::size_t max_chars) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t end = std::min(text.find(' ', i), text.size());
    const std::string_view word = text.substr(i, end - i);
    if (!line.empty() && line.size() + 1 + word.size() > max_chars) {
      lines.push_back(std::move(line));
      line.clear();
    }
    if (!word.empty()) line += (line.empty() ? "" : " ") + std::string(word);
    i = end + 1;
  }
  if (!line.empty() || lines.empty()) lines.push_back(std::move(line));
  return lines;
}

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// One colour per policy, in result order (toposched first); colour-blind-safe (Okabe-Ito).
constexpr const char* kPolicyColours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"};
const char* PolicyColour(std::size_t i) {
  return kPolicyColours[i % std::size(kPolicyColours)];
}

}  // namespace

std::optional<CapacityCheck> CheckCapacity(const SimulationResult& r, std::string_view policy) {
  const PolicyResult* own = nullptr;
  for (const PolicyResult& p : r.policies) {
    if (p.policy == policy) own = &p;
  }
  if (own == nullptr || r.policies.size() < 2) return std::nullopt;
  CapacityCheck check;
  check.policy = std::string(policy);
  // The best other policy for one count; `count` gives -1 where a policy lacks it.
  auto compare = [&](bool total, const std::string& kind, auto count) {
    const int mine = count(*own);
    int best = -1;
    const PolicyResult* ahead = nullptr;
    for (const PolicyResult& p : r.policies) {
      if (&p == own) continue;
      const int c = count(p);
      if (c > best) {
        best = c;
        ahead = &p;
      }
    }
    if (total) check.lead = mine - best;
    if (ahead != nullptr && best > mine)
      check.shortfalls.push_back({total, kind, best - mine, ahead->policy});
  };
  compare(true, "", [](const PolicyResult& p) { return p.placed; });
  for (const KindCount& k : own->kinds) {
    compare(false, k.kind, [&k](const PolicyResult& p) {
      for (const KindCount& c : p.kinds) {
        if (c.kind == k.kind) return c.placed;
      }
      return -1;
    });
  }
  return check;
}

namespace {

// One line on capacity: the lead in pods placed and each count where a baseline placed more.
std::string CapacityLine(const CapacityCheck& c) {
  std::string line = "capacity: " + c.policy + " placed " + std::to_string(std::abs(c.lead)) +
                     (c.lead >= 0 ? " more" : " fewer") + (std::abs(c.lead) == 1 ? " pod" : " pods") +
                     " than the best baseline";
  bool kinds = false;
  for (const CapacityShortfall& s : c.shortfalls) {
    if (s.total) continue;
    line += (kinds ? ", " : "; ") + std::to_string(s.fewer) + " fewer " + s.kind +
            (s.fewer == 1 ? " pod" : " pods") + " than " + s.baseline;
    kinds = true;
  }
  return kinds ? line : line + ", and no fewer of any kind";
}

}  // namespace

std::string FormatTable(const SimulationResult& r) {
  Table t(r);
  // Long descriptions (a folder of exports names every file) wrap under their label.
  for (const auto& [label, text] :
       {std::pair<std::string_view, std::string_view>{"cluster:  ", r.cluster_description},
        {"workload: ", r.workload_description}}) {
    const std::vector<std::string> lines = Wrap(text, 96 - label.size());
    for (std::size_t i = 0; i < lines.size(); ++i) {
      t.Line((i == 0 ? std::string(label) : std::string(label.size(), ' ')) + lines[i]);
    }
  }
  t.Line("(" + std::string(kMeaning) + ")");
  t.Line("");
  t.Row("", [](const PolicyResult& p) { return p.policy; });
  t.Row("pods placed", [](const PolicyResult& p) { return std::to_string(p.placed); });
  t.Row("pods pending", [](const PolicyResult& p) { return std::to_string(p.pending); });
  if (!r.policies.empty()) {
    for (std::size_t k = 0; k < r.policies.front().kinds.size(); ++k) {
      const KindCount& kind = r.policies.front().kinds[k];
      t.Row("  " + kind.kind + " pending (of " + std::to_string(kind.arrived) + ")",
            [k](const PolicyResult& p) {
              return k < p.kinds.size() ? std::to_string(p.kinds[k].pending) : "-";
            });
    }
  }
  if (const auto check = CheckCapacity(r)) {
    for (const std::string& line : Wrap(CapacityLine(*check), 96)) t.Line(line);
  }
  t.Line("worst GPU->NIC class of placed pods");
  for (std::size_t b = 0; b < kClassBuckets.size(); ++b) {
    t.Row("  " + std::string(kClassBuckets[b]),
          [b](const PolicyResult& p) { return std::to_string(p.class_histogram[b]); });
  }
  t.Row("at the best class the node allowed",
        [](const PolicyResult& p) { return std::to_string(p.at_best_class); });
  t.Row("  share of placed pods with NICs", [](const PolicyResult& p) { return Percent(p.at_best_share); });
  const int eight = r.policies.empty() ? 0 : r.policies.front().eight_gpu_nodes;
  t.Row("aligned 8-GPU slots free (of " + std::to_string(eight) + ")",
        [](const PolicyResult& p) { return std::to_string(p.aligned_slots_free); });
  t.Row("  mean over the run", [](const PolicyResult& p) { return Printf("%.1f", p.aligned_slots_mean); });
  t.Row("GPUs in use at the end (of " + std::to_string(r.gpus) + ")",
        [](const PolicyResult& p) { return std::to_string(p.gpus_in_use); });
  t.Row("shared pods running", [](const PolicyResult& p) { return std::to_string(p.shared_pods_running); });
  t.Row("  on GPUs", [](const PolicyResult& p) { return std::to_string(p.shared_gpus); });
  t.Row("  memory used on those GPUs", [](const PolicyResult& p) { return Percent(p.shared_memory_use); });
  if (HasPools(r)) {
    t.Line("Prefill->Decode pairs by KV path (counted when the second pod arrives)");
    for (std::size_t k = 0; k < pd::kPathKinds; ++k) {
      t.Row("  " + std::string(pd::ToString(static_cast<pd::PathKind>(k))),
            [k](const PolicyResult& p) { return std::to_string(p.pd.paths[k]); });
    }
    t.Row("P/D pods at the cheapest path",
          [](const PolicyResult& p) { return Percent(p.pd.at_cheapest_share); });
    t.Row("  of P/D pods with counterparts",
          [](const PolicyResult& p) { return std::to_string(p.pd.pods_with_counterparts); });
    t.Row("KV transfer per pair, mean", [](const PolicyResult& p) { return Millis(p.pd.transfer_mean_ms); });
    t.Row("KV transfer per pair, p99", [](const PolicyResult& p) { return Millis(p.pd.transfer_p99_ms); });
    t.Row("P:D ratio error per leaf, end",
          [](const PolicyResult& p) { return Printf("%.3f", p.pd.ratio_error_end); });
    t.Row("  mean over the run", [](const PolicyResult& p) { return Printf("%.3f", p.pd.ratio_error_mean); });
  }
  t.Row("decision time per pod, p50", [](const PolicyResult& p) { return Micros(p.decision_p50_us); });
  t.Row("decision time per pod, p99", [](const PolicyResult& p) { return Micros(p.decision_p99_us); });
  return t.Text();
}

std::string FormatJson(const SimulationResult& r) {
  using nlohmann::json;
  json policies = json::array();
  for (const PolicyResult& p : r.policies) {
    json kinds = json::array();
    for (const KindCount& k : p.kinds) {
      kinds.push_back(
          {{"kind", k.kind}, {"arrived", k.arrived}, {"placed", k.placed}, {"pending", k.pending}});
    }
    json classes = json::object();
    for (std::size_t b = 0; b < kClassBuckets.size(); ++b) {
      classes[b == kNoNicBucket ? std::string("noNic") : std::string(kClassBuckets[b])] =
          p.class_histogram[b];
    }
    json paths = json::object();
    for (std::size_t k = 0; k < pd::kPathKinds; ++k) {
      paths[std::string(pd::ToString(static_cast<pd::PathKind>(k)))] = p.pd.paths[k];
    }
    const json pd_figures = {
        {"pairs", p.pd.pairs},
        {"paths", paths},
        {"transferMilliseconds", {{"mean", p.pd.transfer_mean_ms}, {"p99", p.pd.transfer_p99_ms}}},
        {"podsWithCounterparts", p.pd.pods_with_counterparts},
        {"atCheapestPath", p.pd.at_cheapest},
        {"atCheapestShare", p.pd.at_cheapest_share},
        {"ratioError", {{"end", p.pd.ratio_error_end}, {"mean", p.pd.ratio_error_mean}}},
        {"ratioSamples", p.pd.ratio_samples},
    };
    policies.push_back({
        {"policy", p.policy},
        {"placed", p.placed},
        {"pending", p.pending},
        {"kinds", kinds},
        {"gpuNicClasses", classes},
        {"nicPodsPlaced", p.nic_pods_placed},
        {"atBestClass", p.at_best_class},
        {"atBestShare", p.at_best_share},
        {"eightGpuNodes", p.eight_gpu_nodes},
        {"alignedSlotsFree", p.aligned_slots_free},
        {"alignedSlotsMean", p.aligned_slots_mean},
        {"gpusInUse", p.gpus_in_use},
        {"sharedPodsRunning", p.shared_pods_running},
        {"sharedGpus", p.shared_gpus},
        {"sharedMemoryUse", p.shared_memory_use},
        {"decisions", p.decisions},
        {"decisionMicroseconds",
         {{"p50", p.decision_p50_us}, {"p99", p.decision_p99_us}, {"mean", p.decision_mean_us}}},
        {"runSeconds", p.total_seconds},
        {"prefillDecode", pd_figures},
    });
  }
  json doc = {
      {"note", kMeaning},
      {"cluster",
       {{"description", r.cluster_description},
        {"nodes", r.nodes},
        {"gpus", r.gpus},
        {"rdmaNics", r.rdma_nics}}},
      {"workload",
       {{"description", r.workload_description}, {"pods", r.pods}, {"endTimeSeconds", r.end_time_s}}},
      {"policies", policies},
  };
  if (const auto check = CheckCapacity(r)) {
    json shortfalls = json::array();
    for (const CapacityShortfall& s : check->shortfalls) {
      json one = {{"fewer", s.fewer}, {"against", s.baseline}};
      if (s.total) {
        one["total"] = true;
      } else {
        one["kind"] = s.kind;
      }
      shortfalls.push_back(std::move(one));
    }
    doc["capacity"] = {{"policy", check->policy}, {"lead", check->lead}, {"shortfalls", shortfalls}};
  }
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string RenderSvg(const SimulationResult& r) {
  // Layout: one panel per policy (a grid of nodes, each a box of GPU squares), then the class
  // histogram with one bar per policy and class. Sizes in px.
  constexpr int kMargin = 20, kGpu = 6, kGap = 1, kNodePad = 2, kColumns = 30, kTitle = 22;
  // Text is wrapped to the drawing's width at about 6 px per character of the 11 px font.
  constexpr int kCharPx = 6, kLinePx = 15, kNoteLinePx = 13;
  int max_gpus = 1;
  for (const PolicyResult& p : r.policies) {
    for (const NodeState& n : p.nodes) max_gpus = std::max(max_gpus, static_cast<int>(n.gpus.size()));
  }
  const int gpus_per_row = std::min(max_gpus, 4);
  const int gpu_rows = (max_gpus + gpus_per_row - 1) / gpus_per_row;
  const int node_w = gpus_per_row * (kGpu + kGap) - kGap + 2 * kNodePad;
  const int node_h = gpu_rows * (kGpu + kGap) - kGap + 2 * kNodePad;
  const int cell_w = node_w + 4, cell_h = node_h + 4;
  const int node_count = r.policies.empty() ? 0 : static_cast<int>(r.policies.front().nodes.size());
  const int rows = std::max((node_count + kColumns - 1) / kColumns, 1);
  const int panel_w = kColumns * cell_w;
  const int panel_h = kTitle + rows * cell_h + 10;
  const int hist_h = 220;
  const bool pools = HasPools(r);
  const int width = std::max(2 * kMargin + panel_w, 900);
  const std::size_t max_chars = static_cast<std::size_t>((width - 2 * kMargin) / kCharPx);
  std::vector<std::string> header_lines;
  for (const std::string& line :
       {"cluster: " + r.cluster_description, "workload: " + r.workload_description, std::string(kMeaning),
        std::string("GPU squares: grey free, blue whole, orange shared (darker = more "
                    "memory held); green frame: aligned 8-GPU slot still free")}) {
    for (std::string& l : Wrap(line, max_chars)) header_lines.push_back(std::move(l));
  }
  const int header = 22 + kLinePx * static_cast<int>(header_lines.size()) + 2;
  // The Prefill/Decode figures per policy, under that histogram's title.
  std::vector<std::string> pd_note;
  if (pools) {
    std::string line;
    for (const PolicyResult& p : r.policies) {
      const std::string entry = p.policy + ": cheapest " + Percent(p.pd.at_cheapest_share) + ", mean " +
                                Millis(p.pd.transfer_mean_ms) + ", ratio error " +
                                Printf("%.3f", p.pd.ratio_error_mean);
      if (!line.empty() && line.size() + 2 + entry.size() > max_chars) {
        pd_note.push_back(std::move(line));
        line.clear();
      }
      line += (line.empty() ? "" : "; ") + entry;
    }
    if (!line.empty()) pd_note.push_back(std::move(line));
  }
  const int height = kMargin + header + static_cast<int>(r.policies.size()) * panel_h +
                     hist_h * (pools ? 2 : 1) + kNoteLinePx * static_cast<int>(pd_note.size()) + 2 * kMargin;

  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << width << ' ' << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  s << "<text x=\"" << kMargin << "\" y=\"" << kMargin + 4 << "\" font-size=\"15\" font-weight=\"bold\">"
    << "toposched simulate</text>\n";
  int line_y = kMargin + 22;
  for (const std::string& line : header_lines) {
    s << "<text x=\"" << kMargin << "\" y=\"" << line_y << "\" font-size=\"11\" fill=\"#555555\">"
      << Escape(line) << "</text>\n";
    line_y += 15;
  }

  int y = kMargin + header;
  for (const PolicyResult& p : r.policies) {
    s << "<text x=\"" << kMargin << "\" y=\"" << y + 14 << "\" font-weight=\"bold\">" << Escape(p.policy)
      << "</text><text x=\"" << kMargin + 110 << "\" y=\"" << y + 14 << "\" fill=\"#555555\">placed "
      << p.placed << ", pending " << p.pending << ", at best class " << p.at_best_class << " ("
      << Escape(Percent(p.at_best_share)) << "), aligned 8-GPU slots free " << p.aligned_slots_free << "/"
      << p.eight_gpu_nodes << "</text>\n";
    for (int i = 0; i < static_cast<int>(p.nodes.size()); ++i) {
      const NodeState& n = p.nodes[static_cast<std::size_t>(i)];
      const int nx = kMargin + (i % kColumns) * cell_w;
      const int ny = y + kTitle + (i / kColumns) * cell_h;
      int used = 0;
      for (const GpuState& g : n.gpus) used += (g.exclusive || g.shares > 0) ? 1 : 0;
      s << "<g><title>" << Escape(n.name) << " (" << Escape(n.shape) << "): " << used << "/" << n.gpus.size()
        << " GPUs in use, RDMA NICs " << n.nics_used << "/" << n.nics << "</title>";
      s << "<rect x=\"" << nx << "\" y=\"" << ny << "\" width=\"" << node_w << "\" height=\"" << node_h
        << "\" fill=\"#f7f7f7\" stroke=\"" << (n.aligned_slot_free ? "#2ca02c" : "#bbbbbb")
        << "\" stroke-width=\"" << (n.aligned_slot_free ? 1.5 : 0.5) << "\"/>";
      for (int g = 0; g < static_cast<int>(n.gpus.size()); ++g) {
        const GpuState& gs = n.gpus[static_cast<std::size_t>(g)];
        const int gx = nx + kNodePad + (g % gpus_per_row) * (kGpu + kGap);
        const int gy = ny + kNodePad + (g / gpus_per_row) * (kGpu + kGap);
        std::string fill = "#d9d9d9";
        if (gs.exclusive) {
          fill = "#1f5fa8";
        } else if (gs.shares > 0) {
          // Orange, darker with memory held: a quick read of how tightly shares are packed.
          const int shade = static_cast<int>(std::lround(200 - 120 * std::clamp(gs.memory_used, 0.0, 1.0)));
          char buf[16];
          std::snprintf(buf, sizeof buf, "#f0%02x30", std::clamp(shade, 0, 255));
          fill = buf;
        }
        s << "<rect x=\"" << gx << "\" y=\"" << gy << "\" width=\"" << kGpu << "\" height=\"" << kGpu
          << "\" fill=\"" << fill << "\"/>";
      }
      s << "</g>\n";
    }
    y += panel_h;
  }

  // Histograms: groups per bucket, one bar per policy. The worst GPU->NIC classes, then (with
  // pools) the KV paths of Prefill->Decode pairs.
  const int chart_h = hist_h - 70;
  auto histogram = [&](int top, const std::string& title, const std::vector<std::string>& notes,
                       std::size_t buckets, const std::function<std::string(std::size_t)>& label,
                       const std::function<int(const PolicyResult&, std::size_t)>& count) {
    int max_count = 1;
    for (const PolicyResult& p : r.policies) {
      for (std::size_t b = 0; b < buckets; ++b) max_count = std::max(max_count, count(p, b));
    }
    const int chart_top = top + 24 + kNoteLinePx * static_cast<int>(notes.size());
    const int group_w = (width - 2 * kMargin) / static_cast<int>(buckets);
    const int bar_w = std::max(4, (group_w - 16) / std::max<int>(1, static_cast<int>(r.policies.size())));
    s << "<text x=\"" << kMargin << "\" y=\"" << top + 10 << "\" font-weight=\"bold\">" << Escape(title)
      << "</text>\n";
    for (std::size_t n = 0; n < notes.size(); ++n) {
      s << "<text x=\"" << kMargin << "\" y=\"" << top + 24 + kNoteLinePx * static_cast<int>(n)
        << "\" font-size=\"11\" fill=\"#555555\">" << Escape(notes[n]) << "</text>\n";
    }
    for (std::size_t b = 0; b < buckets; ++b) {
      const int gx = kMargin + static_cast<int>(b) * group_w;
      for (std::size_t k = 0; k < r.policies.size(); ++k) {
        const int c = count(r.policies[k], b);
        const int h = static_cast<int>(std::lround(static_cast<double>(chart_h) * c / max_count));
        const int bx = gx + 8 + static_cast<int>(k) * bar_w;
        s << "<rect x=\"" << bx << "\" y=\"" << chart_top + chart_h - h << "\" width=\"" << bar_w - 2
          << "\" height=\"" << h << "\" fill=\"" << PolicyColour(k) << "\"><title>"
          << Escape(r.policies[k].policy) << ", " << Escape(label(b)) << ": " << c << "</title></rect>";
        s << "<text x=\"" << bx + (bar_w - 2) / 2 << "\" y=\"" << chart_top + chart_h - h - 3
          << "\" font-size=\"9\" text-anchor=\"middle\">" << c << "</text>\n";
      }
      s << "<text x=\"" << gx + group_w / 2 << "\" y=\"" << chart_top + chart_h + 16
        << "\" text-anchor=\"middle\">" << Escape(label(b)) << "</text>\n";
    }
    s << "<line x1=\"" << kMargin << "\" y1=\"" << chart_top + chart_h << "\" x2=\"" << width - kMargin
      << "\" y2=\"" << chart_top + chart_h << "\" stroke=\"#333333\"/>\n";
    return chart_top + chart_h;
  };
  int chart_bottom = histogram(
      y, "worst GPU->NIC class of placed pods", {}, kClassBuckets.size(),
      [](std::size_t b) { return std::string(kClassBuckets[b]); },
      [](const PolicyResult& p, std::size_t b) { return p.class_histogram[b]; });
  if (pools) {
    chart_bottom = histogram(
        chart_bottom + 50, "Prefill->Decode pairs by KV path", pd_note, pd::kPathKinds,
        [](std::size_t b) { return std::string(pd::ToString(static_cast<pd::PathKind>(b))); },
        [](const PolicyResult& p, std::size_t b) { return p.pd.paths[b]; });
  }
  int lx = kMargin;
  const int ly = chart_bottom + 36;
  for (std::size_t k = 0; k < r.policies.size(); ++k) {
    s << "<rect x=\"" << lx << "\" y=\"" << ly - 10 << "\" width=\"12\" height=\"12\" fill=\""
      << PolicyColour(k) << "\"/><text x=\"" << lx + 16 << "\" y=\"" << ly << "\">"
      << Escape(r.policies[k].policy) << "</text>\n";
    lx += 140;
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace toposched::simulate
