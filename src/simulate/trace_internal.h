#pragma once
// The trace replay's pieces shared by its policies (trace.cc, trace_extender.cc); not part of
// the public API.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/framework/config.h"
#include "toposched/simulate/trace.h"
#include "toposched/topology/node_topology.h"

namespace toposched::simulate::trace_internal {

inline std::size_t Idx(int i) {
  return static_cast<std::size_t>(i);
}

// What the replay holds of one node while it runs.
struct NodeRuntime {
  std::int64_t cpu_left = 0, mem_left = 0;
  std::vector<int> milli_left;  // per GPU
  std::uint64_t version = 0;    // bumped on every change, for the score caches
};

inline bool ModelAccepted(const TraceNode& node, const TraceTask& task) {
  if (task.gpus == 0 || task.gpu_spec.empty()) return true;
  return std::find(task.gpu_spec.begin(), task.gpu_spec.end(), node.model) != task.gpu_spec.end();
}

// A share's fraction of its GPU as HAMi asks it, in percent, for both nvidia.com/gpucores and
// nvidia.com/gpumem-percentage: the trace's gpu_milli is both (GPU sharing splits compute and
// memory alike), rounded up to a whole percent (every value in the trace is a multiple of 10).
inline int SharePercent(const TraceTask& task) {
  return (task.gpu_milli + 9) / 10;
}

// kube-scheduler's NodeResourcesFit for CPU and memory, and the gpu_spec node selector.
inline bool HostFits(const TraceNode& node, const NodeRuntime& rt, const TraceTask& task) {
  return rt.cpu_left >= task.cpu_milli && rt.mem_left >= task.memory_mib && ModelAccepted(node, task) &&
         (task.gpus == 0 || node.gpus >= task.gpus);
}

// The machine shape of each trace node (TraceMachine), one topology per GPU model and count;
// an empty topology for a node without GPUs.
class MachineShapes {
 public:
  Result<std::shared_ptr<const NodeTopology>> For(const TraceNode& node);

 private:
  std::map<std::pair<std::string, int>, std::shared_ptr<const NodeTopology>> shapes_;
};

// A policy's decision: node and GPUs (indices into milli_left).
struct Choice {
  int node = -1;
  std::vector<int> gpus;
};

class TracePolicy {
 public:
  virtual ~TracePolicy() = default;
  // The task's node and GPUs among the nodes passing HostFits; node -1: unscheduled.
  virtual Result<Choice> Schedule(const TraceTask& task, std::size_t task_index) = 0;
  // Called after the replay applied a placement to `rt` (the node's runtime). A policy that keeps
  // its own allocation checks it against `rt` here: an error is a bug, never a placement.
  virtual Status Placed(int node, const TraceTask& task, const Choice& choice, const NodeRuntime& rt) {
    (void)node, (void)task, (void)choice, (void)rt;
    return Status::Ok();
  }
};

struct ReplayState {
  const Trace* trace = nullptr;
  std::vector<NodeRuntime> nodes;
  std::vector<int> node_rank;  // TraceWorkload::node_rank: ties go to the lowest
  std::mt19937 rng;            // the random policy
};

// The extender (kTracePolicyExtender; `kube`: kTracePolicyKubeExtender): ExtenderService's
// filter, prioritize and bind verbs, in process, on a ClusterStore of the trace's nodes
// (trace_extender.cc).
// The policy named `policy` (trace.h's kTracePolicy*) over `state`: FGD gets `mix`, toposched
// `demand_mix` (TraceReplayResult::typical, typical_demand). trace_policies.cc.
Result<std::unique_ptr<TracePolicy>> MakeTracePolicy(ReplayState& state, std::string_view policy,
                                                     const framework::SchedulerConfig& config,
                                                     const packing::ShapeMix& mix,
                                                     const packing::ShapeMix& demand_mix, bool cpu_blind);
// A task's shape for the packing measure (its GPUs, milli, CPU and accepted models).
packing::Shape ShapeOfTask(const TraceTask& t);

Result<std::unique_ptr<TracePolicy>> MakeExtenderTracePolicy(ReplayState& s,
                                                             const framework::SchedulerConfig& config,
                                                             bool kube);

}  // namespace toposched::simulate::trace_internal
