// ClusterStore (cluster_state.h): the store's setup, its node updates (UpsertNodes, RemoveNode),
// per-pod CPU accounting and its queries (pools, pods, locations). The snapshot it publishes is
// built in snapshot.cc, the bind/hold/release transactions are in store_transactions.cc, and the
// state they share, ClusterStore::Impl, is in store_impl.h.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "store_impl.h"
#include "toposched/common/hash.h"
#include "toposched/placement/request.h"
#include "toposched/state/cluster_state.h"

namespace toposched::state {
namespace {

// The hash of a topology's Fingerprint() text (never 0, which means "no topology").
std::uint64_t FingerprintOf(std::string_view fingerprint_text) {
  Fnv1aHasher h;
  h.String(fingerprint_text);
  return h.value() == 0 ? 1 : h.value();  // 0 means "no topology"
}

std::string GpuName(int g) {
  return "GPU" + std::to_string(g);
}

// A delta's own sanity, before it touches a record: distinct devices, share amounts in range
// (so that sums cannot overflow and a negative share cannot free capacity).
Status CheckDelta(const framework::AllocationDelta& d, int max_shares_per_gpu) {
  auto distinct = [](std::vector<int> v) {
    std::sort(v.begin(), v.end());
    return std::adjacent_find(v.begin(), v.end()) == v.end();
  };
  std::vector<int> gpus = d.exclusive_gpus;
  for (const auto& [g, add] : d.shares) {
    gpus.push_back(g);
    if (add.shares < 1 || add.shares > max_shares_per_gpu) {
      return Error(GpuName(g) + ": a pod's share count must be 1 to " + std::to_string(max_shares_per_gpu) +
                   ", got " + std::to_string(add.shares));
    }
    // 2^40 MiB is an exbibyte; the bound keeps max_shares_per_gpu of them summable.
    if (add.memory_mib < 0 || add.memory_mib > (std::int64_t{1} << 40)) {
      return Error(GpuName(g) + ": share memory " + std::to_string(add.memory_mib) + " MiB out of range");
    }
    if (add.cores < 0 || add.cores > kFullGpuCores) {
      return Error(GpuName(g) + ": share cores " + std::to_string(add.cores) + " out of range 0-" +
                   std::to_string(kFullGpuCores));
    }
  }
  if (!distinct(std::move(gpus))) return Error("the allocation names a GPU twice");
  if (!distinct(d.nics)) return Error("the allocation names a NIC twice");
  return Status::Ok();
}

// The GPUs `d` added to, checked in `after` (devices it did not touch did not change).
Status CheckCapacity(const NodeTopology& t, const NodeAllocation& after, const framework::AllocationDelta& d,
                     int max_shares_per_gpu) {
  for (int g : d.exclusive_gpus) {
    if (GpuShares(after, g).shares != 0) return Error(GpuName(g) + " is held whole and shared");
  }
  for (const auto& [g, add] : d.shares) {
    const GpuShareUsage u = GpuShares(after, g);
    if (GpuExclusive(after, g)) return Error(GpuName(g) + " is held whole and shared");
    if (u.shares > max_shares_per_gpu) {
      return Error(GpuName(g) + " would carry " + std::to_string(u.shares) + " shares, over its limit of " +
                   std::to_string(max_shares_per_gpu));
    }
    const std::uint64_t card = t.gpus[static_cast<std::size_t>(g)].memory_mib;
    if (card > 0 && static_cast<std::uint64_t>(u.memory_mib) > card) {
      return Error(GpuName(g) + " shares would use " + std::to_string(u.memory_mib) + " MiB, over its " +
                   std::to_string(card) + " MiB");
    }
    if (u.cores > kFullGpuCores) {
      return Error(GpuName(g) + " shares would use " + std::to_string(u.cores) + " cores, over " +
                   std::to_string(kFullGpuCores));
    }
  }
  return Status::Ok();
}

// What no longer fits in `record` after its topology changed (empty when all fits).
std::string MisfitsOf(const NodeRecord& record, int max_shares_per_gpu) {
  const NodeAllocation& a = record.allocated;
  const std::size_t gpus = record.topology ? record.topology->gpus.size() : 0;
  const std::size_t nics = record.topology ? record.topology->nics.size() : 0;
  std::string out;
  auto add = [&out](const std::string& what) { out += (out.empty() ? "" : "; ") + what; };
  for (std::size_t g = 0; g < std::max(a.gpu_exclusive.size(), a.gpu_shares.size()); ++g) {
    const int gi = static_cast<int>(g);
    const GpuShareUsage u = GpuShares(a, gi);
    if (GpuFree(a, gi)) continue;
    if (g >= gpus) {
      add(GpuName(gi) + " is allocated but gone");
      continue;
    }
    const std::uint64_t card = record.topology->gpus[g].memory_mib;
    if (u.shares > max_shares_per_gpu || u.cores > kFullGpuCores ||
        (card > 0 && static_cast<std::uint64_t>(u.memory_mib) > card)) {
      add(GpuName(gi) + " shares exceed its capacity");
    }
  }
  for (std::size_t n = 0; n < a.nic_used.size(); ++n) {
    if (a.nic_used[n] && n >= nics) add("NIC" + std::to_string(n) + " is allocated but gone");
  }
  return out;
}

}  // namespace

namespace store_internal {

Result<NodeAllocation> AddChecked(const NodeRecord& record, const framework::AllocationDelta& d,
                                  int max_shares_per_gpu) {
  TOPOSCHED_RETURN_IF_ERROR(CheckDelta(d, max_shares_per_gpu));
  NodeAllocation after = record.allocated;
  const bool empty = d.exclusive_gpus.empty() && d.shares.empty() && d.nics.empty();
  if (empty) return after;
  if (record.topology == nullptr) return Error("node " + record.name + " has published no topology");
  TOPOSCHED_RETURN_IF_ERROR(framework::ApplyDelta(*record.topology, d, after));
  TOPOSCHED_RETURN_IF_ERROR(CheckCapacity(*record.topology, after, d, max_shares_per_gpu));
  return after;
}

}  // namespace store_internal

ClusterStore::ClusterStore(Persistence* persistence, StoreOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->persistence = persistence;
  if (std::vector<std::string>* labels = options.class_labels ? &*options.class_labels : nullptr) {
    std::sort(labels->begin(), labels->end());
    labels->erase(std::unique(labels->begin(), labels->end()), labels->end());
  }
  impl_->options = std::move(options);
  impl_->tiers.tiers.clear();
  for (const std::string& label : impl_->options.tier_labels) impl_->tiers.tiers.push_back(pd::Tier{label});
  auto empty = std::make_shared<Snapshot>();
  // Every later snapshot copies its predecessor's labels.
  empty->tier_labels_ = std::make_shared<const std::vector<std::string>>(impl_->options.tier_labels);
  impl_->current = std::move(empty);
}

ClusterStore::~ClusterStore() = default;

std::shared_ptr<const Snapshot> ClusterStore::snapshot() const {
  return impl_->Current();
}

Status ClusterStore::UpsertNode(NodeSpec spec) {
  std::vector<NodeSpec> one;
  one.push_back(std::move(spec));
  return UpsertNodes(std::move(one));
}

Status ClusterStore::UpsertNodes(std::vector<NodeSpec> specs) {
  std::string errors;
  auto add_error = [&errors](const std::string& e) { errors += (errors.empty() ? "" : "; ") + e; };
  // The last spec of a name wins; empty names are refused.
  std::map<std::string, NodeSpec, std::less<>> by_name;
  for (NodeSpec& spec : specs) {
    if (spec.name.empty()) {
      add_error("node name is empty");
      continue;
    }
    std::string name = spec.name;
    by_name.insert_or_assign(std::move(name), std::move(spec));
  }
  // Every affected node's lock, in name order (UpsertNodes and SetPodCpus, the only places that
  // hold more than one node lock, both take them so, which cannot deadlock), held until the one
  // publish: a bind in between would otherwise be overwritten by the records built here.
  std::vector<std::unique_lock<std::mutex>> locks;
  std::vector<std::shared_ptr<std::mutex>> mutexes;
  locks.reserve(by_name.size());
  mutexes.reserve(by_name.size());
  for (const auto& [name, spec] : by_name) {
    mutexes.push_back(impl_->NodeLock(name, /*create=*/true));
    locks.emplace_back(*mutexes.back());
  }
  const auto snapshot = impl_->Current();
  std::vector<std::shared_ptr<const NodeRecord>> records;
  records.reserve(by_name.size());
  // Sources share one topology object between nodes of one hardware type: fingerprint it once.
  struct Prints {
    std::uint64_t hash = 0;
    std::string text;
  };
  std::unordered_map<const NodeTopology*, Prints> fingerprints;
  auto fingerprint = [&fingerprints](const NodeTopology* t) -> const Prints& {
    const auto [it, inserted] = fingerprints.try_emplace(t);
    if (inserted && t != nullptr) {
      it->second.text = t->Fingerprint();
      it->second.hash = FingerprintOf(it->second.text);
    }
    return it->second;
  };
  for (auto& [name, spec] : by_name) {
    const NodeRecord* old = snapshot->Find(name);
    auto next = std::make_shared<NodeRecord>();
    next->name = name;
    next->labels = std::move(spec.labels);
    next->schedulable = spec.schedulable;
    next->cpu_allocatable_milli = spec.cpu_allocatable_milli < 0 ? -1 : spec.cpu_allocatable_milli;
    {
      // Under the node's lock: a SetPodCpus that changes the sum after this read republishes
      // the record once it gets the lock.
      std::lock_guard cpu(impl_->cpu_mu);
      next->cpu_requested_milli = impl_->CpuRequestedLocked(name);
    }
    if (old != nullptr) {
      // A topology is immutable: the same object has the same fingerprint (computing it costs
      // microseconds, and sources re-send unchanged nodes).
      if (old->topology == spec.topology) {
        next->topology_fingerprint = old->topology_fingerprint;
        next->fingerprint = old->fingerprint;
      } else {
        const Prints& p = fingerprint(spec.topology.get());
        next->topology_fingerprint = p.hash;
        next->fingerprint = p.text;
      }
      next->topology_generation =
          old->topology_generation + (next->topology_fingerprint != old->topology_fingerprint);
      next->allocated = old->allocated;
      next->allocation_version = old->allocation_version;
      next->pods = old->pods;
      // A hold outlives the Node's updates (labels, cordon, a new NodeTopology): only the held
      // pod's end or a readable record lifts it (Hold). Dropping it here would let the node take
      // devices its held pod may use.
      next->held_pods = old->held_pods;
    } else {
      const Prints& p = fingerprint(spec.topology.get());
      next->topology_fingerprint = p.hash;
      next->fingerprint = p.text;
      next->topology_generation = 1;
    }
    next->topology = std::move(spec.topology);
    impl_->Refresh(*next);
    if (const std::string misfits = MisfitsOf(*next, impl_->options.max_shares_per_gpu); !misfits.empty()) {
      add_error("node " + name + ": allocations no longer fit its new topology (kept): " + misfits);
    }
    records.push_back(std::move(next));
  }
  if (!records.empty()) impl_->PublishUpserts(std::move(records));
  if (!errors.empty()) return Error(errors);
  return Status::Ok();
}

// The CPU requests of pods bound to the node stay counted under its name (SetPodCpu): the
// pod informer reports those pods' deletion or rebinding itself, and a node that comes back
// (a Node deleted and re-registered by its kubelet, a relist's brief gap) must start from what
// its pods still ask, not from zero.
void ClusterStore::RemoveNode(std::string_view name) {
  const auto node_lock = impl_->NodeLock(name, /*create=*/false);
  if (!node_lock) return;
  std::lock_guard lock(*node_lock);
  const auto snapshot = impl_->Current();
  const NodeRecord* old = snapshot->Find(name);
  if (old == nullptr) return;
  impl_->Publish(name, nullptr);
  std::lock_guard pods_lock(impl_->pods_mu);
  for (const std::string& uid : old->pods) {
    const auto it = impl_->pods.find(uid);
    if (it != impl_->pods.end() && it->second.node == name) impl_->ErasePodLocked(it);
  }
}

std::int64_t ClusterStore::PodCpuMilli(std::string_view uid) const {
  std::lock_guard cpu(impl_->cpu_mu);
  const auto it = impl_->pod_cpu.find(uid);
  return it == impl_->pod_cpu.end() ? 0 : it->second.milli;
}

void ClusterStore::SetPodCpu(std::string_view uid, std::string_view node, std::int64_t milli) {
  const PodCpu pod{std::string(uid), std::string(node), milli};
  SetPodCpus(std::span<const PodCpu>(&pod, 1));
}

// Two steps: the maps change under cpu_mu alone; then each affected node's record is brought to
// its sum under the node's lock, reading the sum again there. A record is only ever written
// under its node's lock from a sum read under that lock, so a concurrent UpsertNodes or
// SetPodCpus cannot leave a stale sum published: whichever takes the lock last reads the last
// sum.
void ClusterStore::SetPodCpus(std::span<const PodCpu> pods) {
  std::set<std::string> affected;  // sorted: the node locks are taken in name order
  {
    std::lock_guard cpu(impl_->cpu_mu);
    for (const PodCpu& pod : pods) {
      if (pod.uid.empty()) continue;
      const std::int64_t milli =
          pod.node.empty() ? 0 : std::clamp<std::int64_t>(pod.milli, 0, kMaxPodCpuMilli);
      const std::string& node = milli == 0 ? std::string() : pod.node;
      auto it = impl_->pod_cpu.find(pod.uid);
      if (it == impl_->pod_cpu.end()) {
        if (node.empty()) continue;
        impl_->pod_cpu.emplace(pod.uid, Impl::CpuEntry{node, milli});
        impl_->AddCpuLocked(node, milli);
        affected.insert(node);
        continue;
      }
      if (it->second.node == node && it->second.milli == milli) continue;
      const Impl::CpuEntry old = std::move(it->second);
      if (node.empty()) {
        impl_->pod_cpu.erase(it);
      } else {
        it->second = Impl::CpuEntry{node, milli};
      }
      // Added before the old request is taken off: a saturated sum is counted again from
      // pod_cpu, which already holds the new entry.
      if (!node.empty()) {
        impl_->AddCpuLocked(node, milli);
        affected.insert(node);
      }
      impl_->SubtractCpuLocked(old.node, old.milli);
      affected.insert(old.node);
    }
  }
  if (affected.empty()) return;
  std::vector<std::shared_ptr<std::mutex>> mutexes;
  std::vector<std::unique_lock<std::mutex>> locks;
  for (const std::string& name : affected) {
    // No lock: no record was ever made for the name; UpsertNodes will read the sum.
    if (auto m = impl_->NodeLock(name, /*create=*/false)) {
      mutexes.push_back(std::move(m));
      locks.emplace_back(*mutexes.back());
    }
  }
  const auto snapshot = impl_->Current();
  std::vector<std::shared_ptr<const NodeRecord>> records;  // by name, as affected is
  {
    std::lock_guard cpu(impl_->cpu_mu);
    for (const std::string& name : affected) {
      const NodeRecord* record = snapshot->Find(name);
      if (record == nullptr) continue;
      const std::int64_t sum = impl_->CpuRequestedLocked(name);
      if (record->cpu_requested_milli == sum) continue;  // e.g. a pod moved away and back
      auto next = std::make_shared<NodeRecord>(*record);
      next->cpu_requested_milli = sum;
      records.push_back(std::move(next));
    }
  }
  if (records.size() == 1) {
    const std::string name = records.front()->name;
    impl_->Publish(name, std::move(records.front()));
  } else if (!records.empty()) {
    impl_->PublishUpserts(std::move(records));
  }
}

void ClusterStore::SetPersistence(Persistence* persistence) {
  impl_->persistence = persistence;
}

void ClusterStore::SetNodeLocations(std::shared_ptr<const std::map<std::string, pd::Location>> locations) {
  std::lock_guard lock(impl_->locations_mu);
  impl_->locations = std::move(locations);
}

std::shared_ptr<const std::map<std::string, pd::Location>> ClusterStore::node_locations() const {
  std::lock_guard lock(impl_->locations_mu);
  return impl_->locations;
}

namespace {

// `project` of each pod of `pool` (under pods_mu).
template <class Pods, class Pools, class Project>
auto PodsOfPool(const Pods& pods, const Pools& pools, std::string_view pool, Project project) {
  std::vector<decltype(project(pods.begin()->second))> out;
  if (pool.empty()) return out;
  const auto it = pools.find(pool);
  if (it == pools.end()) return out;
  out.reserve(it->second.size());
  for (const std::string& uid : it->second) {
    if (const auto pod = pods.find(uid); pod != pods.end()) out.push_back(project(pod->second));
  }
  return out;
}

}  // namespace

std::vector<PodAllocation> ClusterStore::PoolPods(std::string_view pool) const {
  std::lock_guard lock(impl_->pods_mu);
  return PodsOfPool(impl_->pods, impl_->pools, pool, [](const PodAllocation& a) { return a; });
}

std::vector<framework::PoolMember> ClusterStore::PoolMembers(std::string_view pool) const {
  std::lock_guard lock(impl_->pods_mu);
  return *impl_->PoolMembersLocked(pool);
}

std::uint64_t ClusterStore::PoolVersion(std::string_view pool) const {
  std::lock_guard lock(impl_->pods_mu);
  const auto it = impl_->pool_versions.find(pool);
  return it == impl_->pool_versions.end() ? 0 : it->second;
}

std::pair<std::uint64_t, std::shared_ptr<const std::vector<framework::PoolMember>>>
ClusterStore::VersionedPoolMembers(std::string_view pool) const {
  std::lock_guard lock(impl_->pods_mu);
  const auto it = impl_->pool_versions.find(pool);
  return {it == impl_->pool_versions.end() ? 0 : it->second, impl_->PoolMembersLocked(pool)};
}

std::optional<PodAllocation> ClusterStore::FindPod(std::string_view pod_uid) const {
  std::lock_guard lock(impl_->pods_mu);
  const auto it = impl_->pods.find(pod_uid);
  if (it == impl_->pods.end()) return std::nullopt;
  return it->second;
}

std::string ClusterStore::NodeOfOwnAllocation(std::string_view pod_uid) const {
  std::lock_guard lock(impl_->pods_mu);
  const auto it = impl_->pods.find(pod_uid);
  if (it == impl_->pods.end() || it->second.foreign || !it->second.hold.empty()) return "";
  return it->second.node;
}

std::size_t ClusterStore::pod_count() const {
  std::lock_guard lock(impl_->pods_mu);
  return impl_->pods.size();
}

void ClusterStore::SetSynced(bool synced) {
  impl_->synced.store(synced);
}

bool ClusterStore::synced() const {
  return impl_->synced.load();
}

}  // namespace toposched::state
