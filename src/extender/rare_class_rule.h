#pragma once
// A rare node class last in the extender's ranking (framework::CapacityBand, packing::RareShape;
// docs/placement.md, "A rare node class last"): for one pod's prioritize or explain call, which
// nodes are kept for the rare shape. The rare shape comes from the pod's typical pods (the
// window's mix when the extender first saw it) and the snapshot's hardware census; the nodes
// already running the pod's own Prefill/Decode pool are never kept from it.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/framework/framework.h"
#include "toposched/placement/rare_class.h"
#include "toposched/placement/request.h"
#include "toposched/state/cluster_state.h"

namespace toposched::extender {

class RareClassRule {
 public:
  // Inactive (no node kept) when the framework's rule is off, the pod asks no RDMA NIC, `mix` is
  // null or no typical shape is rarer than the pod's own. `store` (may be null) gives the pod's
  // pool members.
  RareClassRule(const framework::Framework& framework, const PlacementRequest& request, const packing::ShapeMix* mix,
                const state::Snapshot& snapshot, const state::ClusterStore* store);
  bool active() const { return rare_.has_value(); }
  const std::optional<packing::Shape>& rare() const { return rare_; }
  // Whether the node `name` with `hardware` is kept for the rare shape: its hardware could host
  // it (HostsRare, a property of the node's class) and the pod's pool does not run there.
  bool Reserved(const packing::NodeHardware& hardware, std::string_view name) const {
    return HostsRare(hardware) && !RunsThePool(name);
  }
  bool HostsRare(const packing::NodeHardware& hardware) const;
  bool RunsThePool(std::string_view name) const;

 private:
  std::optional<packing::Shape> rare_;
  GpuVendor vendor_ = GpuVendor::kNvidia;
  // The nodes of the pod's pool, sorted and unique (kept per thread for the pool's version:
  // one set per version, not per call); null: no pool, or the rule is inactive.
  std::shared_ptr<const std::vector<std::string>> pool_nodes_;
};

}  // namespace toposched::extender
