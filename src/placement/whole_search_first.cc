// WholeSearch's first-in-order choices, once the optimal value is known: pass 3 (the first NIC
// set in lexicographic order, then the first assignment in GPU order, that reaches the value
// passes 1 and 2 found), NIC-only requests (NIC sets in lexicographic order, fewest newly broken
// switch groups), and MinWorst's search (the least worst GPU->NIC rank any choice can have, which
// the Placement reports next to its own).

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

#include "engine_internal.h"
#include "whole_search.h"

namespace toposched::whole_search {

bool WholeSearch::FirstNicSet(int q, std::vector<int>& chosen) {
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

bool WholeSearch::AssignFirst(const std::vector<int>& nics, int idx, int distinct, int worst, int sum) {
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

std::optional<WholeChoice> WholeSearch::SolveNicOnly() {
  std::vector<int> chosen;
  NicOnly(0, chosen);
  if (!have_best_) return std::nullopt;
  WholeChoice c;
  c.cost = best_.cost;
  for (int q : best_nics_) c.nics.push_back(nic_[Idx(q)]);
  return c;
}

void WholeSearch::NicOnly(int q, std::vector<int>& chosen) {
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

void WholeSearch::MinWorstSearch(int i, int k, int distinct, int worst) {
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

}  // namespace toposched::whole_search
