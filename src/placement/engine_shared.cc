// What the exact engine (engine.cc) and its brute-force reference (brute_force.cc) share, as
// declared in engine_internal.h: link ranks, switch groups, the shared-GPU key, and the words of
// placements and failures (the sentences explanations and events show). The searches are in
// engine.cc and brute_force.cc.

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine_internal.h"
#include "toposched/placement/placement.h"

namespace toposched {

int LinkRank(LinkClass cls, int package_a, int package_b) {
  switch (cls) {
    case LinkClass::kSelf:
    case LinkClass::kNV:
      return 0;
    case LinkClass::kPIX:
      return 1;
    case LinkClass::kPXB:
      return 2;
    case LinkClass::kPHB:
      return 3;
    case LinkClass::kNODE:
      return 4;
    case LinkClass::kSYS:
      return package_a >= 0 && package_a == package_b ? 5 : 6;
  }
  return 6;
}

std::string_view ToString(FitFailure f) {
  switch (f) {
    case FitFailure::kNone:
      return "none";
    case FitFailure::kNotEnoughGpus:
      return "not-enough-gpus";
    case FitFailure::kNotEnoughNics:
      return "not-enough-nics";
    case FitFailure::kAlignmentUnsatisfiable:
      return "alignment-unsatisfiable";
    case FitFailure::kNotEnoughShareCapacity:
      return "not-enough-share-capacity";
    case FitFailure::kRequestTooLarge:
      return "request-too-large";
  }
  return "none";
}

namespace placement_internal {
namespace {

std::size_t Idx(int i) {
  return static_cast<std::size_t>(i);
}

// A matrix cell, or a default (SYS, no fabric) link when the matrix is smaller than the device
// lists: a malformed topology must not crash the scheduler.
Link LinkAt(const LinkMatrix& m, int r, int c) {
  if (r < 0 || c < 0 || r >= m.rows || c >= m.cols || m.Offset(r, c) >= m.cells.size()) return Link{};
  return m.at(r, c);
}

std::string Plural(long long n, std::string_view noun) {
  return std::to_string(n) + " " + std::string(noun) + (n == 1 ? "" : "s");
}

std::string VendorName(GpuVendor v) {
  return v == GpuVendor::kAmd ? "AMD" : "NVIDIA";
}

std::string GpuName(int gpu) {
  return "GPU" + std::to_string(gpu);
}

std::string GpuLabel(const NodeTopology& t, int gpu) {
  return GpuName(gpu) + " (" + t.gpus[Idx(gpu)].pci_bus_id + ")";
}

std::string JoinGpus(const std::vector<int>& gpus) {
  std::string out;
  for (int g : gpus) out += (out.empty() ? "" : ", ") + GpuName(g);
  return out;
}

std::string GroupId(const NodeTopology& t, const SwitchGroups& groups, int group) {
  return t.pcie[Idx(groups.pcie_index[Idx(group)])].id;
}

// How a GPU->NIC path runs, after its class: "PIX to mlx5_1 through switch 0000:48:00.0".
std::string PathPhrase(const NodeTopology& t, const SwitchGroups& groups, int gpu, int nic) {
  const LinkClass cls = LinkAt(t.gpu_nic, gpu, nic).cls;
  const Gpu& g = t.gpus[Idx(gpu)];
  const Nic& n = t.nics[Idx(nic)];
  switch (cls) {
    case LinkClass::kPIX:
    case LinkClass::kPXB: {
      const int group = groups.of_gpu[Idx(gpu)];
      if (group >= 0 && group == groups.of_nic[Idx(nic)])
        return " through switch " + GroupId(t, groups, group);
      return "";
    }
    case LinkClass::kPHB:
      return " through the host bridge";
    case LinkClass::kNODE:
      return g.numa >= 0 ? " across host bridges of NUMA node " + std::to_string(g.numa)
                         : " across host bridges of one NUMA node";
    case LinkClass::kSYS:
      return LinkRank(cls, g.package, n.package) == 5 ? " across NUMA nodes of one socket"
                                                      : " across sockets";
    default:
      return "";
  }
}

// "NV18 to the other 7 chosen GPUs", or per link token when they differ.
std::string PeerPhrase(const NodeTopology& t, int gpu, const std::vector<int>& chosen) {
  std::vector<std::pair<std::string, std::vector<int>>> by_token;
  for (int other : chosen) {
    if (other == gpu) continue;
    const std::string token = LinkAt(t.gpu_gpu, std::min(gpu, other), std::max(gpu, other)).Token();
    auto it = std::find_if(by_token.begin(), by_token.end(), [&](const auto& e) { return e.first == token; });
    if (it == by_token.end()) {
      by_token.push_back({token, {other}});
    } else {
      it->second.push_back(other);
    }
  }
  if (by_token.size() == 1 && by_token[0].second.size() > 1) {
    return by_token[0].first + " to the other " +
           Plural(static_cast<long long>(by_token[0].second.size()), "chosen GPU");
  }
  std::string out;
  for (const auto& [token, gpus] : by_token)
    out += (out.empty() ? "" : "; ") + token + " to " + JoinGpus(gpus);
  return out;
}

std::string GroupPhrase(const NodeTopology& t, const SwitchGroups& groups, int group) {
  if (group < 0) return "";
  return groups.intact_before[Idx(group)] ? "opens switch group " + GroupId(t, groups, group)
                                          : "switch group " + GroupId(t, groups, group) + " already in use";
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    out += (out.empty() ? "" : "; ") + p;
  }
  return out;
}

std::string CoresText(std::int64_t cores) {
  std::string out = std::to_string(cores / 100);
  if (cores % 100 != 0) {
    const std::int64_t frac = cores % 100;
    out += (frac < 10 ? ".0" : ".") + std::to_string(frac);
  }
  return out + "%";
}

}  // namespace

LinkClass GpuNicClass(const NodeTopology& t, int gpu, int nic) {
  return LinkAt(t.gpu_nic, gpu, nic).cls;
}

int GpuNicRank(const NodeTopology& t, int gpu, int nic) {
  return LinkRank(LinkAt(t.gpu_nic, gpu, nic).cls, t.gpus[Idx(gpu)].package, t.nics[Idx(nic)].package);
}

int GpuGpuRank(const NodeTopology& t, int a, int b) {
  const int lo = std::min(a, b), hi = std::max(a, b);
  return LinkRank(LinkAt(t.gpu_gpu, lo, hi).cls, t.gpus[Idx(lo)].package, t.gpus[Idx(hi)].package);
}

int NvlinkCount(const NodeTopology& t, int a, int b) {
  const Link l = LinkAt(t.gpu_gpu, std::min(a, b), std::max(a, b));
  if (l.cls != LinkClass::kNV) return 0;
  return l.fabric == Fabric::kXgmi ? 1 : std::max(l.count, 1);
}

int SwitchGroups::IntactCount() const {
  return static_cast<int>(std::count(intact_before.begin(), intact_before.end(), true));
}

SwitchGroups ComputeSwitchGroups(const NodeTopology& t, const NodeAllocation& a) {
  SwitchGroups g;
  g.of_gpu.assign(t.gpus.size(), -1);
  g.of_nic.assign(t.nics.size(), -1);
  std::vector<int> id_of_pcie(t.pcie.size(), -1);
  auto group_of = [&](int parent) {
    const int s = t.SwitchOf(parent);
    if (s < 0 || Idx(s) >= t.pcie.size()) return -1;
    if (id_of_pcie[Idx(s)] < 0) {
      id_of_pcie[Idx(s)] = static_cast<int>(g.pcie_index.size());
      g.pcie_index.push_back(s);
      g.intact_before.push_back(true);
    }
    return id_of_pcie[Idx(s)];
  };
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    const int id = group_of(t.gpus[i].parent);
    g.of_gpu[i] = id;
    if (id >= 0 && !GpuFree(a, static_cast<int>(i))) g.intact_before[Idx(id)] = false;
  }
  const int rdma = t.RdmaNicCount();
  for (int j = 0; j < rdma && Idx(j) < t.nics.size(); ++j) {
    if (!t.nics[Idx(j)].rdma) continue;
    const int id = group_of(t.nics[Idx(j)].parent);
    g.of_nic[Idx(j)] = id;
    if (id >= 0 && NicUsed(a, j)) g.intact_before[Idx(id)] = false;
  }
  return g;
}

int WholePackSign(const PlacementRequest& r) {
  return r.shared.gpu_policy == PackPolicy::kSpread ? -1 : 1;
}

PackPolicy SharedPolicy(const PlacementRequest& r, const EngineOptions& o) {
  if (r.shared.gpu_policy != PackPolicy::kDefault) return r.shared.gpu_policy;
  return o.default_gpu_policy == PackPolicy::kBinpack ? PackPolicy::kBinpack : PackPolicy::kSpread;
}

std::optional<PlacementOutcome> WholeCountFailure(const NodeTopology& t, const NodeAllocation& a,
                                                  const PlacementRequest& r) {
  auto fail = [](FitFailure f, std::string detail) {
    PlacementOutcome o;
    o.failure = f;
    o.detail = std::move(detail);
    return o;
  };
  if (r.gpus < 0 || r.rdma_nics < 0) {
    return fail(FitFailure::kRequestTooLarge, "the request asks a negative number of GPUs or NICs");
  }
  const std::string vendor = VendorName(r.vendor);
  int total = 0, free = 0, held_whole = 0, with_vgpus = 0, unusable = 0;
  std::string unusable_why;
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    if (t.gpus[i].vendor != r.vendor) continue;
    ++total;
    const int gi = static_cast<int>(i);
    if (!t.gpus[i].unusable.empty()) {
      if (unusable++ == 0) unusable_why = t.gpus[i].unusable;
    } else if (GpuExclusive(a, gi)) {
      ++held_whole;
    } else if (GpuShares(a, gi).shares > 0) {
      ++with_vgpus;
    } else {
      ++free;
    }
  }
  const int rdma = t.RdmaNicCount();
  if (r.gpus > total) {
    return fail(FitFailure::kRequestTooLarge,
                "needs " + Plural(r.gpus, vendor + " GPU") + ", the node has " + std::to_string(total));
  }
  if (r.rdma_nics > rdma) {
    return fail(FitFailure::kRequestTooLarge,
                "needs " + Plural(r.rdma_nics, "RDMA NIC") + ", the node has " + std::to_string(rdma));
  }
  if (r.gpus > free) {
    std::string held;
    if (held_whole > 0) held += std::to_string(held_whole) + " held whole by pods";
    if (with_vgpus > 0) held += (held.empty() ? "" : ", ") + std::to_string(with_vgpus) + " carrying vGPUs";
    if (unusable > 0) {
      held += (held.empty() ? "" : ", ") + std::to_string(unusable) + " unusable: " + unusable_why;
    }
    return fail(FitFailure::kNotEnoughGpus, "needs " + Plural(r.gpus, vendor + " GPU") + ", " +
                                                std::to_string(free) + (free == 1 ? " is" : " are") +
                                                " free (" + held + ")");
  }
  int nics_free = 0;
  for (int j = 0; j < rdma; ++j) nics_free += RdmaNicFree(t, a, j) ? 1 : 0;
  if (r.rdma_nics > nics_free) {
    return fail(FitFailure::kNotEnoughNics, "needs " + Plural(r.rdma_nics, "RDMA NIC") + ", " +
                                                std::to_string(nics_free) +
                                                (nics_free == 1 ? " is" : " are") + " free (" +
                                                std::to_string(rdma - nics_free) + " held by pods)");
  }
  return std::nullopt;
}

Placement DescribeWhole(const NodeTopology& t, const SwitchGroups& groups, const WholeChoice& c,
                        int best_possible_worst) {
  Placement p;
  p.gpus = c.gpus;
  p.nics = c.nics;
  p.cost = c.cost;
  p.best_possible_worst = best_possible_worst;
  int worst_rank = -1;
  const bool with_nics = !c.nic_of_gpu.empty();
  for (std::size_t i = 0; with_nics && i < c.gpus.size(); ++i) {
    const int gpu = c.gpus[i], nic = c.nic_of_gpu[i];
    const LinkClass cls = LinkAt(t.gpu_nic, gpu, nic).cls;
    p.pairs.push_back(GpuNicPair{gpu, nic, cls});
    const int rank = GpuNicRank(t, gpu, nic);
    p.class_sum += rank;
    if (rank > worst_rank) {
      worst_rank = rank;
      p.worst_class = cls;
    }
  }
  for (std::size_t i = 0; i < c.gpus.size(); ++i) {
    const int gpu = c.gpus[i];
    std::vector<std::string> parts;
    if (with_nics) {
      const int nic = c.nic_of_gpu[i];
      parts.push_back(std::string(ToString(LinkAt(t.gpu_nic, gpu, nic).cls)) + " to " +
                      t.nics[Idx(nic)].DisplayName() + PathPhrase(t, groups, gpu, nic));
    }
    if (c.gpus.size() > 1) parts.push_back(PeerPhrase(t, gpu, c.gpus));
    parts.push_back(GroupPhrase(t, groups, groups.of_gpu[Idx(gpu)]));
    std::string text = Join(parts);
    p.reasons.push_back(GpuLabel(t, gpu) + ": " + (text.empty() ? "a free GPU" : text));
  }
  for (int nic : c.nics) {
    std::vector<int> served;
    for (std::size_t i = 0; with_nics && i < c.gpus.size(); ++i) {
      if (c.nic_of_gpu[i] == nic) served.push_back(c.gpus[i]);
    }
    const std::string& name = t.nics[Idx(nic)].DisplayName();
    if (!served.empty()) {
      p.reasons.push_back(name + ": serves " + JoinGpus(served));
      continue;
    }
    std::vector<std::string> parts;
    if (c.gpus.empty()) {
      parts.push_back("NIC-only request");
    } else {
      int nearest = c.gpus.front();
      for (int gpu : c.gpus) {
        if (GpuNicRank(t, gpu, nic) < GpuNicRank(t, nearest, nic)) nearest = gpu;
      }
      parts.push_back("extra NIC (the pod asks more NICs than GPUs); nearest chosen GPU is " +
                      GpuName(nearest) + " at " + std::string(ToString(LinkAt(t.gpu_nic, nearest, nic).cls)));
    }
    parts.push_back(GroupPhrase(t, groups, groups.of_nic[Idx(nic)]));
    p.reasons.push_back(name + ": " + Join(parts));
  }
  return p;
}

PlacementOutcome AlignmentFailure(const NodeTopology& t, const PlacementRequest& r,
                                  const Placement& unbounded) {
  PlacementOutcome o;
  o.failure = FitFailure::kAlignmentUnsatisfiable;
  const LinkClass bound = r.max_gpu_nic_class.value_or(LinkClass::kSYS);
  o.detail = "needs every GPU within " + std::string(ToString(bound)) + " of its NIC (" +
             std::string(kAlignmentAnnotation) + "); the best this node offers now is " +
             std::string(ToString(unbounded.worst_class));
  int worst = -1;
  const GpuNicPair* worst_pair = nullptr;
  for (const GpuNicPair& pair : unbounded.pairs) {
    const int rank = GpuNicRank(t, pair.gpu, pair.nic);
    if (rank > worst) {
      worst = rank;
      worst_pair = &pair;
    }
  }
  if (worst_pair != nullptr) {
    o.detail += " (" + GpuName(worst_pair->gpu) + " to " + t.nics[Idx(worst_pair->nic)].DisplayName() + ")";
  }
  return o;
}

ShareFragmentation::ShareFragmentation(const NodeTopology& t, const NodeAllocation& a,
                                       const PlacementRequest& r, const SharePacking& share_packing)
    : active_(share_packing.mix != nullptr && !share_packing.mix->shapes.empty() && r.IsShared() &&
              r.shared.count == 1 && r.shared.gpu_policy == PackPolicy::kDefault),
      mix_(share_packing.mix),
      t_(t),
      a_(a),
      r_(r) {
  if (active_) after_.assign(t.gpus.size(), -1);
}

std::int64_t ShareFragmentation::After(int gpu) const {
  if (!active_) return 0;
  std::int64_t& cached = after_[Idx(gpu)];
  if (cached >= 0) return cached;
  // The allocation with the vGPU on `gpu`, as the Reserve would record it (DeltaOf), read back
  // by packing's one rule for what a card has left. The node's CPU is the same whichever card
  // the vGPU takes: left out.
  NodeAllocation after = a_;
  if (after.gpu_shares.size() <= Idx(gpu)) after.gpu_shares.resize(Idx(gpu) + 1);
  GpuShareUsage& used = after.gpu_shares[Idx(gpu)];
  ++used.shares;
  used.memory_mib += ShareMemoryMib(t_.gpus[Idx(gpu)], r_.shared);
  used.cores += r_.shared.cores;
  cached = std::llround(packing::Fragmentation(packing::StateOf(t_, after, r_.vendor), *mix_) * 1e6);
  return cached;
}

ShareKey SharedKey(const NodeTopology& t, const NodeAllocation& a, const SwitchGroups& groups,
                   const PlacementRequest& r, const EngineOptions& o, PackPolicy policy,
                   const ShareFragmentation& frag, int gpu) {
  ShareKey k;
  k.fragmentation = frag.After(gpu);
  const int group = groups.of_gpu[Idx(gpu)];
  k.opens_group = group >= 0 && groups.intact_before[Idx(group)] ? 1 : 0;
  const std::int64_t score = ShareUsageScore(t, a, r, o.max_shares_per_gpu, gpu);
  k.policy_key = policy == PackPolicy::kBinpack || frag.active() ? -score : score;
  k.gpu = gpu;
  return k;
}

PlacementOutcome SharedFailure(const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r,
                               const EngineOptions& o) {
  PlacementOutcome out;
  const SharedGpuRequest& s = r.shared;
  const std::string vendor = VendorName(r.vendor);
  int total = 0;
  std::array<int, static_cast<std::size_t>(ShareVerdict::kUnenforced) + 1> by_verdict{};
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    if (t.gpus[i].vendor != r.vendor) continue;
    ++total;
    ++by_verdict[static_cast<std::size_t>(JudgeSharedGpu(t, a, r, o, static_cast<int>(i)))];
  }
  if (total < s.count) {
    out.failure = FitFailure::kRequestTooLarge;
    out.detail = "needs " + Plural(s.count, "vGPU") + " on distinct " + vendor + " GPUs, the node has " +
                 std::to_string(total);
    return out;
  }
  out.failure = FitFailure::kNotEnoughShareCapacity;
  std::string each;
  if (s.memory_mib > 0) {
    each = std::to_string(s.memory_mib) + " MiB";
  } else if (s.memory_percent > 0) {
    each = std::to_string(s.memory_percent) + "% of the memory";
  }
  if (s.cores > 0) each += (each.empty() ? "" : ", ") + CoresText(s.cores) + " of the cores";
  const int fits = by_verdict[static_cast<std::size_t>(ShareVerdict::kFits)];
  std::string head = "needs " + Plural(s.count, "vGPU") + (each.empty() ? "" : " (" + each + " each)") +
                     " on distinct " + vendor + " GPUs";
  if (s.numa_bind && fits >= s.count) {
    out.detail = head + " of one NUMA node (numa-bind); " + std::to_string(fits) +
                 " GPUs can take one, but no NUMA node has " + std::to_string(s.count) + " of them";
    return out;
  }
  static constexpr std::pair<ShareVerdict, const char*> kWhy[] = {
      {ShareVerdict::kExclusive, "held whole"},
      {ShareVerdict::kShareLimit, "at the vGPU limit"},
      {ShareVerdict::kFiltered, "excluded by the type/UUID filters"},
      {ShareVerdict::kMemoryUnknown, "of unknown memory size and already shared"},
      {ShareVerdict::kUnusable,
       "unusable (per HAMi's registration: unhealthy, in MIG mode, or not registered)"},
      {ShareVerdict::kUnenforced,
       "whole only (no device plugin enforces shares on this node: no HAMi registration, no "
       "toposched.io/shares-enforced=true label)"},
      {ShareVerdict::kMemory, "short of memory"},
      {ShareVerdict::kCores, "short of cores"},
      {ShareVerdict::kNumaUnknown, "of unknown NUMA node"},
  };
  std::string why;
  for (const auto& [verdict, text] : kWhy) {
    const int n = by_verdict[static_cast<std::size_t>(verdict)];
    if (n > 0) why += (why.empty() ? "" : ", ") + std::to_string(n) + " " + text;
  }
  out.detail = head + "; " + std::to_string(fits) + " of " + std::to_string(total) + " can take one" +
               (why.empty() ? "" : " (" + why + ")");
  return out;
}

Placement DescribeShared(const NodeTopology& t, const NodeAllocation& a, const SwitchGroups& groups,
                         const PlacementRequest& r, const EngineOptions& o, std::vector<int> gpus,
                         const ShareFragmentation* frag) {
  std::sort(gpus.begin(), gpus.end());
  const bool packs = frag != nullptr && frag->active();
  const PackPolicy policy = packs ? PackPolicy::kBinpack : SharedPolicy(r, o);
  Placement p;
  p.gpus = gpus;
  std::vector<bool> touched(groups.intact_before.size(), false);
  int newly = 0;
  for (int gpu : gpus) {
    const int group = groups.of_gpu[Idx(gpu)];
    if (group >= 0 && groups.intact_before[Idx(group)] && !touched[Idx(group)]) {
      touched[Idx(group)] = true;
      ++newly;
    }
  }
  p.cost.neg_intact_groups = newly - groups.IntactCount();
  p.cost.pack = policy == PackPolicy::kBinpack ? newly : -newly;
  for (int gpu : gpus) {
    const Gpu& g = t.gpus[Idx(gpu)];
    const GpuShareUsage used = GpuShares(a, gpu);
    const int group = groups.of_gpu[Idx(gpu)];
    std::vector<std::string> parts;
    if (packs) {
      parts.push_back("strands least of the typical pods' GPU (" +
                      std::to_string((frag->After(gpu) + 500'000) / 1'000'000) +
                      " milli-GPU of the node after; capacity first)");
    }
    if (group < 0) {
      parts.push_back("in no switch group");
    } else if (groups.intact_before[Idx(group)]) {
      parts.push_back("opens switch group " + GroupId(t, groups, group));
    } else {
      parts.push_back("switch group " + GroupId(t, groups, group) + " already in use (fragmentation rule)");
    }
    parts.push_back(std::string(ToString(policy)) + ": " + std::to_string(used.memory_mib) + " of " +
                    std::to_string(g.memory_mib) + " MiB and " +
                    std::to_string(used.cores * 100 / kFullGpuCores) + "% of compute already used");
    parts.push_back("vGPU " + std::to_string(used.shares + 1) + " of at most " +
                    std::to_string(o.max_shares_per_gpu));
    p.reasons.push_back(GpuLabel(t, gpu) + ": " + Join(parts));
  }
  return p;
}

}  // namespace placement_internal

}  // namespace toposched
