#pragma once
// Dynamic Resource Allocation (resource.k8s.io/v1), read for placement: the devices drivers
// publish in ResourceSlices, what ResourceClaims (and their templates) ask for and hold, and the
// driver a DeviceClass selects. Pure functions over the objects as the informers deliver them: no
// I/O, no clock, no CEL engine. Issue 46.
//
// Wire format: k8s.io/api@v0.37.2 resource/v1/types.go. Attribute names are qualified as the
// structured allocator reads them (k8s.io/dynamic-resource-allocation@v0.37.2
// structured/internal/stable/allocator_stable.go lookupAttribute): a name without a domain
// belongs to the device's driver, so "type" from gpu.nvidia.com reads as "gpu.nvidia.com/type".
//
// What each driver publishes (the attribute constants below name their sources):
//  * NVIDIA's GPU driver (gpu.nvidia.com), kubernetes-sigs/dra-driver-nvidia-gpu
//    cmd/gpu-kubelet-plugin/deviceinfo.go @bbcbdfbe05a3: whole GPUs as "gpu-<minor>" with
//    type "gpu", uuid, productName, brand, architecture, cudaComputeCapability / driverVersion /
//    cudaDriverVersion (versions), addressingMode, and the standard resource.kubernetes.io/pciBusID
//    and resource.kubernetes.io/pcieRoot; MIG devices with type "mig" and their parent's
//    pciBusID (mig.go CommonAttributesMig); passthrough devices with type "vfio". Its earlier
//    home, NVIDIA/k8s-dra-driver-gpu deviceinfo.go @03af824603ff, published the bus id as the
//    driver's own "pcieBusID" (go-nvlib's GetPCIBusID: NVML's id lower-cased, the 8-digit domain
//    cut to 4) and no standard pciBusID.
//  * DRANET (dra.net), kubernetes-sigs/dranet pkg/apis/attributes.go @588903d1cdb2 and
//    pkg/inventory/db.go @eb6aa20e0a4b: one device per network PCI function with
//    dra.net/pciAddress (ghw's "0000:0c:00.0"), dra.net/numaNode (int), dra.net/ifName,
//    dra.net/rdma (bool), dra.net/rdmaDevice (the RDMA link name, e.g. "mlx5_0"), and the
//    standard resource.kubernetes.io/pcieRoot; no standard pciBusID.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "toposched/common/status.h"
#include "toposched/topology/node_topology.h"

namespace toposched::kube {

// ---- upstream limits (resource/v1/types.go); an object over them is not one the API server
// accepts, so reading it is an error ----
inline constexpr std::size_t kDraSliceMaxDevices = 128;               // ResourceSliceMaxDevices
inline constexpr std::size_t kDraMaxAttributesAndCapacities = 32;     // ...PerDevice
inline constexpr std::size_t kDraDeviceRequestsMaxSize = 32;          // = AllocationResultsMaxSize
inline constexpr std::size_t kDraAllocationResultsMaxSize = 32;       // AllocationResultsMaxSize
inline constexpr std::size_t kDraFirstAvailableMaxSize = 8;           // FirstAvailableDeviceRequestMaxSize
inline constexpr std::size_t kDraSelectorsMaxSize = 32;               // DeviceSelectorsMaxSize
inline constexpr std::size_t kDraConstraintsMaxSize = 32;             // DeviceConstraintsMaxSize
inline constexpr std::size_t kDraReservedForMaxSize = 256;            // ResourceClaimReservedForMaxSize
inline constexpr std::size_t kDraCelExpressionMaxLength = 10 * 1024;  // CELSelectorExpressionMaxLength
// A claim's devices all land in its allocation's results, so no request can ask for more.
inline constexpr std::int64_t kDraMaxCount = static_cast<std::int64_t>(kDraAllocationResultsMaxSize);

// ---- attribute names ----
// k8s.io/dynamic-resource-allocation@v0.37.2 deviceattribute/attribute.go.
inline constexpr std::string_view kDraPciBusIdAttribute =
    "resource.kubernetes.io/pciBusID";  // "dddd:bb:dd.f"
inline constexpr std::string_view kDraPcieRootAttribute = "resource.kubernetes.io/pcieRoot";  // "pci0000:00"
inline constexpr std::string_view kDraNumaNodeAttribute = "resource.kubernetes.io/numaNode";  // int or ints
inline constexpr std::string_view kNvidiaGpuDriver = "gpu.nvidia.com";
inline constexpr std::string_view kNvidiaTypeAttribute = "gpu.nvidia.com/type";            // gpu|mig|vfio
inline constexpr std::string_view kNvidiaPcieBusIdAttribute = "gpu.nvidia.com/pcieBusID";  // older releases
inline constexpr std::string_view kDranetDriver = "dra.net";
inline constexpr std::string_view kDranetPciAddressAttribute = "dra.net/pciAddress";
inline constexpr std::string_view kDranetIfNameAttribute = "dra.net/ifName";
inline constexpr std::string_view kDranetRdmaAttribute = "dra.net/rdma";
inline constexpr std::string_view kDranetRdmaDeviceAttribute = "dra.net/rdmaDevice";
inline constexpr std::string_view kDranetNumaNodeAttribute = "dra.net/numaNode";

// Which drivers publish GPUs and which publish NICs; a plain config with the known drivers.
struct DraDrivers {
  std::set<std::string> gpu{std::string(kNvidiaGpuDriver)};
  std::set<std::string> nic{std::string(kDranetDriver)};
};

// ---- ResourceSlice ----

struct DraVersion {  // a semantic version, kept as written
  std::string text;
  bool operator==(const DraVersion&) const = default;
};
// One DeviceAttribute: exactly one of int, bool, string, version, or (DRAListTypeAttributes)
// ints, bools, strings, versions.
using DraAttributeValue = std::variant<std::int64_t, bool, std::string, DraVersion, std::vector<std::int64_t>,
                                       std::vector<bool>, std::vector<std::string>, std::vector<DraVersion>>;

struct DraDevice {
  std::string name;
  std::map<std::string, DraAttributeValue> attributes;  // by qualified name
  std::map<std::string, std::string> capacity;          // qualified name -> quantity as written
  std::string node_name;  // perDeviceNodeSelection only: the device's own nodeName
  bool operator==(const DraDevice&) const = default;
};

struct DraSlice {
  std::string name, resource_version;
  std::string driver;
  std::string pool;
  std::int64_t pool_generation = 0;
  std::int64_t pool_slice_count = 0;
  std::string node_name;  // "" when the slice is for allNodes, a nodeSelector or per device
  bool all_nodes = false;
  bool has_node_selector = false;
  bool per_device_node_selection = false;
  std::vector<DraDevice> devices;
  bool operator==(const DraSlice&) const = default;
};

Result<DraSlice> ReadResourceSlice(const nlohmann::json& slice);

// The attribute's string value; null when absent or of another type.
const std::string* DraStringAttribute(const DraDevice& device, std::string_view name);
// The attribute's int value (the first of an int list: numaNode's physical node leads its list);
// nullopt when absent or of another type.
std::optional<std::int64_t> DraIntAttribute(const DraDevice& device, std::string_view name);
std::optional<bool> DraBoolAttribute(const DraDevice& device, std::string_view name);

// ---- ResourceClaim, ResourceClaimTemplate ----

enum class DraAllocationMode : std::uint8_t { kExactCount, kAll };

// What one request (exactly) or one firstAvailable alternative selects.
struct DraDeviceSelection {
  std::string device_class;
  DraAllocationMode mode = DraAllocationMode::kExactCount;
  std::int64_t count = 1;                  // kExactCount only (the API server defaults it to 1)
  std::vector<std::string> cel_selectors;  // the request's own, beyond its class's
  int unknown_selectors = 0;               // selectors of a kind newer than cel
  bool admin_access = false;
  bool operator==(const DraDeviceSelection&) const = default;
};

struct DraSubRequest {
  std::string name;
  DraDeviceSelection selection;
  bool operator==(const DraSubRequest&) const = default;
};

struct DraRequest {
  std::string name;
  std::optional<DraDeviceSelection> exactly;   // set, or first_available is non-empty
  std::vector<DraSubRequest> first_available;  // in order of preference
  bool operator==(const DraRequest&) const = default;
};

struct DraConstraint {
  std::vector<std::string> requests;  // empty: every request
  std::string match_attribute;        // fully qualified; "" when absent
  std::string distinct_attribute;
  bool operator==(const DraConstraint&) const = default;
};

struct DraClaimSpec {
  std::vector<DraRequest> requests;
  std::vector<DraConstraint> constraints;
  bool operator==(const DraClaimSpec&) const = default;
};

struct DraAllocationResult {
  std::string request;  // "<request>" or "<request>/<subrequest>"
  std::string driver, pool, device;
  bool operator==(const DraAllocationResult&) const = default;
};

struct DraClaim {
  std::string uid, namespace_, name, resource_version;
  bool deleting = false;  // metadata.deletionTimestamp is set
  DraClaimSpec spec;
  bool allocated = false;  // status.allocation is present
  std::vector<DraAllocationResult> results;
  // The node of a node-local allocation: the allocator writes a nodeSelector with one term whose
  // only requirement is matchFields metadata.name In [node]; "" for any other selector or none.
  std::string allocated_node;
  std::vector<std::string> reserved_pod_uids;  // reservedFor entries of resource "pods"
  int reserved_other = 0;                      // reservedFor entries that are not pods
  bool operator==(const DraClaim&) const = default;
};

Result<DraClaim> ReadResourceClaim(const nlohmann::json& claim);

struct DraClaimTemplate {
  std::string namespace_, name, resource_version;
  DraClaimSpec spec;  // spec.spec
  bool operator==(const DraClaimTemplate&) const = default;
};
Result<DraClaimTemplate> ReadResourceClaimTemplate(const nlohmann::json& claim_template);

// ---- DeviceClass ----

// `device.attributes["domain"].name == literal`, recorded, never evaluated here.
struct DraAttributeEquality {
  std::string attribute;  // "domain/name"
  std::string value;      // a string literal's content, or the literal as written (true, 3)
  bool is_string = false;
  bool operator==(const DraAttributeEquality&) const = default;
};

struct DeviceClassInfo {
  std::string name, resource_version;
  // The driver when every selector is `device.driver == "X"` (either quote style, either side),
  // possibly joined by && to attribute equalities (`clauses`); "" otherwise, with `reason`.
  std::string driver;
  std::vector<DraAttributeEquality> clauses;
  std::string reason;
  bool operator==(const DeviceClassInfo&) const = default;
};
Result<DeviceClassInfo> ReadDeviceClass(const nlohmann::json& device_class);

// ---- mapping published devices onto the node's topology ----

enum class DraDeviceKind : std::uint8_t { kUnknown, kGpu, kNic };

struct DraDeviceMapping {
  std::string device;  // DraDevice::name
  DraDeviceKind kind = DraDeviceKind::kUnknown;
  int index = -1;          // into NodeTopology::gpus or ::nics; -1 when unmapped
  std::string pci_bus_id;  // normalized; "" when the device gives none
  std::string reason;      // why unmapped; "" when mapped
  bool mapped() const { return index >= 0; }
  bool operator==(const DraDeviceMapping&) const = default;
};

// One mapping per device of `slice`, in slice order. The PCI address comes from
// resource.kubernetes.io/pciBusID, else the driver's own (gpu.nvidia.com/pcieBusID,
// dra.net/pciAddress); two that disagree leave the device unmapped. The kind comes from the
// driver (DraDrivers) and, for other drivers, from which topology device has the address.
// NVIDIA devices whose type is not "gpu" or "vfio" (MIG slices carry their parent's address)
// and devices without an address are unmapped. A NIC whose address several topology NICs share
// (ports of one function) maps by dra.net/rdmaDevice or dra.net/ifName to Nic::name or
// Nic::netdevs; without a unique match it is unmapped. Never a guess: each unmapped device has
// a reason.
std::vector<DraDeviceMapping> MapDraDevices(const DraSlice& slice, const NodeTopology& topology,
                                            const DraDrivers& drivers = {});
// The same for one device of `slice` (each device maps on its own).
DraDeviceMapping MapDraDevice(const DraSlice& slice, const DraDevice& device, const NodeTopology& topology,
                              const DraDrivers& drivers = {});

// ---- what a claim asks for ----

struct DraDeviceCount {
  int gpus = 0;
  int nics = 0;
  bool operator==(const DraDeviceCount&) const = default;
};

struct DraRequestDemand {
  std::string request;
  std::vector<std::string> subrequests;  // firstAvailable names, in order; empty for exactly
  std::vector<DraDeviceCount> options;   // one per subrequest (one for exactly)
  bool operator==(const DraRequestDemand&) const = default;
};

struct DraDemand {
  // false when toposched cannot tell what the claim needs: CEL selectors of its own, an
  // allocation mode of All, admin access, a class that is unknown or not a plain driver check,
  // a driver neither GPU nor NIC, constraints other than a shared pcieRoot or numaNode.
  bool evaluable = true;
  std::string reason;
  DraDeviceCount total;  // every request at its first option
  std::vector<DraRequestDemand> requests;
  bool same_pcie_root = false;  // matchAttribute resource.kubernetes.io/pcieRoot over all requests
  bool same_numa_node = false;  // matchAttribute resource.kubernetes.io/numaNode over all requests
  bool operator==(const DraDemand&) const = default;
};

// `classes` by class name.
DraDemand DemandOf(const DraClaimSpec& spec, const std::map<std::string, DeviceClassInfo>& classes,
                   const DraDrivers& drivers = {});

}  // namespace toposched::kube
