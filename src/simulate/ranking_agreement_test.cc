// The embedded simulator's toposched policy and the extender's kube verbs rank through one
// ranking step (framework/ranking.h): on the same cluster and the same pods, the node the
// simulator takes is the node kube-scheduler would bind from the extender's prioritize reply, pod
// after pod, and both claim the same devices. Every rule is in play: a capacity band (the default
// config's ExpectedFragmentation), a rare node class (8-GPU+8-NIC pods that only a few nodes can
// host), the remnant tie of single vGPUs, one node of the best and the stable node order (nodes
// of one hardware tie often).

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugins/registry.h"
#include "simulate_internal.h"
#include "toposched/extender/service.h"
#include "toposched/framework/framework.h"
#include "toposched/metrics/metrics.h"
#include "toposched/placement/packing.h"
#include "toposched/placement/request.h"
#include "toposched/server/http_server.h"
#include "toposched/state/cluster_state.h"
#include "toposched/topology/synthetic.h"

namespace toposched::simulate {
namespace {

using json = nlohmann::json;

// A synthetic preset; "hgx-4nic" is an HGX H100 with one RDMA NIC per switch (8 GPUs, 4 NICs):
// it hosts the one-GPU and four-GPU pods with their NICs but not the 8-GPU, 8-NIC shape.
std::shared_ptr<const NodeTopology> Preset(const std::string& name) {
  Result<SyntheticSpec> spec = SyntheticPreset(name == "hgx-4nic" ? "hgx-h100-8gpu" : name);
  EXPECT_TRUE(spec.ok());
  if (name == "hgx-4nic") spec->nics_per_switch = 1;
  Result<NodeTopology> t = GenerateSynthetic(*spec);
  EXPECT_TRUE(t.ok());
  return std::make_shared<const NodeTopology>(std::move(t).value());
}

// A pod as kube-scheduler sends it: whole GPUs and RDMA NICs, or one HAMi share of a GPU; with
// no device at all, a pod that asks 4 cores (scored by prioritize-cpu).
json Pod(const std::string& name, int gpus, int nics, int share_percent = 0) {
  json limits = json::object();
  if (gpus == 0 && nics == 0 && share_percent == 0) {
    limits["cpu"] = "4";
  } else {
    limits["nvidia.com/gpu"] = std::to_string(gpus);
  }
  if (nics > 0) limits["rdma/ib"] = std::to_string(nics);
  if (share_percent > 0) {
    limits["nvidia.com/gpucores"] = std::to_string(share_percent);
    limits["nvidia.com/gpumem-percentage"] = std::to_string(share_percent);
  }
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name}, {"resourceVersion", "1"}}},
          {"spec",
           {{"schedulerName", "toposched"},
            {"containers", json::array({json{{"name", "c"}, {"resources", {{"limits", limits}}}}})}}}};
}

// One kind of pod of a block: `count` pods of `gpus` whole GPUs (or one share of `share` %) and
// `nics` RDMA NICs.
struct Kind {
  int count, gpus, nics, share;
};

// One block of 50 pods: five rounds of `kinds` (which count 10 pods), interleaved so the cluster
// fills with every kind at once. The workload repeats the block, so the extender's window of
// typical pods (seeded with one block, recomputed every 50 pods) holds the same mix at every
// pod, the mix the simulator is given.
std::vector<json> Block(const std::string& prefix, const std::vector<Kind>& kinds) {
  std::vector<json> pods;
  int k = 0;
  for (int round = 0; round < 5; ++round) {
    for (const Kind& kind : kinds) {
      for (int i = 0; i < kind.count; ++i) {
        pods.push_back(Pod(prefix + std::to_string(k++), kind.gpus, kind.nics, kind.share));
      }
    }
  }
  EXPECT_EQ(pods.size(), 50u);
  return pods;
}

class Extender {
 public:
  Extender(const framework::SchedulerConfig& config, const std::vector<state::NodeSpec>& nodes)
      : framework_(std::move(framework::Framework::Create(config, plugins::BuiltinRegistry())).value()),
        store_(nullptr, extender::StoreOptionsFor(framework_.config())) {
    EXPECT_TRUE(store_.UpsertNodes(nodes).ok());
    store_.SetSynced(true);
    service_ = std::make_unique<extender::ExtenderService>(framework_, store_, metrics_,
                                                           extender::ExtenderOptions{});
    for (const state::NodeSpec& n : nodes) names_.push_back(n.name);
  }

  // What kube-scheduler does with the extender alone: filter, prioritize, the highest score.
  // Returns the node bound ("" when none fits) or a test failure; fails the test on a tie at the
  // top (one node of the best leaves none). A pod that asks no device reaches only the second
  // entry, prioritize-cpu, and kube-scheduler binds it itself.
  std::string Schedule(const json& pod, bool bind) {
    json args = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", names_}};
    if (!pod["spec"]["containers"][0]["resources"]["limits"].contains("nvidia.com/gpu")) {
      return Best(Call("/scheduler/prioritize-cpu", args.dump()));
    }
    const json filtered = Call("/scheduler/filter", args.dump());
    if (!filtered.contains("NodeNames") || !filtered["NodeNames"].is_array() ||
        filtered["NodeNames"].empty()) {
      return "";
    }
    args["NodeNames"] = filtered["NodeNames"];
    const std::string best = filtered["NodeNames"].size() == 1
                                 ? filtered["NodeNames"][0].get<std::string>()
                                 : Best(Call("/scheduler/prioritize", args.dump()));
    if (bind) {
      const json binding = {{"PodName", pod["metadata"]["name"]},
                            {"PodNamespace", "default"},
                            {"PodUID", pod["metadata"]["uid"]},
                            {"Node", best}};
      const json bound = Call("/scheduler/bind", binding.dump());
      EXPECT_EQ(bound.value("Error", std::string()), "") << best;
    }
    return best;
  }

  std::optional<state::PodAllocation> Allocation(const std::string& uid) const { return store_.FindPod(uid); }

 private:
  // The host of the highest score in a prioritize reply; fails the test on a draw at the top.
  static std::string Best(const json& reply) {
    std::string best;
    std::int64_t top = -1;
    int at_top = 0;
    for (const json& h : reply) {
      const std::int64_t s = h.at("Score").get<std::int64_t>();
      if (s > top) {
        top = s;
        best = h.at("Host").get<std::string>();
        at_top = 1;
      } else if (s == top) {
        ++at_top;
      }
    }
    EXPECT_EQ(at_top, 1) << "the reply leaves kube-scheduler a draw at score " << top;
    return best;
  }

  json Call(std::string_view path, const std::string& body) {
    server::HttpRequest rq{"POST", path, "application/json", body, "test"};
    server::HttpResponse rs;
    service_->Handle(rq, rs);
    EXPECT_EQ(rs.status, 200) << path << ": " << rs.body;
    return json::parse(rs.body);
  }

  framework::Framework framework_;
  state::ClusterStore store_;
  metrics::Registry metrics_;
  std::unique_ptr<extender::ExtenderService> service_;
  std::vector<std::string> names_;
};

struct Outcome {
  int placed = 0, unplaced = 0, vgpus = 0, cpu_pods = 0;
};

// Runs four blocks of `kinds` through the simulator's toposched policy and through the
// extender's verbs on `shapes` (preset, count), asserting the same node and devices per pod.
Outcome RunBoth(const framework::SchedulerConfig& config,
                const std::vector<std::pair<std::string, int>>& shapes, const std::vector<Kind>& kinds) {
  Outcome out;
  std::vector<state::NodeSpec> specs;
  std::vector<VirtualNode> nodes;
  for (const auto& [preset, count] : shapes) {
    const auto topology = Preset(preset);
    for (int i = 0; i < count; ++i) {
      const std::string name = preset + "-" + std::to_string(i);
      specs.push_back({name, topology, {{"kubernetes.io/hostname", name}}, true, -1});
      VirtualNode node;
      node.name = name;
      node.topology = topology;
      node.topology_fingerprint = topology->Fingerprint();
      node.labels = {{"kubernetes.io/hostname", name}};
      nodes.push_back(std::move(node));
    }
  }
  Extender extender(config, specs);

  // The extender's window: one block it is asked about but does not bind (it observes every pod
  // it sees); the simulator gets the block's typical pods, as the window computes them.
  std::vector<packing::Shape> block_shapes;
  for (const json& pod : Block("warm-", kinds)) {
    Result<PlacementRequest> request = ParsePodRequest(pod.dump(), config.request);
    EXPECT_TRUE(request.ok()) << request.error().message();
    if (!request.ok()) return out;
    block_shapes.push_back(packing::ShapeOf(*request, request->cpu_milli));
    extender.Schedule(pod, /*bind=*/false);
  }
  auto mix = std::make_shared<const packing::ShapeMix>(
      packing::TypicalShapes(block_shapes, 0.95, packing::Coverage::kPodsAndGpuDemand));
  EXPECT_GE(mix->shapes.size(), 2u);
  Result<std::unique_ptr<Policy>> policy = MakeToposchedPolicy(config, nullptr, mix);
  EXPECT_TRUE(policy.ok()) << policy.error().message();
  if (!policy.ok()) return out;

  for (int b = 0; b < 4; ++b) {
    for (const json& pod : Block("b" + std::to_string(b) + "-", kinds)) {
      const std::string name = pod["metadata"]["name"];
      SCOPED_TRACE(name);
      Result<PlacementRequest> request = ParsePodRequest(pod.dump(), config.request);
      EXPECT_TRUE(request.ok());
      Result<std::optional<Decision>> decided = (*policy)->Schedule(*request, nodes, nullptr);
      EXPECT_TRUE(decided.ok()) << decided.error().message();
      if (!request.ok() || !decided.ok()) return out;
      const std::string simulated =
          decided->has_value() ? nodes[static_cast<std::size_t>((*decided)->node)].name : "";
      const std::string bound = extender.Schedule(pod, /*bind=*/true);
      EXPECT_EQ(simulated, bound) << "the simulator and the extender disagree";
      if (simulated != bound) return out;
      if (bound.empty()) {
        ++out.unplaced;
        continue;
      }
      ++out.placed;
      if (!request->gpus && !request->IsShared() && !request->rdma_nics) {
        ++out.cpu_pods;  // kube-scheduler binds it; no devices to compare
        continue;
      }
      // The same devices: the store's allocation is the simulator's placement.
      const std::optional<state::PodAllocation> a = extender.Allocation("uid-" + name);
      EXPECT_TRUE(a.has_value());
      if (!a) return out;
      std::vector<int> gpus = a->delta.exclusive_gpus;
      for (const auto& [g, usage] : a->delta.shares) gpus.push_back(g);
      std::vector<int> simulated_gpus = (*decided)->placement.gpus;
      std::sort(gpus.begin(), gpus.end());
      std::sort(simulated_gpus.begin(), simulated_gpus.end());
      EXPECT_EQ(gpus, simulated_gpus);
      if (request->IsShared()) ++out.vgpus;
    }
  }
  return out;
}

// An LLM-serving mix with RDMA NICs: the rare node class (8-GPU, 8-NIC pods only the full HGX
// and cloud nodes host, while one- and four-GPU pods with NICs fit the 4-NIC HGX too), the
// capacity band, one node of the best and the stable order.
TEST(RankingAgreementTest, TheSameNodeForEveryPodOfAMixWithRdmaNics) {
  framework::SchedulerConfig config = BuiltinDefaultConfig();
  config.capacity.plugin = "ExpectedFragmentation";
  const Outcome out = RunBoth(
      config,
      {{"hgx-h100-8gpu", 3}, {"hgx-4nic", 6}, {"pcie-4gpu", 8}, {"inference-4gpu", 8}, {"cloud-vm-8gpu", 2}},
      {{3, 1, 1, 0}, {1, 2, 0, 0}, {2, 1, 0, 30}, {2, 1, 0, 50}, {1, 4, 4, 0}, {1, 8, 8, 0}});
  // The case is a real one: most pods placed, the cluster full enough that some wait.
  EXPECT_GT(out.placed, 100);
  EXPECT_GT(out.unplaced, 0);
}

// A mix without NICs, mostly single vGPUs whose cards capacity packing chooses (the share
// packing of CycleState), with the capacity band. (Rule 4, the remnant tie, needs nodes whose
// totals tie while their cards differ, which a cluster this small does not give:
// ranking_test.cc's TheFirstNodeIsTheOneTheWireScoresHighest holds the two forms to it.)
TEST(RankingAgreementTest, TheSameNodeForEveryPodOfAShareHeavyMix) {
  framework::SchedulerConfig config = BuiltinDefaultConfig();
  config.capacity.plugin = "ExpectedFragmentation";
  const Outcome out = RunBoth(config, {{"pcie-4gpu", 12}, {"inference-4gpu", 12}},
                              {{3, 1, 0, 30}, {2, 1, 0, 50}, {2, 1, 0, 20}, {2, 1, 0, 0}, {1, 2, 0, 0}});
  EXPECT_GT(out.placed, 100);
  EXPECT_GT(out.unplaced, 0);
  EXPECT_GT(out.vgpus, 80);
}

// Pods that ask CPU alone among GPU pods: the simulator ranks them as prioritize-cpu scores them
// (the ranking step's CpuPodScore), the node whose GPUs are taken before an idle one.
TEST(RankingAgreementTest, TheSameNodeForEveryCpuOnlyPodAmongGpuPods) {
  framework::SchedulerConfig config = BuiltinDefaultConfig();
  config.capacity.plugin = "ExpectedFragmentation";
  // The warm block holds 40 device pods: the window rule must not wait for 50 (the simulator
  // packs by the mix from the first pod).
  config.capacity.min_typical_pods = 1;
  const Outcome out = RunBoth(config, {{"pcie-4gpu", 6}, {"hgx-h100-8gpu", 2}},
                              {{3, 1, 0, 0}, {2, 0, 0, 0}, {2, 2, 0, 0}, {2, 1, 0, 50}, {1, 4, 0, 0}});
  EXPECT_GT(out.cpu_pods, 30);
  EXPECT_GT(out.placed, 60);
}

}  // namespace
}  // namespace toposched::simulate
