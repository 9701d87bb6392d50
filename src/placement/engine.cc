// The placement engine: exact GPU+NIC choice on one node.
//
// What it computes (free devices, switch groups, the cost and its tie-breaks, alignment bounds,
// failures, shared requests) and how it searches are specified once, in docs/placement.md
// ("The engine", the SEMANTICS block); the brute-force reference (brute_force.cc) implements
// the same definitions from scratch and the PlacementEngine*EqualsBruteForce* tests hold the
// two equal.
//
// This file is the entry point, PlaceOnNode: whole requests go to WholeSearch (whole_search.h,
// whole_search.cc, whole_search_first.cc), shared requests are ranked by their ShareKey here.
#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <climits>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine_internal.h"
#include "toposched/placement/placement.h"
#include "whole_search.h"

namespace toposched {

namespace {

using placement_internal::SwitchGroups;
using placement_internal::WholeChoice;
using whole_search::Idx;
using whole_search::WholeSearch;

PlacementOutcome PlaceWhole(const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r) {
  if (auto failure = placement_internal::WholeCountFailure(t, a, r)) return *failure;
  const SwitchGroups groups = placement_internal::ComputeSwitchGroups(t, a);
  WholeSearch search(t, a, groups, r, /*bounded=*/true);
  std::optional<WholeChoice> choice = search.Solve();
  if (!choice) {
    PlacementRequest unbounded = r;
    unbounded.max_gpu_nic_class.reset();
    const PlacementOutcome best = PlaceWhole(t, a, unbounded);
    if (!best.ok()) return best;  // unreachable: without the bound free devices always fit
    return placement_internal::AlignmentFailure(t, r, *best.placement);
  }
  int best_possible_worst = 0;
  if (r.gpus > 0 && r.rdma_nics > 0) {
    const NodeAllocation empty;
    const SwitchGroups empty_groups = placement_internal::ComputeSwitchGroups(t, empty);
    WholeSearch on_empty(t, empty, empty_groups, r, /*bounded=*/false);
    best_possible_worst = on_empty.MinWorst();
  }
  PlacementOutcome out;
  out.placement = placement_internal::DescribeWhole(t, groups, *choice, best_possible_worst);
  return out;
}

PlacementOutcome PlaceShared(const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r,
                             const EngineOptions& o, const SharePacking& share_packing) {
  const SwitchGroups groups = placement_internal::ComputeSwitchGroups(t, a);
  const PackPolicy policy = placement_internal::SharedPolicy(r, o);
  const placement_internal::ShareFragmentation frag(t, a, r, share_packing);
  std::vector<placement_internal::ShareKey> keys;
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    const int gpu = static_cast<int>(i);
    if (placement_internal::JudgeSharedGpu(t, a, r, o, gpu) == placement_internal::ShareVerdict::kFits) {
      keys.push_back(placement_internal::SharedKey(t, a, groups, r, o, policy, frag, gpu));
    }
  }
  std::sort(keys.begin(), keys.end());
  const std::size_t c = Idx(r.shared.count);
  std::vector<placement_internal::ShareKey> chosen;
  if (!r.shared.numa_bind) {
    if (keys.size() >= c) chosen.assign(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(c));
  } else {
    // Each NUMA node's first c keys; the smallest such sequence wins.
    std::vector<int> numas;
    for (const auto& k : keys) numas.push_back(t.gpus[Idx(k.gpu)].numa);
    std::sort(numas.begin(), numas.end());
    numas.erase(std::unique(numas.begin(), numas.end()), numas.end());
    for (int numa : numas) {
      std::vector<placement_internal::ShareKey> mine;
      for (const auto& k : keys) {
        if (t.gpus[Idx(k.gpu)].numa == numa && mine.size() < c) mine.push_back(k);
      }
      if (mine.size() == c && (chosen.empty() || mine < chosen)) chosen = std::move(mine);
    }
  }
  if (chosen.size() != c || c == 0) return placement_internal::SharedFailure(t, a, r, o);
  std::vector<int> gpus;
  for (const auto& k : chosen) gpus.push_back(k.gpu);
  PlacementOutcome out;
  out.placement = placement_internal::DescribeShared(t, a, groups, r, o, std::move(gpus), &frag);
  return out;
}

}  // namespace

PlacementOutcome PlaceOnNode(const NodeTopology& topology, const NodeAllocation& allocated,
                             const PlacementRequest& request, const EngineOptions& options,
                             SharePacking share_packing) {
  if (request.IsShared()) return PlaceShared(topology, allocated, request, options, share_packing);
  return PlaceWhole(topology, allocated, request);
}

}  // namespace toposched
