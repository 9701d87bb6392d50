// The reference placement: every GPU subset, every NIC subset and every GPU->NIC assignment,
// each costed from scratch by the definitions in the SEMANTICS block of docs/placement.md, the smallest
// (cost, extra NIC ranks, GPUs, NICs, assignment) kept. Deliberately shares no search code and
// no cost arithmetic with the engine, only the definitions of "free", switch groups and the
// sentences a Placement carries. Exponential: tests only.

#include "brute_force.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <tuple>
#include <vector>

#include "engine_internal.h"
#include "toposched/placement/placement.h"

namespace toposched {
namespace {

namespace pi = placement_internal;

std::size_t Idx(int i) {
  return static_cast<std::size_t>(i);
}

// Calls f(subset) for every k-subset of `items` (ascending), in lexicographic order.
template <typename F>
void ForEachSubset(const std::vector<int>& items, int k, F&& f) {
  const int m = static_cast<int>(items.size());
  if (k < 0 || k > m) return;
  std::vector<int> pos(Idx(k));
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<int> subset(Idx(k));
  while (true) {
    for (int i = 0; i < k; ++i) subset[Idx(i)] = items[Idx(pos[Idx(i)])];
    f(subset);
    int i = k - 1;
    while (i >= 0 && pos[Idx(i)] == m - k + i) --i;
    if (i < 0) return;
    ++pos[Idx(i)];
    for (int j = i + 1; j < k; ++j) pos[Idx(j)] = pos[Idx(j - 1)] + 1;
  }
}

struct Candidate {
  PlacementCost cost;
  int extra = 0;
  std::vector<int> gpus, nics, nic_of_gpu;
  bool operator<(const Candidate& o) const {
    return std::tie(cost, extra, gpus, nics, nic_of_gpu) <
           std::tie(o.cost, o.extra, o.gpus, o.nics, o.nic_of_gpu);
  }
};

int Capacity(int g, int n) {
  return n == 0 ? 0 : (n >= g ? 1 : (g + n - 1) / n);
}

// Every assignment of gpus[idx..] to `nics` within the capacity (and the bound when `allowed`
// says so); `visit` receives the complete assignment and the loads.
template <typename Allowed, typename Visit>
void ForEachAssignment(const std::vector<int>& gpus, const std::vector<int>& nics, int cap, Allowed&& allowed,
                       Visit&& visit, std::vector<int>& assignment, std::vector<int>& load,
                       std::size_t idx = 0) {
  if (idx == gpus.size()) {
    visit(assignment, load);
    return;
  }
  for (std::size_t j = 0; j < nics.size(); ++j) {
    if (load[j] >= cap || !allowed(gpus[idx], nics[j])) continue;
    ++load[j];
    assignment[idx] = nics[j];
    ForEachAssignment(gpus, nics, cap, allowed, visit, assignment, load, idx + 1);
    --load[j];
  }
}

PlacementOutcome BruteWhole(const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r,
                            bool bounded);

// The least worst GPU->NIC rank of any choice on the node with nothing allocated: the smallest
// limit under which some GPU subset, NIC subset and assignment use only ranks within it.
int BruteMinWorst(const NodeTopology& t, const PlacementRequest& r) {
  const int g = r.gpus, n = r.rdma_nics, cap = Capacity(g, n);
  std::vector<int> nics(Idx(t.RdmaNicCount()));
  std::iota(nics.begin(), nics.end(), 0);
  for (int limit = 1; limit <= 6; ++limit) {
    auto within = [&](int gpu, int nic) { return pi::GpuNicRank(t, gpu, nic) <= limit; };
    std::vector<int> usable;
    for (std::size_t i = 0; i < t.gpus.size(); ++i) {
      const int gpu = static_cast<int>(i);
      if (t.gpus[i].vendor == r.vendor &&
          std::any_of(nics.begin(), nics.end(), [&](int nic) { return within(gpu, nic); })) {
        usable.push_back(gpu);
      }
    }
    bool feasible = false;
    ForEachSubset(usable, g, [&](const std::vector<int>& s) {
      if (feasible) return;
      ForEachSubset(nics, n, [&](const std::vector<int>& ns) {
        if (feasible) return;
        std::vector<int> assignment(s.size()), load(ns.size(), 0);
        ForEachAssignment(
            s, ns, cap, within,
            [&](const std::vector<int>&, const std::vector<int>& loads) {
              if (n > g || std::none_of(loads.begin(), loads.end(), [](int l) { return l == 0; }))
                feasible = true;
            },
            assignment, load);
      });
    });
    if (feasible) return limit;
  }
  return 0;
}

PlacementOutcome BruteWhole(const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r,
                            bool bounded) {
  if (auto failure = pi::WholeCountFailure(t, a, r)) return *failure;
  const pi::SwitchGroups groups = pi::ComputeSwitchGroups(t, a);
  const int g = r.gpus, n = r.rdma_nics, cap = Capacity(g, n);
  const int sign = pi::WholePackSign(r);
  std::vector<int> free_gpus, free_nics;
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    if (t.gpus[i].vendor == r.vendor && GpuFree(a, static_cast<int>(i)))
      free_gpus.push_back(static_cast<int>(i));
  }
  for (int j = 0; j < t.RdmaNicCount(); ++j) {
    if (RdmaNicFree(t, a, j)) free_nics.push_back(j);
  }
  auto allowed = [&](int gpu, int nic) {
    return !bounded || !r.max_gpu_nic_class || pi::GpuNicClass(t, gpu, nic) <= *r.max_gpu_nic_class;
  };

  std::optional<Candidate> best;
  auto consider = [&](Candidate&& c) {
    if (!best || c < *best) best = std::move(c);
  };
  ForEachSubset(free_gpus, g, [&](const std::vector<int>& s) {
    int worst_gg = 0, nvlinks = 0;
    for (std::size_t x = 0; x < s.size(); ++x) {
      for (std::size_t y = x + 1; y < s.size(); ++y) {
        worst_gg = std::max(worst_gg, pi::GpuGpuRank(t, s[x], s[y]));
        nvlinks += pi::NvlinkCount(t, s[x], s[y]);
      }
    }
    ForEachSubset(free_nics, n, [&](const std::vector<int>& ns) {
      std::vector<bool> touched(groups.intact_before.size(), false);
      for (int gpu : s) {
        if (groups.of_gpu[Idx(gpu)] >= 0) touched[Idx(groups.of_gpu[Idx(gpu)])] = true;
      }
      for (int nic : ns) {
        if (groups.of_nic[Idx(nic)] >= 0) touched[Idx(groups.of_nic[Idx(nic)])] = true;
      }
      int intact_after = 0, newly = 0;
      for (std::size_t k = 0; k < touched.size(); ++k) {
        if (!groups.intact_before[k]) continue;
        if (touched[k]) {
          ++newly;
        } else {
          ++intact_after;
        }
      }
      Candidate base;
      base.cost.worst_gpu_gpu = worst_gg;
      base.cost.neg_nvlinks = -nvlinks;
      base.cost.neg_intact_groups = -intact_after;
      base.cost.pack = sign * newly;
      base.gpus = s;
      base.nics = ns;
      if (g == 0 || n == 0) {
        consider(std::move(base));
        return;
      }
      std::vector<int> assignment(s.size()), load(ns.size(), 0);
      ForEachAssignment(
          s, ns, cap, allowed,
          [&](const std::vector<int>& nic_of_gpu, const std::vector<int>& loads) {
            if (n <= g && std::any_of(loads.begin(), loads.end(), [](int l) { return l == 0; })) return;
            Candidate c = base;
            for (std::size_t i = 0; i < s.size(); ++i) {
              const int rank = pi::GpuNicRank(t, s[i], nic_of_gpu[i]);
              c.cost.worst_gpu_nic = std::max(c.cost.worst_gpu_nic, rank);
              c.cost.sum_gpu_nic += rank;
            }
            for (std::size_t j = 0; j < ns.size(); ++j) {
              if (loads[j] != 0) continue;
              int nearest = 100;
              for (int gpu : s) nearest = std::min(nearest, pi::GpuNicRank(t, gpu, ns[j]));
              c.extra += nearest;
            }
            c.nic_of_gpu = nic_of_gpu;
            consider(std::move(c));
          },
          assignment, load);
    });
  });

  if (!best) {
    const PlacementOutcome unbounded = BruteWhole(t, a, r, /*bounded=*/false);
    if (!unbounded.ok()) return unbounded;
    return pi::AlignmentFailure(t, r, *unbounded.placement);
  }
  const int best_possible_worst = g > 0 && n > 0 ? BruteMinWorst(t, r) : 0;
  pi::WholeChoice choice{best->gpus, best->nics, best->nic_of_gpu, best->cost};
  PlacementOutcome out;
  out.placement = pi::DescribeWhole(t, groups, choice, best_possible_worst);
  return out;
}

PlacementOutcome BruteShared(const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r,
                             const EngineOptions& o, const SharePacking& share_packing) {
  const pi::SwitchGroups groups = pi::ComputeSwitchGroups(t, a);
  const PackPolicy policy = pi::SharedPolicy(r, o);
  const pi::ShareFragmentation frag(t, a, r, share_packing);
  std::vector<int> eligible;
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    if (pi::JudgeSharedGpu(t, a, r, o, static_cast<int>(i)) == pi::ShareVerdict::kFits) {
      eligible.push_back(static_cast<int>(i));
    }
  }
  std::optional<std::vector<pi::ShareKey>> best;
  ForEachSubset(eligible, r.shared.count, [&](const std::vector<int>& s) {
    if (r.shared.numa_bind) {
      const int numa = t.gpus[Idx(s.front())].numa;
      if (std::any_of(s.begin(), s.end(), [&](int gpu) { return t.gpus[Idx(gpu)].numa != numa; })) return;
    }
    std::vector<pi::ShareKey> keys;
    for (int gpu : s) keys.push_back(pi::SharedKey(t, a, groups, r, o, policy, frag, gpu));
    std::sort(keys.begin(), keys.end());
    if (!best || keys < *best) best = std::move(keys);
  });
  if (!best) return pi::SharedFailure(t, a, r, o);
  std::vector<int> gpus;
  for (const pi::ShareKey& k : *best) gpus.push_back(k.gpu);
  PlacementOutcome out;
  out.placement = pi::DescribeShared(t, a, groups, r, o, std::move(gpus), &frag);
  return out;
}

}  // namespace

PlacementOutcome PlaceByBruteForce(const NodeTopology& topology, const NodeAllocation& allocated,
                                   const PlacementRequest& request, const EngineOptions& options,
                                   SharePacking share_packing) {
  if (request.IsShared()) return BruteShared(topology, allocated, request, options, share_packing);
  return BruteWhole(topology, allocated, request, /*bounded=*/true);
}

}  // namespace toposched
