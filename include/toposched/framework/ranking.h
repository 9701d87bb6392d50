#pragma once
// The ranking step: the order in which the nodes that passed Filter and were scored serve one
// pod (kube-scheduler's NormalizeScore and selectHost, for this scheduler's rules). Every caller
// that orders nodes ranks through this file: the extender's prioritize for kube-scheduler and
// for Volcano, /explain, and both simulators' toposched policies. A caller gathers the facts
// (each node's NodeScore, its stable order key, the card a vGPU would take) and asks here; it
// writes no ranking rule of its own, so a figure the simulator publishes is the extender's.
//
// The rules, in the order they apply (docs/placement.md explains each):
//   1. A rare node class last (RareClass): nodes whose hardware is kept for a rarer typical
//      shape rank after every node that is not.
//   2. Capacity first (CapacityBand): nodes whose capacity score is within the band of the best
//      rank ahead of the rest.
//   3. The higher total, then the higher capacity score.
//   4. Among the nodes still tied, a single vGPU goes where its card evens out the cluster's
//      remnants (RemnantTie).
//   5. Then the stable order: the lower order key (NodeOrderKey of the name), the same in every
//      replica and run.
//   A pod that asks CPU and no device ranks by its wire score less the node's idle GPU share
//   (CpuPodScore), then rules 3 (capacity) and 5.
// On the extender's wire (0..10 per node) rules 1-3 become steps of the score
// (CapacityBand::ExtenderScore) and rules 3 (capacity) to 5 choose the one node of the best that
// keeps the top score (PreferOneOfTheBest, TieKey): the node a simulator takes first is the node
// the wire scores highest.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "toposched/framework/cluster_view.h"
#include "toposched/framework/framework.h"
#include "toposched/placement/packing.h"
#include "toposched/placement/rare_class.h"

namespace toposched::framework {

// Rules 2 and 3, and the wire's steps. Offer every feasible node's score, then rank.
//
// Capacity first: a node is in the band when its capacity score is within `band` of the best
// offered (or when capacity first is off: band < 0, or the node has no capacity score). In-band
// nodes rank ahead of the rest; then the higher total; then the higher capacity.
//
// A rare node class last: nodes kept for a rarer shape (NodeScore::reserved) rank after every
// node that is not, and while any such node was offered they are out of the band; the band and
// the best in-band total are those of the unreserved nodes then. When only reserved nodes fit,
// they rank among themselves as any nodes do.
//
// The extender's wire has one number per node, 0..10. ExtenderScore gives out-of-band nodes 0
// and in-band ones 10 for the best in-band total and one less for each total point below it,
// down to 1: the best node of the call gets 10 whatever the totals' absolute level, and the
// steps fall where placements differ (a proportional scale would give every node within 5 % of
// the best a 10 and leave the choice to kube-scheduler's own scores: docs/placement.md).
class CapacityBand {
 public:
  explicit CapacityBand(int band) : band_(band) {}
  void Offer(const NodeScore& score) { Offer(score.total, score.capacity, score.reserved); }
  bool In(const NodeScore& score) const { return In(score.capacity, score.reserved); }
  // Whether `a` ranks ahead of `b` by rules 1-3 (strict; equal nodes: false both ways).
  bool Ahead(const NodeScore& a, const NodeScore& b) const;
  int ExtenderScore(const NodeScore& score) const {
    return ExtenderScore(score.total, score.capacity, score.reserved);
  }
  // The same from a score's three fields (NodeScore::total, capacity, reserved), for callers
  // that keep them without a NodeScore (the extender's cached verdicts).
  void Offer(int total, int capacity, bool reserved);
  bool In(int capacity, bool reserved) const;
  int ExtenderScore(int total, int capacity, bool reserved) const;
  int best() const { return tiers_[tiers_[0].offered ? 0 : 1].best; }
  int band() const { return band_; }

 private:
  // The offers of one kind (unreserved, reserved).
  struct Tier {
    bool offered = false;
    int best = -1;
    mutable int top_in_band = -2;  // TopInBand()'s cached answer; -2: to compute (an Offer came)
    // The highest total offered per capacity score (index capacity + 1; 0: no capacity score),
    // -1 when none: the best in-band total without keeping every offer.
    std::array<int, kMaxScore + 2> top_total = MinusOnes();
  };
  const Tier& TierOf(bool reserved) const { return tiers_[reserved ? 1 : 0]; }
  bool InTier(const Tier& tier, int capacity) const;
  int TopInBand(const Tier& tier) const;

  int band_;
  std::array<Tier, 2> tiers_;
  static constexpr std::array<int, kMaxScore + 2> MinusOnes() {
    std::array<int, kMaxScore + 2> a{};
    a.fill(-1);
    return a;
  }
};

// Rule 1 for one pod: which nodes are kept for the rare shape (packing::RareShape; the header
// placement/rare_class.h says why). Inactive (no node kept) when the framework's rule is off, the
// pod asks no RDMA NIC, `mix` is null or no typical shape is rarer than the pod's own.
class RareClass {
 public:
  RareClass() = default;  // inactive
  // `census`: the hardware of the schedulable nodes (state::Snapshot::census, or CensusOf the
  // simulator's). `pool_nodes()`: the nodes already running the pod's own Prefill/Decode pool,
  // sorted and unique (PoolNodesOf; null: none), asked only when the rule is active for a pod of
  // a pool; those nodes are never kept from it.
  using PoolNodes = std::function<std::shared_ptr<const std::vector<std::string>>()>;
  RareClass(const Framework& framework, const PlacementRequest& request, const packing::ShapeMix* mix,
            const packing::HardwareCensus& census, const PoolNodes& pool_nodes);
  bool active() const { return rare_.has_value(); }
  const std::optional<packing::Shape>& rare() const { return rare_; }
  // Whether the node `name` with `hardware` is kept for the rare shape: its hardware could host
  // it (HostsRare, a property of the node's hardware) and the pod's pool does not run there.
  bool Reserved(const packing::NodeHardware& hardware, std::string_view name) const {
    return HostsRare(hardware) && !RunsThePool(name);
  }
  bool HostsRare(const packing::NodeHardware& hardware) const;
  bool RunsThePool(std::string_view name) const;

 private:
  std::optional<packing::Shape> rare_;
  GpuVendor vendor_ = GpuVendor::kNvidia;
  std::shared_ptr<const std::vector<std::string>> pool_nodes_;
};

// The nodes of `members`, sorted and unique (RareClass's pool_nodes).
std::shared_ptr<const std::vector<std::string>> PoolNodesOf(std::span<const PoolMember> members);

// Rule 4: a single vGPU whose card capacity packing chose (CycleState::share_packing) goes first
// to the node whose card evens out the cluster's remnants (packing::RemnantCounts::TieRank;
// capacity.evenRemnants in the config). The cluster's remnants are counted at the first rank
// asked, by the caller's `count` (CountRemnantsOf over its nodes), so a pod whose best place is
// not shared counts none.
class RemnantTie {
 public:
  using Count = std::function<std::shared_ptr<const packing::RemnantCounts>()>;
  RemnantTie(const Framework& framework, const PlacementRequest& request, Count count);
  // Whether the rule applies to this pod at all.
  bool on() const { return applies_; }
  // The rank of a node whose chosen card has `share_left` milli left (ShareLeft; -1: none):
  // lower first; 0 when the rule is off or there is no such card.
  long Rank(int share_left);

 private:
  bool applies_ = false;
  int milli_ = 0;  // the vGPU's share of its card
  Count count_;
  std::shared_ptr<const packing::RemnantCounts> counts_;
};

// What the card a single vGPU's placement takes has left before it (milli), for RemnantTie: -1
// unless the placement is one GPU chosen by capacity packing (CycleState::share_packing).
int ShareLeft(const CycleState& cycle, const NodeInfo& node, const Placement& placement);

// Adds one node's partly used GPUs of `vendor` to `counts` (RemnantTie's count): none on a node
// that takes no new pods (cordoned, or held: its remnants are no one's to fill).
void CountRemnantsOf(const NodeInfo& node, GpuVendor vendor, packing::RemnantCounts& counts);
void CountRemnantsOf(const NodeTopology* topology, const NodeAllocation& allocated, bool takes_pods,
                     GpuVendor vendor, packing::RemnantCounts& counts);

// Rules 3 (capacity) to 5 among nodes the band places alike: the lowest key ranks first.
struct TieKey {
  int capacity_behind = 0;  // minus the capacity score: the higher capacity first
  long remnants = 0;        // RemnantTie::Rank
  std::uint64_t order = 0;  // the stable order key
  auto operator<=>(const TieKey&) const = default;
};
inline TieKey TieKeyOf(int capacity, long remnant_rank, std::uint64_t order_key) {
  return {-capacity, remnant_rank, order_key};
}

// One node of a call's best, the rest a step behind: among the entries of `scores` that share
// the highest score, the one with the lowest key (`key_of(k)`, a TieKey) keeps it and the others
// drop by `step` (one point of kube-scheduler's 0-10; Volcano's scores are the total x a weight,
// so half a total point there); nothing happens unless the demoted score stays at least `step`
// (a best of 1 on the 0-10 scale is left as it is). kube-scheduler draws at random among equal
// totals (schedule_one.go selectHost), as Volcano does among its best nodes, and so spreads equal
// pods over every node the extender scores alike; one fixed node packs them where the last ones
// went, as the simulators do, and keeps the other nodes whole (docs/extender.md, "One node of the
// best"). Returns the index kept, or scores.size().
template <class Entry, class KeyOf, class ScoreOf, class Score = int>
std::size_t PreferOneOfTheBest(std::span<Entry> scores, KeyOf key_of, ScoreOf score_of, Score step = 1) {
  if (scores.empty()) return 0;
  auto best = score_of(scores[0]);
  for (Entry& e : scores) best = std::max(best, score_of(e));
  if (best < 2 * step) return scores.size();
  std::size_t first = scores.size();
  std::invoke_result_t<KeyOf&, std::size_t> first_key{};
  for (std::size_t k = 0; k < scores.size(); ++k) {
    if (score_of(scores[k]) != best) continue;
    const auto key = key_of(k);
    if (first == scores.size() || key < first_key) {
      first = k;
      first_key = key;
    }
  }
  for (std::size_t k = 0; k < scores.size(); ++k) {
    auto& score = score_of(scores[k]);
    if (k != first && score == best) score = static_cast<std::remove_cvref_t<decltype(score)>>(best - step);
  }
  return first;
}

// The share of a node's GPUs that are free whole (0 on a node without GPUs).
double IdleGpuShare(const packing::NodeHardware& hardware,
                    const std::array<int, kGpuVendors>& free_by_vendor);
// The wire score (0-10) of a pod that asks CPU and no device on a node whose band score
// (CapacityBand::ExtenderScore: its CPU's expected fragmentation) is `band_score`, where `idle`
// of the GPUs are free (IdleGpuShare; -1: a node toposched knows no devices on, which scores 10).
// Where the pod strands nothing now it still may later: its CPU is gone when the node's idle GPUs
// find takers. So the score falls with the idle share, by up to half the scale (5 on an idle
// node; a step of the band score is kept), and the pod goes where GPUs are taken rather than to
// the emptiest node, kube-scheduler's LeastAllocated choice (docs/placement.md, "Pods that ask no
// device").
int CpuPodScore(int band_score, double idle);

// One node as the simulators and /explain rank it.
struct RankedNode {
  NodeScore score;              // total, capacity and reserved are read (parts may be empty)
  std::uint64_t order_key = 0;  // rule 5: NodeOrderKey of the name (the trace replay: its node rank)
  int share_left = -1;          // rule 4: ShareLeft of the node's placement
  std::size_t index = 0;        // the caller's
  double idle_gpus = -1;        // a pod that asks CPU and no device: IdleGpuShare (-1: no devices known)
};

// Sorts `nodes` best first by rules 1-5, after every node's score was offered to `band`. The
// remnant ranks are asked only of the nodes that tie for the first place, so the first node is
// the one PreferOneOfTheBest keeps on the wire; the rest follow rules 1-3 and 5. `cpu_pod`: the
// pod asks CPU and no device; the nodes rank by CpuPodScore of their wire score and idle_gpus
// first, as prioritize scores them.
void RankBestFirst(std::vector<RankedNode>& nodes, const CapacityBand& band, RemnantTie& remnants,
                   bool cpu_pod = false);

}  // namespace toposched::framework
