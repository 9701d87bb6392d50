// The trace replay's report (trace.h): the tables and the JSON of FormatTraceTable,
// FormatFamilyTable and FormatTraceJson, beside the embedded simulator's report (report.cc).

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "toposched/placement/packing.h"
#include "toposched/simulate/trace.h"
#include "trace_internal.h"

namespace toposched::simulate {

using packing::kMilli;

namespace {

// Each policy's ratio less FGD's, seed by seed, at every mark (nothing without FGD or with one
// seed): a difference of means smaller than about two standard errors is the seeds' luck, not
// the policy.
void AppendAgainstFgd(const TraceReplayResult& r, std::string& out) {
  const TracePolicyResult* fgd = nullptr;
  for (const TracePolicyResult& p : r.policies) {
    if (p.policy == kTracePolicyFgd) fgd = &p;
  }
  if (fgd == nullptr || fgd->runs.size() < 2) return;
  char buf[128];
  out += "against fgd, seed by seed (mean difference +- its standard error, points)\n                  ";
  for (double m : r.marks) {
    std::snprintf(buf, sizeof buf, "         at %3.0f%%", 100 * m);
    out += buf;
  }
  out += "\n";
  for (const TracePolicyResult& p : r.policies) {
    if (&p == fgd) continue;
    std::snprintf(buf, sizeof buf, "  %-16s", p.policy.c_str());
    out += buf;
    for (std::size_t m = 0; m < r.marks.size(); ++m) {
      if (const auto d = PairedRatioDifference(p, *fgd, m)) {
        std::snprintf(buf, sizeof buf, "  %+6.2f +- %4.2f", 100 * d->mean, 100 * d->standard_error);
      } else {
        std::snprintf(buf, sizeof buf, "  %15s", "-");
      }
      out += buf;
    }
    out += "\n";
  }
}

// Which tasks pend, by kind, when each mark is read (what the ratio leaves out).
void AppendPendingByKind(const TraceReplayResult& r, std::string& out) {
  char buf[128];
  for (std::size_t m = 0; m < r.marks.size(); ++m) {
    std::snprintf(buf, sizeof buf,
                  "tasks pending when %.0f%% had arrived (mean per seed):", 100 * r.marks[m]);
    out += buf;
    for (std::size_t k = 0; k < kTraceKinds; ++k) {
      out += k == 0 ? " " : " / ";
      out += TraceKindName(static_cast<TraceKind>(k));
    }
    out += "\n";
    for (const TracePolicyResult& p : r.policies) {
      if (m >= p.mean_pending_at.size()) continue;
      std::snprintf(buf, sizeof buf, "  %-16s%8.1f %8.1f %8.1f\n", p.policy.c_str(), p.mean_pending_at[m][0],
                    p.mean_pending_at[m][1], p.mean_pending_at[m][2]);
      out += buf;
    }
    // Why, for the kinds any policy left pending.
    for (std::size_t k = 0; k < kTraceKinds; ++k) {
      bool any = false;
      for (const TracePolicyResult& p : r.policies) {
        any = any || (m < p.mean_pending_at.size() && p.mean_pending_at[m][k] > 0);
      }
      if (!any) continue;
      out += "  why ";
      out += TraceKindName(static_cast<TraceKind>(k));
      out += " tasks pended:";
      for (std::size_t w = 0; w < kPendingWhys; ++w) {
        out += w == 0 ? " " : " / ";
        out += PendingWhyName(static_cast<PendingWhy>(w));
      }
      out += "\n";
      for (const TracePolicyResult& p : r.policies) {
        if (m >= p.mean_why_at.size()) continue;
        const auto& why = p.mean_why_at[m][k];
        std::snprintf(buf, sizeof buf, "    %-14s%8.1f %8.1f %8.1f %8.1f\n", p.policy.c_str(), why[0], why[1],
                      why[2], why[3]);
        out += buf;
      }
    }
  }
}

// Where the GPU no task holds sat when each mark was read: wholly free GPUs against the
// remnants on partly used ones, by size (what a share could still use, what only a small one).
void AppendIdleGpu(const TraceReplayResult& r, std::string& out) {
  char buf[160];
  for (std::size_t m = 0; m < r.marks.size(); ++m) {
    std::snprintf(buf, sizeof buf,
                  "idle GPU when %.0f%% had arrived (mean per seed, GPUs' worth): wholly free GPUs / left on "
                  "partly used GPUs: under 0.2 / 0.2-0.5 / 0.5-1\n",
                  100 * r.marks[m]);
    out += buf;
    for (const TracePolicyResult& p : r.policies) {
      if (m >= p.mean_idle_at.size()) continue;
      const auto& idle = p.mean_idle_at[m];
      std::snprintf(buf, sizeof buf, "  %-16s%8.1f %8.1f %8.1f %8.1f\n", p.policy.c_str(), idle[0], idle[1],
                    idle[2], idle[3]);
      out += buf;
    }
  }
}

}  // namespace

std::string FormatTraceTable(const std::vector<TraceReplayResult>& results) {
  std::string out =
      "(Alibaba GPU trace replayed with FGD's protocol; allocation ratios are simulated placements,\n"
      " published figures from the FGD simulator; times are measured on this machine)\n";
  char buf[256];
  for (const TraceReplayResult& r : results) {
    std::snprintf(buf, sizeof buf,
                  "\ntrace %s: %d nodes, %d GPUs, %zu tasks tuned to 130%% of GPU capacity, %zu seeds\n",
                  r.variant.c_str(), r.nodes, r.gpus, r.trace_tasks,
                  r.policies.empty() ? 0 : r.policies[0].runs.size());
    out += buf;
    out += "policy          ";
    for (double m : r.marks) {
      std::snprintf(buf, sizeof buf, "  at %3.0f%%  (worst seed, published)", 100 * m);
      out += buf;
    }
    out += "   unplaced by 130%   run time/seed\n";
    for (const TracePolicyResult& p : r.policies) {
      std::snprintf(buf, sizeof buf, "%-16s", p.policy.c_str());
      out += buf;
      const auto published = PublishedRatio(r.variant, p.policy);
      for (std::size_t m = 0; m < r.marks.size(); ++m) {
        std::string pub = "-";
        if (published && (r.marks[m] == 1.0 || r.marks[m] == 1.3)) {
          std::snprintf(buf, sizeof buf, "%.2f%%", r.marks[m] == 1.0 ? published->first : published->second);
          pub = buf;
        }
        std::snprintf(buf, sizeof buf, "  %6.2f%%  (%6.2f%%, %7s)        ", 100 * p.mean_ratio_at[m],
                      100 * p.min_ratio_at[m], pub.c_str());
        out += buf;
      }
      double unplaced = 0, seconds = 0;
      for (const TraceRun& run : p.runs) {
        unplaced += static_cast<double>(run.unplaced);
        seconds += run.seconds;
      }
      const double n = p.runs.empty() ? 1 : static_cast<double>(p.runs.size());
      std::snprintf(buf, sizeof buf, "%11.1f%14.2f s\n", unplaced / n, seconds / n);
      out += buf;
    }
    AppendAgainstFgd(r, out);
    AppendPendingByKind(r, out);
    AppendIdleGpu(r, out);
  }
  return out;
}

std::string FormatFamilyTable(const std::vector<TraceReplayResult>& results) {
  if (results.empty() || results[0].policies.empty() || results[0].marks.empty()) return "";
  const auto find = [](const TraceReplayResult& r, const std::string& name) -> const TracePolicyResult* {
    for (const TracePolicyResult& p : r.policies) {
      if (p.policy == name) return &p;
    }
    return nullptr;
  };
  const std::vector<TracePolicyResult>& order = results[0].policies;
  const bool with_fgd = find(results[0], std::string(kTracePolicyFgd)) != nullptr;
  char buf[128];
  std::snprintf(buf, sizeof buf, "GPU allocation at %.0f %% arrived, mean over %zu seeds",
                100 * results[0].marks[0], order[0].runs.size());
  std::string out = buf;
  out += " (seed-paired difference to fgd +- its standard error, points)\n\n| level |";
  std::string rule = "|---|";
  for (const TracePolicyResult& p : order) {
    out += " " + p.policy + " |";
    rule += "---:|";
  }
  if (with_fgd) {
    for (const TracePolicyResult& p : order) {
      if (p.policy == kTracePolicyFgd) continue;
      out += " " + p.policy + " - fgd |";
      rule += "---:|";
    }
  }
  out += "\n" + rule + "\n";
  for (const TraceReplayResult& r : results) {
    out += "| " + r.variant + " |";
    for (const TracePolicyResult& column : order) {
      const TracePolicyResult* p = find(r, column.policy);
      if (p != nullptr && !p->mean_ratio_at.empty()) {
        std::snprintf(buf, sizeof buf, " %.2f |", 100 * p->mean_ratio_at[0]);
        out += buf;
      } else {
        out += " - |";
      }
    }
    if (!with_fgd) {
      out += "\n";
      continue;
    }
    const TracePolicyResult* fgd = find(r, std::string(kTracePolicyFgd));
    for (const TracePolicyResult& column : order) {
      if (column.policy == kTracePolicyFgd) continue;
      const TracePolicyResult* p = find(r, column.policy);
      const auto d = p != nullptr && fgd != nullptr ? PairedRatioDifference(*p, *fgd, 0) : std::nullopt;
      if (d) {
        std::snprintf(buf, sizeof buf, " %+.2f +- %.2f |", 100 * d->mean, 100 * d->standard_error);
        out += buf;
      } else {
        out += " - |";
      }
    }
    out += "\n";
  }
  return out;
}

namespace {

// Per mark: {"shared": {"arrived": N, "pending": N}, ...}.
nlohmann::json KindsJson(const std::vector<TraceKindCounts>& at) {
  nlohmann::json out = nlohmann::json::array();
  for (const TraceKindCounts& c : at) {
    nlohmann::json mark = nlohmann::json::object();
    for (std::size_t k = 0; k < kTraceKinds; ++k) {
      mark[std::string(TraceKindName(static_cast<TraceKind>(k)))] = {{"arrived", c.arrived[k]},
                                                                     {"pending", c.pending[k]}};
    }
    out.push_back(std::move(mark));
  }
  return out;
}

// Per mark: {"shared": {"no GPU room": N, "no CPU or memory": N, "GPU and CPU on different
// nodes": N, "fit, not placed": N}, ...}.
nlohmann::json WhyJson(const std::vector<TraceKindCounts>& at) {
  nlohmann::json out = nlohmann::json::array();
  for (const TraceKindCounts& c : at) {
    nlohmann::json mark = nlohmann::json::object();
    for (std::size_t k = 0; k < kTraceKinds; ++k) {
      nlohmann::json kind = nlohmann::json::object();
      for (std::size_t w = 0; w < kPendingWhys; ++w) {
        kind[std::string(PendingWhyName(static_cast<PendingWhy>(w)))] = c.why[k][w];
      }
      mark[std::string(TraceKindName(static_cast<TraceKind>(k)))] = std::move(kind);
    }
    out.push_back(std::move(mark));
  }
  return out;
}

// Per mark: {"whole_gpus": N, "remnant_milli": {"1-199": N, "200-499": N, "500-999": N}}.
nlohmann::json IdleJson(const std::vector<TraceIdleGpu>& at) {
  nlohmann::json out = nlohmann::json::array();
  for (const TraceIdleGpu& idle : at) {
    nlohmann::json bands = nlohmann::json::object();
    for (std::size_t b = 0; b < kIdleBands; ++b) {
      const std::int64_t top = b + 1 < kIdleBands ? kIdleBandFloors[b + 1] : kMilli;
      bands[std::to_string(kIdleBandFloors[b]) + "-" + std::to_string(top - 1)] = idle.remnant_milli[b];
    }
    out.push_back({{"whole_gpus", idle.whole}, {"remnant_milli", std::move(bands)}});
  }
  return out;
}

}  // namespace

std::string FormatTraceJson(const std::vector<TraceReplayResult>& results) {
  nlohmann::json out = nlohmann::json::array();
  for (const TraceReplayResult& r : results) {
    nlohmann::json v{{"variant", r.variant},
                     {"nodes", r.nodes},
                     {"gpus", r.gpus},
                     {"capacity_milli", r.capacity_milli},
                     {"trace_tasks", r.trace_tasks},
                     {"marks", r.marks}};
    nlohmann::json policies = nlohmann::json::array();
    for (const TracePolicyResult& p : r.policies) {
      nlohmann::json runs = nlohmann::json::array();
      for (const TraceRun& run : p.runs) {
        runs.push_back({{"seed", run.seed},
                        {"ratio_at", run.ratio_at},
                        {"kinds_at", KindsJson(run.kinds_at)},
                        {"pending_why_at", WhyJson(run.kinds_at)},
                        {"idle_at", IdleJson(run.idle_at)},
                        {"tasks", run.tasks},
                        {"placed", run.placed},
                        {"unplaced", run.unplaced},
                        {"gpu_milli_unplaced", run.gpu_milli_unplaced},
                        {"seconds", run.seconds},
                        {"decision_p50_us", run.decision_p50_us},
                        {"decision_p99_us", run.decision_p99_us}});
      }
      nlohmann::json pj{{"policy", p.policy},
                        {"mean_ratio_at", p.mean_ratio_at},
                        {"min_ratio_at", p.min_ratio_at},
                        {"runs", runs}};
      if (const auto pub = PublishedRatio(r.variant, p.policy))
        pj["published_percent"] = {pub->first, pub->second};
      for (const TracePolicyResult& other : r.policies) {
        if (other.policy != kTracePolicyFgd || &other == &p) continue;
        nlohmann::json paired = nlohmann::json::array();
        for (std::size_t m = 0; m < r.marks.size(); ++m) {
          const auto d = PairedRatioDifference(p, other, m);
          paired.push_back(d ? nlohmann::json{{"mean", d->mean},
                                              {"standard_error", d->standard_error},
                                              {"seeds", d->seeds}}
                             : nlohmann::json(nullptr));
        }
        pj["against_fgd"] = std::move(paired);
      }
      policies.push_back(std::move(pj));
    }
    v["policies"] = std::move(policies);
    out.push_back(std::move(v));
  }
  return out.dump(2) + "\n";
}

}  // namespace toposched::simulate
