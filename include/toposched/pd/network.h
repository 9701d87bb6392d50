#pragma once
// Where nodes sit in the cluster network, and what moving a Prefill instance's KV cache to a
// Decode instance costs along the path between them. Pure values and arithmetic, no I/O: the
// scoring plugins, the simulator and `toposched advise` share this one model.
//
// Tiers (docs/kv-transfer.md, "Network tiers"): a node's position is a list of domain names,
// innermost first, read from node labels named in config (e.g. nvidia.com/gpu.clique,
// toposched.io/leaf, toposched.io/spine, topology.kubernetes.io/zone) or from Volcano HyperNode
// objects (tier 1 innermost). Two nodes' distance is the first tier whose domain they share.
//
// Cost (docs/kv-transfer.md, "Cost formula" and "Default costs and their sources"): a pair's
// path kind (same node over CUDA IPC or RDMA loopback, same NVLink domain, same leaf, across the
// spine, across zones, beyond every tier) gives a per-lane bandwidth and a latency; RDMA paths
// are scaled by the worse of the two ends' GPU->NIC alignment; the KV cache is sharded over the
// instance's tensor-parallel ranks, so lanes = min(NICs) of the two ends (RDMA) or min(GPUs)
// (NVLink/IPC). time = latency + bytes / (bandwidth * alignment * lanes).

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/topology/node_topology.h"

namespace toposched::pd {

// The path a KV transfer takes, cheapest first under the default costs.
enum class PathKind : std::uint8_t {
  kSameNodeIpc,   // one node, CUDA IPC over NVLink / PCIe P2P (both pods allow it)
  kSameNodeRdma,  // one node, RDMA loopback through the NIC (separate containers: the default)
  kNvlinkDomain,  // two nodes of one multi-node NVLink domain (e.g. GB200 NVL72 clique)
  kLeaf,          // RDMA through one leaf (rail) switch
  kSpine,         // RDMA leaf -> spine -> leaf
  kZone,          // across spines inside one zone (super-spine / DC network)
  kBeyond,        // sharing no configured tier: across zones, or nodes without tier labels
};
inline constexpr std::size_t kPathKinds = 7;
// "same-node-ipc", "same-node-rdma", "nvlink-domain", "leaf", "spine", "zone", "beyond".
std::string_view ToString(PathKind p);
std::optional<PathKind> ParsePathKind(std::string_view s);
// RDMA paths are limited by the NICs (and their alignment); IPC and NVLink-domain paths are not.
bool UsesNic(PathKind p);

struct PathCost {
  double bandwidth_gbps = 0;  // GB/s (bytes, not bits) per lane: per NIC, or per GPU for NVLink kinds
  double latency_us = 0;      // one transfer's fixed latency
  bool operator==(const PathCost&) const = default;
};

// One tier: a node label whose value names the node's domain, and the path two nodes take
// when this is the first tier they share. kSameNode* and kBeyond are not tier paths.
struct Tier {
  std::string label;
  PathKind path = PathKind::kLeaf;
  bool operator==(const Tier&) const = default;
};

// Bandwidth multiplier of an RDMA transfer by the GPU->NIC class of one end (the worse end
// counts): GPUDirect RDMA at full speed needs GPU and NIC under one PCIe switch.
struct AlignmentFactors {
  double pix = 1.0, pxb = 1.0, phb = 0.63, node = 0.63, sys = 0.4;
  double For(LinkClass c) const;  // kSelf/kNV/kPIX -> pix
  bool operator==(const AlignmentFactors&) const = default;
};

// The `network:` section of the scheduler config (framework/config.h parses it):
//
//   network:
//     tiers:                                  # innermost first; default: the four below
//       - {label: nvidia.com/gpu.clique, path: nvlink-domain}
//       - {label: toposched.io/leaf, path: leaf}
//       - {label: toposched.io/spine, path: spine}
//       - {label: topology.kubernetes.io/zone, path: zone}
//     hyperNodes: false                       # true: positions from Volcano HyperNodes where present
//     sameNodeIpc: false                      # true: co-located P and D use CUDA IPC, not RDMA loopback
//     paths:                                  # any subset; GB/s per lane and microseconds
//       leaf: {bandwidthGBps: 50, latencyUs: 5}
//     alignment: {PIX: 1.0, PXB: 1.0, PHB: 0.63, NODE: 0.63, SYS: 0.4}
//     transferOverheadUs: 300                 # per request, on top of the path (connector work)
//
// Unknown keys are errors, as everywhere in the config.
struct NetworkConfig {
  std::vector<Tier> tiers = DefaultTiers();
  bool hyper_nodes = false;
  bool same_node_ipc = false;
  std::array<PathCost, kPathKinds> paths = DefaultPathCosts();
  AlignmentFactors alignment;
  double transfer_overhead_us = 300;

  static std::vector<Tier> DefaultTiers();
  static std::array<PathCost, kPathKinds> DefaultPathCosts();
  const PathCost& Cost(PathKind p) const { return paths[static_cast<std::size_t>(p)]; }
  bool operator==(const NetworkConfig&) const = default;
};

// Checks ranges (bandwidth > 0, latency >= 0, factors in (0, 1], tier labels non-empty and
// distinct, tier paths among nvlink-domain/leaf/spine/zone). Errors name the key path.
Status Validate(const NetworkConfig& config);

// A node's position: its name and one domain name per configured tier ("" = the node has no
// such label, which shares nothing).
struct Location {
  std::string node;
  std::vector<std::string> domains;  // size == config.tiers.size()
  bool operator==(const Location&) const = default;
};

// Position from node labels.
Location LocateByLabels(const NetworkConfig& config, std::string_view node,
                        const std::map<std::string, std::string>& labels);

// 0: same node; i + 1: the first tier i whose domain both share; tiers + 1: none.
int Distance(const Location& a, const Location& b);

// The path between two positions: same node -> kSameNodeIpc when config.same_node_ipc and both
// ends allow it, else kSameNodeRdma; first shared tier i -> config.tiers[i].path; none -> kBeyond.
PathKind PathBetween(const NetworkConfig& config, const Location& a, const Location& b,
                     bool ipc_allowed = true);

// One end of a transfer: an instance's GPU and NIC count and its worst GPU->NIC class.
struct Endpoint {
  int gpus = 1;
  int rdma_nics = 0;  // 0: the pod has no RDMA NIC of its own (shared or TCP)
  LinkClass worst_class = LinkClass::kPIX;
  double nic_gbps = 0;  // the NICs' link rate in GB/s when known (0: the path default)
};

struct PathEstimate {
  PathKind path = PathKind::kBeyond;
  double bandwidth_gbps = 0;  // effective, all lanes together
  double latency_us = 0;      // path latency + config.transfer_overhead_us
  double alignment = 1.0;     // the factor applied (1 for non-NIC paths)
  int lanes = 1;
};
PathEstimate Estimate(const NetworkConfig& config, PathKind path, const Endpoint& prefill,
                      const Endpoint& decode);
// Seconds to move `bytes` along `e`.
double TransferSeconds(const PathEstimate& e, double bytes);

// ------------------------------------------------------------------------------------------
// Models: KV bytes per token = 2 (K and V) * layers * kv_heads * head_dim * dtype_bytes.
struct ModelSpec {
  std::string name;
  int layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int dtype_bytes = 2;
  double params_billion = 0;  // weights, for the advisor's compute and memory estimates
  bool operator==(const ModelSpec&) const = default;
};
std::int64_t KvBytesPerToken(const ModelSpec& m);
// Built-in model shapes from their published configs (docs/kv-transfer.md lists each source):
// llama-3-8b, llama-3-70b, llama-3-405b, qwen2.5-7b, qwen2.5-72b, mistral-7b.
const std::vector<ModelSpec>& ModelPresets();
Result<ModelSpec> FindModel(std::string_view name);  // error lists the presets

// ------------------------------------------------------------------------------------------
// Volcano HyperNodes (topology.volcano.sh/v1alpha1): spec.tier (1 = innermost) and
// spec.members[] {type: Node|HyperNode, selector: {exactMatch: {name}, regexMatch: {pattern},
// labelMatch: {matchLabels}}}. Each node's domains: the name of the tier-k HyperNode that
// holds it (directly or through lower HyperNodes) in position k-1; positions past the
// configured tiers are dropped. `list_json` is a HyperNodeList or a JSON array of HyperNodes.
// regexMatch patterns are Go regexp (RE2) syntax, matched unanchored, as Volcano does. A member
// Volcano would skip (no selector, a bad pattern, a HyperNode member selected by regex or labels)
// is skipped and described in `warnings` (when given); an absent spec.tier is 0. Errors (the
// whole set): malformed JSON, a HyperNode that is not an object or has no name, a cycle.
inline constexpr std::size_t kMaxHyperNodeJsonBytes = 16u << 20;
using NodeLabels = std::map<std::string, std::map<std::string, std::string>>;  // node -> labels
Result<std::map<std::string, Location>> ResolveHyperNodes(const NetworkConfig& config,
                                                          std::string_view list_json, const NodeLabels& nodes,
                                                          std::vector<std::string>* warnings = nullptr);

}  // namespace toposched::pd
