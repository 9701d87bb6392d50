#pragma once
// Trace replay: the Alibaba GPU production trace (cluster-trace-gpu-v2023, the "openb" trace of
// the FGD paper, Weng et al., USENIX ATC '23) replayed with the FGD simulator's protocol, so
// toposched's packing is measured on real production tasks and against the published figures
// (../shared/reference/fgd-anchor.md):
//
//   - every node of the node list, with its CPU, memory, GPU count and model; a task fits a node
//     when CPU, memory and GPUs fit (kube-scheduler's NodeResourcesFit) and, with gpu_spec, only
//     on the listed models;
//   - tasks in a seeded random order (the published runs pass --shuffle-pod=true: the trace
//     sorted by name, then shuffled), then "tuned": while the requested GPU is below tune_ratio x
//     the cluster's GPU capacity, a task drawn uniformly at random (with replacement) from the
//     trace is appended;
//   - the typical pods (FGD's task shapes and their frequencies) from the trace's tasks before
//     tuning (the simulator's SetTypicalPods runs before TunePodsByNodeTotalResource);
//   - equal scores go to the node of the lowest rank in a seeded random permutation of the
//     nodes (the simulator prefixes each node's name with its index in rand.Perm and its
//     selectHost keeps the smallest name);
//   - each task scheduled once, in order, never leaving; a task that fits nowhere stays
//     unscheduled;
//   - the figure: GPU allocation ratio (allocated milli-GPU / capacity) when the arrived tasks'
//     requested GPU first reaches each mark (100 %, 130 % of capacity), mean over the seeds.
//
// The trace has no topology: every node gets a machine shape for its GPU model and count
// (TraceMachine, documented in docs/placement.md), so the toposched policy runs its own
// framework (filter -> score -> reserve, topology and all) on it.
//
// Deterministic for a trace, policy and seed, except the measured times.

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/framework/config.h"
#include "toposched/placement/packing.h"
#include "toposched/topology/synthetic.h"

namespace toposched::simulate {

struct TraceNode {
  std::string name;
  std::int64_t cpu_milli = 0;
  std::int64_t memory_mib = 0;
  int gpus = 0;
  std::string model;  // "G2", "T4", "V100M32", ...
};

struct TraceTask {
  std::string name;
  std::int64_t cpu_milli = 0;
  std::int64_t memory_mib = 0;
  int gpus = 0;                       // 0..8 whole GPUs, or 1 with gpu_milli < 1000 for one share
  int gpu_milli = 0;                  // per GPU: 1000 for whole GPUs
  std::vector<std::string> gpu_spec;  // accepted models; empty: any
  double creation_s = 0;
  std::int64_t GpuMilli() const { return static_cast<std::int64_t>(gpus) * gpu_milli; }
};

inline constexpr std::size_t kMaxTraceFileBytes = 64u << 20;
inline constexpr int kMaxTraceGpusPerNode = 64;

// The node list: header `sn,cpu_milli,memory_mib,gpu,model` (columns found by name, extra ones
// ignored). Errors name the line and the column.
Result<std::vector<TraceNode>> ParseTraceNodes(std::string_view csv);
// A pod list: `name,cpu_milli,memory_mib,num_gpu,gpu_milli` required; gpu_spec and
// creation_time optional (the multigpu20 file has neither). Returned in creation order, ties
// by name. Errors name the line and the column.
Result<std::vector<TraceTask>> ParseTraceTasks(std::string_view csv);

struct Trace {
  std::string variant;  // "default", "gpushare40", ...
  std::vector<TraceNode> nodes;
  std::vector<TraceTask> tasks;
  std::int64_t GpuCapacityMilli() const;
};

// Reads DIR/openb_node_list_gpu_node.csv and DIR/openb_pod_list_<variant>.csv.
Result<Trace> LoadTrace(const std::string& dir, const std::string& variant);
// The variants DIR holds (from its openb_pod_list_*.csv names), sorted.
std::vector<std::string> TraceVariants(const std::string& dir);

// FGD's workload tuning: `tasks` in order, then tasks drawn uniformly with replacement
// (std::mt19937 seeded with `seed`; the index is the draw modulo the count) appended while the
// total requested GPU is below ratio x capacity.
std::vector<TraceTask> TuneTasks(const std::vector<TraceTask>& tasks, std::int64_t capacity_milli,
                                 double ratio, std::uint32_t seed);

// One seed's run as the FGD simulator sets it up (pkg/simulator/core.go Simulate, simulator.go
// SortClusterPods, TunePodsByNodeTotalResource, syncClusterResourceList): one random stream
// (std::mt19937 seeded with `seed`) first shuffles the trace's tasks, sorted by name (when
// `shuffle`; else creation order), then appends the tuning draws from the trace, then ranks the
// nodes with a random permutation; the random policy continues the stream.
struct TraceWorkload {
  std::vector<TraceTask> tasks;  // arrival order
  std::vector<int> node_rank;    // per trace node, a permutation of 0..n-1: ties go to the lowest
  std::mt19937 rng;              // the stream after the set-up
};
TraceWorkload PrepareWorkload(const Trace& trace, double tune_ratio, std::uint32_t seed, bool shuffle = true);
// The name the FGD simulator gives a trace node in one seed's run: its rank there
// (TraceWorkload::node_rank) in four digits, a dash, its trace name (syncClusterResourceList:
// `fmt.Sprintf("%04d-", idx) + name`). A scheduler that orders nodes by name sees the seed's order.
std::string SimulatorNodeName(int rank, std::string_view name);

// The machine shape a trace node is simulated as (the trace has no topology): NVSwitch boards
// with 4 PCIe switches and 4 RDMA NICs for the 8-GPU G2/G3 nodes, NVLink-paired PCIe boxes for
// the V100 nodes, plain PCIe cards on one or two sockets for T4, P100 and A10. The GPU model is
// the trace's name so that gpu_spec matches it.
Result<SyntheticSpec> TraceMachine(const TraceNode& node);

// FGD's typical pods for a trace: packing::TypicalShapes (the 95 % most frequent task shapes,
// CPU-only tasks included) over the trace's tasks before tuning, as the simulator computes them
// (SetTypicalPods runs before TunePodsByNodeTotalResource in core.go's Simulate).
packing::ShapeMix TraceTypicalShapes(const Trace& trace);

inline constexpr std::string_view kTracePolicyToposched = "toposched";
inline constexpr std::string_view kTracePolicyFgd = "fgd";
inline constexpr std::string_view kTracePolicyBestFit = "best-fit";
inline constexpr std::string_view kTracePolicyFirstFit = "first-fit";
inline constexpr std::string_view kTracePolicyRandom = "random";
// The extender's code on the trace: each task asking GPUs a Pod through ExtenderService's
// filter, prioritize and bind verbs (in process, JSON in and out) on a ClusterStore of the
// trace's nodes, CPU fed back as the Kubernetes source feeds it; the extender's score decides.
// CPU-only tasks, which never reach the extender (managedResources), by kube-scheduler's
// in-tree scores.
inline constexpr std::string_view kTracePolicyExtender = "extender";
// The same through the chart's kube-scheduler: the extender's 0-10 score x weight 5 x 10 plus
// kube-scheduler's NodeResourcesFit (LeastAllocated) and BalancedAllocation scores.
inline constexpr std::string_view kTracePolicyKubeExtender = "kube+extender";
// The default set: toposched first, then the literature's baselines.
std::vector<std::string> TracePolicyNames();
// Every policy --policies takes: the default set and the two extender policies (not in the
// default set: they take minutes).
std::vector<std::string> KnownTracePolicyNames();

using TraceProgress =
    std::function<void(std::string_view policy, std::uint32_t seed, std::size_t done, std::size_t total)>;

struct TraceReplayOptions {
  std::vector<std::string> policies = TracePolicyNames();
  std::vector<std::uint32_t> seeds = {42, 43, 44, 45, 46, 47, 48, 49, 50, 51};
  double tune_ratio = 1.3;
  // Arrival order: seeded random (the published runs), or false: the trace's creation order.
  bool shuffle = true;
  std::vector<double> marks = {1.0, 1.3};  // arrived GPU / capacity at which the ratio is read
  // The toposched policy's config; absent: the builtin defaults. Its engine's share limit is
  // raised to the trace's finest share (the trace has no per-GPU share count limit).
  std::optional<framework::SchedulerConfig> config;
  // The toposched policy sees no CPU: neither the task's request nor the node's free CPU, so its
  // packing measure counts every node's CPU as enough: the extender blind to CPU, kept so that
  // the difference reading CPU makes can be measured (docs/placement.md, "Trace replay", "The
  // extender reads CPU as the replay does"); the baselines keep their CPU.
  bool toposched_cpu_blind = false;
  // Run only the first N tasks of each tuned workload (0: all); for tests.
  std::size_t max_tasks = 0;
  TraceProgress progress;
};

// The kinds of task an operator counts apart: CPU only, one share of one GPU, whole GPUs.
enum class TraceKind : std::uint8_t { kCpuOnly, kShared, kWholeGpu };
inline constexpr std::size_t kTraceKinds = 3;
std::string_view TraceKindName(TraceKind kind);
TraceKind KindOfTask(const TraceTask& task);

// Why a task found no node, read on the cluster as it stood when the task arrived, over the
// nodes whose model the task accepts and that have as many GPUs as it asks:
//   kNoGpuRoom: none had its GPUs free (for a share, a GPU with its fraction left);
//   kNoCpuOrMemory: some did, but none of the nodes had the task's CPU and memory left;
//   kApart: some had the GPUs free and some the CPU and memory, never one node both (the GPU
//     stranded on nodes whose CPU or memory is gone, FGD's fragmentation);
//   kNotPlaced: a node had all of it, and the policy placed the task nowhere.
enum class PendingWhy : std::uint8_t { kNoGpuRoom, kNoCpuOrMemory, kApart, kNotPlaced };
inline constexpr std::size_t kPendingWhys = 4;
std::string_view PendingWhyName(PendingWhy why);

// Tasks of each kind (indexed by TraceKind) that had arrived by a mark, and those of them that
// found no node, and those by why (indexed by kind, then PendingWhy).
using PendingWhyCounts = std::array<std::size_t, kPendingWhys>;
struct TraceKindCounts {
  std::array<std::size_t, kTraceKinds> arrived{}, pending{};
  std::array<PendingWhyCounts, kTraceKinds> why{};
};

// Where the GPU no task holds sat when a mark was read: GPUs wholly free, and the milli left on
// partly used GPUs by how much each has left (under 200, 200-499, 500-999 milli). Whole GPUs
// times 1,000 plus the remnants is the capacity less what was allocated.
inline constexpr std::size_t kIdleBands = 3;
inline constexpr std::array<std::int64_t, kIdleBands> kIdleBandFloors = {1, 200, 500};
struct TraceIdleGpu {
  std::size_t whole = 0;                                 // GPUs with all 1,000 milli free
  std::array<std::int64_t, kIdleBands> remnant_milli{};  // milli left on partly used GPUs, by band
};

struct TraceRun {
  std::uint32_t seed = 0;
  std::vector<double> ratio_at;           // per mark: allocated / capacity
  std::vector<TraceKindCounts> kinds_at;  // per mark, read with ratio_at
  std::vector<TraceIdleGpu> idle_at;      // per mark, read with ratio_at
  std::size_t tasks = 0, placed = 0, unplaced = 0;
  std::int64_t gpu_milli_unplaced = 0;  // requested GPU of the unplaced tasks
  double seconds = 0;                   // measured
  double decision_p50_us = 0, decision_p99_us = 0;
};

struct TracePolicyResult {
  std::string policy;
  std::vector<double> mean_ratio_at;  // per mark, over the runs
  std::vector<double> min_ratio_at;   // per mark: the worst seed
  // Per mark, per kind: the mean over the runs of the tasks pending at the mark.
  std::vector<std::array<double, kTraceKinds>> mean_pending_at;
  // Per mark, per kind, per PendingWhy: the mean over the runs of the pending tasks.
  std::vector<std::array<std::array<double, kPendingWhys>, kTraceKinds>> mean_why_at;
  // Per mark: the mean over the runs of the idle GPU, in GPUs' worth: [0] wholly free GPUs,
  // [1 + b] the remnants of band b (TraceIdleGpu).
  std::vector<std::array<double, 1 + kIdleBands>> mean_idle_at;
  std::vector<TraceRun> runs;
};

struct TraceReplayResult {
  std::string variant;
  int nodes = 0, gpus = 0;
  std::int64_t capacity_milli = 0;
  std::size_t trace_tasks = 0;
  std::vector<double> marks;
  // The typical pods every run packed for, from the trace's tasks before tuning: FGD's
  // (TraceTypicalShapes) and toposched's (the same tasks, also the shapes holding 95 % of the
  // GPU demand).
  packing::ShapeMix typical, typical_demand;
  std::vector<TracePolicyResult> policies;
};

Result<TraceReplayResult> ReplayTrace(const Trace& trace, const TraceReplayOptions& options = {});

// Policy `a`'s ratio at mark `mark` less `b`'s, seed by seed over the seeds both ran: the mean
// and the standard error of that mean (fractions, as ratio_at). Seed noise is shared by the
// two, so this tells a real difference from a lucky seed set better than the two means do.
// nullopt with fewer than two common seeds.
struct PairedDifference {
  double mean = 0, standard_error = 0;
  std::size_t seeds = 0;
};
std::optional<PairedDifference> PairedRatioDifference(const TracePolicyResult& a, const TracePolicyResult& b,
                                                      std::size_t mark);

// The published FGD-simulator figures (fgd-anchor.md), allocation ratio in % at 100 % and
// 130 % arrived; nullopt for a variant or policy the paper does not list.
std::optional<std::pair<double, double>> PublishedRatio(std::string_view variant, std::string_view policy);

std::string FormatTraceTable(const std::vector<TraceReplayResult>& results);
std::string FormatTraceJson(const std::vector<TraceReplayResult>& results);
// One Markdown row per result (a variant or a family's level): the mean ratio at the first mark
// of each policy (the first result's order), then each policy's seed-paired difference to fgd
// there (PairedRatioDifference, points +- its standard error; `-` where not available), under a
// line saying what the numbers are. Empty for no results.
std::string FormatFamilyTable(const std::vector<TraceReplayResult>& results);

}  // namespace toposched::simulate
