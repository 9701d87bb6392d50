#include "device_fit/device_fit.h"

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "common/plugin_util.h"
#include "toposched/framework/allocation.h"

namespace toposched::plugins::device_fit {
namespace {

using framework::AllocationDelta;
using framework::AllocationShape;
using framework::CycleState;
using framework::NodeInfo;
using framework::PluginStatus;

struct Reservation {
  AllocationDelta delta;
  AllocationShape before;  // the allocation's vector lengths before Reserve, for an exact revert
};

struct ReservedState : framework::StateData {
  std::map<std::string, Reservation, std::less<>> by_node;
};

std::string Reason(const PlacementOutcome& outcome) {
  if (!outcome.detail.empty()) return outcome.detail;
  return std::string(ToString(outcome.failure));
}

// The checks every verb makes before looking at the placement.
std::optional<PluginStatus> NodeUnusable(const NodeInfo& node) {
  if (node.topology == nullptr)
    return PluginStatus::Unresolvable(std::string(kName), std::string(kReasonNoTopology));
  if (!node.schedulable) return PluginStatus::Unresolvable(std::string(kName), std::string(kReasonCordoned));
  if (node.held) return PluginStatus::Unresolvable(std::string(kName), std::string(kReasonHeld));
  return std::nullopt;
}

}  // namespace

PluginStatus DeviceFit::Filter(CycleState& state, const NodeInfo& node) const {
  if (auto unusable = NodeUnusable(node)) return *unusable;
  const PlacementOutcome& outcome = state.Outcome(node);
  if (outcome.ok()) return PluginStatus::Success();
  if (outcome.failure == FitFailure::kRequestTooLarge) {
    return PluginStatus::Unresolvable(std::string(kName), Reason(outcome));
  }
  return PluginStatus::Unschedulable(std::string(kName), Reason(outcome));
}

PluginStatus DeviceFit::Reserve(CycleState& state, NodeInfo& node) const {
  auto* reserved = state.ReadAs<ReservedState>(kReservedStateKey);
  if (reserved != nullptr && reserved->by_node.count(node.name) > 0) return PluginStatus::Success();
  if (auto unusable = NodeUnusable(node)) return *unusable;
  // Outcome() recomputes when the allocation changed since Filter, so the placement applied here
  // refers to devices that are free now.
  const PlacementOutcome& outcome = state.Outcome(node);
  if (!outcome.ok()) {
    return outcome.failure == FitFailure::kRequestTooLarge
               ? PluginStatus::Unresolvable(std::string(kName), Reason(outcome))
               : PluginStatus::Unschedulable(std::string(kName), Reason(outcome));
  }
  Reservation reservation{framework::DeltaOf(*node.topology, state.request(), *outcome.placement),
                          framework::ShapeOf(node.allocated)};
  if (Status s = framework::ApplyDelta(*node.topology, reservation.delta, node.allocated); !s.ok()) {
    // The engine placed onto devices the allocation says are taken: an engine or cache bug.
    return PluginStatus::Error(std::string(kName),
                               "placement conflicts with the node's allocation: " + s.error().message());
  }
  if (reserved == nullptr) {
    auto fresh = std::make_unique<ReservedState>();
    reserved = fresh.get();
    state.Write(std::string(kReservedStateKey), std::move(fresh));
  }
  reserved->by_node.emplace(node.name, std::move(reservation));
  return PluginStatus::Success();
}

void DeviceFit::Unreserve(CycleState& state, NodeInfo& node) const {
  auto* reserved = state.ReadAs<ReservedState>(kReservedStateKey);
  if (reserved == nullptr) return;
  auto it = reserved->by_node.find(node.name);
  if (it == reserved->by_node.end()) return;
  framework::RevertDelta(it->second.delta, it->second.before, node.allocated);
  reserved->by_node.erase(it);
}

Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args) {
  TOPOSCHED_RETURN_IF_ERROR(RequireNoArgs(args));
  return AsPlugin(std::make_unique<DeviceFit>());
}

}  // namespace toposched::plugins::device_fit
