// PlacementMemo: PlaceOnNode's outcome per (hardware type, free state, request shape, options).
// A cluster has few hardware types and, per type, few distinct allocation states, so scoring
// thousands of nodes costs a handful of engine runs plus one key per node.

#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>

#include "engine_internal.h"
#include "toposched/placement/placement.h"

namespace toposched {

namespace {

void AppendInt(std::string& key, std::int64_t v) {
  char bytes[sizeof v];
  std::memcpy(bytes, &v, sizeof v);
  key.append(bytes, sizeof v);
}

// The key. Everything the outcome depends on, normalised so that equal states give equal keys:
// allocation vectors are read through the topology's device counts (short vectors mean "free"),
// and only RDMA NICs, the ones the engine looks at, contribute. The Fingerprint covers the
// hardware and, with it, every name the outcome's reasons mention; it leaves GPU UUIDs out, so
// a request that names UUIDs adds the node's.
std::string MemoKey(const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r,
                    const EngineOptions& o, std::string_view fingerprint) {
  std::string key = fingerprint.empty() ? t.Fingerprint() : std::string(fingerprint);
  key += '\0';
  key += r.ShapeKey();
  key += '\0';
  if (r.NamesGpuUuids()) {
    for (const Gpu& g : t.gpus) {
      key += g.uuid;
      key += '\0';
    }
  }
  AppendInt(key, static_cast<std::int64_t>(o.default_gpu_policy));
  AppendInt(key, o.max_shares_per_gpu);
  AppendInt(key, static_cast<std::int64_t>(t.gpus.size()));
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    const int gpu = static_cast<int>(i);
    const GpuShareUsage s = placement_internal::GpuShares(a, gpu);
    key += placement_internal::GpuExclusive(a, gpu) ? 'x' : '-';
    if (s == GpuShareUsage{}) continue;  // the common case costs one byte per GPU
    key += 's';
    AppendInt(key, s.shares);
    AppendInt(key, s.memory_mib);
    AppendInt(key, s.cores);
  }
  key += '|';
  const int rdma = t.RdmaNicCount();
  for (int j = 0; j < rdma; ++j) key += placement_internal::NicUsed(a, j) ? 'u' : '-';
  return key;
}

}  // namespace

struct PlacementMemo::Impl {
  std::size_t capacity = 0;
  std::size_t hits = 0, misses = 0;
  std::unordered_map<std::string, PlacementOutcome> entries;
};

PlacementMemo::PlacementMemo(std::size_t capacity) : impl_(std::make_unique<Impl>()) {
  impl_->capacity = capacity;
}

PlacementMemo::~PlacementMemo() = default;

PlacementOutcome PlacementMemo::Place(const NodeTopology& topology, const NodeAllocation& allocated,
                                      const PlacementRequest& request, const EngineOptions& options,
                                      std::string_view fingerprint, SharePacking share_packing) {
  std::string key = MemoKey(topology, allocated, request, options, fingerprint);
  if (share_packing.mix != nullptr) {
    key += "|mix";
    AppendInt(key, static_cast<std::int64_t>(share_packing.key));
  }
  if (auto it = impl_->entries.find(key); it != impl_->entries.end()) {
    ++impl_->hits;
    return it->second;
  }
  ++impl_->misses;
  PlacementOutcome outcome = PlaceOnNode(topology, allocated, request, options, share_packing);
  if (impl_->capacity == 0) return outcome;
  // Clearing beats LRU bookkeeping here: states churn slowly, and a full clear costs one
  // recomputation per live state.
  if (impl_->entries.size() >= impl_->capacity) impl_->entries.clear();
  impl_->entries.emplace(std::move(key), outcome);
  return outcome;
}

std::size_t PlacementMemo::hits() const {
  return impl_->hits;
}
std::size_t PlacementMemo::misses() const {
  return impl_->misses;
}
std::size_t PlacementMemo::size() const {
  return impl_->entries.size();
}

}  // namespace toposched
