#include "toposched/framework/allocation.h"

#include <algorithm>
#include <string>

namespace toposched::framework {
namespace {

// Shrinks `v` to `size` when every entry past it has its default value.
template <typename T>
void ShrinkIfDefault(std::vector<T>& v, std::size_t size) {
  if (v.size() <= size) return;
  const bool tail_default = std::all_of(v.begin() + static_cast<std::ptrdiff_t>(size), v.end(),
                                        [](const T& x) { return x == T{}; });
  if (tail_default) v.resize(size);
}

std::size_t Index(int i) {
  return static_cast<std::size_t>(i);
}

}  // namespace

AllocationDelta DeltaOf(const NodeTopology& topology, const PlacementRequest& request,
                        const Placement& placement) {
  AllocationDelta delta;
  delta.nics = placement.nics;
  for (int g : placement.gpus) {
    if (!request.IsShared()) {
      delta.exclusive_gpus.push_back(g);
      continue;
    }
    GpuShareUsage add;
    add.shares = 1;
    add.cores = request.shared.cores;
    if (g >= 0 && Index(g) < topology.gpus.size()) {
      add.memory_mib = ShareMemoryMib(topology.gpus[Index(g)], request.shared);
    }
    delta.shares.emplace_back(g, add);
  }
  return delta;
}

Status ApplyDelta(const NodeTopology& topology, const AllocationDelta& delta, NodeAllocation& allocated) {
  const int gpus = static_cast<int>(topology.gpus.size());
  const int nics = static_cast<int>(topology.nics.size());
  // Check everything first so that a failure changes nothing.
  for (int g : delta.exclusive_gpus) {
    if (g < 0 || g >= gpus) return Error("GPU index " + std::to_string(g) + " out of range");
    if (!GpuFree(allocated, g)) return Error("GPU" + std::to_string(g) + " is not free");
  }
  for (const auto& [g, add] : delta.shares) {
    if (g < 0 || g >= gpus) return Error("GPU index " + std::to_string(g) + " out of range");
    if (GpuExclusive(allocated, g)) return Error("GPU" + std::to_string(g) + " is held whole");
  }
  for (int n : delta.nics) {
    if (n < 0 || n >= nics) return Error("NIC index " + std::to_string(n) + " out of range");
    if (NicUsed(allocated, n)) return Error("NIC " + topology.nics[Index(n)].DisplayName() + " is in use");
  }
  if (!delta.exclusive_gpus.empty())
    allocated.gpu_exclusive.resize(std::max(allocated.gpu_exclusive.size(), Index(gpus)));
  if (!delta.shares.empty()) allocated.gpu_shares.resize(std::max(allocated.gpu_shares.size(), Index(gpus)));
  if (!delta.nics.empty()) allocated.nic_used.resize(std::max(allocated.nic_used.size(), Index(nics)));
  for (int g : delta.exclusive_gpus) allocated.gpu_exclusive[Index(g)] = true;
  for (const auto& [g, add] : delta.shares) {
    GpuShareUsage& u = allocated.gpu_shares[Index(g)];
    u.shares += add.shares;
    u.memory_mib += add.memory_mib;
    u.cores += add.cores;
  }
  for (int n : delta.nics) allocated.nic_used[Index(n)] = true;
  return Status::Ok();
}

AllocationShape ShapeOf(const NodeAllocation& a) {
  return AllocationShape{a.gpu_exclusive.size(), a.nic_used.size(), a.gpu_shares.size()};
}

void RevertDelta(const AllocationDelta& delta, const AllocationShape& before, NodeAllocation& allocated) {
  for (int g : delta.exclusive_gpus) {
    if (g >= 0 && Index(g) < allocated.gpu_exclusive.size()) allocated.gpu_exclusive[Index(g)] = false;
  }
  for (const auto& [g, add] : delta.shares) {
    if (g < 0 || Index(g) >= allocated.gpu_shares.size()) continue;
    GpuShareUsage& u = allocated.gpu_shares[Index(g)];
    u.shares = std::max(0, u.shares - add.shares);
    u.memory_mib = std::max<std::int64_t>(0, u.memory_mib - add.memory_mib);
    u.cores = std::max<std::int64_t>(0, u.cores - add.cores);
  }
  for (int n : delta.nics) {
    if (n >= 0 && Index(n) < allocated.nic_used.size()) allocated.nic_used[Index(n)] = false;
  }
  ShrinkIfDefault(allocated.gpu_exclusive, before.gpu_exclusive);
  ShrinkIfDefault(allocated.gpu_shares, before.gpu_shares);
  ShrinkIfDefault(allocated.nic_used, before.nic_used);
}

}  // namespace toposched::framework
