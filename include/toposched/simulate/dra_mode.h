#pragma once
// `toposched simulate --dra`: the embedded simulator on a DRA cluster (resource.k8s.io/v1).
//
// Under DRA kube-scheduler's DynamicResources plugin allocates a claim's devices with a first-fit
// allocator (KEP-4815; k8s.io/dynamic-resource-allocation structured/internal/stable): requests
// in order, for each request the devices of the node's slices in order, backtracking when a
// constraint such as matchAttribute fails, and the first full solution wins. It does not score
// nodes. toposched, as an extender, can choose only the node; the devices inside it stay the
// allocator's first fit. This mode measures what that node choice is worth:
//
//   dra-first-fit  the first node in cluster order where the allocator finds a solution
//   toposched      the best such node by toposched's framework scores and the ranking step
//                  (framework/ranking.h), as its prioritize verb would order them
//
// and in both the devices are the allocator's first fit on the chosen node. Shared-GPU pods have
// no place in this model (a DRA claim takes whole devices) and are left out, and counted.

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/framework/config.h"
#include "toposched/placement/request.h"
#include "toposched/simulate/simulator.h"
#include "toposched/topology/node_topology.h"

namespace toposched::simulate {

inline constexpr std::string_view kPolicyDraFirstFit = "dra-first-fit";

// ------------------------------------------------------------------------------------------
// The node's ResourceSlices

enum class DraDeviceKind : std::uint8_t { kGpu, kNic };

// A device as its driver publishes it. pcie_root is the standard attribute
// resource.kubernetes.io/pcieRoot: the index in NodeTopology::pcie of the host bridge at the top
// of the device's PCIe chain, or -1 when the chain reaches no host bridge (a flattened cloud VM:
// the drivers then publish no pcieRoot, and a constraint on it cannot be met).
struct DraDevice {
  DraDeviceKind kind = DraDeviceKind::kGpu;
  int index = 0;  // into NodeTopology::gpus or ::nics
  int pcie_root = -1;
  bool operator==(const DraDevice&) const = default;
};

// The host bridge at the top of the chain that starts at `pcie_parent`, or -1.
int DraPcieRootOf(const NodeTopology& topology, int pcie_parent);

// The devices in the order the allocator walks them: NVIDIA's GPU driver's slice (gpu-<minor>,
// minor order ~ PCI order, so GPU index order), then DRANET's (RDMA NICs by PCI address, NICs
// without one last by name). A request's device class selects one kind, so the order between
// the two drivers' pools never decides anything.
std::vector<DraDevice> DraSliceDevices(const NodeTopology& topology);

// ------------------------------------------------------------------------------------------
// The claim and the allocator

// One alternative of a request's firstAvailable list (a plain request is one alternative).
struct DraSubRequest {
  std::string name;
  DraDeviceKind kind = DraDeviceKind::kGpu;
  int count = 0;
};

struct DraRequest {
  std::string name;
  std::vector<DraSubRequest> first_available;  // tried in order
};

// matchAttribute resource.kubernetes.io/pcieRoot over the devices of the named requests
// ("request" or "request/subrequest"); devices of other requests are not affected.
struct DraMatchPcieRoot {
  std::vector<std::string> requests;
};

struct DraClaim {
  GpuVendor vendor = GpuVendor::kNvidia;  // the GPU device class's driver
  std::vector<DraRequest> requests;
  std::vector<DraMatchPcieRoot> constraints;
};

// The ResourceClaimTemplate a user writes for `gpus` GPUs and `nics` RDMA NICs. Without NICs:
// one request "gpu". With NICs:
//
//   requests:
//   - name: gpu
//     firstAvailable: [{name: aligned, count: N}, {name: any, count: N}]
//   - name: nic
//     firstAvailable: [{name: aligned, count: M}, {name: any, count: M}]
//   constraints:
//   - matchAttribute: resource.kubernetes.io/pcieRoot
//     requests: [gpu/aligned, nic/aligned]
//
// The constraint binds the devices of whichever "aligned" alternatives are chosen, so the
// allocator's first solution is: GPUs on one root when some root has N free (else the first N
// free), then NICs on that root (else on one root of their own, else the first M free).
DraClaim DraClaimFor(const PlacementRequest& request);

struct DraAllocation {
  std::vector<int> gpus, nics;  // ascending topology indices
  std::vector<int> chosen;      // per request: the firstAvailable alternative it got
  bool operator==(const DraAllocation&) const = default;
};

// The allocator's first solution on one node, or nullopt. A device is free when nothing holds
// it (an exclusive GPU, a shared GPU's slice, a used NIC); unusable GPUs are not published.
std::optional<DraAllocation> DraAllocate(const NodeTopology& topology, const NodeAllocation& allocated,
                                         const DraClaim& claim);

// ------------------------------------------------------------------------------------------
// The run

// Both DRA policies, toposched first.
std::vector<std::string> DraPolicyNames();

struct DraPolicyResult {
  std::string policy;
  int placed = 0, pending = 0;
  int nic_pods_placed = 0;
  // Pods with NICs whose worst GPU->NIC rank (on the devices the allocator gave) equals the best
  // the engine finds for the same request on the same hardware with everything free.
  int at_best_class = 0;
  std::array<int, kClassBuckets.size()> class_histogram{};
  // Pods with NICs by the firstAvailable alternatives the allocator chose: both "aligned", or not.
  int aligned_alternative = 0;
  double seconds = 0;  // wall time of the policy's whole run
};

struct DraSeedResult {
  std::uint32_t seed = 0;
  int pods = 0;      // the workload's pods
  int left_out = 0;  // shared-GPU (and GPU-less) pods: not expressible as a whole-device claim
  std::vector<DraPolicyResult> policies;
};

struct DraOptions {
  std::vector<std::string> policies = DraPolicyNames();
  // toposched's framework config; absent: every builtin plugin with its default weight.
  std::optional<framework::SchedulerConfig> config;
  // Called after each pod of each policy.
  std::function<void(std::string_view policy, std::size_t done, std::size_t total)> progress;
};

// One workload on one cluster, each policy from the same empty cluster. After each run every
// node's allocation is rebuilt from the running pods: a device given twice fails the run.
Result<DraSeedResult> SimulateDra(const VirtualCluster& cluster, const Workload& workload, std::uint32_t seed,
                                  const DraOptions& options = {});

struct DraResult {
  std::string cluster_description;
  std::string workload_description;  // the first seed's
  std::vector<DraSeedResult> seeds;
};

// The table: per policy the means over seeds (pods placed, at the best class, the histogram),
// then "pods at the best class: toposched vs DRA first fit" with the mean and standard error
// over seeds of each and of their difference. JSON: the same, plus every seed's figures.
std::string FormatDraTable(const DraResult& result);
std::string FormatDraJson(const DraResult& result);

}  // namespace toposched::simulate
