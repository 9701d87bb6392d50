#pragma once
// `toposched simulate`: a workload run through the scheduler's own filter -> score -> reserve
// code (in process, no HTTP; bind is a no-op) on a virtual cluster, next to topology-unaware
// and partly topology-aware baselines, with the figures that tell them apart: pods placed, the
// GPU->NIC classes pods got, how many got the best class their node allowed, how many aligned
// 8-GPU slots survive the churn, and how shared GPUs were packed.
//
// Everything here is deterministic for a given cluster, workload and seed except the measured
// decision times. No terminal or file output: the command prints, the library returns values
// and calls a progress callback.

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/framework/cluster_view.h"
#include "toposched/framework/config.h"
#include "toposched/framework/node_info.h"
#include "toposched/framework/registry.h"
#include "toposched/pd/network.h"
#include "toposched/placement/packing.h"
#include "toposched/placement/placement.h"
#include "toposched/placement/request.h"
#include "toposched/topology/node_topology.h"

namespace toposched::simulate {

// ------------------------------------------------------------------------------------------
// The virtual cluster

// A virtual node is exactly what the framework sees of a node (name, shared topology, what is
// allocated, labels), so the toposched policy hands the simulator's nodes to the framework
// as they are, and every policy mutates the same kind of value.
using VirtualNode = framework::NodeInfo;

// Labels every virtual node gets: its shape, and the leaf, spine and zone it hangs off,
// numbered in cluster order, which are three of the default network tiers (pd/network.h;
// synthetic nodes have no multi-node NVLink domain, so no nvidia.com/gpu.clique). A zone holds
// two spines: the default cluster (240 nodes) is one zone, 15 leaves and 2 spines.
inline constexpr std::string_view kShapeLabel = "node.kubernetes.io/instance-type";
inline constexpr std::string_view kLeafLabel = "toposched.io/leaf";
inline constexpr std::string_view kSpineLabel = "toposched.io/spine";
inline constexpr std::string_view kZoneLabel = "topology.kubernetes.io/zone";
inline constexpr int kNodesPerLeaf = 16;
inline constexpr int kNodesPerSpine = 128;
inline constexpr int kNodesPerZone = 2 * kNodesPerSpine;

struct ShapeCount {
  std::string shape;  // a synthetic preset name, or a topology file's name
  int count = 0;
  bool operator==(const ShapeCount&) const = default;
};

struct VirtualCluster {
  std::vector<VirtualNode> nodes;  // cluster order: the order first-fit scans
  std::vector<ShapeCount> shapes;  // how many nodes of each shape, in first-seen order
};

inline constexpr int kDefaultNodes = 240;

// The embedded default mix of real-world shapes, scaled to `nodes` (largest remainder, so the
// counts add up to exactly `nodes`): 35% hgx-h100-8gpu, 20% hgx-a100-8gpu, 15% cloud-vm-8gpu,
// 10% pcie-4gpu, 20% inference-4gpu.
std::vector<ShapeCount> DefaultShapes(int nodes = kDefaultNodes);

// Appends nodes of synthetic presets, interleaved (smooth weighted round robin) so that every
// leaf holds a mix of shapes the way racks of one cluster do, rather than all of one shape
// first, which would decide first-fit's results by the order of the list. Node names are
// "<preset>-<n>" with n counting per shape. Errors name an unknown preset or a negative count.
Status AddSyntheticNodes(const std::vector<ShapeCount>& shapes, VirtualCluster& cluster);

// Appends `copies` nodes for every *.xml and *.json file of `dir` (sorted by name) that
// LoadTopologyFile reads and that has GPUs; files without GPUs are skipped and named in
// `skipped` when it is given. Errors: `dir` not a directory, a file that does not load (the
// error names the file), no file with GPUs at all.
Status AddTopologyDirectory(const std::string& dir, int copies, VirtualCluster& cluster,
                            std::vector<std::string>* skipped = nullptr);

// A random mix of the real exports: `nodes` nodes, each a copy of a file of `dir` with GPUs drawn
// uniformly with replacement (std::mt19937 seeded with `seed`, the draw modulo the file count),
// so the mixes of several seeds differ in which machines they hold and in what proportion.
// Errors as AddTopologyDirectory's, and nodes < 1.
Status AddTopologyMix(const std::string& dir, int nodes, std::uint32_t seed, VirtualCluster& cluster,
                      std::vector<std::string>* skipped = nullptr);

// The embedded default cluster: DefaultShapes(nodes), synthetic only, so it runs anywhere.
Result<VirtualCluster> DefaultCluster(int nodes = kDefaultNodes);

// ------------------------------------------------------------------------------------------
// The workload

// Kinds the generator makes; a workload file may use any kind label.
inline constexpr std::string_view kKindPrefill = "prefill";
inline constexpr std::string_view kKindDecode = "decode";
inline constexpr std::string_view kKindTraining = "training";
inline constexpr std::string_view kKindShared = "shared";
inline constexpr std::string_view kKindOther = "other";

struct WorkloadPod {
  std::string name;
  PlacementRequest request;
  double arrival_s = 0;
  // Seconds the pod runs once placed; <= 0 means it never leaves during the run.
  double duration_s = 0;
  std::string kind;
};

struct Workload {
  std::vector<WorkloadPod> pods;  // in arrival order (ties: file or generation order)
  std::string description;        // one line for reports
};

inline constexpr int kDefaultPods = 4000;
inline constexpr int kDefaultPdPools = 8;

// A Prefill/Decode pool of the generator: one served model, the KV bytes per token of its
// preset (pd::KvBytesPerToken), a typical prompt length and the target Prefill:Decode instance
// ratio. Its pods carry what the pool label, llm-d.ai/role and the toposched.io/pd-ratio,
// kv-bytes-per-token and prompt-tokens annotations would give (PlacementRequest).
struct PdPool {
  std::string name;   // "llm-<i>"
  std::string model;  // a pd::ModelPresets() name
  std::int64_t kv_bytes_per_token = 0;
  int prompt_tokens = 0;
  int ratio_prefill = 1, ratio_decode = 1;
  double PrefillShare() const { return static_cast<double>(ratio_prefill) / (ratio_prefill + ratio_decode); }
  bool operator==(const PdPool&) const = default;
};

// The generator's pools: pool i takes model preset i (cycling), prompt length 4096, 2048, 8192,
// 1024 (cycling) and ratio 1:1, 1:2, 1:3 (cycling). Empty for count <= 0.
std::vector<PdPool> GeneratorPools(int count);

// The generator's knobs. Weights are relative shares of pod counts.
struct WorkloadSpec {
  int pods = kDefaultPods;
  std::uint32_t seed = 1;
  // Poisson arrivals at this mean gap when the load factor below is 1; the gap scales with
  // 1 / load factor.
  double mean_interarrival_s = 1.0;
  double mean_duration_s = 1000.0;  // exponential durations
  // The day of a serving cluster, compressed: the load factor starts at load_start, peaks at
  // load_peak halfway through the pods (sine shape) and comes back to load_start, so the peak
  // leaves pods pending and fragmentation behind, and the end shows how much whole-node
  // capacity came back. Equal values: a flat load.
  double load_start = 1.0;
  double load_peak = 1.0;
  // Prefill and decode pods. With pools (pd_pools > 0) the two weights together are the share
  // of P/D pods: each picks a pool (uniformly) and then its role with the pool's target
  // Prefill share, so every pool's ratio is achievable and the split of the sum follows the
  // pools (about 0.225 : 0.375 with the default pools). Without pools: these shares, no pool.
  double prefill_weight = 0.22;    // 2 or 4 GPUs + as many RDMA NICs
  double decode_weight = 0.38;     // 1 or 2 GPUs + 1 RDMA NIC
  double training_weight = 0.05;   // 8 GPUs + 8 RDMA NICs: a whole HGX node
  double shared_weight = 0.35;     // 1 vGPU, 8000-20000 MiB, 20-50% of the SMs
  int pd_pools = kDefaultPdPools;  // GeneratorPools(pd_pools)
  bool operator==(const WorkloadSpec&) const = default;
};

// The default workload's load factors: at load factor 1 the GPUs of the nodes with RDMA NICs
// are all asked for in steady state (Little's law). Over-subscribed at the peak, so pods go
// pending once fragmentation bites; below full at the start and the end.
inline constexpr double kDefaultLoadStart = 0.6;
inline constexpr double kDefaultLoadPeak = 1.2;

// A spec for `cluster` with `pods` pods: arrivals paced for load factor 1 on that cluster,
// the default day profile, and the run long enough (several mean durations) for departures
// to fragment the nodes.
WorkloadSpec DefaultWorkloadSpec(const VirtualCluster& cluster, int pods = kDefaultPods,
                                 std::uint32_t seed = 1);

// Deterministic for a spec (std::mt19937 seeded with spec.seed; the draws use no
// implementation-defined distributions, so every standard library gives the same workload).
Workload GenerateWorkload(const WorkloadSpec& spec);

inline constexpr std::size_t kMaxWorkloadFileBytes = 64u << 20;

// A workload file: {"pods": [{"name": "...", "arrival": 0.0, "duration": 60.0,
// "kind": "decode", "pod": <Kubernetes Pod object>}, ...]}. name and pod are required;
// arrival defaults to 0, duration to "never leaves", kind to what the request looks like.
// Each pod is read with ParsePodRequest; errors name the entry ("pods[3] (\"decode-7\"): ...").
Result<Workload> ParseWorkloadJson(std::string_view json, const RequestConfig& config = {});
Result<Workload> LoadWorkloadFile(const std::string& path, const RequestConfig& config = {});

// ------------------------------------------------------------------------------------------
// Policies

// One decision: the node (index into the cluster) and the devices claimed there.
struct Decision {
  int node = -1;
  Placement placement;  // gpus, nics, pairs (the GPU->NIC classes pods will see)
};

// A scheduling policy: picks a node and devices for one pod and claims them in
// nodes[node].allocated. The simulator owns the nodes; a policy keeps only caches.
class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view Name() const = 0;
  // nullopt when no node fits: the pod stays pending (the simulator does not retry). An error
  // is a bug (e.g. a claim the node's allocation refuses), never "does not fit".
  // `cluster` is the simulator's view of the running cluster (network positions, free devices,
  // pool members) as it is before this decision; it does not change during the call. May be
  // null (a test calling a policy alone). toposched hands it to the cycle (SetCluster) for the
  // pool-aware plugins; the baselines ignore it.
  virtual Result<std::optional<Decision>> Schedule(const PlacementRequest& request,
                                                   std::vector<VirtualNode>& nodes,
                                                   std::shared_ptr<const framework::ClusterView> cluster) = 0;
};

inline constexpr std::string_view kPolicyToposched = "toposched";
inline constexpr std::string_view kPolicyFirstFit = "first-fit";
inline constexpr std::string_view kPolicyGpuOnly = "gpu-only";
inline constexpr std::string_view kPolicyRootComplex = "root-complex";

// All policies, toposched first (the default comparison order).
std::vector<std::string> PolicyNames();

struct PolicyOptions {
  // The toposched policy's framework config; absent: every builtin plugin with its default
  // weight. The baselines read only its engine options (max shares per GPU, GPU policy).
  std::optional<framework::SchedulerConfig> config;
  // Where the toposched policy builds its plugins from; null: the builtin plugins. Lets a test
  // or an experiment compare a plugin of its own under the same simulation.
  std::shared_ptr<const framework::Registry> registry;
  // The workload's typical shapes for the toposched policy's ExpectedFragmentation plugin; null:
  // Simulate derives them from the workload it runs (WorkloadMix), as FGD does from its trace.
  std::shared_ptr<const packing::ShapeMix> mix;
};

// FGD's typical pods of a workload: packing::TypicalShapes over its pods' shapes.
packing::ShapeMix WorkloadMix(const Workload& workload);

// Errors: an unknown name (listing the known ones), or a config the framework rejects.
Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name, const PolicyOptions& options = {});

// The baselines' device choice on one node, exposed for tests. Each returns nullopt when the
// request does not fit the node under that policy. None of them scores nodes: their policies
// take the first node in cluster order where the choice succeeds.
//
// first-fit (a device plugin without topology): the lowest-index free GPUs of the vendor and
// the lowest-index free RDMA NICs.
std::optional<Placement> ChooseFirstFit(const NodeTopology& topology, const NodeAllocation& allocated,
                                        const PlacementRequest& request, const EngineOptions& options = {});
// gpu-only (NVIDIA's best-effort GPU ranking, blind to NICs): the engine's GPU set for the
// request with its NICs removed, then the lowest-index free RDMA NICs.
std::optional<Placement> ChooseGpuOnly(const NodeTopology& topology, const NodeAllocation& allocated,
                                       const PlacementRequest& request, PlacementMemo& memo,
                                       const EngineOptions& options = {});
// root-complex (Koordinator's SamePCIe, DRA's pcieRoot): devices grouped by the top of their
// PCIe chain (devices on the CPU side: one group per NUMA node). One root complex holding all
// the GPUs and NICs when there is one (roots with the most free GPU+NIC pairs first); else
// GPUs root by root in that order and NICs from the roots those GPUs used first, then any.
std::optional<Placement> ChooseRootComplex(const NodeTopology& topology, const NodeAllocation& allocated,
                                           const PlacementRequest& request,
                                           const EngineOptions& options = {});

// The root-complex group of a device whose parent is `pcie_parent` and NUMA node `numa`:
// the index of the topmost PCIe node of its chain, or -2 - numa for devices on the CPU side
// (-1 when the NUMA node is unknown), so groups never collide.
int RootComplexOf(const NodeTopology& topology, int pcie_parent, int numa);

// Pairs each GPU (in the order given) with the best-ranked NIC of `nics` that still has spare
// capacity (ceil(gpus / nics) GPUs per NIC), lowest NIC index on ties: what NCCL does when it
// picks the nearest visible NIC. Empty when `nics` is empty.
std::vector<GpuNicPair> PairNearest(const NodeTopology& topology, const std::vector<int>& gpus,
                                    const std::vector<int>& nics);

// The rank (LinkRank) of a placement's worst GPU->NIC pair; 0 without pairs.
int WorstPairRank(const NodeTopology& topology, const std::vector<GpuNicPair>& pairs);

// ------------------------------------------------------------------------------------------
// The simulation

// Histogram buckets of a placed pod's worst GPU->NIC class, best first; pods without NICs go
// to kNoNicBucket.
inline constexpr std::array<std::string_view, 6> kClassBuckets = {"PIX",  "PXB", "PHB",
                                                                  "NODE", "SYS", "no NIC"};
inline constexpr std::size_t kNoNicBucket = 5;
std::size_t ClassBucket(LinkClass cls);

// Per-GPU state at the end of a run, for pictures.
struct GpuState {
  bool exclusive = false;
  int shares = 0;
  double memory_used = 0;  // fraction of the GPU's memory its shares hold (0 when unknown)
};
struct NodeState {
  std::string name;
  std::string shape;
  std::vector<GpuState> gpus;
  int nics = 0, nics_used = 0;     // RDMA NICs
  bool aligned_slot_free = false;  // an 8-GPU node that still has its aligned 8-GPU slot
};

// KV bytes of one transfer when neither pod of a pair says (no toposched.io/kv-bytes-per-token
// or prompt-tokens annotation in its pool): llama-3-70b (80 layers x 8 KV heads x 128 x 2 x
// 2 bytes) and a 4096-token prompt.
inline constexpr std::int64_t kFallbackKvBytesPerToken = 327680;
inline constexpr int kFallbackPromptTokens = 4096;

// Prefill/Decode figures of one run (docs/placement.md, "Prefill/Decode pools in the
// simulator"). A P/D pod is a placed pod with role prefill or decode and a pool; its
// counterparts are the running pods of its pool with the opposite role.
struct PdFigures {
  // Prefill->Decode pairs, counted once, when the later of the two is placed, by path kind.
  std::array<int, pd::kPathKinds> paths{};
  int pairs = 0;
  // Estimated KV transfer time over those pairs (pd::TransferSeconds of the pool's KV bytes per
  // token x prompt tokens; endpoints: each pod's GPUs, RDMA NICs and worst GPU->NIC class).
  double transfer_mean_ms = 0, transfer_p99_ms = 0;
  // P/D pods placed while they had counterparts, and of those, how many went to a node whose
  // expected transfer time (mean over the counterparts) was within 1% of the cheapest among the
  // nodes that could host the pod at that moment (enough free GPUs of the vendor and RDMA
  // NICs). The pod's own end counts as aligned on every node: this compares paths, not classes.
  int pods_with_counterparts = 0;
  int at_cheapest = 0;
  double at_cheapest_share = 0;  // at_cheapest / pods_with_counterparts (0 when none)
  // Per-domain P:D ratio error at the ratio tier (the tier whose path is leaf): for each pool
  // with a target ratio p:d and each domain holding its running pods, |P/(P+D) - p/(p+d)|,
  // averaged weighted by P+D; at the end, and the mean of that figure sampled after every
  // P/D arrival.
  double ratio_error_end = 0, ratio_error_mean = 0;
  int ratio_samples = 0;
};

struct KindCount {
  std::string kind;
  int arrived = 0, placed = 0, pending = 0;
};

struct PolicyResult {
  std::string policy;
  int placed = 0;
  int pending = 0;               // could not be placed when they arrived (not retried)
  std::vector<KindCount> kinds;  // first-seen order of kinds in the workload
  std::array<int, kClassBuckets.size()> class_histogram{};
  int nic_pods_placed = 0;        // placed pods that asked for RDMA NICs
  int at_best_class = 0;          // of those, how many got the best worst class their node allowed
  double at_best_share = 0;       // at_best_class / nic_pods_placed (0 when none)
  int eight_gpu_nodes = 0;        // nodes with at least 8 GPUs
  int aligned_slots_free = 0;     // of those, where 8 GPUs + min(8, RDMA NICs) still fit at best class
  double aligned_slots_mean = 0;  // the same count seen by each arriving pod, averaged over the run
  int gpus_in_use = 0;            // whole or shared, at the end
  int shared_pods_running = 0;    // at the end
  int shared_gpus = 0;            // GPUs carrying shares at the end
  double shared_memory_use = 0;   // mean fraction of memory held on those GPUs
  std::size_t decisions = 0;      // pods the policy decided on (placed + pending)
  double decision_p50_us = 0, decision_p99_us = 0, decision_mean_us = 0;
  double total_seconds = 0;  // measured wall time of the policy's whole run
  PdFigures pd;
  std::vector<NodeState> nodes;  // the cluster at the end
};

struct SimulationResult {
  std::string cluster_description;  // "240 nodes (84 hgx-h100-8gpu, ...), 1632 GPUs, ..."
  std::string workload_description;
  int nodes = 0, gpus = 0, rdma_nics = 0;
  int pods = 0;
  double end_time_s = 0;  // last arrival: departures after it are not simulated
  std::vector<PolicyResult> policies;
};

// Called after every pod a policy decides on; the command throttles what it draws.
using ProgressCallback = std::function<void(std::string_view policy, std::size_t policy_index,
                                            std::size_t done, std::size_t total)>;

struct SimulationOptions {
  std::vector<std::string> policies = PolicyNames();
  PolicyOptions policy_options;
  ProgressCallback progress;
};

// Runs every policy on its own copy of `cluster`: pods arrive in order; each is placed or
// counted pending; placed pods leave duration_s later (departures before arrivals at equal
// times). The run ends at the last arrival. Each policy sees a framework::StaticClusterView of
// its copy: nodes located by their labels with the config's network tiers, free GPUs and RDMA
// NICs and pool members updated on every decision and departure. Errors: pods out of arrival
// order, an unknown policy, a config the framework rejects, or a policy whose claims disagree
// with the pods it placed (a bug, named: the allocations, the view's free devices and its pool
// members are rebuilt from the running pods and compared).
Result<SimulationResult> Simulate(const VirtualCluster& cluster, const Workload& workload,
                                  const SimulationOptions& options = {});

// Capacity against the baselines (capacity is never traded away silently): `policy`'s
// pods placed less the most any other policy of the run placed, and each count where another
// policy placed more, in total or of one kind. nullopt when `policy` is not in the run or is
// alone in it.
struct CapacityShortfall {
  bool total = false;    // the pods placed in total, else those of `kind`
  std::string kind;      // "" for the total
  int fewer = 0;         // pods placed fewer than the best other policy there
  std::string baseline;  // that policy (the first of the run's order with that count)
};
struct CapacityCheck {
  std::string policy;
  int lead = 0;  // pods placed less the most any other policy placed (negative: behind)
  std::vector<CapacityShortfall> shortfalls;  // empty: at least every other policy everywhere
};
std::optional<CapacityCheck> CheckCapacity(const SimulationResult& result,
                                           std::string_view policy = kPolicyToposched);

// Reports: a side-by-side text table, JSON, and an SVG picture (node grids coloured by GPU
// occupancy per policy, class histograms as bars). Pure functions of the result.
std::string FormatTable(const SimulationResult& result);
std::string FormatJson(const SimulationResult& result);
std::string RenderSvg(const SimulationResult& result);

}  // namespace toposched::simulate
