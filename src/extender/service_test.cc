// The extender end to end on the wire: the real HTTP server on port 0, the service with the
// built-in plugins, an in-memory cluster store built from synthetic machines, and request
// bodies shaped as kube-scheduler and Volcano marshal them (tests/testing/k8s_payloads.h).

#include "toposched/extender/service.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "evaluator.h"
#include "explain.h"
#include "plugins/registry.h"
#include "testing/http_client.h"
#include "testing/k8s_payloads.h"
#include "toposched/framework/allocation.h"
#include "toposched/metrics/logging.h"
#include "toposched/metrics/metrics.h"
#include "toposched/placement/request.h"
#include "toposched/server/http_server.h"
#include "toposched/state/cluster_state.h"
#include "toposched/topology/synthetic.h"

namespace toposched::extender {
namespace {

using json = nlohmann::json;
using testing::ExtenderArgs;
using testing::HttpClient;
using testing::MakePod;
using testing::PodSpec;

std::shared_ptr<const NodeTopology> Preset(const std::string& name) {
  Result<SyntheticSpec> spec = SyntheticPreset(name);
  EXPECT_TRUE(spec.ok()) << name;
  Result<NodeTopology> t = GenerateSynthetic(*spec);
  EXPECT_TRUE(t.ok());
  return std::make_shared<const NodeTopology>(std::move(t).value());
}

using Nodes = std::vector<std::pair<std::string, std::string>>;

// A cluster, the framework, the service and the server, torn down in reverse order.
class Harness {
 public:
  explicit Harness(const std::vector<std::pair<std::string, std::string>>& nodes,
                   ExtenderOptions options = {}, state::Persistence* persistence = nullptr,
                   const framework::SchedulerConfig& config = plugins::DefaultSchedulerConfig())
      : registry_(plugins::BuiltinRegistry()),
        framework_(framework::Framework::Create(config, registry_).value()),
        store_(persistence, StoreOptionsFor(framework_.config())) {
    metrics::ConfigureLogging(metrics::LogFormat::kText, metrics::LogLevel::kError);
    std::map<std::string, std::shared_ptr<const NodeTopology>> presets;
    for (const auto& [name, preset] : nodes) {
      auto& t = presets[preset];
      if (!t) t = Preset(preset);
      EXPECT_TRUE(store_.UpsertNode({name, t, {}, true}).ok());
    }
    store_.SetSynced(true);
    service_ = std::make_unique<ExtenderService>(framework_, store_, metrics_, std::move(options));
    server::ServerOptions so;
    so.address = "127.0.0.1";
    so.port = 0;
    so.threads = 4;
    so.body_limit = [this](std::string_view target) { return service_->BodyLimit(target); };
    server_ = server::HttpServer::Start(so, [this](const server::HttpRequest& rq, server::HttpResponse& rs) {
                service_->Handle(rq, rs);
              }).value();
  }
  ~Harness() {
    server_->Shutdown(std::chrono::milliseconds(1000));
    server_->Wait();
  }

  std::uint16_t port() const { return server_->port(); }
  state::ClusterStore& store() { return store_; }
  ExtenderService& service() { return *service_; }
  const framework::Framework& framework() const { return framework_; }

 private:
  framework::Registry registry_;
  framework::Framework framework_;
  state::ClusterStore store_;
  metrics::Registry metrics_;
  std::unique_ptr<ExtenderService> service_;
  std::unique_ptr<server::HttpServer> server_;
};

json PostJson(HttpClient& c, const std::string& path, const std::string& body, int want_status = 200) {
  auto r = c.Post(path, body);
  EXPECT_TRUE(r.has_value()) << path;
  if (!r) return json();
  EXPECT_EQ(r->status, want_status) << path << ": " << r->body;
  EXPECT_EQ(r->content_type, "application/json") << path;
  return json::parse(r->body);
}

int GpusHeld(const state::ClusterStore& store, const std::string& node) {
  const state::NodeRecord* rec = store.snapshot()->Find(node);
  int n = 0;
  for (std::size_t i = 0; i < rec->allocated.gpu_exclusive.size(); ++i)
    n += rec->allocated.gpu_exclusive[i] ? 1 : 0;
  return n;
}

const PodSpec kTraining8{.name = "train", .uid = "uid-train", .gpus = 8, .rdma = 8};

TEST(ExtenderFilter, NodeNamesModeSortsNodesIntoPassedFailedAndUnresolvable) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}, {"hgx-b", "hgx-h100-8gpu"}, {"pcie-c", "pcie-4gpu"}});
  HttpClient c(h.port());
  // Fill hgx-b first so that it cannot take 8 more GPUs.
  const PodSpec first{.name = "first", .uid = "uid-first", .gpus = 2, .rdma = 0};
  PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(first), {"hgx-b"}));
  ASSERT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(first, "hgx-b"))["Error"], "");

  const json r = PostJson(c, "/scheduler/filter",
                          ExtenderArgs(MakePod(kTraining8), {"hgx-a", "hgx-b", "pcie-c", "ghost"}));
  EXPECT_EQ(r["NodeNames"], json({"hgx-a"}));
  EXPECT_TRUE(r["Nodes"].is_null());
  EXPECT_EQ(r["Error"], "");
  ASSERT_TRUE(r["FailedNodes"].contains("hgx-b")) << r.dump();
  EXPECT_NE(r["FailedNodes"]["hgx-b"].get<std::string>().find("Unschedulable"), std::string::npos);
  // A 4-GPU machine never holds 8 GPUs, an unknown node has no topology: preemption can't help.
  EXPECT_TRUE(r["FailedAndUnresolvableNodes"].contains("pcie-c")) << r.dump();
  EXPECT_TRUE(r["FailedAndUnresolvableNodes"].contains("ghost")) << r.dump();
  EXPECT_EQ(r["FailedNodes"].size() + r["FailedAndUnresolvableNodes"].size() + r["NodeNames"].size(), 4u);
}

// Prioritize looks names up with the filter's passed nodes as hints (kube-scheduler's prioritize
// names them in that order): any other order, a subset, repeats and unknown names must be
// answered exactly as a plain lookup would.
TEST(ExtenderFilter, EveryOrderOfNamesIsAnsweredRight) {
  Nodes nodes;
  std::vector<std::string> names;
  for (int i = 0; i < 12; ++i) {
    names.push_back("n" + std::to_string(i));
    nodes.emplace_back(names.back(), i % 3 == 0 ? "pcie-4gpu" : "hgx-h100-8gpu");
  }
  Harness h(nodes);
  HttpClient c(h.port());
  std::mt19937 rng(7);
  for (int round = 0; round < 40; ++round) {
    std::vector<std::string> ask = names;
    std::shuffle(ask.begin(), ask.end(), rng);
    ask.resize(1 + rng() % ask.size());
    if (round % 4 == 1) ask.push_back("ghost-" + std::to_string(round));
    if (round % 5 == 2) ask.push_back(ask.front());
    const PodSpec pod{.name = "p", .uid = "uid-p" + std::to_string(round), .gpus = 8, .rdma = 8};
    const json r = PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(pod), ask));
    std::vector<std::string> want_pass;
    for (const std::string& n : ask) {
      if (!n.starts_with("ghost") && std::stoi(n.substr(1)) % 3 != 0) want_pass.push_back(n);
    }
    EXPECT_EQ(r["NodeNames"], json(want_pass)) << round;
    const json p = PostJson(c, "/scheduler/prioritize", ExtenderArgs(MakePod(pod), ask));
    ASSERT_EQ(p.size(), ask.size());
    for (std::size_t k = 0; k < ask.size(); ++k) {
      EXPECT_EQ(p[k]["Host"], ask[k]);
      const bool fits = std::find(want_pass.begin(), want_pass.end(), ask[k]) != want_pass.end();
      EXPECT_EQ(p[k]["Score"].get<int>() > 0, fits) << ask[k];
    }
  }
}

TEST(ExtenderFilter, NodesModeEchoesTheFullNodeObjectsThatPass) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}, {"pcie-c", "pcie-4gpu"}});
  HttpClient c(h.port());
  const json r =
      PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(kTraining8), {"hgx-a", "pcie-c"}, false));
  EXPECT_TRUE(r["NodeNames"].is_null());
  ASSERT_EQ(r["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(r["Nodes"]["items"][0], testing::MakeNode("hgx-a"));  // echoed whole
  EXPECT_TRUE(r["FailedAndUnresolvableNodes"].contains("pcie-c"));
}

TEST(ExtenderFilter, PodsWithoutDevicesPassEveryNodeUntouched) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  const PodSpec web{.name = "web", .uid = "uid-web"};
  const json r = PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(web), {"hgx-a", "not-ours"}));
  EXPECT_EQ(r["NodeNames"], json({"hgx-a", "not-ours"}));
  EXPECT_TRUE(r["FailedNodes"].empty());
}

TEST(ExtenderFilter, EmptyAndNullNodeListsAnswerEmpty) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  json r = PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(kTraining8), {}));
  EXPECT_EQ(r["NodeNames"], json::array());
  r = PostJson(c, "/scheduler/filter",
               json{{"Pod", MakePod(kTraining8)}, {"Nodes", nullptr}, {"NodeNames", nullptr}}.dump());
  EXPECT_EQ(r["Error"], "");
  EXPECT_TRUE(r["FailedNodes"].empty());
}

TEST(ExtenderFilter, AHardAlignmentBoundRejectsNodesThatCannotMeetIt) {
  // cloud-vm-8gpu hides the PCIe tree (every GPU-NIC pair is PHB or worse): a PIX bound fails
  // there and only there.
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}, {"vm-b", "cloud-vm-8gpu"}});
  HttpClient c(h.port());
  PodSpec p{.name = "aligned", .uid = "uid-aligned", .gpus = 2, .rdma = 2};
  p.annotations["toposched.io/gpu-nic-alignment"] = "PIX";
  const json r = PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(p), {"hgx-a", "vm-b"}));
  EXPECT_EQ(r["NodeNames"], json({"hgx-a"})) << r.dump();
  EXPECT_EQ(r["FailedNodes"].size() + r["FailedAndUnresolvableNodes"].size(), 1u);
}

TEST(ExtenderFilter, FiveThousandNodesInOneCall) {
  std::vector<std::pair<std::string, std::string>> nodes;
  std::vector<std::string> names;
  for (int i = 0; i < 5000; ++i) {
    names.push_back("gpu-node-" + std::to_string(i));
    nodes.emplace_back(names.back(), i % 10 == 0 ? "pcie-4gpu" : "hgx-h100-8gpu");
  }
  Harness h(nodes);
  HttpClient c(h.port());
  const json r = PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(kTraining8), names));
  EXPECT_EQ(r["NodeNames"].size(), 4500u);
  EXPECT_EQ(r["FailedAndUnresolvableNodes"].size(), 500u);
  const json p = PostJson(c, "/scheduler/prioritize", ExtenderArgs(MakePod(kTraining8), names));
  ASSERT_TRUE(p.is_array());
  EXPECT_EQ(p.size(), 5000u);
}

TEST(ExtenderPrioritize, BareArrayOfHostScoresZeroToTenBetterAlignmentFirst) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}, {"vm-b", "cloud-vm-8gpu"}});
  HttpClient c(h.port());
  const PodSpec p{.name = "p", .uid = "uid-p", .gpus = 2, .rdma = 2};
  const json r = PostJson(c, "/scheduler/prioritize", ExtenderArgs(MakePod(p), {"hgx-a", "vm-b", "ghost"}));
  ASSERT_TRUE(r.is_array());
  ASSERT_EQ(r.size(), 3u);
  std::map<std::string, int> score;
  for (const json& hp : r) {
    ASSERT_EQ(hp.size(), 2u);
    score[hp["Host"]] = hp["Score"];
  }
  for (const auto& [host, s] : score) {
    EXPECT_GE(s, 0) << host;
    EXPECT_LE(s, 10) << host;
  }
  EXPECT_GT(score["hgx-a"], score["vm-b"]);
  EXPECT_EQ(score["hgx-a"], 10) << "the best node of the call";
  EXPECT_EQ(score["ghost"], 0);
}

// Capacity first (config `capacity`): the extender learns the workload's shapes from the pods it
// is asked about, and a node that the band leaves out scores 0, below every node inside it.
// Nodes alike score alike, but kube-scheduler would draw among equal scores at random and so
// spread equal pods over all of them: one of them keeps the 10 (the first in the stable node
// order), the same one whatever order kube-scheduler lists them in, and the others are a step
// behind. The next pod goes where the first went.
TEST(ExtenderPrioritize, OneNodeOfTheBestKeepsTheTopScoreWhateverTheListsOrder) {
  const std::vector<std::string> names{"gpu-a", "gpu-b", "gpu-c", "gpu-d"};
  Harness h(Nodes{{"gpu-a", "hgx-h100-8gpu"},
                  {"gpu-b", "hgx-h100-8gpu"},
                  {"gpu-c", "hgx-h100-8gpu"},
                  {"gpu-d", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  std::string first = names[0];
  for (const std::string& n : names) {
    if (NodeOrderKey(n) < NodeOrderKey(first)) first = n;
  }
  const auto scores = [&](const PodSpec& p, std::vector<std::string> order) {
    std::map<std::string, int> out;
    for (const json& hp : PostJson(c, "/scheduler/prioritize", ExtenderArgs(MakePod(p), order)))
      out[hp["Host"]] = hp["Score"];
    return out;
  };
  const PodSpec p1{.name = "p1", .uid = "uid-p1", .gpus = 1};
  std::map<std::string, int> s = scores(p1, names);
  for (const std::string& n : names) EXPECT_EQ(s[n], n == first ? 10 : 9) << n;
  EXPECT_EQ(scores(p1, {names.rbegin(), names.rend()}), s) << "the list's order does not matter";
  const json e = PostJson(c, "/explain", MakePod(p1).dump());
  EXPECT_EQ(e["best"], first) << e.dump(2);
  for (const json& n : e["nodes"])
    EXPECT_EQ(n["extenderScore"], s[n["name"].get<std::string>()]) << e.dump(2);
  // Volcano's prioritize too: the others half a total point behind.
  json nodes = json::array();
  for (const std::string& n : names) nodes.push_back(testing::MakeVolcanoNode(n));
  const PodSpec v1{.name = "v1", .uid = "uid-v1", .gpus = 1};
  const json v =
      PostJson(c, "/volcano/prioritize", json{{"task", testing::MakeTask(v1)}, {"nodes", nodes}}.dump());
  const double top = v["nodeScore"][first].get<double>();
  for (const std::string& n : names) {
    if (n == first) continue;
    const double other = v["nodeScore"][n].get<double>();
    EXPECT_GT(other, 0.0) << v.dump();
    EXPECT_LT(other, top) << v.dump();
    EXPECT_EQ(other, v["nodeScore"][names[first == names[0] ? 1 : 0]].get<double>()) << v.dump();
  }

  ASSERT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(p1, first))["Error"], "");
  const PodSpec p2{.name = "p2", .uid = "uid-p2", .gpus = 1};
  s = scores(p2, names);
  EXPECT_EQ(s[first], 10) << "the next pod goes where the first went";
  for (const std::string& n : names) {
    if (n != first) {
      EXPECT_LT(s[n], 10) << n;
    }
  }
}

TEST(ExtenderPrioritize, CapacityFirstKeepsAWholeNodeForTheLargeShapesItHasSeen) {
  auto prioritize = [](Harness& h) {
    HttpClient c(h.port());
    const PodSpec p4{.name = "p4", .uid = "uid-p4", .gpus = 4, .rdma = 4};
    PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(p4), {"hgx-b"}));
    EXPECT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(p4, "hgx-b"))["Error"], "");
    PostJson(c, "/scheduler/filter",
             ExtenderArgs(MakePod(kTraining8), {"hgx-a", "hgx-b"}));  // seen, not bound
    const PodSpec p1{.name = "p1", .uid = "uid-p1", .gpus = 1, .rdma = 1};
    std::map<std::string, int> score;
    for (const json& hp :
         PostJson(c, "/scheduler/prioritize", ExtenderArgs(MakePod(p1), {"hgx-a", "hgx-b"}))) {
      score[hp["Host"]] = hp["Score"];
    }
    return score;
  };
  const Nodes nodes{{"hgx-a", "hgx-h100-8gpu"}, {"hgx-b", "hgx-h100-8gpu"}};
  framework::SchedulerConfig config = plugins::DefaultSchedulerConfig();
  for (framework::PluginConfig& p : config.plugins) {
    if (p.name == "ExpectedFragmentation") p.weight = 0;
  }
  {
    Harness plain(nodes, {}, nullptr, config);
    std::map<std::string, int> score = prioritize(plain);
    // Equal totals: one node of the best keeps the 10, the first in the stable node order
    // (NodeOrderKey puts hgx-b first), and the other is a step behind.
    ASSERT_LT(NodeOrderKey("hgx-b"), NodeOrderKey("hgx-a"));
    EXPECT_EQ(score["hgx-b"], 10);
    EXPECT_EQ(score["hgx-a"], 9);
    HttpClient c(plain.port());
    const json e =
        PostJson(c, "/explain", MakePod({.name = "p1", .uid = "uid-p1", .gpus = 1, .rdma = 1}).dump());
    ASSERT_EQ(e["nodes"].size(), 2u) << e.dump(2);
    EXPECT_EQ(e["nodes"][0]["score"], e["nodes"][1]["score"])
        << "without ExpectedFragmentation the empty node is as good";
    EXPECT_EQ(e["best"], "hgx-b") << e.dump(2);
    for (const json& n : e["nodes"])
      EXPECT_EQ(n["extenderScore"], score[n["name"].get<std::string>()]) << e.dump(2);
  }
  {
    Harness defaults(nodes);
    std::map<std::string, int> score = prioritize(defaults);
    EXPECT_GT(score["hgx-b"], score["hgx-a"])
        << "at its default weight ExpectedFragmentation prefers the used node";
  }
  config.capacity.plugin = "ExpectedFragmentation";
  Harness h(nodes, {}, nullptr, config);
  std::map<std::string, int> score = prioritize(h);
  // hgx-a whole: one GPU taken there strands 7 for the 8-GPU shape seen (a third of the pods);
  // hgx-b cannot host it any more: the band leaves hgx-a out.
  EXPECT_EQ(score["hgx-a"], 0);
  EXPECT_GE(score["hgx-b"], 1);
  // /explain ranks and scores as prioritize does: hgx-b first, hgx-a outside the band with 0.
  HttpClient c(h.port());
  const PodSpec p1{.name = "p1", .uid = "uid-p1", .gpus = 1, .rdma = 1};
  const json e = PostJson(c, "/explain", MakePod(p1).dump());
  EXPECT_EQ(e["best"], "hgx-b") << e.dump(2);
  ASSERT_EQ(e["nodes"].size(), 2u) << e.dump(2);
  EXPECT_EQ(e["nodes"][0]["name"], "hgx-b");
  EXPECT_EQ(e["nodes"][0]["extenderScore"], score["hgx-b"]);
  EXPECT_EQ(e["nodes"][0]["capacity"]["inBand"], true);
  EXPECT_EQ(e["nodes"][1]["name"], "hgx-a");
  EXPECT_EQ(e["nodes"][1]["extenderScore"], 0);
  EXPECT_EQ(e["nodes"][1]["capacity"]["inBand"], false);
  EXPECT_LT(e["nodes"][1]["capacity"]["score"].get<int>(), e["nodes"][0]["capacity"]["score"].get<int>());
}

// A pod that asks no device (docs/placement.md, "Pods that ask no device"): the chart's second
// extenders entry calls prioritize-cpu for every pod. The typical pods ask one GPU with 64
// cores, or eight with 32. "full" has all its GPUs taken (and 32 of its 128 cores), "free" none.
// An 80-core pod would leave "free" 48 cores, too few for the 64-core shape: its eight GPUs
// would be stranded; on "full" it strands nothing. A 1-core pod strands nothing anywhere: the
// node with fewer idle GPUs still scores higher (kube-scheduler would otherwise send it to the
// emptiest node). A node without NodeTopology scores 10; a pod that asks devices gets no score
// from this entry (the main one scores it).
TEST(ExtenderPrioritize, APodWithoutDevicesScoresWhereItsCpuStrandsTheFewestGpus) {
  Harness h(Nodes{{"full", "hgx-h100-8gpu"}, {"free", "hgx-h100-8gpu"}});
  const auto topology = h.store().snapshot()->Find("full")->topology;
  for (const char* n : {"full", "free"})
    ASSERT_TRUE(h.store().UpsertNode({n, topology, {}, true, 128000}).ok());
  HttpClient c(h.port());
  const PodSpec one{.name = "one", .uid = "uid-one", .gpus = 1, .cpu = "64"};
  PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(one), {"full", "free"}));  // seen, not bound
  const PodSpec whole{.name = "whole", .uid = "uid-whole", .gpus = 8, .cpu = "32"};
  PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(whole), {"full"}));
  ASSERT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(whole, "full"))["Error"], "");
  h.store().SetPodCpu(whole.uid, "full", 32000);

  auto scores = [&](const std::string& verb, const PodSpec& p) {
    std::map<std::string, int> out;
    for (const json& hp : PostJson(c, verb, ExtenderArgs(MakePod(p), {"full", "free", "cpu-node"}))) {
      out[hp["Host"]] = hp["Score"];
    }
    return out;
  };
  const PodSpec big{.name = "big", .uid = "uid-big", .cpu = "80"};
  std::map<std::string, int> s = scores("/scheduler/prioritize-cpu", big);
  // "full" and the node without NodeTopology both strand nothing: one node of the best keeps
  // the 10 (the first in the stable node order), the other is a step behind.
  ASSERT_LT(NodeOrderKey("full"), NodeOrderKey("cpu-node"));
  EXPECT_EQ(s["full"], 10);
  EXPECT_EQ(s["cpu-node"], 9);
  const int big_on_free = s["free"];
  // /explain scores and ranks as prioritize-cpu does.
  const json e = PostJson(c, "/explain", MakePod(big).dump());
  EXPECT_EQ(e["packsCpu"], true) << e.dump(2);
  EXPECT_EQ(e["best"], "full") << e.dump(2);
  ASSERT_EQ(e["nodes"].size(), 2u) << e.dump(2);
  for (const json& n : e["nodes"])
    EXPECT_EQ(n["extenderScore"], s[n["name"].get<std::string>()]) << e.dump(2);
  EXPECT_EQ(e["nodes"][0]["name"], "full");
  EXPECT_EQ(e["nodes"][1]["idleGpuShare"], 1.0);
  EXPECT_EQ(scores("/scheduler/prioritize", big), s) << "both entries score such a pod alike";
  // Filter and bind take it anywhere, with nothing allocated.
  EXPECT_EQ(PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(big), {"full", "free"}))["NodeNames"],
            json({"full", "free"}));

  const PodSpec small{.name = "small", .uid = "uid-small", .cpu = "1"};
  s = scores("/scheduler/prioritize-cpu", small);
  EXPECT_EQ(s["full"], 10);
  EXPECT_EQ(s["free"], 5) << "strands nothing now, but the idle node's CPU is what its GPUs will need";
  EXPECT_LT(big_on_free, s["free"]) << "80 cores on the idle node strand its GPUs for the 64-core pods";

  // No CPU asked: nothing to place, every node alike.
  const PodSpec none{.name = "none", .uid = "uid-none", .cpu = ""};
  s = scores("/scheduler/prioritize-cpu", none);
  EXPECT_EQ(s, (std::map<std::string, int>{{"full", 0}, {"free", 0}, {"cpu-node", 0}}));
  // A pod that asks devices: the main entry scores it, this one names no host.
  EXPECT_TRUE(PostJson(c, "/scheduler/prioritize-cpu", ExtenderArgs(MakePod(one), {"full", "free"})).empty());
  EXPECT_EQ(GpusHeld(h.store(), "free"), 0);
}

// Two nodes of one class whose free CPU differs where it binds: /explain gives each its own
// score, as prioritize does (it once kept one result per class).
TEST(ExtenderExplain, NodesOfOneClassWhoseCpuBindsAreExplainedWithTheirOwnCpu) {
  Harness h(Nodes{{"a", "hgx-h100-8gpu"}, {"b", "hgx-h100-8gpu"}});
  const auto topology = h.store().snapshot()->Find("a")->topology;
  for (const char* n : {"a", "b"}) ASSERT_TRUE(h.store().UpsertNode({n, topology, {}, true, 128000}).ok());
  h.store().SetPodCpu("uid-cpu", "a", 100000);
  HttpClient c(h.port());
  const PodSpec one{.name = "one", .uid = "uid-one", .gpus = 1, .cpu = "16"};
  std::map<std::string, int> score;
  for (const json& hp : PostJson(c, "/scheduler/prioritize", ExtenderArgs(MakePod(one), {"a", "b"}))) {
    score[hp["Host"]] = hp["Score"];
  }
  EXPECT_LT(score["a"], score["b"]) << "a's 28 free cores strand GPUs for the 16-core shape";
  const json e = PostJson(c, "/explain", MakePod(one).dump());
  ASSERT_EQ(e["nodes"].size(), 2u) << e.dump(2);
  for (const json& n : e["nodes"])
    EXPECT_EQ(n["extenderScore"], score[n["name"].get<std::string>()]) << e.dump(2);
  EXPECT_EQ(e["best"], "b");
}

// A rare node class last (docs/placement.md): "rare" is the only node that can host the
// 8-GPU, 8-NIC shape the extender has seen; "common" has 8 GPUs and 4 RDMA NICs. A 1-GPU, 1-NIC
// pod scores 0 on "rare" while "common" fits, and /explain says why; a pod whose own pool runs
// on "rare" is not kept from it; with the rule off "rare" scores as any node.
TEST(ExtenderPrioritize, ARareNodeClassScoresZeroWhileAnotherNodeFits) {
  SyntheticSpec four_nics = *SyntheticPreset("hgx-h100-8gpu");
  four_nics.nics_per_switch = 1;
  const auto common = std::make_shared<const NodeTopology>(GenerateSynthetic(four_nics).value());
  auto scores = [&](Harness& h, const PodSpec& pod) {
    EXPECT_TRUE(h.store().UpsertNode({"common", common, {}, true}).ok());
    HttpClient c(h.port());
    PostJson(c, "/scheduler/filter",
             ExtenderArgs(MakePod(kTraining8), {"rare", "common"}));  // seen, not bound
    std::map<std::string, int> score;
    for (const json& hp :
         PostJson(c, "/scheduler/prioritize", ExtenderArgs(MakePod(pod), {"rare", "common"}))) {
      score[hp["Host"]] = hp["Score"];
    }
    return score;
  };
  const PodSpec p1{.name = "p1", .uid = "uid-p1", .gpus = 1, .rdma = 1};
  {
    Harness h(Nodes{{"rare", "hgx-h100-8gpu"}});
    std::map<std::string, int> score = scores(h, p1);
    EXPECT_EQ(score["rare"], 0);
    EXPECT_EQ(score["common"], 10);
    HttpClient c(h.port());
    const json e = PostJson(c, "/explain", MakePod(p1).dump());
    EXPECT_EQ(e["best"], "common") << e.dump(2);
    ASSERT_EQ(e["nodes"].size(), 2u) << e.dump(2);
    EXPECT_EQ(e["nodes"][1]["name"], "rare");
    EXPECT_EQ(e["nodes"][1]["extenderScore"], 0);
    EXPECT_EQ(e["nodes"][1]["keptFor"], "8 GPUs + 8 RDMA NICs");
    EXPECT_FALSE(e["nodes"][0].contains("keptFor"));
    // The training pod itself is kept from nothing.
    std::map<std::string, int> training = scores(h, kTraining8);
    EXPECT_GE(training["rare"], 1);
    // Volcano's prioritize ranks the same way.
    const json v =
        PostJson(c, "/volcano/prioritize",
                 json{{"task", testing::MakeTask(p1)},
                      {"nodes", {testing::MakeVolcanoNode("rare"), testing::MakeVolcanoNode("common")}}}
                     .dump());
    EXPECT_EQ(v["nodeScore"]["rare"].get<double>(), 0.0) << v.dump();
    EXPECT_GT(v["nodeScore"]["common"].get<double>(), 0.0) << v.dump();
  }
  {
    // A decode pod of a pool that already runs on "rare": the pool keeps it taken anyway. Before
    // the pool's first pod lands there, "rare" is kept from it like from any pod.
    Harness h(Nodes{{"rare", "hgx-h100-8gpu"}});
    HttpClient c(h.port());
    const PodSpec decode{.name = "dc",
                         .uid = "uid-dc",
                         .gpus = 1,
                         .rdma = 1,
                         .labels = {{"llm-d.ai/role", "decode"}, {"toposched.io/pool", "chat"}}};
    const PodSpec elsewhere{.name = "pf0",
                            .uid = "uid-pf0",
                            .gpus = 2,
                            .rdma = 2,
                            .labels = {{"llm-d.ai/role", "prefill"}, {"toposched.io/pool", "chat"}}};
    EXPECT_TRUE(h.store().UpsertNode({"common", common, {}, true}).ok());
    PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(elsewhere), {"common"}));
    EXPECT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(elsewhere, "common"))["Error"], "");
    EXPECT_EQ(scores(h, decode)["rare"], 0) << "the pool runs on common only";
    const PodSpec prefill{.name = "pf",
                          .uid = "uid-pf",
                          .gpus = 2,
                          .rdma = 2,
                          .labels = {{"llm-d.ai/role", "prefill"}, {"toposched.io/pool", "chat"}}};
    PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(prefill), {"rare"}));
    EXPECT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(prefill, "rare"))["Error"], "");
    std::map<std::string, int> score = scores(h, decode);
    EXPECT_GE(score["rare"], 1) << "the pool's new version runs on rare too";
  }
  {
    framework::SchedulerConfig off = plugins::DefaultSchedulerConfig();
    off.capacity.rare_class_last = false;
    Harness h(Nodes{{"rare", "hgx-h100-8gpu"}}, {}, nullptr, off);
    std::map<std::string, int> score = scores(h, p1);
    EXPECT_GE(score["rare"], 1) << "without the rule the rare node scores as any node";
  }
}

// Posts `pod`'s prioritize over `names` and expects every node's score to be what one whole
// framework call (filter, then every Score plugin over the store's cluster view of `pool`)
// gives it; returns the distinct scores seen, so a caller can insist the nodes differ.
std::set<int> ExpectPrioritizeEqualsTheFrameworks(Harness& h, HttpClient& c, const PodSpec& pod,
                                                  const std::vector<std::string>& names,
                                                  const std::string& pool) {
  const json r = PostJson(c, "/scheduler/prioritize", ExtenderArgs(MakePod(pod), names));
  EXPECT_TRUE(r.is_array());
  std::map<std::string, int> got;
  for (const json& hp : r) got[hp["Host"]] = hp["Score"];
  const framework::Framework& fw = h.framework();
  Result<PlacementRequest> request = ParsePodRequest(MakePod(pod).dump(), fw.config().request);
  EXPECT_TRUE(request.ok()) << request.error().message();
  std::set<int> distinct;
  if (!request.ok()) return distinct;
  const auto snap = h.store().snapshot();
  std::map<std::string, framework::NodeScore> fits;
  framework::CapacityBand band(fw.CapacityBandWidth());
  for (const std::string& name : names) {
    const state::NodeRecord& record = *snap->Find(name);
    framework::CycleState cycle = fw.NewCycle(*request);
    cycle.SetCluster(state::MakeClusterView(h.store(), snap, fw.config().network, pool));
    const framework::NodeInfo info{record.name,      record.topology, record.fingerprint,
                                   record.allocated, record.labels,   record.schedulable};
    if (!fw.RunFilter(cycle, info).ok()) continue;
    fits[name] = fw.RunScore(cycle, info);
    band.Offer(fits[name]);
  }
  std::vector<std::pair<std::string, int>> want;
  for (const std::string& name : names) {
    const auto it = fits.find(name);
    want.emplace_back(name, it == fits.end() ? 0 : band.ExtenderScore(it->second));
  }
  // One node of the best (PreferOneOfTheBest): the others with the best score a step behind.
  framework::PreferOneOfTheBest(
      std::span<std::pair<std::string, int>>(want),
      [&](std::size_t k) {
        const auto it = fits.find(want[k].first);
        return framework::TieKeyOf(it == fits.end() ? -1 : it->second.capacity, 0,
                                   NodeOrderKey(want[k].first));
      },
      [](std::pair<std::string, int>& w) -> int& { return w.second; });
  for (const auto& [name, score] : want) {
    EXPECT_EQ(got[name], score) << name;
    distinct.insert(score);
  }
  return distinct;
}

// A pool pod's prioritize is computed in parts: the node-only plugins once per node class, the
// pool plugins per node, nodes grouped by where they sit relative to the pool. Every node's
// score must still be what one whole framework call gives it.
TEST(ExtenderPrioritize, PoolPodScoresEqualTheFrameworksWholeScoreOnEveryNode) {
  Harness h(Nodes{});
  std::vector<std::string> names;
  const char* presets[] = {"hgx-h100-8gpu", "hgx-h100-8gpu", "cloud-vm-8gpu", "inference-4gpu"};
  for (int i = 0; i < 16; ++i) {
    const std::string name = "n" + std::to_string(i);
    names.push_back(name);
    std::map<std::string, std::string> labels = {{"kubernetes.io/hostname", name},
                                                 {"toposched.io/leaf", "l" + std::to_string(i / 4)},
                                                 {"toposched.io/spine", "s" + std::to_string(i / 8)}};
    if (i % 8 == 0) labels["nvidia.com/gpu.clique"] = "c" + std::to_string(i / 8);
    ASSERT_TRUE(h.store().UpsertNode({name, Preset(presets[i % 4]), labels, i != 5}).ok());
  }
  HttpClient c(h.port());
  const auto pool_pod = [](const std::string& name, const char* role) {
    return PodSpec{.name = name,
                   .uid = "uid-" + name,
                   .gpus = 2,
                   .rdma = 2,
                   .annotations = {{"toposched.io/pd-ratio", "1:2"}},
                   .labels = {{"llm-d.ai/role", role}, {"toposched.io/pool", "chat"}}};
  };
  // Every leaf holds each preset. The pool so far: prefill on n0 and n4 (leaves l0, l1), decode on
  // n1 (l0).
  for (const auto& [name, role, node] : std::vector<std::tuple<std::string, const char*, std::string>>{
           {"prefill-0", "prefill", "n0"}, {"prefill-1", "prefill", "n4"}, {"decode-0", "decode", "n1"}}) {
    PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(pool_pod(name, role)), names));
    ASSERT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(pool_pod(name, role), node))["Error"], "");
  }
  const PodSpec decode = pool_pod("decode-1", "decode");
  const std::set<int> distinct = ExpectPrioritizeEqualsTheFrameworks(h, c, decode, names, "chat");
  EXPECT_GE(distinct.size(), 3u) << "the nodes must score differently for this to test anything";
}

// The extender groups a pool pod's nodes by what the pool holds on the node and in each of its
// domains, not by which domain it is (two leaves that each hold one decode instance give their
// nodes one result), and keys a node on its own where the tiers do not nest. Its scores must
// still equal the framework's whole score node by node, on layouts where leaves repeat each
// other's contents and where a leaf spans two spines.
TEST(ExtenderPrioritize, PoolPodScoresGroupedByContentEqualTheFrameworksOnEveryNode) {
  for (const bool nested : {true, false}) {
    SCOPED_TRACE(nested ? "leaves inside spines" : "a leaf across two spines");
    Harness h(Nodes{});
    std::vector<std::string> names;
    const char* presets[] = {"hgx-h100-8gpu", "cloud-vm-8gpu"};
    for (int i = 0; i < 32; ++i) {
      const std::string name = "n" + std::to_string(i);
      names.push_back(name);
      // Leaves of 4, spines of 16; not nested: leaf l3 (n12..n15) has n14 and n15 in spine s1.
      const int spine = !nested && (i == 14 || i == 15) ? 1 : i / 16;
      std::map<std::string, std::string> labels = {{"kubernetes.io/hostname", name},
                                                   {"toposched.io/leaf", "l" + std::to_string(i / 4)},
                                                   {"toposched.io/spine", "s" + std::to_string(spine)}};
      ASSERT_TRUE(h.store().UpsertNode({name, Preset(presets[(i / 2) % 2]), labels, true}).ok());
    }
    HttpClient c(h.port());
    const auto pool_pod = [](const std::string& name, const char* role) {
      return PodSpec{.name = name,
                     .uid = "uid-" + name,
                     .gpus = 2,
                     .rdma = 2,
                     .annotations = {{"toposched.io/pd-ratio", "1:2"}},
                     .labels = {{"llm-d.ai/role", role}, {"toposched.io/pool", "chat"}}};
    };
    // One decode instance in each of l0, l2, l4 and l6 (equal contents), a prefill in each of
    // l0, l3 and l7 (l3's and l7's contents equal: without the nesting rule n14 in l3 and n28 in
    // l7 would share a key, though the prefill in l3 sits in spine s0 and n14 in s1), two decodes
    // on n20 (l5).
    for (const auto& [name, role, node] :
         std::vector<std::tuple<std::string, const char*, std::string>>{{"d0", "decode", "n1"},
                                                                        {"d1", "decode", "n9"},
                                                                        {"d2", "decode", "n17"},
                                                                        {"d3", "decode", "n25"},
                                                                        {"p0", "prefill", "n2"},
                                                                        {"p1", "prefill", "n13"},
                                                                        {"p2", "prefill", "n29"},
                                                                        {"d4", "decode", "n20"},
                                                                        {"d5", "decode", "n20"}}) {
      PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(pool_pod(name, role)), names));
      ASSERT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(pool_pod(name, role), node))["Error"],
                "");
    }
    for (const char* role : {"decode", "prefill"}) {
      SCOPED_TRACE(role);
      const PodSpec pod = pool_pod(std::string("new-") + role, role);
      PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(pod), names));
      const std::set<int> distinct = ExpectPrioritizeEqualsTheFrameworks(h, c, pod, names, "chat");
      EXPECT_GE(distinct.size(), 3u) << "the nodes must score differently for this to test anything";
    }
  }
}

// Every real node's GPUs have their own UUIDs, which node classes leave out (nodes of one type
// share results); a shared pod that names UUIDs (HAMi's use-gpuuuid / nouse-gpuuuid) is decided
// node by node, so it lands only where its UUIDs are.
TEST(ExtenderFilter, NodesOfOneTypeShareAClassButAPodNamingUuidsIsDecidedPerNode) {
  Harness h(Nodes{});
  const auto with_uuids = [](const std::string& prefix) {
    auto t = std::make_shared<NodeTopology>(*Preset("inference-4gpu"));
    for (std::size_t g = 0; g < t->gpus.size(); ++g) t->gpus[g].uuid = prefix + "-" + std::to_string(g);
    return std::shared_ptr<const NodeTopology>(std::move(t));
  };
  ASSERT_TRUE(h.store().UpsertNode({"a", with_uuids("GPU-aaaa"), {}, true}).ok());
  ASSERT_TRUE(h.store().UpsertNode({"b", with_uuids("GPU-bbbb"), {}, true}).ok());
  const auto snap = h.store().snapshot();
  EXPECT_EQ(snap->Find("a")->class_key, snap->Find("b")->class_key);
  HttpClient c(h.port());
  const auto shared_pod = [](const std::string& name, std::map<std::string, std::string> annotations) {
    return PodSpec{.name = name,
                   .uid = "uid-" + name,
                   .gpus = 1,
                   .annotations = std::move(annotations),
                   .extra_limits = {{"nvidia.com/gpumem", "4000"}}};
  };
  const auto passed = [&](const PodSpec& pod) {
    const json r = PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(pod), {"a", "b"}));
    std::set<std::string> out;
    for (const json& n : r["NodeNames"]) out.insert(n.get<std::string>());
    return out;
  };
  EXPECT_EQ(passed(shared_pod("any", {})), (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(passed(shared_pod("on-b", {{"nvidia.com/use-gpuuuid", "GPU-bbbb-2"}})),
            (std::set<std::string>{"b"}));
  EXPECT_EQ(passed(shared_pod("not-a",
                              {{"nvidia.com/nouse-gpuuuid", "GPU-aaaa-0,GPU-aaaa-1,GPU-aaaa-2,GPU-aaaa-3"}})),
            (std::set<std::string>{"b"}));
  // Its bind takes the named GPU.
  ASSERT_EQ(PostJson(c, "/scheduler/bind",
                     testing::BindingArgs(shared_pod("on-b", {{"nvidia.com/use-gpuuuid", "GPU-bbbb-2"}}),
                                          "b"))["Error"],
            "");
  const auto bound = h.store().FindPod("uid-on-b");
  ASSERT_TRUE(bound.has_value());
  ASSERT_EQ(bound->delta.shares.size(), 1u);
  EXPECT_EQ(bound->delta.shares[0].first, 2);
}

TEST(ExtenderBind, BindsAfterFilterIsIdempotentAndRefusesAnotherNode) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}, {"hgx-b", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  const PodSpec p{.name = "p4", .uid = "uid-p4", .gpus = 4, .rdma = 4};
  PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(p), {"hgx-a", "hgx-b"}));
  EXPECT_EQ(h.service().cached_pods(), 1u);  // the reservation waits for the bind
  EXPECT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(p, "hgx-a"))["Error"], "");
  EXPECT_EQ(h.service().cached_pods(), 0u);  // and is consumed by it
  EXPECT_EQ(GpusHeld(h.store(), "hgx-a"), 4);
  const std::optional<state::PodAllocation> held = h.store().FindPod("uid-p4");
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->node, "hgx-a");
  EXPECT_EQ(held->delta.nics.size(), 4u);
  EXPECT_EQ(held->worst_class, LinkClass::kPIX);  // HGX: each GPU shares a switch with a NIC
  // A retried bind (the reply was lost) succeeds without taking more devices.
  EXPECT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(p, "hgx-a"))["Error"], "");
  EXPECT_EQ(GpusHeld(h.store(), "hgx-a"), 4);
  const std::string other = PostJson(c, "/scheduler/bind", testing::BindingArgs(p, "hgx-b"))["Error"];
  EXPECT_NE(other.find("already bound to node hgx-a"), std::string::npos) << other;
  EXPECT_EQ(GpusHeld(h.store(), "hgx-b"), 0);
}

TEST(ExtenderBind, WithoutAFilterResultTheBindFailsInBandAndChangesNothing) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  const PodSpec p{.name = "late", .uid = "uid-late", .gpus = 1};
  const std::string err = PostJson(c, "/scheduler/bind", testing::BindingArgs(p, "hgx-a"))["Error"];
  EXPECT_NE(err.find("no filter result cached"), std::string::npos) << err;
  EXPECT_EQ(h.store().pod_count(), 0u);
}

TEST(ExtenderBind, ReservationsExpireAfterTheirTtl) {
  ExtenderOptions o;
  o.reservation_ttl = std::chrono::milliseconds(1);
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}}, o);
  HttpClient c(h.port());
  const PodSpec p{.name = "slow", .uid = "uid-slow", .gpus = 1};
  PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(p), {"hgx-a"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string err = PostJson(c, "/scheduler/bind", testing::BindingArgs(p, "hgx-a"))["Error"];
  EXPECT_NE(err.find("no filter result cached"), std::string::npos) << err;
}

TEST(ExtenderBind, ANodeThatFilledUpSinceFilterIsRefusedAtBind) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  const PodSpec a{.name = "a", .uid = "uid-a", .gpus = 6};
  const PodSpec b{.name = "b", .uid = "uid-b", .gpus = 6};
  // Both pass filter on the empty node; only the first bind can succeed.
  EXPECT_EQ(PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(a), {"hgx-a"}))["NodeNames"].size(), 1u);
  EXPECT_EQ(PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(b), {"hgx-a"}))["NodeNames"].size(), 1u);
  EXPECT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(a, "hgx-a"))["Error"], "");
  const std::string err = PostJson(c, "/scheduler/bind", testing::BindingArgs(b, "hgx-a"))["Error"];
  EXPECT_NE(err.find("no longer fits"), std::string::npos) << err;
  EXPECT_EQ(GpusHeld(h.store(), "hgx-a"), 6);
}

TEST(ExtenderPreempt, KeepsNodesWhereTheVictimsFreeEnoughDevices) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}, {"hgx-b", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  // hgx-a: one 8-GPU pod; hgx-b: two 4-GPU pods.
  const PodSpec big{.name = "big", .uid = "uid-big", .gpus = 8};
  const PodSpec s1{.name = "s1", .uid = "uid-s1", .gpus = 4};
  const PodSpec s2{.name = "s2", .uid = "uid-s2", .gpus = 4};
  for (const auto& [p, n] :
       std::vector<std::pair<PodSpec, std::string>>{{big, "hgx-a"}, {s1, "hgx-b"}, {s2, "hgx-b"}}) {
    PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(p), {n}));
    ASSERT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(p, n))["Error"], "");
  }
  const PodSpec want{.name = "want", .uid = "uid-want", .gpus = 8};
  const json args = {{"Pod", MakePod(want)},
                     {"NodeNameToVictims", nullptr},
                     {"NodeNameToMetaVictims",
                      {{"hgx-a", {{"Pods", {{{"UID", "uid-big"}}}}, {"NumPDBViolations", 0}}},
                       // Evicting only one 4-GPU pod leaves 4: not enough for 8.
                       {"hgx-b", {{"Pods", {{{"UID", "uid-s1"}}}}, {"NumPDBViolations", 1}}}}}};
  const json r = PostJson(c, "/scheduler/preempt", args.dump());
  ASSERT_TRUE(r["NodeNameToMetaVictims"].contains("hgx-a")) << r.dump();
  EXPECT_EQ(r["NodeNameToMetaVictims"]["hgx-a"]["Pods"], json({{{"UID", "uid-big"}}}));
  EXPECT_FALSE(r["NodeNameToMetaVictims"].contains("hgx-b")) << r.dump();
}

TEST(ExtenderVolcano, PredicatePrioritizeAllocateDeallocate) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}, {"pcie-c", "pcie-4gpu"}});
  HttpClient c(h.port());
  const PodSpec p{.name = "v", .uid = "uid-v", .gpus = 8, .rdma = 8};
  json r = PostJson(c, "/volcano/predicate",
                    json{{"task", testing::MakeTask(p)}, {"node", testing::MakeVolcanoNode("hgx-a")}}.dump());
  EXPECT_EQ(r, json({{"status", ""}, {"code", 0}}));
  r = PostJson(c, "/volcano/predicate",
               json{{"task", testing::MakeTask(p)}, {"node", testing::MakeVolcanoNode("pcie-c")}}.dump());
  EXPECT_EQ(r["code"], 3) << r.dump();  // UnschedulableAndUnresolvable
  EXPECT_FALSE(r["status"].get<std::string>().empty());

  r = PostJson(c, "/volcano/prioritize",
               json{{"task", testing::MakeTask(p)},
                    {"nodes", {testing::MakeVolcanoNode("hgx-a"), testing::MakeVolcanoNode("pcie-c")}}}
                   .dump());
  EXPECT_EQ(r["errorMessage"], "");
  EXPECT_GT(r["nodeScore"]["hgx-a"].get<double>(), 0.0);
  EXPECT_EQ(r["nodeScore"]["pcie-c"].get<double>(), 0.0);

  r = PostJson(c, "/volcano/allocate", json{{"task", testing::MakeTask(p, "hgx-a")}}.dump());
  EXPECT_EQ(r, json({{"errorMessage", ""}}));
  EXPECT_EQ(GpusHeld(h.store(), "hgx-a"), 8);
  // The node is full now: the same predicate for another task fails as Unschedulable (2).
  const PodSpec q{.name = "q", .uid = "uid-q", .gpus = 1};
  r = PostJson(c, "/volcano/predicate",
               json{{"task", testing::MakeTask(q)}, {"node", testing::MakeVolcanoNode("hgx-a")}}.dump());
  EXPECT_EQ(r["code"], 2) << r.dump();

  r = PostJson(c, "/volcano/deallocate", json{{"task", testing::MakeTask(p, "hgx-a")}}.dump());
  EXPECT_EQ(r, json({{"errorMessage", ""}}));
  EXPECT_EQ(GpusHeld(h.store(), "hgx-a"), 0);
}

TEST(ExtenderVolcano, TasksWithoutAPodAreReadFromMilliUnitResreq) {
  Harness h(Nodes{{"pcie-c", "pcie-4gpu"}});
  HttpClient c(h.port());
  json task = testing::MakeTask(PodSpec{.name = "np", .uid = "uid-np", .gpus = 8});
  task["Pod"] = nullptr;  // 8000 milli-GPUs = 8 GPUs: more than the node has
  const json r = PostJson(c, "/volcano/predicate",
                          json{{"task", task}, {"node", testing::MakeVolcanoNode("pcie-c")}}.dump());
  EXPECT_EQ(r["code"], 3) << r.dump();
}

TEST(ExtenderVolcano, APipelinedTaskWaitsForItsVictimsWithoutFailingTheStatement) {
  // Volcano's preempt action evicts, then pipelines the preemptor onto the victims' devices and
  // calls allocate for it; an error there fails Statement.Pipeline and the statement is
  // discarded, the eviction undone (e2e TestVolcano/Preemption). A pipelined task answers no
  // error and gets no devices until they are free; an allocated one that does not fit is refused.
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  const PodSpec victim{.name = "low", .uid = "uid-low", .gpus = 8};
  ASSERT_EQ(PostJson(c, "/volcano/allocate",
                     json{{"task", testing::MakeTask(victim, "hgx-a")}}.dump())["errorMessage"],
            "");
  const PodSpec preemptor{.name = "hi", .uid = "uid-hi", .gpus = 4};
  json task = testing::MakeTask(preemptor, "hgx-a");
  task["Status"] = 4;  // api.Pipelined
  task["EvictionOccurred"] = true;
  EXPECT_EQ(PostJson(c, "/volcano/allocate", json{{"task", task}}.dump())["errorMessage"], "");
  EXPECT_EQ(GpusHeld(h.store(), "hgx-a"), 8);  // the victim's, nothing given twice
  EXPECT_FALSE(h.store().FindPod("uid-hi").has_value());
  task["Status"] = 2;  // api.Allocated: the same request on a full node is an error
  EXPECT_NE(PostJson(c, "/volcano/allocate", json{{"task", task}}.dump())["errorMessage"], "");
  // The victim goes; pipelined again onto the free devices, still nothing (a statement that
  // pipelined it may be committed with no deallocate to follow); the next session allocates it.
  ASSERT_EQ(PostJson(c, "/volcano/deallocate",
                     json{{"task", testing::MakeTask(victim, "hgx-a")}}.dump())["errorMessage"],
            "");
  task["Status"] = 4;
  EXPECT_EQ(PostJson(c, "/volcano/allocate", json{{"task", task}}.dump())["errorMessage"], "");
  EXPECT_FALSE(h.store().FindPod("uid-hi").has_value());
  task["Status"] = 2;
  EXPECT_EQ(PostJson(c, "/volcano/allocate", json{{"task", task}}.dump())["errorMessage"], "");
  EXPECT_EQ(GpusHeld(h.store(), "hgx-a"), 4);
}

TEST(ExtenderVolcano, ATaskThatHoldsDevicesOnANodeFitsThereOnThem) {
  // An allocate whose reply was lost (the leader died after writing it; a new leader restored
  // it): the task is pending, its devices held on hgx-a, the node full of them. Predicate must
  // pass there, or no session allocates it again and it stays pending while holding the
  // devices (seen with vc-scheduler v1.13.3 in e2e TestVolcano/LeaderKill). Another task's
  // predicate still sees the devices taken.
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  const PodSpec p{.name = "lost", .uid = "uid-lost", .gpus = 8};
  ASSERT_EQ(
      PostJson(c, "/volcano/allocate", json{{"task", testing::MakeTask(p, "hgx-a")}}.dump())["errorMessage"],
      "");
  json r = PostJson(c, "/volcano/predicate",
                    json{{"task", testing::MakeTask(p)}, {"node", testing::MakeVolcanoNode("hgx-a")}}.dump());
  EXPECT_EQ(r, json({{"status", ""}, {"code", 0}}));
  EXPECT_EQ(
      PostJson(c, "/volcano/allocate", json{{"task", testing::MakeTask(p, "hgx-a")}}.dump())["errorMessage"],
      "");
  EXPECT_EQ(GpusHeld(h.store(), "hgx-a"), 8);
  const PodSpec q{.name = "q", .uid = "uid-q", .gpus = 1};
  r = PostJson(c, "/volcano/predicate",
               json{{"task", testing::MakeTask(q)}, {"node", testing::MakeVolcanoNode("hgx-a")}}.dump());
  EXPECT_EQ(r["code"], 2) << r.dump();
}

TEST(ExtenderFilter, APodThatHoldsDevicesOnANodePassesThereOnly) {
  // A bind that did not complete (its Binding's outcome unknown, or the extender restarted) left
  // the pod's devices held on hgx-a: the retried pod fits there on them, and bind completes it.
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}, {"hgx-b", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  const PodSpec fill{.name = "fill", .uid = "uid-fill", .gpus = 8};
  PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(fill), {"hgx-b"}));
  ASSERT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(fill, "hgx-b"))["Error"], "");
  const PodSpec p{.name = "p8", .uid = "uid-p8", .gpus = 8};
  PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(p), {"hgx-a"}));
  ASSERT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(p, "hgx-a"))["Error"], "");
  const json r = PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(p), {"hgx-a", "hgx-b"}));
  EXPECT_EQ(r["NodeNames"], json({"hgx-a"})) << r.dump();
  EXPECT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(p, "hgx-a"))["Error"], "");
  EXPECT_EQ(GpusHeld(h.store(), "hgx-a"), 8);
  const PodSpec q{.name = "q", .uid = "uid-q", .gpus = 1};
  EXPECT_TRUE(
      PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(q), {"hgx-a", "hgx-b"}))["NodeNames"].empty());
}

TEST(ExtenderVolcano, PreemptableAndReclaimableAlwaysAbstain) {
  // Volcano asks a later tier only when the earlier ones named no victim: a permit from the
  // extender there would evict pods Volcano's priority plugin refused to (e2e TestVolcano).
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  const PodSpec holder{.name = "holder", .uid = "uid-holder", .gpus = 8};
  ASSERT_EQ(PostJson(c, "/volcano/allocate",
                     json{{"task", testing::MakeTask(holder, "hgx-a")}}.dump())["errorMessage"],
            "");
  const PodSpec cpu_only{.name = "cpu", .uid = "uid-cpu"};
  const PodSpec evictor{.name = "hi", .uid = "uid-hi", .gpus = 4};
  const json evictees = {testing::MakeTask(holder, "hgx-a"), testing::MakeTask(cpu_only, "hgx-a")};
  for (const char* verb : {"/volcano/preemptable", "/volcano/reclaimable"}) {
    for (const PodSpec& who : {evictor, cpu_only}) {
      const json r =
          PostJson(c, verb, json{{"evictor", testing::MakeTask(who)}, {"evictees", evictees}}.dump());
      EXPECT_EQ(r["status"], 0) << verb << " " << who.name;
      EXPECT_TRUE(r["victims"].empty()) << verb << " " << who.name;
    }
  }
  // The holder keeps its devices: nothing was released by the question.
  EXPECT_EQ(GpusHeld(h.store(), "hgx-a"), 8);
}

TEST(ExtenderVolcano, SessionOpenAndCloseAnswerEmptyObjects) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  const json open = {
      {"Jobs", json::object()},           {"Nodes", {{"hgx-a", testing::MakeVolcanoNode("hgx-a")}}},
      {"Queues", json::object()},         {"NamespaceInfo", json::object()},
      {"RevocableNodes", json::object()}, {"NodeList", nullptr}};
  EXPECT_EQ(PostJson(c, "/volcano/onSessionOpen", open.dump()), json::object());
  EXPECT_EQ(PostJson(c, "/volcano/onSessionClose", "{}"), json::object());
}

TEST(ExtenderWire, BadRequestsGetClearErrorsAndTheServerKeepsServing) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  struct Case {
    std::string name, path, body, want;
  } cases[] = {
      {"not json", "/scheduler/filter", "{\"Pod\": ", "not JSON"},
      {"wrong type", "/scheduler/filter", json{{"Pod", MakePod(kTraining8)}, {"NodeNames", {"a", 7}}}.dump(),
       "NodeNames[1]"},
      {"missing pod", "/scheduler/filter", json{{"NodeNames", {"a"}}}.dump(), "Pod"},
      {"bind missing uid", "/scheduler/bind",
       json{{"PodName", "x"}, {"PodNamespace", "d"}, {"Node", "n"}}.dump(), "PodUID"},
      {"array at top", "/scheduler/prioritize", "[1,2]", ""},
      {"volcano garbage", "/volcano/predicate", "\x01\x02", ""},
  };
  for (const Case& tc : cases) {
    auto r = c.Post(tc.path, tc.body);
    ASSERT_TRUE(r.has_value()) << tc.name;
    EXPECT_EQ(r->status, 400) << tc.name << ": " << r->body;
    const json body = json::parse(r->body);
    const std::string msg = body.contains("Error") ? body["Error"] : body["errorMessage"];
    EXPECT_NE(msg.find(tc.want), std::string::npos) << tc.name << ": " << msg;
  }
  // Unknown fields at every level are ignored.
  json pod = MakePod(kTraining8);
  pod["futureField"] = {{"x", 1}};
  pod["spec"]["newThing"] = json::array();
  json args = json::parse(ExtenderArgs(pod, {"hgx-a"}));
  args["SomethingNew"] = "value";
  EXPECT_EQ(PostJson(c, "/scheduler/filter", args.dump())["NodeNames"], json({"hgx-a"}));
  // Routes and methods.
  EXPECT_EQ(c.Post("/scheduler/nope", "{}")->status, 404);
  auto get = c.Get("/scheduler/filter");
  EXPECT_EQ(get->status, 405);
  EXPECT_NE(get->headers.find("Allow: POST"), std::string::npos) << get->headers;
  EXPECT_EQ(c.Request("POST", "/scheduler/filter", "<xml/>", "text/xml")->status, 415);
  // Still serving.
  EXPECT_EQ(c.Get("/healthz")->status, 200);
}

TEST(ExtenderOps, HealthReadinessAndMetrics) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}, {"pcie-c", "pcie-4gpu"}});
  HttpClient c(h.port());
  EXPECT_EQ(c.Get("/healthz")->body, "ok\n");
  EXPECT_EQ(c.Get("/readyz")->status, 200);
  h.store().SetSynced(false);
  EXPECT_EQ(c.Get("/readyz")->status, 503);
  h.store().SetSynced(true);

  PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(kTraining8), {"hgx-a", "pcie-c"}));
  PostJson(c, "/scheduler/bind", testing::BindingArgs(kTraining8, "hgx-a"));
  auto m = c.Get("/metrics");
  ASSERT_EQ(m->status, 200);
  EXPECT_EQ(m->content_type.rfind("text/plain; version=0.0.4", 0), 0u) << m->content_type;
  const std::string& t = m->body;
  for (const char* want :
       {"toposched_requests_total{verb=\"filter\",code=\"200\"} 1",
        "toposched_requests_total{verb=\"bind\",code=\"200\"} 1",
        "toposched_request_duration_seconds_count{verb=\"filter\"} 1",
        "toposched_placements_total{worst_class=\"PIX\"} 1", "toposched_binds_total{outcome=\"bound\"} 1",
        "toposched_reservations_total{outcome=\"confirmed\"} 1", "toposched_state_nodes 2",
        "toposched_state_pods 1"}) {
    EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
  }
  EXPECT_NE(t.find("toposched_filter_rejections_total{reason=\"DeviceFit/UnschedulableAndUnresolvable\"} 1"),
            std::string::npos)
      << t;
}

// A Prefill/Decode pool pod is scored afresh on every call, but a bind to a node it passed at
// filter time, in the same state, is still "confirmed"; one to a node whose state changed since
// is "changed".
TEST(ExtenderOps, PoolPodBindsCountAsConfirmedWhenTheNodeIsUnchanged) {
  Harness h(Nodes{{"hgx-a", "hgx-h100-8gpu"}, {"hgx-b", "hgx-h100-8gpu"}});
  HttpClient c(h.port());
  auto pool_pod = [](const std::string& name, const char* role) {
    return PodSpec{.name = name,
                   .uid = "uid-" + name,
                   .gpus = 2,
                   .rdma = 2,
                   .labels = {{"llm-d.ai/role", role}, {"toposched.io/pool", "chat"}}};
  };
  const PodSpec prefill = pool_pod("prefill-0", "prefill"), decode = pool_pod("decode-0", "decode");
  PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(prefill), {"hgx-a", "hgx-b"}));
  PostJson(c, "/scheduler/prioritize", ExtenderArgs(MakePod(prefill), {"hgx-a", "hgx-b"}));
  EXPECT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(prefill, "hgx-a"))["Error"], "");
  // The decode pod filters, then hgx-b changes (another pod takes GPUs there) before its bind.
  PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(decode), {"hgx-a", "hgx-b"}));
  const PodSpec other{.name = "other", .uid = "uid-other", .gpus = 1};
  PostJson(c, "/scheduler/filter", ExtenderArgs(MakePod(other), {"hgx-b"}));
  EXPECT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(other, "hgx-b"))["Error"], "");
  EXPECT_EQ(PostJson(c, "/scheduler/bind", testing::BindingArgs(decode, "hgx-b"))["Error"], "");
  const std::string t = c.Get("/metrics")->body;
  // prefill-0 and other confirmed; decode-0 changed.
  EXPECT_NE(t.find("toposched_reservations_total{outcome=\"confirmed\"} 2"), std::string::npos) << t;
  EXPECT_NE(t.find("toposched_reservations_total{outcome=\"changed\"} 1"), std::string::npos) << t;
}

// Many clients filter and bind at once against a small cluster; the store must never hold a
// device twice, and every acknowledged bind must be in it.
TEST(ExtenderConcurrency, ConcurrentBindsNeverOversubscribe) {
  Harness h(Nodes{{"n1", "hgx-h100-8gpu"}, {"n2", "hgx-h100-8gpu"}, {"n3", "inference-4gpu"}});
  const std::vector<std::string> names = {"n1", "n2", "n3"};
  constexpr int kThreads = 8, kPodsPerThread = 400;  // 3,200 filter+bind attempts
  std::atomic<int> acked{0};
  std::mutex mu;
  std::map<std::string, std::string> acked_pods;  // uid -> node
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      HttpClient c(h.port());
      std::mt19937 rng(t);
      for (int i = 0; i < kPodsPerThread; ++i) {
        PodSpec p{.name = "p" + std::to_string(t) + "-" + std::to_string(i),
                  .uid = "u" + std::to_string(t) + "-" + std::to_string(i),
                  .gpus = 1 + static_cast<int>(rng() % 3),
                  .rdma = static_cast<int>(rng() % 2)};
        auto f = c.Post("/scheduler/filter", ExtenderArgs(MakePod(p), names));
        if (!f || f->status != 200) continue;
        const json fr = json::parse(f->body);
        if (fr["NodeNames"].empty()) {
          // Full: release one of this thread's earlier pods through Volcano's deallocate.
          const std::string victim = "u" + std::to_string(t) + "-" + std::to_string(rng() % (i + 1));
          auto d = c.Post("/volcano/deallocate", json{{"task", {{"UID", victim}}}}.dump());
          if (d && d->status == 200) {
            std::lock_guard lock(mu);
            acked_pods.erase(victim);
          }
          continue;
        }
        const std::string node = fr["NodeNames"][rng() % fr["NodeNames"].size()];
        auto b = c.Post("/scheduler/bind", testing::BindingArgs(p, node));
        if (b && b->status == 200 && json::parse(b->body)["Error"] == "") {
          acked.fetch_add(1);
          std::lock_guard lock(mu);
          acked_pods[p.uid] = node;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_GT(acked.load(), 20);  // the cluster (20 GPUs) filled and churned through releases
  // Every device held by at most one pod, and the store agrees with what was acknowledged.
  const auto snap = h.store().snapshot();
  std::map<std::pair<std::string, int>, int> gpu_holders, nic_holders;
  std::size_t pods_in_store = 0;
  for (const auto& rec : snap->nodes()) {
    for (const std::string& uid : rec->pods) {
      ++pods_in_store;
      const std::optional<state::PodAllocation> a = h.store().FindPod(uid);
      ASSERT_TRUE(a.has_value()) << uid;
      EXPECT_EQ(acked_pods.count(uid), 1u) << uid << " bound but never acknowledged";
      for (int g : a->delta.exclusive_gpus)
        EXPECT_EQ((++gpu_holders[{rec->name, g}]), 1) << rec->name << " GPU " << g;
      for (int n : a->delta.nics) EXPECT_EQ((++nic_holders[{rec->name, n}]), 1) << rec->name << " NIC " << n;
    }
  }
  EXPECT_EQ(pods_in_store, acked_pods.size());
}

}  // namespace
}  // namespace toposched::extender

namespace toposched::extender {
namespace {

// An ExtenderService on one HGX node called in-process (no HTTP), with a settable clock.
struct InProcess {
  explicit InProcess(ExtenderOptions options = {}, BindHooks* hooks = nullptr,
                     const Nodes& nodes = Nodes{{"hgx-a", "hgx-h100-8gpu"}})
      : registry(plugins::BuiltinRegistry()),
        fw(framework::Framework::Create(plugins::DefaultSchedulerConfig(), registry).value()),
        store(nullptr, StoreOptionsFor(fw.config())) {
    for (const auto& [name, preset] : nodes)
      EXPECT_TRUE(store.UpsertNode({name, Preset(preset), {}, true}).ok());
    store.SetSynced(true);
    service = std::make_unique<ExtenderService>(
        fw, store, metrics, std::move(options), [this] { return now; }, hooks);
  }
  server::HttpResponse Call(std::string_view method, std::string_view target, std::string_view body,
                            bool verified = false) {
    server::HttpRequest rq{method, target, "application/json", body, "test", verified};
    server::HttpResponse rs;
    service->Handle(rq, rs);
    return rs;
  }
  framework::Registry registry;
  framework::Framework fw;
  state::ClusterStore store;
  metrics::Registry metrics;
  std::chrono::steady_clock::time_point now{std::chrono::hours(1)};
  std::unique_ptr<ExtenderService> service;
};

// Issue 15 (3): Volcano before v1.13 ignores allocateFuncVerb. Tasks that pass predicate for a
// minute with no allocate call are reported (gauge and a log line); one allocate clears it.
TEST(ExtenderVolcano, PredicatesWithoutAllocateForAMinuteSayVolcanoIsTooOld) {
  InProcess h;
  auto& now = h.now;
  auto call = [&](const std::string& target, const std::string& body) {
    return h.Call(target == "/metrics" ? "GET" : "POST", target, body).body;
  };
  const std::string predicate = json{
      {"task", testing::MakeTask(PodSpec{.name = "v", .uid = "uid-v", .gpus = 1})},
      {"node", testing::MakeVolcanoNode(
                   "hgx-a")}}.dump();
  auto missing = [&] {
    return call("/metrics", "").find("\ntoposched_volcano_allocate_missing 1\n") != std::string::npos;
  };
  call("/volcano/predicate", predicate);
  now += std::chrono::seconds(30);
  call("/volcano/predicate", predicate);
  EXPECT_FALSE(missing()) << "within a session's minute allocate may still come";
  now += std::chrono::seconds(31);
  call("/volcano/predicate", predicate);
  EXPECT_TRUE(missing());
  call("/volcano/allocate",
       json{{"task", testing::MakeTask(PodSpec{.name = "v", .uid = "uid-v", .gpus = 1}, "hgx-a")}}.dump());
  EXPECT_FALSE(missing());
}

// Issue 15 (10): with mutual TLS, a verb without a verified client certificate is refused (any
// pod reaching the Service could otherwise make toposched bind arbitrary pods); health, readiness
// and metrics stay open to probes and scrapers.
TEST(ExtenderSecurity, VerbsNeedAVerifiedClientCertificateWhenRequired) {
  InProcess h(ExtenderOptions{.require_client_certificate = true});
  auto& store = h.store;
  auto call = [&](const char* method, const std::string& target, const std::string& body, bool verified) {
    return h.Call(method, target, body, verified);
  };
  const std::string bind =
      json{{"PodName", "p"}, {"PodNamespace", "default"}, {"PodUID", "uid-p"}, {"Node", "hgx-a"}}.dump();
  const std::string filter =
      ExtenderArgs(MakePod(PodSpec{.name = "p", .uid = "uid-p", .gpus = 1}), {"hgx-a"});
  for (const char* target : {"/scheduler/bind", "/scheduler/filter", "/volcano/allocate"}) {
    SCOPED_TRACE(target);
    const server::HttpResponse refused =
        call("POST", target, target[1] == 's' && target[11] == 'f' ? filter : bind, false);
    EXPECT_EQ(refused.status, 403);
    EXPECT_NE(refused.body.find("client certificate"), std::string::npos) << refused.body;
  }
  EXPECT_EQ(call("GET", "/healthz", "", false).status, 200);
  EXPECT_EQ(call("GET", "/metrics", "", false).status, 200);
  const server::HttpResponse allowed = call("POST", "/scheduler/filter", filter, true);
  EXPECT_EQ(allowed.status, 200);
  EXPECT_EQ(json::parse(allowed.body)["NodeNames"], json::array({"hgx-a"})) << allowed.body;
  EXPECT_EQ(store.pod_count(), 0u) << "nothing refused changed the store";
}

// What the Kubernetes source would be told (issue 17: events, explain, nodes).
class RecordingHooks : public BindHooks {
 public:
  bool MayChangeState() const override { return true; }
  bool Ready(std::string*) const override { return true; }
  Result<std::string> FetchPod(std::string_view, std::string_view, std::string_view) override {
    return Error("no API server in this test");
  }
  Status CompleteBind(const state::PodAllocation&) override { return Status::Ok(); }
  bool MayRebind(const state::PodAllocation&) override { return true; }
  void PodUnschedulable(std::string_view ns, std::string_view name, std::string_view,
                        std::string_view summary) override {
    unschedulable.emplace_back(std::string(ns) + "/" + std::string(name), std::string(summary));
  }
  void PodAllocated(const state::PodAllocation& a, std::string_view alignment, bool volcano) override {
    allocated.push_back({a.pod_name, a.node, std::string(alignment), volcano});
  }
  Result<std::string> LookupPod(std::string_view ns, std::string_view name) override {
    const auto it = pods.find(std::string(ns) + "/" + std::string(name));
    if (it == pods.end()) {
      return Error(std::string(kPodNotFoundTag) + std::string(ns) + "/" + std::string(name),
                   ErrorCode::kNotFound);
    }
    return it->second;
  }
  std::set<std::string, std::less<>> StaleTopologies() const override { return stale; }

  struct Allocated {
    std::string pod, node, alignment;
    bool volcano;
  };
  std::vector<std::pair<std::string, std::string>> unschedulable;  // pod, summary
  std::vector<Allocated> allocated;
  std::map<std::string, std::string> pods;  // "ns/name" -> Pod JSON
  std::set<std::string, std::less<>> stale;
};

// A cluster where an 8-GPU, 8-NIC pod fits nowhere, each node for its own reason.
struct NoFitCluster {
  NoFitCluster()
      : h(ExtenderOptions{}, &hooks,
          Nodes{{"hgx-a", "hgx-h100-8gpu"},
                {"hgx-b", "hgx-h100-8gpu"},
                {"pcie-1", "pcie-4gpu"},
                {"pcie-2", "pcie-4gpu"},
                {"pcie-3", "pcie-4gpu"}}) {
    EXPECT_TRUE(h.store.UpsertNode({"hgx-b", Preset("hgx-h100-8gpu"), {}, /*schedulable=*/false}).ok());
    EXPECT_TRUE(h.store.UpsertNode({"stale-c", nullptr, {}, true}).ok());  // topology withdrawn: stale
    hooks.stale.insert("stale-c");
    // hgx-a: 2 GPUs taken, 6 left.
    const PodSpec small{.name = "small", .uid = "uid-small", .gpus = 2, .rdma = 2};
    EXPECT_EQ(h.Call("POST", "/scheduler/filter", ExtenderArgs(MakePod(small), {"hgx-a"})).status, 200);
    EXPECT_EQ(
        json::parse(h.Call("POST", "/scheduler/bind", testing::BindingArgs(small, "hgx-a")).body)["Error"],
        "");
  }
  RecordingHooks hooks;
  InProcess h;
  const std::vector<std::string> names{"hgx-a", "hgx-b", "pcie-1", "pcie-2", "pcie-3", "stale-c", "ghost"};
};

TEST(ExtenderEvents, AFilterThatLeavesNoNodeTellsThePodTheReasonsByCount) {
  NoFitCluster c;
  const server::HttpResponse r =
      c.h.Call("POST", "/scheduler/filter", ExtenderArgs(MakePod(kTraining8), c.names));
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(json::parse(r.body)["NodeNames"].empty()) << r.body;
  ASSERT_EQ(c.hooks.unschedulable.size(), 1u);
  EXPECT_EQ(c.hooks.unschedulable[0].first, "default/train");
  // Most nodes first, ties by text; "ghost" has no record at all, stale-c's topology is withdrawn.
  EXPECT_EQ(
      c.hooks.unschedulable[0].second,
      "0/7 nodes fit: 3 nodes: fewer GPUs or RDMA NICs in all than the pod asks; 1 node: cordoned; "
      "1 node: fewer than 8 free GPUs; 1 node: no NodeTopology (is the toposched agent running there?); "
      "1 node: stale topology (the agent's heartbeat is too old)");
  // A call where one node fits tells nothing.
  const PodSpec four{.name = "four", .uid = "uid-four", .gpus = 4, .rdma = 4};
  c.h.Call("POST", "/scheduler/filter", ExtenderArgs(MakePod(four), c.names));
  EXPECT_EQ(c.hooks.unschedulable.size(), 1u);
}

TEST(ExtenderEvents, ABindTellsWhetherTheWorstLinkWasTheBestTheNodeAllows) {
  NoFitCluster c;  // its constructor bound "small" (2 GPUs, 2 NICs) on hgx-a
  ASSERT_EQ(c.hooks.allocated.size(), 1u);
  EXPECT_EQ(c.hooks.allocated[0].pod, "small");
  EXPECT_EQ(c.hooks.allocated[0].node, "hgx-a");
  EXPECT_EQ(c.hooks.allocated[0].alignment, "the best this node allows");  // HGX: PIX pairs
  EXPECT_FALSE(c.hooks.allocated[0].volcano);
  // A retried bind of a bound pod tells nothing new.
  const PodSpec small{.name = "small", .uid = "uid-small", .gpus = 2, .rdma = 2};
  c.h.Call("POST", "/scheduler/bind", testing::BindingArgs(small, "hgx-a"));
  EXPECT_EQ(c.hooks.allocated.size(), 1u);
  // Volcano's allocate says so too, marked as Volcano's (it binds later itself).
  const PodSpec v{.name = "v", .uid = "uid-v", .gpus = 1, .rdma = 1};
  c.h.Call("POST", "/volcano/allocate", json{{"task", testing::MakeTask(v, "hgx-a")}}.dump());
  ASSERT_EQ(c.hooks.allocated.size(), 2u);
  EXPECT_TRUE(c.hooks.allocated[1].volcano);
}

TEST(ExtenderEvents, AlignmentNoteComparesTheWorstPairWithTheEmptyNodesBest) {
  Placement p;
  EXPECT_EQ(AlignmentNote(p), "") << "no GPU->NIC pairs: nothing to say";
  p.pairs.push_back({0, 0, LinkClass::kPHB});
  p.cost.worst_gpu_nic = 3;   // PHB
  p.best_possible_worst = 1;  // PIX with every device free
  EXPECT_EQ(AlignmentNote(p), "the node allows PIX; its free devices did not");
  p.best_possible_worst = 3;
  EXPECT_EQ(AlignmentNote(p), "the best this node allows");
}

TEST(ExtenderEvents, SummaryKeepsTheLargestGroupsAndCountsTheRest) {
  std::vector<std::pair<std::string, std::size_t>> reasons;
  for (int i = 0; i < 8; ++i)
    reasons.emplace_back("reason " + std::to_string(i), static_cast<std::size_t>(i + 1));
  // 36 nodes refused: groups of 8..1; the two smallest (2 + 1 nodes) become "other reasons".
  EXPECT_EQ(SummarizeRefusals(40, 4, reasons),
            "4/40 nodes fit: 8 nodes: reason 7; 7 nodes: reason 6; 6 nodes: reason 5; 5 nodes: reason 4; "
            "4 nodes: reason 3; 3 nodes: reason 2; 3 nodes: other reasons");
}

TEST(ExtenderExplain, ByNameAnswersPerNodeReasonsAndScoresFromTheStore) {
  NoFitCluster c;
  const PodSpec four{.name = "four", .uid = "uid-four", .gpus = 4, .rdma = 4};
  c.hooks.pods["default/four"] = MakePod(four).dump();
  const server::HttpResponse r = c.h.Call("GET", "/explain?pod=default/four", "");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  const json e = json::parse(r.body);
  EXPECT_EQ(e["pod"], "default/four");
  EXPECT_EQ(e["request"], "4 GPUs, 4 RDMA NICs, GPU->NIC alignment preferred");
  EXPECT_EQ(e["nodesTotal"], 6);  // the store's nodes (ghost is not one)
  EXPECT_EQ(e["nodesFit"], 1);    // hgx-a (6 GPUs free); the 4-GPU machines have no RDMA NIC
  EXPECT_EQ(e["best"], "hgx-a") << e.dump(2);
  EXPECT_TRUE(e["boundTo"].is_null());
  const json& best = e["nodes"][0];
  EXPECT_EQ(best["name"], "hgx-a");
  EXPECT_TRUE(best["fits"]);
  EXPECT_EQ(best["gpus"].size(), 4u);
  EXPECT_EQ(best["nics"].size(), 4u);
  EXPECT_EQ(best["worstClass"], "PIX");
  EXPECT_EQ(best["extenderScore"], 10) << "the best node of the call";
  EXPECT_NE(best["explanation"].get<std::string>().find("total"), std::string::npos);
  std::map<std::string, json> by_name;
  for (const json& n : e["nodes"]) by_name[n["name"]] = n;
  EXPECT_FALSE(by_name["hgx-b"]["fits"]);
  EXPECT_EQ(by_name["hgx-b"]["summary"], "cordoned");
  EXPECT_EQ(by_name["stale-c"]["summary"], "stale topology (the agent's heartbeat is too old)");
  EXPECT_EQ(by_name["stale-c"]["plugin"], "DeviceFit");
  EXPECT_EQ(
      e["summary"],
      "1/6 nodes fit: 3 nodes: fewer GPUs or RDMA NICs in all than the pod asks; 1 node: cordoned; 1 node: "
      "stale topology (the agent's heartbeat is too old)");
  EXPECT_EQ(e["reasons"][0],
            json({{"reason", "fewer GPUs or RDMA NICs in all than the pod asks"}, {"nodes", 3}}));
  // Explaining changes nothing: no reservation, no allocation.
  EXPECT_EQ(c.h.service->cached_pods(), 0u);
  EXPECT_EQ(c.h.store.pod_count(), 1u);

  // The same as text (kubectl toposched explain), and truncated to one node.
  const server::HttpResponse text = c.h.Call("GET", "/explain?pod=default%2Ffour&format=text&limit=1", "");
  ASSERT_EQ(text.status, 200) << text.body;
  EXPECT_EQ(text.content_type, "text/plain; charset=utf-8");
  EXPECT_NE(text.body.find("Best node now: hgx-a\n"), std::string::npos) << text.body;
  EXPECT_NE(text.body.find("hgx-a  fits  score "), std::string::npos) << text.body;
  EXPECT_EQ(text.body.find("pcie-1"), std::string::npos) << "limit=1 lists one node";
  EXPECT_NE(text.body.find("raise ?limit="), std::string::npos) << text.body;
}

TEST(ExtenderExplain, APostedPodAndABoundPodWhoseOwnDevicesCountFree) {
  NoFitCluster c;
  // The bound pod "small" on hgx-a: its 2 GPUs are free for the question "where would it go now".
  const PodSpec small{.name = "small", .uid = "uid-small", .gpus = 2, .rdma = 2};
  server::HttpResponse r = c.h.Call("POST", "/explain", MakePod(small).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json e = json::parse(r.body);
  EXPECT_EQ(e["boundTo"]["node"], "hgx-a");
  EXPECT_NE(e["boundTo"]["devices"].get<std::string>().find("GPUs "), std::string::npos) << e["boundTo"];
  EXPECT_EQ(e["boundTo"]["worstClass"], "PIX");
  // The unschedulable pod: nothing fits, and the summary is the one its event carries.
  r = c.h.Call("POST", "/explain?format=text", MakePod(kTraining8).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("0/6 nodes fit: 3 nodes: fewer GPUs or RDMA NICs in all than the pod asks; "),
            std::string::npos)
      << r.body;
  EXPECT_EQ(r.body.find("Best node now"), std::string::npos) << r.body;
}

TEST(ExtenderExplain, BadRequestsGetClearErrors) {
  RecordingHooks hooks;
  InProcess h(ExtenderOptions{.require_client_certificate = true}, &hooks);
  const auto call = [&](const char* method, const std::string& target, const std::string& body = "",
                        bool verified = false) { return h.Call(method, target, body, verified); };
  const auto error_of = [](const server::HttpResponse& r) {
    return json::parse(r.body)["Error"].get<std::string>();
  };
  EXPECT_EQ(call("GET", "/explain").status, 400);
  EXPECT_NE(error_of(call("GET", "/explain")).find("?pod=NAMESPACE/NAME"), std::string::npos);
  EXPECT_EQ(call("GET", "/explain?pod=Default/../x").status, 400);
  EXPECT_EQ(call("GET", "/explain?pod=a/b&pod=c/d").status, 400);
  EXPECT_EQ(call("GET", "/explain?pod=a/b&verbose=1").status, 400);
  EXPECT_NE(error_of(call("GET", "/explain?pod=a/b&verbose=1")).find("unknown query parameter \"verbose\""),
            std::string::npos);
  EXPECT_EQ(call("GET", "/explain?pod=a/b&limit=0").status, 400);
  EXPECT_EQ(call("GET", "/explain?pod=a/b&format=yaml").status, 400);
  EXPECT_EQ(call("GET", "/explain?pod=a/b%zz").status, 400);
  const server::HttpResponse missing = call("GET", "/explain?pod=default/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(error_of(missing), "pod not found: default/nope");
  hooks.pods["default/broken"] = R"({"kind":"Service"})";
  EXPECT_EQ(call("GET", "/explain?pod=default/broken").status, 400);
  // A posted Pod is a request body like the verbs': with mutual TLS it needs the certificate.
  const std::string pod = MakePod(PodSpec{.name = "p", .uid = "uid-p", .gpus = 1}).dump();
  EXPECT_EQ(call("POST", "/explain", pod).status, 403);
  EXPECT_EQ(call("POST", "/explain", pod, true).status, 200);
  EXPECT_EQ(call("POST", "/explain", "not json", true).status, 400);
  EXPECT_EQ(call("POST", "/explain?pod=a/b", pod, true).status, 400);
  EXPECT_EQ(call("PUT", "/explain").status, 405);
  EXPECT_EQ(call("POST", "/nodes", "{}", true).status, 405);
  // The read-only GETs stay open like /metrics (the API server's service proxy sends no certificate).
  hooks.pods["default/p"] = pod;
  EXPECT_EQ(call("GET", "/explain?pod=default/p").status, 200);
  EXPECT_EQ(call("GET", "/nodes").status, 200);
  EXPECT_EQ(h.service->BodyLimit("/explain"), ExtenderOptions{}.max_explain_body_bytes);
}

TEST(ExtenderExplain, WithoutAnApiServerOnlyAPostedPodCanBeExplained) {
  InProcess h;
  const server::HttpResponse r = h.Call("GET", "/explain?pod=default/p", "");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("POST the Pod JSON"), std::string::npos) << r.body;
  EXPECT_EQ(h.Call("POST", "/explain", MakePod(kTraining8).dump()).status, 200);
}

// The default limit lists 500 nodes; the counts and the summary cover all 5,000.
TEST(ExtenderExplain, FiveThousandNodesAreCountedAndTheFirst500Listed) {
  Nodes nodes;
  for (int i = 0; i < 5000; ++i) {
    nodes.emplace_back("gpu-node-" + std::to_string(i), i % 10 == 0 ? "pcie-4gpu" : "hgx-h100-8gpu");
  }
  InProcess h(ExtenderOptions{}, nullptr, nodes);
  const server::HttpResponse r = h.Call("POST", "/explain", MakePod(kTraining8).dump());
  ASSERT_EQ(r.status, 200);
  const json e = json::parse(r.body);
  EXPECT_EQ(e["nodesTotal"], 5000);
  EXPECT_EQ(e["nodesFit"], 4500);
  EXPECT_EQ(e["nodes"].size(), 500u);
  EXPECT_TRUE(e["truncated"]);
  EXPECT_EQ(e["summary"], "4500/5000 nodes fit: 500 nodes: fewer GPUs or RDMA NICs in all than the pod asks");
}

TEST(ExtenderNodes, FreeAndAllocatedDevicesStaleAndClassPerNode) {
  NoFitCluster c;
  const server::HttpResponse r = c.h.Call("GET", "/nodes", "");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  std::map<std::string, json> by_name;
  for (const json& n : j["nodes"]) by_name[n["name"]] = n;
  ASSERT_EQ(by_name.size(), 6u);
  EXPECT_EQ(by_name["hgx-a"]["gpus"],
            json({{"total", 8}, {"free", 6}, {"shared", 0}, {"unusable", 0}, {"allocated", 2}}));
  EXPECT_EQ(by_name["hgx-a"]["rdmaNics"]["free"], by_name["hgx-a"]["rdmaNics"]["total"].get<int>() - 2);
  EXPECT_EQ(by_name["hgx-a"]["pods"], 1);
  EXPECT_EQ(by_name["hgx-a"]["state"], "ok");
  EXPECT_EQ(by_name["hgx-b"]["state"], "cordoned");
  EXPECT_EQ(by_name["stale-c"]["state"], "stale");
  EXPECT_TRUE(by_name["stale-c"]["stale"]);
  EXPECT_EQ(j["total"]["staleTopologies"], 1);
  EXPECT_EQ(j["total"]["gpus"], 8 + 8 + 3 * 4);
  const server::HttpResponse text = c.h.Call("GET", "/nodes?format=text", "");
  EXPECT_EQ(text.body.rfind("NODE ", 0), 0u) << text.body;
  EXPECT_NE(text.body.find("stale-c  stale"), std::string::npos) << text.body;
  EXPECT_NE(text.body.find("1 stale topologies"), std::string::npos) << text.body;
}

}  // namespace
}  // namespace toposched::extender
