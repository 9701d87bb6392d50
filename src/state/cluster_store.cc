#include <algorithm>
#include <cstring>
#include <atomic>
#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <tuple>
#include <unordered_set>
#include <utility>

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

// `allocated` with `d` added, checked against `record`'s topology and the store's limits.
Result<NodeAllocation> Add(const NodeRecord& record, const framework::AllocationDelta& d,
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

std::uint64_t ComputeClassKey(const NodeRecord& r, const std::vector<std::string>* class_labels) {
  Fnv1aHasher h;
  h.U64(r.topology_fingerprint);
  h.Byte(r.schedulable ? 1 : 0);
  h.Byte(r.held() ? 1 : 0);
  if (class_labels == nullptr) {
    h.U64(r.labels.size());
    for (const auto& [key, value] : r.labels) {
      h.String(key);
      h.String(value);
    }
  } else {
    for (const std::string& key : *class_labels) {
      const auto it = r.labels.find(key);
      h.Byte(it == r.labels.end() ? 0 : 1);
      if (it != r.labels.end()) h.String(it->second);
    }
  }
  // Only the taken devices, by index: the same state hashes the same whatever the vectors'
  // lengths ("nothing allocated" may be empty or all false).
  const NodeAllocation& a = r.allocated;
  for (std::size_t g = 0; g < std::max(a.gpu_exclusive.size(), a.gpu_shares.size()); ++g) {
    const int gi = static_cast<int>(g);
    if (GpuExclusive(a, gi)) {
      h.Byte('x');
      h.U64(g);
    }
    const GpuShareUsage u = GpuShares(a, gi);
    if (!(u == GpuShareUsage{})) {
      h.Byte('s');
      h.U64(g);
      h.I64(u.shares);
      h.I64(u.memory_mib);
      h.I64(u.cores);
    }
  }
  for (std::size_t n = 0; n < a.nic_used.size(); ++n) {
    if (a.nic_used[n]) {
      h.Byte('n');
      h.U64(n);
    }
  }
  return h.value();
}

std::size_t Snapshot::Hash::operator()(std::string_view s) const noexcept {
  return std::hash<std::string_view>{}(s);
}

// Open addressing with linear probing over (hash tag, position + 1, the name's place in the
// arena) slots, at most half full; the names themselves sit in one arena in nodes_ order, so a
// probe and its comparison touch one slot and the name. Node names come from the scheduler, not
// from tenants, so a fast non-keyed hash is fine.
struct Snapshot::NameIndex {
  struct Slot {
    std::uint32_t tag = 0;  // high half of the hash
    std::uint32_t pos = 0;  // position in nodes_ + 1; 0 = empty
    std::uint32_t offset = 0;  // the name: arena[offset, offset + size)
    std::uint32_t size = 0;
  };
  std::vector<Slot> slots;  // a power of two
  std::string arena;
  std::vector<std::uint32_t> offsets;  // name i = arena[offsets[i], offsets[i + 1])

  // An unaligned 8-byte load (a fixed-size memcpy compiles to one mov, not a call).
  static std::uint64_t Load8(const char* p) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
  }

  // Names of 8 bytes or more are read as 8-byte words, the last one overlapping the one before
  // (its size is hashed too, so "ab" + the same tail cannot collide by construction); shorter
  // ones byte by byte. No call to memcpy or memcmp for the names a cluster has (10-40 bytes).
  static std::uint64_t HashName(std::string_view s) {
    const std::size_t n = s.size();
    std::uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
    if (n >= 8) {
      std::size_t i = 0;
      for (; i + 8 < n; i += 8) {
        h = (h ^ Load8(s.data() + i)) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
      }
      h = (h ^ Load8(s.data() + n - 8)) * 0xc4ceb9fe1a85ec53ull;
    } else {
      std::uint64_t w = 0;
      for (std::size_t i = 0; i < n; ++i) w |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
      h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    }
    h ^= h >> 29;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
  }

  // Whether the n bytes at a and b are equal, by 8-byte words where n >= 8 (the last overlapping).
  static bool SameBytes(const char* a, const char* b, std::size_t n) {
    if (n < 8) return std::memcmp(a, b, n) == 0;
    std::size_t i = 0;
    for (; i + 8 < n; i += 8) {
      if (Load8(a + i) != Load8(b + i)) return false;
    }
    return Load8(a + n - 8) == Load8(b + n - 8);
  }

  std::string_view NameAt(std::size_t i) const {
    return std::string_view(arena).substr(offsets[i], offsets[i + 1] - offsets[i]);
  }

  const Slot* SlotOf(std::uint64_t h) const { return &slots[static_cast<std::size_t>(h) & (slots.size() - 1)]; }

  std::size_t Find(std::string_view name, std::uint64_t h) const {
    const std::uint32_t tag = static_cast<std::uint32_t>(h >> 32);
    const std::size_t mask = slots.size() - 1;
    for (std::size_t p = static_cast<std::size_t>(h) & mask;; p = (p + 1) & mask) {
      const Slot& s = slots[p];
      if (s.pos == 0) return npos;
      if (s.tag == tag && s.size == name.size() && SameBytes(arena.data() + s.offset, name.data(), s.size)) {
        return s.pos - 1;
      }
    }
  }
  std::size_t Find(std::string_view name) const { return slots.empty() ? npos : Find(name, HashName(name)); }

  // Every name's position: each name's slot is fetched a few names ahead of its comparison, so
  // the table's cache misses overlap instead of following one another.
  void FindAll(std::span<const std::string_view> names, std::vector<std::size_t>& out) const {
    out.resize(names.size());
    if (slots.empty()) {
      std::fill(out.begin(), out.end(), npos);
      return;
    }
    constexpr std::size_t kAhead = 8;
    std::uint64_t ring[kAhead];
    const std::size_t n = names.size();
    for (std::size_t k = 0; k < n && k < kAhead; ++k) {
      ring[k] = HashName(names[k]);
      __builtin_prefetch(SlotOf(ring[k]));
    }
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint64_t h = ring[k % kAhead];
      if (k + kAhead < n) {
        ring[k % kAhead] = HashName(names[k + kAhead]);
        __builtin_prefetch(SlotOf(ring[k % kAhead]));
      }
      out[k] = Find(names[k], h);
    }
  }

  static std::shared_ptr<const NameIndex> Build(const std::vector<std::shared_ptr<const NodeRecord>>& nodes) {
    auto index = std::make_shared<NameIndex>();
    std::size_t size = 16;
    while (size < nodes.size() * 2) size *= 2;
    index->slots.resize(size);
    index->offsets.reserve(nodes.size() + 1);
    index->offsets.push_back(0);
    for (const auto& r : nodes) {
      index->arena.append(r->name);
      index->offsets.push_back(static_cast<std::uint32_t>(index->arena.size()));
    }
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const std::uint64_t h = HashName(nodes[i]->name);
      std::size_t p = static_cast<std::size_t>(h) & (size - 1);
      while (index->slots[p].pos != 0) p = (p + 1) & (size - 1);
      index->slots[p] = {static_cast<std::uint32_t>(h >> 32), static_cast<std::uint32_t>(i + 1), index->offsets[i],
                         index->offsets[i + 1] - index->offsets[i]};
    }
    return index;
  }
};

std::size_t Snapshot::IndexOf(std::string_view name) const {
  return index_ ? index_->Find(name) : npos;
}

void Snapshot::IndexOf(std::span<const std::string_view> names, std::vector<std::size_t>& out) const {
  if (index_ == nullptr) {
    out.assign(names.size(), npos);
    return;
  }
  index_->FindAll(names, out);
}

std::size_t Snapshot::IndexOf(std::string_view name, std::size_t hint) const {
  if (index_ == nullptr) return npos;
  if (hint < nodes_.size()) {
    const std::string_view at = index_->NameAt(hint);
    if (at.size() == name.size() && NameIndex::SameBytes(at.data(), name.data(), at.size())) return hint;
  }
  return index_->Find(name);
}

const std::vector<std::string>& Snapshot::tier_labels() const {
  static const std::vector<std::string> kNone;
  return tier_labels_ != nullptr ? *tier_labels_ : kNone;
}

const packing::HardwareCensus& Snapshot::census() const {
  static const packing::HardwareCensus kNone;
  return census_ != nullptr ? *census_ : kNone;
}

const Snapshot::PositionRuns& Snapshot::position_runs() const {
  static const PositionRuns kNone;
  return position_runs_ != nullptr ? *position_runs_ : kNone;
}

const NodeRecord* Snapshot::Find(std::string_view name) const {
  const std::size_t i = IndexOf(name);
  return i == npos ? nullptr : nodes_[i].get();
}

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
    record.free_gpus = record.free_rdma_nics = 0;
    record.free_by_vendor = {};
    record.hardware = record.topology == nullptr ? packing::NodeHardware{} : packing::HardwareOf(*record.topology);
    if (record.topology == nullptr || record.held()) return;
    for (std::size_t g = 0; g < record.topology->gpus.size(); ++g) {
      if (GpuFree(record.allocated, static_cast<int>(g)) && record.topology->gpus[g].unusable.empty()) {
        ++record.free_gpus;
        ++record.free_by_vendor[VendorIndex(record.topology->gpus[g].vendor)];
      }
    }
    for (std::size_t n = 0; n < record.topology->nics.size(); ++n) {
      if (record.topology->nics[n].rdma && !NicUsed(record.allocated, static_cast<int>(n))) {
        ++record.free_rdma_nics;
      }
    }
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
  ByName<CpuEntry> pod_cpu;            // only pods requesting CPU on a node
  ByName<std::int64_t> cpu_by_node;    // > 0 only; saturated at kCpuSaturated
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

  static std::shared_ptr<const Snapshot::NameIndex> BuildIndex(
      const std::vector<std::shared_ptr<const NodeRecord>>& nodes) {
    return Snapshot::NameIndex::Build(nodes);
  }

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
    s.briefs_[i] = Snapshot::Brief{r.name, r.name_hash, r.free_gpus, r.free_rdma_nics, r.schedulable && !r.held(),
                                   r.free_by_vendor, r.hardware, r.cpu_free_milli(), r.order_key};
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
    auto after = Add(record, allocation.delta, options.max_shares_per_gpu);
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
      const std::int64_t milli = pod.node.empty() ? 0 : std::clamp<std::int64_t>(pod.milli, 0, kMaxPodCpuMilli);
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

Status ClusterStore::Restore(const PodAllocation& allocation) {
  if (allocation.uid.empty()) return Error("restore: pod UID is empty");
  const Impl::UidClaim claim(*impl_, allocation.uid);
  // A held pod whose record became readable: the hold gives way to the allocation it names, in
  // one step on its node (when that fails, the hold stays and nothing changes).
  const PodAllocation* replaced_hold = nullptr;
  if (claim.bound() && !claim.bound()->hold.empty()) {
    if (claim.bound()->node == allocation.node) {
      replaced_hold = &*claim.bound();
    } else {
      TOPOSCHED_ASSIGN_OR_RETURN(std::ignore, impl_->ReleaseClaimed(*claim.bound(), /*persist=*/false));
    }
  } else if (claim.bound()) {
    if (claim.bound()->node != allocation.node) {
      return Error(std::string(kConflictTag) + "pod " + allocation.uid + " is already bound to node " +
                       claim.bound()->node + ", not " + allocation.node,
                   ErrorCode::kConflict);
    }
    // The same devices: the source read back what a bind just wrote (the annotation carries
    // no worst class or container split, so compare the claim, not every field).
    if (claim.bound()->delta == allocation.delta) return Status::Ok();
    return Error("pod " + allocation.uid + " is already bound to node " + allocation.node +
                 " with a different allocation");
  }
  const auto node_lock = impl_->NodeLock(allocation.node, /*create=*/false);
  if (!node_lock) return Error("unknown node " + allocation.node);
  std::lock_guard lock(*node_lock);
  const auto snapshot = impl_->Current();
  const NodeRecord* record = snapshot->Find(allocation.node);
  if (record == nullptr) return Error("unknown node " + allocation.node);
  const NodeRecord base = replaced_hold != nullptr ? Impl::Without(*record, *replaced_hold) : *record;
  TOPOSCHED_ASSIGN_OR_RETURN(std::shared_ptr<NodeRecord> next, impl_->WithPod(base, allocation));
  impl_->Publish(allocation.node, std::move(next));
  impl_->IndexPod(allocation);
  return Status::Ok();
}

Result<BindResult> ClusterStore::Bind(std::string_view node, std::string_view pod_uid, const Decide& decide) {
  if (pod_uid.empty()) return Error("bind: pod UID is empty");
  if (!decide) return Error("bind: no decision function");
  const Impl::UidClaim claim(*impl_, pod_uid);
  if (claim.bound() && !claim.bound()->hold.empty()) {
    return Error("pod " + std::string(pod_uid) + " holds devices on node " + claim.bound()->node +
                 " by a record that cannot be read back (" + claim.bound()->hold +
                 "): fix or remove its allocation annotation, or delete the pod");
  }
  if (claim.bound()) {
    if (claim.bound()->node == node) return BindResult{BindKind::kAlreadyBound, *claim.bound()};
    return Error(std::string(kConflictTag) + "pod " + std::string(pod_uid) + " is already bound to node " +
                     claim.bound()->node,
                 ErrorCode::kConflict);
  }
  const auto node_lock = impl_->NodeLock(node, /*create=*/false);
  if (!node_lock) return Error("unknown node " + std::string(node));
  std::lock_guard lock(*node_lock);
  const auto snapshot = impl_->Current();
  const NodeRecord* record = snapshot->Find(node);
  if (record == nullptr) return Error("unknown node " + std::string(node));

  TOPOSCHED_ASSIGN_OR_RETURN(PodAllocation allocation, decide(*record));
  if (allocation.uid.empty()) allocation.uid = pod_uid;
  if (allocation.node.empty()) allocation.node = node;
  if (allocation.uid != pod_uid || allocation.node != node) {
    return Error("bind: the decision is for pod " + allocation.uid + " on node " + allocation.node +
                 ", not pod " + std::string(pod_uid) + " on node " + std::string(node));
  }
  allocation.topology_generation = record->topology_generation;

  TOPOSCHED_ASSIGN_OR_RETURN(std::shared_ptr<NodeRecord> next, impl_->WithPod(*record, allocation));
  if (impl_->persistence != nullptr) {
    if (Status s = impl_->persistence->RecordBind(allocation, *record); !s.ok()) {
      return s.error().WithContext("cannot persist the bind of pod " + allocation.uid);
    }
  }
  impl_->Publish(node, std::move(next));
  impl_->IndexPod(allocation);
  impl_->WarmPool(allocation.pool);
  return BindResult{BindKind::kBound, std::move(allocation)};
}

Result<std::optional<PodAllocation>> ClusterStore::Release(std::string_view pod_uid, bool persist) {
  const Impl::UidClaim claim(*impl_, pod_uid);
  if (!claim.bound()) return std::optional<PodAllocation>();
  if (persist && !claim.bound()->hold.empty()) {
    // Nothing but the pod's end (the source's report) proves a held pod's devices free.
    return Error("pod " + std::string(pod_uid) + " holds devices on node " + claim.bound()->node +
                 " by a record that cannot be read back (" + claim.bound()->hold +
                 "): it is released only when the pod is gone");
  }
  return impl_->ReleaseClaimed(*claim.bound(), persist);
}

Result<std::optional<PodAllocation>> ClusterStore::ReleaseIfStill(const PodAllocation& expected) {
  const Impl::UidClaim claim(*impl_, expected.uid);
  const std::optional<PodAllocation>& bound = claim.bound();
  if (!bound || bound->node != expected.node || !(bound->delta == expected.delta) || !bound->hold.empty()) {
    return std::optional<PodAllocation>();
  }
  return impl_->ReleaseClaimed(*bound, /*persist=*/true);
}

Status ClusterStore::Hold(PodAllocation allocation) {
  if (allocation.uid.empty()) return Error("hold: pod UID is empty");
  if (allocation.hold.empty()) return Error("hold: pod " + allocation.uid + ": no reason given");
  const Impl::UidClaim claim(*impl_, allocation.uid);
  const PodAllocation* previous = claim.bound() ? &*claim.bound() : nullptr;
  if (previous != nullptr && previous->node != allocation.node) {
    TOPOSCHED_ASSIGN_OR_RETURN(std::ignore, impl_->ReleaseClaimed(*previous, /*persist=*/false));
    previous = nullptr;
  }
  const auto node_lock = impl_->NodeLock(allocation.node, /*create=*/false);
  if (!node_lock) return Error("unknown node " + allocation.node);
  std::lock_guard lock(*node_lock);
  const auto snapshot = impl_->Current();
  const NodeRecord* record = snapshot->Find(allocation.node);
  if (record == nullptr) return Error("unknown node " + allocation.node);
  // What the pod held before (a readable allocation, an earlier hold) gives way, in one step.
  const NodeRecord base = previous != nullptr ? Impl::Without(*record, *previous) : *record;
  // The named devices that are free, whole; the others are someone's already. The node is held
  // either way, so nothing is placed on what could not be identified.
  framework::AllocationDelta held;
  const int gpus = base.topology ? static_cast<int>(base.topology->gpus.size()) : 0;
  const int nics = base.topology ? static_cast<int>(base.topology->nics.size()) : 0;
  std::set<int> seen_gpus, seen_nics;
  auto take_gpu = [&](int g) {
    if (g >= 0 && g < gpus && seen_gpus.insert(g).second && GpuFree(base.allocated, g)) {
      held.exclusive_gpus.push_back(g);
    }
  };
  for (int g : allocation.delta.exclusive_gpus) take_gpu(g);
  for (const auto& [g, usage] : allocation.delta.shares) take_gpu(g);
  for (int n : allocation.delta.nics) {
    if (n >= 0 && n < nics && seen_nics.insert(n).second && !NicUsed(base.allocated, n)) {
      held.nics.push_back(n);
    }
  }
  allocation.delta = std::move(held);
  if (previous != nullptr && *previous == allocation) return Status::Ok();  // held so already
  TOPOSCHED_ASSIGN_OR_RETURN(std::shared_ptr<NodeRecord> next, impl_->WithPod(base, allocation));
  auto& held_pods = next->held_pods;
  held_pods.insert(std::lower_bound(held_pods.begin(), held_pods.end(), allocation.uid), allocation.uid);
  impl_->Refresh(*next);
  impl_->Publish(allocation.node, std::move(next));
  impl_->IndexPod(allocation);
  return Status::Ok();
}

void ClusterStore::SetPersistence(Persistence* persistence) { impl_->persistence = persistence; }

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
