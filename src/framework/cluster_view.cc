#include "toposched/framework/cluster_view.h"

#include "toposched/placement/device_rules.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace toposched::framework {

FreeDevices FreeDevicesOf(const NodeTopology* topology, const NodeAllocation& allocated, bool held) {
  FreeDevices free;
  if (topology == nullptr || held) return free;
  for (std::size_t g = 0; g < topology->gpus.size(); ++g) {
    if (GpuFree(allocated, static_cast<int>(g)) && topology->gpus[g].unusable.empty()) {
      ++free.gpus;
      ++free.gpus_by_vendor[VendorIndex(topology->gpus[g].vendor)];
    }
  }
  for (std::size_t n = 0; n < topology->nics.size(); ++n) {
    if (topology->nics[n].rdma && !NicUsed(allocated, static_cast<int>(n))) ++free.rdma_nics;
  }
  return free;
}

namespace {

NodeSummary SummaryOf(std::string_view name, const StaticClusterView::Node& n) {
  const int total = std::accumulate(n.free_by_vendor.begin(), n.free_by_vendor.end(), 0);
  NodeSummary s{name, &n.location, total, n.free_rdma_nics, n.schedulable};
  s.free_by_vendor = n.free_by_vendor;
  return s;
}

}  // namespace

void StaticClusterView::SetNode(const std::string& name, const std::map<std::string, std::string>& labels,
                                int free_gpus, int free_rdma_nics, bool schedulable) {
  SetNode(name, labels, Nvidia(free_gpus), free_rdma_nics, schedulable);
}

void StaticClusterView::SetNode(const std::string& name, const std::map<std::string, std::string>& labels,
                                VendorCounts free_gpus, int free_rdma_nics, bool schedulable) {
  SetNodeLocation(name, pd::LocateByLabels(network_, name, labels), free_gpus, free_rdma_nics, schedulable);
}

void StaticClusterView::SetNodeLocation(const std::string& name, pd::Location location,
                                        VendorCounts free_gpus, int free_rdma_nics, bool schedulable) {
  location.node = name;
  auto [it, inserted] =
      nodes_.insert_or_assign(name, Node{std::move(location), free_gpus, free_rdma_nics, schedulable});
  (void)it;
  if (inserted) order_.push_back(name);
}

void StaticClusterView::SetFree(std::string_view name, int free_gpus, int free_rdma_nics) {
  SetFree(name, Nvidia(free_gpus), free_rdma_nics);
}

void StaticClusterView::SetFree(std::string_view name, VendorCounts free_gpus, int free_rdma_nics) {
  const auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  it->second.free_by_vendor = free_gpus;
  it->second.free_rdma_nics = free_rdma_nics;
}

void StaticClusterView::AddMember(const std::string& pool, PoolMember member) {
  pools_[pool].push_back(std::move(member));
}

void StaticClusterView::RemoveMember(std::string_view uid) {
  for (auto it = pools_.begin(); it != pools_.end(); ++it) {
    std::vector<PoolMember>& members = it->second;
    const auto m =
        std::find_if(members.begin(), members.end(), [&](const PoolMember& p) { return p.uid == uid; });
    if (m == members.end()) continue;
    members.erase(m);
    if (members.empty()) pools_.erase(it);
    return;
  }
}

pd::Location StaticClusterView::Locate(std::string_view node) const {
  const auto it = nodes_.find(node);
  if (it != nodes_.end()) return it->second.location;
  pd::Location unknown;
  unknown.node = std::string(node);
  unknown.domains.assign(network_.tiers.size(), "");
  return unknown;
}

std::span<const PoolMember> StaticClusterView::PoolMembers(std::string_view pool) const {
  if (pool.empty()) return {};
  const auto it = pools_.find(pool);
  return it == pools_.end() ? std::span<const PoolMember>{} : std::span<const PoolMember>(it->second);
}

void StaticClusterView::ForEachNode(const std::function<void(const NodeSummary&)>& fn) const {
  for (const std::string& name : order_) {
    fn(SummaryOf(name, nodes_.find(name)->second));
  }
}

bool StaticClusterView::WithNode(std::string_view node,
                                 const std::function<void(const NodeSummary&)>& fn) const {
  const auto it = nodes_.find(node);
  if (it == nodes_.end()) return false;
  fn(SummaryOf(it->first, it->second));
  return true;
}

bool ClusterView::WithNode(std::string_view node, const std::function<void(const NodeSummary&)>& fn) const {
  bool found = false;
  ForEachNode([&](const NodeSummary& n) {
    if (found || n.name != node) return;
    found = true;
    fn(n);
  });
  return found;
}

PoolToken ClusterView::PoolVersion(std::string_view) const {
  return {};
}

void ClusterView::ForEachNodeByPosition(const std::function<bool(const NodeSummary&)>& fn) const {
  ForEachNode([&](const NodeSummary& n) { fn(n); });
}

}  // namespace toposched::framework
