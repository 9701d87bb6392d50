// KvTransferCost's pool data and its caches: the pool's sites (where the anchors stand, laid out
// and counted: PoolSites, SiteLayout), the cycle's view of them (CyclePoolView: BuildCycle), the
// means kept per layout and pod shape (MeanCache: CachedMean, MeansFor), the sites kept across
// cycles (SitesCache), the cycle's scale (AvailableBounds), and the plugin's Score and args. The
// cost model itself is kv_transfer_cost_model.cc's.

#include "kv_transfer_cost/kv_transfer_cost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/plugin_util.h"
#include "common/pool_util.h"
#include "kv_transfer_cost/kv_transfer_cost_internal.h"
#include "toposched/common/flat_hash_index.h"
#include "toposched/common/hash.h"
#include "toposched/framework/cluster_view.h"

namespace toposched::plugins::kv_transfer_cost {
namespace {

using framework::kMaxScore;
using framework::PoolMember;

bool IsCounterpart(PodRole own, PodRole member) {
  if (member == PodRole::kBoth) return true;
  return (own == PodRole::kPrefill && member == PodRole::kDecode) ||
         (own == PodRole::kDecode && member == PodRole::kPrefill);
}

PodRole Opposite(PodRole r) {
  return r == PodRole::kPrefill ? PodRole::kDecode : PodRole::kPrefill;
}

bool SameEndpoint(const pd::Endpoint& a, const pd::Endpoint& b) {
  return a.gpus == b.gpus && a.rdma_nics == b.rdma_nics && a.worst_class == b.worst_class &&
         a.nic_gbps == b.nic_gbps;
}

std::string Instances(int n, std::string_view role) {
  return std::to_string(n) + " " + std::string(role) + (n == 1 ? " instance" : " instances");
}

// Numbers the sites' domains per tier (SiteLayout); call once the locations are known.
void LayOut(std::size_t tiers, SiteLayout& layout) {
  const std::size_t n = layout.locations.size();
  layout.domain_ids.assign(tiers, {});
  for (auto& ids : layout.domain_ids) ids.reserve(n);
  layout.ids.assign(n, std::vector<int>(tiers, -1));
  for (std::size_t i = 0; i < n; ++i) {
    const pd::Location& location = layout.locations[i];
    for (std::size_t t = 0; t < tiers && t < location.domains.size(); ++t) {
      const std::string& d = location.domains[t];
      if (d.empty()) continue;
      auto& ids = layout.domain_ids[t];
      layout.ids[i][t] = ids.try_emplace(std::string_view(d), static_cast<int>(ids.size())).first->second;
    }
  }
  layout.ids_by_hash.assign(tiers, {});
  for (std::size_t t = 0; t < tiers; ++t) {
    for (const auto& [domain, id] : layout.domain_ids[t]) {
      if (!layout.ids_by_hash[t].Insert(framework::PositionHash(domain), id)) layout.hashes_usable = false;
    }
  }
  layout.sites_in.assign(tiers, {});
  for (std::size_t t = 0; t < tiers; ++t) layout.sites_in[t].resize(layout.domain_ids[t].size());
  layout.nesting.assign(tiers, {});
  for (std::size_t t = 0; t < tiers; ++t) layout.nesting[t].resize(layout.domain_ids[t].size());
  for (std::size_t i = 0; i < n; ++i) {
    const pd::Location& location = layout.locations[i];
    layout.site_at.emplace(location.node, i);
    layout.site_name_hashes.Insert(framework::PositionHash(location.node), true);
    for (std::size_t t = 0; t < tiers; ++t) {
      if (layout.ids[i][t] < 0) continue;
      std::vector<std::size_t>& there = layout.sites_in[t][static_cast<std::size_t>(layout.ids[i][t])];
      there.push_back(i);
      if (t + 1 == tiers) continue;  // the top tier nests in nothing
      // Nested while every site of the domain has one and the same tier t + 1 domain.
      SiteLayout::Nesting& d = layout.nesting[t][static_cast<std::size_t>(layout.ids[i][t])];
      const bool has_parent = t + 1 < location.domains.size() && !location.domains[t + 1].empty();
      const std::uint64_t parent = has_parent ? framework::PositionHash(location.domains[t + 1]) : 0;
      if (there.size() == 1) d.parent = parent;
      if (!has_parent || d.parent != parent) d.nested = false;
    }
  }
}

// What the sites hold (PoolSites: totals per endpoint, each site's and each domain's content);
// call once the sites' instances are counted.
void CountSites(std::size_t tiers, PoolSites& out) {
  const SiteLayout& layout = *out.layout;
  out.total_by_endpoint.assign(out.endpoints.size(), 0);
  out.content.assign(tiers, {});
  for (std::size_t t = 0; t < tiers; ++t) out.content[t].assign(layout.domain_ids[t].size(), 0);
  out.site_content.assign(out.sites.size(), 0);
  for (std::size_t i = 0; i < out.sites.size(); ++i) {
    std::uint64_t h = 0;
    for (const SiteEndpoint& e : out.sites[i].endpoints) {
      out.total_by_endpoint[e.endpoint] += e.count;
      // Offset: splitmix64's finalizer maps 0 to 0, and endpoint 0 without IPC must count.
      const std::uint64_t instance =
          ((static_cast<std::uint64_t>(e.endpoint) << 1) | (e.ipc ? 1 : 0)) + 0x9e3779b97f4a7c15ull;
      h += static_cast<std::uint64_t>(e.count) * Mix64(instance);
    }
    out.site_content[i] = h;
    for (std::size_t t = 0; t < tiers; ++t) {
      if (layout.ids[i][t] >= 0) out.content[t][static_cast<std::size_t>(layout.ids[i][t])] += h;
    }
  }
}

// DomainIdsOf from the node's domain hashes (NodeSummary::domain_hashes), without reading its
// location (a pass over thousands of nodes would wait on memory for each): the same numbers,
// unless a node's domain shares a 64-bit hash with a site's, which could at worst mis-score it
// (as the store's class keys could), never place a pod where it does not fit.
void DomainIdsOfHashed(const SiteLayout& layout, const std::uint64_t* hashes, std::vector<int>& out) {
  out.assign(layout.domain_ids.size(), -1);
  for (std::size_t t = 0; t < out.size(); ++t) {
    if (const int* id = layout.ids_by_hash[t].Find(hashes[t]); id != nullptr) out[t] = *id;
  }
}

// `location`'s domain numbers into `out` (size: tiers).
void DomainIdsOf(const SiteLayout& layout, const pd::Location& location, std::vector<int>& out) {
  out.assign(layout.domain_ids.size(), -1);
  for (std::size_t t = 0; t < out.size() && t < location.domains.size(); ++t) {
    const std::string& d = location.domains[t];
    if (d.empty()) continue;
    if (const auto it = layout.domain_ids[t].find(std::string_view(d)); it != layout.domain_ids[t].end())
      out[t] = it->second;
  }
}

std::size_t AddEndpoint(std::vector<pd::Endpoint>& endpoints, const pd::Endpoint& e) {
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    if (SameEndpoint(endpoints[i], e)) return i;
  }
  endpoints.push_back(e);
  return endpoints.size() - 1;
}

// The sites of `members` (PoolSites): laid out by node name, in `previous` when it holds the
// same nodes (its positions being the cycle's), counted.
void AddSites(const framework::ClusterView& cluster, const std::vector<const PoolMember*>& members,
              const std::shared_ptr<const SiteLayout>& previous, PoolSites& out) {
  const std::size_t tiers = cluster.network().tiers.size();
  std::vector<std::string_view> nodes;
  nodes.reserve(members.size());
  for (const PoolMember* m : members) nodes.push_back(m->node);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  const bool same = previous != nullptr && previous->locations.size() == nodes.size() &&
                    std::equal(nodes.begin(), nodes.end(), previous->locations.begin(),
                               [](std::string_view n, const pd::Location& l) { return n == l.node; });
  if (same) {
    out.layout = previous;
  } else {
    auto layout = std::make_shared<SiteLayout>();
    layout->locations.reserve(nodes.size());
    for (std::string_view n : nodes) {
      layout->locations.push_back(cluster.Locate(n));
      layout->locations.back().node = std::string(n);  // the key the sites are found by
    }
    LayOut(tiers, *layout);
    out.layout = std::move(layout);
  }
  out.sites.assign(nodes.size(), {});
  for (const PoolMember* m : members) {
    const std::size_t site = out.layout->site_at.find(std::string_view(m->node))->second;
    // A member recorded without GPUs still holds one instance's KV cache: count one lane.
    const std::size_t e = AddEndpoint(
        out.endpoints, pd::Endpoint{std::max(1, m->gpus), std::max(0, m->rdma_nics), m->worst_class, 0});
    std::vector<SiteEndpoint>& at = out.sites[site].endpoints;
    const auto found = std::find_if(
        at.begin(), at.end(), [&](const SiteEndpoint& s) { return s.endpoint == e && s.ipc == m->kv_ipc; });
    if (found == at.end()) {
      at.push_back(SiteEndpoint{e, m->kv_ipc, 1});
    } else {
      ++found->count;
    }
  }
  out.anchors = static_cast<int>(members.size());
  CountSites(tiers, out);
}

// The gang anchor: the domain at `tier` with the most free GPUs of the pod's vendor over
// schedulable nodes. A node without a label for the tier is a domain of its own. False when no
// node is schedulable.
bool ChooseGangAnchor(const framework::ClusterView& cluster, const std::string& pool, GpuVendor vendor,
                      const std::optional<std::size_t>& tier, PoolSites& out) {
  struct Domain {
    long long free = 0;
    std::string first_node;
    pd::Location location;
  };
  // Keyed by (unlabelled, name): a label value and a node name never collide.
  std::map<std::pair<bool, std::string>, Domain> domains;
  cluster.ForEachNode([&](const framework::NodeSummary& n) {
    if (!n.schedulable) return;
    const std::string& label_value = tier ? DomainAt(*n.location, *tier) : std::string();
    const bool unlabelled = label_value.empty();
    auto [it, inserted] = domains.try_emplace({unlabelled, unlabelled ? std::string(n.name) : label_value});
    if (inserted) {
      it->second.first_node = std::string(n.name);
      it->second.location = *n.location;
    }
    it->second.free += std::max(0, n.FreeGpusFor(vendor));  // GPUs the pool's pods could use
  });
  const std::pair<const std::pair<bool, std::string>, Domain>* best = nullptr;
  std::uint64_t best_hash = 0;
  for (const auto& entry : domains) {
    const std::uint64_t h = StableHash(pool, entry.first.second);
    if (best == nullptr || entry.second.free > best->second.free ||
        (entry.second.free == best->second.free && h < best_hash)) {
      best = &entry;
      best_hash = h;
    }
  }
  if (best == nullptr) return false;
  out.anchor = AnchorKind::kGang;
  out.gang_tier = tier;
  out.gang_domain = best->first.first ? std::string() : best->first.second;
  out.gang_node = best->second.first_node;
  const std::string where = out.gang_domain.empty()
                                ? "node " + out.gang_node
                                : cluster.network().tiers[*tier].label + "=" + out.gang_domain;
  out.anchor_text =
      "no instances yet; gang anchor " + where + " (" + std::to_string(best->second.free) + " free GPUs)";
  return true;
}

}  // namespace

double CachedMean(const pd::NetworkConfig& net, CyclePoolView& cycle, const pd::Location& location,
                  const pd::Endpoint& own, PodRole role, bool kv_ipc,
                  std::array<int, pd::kPathKinds>* per_kind, const framework::NodeSummary* summary) {
  const PoolSites& pool = *cycle.pool;
  const SiteLayout& layout = *pool.layout;
  const bool hashed = summary != nullptr && summary->domain_hashes != nullptr && layout.hashes_usable;
  // Whether the node holds a site: the hashes rule most nodes out without reading the location.
  bool site = true;
  if (hashed) {
    DomainIdsOfHashed(layout, summary->domain_hashes, cycle.key);
    site = layout.site_name_hashes.Find(summary->name_hash) != nullptr;
  } else {
    DomainIdsOf(layout, location, cycle.key);
  }
  std::size_t own_site = kNoSite;
  if (site) {
    if (const auto at = layout.site_at.find(std::string_view(location.node)); at != layout.site_at.end())
      own_site = at->second;
  }
  // By content (PoolSites::content), when the node's domains nest; the hashes give its tier
  // t + 1 domain to check that against.
  if (hashed) {
    const std::size_t tiers = cycle.key.size();
    std::uint64_t k = Mix64(static_cast<std::uint64_t>(own.worst_class) + 1);
    if (own_site != kNoSite) k = Mix64(k ^ pool.site_content[own_site] ^ 0x5bd1e995ull);
    bool nested = true;
    for (std::size_t t = 0; t < tiers && nested; ++t) {
      std::uint64_t h = 0;
      if (cycle.key[t] >= 0) {
        const auto d = static_cast<std::size_t>(cycle.key[t]);
        const SiteLayout::Nesting& nesting = layout.nesting[t][d];
        nested = nesting.nested && (t + 1 == tiers || nesting.parent == summary->domain_hashes[t + 1]);
        h = pool.content[t][d];
      }
      k = Mix64(k ^ h ^ (t + 1));
    }
    if (nested) {
      if (const std::size_t* at = cycle.means->by_content.Find(k); at != nullptr) {
        if (per_kind != nullptr) *per_kind = cycle.means->means[*at].per_kind;
        return cycle.means->means[*at].seconds;
      }
      MeanCache::Mean m;
      m.seconds = MeanSeconds(net, cycle, own_site, cycle.key, own, role, kv_ipc, &m.per_kind);
      cycle.means->by_content.Insert(k, cycle.means->means.size());
      cycle.means->means.push_back(std::move(m));  // no `key`: never matched by by_ids
      if (per_kind != nullptr) *per_kind = cycle.means->means.back().per_kind;
      return cycle.means->means.back().seconds;
    }
  }
  if (own_site != kNoSite) return MeanSeconds(net, cycle, own_site, cycle.key, own, role, kv_ipc, per_kind);
  cycle.key.push_back(static_cast<int>(own.worst_class));
  std::uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int id : cycle.key) h = HashMix(h, static_cast<std::uint32_t>(id));
  h ^= h >> 29;
  // Keys that share a hash are told apart by probing on with a derived one.
  const MeanCache::Mean* found;
  for (std::uint64_t probe = h;; probe = probe * 0x9e3779b97f4a7c15ull + 1) {
    const std::size_t* at = cycle.means->by_ids.Find(probe);
    if (at == nullptr) {
      MeanCache::Mean m;
      m.key = cycle.key;
      m.key.pop_back();
      m.seconds = MeanSeconds(net, cycle, kNoSite, m.key, own, role, kv_ipc, &m.per_kind);
      m.key = cycle.key;
      cycle.means->by_ids.Insert(probe, cycle.means->means.size());
      cycle.means->means.push_back(std::move(m));
      found = &cycle.means->means.back();
      break;
    }
    if (cycle.means->means[*at].key == cycle.key) {
      found = &cycle.means->means[*at];
      break;
    }
  }
  if (per_kind != nullptr) *per_kind = found->per_kind;
  return found->seconds;
}

namespace {

// The score's scale for this cycle, like kube-scheduler's NormalizeScore: from the cheapest
// expected transfer any node that could host the pod offers now (an aligned instance there) to
// the costliest, but at least kMinScaleFactor times the cheapest, so that a few percent between
// two leaves does not outweigh GPU-NIC alignment. A node can host the pod when it is
// schedulable and has the GPUs (whole requests) and RDMA NICs free. No such node: the absolute
// bounds of the config's path kinds.
constexpr double kMinScaleFactor = 2.0;

// Whether `n` holds a site of the pool (the name hash first: most nodes are told apart by it).
bool IsSite(const PoolSites& pool, const framework::NodeSummary& n) {
  const SiteLayout& layout = *pool.layout;
  const bool hashed = n.domain_hashes != nullptr && layout.hashes_usable;
  return (!hashed || layout.site_name_hashes.Find(n.name_hash) != nullptr) && layout.site_at.contains(n.name);
}

// AvailableBounds by a pass: the sites by name, then every position.
template <class Hosts, class Offer>
void PassBounds(const framework::ClusterView& cluster, const PlacementRequest& req, const pd::Endpoint& own,
                CyclePoolView& cycle, const Hosts& hosts, const Offer& offer) {
  const pd::NetworkConfig& net = cluster.network();
  const PoolSites& pool = *cycle.pool;
  // A site (a node that holds pool pods) has a mean of its own: the sites first, by name.
  for (const pd::Location& site : pool.layout->locations) {
    cluster.WithNode(site.node, [&](const framework::NodeSummary& n) {
      if (hosts(n)) offer(CachedMean(net, cycle, *n.location, own, req.role, req.kv_ipc, nullptr, &n));
    });
  }
  // Every other node has the mean of every node with its domains (CachedMean remembers it by
  // their site numbers). The view gives the nodes of equal domains one after another
  // (ClusterView::ForEachNodeByPosition): the first one that could host the pod gives the run's
  // mean and the rest of the run is skipped, a few nodes a leaf instead of every node. A view
  // that gives them in another order visits every node, each through the cache.
  cluster.ForEachNodeByPosition([&](const framework::NodeSummary& n) {
    if (!hosts(n)) return true;
    if (IsSite(pool, n)) return true;  // counted above
    offer(CachedMean(net, cycle, *n.location, own, req.role, req.kv_ipc, nullptr, &n));
    return false;
  });
}

// AvailableBounds from the positions ranked by mean (MeanCache::runs, sites), for a view that
// gives its runs by index and means kept with the pool's sites: the ranking is made once, with
// a pass over every run, and a call then looks at the cheapest and the dearest positions until
// one of them can host the pod (a few runs and sites), not at every position. The scale is the
// same: the cheapest and dearest mean over the hosting sites and the runs with a hosting node
// that is not a site.
template <class Hosts, class Offer>
void RankedBounds(const framework::ClusterView& cluster, const PlacementRequest& req, const pd::Endpoint& own,
                  CyclePoolView& cycle, const Hosts& hosts, const Offer& offer) {
  const pd::NetworkConfig& net = cluster.network();
  const PoolSites& pool = *cycle.pool;
  MeanCache& m = *cycle.means;
  if (!m.ranked) {
    const std::size_t runs = cluster.PositionRunCount();
    for (std::size_t r = 0; r < runs; ++r) {
      cluster.ForEachNodeInRun(r, [&](const framework::NodeSummary& n) {
        if (IsSite(pool, n)) return true;  // a site has its own mean
        m.runs.emplace_back(CachedMean(net, cycle, *n.location, own, req.role, req.kv_ipc, nullptr, &n),
                            static_cast<std::uint32_t>(r));
        return false;
      });
    }
    for (std::size_t i = 0; i < pool.sites.size(); ++i) {
      cluster.WithNode(pool.layout->locations[i].node, [&](const framework::NodeSummary& n) {
        m.sites.emplace_back(CachedMean(net, cycle, *n.location, own, req.role, req.kv_ipc, nullptr, &n),
                             static_cast<std::uint32_t>(i));
      });
    }
    std::sort(m.runs.begin(), m.runs.end());
    std::sort(m.sites.begin(), m.sites.end());
    m.ranked = true;
  }
  const auto run_hosts = [&](std::uint32_t r) {
    bool any = false;
    cluster.ForEachNodeInRun(r, [&](const framework::NodeSummary& n) {
      any = hosts(n) && !IsSite(pool, n);
      return !any;
    });
    return any;
  };
  const auto site_hosts = [&](std::uint32_t i) {
    bool any = false;
    cluster.WithNode(pool.layout->locations[i].node,
                     [&](const framework::NodeSummary& n) { any = hosts(n); });
    return any;
  };
  // The cheapest and the dearest of each ranking that can host the pod.
  const auto ends = [&](const std::vector<std::pair<double, std::uint32_t>>& ranked, const auto& can_host) {
    for (const auto& [mean, at] : ranked) {
      if (!can_host(at)) continue;
      offer(mean);
      break;
    }
    for (auto it = ranked.rbegin(); it != ranked.rend(); ++it) {
      if (!can_host(it->second)) continue;
      offer(it->first);
      break;
    }
  };
  ends(m.runs, run_hosts);
  ends(m.sites, site_hosts);
}

void AvailableBounds(const framework::ClusterView& cluster, const PlacementRequest& req,
                     const pd::Endpoint& own, bool explain, CyclePoolView& cycle) {
  const pd::NetworkConfig& net = cluster.network();
  double best = std::numeric_limits<double>::infinity(), worst = 0;
  auto hosts = [&](const framework::NodeSummary& n) {
    return n.schedulable && (req.IsShared() || n.FreeGpusFor(req.vendor) >= req.gpus) &&
           n.free_rdma_nics >= req.rdma_nics;
  };
  auto offer = [&](double mean) {
    best = std::min(best, mean);
    worst = std::max(worst, mean);
  };
  // Ranked once the means have served a cycle before: a pool that changes between every two
  // of its pods' calls (a rollout) would pay the ranking's pass and sort each time for nothing.
  if (cycle.means_kept && ++cycle.means->scales >= 2 && cluster.PositionRunCount() > 0) {
    RankedBounds(cluster, req, own, cycle, hosts, offer);
  } else {
    PassBounds(cluster, req, own, cycle, hosts, offer);
  }
  if (!(best < std::numeric_limits<double>::infinity()) || !(best > 0)) {
    cycle.bounds = Bounds(net, own, req.kv_ipc, cycle.bytes);
    if (explain) {
      cycle.bounds_text = "no node could host it now; scale: the config's paths, best " +
                          FormatSeconds(cycle.bounds.best_seconds) + ", worst " +
                          FormatSeconds(cycle.bounds.worst_seconds);
    }
    return;
  }
  cycle.bounds = CostBounds{best, std::max(worst, best * kMinScaleFactor)};
  if (explain) {
    cycle.bounds_text = "cheapest available " + FormatSeconds(best) + ", scale to " +
                        FormatSeconds(cycle.bounds.worst_seconds);
  }
}

}  // namespace

// PoolSites kept across cycles, by pool and role, while the view's PoolToken for the pool holds.
// Bounded: a cluster that names pools per rollout would otherwise keep one entry per pool.
class SitesCache {
 public:
  std::shared_ptr<const PoolSites> Find(std::string_view pool, PodRole role,
                                        const framework::PoolToken& token, std::size_t tiers) {
    std::lock_guard lock(mu_);
    const auto it = entries_.find(std::pair<std::string_view, PodRole>(pool, role));
    if (it == entries_.end() || !(it->second.token == token) || it->second.tiers != tiers) return nullptr;
    return it->second.sites;
  }
  // The layout of the sites kept for `pool` and `role` under the token's positions, whatever
  // the pool's version then (null: none).
  std::shared_ptr<const SiteLayout> LayoutFor(std::string_view pool, PodRole role,
                                              const framework::PoolToken& token, std::size_t tiers) {
    std::lock_guard lock(mu_);
    const auto it = entries_.find(std::pair<std::string_view, PodRole>(pool, role));
    if (it == entries_.end() || it->second.token.positions != token.positions || it->second.tiers != tiers) {
      return nullptr;
    }
    return it->second.sites->layout;
  }
  void Put(std::string_view pool, PodRole role, framework::PoolToken token, std::size_t tiers,
           std::shared_ptr<const PoolSites> sites) {
    std::lock_guard lock(mu_);
    if (entries_.size() >= kMaxEntries) entries_.clear();
    entries_.insert_or_assign(std::pair<std::string, PodRole>(pool, role),
                              Entry{std::move(token), tiers, std::move(sites)});
  }

 private:
  static constexpr std::size_t kMaxEntries = 256;
  struct Entry {
    framework::PoolToken token;
    std::size_t tiers = 0;
    std::shared_ptr<const PoolSites> sites;
  };
  struct Less {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return std::pair<std::string_view, PodRole>(a.first, a.second) <
             std::pair<std::string_view, PodRole>(b.first, b.second);
    }
  };
  std::mutex mu_;
  std::map<std::pair<std::string, PodRole>, Entry, Less> entries_;
};

namespace {

// The means for `sites` and a pod of this shape: the thread's, kept for the last few (sites,
// shape) it scored while the sites stay the same object (a cached PoolSites); a fresh cache
// otherwise, or when a cycle still holds the thread's (cycles are scored on one thread each,
// but one may outlive another).
std::shared_ptr<MeanCache> MeansFor(const std::shared_ptr<const PoolSites>& sites, bool cached, int gpus,
                                    int nics, bool kv_ipc, double bytes) {
  if (!cached) return std::make_shared<MeanCache>();
  struct Slot {
    std::shared_ptr<const PoolSites> sites;  // held: compared by identity
    int gpus = 0, nics = 0;
    bool kv_ipc = false;
    double bytes = 0;
    std::shared_ptr<MeanCache> means;
  };
  thread_local std::array<Slot, 4> slots;
  thread_local std::size_t next = 0;
  for (Slot& slot : slots) {
    if (slot.sites == sites && slot.gpus == gpus && slot.nics == nics && slot.kv_ipc == kv_ipc &&
        slot.bytes == bytes) {
      if (slot.means.use_count() != 1) return std::make_shared<MeanCache>();
      return slot.means;
    }
  }
  Slot& slot = slots[next++ % slots.size()];
  slot = Slot{sites, gpus, nics, kv_ipc, bytes, std::make_shared<MeanCache>()};
  return slot.means;
}

// The pool's sites for a pod of `req`'s role (PoolSites): its counterparts, else its same-role
// instances, else the gang anchor. `previous`: a layout for the cycle's positions to reuse
// where the instances stand on the same nodes (may be null). False when there is nothing to
// anchor on.
bool BuildSites(const framework::ClusterView& cluster, const PlacementRequest& req,
                std::span<const PoolMember> members, const std::optional<std::size_t>& anchor_tier,
                const std::optional<std::size_t>& spread_tier, const pd::Endpoint& own_shape,
                const std::shared_ptr<const SiteLayout>& previous, PoolSites& out) {
  const std::string role(ToString(req.role));
  std::vector<const PoolMember*> counterparts, same_role;
  int both = 0;
  for (const PoolMember& m : members) {
    if (!req.pod_uid.empty() && m.uid == req.pod_uid) continue;  // the pod itself, when re-scored
    if (IsCounterpart(req.role, m.role)) {
      counterparts.push_back(&m);
      if (m.role == PodRole::kBoth) ++both;
    } else if (m.role == req.role) {
      same_role.push_back(&m);
    }
  }
  out.same_by_node.reserve(same_role.size());
  for (const PoolMember* m : same_role) {
    ++out.same_total;
    out.same_by_node.emplace_back(m->node, 1);
    if (spread_tier) {
      const std::string d = DomainAt(cluster.Locate(m->node), *spread_tier);
      if (!d.empty()) ++out.same_by_domain[d];
    }
  }
  std::sort(out.same_by_node.begin(), out.same_by_node.end());
  std::size_t kept = 0;  // one entry per node, its count summed
  for (std::size_t i = 0; i < out.same_by_node.size(); ++i) {
    if (kept > 0 && out.same_by_node[kept - 1].first == out.same_by_node[i].first) {
      out.same_by_node[kept - 1].second += out.same_by_node[i].second;
    } else {
      if (kept != i) out.same_by_node[kept] = std::move(out.same_by_node[i]);
      ++kept;
    }
  }
  out.same_by_node.resize(kept);

  const std::string opposite(ToString(Opposite(req.role)));
  if (!counterparts.empty()) {
    out.anchor = AnchorKind::kCounterparts;
    const int plain = static_cast<int>(counterparts.size()) - both;
    out.anchor_text = both == 0    ? Instances(plain, opposite)
                      : plain == 0 ? Instances(both, "both")
                                   : std::to_string(plain) + " " + opposite + " + " + std::to_string(both) +
                                         " both instances";
    AddSites(cluster, counterparts, previous, out);
  } else if (!same_role.empty()) {
    out.anchor = AnchorKind::kSameRole;
    out.anchor_text = "no " + opposite + " instances yet, anchored on " +
                      Instances(static_cast<int>(same_role.size()), role);
    AddSites(cluster, same_role, previous, out);
  } else if (ChooseGangAnchor(cluster, req.pool, req.vendor, anchor_tier, out)) {
    // The counterpart-to-be: an instance of the pod's own shape, aligned, on the anchor's first node.
    // The anchor stands for an instance like this pod, with its IPC consent.
    auto layout = std::make_shared<SiteLayout>();
    layout->locations.push_back(cluster.Locate(out.gang_node));
    layout->locations.back().node = out.gang_node;
    LayOut(cluster.network().tiers.size(), *layout);
    out.layout = std::move(layout);
    out.sites.push_back(Site{{{AddEndpoint(out.endpoints, own_shape), true, 1}}});
    out.anchors = 1;
    CountSites(cluster.network().tiers.size(), out);
  } else {
    return false;
  }
  return true;
}

std::unique_ptr<CyclePoolView> BuildCycle(const framework::CycleState& state, const Args& args,
                                          SitesCache& cache) {
  auto cycle = std::make_unique<CyclePoolView>();
  const PlacementRequest& req = state.request();
  const std::string role(ToString(req.role));
  if (req.role == PodRole::kNone) {
    cycle->neutral = "no Prefill/Decode role: neutral -> 100";
    return cycle;
  }
  if (req.role == PodRole::kBoth) {
    cycle->neutral = "role both (prefill and decode in one instance) sends no KV cache: neutral -> 100";
    return cycle;
  }
  if (req.pool.empty()) {
    cycle->neutral = role + " pod without a pool: neutral -> 100";
    return cycle;
  }
  cycle->prefix = role + " of pool " + req.pool + ": ";
  const framework::ClusterView* cluster = state.cluster();
  if (cluster == nullptr) {
    cycle->neutral = cycle->prefix + "no cluster view in this cycle: neutral -> 100";
    return cycle;
  }
  const int gpus = req.IsShared() ? req.shared.count : req.gpus;
  if (gpus <= 0) {
    cycle->neutral = cycle->prefix + "asks no GPU, so holds no KV cache: neutral -> 100";
    return cycle;
  }
  const pd::NetworkConfig& net = cluster->network();
  const TierChoice anchor_tier = ResolveTier(net, args.anchor_tier);
  if (!anchor_tier.ok) {
    cycle->neutral = cycle->prefix + "anchorTier: " + anchor_tier.error + ": neutral -> 100";
    return cycle;
  }
  if (args.spread_tier != "node") {
    cycle->spread_tier = FindTier(net, args.spread_tier);
    if (!cycle->spread_tier) {
      cycle->neutral =
          cycle->prefix + "spreadTier: " + ResolveTier(net, args.spread_tier).error + ": neutral -> 100";
      return cycle;
    }
    cycle->spread_label = args.spread_tier;
  }

  const std::int64_t kv = req.kv_bytes_per_token > 0 ? req.kv_bytes_per_token : args.kv_bytes_per_token;
  const std::int64_t tokens = req.prompt_tokens > 0 ? req.prompt_tokens : args.prompt_tokens;
  cycle->bytes = static_cast<double>(kv) * static_cast<double>(tokens);
  cycle->bytes_text = std::to_string(tokens) + " tok x " + FormatBytes(kv);
  const pd::Endpoint own_shape{gpus, std::max(0, req.rdma_nics), LinkClass::kPIX, 0};

  const std::span<const PoolMember> members = cluster->PoolMembers(req.pool);
  // Kept across cycles while the view's token for the pool holds (PoolSites), unless the pod is
  // one of the pool's own (it must not count itself) or the pool has no instance yet (the gang
  // anchor follows the free GPUs).
  const bool self =
      !req.pod_uid.empty() &&
      std::any_of(members.begin(), members.end(), [&](const PoolMember& m) { return m.uid == req.pod_uid; });
  const framework::PoolToken token =
      self || members.empty() ? framework::PoolToken{} : cluster->PoolVersion(req.pool);
  const std::size_t tiers = net.tiers.size();
  std::shared_ptr<const PoolSites> sites =
      token.version != 0 ? cache.Find(req.pool, req.role, token, tiers) : nullptr;
  bool kept = sites != nullptr;
  if (sites == nullptr) {
    auto built = std::make_shared<PoolSites>();
    // The last sites kept for these positions lend their layout where the instances stand on
    // the same nodes (a pool that changed by pods leaving and coming back).
    const std::shared_ptr<const SiteLayout> previous =
        token.version != 0 ? cache.LayoutFor(req.pool, req.role, token, tiers) : nullptr;
    if (!BuildSites(*cluster, req, members, anchor_tier.tier, cycle->spread_tier, own_shape, previous,
                    *built)) {
      cycle->neutral =
          cycle->prefix + "no instances yet and no schedulable node to anchor on: neutral -> 100";
      return cycle;
    }
    sites = std::move(built);
    kept = token.version != 0 && sites->anchor != AnchorKind::kGang;
    if (kept) cache.Put(req.pool, req.role, token, tiers, sites);
  }
  cycle->means = MeansFor(sites, kept, own_shape.gpus, own_shape.rdma_nics, req.kv_ipc, cycle->bytes);
  cycle->means_kept = kept;
  cycle->pool = std::move(sites);
  cycle->mark.assign(cycle->pool->sites.size(), 0);
  AvailableBounds(*cluster, req, own_shape, state.explain(), *cycle);
  return cycle;
}

}  // namespace

std::uint64_t StableHash(std::string_view pool, std::string_view domain) {
  Fnv1aHasher h;
  h.Bytes(pool);
  h.Byte(0);  // "ab"+"c" and "a"+"bc" differ
  h.Bytes(domain);
  return h.value();
}

KvTransferCost::KvTransferCost(Args args) : args_(std::move(args)), cache_(std::make_shared<SitesCache>()) {}

Status KvTransferCost::CheckNetwork(const pd::NetworkConfig& network) const {
  if (const TierChoice anchor = ResolveTier(network, args_.anchor_tier); !anchor.ok) {
    return Error("anchorTier: " + anchor.error);
  }
  if (args_.spread_tier != "node" && !FindTier(network, args_.spread_tier)) {
    return Error("spreadTier: " + ResolveTier(network, args_.spread_tier).error + " (or \"node\")");
  }
  return Status::Ok();
}

framework::ScoreResult KvTransferCost::Score(framework::CycleState& state,
                                             const framework::NodeInfo& node) const {
  CyclePoolView* cycle = state.ReadAs<CyclePoolView>(kCycleKey);
  if (cycle == nullptr) {
    std::unique_ptr<CyclePoolView> built = BuildCycle(state, args_, *cache_);
    cycle = built.get();
    state.Write(std::string(kCycleKey), std::move(built));
  }
  // Nothing to say about this pod: out of the total (ScoreResult::counted).
  if (!cycle->neutral.empty()) return {kMaxScore, cycle->neutral, /*counted=*/false};

  // The node's summary from the view (its position without a copy, and its domains' hashes,
  // by which its mean is cached as in the scale's pass); a node the view does not know is
  // located by name (a position that shares no tier).
  const framework::ClusterView& cluster = *state.cluster();
  std::optional<framework::ScoreResult> result;
  const bool known = cluster.WithNode(node.name, [&](const framework::NodeSummary& summary) {
    result = ScoreAt(args_, state, node, cycle, *summary.location, &summary);
  });
  if (!known) result = ScoreAt(args_, state, node, cycle, cluster.Locate(node.name), nullptr);
  return std::move(*result);
}

Result<Args> ParseArgs(const framework::PluginArgs& args) {
  TOPOSCHED_RETURN_IF_ERROR(RequireKnownArgs(
      args, {"kvBytesPerToken", "promptTokens", "anchorTier", "spreadTier", "spreadPoints"}));
  Args out;
  TOPOSCHED_ASSIGN_OR_RETURN(
      out.kv_bytes_per_token,
      ReadIntArg(args, "kvBytesPerToken", 1, std::int64_t{1} << 30, out.kv_bytes_per_token));
  TOPOSCHED_ASSIGN_OR_RETURN(out.prompt_tokens,
                             ReadIntArg(args, "promptTokens", 1, 10'000'000, out.prompt_tokens));
  TOPOSCHED_ASSIGN_OR_RETURN(const std::int64_t points,
                             ReadIntArg(args, "spreadPoints", 0, 50, out.spread_points));
  out.spread_points = static_cast<int>(points);
  out.anchor_tier = ReadStringArg(args, "anchorTier", "");
  out.spread_tier = ReadStringArg(args, "spreadTier", "node");
  if (out.spread_tier.empty()) return Error("arg spreadTier: empty; use node or a network tier label");
  return out;
}

Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args) {
  TOPOSCHED_ASSIGN_OR_RETURN(Args parsed, ParseArgs(args));
  return AsPlugin(std::make_unique<KvTransferCost>(std::move(parsed)));
}

}  // namespace toposched::plugins::kv_transfer_cost
