#pragma once
// Workload families for the trace replay: variants generated from the trace's own `default` pod
// list, varying one thing at a time over several levels, as the FGD paper (Weng et al., ATC '23)
// built its variants. Levels are GPU demand shares, as FGD's shipped variants define them (GPU
// demand of a task: num_gpu x gpu_milli; in gpushare40 the shared tasks hold 40.1 % of it, in
// multigpu20 the multi-GPU tasks 20.4 %; the default list: 28.5 % and 7.3 %).
//
// Base: the default variant's tasks. CPU-only tasks: gpus == 0; GPU tasks: gpus > 0; D: the GPU
// demand of the base's GPU tasks. Each level is generated on its own from the base with one
// std::mt19937 seeded with the family seed (the same seed for every level):
//
//   multigpu p: every CPU-only task kept; GPU tasks drawn with replacement (index: the draw
//     modulo the pool's size) from two pools, P the multi-GPU tasks (gpus >= 2), N the other GPU
//     tasks, until the drawn demand reaches D. A draw takes from P while P's drawn demand is
//     below p/100 x (the drawn demand so far + 1), or when N is empty; else from N. P's share of
//     the demand so ends within one task of p.
//   gpushare p: the same with P the shared tasks (gpus == 1, gpu_milli < 1000).
//   gpuspec p: every base task; round(p/100 x the GPU tasks) GPU tasks chosen without
//     replacement (std::shuffle of their indices, the first k) get a gpu_spec of one model,
//     drawn with probability proportional to the model's GPUs in the node list among the models
//     with a node of at least the task's GPUs (the draw modulo the weight total, models in name
//     order). A chosen task no model can hold keeps its gpu_spec.
//   cpu p: every GPU task of the base; CPU-only tasks drawn with replacement from the base's
//     until their cpu_milli reaches p/100 x the base's CPU-only total.
//
// The generated tasks: CPU-only ones first, then the GPU ones, each in draw (else base) order,
// renamed `<variant>-<5-digit index>` with creation_s = the index; the variant is named
// `multigpu40`, `gpushare100`, `gpuspec33`, `cpu300` and keeps the base's nodes. Deterministic
// for a base, level and seed (std::shuffle's draws are the standard library's).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/simulate/trace.h"

namespace toposched::simulate {

enum class TraceFamily : std::uint8_t { kMultiGpu, kGpuShare, kGpuSpec, kCpu };

struct TraceFamilyLevel {
  TraceFamily family = TraceFamily::kMultiGpu;
  int percent = 0;
  std::string Name() const;  // "multigpu40"
  bool operator==(const TraceFamilyLevel&) const = default;
};

// "multigpu", "gpushare", "gpuspec", "cpu".
std::string_view TraceFamilyName(TraceFamily family);
// multigpu 20, 30, 40, 50, 60; gpushare 40, 60, 80, 100; gpuspec 10, 20, 25, 33; cpu 50, 200, 300.
std::vector<TraceFamilyLevel> DefaultFamilyLevels(TraceFamily family);

// "all" (every family at its default levels), or a comma list of items, each a family (its
// default levels) or a family with its levels after colons: "multigpu:20:40,gpushare,cpu:300".
// Percents in 1..1000, at most 100 for multigpu, gpushare and gpuspec; a level listed twice is
// an error. Errors name the bad item.
Result<std::vector<TraceFamilyLevel>> ParseTraceFamilies(std::string_view spec);

// The level generated from `base` (the default variant), as the header comment says. Errors
// when the level cannot be met: no GPU tasks, or no task of the kind the level raises.
Result<Trace> MakeFamilyVariant(const Trace& base, const TraceFamilyLevel& level, std::uint32_t family_seed);

// The pod list CSV of `tasks` in the trace's own columns (name,cpu_milli,memory_mib,num_gpu,
// gpu_milli,gpu_spec,creation_time; models joined by '|', creation_time in whole seconds):
// ParseTraceTasks reads it back to the same tasks (in creation order, ties by name).
std::string FormatTraceTasksCsv(const std::vector<TraceTask>& tasks);

// What a set of tasks is, measured: the share (0..1) of the GPU demand in multi-GPU tasks and in
// shared tasks, the share of the GPU tasks with a gpu_spec, the CPU-only tasks' cpu_milli total.
struct TraceMixFacts {
  double multi_gpu_demand = 0, shared_demand = 0, pinned_tasks = 0;
  std::int64_t cpu_only_cpu_milli = 0;
  std::size_t tasks = 0;
};
TraceMixFacts MixFactsOf(const std::vector<TraceTask>& tasks);

}  // namespace toposched::simulate
