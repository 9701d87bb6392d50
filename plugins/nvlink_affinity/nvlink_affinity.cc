#include "nvlink_affinity/nvlink_affinity.h"

#include <algorithm>
#include <string>

#include "common/plugin_util.h"

namespace toposched::plugins::nvlink_affinity {

int NvlinkScore(int worst_rank, int nv_pairs, int pairs) {
  if (pairs <= 0 || worst_rank <= 0) return framework::kMaxScore;
  const int bonus = (26 * nv_pairs + pairs) / (2 * pairs);  // round half up of 13*nv_pairs/pairs
  return std::clamp(70 - 14 * (worst_rank - 1) + bonus, framework::kMinScore, framework::kMaxScore);
}

framework::ScoreResult NvlinkAffinity::Score(framework::CycleState& state,
                                             const framework::NodeInfo& node) const {
  const PlacementOutcome& outcome = state.Outcome(node);
  if (!outcome.ok()) return {framework::kMinScore, "no placement on this node -> 0"};
  const Placement& p = *outcome.placement;
  const int g = static_cast<int>(p.gpus.size());
  if (g <= 1) return {framework::kMaxScore, std::to_string(g) + " GPU(s): no GPU pairs, neutral -> 100"};
  const NodeTopology& t = *node.topology;
  const int pairs = g * (g - 1) / 2;
  int nv_pairs = 0;
  for (int i = 0; i < g; ++i) {
    for (int j = i + 1; j < g; ++j) {
      if (t.gpu_gpu.at(p.gpus[i], p.gpus[j]).cls == LinkClass::kNV) ++nv_pairs;
    }
  }
  const int r = p.cost.worst_gpu_gpu;
  const int links = -p.cost.neg_nvlinks;
  const int score = NvlinkScore(r, nv_pairs, pairs);
  if (!state.explain()) return {score, {}};  // numbers only (the extender's verbs)
  std::string why = std::to_string(nv_pairs) + " of " + std::to_string(pairs) + " GPU pairs on NVLink (" +
                    std::to_string(links) + " links), worst pair " + std::string(RankName(r));
  if (r == 0) {
    why += " -> 100";
  } else {
    why += " (rank " + std::to_string(r) + ") -> 70 - 14*" + std::to_string(r - 1) + " + round(13*" +
           std::to_string(nv_pairs) + "/" + std::to_string(pairs) + ") = " + std::to_string(score);
  }
  return {score, std::move(why)};
}

Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args) {
  TOPOSCHED_RETURN_IF_ERROR(RequireNoArgs(args));
  return AsPlugin(std::make_unique<NvlinkAffinity>());
}

}  // namespace toposched::plugins::nvlink_affinity
