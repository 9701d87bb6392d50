#include "gpu_nic_alignment/gpu_nic_alignment.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "common/plugin_util.h"

namespace toposched::plugins::gpu_nic_alignment {

int AlignmentScore(int worst_rank, int rank_sum, int pairs) {
  if (pairs <= 0) return framework::kMaxScore;
  // round(3*(m-1)) with m = rank_sum/pairs, in integers: round half up of 3*(rank_sum-pairs)/pairs.
  const int mean_term = (6 * (rank_sum - pairs) + pairs) / (2 * pairs);
  return std::clamp(100 - 17 * (worst_rank - 1) - mean_term, framework::kMinScore, framework::kMaxScore);
}

framework::ScoreResult GpuNicAlignment::Score(framework::CycleState& state,
                                              const framework::NodeInfo& node) const {
  if (state.request().rdma_nics == 0) {
    return {framework::kMaxScore, "no RDMA NICs requested: neutral -> 100"};
  }
  const PlacementOutcome& outcome = state.Outcome(node);
  if (!outcome.ok()) return {framework::kMinScore, "no placement on this node -> 0"};
  const Placement& p = *outcome.placement;
  const int pairs = static_cast<int>(p.pairs.size());
  if (pairs == 0) return {framework::kMaxScore, "no GPU->NIC pairs in the placement: neutral -> 100"};
  const int r = p.cost.worst_gpu_nic;
  const int sum = p.cost.sum_gpu_nic;
  const int score = AlignmentScore(r, sum, pairs);
  if (!state.explain()) return {score, {}};  // numbers only (the extender's verbs)
  char mean[32];
  std::snprintf(mean, sizeof mean, "%.2f", static_cast<double>(sum) / pairs);
  std::string why = "worst GPU->NIC " + std::string(RankName(r)) + " (rank " + std::to_string(r) + "), sum " +
                    std::to_string(sum) + " over " + std::to_string(pairs) + " pairs (mean " + mean +
                    ") -> 100 - 17*" + std::to_string(r - 1) + " - round(3*(" + mean +
                    "-1)) = " + std::to_string(score);
  if (p.best_possible_worst > 0 && p.best_possible_worst < r) {
    why += "; this node could give " + std::string(RankName(p.best_possible_worst)) +
           " if its devices were free";
  }
  return {score, std::move(why)};
}

Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args) {
  TOPOSCHED_RETURN_IF_ERROR(RequireNoArgs(args));
  return AsPlugin(std::make_unique<GpuNicAlignment>());
}

}  // namespace toposched::plugins::gpu_nic_alignment
