#pragma once
// ExpectedFragmentation: capacity first. Prefers the node where the placement makes the node's
// expected GPU fragmentation grow least (packing::Fragmentation, the measure of FGD, Weng et
// al., USENIX ATC '23): the idle GPU capacity that the workload's typical pods could not use.
// It sees what a placement strands for the shapes still to come: a share that leaves 0.3 of a
// GPU where typical shares need 0.5, a 1-GPU pod that breaks the last node with 8 free GPUs
// while a half-used node could take it, free GPUs on a node whose CPU is exhausted.
//
// The typical shapes come from the cycle (CycleState::shape_mix: the simulator derives them from
// its workload, FGD's way); without them, the request's own shape alone (pack so that more pods
// like this one still fit).
//
// Score = round(100 * sigmoid(-delta / scale)), delta = F(after) - F(before) in milli-GPU and
// scale = the `scale` arg (default 1000, one GPU). Placing without adding fragmentation scores
// 50; each GPU's worth of capacity stranded for the typical pod costs about 25 points near 0.
// On by default (weight 15) since the measure counts RDMA NICs (packing.h): it lifts the GPU
// allocation ratio on the Alibaba trace and places more pods than every baseline on the
// embedded `simulate` default; the figures are in docs/placement.md, "Capacity by default".
//
// Whole-GPU and shared requests alike; the engine still chooses the GPUs within the node.

#include <memory>
#include <optional>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/plugin.h"
#include "toposched/framework/registry.h"
#include "toposched/placement/packing.h"

namespace toposched::plugins::expected_fragmentation {

inline constexpr std::string_view kName = "ExpectedFragmentation";
// On by default since the measure counts RDMA NICs (packing.h): on the embedded `simulate`
// default (seeds 1-8) it places more pods than every baseline and keeps more whole 8-GPU slots;
// docs/placement.md, "Capacity by default", has the runs and what it costs the KV paths.
inline constexpr int kDefaultWeight = 15;
inline constexpr std::string_view kScaleArg = "scale";
inline constexpr double kDefaultScale = 1000;

class ExpectedFragmentation final : public framework::ScorePlugin {
 public:
  explicit ExpectedFragmentation(double scale = kDefaultScale) : scale_(scale) {}
  std::string_view Name() const override { return kName; }
  bool PacksForShapeMix() const override { return true; }
  framework::ScoreResult Score(framework::CycleState& state, const framework::NodeInfo& node) const override;

 private:
  double scale_;
};

// The fragmentation before and after the cycle's placement on `node`, in milli-GPU; nullopt
// when the node has no placement for the request.
struct Delta {
  double before = 0, after = 0;
};
std::optional<Delta> FragmentationDelta(framework::CycleState& state, const framework::NodeInfo& node);

// Args: scale (milli-GPU, > 0).
Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args);

}  // namespace toposched::plugins::expected_fragmentation
