// The running cluster as the policies see it, and the Prefill/Decode figures over it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "simulate_internal.h"
#include "toposched/framework/allocation.h"

namespace toposched::simulate {
namespace {

std::size_t Index(int i) {
  return static_cast<std::size_t>(i);
}

bool IsPd(const PlacementRequest& r) {
  return !r.pool.empty() && (r.role == PodRole::kPrefill || r.role == PodRole::kDecode);
}

std::size_t RoleSlot(PodRole r) {
  return r == PodRole::kPrefill ? 0 : 1;
}

// Whether the node has the devices the pod asks for free: GPUs of its vendor (whole GPUs
// free, or for a shared pod GPUs not held exclusively) and RDMA NICs. Coarser than the
// engine (no memory, alignment bounds or share limits): a node this says no to cannot take
// the pod, a node it says yes to usually can.
bool CouldHost(const VirtualNode& node, const PlacementRequest& r) {
  if (!node.schedulable || node.topology == nullptr) return false;
  const NodeTopology& t = *node.topology;
  int gpus = 0;
  for (int g = 0; g < static_cast<int>(t.gpus.size()); ++g) {
    if (t.gpus[Index(g)].vendor != r.vendor) continue;
    if (r.IsShared() ? !GpuExclusive(node.allocated, g) : GpuFree(node.allocated, g)) ++gpus;
  }
  if (gpus < (r.IsShared() ? r.shared.count : r.gpus)) return false;
  int nics = 0;
  for (int n = 0; n < static_cast<int>(t.nics.size()); ++n) {
    if (t.nics[Index(n)].rdma && !NicUsed(node.allocated, n)) ++nics;
  }
  return nics >= r.rdma_nics;
}

// Free GPUs by vendor (framework::NodeSummary::free_by_vendor) and free RDMA NICs, as the
// extender's store counts them (framework::FreeDevicesOf).
std::pair<framework::StaticClusterView::VendorCounts, int> FreeDevices(const VirtualNode& node) {
  const framework::FreeDevices free =
      framework::FreeDevicesOf(node.topology.get(), node.allocated, node.held);
  return {free.gpus_by_vendor, free.rdma_nics};
}

// The tier P:D ratios are kept at: the one whose path is leaf (the default tiers' second);
// else the innermost; -1 without tiers (every node its own domain).
int RatioTier(const pd::NetworkConfig& network) {
  for (std::size_t i = 0; i < network.tiers.size(); ++i) {
    if (network.tiers[i].path == pd::PathKind::kLeaf) return static_cast<int>(i);
  }
  return network.tiers.empty() ? -1 : 0;
}

double NearestRank(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(values.size())));
  return values[std::min(std::max<std::size_t>(rank, 1), values.size()) - 1];
}

}  // namespace

LinkClass WorstPairClass(const NodeTopology& t, const std::vector<GpuNicPair>& pairs) {
  LinkClass worst = LinkClass::kPIX;
  int worst_rank = -1;
  for (const GpuNicPair& pair : pairs) {
    const int r = LinkRank(pair.cls, t.gpus[Index(pair.gpu)].package, t.nics[Index(pair.nic)].package);
    if (r > worst_rank) {
      worst_rank = r;
      worst = pair.cls;
    }
  }
  return worst;
}

PdTracker::PdTracker(const std::vector<VirtualNode>& nodes, const pd::NetworkConfig& network,
                     std::size_t pods)
    : network_(network), view_(std::make_shared<framework::StaticClusterView>(network)), members_(pods) {
  const int ratio_tier = RatioTier(network_);
  std::map<std::vector<std::string>, int> classes;
  std::map<std::string, int> domains;
  for (const VirtualNode& node : nodes) {
    const auto [gpus, nics] = FreeDevices(node);
    view_->SetNode(node.name, node.labels, gpus, nics, node.schedulable);
    pd::Location at = view_->Locate(node.name);
    location_class_.push_back(classes.emplace(at.domains, static_cast<int>(classes.size())).first->second);
    std::string domain = ratio_tier >= 0 ? at.domains[Index(ratio_tier)] : std::string();
    // A node without the tier's label shares that tier with no other node: its own domain.
    if (domain.empty()) domain = "node/" + node.name;
    ratio_domain_.push_back(domains.emplace(domain, static_cast<int>(domains.size())).first->second);
    locations_.push_back(std::move(at));
  }
  location_classes_ = static_cast<int>(classes.size());
  ratio_domains_ = static_cast<int>(domains.size());
}

PdTracker::Pool& PdTracker::PoolOf(const PlacementRequest& r) {
  auto it = pools_.find(r.pool);
  if (it == pools_.end()) {
    it = pools_.emplace(r.pool, Pool{}).first;
    it->second.at_domain.assign(Index(ratio_domains_), {0, 0});
  }
  // The pool's figures from the first pod that gives them: one pool serves one model.
  Pool& pool = it->second;
  if (pool.ratio_prefill == 0 && r.pd_ratio_prefill > 0 && r.pd_ratio_decode > 0) {
    pool.ratio_prefill = r.pd_ratio_prefill;
    pool.ratio_decode = r.pd_ratio_decode;
  }
  if (pool.kv_bytes_per_token == 0) pool.kv_bytes_per_token = r.kv_bytes_per_token;
  if (pool.prompt_tokens == 0) pool.prompt_tokens = r.prompt_tokens;
  return pool;
}

double PdTracker::Bytes(const Pool& pool) const {
  const double per_token =
      static_cast<double>(pool.kv_bytes_per_token > 0 ? pool.kv_bytes_per_token : kFallbackKvBytesPerToken);
  return per_token * (pool.prompt_tokens > 0 ? pool.prompt_tokens : kFallbackPromptTokens);
}

double PdTracker::PairSeconds(const pd::Location& prefill_at, const pd::Endpoint& prefill, bool prefill_ipc,
                              const pd::Location& decode_at, const pd::Endpoint& decode, bool decode_ipc,
                              double bytes) const {
  const pd::PathKind path = pd::PathBetween(network_, prefill_at, decode_at, prefill_ipc && decode_ipc);
  return pd::TransferSeconds(pd::Estimate(network_, path, prefill, decode), bytes);
}

std::vector<std::size_t> PdTracker::Counterparts(const Pool& pool, PodRole role) const {
  std::vector<std::size_t> out;
  for (std::size_t m : pool.members) {
    const PodRole r = members_[m]->role;
    if ((role == PodRole::kPrefill && r == PodRole::kDecode) ||
        (role == PodRole::kDecode && r == PodRole::kPrefill)) {
      out.push_back(m);
    }
  }
  return out;
}

double PdTracker::ExpectedSeconds(const PlacementRequest& r, int node, const Pool& pool,
                                  const std::vector<std::size_t>& counterparts) const {
  pd::Endpoint self;
  self.gpus = r.IsShared() ? r.shared.count : r.gpus;
  self.rdma_nics = r.rdma_nics;
  self.worst_class = LinkClass::kPIX;  // paths are compared, not the pod's own alignment
  const pd::Location& at = locations_[Index(node)];
  const double bytes = Bytes(pool);
  double sum = 0;
  for (std::size_t c : counterparts) {
    const Member& m = *members_[c];
    const pd::Location& there = locations_[Index(m.node)];
    sum += r.role == PodRole::kPrefill ? PairSeconds(at, self, r.kv_ipc, there, m.end, m.ipc, bytes)
                                       : PairSeconds(there, m.end, m.ipc, at, self, r.kv_ipc, bytes);
  }
  return counterparts.empty() ? 0 : sum / static_cast<double>(counterparts.size());
}

void PdTracker::BeforeDecision(const PlacementRequest& r, const std::vector<VirtualNode>& nodes) {
  cheapest_s_.reset();
  counterparts_.clear();
  if (!IsPd(r)) return;
  const Pool& pool = PoolOf(r);
  counterparts_ = Counterparts(pool, r.role);
  if (counterparts_.empty()) return;
  // Nodes of one location class that host no counterpart see the same paths to every
  // counterpart: one estimate per class. Nodes hosting one get their own (same-node paths).
  std::vector<char> hosts(nodes.size(), 0);
  for (std::size_t c : counterparts_) hosts[Index(members_[c]->node)] = 1;
  std::vector<std::optional<double>> per_class(Index(location_classes_));
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!CouldHost(nodes[i], r)) continue;
    const int node = static_cast<int>(i);
    double expected = 0;
    if (hosts[i] != 0) {
      expected = ExpectedSeconds(r, node, pool, counterparts_);
    } else {
      std::optional<double>& cached = per_class[Index(location_class_[i])];
      if (!cached) cached = ExpectedSeconds(r, node, pool, counterparts_);
      expected = *cached;
    }
    if (!cheapest_s_ || expected < *cheapest_s_) cheapest_s_ = expected;
  }
}

void PdTracker::Placed(std::size_t pod, const PlacementRequest& r, const std::vector<VirtualNode>& nodes,
                       const Decision& d) {
  const NodeTopology& t = *nodes[Index(d.node)].topology;
  Member m;
  m.node = d.node;
  m.role = r.role;
  m.pool = r.pool;
  m.end.gpus = r.IsShared() ? r.shared.count : r.gpus;
  m.end.rdma_nics = static_cast<int>(d.placement.nics.size());
  m.end.worst_class = WorstPairClass(t, d.placement.pairs);
  m.ipc = r.kv_ipc;
  m.uid = r.pod_uid.empty() ? "sim-pod-" + std::to_string(pod) : r.pod_uid;
  if (!r.pool.empty()) {
    Pool& pool = PoolOf(r);
    if (IsPd(r) && !counterparts_.empty()) {
      ++figures_.pods_with_counterparts;
      // Within 1% counts as cheapest: estimates that differ by rounding are one path.
      const double chosen = ExpectedSeconds(r, d.node, pool, counterparts_);
      const double best = cheapest_s_ ? std::min(*cheapest_s_, chosen) : chosen;
      if (chosen <= best * 1.01) ++figures_.at_cheapest;
      const double bytes = Bytes(pool);
      const pd::Location& here = locations_[Index(d.node)];
      for (std::size_t c : counterparts_) {
        const Member& other = *members_[c];
        const pd::Location& there = locations_[Index(other.node)];
        const bool prefill_here = r.role == PodRole::kPrefill;
        const pd::Location& p_at = prefill_here ? here : there;
        const pd::Location& d_at = prefill_here ? there : here;
        const pd::Endpoint& p_end = prefill_here ? m.end : other.end;
        const pd::Endpoint& d_end = prefill_here ? other.end : m.end;
        const pd::PathKind path = pd::PathBetween(network_, p_at, d_at, m.ipc && other.ipc);
        ++figures_.paths[static_cast<std::size_t>(path)];
        ++figures_.pairs;
        transfer_s_.push_back(pd::TransferSeconds(pd::Estimate(network_, path, p_end, d_end), bytes));
      }
    }
    pool.members.push_back(pod);
    if (IsPd(r)) ++pool.at_domain[Index(ratio_domain_[Index(d.node)])][RoleSlot(r.role)];
    framework::PoolMember member;
    member.uid = m.uid;
    member.node = nodes[Index(d.node)].name;
    member.role = r.role;
    member.gpus = m.end.gpus;
    member.rdma_nics = m.end.rdma_nics;
    member.worst_class = m.end.worst_class;
    member.kv_ipc = m.ipc;
    view_->AddMember(r.pool, std::move(member));
  }
  members_[pod] = std::move(m);
  cheapest_s_.reset();
  counterparts_.clear();
  const auto [gpus, nics] = FreeDevices(nodes[Index(d.node)]);
  view_->SetFree(nodes[Index(d.node)].name, gpus, nics);
}

void PdTracker::Arrived(const PlacementRequest& r) {
  cheapest_s_.reset();
  counterparts_.clear();
  if (!IsPd(r)) return;
  if (const std::optional<double> e = RatioError()) {
    ratio_error_sum_ += *e;
    ++figures_.ratio_samples;
  }
}

void PdTracker::Departed(std::size_t pod, const std::vector<VirtualNode>& nodes, int node) {
  if (std::optional<Member>& m = members_[pod]) {
    if (!m->pool.empty()) {
      Pool& pool = pools_.find(m->pool)->second;
      pool.members.erase(std::find(pool.members.begin(), pool.members.end(), pod));
      if (m->role == PodRole::kPrefill || m->role == PodRole::kDecode) {
        --pool.at_domain[Index(ratio_domain_[Index(m->node)])][RoleSlot(m->role)];
      }
      view_->RemoveMember(m->uid);
    }
    m.reset();
  }
  const auto [gpus, nics] = FreeDevices(nodes[Index(node)]);
  view_->SetFree(nodes[Index(node)].name, gpus, nics);
}

std::optional<double> PdTracker::RatioError() const {
  double weighted = 0;
  int instances = 0;
  for (const auto& [name, pool] : pools_) {
    if (pool.ratio_prefill <= 0 || pool.ratio_decode <= 0) continue;
    const double target = static_cast<double>(pool.ratio_prefill) / (pool.ratio_prefill + pool.ratio_decode);
    for (const std::array<int, 2>& pd : pool.at_domain) {
      const int n = pd[0] + pd[1];
      if (n == 0) continue;
      weighted += n * std::abs(static_cast<double>(pd[0]) / n - target);
      instances += n;
    }
  }
  if (instances == 0) return std::nullopt;
  return weighted / instances;
}

Status PdTracker::Check(const std::vector<VirtualNode>& nodes, const std::vector<int>& running_node) const {
  std::size_t i = 0;
  Status status = Status::Ok();
  view_->ForEachNode([&](const framework::NodeSummary& s) {
    if (!status.ok()) return;
    if (i >= nodes.size() || s.name != nodes[i].name) {
      status = Error("cluster view: node " + std::string(s.name) + " out of the cluster's order");
      return;
    }
    const auto [by_vendor, nics] = FreeDevices(nodes[i]);
    const int gpus = std::accumulate(by_vendor.begin(), by_vendor.end(), 0);
    if (s.free_gpus != gpus || s.free_by_vendor != by_vendor || s.free_rdma_nics != nics) {
      status = Error("cluster view: " + nodes[i].name + " has " + std::to_string(s.free_gpus) +
                     " free GPUs and " + std::to_string(s.free_rdma_nics) + " free RDMA NICs, the node " +
                     std::to_string(gpus) + " and " + std::to_string(nics));
    }
    ++i;
  });
  if (!status.ok()) return status;
  if (i != nodes.size())
    return Error("cluster view: " + std::to_string(i) + " nodes, the cluster " +
                 std::to_string(nodes.size()));
  std::map<std::string, std::vector<std::string>> expected;  // pool -> member nodes
  for (std::size_t p = 0; p < members_.size(); ++p) {
    const bool running = p < running_node.size() && running_node[p] >= 0;
    if (running != members_[p].has_value() || (running && members_[p]->node != running_node[p])) {
      return Error("cluster view: pod #" + std::to_string(p) + " is " + (running ? "running" : "gone") +
                   " but the tracker has it " +
                   (members_[p] ? "on node " + std::to_string(members_[p]->node) : "gone"));
    }
    if (running && !members_[p]->pool.empty()) {
      expected[members_[p]->pool].push_back(nodes[Index(running_node[p])].name);
    }
  }
  for (const auto& [name, pool] : pools_) {
    std::vector<std::string> have;
    for (const framework::PoolMember& m : view_->PoolMembers(name)) have.push_back(m.node);
    std::vector<std::string> want = expected[name];
    std::sort(have.begin(), have.end());
    std::sort(want.begin(), want.end());
    if (have != want) {
      return Error("cluster view: pool " + name + " has " + std::to_string(have.size()) +
                   " members where the running pods are " + std::to_string(want.size()) +
                   " (or on other nodes)");
    }
  }
  return Status::Ok();
}

PdFigures PdTracker::Finish() const {
  PdFigures f = figures_;
  double sum = 0;
  for (double s : transfer_s_) sum += s;
  f.transfer_mean_ms = transfer_s_.empty() ? 0 : 1000.0 * sum / static_cast<double>(transfer_s_.size());
  f.transfer_p99_ms = 1000.0 * NearestRank(transfer_s_, 0.99);
  f.at_cheapest_share =
      f.pods_with_counterparts > 0 ? static_cast<double>(f.at_cheapest) / f.pods_with_counterparts : 0;
  f.ratio_error_end = RatioError().value_or(0);
  f.ratio_error_mean = f.ratio_samples > 0 ? ratio_error_sum_ / f.ratio_samples : 0;
  return f;
}

}  // namespace toposched::simulate
