// The placement engine: exact GPU+NIC choice on one node.
//
// What it computes (free devices, switch groups, the cost and its tie-breaks, alignment bounds,
// failures, shared requests) and how it searches are specified once, in docs/placement.md
// ("The engine", the SEMANTICS block); the brute-force reference (brute_force.cc) implements
// the same definitions from scratch and the PlacementEngine*EqualsBruteForce* tests hold the
// two equal.

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

namespace toposched {

namespace {

using placement_internal::kNoEdge;
using placement_internal::SwitchGroups;
using placement_internal::WholeChoice;

std::size_t Idx(int i) {
  return static_cast<std::size_t>(i);
}

// The searched value: the cost, then the extra NICs' rank sum (n > g).
struct Value {
  PlacementCost cost;
  int extra = 0;
  auto operator<=>(const Value&) const = default;
};

int Pairs(int k) {
  return k * (k - 1) / 2;
}

// One whole request on one node: candidates, their ranks, and the searches over them.
class WholeSearch {
 public:
  WholeSearch(const NodeTopology& t, const NodeAllocation& a, const SwitchGroups& groups,
              const PlacementRequest& r, bool bounded)
      : g_(r.gpus), n_(r.rdma_nics), pack_sign_(placement_internal::WholePackSign(r)) {
    cap_ = n_ == 0 ? 0 : (n_ >= g_ ? 1 : (g_ + n_ - 1) / n_);
    all_serve_ = n_ > 0 && n_ <= g_;
    const int rdma = t.RdmaNicCount();
    for (int j = 0; j < rdma; ++j) {
      if (RdmaNicFree(t, a, j)) nic_.push_back(j);
    }
    nn_ = static_cast<int>(nic_.size());
    const bool has_bound = bounded && r.max_gpu_nic_class.has_value();
    const LinkClass bound = has_bound ? *r.max_gpu_nic_class : LinkClass::kSYS;
    std::vector<int> rank_row(Idx(nn_)), raw_row(Idx(nn_));
    for (std::size_t i = 0; i < t.gpus.size(); ++i) {
      const int gpu = static_cast<int>(i);
      if (g_ == 0) break;  // NIC-only: no GPU candidates
      if (t.gpus[i].vendor != r.vendor || !t.gpus[i].unusable.empty() || !GpuFree(a, gpu)) {
        continue;
      }
      int best = kNoEdge;
      for (int q = 0; q < nn_; ++q) {
        const int nic = nic_[Idx(q)];
        raw_row[Idx(q)] = placement_internal::GpuNicRank(t, gpu, nic);
        const LinkClass cls = placement_internal::GpuNicClass(t, gpu, nic);
        rank_row[Idx(q)] = has_bound && cls > bound ? kNoEdge : raw_row[Idx(q)];
        best = std::min(best, rank_row[Idx(q)]);
      }
      if (g_ > 0 && n_ > 0 && best == kNoEdge) continue;  // cannot be served within the bound
      gpu_.push_back(gpu);
      gpu_best_.push_back(n_ > 0 ? best : 0);
      rank_.insert(rank_.end(), rank_row.begin(), rank_row.end());
      raw_.insert(raw_.end(), raw_row.begin(), raw_row.end());
    }
    ng_ = static_cast<int>(gpu_.size());
    nic_best_raw_.assign(Idx(nn_), kNoEdge);
    for (int p = 0; p < ng_; ++p) {
      for (int q = 0; q < nn_; ++q) nic_best_raw_[Idx(q)] = std::min(nic_best_raw_[Idx(q)], Raw(p, q));
    }
    // Only groups intact before the choice can change the cost; they get compact ids.
    std::vector<int> compact(groups.intact_before.size(), -1);
    for (std::size_t k = 0; k < groups.intact_before.size(); ++k) {
      if (groups.intact_before[k]) compact[k] = intact_++;
    }
    auto compact_of = [&](int group) { return group < 0 ? -1 : compact[Idx(group)]; };
    for (int gpu : gpu_) gpu_group_.push_back(compact_of(groups.of_gpu[Idx(gpu)]));
    for (int nic : nic_) nic_group_.push_back(compact_of(groups.of_nic[Idx(nic)]));
    touch_.assign(Idx(intact_), 0);
    gg_.assign(Idx(ng_ * ng_), 0);
    nv_.assign(Idx(ng_ * ng_), 0);
    for (int p = 0; p < ng_; ++p) {
      for (int x = p + 1; x < ng_; ++x) {
        const int rank = placement_internal::GpuGpuRank(t, gpu_[Idx(p)], gpu_[Idx(x)]);
        const int links = placement_internal::NvlinkCount(t, gpu_[Idx(p)], gpu_[Idx(x)]);
        gg_[Idx(p * ng_ + x)] = gg_[Idx(x * ng_ + p)] = rank;
        nv_[Idx(p * ng_ + x)] = nv_[Idx(x * ng_ + p)] = links;
        max_nv_ = std::max(max_nv_, links);
      }
    }
    // top_links_[x][m]: the m largest link counts of GPU x to the others, summed.
    top_links_.assign(Idx(ng_ * ng_), 0);
    for (int x = 0; x < ng_; ++x) {
      std::vector<int> links;
      for (int y = 0; y < ng_; ++y) {
        if (y != x) links.push_back(nv_[Idx(x * ng_ + y)]);
      }
      std::sort(links.begin(), links.end(), std::greater<>());
      for (int m = 1; m < ng_; ++m)
        top_links_[Idx(x * ng_ + m)] = top_links_[Idx(x * ng_ + m - 1)] + links[Idx(m - 1)];
    }
    to_chosen_.assign(Idx(ng_), 0);
    suffix_hist_.assign(Idx(ng_ + 1), {});
    for (int p = ng_ - 1; p >= 0; --p) {
      suffix_hist_[Idx(p)] = suffix_hist_[Idx(p + 1)];
      ++suffix_hist_[Idx(p)][Idx(gpu_best_[Idx(p)])];
    }
    nic_order_.resize(Idx(ng_));
    for (int p = 0; p < ng_; ++p) {
      for (int q = 0; q < nn_; ++q) {
        if (Rank(p, q) != kNoEdge) nic_order_[Idx(p)].push_back(q);
      }
      std::stable_sort(nic_order_[Idx(p)].begin(), nic_order_[Idx(p)].end(),
                       [&](int a1, int b1) { return Rank(p, a1) < Rank(p, b1); });
    }
    hall_ = n_ > 0 && nn_ <= 64;
    if (hall_) {
      nic_mask_.assign(Idx(ng_ * kRanks), 0);
      for (int p = 0; p < ng_; ++p) {
        for (int q = 0; q < nn_; ++q) {
          for (int rk = Rank(p, q); rk < kRanks; ++rk)
            nic_mask_[Idx(p * kRanks + rk)] |= std::uint64_t{1} << q;
        }
      }
    }
    load_.assign(Idx(nn_), 0);
    extra_rank_.assign(Idx(nn_), 0);
  }

  // The optimum under the full order, or nothing when no set satisfies the alignment bound.
  std::optional<WholeChoice> Solve() {
    if (g_ == 0) return SolveNicOnly();
    if (n_ > 0) {
      // Pass 1: with NICs the lexicographic subset search runs against the exact optimal value,
      // found first; on its own it would start from poor incumbents.
      Joint(0, 0, 0, 0, 0, 0);
      if (!have_best_) return std::nullopt;
      target_mode_ = true;
    }
    Outer(0, Reach{}, 0, 0);  // pass 2 (GPU-only requests: the whole optimisation)
    if (!have_best_ || (target_mode_ && !found_)) return std::nullopt;
    WholeChoice c;
    c.cost = best_.cost;
    for (int p : best_subset_) c.gpus.push_back(gpu_[Idx(p)]);
    if (n_ == 0) return c;
    // Pass 3: the first NIC set (then assignment) in lexicographic order reaching best_.
    subset_ = best_subset_;
    PrepareSubset();
    for (int p : subset_) Touch(gpu_group_[Idx(p)]);
    std::vector<int> chosen;
    if (!FirstNicSet(0, chosen)) return std::nullopt;  // unreachable: best_ was reached by some set
    for (int q : chosen) c.nics.push_back(nic_[Idx(q)]);
    for (int q : assignment_) c.nic_of_gpu.push_back(nic_[Idx(q)]);
    return c;
  }

  // The least worst_gpu_nic over every feasible choice (0 without pairs).
  int MinWorst() {
    if (g_ == 0 || n_ == 0) return 0;
    if (ng_ < g_) return 0;  // cannot happen on an empty node the request fits
    mw_floor_ = SuffixSmallest(0, g_).first;
    mw_best_ = kNoEdge;
    MinWorstSearch(0, 0, 0, 0);
    return mw_best_ == kNoEdge ? 0 : mw_best_;
  }

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
  void Outer(int i, const Reach& reach, int gg, int nv) {
    if (found_ && target_mode_) return;
    const int k = static_cast<int>(subset_.size());
    const int r = g_ - k;
    if (ng_ - i < r) return;
    const auto [chosen_worst, chosen_sum] = ChosenBound(reach, k);
    if (chosen_worst == kNoEdge) return;  // the chosen GPUs cannot all be served
    const auto [rest_worst, rest_sum] = SuffixSmallest(i, r);
    const int nv_bound = nv - max_nv_ * (Pairs(g_) - Pairs(k));
    const int wl = std::max(chosen_worst, rest_worst), sl = chosen_sum + rest_sum;
    const int newly = newly_ + GroupBound(i, r);
    if (Cut(Lower(wl, sl, gg, nv_bound, newly))) return;
    // The cheap NVLink bound assumes every remaining pair fully linked; when that is all that
    // keeps this branch alive (ties on the GPU->NIC ranks), count the links the rest can add.
    if (have_best_ && r > 0 && max_nv_ > 0 && Cut(Lower(wl, sl, gg, nv - MaxAddedLinks(i, r), newly))) return;
    if (r == 0) {
      Evaluate(gg, nv);
      return;
    }
    int gg_in = gg, nv_in = nv;
    for (int x : subset_) {
      gg_in = std::max(gg_in, gg_[Idx(i * ng_ + x)]);
      nv_in -= nv_[Idx(i * ng_ + x)];
    }
    Reach with = reach;
    for (int t = 0; t < kRanks; ++t) {
      if (gpu_best_[Idx(i)] > t) continue;
      ++with.gpus[Idx(t)];
      if (hall_) with.nics[Idx(t)] |= nic_mask_[Idx(i * kRanks + t)];
    }
    Push(i);
    Outer(i + 1, with, gg_in, nv_in);
    Pop();
    Outer(i + 1, reach, gg, nv);
  }

  // Lower bounds on the worst and the sum of the chosen GPUs' pair ranks. Within rank t at most
  // the chosen GPUs having a NIC within t are served, and (Hall) at most cap times the NICs within
  // t of some chosen GPU; the sum of ranks is the sum over t of the GPUs served above t.
  // {kNoEdge, kNoEdge} when even all ranks cannot serve them.
  std::pair<int, int> ChosenBound(const Reach& reach, int k) const {
    if (k == 0 || n_ == 0) return {0, 0};
    int worst = kNoEdge, sum = 0;
    for (int t = 0; t < kRanks; ++t) {
      int served = reach.gpus[Idx(t)];
      if (hall_) served = std::min(served, cap_ * std::popcount(reach.nics[Idx(t)]));
      sum += k - served;
      if (worst == kNoEdge && served >= k) worst = t;
    }
    if (worst == kNoEdge) return {kNoEdge, kNoEdge};
    return {worst, sum};
  }

  // An upper bound on the NVLinks that r more GPUs from candidates p >= i add: each candidate x
  // adds its links to the chosen GPUs plus half its r - 1 best links (every new pair is counted
  // from both ends); the r best candidates bound the total.
  int MaxAddedLinks(int i, int r) {
    contrib_.clear();
    const int within = std::min(r - 1, ng_ - 1);
    for (int x = i; x < ng_; ++x)
      contrib_.push_back(2 * to_chosen_[Idx(x)] + top_links_[Idx(x * ng_ + within)]);
    const auto take = static_cast<std::ptrdiff_t>(std::min(contrib_.size(), Idx(r)));
    std::nth_element(contrib_.begin(), contrib_.begin() + take - 1, contrib_.end(), std::greater<>());
    int doubled = 0;
    for (std::ptrdiff_t k = 0; k < take; ++k) doubled += contrib_[Idx(static_cast<int>(k))];
    return doubled / 2;
  }

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

  void Evaluate(int gg, int nv) {
    if (n_ == 0) {
      const Value v = Make(0, 0, gg, nv, newly_, 0);
      if (!have_best_ || v < best_) Record(v);
      return;
    }
    PrepareSubset();
    subset_worst_gpu_gpu_ = gg;
    subset_neg_nvlinks_ = nv;
    Assign(0, 0, 0, 0);
    if (found_) best_subset_ = subset_;
  }

  // Cuts a branch whose lower bound cannot beat the incumbent (subsets come in lexicographic
  // order, so a tie loses) or, against a known target, cannot reach it.
  bool Cut(const Value& lower) const { return target_mode_ ? lower > best_ : have_best_ && lower >= best_; }

  // Pass 1: the optimal value, depth-first over GPUs and the NIC of each chosen one (best rank
  // first). Only the value is kept, so ties are cut whatever their order.
  void Joint(int i, int distinct, int worst, int sum, int gg, int nv) {
    const int k = static_cast<int>(subset_.size());
    const int r = g_ - k;
    if (ng_ - i < r) return;
    if (r == 0) {
      if (all_serve_ && distinct != n_) return;
      int newly = newly_, extra = 0;
      if (n_ > g_) {
        ExtraRanks();
        const auto [more, ranks] = BestExtras();
        newly += more;
        extra = ranks;
      }
      const Value v = Make(worst, sum, gg, nv, newly, extra);
      if (!have_best_ || v < best_) {
        best_ = v;
        have_best_ = true;
      }
      return;
    }
    const auto [rest_worst, rest_sum] = RestBound(i, r, distinct);
    if (rest_worst == kNoEdge) return;
    const int wl = std::max(worst, rest_worst), sl = sum + rest_sum;
    if (have_best_) {
      const int extra = ExtraBound(nic_best_raw_);
      const int newly = newly_ + GroupBound(i, r);
      if (Lower(wl, sl, gg, nv - max_nv_ * (Pairs(g_) - Pairs(k)), newly, extra) >= best_) return;
      if (max_nv_ > 0 && Lower(wl, sl, gg, nv - MaxAddedLinks(i, r), newly, extra) >= best_) return;
    }
    int gg_in = gg, nv_in = nv;
    for (int x : subset_) {
      gg_in = std::max(gg_in, gg_[Idx(i * ng_ + x)]);
      nv_in -= nv_[Idx(i * ng_ + x)];
    }
    // A bound for every NIC of the loop below (so that the loop may stop at the first one past
    // the incumbent): a new NIC can only widen the restricted set.
    const auto [after_worst, after_sum] = RestBound(i + 1, r - 1, distinct);
    Push(i);
    for (int q : nic_order_[Idx(i)]) {
      const int rank = Rank(i, q);
      if (have_best_ && std::pair(std::max({worst, rank, after_worst}), sum + rank + after_sum) >
                            std::pair(best_.cost.worst_gpu_nic, best_.cost.sum_gpu_nic)) {
        break;  // NICs come best rank first
      }
      if (load_[Idx(q)] >= cap_) continue;
      const bool fresh = load_[Idx(q)] == 0;
      if (fresh && all_serve_ && distinct >= n_) continue;
      const int nd = distinct + (fresh ? 1 : 0);
      if (all_serve_ && n_ - nd > r - 1) continue;
      Load(q);
      if (fresh) Touch(nic_group_[Idx(q)]);
      Joint(i + 1, nd, std::max(worst, rank), sum + rank, gg_in, nv_in);
      if (fresh) Untouch(nic_group_[Idx(q)]);
      Unload(q);
    }
    Pop();
    Joint(i + 1, distinct, worst, sum, gg, nv);
  }

  void Record(const Value& v) {
    best_ = v;
    have_best_ = true;
    best_subset_ = subset_;
  }

  // Per-subset tables: suffix bounds of the best ranks in subset order and, for extra NICs, each
  // NIC's best rank to the subset.
  void PrepareSubset() {
    sfx_max_.assign(Idx(g_ + 1), 0);
    sfx_sum_.assign(Idx(g_ + 1), 0);
    for (int idx = g_ - 1; idx >= 0; --idx) {
      const int b = gpu_best_[Idx(subset_[Idx(idx)])];
      sfx_max_[Idx(idx)] = std::max(sfx_max_[Idx(idx + 1)], b);
      sfx_sum_[Idx(idx)] = sfx_sum_[Idx(idx + 1)] + b;
    }
    if (n_ > g_) ExtraRanks();
  }

  // Each NIC's best rank to the subset: what it adds to the sum when it is an extra NIC.
  void ExtraRanks() {
    for (int q = 0; q < nn_; ++q) {
      int e = kNoEdge;
      for (int p : subset_) e = std::min(e, Raw(p, q));
      extra_rank_[Idx(q)] = e;
    }
  }

  // Pass 2's inner search for one subset: a NIC per GPU, best rank first, until an assignment
  // reaches the target value best_.
  void Assign(int idx, int distinct, int worst, int sum) {
    if (found_) return;
    int wl = std::max(worst, sfx_max_[Idx(idx)]);
    int sl = sum + sfx_sum_[Idx(idx)];
    if (AllNicsInUse(distinct)) {
      wl = worst;
      sl = sum;
      for (int rest = idx; rest < g_; ++rest) {
        const int b = RestrictedBest(subset_[Idx(rest)]);
        if (b == kNoEdge) return;
        wl = std::max(wl, b);
        sl += b;
      }
    }
    if (Lower(wl, sl, subset_worst_gpu_gpu_, subset_neg_nvlinks_, newly_, ExtraBound(extra_rank_)) > best_)
      return;
    if (idx == g_) {
      if (all_serve_ && distinct != n_) return;
      int newly = newly_, extra = 0;
      if (n_ > g_) {
        const auto [more, ranks] = BestExtras();
        newly += more;
        extra = ranks;
      }
      if (Make(worst, sum, subset_worst_gpu_gpu_, subset_neg_nvlinks_, newly, extra) == best_) found_ = true;
      return;
    }
    const int p = subset_[Idx(idx)];
    for (int q : nic_order_[Idx(p)]) {
      const int rank = Rank(p, q);
      // NICs come best rank first: once (worst, sum) passes the target, so do the rest.
      const int cw = std::max({worst, rank, sfx_max_[Idx(idx + 1)]});
      const int cs = sum + rank + sfx_sum_[Idx(idx + 1)];
      if (std::pair(cw, cs) > std::pair(best_.cost.worst_gpu_nic, best_.cost.sum_gpu_nic)) break;
      if (load_[Idx(q)] >= cap_) continue;
      const bool fresh = load_[Idx(q)] == 0;
      if (fresh && all_serve_ && distinct >= n_) continue;
      const int nd = distinct + (fresh ? 1 : 0);
      if (all_serve_ && n_ - nd > g_ - idx - 1) continue;
      Load(q);
      if (fresh) Touch(nic_group_[Idx(q)]);
      Assign(idx + 1, nd, std::max(worst, rank), sum + rank);
      if (fresh) Untouch(nic_group_[Idx(q)]);
      Unload(q);
    }
  }

  // The n - g extra NICs among the unused free ones: fewest newly broken groups, then the least
  // rank sum. Exact: a knapsack over groups, since a group costs 1 however many NICs it gives.
  std::pair<int, int> BestExtras() {
    const int k = n_ - g_;
    constexpr std::pair<int, int> kInf{INT_MAX / 2, INT_MAX / 2};
    // Bucket `intact_` holds the NICs that open no group; each other bucket one untouched group.
    bucket_hist_.assign(Idx(intact_ + 1), {});
    for (int q = 0; q < nn_; ++q) {
      if (load_[Idx(q)] != 0) continue;
      const int group = nic_group_[Idx(q)];
      const int b = group >= 0 && touch_[Idx(group)] == 0 ? group : intact_;
      ++bucket_hist_[Idx(b)][Idx(extra_rank_[Idx(q)])];
    }
    dp_.assign(Idx(k + 1), kInf);
    dp_[0] = {0, 0};
    prefix_.resize(Idx(k + 1));
    for (int b = 0; b <= intact_; ++b) {
      const std::array<int, kRanks>& hist = bucket_hist_[Idx(b)];
      int m = 0;  // prefix_[t]: the t best ranks of the bucket, summed
      prefix_[0] = 0;
      for (int t = 0; t < kRanks; ++t) {
        for (int c = 0; c < hist[Idx(t)] && m < k; ++c, ++m) prefix_[Idx(m + 1)] = prefix_[Idx(m)] + t;
      }
      if (m == 0) continue;
      const int open = b == intact_ ? 0 : 1;
      next_ = dp_;
      for (int c = 0; c < k; ++c) {
        if (dp_[Idx(c)] == kInf) continue;
        for (int t = 1; t <= m && c + t <= k; ++t) {
          next_[Idx(c + t)] = std::min(
              next_[Idx(c + t)], std::pair(dp_[Idx(c)].first + open, dp_[Idx(c)].second + prefix_[Idx(t)]));
        }
      }
      dp_.swap(next_);
    }
    return dp_[Idx(k)];
  }

  // A bound on the intact groups that r more GPUs from candidates p >= i must open: candidates
  // under no group or in a group already touched open none; otherwise the fullest groups first.
  int GroupBound(int i, int r) {
    if (r == 0 || intact_ == 0) return 0;
    group_count_.assign(Idx(intact_), 0);
    int free = 0;
    for (int p = i; p < ng_; ++p) {
      const int group = gpu_group_[Idx(p)];
      if (group < 0 || touch_[Idx(group)] > 0) {
        ++free;
      } else {
        ++group_count_[Idx(group)];
      }
    }
    if (free >= r) return 0;
    std::sort(group_count_.begin(), group_count_.end(), std::greater<>());
    int opened = 0;
    for (int c : group_count_) {
      if (free >= r || c == 0) break;
      free += c;
      ++opened;
    }
    return opened;
  }

  // Pass 3 over NIC sets in lexicographic order for subset_: the first one with an
  // assignment of value best_.
  bool FirstNicSet(int q, std::vector<int>& chosen) {
    const int need = n_ - static_cast<int>(chosen.size());
    if (nn_ - q < need) return false;
    int worst = 0, sum = 0;
    for (int p : subset_) {
      int b = kNoEdge;
      for (int c : chosen) b = std::min(b, Rank(p, c));
      if (need > 0) {
        for (int r = q; r < nn_; ++r) b = std::min(b, Rank(p, r));
      }
      if (b == kNoEdge) return false;
      worst = std::max(worst, b);
      sum += b;
    }
    if (Lower(worst, sum, best_.cost.worst_gpu_gpu, best_.cost.neg_nvlinks, newly_) > best_) return false;
    if (need == 0) {
      per_gpu_best_.assign(Idx(g_ + 1), {0, 0});
      for (int idx = g_ - 1; idx >= 0; --idx) {
        int b = kNoEdge;
        for (int c : chosen) b = std::min(b, Rank(subset_[Idx(idx)], c));
        per_gpu_best_[Idx(idx)] = {std::max(per_gpu_best_[Idx(idx + 1)].first, b),
                                   per_gpu_best_[Idx(idx + 1)].second + b};
      }
      assignment_.assign(Idx(g_), -1);
      return AssignFirst(chosen, 0, 0, 0, 0);
    }
    bool can_serve = !all_serve_;
    for (int p : subset_) can_serve = can_serve || Rank(p, q) != kNoEdge;
    if (can_serve) {
      chosen.push_back(q);
      Touch(nic_group_[Idx(q)]);
      if (FirstNicSet(q + 1, chosen)) return true;
      Untouch(nic_group_[Idx(q)]);
      chosen.pop_back();
    }
    return FirstNicSet(q + 1, chosen);
  }

  // The first assignment, in GPU order with NICs ascending, of value best_ on the NIC set.
  bool AssignFirst(const std::vector<int>& nics, int idx, int distinct, int worst, int sum) {
    const int wl = std::max(worst, per_gpu_best_[Idx(idx)].first);
    const int sl = sum + per_gpu_best_[Idx(idx)].second;
    if (std::pair(wl, sl) > std::pair(best_.cost.worst_gpu_nic, best_.cost.sum_gpu_nic)) return false;
    if (idx == g_) {
      if (all_serve_ && distinct != n_) return false;
      int extra = 0;
      for (int q : nics) extra += load_[Idx(q)] == 0 ? extra_rank_[Idx(q)] : 0;
      return Make(worst, sum, best_.cost.worst_gpu_gpu, best_.cost.neg_nvlinks, newly_, extra) == best_;
    }
    const int p = subset_[Idx(idx)];
    for (int q : nics) {
      const int rank = Rank(p, q);
      if (rank == kNoEdge || load_[Idx(q)] >= cap_) continue;
      const bool fresh = load_[Idx(q)] == 0;
      if (fresh && all_serve_ && distinct >= n_) continue;
      const int nd = distinct + (fresh ? 1 : 0);
      if (all_serve_ && n_ - nd > g_ - idx - 1) continue;
      Load(q);
      assignment_[Idx(idx)] = q;
      const bool ok = AssignFirst(nics, idx + 1, nd, std::max(worst, rank), sum + rank);
      Unload(q);
      if (ok) return true;
    }
    return false;
  }

  // NIC-only pods: NIC sets in lexicographic order, fewest newly broken groups.
  std::optional<WholeChoice> SolveNicOnly() {
    std::vector<int> chosen;
    NicOnly(0, chosen);
    if (!have_best_) return std::nullopt;
    WholeChoice c;
    c.cost = best_.cost;
    for (int q : best_nics_) c.nics.push_back(nic_[Idx(q)]);
    return c;
  }

  void NicOnly(int q, std::vector<int>& chosen) {
    const int need = n_ - static_cast<int>(chosen.size());
    if (nn_ - q < need) return;
    const Value v = Make(0, 0, 0, 0, newly_, 0);
    if (have_best_ && v >= best_) return;  // newly_ only grows: v bounds every completion
    if (need == 0) {
      best_ = v;  // beats best_: ties were cut above
      have_best_ = true;
      best_nics_ = chosen;
      return;
    }
    chosen.push_back(q);
    Touch(nic_group_[Idx(q)]);
    NicOnly(q + 1, chosen);
    Untouch(nic_group_[Idx(q)]);
    chosen.pop_back();
    NicOnly(q + 1, chosen);
  }

  // Depth-first over GPUs and their NICs for the least worst rank; stops at the lower bound.
  void MinWorstSearch(int i, int k, int distinct, int worst) {
    if (mw_best_ == mw_floor_) return;
    const int r = g_ - k;
    if (r == 0) {
      if (!all_serve_ || distinct == n_) mw_best_ = std::min(mw_best_, worst);
      return;
    }
    if (ng_ - i < r) return;
    if (std::max(worst, RestBound(i, r, distinct).first) >= mw_best_) return;
    for (int q : nic_order_[Idx(i)]) {
      const int rank = Rank(i, q);
      if (std::max(worst, rank) >= mw_best_) break;
      if (load_[Idx(q)] >= cap_) continue;
      const bool fresh = load_[Idx(q)] == 0;
      if (fresh && all_serve_ && distinct >= n_) continue;
      const int nd = distinct + (fresh ? 1 : 0);
      if (all_serve_ && n_ - nd > r - 1) continue;
      Load(q);
      MinWorstSearch(i + 1, k + 1, nd, std::max(worst, rank));
      Unload(q);
    }
    MinWorstSearch(i + 1, k, distinct, worst);
  }

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
  std::vector<int> touch_;       // per intact-before group: chosen devices in it
  int newly_ = 0;                // intact-before groups touched
  std::vector<int> subset_;      // chosen subset (candidate positions)
  std::vector<int> load_;        // per NIC: GPUs it serves
  std::uint64_t used_mask_ = 0;  // NICs with a load (when hall_)
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
