// Trace replay (trace.h): the Alibaba GPU trace through FGD's protocol, with toposched's
// framework and the literature's baselines as policies.
// The CSV reading and the machine shapes are in trace_load.cc.

#include "toposched/simulate/trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "plugins/registry.h"
#include "simulate_internal.h"
#include "trace_internal.h"
#include "toposched/common/stats.h"
#include "toposched/framework/framework.h"
#include "toposched/framework/ranking.h"
#include "toposched/placement/packing.h"

namespace toposched::simulate {

namespace {

using packing::kMilli;
using trace_internal::Choice;
using trace_internal::HostFits;
using trace_internal::Idx;
using trace_internal::NodeRuntime;
using trace_internal::ReplayState;
using trace_internal::TracePolicy;

bool GpusFit(const NodeRuntime& rt, const TraceTask& task) {
  if (task.gpus == 0) return true;
  int enough = 0;
  for (int left : rt.milli_left) {
    if (left >= task.gpu_milli && ++enough >= task.gpus) return true;
  }
  return false;
}

packing::Shape ShapeOfTask(const TraceTask& t) {
  packing::Shape s;
  s.gpus = t.gpus;
  s.milli = t.gpus > 0 ? t.gpu_milli : 0;
  s.cpu_milli = t.cpu_milli;
  s.models = t.gpu_spec;
  return s;
}

packing::NodeState StateOfRuntime(const TraceNode& node, const NodeRuntime& rt) {
  return packing::NodeState{rt.milli_left, rt.cpu_left, node.model};
}

// GPUs for a task on a node by the lowest index (whole: fully free GPUs; a share: the first GPU
// with enough left).
std::vector<int> LowestGpus(const NodeRuntime& rt, const TraceTask& task) {
  std::vector<int> out;
  for (int g = 0; g < static_cast<int>(rt.milli_left.size()) && static_cast<int>(out.size()) < task.gpus; ++g) {
    if (rt.milli_left[Idx(g)] >= task.gpu_milli) out.push_back(g);
  }
  return out;
}

// The highest score wins; ties go to the node of the lowest rank. The FGD simulator's
// selectHost keeps the lexicographically smallest node name "for reproducibility" (its vendored
// generic_scheduler.go replaces kube-scheduler's reservoir sampling with that rule), and its
// node names start with their index in a seeded random permutation (syncClusterResourceList).
class BestNode {
 public:
  explicit BestNode(const std::vector<int>& rank) : rank_(rank) {}
  void Offer(std::int64_t score, int node) {
    if (best_ < 0 || score > score_ || (score == score_ && rank_[Idx(node)] < rank_[Idx(best_)])) {
      best_ = node;
      score_ = score;
    }
  }
  int best() const { return best_; }

 private:
  const std::vector<int>& rank_;
  int best_ = -1;
  std::int64_t score_ = 0;
};

class FirstFitPolicy : public TracePolicy {
 public:
  explicit FirstFitPolicy(ReplayState& s) : s_(s) {}
  Result<Choice> Schedule(const TraceTask& task, std::size_t) override {
    for (std::size_t i = 0; i < s_.nodes.size(); ++i) {
      if (!HostFits(s_.trace->nodes[i], s_.nodes[i], task) || !GpusFit(s_.nodes[i], task)) continue;
      return Choice{static_cast<int>(i), LowestGpus(s_.nodes[i], task)};
    }
    return Choice{};
  }

 private:
  ReplayState& s_;
};

// FGD simulator's Random (plugin/random_score.go, -gpusel random): a node uniformly among those
// that fit; a share on a GPU uniformly among those with enough left
// (open_gpu_share.go allocateGpuIdBasedOnRandomFit), whole GPUs the lowest fully free ones.
class RandomPolicy : public TracePolicy {
 public:
  explicit RandomPolicy(ReplayState& s) : s_(s) {}
  Result<Choice> Schedule(const TraceTask& task, std::size_t) override {
    // Reservoir sampling, for the node and for the share's GPU.
    int pick = -1;
    std::uint32_t seen = 0;
    for (std::size_t i = 0; i < s_.nodes.size(); ++i) {
      if (!HostFits(s_.trace->nodes[i], s_.nodes[i], task) || !GpusFit(s_.nodes[i], task)) continue;
      if (s_.rng() % ++seen == 0) pick = static_cast<int>(i);
    }
    if (pick < 0) return Choice{};
    const NodeRuntime& rt = s_.nodes[Idx(pick)];
    if (task.gpus == 1 && task.gpu_milli < kMilli) {
      int gpu = -1;
      std::uint32_t fitting = 0;
      for (int g = 0; g < static_cast<int>(rt.milli_left.size()); ++g) {
        if (rt.milli_left[Idx(g)] >= task.gpu_milli && s_.rng() % ++fitting == 0) gpu = g;
      }
      return Choice{pick, {gpu}};
    }
    return Choice{pick, LowestGpus(rt, task)};
  }

 private:
  ReplayState& s_;
};

// FGD simulator's BestFit (plugin/best_fit_score.go): score (1 - sum_r w_r (free_r - request_r) /
// maxSpec_r) x 100 over CPU and total GPU (weights 0.5, 0.5; maxSpec 128 cores, 8 GPUs),
// truncated to an integer; highest wins after the simulator's min-max normalisation
// (plugin_utils.go NormalizeScore). GPUs as Open-Gpu-Share's default "best" selection
// (open_gpu_share.go allocateGpuIdBasedOnBestFit): a share on the GPU with the least left that
// fits (lowest index on ties), whole GPUs the lowest fully free ones.
class BestFitPolicy : public TracePolicy {
 public:
  explicit BestFitPolicy(ReplayState& s) : s_(s) {}
  Result<Choice> Schedule(const TraceTask& task, std::size_t) override {
    scores_.clear();
    for (std::size_t i = 0; i < s_.nodes.size(); ++i) {
      const NodeRuntime& rt = s_.nodes[i];
      if (!HostFits(s_.trace->nodes[i], rt, task) || !GpusFit(rt, task)) continue;
      double gpu_left = 0;
      for (int l : rt.milli_left) gpu_left += l;
      const double free = (static_cast<double>(rt.cpu_left - task.cpu_milli) / 128000.0) * 0.5 +
                          ((gpu_left - static_cast<double>(task.GpuMilli())) / 8000.0) * 0.5;
      scores_.push_back({static_cast<std::int64_t>((1.0 - free) * 100.0), static_cast<int>(i)});
    }
    if (scores_.empty()) return Choice{};
    // The simulator's NormalizeScore: (score - lowest) * 100 / (highest - lowest), integer.
    std::int64_t lo = scores_[0].first, hi = scores_[0].first;
    for (const auto& [score, node] : scores_) {
      lo = std::min(lo, score);
      hi = std::max(hi, score);
    }
    BestNode pick(s_.node_rank);
    for (const auto& [score, node] : scores_) pick.Offer(hi == lo ? 0 : (score - lo) * 100 / (hi - lo), node);
    const NodeRuntime& rt = s_.nodes[Idx(pick.best())];
    if (task.gpus == 1 && task.gpu_milli < kMilli) {
      int best = -1;
      for (int g = 0; g < static_cast<int>(rt.milli_left.size()); ++g) {
        const int l = rt.milli_left[Idx(g)];
        if (l >= task.gpu_milli && (best < 0 || l < rt.milli_left[Idx(best)])) best = g;
      }
      return Choice{pick.best(), {best}};
    }
    return Choice{pick.best(), LowestGpus(rt, task)};
  }

 private:
  ReplayState& s_;
  std::vector<std::pair<std::int64_t, int>> scores_;
};

// Key of a task's shape for the per-node score caches.
std::string ShapeKeyOf(const TraceTask& t) {
  std::string k = std::to_string(t.gpus) + "/" + std::to_string(t.gpu_milli) + "/" + std::to_string(t.cpu_milli);
  for (const std::string& m : t.gpu_spec) k += "/" + m;
  return k;
}

// FGD as its simulator runs it (plugin/fgd_score.go): score = int(sigmoid((F_before - F_after) /
// 1000) x 100) with F the expected fragmentation over the typical pods; a share is scored on
// each GPU that fits and takes the best (first on ties); whole GPUs are the lowest free ones.
class FgdPolicy : public TracePolicy {
 public:
  FgdPolicy(ReplayState& s, packing::ShapeMix mix) : s_(s), mix_(std::move(mix)), before_(s.nodes.size()) {}

  Result<Choice> Schedule(const TraceTask& task, std::size_t) override {
    auto& cache = cache_[ShapeKeyOf(task)];
    cache.resize(s_.nodes.size());
    const packing::Shape shape = ShapeOfTask(task);
    BestNode pick(s_.node_rank);
    for (std::size_t i = 0; i < s_.nodes.size(); ++i) {
      const TraceNode& node = s_.trace->nodes[i];
      const NodeRuntime& rt = s_.nodes[i];
      if (!HostFits(node, rt, task) || !GpusFit(rt, task)) continue;
      Entry& e = cache[i];
      if (!e.valid || e.version != rt.version) {
        e = Score(node, rt, task, shape, i);
      }
      pick.Offer(e.score, static_cast<int>(i));
    }
    if (pick.best() < 0) return Choice{};
    const Entry& e = cache[Idx(pick.best())];
    if (task.gpus == 1 && task.gpu_milli < kMilli) {
      return Choice{pick.best(), {e.gpu}};
    }
    return Choice{pick.best(), LowestGpus(s_.nodes[Idx(pick.best())], task)};
  }

 private:
  struct Entry {
    bool valid = false;
    std::uint64_t version = 0;
    std::int64_t score = 0;
    int gpu = -1;
  };
  struct Before {
    bool valid = false;
    std::uint64_t version = 0;
    double frag = 0;
  };

  static std::int64_t ScoreOf(double before, double after) {
    return static_cast<std::int64_t>(100.0 / (1.0 + std::exp(-(before - after) / 1000.0)));
  }

  Entry Score(const TraceNode& node, const NodeRuntime& rt, const TraceTask& task, const packing::Shape& shape,
              std::size_t i) {
    Before& b = before_[i];
    const packing::NodeState state = StateOfRuntime(node, rt);
    if (!b.valid || b.version != rt.version) b = Before{true, rt.version, packing::Fragmentation(state, mix_)};
    Entry e{true, rt.version, 0, -1};
    if (task.gpus == 1 && task.gpu_milli < kMilli) {
      for (int g = 0; g < static_cast<int>(rt.milli_left.size()); ++g) {
        if (rt.milli_left[Idx(g)] < task.gpu_milli) continue;
        const std::int64_t s = ScoreOf(b.frag, packing::Fragmentation(packing::After(state, shape, {g}), mix_));
        if (e.gpu < 0 || s > e.score) {
          e.score = s;
          e.gpu = g;
        }
      }
      return e;
    }
    e.score = ScoreOf(b.frag, packing::Fragmentation(packing::After(state, shape, LowestGpus(rt, task)), mix_));
    return e;
  }

  ReplayState& s_;
  packing::ShapeMix mix_;
  std::vector<Before> before_;
  std::unordered_map<std::string, std::vector<Entry>> cache_;
};

// toposched: the framework (the builtin plugins, or the given config) on nodes with machine
// shapes, after kube-scheduler's CPU/memory fit and the gpu_spec selector. Ties go to the lowest
// node rank (the simulator's rule, as for the baselines). Filter verdicts and scores are cached
// per node and task shape until the node changes: the framework's answer depends on nothing else
// here (no pools).
class ToposchedTracePolicy : public TracePolicy {
 public:
  static Result<std::unique_ptr<ToposchedTracePolicy>> Make(ReplayState& s, const framework::SchedulerConfig& config,
                                                             packing::ShapeMix mix, bool cpu_blind) {
    auto fw = framework::Framework::Create(config, BuiltinRegistryForTrace());
    if (!fw.ok()) return fw.error().WithContext("toposched policy");
    auto p = std::unique_ptr<ToposchedTracePolicy>(
        new ToposchedTracePolicy(s, std::move(fw).value(), std::move(mix), cpu_blind));
    if (Status st = p->BuildNodes(); !st.ok()) return st.error();
    return p;
  }

  Result<Choice> Schedule(const TraceTask& task, std::size_t task_index) override {
    PlacementRequest request;
    request.pod_namespace = "trace";
    request.pod_name = task.name;
    request.pod_uid = "trace-" + std::to_string(task_index);
    request.cpu_milli = cpu_blind_ ? 0 : task.cpu_milli;
    if (task.gpus == 1 && task.gpu_milli < kMilli) {
      // The share a pod asks through HAMi, as the extender's replay sends it (trace_extender.cc
      // PodOf): compute and memory at the task's fraction. Memory matters to the engine's choice
      // of GPU inside the node (HAMi's device score, engine.defaultGpuPolicy).
      request.shared.count = 1;
      request.shared.cores = static_cast<std::int64_t>(trace_internal::SharePercent(task)) * (kFullGpuCores / 100);
      request.shared.memory_percent = trace_internal::SharePercent(task);
      request.shared.use_types = task.gpu_spec;
    } else {
      request.gpus = task.gpus;
    }
    const framework::CycleSetup setup{.mix = mix_, .packs_by_mix = true, .explain = false, .cluster = nullptr};
    framework::CycleState cycle = framework_.NewCycle(request, setup);
    auto& cache = cache_[request.ShapeKey() + "|" + std::to_string(task.cpu_milli)];
    cache.resize(s_.nodes.size());
    candidates_.clear();
    framework::CapacityBand band(framework_.CapacityBandWidth());
    // The trace's tasks ask no RDMA NIC: the rare class (rule 1) never applies here.
    framework::RemnantTie remnants(framework_, request, [this] {
      auto counts = std::make_shared<packing::RemnantCounts>();
      for (const NodeRuntime& node : s_.nodes) {
        for (const int left : node.milli_left) counts->Add(left);
      }
      return std::shared_ptr<const packing::RemnantCounts>(std::move(counts));
    });
    for (std::size_t i = 0; i < s_.nodes.size(); ++i) {
      const NodeRuntime& rt = s_.nodes[i];
      if (!HostFits(s_.trace->nodes[i], rt, task)) continue;
      Entry& e = cache[i];
      if (!e.valid || e.version != rt.version) {
        e.valid = true;
        e.version = rt.version;
        e.fits = framework_.RunFilter(cycle, infos_[i]).ok();
        e.score = framework::NodeScore{};
        e.share_left = -1;
        if (e.fits) {
          const framework::NodeScore s = framework_.RunScore(cycle, infos_[i]);
          e.score.total = s.total;
          e.score.capacity = s.capacity;
          // The card the engine chose (the cycle's cached outcome), for the remnant tie.
          if (const PlacementOutcome& o = cycle.Outcome(infos_[i]); remnants.on() && o.ok()) {
            e.share_left = framework::ShareLeft(cycle, infos_[i], *o.placement);
          }
        }
      }
      if (e.fits) {
        // The stable order here is the replay's node rank, which every policy of the replay shares.
        candidates_.push_back({e.score, static_cast<std::uint64_t>(s_.node_rank[i]), e.share_left, i});
        band.Offer(e.score);
      }
    }
    framework::RankBestFirst(candidates_, band, remnants);
    for (const framework::RankedNode& c : candidates_) {
      framework::NodeInfo& info = infos_[c.index];
      const PlacementOutcome& outcome = cycle.Outcome(info);
      if (!outcome.ok()) continue;
      std::vector<int> gpus = outcome.placement->gpus;
      const framework::PluginStatus reserved = framework_.RunReserve(cycle, info);
      if (reserved.code() == framework::Code::kError) {
        return Error("toposched on " + info.name + ": " + reserved.ToString());
      }
      if (!reserved.ok()) continue;
      return Choice{static_cast<int>(c.index), std::move(gpus)};
    }
    return Choice{};
  }

  // The replay changed the node's CPU and memory; the allocation is what Reserve left, and the
  // GPU milli it leaves must be the replay's.
  Status Placed(int node, const TraceTask& task, const Choice&, const NodeRuntime& rt) override {
    framework::NodeInfo& info = infos_[Idx(node)];
    if (!cpu_blind_) info.cpu_milli_free = rt.cpu_left;
    if (packing::StateOf(*info.topology, info.allocated, GpuVendor::kNvidia).milli_left != rt.milli_left) {
      return Error("toposched's allocation on " + info.name + " disagrees with the replay after " + task.name);
    }
    return Status::Ok();
  }

 private:
  struct Entry {
    bool valid = false;
    std::uint64_t version = 0;
    bool fits = false;
    framework::NodeScore score;  // total and capacity only
    int share_left = -1;         // what the engine's card for a single vGPU had left (even_remnants)
  };

  static const framework::Registry& BuiltinRegistryForTrace();

  ToposchedTracePolicy(ReplayState& s, framework::Framework fw, packing::ShapeMix mix, bool cpu_blind)
      : s_(s),
        framework_(std::move(fw)),
        mix_(std::make_shared<const packing::ShapeMix>(std::move(mix))),
        cpu_blind_(cpu_blind) {}

  Status BuildNodes() {
    trace_internal::MachineShapes shapes;
    for (const TraceNode& n : s_.trace->nodes) {
      framework::NodeInfo info;
      info.name = n.name;
      info.cpu_milli_free = cpu_blind_ ? -1 : n.cpu_milli;
      auto topology = shapes.For(n);
      if (!topology.ok()) return topology.error();
      info.topology = *topology;
      if (n.gpus > 0) info.topology_fingerprint = info.topology->Fingerprint();
      infos_.push_back(std::move(info));
    }
    return Status::Ok();
  }

  ReplayState& s_;
  framework::Framework framework_;
  std::shared_ptr<const packing::ShapeMix> mix_;
  bool cpu_blind_ = false;  // TraceReplayOptions::toposched_cpu_blind
  std::vector<framework::NodeInfo> infos_;
  std::unordered_map<std::string, std::vector<Entry>> cache_;
  std::vector<framework::RankedNode> candidates_;
};

const framework::Registry& ToposchedTracePolicy::BuiltinRegistryForTrace() {
  static const framework::Registry registry = plugins::BuiltinRegistry();
  return registry;
}

std::vector<packing::Shape> TraceShapes(const Trace& trace) {
  std::vector<packing::Shape> shapes;
  shapes.reserve(trace.tasks.size());
  for (const TraceTask& t : trace.tasks) shapes.push_back(ShapeOfTask(t));
  return shapes;
}

// Where the GPU no task holds sits now (TraceIdleGpu).
TraceIdleGpu IdleGpu(const ReplayState& state) {
  TraceIdleGpu idle;
  for (const NodeRuntime& rt : state.nodes) {
    for (const std::int64_t left : rt.milli_left) {
      if (left >= kMilli) {
        ++idle.whole;
        continue;
      }
      for (std::size_t b = kIdleBands; b-- > 0;) {
        if (left >= kIdleBandFloors[b]) {
          idle.remnant_milli[b] += left;
          break;
        }
      }
    }
  }
  return idle;
}

// Why `task` found no node on the cluster as it stands (PendingWhy).
PendingWhy WhyPending(const ReplayState& state, const TraceTask& task) {
  bool gpu_room = false, host_room = false;
  for (std::size_t i = 0; i < state.nodes.size(); ++i) {
    const TraceNode& node = state.trace->nodes[i];
    const NodeRuntime& rt = state.nodes[i];
    if (!trace_internal::ModelAccepted(node, task) || node.gpus < task.gpus) continue;
    int free = 0;
    for (const int left : rt.milli_left) free += left >= task.gpu_milli ? 1 : 0;
    const bool gpus = free >= task.gpus;
    const bool host = rt.cpu_left >= task.cpu_milli && rt.mem_left >= task.memory_mib;
    if (gpus && host) return PendingWhy::kNotPlaced;
    gpu_room = gpu_room || gpus;
    host_room = host_room || host;
  }
  if (!gpu_room) return PendingWhy::kNoGpuRoom;
  return host_room ? PendingWhy::kApart : PendingWhy::kNoCpuOrMemory;
}

// IdleGpu, checked against what the replay allocated: the GPUs' milli left must be the
// capacity less the placed tasks' GPU, or the replay's books are wrong.
Result<TraceIdleGpu> IdleGpuAddingUp(const ReplayState& state, std::int64_t capacity, double allocated) {
  TraceIdleGpu idle = IdleGpu(state);
  std::int64_t left = static_cast<std::int64_t>(idle.whole) * kMilli;
  for (const std::int64_t milli : idle.remnant_milli) left += milli;
  if (static_cast<double>(capacity - left) != allocated) {
    return Error("the GPUs have " + std::to_string(left) + " milli-GPU left, but " +
                 std::to_string(capacity) + " less the placed tasks' " +
                 std::to_string(static_cast<std::int64_t>(allocated)) + " is " +
                 std::to_string(capacity - static_cast<std::int64_t>(allocated)));
  }
  return idle;
}

// `mix`, `demand_mix`: TraceReplayResult::typical, typical_demand (from the trace, not from this
// seed's tuned tasks).
Result<TraceRun> RunOne(const Trace& trace, const std::string& policy, std::uint32_t seed,
                        const TraceReplayOptions& options, const framework::SchedulerConfig& config,
                        const packing::ShapeMix& mix, const packing::ShapeMix& demand_mix) {
  const std::int64_t capacity = trace.GpuCapacityMilli();
  TraceWorkload workload = PrepareWorkload(trace, options.tune_ratio, seed, options.shuffle);
  std::vector<TraceTask>& tasks = workload.tasks;
  if (options.max_tasks > 0 && tasks.size() > options.max_tasks) tasks.resize(options.max_tasks);

  ReplayState state;
  state.trace = &trace;
  state.node_rank = std::move(workload.node_rank);
  state.rng = workload.rng;  // one stream, as the simulator's math/rand
  for (const TraceNode& n : trace.nodes) {
    NodeRuntime rt;
    rt.cpu_left = n.cpu_milli;
    rt.mem_left = n.memory_mib;
    rt.milli_left.assign(Idx(n.gpus), kMilli);
    state.nodes.push_back(std::move(rt));
  }
  std::unique_ptr<TracePolicy> p;
  if (policy == kTracePolicyToposched) {
    auto made = ToposchedTracePolicy::Make(state, config, demand_mix, options.toposched_cpu_blind);
    if (!made.ok()) return made.error();
    p = std::move(made).value();
  } else if (policy == kTracePolicyExtender || policy == kTracePolicyKubeExtender) {
    auto made = trace_internal::MakeExtenderTracePolicy(state, config, policy == kTracePolicyKubeExtender);
    if (!made.ok()) return made.error();
    p = std::move(made).value();
  } else if (policy == kTracePolicyFgd) {
    p = std::make_unique<FgdPolicy>(state, mix);
  } else if (policy == kTracePolicyBestFit) {
    p = std::make_unique<BestFitPolicy>(state);
  } else if (policy == kTracePolicyFirstFit) {
    p = std::make_unique<FirstFitPolicy>(state);
  } else if (policy == kTracePolicyRandom) {
    p = std::make_unique<RandomPolicy>(state);
  } else {
    std::string known;
    for (const std::string& n : KnownTracePolicyNames()) known += (known.empty() ? "" : ", ") + n;
    return Error("unknown trace policy \"" + policy + "\" (known: " + known + ")");
  }

  TraceRun run;
  run.seed = seed;
  run.tasks = tasks.size();
  run.ratio_at.assign(options.marks.size(), -1);
  run.kinds_at.assign(options.marks.size(), TraceKindCounts{});
  run.idle_at.assign(options.marks.size(), TraceIdleGpu{});
  TraceKindCounts kinds;  // so far
  std::vector<double> times_us;
  times_us.reserve(tasks.size());
  double arrived = 0, allocated = 0;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t k = 0; k < tasks.size(); ++k) {
    const TraceTask& task = tasks[k];
    const auto t0 = std::chrono::steady_clock::now();
    auto choice = p->Schedule(task, k);
    times_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (!choice.ok()) return choice.error().WithContext(policy + ", task " + task.name);
    if (choice->node >= 0) {
      NodeRuntime& rt = state.nodes[Idx(choice->node)];
      const TraceNode& node = trace.nodes[Idx(choice->node)];
      // The policy's claim must be one the node can hold: a bug otherwise, never a placement.
      if (!HostFits(node, rt, task) || static_cast<int>(choice->gpus.size()) != task.gpus) {
        return Error(policy + " placed " + task.name + " on " + node.name + " where it does not fit");
      }
      for (int g : choice->gpus) {
        if (g < 0 || Idx(g) >= rt.milli_left.size() || rt.milli_left[Idx(g)] < task.gpu_milli) {
          return Error(policy + " placed " + task.name + " on GPU " + std::to_string(g) + " of " + node.name +
                       " where it does not fit");
        }
        rt.milli_left[Idx(g)] -= task.gpu_milli;
      }
      rt.cpu_left -= task.cpu_milli;
      rt.mem_left -= task.memory_mib;
      ++rt.version;
      if (Status placed = p->Placed(choice->node, task, *choice, rt); !placed.ok()) return placed.error();
      allocated += static_cast<double>(task.GpuMilli());
      ++run.placed;
    } else {
      ++run.unplaced;
      run.gpu_milli_unplaced += task.GpuMilli();
      const auto kind = static_cast<std::size_t>(KindOfTask(task));
      ++kinds.pending[kind];
      ++kinds.why[kind][static_cast<std::size_t>(WhyPending(state, task))];
    }
    ++kinds.arrived[static_cast<std::size_t>(KindOfTask(task))];
    arrived += static_cast<double>(task.GpuMilli());
    for (std::size_t m = 0; m < options.marks.size(); ++m) {
      if (run.ratio_at[m] < 0 && arrived >= options.marks[m] * static_cast<double>(capacity)) {
        run.ratio_at[m] = allocated / static_cast<double>(capacity);
        run.kinds_at[m] = kinds;
        auto idle = IdleGpuAddingUp(state, capacity, allocated);
        if (!idle.ok()) return idle.error().WithContext(policy + ", task " + task.name);
        run.idle_at[m] = *idle;
      }
    }
    if (options.progress && (k % 256 == 0 || k + 1 == tasks.size())) options.progress(policy, seed, k + 1, tasks.size());
  }
  for (std::size_t m = 0; m < run.ratio_at.size(); ++m) {
    if (run.ratio_at[m] < 0) {  // the mark was never reached
      run.ratio_at[m] = allocated / static_cast<double>(capacity);
      run.kinds_at[m] = kinds;
      auto idle = IdleGpuAddingUp(state, capacity, allocated);
      if (!idle.ok()) return idle.error().WithContext(policy + ", the end of the run");
      run.idle_at[m] = *idle;
    }
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::sort(times_us.begin(), times_us.end());
  run.decision_p50_us = Percentile(times_us, 0.5);
  run.decision_p99_us = Percentile(times_us, 0.99);
  return run;
}

}  // namespace

packing::ShapeMix TraceTypicalShapes(const Trace& trace) {
  return packing::TypicalShapes(TraceShapes(trace));
}

Result<TraceReplayResult> ReplayTrace(const Trace& trace, const TraceReplayOptions& options) {
  if (options.policies.empty()) return Error("no policy to replay");
  if (options.seeds.empty()) return Error("no seed");
  if (!(options.tune_ratio > 0 && options.tune_ratio <= 10)) return Error("tune ratio must be in (0, 10]");
  for (double m : options.marks) {
    if (!(m > 0 && m <= 10)) return Error("marks must be in (0, 10]");
  }
  framework::SchedulerConfig config = options.config ? *options.config : BuiltinDefaultConfig();
  // The trace has no per-GPU share count limit; its finest share is 1/20 of a GPU.
  config.engine.max_shares_per_gpu = framework::kMaxSharesPerGpuLimit;
  for (const std::string& p : options.policies) {
    const auto names = KnownTracePolicyNames();
    if (std::find(names.begin(), names.end(), p) == names.end()) {
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
      return Error("unknown trace policy \"" + p + "\" (known: " + known + ")");
    }
  }
  TraceReplayResult result;
  result.variant = trace.variant;
  result.nodes = static_cast<int>(trace.nodes.size());
  for (const TraceNode& n : trace.nodes) result.gpus += n.gpus;
  result.capacity_milli = trace.GpuCapacityMilli();
  if (result.capacity_milli <= 0) return Error("the trace's nodes have no GPUs");
  result.trace_tasks = trace.tasks.size();
  result.marks = options.marks;
  // FGD's typical pods (TraceTypicalShapes); toposched's from the same tasks, keeping also the
  // shapes that hold the GPU demand (the simulator's WorkloadMix). Both from the trace's tasks
  // before tuning, for every seed, as the FGD simulator sets them up.
  result.typical = TraceTypicalShapes(trace);
  result.typical_demand = packing::TypicalShapes(TraceShapes(trace), 0.95, packing::Coverage::kPodsAndGpuDemand);

  // Every (policy, seed) run on its own state; runs go to the machine's cores.
  struct Job {
    std::size_t policy, seed;
  };
  std::vector<Job> jobs;
  for (std::size_t p = 0; p < options.policies.size(); ++p) {
    for (std::size_t s = 0; s < options.seeds.size(); ++s) jobs.push_back({p, s});
  }
  std::vector<std::optional<Result<TraceRun>>> runs(jobs.size());
  std::atomic<std::size_t> next{0};
  std::mutex progress_mu;
  TraceReplayOptions locked = options;
  if (options.progress) {
    locked.progress = [&](std::string_view policy, std::uint32_t seed, std::size_t done, std::size_t total) {
      std::lock_guard<std::mutex> lock(progress_mu);
      options.progress(policy, seed, done, total);
    };
  }
  auto worker = [&] {
    for (std::size_t j = next++; j < jobs.size(); j = next++) {
      runs[j] = RunOne(trace, options.policies[jobs[j].policy], options.seeds[jobs[j].seed], locked, config,
                       result.typical, result.typical_demand);
    }
  };
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < std::min<std::size_t>(threads, jobs.size()); ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();

  for (std::size_t p = 0; p < options.policies.size(); ++p) {
    TracePolicyResult pr;
    pr.policy = options.policies[p];
    pr.mean_ratio_at.assign(options.marks.size(), 0);
    pr.min_ratio_at.assign(options.marks.size(), 1e9);
    pr.mean_pending_at.assign(options.marks.size(), std::array<double, kTraceKinds>{});
    pr.mean_idle_at.assign(options.marks.size(), std::array<double, 1 + kIdleBands>{});
    pr.mean_why_at.assign(options.marks.size(), std::array<std::array<double, kPendingWhys>, kTraceKinds>{});
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      if (jobs[j].policy != p) continue;
      if (!runs[j]->ok()) return runs[j]->error();
      const TraceRun& r = runs[j]->value();
      for (std::size_t m = 0; m < options.marks.size(); ++m) {
        pr.mean_ratio_at[m] += r.ratio_at[m] / static_cast<double>(options.seeds.size());
        pr.min_ratio_at[m] = std::min(pr.min_ratio_at[m], r.ratio_at[m]);
        for (std::size_t k = 0; k < kTraceKinds; ++k) {
          pr.mean_pending_at[m][k] +=
              static_cast<double>(r.kinds_at[m].pending[k]) / static_cast<double>(options.seeds.size());
        }
        for (std::size_t k = 0; k < kTraceKinds; ++k) {
          for (std::size_t w = 0; w < kPendingWhys; ++w) {
            pr.mean_why_at[m][k][w] +=
                static_cast<double>(r.kinds_at[m].why[k][w]) / static_cast<double>(options.seeds.size());
          }
        }
        const double runs_milli = static_cast<double>(options.seeds.size()) * kMilli;
        pr.mean_idle_at[m][0] +=
            static_cast<double>(r.idle_at[m].whole) / static_cast<double>(options.seeds.size());
        for (std::size_t b = 0; b < kIdleBands; ++b) {
          pr.mean_idle_at[m][1 + b] += static_cast<double>(r.idle_at[m].remnant_milli[b]) / runs_milli;
        }
      }
      pr.runs.push_back(r);
    }
    result.policies.push_back(std::move(pr));
  }
  return result;
}

std::string_view TraceKindName(TraceKind kind) {
  switch (kind) {
    case TraceKind::kCpuOnly:
      return "CPU-only";
    case TraceKind::kShared:
      return "shared";
    case TraceKind::kWholeGpu:
      return "whole-GPU";
  }
  return "?";
}

std::string_view PendingWhyName(PendingWhy why) {
  switch (why) {
    case PendingWhy::kNoGpuRoom:
      return "no GPU room";
    case PendingWhy::kNoCpuOrMemory:
      return "no CPU or memory";
    case PendingWhy::kApart:
      return "GPU and CPU on different nodes";
    case PendingWhy::kNotPlaced:
      return "fit, not placed";
  }
  return "?";
}

TraceKind KindOfTask(const TraceTask& task) {
  if (task.gpus == 0) return TraceKind::kCpuOnly;
  return task.gpu_milli < kMilli ? TraceKind::kShared : TraceKind::kWholeGpu;
}

std::optional<PairedDifference> PairedRatioDifference(const TracePolicyResult& a, const TracePolicyResult& b,
                                                      std::size_t mark) {
  std::vector<double> d;
  for (const TraceRun& ra : a.runs) {
    for (const TraceRun& rb : b.runs) {
      if (ra.seed == rb.seed && mark < ra.ratio_at.size() && mark < rb.ratio_at.size()) {
        d.push_back(ra.ratio_at[mark] - rb.ratio_at[mark]);
        break;
      }
    }
  }
  if (d.size() < 2) return std::nullopt;
  const double n = static_cast<double>(d.size());
  double mean = 0;
  for (double x : d) mean += x / n;
  double ss = 0;
  for (double x : d) ss += (x - mean) * (x - mean);
  return PairedDifference{mean, std::sqrt(ss / (n - 1) / n), d.size()};
}

namespace {

// Each policy's ratio less FGD's, seed by seed, at every mark (nothing without FGD or with one
// seed): a difference of means smaller than about two standard errors is the seeds' luck, not
// the policy.
void AppendAgainstFgd(const TraceReplayResult& r, std::string& out) {
  const TracePolicyResult* fgd = nullptr;
  for (const TracePolicyResult& p : r.policies) {
    if (p.policy == kTracePolicyFgd) fgd = &p;
  }
  if (fgd == nullptr || fgd->runs.size() < 2) return;
  char buf[128];
  out += "against fgd, seed by seed (mean difference +- its standard error, points)\n                  ";
  for (double m : r.marks) {
    std::snprintf(buf, sizeof buf, "         at %3.0f%%", 100 * m);
    out += buf;
  }
  out += "\n";
  for (const TracePolicyResult& p : r.policies) {
    if (&p == fgd) continue;
    std::snprintf(buf, sizeof buf, "  %-16s", p.policy.c_str());
    out += buf;
    for (std::size_t m = 0; m < r.marks.size(); ++m) {
      if (const auto d = PairedRatioDifference(p, *fgd, m)) {
        std::snprintf(buf, sizeof buf, "  %+6.2f +- %4.2f", 100 * d->mean, 100 * d->standard_error);
      } else {
        std::snprintf(buf, sizeof buf, "  %15s", "-");
      }
      out += buf;
    }
    out += "\n";
  }
}

// Which tasks pend, by kind, when each mark is read (what the ratio leaves out).
void AppendPendingByKind(const TraceReplayResult& r, std::string& out) {
  char buf[128];
  for (std::size_t m = 0; m < r.marks.size(); ++m) {
    std::snprintf(buf, sizeof buf, "tasks pending when %.0f%% had arrived (mean per seed):", 100 * r.marks[m]);
    out += buf;
    for (std::size_t k = 0; k < kTraceKinds; ++k) {
      out += k == 0 ? " " : " / ";
      out += TraceKindName(static_cast<TraceKind>(k));
    }
    out += "\n";
    for (const TracePolicyResult& p : r.policies) {
      if (m >= p.mean_pending_at.size()) continue;
      std::snprintf(buf, sizeof buf, "  %-16s%8.1f %8.1f %8.1f\n", p.policy.c_str(), p.mean_pending_at[m][0],
                    p.mean_pending_at[m][1], p.mean_pending_at[m][2]);
      out += buf;
    }
    // Why, for the kinds any policy left pending.
    for (std::size_t k = 0; k < kTraceKinds; ++k) {
      bool any = false;
      for (const TracePolicyResult& p : r.policies) {
        any = any || (m < p.mean_pending_at.size() && p.mean_pending_at[m][k] > 0);
      }
      if (!any) continue;
      out += "  why ";
      out += TraceKindName(static_cast<TraceKind>(k));
      out += " tasks pended:";
      for (std::size_t w = 0; w < kPendingWhys; ++w) {
        out += w == 0 ? " " : " / ";
        out += PendingWhyName(static_cast<PendingWhy>(w));
      }
      out += "\n";
      for (const TracePolicyResult& p : r.policies) {
        if (m >= p.mean_why_at.size()) continue;
        const auto& why = p.mean_why_at[m][k];
        std::snprintf(buf, sizeof buf, "    %-14s%8.1f %8.1f %8.1f %8.1f\n", p.policy.c_str(), why[0], why[1],
                      why[2], why[3]);
        out += buf;
      }
    }
  }
}

// Where the GPU no task holds sat when each mark was read: wholly free GPUs against the
// remnants on partly used ones, by size (what a share could still use, what only a small one).
void AppendIdleGpu(const TraceReplayResult& r, std::string& out) {
  char buf[160];
  for (std::size_t m = 0; m < r.marks.size(); ++m) {
    std::snprintf(buf, sizeof buf,
                  "idle GPU when %.0f%% had arrived (mean per seed, GPUs' worth): wholly free GPUs / left on "
                  "partly used GPUs: under 0.2 / 0.2-0.5 / 0.5-1\n",
                  100 * r.marks[m]);
    out += buf;
    for (const TracePolicyResult& p : r.policies) {
      if (m >= p.mean_idle_at.size()) continue;
      const auto& idle = p.mean_idle_at[m];
      std::snprintf(buf, sizeof buf, "  %-16s%8.1f %8.1f %8.1f %8.1f\n", p.policy.c_str(), idle[0], idle[1],
                    idle[2], idle[3]);
      out += buf;
    }
  }
}

}  // namespace

std::string FormatTraceTable(const std::vector<TraceReplayResult>& results) {
  std::string out =
      "(Alibaba GPU trace replayed with FGD's protocol; allocation ratios are simulated placements,\n"
      " published figures from the FGD simulator; times are measured on this machine)\n";
  char buf[256];
  for (const TraceReplayResult& r : results) {
    std::snprintf(buf, sizeof buf, "\ntrace %s: %d nodes, %d GPUs, %zu tasks tuned to 130%% of GPU capacity, %zu seeds\n",
                  r.variant.c_str(), r.nodes, r.gpus, r.trace_tasks, r.policies.empty() ? 0 : r.policies[0].runs.size());
    out += buf;
    out += "policy          ";
    for (double m : r.marks) {
      std::snprintf(buf, sizeof buf, "  at %3.0f%%  (worst seed, published)", 100 * m);
      out += buf;
    }
    out += "   unplaced GPU tasks   run time\n";
    for (const TracePolicyResult& p : r.policies) {
      std::snprintf(buf, sizeof buf, "%-16s", p.policy.c_str());
      out += buf;
      const auto published = PublishedRatio(r.variant, p.policy);
      for (std::size_t m = 0; m < r.marks.size(); ++m) {
        std::string pub = "-";
        if (published && (r.marks[m] == 1.0 || r.marks[m] == 1.3)) {
          std::snprintf(buf, sizeof buf, "%.2f%%", r.marks[m] == 1.0 ? published->first : published->second);
          pub = buf;
        }
        std::snprintf(buf, sizeof buf, "  %6.2f%%  (%6.2f%%, %7s)        ", 100 * p.mean_ratio_at[m],
                      100 * p.min_ratio_at[m], pub.c_str());
        out += buf;
      }
      double unplaced = 0, seconds = 0;
      for (const TraceRun& run : p.runs) {
        unplaced += static_cast<double>(run.unplaced);
        seconds += run.seconds;
      }
      const double n = p.runs.empty() ? 1 : static_cast<double>(p.runs.size());
      std::snprintf(buf, sizeof buf, " %8.1f      %7.2f s\n", unplaced / n, seconds / n);
      out += buf;
    }
    AppendAgainstFgd(r, out);
    AppendPendingByKind(r, out);
    AppendIdleGpu(r, out);
  }
  return out;
}

namespace {

// Per mark: {"shared": {"arrived": N, "pending": N}, ...}.
nlohmann::json KindsJson(const std::vector<TraceKindCounts>& at) {
  nlohmann::json out = nlohmann::json::array();
  for (const TraceKindCounts& c : at) {
    nlohmann::json mark = nlohmann::json::object();
    for (std::size_t k = 0; k < kTraceKinds; ++k) {
      mark[std::string(TraceKindName(static_cast<TraceKind>(k)))] = {{"arrived", c.arrived[k]},
                                                                     {"pending", c.pending[k]}};
    }
    out.push_back(std::move(mark));
  }
  return out;
}

// Per mark: {"shared": {"no GPU room": N, "no CPU or memory": N, "GPU and CPU on different
// nodes": N, "fit, not placed": N}, ...}.
nlohmann::json WhyJson(const std::vector<TraceKindCounts>& at) {
  nlohmann::json out = nlohmann::json::array();
  for (const TraceKindCounts& c : at) {
    nlohmann::json mark = nlohmann::json::object();
    for (std::size_t k = 0; k < kTraceKinds; ++k) {
      nlohmann::json kind = nlohmann::json::object();
      for (std::size_t w = 0; w < kPendingWhys; ++w) {
        kind[std::string(PendingWhyName(static_cast<PendingWhy>(w)))] = c.why[k][w];
      }
      mark[std::string(TraceKindName(static_cast<TraceKind>(k)))] = std::move(kind);
    }
    out.push_back(std::move(mark));
  }
  return out;
}

// Per mark: {"whole_gpus": N, "remnant_milli": {"1-199": N, "200-499": N, "500-999": N}}.
nlohmann::json IdleJson(const std::vector<TraceIdleGpu>& at) {
  nlohmann::json out = nlohmann::json::array();
  for (const TraceIdleGpu& idle : at) {
    nlohmann::json bands = nlohmann::json::object();
    for (std::size_t b = 0; b < kIdleBands; ++b) {
      const std::int64_t top = b + 1 < kIdleBands ? kIdleBandFloors[b + 1] : kMilli;
      bands[std::to_string(kIdleBandFloors[b]) + "-" + std::to_string(top - 1)] = idle.remnant_milli[b];
    }
    out.push_back({{"whole_gpus", idle.whole}, {"remnant_milli", std::move(bands)}});
  }
  return out;
}

}  // namespace

std::string FormatTraceJson(const std::vector<TraceReplayResult>& results) {
  nlohmann::json out = nlohmann::json::array();
  for (const TraceReplayResult& r : results) {
    nlohmann::json v{{"variant", r.variant},       {"nodes", r.nodes},   {"gpus", r.gpus},
                     {"capacity_milli", r.capacity_milli}, {"trace_tasks", r.trace_tasks}, {"marks", r.marks}};
    nlohmann::json policies = nlohmann::json::array();
    for (const TracePolicyResult& p : r.policies) {
      nlohmann::json runs = nlohmann::json::array();
      for (const TraceRun& run : p.runs) {
        runs.push_back({{"seed", run.seed},
                        {"ratio_at", run.ratio_at},
                        {"kinds_at", KindsJson(run.kinds_at)},
                        {"pending_why_at", WhyJson(run.kinds_at)},
                        {"idle_at", IdleJson(run.idle_at)},
                        {"tasks", run.tasks},
                        {"placed", run.placed},
                        {"unplaced", run.unplaced},
                        {"gpu_milli_unplaced", run.gpu_milli_unplaced},
                        {"seconds", run.seconds},
                        {"decision_p50_us", run.decision_p50_us},
                        {"decision_p99_us", run.decision_p99_us}});
      }
      nlohmann::json pj{{"policy", p.policy}, {"mean_ratio_at", p.mean_ratio_at}, {"min_ratio_at", p.min_ratio_at},
                        {"runs", runs}};
      if (const auto pub = PublishedRatio(r.variant, p.policy)) pj["published_percent"] = {pub->first, pub->second};
      for (const TracePolicyResult& other : r.policies) {
        if (other.policy != kTracePolicyFgd || &other == &p) continue;
        nlohmann::json paired = nlohmann::json::array();
        for (std::size_t m = 0; m < r.marks.size(); ++m) {
          const auto d = PairedRatioDifference(p, other, m);
          paired.push_back(d ? nlohmann::json{{"mean", d->mean}, {"standard_error", d->standard_error},
                                              {"seeds", d->seeds}}
                             : nlohmann::json(nullptr));
        }
        pj["against_fgd"] = std::move(paired);
      }
      policies.push_back(std::move(pj));
    }
    v["policies"] = std::move(policies);
    out.push_back(std::move(v));
  }
  return out.dump(2) + "\n";
}

}  // namespace toposched::simulate
