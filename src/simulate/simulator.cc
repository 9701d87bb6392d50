// The simulation loop and the figures it keeps per policy.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "simulate_internal.h"
#include "toposched/common/stats.h"
#include "toposched/framework/allocation.h"
#include "toposched/simulate/simulator.h"

namespace toposched::simulate {
namespace {

using framework::AllocationDelta;

std::size_t Index(int i) {
  return static_cast<std::size_t>(i);
}

struct Departure {
  double time = 0;
  std::size_t pod = 0;  // workload index: breaks time ties in arrival order
  bool operator>(const Departure& o) const { return time != o.time ? time > o.time : pod > o.pod; }
};

struct Running {
  int node = -1;
  AllocationDelta delta;
  bool shared = false;
};

// Rebuilds every node's allocation from the pods still running and compares: proves that no
// device was given twice and that departures gave back exactly what arrivals took.
Status CheckAllocations(const std::vector<VirtualNode>& nodes,
                        const std::vector<std::optional<Running>>& running, const EngineOptions& options) {
  std::vector<NodeAllocation> rebuilt(nodes.size());
  for (const std::optional<Running>& r : running) {
    if (!r) continue;
    const VirtualNode& node = nodes[Index(r->node)];
    if (Status s = framework::ApplyDelta(*node.topology, r->delta, rebuilt[Index(r->node)]); !s.ok()) {
      return s.error().WithContext("double allocation on " + node.name);
    }
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const NodeTopology& t = *nodes[i].topology;
    const NodeAllocation& have = nodes[i].allocated;
    for (int g = 0; g < static_cast<int>(t.gpus.size()); ++g) {
      const GpuShareUsage s = GpuShares(have, g);
      if (GpuExclusive(have, g) != GpuExclusive(rebuilt[i], g) || s != GpuShares(rebuilt[i], g)) {
        return Error(nodes[i].name + ": GPU" + std::to_string(g) +
                     " allocation differs from the running pods'");
      }
      const std::uint64_t memory = t.gpus[Index(g)].memory_mib;
      if (s.shares > options.max_shares_per_gpu || s.cores > kFullGpuCores ||
          (memory > 0 && s.memory_mib > static_cast<std::int64_t>(memory))) {
        return Error(nodes[i].name + ": GPU" + std::to_string(g) + " shared beyond its capacity");
      }
    }
    for (int n = 0; n < static_cast<int>(t.nics.size()); ++n) {
      if (NicUsed(have, n) != NicUsed(rebuilt[i], n)) {
        return Error(nodes[i].name + ": NIC " + t.nics[Index(n)].DisplayName() +
                     " allocation differs from the running pods'");
      }
    }
  }
  return Status::Ok();
}

KindCount& KindOf(std::vector<KindCount>& kinds, const std::string& kind) {
  for (KindCount& k : kinds) {
    if (k.kind == kind) return k;
  }
  kinds.push_back({kind, 0, 0, 0});
  return kinds.back();
}

// An aligned 8-GPU slot: the node can still take 8 GPUs with as many of its RDMA NICs (up to
// 8) at the best class it could ever give them. Nodes with fewer than 8 GPUs have none.
bool AlignedSlotFree(const VirtualNode& node, BestClassOracle& oracle, PlacementMemo& memo,
                     const EngineOptions& options) {
  const NodeTopology& t = *node.topology;
  if (t.gpus.size() < 8) return false;
  PlacementRequest eight;
  eight.pod_name = "aligned-8-gpu-probe";
  eight.gpus = 8;
  eight.vendor = t.gpus.front().vendor;
  eight.rdma_nics = std::min(8, t.RdmaNicCount());
  const std::optional<int> best = oracle.BestRank(t, eight);
  if (!best) return false;
  const PlacementOutcome now = memo.Place(t, node.allocated, eight, options);
  return now.ok() && WorstPairRank(t, now.placement->pairs) == *best;
}

// The end-of-run figures that look at the cluster rather than at decisions.
void Summarize(const std::vector<VirtualNode>& nodes, BestClassOracle& oracle, PlacementMemo& memo,
               const EngineOptions& options, PolicyResult& out) {
  double memory_use_sum = 0;
  for (const VirtualNode& node : nodes) {
    const NodeTopology& t = *node.topology;
    NodeState state;
    state.name = node.name;
    if (auto it = node.labels.find(std::string(kShapeLabel)); it != node.labels.end())
      state.shape = it->second;
    for (int g = 0; g < static_cast<int>(t.gpus.size()); ++g) {
      GpuState gs;
      gs.exclusive = GpuExclusive(node.allocated, g);
      const GpuShareUsage s = GpuShares(node.allocated, g);
      gs.shares = s.shares;
      const std::uint64_t memory = t.gpus[Index(g)].memory_mib;
      if (memory > 0) gs.memory_used = static_cast<double>(s.memory_mib) / static_cast<double>(memory);
      if (gs.exclusive || gs.shares > 0) ++out.gpus_in_use;
      if (gs.shares > 0) {
        ++out.shared_gpus;
        memory_use_sum += gs.memory_used;
      }
      state.gpus.push_back(gs);
    }
    for (int n = 0; n < static_cast<int>(t.nics.size()); ++n) {
      if (!t.nics[Index(n)].rdma) continue;
      ++state.nics;
      if (NicUsed(node.allocated, n)) ++state.nics_used;
    }
    if (t.gpus.size() >= 8) ++out.eight_gpu_nodes;
    state.aligned_slot_free = AlignedSlotFree(node, oracle, memo, options);
    if (state.aligned_slot_free) ++out.aligned_slots_free;
    out.nodes.push_back(std::move(state));
  }
  out.shared_memory_use = out.shared_gpus > 0 ? memory_use_sum / out.shared_gpus : 0;
}

Result<PolicyResult> RunPolicy(const std::string& name, std::size_t policy_index,
                               const VirtualCluster& cluster, const Workload& workload,
                               const SimulationOptions& options, const framework::SchedulerConfig& config) {
  TOPOSCHED_ASSIGN_OR_RETURN(
      const std::unique_ptr<Policy> policy,
      MakePolicy(name, PolicyOptions{config, options.policy_options.registry, options.policy_options.mix}));
  const EngineOptions& engine = config.engine;
  BestClassOracle oracle(engine);
  PlacementMemo probe_memo;

  PolicyResult out;
  out.policy = name;
  std::vector<VirtualNode> nodes = cluster.nodes;
  std::vector<std::optional<Running>> running(workload.pods.size());
  std::priority_queue<Departure, std::vector<Departure>, std::greater<>> departures;
  std::vector<double> times_us;
  times_us.reserve(workload.pods.size());
  for (const WorkloadPod& pod : workload.pods) KindOf(out.kinds, pod.kind);

  // Aligned slots over the run, kept per node and updated where a decision or a departure
  // changed something, sampled at every arrival: the end is one moment, this is the whole run.
  std::vector<char> slot_free(nodes.size(), 0);
  int slots_now = 0;
  double slots_sum = 0;
  auto update_slot = [&](std::size_t n) {
    const char now = AlignedSlotFree(nodes[n], oracle, probe_memo, engine) ? 1 : 0;
    slots_now += now - slot_free[n];
    slot_free[n] = now;
  };
  for (std::size_t n = 0; n < nodes.size(); ++n) update_slot(n);
  PdTracker tracker(nodes, config.network, workload.pods.size());

  const auto run_start = std::chrono::steady_clock::now();
  for (std::size_t p = 0; p < workload.pods.size(); ++p) {
    const WorkloadPod& pod = workload.pods[p];
    // Departures first at equal times: a pod leaving at t frees its devices for one arriving at t.
    while (!departures.empty() && departures.top().time <= pod.arrival_s) {
      std::optional<Running>& r = running[departures.top().pod];
      VirtualNode& node = nodes[Index(r->node)];
      framework::RevertDelta(r->delta, framework::ShapeOf(node.allocated), node.allocated);
      update_slot(Index(r->node));
      tracker.Departed(departures.top().pod, nodes, r->node);
      r.reset();
      departures.pop();
    }
    slots_sum += slots_now;
    tracker.BeforeDecision(pod.request, nodes);  // outside the timed decision

    const auto start = std::chrono::steady_clock::now();
    Result<std::optional<Decision>> decided = policy->Schedule(pod.request, nodes, tracker.view());
    const auto stop = std::chrono::steady_clock::now();
    times_us.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
    if (!decided.ok()) return decided.error().WithContext(name + ", pod " + pod.name);

    KindCount& kind = KindOf(out.kinds, pod.kind);
    ++kind.arrived;
    if (!decided->has_value()) {
      ++out.pending;
      ++kind.pending;
    } else {
      const Decision& d = **decided;
      if (d.node < 0 || Index(d.node) >= nodes.size()) {
        return Error(name + ", pod " + pod.name + ": decision names node " + std::to_string(d.node));
      }
      const NodeTopology& t = *nodes[Index(d.node)].topology;
      ++out.placed;
      ++kind.placed;
      if (pod.request.rdma_nics > 0) {
        const int rank = WorstPairRank(t, d.placement.pairs);
        const std::optional<int> best = oracle.BestRank(t, pod.request);
        const LinkClass worst = WorstPairClass(t, d.placement.pairs);
        ++out.class_histogram[d.placement.pairs.empty() ? kNoNicBucket : ClassBucket(worst)];
        ++out.nic_pods_placed;
        if (best && rank <= *best) ++out.at_best_class;
      } else {
        ++out.class_histogram[kNoNicBucket];
      }
      Running r;
      r.node = d.node;
      r.delta = framework::DeltaOf(t, pod.request, d.placement);
      r.shared = pod.request.IsShared();
      running[p] = std::move(r);
      update_slot(Index(d.node));
      tracker.Placed(p, pod.request, nodes, d);
      if (pod.duration_s > 0) departures.push({pod.arrival_s + pod.duration_s, p});
    }
    tracker.Arrived(pod.request);
    if (options.progress) options.progress(name, policy_index, p + 1, workload.pods.size());
  }
  out.aligned_slots_mean = workload.pods.empty() ? 0 : slots_sum / static_cast<double>(workload.pods.size());
  out.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();

  if (Status s = CheckAllocations(nodes, running, engine); !s.ok()) return s.error().WithContext(name);
  std::vector<int> running_node(running.size(), -1);
  for (std::size_t p = 0; p < running.size(); ++p) {
    if (running[p]) running_node[p] = running[p]->node;
  }
  if (Status s = tracker.Check(nodes, running_node); !s.ok()) return s.error().WithContext(name);
  out.pd = tracker.Finish();
  for (const std::optional<Running>& r : running) {
    if (r && r->shared) ++out.shared_pods_running;
  }
  out.at_best_share =
      out.nic_pods_placed > 0 ? static_cast<double>(out.at_best_class) / out.nic_pods_placed : 0;
  out.decisions = times_us.size();
  std::sort(times_us.begin(), times_us.end());
  double sum = 0;
  for (double t : times_us) sum += t;
  out.decision_mean_us = times_us.empty() ? 0 : sum / static_cast<double>(times_us.size());
  out.decision_p50_us = Percentile(times_us, 0.50);
  out.decision_p99_us = Percentile(times_us, 0.99);
  Summarize(nodes, oracle, probe_memo, engine, out);
  return out;
}

std::string DescribeCluster(const VirtualCluster& cluster, int gpus, int rdma_nics) {
  std::ostringstream d;
  d << cluster.nodes.size() << " nodes (";
  for (std::size_t i = 0; i < cluster.shapes.size(); ++i) {
    d << (i > 0 ? ", " : "") << cluster.shapes[i].count << " " << cluster.shapes[i].shape;
  }
  d << "), " << gpus << " GPUs, " << rdma_nics << " RDMA NICs";
  return d.str();
}

}  // namespace

std::optional<int> BestClassOracle::BestRank(const NodeTopology& t, const PlacementRequest& r) {
  auto fp = fingerprints_.find(&t);
  if (fp == fingerprints_.end()) fp = fingerprints_.emplace(&t, t.Fingerprint()).first;
  std::string key = fp->second;
  key += '\n';
  key += r.ShapeKey();
  auto it = best_.find(key);
  if (it == best_.end()) {
    const PlacementOutcome o = PlaceOnNode(t, NodeAllocation{}, r, options_);
    std::optional<int> rank;
    if (o.ok()) rank = WorstPairRank(t, o.placement->pairs);
    it = best_.emplace(std::move(key), rank).first;
  }
  return it->second;
}

std::size_t ClassBucket(LinkClass cls) {
  switch (cls) {
    case LinkClass::kSelf:
    case LinkClass::kNV:  // not a GPU->NIC class; counted with the best should it ever appear
    case LinkClass::kPIX:
      return 0;
    case LinkClass::kPXB:
      return 1;
    case LinkClass::kPHB:
      return 2;
    case LinkClass::kNODE:
      return 3;
    case LinkClass::kSYS:
      return 4;
  }
  return 4;
}

std::vector<std::string> PolicyNames() {
  return {std::string(kPolicyToposched), std::string(kPolicyFirstFit), std::string(kPolicyGpuOnly),
          std::string(kPolicyRootComplex)};
}

Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name, const PolicyOptions& options) {
  const framework::SchedulerConfig config = options.config ? *options.config : BuiltinDefaultConfig();
  if (name == kPolicyToposched) return MakeToposchedPolicy(config, options.registry.get(), options.mix);
  if (std::unique_ptr<Policy> baseline = MakeBaselinePolicy(name, config.engine)) return baseline;
  std::string known;
  for (const std::string& n : PolicyNames()) known += (known.empty() ? "" : ", ") + n;
  return Error("unknown policy \"" + std::string(name) + "\" (known: " + known + ")");
}

packing::ShapeMix WorkloadMix(const Workload& workload) {
  std::vector<packing::Shape> shapes;
  shapes.reserve(workload.pods.size());
  for (const WorkloadPod& pod : workload.pods)
    shapes.push_back(packing::ShapeOf(pod.request, pod.request.cpu_milli));
  return packing::TypicalShapes(shapes, 0.95, packing::Coverage::kPodsAndGpuDemand);
}

Result<SimulationResult> Simulate(const VirtualCluster& cluster, const Workload& workload,
                                  const SimulationOptions& options) {
  SimulationResult result;
  for (const VirtualNode& node : cluster.nodes) {
    if (node.topology == nullptr) return Error("node " + node.name + " has no topology");
    result.gpus += static_cast<int>(node.topology->gpus.size());
    result.rdma_nics += node.topology->RdmaNicCount();
  }
  result.nodes = static_cast<int>(cluster.nodes.size());
  result.pods = static_cast<int>(workload.pods.size());
  result.cluster_description = DescribeCluster(cluster, result.gpus, result.rdma_nics);
  result.workload_description = workload.description;
  for (std::size_t i = 0; i < workload.pods.size(); ++i) {
    // Departures are replayed between arrivals, which needs arrivals in order.
    if (i > 0 && workload.pods[i].arrival_s < workload.pods[i - 1].arrival_s) {
      return Error("workload: pod " + workload.pods[i].name +
                   " arrives before the pod listed ahead of it; "
                   "pods must be in arrival order");
    }
    result.end_time_s = std::max(result.end_time_s, workload.pods[i].arrival_s);
  }
  if (options.policies.empty()) return Error("no policy to simulate");

  const framework::SchedulerConfig config =
      options.policy_options.config ? *options.policy_options.config : BuiltinDefaultConfig();
  // Refuse unknown names before anything runs, not after minutes of the first policy.
  for (const std::string& name : options.policies) {
    if (auto p = MakePolicy(
            name, PolicyOptions{config, options.policy_options.registry, options.policy_options.mix});
        !p.ok()) {
      return p.error();
    }
  }
  SimulationOptions run_options = options;
  if (run_options.policy_options.mix == nullptr) {
    run_options.policy_options.mix = std::make_shared<const packing::ShapeMix>(WorkloadMix(workload));
  }
  for (std::size_t i = 0; i < options.policies.size(); ++i) {
    TOPOSCHED_ASSIGN_OR_RETURN(PolicyResult run,
                               RunPolicy(options.policies[i], i, cluster, workload, run_options, config));
    result.policies.push_back(std::move(run));
  }
  return result;
}

}  // namespace toposched::simulate
