#pragma once
// What a pod asks of one node's devices, read from the Kubernetes Pod object. See
// docs/placement.md ("Requests") for every resource name and annotation.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/topology/node_topology.h"

namespace toposched {

inline constexpr std::string_view kAlignmentAnnotation = "toposched.io/gpu-nic-alignment";
inline constexpr std::string_view kRdmaNicsAnnotation = "toposched.io/rdma-nics";
inline constexpr std::string_view kRoleLabel = "llm-d.ai/role";
// Prefill/Decode pools (docs/placement.md, "Prefill/Decode pools"): the pool's target ratio of
// Prefill to Decode instances per network domain ("1:3"), the KV cache size per token and a
// typical prompt length (for the transfer-cost estimate), and whether co-located P and D of
// this pod may use CUDA IPC ("true") rather than RDMA loopback.
inline constexpr std::string_view kPdRatioAnnotation = "toposched.io/pd-ratio";
inline constexpr std::string_view kKvBytesPerTokenAnnotation = "toposched.io/kv-bytes-per-token";
inline constexpr std::string_view kPromptTokensAnnotation = "toposched.io/prompt-tokens";
inline constexpr std::string_view kKvIpcAnnotation = "toposched.io/kv-ipc";
inline constexpr std::size_t kMaxPodJsonBytes = 4u << 20;  // 4 MiB; the API server caps at ~1.5

enum class PodRole : std::uint8_t { kNone, kPrefill, kDecode, kBoth };
std::string_view ToString(PodRole r);
// The label llm-d.ai/role as llm-d's router reads it (filter/bylabel/roles.go), for P/D
// placement: prefill and encode-prefill -> kPrefill; decode -> kDecode; prefill-decode (an
// aggregated server, llm-d's recommended value), encode-prefill-decode and the deprecated both ->
// kBoth; encode (a multimodal encoder, no KV cache to move) -> kNone. nullopt: not a value llm-d
// knows (callers ignore it with a warning, never fail the pod for it). Exact and case-sensitive,
// as llm-d matches it.
std::optional<PodRole> ParseLlmdRole(std::string_view value);

// HAMi's scheduler policies (annotations hami.io/node-scheduler-policy and
// hami.io/gpu-scheduler-policy): binpack prefers fuller nodes/GPUs, spread emptier ones.
enum class PackPolicy : std::uint8_t { kDefault, kBinpack, kSpread };
std::string_view ToString(PackPolicy p);

// Memory and compute are fixed-point so that shares add up exactly: memory in MiB, compute in
// hundredths of a percent of the GPU's SMs (10000 = the whole GPU).
inline constexpr std::int64_t kFullGpuCores = 10000;

// A HAMi-style shared-GPU request: `count` vGPUs, each on a distinct physical GPU, each taking
// `memory_mib` (or `memory_percent` of the card when memory_mib is 0) and `cores` of it.
struct SharedGpuRequest {
  int count = 0;
  std::int64_t memory_mib = 0;
  int memory_percent = 0;  // 1-100, used only when memory_mib == 0
  std::int64_t cores = 0;  // 0-kFullGpuCores; 0 = no compute limit requested
  PackPolicy gpu_policy = PackPolicy::kDefault;
  // HAMi card filters: case-insensitive substring on the GPU model; exact UUIDs.
  std::vector<std::string> use_types, avoid_types, use_uuids, avoid_uuids;
  bool numa_bind = false;  // nvidia.com/numa-bind: all vGPUs on one NUMA node
  bool operator==(const SharedGpuRequest&) const = default;
};

struct PlacementRequest {
  std::string pod_namespace, pod_name, pod_uid;
  // Whole (exclusive) GPUs and RDMA NICs. A pod asks either whole GPUs or shared ones.
  int gpus = 0;
  GpuVendor vendor = GpuVendor::kNvidia;
  int rdma_nics = 0;
  // Hard bound on the worst GPU->NIC class (annotation); absent: alignment is preferred, scored.
  std::optional<LinkClass> max_gpu_nic_class;
  PodRole role = PodRole::kNone;
  std::string pool;
  // Prefill/Decode annotations; not part of the shape. 0 = not given (config defaults apply).
  int pd_ratio_prefill = 0, pd_ratio_decode = 0;
  std::int64_t kv_bytes_per_token = 0;
  int prompt_tokens = 0;
  bool kv_ipc = false;
  SharedGpuRequest shared;
  PackPolicy node_policy = PackPolicy::kDefault;
  // GPUs (whole or vGPUs) each container asks, init containers first, then app containers
  // (HAMi's per-container annotation order); not part of the shape. Init containers run
  // before the app containers and take their devices from the same set.
  std::vector<int> container_devices;
  int init_containers = 0;  // how many leading entries of container_devices are init containers
  // What the reader ignored and why, one sentence each (e.g. an llm-d.ai/role value llm-d does
  // not know): the extender logs it and the Kubernetes source writes it as a Warning event.
  std::vector<std::string> warnings;
  // The pod's CPU request in milli-cores (PodCpuRequestMilli's rule: ParsePodRequest reads it;
  // the trace replay sets the task's), for the packing score only (packing::ShapeOf); not part
  // of the shape: the engine's choice does not depend on it, and the score reads it only on
  // nodes whose free CPU is known.
  std::int64_t cpu_milli = 0;
  // spec.resourceClaims (Dynamic Resource Allocation): each entry's name and the ResourceClaim
  // or ResourceClaimTemplate it names (exactly one of the two). Not part of the shape. The
  // extender asks the Kubernetes source what devices they ask (extender::BindHooks::DraDevicesFor)
  // and sets gpus and rdma_nics from it, with `dra` true: DRA's allocator, not toposched, then
  // chooses the devices on the node toposched ranks first.
  struct ClaimRef {
    std::string name, claim_name, template_name;
    bool operator==(const ClaimRef&) const = default;
  };
  std::vector<ClaimRef> resource_claims;
  bool dra = false;

  bool IsShared() const { return shared.count > 0; }
  // The pod names GPUs by UUID (HAMi's nvidia.com/use-gpuuuid, nouse-gpuuuid): its outcome on a
  // node depends on that node's UUIDs, which NodeTopology::Fingerprint leaves out, so it cannot
  // share results between nodes of one hardware type.
  bool NamesGpuUuids() const { return !shared.use_uuids.empty() || !shared.avoid_uuids.empty(); }
  // The request's shape: everything the engine's choice depends on (not the pod's identity).
  std::string ShapeKey() const;
  bool operator==(const PlacementRequest&) const = default;
};

struct RequestConfig {
  // Extended resources that count as RDMA NICs: exact names, or prefixes ending in '/'
  // ("rdma/" matches rdma/hca_shared_devices_a, rdma/ib, ...).
  std::vector<std::string> rdma_resources = {"rdma/"};
  std::string pool_label = "toposched.io/pool";
};

// Reads a Pod (JSON, as the API server or kube-scheduler's ExtenderArgs carry it). Containers'
// requests and limits are combined the way kube-scheduler computes a pod's effective request:
// max(sum over app containers and restartable init containers (sidecars), each plain init
// container's request plus the sidecars started before it); extended resources take limits
// when requests are absent. Errors name the field and say what to fix.
Result<PlacementRequest> ParsePodRequest(std::string_view pod_json, const RequestConfig& config = {});

// A boolean annotation's value as ParsePodRequest reads it: "true" in any case, blanks trimmed.
// For readers that must not fail on a bad value (restoring an allocation): anything else is false.
bool AnnotationIsTrue(std::string_view value);

}  // namespace toposched
