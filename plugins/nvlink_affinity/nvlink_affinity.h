#pragma once
// NvlinkAffinity: prefers nodes where the pod's GPUs talk to each other over NVLink (or xGMI).
// Collective operations (all-reduce rings and trees) run at the speed of their slowest hop, so
// the worst GPU pair decides most of the score.

#include <memory>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/plugin.h"
#include "toposched/framework/registry.h"

namespace toposched::plugins::nvlink_affinity {

inline constexpr std::string_view kName = "NvlinkAffinity";
inline constexpr int kDefaultWeight = 3;  // the third term of the placement objective

// Score, from the engine's best placement on the node, with r = worst GPU<->GPU LinkRank among
// the chosen GPUs (NV 0, PIX 1 .. SYS 6) and f = the fraction of chosen GPU pairs joined by
// NVLink/xGMI:
//   r == 0 (every pair NV)  -> 100
//   otherwise               -> 70 - 14*(r - 1) + round(13*f)
// so worst PIX = 70..82, PXB = 56..68, ..., SYS = 0..12: the worst pair orders nodes first
// (13*f < 14), the NVLinked share of the pairs second. One GPU or none: neutral 100.
// The number of bonded links is reported, not scored: every all-NV placement of a node is
// already the engine's best, and preferring one GPU model's NV18 over another's NV12 is a
// question of which hardware a pod wants, not of topology.
class NvlinkAffinity final : public framework::ScorePlugin {
 public:
  std::string_view Name() const override { return kName; }
  framework::ScoreResult Score(framework::CycleState& state, const framework::NodeInfo& node) const override;
};

int NvlinkScore(int worst_rank, int nv_pairs, int pairs);

// Takes no args.
Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args);

}  // namespace toposched::plugins::nvlink_affinity
