// The trace replayed through the extender as deployed (trace.h, kTracePolicyExtender and
// kTracePolicyKubeExtender): each task becomes a Pod, and ExtenderService's filter, prioritize
// and bind verbs decide it in process, JSON in and JSON out, on a ClusterStore of the trace's
// nodes. What the Kubernetes source would feed the store comes from the replay: each node's
// allocatable CPU, and each bound pod's CPU request.
//
// With `kube` the node is chosen as the chart's kube-scheduler chooses it
// (deploy/kube-scheduler/scheduler-config.yaml): the extender's 0-10 score times its weight 5
// times 10, plus the in-tree score that differs between the trace's nodes, NodeResourcesFit: the
// chart's MostAllocated over nvidia.com/gpu with plugin weight 1 (kubeScheduler.binpackGpus,
// which also turns NodeResourcesBalancedAllocation off; a pod that asks no GPU is not scored on
// it), as pkg/scheduler/framework/plugins/noderesources/most_allocated.go,
// resource_allocation.go and extender.go's prioritize scaling compute it at k8s.io/kubernetes
// v1.37.2, the version e2e/ pins. A node's nvidia.com/gpu is what HAMi's device plugin
// advertises, its GPUs x deviceSplitCount (10, HAMi's default); a task asks its whole GPUs, a
// share 1. The other default score plugins give every
// trace node the same score (no taints, affinities, volumes, images or owners). Pods asking no
// managed resource (CPU-only tasks) reach only the chart's second extender entry, which has no
// managedResources and names prioritize-cpu (kubeScheduler.scoreCpuPods): its score is added as
// the main entry's is, and kube-scheduler binds them itself. Without `kube` the extender's score
// alone decides.
// Ties: with `kube` drawn at random, as kube-scheduler's selectHost does; without it the lowest
// node rank, the replay's rule for the other policies. The extender's reply leaves few: one node
// of its best keeps the top score (PreferOneOfTheBest), so both modes mostly take that node.
// That node is the first of the best in the stable order of node names, so the nodes carry the
// names the FGD simulator gives them in the seed's run (SimulatorNodeName: the seed's rank,
// a dash, the trace name), as every other policy's ties follow the seed's rank: with the bare
// trace names the extender would meet one order on every seed.

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugins/registry.h"
#include "toposched/extender/service.h"
#include "toposched/framework/framework.h"
#include "toposched/metrics/metrics.h"
#include "toposched/placement/packing.h"
#include "toposched/server/http_server.h"
#include "toposched/state/cluster_state.h"
#include "trace_internal.h"

namespace toposched::simulate::trace_internal {

namespace {

using json = nlohmann::json;

// kube-scheduler's constants (framework.MaxNodeScore, extenderv1.MaxExtenderPriority) and the
// chart's extender weight.
constexpr std::int64_t kMaxNodeScore = 100;
constexpr std::int64_t kMaxExtenderPriority = 10;
constexpr std::int64_t kChartExtenderWeight = 5;
// HAMi's default deviceSplitCount: the nvidia.com/gpu its device plugin advertises per GPU.
constexpr std::int64_t kHamiSplitCount = 10;

// The nvidia.com/gpu a task requests: its whole GPUs, or 1 for a share (HAMi's vGPU).
std::int64_t GpuResource(const TraceTask& t) {
  return t.gpus;
}

// most_allocated.go's mostRequestedScore.
std::int64_t MostRequested(std::int64_t requested, std::int64_t capacity) {
  if (capacity == 0) return 0;
  return std::min(requested, capacity) * kMaxNodeScore / capacity;
}

class ExtenderTracePolicy : public TracePolicy {
 public:
  ExtenderTracePolicy(ReplayState& s, framework::Framework fw, bool kube)
      : state_(s),
        framework_(std::move(fw)),
        store_(nullptr, extender::StoreOptionsFor(framework_.config())),
        kube_(kube),
        ties_(s.rng) {}  // a copy: the replay's own stream is left as it is

  Status Build() {
    MachineShapes shapes;
    std::vector<state::NodeSpec> specs;
    for (std::size_t i = 0; i < state_.trace->nodes.size(); ++i) {
      const TraceNode& n = state_.trace->nodes[i];
      TOPOSCHED_ASSIGN_OR_RETURN(std::shared_ptr<const NodeTopology> topology, shapes.For(n));
      const std::string& name = node_names_.emplace_back(SimulatorNodeName(state_.node_rank[i], n.name));
      specs.push_back({name, topology, {{"kubernetes.io/hostname", name}}, true, n.cpu_milli});
      index_.emplace(name, static_cast<int>(i));
      gpu_requested_.push_back(0);
    }
    if (Status st = store_.UpsertNodes(std::move(specs)); !st.ok())
      return st.error().WithContext("extender policy");
    store_.SetSynced(true);
    service_ = std::make_unique<extender::ExtenderService>(framework_, store_, metrics_,
                                                           extender::ExtenderOptions{});
    return Status::Ok();
  }

  Result<Choice> Schedule(const TraceTask& task, std::size_t task_index) override {
    const std::string uid = "trace-" + std::to_string(task_index);
    const std::string name = task.name + "-" + std::to_string(task_index);  // draws repeat a task's name
    names_.clear();
    for (std::size_t i = 0; i < state_.nodes.size(); ++i) {
      if (HostFits(state_.trace->nodes[i], state_.nodes[i], task)) names_.push_back(node_names_[i]);
    }
    if (names_.empty()) return Choice{};
    const bool managed = task.gpus > 0;  // managedResources: only pods asking a device reach the main entry
    const json pod = PodOf(task, name, uid);
    json args = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", names_}};
    std::vector<char> passed(names_.size(), 1);
    std::size_t feasible = names_.size();
    if (managed) {
      TOPOSCHED_ASSIGN_OR_RETURN(const json filtered, Call("/scheduler/filter", args.dump()));
      if (const std::string e = filtered.value("Error", std::string()); !e.empty()) {
        return Error("extender filter: " + e);
      }
      std::unordered_set<std::string> pass;
      if (const auto nn = filtered.find("NodeNames"); nn != filtered.end() && nn->is_array()) {
        for (const json& n : *nn) pass.insert(n.get<std::string>());
      }
      std::vector<std::string> kept;
      for (std::size_t k = 0; k < names_.size(); ++k) {
        passed[k] = pass.contains(names_[k]) ? 1 : 0;
        if (passed[k]) kept.push_back(names_[k]);
      }
      if (kept.empty()) return Choice{};
      feasible = kept.size();
      args["NodeNames"] = std::move(kept);
    }
    // The in-tree scores of every node that passed the filters, and the extender entries' scores
    // on top: kube-scheduler scores only when more than one node is feasible (schedule_one.go).
    std::vector<std::int64_t> total(names_.size(), 0);
    if (feasible > 1) {
      if (kube_) {
        for (std::size_t k = 0; k < names_.size(); ++k) total[k] = InTreeScore(index_.at(names_[k]), task);
      }
      if (managed) {
        TOPOSCHED_ASSIGN_OR_RETURN(const json scored, Call("/scheduler/prioritize", args.dump()));
        if (!scored.is_array())
          return Error("extender prioritize: not a list: " + scored.dump().substr(0, 200));
        AddScores(scored, total);
      }
      // The second entry, called for every pod: it scores the pods that ask no device and names
      // no host for the others.
      TOPOSCHED_ASSIGN_OR_RETURN(const json scored_cpu, Call("/scheduler/prioritize-cpu", args.dump()));
      if (!scored_cpu.is_array()) return Error("extender prioritize-cpu: not a list");
      if (managed && !scored_cpu.empty())
        return Error("extender prioritize-cpu scored a pod that asks devices");
      AddScores(scored_cpu, total);
    }
    // The highest total wins. Among equals kube-scheduler draws one at random (schedule_one.go
    // selectHost: reservoir sampling); the extender's own ranking takes the lowest node rank, the
    // replay's rule for the other policies.
    int best = -1;
    std::int64_t best_total = 0;
    std::uint32_t ties = 0;
    for (std::size_t k = 0; k < names_.size(); ++k) {
      if (!passed[k]) continue;
      const int node = index_.at(names_[k]);
      if (best < 0 || total[k] > best_total) {
        best = node;
        best_total = total[k];
        ties = 1;
      } else if (total[k] == best_total) {
        const bool take = kube_ ? std::uniform_int_distribution<std::uint32_t>(0, ties)(ties_) == 0
                                : state_.node_rank[Idx(node)] < state_.node_rank[Idx(best)];
        ++ties;
        if (take) best = node;
      }
    }
    if (best < 0) return Choice{};
    const std::string& node_name = node_names_[Idx(best)];
    Choice choice{best, {}};
    if (managed) {
      const json binding = {
          {"PodName", name}, {"PodNamespace", "trace"}, {"PodUID", uid}, {"Node", node_name}};
      TOPOSCHED_ASSIGN_OR_RETURN(const json bound, Call("/scheduler/bind", binding.dump()));
      if (const std::string e = bound.value("Error", std::string()); !e.empty()) {
        return Error("extender bind of " + name + " to " + node_name + ": " + e);
      }
      const std::optional<state::PodAllocation> a = store_.FindPod(uid);
      if (!a || a->node != node_name)
        return Error("extender bind of " + name + ": no allocation on " + node_name);
      for (int g : a->delta.exclusive_gpus) choice.gpus.push_back(g);
      for (const auto& [g, usage] : a->delta.shares) choice.gpus.push_back(g);
    }
    // What the Kubernetes source does when the pod shows up bound: its CPU counts on the node.
    store_.SetPodCpu(uid, node_name, task.cpu_milli);
    return choice;
  }

  Status Placed(int node, const TraceTask& task, const Choice&, const NodeRuntime& rt) override {
    gpu_requested_[Idx(node)] += GpuResource(task);
    const std::shared_ptr<const state::Snapshot> snap = store_.snapshot();
    const state::NodeRecord* record = snap->Find(node_names_[Idx(node)]);
    if (record == nullptr) {
      return Error("extender policy: node " + node_names_[Idx(node)] + " left the store");
    }
    if (record->cpu_free_milli() != rt.cpu_left) {
      return Error("extender policy: the store's free CPU on " + record->name +
                   " disagrees with the replay after " + task.name);
    }
    if (task.gpus > 0) {
      const std::vector<int> left =
          packing::StateOf(*record->topology, record->allocated, GpuVendor::kNvidia).milli_left;
      if (left != rt.milli_left) {
        std::string ours, theirs;
        for (int v : left) ours += " " + std::to_string(v);
        for (int v : rt.milli_left) theirs += " " + std::to_string(v);
        return Error("extender policy: the store's allocation on " + record->name + " leaves" + ours +
                     " milli per GPU, the replay" + theirs + ", after " + task.name);
      }
    }
    return Status::Ok();
  }

 private:
  // A trace task as a Pod: its CPU and memory requests; a share of one GPU as HAMi asks it
  // (nvidia.com/gpu 1 with gpucores and gpumem-percentage at the task's fraction: the trace's
  // gpu_milli is both, and every value in it is a multiple of 10 milli); whole GPUs as
  // nvidia.com/gpu; gpu_spec as HAMi's nvidia.com/use-gputype.
  static json PodOf(const TraceTask& task, const std::string& name, const std::string& uid) {
    json limits = json::object();
    limits["nvidia.com/gpu"] = std::to_string(task.gpus);
    if (task.gpus == 1 && task.gpu_milli < packing::kMilli) {
      const std::string percent = std::to_string(SharePercent(task));
      limits["nvidia.com/gpucores"] = percent;
      limits["nvidia.com/gpumem-percentage"] = percent;
    }
    json meta = {{"name", name}, {"namespace", "trace"}, {"uid", uid}, {"resourceVersion", "1"}};
    if (!task.gpu_spec.empty()) {
      std::string types;
      for (const std::string& t : task.gpu_spec) types += (types.empty() ? "" : ",") + t;
      meta["annotations"] = {{"nvidia.com/use-gputype", types}};
    }
    json requests = {{"cpu", std::to_string(task.cpu_milli) + "m"},
                     {"memory", std::to_string(task.memory_mib) + "Mi"}};
    return {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", meta},
        {"spec",
         {{"schedulerName", "toposched"},
          {"containers", json::array({json{{"name", "task"},
                                           {"image", "trace"},
                                           {"resources", {{"requests", requests}, {"limits", limits}}}}})}}}};
  }

  // An extender's reply added to the totals of the hosts it names (schedule_one.go
  // prioritizeNodes): its score x its weight x (MaxNodeScore / MaxExtenderPriority), both entries
  // at the chart's weight; without `kube` the score itself.
  void AddScores(const json& reply, std::vector<std::int64_t>& total) const {
    std::unordered_map<std::string, std::int64_t> score;
    for (const json& h : reply) score[h.at("Host").get<std::string>()] = h.at("Score").get<std::int64_t>();
    for (std::size_t k = 0; k < names_.size(); ++k) {
      const auto it = score.find(names_[k]);
      if (it == score.end()) continue;
      total[k] +=
          kube_ ? it->second * kChartExtenderWeight * (kMaxNodeScore / kMaxExtenderPriority) : it->second;
    }
  }

  // NodeResourcesFit: MostAllocated over nvidia.com/gpu with the pod's added, 0 for a task that
  // asks none (resource_allocation.go leaves an extended resource the pod does not request out).
  std::int64_t InTreeScore(int node, const TraceTask& task) const {
    if (GpuResource(task) == 0) return 0;
    return MostRequested(gpu_requested_[Idx(node)] + GpuResource(task),
                         state_.trace->nodes[Idx(node)].gpus * kHamiSplitCount);
  }

  Result<json> Call(std::string_view path, const std::string& body) {
    server::HttpRequest rq{"POST", path, "application/json", body, "trace"};
    server::HttpResponse rs;
    service_->Handle(rq, rs);
    if (rs.status != 200) {
      return Error("extender " + std::string(path) + ": HTTP " + std::to_string(rs.status) + ": " + rs.body);
    }
    json out = json::parse(rs.body, nullptr, false);
    if (out.is_discarded()) return Error("extender " + std::string(path) + ": reply is not JSON");
    return out;
  }

  ReplayState& state_;
  framework::Framework framework_;
  state::ClusterStore store_;
  metrics::Registry metrics_;
  std::unique_ptr<extender::ExtenderService> service_;
  bool kube_ = false;
  std::mt19937 ties_;  // kube-scheduler's draw among equal totals
  // By trace node: the name the cluster knows it by (SimulatorNodeName).
  std::vector<std::string> node_names_;
  std::unordered_map<std::string, int> index_;
  std::vector<std::int64_t> gpu_requested_;  // nvidia.com/gpu requested per node
  std::vector<std::string> names_;
};

}  // namespace

Result<std::unique_ptr<TracePolicy>> MakeExtenderTracePolicy(ReplayState& s,
                                                             const framework::SchedulerConfig& config,
                                                             bool kube) {
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto fw, framework::Framework::Create(config, plugins::BuiltinRegistry()),
                                 "extender policy");
  auto p = std::make_unique<ExtenderTracePolicy>(s, std::move(fw), kube);
  TOPOSCHED_RETURN_IF_ERROR(p->Build());
  return std::unique_ptr<TracePolicy>(std::move(p));
}

}  // namespace toposched::simulate::trace_internal
