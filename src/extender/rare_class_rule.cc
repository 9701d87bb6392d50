#include "rare_class_rule.h"

#include <algorithm>
#include <memory>

namespace toposched::extender {
namespace {

// The nodes of one version of one pool's members, sorted and unique, kept per thread while the
// store hands out the same member list (ClusterStore::VersionedPoolMembers shares one list per
// version): a pool pod's prioritize calls of one version build the set once.
struct PoolNodes {
  std::shared_ptr<const std::vector<framework::PoolMember>> members;
  std::shared_ptr<const std::vector<std::string>> nodes;
};

std::shared_ptr<const std::vector<std::string>> NodesOf(
    std::shared_ptr<const std::vector<framework::PoolMember>> members) {
  thread_local PoolNodes kept;
  if (kept.members != members) {
    auto nodes = std::make_shared<std::vector<std::string>>();
    for (const framework::PoolMember& m : *members) nodes->push_back(m.node);
    std::sort(nodes->begin(), nodes->end());
    nodes->erase(std::unique(nodes->begin(), nodes->end()), nodes->end());
    kept.nodes = std::move(nodes);
    kept.members = std::move(members);
  }
  return kept.nodes;
}

}  // namespace

RareClassRule::RareClassRule(const framework::Framework& framework, const PlacementRequest& request,
                             const packing::ShapeMix* mix, const state::Snapshot& snapshot,
                             const state::ClusterStore* store)
    : vendor_(request.vendor) {
  if (!framework.RareClassLast() || mix == nullptr || request.rdma_nics <= 0) return;
  rare_ = packing::RareShape(*mix, packing::ShapeOf(request), request.vendor, snapshot.census());
  if (!rare_ || request.pool.empty() || store == nullptr) return;
  auto members = store->VersionedPoolMembers(request.pool).second;
  if (members != nullptr) pool_nodes_ = NodesOf(std::move(members));
}

bool RareClassRule::HostsRare(const packing::NodeHardware& hardware) const {
  return rare_ && packing::HostsWhenEmpty(hardware, vendor_, *rare_);
}

bool RareClassRule::RunsThePool(std::string_view name) const {
  return pool_nodes_ != nullptr && std::binary_search(pool_nodes_->begin(), pool_nodes_->end(), name);
}

}  // namespace toposched::extender
