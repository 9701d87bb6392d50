#pragma once
// ClusterStore::Impl: the store's state (records, snapshot, pods, pools, locks) and the record
// arithmetic that its node updates (cluster_store.cc) and transactions (store_transactions.cc)
// share. Private to the state library.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "toposched/placement/request.h"
#include "toposched/state/cluster_state.h"

namespace toposched::state {
namespace store_internal {

// `record`'s allocation with `d` added, checked against its topology and the store's limits.
Result<NodeAllocation> AddChecked(const NodeRecord& record, const framework::AllocationDelta& d,
                                  int max_shares_per_gpu);

}  // namespace store_internal

struct ClusterStore::Impl {
  template <typename V>
  using ByName = std::unordered_map<std::string, V, Snapshot::Hash, std::equal_to<>>;

  Persistence* persistence = nullptr;
  StoreOptions options;  // class_labels sorted and unique

  pd::NetworkConfig tiers;  // those labels as tiers, for pd::LocateByLabels (which reads no more)

  // What a record derives from its content: its class key, position and free devices.
  void Refresh(NodeRecord& record) const {
    record.class_key = ComputeClassKey(record, options.class_labels ? &*options.class_labels : nullptr);
    record.position = pd::LocateByLabels(tiers, record.name, record.labels);
    record.name_hash = framework::PositionHash(record.name);
    record.order_key = framework::NodeOrderKey(record.name);
    record.position_hashes.resize(record.position.domains.size());
    for (std::size_t t = 0; t < record.position.domains.size(); ++t) {
      record.position_hashes[t] = framework::PositionHash(record.position.domains[t]);
    }
    record.hardware =
        record.topology == nullptr ? packing::NodeHardware{} : packing::HardwareOf(*record.topology);
    // What is free, as the simulator counts it too (framework::FreeDevicesOf).
    const framework::FreeDevices free =
        framework::FreeDevicesOf(record.topology.get(), record.allocated, record.held());
    record.free_gpus = free.gpus;
    record.free_by_vendor = free.gpus_by_vendor;
    record.free_rdma_nics = free.rdma_nics;
  }

  // Publishers serialise on publish_mu and are the only writers of `current`; readers copy it
  // under snapshot_mu, which is held only for the pointer swap.
  std::mutex publish_mu;
  mutable std::mutex snapshot_mu;
  std::shared_ptr<const Snapshot> current = std::make_shared<const Snapshot>();

  // One mutex per node name ever upserted; never erased, so that two threads can never hold
  // different mutexes for one name.
  std::mutex locks_mu;
  ByName<std::shared_ptr<std::mutex>> node_locks;

  // The pod index, and the UIDs an operation is working on: a UID is claimed for the whole of a
  // Bind, Release or Restore, so that one pod cannot be bound on two nodes at once (each under
  // only its own node's lock).
  mutable std::mutex pods_mu;
  std::condition_variable uid_released;
  ByName<PodAllocation> pods;
  ByName<std::set<std::string>> pools;  // pool name -> UIDs of its pods (under pods_mu)
  ByName<std::uint64_t> pool_versions;  // ClusterStore::PoolVersion (under pods_mu)
  std::uint64_t last_pool_version = 0;
  // Each pool's members as of its version, by UID, shared with the readers (under pods_mu): built
  // when a bind or a release changes the pool (WarmPool), else on the first read after a change
  // (a bulk load indexes thousands of pods; building the list after each would be quadratic).
  ByName<std::shared_ptr<const std::vector<framework::PoolMember>>> pool_members;
  void TouchPoolLocked(const std::string& pool) {
    if (pool.empty()) return;
    pool_versions.insert_or_assign(pool, ++last_pool_version);
    if (const auto it = pool_members.find(pool); it != pool_members.end()) pool_members.erase(it);
  }
  std::shared_ptr<const std::vector<framework::PoolMember>> PoolMembersLocked(std::string_view pool) {
    static const auto kNone = std::make_shared<const std::vector<framework::PoolMember>>();
    if (pool.empty()) return kNone;
    if (const auto it = pool_members.find(pool); it != pool_members.end()) return it->second;
    const auto uids = pools.find(pool);
    if (uids == pools.end()) return kNone;  // not kept: a pool with no pods left
    auto members = std::make_shared<std::vector<framework::PoolMember>>();
    members->reserve(uids->second.size());
    for (const std::string& uid : uids->second) {
      if (const auto pod = pods.find(uid); pod != pods.end()) members->push_back(MemberOf(pod->second));
    }
    return pool_members.emplace(std::string(pool), std::move(members)).first->second;
  }
  // The binding path builds the changed pool's list, so that the next scoring call finds it.
  void WarmPool(std::string_view pool) {
    if (pool.empty()) return;
    std::lock_guard lock(pods_mu);
    PoolMembersLocked(pool);
  }
  std::unordered_set<std::string, Snapshot::Hash, std::equal_to<>> claimed;

  std::atomic<bool> synced{false};

  // CPU requests (SetPodCpu): each pod's node and request, and their sum per node name, kept
  // whether or not the node has a record: the pod informer may show a pod before the node
  // informer shows its node, and a record built later (UpsertNodes) must start from the sum.
  // Lock order: a node's lock, then cpu_mu (held for map updates only, never across a publish).
  std::mutex cpu_mu;
  struct CpuEntry {
    std::string node;
    std::int64_t milli = 0;
  };
  ByName<CpuEntry> pod_cpu;          // only pods requesting CPU on a node
  ByName<std::int64_t> cpu_by_node;  // > 0 only; saturated at kCpuSaturated
  static constexpr std::int64_t kCpuSaturated = std::numeric_limits<std::int64_t>::max();

  std::int64_t CpuRequestedLocked(std::string_view node) const {
    const auto it = cpu_by_node.find(node);
    return it == cpu_by_node.end() ? 0 : it->second;
  }
  void AddCpuLocked(const std::string& node, std::int64_t milli) {
    std::int64_t& sum = cpu_by_node[node];
    sum = sum > kCpuSaturated - milli ? kCpuSaturated : sum + milli;
  }
  // A saturated sum has lost what it exceeded by, so it is counted again from the pods (reached
  // only past 2^23 pods asking kMaxPodCpuMilli each on one node).
  void SubtractCpuLocked(const std::string& node, std::int64_t milli) {
    const auto it = cpu_by_node.find(node);
    if (it == cpu_by_node.end()) return;
    if (it->second == kCpuSaturated) {
      it->second = 0;
      for (const auto& [uid, entry] : pod_cpu) {
        if (entry.node == node) it->second = std::min(kCpuSaturated - entry.milli, it->second) + entry.milli;
      }
    } else {
      it->second -= milli;
    }
    if (it->second <= 0) cpu_by_node.erase(it);
  }

  mutable std::mutex locations_mu;
  std::shared_ptr<const std::map<std::string, pd::Location>> locations;

  std::shared_ptr<const Snapshot> Current() const {
    std::lock_guard lock(snapshot_mu);
    return current;
  }

  std::shared_ptr<std::mutex> NodeLock(std::string_view name, bool create) {
    std::lock_guard lock(locks_mu);
    auto it = node_locks.find(name);
    if (it != node_locks.end()) return it->second;
    if (!create) return nullptr;
    return node_locks.emplace(std::string(name), std::make_shared<std::mutex>()).first->second;
  }

  // Replaces or inserts `record` (by name) in a new snapshot; removes the node when `record` is
  // null.
  void Publish(std::string_view name, std::shared_ptr<const NodeRecord> record) {
    std::shared_ptr<const Snapshot> retired;  // destroyed after the locks
    std::lock_guard publish(publish_mu);
    const Snapshot& old = *current;
    auto next = std::make_shared<Snapshot>();
    next->version_ = old.version_ + 1;
    next->tier_labels_ = old.tier_labels_;
    const auto it = std::lower_bound(old.nodes_.begin(), old.nodes_.end(), name,
                                     [](const auto& r, std::string_view n) { return r->name < n; });
    const auto at = it - old.nodes_.begin();
    const bool present = it != old.nodes_.end() && (*it)->name == name;
    if (present && record) {
      next->nodes_ = old.nodes_;
      next->class_keys_ = old.class_keys_;
      next->briefs_ = old.briefs_;
      next->position_hashes_ = old.position_hashes_;
      const bool moved = (*it)->position_hashes != record->position_hashes;
      const bool rebuilt = CensusDiffers(**it, *record);
      next->nodes_[static_cast<std::size_t>(at)] = std::move(record);
      next->census_ = rebuilt || old.census_ == nullptr ? BuildCensus(*next) : old.census_;
      FillArraysAt(*next, static_cast<std::size_t>(at));
      next->index_ = old.index_;
      next->position_runs_ = moved ? BuildPositionRuns(*next) : old.position_runs_;
    } else {
      next->nodes_.reserve(old.nodes_.size() + 1);
      next->nodes_.insert(next->nodes_.end(), old.nodes_.begin(), it);
      if (record) next->nodes_.push_back(std::move(record));
      next->nodes_.insert(next->nodes_.end(), present ? it + 1 : it, old.nodes_.end());
      next->index_ = BuildIndex(next->nodes_);
      FillArrays(*next);
      next->position_runs_ = BuildPositionRuns(*next);
      next->census_ = BuildCensus(*next);
    }
    std::lock_guard swap(snapshot_mu);
    retired = std::exchange(current, std::move(next));
  }

  // Inserts or replaces `records` (sorted by name, distinct) in one new snapshot: a merge of
  // the two sorted lists; the name index is rebuilt only when the node set grows.
  void PublishUpserts(std::vector<std::shared_ptr<const NodeRecord>> records) {
    std::shared_ptr<const Snapshot> retired;  // destroyed after the locks
    std::lock_guard publish(publish_mu);
    const Snapshot& old = *current;
    auto next = std::make_shared<Snapshot>();
    next->version_ = old.version_ + 1;
    next->tier_labels_ = old.tier_labels_;
    next->nodes_.reserve(old.nodes_.size() + records.size());
    bool inserted = false, moved = false, rebuilt = false;
    auto it = old.nodes_.begin();
    for (auto& record : records) {
      while (it != old.nodes_.end() && (*it)->name < record->name) next->nodes_.push_back(*it++);
      if (it != old.nodes_.end() && (*it)->name == record->name) {
        moved = moved || (*it)->position_hashes != record->position_hashes;
        rebuilt = rebuilt || CensusDiffers(**it, *record);
        ++it;
      } else {
        inserted = true;
      }
      next->nodes_.push_back(std::move(record));
    }
    next->nodes_.insert(next->nodes_.end(), it, old.nodes_.end());
    if (inserted) {
      next->index_ = BuildIndex(next->nodes_);
    } else {
      next->index_ = old.index_;
    }
    FillArrays(*next);
    next->position_runs_ = inserted || moved ? BuildPositionRuns(*next) : old.position_runs_;
    next->census_ = inserted || rebuilt || old.census_ == nullptr ? BuildCensus(*next) : old.census_;
    std::lock_guard swap(snapshot_mu);
    retired = std::exchange(current, std::move(next));
  }

  // The name index of a snapshot of `nodes` (snapshot.cc).
  static std::shared_ptr<const Snapshot::NameIndex> BuildIndex(
      const std::vector<std::shared_ptr<const NodeRecord>>& nodes);

  // Snapshot::position_runs from the snapshot's position hashes (filled before).
  static std::shared_ptr<const Snapshot::PositionRuns> BuildPositionRuns(const Snapshot& s) {
    auto runs = std::make_shared<Snapshot::PositionRuns>();
    const std::size_t tiers = s.tier_labels().size();
    const std::uint64_t* hashes = s.position_hashes_.data();
    runs->order.resize(s.nodes_.size());
    for (std::size_t i = 0; i < runs->order.size(); ++i) runs->order[i] = static_cast<std::uint32_t>(i);
    auto at = [&](std::uint32_t i) { return hashes + static_cast<std::size_t>(i) * tiers; };
    // Stable: within a run the store's order (by name) stays.
    std::stable_sort(runs->order.begin(), runs->order.end(), [&](std::uint32_t a, std::uint32_t b) {
      return std::lexicographical_compare(at(a), at(a) + tiers, at(b), at(b) + tiers);
    });
    for (std::size_t k = 0; k < runs->order.size(); ++k) {
      if (k == 0 || !std::equal(at(runs->order[k]), at(runs->order[k]) + tiers, at(runs->order[k - 1]))) {
        runs->starts.push_back(static_cast<std::uint32_t>(k));
      }
    }
    runs->starts.push_back(static_cast<std::uint32_t>(runs->order.size()));
    runs->run_of.resize(runs->order.size());
    for (std::size_t r = 0; r + 1 < runs->starts.size(); ++r) {
      for (std::uint32_t k = runs->starts[r]; k < runs->starts[r + 1]; ++k) {
        runs->run_of[runs->order[k]] = static_cast<std::uint32_t>(r);
      }
    }
    return runs;
  }

  // Whether `next` counts otherwise than `old` in the census (Snapshot::census).
  static bool CensusDiffers(const NodeRecord& old, const NodeRecord& next) {
    return old.hardware != next.hardware || old.schedulable != next.schedulable;
  }

  static std::shared_ptr<const packing::HardwareCensus> BuildCensus(const Snapshot& s) {
    std::vector<packing::NodeHardware> hardware;
    hardware.reserve(s.nodes_.size());
    // A cordoned node hosts nothing new: a shape only cordoned nodes could host is not one the
    // rare-class rule can keep nodes for.
    for (const auto& r : s.nodes_) {
      if (r->schedulable) hardware.push_back(r->hardware);
    }
    return std::make_shared<const packing::HardwareCensus>(packing::CensusOf(hardware));
  }

  // The snapshot's arrays parallel to nodes_ (class keys, briefs, position hashes).
  static void FillArrays(Snapshot& s) {
    const std::size_t tiers = s.tier_labels().size();
    s.class_keys_.resize(s.nodes_.size());
    s.briefs_.resize(s.nodes_.size());
    s.position_hashes_.resize(s.nodes_.size() * tiers);
    for (std::size_t i = 0; i < s.nodes_.size(); ++i) FillArraysAt(s, i);
  }
  static void FillArraysAt(Snapshot& s, std::size_t i) {
    const NodeRecord& r = *s.nodes_[i];
    s.class_keys_[i] = r.class_key;
    s.briefs_[i] = Snapshot::Brief{
        r.name,           r.name_hash, r.free_gpus,        r.free_rdma_nics, r.schedulable && !r.held(),
        r.free_by_vendor, r.hardware,  r.cpu_free_milli(), r.order_key};
    const std::size_t tiers = s.tier_labels().size();
    for (std::size_t t = 0; t < tiers; ++t) {
      s.position_hashes_[i * tiers + t] = r.position_hashes.size() == tiers ? r.position_hashes[t] : 0;
    }
  }

  // Holds one UID for the scope of an operation; waits while another operation holds it.
  class UidClaim {
   public:
    UidClaim(Impl& impl, std::string_view uid) : impl_(impl), uid_(uid) {
      std::unique_lock lock(impl_.pods_mu);
      impl_.uid_released.wait(lock, [&] { return !impl_.claimed.contains(uid_); });
      impl_.claimed.insert(uid_);
      const auto it = impl_.pods.find(uid_);
      if (it != impl_.pods.end()) bound_ = it->second;
    }
    ~UidClaim() {
      {
        std::lock_guard lock(impl_.pods_mu);
        impl_.claimed.erase(uid_);
      }
      impl_.uid_released.notify_all();
    }
    UidClaim(const UidClaim&) = delete;
    UidClaim& operator=(const UidClaim&) = delete;
    // The pod's allocation when the claim was taken.
    const std::optional<PodAllocation>& bound() const { return bound_; }

   private:
    Impl& impl_;
    std::string uid_;
    std::optional<PodAllocation> bound_;
  };

  // The record after `allocation` is added, for publishing.
  Result<std::shared_ptr<NodeRecord>> WithPod(const NodeRecord& record,
                                              const PodAllocation& allocation) const {
    auto after = store_internal::AddChecked(record, allocation.delta, options.max_shares_per_gpu);
    if (!after.ok()) return after.error().WithContext("node " + record.name);
    auto next = std::make_shared<NodeRecord>(record);
    next->allocated = std::move(after).value();
    ++next->allocation_version;
    next->pods.insert(std::lower_bound(next->pods.begin(), next->pods.end(), allocation.uid), allocation.uid);
    Refresh(*next);
    return next;
  }

  void IndexPod(const PodAllocation& allocation) {
    std::lock_guard lock(pods_mu);
    if (const auto it = pods.find(allocation.uid); it != pods.end()) UnindexPoolLocked(it->second);
    pods.insert_or_assign(allocation.uid, allocation);
    if (!allocation.pool.empty()) pools[allocation.pool].insert(allocation.uid);
    TouchPoolLocked(allocation.pool);
  }

  // Erases a pod from the pod and pool indexes; pods_mu held.
  void ErasePodLocked(ByName<PodAllocation>::iterator it) {
    UnindexPoolLocked(it->second);
    pods.erase(it);
  }

  void UnindexPoolLocked(const PodAllocation& allocation) {
    if (allocation.pool.empty()) return;
    TouchPoolLocked(allocation.pool);
    const auto pool = pools.find(allocation.pool);
    if (pool == pools.end()) return;
    pool->second.erase(allocation.uid);
    if (pool->second.empty()) pools.erase(pool);
  }

  // `record` without `allocation` (a pod of it), for a change that replaces the pod's devices in
  // one step; derived fields are left for WithPod's Refresh.
  static NodeRecord Without(const NodeRecord& record, const PodAllocation& allocation) {
    NodeRecord base = record;
    framework::RevertDelta(allocation.delta, framework::ShapeOf(NodeAllocation{}), base.allocated);
    std::erase(base.pods, allocation.uid);
    std::erase(base.held_pods, allocation.uid);
    return base;
  }

  // Release's work once the UID is claimed.
  Result<std::optional<PodAllocation>> ReleaseClaimed(const PodAllocation& allocation, bool persist) {
    const auto node_lock = NodeLock(allocation.node, /*create=*/false);
    if (!node_lock) return std::optional<PodAllocation>();
    std::lock_guard lock(*node_lock);
    {
      // RemoveNode may have dropped the pod with its node while we waited for the node.
      std::lock_guard pods_lock(pods_mu);
      if (!pods.contains(allocation.uid)) return std::optional<PodAllocation>();
    }
    const auto snapshot = Current();
    const NodeRecord* record = snapshot->Find(allocation.node);
    if (record == nullptr) return std::optional<PodAllocation>();

    auto next = std::make_shared<NodeRecord>(*record);
    // Back to the shortest vectors that hold what remains, so that a node whose pods are all gone
    // compares equal to one that never had any.
    framework::RevertDelta(allocation.delta, framework::ShapeOf(NodeAllocation{}), next->allocated);
    ++next->allocation_version;
    std::erase(next->pods, allocation.uid);
    std::erase(next->held_pods, allocation.uid);
    Refresh(*next);
    if (persistence != nullptr && persist) {
      if (Status s = persistence->RecordRelease(allocation); !s.ok()) {
        return s.error().WithContext("cannot persist the release of pod " + allocation.uid);
      }
    }
    Publish(allocation.node, std::move(next));
    {
      std::lock_guard pods_lock(pods_mu);
      if (const auto it = pods.find(allocation.uid); it != pods.end()) ErasePodLocked(it);
    }
    WarmPool(allocation.pool);
    return std::optional<PodAllocation>(allocation);
  }
};

}  // namespace toposched::state
