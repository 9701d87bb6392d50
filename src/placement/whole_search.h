#pragma once
// The exact search for one whole (not shared) request on one node: WholeSearch holds the
// candidates (free GPUs and RDMA NICs), their rank tables and the switch groups, the bounds that
// prune, and the three passes (pass 1 the optimal value, pass 2 the first GPU subset reaching it,
// pass 3 the first NIC set and assignment), plus NIC-only requests and MinWorst. The definitions
// are in whole_search.cc (the candidate tables, passes 1 and 2) and whole_search_first.cc (pass 3,
// NIC-only, MinWorst); the small per-step helpers stay inline here. Internal to src/placement.

#include <algorithm>
#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "engine_internal.h"
#include "toposched/placement/placement.h"

namespace toposched::whole_search {

using placement_internal::kNoEdge;
using placement_internal::SwitchGroups;
using placement_internal::WholeChoice;

inline std::size_t Idx(int i) {
  return static_cast<std::size_t>(i);
}

// The searched value: the cost, then the extra NICs' rank sum (n > g).
struct Value {
  PlacementCost cost;
  int extra = 0;
  auto operator<=>(const Value&) const = default;
};

inline int Pairs(int k) {
  return k * (k - 1) / 2;
}

// One whole request on one node: candidates, their ranks, and the searches over them.
class WholeSearch {
 public:
  WholeSearch(const NodeTopology& t, const NodeAllocation& a, const SwitchGroups& groups,
              const PlacementRequest& r, bool bounded);

  // The optimum under the full order, or nothing when no set satisfies the alignment bound.
  std::optional<WholeChoice> Solve();

  // The least worst_gpu_nic over every feasible choice (0 without pairs).
  int MinWorst();

 private:
  static constexpr int kRanks = 7;  // LinkRank values 0..6

  // What the chosen GPUs reach, per rank t: the NICs within t of one of them (bit q), and how
  // many of them have a NIC within t.
  struct Reach {
    std::array<std::uint64_t, kRanks> nics{};
    std::array<int, kRanks> gpus{};
  };

  int Rank(int p, int q) const { return rank_[Idx(p * nn_ + q)]; }
  int Raw(int p, int q) const { return raw_[Idx(p * nn_ + q)]; }

  void Touch(int group) {
    if (group >= 0 && touch_[Idx(group)]++ == 0) ++newly_;
  }
  void Untouch(int group) {
    if (group >= 0 && --touch_[Idx(group)] == 0) --newly_;
  }

  Value Make(int worst, int sum, int gg, int nv, int newly, int extra) const {
    Value v;
    v.cost = PlacementCost{worst, sum, gg, nv, newly - intact_, pack_sign_ * newly};
    v.extra = extra;
    return v;
  }
  // A lower bound on every completion, given bounds on its fields. pack needs none of its own:
  // on one node it is a function of neg_intact_groups, so a completion that ties the bound on
  // neg_intact_groups touched exactly these groups and has exactly this pack.
  Value Lower(int worst, int sum, int gg, int nv, int newly, int extra = 0) const {
    return Make(worst, sum, gg, nv, newly, extra);
  }

  // A bound on the extra NICs' rank sum (n > g): they will be n - g of the NICs unused now, each
  // at least its best rank in `ranks`.
  int ExtraBound(const std::vector<int>& ranks) const {
    if (n_ <= g_) return 0;
    std::array<int, kRanks> hist{};
    for (int q = 0; q < nn_; ++q) {
      if (load_[Idx(q)] == 0 && ranks[Idx(q)] < kRanks) ++hist[Idx(ranks[Idx(q)])];
    }
    int need = n_ - g_, sum = 0;
    for (int t = 0; t < kRanks && need > 0; ++t) {
      const int take = std::min(need, hist[Idx(t)]);
      sum += take * t;
      need -= take;
    }
    return sum;
  }

  // The worst and the sum of the r smallest best ranks among candidates p >= i.
  std::pair<int, int> SuffixSmallest(int i, int r) const {
    int worst = 0, sum = 0;
    const auto& hist = suffix_hist_[Idx(i)];
    for (int rank = 0; rank < static_cast<int>(hist.size()) && r > 0; ++rank) {
      const int take = std::min(r, hist[Idx(rank)]);
      if (take > 0) worst = rank;
      sum += take * rank;
      r -= take;
    }
    return {worst, sum};
  }

  // Load and unload a NIC, keeping the mask of NICs in use.
  void Load(int q) {
    if (load_[Idx(q)]++ == 0 && hall_) used_mask_ |= std::uint64_t{1} << q;
  }
  void Unload(int q) {
    if (--load_[Idx(q)] == 0 && hall_) used_mask_ &= ~(std::uint64_t{1} << q);
  }

  // Once n <= g NICs are all in use, a GPU can only be served by one of them.
  bool AllNicsInUse(int distinct) const { return hall_ && all_serve_ && distinct == n_; }
  int RestrictedBest(int p) const {
    for (int t = 0; t < kRanks; ++t) {
      if ((nic_mask_[Idx(p * kRanks + t)] & used_mask_) != 0) return t;
    }
    return kNoEdge;
  }

  // SuffixSmallest, tightened by the "n distinct NICs" rule: NICs not yet in use can serve at
  // most (n - distinct) x cap of the r GPUs still to pick, so at least the rest are served by a
  // NIC in use (all r of them once every NIC is). {kNoEdge, kNoEdge} when that is impossible.
  std::pair<int, int> RestBound(int i, int r, int distinct) const {
    const int new_capacity = (n_ - distinct) * cap_;
    if (r == 0 || !hall_ || !all_serve_ || r <= new_capacity) return SuffixSmallest(i, r);
    const int need = r - new_capacity;  // GPUs that pay their rank to a NIC in use
    std::array<int, kRanks> in_use{}, extra{};
    for (int p = i; p < ng_; ++p) {
      const int u = RestrictedBest(p);
      if (u == kNoEdge) continue;
      ++in_use[Idx(u)];
      ++extra[Idx(u - gpu_best_[Idx(p)])];
    }
    auto smallest = [&](const std::array<int, kRanks>& hist, int count) {
      int worst = 0, sum = 0;
      for (int t = 0; t < kRanks && count > 0; ++t) {
        const int take = std::min(count, hist[Idx(t)]);
        if (take > 0) worst = t;
        sum += take * t;
        count -= take;
      }
      return count > 0 ? std::pair(kNoEdge, kNoEdge) : std::pair(worst, sum);
    };
    if (need == r) return smallest(in_use, r);
    // Every chosen GPU pays at least its best rank, and `need` of them pay at least the step up
    // from it to their best NIC in use: two independent bounds that add.
    const auto [forced_worst, forced_extra] = smallest(extra, need);
    if (forced_worst == kNoEdge) return {kNoEdge, kNoEdge};
    const auto [base_worst, base_sum] = SuffixSmallest(i, r);
    return {std::max(base_worst, smallest(in_use, need).first), base_sum + forced_extra};
  }

  // Pass 2: GPU subsets in lexicographic order (include before exclude). The GPU->NIC part of the
  // bound comes from what the chosen GPUs reach (ChosenBound) and the best ranks of the rest; the
  // inner search finds the real pairs.
  void Outer(int i, const Reach& reach, int gg, int nv);

  // Lower bounds on the worst and the sum of the chosen GPUs' pair ranks. Within rank t at most
  // the chosen GPUs having a NIC within t are served, and (Hall) at most cap times the NICs within
  // t of some chosen GPU; the sum of ranks is the sum over t of the GPUs served above t.
  // {kNoEdge, kNoEdge} when even all ranks cannot serve them.
  std::pair<int, int> ChosenBound(const Reach& reach, int k) const;

  // An upper bound on the NVLinks that r more GPUs from candidates p >= i add: each candidate x
  // adds its links to the chosen GPUs plus half its r - 1 best links (every new pair is counted
  // from both ends); the r best candidates bound the total.
  int MaxAddedLinks(int i, int r);

  void Push(int p) {
    subset_.push_back(p);
    Touch(gpu_group_[Idx(p)]);
    for (int x = 0; x < ng_; ++x) to_chosen_[Idx(x)] += nv_[Idx(x * ng_ + p)];
  }
  void Pop() {
    const int p = subset_.back();
    for (int x = 0; x < ng_; ++x) to_chosen_[Idx(x)] -= nv_[Idx(x * ng_ + p)];
    Untouch(gpu_group_[Idx(p)]);
    subset_.pop_back();
  }

  void Evaluate(int gg, int nv);

  // Cuts a branch whose lower bound cannot beat the incumbent (subsets come in lexicographic
  // order, so a tie loses) or, against a known target, cannot reach it.
  bool Cut(const Value& lower) const { return target_mode_ ? lower > best_ : have_best_ && lower >= best_; }

  // Pass 1: the optimal value, depth-first over GPUs and the NIC of each chosen one (best rank
  // first). Only the value is kept, so ties are cut whatever their order.
  void Joint(int i, int distinct, int worst, int sum, int gg, int nv);

  void Record(const Value& v) {
    best_ = v;
    have_best_ = true;
    best_subset_ = subset_;
  }

  // Per-subset tables: suffix bounds of the best ranks in subset order and, for extra NICs, each
  // NIC's best rank to the subset.
  void PrepareSubset();

  // Each NIC's best rank to the subset: what it adds to the sum when it is an extra NIC.
  void ExtraRanks();

  // Pass 2's inner search for one subset: a NIC per GPU, best rank first, until an assignment
  // reaches the target value best_.
  void Assign(int idx, int distinct, int worst, int sum);

  // The n - g extra NICs among the unused free ones: fewest newly broken groups, then the least
  // rank sum. Exact: a knapsack over groups, since a group costs 1 however many NICs it gives.
  std::pair<int, int> BestExtras();

  // A bound on the intact groups that r more GPUs from candidates p >= i must open: candidates
  // under no group or in a group already touched open none; otherwise the fullest groups first.
  int GroupBound(int i, int r);

  // Pass 3 over NIC sets in lexicographic order for subset_: the first one with an
  // assignment of value best_.
  bool FirstNicSet(int q, std::vector<int>& chosen);

  // The first assignment, in GPU order with NICs ascending, of value best_ on the NIC set.
  bool AssignFirst(const std::vector<int>& nics, int idx, int distinct, int worst, int sum);

  // NIC-only pods: NIC sets in lexicographic order, fewest newly broken groups.
  std::optional<WholeChoice> SolveNicOnly();

  void NicOnly(int q, std::vector<int>& chosen);

  // Depth-first over GPUs and their NICs for the least worst rank; stops at the lower bound.
  void MinWorstSearch(int i, int k, int distinct, int worst);

  // Request.
  int g_, n_, cap_ = 0;
  bool all_serve_ = false;  // n <= g: every chosen NIC serves a GPU
  int pack_sign_;
  // Candidates: free GPUs (that some allowed NIC can serve) and free RDMA NICs, by index.
  std::vector<int> gpu_, nic_;
  int ng_ = 0, nn_ = 0;
  std::vector<int> rank_, raw_;              // ng x nn: allowed rank (kNoEdge if the bound forbids), raw rank
  std::vector<int> gpu_best_;                // per GPU: best allowed rank (0 without NICs)
  std::vector<int> nic_best_raw_;            // per NIC: best rank to any candidate GPU
  std::vector<std::vector<int>> nic_order_;  // per GPU: allowed NICs, best rank first
  std::vector<int> gg_, nv_;                 // ng x ng: GPU pair rank and NVLink count
  int max_nv_ = 0;
  std::vector<int> top_links_;              // ng x ng: GPU x's m largest link counts, summed
  bool hall_ = false;                       // NIC reach tracked as 64-bit masks (nn <= 64)
  std::vector<std::uint64_t> nic_mask_;     // ng x kRanks: NICs within rank t of GPU p
  std::vector<int> gpu_group_, nic_group_;  // compact id of an intact-before group, or -1
  int intact_ = 0;
  std::vector<std::array<int, 8>> suffix_hist_;  // per i: how many p >= i have each best rank
  // Search state.
  std::vector<int> touch_;                                 // per intact-before group: chosen devices in it
  int newly_ = 0;                                          // intact-before groups touched
  std::vector<int> subset_;                                // chosen subset (candidate positions)
  std::vector<int> load_;                                  // per NIC: GPUs it serves
  std::uint64_t used_mask_ = 0;                            // NICs with a load (when hall_)
  int subset_worst_gpu_gpu_ = 0, subset_neg_nvlinks_ = 0;  // the chosen subset's, for Assign
  std::vector<int> sfx_max_, sfx_sum_, extra_rank_;
  std::vector<std::pair<int, int>> per_gpu_best_;
  std::vector<std::array<int, kRanks>> bucket_hist_;
  std::vector<int> prefix_, group_count_;
  std::vector<int> contrib_;
  std::vector<int> to_chosen_;  // per candidate: NVLinks to the chosen GPUs
  std::vector<std::pair<int, int>> dp_, next_;
  bool target_mode_ = false;  // best_ is the known optimum; the subset search looks for it
  bool found_ = false;        // target mode: the first subset reaching best_ is in best_subset_
  bool have_best_ = false;
  Value best_;
  std::vector<int> best_subset_, best_nics_, assignment_;
  int mw_best_ = kNoEdge, mw_floor_ = 0;
};

}  // namespace toposched::whole_search
