#include "rare_class_rule.h"

#include <memory>
#include <string>
#include <vector>

namespace toposched::extender {
namespace {

// The nodes of one version of one pool's members, kept per thread while the store hands out the
// same member list (ClusterStore::VersionedPoolMembers shares one list per version): a pool
// pod's prioritize calls of one version build the set once.
struct PoolNodes {
  std::shared_ptr<const std::vector<framework::PoolMember>> members;
  std::shared_ptr<const std::vector<std::string>> nodes;
};

std::shared_ptr<const std::vector<std::string>> NodesOf(
    std::shared_ptr<const std::vector<framework::PoolMember>> members) {
  thread_local PoolNodes kept;
  if (kept.members != members) {
    kept.nodes = framework::PoolNodesOf(*members);
    kept.members = std::move(members);
  }
  return kept.nodes;
}

}  // namespace

framework::RareClass RareClassFor(const framework::Framework& framework, const PlacementRequest& request,
                                  const packing::ShapeMix* mix, const state::Snapshot& snapshot,
                                  const state::ClusterStore* store) {
  return framework::RareClass(framework, request, mix, snapshot.census(),
                              [&]() -> std::shared_ptr<const std::vector<std::string>> {
                                if (store == nullptr) return nullptr;
                                auto members = store->VersionedPoolMembers(request.pool).second;
                                return members == nullptr ? nullptr : NodesOf(std::move(members));
                              });
}

}  // namespace toposched::extender
