#pragma once
// GpuNicAlignment: prefers nodes where the pod's GPUs sit next to the RDMA NICs that serve them
// (GPUDirect RDMA runs at full speed only through a PCIe switch; DESIGN.md "Why it exists").

#include <memory>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/plugin.h"
#include "toposched/framework/registry.h"

namespace toposched::plugins::gpu_nic_alignment {

inline constexpr std::string_view kName = "GpuNicAlignment";
inline constexpr int kDefaultWeight = 5;  // the first term of the placement objective

// Score, from the engine's cost of the node's best placement: with r = worst GPU->NIC LinkRank
// (PIX 1 .. SYS 6) and m = mean rank over the GPU->NIC pairs (1 <= m <= r),
//   score = 100 - 17*(r - 1) - round(3*(m - 1))        (never below 0: r = m = 6 gives 0)
// so PIX everywhere = 100, worst PXB = 80..83, PHB = 60..66, NODE = 40..49, SYS(pkg) = 20..32,
// SYS = 0..15. A step of the worst class (17) outweighs the whole mean term (at most 3*(r-1) <= 15),
// so nodes are ordered by worst class first, then by mean, as the engine's objective orders
// placements. Requests without NICs score a neutral 100.
class GpuNicAlignment final : public framework::ScorePlugin {
 public:
  std::string_view Name() const override { return kName; }
  framework::ScoreResult Score(framework::CycleState& state, const framework::NodeInfo& node) const override;
};

int AlignmentScore(int worst_rank, int rank_sum, int pairs);

// Takes no args.
Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args);

}  // namespace toposched::plugins::gpu_nic_alignment
