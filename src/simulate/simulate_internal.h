#pragma once
// Pieces of the simulator shared between its source files; not part of the public API.

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "toposched/simulate/simulator.h"

namespace toposched::simulate {

// A Placement for a baseline's chosen devices: pairs by PairNearest, worst class and class sum
// by LinkRank. nullopt when the request's hard alignment bound is not met.
std::optional<Placement> FinishPlacement(const NodeTopology& topology, const PlacementRequest& request,
                                         std::vector<int> gpus, std::vector<int> nics);

// first-fit, gpu-only or root-complex; null for any other name.
std::unique_ptr<Policy> MakeBaselinePolicy(std::string_view name, const EngineOptions& options);

// The framework path: filter every node, score the feasible ones, reserve on the best.
// `registry` null: the builtin plugins.
Result<std::unique_ptr<Policy>> MakeToposchedPolicy(const framework::SchedulerConfig& config,
                                                    const framework::Registry* registry);

// Every builtin plugin with its default weight (the framework's default config).
framework::SchedulerConfig BuiltinDefaultConfig();

}  // namespace toposched::simulate
