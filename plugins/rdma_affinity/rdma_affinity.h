#pragma once
// RdmaAffinity: pods that ask no RDMA NIC prefer nodes without RDMA NICs, so the scarce
// GPU+NIC nodes stay whole for the pods (training, prefill, decode with RDMA) that need them.
// Found with `toposched simulate`: without it, shared and NIC-less pods settle on the last free
// GPUs of HGX nodes and no 8-GPU slot ever empties (docs/placement.md, "Simulator").

#include <memory>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/plugin.h"
#include "toposched/framework/registry.h"

namespace toposched::plugins::rdma_affinity {

inline constexpr std::string_view kName = "RdmaAffinity";
inline constexpr int kDefaultWeight = 3;

// Score: a pod asking RDMA NICs, neutral 100. A pod asking none: 100 on a node without RDMA
// NICs; on a node with R RDMA NICs of which F are free, round(100 * (R - F) / R) -- a node whose
// NICs are all taken costs nothing more to use, a node with every NIC free costs the most.
class RdmaAffinity final : public framework::ScorePlugin {
 public:
  std::string_view Name() const override { return kName; }
  framework::ScoreResult Score(framework::CycleState& state, const framework::NodeInfo& node) const override;
};

// Takes no args.
Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args);

}  // namespace toposched::plugins::rdma_affinity
