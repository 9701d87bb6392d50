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
// HAMi's AMD backend (Project-HAMi/HAMi pkg/device/amd/device.go @070101260b7a: InitAMDGPUDevice,
// RegisterAnnos; Project-HAMi/amd-device-plugin internal/pkg/utils/types.go @0f94a167cc8d): its own
// device-list keys and registration; vgpu-node, vgpu-time, bind-phase, bind-time and the node
// lock are shared with NVIDIA's.
inline constexpr std::string_view kHamiAmdDevicesToAllocate = "hami.io/amd-devices-to-allocate";
inline constexpr std::string_view kHamiAmdDevicesAllocated = "hami.io/amd-devices-allocated";
inline constexpr std::string_view kHamiAmdNodeRegister = "hami.io/node-amd-register";
inline constexpr std::string_view kHamiNodeLock = "hami.io/mutex.lock";
// Volcano's own vGPU (its deviceshare plugin with HAMi's vGPU on; volcano-sh/volcano v1.13
// pkg/scheduler/api/devices/nvidia/vgpu/type.go): the GPUs it gave a pod, in HAMi's device-list
// format ("UUID,NVIDIA,memMiB,cores:" per container, ';' between), and the node.
inline constexpr std::string_view kVolcanoVgpuIds = "volcano.sh/vgpu-ids-new";
inline constexpr std::string_view kVolcanoVgpuNode = "volcano.sh/vgpu-node";
inline constexpr std::string_view kGpuCountLabel = "toposched.io/gpu-count";
inline constexpr std::string_view kRdmaNicCountLabel = "toposched.io/rdma-nic-count";
inline constexpr std::string_view kTopologyClassLabel = "toposched.io/topology-class";
// "true": a device plugin on the node enforces GPU shares (memory and cores) although HAMi's
// registration is absent; without either, the node's GPUs take whole-card requests only.
inline constexpr std::string_view kSharesEnforcedLabel = "toposched.io/shares-enforced";
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
  std::string allocation;    // toposched.io/allocation (compact JSON)
  std::string visible_gpus;  // UUIDs when every chosen GPU has one, else host indices: "GPU-a,GPU-b" / "0,3"
  std::string nccl_ib_hca;   // "=mlx5_0,mlx5_3" (NCCL's exact-match form); "" without NICs
  std::string hami_devices;  // HAMi's device list for hami_vendor's keys; "" = no HAMi record
  GpuVendor hami_vendor = GpuVendor::kNvidia;  // which keys: HamiDeviceKeysFor(hami_vendor)
};
// `policy` names what chose the devices ("toposched"). HAMi's records are written when HAMi's
// device plugin can use them, for the vendor of every chosen GPU:
//  * NVIDIA, every chosen GPU with a UUID: whole GPUs as the card's whole memory and 100 cores,
//    shares with their memory and cores (percent, rounded up);
//  * AMD, every chosen GPU in HAMi's AMD registration (Gpu::hami_amd): named by the registered
//    id and type; whole GPUs as the registered devmem and all compute units (devcore), shares
//    with their memory and the compute units HAMi's scheduler gives a percentage (AmdComputeUnits).
// Never a record under one vendor's keys for another vendor's GPUs, nor for a mix.
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

// ---- HAMi device lists (hami.io/vgpu-devices-* for NVIDIA, hami.io/amd-devices-* for AMD) ----
// One segment per container ending in ';' (init containers first, then app containers, v2.9+);
// inside, one "UUID,Type,usedMemMiB,usedCores:" per device. "" decodes to no containers. Both
// vendors use this encoding (Project-HAMi/HAMi pkg/device/devices.go @0136974a3700
// EncodePodSingleDevice/EncodeContainerDevices); usedCores is a percent of the SMs for NVIDIA and
// a count of compute units for AMD (pkg/device/amd/device.go @070101260b7a Fit).
struct HamiDevice {
  std::string uuid;
  std::string type = "NVIDIA";
  std::int64_t used_mem_mib = 0;
  int used_cores = 0;  // NVIDIA: percent; AMD: compute units
  bool operator==(const HamiDevice&) const = default;
};
using HamiPodDevices = std::vector<std::vector<HamiDevice>>;  // per container
std::string EncodeHamiDevices(const HamiPodDevices& devices);
Result<HamiPodDevices> DecodeHamiDevices(std::string_view text);
// The pod annotations HAMi keeps `vendor`'s device lists in (to-allocate, then allocated).
struct HamiDeviceKeys {
  std::string_view to_allocate, allocated;
};
HamiDeviceKeys HamiDeviceKeysFor(GpuVendor vendor);
// HAMi pods (no toposched.io/allocation) as an allocation on `topology`, from `vendor`'s list:
// each device names a GPU of that vendor (NVIDIA: by UUID; AMD: by its registered id, else its
// UUID). NVIDIA: a device with 100 cores and the card's whole memory is exclusive, anything
// else a share of that many percent. AMD: a device with all the card's compute units (devcore)
// and its whole memory is exclusive; a share's compute units become the percent of the card's
// they are, rounded up (a card with no known CU count: 100 % for any compute units).
Result<framework::AllocationDelta> DeltaFromHami(const HamiPodDevices& devices, const NodeTopology& topology,
                                                 GpuVendor vendor = GpuVendor::kNvidia);
// The compute units HAMi's AMD scheduler gives a share of `cores` (hundredths of a percent; 0 =
// no limit asked, HAMi's default of 100 %) on `card` (pkg/device/amd/device.go @070101260b7a Fit):
// devcore x percent / 100 with the percent rounded up to a whole one as HAMi takes it, at least
// 1, rounded up to whole WGPs when the card hands out several CUs together, at most devcore.
// nullopt when the card has no CU count (HAMi's scheduler does not place a share there).
std::optional<int> AmdComputeUnits(std::int64_t cores, const HamiAmdCard& card);

// ---- hami.io/node-nvidia-register ----
// JSON array (v2.8+, omitempty keys) or colon records of 9 (v2.5-2.7) or 7 (<= v2.4) fields.
struct HamiRegisteredGpu {
  std::string uuid;
  int index = 0;
  int count = 0;  // split count (vGPUs per card)
  std::int64_t devmem_mib = 0;
  int devcore = 0;
  std::string type;
  int numa = 0;
  bool health = false;
  std::string mode;  // hami-core | mig | mps ("" in old formats)
  // AMD's registration only (custominfo): the card's PCI address (normalized), and how many
  // CUs its device plugin hands out together (cuPerWGP; 1 when absent).
  std::string pci_bus_id;
  int cu_per_wgp = 1;
  bool operator==(const HamiRegisteredGpu&) const = default;
};
Result<std::vector<HamiRegisteredGpu>> ParseHamiRegister(std::string_view text);
// Fills in what the topology lacks from the registration: each GPU's UUID (by HAMi index =
// PCI bus order, which is ours) and memory, and marks unusable (Gpu::unusable) the cards HAMi
// reports unhealthy or in MIG mode; returns the smallest split count (0 when none).
int ApplyHamiRegister(const std::vector<HamiRegisteredGpu>& gpus, NodeTopology& topology);

// ---- hami.io/node-amd-register ----
// The JSON array HAMi's AMD device plugin writes (Project-HAMi/amd-device-plugin
// internal/pkg/plugin/plugin.go @0121aa5d9262 RegisterInAnnotation; read by HAMi's
// pkg/device/amd/device.go @070101260b7a GetNodeDevices with UnMarshalNodeDevices): the keys of
// NVIDIA's v2.8+ array, all omitempty ("devcore" = the card's compute units), plus
// "devicevendor" and "custominfo" {"pciBDF": "0000:83:00.0", "cuPerWGP": 2, ...}. JSON only:
// HAMi never wrote AMD's in the colon format.
Result<std::vector<HamiRegisteredGpu>> ParseHamiAmdRegister(std::string_view text);
// Matches the registration to the topology's AMD GPUs by custominfo.pciBDF, else by a UUID the
// topology already has ("index" is the DRM card number there, not PCI order: never used). A
// matched card gets Gpu::hami_amd, its UUID and memory when the topology lacks them, and is
// unusable when reported unhealthy ("health" absent = false, as HAMi reads it). HAMi's AMD
// device plugin hands out only the cards it registered, so an AMD GPU the registration does not
// name exactly once, or whose id another entry repeats, is unusable. Returns how many AMD GPUs
// the registration names exactly once (unhealthy ones included).
int ApplyHamiAmdRegister(const std::vector<HamiRegisteredGpu>& gpus, NodeTopology& topology);
// A registration that cannot be read: every AMD GPU is unusable, `why` says so.
void MarkAmdGpusUnregistered(NodeTopology& topology, std::string_view why);

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
  std::string hami_register;      // hami.io/node-nvidia-register, "" when absent
  std::string hami_amd_register;  // hami.io/node-amd-register, "" when absent
  // status.allocatable.cpu in milli-cores, rounded up (Quantity.MilliValue); -1 when absent or
  // not a quantity: only the packing score reads it, so it never makes a Node unreadable.
  std::int64_t allocatable_cpu_milli = -1;
};
Result<NodeView> ReadNode(const nlohmann::json& node);

struct PodView {
  std::string uid, pod_namespace, pod_name, resource_version;
  std::string node_name;                                             // spec.nodeName ("" while pending)
  std::string phase;                                                 // status.phase
  bool deleting = false;                                             // metadata.deletionTimestamp set
  bool ready = false;                                                // condition Ready=True
  std::optional<std::chrono::system_clock::time_point> ready_since;  // its lastTransitionTime
  std::map<std::string, std::string> annotations;                    // only toposched.io/* and hami.io/* keys
  std::map<std::string, std::string> labels;                         // all of them (role and pool labels)
  // Extended resources (names with a '/': nvidia.com/gpu, rdma/ib, ...) the pod holds once
  // bound, as the kubelet counts them: the larger of the app containers' sum and the largest
  // init container; limits, else requests; integer quantities only.
  std::map<std::string, std::int64_t> extended_resources;
  // The CPU request kube-scheduler counts for the pod (PodCpuRequestMilli), milli-cores; 0 when
  // it asks none or its quantities cannot be read.
  std::int64_t cpu_request_milli = 0;
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
