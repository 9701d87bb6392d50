#include "rare_class_rule.h"

#include <algorithm>

namespace toposched::extender {

RareClassRule::RareClassRule(const framework::Framework& framework, const PlacementRequest& request,
                             const packing::ShapeMix* mix, const state::Snapshot& snapshot,
                             const state::ClusterStore* store)
    : vendor_(request.vendor) {
  if (!framework.RareClassLast() || mix == nullptr || request.rdma_nics <= 0) return;
  rare_ = packing::RareShape(*mix, packing::ShapeOf(request), request.vendor, snapshot.census());
  if (!rare_ || request.pool.empty() || store == nullptr) return;
  const auto members = store->VersionedPoolMembers(request.pool).second;
  if (members == nullptr) return;
  for (const framework::PoolMember& m : *members) pool_nodes_.push_back(m.node);
  std::sort(pool_nodes_.begin(), pool_nodes_.end());
  pool_nodes_.erase(std::unique(pool_nodes_.begin(), pool_nodes_.end()), pool_nodes_.end());
}

bool RareClassRule::Reserved(const packing::NodeHardware& hardware, std::string_view name) const {
  if (!rare_ || !packing::HostsWhenEmpty(hardware, vendor_, *rare_)) return false;
  return !std::binary_search(pool_nodes_.begin(), pool_nodes_.end(), name);
}

}  // namespace toposched::extender
