#pragma once
// DeviceFit: does the pod's GPU+NIC request fit on the node, and claiming the devices when it
// is reserved. The one plugin that checks capacity: every config must enable it (or another
// Filter+Reserve plugin), or two pods could be given one GPU.

#include <memory>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/plugin.h"
#include "toposched/framework/registry.h"

namespace toposched::plugins::device_fit {

inline constexpr std::string_view kName = "DeviceFit";
inline constexpr int kDefaultWeight = 1;  // no Score: the weight is unused

inline constexpr std::string_view kReasonNoTopology =
    "the node has published no NodeTopology (is the toposched agent running on it?)";
inline constexpr std::string_view kReasonCordoned = "the node is marked unschedulable";
inline constexpr std::string_view kReasonHeld =
    "a pod here holds an allocation toposched cannot read back (see its AllocationUnreadable event): no new "
    "device placements on this node until that pod is deleted or its annotation fixed";
// CycleState key of the reservations this cycle made (node name -> what was applied).
inline constexpr std::string_view kReservedStateKey = "DeviceFit/reserved";

// Filter: the engine's outcome for the node (from CycleState, computed once per node):
//   placement found        -> Success
//   kRequestTooLarge       -> UnschedulableAndUnresolvable (the node has too few devices in total)
//   any other failure      -> Unschedulable, with the engine's detail as the reason
//   no topology / cordoned -> UnschedulableAndUnresolvable
// Reserve: applies that placement to NodeInfo::allocated (whole GPUs exclusive, vGPU shares
// added, NICs used) and records what it applied; a second Reserve on the same node in the same
// cycle is a no-op. Unreserve: takes exactly the recorded delta back out; idempotent.
class DeviceFit final : public framework::FilterPlugin, public framework::ReservePlugin {
 public:
  std::string_view Name() const override { return kName; }
  framework::PluginStatus Filter(framework::CycleState& state,
                                 const framework::NodeInfo& node) const override;
  framework::PluginStatus Reserve(framework::CycleState& state, framework::NodeInfo& node) const override;
  void Unreserve(framework::CycleState& state, framework::NodeInfo& node) const override;
};

// Takes no args.
Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args);

}  // namespace toposched::plugins::device_fit
