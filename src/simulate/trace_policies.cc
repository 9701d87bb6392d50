// The trace replay's policies (trace.h): first-fit, random, best-fit, FGD and toposched's
// framework, each choosing a node and GPUs for one task on the replay's nodes. The extender's
// policies are in trace_extender.cc; the replay loop is in trace.cc.

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "plugins/registry.h"
#include "simulate_internal.h"
#include "toposched/framework/framework.h"
#include "toposched/framework/ranking.h"
#include "toposched/placement/packing.h"
#include "trace_internal.h"

namespace toposched::simulate::trace_internal {

namespace {

using packing::kMilli;

bool GpusFit(const NodeRuntime& rt, const TraceTask& task) {
  if (task.gpus == 0) return true;
  int enough = 0;
  for (int left : rt.milli_left) {
    if (left >= task.gpu_milli && ++enough >= task.gpus) return true;
  }
  return false;
}

packing::NodeState StateOfRuntime(const TraceNode& node, const NodeRuntime& rt) {
  return packing::NodeState{rt.milli_left, rt.cpu_left, node.model};
}

// GPUs for a task on a node by the lowest index (whole: fully free GPUs; a share: the first GPU
// with enough left).
std::vector<int> LowestGpus(const NodeRuntime& rt, const TraceTask& task) {
  std::vector<int> out;
  for (int g = 0; g < static_cast<int>(rt.milli_left.size()) && static_cast<int>(out.size()) < task.gpus;
       ++g) {
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
  explicit FirstFitPolicy(ReplayState& s) : state_(s) {}
  Result<Choice> Schedule(const TraceTask& task, std::size_t) override {
    for (std::size_t i = 0; i < state_.nodes.size(); ++i) {
      if (!HostFits(state_.trace->nodes[i], state_.nodes[i], task) || !GpusFit(state_.nodes[i], task)) {
        continue;
      }
      return Choice{static_cast<int>(i), LowestGpus(state_.nodes[i], task)};
    }
    return Choice{};
  }

 private:
  ReplayState& state_;
};

// FGD simulator's Random (plugin/random_score.go, -gpusel random): a node uniformly among those
// that fit; a share on a GPU uniformly among those with enough left
// (open_gpu_share.go allocateGpuIdBasedOnRandomFit), whole GPUs the lowest fully free ones.
class RandomPolicy : public TracePolicy {
 public:
  explicit RandomPolicy(ReplayState& s) : state_(s) {}
  Result<Choice> Schedule(const TraceTask& task, std::size_t) override {
    // Reservoir sampling, for the node and for the share's GPU.
    int pick = -1;
    std::uint32_t seen = 0;
    for (std::size_t i = 0; i < state_.nodes.size(); ++i) {
      if (!HostFits(state_.trace->nodes[i], state_.nodes[i], task) || !GpusFit(state_.nodes[i], task)) {
        continue;
      }
      if (state_.rng() % ++seen == 0) pick = static_cast<int>(i);
    }
    if (pick < 0) return Choice{};
    const NodeRuntime& rt = state_.nodes[Idx(pick)];
    if (task.gpus == 1 && task.gpu_milli < kMilli) {
      int gpu = -1;
      std::uint32_t fitting = 0;
      for (int g = 0; g < static_cast<int>(rt.milli_left.size()); ++g) {
        if (rt.milli_left[Idx(g)] >= task.gpu_milli && state_.rng() % ++fitting == 0) gpu = g;
      }
      return Choice{pick, {gpu}};
    }
    return Choice{pick, LowestGpus(rt, task)};
  }

 private:
  ReplayState& state_;
};

// FGD simulator's BestFit (plugin/best_fit_score.go): score (1 - sum_r w_r (free_r - request_r) /
// maxSpec_r) x 100 over CPU and total GPU (weights 0.5, 0.5; maxSpec 128 cores, 8 GPUs),
// truncated to an integer; highest wins after the simulator's min-max normalisation
// (plugin_utils.go NormalizeScore). GPUs as Open-Gpu-Share's default "best" selection
// (open_gpu_share.go allocateGpuIdBasedOnBestFit): a share on the GPU with the least left that
// fits (lowest index on ties), whole GPUs the lowest fully free ones.
class BestFitPolicy : public TracePolicy {
 public:
  explicit BestFitPolicy(ReplayState& s) : state_(s) {}
  Result<Choice> Schedule(const TraceTask& task, std::size_t) override {
    scores_.clear();
    for (std::size_t i = 0; i < state_.nodes.size(); ++i) {
      const NodeRuntime& rt = state_.nodes[i];
      if (!HostFits(state_.trace->nodes[i], rt, task) || !GpusFit(rt, task)) continue;
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
    BestNode pick(state_.node_rank);
    for (const auto& [score, node] : scores_) pick.Offer(hi == lo ? 0 : (score - lo) * 100 / (hi - lo), node);
    const NodeRuntime& rt = state_.nodes[Idx(pick.best())];
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
  ReplayState& state_;
  std::vector<std::pair<std::int64_t, int>> scores_;
};

// Key of a task's shape for the per-node score caches.
std::string ShapeKeyOf(const TraceTask& t) {
  std::string k =
      std::to_string(t.gpus) + "/" + std::to_string(t.gpu_milli) + "/" + std::to_string(t.cpu_milli);
  for (const std::string& m : t.gpu_spec) k += "/" + m;
  return k;
}

// FGD as its simulator runs it (plugin/fgd_score.go): score = int(sigmoid((F_before - F_after) /
// 1000) x 100) with F the expected fragmentation over the typical pods; a share is scored on
// each GPU that fits and takes the best (first on ties); whole GPUs are the lowest free ones.
class FgdPolicy : public TracePolicy {
 public:
  FgdPolicy(ReplayState& s, packing::ShapeMix mix)
      : state_(s), mix_(std::move(mix)), before_(s.nodes.size()) {}

  Result<Choice> Schedule(const TraceTask& task, std::size_t) override {
    auto& cache = cache_[ShapeKeyOf(task)];
    cache.resize(state_.nodes.size());
    const packing::Shape shape = ShapeOfTask(task);
    BestNode pick(state_.node_rank);
    for (std::size_t i = 0; i < state_.nodes.size(); ++i) {
      const TraceNode& node = state_.trace->nodes[i];
      const NodeRuntime& rt = state_.nodes[i];
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
    return Choice{pick.best(), LowestGpus(state_.nodes[Idx(pick.best())], task)};
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

  // FGD's own measure: a GPU model a typical shape does not accept is fragmentation for it.
  static constexpr packing::ForeignModels kFgdMeasure = packing::ForeignModels::kCounted;

  static std::int64_t ScoreOf(double before, double after) {
    return static_cast<std::int64_t>(100.0 / (1.0 + std::exp(-(before - after) / 1000.0)));
  }

  Entry Score(const TraceNode& node, const NodeRuntime& rt, const TraceTask& task,
              const packing::Shape& shape, std::size_t i) {
    Before& b = before_[i];
    const packing::NodeState state = StateOfRuntime(node, rt);
    if (!b.valid || b.version != rt.version)
      b = Before{true, rt.version, packing::Fragmentation(state, mix_, kFgdMeasure)};
    Entry e{true, rt.version, 0, -1};
    if (task.gpus == 1 && task.gpu_milli < kMilli) {
      for (int g = 0; g < static_cast<int>(rt.milli_left.size()); ++g) {
        if (rt.milli_left[Idx(g)] < task.gpu_milli) continue;
        const std::int64_t s =
            ScoreOf(b.frag, packing::Fragmentation(packing::After(state, shape, {g}), mix_, kFgdMeasure));
        if (e.gpu < 0 || s > e.score) {
          e.score = s;
          e.gpu = g;
        }
      }
      return e;
    }
    e.score = ScoreOf(b.frag, packing::Fragmentation(packing::After(state, shape, LowestGpus(rt, task)), mix_,
                                                     kFgdMeasure));
    return e;
  }

  ReplayState& state_;
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
  static Result<std::unique_ptr<ToposchedTracePolicy>> Make(ReplayState& s,
                                                            const framework::SchedulerConfig& config,
                                                            packing::ShapeMix mix, bool cpu_blind) {
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto fw, framework::Framework::Create(config, BuiltinRegistryForTrace()),
                                   "toposched policy");
    auto p = std::unique_ptr<ToposchedTracePolicy>(
        new ToposchedTracePolicy(s, std::move(fw), std::move(mix), cpu_blind));
    TOPOSCHED_RETURN_IF_ERROR(p->BuildNodes());
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
      request.shared.cores =
          static_cast<std::int64_t>(trace_internal::SharePercent(task)) * (kFullGpuCores / 100);
      request.shared.memory_percent = trace_internal::SharePercent(task);
      request.shared.use_types = task.gpu_spec;
    } else {
      request.gpus = task.gpus;
    }
    const framework::CycleSetup setup{
        .mix = mix_, .packs_by_mix = true, .explain = false, .cluster = nullptr};
    framework::CycleState cycle = framework_.NewCycle(request, setup);
    auto& cache = cache_[request.ShapeKey() + "|" + std::to_string(task.cpu_milli)];
    cache.resize(state_.nodes.size());
    candidates_.clear();
    framework::CapacityBand band(framework_.CapacityBandWidth());
    // The trace's tasks ask no RDMA NIC: the rare class (rule 1) never applies here.
    framework::RemnantTie remnants(framework_, request, [this] {
      auto counts = std::make_shared<packing::RemnantCounts>();
      for (const NodeRuntime& node : state_.nodes) {
        for (const int left : node.milli_left) counts->Add(left);
      }
      return std::shared_ptr<const packing::RemnantCounts>(std::move(counts));
    });
    for (std::size_t i = 0; i < state_.nodes.size(); ++i) {
      const NodeRuntime& rt = state_.nodes[i];
      if (!HostFits(state_.trace->nodes[i], rt, task)) continue;
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
        candidates_.push_back(
            {e.score, static_cast<std::uint64_t>(state_.node_rank[i]), e.share_left, i, IdleShare(rt)});
        band.Offer(e.score);
      }
    }
    // A task that asks CPU alone ranks as prioritize-cpu scores it (the chart's default).
    framework::RankBestFirst(candidates_, band, remnants, /*cpu_pod=*/task.gpus == 0 && task.cpu_milli > 0);
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
      return Error("toposched's allocation on " + info.name + " disagrees with the replay after " +
                   task.name);
    }
    return Status::Ok();
  }

 private:
  // The share of the node's GPUs that are free whole (framework::IdleGpuShare's measure).
  static double IdleShare(const NodeRuntime& rt) {
    if (rt.milli_left.empty()) return 0.0;
    const auto free = std::count(rt.milli_left.begin(), rt.milli_left.end(), kMilli);
    return static_cast<double>(free) / static_cast<double>(rt.milli_left.size());
  }
  struct Entry {
    bool valid = false;
    std::uint64_t version = 0;
    bool fits = false;
    framework::NodeScore score;  // total and capacity only
    int share_left = -1;         // what the engine's card for a single vGPU had left (even_remnants)
  };

  static const framework::Registry& BuiltinRegistryForTrace();

  ToposchedTracePolicy(ReplayState& s, framework::Framework fw, packing::ShapeMix mix, bool cpu_blind)
      : state_(s),
        framework_(std::move(fw)),
        mix_(std::make_shared<const packing::ShapeMix>(std::move(mix))),
        cpu_blind_(cpu_blind) {}

  Status BuildNodes() {
    trace_internal::MachineShapes shapes;
    for (const TraceNode& n : state_.trace->nodes) {
      framework::NodeInfo info;
      info.name = n.name;
      info.cpu_milli_free = cpu_blind_ ? -1 : n.cpu_milli;
      TOPOSCHED_ASSIGN_OR_RETURN(info.topology, shapes.For(n));
      if (n.gpus > 0) info.topology_fingerprint = info.topology->Fingerprint();
      infos_.push_back(std::move(info));
    }
    return Status::Ok();
  }

  ReplayState& state_;
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

}  // namespace

packing::Shape ShapeOfTask(const TraceTask& t) {
  packing::Shape s;
  s.gpus = t.gpus;
  s.milli = t.gpus > 0 ? t.gpu_milli : 0;
  s.cpu_milli = t.cpu_milli;
  s.models = t.gpu_spec;
  return s;
}

Result<std::unique_ptr<TracePolicy>> MakeTracePolicy(ReplayState& state, std::string_view policy,
                                                     const framework::SchedulerConfig& config,
                                                     const packing::ShapeMix& mix,
                                                     const packing::ShapeMix& demand_mix, bool cpu_blind) {
  if (policy == kTracePolicyToposched) {
    TOPOSCHED_ASSIGN_OR_RETURN(auto made, ToposchedTracePolicy::Make(state, config, demand_mix, cpu_blind));
    return std::unique_ptr<TracePolicy>(std::move(made));
  }
  if (policy == kTracePolicyExtender || policy == kTracePolicyKubeExtender) {
    return MakeExtenderTracePolicy(state, config, policy == kTracePolicyKubeExtender);
  }
  if (policy == kTracePolicyFgd) return std::unique_ptr<TracePolicy>(std::make_unique<FgdPolicy>(state, mix));
  if (policy == kTracePolicyBestFit)
    return std::unique_ptr<TracePolicy>(std::make_unique<BestFitPolicy>(state));
  if (policy == kTracePolicyFirstFit)
    return std::unique_ptr<TracePolicy>(std::make_unique<FirstFitPolicy>(state));
  if (policy == kTracePolicyRandom)
    return std::unique_ptr<TracePolicy>(std::make_unique<RandomPolicy>(state));
  std::string known;
  for (const std::string& n : KnownTracePolicyNames()) known += (known.empty() ? "" : ", ") + n;
  return Error("unknown trace policy \"" + std::string(policy) + "\" (known: " + known + ")");
}

}  // namespace toposched::simulate::trace_internal
