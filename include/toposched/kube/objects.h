#pragma once
// What toposched reads from and writes to Kubernetes objects: the allocation annotations a
// bind writes on the pod (ours and HAMi's, in HAMi v2.8+'s exact encodings), HAMi's node
// registration annotation, HAMi's node lock, the NodeTopology object the agent publishes,
// and the few fields of Nodes and Pods the extender keeps. Pure functions: no I/O, no clock.
// docs/operations.md documents every annotation; reference: shared/reference/protocols.md §3.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "toposched/common/status.h"
#include "toposched/state/cluster_state.h"
#include "toposched/topology/node_topology.h"

namespace toposched::kube {

// ---- annotation and label keys ----
inline constexpr std::string_view kAllocationAnnotation = "toposched.io/allocation";
inline constexpr std::string_view kVisibleGpusAnnotation = "toposched.io/visible-gpus";
inline constexpr std::string_view kNcclIbHcaAnnotation = "toposched.io/nccl-ib-hca";
inline constexpr std::string_view kBindTimeAnnotation = "toposched.io/bind-time";  // RFC 3339
inline constexpr std::string_view kHamiDevicesToAllocate = "hami.io/vgpu-devices-to-allocate";
inline constexpr std::string_view kHamiDevicesAllocated = "hami.io/vgpu-devices-allocated";
inline constexpr std::string_view kHamiVgpuNode = "hami.io/vgpu-node";
inline constexpr std::string_view kHamiVgpuTime = "hami.io/vgpu-time";    // unix seconds
inline constexpr std::string_view kHamiBindPhase = "hami.io/bind-phase";  // allocating|success|failed
inline constexpr std::string_view kHamiBindTime = "hami.io/bind-time";    // unix seconds
inline constexpr std::string_view kHamiNodeRegister = "hami.io/node-nvidia-register";
inline constexpr std::string_view kHamiNodeLock = "hami.io/mutex.lock";
inline constexpr std::string_view kGpuCountLabel = "toposched.io/gpu-count";
inline constexpr std::string_view kRdmaNicCountLabel = "toposched.io/rdma-nic-count";
inline constexpr std::string_view kTopologyClassLabel = "toposched.io/topology-class";
inline constexpr std::chrono::seconds kHamiNodeLockExpiry{300};  // HAMi's --node-lock-timeout

// ---- toposched.io/allocation ----
//
// {"version": 1, "node": "gpu-a1", "policy": "toposched", "topologyFingerprint": "…",
//  "gpus": [{"index": 0, "pciBusId": "0000:18:00.0", "uuid": "GPU-…", "numa": 0,
//            "memoryMiB": 20000, "coresPercent": 50}],      (memory/cores only when shared)
//  "nics": [{"name": "mlx5_0", "pciBusId": "0000:1a:00.0", "numa": 0}],
//  "numaNodes": [0],
//  "links": {"worstGpuNic": "PIX", "worstGpuGpu": "NV18",
//            "gpuNic": [{"gpu": 0, "nic": "mlx5_0", "class": "PIX"}]},
//  "containers": [2, 0]}                                   (devices per container, HAMi order)
struct AllocationAnnotations {
  std::string allocation;     // toposched.io/allocation (compact JSON)
  std::string visible_gpus;   // UUIDs when every chosen GPU has one, else host indices: "GPU-a,GPU-b" / "0,3"
  std::string nccl_ib_hca;    // "=mlx5_0,mlx5_3" (NCCL's exact-match form); "" without NICs
  std::string hami_devices;   // hami.io/vgpu-devices-to-allocate (= -allocated at bind)
};
// `policy` names what chose the devices ("toposched"). Whole GPUs are written to HAMi as the
// card's whole memory and 100 cores; shares with their memory and cores (percent, rounded up).
AllocationAnnotations EncodeAllocation(const state::PodAllocation& allocation, const NodeTopology& topology,
                                       std::string_view policy);
// Reads toposched.io/allocation back into an allocation on `topology`. Each device is matched by
// what is unique on the node and every other field given must agree with it: a GPU by PCI bus id
// (or index when no bus id is written), its index and UUID checked; an RDMA NIC by device name
// (the ports of a multi-port card and a VF's parent share a bus id), its bus id checked, and by
// bus id alone only when exactly one NIC has it. Errors: bad JSON, unknown version, a device the
// topology does not have, fields that name different devices, an ambiguous bus id, a device
// listed twice: never a guess. `worst_gpu_nic`, when given,
// gets links.worstGpuNic's class (kPIX when absent or not a link token, as for a placement
// without NICs: it informs scoring, never capacity, so it never fails a restore).
Result<framework::AllocationDelta> DecodeAllocation(std::string_view json, const NodeTopology& topology,
                                                    LinkClass* worst_gpu_nic = nullptr);

// The devices a record that could not be read back still names on `topology`, for holding
// (state::ClusterStore::Hold): every GPU and NIC that any field of any entry points to (index,
// bus id, UUID, name: all candidates when they disagree or a bus id is shared), from
// toposched.io/allocation and HAMi's device list (either may be empty or unparsable). GPUs are
// listed whole; each index once, in ascending order.
framework::AllocationDelta DevicesNamedBy(std::string_view allocation_json, std::string_view hami_devices,
                                          const NodeTopology& topology);

// ---- HAMi device lists (hami.io/vgpu-devices-to-allocate / -allocated) ----
// One segment per container ending in ';' (init containers first, then app containers, v2.9+);
// inside, one "UUID,Type,usedMemMiB,usedCores:" per device. "" decodes to no containers.
struct HamiDevice {
  std::string uuid;
  std::string type = "NVIDIA";
  std::int64_t used_mem_mib = 0;
  int used_cores = 0;  // percent
  bool operator==(const HamiDevice&) const = default;
};
using HamiPodDevices = std::vector<std::vector<HamiDevice>>;  // per container
std::string EncodeHamiDevices(const HamiPodDevices& devices);
Result<HamiPodDevices> DecodeHamiDevices(std::string_view text);
// HAMi pods (no toposched.io/allocation) as an allocation on `topology`: GPUs by UUID; a
// device with 100 cores and the card's whole memory is exclusive, anything else a share.
Result<framework::AllocationDelta> DeltaFromHami(const HamiPodDevices& devices, const NodeTopology& topology);

// ---- hami.io/node-nvidia-register ----
// JSON array (v2.8+, omitempty keys) or colon records of 9 (v2.5-2.7) or 7 (<= v2.4) fields.
struct HamiRegisteredGpu {
  std::string uuid;
  int index = 0;
  int count = 0;               // split count (vGPUs per card)
  std::int64_t devmem_mib = 0;
  int devcore = 0;
  std::string type;
  int numa = 0;
  bool health = false;
  std::string mode;            // hami-core | mig | mps ("" in old formats)
  bool operator==(const HamiRegisteredGpu&) const = default;
};
Result<std::vector<HamiRegisteredGpu>> ParseHamiRegister(std::string_view text);
// Fills in what the topology lacks from the registration: each GPU's UUID (by HAMi index =
// PCI bus order, which is ours) and memory, and marks unusable (Gpu::unusable) the cards HAMi
// reports unhealthy or in MIG mode; returns the smallest split count (0 when none).
int ApplyHamiRegister(const std::vector<HamiRegisteredGpu>& gpus, NodeTopology& topology);

// ---- hami.io/mutex.lock: "<RFC 3339 time>,<namespace>,<pod>" ----
struct HamiNodeLock {
  std::chrono::system_clock::time_point time;
  std::string pod_namespace, pod_name;
};
std::string EncodeHamiNodeLock(const HamiNodeLock& lock);
Result<HamiNodeLock> DecodeHamiNodeLock(std::string_view text);

// ---- objects ----
struct NodeView {
  std::string name, uid, resource_version;
  std::map<std::string, std::string> labels;
  bool unschedulable = false;
  std::string hami_register;  // annotation value, "" when absent
};
Result<NodeView> ReadNode(const nlohmann::json& node);

struct PodView {
  std::string uid, pod_namespace, pod_name, resource_version;
  std::string node_name;   // spec.nodeName ("" while pending)
  std::string phase;       // status.phase
  bool deleting = false;   // metadata.deletionTimestamp set
  bool ready = false;      // condition Ready=True
  std::optional<std::chrono::system_clock::time_point> ready_since;  // its lastTransitionTime
  std::map<std::string, std::string> annotations;  // only toposched.io/* and hami.io/* keys
  std::map<std::string, std::string> labels;       // all of them (role and pool labels)
  // Extended resources (names with a '/': nvidia.com/gpu, rdma/ib, ...) the pod holds once
  // bound, as the kubelet counts them: the larger of the app containers' sum and the largest
  // init container; limits, else requests; integer quantities only.
  std::map<std::string, std::int64_t> extended_resources;
  // Holds devices: not Succeeded/Failed (a deleting pod still holds them until it is gone).
  bool Active() const { return phase != "Succeeded" && phase != "Failed"; }
};
Result<PodView> ReadPod(const nlohmann::json& pod);

// The NodeTopology object the agent publishes for `node_name` (metadata + status; status is a
// subresource, so the agent creates the object, then writes status). Adds to the topology JSON
// `status.summary` {gpus, nics, rdmaNics, numaNodes, gpuModel} for printer columns,
// `status.heartbeatTime` and `status.observedGeneration`-style `status.generation` (+1 per change
// of fingerprint, carried over from the previous object). `owner_uid` (the Node's UID) makes the
// Node its owner, so deleting the Node deletes it.
nlohmann::json NodeTopologyObject(const NodeTopology& topology, std::string_view node_name,
                                  std::string_view owner_uid, std::int64_t generation,
                                  std::chrono::system_clock::time_point heartbeat);
struct NodeTopologyView {
  std::string name, resource_version;
  std::shared_ptr<const NodeTopology> topology;  // null when status is absent (just created)
  std::int64_t generation = 0;
  std::optional<std::chrono::system_clock::time_point> heartbeat;
};
Result<NodeTopologyView> ReadNodeTopology(const nlohmann::json& object);

// The labels the agent owns on its Node: gpu count, RDMA NIC count, topology class (the first
// 12 hex digits of the fingerprint; equal class = same hardware layout).
std::map<std::string, std::string> AgentNodeLabels(const NodeTopology& topology);

}  // namespace toposched::kube
