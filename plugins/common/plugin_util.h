#pragma once
// Small helpers the built-in plugins share: naming link ranks in explanations, checking that a
// plugin got no args, rounding scores.

#include <cmath>
#include <memory>
#include <string>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/cycle_state.h"
#include "toposched/framework/registry.h"

namespace toposched::plugins {

// The printed name of a LinkRank value (placement.h): NV 0, PIX 1, PXB 2, PHB 3, NODE 4, SYS
// within one package 5 ("SYS(pkg)"), SYS across packages 6.
std::string_view RankName(int rank);

// Error naming every key when `args` is not empty: for plugins that take no arguments.
Status RequireNoArgs(const framework::PluginArgs& args);

// What a blind packing heuristic (Fragmentation's intact PCIe groups, RdmaAffinity's NIC nodes
// kept for NIC pods, SharedGpu's node packing) says where CycleState::packs_by_mix_without_nics():
// it then protects nothing the measure does not see, and would only pull against it, so it stands
// down (not counted).
inline constexpr std::string_view kPacksByMix =
    "the workload's typical pods ask no RDMA NIC and ExpectedFragmentation packs for them: not counted";

// Round half up to an int, for scores computed in floating point.
inline int RoundScore(double score) {
  return static_cast<int>(std::lround(score));
}

// The common shape of a factory: the plugin as a Plugin pointer, or the error.
template <typename P>
Result<std::unique_ptr<framework::Plugin>> AsPlugin(std::unique_ptr<P> plugin) {
  return std::unique_ptr<framework::Plugin>(std::move(plugin));
}

}  // namespace toposched::plugins
