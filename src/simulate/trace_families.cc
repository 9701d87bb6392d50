// Workload families for the trace replay (trace_families.h): levels generated from the default
// pod list, their pod list CSV and their measured mix.

#include "toposched/simulate/trace_families.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <utility>

#include "toposched/common/text.h"
#include "toposched/placement/packing.h"

namespace toposched::simulate {
namespace {

using packing::kMilli;

constexpr TraceFamily kFamilies[] = {TraceFamily::kMultiGpu, TraceFamily::kGpuShare, TraceFamily::kGpuSpec,
                                     TraceFamily::kCpu};

bool IsMultiGpu(const TraceTask& t) {
  return t.gpus >= 2;
}
bool IsShared(const TraceTask& t) {
  return t.gpus == 1 && t.gpu_milli < kMilli;
}

int MaxPercent(TraceFamily family) {
  return family == TraceFamily::kCpu ? 1000 : 100;
}

std::string KnownFamilies() {
  std::string out;
  for (TraceFamily f : kFamilies) out += std::string(TraceFamilyName(f)) + ", ";
  return out + "all";
}

// Draws GPU tasks with replacement from `in_kind` (P) and `others` (N) until the drawn demand
// reaches `demand`, P's drawn demand held at `share` of it (trace_families.h).
std::vector<const TraceTask*> DrawByDemandShare(const std::vector<const TraceTask*>& in_kind,
                                                const std::vector<const TraceTask*>& others,
                                                std::int64_t demand, double share, std::mt19937& rng) {
  std::vector<const TraceTask*> drawn;
  std::int64_t total = 0, in_kind_total = 0;
  while (total < demand) {
    const bool take_kind =
        others.empty() || static_cast<double>(in_kind_total) < share * static_cast<double>(total + 1);
    const std::vector<const TraceTask*>& pool = take_kind ? in_kind : others;
    const TraceTask* pick = pool[rng() % pool.size()];
    drawn.push_back(pick);
    total += pick->GpuMilli();
    if (take_kind) in_kind_total += pick->GpuMilli();
  }
  return drawn;
}

// The model pinned on a task of `gpus` GPUs: weighted by the model's GPUs in the node list,
// among the models with a node of at least `gpus`; empty when none has one.
std::string DrawModel(const std::map<std::string, std::pair<std::int64_t, int>>& models, int gpus,
                      std::mt19937& rng) {
  std::int64_t weight_total = 0;
  for (const auto& [model, totals] : models) {
    if (totals.second >= gpus) weight_total += totals.first;
  }
  if (weight_total == 0) return "";
  std::int64_t draw = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(weight_total));
  for (const auto& [model, totals] : models) {
    if (totals.second < gpus) continue;
    if (draw < totals.first) return model;
    draw -= totals.first;
  }
  return "";  // not reached: the draw is below the total
}

}  // namespace

std::string_view TraceFamilyName(TraceFamily family) {
  switch (family) {
    case TraceFamily::kMultiGpu:
      return "multigpu";
    case TraceFamily::kGpuShare:
      return "gpushare";
    case TraceFamily::kGpuSpec:
      return "gpuspec";
    case TraceFamily::kCpu:
      return "cpu";
  }
  return "?";
}

std::string TraceFamilyLevel::Name() const {
  return std::string(TraceFamilyName(family)) + std::to_string(percent);
}

std::vector<TraceFamilyLevel> DefaultFamilyLevels(TraceFamily family) {
  std::vector<int> percents;
  switch (family) {
    case TraceFamily::kMultiGpu:
      percents = {20, 30, 40, 50, 60};
      break;
    case TraceFamily::kGpuShare:
      percents = {40, 60, 80, 100};
      break;
    case TraceFamily::kGpuSpec:
      percents = {10, 20, 25, 33};
      break;
    case TraceFamily::kCpu:
      percents = {50, 200, 300};
      break;
  }
  std::vector<TraceFamilyLevel> out;
  for (int p : percents) out.push_back({family, p});
  return out;
}

Result<std::vector<TraceFamilyLevel>> ParseTraceFamilies(std::string_view spec) {
  std::vector<TraceFamilyLevel> out;
  auto add = [&out](const TraceFamilyLevel& level, std::string_view item) -> Status {
    if (std::find(out.begin(), out.end(), level) != out.end()) {
      return Error("\"" + std::string(item) + "\": level " + level.Name() + " listed twice");
    }
    out.push_back(level);
    return Status::Ok();
  };
  if (spec.empty()) return Error("no families given (known: " + KnownFamilies() + ")");
  for (std::string_view item : Split(spec, ',')) {
    if (item.empty()) return Error("an empty item in \"" + std::string(spec) + "\"");
    const std::vector<std::string_view> parts = Split(item, ':');
    if (parts[0] == "all" && parts.size() == 1) {
      for (TraceFamily f : kFamilies) {
        for (const TraceFamilyLevel& level : DefaultFamilyLevels(f))
          TOPOSCHED_RETURN_IF_ERROR(add(level, item));
      }
      continue;
    }
    const auto* family = std::find_if(std::begin(kFamilies), std::end(kFamilies),
                                      [&](TraceFamily f) { return TraceFamilyName(f) == parts[0]; });
    if (family == std::end(kFamilies)) {
      return Error("\"" + std::string(item) + "\": unknown family (known: " + KnownFamilies() + ")");
    }
    if (parts.size() == 1) {
      for (const TraceFamilyLevel& level : DefaultFamilyLevels(*family))
        TOPOSCHED_RETURN_IF_ERROR(add(level, item));
      continue;
    }
    for (std::size_t i = 1; i < parts.size(); ++i) {
      const std::optional<long long> percent = ParseInt(parts[i]);
      const int max = MaxPercent(*family);
      if (!percent || *percent < 1 || *percent > max) {
        return Error("\"" + std::string(item) + "\": level \"" + std::string(parts[i]) +
                     "\" is not a percent in 1.." + std::to_string(max));
      }
      TOPOSCHED_RETURN_IF_ERROR(add({*family, static_cast<int>(*percent)}, item));
    }
  }
  return out;
}

Result<Trace> MakeFamilyVariant(const Trace& base, const TraceFamilyLevel& level, std::uint32_t family_seed) {
  const std::string name = level.Name();
  if (level.percent < 1 || level.percent > MaxPercent(level.family)) {
    return Error(name + ": the level is not a percent in 1.." + std::to_string(MaxPercent(level.family)));
  }
  std::vector<const TraceTask*> cpu_only, gpu;
  std::int64_t demand = 0, cpu_total = 0;
  for (const TraceTask& t : base.tasks) {
    if (t.gpus == 0) {
      cpu_only.push_back(&t);
      cpu_total += t.cpu_milli;
      continue;
    }
    // A GPU task of no demand would stall the draws by demand.
    if (t.GpuMilli() <= 0) return Error(name + ": task " + t.name + " asks GPUs with gpu_milli 0");
    gpu.push_back(&t);
    demand += t.GpuMilli();
  }
  if (gpu.empty() && level.family != TraceFamily::kCpu) return Error(name + ": the base has no GPU tasks");
  std::mt19937 rng(family_seed);
  const double share = level.percent / 100.0;
  std::vector<TraceTask> tasks;
  switch (level.family) {
    case TraceFamily::kMultiGpu:
    case TraceFamily::kGpuShare: {
      const bool multi = level.family == TraceFamily::kMultiGpu;
      std::vector<const TraceTask*> in_kind, others;
      for (const TraceTask* t : gpu) {
        const bool raised = multi ? IsMultiGpu(*t) : IsShared(*t);
        (raised ? in_kind : others).push_back(t);
      }
      if (in_kind.empty()) {
        return Error(name + ": the base has no " + (multi ? "multi-GPU" : "shared") + " tasks to draw from");
      }
      for (const TraceTask* t : cpu_only) tasks.push_back(*t);
      for (const TraceTask* t : DrawByDemandShare(in_kind, others, demand, share, rng)) tasks.push_back(*t);
      break;
    }
    case TraceFamily::kGpuSpec: {
      // Per model: its GPUs in the node list and the most GPUs one of its nodes has.
      std::map<std::string, std::pair<std::int64_t, int>> models;
      for (const TraceNode& n : base.nodes) {
        if (n.gpus == 0 || n.model.empty()) continue;
        auto& [gpus, largest] = models[n.model];
        gpus += n.gpus;
        largest = std::max(largest, n.gpus);
      }
      std::vector<std::size_t> order(gpu.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      const auto pinned = static_cast<std::size_t>(std::lround(share * static_cast<double>(gpu.size())));
      std::vector<std::string> spec(gpu.size());
      for (std::size_t i = 0; i < pinned && i < order.size(); ++i) {
        spec[order[i]] = DrawModel(models, gpu[order[i]]->gpus, rng);
      }
      for (const TraceTask* t : cpu_only) tasks.push_back(*t);
      for (std::size_t i = 0; i < gpu.size(); ++i) {
        tasks.push_back(*gpu[i]);
        if (!spec[i].empty()) tasks.back().gpu_spec = {spec[i]};
      }
      break;
    }
    case TraceFamily::kCpu: {
      const double target = share * static_cast<double>(cpu_total);
      std::int64_t drawn = 0;
      while (!cpu_only.empty() && static_cast<double>(drawn) < target) {
        const TraceTask* pick = cpu_only[rng() % cpu_only.size()];
        tasks.push_back(*pick);
        drawn += pick->cpu_milli;
      }
      for (const TraceTask* t : gpu) tasks.push_back(*t);
      break;
    }
  }
  Trace out;
  out.variant = name;
  out.nodes = base.nodes;
  char index[24];
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    std::snprintf(index, sizeof index, "-%05zu", i);
    tasks[i].name = name + index;
    tasks[i].creation_s = static_cast<double>(i);
  }
  out.tasks = std::move(tasks);
  return out;
}

std::string FormatTraceTasksCsv(const std::vector<TraceTask>& tasks) {
  std::string out = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time\n";
  for (const TraceTask& t : tasks) {
    std::string spec;
    for (const std::string& model : t.gpu_spec) spec += (spec.empty() ? "" : "|") + model;
    out += t.name + "," + std::to_string(t.cpu_milli) + "," + std::to_string(t.memory_mib) + "," +
           std::to_string(t.gpus) + "," + std::to_string(t.gpu_milli) + "," + spec + "," +
           std::to_string(std::llround(t.creation_s)) + "\n";
  }
  return out;
}

TraceMixFacts MixFactsOf(const std::vector<TraceTask>& tasks) {
  TraceMixFacts facts;
  facts.tasks = tasks.size();
  std::int64_t demand = 0, multi = 0, shared = 0;
  std::size_t gpu_tasks = 0, pinned = 0;
  for (const TraceTask& t : tasks) {
    if (t.gpus == 0) {
      facts.cpu_only_cpu_milli += t.cpu_milli;
      continue;
    }
    ++gpu_tasks;
    if (!t.gpu_spec.empty()) ++pinned;
    demand += t.GpuMilli();
    if (IsMultiGpu(t)) multi += t.GpuMilli();
    if (IsShared(t)) shared += t.GpuMilli();
  }
  if (demand > 0) {
    facts.multi_gpu_demand = static_cast<double>(multi) / static_cast<double>(demand);
    facts.shared_demand = static_cast<double>(shared) / static_cast<double>(demand);
  }
  if (gpu_tasks > 0) facts.pinned_tasks = static_cast<double>(pinned) / static_cast<double>(gpu_tasks);
  return facts;
}

}  // namespace toposched::simulate
