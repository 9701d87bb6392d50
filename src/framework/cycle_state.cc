#include "toposched/framework/cycle_state.h"

#include <algorithm>
#include <utility>

namespace toposched::framework {

CycleState::CycleState(PlacementRequest request, Placer placer)
    : request_(std::move(request)), placer_(std::move(placer)) {}
CycleState::CycleState(CycleState&&) noexcept = default;
CycleState& CycleState::operator=(CycleState&&) noexcept = default;
CycleState::~CycleState() = default;

const PlacementOutcome& CycleState::Outcome(const NodeInfo& node) {
  if (node.topology == nullptr) {
    static const PlacementOutcome kNoTopology{
        std::nullopt, FitFailure::kNone,
        "the node has published no NodeTopology (is the toposched agent running on it?)"};
    return kNoTopology;
  }
  if (node.outcome_key != 0) {
    // The topology pointer may differ within a key (each node's own, with its GPU UUIDs): the
    // key says the hardware is the same; the allocation is checked (a Reserve changes it).
    if (const auto at = by_key_.find(node.outcome_key);
        at != by_key_.end() && at->second.allocated == node.allocated) {
      return at->second.outcome;
    }
  }
  auto it = outcomes_.find(node.name);
  if (it != outcomes_.end() && it->second.topology == node.topology &&
      it->second.allocated == node.allocated) {
    return it->second.outcome;
  }
  ++placer_calls_;
  PlacementOutcome outcome =
      placer_(*node.topology, node.topology_fingerprint, node.allocated, request_, share_packing());
  if (it == outcomes_.end()) {
    it = outcomes_.emplace(node.name, CachedOutcome{}).first;
  }
  it->second.topology = node.topology;
  it->second.allocated = node.allocated;
  it->second.outcome = std::move(outcome);
  if (node.outcome_key != 0) by_key_.try_emplace(node.outcome_key, it->second);
  return it->second.outcome;
}

void CycleState::SetShapeMix(std::shared_ptr<const packing::ShapeMix> mix) {
  if (mix != mix_) mix_key_.reset();
  mix_ = std::move(mix);
}

bool CycleState::packs_by_mix_without_nics() const {
  if (!packs_for_shape_mix_ || request_.rdma_nics > 0 || mix_ == nullptr || mix_->shapes.empty())
    return false;
  return std::none_of(mix_->shapes.begin(), mix_->shapes.end(),
                      [](const auto& s) { return s.shape.nics > 0; });
}

SharePacking CycleState::share_packing() const {
  if (!request_.IsShared() || request_.shared.count != 1 ||
      request_.shared.gpu_policy != PackPolicy::kDefault || !packs_by_mix_without_nics()) {
    return {};
  }
  // Hashed once per cycle, and only for a cycle that gives it (most cycles place whole GPUs).
  if (!mix_key_) mix_key_ = packing::MixKey(*mix_);
  return {mix_.get(), *mix_key_};
}

void CycleState::Write(std::string key, std::unique_ptr<StateData> data) {
  data_.insert_or_assign(std::move(key), std::move(data));
}

StateData* CycleState::Read(std::string_view key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : it->second.get();
}

void CycleState::Erase(std::string_view key) {
  auto it = data_.find(key);
  if (it != data_.end()) data_.erase(it);
}

}  // namespace toposched::framework
