// The store-backed ClusterView the extender hands pool-aware plugins, one per request.

#include <utility>

#include "toposched/framework/allocation.h"
#include "toposched/state/cluster_state.h"

namespace toposched::state {
namespace {

class SnapshotClusterView : public framework::ClusterView {
 public:
  SnapshotClusterView(std::shared_ptr<const Snapshot> snapshot, const pd::NetworkConfig& network,
                      std::string pool, std::shared_ptr<const std::vector<framework::PoolMember>> members,
                      std::shared_ptr<const std::map<std::string, pd::Location>> hyper_nodes,
                      std::uint64_t pool_version)
      : snapshot_(std::move(snapshot)),
        network_(network),
        pool_(std::move(pool)),
        members_(std::move(members)),
        hyper_nodes_(hyper_nodes != nullptr && !hyper_nodes->empty() ? std::move(hyper_nodes) : nullptr),
        resolved_(PositionsResolvedFor(*snapshot_, network_)),
        pool_version_(pool_version) {}

  const pd::NetworkConfig& network() const override { return network_; }

  pd::Location Locate(std::string_view node) const override {
    if (hyper_nodes_ != nullptr) {
      const auto it = hyper_nodes_->find(std::string(node));
      if (it != hyper_nodes_->end()) return it->second;
    }
    const NodeRecord* record = snapshot_->Find(node);
    if (record == nullptr) return pd::LocateByLabels(network_, node, {});
    if (resolved_) return record->position;
    return pd::LocateByLabels(network_, node, record->labels);
  }

  std::span<const framework::PoolMember> PoolMembers(std::string_view pool) const override {
    if (pool != pool_ || members_ == nullptr) return {};
    return *members_;
  }

  void ForEachNode(const std::function<void(const framework::NodeSummary&)>& fn) const override {
    // The records' own positions when the store resolved them under these tiers and no HyperNode
    // places a node: nothing is looked up or copied per node. Otherwise one Location refilled in
    // place (its strings keep their buffers, so the pass allocates nothing per node).
    const auto nodes = snapshot_->nodes();
    if (Hashed()) {
      // The snapshot's contiguous arrays: no record is read unless `fn` reads its location.
      for (std::size_t i = 0; i < nodes.size(); ++i) fn(Brief(i));
      return;
    }
    pd::Location location;
    location.domains.resize(network_.tiers.size());
    for (const auto& record : nodes) {
      fn(Summarize(*record, location));
    }
  }

  bool WithNode(std::string_view node,
                const std::function<void(const framework::NodeSummary&)>& fn) const override {
    const std::size_t i = snapshot_->IndexOf(node);
    if (i == Snapshot::npos) return false;
    if (Hashed()) {
      fn(Brief(i));
      return true;
    }
    pd::Location location;
    location.domains.resize(network_.tiers.size());
    fn(Summarize(*snapshot_->nodes()[i], location));
    return true;
  }

  framework::PoolToken PoolVersion(std::string_view pool) const override {
    // The members are those of pool_version_; the positions, the records' own (Hashed), are
    // those of the runs while they are the same object.
    if (pool != pool_ || pool_version_ == 0 || !Hashed()) return {};
    std::shared_ptr<const Snapshot::PositionRuns> runs = snapshot_->shared_position_runs();
    if (runs == nullptr) return {};
    return {pool_version_, std::move(runs)};
  }

  std::size_t PositionRunCount() const override {
    if (!Hashed()) return 0;
    const Snapshot::PositionRuns& runs = snapshot_->position_runs();
    return runs.starts.empty() ? 0 : runs.starts.size() - 1;
  }

  void ForEachNodeInRun(std::size_t run,
                        const std::function<bool(const framework::NodeSummary&)>& fn) const override {
    if (!Hashed()) return;
    const Snapshot::PositionRuns& runs = snapshot_->position_runs();
    if (run + 1 >= runs.starts.size()) return;
    for (std::uint32_t k = runs.starts[run]; k < runs.starts[run + 1]; ++k) {
      if (!fn(Brief(runs.order[k]))) return;
    }
  }

  void ForEachNodeByPosition(const std::function<bool(const framework::NodeSummary&)>& fn) const override {
    // The runs group nodes by the records' position hashes: only where ForEachNode gives those.
    if (!Hashed()) return ClusterView::ForEachNodeByPosition(fn);
    for (std::size_t r = 0, runs = PositionRunCount(); r < runs; ++r) ForEachNodeInRun(r, fn);
  }

 private:
  // ForEachNode reads the snapshot's arrays and the records' own positions.
  bool Hashed() const { return resolved_ && hyper_nodes_ == nullptr; }

  framework::NodeSummary Brief(std::size_t i) const {
    const Snapshot::Brief& b = snapshot_->briefs()[i];
    const std::size_t tiers = network_.tiers.size();
    return framework::NodeSummary{
        b.name,        &snapshot_->nodes()[i]->position,
        b.free_gpus,   b.free_rdma_nics,
        b.schedulable, tiers == 0 ? nullptr : snapshot_->position_hashes().data() + i * tiers,
        b.name_hash,   b.free_by_vendor};
  }

  // A record's summary when the view places nodes by HyperNodes or by other tiers than the
  // store's: `location` is refilled in place when the record's own position does not serve.
  framework::NodeSummary Summarize(const NodeRecord& record, pd::Location& location) const {
    const pd::Location* placed = nullptr;
    if (hyper_nodes_ != nullptr) {
      if (const auto it = hyper_nodes_->find(record.name); it != hyper_nodes_->end()) placed = &it->second;
    }
    const pd::Location* at = &location;
    if (placed == nullptr && resolved_) {
      at = &record.position;
    } else {
      location.node.assign(record.name);
      for (std::size_t t = 0; t < network_.tiers.size(); ++t) {  // as Locate does
        if (placed != nullptr) {
          location.domains[t].assign(t < placed->domains.size() ? placed->domains[t] : std::string());
          continue;
        }
        const auto label = record.labels.find(network_.tiers[t].label);
        if (label == record.labels.end())
          location.domains[t].clear();
        else
          location.domains[t].assign(label->second);
      }
    }
    return framework::NodeSummary{
        record.name, at, record.free_gpus,     record.free_rdma_nics, record.schedulable && !record.held(),
        nullptr,     0,  record.free_by_vendor};
  }

  std::shared_ptr<const Snapshot> snapshot_;
  const pd::NetworkConfig& network_;
  std::string pool_;
  std::shared_ptr<const std::vector<framework::PoolMember>> members_;
  std::shared_ptr<const std::map<std::string, pd::Location>> hyper_nodes_;  // null when none
  bool resolved_;               // the records' positions are under network_'s tiers
  std::uint64_t pool_version_;  // of members_ (ClusterStore::PoolVersion); 0: unknown
};

}  // namespace

bool PositionsResolvedFor(const Snapshot& snapshot, const pd::NetworkConfig& network) {
  const std::vector<std::string>& labels = snapshot.tier_labels();
  if (labels.size() != network.tiers.size()) return false;
  for (std::size_t t = 0; t < labels.size(); ++t) {
    if (labels[t] != network.tiers[t].label) return false;
  }
  return true;
}

std::shared_ptr<const framework::ClusterView> MakeClusterView(
    const ClusterStore& store, std::shared_ptr<const Snapshot> snapshot, const pd::NetworkConfig& network,
    std::string_view pool, std::shared_ptr<const std::map<std::string, pd::Location>> hyper_nodes) {
  return MakeClusterView(std::move(snapshot), network, pool,
                         std::make_shared<const std::vector<framework::PoolMember>>(store.PoolMembers(pool)),
                         std::move(hyper_nodes));
}

framework::PoolMember MemberOf(const PodAllocation& a) {
  framework::PoolMember m;
  m.uid = a.uid;
  m.node = a.node;
  m.role = a.role;
  m.gpus = static_cast<int>(a.delta.exclusive_gpus.size() + a.delta.shares.size());
  m.rdma_nics = static_cast<int>(a.delta.nics.size());
  m.worst_class = a.worst_class;
  m.kv_ipc = a.kv_ipc;
  return m;
}

std::shared_ptr<const framework::ClusterView> MakeClusterView(
    std::shared_ptr<const Snapshot> snapshot, const pd::NetworkConfig& network, std::string_view pool,
    std::shared_ptr<const std::vector<framework::PoolMember>> members,
    std::shared_ptr<const std::map<std::string, pd::Location>> hyper_nodes, std::uint64_t pool_version) {
  return std::make_shared<SnapshotClusterView>(std::move(snapshot), network, std::string(pool),
                                               std::move(members), std::move(hyper_nodes), pool_version);
}

}  // namespace toposched::state
