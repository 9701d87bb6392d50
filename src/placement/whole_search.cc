// WholeSearch's candidate tables and its optimum: the constructor ranks every free GPU against
// every free RDMA NIC (within the alignment bound), builds the GPU pair, NVLink and switch-group
// tables the bounds read, and Solve runs pass 1 (the optimal value, depth-first over GPUs and
// their NICs) and pass 2 (GPU subsets in lexicographic order, with the inner NIC assignment and
// the extra-NIC knapsack) before handing the winning subset to pass 3 (whole_search_first.cc).
// The order searched and the bounds are specified in docs/placement.md ("The engine").

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "engine_internal.h"
#include "toposched/placement/placement.h"
#include "whole_search.h"

namespace toposched::whole_search {

WholeSearch::WholeSearch(const NodeTopology& t, const NodeAllocation& a, const SwitchGroups& groups,
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
        for (int rk = Rank(p, q); rk < kRanks; ++rk) nic_mask_[Idx(p * kRanks + rk)] |= std::uint64_t{1} << q;
      }
    }
  }
  load_.assign(Idx(nn_), 0);
  extra_rank_.assign(Idx(nn_), 0);
}

std::optional<WholeChoice> WholeSearch::Solve() {
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

int WholeSearch::MinWorst() {
  if (g_ == 0 || n_ == 0) return 0;
  if (ng_ < g_) return 0;  // cannot happen on an empty node the request fits
  mw_floor_ = SuffixSmallest(0, g_).first;
  mw_best_ = kNoEdge;
  MinWorstSearch(0, 0, 0, 0);
  return mw_best_ == kNoEdge ? 0 : mw_best_;
}

void WholeSearch::Outer(int i, const Reach& reach, int gg, int nv) {
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

std::pair<int, int> WholeSearch::ChosenBound(const Reach& reach, int k) const {
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

int WholeSearch::MaxAddedLinks(int i, int r) {
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

void WholeSearch::Evaluate(int gg, int nv) {
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

void WholeSearch::Joint(int i, int distinct, int worst, int sum, int gg, int nv) {
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

void WholeSearch::PrepareSubset() {
  sfx_max_.assign(Idx(g_ + 1), 0);
  sfx_sum_.assign(Idx(g_ + 1), 0);
  for (int idx = g_ - 1; idx >= 0; --idx) {
    const int b = gpu_best_[Idx(subset_[Idx(idx)])];
    sfx_max_[Idx(idx)] = std::max(sfx_max_[Idx(idx + 1)], b);
    sfx_sum_[Idx(idx)] = sfx_sum_[Idx(idx + 1)] + b;
  }
  if (n_ > g_) ExtraRanks();
}

void WholeSearch::ExtraRanks() {
  for (int q = 0; q < nn_; ++q) {
    int e = kNoEdge;
    for (int p : subset_) e = std::min(e, Raw(p, q));
    extra_rank_[Idx(q)] = e;
  }
}

void WholeSearch::Assign(int idx, int distinct, int worst, int sum) {
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

std::pair<int, int> WholeSearch::BestExtras() {
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

int WholeSearch::GroupBound(int i, int r) {
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

}  // namespace toposched::whole_search
