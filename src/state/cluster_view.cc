// The store-backed ClusterView the extender hands pool-aware plugins, one per request.

#include <utility>

#include "toposched/framework/allocation.h"
#include "toposched/state/cluster_state.h"

namespace toposched::state {
namespace {

class SnapshotClusterView : public framework::ClusterView {
 public:
  SnapshotClusterView(std::shared_ptr<const Snapshot> snapshot, const pd::NetworkConfig& network, std::string pool,
                      std::vector<framework::PoolMember> members,
                      std::shared_ptr<const std::map<std::string, pd::Location>> hyper_nodes)
      : snapshot_(std::move(snapshot)),
        network_(network),
        pool_(std::move(pool)),
        members_(std::move(members)),
        hyper_nodes_(std::move(hyper_nodes)) {}

  const pd::NetworkConfig& network() const override { return network_; }

  pd::Location Locate(std::string_view node) const override {
    if (hyper_nodes_ != nullptr) {
      const auto it = hyper_nodes_->find(std::string(node));
      if (it != hyper_nodes_->end()) return it->second;
    }
    if (const NodeRecord* record = snapshot_->Find(node)) return pd::LocateByLabels(network_, node, record->labels);
    return pd::LocateByLabels(network_, node, {});
  }

  std::vector<framework::PoolMember> PoolMembers(std::string_view pool) const override {
    return pool == pool_ ? members_ : std::vector<framework::PoolMember>{};
  }

  void ForEachNode(const std::function<void(const framework::NodeSummary&)>& fn) const override {
    // One Location refilled in place: its strings keep their buffers, so a pass over thousands
    // of nodes allocates nothing per node.
    pd::Location location;
    location.domains.resize(network_.tiers.size());
    for (const auto& record : snapshot_->nodes()) {
      int free_gpus = 0, free_nics = 0;
      if (record->topology != nullptr) {
        const NodeTopology& t = *record->topology;
        for (std::size_t g = 0; g < t.gpus.size(); ++g) {
          if (framework::GpuFree(record->allocated, static_cast<int>(g))) ++free_gpus;
        }
        for (std::size_t n = 0; n < t.nics.size(); ++n) {
          if (t.nics[n].rdma && !framework::NicUsed(record->allocated, static_cast<int>(n))) ++free_nics;
        }
      }
      location.node.assign(record->name);
      const pd::Location* placed = nullptr;
      if (hyper_nodes_ != nullptr) {
        if (const auto it = hyper_nodes_->find(record->name); it != hyper_nodes_->end()) placed = &it->second;
      }
      for (std::size_t t = 0; t < network_.tiers.size(); ++t) {  // as Locate does
        if (placed != nullptr) {
          location.domains[t].assign(t < placed->domains.size() ? placed->domains[t] : std::string());
          continue;
        }
        const auto label = record->labels.find(network_.tiers[t].label);
        if (label == record->labels.end()) location.domains[t].clear();
        else location.domains[t].assign(label->second);
      }
      fn(framework::NodeSummary{record->name, &location, free_gpus, free_nics, record->schedulable});
    }
  }

 private:
  std::shared_ptr<const Snapshot> snapshot_;
  const pd::NetworkConfig& network_;
  std::string pool_;
  std::vector<framework::PoolMember> members_;
  std::shared_ptr<const std::map<std::string, pd::Location>> hyper_nodes_;
};

}  // namespace

std::shared_ptr<const framework::ClusterView> MakeClusterView(
    const ClusterStore& store, std::shared_ptr<const Snapshot> snapshot, const pd::NetworkConfig& network,
    std::string_view pool, std::shared_ptr<const std::map<std::string, pd::Location>> hyper_nodes) {
  return MakeClusterView(std::move(snapshot), network, pool, store.PoolPods(pool), std::move(hyper_nodes));
}

std::shared_ptr<const framework::ClusterView> MakeClusterView(
    std::shared_ptr<const Snapshot> snapshot, const pd::NetworkConfig& network, std::string_view pool,
    const std::vector<PodAllocation>& pool_pods,
    std::shared_ptr<const std::map<std::string, pd::Location>> hyper_nodes) {
  std::vector<framework::PoolMember> members;
  members.reserve(pool_pods.size());
  for (const PodAllocation& a : pool_pods) {
    framework::PoolMember m;
    m.uid = a.uid;
    m.node = a.node;
    m.role = a.role;
    m.gpus = static_cast<int>(a.delta.exclusive_gpus.size() + a.delta.shares.size());
    m.rdma_nics = static_cast<int>(a.delta.nics.size());
    m.worst_class = a.worst_class;
    m.kv_ipc = a.kv_ipc;
    members.push_back(std::move(m));
  }
  return std::make_shared<SnapshotClusterView>(std::move(snapshot), network, std::string(pool), std::move(members),
                                               std::move(hyper_nodes));
}

}  // namespace toposched::state
