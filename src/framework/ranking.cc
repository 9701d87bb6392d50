#include "toposched/framework/ranking.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace toposched::framework {

void CapacityBand::Offer(int total, int capacity, bool reserved) {
  Tier& tier = tiers_[reserved ? 1 : 0];
  tier.offered = true;
  tier.best = std::max(tier.best, capacity);
  int& top = tier.top_total[static_cast<std::size_t>(std::clamp(capacity, -1, kMaxScore) + 1)];
  top = std::max(top, std::clamp(total, kMinScore, kMaxScore));
  tier.top_in_band = -2;
}

int CapacityBand::TopInBand(const Tier& tier) const {
  if (tier.top_in_band != -2) return tier.top_in_band;
  int top = tier.top_total[0];  // nodes without a capacity score are always in the band
  const int lowest = band_ < 0 ? 0 : std::max(0, tier.best - band_);
  for (int c = lowest; c <= kMaxScore; ++c)
    top = std::max(top, tier.top_total[static_cast<std::size_t>(c + 1)]);
  tier.top_in_band = top;
  return top;
}

bool CapacityBand::InTier(const Tier& tier, int capacity) const {
  return band_ < 0 || capacity < 0 || capacity >= tier.best - band_;
}

bool CapacityBand::In(int capacity, bool reserved) const {
  if (reserved && tiers_[0].offered) return false;
  return InTier(TierOf(reserved), capacity);
}

bool CapacityBand::Ahead(const NodeScore& a, const NodeScore& b) const {
  if (a.reserved != b.reserved) return !a.reserved;
  const Tier& tier = TierOf(a.reserved);
  const bool ia = InTier(tier, a.capacity), ib = InTier(tier, b.capacity);
  if (ia != ib) return ia;
  if (a.total != b.total) return a.total > b.total;
  return a.capacity > b.capacity;
}

int CapacityBand::ExtenderScore(int total, int capacity, bool reserved) const {
  if (!In(capacity, reserved)) return 0;
  const int top = TopInBand(TierOf(reserved));
  const int clamped = std::clamp(total, kMinScore, kMaxScore);
  // An offer of this score raises top to at least total; a score never offered is compared
  // against the offers alone (and is capped at 10).
  if (top <= 0) return std::max(1, ToExtenderScore(clamped));
  // The best in-band total gets 10 and each total point below it one less, down to 1.
  return std::clamp(kMaxExtenderScore - (top - clamped), 1, kMaxExtenderScore);
}
RareClass::RareClass(const Framework& framework, const PlacementRequest& request,
                     const packing::ShapeMix* mix, const packing::HardwareCensus& census,
                     const PoolNodes& pool_nodes)
    : vendor_(request.vendor) {
  if (!framework.RareClassLast() || mix == nullptr || request.rdma_nics <= 0) return;
  rare_ = packing::RareShape(*mix, packing::ShapeOf(request), request.vendor, census);
  if (rare_ && !request.pool.empty() && pool_nodes) pool_nodes_ = pool_nodes();
}

bool RareClass::HostsRare(const packing::NodeHardware& hardware) const {
  return rare_ && packing::HostsWhenEmpty(hardware, vendor_, *rare_);
}

bool RareClass::RunsThePool(std::string_view name) const {
  return pool_nodes_ != nullptr && std::binary_search(pool_nodes_->begin(), pool_nodes_->end(), name);
}

std::shared_ptr<const std::vector<std::string>> PoolNodesOf(std::span<const PoolMember> members) {
  auto nodes = std::make_shared<std::vector<std::string>>();
  nodes->reserve(members.size());
  for (const PoolMember& m : members) nodes->push_back(m.node);
  std::sort(nodes->begin(), nodes->end());
  nodes->erase(std::unique(nodes->begin(), nodes->end()), nodes->end());
  return nodes;
}

RemnantTie::RemnantTie(const Framework& framework, const PlacementRequest& request, Count count)
    : applies_(framework.EvenRemnants() && request.IsShared() && request.shared.count == 1),
      milli_(applies_ ? packing::ShapeOf(request).milli : 0),
      count_(std::move(count)) {}

long RemnantTie::Rank(int share_left) {
  if (!applies_ || share_left < 0) return 0;
  if (counts_ == nullptr) counts_ = count_();
  return counts_->TieRank(share_left, milli_);
}

int ShareLeft(const CycleState& cycle, const NodeInfo& node, const Placement& placement) {
  if (placement.gpus.size() != 1 || cycle.share_packing().mix == nullptr || node.topology == nullptr)
    return -1;
  return packing::MilliLeft(*node.topology, node.allocated, placement.gpus[0]);
}

void CountRemnantsOf(const NodeTopology* topology, const NodeAllocation& allocated, bool takes_pods,
                     GpuVendor vendor, packing::RemnantCounts& counts) {
  if (!takes_pods || topology == nullptr) return;
  counts.Add(*topology, allocated, vendor);
}

void CountRemnantsOf(const NodeInfo& node, GpuVendor vendor, packing::RemnantCounts& counts) {
  CountRemnantsOf(node.topology.get(), node.allocated, node.schedulable && !node.held, vendor, counts);
}

double IdleGpuShare(const packing::NodeHardware& hardware,
                    const std::array<int, kGpuVendors>& free_by_vendor) {
  int total = 0, free = 0;
  for (std::size_t v = 0; v < hardware.gpus.size(); ++v) {
    total += hardware.gpus[v];
    free += free_by_vendor[v];
  }
  return total > 0 ? static_cast<double>(free) / total : 0.0;
}

int CpuPodScore(int band_score, double idle) {
  if (idle < 0) return kMaxExtenderScore;
  if (band_score <= 0) return 0;
  const auto penalty = static_cast<int>(std::lround(idle * kMaxExtenderScore / 2));
  return std::max(1, band_score - penalty);
}

void RankBestFirst(std::vector<RankedNode>& nodes, const CapacityBand& band, RemnantTie& remnants,
                   bool cpu_pod) {
  if (cpu_pod) {
    // As prioritize scores such a pod, and PreferOneOfTheBest keeps one of the best (TieKey:
    // the higher capacity, then the stable order; a pod asking no GPU has no remnant rank).
    auto wire = [&band](const RankedNode& n) {
      return CpuPodScore(band.ExtenderScore(n.score), n.idle_gpus);
    };
    std::sort(nodes.begin(), nodes.end(), [&wire](const RankedNode& a, const RankedNode& b) {
      const int wa = wire(a), wb = wire(b);
      if (wa != wb) return wa > wb;
      return TieKeyOf(a.score.capacity, 0, a.order_key) < TieKeyOf(b.score.capacity, 0, b.order_key);
    });
    return;
  }
  std::sort(nodes.begin(), nodes.end(), [&band](const RankedNode& a, const RankedNode& b) {
    if (band.Ahead(a.score, b.score)) return true;
    if (band.Ahead(b.score, a.score)) return false;
    return a.order_key < b.order_key;
  });
  if (!remnants.on()) return;
  std::size_t tied = nodes.empty() ? 0 : 1;
  while (tied < nodes.size() && !band.Ahead(nodes[0].score, nodes[tied].score)) ++tied;
  if (tied < 2) return;
  std::vector<std::pair<long, std::size_t>> ranks;  // (remnant rank, place in the order)
  ranks.reserve(tied);
  for (std::size_t k = 0; k < tied; ++k) ranks.emplace_back(remnants.Rank(nodes[k].share_left), k);
  std::sort(ranks.begin(), ranks.end());
  std::vector<RankedNode> best;
  best.reserve(tied);
  for (const auto& [rank, k] : ranks) best.push_back(std::move(nodes[k]));
  std::move(best.begin(), best.end(), nodes.begin());
}

}  // namespace toposched::framework
