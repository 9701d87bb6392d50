#include "shared_gpu/shared_gpu.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "common/plugin_util.h"
#include "toposched/framework/allocation.h"

namespace toposched::plugins::shared_gpu {

NodeUsage UsageOf(const NodeTopology& t, const NodeAllocation& allocated) {
  NodeUsage u;
  std::int64_t mem_used = 0, mem_total = 0, cores_used = 0;
  for (const Gpu& gpu : t.gpus) {
    ++u.gpus;
    const bool whole = GpuExclusive(allocated, gpu.index);
    const GpuShareUsage shares = GpuShares(allocated, gpu.index);
    if (whole || shares.shares > 0) ++u.gpus_in_use;
    const auto mem = static_cast<std::int64_t>(gpu.memory_mib);
    mem_total += mem;
    mem_used += whole ? mem : std::min(shares.memory_mib, mem);
    cores_used += whole ? kFullGpuCores : std::min(shares.cores, kFullGpuCores);
  }
  if (u.gpus == 0) return u;
  const double in_use = static_cast<double>(u.gpus_in_use) / u.gpus;
  u.cores_fraction = static_cast<double>(cores_used) / (static_cast<double>(kFullGpuCores) * u.gpus);
  if (mem_total > 0) {
    u.memory_fraction = static_cast<double>(mem_used) / static_cast<double>(mem_total);
    u.usage = (in_use + u.memory_fraction + u.cores_fraction) / 3;
  } else {
    u.memory_fraction = -1;
    u.usage = (in_use + u.cores_fraction) / 2;
  }
  return u;
}

framework::ScoreResult SharedGpu::Score(framework::CycleState& state, const framework::NodeInfo& node) const {
  const PlacementRequest& request = state.request();
  if (state.packs_by_mix_without_nics()) return {framework::kMaxScore, std::string(kPacksByMix), false};
  if (!request.IsShared()) return {framework::kMaxScore, "whole-GPU request: neutral -> 100"};
  const PlacementOutcome& outcome = state.Outcome(node);
  if (!outcome.ok()) return {framework::kMinScore, "no placement on this node -> 0"};
  NodeAllocation after = node.allocated;
  const framework::AllocationDelta delta = framework::DeltaOf(*node.topology, request, *outcome.placement);
  if (Status s = framework::ApplyDelta(*node.topology, delta, after); !s.ok()) {
    return {framework::kMinScore,
            "placement conflicts with the allocation (" + s.error().message() + ") -> 0"};
  }
  const NodeUsage u = UsageOf(*node.topology, after);
  const PackPolicy policy =
      request.node_policy == PackPolicy::kDefault ? default_node_policy_ : request.node_policy;
  const bool binpack = policy == PackPolicy::kBinpack;
  const int score = RoundScore(100.0 * (binpack ? u.usage : 1.0 - u.usage));
  char figures[160];
  if (u.memory_fraction >= 0) {
    std::snprintf(figures, sizeof figures, "%d/%d GPUs in use, memory %.0f%%, compute %.0f%% -> usage %.1f%%",
                  u.gpus_in_use, u.gpus, 100 * u.memory_fraction, 100 * u.cores_fraction, 100 * u.usage);
  } else {
    std::snprintf(figures, sizeof figures,
                  "%d/%d GPUs in use, memory unknown, compute %.0f%% -> usage %.1f%%", u.gpus_in_use, u.gpus,
                  100 * u.cores_fraction, 100 * u.usage);
  }
  std::string why = std::string(binpack ? "binpack" : "spread") +
                    (request.node_policy == PackPolicy::kDefault ? " (default)" : "") + ": after placement " +
                    figures + " -> " + std::to_string(score);
  return {score, std::move(why)};
}

Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args) {
  PackPolicy policy = PackPolicy::kBinpack;
  for (const auto& [key, value] : args) {
    if (key != kDefaultNodePolicyArg) {
      return Error("unknown arg \"" + key + "\" (known: " + std::string(kDefaultNodePolicyArg) + ")");
    }
    if (value == "binpack") {
      policy = PackPolicy::kBinpack;
    } else if (value == "spread") {
      policy = PackPolicy::kSpread;
    } else {
      return Error(key + ": \"" + value + "\" is not a policy (binpack, spread)");
    }
  }
  return AsPlugin(std::make_unique<SharedGpu>(policy));
}

}  // namespace toposched::plugins::shared_gpu
