// The snapshot ClusterStore publishes (cluster_state.h's Snapshot): a node's class key, the
// open-addressed name index that finds a node by name, and the snapshot's read accessors.

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store_impl.h"
#include "toposched/common/hash.h"
#include "toposched/state/cluster_state.h"

namespace toposched::state {

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
    std::uint32_t tag = 0;     // high half of the hash
    std::uint32_t pos = 0;     // position in nodes_ + 1; 0 = empty
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
      for (std::size_t i = 0; i < n; ++i)
        w |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
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

  const Slot* SlotOf(std::uint64_t h) const {
    return &slots[static_cast<std::size_t>(h) & (slots.size() - 1)];
  }

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
      index->slots[p] = {static_cast<std::uint32_t>(h >> 32), static_cast<std::uint32_t>(i + 1),
                         index->offsets[i], index->offsets[i + 1] - index->offsets[i]};
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

std::shared_ptr<const Snapshot::NameIndex> ClusterStore::Impl::BuildIndex(
    const std::vector<std::shared_ptr<const NodeRecord>>& nodes) {
  return Snapshot::NameIndex::Build(nodes);
}

}  // namespace toposched::state
