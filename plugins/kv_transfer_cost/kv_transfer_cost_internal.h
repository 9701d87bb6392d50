#pragma once
// KvTransferCost's private header: the pool data its two files share (the caches in
// kv_transfer_cost.cc build it; the cost model in kv_transfer_cost_model.cc reads it) and the
// functions one calls in the other. Not part of the plugin's interface (kv_transfer_cost.h).

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv_transfer_cost/kv_transfer_cost.h"
#include "toposched/common/flat_hash_index.h"
#include "toposched/framework/cluster_view.h"

namespace toposched::plugins::kv_transfer_cost {

// Instances at one node with one endpoint and one IPC consent.
struct SiteEndpoint {
  std::size_t endpoint = 0;  // index into CyclePoolView::endpoints
  bool ipc = false;          // the instances set toposched.io/kv-ipc (same-node IPC needs both ends)
  int count = 0;
};

// The instances standing at one node, by distinct endpoint: a node's path is computed once for
// all of them, and a (path, endpoint) estimate once for all nodes sharing it.
struct Site {
  std::vector<SiteEndpoint> endpoints;
};

// Where a pool's sites stand, whatever stands there: the sites' positions (by node name) and
// their domains' numbers. Two versions of a pool whose instances stand on the same nodes share
// one layout (a pod that leaves and comes back, a pool that grows on its nodes): only the counts
// are made again (PoolSites).
//
// A node's path to a site is decided by the first tier at which both stand in one domain, so
// only the sites' domains matter: per tier they are numbered, and a node's domains become those
// numbers (-1: no site there). A node that holds no site sees every site through its numbers
// alone, so its mean is cached by (numbers, own GPU->NIC class): a 5,000-node cycle computes one
// mean per leaf with sites, compares integers, and allocates nothing per node.
struct SiteLayout {
  std::vector<pd::Location> locations;  // per site, by node name
  std::vector<std::vector<int>> ids;    // per site, per tier: its domain's number, -1: none
  // Per tier; the keys view the locations.
  std::vector<std::unordered_map<std::string_view, int>> domain_ids;
  // For MeanSeconds: each site by its node; per tier and domain number, the sites there.
  std::unordered_map<std::string_view, std::size_t> site_at;
  std::vector<std::vector<std::vector<std::size_t>>> sites_in;
  // The same by framework::PositionHash, for passes over every node that bring the nodes'
  // hashes (NodeSummary::domain_hashes): per tier, a site domain's hash -> its number; unusable
  // when two of a tier's site domains share a hash.
  std::vector<FlatHashIndex<int>> ids_by_hash;
  bool hashes_usable = true;
  FlatHashIndex<bool> site_name_hashes;
  // Per tier and domain number: the tier t + 1 domain all its sites share (nested false: they
  // differ), which PoolSites::content relies on.
  struct Nesting {
    std::uint64_t parent = 0;  // framework::PositionHash of the shared tier t + 1 domain
    bool nested = true;
  };
  std::vector<std::vector<Nesting>> nesting;
};

enum class AnchorKind { kCounterparts, kSameRole, kGang };

// Everything about the pool's instances that depends on neither the scored node nor the
// cluster's free devices: where the anchors stand and what each domain holds. Built by the first
// Score call of a cycle; kept across cycles while the view gives the same PoolToken (the pool's
// version and the node positions), as the extender's does: a pool that does not change between
// two of its pods' calls (other pods bind) is not gathered and numbered again.
struct PoolSites {
  AnchorKind anchor = AnchorKind::kCounterparts;
  std::string anchor_text;  // "4 prefill instances"
  std::vector<pd::Endpoint> endpoints;
  std::vector<Site> sites;
  int anchors = 0;  // instances the mean runs over
  // The gang anchor's domain at `gang_tier` (empty: the anchor is the single node `gang_node`,
  // which has no label for that tier) and its first node.
  std::optional<std::size_t> gang_tier;
  std::string gang_domain, gang_node;

  std::map<std::string, int, std::less<>> same_by_domain;
  // Per node, by name (sorted): no allocation per scored node.
  std::vector<std::pair<std::string, int>> same_by_node;
  int same_total = 0;

  std::shared_ptr<const SiteLayout> layout;  // where `sites` stand, site by site
  // The instances per endpoint over all sites.
  std::vector<int> total_by_endpoint;
  // A node's mean depends only on *what* its domains hold, not on which domains they are, when
  // the sites of each of its domains all stand in its next tier's domain too (the tiers nest,
  // SiteLayout::nesting): the anchors it reaches at tier t are then those of its tier t domain
  // less those of its tier t - 1 domain. So two leaves that each hold one decode instance, under
  // spines that hold the same, give their nodes one mean (a pool spread over hundreds of leaves
  // has a few dozen distinct means). Per tier and domain number: the multiset of instances there
  // as a commutative hash.
  std::vector<std::vector<std::uint64_t>> content;
  std::vector<std::uint64_t> site_content;  // per site: its own instances, hashed
};

// The expected transfers CachedMean computed for one pool's sites (PoolSites) and one pod shape
// (its GPUs, NICs, IPC consent and KV bytes): valid as long as the sites are, so a thread keeps
// the last few across cycles (MeansFor).
struct MeanCache {
  struct Mean {
    std::vector<int> key;  // domain numbers, then the GPU->NIC class
    double seconds = 0;
    std::array<int, pd::kPathKinds> per_kind{};
  };
  std::vector<Mean> means;
  FlatHashIndex<std::size_t> by_ids;      // hash of a Mean's key -> its position in `means`
  FlatHashIndex<std::size_t> by_content;  // content key (PoolSites::content) -> position in `means`
  // The positions ranked by mean (RankedBounds), once per cache: each run of the view's nodes of
  // equal domains (ClusterView::ForEachNodeInRun) by the mean of its nodes that hold no site,
  // and each site by its own, both ascending.
  bool ranked = false;
  std::vector<std::pair<double, std::uint32_t>> runs, sites;
  int scales = 0;  // AvailableBounds calls that used this cache: ranked from the second on
};

// One cycle's view of the pool: its sites, the scale and the means computed so far.
struct CyclePoolView final : framework::StateData {
  std::string neutral;  // non-empty: every node scores 100 with this explanation
  std::string prefix;   // "decode of pool chat: "
  std::shared_ptr<const PoolSites> pool;

  double bytes = 0;
  std::string bytes_text;   // "2048 tok x 320 KiB"
  CostBounds bounds;        // the scale: see AvailableBounds
  std::string bounds_text;  // "cheapest available 13.7 ms, scale to 27.5 ms"

  std::optional<std::size_t> spread_tier;  // nullopt: by node
  std::string spread_label;

  // MeanSeconds' mark per site (this generation: counted).
  std::vector<std::uint32_t> mark;
  std::uint32_t generation = 0;
  std::vector<int> key;              // CachedMean's lookup key, reused
  std::shared_ptr<MeanCache> means;  // never null once the pool is known
  bool means_kept = false;           // `means` is kept with the sites (their token's positions hold)
};

// The mean KV-transfer time from an instance of `own` on a node whose domain numbers are `ids`
// (DomainIdsOf) and which holds the site `own_site` (npos: none), to the cycle's anchors;
// per_kind (optional) counts the anchors by path kind. A site's path is pd::PathBetween's: the
// same node, else the first tier whose domain both share, else beyond every tier; so the sites
// of the node's own domains are visited innermost tier first (each once) and the rest are beyond,
// by count.
inline constexpr std::size_t kNoSite = static_cast<std::size_t>(-1);
double MeanSeconds(const pd::NetworkConfig& net, CyclePoolView& cycle, std::size_t own_site,
                   const std::vector<int>& ids, const pd::Endpoint& own, PodRole role, bool kv_ipc,
                   std::array<int, pd::kPathKinds>* per_kind = nullptr);

// MeanSeconds through the cycle's cache (MeanCache).
// `summary` (may be null): the node's hashes, when its view gives them.
double CachedMean(const pd::NetworkConfig& net, CyclePoolView& cycle, const pd::Location& location,
                  const pd::Endpoint& own, PodRole role, bool kv_ipc,
                  std::array<int, pd::kPathKinds>* per_kind = nullptr,
                  const framework::NodeSummary* summary = nullptr);

// KvTransferCost::Score on a node at `location` (`summary`: the view's, when it has one).
framework::ScoreResult ScoreAt(const Args& args, framework::CycleState& state,
                               const framework::NodeInfo& node, CyclePoolView* cycle,
                               const pd::Location& location, const framework::NodeSummary* summary);

}  // namespace toposched::plugins::kv_transfer_cost
