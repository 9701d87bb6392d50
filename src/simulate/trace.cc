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
#include "toposched/common/stats.h"
#include "toposched/framework/framework.h"
#include "toposched/framework/ranking.h"
#include "toposched/placement/packing.h"
#include "trace_internal.h"

namespace toposched::simulate {

namespace {

using packing::kMilli;
using trace_internal::Choice;
using trace_internal::HostFits;
using trace_internal::Idx;
using trace_internal::NodeRuntime;
using trace_internal::ReplayState;
using trace_internal::TracePolicy;

using trace_internal::ShapeOfTask;

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
  TOPOSCHED_ASSIGN_OR_RETURN(
      std::unique_ptr<TracePolicy> p,
      trace_internal::MakeTracePolicy(state, policy, config, mix, demand_mix, options.toposched_cpu_blind));

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
    times_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
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
      TOPOSCHED_RETURN_IF_ERROR(p->Placed(choice->node, task, *choice, rt));
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
        TOPOSCHED_ASSIGN_OR_RETURN_CTX(run.idle_at[m], IdleGpuAddingUp(state, capacity, allocated),
                                       policy + ", task " + task.name);
      }
    }
    if (options.progress && (k % 256 == 0 || k + 1 == tasks.size()))
      options.progress(policy, seed, k + 1, tasks.size());
  }
  for (std::size_t m = 0; m < run.ratio_at.size(); ++m) {
    if (run.ratio_at[m] < 0) {  // the mark was never reached
      run.ratio_at[m] = allocated / static_cast<double>(capacity);
      run.kinds_at[m] = kinds;
      TOPOSCHED_ASSIGN_OR_RETURN_CTX(run.idle_at[m], IdleGpuAddingUp(state, capacity, allocated),
                                     policy + ", the end of the run");
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
  result.typical_demand =
      packing::TypicalShapes(TraceShapes(trace), 0.95, packing::Coverage::kPodsAndGpuDemand);

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

}  // namespace toposched::simulate
