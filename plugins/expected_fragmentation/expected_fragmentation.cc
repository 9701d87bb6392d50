#include "expected_fragmentation/expected_fragmentation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/plugin_util.h"
#include "toposched/framework/allocation.h"

namespace toposched::plugins::expected_fragmentation {

std::optional<Delta> FragmentationDelta(framework::CycleState& state, const framework::NodeInfo& node) {
  const PlacementOutcome& outcome = state.Outcome(node);
  if (!outcome.ok() || node.topology == nullptr) return std::nullopt;
  const PlacementRequest& request = state.request();
  const packing::Shape shape = packing::ShapeOf(request, request.cpu_milli);
  packing::ShapeMix own;
  const packing::ShapeMix* mix = state.shape_mix();
  if (mix == nullptr || mix->shapes.empty()) {
    own.shapes.push_back({shape, 1.0});
    mix = &own;
  }
  NodeAllocation after = node.allocated;
  const framework::AllocationDelta delta = framework::DeltaOf(*node.topology, request, *outcome.placement);
  if (Status s = framework::ApplyDelta(*node.topology, delta, after); !s.ok()) return std::nullopt;
  std::int64_t cpu_after = node.cpu_milli_free;
  if (cpu_after >= 0) cpu_after = std::max<std::int64_t>(0, cpu_after - request.cpu_milli);
  Delta d;
  d.before = packing::Fragmentation(
      packing::StateOf(*node.topology, node.allocated, request.vendor, node.cpu_milli_free), *mix);
  d.after = packing::Fragmentation(packing::StateOf(*node.topology, after, request.vendor, cpu_after), *mix);
  return d;
}

framework::ScoreResult ExpectedFragmentation::Score(framework::CycleState& state,
                                                    const framework::NodeInfo& node) const {
  const std::optional<Delta> d = FragmentationDelta(state, node);
  if (!d) return {framework::kMinScore, "no placement on this node -> 0"};
  const double grow = d->after - d->before;
  const int score = RoundScore(100.0 / (1.0 + std::exp(grow / scale_)));
  if (!state.explain()) return {score, {}};
  char why[200];
  std::snprintf(why, sizeof why,
                "expected fragmentation %.0f -> %.0f milli-GPU (%+.0f) -> 100 * sigmoid(-%.0f/%.0f) = %d",
                d->before, d->after, grow, grow, scale_, score);
  return {score, why};
}

Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args) {
  double scale = kDefaultScale;
  for (const auto& [key, value] : args) {
    if (key != kScaleArg) return Error("unknown arg \"" + key + "\" (known: " + std::string(kScaleArg) + ")");
    char* end = nullptr;
    scale = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !std::isfinite(scale) || scale <= 0 || scale > 1e9) {
      return Error(key + ": \"" + value + "\" is not a positive number of milli-GPU");
    }
  }
  return AsPlugin(std::make_unique<ExpectedFragmentation>(scale));
}

}  // namespace toposched::plugins::expected_fragmentation
