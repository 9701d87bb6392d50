// KvTransferCost's cost model: the mean expected KV-transfer time from a node to the pool's
// anchors (MeanSeconds), the score on the log scale between the cycle's bounds with the spread
// penalty and its explanation (ScoreAt, LogScore), and the config's absolute bounds (Bounds).
// The pool data it reads and the caches around it are kv_transfer_cost.cc's.

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/plugin_util.h"
#include "common/pool_util.h"
#include "kv_transfer_cost/kv_transfer_cost.h"
#include "kv_transfer_cost/kv_transfer_cost_internal.h"

namespace toposched::plugins::kv_transfer_cost {

using framework::kMaxScore;

double MeanSeconds(const pd::NetworkConfig& net, CyclePoolView& cycle, std::size_t own_site,
                   const std::vector<int>& ids, const pd::Endpoint& own, PodRole role, bool kv_ipc,
                   std::array<int, pd::kPathKinds>* per_kind) {
  const PoolSites& pool = *cycle.pool;
  // Instances per (path kind, endpoint), then one estimate per pair that occurs.
  const std::size_t endpoints = pool.endpoints.size();
  // The thread's buffers (a scale pass computes hundreds of means): assign keeps their arrays.
  thread_local std::vector<int> count, near;
  count.assign(pd::kPathKinds * endpoints, 0);
  near.assign(endpoints, 0);  // instances counted on a path other than beyond
  if (++cycle.generation == 0) {
    std::fill(cycle.mark.begin(), cycle.mark.end(), 0);
    cycle.generation = 1;
  }
  const auto add = [&](std::size_t i, pd::PathKind path) {
    if (cycle.mark[i] == cycle.generation) return;
    cycle.mark[i] = cycle.generation;
    for (const SiteEndpoint& s : pool.sites[i].endpoints) {
      // CUDA IPC between two pods needs both to allow it; otherwise RDMA loopback.
      const auto kind = static_cast<std::size_t>(
          path == pd::PathKind::kSameNodeIpc && !s.ipc ? pd::PathKind::kSameNodeRdma : path);
      count[kind * endpoints + s.endpoint] += s.count;
      near[s.endpoint] += s.count;
      if (per_kind != nullptr) (*per_kind)[kind] += s.count;
    }
  };
  if (own_site != kNoSite) {
    add(own_site, net.same_node_ipc && kv_ipc ? pd::PathKind::kSameNodeIpc : pd::PathKind::kSameNodeRdma);
  }
  const SiteLayout& layout = *pool.layout;
  for (std::size_t t = 0; t < ids.size() && t < layout.sites_in.size(); ++t) {
    if (ids[t] < 0) continue;
    for (std::size_t i : layout.sites_in[t][static_cast<std::size_t>(ids[t])]) add(i, net.tiers[t].path);
  }
  const auto beyond = static_cast<std::size_t>(pd::PathKind::kBeyond);
  for (std::size_t e = 0; e < endpoints; ++e) {
    const int n = pool.total_by_endpoint[e] - near[e];
    count[beyond * endpoints + e] += n;
    if (per_kind != nullptr) (*per_kind)[beyond] += n;
  }
  double total = 0;
  for (std::size_t k = 0; k < pd::kPathKinds; ++k) {
    for (std::size_t e = 0; e < endpoints; ++e) {
      const int n = count[k * endpoints + e];
      if (n == 0) continue;
      const auto kind = static_cast<pd::PathKind>(k);
      // Prefill always sends: (prefill end, decode end).
      const pd::PathEstimate est = role == PodRole::kPrefill
                                       ? pd::Estimate(net, kind, own, pool.endpoints[e])
                                       : pd::Estimate(net, kind, pool.endpoints[e], own);
      total += n * pd::TransferSeconds(est, cycle.bytes);
    }
  }
  return total / std::max(1, pool.anchors);
}

framework::ScoreResult ScoreAt(const Args& args, framework::CycleState& state,
                               const framework::NodeInfo& node, CyclePoolView* cycle,
                               const pd::Location& location, const framework::NodeSummary* summary) {
  const PlacementRequest& req = state.request();
  const pd::NetworkConfig& net = state.cluster()->network();
  if (cycle->pool->anchor == AnchorKind::kGang) {
    const bool inside = cycle->pool->gang_domain.empty()
                            ? node.name == cycle->pool->gang_node
                            : DomainAt(location, *cycle->pool->gang_tier) == cycle->pool->gang_domain;
    if (inside) {
      return {kMaxScore, state.explain()
                             ? cycle->prefix + cycle->pool->anchor_text + ": this node is inside it -> 100"
                             : ""};
    }
  }

  const PlacementOutcome& outcome = state.Outcome(node);
  const pd::Endpoint own{req.IsShared() ? req.shared.count : req.gpus, std::max(0, req.rdma_nics),
                         outcome.placement ? outcome.placement->worst_class : LinkClass::kPIX, 0};
  std::array<int, pd::kPathKinds> per_kind{};
  const double mean = CachedMean(net, *cycle, location, own, req.role, req.kv_ipc, &per_kind, summary);
  const int base = LogScore(mean, cycle->bounds.best_seconds, cycle->bounds.worst_seconds);

  int score = base, penalty = 0, here = 0;
  const std::string* domain = cycle->spread_tier ? &DomainAt(location, *cycle->spread_tier) : nullptr;
  const bool by_domain = domain != nullptr && !domain->empty();
  if (args.spread_points > 0 && cycle->pool->same_total > 0) {
    if (by_domain) {
      const auto it = cycle->pool->same_by_domain.find(std::string_view(*domain));
      here = it == cycle->pool->same_by_domain.end() ? 0 : it->second;
    } else {
      const std::string_view name(node.name);
      const auto it = std::lower_bound(
          cycle->pool->same_by_node.begin(), cycle->pool->same_by_node.end(), name,
          [](const auto& entry, std::string_view n) { return std::string_view(entry.first) < n; });
      here = it == cycle->pool->same_by_node.end() || it->first != name ? 0 : it->second;
    }
    if (here > 0) {
      penalty = RoundScore(static_cast<double>(args.spread_points) * here / cycle->pool->same_total);
      score = std::max(framework::kMinScore, base - penalty);
    }
  }
  if (!state.explain()) return {score, {}};

  std::string paths;
  for (std::size_t k = 0; k < pd::kPathKinds; ++k) {
    if (per_kind[k] == 0) continue;
    paths += (paths.empty() ? "" : ", ") + std::to_string(per_kind[k]) + " " +
             std::string(pd::ToString(static_cast<pd::PathKind>(k)));
  }
  std::string why = cycle->prefix + cycle->pool->anchor_text;
  why += cycle->pool->anchor == AnchorKind::kGang
             ? ", via its node " + cycle->pool->gang_node + ": expected KV transfer "
             : ", expected KV transfer ";
  why += FormatSeconds(mean) + " for " + cycle->bytes_text + " (" + paths + "); " + cycle->bounds_text +
         " -> " + std::to_string(base);
  if (here > 0) {
    why += "; spread -" + std::to_string(penalty) + " (" + std::to_string(here) + " of " +
           std::to_string(cycle->pool->same_total) + " " + std::string(ToString(req.role)) + " " +
           (by_domain ? "in " + cycle->spread_label + "=" + *domain : std::string("on this node")) + ") -> " +
           std::to_string(score);
  }
  return {score, std::move(why)};
}

int LogScore(double cost_seconds, double best_seconds, double worst_seconds) {
  if (!(worst_seconds > best_seconds) || !(best_seconds > 0)) return kMaxScore;
  if (!(cost_seconds > best_seconds)) return kMaxScore;
  const double x = 100.0 * (std::log(worst_seconds) - std::log(cost_seconds)) /
                   (std::log(worst_seconds) - std::log(best_seconds));
  return std::clamp(RoundScore(x), framework::kMinScore, kMaxScore);
}

CostBounds Bounds(const pd::NetworkConfig& network, const pd::Endpoint& own, bool kv_ipc, double bytes) {
  pd::Endpoint aligned = own;
  aligned.worst_class = LinkClass::kPIX;
  pd::Endpoint sys = own;
  sys.worst_class = LinkClass::kSYS;
  // Every path two nodes can take under this config: the same node, each tier's, beyond them all.
  std::vector<pd::PathKind> kinds = {
      network.same_node_ipc && kv_ipc ? pd::PathKind::kSameNodeIpc : pd::PathKind::kSameNodeRdma,
      pd::PathKind::kBeyond};
  for (const pd::Tier& tier : network.tiers) kinds.push_back(tier.path);
  CostBounds bounds{std::numeric_limits<double>::infinity(), 0};
  for (pd::PathKind kind : kinds) {
    bounds.best_seconds = std::min(bounds.best_seconds,
                                   pd::TransferSeconds(pd::Estimate(network, kind, aligned, aligned), bytes));
    bounds.worst_seconds =
        std::max(bounds.worst_seconds, pd::TransferSeconds(pd::Estimate(network, kind, sys, sys), bytes));
  }
  return bounds;
}

}  // namespace toposched::plugins::kv_transfer_cost
