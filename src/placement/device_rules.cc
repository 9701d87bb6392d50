// The device rules (device_rules.h).

#include "toposched/placement/device_rules.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

#include "toposched/common/text.h"

namespace toposched {
namespace {

std::size_t Idx(int i) {
  return static_cast<std::size_t>(i);
}

}  // namespace

bool GpuExclusive(const NodeAllocation& a, int gpu) {
  return gpu >= 0 && Idx(gpu) < a.gpu_exclusive.size() && a.gpu_exclusive[Idx(gpu)];
}

bool NicUsed(const NodeAllocation& a, int nic) {
  return nic >= 0 && Idx(nic) < a.nic_used.size() && a.nic_used[Idx(nic)];
}

GpuShareUsage GpuShares(const NodeAllocation& a, int gpu) {
  return gpu >= 0 && Idx(gpu) < a.gpu_shares.size() ? a.gpu_shares[Idx(gpu)] : GpuShareUsage{};
}

bool GpuFree(const NodeAllocation& a, int gpu) {
  return !GpuExclusive(a, gpu) && GpuShares(a, gpu).shares <= 0;
}

bool RdmaNicFree(const NodeTopology& t, const NodeAllocation& a, int nic) {
  return nic >= 0 && Idx(nic) < t.nics.size() && t.nics[Idx(nic)].rdma && !NicUsed(a, nic);
}

std::optional<std::int64_t> ShareMemoryNeed(const Gpu& gpu, const SharedGpuRequest& s) {
  if (s.memory_mib > 0) {
    if (gpu.memory_mib == 0) return std::nullopt;
    return s.memory_mib;
  }
  if (s.memory_percent > 0) {
    if (gpu.memory_mib == 0) return std::nullopt;
    // HAMi's rule, rounded down: memreq = Totalmem * MemPercentagereq / 100 (int32 division in
    // its fit, pkg/device/nvidia/device.go), so a share holds no MiB more than HAMi gives it.
    return static_cast<std::int64_t>(gpu.memory_mib) * s.memory_percent / 100;
  }
  return 0;
}

std::int64_t ShareMemoryMib(const Gpu& gpu, const SharedGpuRequest& s) {
  return ShareMemoryNeed(gpu, s).value_or(s.memory_mib);
}

std::int64_t ShareUsageScore(const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r,
                             int max_shares_per_gpu, int gpu) {
  constexpr std::int64_t kWhole = 1'000'000;
  const Gpu& g = t.gpus[Idx(gpu)];
  const GpuShareUsage used = GpuShares(a, gpu);
  std::int64_t score = 0;
  if (max_shares_per_gpu > 0) score += (used.shares + 1) * kWhole / max_shares_per_gpu;
  score += std::clamp<std::int64_t>(used.cores + r.shared.cores, 0, kFullGpuCores) * kWhole / kFullGpuCores;
  if (g.memory_mib > 0) {
    const std::int64_t mem = used.memory_mib + ShareMemoryMib(g, r.shared);
    score +=
        std::clamp<std::int64_t>(mem, 0, g.memory_mib) * kWhole / static_cast<std::int64_t>(g.memory_mib);
  }
  return score;
}

ShareVerdict JudgeSharedGpu(const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r,
                            int max_shares_per_gpu, int gpu) {
  const Gpu& g = t.gpus[Idx(gpu)];
  const SharedGpuRequest& s = r.shared;
  if (g.vendor != r.vendor) return ShareVerdict::kWrongVendor;
  if (!g.unusable.empty()) return ShareVerdict::kUnusable;
  if (!g.shares_unenforced.empty()) return ShareVerdict::kUnenforced;
  if (GpuExclusive(a, gpu)) return ShareVerdict::kExclusive;
  const GpuShareUsage used = GpuShares(a, gpu);
  if (used.shares >= max_shares_per_gpu) return ShareVerdict::kShareLimit;
  const std::string model = AsciiLower(g.model);
  auto model_has = [&](const std::string& type) { return model.find(AsciiLower(type)) != std::string::npos; };
  if (!s.use_types.empty() && std::none_of(s.use_types.begin(), s.use_types.end(), model_has)) {
    return ShareVerdict::kFiltered;
  }
  if (std::any_of(s.avoid_types.begin(), s.avoid_types.end(), model_has)) return ShareVerdict::kFiltered;
  auto is_uuid = [&](const std::string& u) { return u == g.uuid; };
  if (!s.use_uuids.empty() && std::none_of(s.use_uuids.begin(), s.use_uuids.end(), is_uuid)) {
    return ShareVerdict::kFiltered;
  }
  if (std::any_of(s.avoid_uuids.begin(), s.avoid_uuids.end(), is_uuid)) return ShareVerdict::kFiltered;
  const std::optional<std::int64_t> need = ShareMemoryNeed(g, s);
  // A card whose memory no source gives: a vGPU that asks memory takes it alone, and nothing
  // joins a vGPU that asked memory there (HAMi enforces each pod's own limit; only the sum is
  // unknown). So such cards are shared by count, never over-committed by more than one pod.
  if (g.memory_mib == 0 && (!need ? used.shares > 0 : used.memory_mib > 0))
    return ShareVerdict::kMemoryUnknown;
  if (need && *need > 0 && static_cast<std::int64_t>(g.memory_mib) - used.memory_mib < *need) {
    return ShareVerdict::kMemory;
  }
  if (s.cores > 0 && kFullGpuCores - used.cores < s.cores) return ShareVerdict::kCores;
  if (s.numa_bind && g.numa < 0) return ShareVerdict::kNumaUnknown;
  return ShareVerdict::kFits;
}

}  // namespace toposched
