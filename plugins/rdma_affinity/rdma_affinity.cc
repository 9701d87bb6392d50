#include "rdma_affinity/rdma_affinity.h"

#include <string>

#include "common/plugin_util.h"
#include "toposched/framework/allocation.h"

namespace toposched::plugins::rdma_affinity {

framework::ScoreResult RdmaAffinity::Score(framework::CycleState& state,
                                           const framework::NodeInfo& node) const {
  if (state.request().rdma_nics > 0) return {framework::kMaxScore, "pod asks RDMA NICs: neutral -> 100"};
  if (state.packs_by_mix_without_nics()) return {framework::kMaxScore, std::string(kPacksByMix), false};
  if (node.topology == nullptr) return {framework::kMinScore, "no topology -> 0"};
  const int total = node.topology->RdmaNicCount();
  if (total == 0) return {framework::kMaxScore, "no RDMA NICs on this node -> 100"};
  int used = 0;
  for (int n = 0; n < total; ++n) used += NicUsed(node.allocated, n) ? 1 : 0;
  const int score = (200 * used + total) / (2 * total);  // round half up of 100*used/total
  return {score, "pod asks no RDMA NIC; " + std::to_string(total - used) + " of " + std::to_string(total) +
                     " RDMA NICs free here -> round(100*" + std::to_string(used) + "/" +
                     std::to_string(total) + ") = " + std::to_string(score)};
}

Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args) {
  TOPOSCHED_RETURN_IF_ERROR(RequireNoArgs(args));
  return AsPlugin(std::make_unique<RdmaAffinity>());
}

}  // namespace toposched::plugins::rdma_affinity
