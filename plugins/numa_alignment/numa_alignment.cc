#include "numa_alignment/numa_alignment.h"

#include <map>
#include <string>

#include "common/plugin_util.h"

namespace toposched::plugins::numa_alignment {

framework::ScoreResult NumaAlignment::Score(framework::CycleState& state,
                                            const framework::NodeInfo& node) const {
  const PlacementOutcome& outcome = state.Outcome(node);
  if (!outcome.ok()) return {framework::kMinScore, "no placement on this node -> 0"};
  const Placement& p = *outcome.placement;
  const NodeTopology& t = *node.topology;
  std::map<int, int> per_numa;  // NUMA id -> chosen devices there
  int unknown = 0;
  auto count = [&](int numa) {
    if (numa < 0) {
      ++unknown;
    } else {
      ++per_numa[numa];
    }
  };
  for (int g : p.gpus) count(t.gpus[static_cast<std::size_t>(g)].numa);
  for (int n : p.nics) count(t.nics[static_cast<std::size_t>(n)].numa);
  int known = 0, best = 0, best_numa = -1;
  for (const auto& [numa, k] : per_numa) {
    known += k;
    if (k > best) {  // ties: the lowest NUMA id, deterministic
      best = k;
      best_numa = numa;
    }
  }
  if (known == 0) {
    return {framework::kMaxScore, unknown == 0 ? "no devices placed: neutral -> 100"
                                               : "NUMA locality of the devices unknown: neutral -> 100"};
  }
  const int score = RoundScore(100.0 * best / known);
  if (!state.explain()) return {score, {}};  // numbers only (the extender's verbs)
  std::string why = std::to_string(best) + " of " + std::to_string(known) +
                    " devices (GPUs and NICs) on NUMA " + std::to_string(best_numa) + " -> round(100*" +
                    std::to_string(best) + "/" + std::to_string(known) + ") = " + std::to_string(score);
  if (unknown > 0) why += "; " + std::to_string(unknown) + " of unknown locality not counted";
  return {score, std::move(why)};
}

Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args) {
  TOPOSCHED_RETURN_IF_ERROR(RequireNoArgs(args));
  return AsPlugin(std::make_unique<NumaAlignment>());
}

}  // namespace toposched::plugins::numa_alignment
