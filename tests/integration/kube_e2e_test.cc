// The Kubernetes integration end to end, against the fake API server on a real socket and the
// real cpprestsdk transport: the agent publishes real machine topologies; extender replicas
// sync, filter, score and bind streams of pods; the annotations and Bindings are checked
// exactly; and every fault of issue 5 (API server restart mid-watch, 410, 409, 5xx bursts, a
// failed Binding, the extender killed and restarted, the leader lost, a silent agent) is
// followed by the same two invariants: no device is held twice, and the extender's state
// equals what the API server says.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugins/registry.h"
#include "testing/fake_apiserver.h"
#include "testing/k8s_payloads.h"
#include "testing/k8s_schema.h"
#include "testing/shared_topologies.h"
#include "toposched/agent/discovery.h"
#include "toposched/extender/service.h"
#include "toposched/framework/framework.h"
#include "toposched/kube/agent.h"
#include "toposched/kube/api.h"
#include "toposched/kube/leader.h"
#include "toposched/kube/objects.h"
#include "toposched/kube/source.h"
#include "toposched/kube/transport.h"
#include "toposched/metrics/metrics.h"
#include "toposched/placement/device_rules.h"
#include "toposched/state/cluster_state.h"
#include "toposched/topology/synthetic.h"

namespace toposched {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::FakeApiServer;
using testing::Fault;

constexpr char kPods[] = "/api/v1/namespaces/default/pods";
constexpr char kNodes[] = "/api/v1/nodes";
constexpr char kTopologies[] = "/apis/toposched.io/v1alpha1/nodetopologies";

bool WaitFor(const std::function<bool()>& done, milliseconds timeout = milliseconds(10'000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return done();
}

kube::ApiOptions FastApi() {
  kube::ApiOptions o;
  o.request_timeout = milliseconds(5'000);
  o.backoff_base = milliseconds(10);
  o.backoff_max = milliseconds(100);
  o.max_attempts = 5;
  return o;
}

std::unique_ptr<kube::Transport> Connect(const FakeApiServer& server) {
  kube::ClientConfig config;
  config.server = server.url();
  Result<std::unique_ptr<kube::Transport>> t = kube::MakeRestTransport(config);
  EXPECT_TRUE(t.ok()) << t.error().message();
  return std::move(t).value();
}

// One extender replica: its own transport, store, metrics, source, service and (optionally)
// leader elector, wired as `toposched serve --kube` wires them.
struct Replica {
  Replica(const FakeApiServer& server, std::string identity, bool elect,
          kube::KubeSourceOptions source_options = {})
      : transport(Connect(server)),
        api(*transport, FastApi()),
        registry(plugins::BuiltinRegistry()),
        framework(framework::Framework::Create(plugins::DefaultSchedulerConfig(), registry).value()),
        store(nullptr, extender::StoreOptionsFor(framework.config())) {
    source_options.watch_timeout_seconds = 5;
    source_options.backoff_base = milliseconds(20);
    source_options.backoff_max = milliseconds(200);
    source_options.stale_check_interval = milliseconds(50);
    source_options.identity = identity;
    if (elect) {
      kube::LeaderOptions lease;
      lease.lease_namespace = "toposched-system";
      lease.identity = identity;
      lease.lease_duration = milliseconds(1'500);
      lease.renew_deadline = milliseconds(1'000);
      lease.retry_period = milliseconds(100);
      kube::ApiOptions lease_options = FastApi();
      lease_options.max_attempts = 1;  // as serve does: a renewal never outlives its deadline
      lease_options.request_timeout = milliseconds(250);
      lease_api = std::make_unique<kube::Api>(*transport, lease_options);
      elector = std::make_unique<kube::LeaderElector>(*lease_api, lease, [this](bool leading) {
        if (source) source->OnLeadership(leading);
      });
    }
    source = std::make_unique<kube::KubeSource>(api, store, metrics, source_options, elector.get());
    store.SetPersistence(source.get());
    service = std::make_unique<extender::ExtenderService>(framework, store, metrics,
                                                          extender::ExtenderOptions{}, nullptr, source.get());
    service->SetScrapeHook([this] { source->RefreshMetrics(); });
    source->Start();
    if (elector) elector_thread = std::jthread([this](std::stop_token stop) { elector->Run(stop); });
  }
  ~Replica() { Kill(); }

  // Stops like a process that exits: the elector gives the Lease up, informers stop.
  void Kill() {
    if (elector_thread.joinable()) {
      elector_thread.request_stop();
      elector_thread.join();
    }
    if (source) source->Stop();
  }

  std::pair<int, std::string> Call(const std::string& target, const std::string& body,
                                   const char* method = "POST") {
    server::HttpRequest req{method, target, "application/json", body, "test"};
    server::HttpResponse resp;
    service->Handle(req, resp);
    return {resp.status, resp.body};
  }
  bool Ready() { return Call("/readyz", "", "GET").first == 200; }

  std::unique_ptr<kube::Transport> transport;
  kube::Api api;
  std::unique_ptr<kube::Api> lease_api;
  framework::Registry registry;
  framework::Framework framework;
  metrics::Registry metrics;
  state::ClusterStore store;
  std::unique_ptr<kube::LeaderElector> elector;
  std::unique_ptr<kube::KubeSource> source;
  std::unique_ptr<extender::ExtenderService> service;
  std::jthread elector_thread;
};

// kube-scheduler's side: filter, prioritize, pick the best, bind. Returns the node, or the
// error the extender answered.
struct Scheduled {
  std::string node, error;
};
Scheduled Schedule(Replica& r, const json& pod, const std::vector<std::string>& nodes) {
  auto [fs, filter_body] = r.Call("/scheduler/filter", testing::ExtenderArgs(pod, nodes));
  if (fs != 200) return {"", "filter HTTP " + std::to_string(fs) + ": " + filter_body};
  const json filtered = json::parse(filter_body);
  if (!filtered["Error"].get<std::string>().empty()) return {"", filtered["Error"].get<std::string>()};
  std::vector<std::string> fits = filtered["NodeNames"].is_array()
                                      ? filtered["NodeNames"].get<std::vector<std::string>>()
                                      : std::vector<std::string>{};
  if (fits.empty()) return {"", "no node fits: " + filtered["FailedNodes"].dump()};
  std::string best = fits[0];
  if (fits.size() > 1) {
    auto [ps, prio_body] = r.Call("/scheduler/prioritize", testing::ExtenderArgs(pod, fits));
    EXPECT_EQ(ps, 200);
    std::int64_t top = -1;
    for (const json& h : json::parse(prio_body)) {
      if (h["Score"].get<std::int64_t>() > top) {
        top = h["Score"].get<std::int64_t>();
        best = h["Host"].get<std::string>();
      }
    }
  }
  const json bind = {{"PodName", pod["metadata"]["name"]},
                     {"PodNamespace", pod["metadata"]["namespace"]},
                     {"PodUID", pod["metadata"]["uid"]},
                     {"Node", best}};
  auto [bs, bind_body] = r.Call("/scheduler/bind", bind.dump());
  if (bs != 200) return {"", "bind HTTP " + std::to_string(bs)};
  const std::string error = json::parse(bind_body).value("Error", std::string());
  if (!error.empty()) return {"", error};
  return {best, ""};
}

json GpuPod(FakeApiServer& server, const std::string& name, int gpus, int rdma,
            std::map<std::string, std::string> extra = {}) {
  testing::PodSpec spec;
  spec.name = name;
  spec.gpus = gpus;
  spec.rdma = rdma;
  spec.extra_limits = std::move(extra);
  json pod = testing::MakePod(spec);
  pod["metadata"].erase("uid");
  pod["metadata"].erase("resourceVersion");
  return server.Create(kPods, pod);
}

// The API server's view: every active pod with our allocation annotation -> (node, devices).
struct ApiAllocation {
  std::string uid, node;
  std::vector<std::string> gpus,
      nics;  // GPUs by PCI bus id, NICs by name (ports share a bus id), else bus id
  bool shared = false;
};
std::vector<ApiAllocation> AllocationsInApi(const FakeApiServer& server) {
  std::vector<ApiAllocation> out;
  for (const json& pod : server.List(kPods)) {
    const std::string phase = pod.value("/status/phase"_json_pointer, std::string());
    if (phase == "Succeeded" || phase == "Failed") continue;
    const json annotations = pod.value("/metadata/annotations"_json_pointer, json::object());
    if (!annotations.contains(std::string(kube::kAllocationAnnotation))) continue;
    const json a = json::parse(annotations[std::string(kube::kAllocationAnnotation)].get<std::string>());
    ApiAllocation x;
    x.uid = pod["metadata"]["uid"];
    x.node = a["node"];
    for (const json& g : a["gpus"]) {
      x.gpus.push_back(g["pciBusId"]);
      x.shared = x.shared || g.contains("memoryMiB");
    }
    for (const json& n : a.value("nics", json::array())) {
      const std::string name = n.value("name", std::string());
      x.nics.push_back(name.empty() ? n.value("pciBusId", std::string())
                                    : name);  // a NIC known by address only
    }
    out.push_back(std::move(x));
  }
  return out;
}

// Invariant 1: no whole GPU or RDMA NIC is held by two live pods.
void ExpectNoDeviceHeldTwice(const FakeApiServer& server) {
  std::set<std::tuple<std::string, std::string>> taken;
  for (const ApiAllocation& a : AllocationsInApi(server)) {
    if (!a.shared) {
      for (const std::string& g : a.gpus) {
        EXPECT_TRUE(taken.insert({a.node, "gpu " + g}).second)
            << "GPU " << g << " on " << a.node << " held twice";
      }
    }
    for (const std::string& n : a.nics) {
      EXPECT_TRUE(taken.insert({a.node, "nic " + n}).second)
          << "NIC " << n << " on " << a.node << " held twice";
    }
  }
}

// Invariant 2: the replica's store holds exactly the allocations the API server records.
bool StoreMatchesApi(const Replica& r, const FakeApiServer& server, std::string* diff = nullptr) {
  const std::vector<ApiAllocation> api = AllocationsInApi(server);
  std::size_t devices = 0;
  for (const ApiAllocation& a : api) {
    std::optional<state::PodAllocation> held = r.store.FindPod(a.uid);
    if (!held || held->node != a.node) {
      if (diff) *diff = "pod " + a.uid + " on " + a.node + " is not in the store";
      return false;
    }
    ++devices;
  }
  std::size_t with_devices = 0;
  // Hold the snapshot: the replica's informers publish new ones while this runs.
  const std::shared_ptr<const state::Snapshot> snapshot = r.store.snapshot();
  for (const auto& record : snapshot->nodes()) with_devices += record->pods.size();
  if (with_devices != devices) {
    if (diff)
      *diff = std::to_string(with_devices) + " pods in the store, " + std::to_string(devices) + " in the API";
    return false;
  }
  return true;
}

class KubeE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::HaveSharedTopologies()) GTEST_SKIP() << "no " << testing::SharedTopologiesDir();
    server_.Start();
    admin_transport_ = Connect(server_);
    admin_ = std::make_unique<kube::Api>(*admin_transport_, FastApi());
  }

  // A node plus its agent's first publish of a real topology file.
  void AddNode(const std::string& name, const std::string& topology_file,
               std::map<std::string, std::string> annotations = {}) {
    json node = testing::MakeNode(name);
    node["metadata"].erase("uid");
    if (!annotations.empty()) node["metadata"]["annotations"] = annotations;
    server_.Create(kNodes, node);
    Result<kube::PublishOutcome> published = Publish(name, topology_file);
    ASSERT_TRUE(published.ok()) << published.error().message();
  }
  Result<kube::PublishOutcome> Publish(
      const std::string& name, const std::string& topology_file,
      std::chrono::system_clock::time_point now = std::chrono::system_clock::now()) {
    kube::AgentOptions options;
    options.node_name = name;
    options.now = [now] { return now; };
    const std::string path = testing::SharedTopology(topology_file).string();
    kube::AgentPublisher agent(*admin_, options, [path] { return LoadTopologyFile(path); });
    return agent.PublishOnce();
  }

  FakeApiServer server_;
  std::unique_ptr<kube::Transport> admin_transport_;
  std::unique_ptr<kube::Api> admin_;
};

constexpr char kAzureA100[] = "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml";
constexpr char kNebiusH100[] = "nebius__h100-vm_8xH100_8xCX7-VF.nccl.xml";
constexpr char kDgx2[] = "hwloc__nvidia-dgx2h_16xV100_12xNVSwitch.hwloc2.xml";
constexpr char kCpuOnly[] = "local__ci-sandbox_cpu-only.hwloc2.xml";
// Bare-metal 8x H100 whose ConnectX-7 cards expose two RDMA ports per PCI function (mlx5_18 and
// mlx5_19 share one bus id): issue 13's shape.
constexpr char kOciH100[] = "oci__bm.gpu.h100.8_kubernetes-variant.nccl.xml";

// ---------------------------------------------------------------------------------------------
// The agent.

TEST_F(KubeE2E, AgentPublishesRealTopologiesAndWritesOnlyChanges) {
  for (const char* file : {kAzureA100, kNebiusH100, kDgx2, kCpuOnly}) {
    SCOPED_TRACE(file);
    const std::string name = std::string("node-") + std::to_string(std::hash<std::string>{}(file) % 1000);
    json node = testing::MakeNode(name);
    node["metadata"]["labels"]["team"] = "infra";  // not ours: must survive
    server_.Create(kNodes, node);
    const auto t0 = std::chrono::system_clock::now();
    Result<kube::PublishOutcome> first = Publish(name, file, t0);
    ASSERT_TRUE(first.ok()) << first.error().message();
    EXPECT_EQ(*first, kube::PublishOutcome::kCreated);

    const std::optional<json> object = server_.Get(kTopologies, name);
    ASSERT_TRUE(object.has_value());
    Result<kube::NodeTopologyView> view = kube::ReadNodeTopology(*object);
    ASSERT_TRUE(view.ok()) << view.error().message();
    ASSERT_NE(view->topology, nullptr);
    Result<NodeTopology> expected = LoadTopologyFile(testing::SharedTopology(file).string());
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(view->topology->Fingerprint(), expected->Fingerprint());
    EXPECT_EQ((*object)["status"]["summary"]["gpus"], expected->gpus.size());  // 0 on the CPU-only node
    EXPECT_EQ(view->generation, 1);
    EXPECT_EQ((*object)["metadata"]["ownerReferences"][0]["kind"], "Node");

    const json labels = (*server_.Get(kNodes, name))["metadata"]["labels"];
    EXPECT_EQ(labels["team"], "infra");
    EXPECT_EQ(labels["toposched.io/gpu-count"], std::to_string(expected->gpus.size()));
    EXPECT_TRUE(labels.contains("toposched.io/topology-class"));

    // Re-discovery of the same machine writes nothing; past the heartbeat only the heartbeat.
    const std::uint64_t rv = server_.resource_version();
    Result<kube::PublishOutcome> again = Publish(name, file, t0 + std::chrono::seconds(60));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, kube::PublishOutcome::kUnchanged);
    EXPECT_EQ(server_.resource_version(), rv);
    Result<kube::PublishOutcome> beat = Publish(name, file, t0 + std::chrono::minutes(6));
    ASSERT_TRUE(beat.ok());
    EXPECT_EQ(*beat, kube::PublishOutcome::kHeartbeat);
    EXPECT_EQ((*server_.Get(kTopologies, name))["status"]["generation"], 1);
  }
  // New hardware on the same node: generation 2, new class label.
  const std::string name = std::string("node-") + std::to_string(std::hash<std::string>{}(kAzureA100) % 1000);
  Result<kube::PublishOutcome> changed = Publish(name, kNebiusH100);
  ASSERT_TRUE(changed.ok()) << changed.error().message();
  EXPECT_EQ(*changed, kube::PublishOutcome::kUpdated);
  const json object = *server_.Get(kTopologies, name);
  EXPECT_EQ(object["status"]["generation"], 2);
  EXPECT_EQ(object["metadata"]["labels"]["toposched.io/topology-class"],
            (*server_.Get(kNodes, name))["metadata"]["labels"]["toposched.io/topology-class"]);
}

TEST_F(KubeE2E, AgentForAnUnknownNodeSaysWhatToSet) {
  Result<kube::PublishOutcome> r = Publish("no-such-node", kAzureA100);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("NODE_NAME"), std::string::npos) << r.error().message();
}

// ---------------------------------------------------------------------------------------------
// Sync, filter, score, bind.

TEST_F(KubeE2E, ExtenderSyncsThenBindsAStreamOfPodsWithExactAnnotations) {
  AddNode("a100-0", kAzureA100);
  AddNode("a100-1", kAzureA100);
  AddNode("h100-0", kNebiusH100);
  AddNode("cpu-0", kCpuOnly);
  Replica r(server_, "replica-0", /*elect=*/false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); })) << r.Call("/readyz", "", "GET").second;
  EXPECT_EQ(r.store.snapshot()->size(), 4u);

  const std::vector<std::string> nodes = {"a100-0", "a100-1", "h100-0", "cpu-0"};
  // 24 GPUs in all; the stream asks 2+4+1+1+2+4+2+1+1+2 = 20 GPUs, each with as many NICs.
  const int sizes[] = {2, 4, 1, 1, 2, 4, 2, 1, 1, 2};
  std::map<std::string, std::string> placed;  // uid -> node
  for (int i = 0; i < 10; ++i) {
    const json pod = GpuPod(server_, "llm-" + std::to_string(i), sizes[i], sizes[i]);
    const Scheduled s = Schedule(r, pod, nodes);
    ASSERT_TRUE(s.error.empty()) << "pod " << i << ": " << s.error;
    EXPECT_NE(s.node, "cpu-0");
    placed[pod["metadata"]["uid"]] = s.node;

    const json stored = *server_.Get(kPods, "llm-" + std::to_string(i));
    EXPECT_EQ(stored["spec"]["nodeName"], s.node) << "the Binding was created";
    const json& ann = stored["metadata"]["annotations"];
    const json allocation = json::parse(ann["toposched.io/allocation"].get<std::string>());
    EXPECT_EQ(allocation["version"], 1);
    EXPECT_EQ(allocation["node"], s.node);
    EXPECT_EQ(allocation["policy"], "toposched");
    ASSERT_EQ(allocation["gpus"].size(), static_cast<std::size_t>(sizes[i]));
    ASSERT_EQ(allocation["nics"].size(), static_cast<std::size_t>(sizes[i]));
    // visible-gpus: host indices (these NCCL files carry no UUIDs), in allocation order.
    std::string indices, hca = "=";
    for (const json& g : allocation["gpus"])
      indices += (indices.empty() ? "" : ",") + std::to_string(g["index"].get<int>());
    for (const json& n : allocation["nics"]) {
      const std::string nic = n.value("name", "");
      if (!nic.empty()) hca += (hca == "=" ? "" : ",") + nic;
    }
    EXPECT_EQ(ann["toposched.io/visible-gpus"], indices);
    // NCCL_IB_HCA's exact-match form over the NICs' names; the Azure export lists its HCAs
    // only as PCI devices (no <net> names), so there it is empty: nothing NCCL could match.
    EXPECT_EQ(ann["toposched.io/nccl-ib-hca"], hca == "=" ? "" : hca);
    if (s.node == "h100-0") {
      EXPECT_NE(hca, "=") << "the Nebius export names its HCAs (mlx5_*)";
    }
    EXPECT_TRUE(ann.contains("toposched.io/bind-time"));
    // The link class written is the one the placement chose.
    const std::optional<state::PodAllocation> held =
        r.store.FindPod(pod["metadata"]["uid"].get<std::string>());
    ASSERT_TRUE(held.has_value());
    EXPECT_EQ(allocation["links"]["worstGpuNic"], std::string(ToString(held->worst_class)))
        << allocation.dump();
    // HAMi names devices by UUID only; these NCCL exports have none (and no HAMi registration
    // supplies them), so no HAMi annotation is written: HAMi's device plugin is not on these
    // nodes. HamiRegisterSharedGpusAndHamiPlacedPodsRoundTrip covers the HAMi nodes.
    EXPECT_FALSE(ann.contains("hami.io/vgpu-devices-to-allocate"));
    EXPECT_FALSE(ann.contains("hami.io/bind-phase"));
  }
  ExpectNoDeviceHeldTwice(server_);
  std::string diff;
  EXPECT_TRUE(WaitFor([&] { return StoreMatchesApi(r, server_, &diff); })) << diff;

  // A pod that finishes gives its devices back (the informer sees the phase).
  const std::string first_uid = (*server_.Get(kPods, "llm-1"))["metadata"]["uid"];
  json done = *server_.Get(kPods, "llm-1");
  done["status"]["phase"] = "Succeeded";
  server_.Upsert(kPods, done);
  EXPECT_TRUE(WaitFor([&] { return !r.store.FindPod(first_uid).has_value(); }));
  // A deleted pod too.
  const std::string second_uid = (*server_.Get(kPods, "llm-0"))["metadata"]["uid"];
  server_.Delete(kPods, "llm-0");
  EXPECT_TRUE(WaitFor([&] { return !r.store.FindPod(second_uid).has_value(); }));
}

TEST_F(KubeE2E, ReadyAfterBindIsMeasuredAndReported) {
  AddNode("a100-0", kAzureA100);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const json pod = GpuPod(server_, "serve-0", 1, 1);
  ASSERT_TRUE(Schedule(r, pod, {"a100-0"}).error.empty());
  ASSERT_TRUE(
      WaitFor([&] { return r.store.FindPod(pod["metadata"]["uid"].get<std::string>()).has_value(); }));
  ASSERT_TRUE(WaitFor([&] {  // the informer has seen the bound pod
    return r.Call("/metrics", "", "GET")
               .second.find("toposched_kube_informer_events_total{resource=\"pods\"}") != std::string::npos;
  }));
  std::this_thread::sleep_for(milliseconds(200));
  json ready = *server_.Get(kPods, "serve-0");
  ready["status"]["phase"] = "Running";
  ready["status"]["conditions"] = {
      {{"type", "Ready"},
       {"status", "True"},
       {"lastTransitionTime", kube::FormatTime(std::chrono::system_clock::now() + std::chrono::seconds(3))}}};
  server_.Upsert(kPods, ready);
  ASSERT_TRUE(WaitFor([&] {
    return r.Call("/metrics", "", "GET").second.find("toposched_bind_to_ready_seconds_count 1") !=
           std::string::npos;
  })) << r.Call("/metrics", "", "GET").second;
  // The bind's own event says what the pod got; ReadyAfterBind follows it.
  ASSERT_TRUE(WaitFor([&] {
    for (const json& e : server_.List("/api/v1/namespaces/default/events")) {
      if (e["reason"] == "ReadyAfterBind") return true;
    }
    return false;
  }));
  std::map<std::string, json> by_reason;
  for (const json& e : server_.List("/api/v1/namespaces/default/events")) by_reason[e["reason"]] = e;
  const json event = by_reason["ReadyAfterBind"];
  EXPECT_EQ(event["involvedObject"]["name"], "serve-0");
  EXPECT_NE(event["message"].get<std::string>().find("after toposched bound it to node a100-0"),
            std::string::npos);
  ASSERT_TRUE(by_reason.contains("DevicesAllocated"));
  const std::string devices = by_reason["DevicesAllocated"]["message"];
  EXPECT_EQ(by_reason["DevicesAllocated"]["type"], "Normal");
  EXPECT_EQ(devices.rfind("Bound to node a100-0: GPUs ", 0), 0u) << devices;
  EXPECT_NE(devices.find("; RDMA NICs "), std::string::npos) << devices;
  EXPECT_NE(devices.find("; worst GPU->NIC link "), std::string::npos) << devices;
}

// --pod-events warnings: no Normal event per pod (DevicesAllocated, ReadyAfterBind), the metric
// still measures; a Warning still reaches the pod.
TEST_F(KubeE2E, WarningsOnlyWritesNoNormalEventPerPod) {
  AddNode("a100-0", kAzureA100);
  kube::KubeSourceOptions options;
  options.normal_events = false;
  Replica r(server_, "replica-0", false, options);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const json pod = GpuPod(server_, "quiet-0", 1, 1);
  ASSERT_TRUE(Schedule(r, pod, {"a100-0"}).error.empty());
  ASSERT_TRUE(WaitFor([&] {
    return r.Call("/metrics", "", "GET")
               .second.find("toposched_kube_informer_events_total{resource=\"pods\"}") != std::string::npos;
  }));
  std::this_thread::sleep_for(milliseconds(200));
  json ready = *server_.Get(kPods, "quiet-0");
  ready["status"]["phase"] = "Running";
  ready["status"]["conditions"] = {
      {{"type", "Ready"},
       {"status", "True"},
       {"lastTransitionTime", kube::FormatTime(std::chrono::system_clock::now())}}};
  server_.Upsert(kPods, ready);
  ASSERT_TRUE(WaitFor([&] {
    return r.Call("/metrics", "", "GET").second.find("toposched_bind_to_ready_seconds_count 1") !=
           std::string::npos;
  }));
  // A pod no node fits gets its Warning, written by the same loop that would write the others.
  const json big = GpuPod(server_, "too-big", 16, 0);
  EXPECT_FALSE(Schedule(r, big, {"a100-0"}).error.empty());
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& e : server_.List("/api/v1/namespaces/default/events")) {
          if (e["reason"] == "FailedScheduling") return true;
        }
        return false;
      },
      milliseconds(30'000)));
  for (const json& e : server_.List("/api/v1/namespaces/default/events")) {
    EXPECT_EQ(e["type"], "Warning") << e.dump();
  }
}

// Issue 17: a filter that leaves a pod no node gives it one FailedScheduling Warning counting
// the nodes by reason; a retry with the same reasons raises that Event's count (a PATCH) rather
// than adding another. And GET /explain?pod= reads the pod from the API server.
TEST_F(KubeE2E, NoNodeFitsIsOneFailedSchedulingEventWhoseCountRises) {
  AddNode("a100-0", kAzureA100);
  AddNode("a100-1", kAzureA100);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const json pod = GpuPod(server_, "too-many-nics", 1, 0);
  json annotated = pod;
  annotated["metadata"]["annotations"]["toposched.io/rdma-nics"] = "24";  // A100 v4: 8 NICs
  for (int attempt = 0; attempt < 2; ++attempt) {
    const Scheduled s = Schedule(r, annotated, {"a100-0", "a100-1", "ghost"});
    ASSERT_NE(s.error.find("no node fits"), std::string::npos) << s.error;
    if (attempt == 0) {
      ASSERT_TRUE(WaitFor([&] { return !server_.List("/api/v1/namespaces/default/events").empty(); }));
    }
  }
  const auto failed = [&] {
    std::vector<json> out;
    for (const json& e : server_.List("/api/v1/namespaces/default/events")) {
      if (e["reason"] == "FailedScheduling") out.push_back(e);
    }
    return out;
  };
  ASSERT_TRUE(WaitFor([&] { return failed().size() == 1 && failed()[0]["count"] == 2; }))
      << json(server_.List("/api/v1/namespaces/default/events")).dump();
  const json e = failed()[0];
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["involvedObject"]["name"], "too-many-nics");
  EXPECT_EQ(e["involvedObject"]["uid"], pod["metadata"]["uid"]);
  EXPECT_EQ(e["source"]["component"], "toposched-extender");
  EXPECT_EQ(e["message"],
            "0/3 nodes fit: 2 nodes: fewer GPUs or RDMA NICs in all than the pod asks; 1 node: no "
            "NodeTopology (is the toposched agent running there?)");
  EXPECT_NE(e["firstTimestamp"], nullptr);
  // The flush counts the patch after the API server has it: wait for the counter too.
  EXPECT_TRUE(WaitFor([&] {
    return r.Call("/metrics", "", "GET")
               .second.find("toposched_pod_events_total{reason=\"FailedScheduling\",result=\"patched\"} 1") !=
           std::string::npos;
  }));

  // The live explanation of the same pod, read by name from the API server.
  server_.Upsert(kPods, annotated);
  auto [status, body] = r.Call("/explain?pod=default/too-many-nics", "", "GET");
  ASSERT_EQ(status, 200) << body;
  const json explained = json::parse(body);
  EXPECT_EQ(explained["nodesFit"], 0);
  EXPECT_EQ(explained["summary"], "0/2 nodes fit: 2 nodes: fewer GPUs or RDMA NICs in all than the pod asks");
  EXPECT_EQ(r.Call("/explain?pod=default/nope", "", "GET").first, 404);
}

// Volcano's own vGPU (deviceshare with HAMi's vGPU on) records what it gave a pod in HAMi's
// format under volcano.sh/vgpu-ids-new: those GPUs are taken, never handed out again.
TEST_F(KubeE2E, VolcanoVgpuPodsHoldTheirGpus) {
  json reg = json::array();  // HAMi's registration gives the node's GPUs their UUIDs here
  for (int i = 0; i < 8; ++i) {
    json d = {
        {"id", "GPU-a100-" + std::to_string(i)},  {"count", 10},         {"devmem", 81920}, {"devcore", 100},
        {"type", "NVIDIA-NVIDIA A100-SXM4-80GB"}, {"mode", "hami-core"}, {"health", true},  {"index", i}};
    reg.push_back(d);
  }
  AddNode("a100-0", kAzureA100, {{std::string(kube::kHamiNodeRegister), reg.dump()}});
  // Allocated by Volcano's session, not yet bound: the node comes from volcano.sh/vgpu-node.
  json vc_pod = testing::MakePod({.name = "volcano-vgpu", .gpus = 0});
  vc_pod["metadata"].erase("uid");
  vc_pod["metadata"]["annotations"] = {
      {"volcano.sh/vgpu-node", "a100-0"},
      {"volcano.sh/vgpu-ids-new", "GPU-a100-5,NVIDIA,81920,100:GPU-a100-6,NVIDIA,20000,30:;"}};
  vc_pod = server_.Create(kPods, vc_pod);

  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const std::optional<state::PodAllocation> held =
      r.store.FindPod(vc_pod["metadata"]["uid"].get<std::string>());
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->node, "a100-0");
  EXPECT_TRUE(held->hold.empty()) << held->hold;
  ASSERT_EQ(held->delta.exclusive_gpus, std::vector<int>{5});
  ASSERT_EQ(held->delta.shares.size(), 1u);
  EXPECT_EQ(held->delta.shares[0].first, 6);

  // Whole GPUs 0-4 and 7 are free (6 is shared): six fit, then none.
  EXPECT_TRUE(Schedule(r, GpuPod(server_, "six", 6, 0), {"a100-0"}).error.empty());
  EXPECT_FALSE(Schedule(r, GpuPod(server_, "one-more", 1, 0), {"a100-0"}).error.empty());
}

// HAMi's device plugin reads what we write; HAMi's scheduler's pods are read back as usage.
TEST_F(KubeE2E, HamiRegisterSharedGpusAndHamiPlacedPodsRoundTrip) {
  // v2.8+ JSON registration (omitempty: index 0 and numa 0 absent) for 8 GPUs with UUIDs.
  json reg = json::array();
  for (int i = 0; i < 8; ++i) {
    json d = {
        {"id", "GPU-a100-" + std::to_string(i)},  {"count", 10},         {"devmem", 81920}, {"devcore", 100},
        {"type", "NVIDIA-NVIDIA A100-SXM4-80GB"}, {"mode", "hami-core"}, {"health", true}};
    if (i > 0) d["index"] = i;
    if (i >= 4) d["numa"] = 1;
    reg.push_back(d);
  }
  AddNode("a100-0", kAzureA100, {{std::string(kube::kHamiNodeRegister), reg.dump()}});
  // A pod HAMi's own scheduler placed earlier: whole GPU 0 and 30 % of GPU 1, running.
  json hami_pod = testing::MakePod({.name = "hami-placed", .gpus = 1});
  hami_pod["metadata"].erase("uid");
  hami_pod["metadata"]["annotations"] = {
      {"hami.io/vgpu-node", "a100-0"},
      {"hami.io/vgpu-devices-allocated", "GPU-a100-0,NVIDIA,81920,100:GPU-a100-1,NVIDIA,20000,30:;"}};
  hami_pod["spec"]["nodeName"] = "a100-0";
  hami_pod["status"]["phase"] = "Running";
  hami_pod = server_.Create(kPods, hami_pod);

  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  ASSERT_TRUE(r.store.FindPod(hami_pod["metadata"]["uid"].get<std::string>()).has_value());
  const state::NodeRecord* record = r.store.snapshot()->Find("a100-0");
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->topology->gpus[3].uuid, "GPU-a100-3") << "UUIDs come from HAMi's registration";

  // A shared request: 1 vGPU with 8000 MiB and 30 % of the SMs.
  const json pod =
      GpuPod(server_, "small-model", 1, 0, {{"nvidia.com/gpumem", "8000"}, {"nvidia.com/gpucores", "30"}});
  const Scheduled s = Schedule(r, pod, {"a100-0"});
  ASSERT_TRUE(s.error.empty()) << s.error;
  const json ann = (*server_.Get(kPods, "small-model"))["metadata"]["annotations"];
  const std::string encoded = ann["hami.io/vgpu-devices-to-allocate"];
  // Exactly HAMi's encoding: one container, one device "UUID,NVIDIA,memMiB,cores:" then ";".
  Result<kube::HamiPodDevices> devices = kube::DecodeHamiDevices(encoded);
  ASSERT_TRUE(devices.ok()) << encoded;
  ASSERT_EQ(devices->size(), 1u);
  ASSERT_EQ((*devices)[0].size(), 1u);
  const kube::HamiDevice& d = (*devices)[0][0];
  EXPECT_EQ(encoded, d.uuid + ",NVIDIA,8000,30:;");
  EXPECT_NE(d.uuid, "GPU-a100-0") << "GPU 0 is HAMi's pod's, whole";
  EXPECT_EQ(ann["toposched.io/visible-gpus"], d.uuid) << "UUIDs known: visible-gpus lists UUIDs";
  EXPECT_EQ(ann["hami.io/vgpu-node"], "a100-0");
  EXPECT_EQ(ann["hami.io/bind-phase"], "allocating");
  EXPECT_TRUE(ann.contains("hami.io/bind-time"));
  EXPECT_TRUE(ann.contains("hami.io/vgpu-time"));
  EXPECT_EQ(ann["hami.io/vgpu-devices-allocated"], encoded);

  // The bind took HAMi's node lock (a HAMi node, by default); HAMi's device plugin releases it
  // when it allocates the pod's devices, as here.
  json node = *server_.Get(kNodes, "a100-0");
  ASSERT_TRUE(node["metadata"]["annotations"].contains("hami.io/mutex.lock"));
  node["metadata"]["annotations"].erase("hami.io/mutex.lock");
  server_.Upsert(kNodes, node);

  // Whole GPUs on a HAMi node: the card's whole memory (from the registration) and 100 cores.
  const json whole = GpuPod(server_, "whole", 2, 0);
  ASSERT_TRUE(Schedule(r, whole, {"a100-0"}).error.empty());
  const std::string whole_encoded =
      (*server_.Get(kPods, "whole"))["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"];
  Result<kube::HamiPodDevices> whole_devices = kube::DecodeHamiDevices(whole_encoded);
  ASSERT_TRUE(whole_devices.ok()) << whole_encoded;
  ASSERT_EQ(whole_devices->size(), 1u);
  ASSERT_EQ((*whole_devices)[0].size(), 2u);
  for (const kube::HamiDevice& g : (*whole_devices)[0]) {
    EXPECT_EQ(g.used_cores, 100);
    EXPECT_EQ(g.used_mem_mib, 81920);
    EXPECT_NE(g.uuid, "GPU-a100-0");
    EXPECT_NE(g.uuid, d.uuid);
  }
}

json HamiRegistration(const std::string& prefix) {
  json reg = json::array();
  for (int i = 0; i < 8; ++i) {
    reg.push_back({{"id", prefix + std::to_string(i)},
                   {"index", i},
                   {"count", 10},
                   {"devmem", 81920},
                   {"devcore", 100},
                   {"type", "NVIDIA-NVIDIA A100-SXM4-80GB"},
                   {"mode", "hami-core"},
                   {"health", true}});
  }
  return reg;
}

bool NodeLocked(const FakeApiServer& server, const std::string& node) {
  const json n = *server.Get(kNodes, node);
  return n["metadata"].contains("annotations") && n["metadata"]["annotations"].contains("hami.io/mutex.lock");
}

// Issue 15 (5): by default (auto) the lock is taken only where HAMi's device plugin registered
// the node, and only for binds that hand it NVIDIA GPUs by UUID: never for NIC-only pods, nor on
// nodes without HAMi, where nobody would release it for 5 minutes.
TEST_F(KubeE2E, HamiNodeLockOnlyForPodsHamisDevicePluginServes) {
  AddNode("hami-0", kAzureA100, {{std::string(kube::kHamiNodeRegister), HamiRegistration("GPU-h0-").dump()}});
  AddNode("plain-0", kAzureA100);
  Replica r(server_, "replica-0", false);  // --hami-node-lock auto
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  ASSERT_EQ(Schedule(r, GpuPod(server_, "nics-only", 0, 2), {"hami-0"}).node, "hami-0");
  EXPECT_FALSE(NodeLocked(server_, "hami-0")) << "a NIC-only pod: HAMi's device plugin serves nothing";
  ASSERT_EQ(Schedule(r, GpuPod(server_, "no-hami", 1, 0), {"plain-0"}).node, "plain-0");
  EXPECT_FALSE(NodeLocked(server_, "plain-0")) << "no HAMi registration, no UUIDs: nobody would unlock";
  ASSERT_EQ(Schedule(r, GpuPod(server_, "gpu", 1, 0), {"hami-0"}).node, "hami-0");
  EXPECT_TRUE(NodeLocked(server_, "hami-0"));
}

// HAMi's scheduler writes a pod's devices when it filters, before its bind, and writes them
// again, other cards on the same node, when it filters the pod again (its bind failed, e.g. on
// the node lock a toposched bind holds). toposched follows each change: the card HAMi left is
// free again, the one it took is not (found by e2e TestHAMiBesideToposched: the first card was
// kept, the second counted free and given whole to a toposched pod).
TEST_F(KubeE2E, HamisRefilteredDevicesReplaceItsFirstChoice) {
  AddNode("a100-0", kAzureA100, {{std::string(kube::kHamiNodeRegister), HamiRegistration("GPU-a-").dump()}});
  json pod = testing::MakePod({.name = "hami-share", .gpus = 1});
  pod["metadata"].erase("uid");
  pod["metadata"]["annotations"] = {{"hami.io/vgpu-node", "a100-0"},
                                    {"hami.io/vgpu-devices-to-allocate", "GPU-a-1,NVIDIA,4000,20:;"},
                                    {"hami.io/vgpu-devices-allocated", "GPU-a-1,NVIDIA,4000,20:;"}};
  pod = server_.Create(kPods, pod);
  const std::string uid = pod["metadata"]["uid"];
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const auto shared_gpu = [&]() -> int {
    const std::optional<state::PodAllocation> a = r.store.FindPod(uid);
    if (!a || !a->hold.empty() || a->delta.shares.size() != 1) return -1;
    return a->delta.shares[0].first;
  };
  const auto uuid_of = [&](int g) { return r.store.snapshot()->Find("a100-0")->topology->gpus.at(g).uuid; };
  ASSERT_TRUE(WaitFor([&] { return shared_gpu() >= 0; }));
  EXPECT_EQ(uuid_of(shared_gpu()), "GPU-a-1");

  // HAMi filters it again: GPU-a-2 instead (the informer's update of the pending pod).
  json moved = *server_.Get(kPods, "hami-share");
  moved["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"] = "GPU-a-2,NVIDIA,4000,20:;";
  moved["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "GPU-a-2,NVIDIA,4000,20:;";
  server_.Upsert(kPods, moved);
  ASSERT_TRUE(WaitFor([&] { return shared_gpu() >= 0 && uuid_of(shared_gpu()) == "GPU-a-2"; }));
  const state::NodeRecord* record = r.store.snapshot()->Find("a100-0");
  int busy = 0;
  for (std::size_t g = 0; g < record->topology->gpus.size(); ++g) {
    if (!GpuFree(record->allocated, static_cast<int>(g))) {
      ++busy;
      EXPECT_EQ(record->topology->gpus[g].uuid, "GPU-a-2");
    }
  }
  EXPECT_EQ(busy, 1) << "GPU-a-1, which HAMi left, is free again";

  // A toposched pod asking all 8 cards whole does not fit: GPU-a-2 is HAMi's.
  const Scheduled s = Schedule(r, GpuPod(server_, "eight", 8, 0), {"a100-0"});
  EXPECT_FALSE(s.error.empty());
  ExpectNoDeviceHeldTwice(server_);
}

TEST_F(KubeE2E, HamiNodeLockIsTakenAndHonoured) {
  AddNode("a100-0", kAzureA100, {{std::string(kube::kHamiNodeRegister), HamiRegistration("GPU-a-").dump()}});
  kube::KubeSourceOptions options;
  options.hami_node_lock = kube::HamiNodeLockMode::kOn;
  Replica r(server_, "replica-0", false, options);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const json first = GpuPod(server_, "first", 1, 0);
  ASSERT_TRUE(Schedule(r, first, {"a100-0"}).error.empty());
  const json node = *server_.Get(kNodes, "a100-0");
  Result<kube::HamiNodeLock> lock =
      kube::DecodeHamiNodeLock(node["metadata"]["annotations"]["hami.io/mutex.lock"].get<std::string>());
  ASSERT_TRUE(lock.ok());
  EXPECT_EQ(lock->pod_name, "first");
  // Until HAMi's device plugin releases it, another bind on the node is refused, undone.
  const json second = GpuPod(server_, "second", 1, 0);
  const Scheduled s = Schedule(r, second, {"a100-0"});
  EXPECT_NE(s.error.find("locked"), std::string::npos) << s.error;
  EXPECT_FALSE(r.store.FindPod(second["metadata"]["uid"].get<std::string>()).has_value());
  EXPECT_FALSE(
      (*server_.Get(kPods, "second"))["metadata"].contains("annotations") &&
      (*server_.Get(kPods, "second"))["metadata"]["annotations"].contains("toposched.io/allocation"));
  // The device plugin releases the lock (what Allocate does): the next bind goes through,
  // even when the first write of the lock meets a conflict (409 -> re-read, retry).
  json released = *server_.Get(kNodes, "a100-0");
  released["metadata"]["annotations"].erase("hami.io/mutex.lock");
  server_.Upsert(kNodes, released);
  server_.InjectFault({.method = "PUT", .path_prefix = "/api/v1/nodes/a100-0", .times = 1, .status = 409});
  const Scheduled again = Schedule(r, second, {"a100-0"});
  EXPECT_TRUE(again.error.empty()) << again.error;
  ExpectNoDeviceHeldTwice(server_);
}

// A leader killed between taking HAMi's node lock and the Binding leaves the lock behind; the
// pod is scheduled again and bound elsewhere, so HAMi's device plugin on the locked node never
// allocates for it and never releases the lock (found by e2e TestKubeScheduler: two pods waited
// for the 5-minute expiry). A lock whose pod is bound to another node, or no longer exists (as
// HAMi's own LockNode rules), is taken over; one whose pod is still unbound is honoured.
TEST_F(KubeE2E, HamiNodeLockOfAPodBoundElsewhereOrGoneIsTakenOver) {
  AddNode("a100-0", kAzureA100, {{std::string(kube::kHamiNodeRegister), HamiRegistration("GPU-a-").dump()}});
  AddNode("a100-1", kAzureA100, {{std::string(kube::kHamiNodeRegister), HamiRegistration("GPU-b-").dump()}});
  kube::KubeSourceOptions options;
  options.hami_node_lock = kube::HamiNodeLockMode::kOn;
  Replica r(server_, "replica-0", false, options);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const auto lock_on = [&](const std::string& node, const std::string& pod) {
    json n = *server_.Get(kNodes, node);
    n["metadata"]["annotations"]["hami.io/mutex.lock"] =
        kube::EncodeHamiNodeLock({std::chrono::system_clock::now(), "default", pod});
    server_.Upsert(kNodes, n);
  };
  const auto lock_holder = [&](const std::string& node) {
    const json n = *server_.Get(kNodes, node);
    Result<kube::HamiNodeLock> lock =
        kube::DecodeHamiNodeLock(n["metadata"]["annotations"]["hami.io/mutex.lock"].get<std::string>());
    return lock.ok() ? lock->pod_name : std::string("?");
  };
  // Still unbound: honoured.
  const json pending = GpuPod(server_, "pending", 1, 0);
  lock_on("a100-0", "pending");
  const json first = GpuPod(server_, "first", 1, 0);
  const Scheduled refused = Schedule(r, first, {"a100-0"});
  EXPECT_NE(refused.error.find("locked"), std::string::npos) << refused.error;
  // Bound to another node since: taken over.
  json moved = *server_.Get(kPods, "pending");
  moved["spec"]["nodeName"] = "a100-1";
  server_.Upsert(kPods, moved);
  const Scheduled taken = Schedule(r, first, {"a100-0"});
  EXPECT_TRUE(taken.error.empty()) << taken.error;
  EXPECT_EQ(lock_holder("a100-0"), "first");
  // Gone: taken over.
  lock_on("a100-1", "deleted-long-ago");
  const json second = GpuPod(server_, "second", 1, 0);
  const Scheduled on_b = Schedule(r, second, {"a100-1"});
  EXPECT_TRUE(on_b.error.empty()) << on_b.error;
  EXPECT_EQ(lock_holder("a100-1"), "second");
  ExpectNoDeviceHeldTwice(server_);
}

// HAMi's AMD device plugin's registration (hami.io/node-amd-register), as its
// RegisterInAnnotation writes it (Project-HAMi/amd-device-plugin internal/pkg/plugin/plugin.go
// @0121aa5d): "index" is the DRM card minor, not PCI order; the PCI address is in
// custominfo.pciBDF; devmem in MiB, devcore the card's compute-unit count.
json AmdRegistration(const NodeTopology& t, const std::string& prefix, int unhealthy = -1) {
  json reg = json::array();
  for (const Gpu& g : t.gpus) {
    json d = {{"id", prefix + std::to_string(g.index)},
              {"index", g.index + 1},
              {"count", 10},
              {"devmem", 196288},
              {"devcore", 304},
              {"type", "AMD Instinct MI300X"},
              {"devicevendor", "amd"},
              {"custominfo", {{"pciBDF", g.pci_bus_id}, {"computeQueues", 24}}}};
    if (g.index != unhealthy) d["health"] = true;  // omitempty: false is absent
    reg.push_back(d);
  }
  return reg;
}

constexpr char kMi300x[] = "rccl__mi300x_8xgfx942_8xCX7_baremetal.nccl.xml";

// Issue 15 (7): AMD GPUs on a node HAMi's AMD device plugin serves get HAMi's AMD records, in
// the bytes HAMi's scheduler writes (pkg/device/amd/device.go PatchAnnotations: the same list
// under hami.io/amd-devices-to-allocate and -allocated; a whole card is its registered devmem
// and devcore), never NVIDIA's keys; the bind takes HAMi's node lock, which the AMD device
// plugin releases; a card the registration reports unhealthy is never placed on.
TEST_F(KubeE2E, AmdGpusGetHamisAmdRecordsAndTheNodeLock) {
  const Result<NodeTopology> mi300x = LoadTopologyFile(testing::SharedTopology(kMi300x).string());
  ASSERT_TRUE(mi300x.ok()) << mi300x.error().message();
  AddNode("mi300x-0", kMi300x, {{"hami.io/node-amd-register", AmdRegistration(*mi300x, "amd-", 7).dump()}});
  AddNode("mi300x-1", kMi300x);  // no HAMi: toposched's own records only, no lock
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));

  const json pod = GpuPod(server_, "amd-two", 0, 0, {{"amd.com/gpu", "2"}});
  const Scheduled s = Schedule(r, pod, {"mi300x-0"});
  ASSERT_TRUE(s.error.empty()) << s.error;
  const json ann = (*server_.Get(kPods, "amd-two"))["metadata"]["annotations"];
  EXPECT_FALSE(ann.contains("hami.io/vgpu-devices-to-allocate"))
      << "NVIDIA's keys are never written for AMD GPUs";
  EXPECT_FALSE(ann.contains("hami.io/vgpu-devices-allocated"));
  const json allocation = json::parse(ann["toposched.io/allocation"].get<std::string>());
  ASSERT_EQ(allocation["gpus"].size(), 2u);
  std::string expected;
  for (const json& g : allocation["gpus"]) {
    const int index = g["index"].get<int>();
    EXPECT_NE(index, 7) << "GPU 7 is unhealthy in the registration";
    expected += "amd-" + std::to_string(index) + ",AMD Instinct MI300X,196288,304:";
  }
  expected += ";";
  ASSERT_TRUE(ann.contains("hami.io/amd-devices-to-allocate")) << ann.dump();
  EXPECT_EQ(ann["hami.io/amd-devices-to-allocate"], expected);
  EXPECT_EQ(ann["hami.io/amd-devices-allocated"], expected);
  EXPECT_EQ(ann["hami.io/vgpu-node"], "mi300x-0");
  EXPECT_EQ(ann["hami.io/bind-phase"], "allocating");
  EXPECT_TRUE(ann.contains("hami.io/bind-time"));
  EXPECT_TRUE(ann.contains("hami.io/vgpu-time"));
  EXPECT_TRUE(NodeLocked(server_, "mi300x-0"));

  // No AMD registration: nothing for HAMi, no lock.
  ASSERT_EQ(Schedule(r, GpuPod(server_, "amd-plain", 0, 0, {{"amd.com/gpu", "1"}}), {"mi300x-1"}).node,
            "mi300x-1");
  const json plain = (*server_.Get(kPods, "amd-plain"))["metadata"]["annotations"];
  EXPECT_FALSE(plain.contains("hami.io/amd-devices-to-allocate"));
  EXPECT_FALSE(plain.contains("hami.io/vgpu-devices-to-allocate"));
  EXPECT_FALSE(NodeLocked(server_, "mi300x-1"));

  // The AMD device plugin allocates and releases the lock; 5 healthy GPUs are left on
  // mi300x-0 (8, less GPU 7, unusable, less amd-two's 2), so 6 do not fit and 5 do.
  json released = *server_.Get(kNodes, "mi300x-0");
  released["metadata"]["annotations"].erase("hami.io/mutex.lock");
  server_.Upsert(kNodes, released);
  const Scheduled six = Schedule(r, GpuPod(server_, "amd-six", 0, 0, {{"amd.com/gpu", "6"}}), {"mi300x-0"});
  EXPECT_NE(six.error.find("1 unusable: HAMi's AMD device plugin reports the card unhealthy"),
            std::string::npos)
      << six.error;
  EXPECT_EQ(Schedule(r, GpuPod(server_, "amd-five", 0, 0, {{"amd.com/gpu", "5"}}), {"mi300x-0"}).node,
            "mi300x-0");
  ExpectNoDeviceHeldTwice(server_);
}

// Pods HAMi's own scheduler placed on AMD GPUs (hami.io/amd-devices-allocated, no toposched
// record) hold their cards after a restart; an unreadable AMD record holds the node.
TEST_F(KubeE2E, HamiPlacedAmdPodsAreRestoredAndUnreadableOnesHoldTheNode) {
  const Result<NodeTopology> mi300x = LoadTopologyFile(testing::SharedTopology(kMi300x).string());
  ASSERT_TRUE(mi300x.ok()) << mi300x.error().message();
  AddNode("mi300x-0", kMi300x, {{"hami.io/node-amd-register", AmdRegistration(*mi300x, "amd-").dump()}});
  auto hami_pod = [&](const std::string& name, const std::string& record) {
    json p = testing::MakePod({.name = name, .extra_limits = {{"amd.com/gpu", "2"}}});
    p["metadata"].erase("uid");
    p["metadata"]["annotations"] = {{"hami.io/vgpu-node", "mi300x-0"},
                                    {"hami.io/amd-devices-allocated", record}};
    p["spec"]["nodeName"] = "mi300x-0";
    p["status"]["phase"] = "Running";
    return server_.Create(kPods, p);
  };
  // A whole card (all 304 CUs, all memory) and a slice of 152 CUs (50 %) with 65536 MiB.
  const json placed =
      hami_pod("hami-amd", "amd-0,AMD Instinct MI300X,196288,304:amd-1,AMD Instinct MI300X,65536,152:;");
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const std::optional<state::PodAllocation> restored =
      r.store.FindPod(placed["metadata"]["uid"].get<std::string>());
  ASSERT_TRUE(restored.has_value());
  EXPECT_TRUE(restored->hold.empty()) << restored->hold;
  EXPECT_EQ(restored->delta.exclusive_gpus, (std::vector<int>{0}));
  ASSERT_EQ(restored->delta.shares.size(), 1u);
  EXPECT_EQ(restored->delta.shares[0].first, 1);
  EXPECT_EQ(restored->delta.shares[0].second.memory_mib, 65536);
  EXPECT_EQ(restored->delta.shares[0].second.cores, 5000);  // 152 of 304 CUs

  // A record naming a card the node does not have: held, never taken as free.
  const json bad =
      hami_pod("hami-bad", "amd-2,AMD Instinct MI300X,196288,304:amd-99,AMD Instinct MI300X,196288,304:;");
  ASSERT_TRUE(WaitFor([&] {
    const std::optional<state::PodAllocation> held =
        r.store.FindPod(bad["metadata"]["uid"].get<std::string>());
    return held.has_value() && !held->hold.empty();
  }));
  const std::optional<state::PodAllocation> held = r.store.FindPod(bad["metadata"]["uid"].get<std::string>());
  EXPECT_NE(held->hold.find("hami.io/amd-devices-allocated"), std::string::npos) << held->hold;
  EXPECT_FALSE(
      Schedule(r, GpuPod(server_, "after", 0, 0, {{"amd.com/gpu", "1"}}), {"mi300x-0"}).error.empty())
      << "a node with an unreadable record is held";
}

// ---------------------------------------------------------------------------------------------
// Faults.

TEST_F(KubeE2E, ApiServerRestartedMidWatch) {
  AddNode("a100-0", kAzureA100);
  AddNode("a100-1", kAzureA100);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  std::vector<json> pods;
  for (int i = 0; i < 4; ++i) {
    pods.push_back(GpuPod(server_, "p" + std::to_string(i), 2, 2));
    ASSERT_TRUE(Schedule(r, pods.back(), {"a100-0", "a100-1"}).error.empty());
  }
  server_.Stop();
  // While it is down: one pod is deleted, one node's pod finishes.
  server_.Delete(kPods, "p0");
  json done = *server_.Get(kPods, "p1");
  done["status"]["phase"] = "Failed";
  server_.Upsert(kPods, done);
  std::this_thread::sleep_for(milliseconds(300));
  server_.Start();
  std::string diff;
  EXPECT_TRUE(WaitFor([&] { return StoreMatchesApi(r, server_, &diff); })) << diff;
  EXPECT_FALSE(r.store.FindPod(pods[0]["metadata"]["uid"].get<std::string>()).has_value());
  EXPECT_FALSE(r.store.FindPod(pods[1]["metadata"]["uid"].get<std::string>()).has_value());
  EXPECT_TRUE(WaitFor([&] { return r.Ready(); }, milliseconds(5'000)))
      << "ready within seconds of the API's return";
  const json next = GpuPod(server_, "after-restart", 4, 4);
  EXPECT_TRUE(Schedule(r, next, {"a100-0", "a100-1"}).error.empty());
  ExpectNoDeviceHeldTwice(server_);
}

TEST_F(KubeE2E, WatchGoneForcesARelistThatMissesNothing) {
  AddNode("a100-0", kAzureA100);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const json a = GpuPod(server_, "a", 2, 2);
  ASSERT_TRUE(Schedule(r, a, {"a100-0"}).error.empty());
  // Watches cut, the pod deleted and the history compacted past the deletion: the
  // reconnecting watch gets 410 Gone, and only the relist can tell that "a" is gone.
  server_.Stop();
  server_.Delete(kPods, "a");
  server_.Compact();
  server_.Start();
  EXPECT_TRUE(WaitFor([&] { return !r.store.FindPod(a["metadata"]["uid"].get<std::string>()).has_value(); }));
  EXPECT_TRUE(WaitFor([&] {
    const std::string m = r.Call("/metrics", "", "GET").second;
    return m.find("toposched_kube_informer_gone_total{resource=\"pods\"} 0") == std::string::npos &&
           m.find("toposched_kube_informer_gone_total{resource=\"pods\"}") != std::string::npos;
  }));
  std::string diff;
  EXPECT_TRUE(StoreMatchesApi(r, server_, &diff)) << diff;
}

TEST_F(KubeE2E, ServerErrorBurstsAreRetriedAndConflictsOnTheBindingFailCleanly) {
  AddNode("a100-0", kAzureA100);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  // 503 x3 on the Binding: retried with backoff, the bind succeeds.
  server_.InjectFault({.method = "POST",
                       .path_prefix = "/api/v1/namespaces/default/pods/burst/binding",
                       .times = 3,
                       .status = 503});
  const json burst = GpuPod(server_, "burst", 2, 2);
  const Scheduled s = Schedule(r, burst, {"a100-0"});
  EXPECT_TRUE(s.error.empty()) << s.error;
  EXPECT_EQ((*server_.Get(kPods, "burst"))["spec"]["nodeName"], "a100-0");
  // 409 on the Binding (not a retried Binding of ours: the pod has no node): the bind fails,
  // nothing is held, the retry succeeds.
  server_.InjectFault({.method = "POST",
                       .path_prefix = "/api/v1/namespaces/default/pods/conflict/binding",
                       .times = 1,
                       .status = 409});
  const json conflict = GpuPod(server_, "conflict", 2, 2);
  const Scheduled failed = Schedule(r, conflict, {"a100-0"});
  EXPECT_FALSE(failed.error.empty());
  EXPECT_FALSE(r.store.FindPod(conflict["metadata"]["uid"].get<std::string>()).has_value());
  const Scheduled retried = Schedule(r, conflict, {"a100-0"});
  EXPECT_TRUE(retried.error.empty()) << retried.error;
  ExpectNoDeviceHeldTwice(server_);
  std::string diff;
  EXPECT_TRUE(WaitFor([&] { return StoreMatchesApi(r, server_, &diff); })) << diff;
}

// The writes a bind makes, in order ("create pods/binding", "update nodes"): every request the
// fake API server answered that changes something, events aside.
std::vector<std::string> Writes(const FakeApiServer& server) {
  std::vector<std::string> out;
  for (const testing::RequestRecord& r : server.requests()) {
    if (r.verb == "get" || r.verb == "list" || r.verb == "watch" || r.resource == "events") continue;
    out.push_back(r.verb + " " + r.resource);
  }
  return out;
}

TEST_F(KubeE2E, ABindIsOneWriteTheBindingThatCarriesTheAnnotations) {
  AddNode("a100-0", kAzureA100);
  AddNode("hami-0", kAzureA100, {{std::string(kube::kHamiNodeRegister), HamiRegistration("GPU-h-").dump()}});
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  server_.ClearRequests();
  const json pod = GpuPod(server_, "one-write", 2, 2);
  const Scheduled s = Schedule(r, pod, {"a100-0"});
  ASSERT_TRUE(s.error.empty()) << s.error;
  EXPECT_EQ(Writes(server_), std::vector<std::string>{"create pods/binding"});
  const json stored = *server_.Get(kPods, "one-write");
  EXPECT_EQ(stored["spec"]["nodeName"], "a100-0");
  EXPECT_TRUE(stored["metadata"]["annotations"].contains("toposched.io/allocation"));
  std::string diff;
  EXPECT_TRUE(WaitFor([&] { return StoreMatchesApi(r, server_, &diff); })) << diff;

  // On a HAMi node (HAMi's records, so HAMi's node lock): the lock, then the Binding.
  server_.ClearRequests();
  const json hami = GpuPod(server_, "two-writes", 1, 0);
  const Scheduled h = Schedule(r, hami, {"hami-0"});
  ASSERT_TRUE(h.error.empty()) << h.error;
  const std::vector<std::string> writes = Writes(server_);
  ASSERT_EQ(writes.size(), 2u) << ::testing::PrintToString(writes);
  EXPECT_EQ(writes[0], "update nodes");
  EXPECT_EQ(writes[1], "create pods/binding");
  const json ann = (*server_.Get(kPods, "two-writes"))["metadata"]["annotations"];
  EXPECT_TRUE(ann.contains("hami.io/vgpu-devices-to-allocate"));
  EXPECT_EQ(ann["hami.io/bind-phase"], "allocating");
  EXPECT_TRUE((*server_.Get(kNodes, "hami-0"))["metadata"]["annotations"].contains("hami.io/mutex.lock"));
}

// Binds of one node run at once (none waits on another's API round trip) and never share a
// device: 8 one-GPU pods bound in parallel on one 8-GPU node, with a slow Binding.
TEST_F(KubeE2E, ParallelBindsToOneNodeEachGetTheirOwnDevices) {
  AddNode("a100-0", kAzureA100);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  server_.InjectFault({.method = "POST",
                       .path_prefix = "/api/v1/namespaces/default/pods/",
                       .times = -1,
                       .delay = milliseconds(100)});
  std::vector<json> pods;
  for (int i = 0; i < 8; ++i) pods.push_back(GpuPod(server_, "par-" + std::to_string(i), 1, 1));
  std::vector<std::string> errors(pods.size());
  {
    std::vector<std::jthread> binds;
    for (std::size_t i = 0; i < pods.size(); ++i) {
      binds.emplace_back([&, i] { errors[i] = Schedule(r, pods[i], {"a100-0"}).error; });
    }
  }
  server_.ClearFaults();
  for (std::size_t i = 0; i < pods.size(); ++i) EXPECT_EQ(errors[i], "") << "pod " << i;
  ExpectNoDeviceHeldTwice(server_);
  std::string diff;
  EXPECT_TRUE(WaitFor([&] { return StoreMatchesApi(r, server_, &diff); })) << diff;
  EXPECT_EQ(r.store.pod_count(), pods.size());
}

// The Binding's reply is lost and the pod cannot be read back either: whether the pod was bound
// is unknown, so its devices stay held (fail closed); the scheduler's retry on that node, once
// the API server answers, completes it.
TEST_F(KubeE2E, ABindingWhoseOutcomeCannotBeReadBackKeepsTheDevicesHeld) {
  AddNode("a100-0", kAzureA100);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const json pod = GpuPod(server_, "unsure", 8, 8);
  const std::string uid = pod["metadata"]["uid"];
  server_.InjectFault({.method = "POST",
                       .path_prefix = "/api/v1/namespaces/default/pods/unsure/binding",
                       .times = -1,
                       .drop = true});
  server_.InjectFault(
      {.method = "GET", .path_prefix = "/api/v1/namespaces/default/pods/unsure", .times = -1, .status = 503});
  const Scheduled s = Schedule(r, pod, {"a100-0"});
  EXPECT_NE(s.error.find("cannot be read back"), std::string::npos) << s.error;
  ASSERT_TRUE(r.store.FindPod(uid).has_value()) << "perhaps bound: the devices stay held";
  const json other = GpuPod(server_, "other", 1, 0);
  EXPECT_FALSE(Schedule(r, other, {"a100-0"}).error.empty()) << "no GPU of the held 8 is handed out";
  server_.ClearFaults();
  const json bind = {{"PodName", "unsure"}, {"PodNamespace", "default"}, {"PodUID", uid}, {"Node", "a100-0"}};
  auto [status, body] = r.Call("/scheduler/bind", bind.dump());
  EXPECT_EQ(status, 200);
  EXPECT_EQ(json::parse(body).value("Error", std::string()), "");
  const json stored = *server_.Get(kPods, "unsure");
  EXPECT_EQ(stored["spec"]["nodeName"], "a100-0");
  EXPECT_TRUE(stored["metadata"]["annotations"].contains("toposched.io/allocation"));
  std::string diff;
  EXPECT_TRUE(WaitFor([&] { return StoreMatchesApi(r, server_, &diff); })) << diff;
}

TEST_F(KubeE2E, FailedBindingUndoesAnnotationsAndReservation) {
  AddNode("a100-0", kAzureA100);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  server_.InjectFault({.method = "POST",
                       .path_prefix = "/api/v1/namespaces/default/pods/doomed/binding",
                       .times = 50,
                       .status = 500});
  const json doomed = GpuPod(server_, "doomed", 8, 8);
  const Scheduled s = Schedule(r, doomed, {"a100-0"});
  EXPECT_NE(s.error.find("Binding"), std::string::npos) << s.error;
  const json stored = *server_.Get(kPods, "doomed");
  EXPECT_FALSE(stored.contains("spec") && stored["spec"].contains("nodeName") &&
               !stored["spec"]["nodeName"].is_null());
  const json ann = stored["metadata"].value("annotations", json::object());
  for (const char* k : {"toposched.io/allocation", "toposched.io/visible-gpus",
                        "hami.io/vgpu-devices-to-allocate", "hami.io/vgpu-node", "hami.io/bind-phase"}) {
    EXPECT_FALSE(ann.contains(k)) << k << " left behind";
  }
  EXPECT_FALSE(r.store.FindPod(doomed["metadata"]["uid"].get<std::string>()).has_value());
  // All 8 GPUs are free again: the same pod binds once the API server recovers.
  server_.ClearFaults();
  EXPECT_TRUE(Schedule(r, doomed, {"a100-0"}).error.empty());
}

TEST_F(KubeE2E, ExtenderKilledAndRestartedRebuildsEveryAllocationBeforeReady) {
  AddNode("a100-0", kAzureA100);
  AddNode("h100-0", kNebiusH100);
  std::map<std::string, std::string> before;
  {
    Replica r(server_, "replica-0", false);
    ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
    for (int i = 0; i < 6; ++i) {
      const json pod = GpuPod(server_, "p" + std::to_string(i), 1 + i % 3, 1 + i % 3);
      const Scheduled s = Schedule(r, pod, {"a100-0", "h100-0"});
      ASSERT_TRUE(s.error.empty()) << s.error;
      before[pod["metadata"]["uid"]] = s.node;
    }
  }  // killed: its threads stop, nothing is handed over
  Replica r(server_, "replica-1", false);
  // Ready only once every allocation is back.
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  for (const auto& [uid, node] : before) {
    std::optional<state::PodAllocation> a = r.store.FindPod(uid);
    ASSERT_TRUE(a.has_value()) << uid;
    EXPECT_EQ(a->node, node);
  }
  std::string diff;
  EXPECT_TRUE(StoreMatchesApi(r, server_, &diff)) << diff;
  // New pods fill the rest without touching a held device.
  for (int i = 0; i < 3; ++i) {
    const json pod = GpuPod(server_, "q" + std::to_string(i), 1, 1);
    EXPECT_TRUE(Schedule(r, pod, {"a100-0", "h100-0"}).error.empty());
  }
  ExpectNoDeviceHeldTwice(server_);
}

// Issue 13: pods on both ports of dual-port NICs survive any number of restarts and failovers
// with the devices they were bound to, and identical pods never get them again.
TEST_F(KubeE2E, DualPortNicsAreReadBackExactlyAcrossRestartsAndFailovers) {
  AddNode("h100-0", kOciH100);
  std::map<std::string, state::PodAllocation> bound;  // by UID, as first bound
  auto schedule_pair = [&](Replica& r, const std::string& suffix) {
    for (const auto& [name, nics] :
         std::vector<std::pair<std::string, int>>{{"two-" + suffix, 2}, {"one-" + suffix, 1}}) {
      const json pod = GpuPod(server_, name, 1, nics);
      const Scheduled s = Schedule(r, pod, {"h100-0"});
      ASSERT_TRUE(s.error.empty()) << name << ": " << s.error;
      const std::string uid = pod["metadata"]["uid"];
      ASSERT_TRUE(r.store.FindPod(uid).has_value());
      bound[uid] = *r.store.FindPod(uid);
    }
  };
  auto expect_all_back = [&](Replica& r) {
    for (const auto& [uid, a] : bound) {
      std::optional<state::PodAllocation> now = r.store.FindPod(uid);
      ASSERT_TRUE(now.has_value()) << uid;
      EXPECT_TRUE(now->hold.empty()) << now->hold;
      EXPECT_EQ(now->delta, a.delta) << uid << " came back on other devices";
    }
    std::string diff;
    EXPECT_TRUE(WaitFor([&] { return StoreMatchesApi(r, server_, &diff); })) << diff;
    EXPECT_EQ(r.Call("/metrics", "", "GET").second.find("toposched_kube_restore_errors_total 1"),
              std::string::npos);
    ExpectNoDeviceHeldTwice(server_);
  };
  {
    Replica r(server_, "replica-0", false);
    ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
    schedule_pair(r, "0");
  }
  // The two-NIC pod holds both ports of one card: the case that used to read back as one port.
  const state::PodAllocation& two =
      bound.begin()->second.delta.nics.size() == 2 ? bound.begin()->second : std::next(bound.begin())->second;
  ASSERT_EQ(two.delta.nics.size(), 2u);
  const auto topology = LoadTopologyFile(testing::SharedTopology(kOciH100).string());
  ASSERT_TRUE(topology.ok());
  EXPECT_EQ(topology->nics[static_cast<std::size_t>(two.delta.nics[0])].pci_bus_id,
            topology->nics[static_cast<std::size_t>(two.delta.nics[1])].pci_bus_id)
      << "the engine took two ports of one card for one GPU (both PIX)";
  for (int restart = 1; restart <= 3; ++restart) {
    SCOPED_TRACE("restart " + std::to_string(restart));
    Replica r(server_, "replica-" + std::to_string(restart), false);
    ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
    expect_all_back(r);
    schedule_pair(r, std::to_string(restart));  // identical pods: other devices
    ExpectNoDeviceHeldTwice(server_);
  }
  // A failover: the follower rebuilt the same state and binds on from it.
  auto leader = std::make_unique<Replica>(server_, "elected-1", true);
  ASSERT_TRUE(WaitFor([&] { return leader->Ready(); }));
  Replica follower(server_, "elected-2", true);
  leader.reset();
  ASSERT_TRUE(WaitFor([&] { return follower.Ready(); }, milliseconds(5'000)));
  expect_all_back(follower);
  const Scheduled last = Schedule(follower, GpuPod(server_, "last", 1, 2), {"h100-0"});
  EXPECT_NE(last.error.find("no node fits"), std::string::npos) << "8 GPUs are taken: " << last.error;
  ExpectNoDeviceHeldTwice(server_);
}

// Issue 13, fail closed: an allocation annotation that cannot be read back keeps its node out of
// new device placements, with the reason in a metric, a log line and an event on the pod, until
// the pod is deleted; other nodes and readiness are unaffected.
TEST_F(KubeE2E, AnUnreadableAllocationHoldsItsNodeUntilThePodIsDeleted) {
  AddNode("h100-0", kOciH100);
  AddNode("h100-1", kOciH100);
  std::string victim_uid;
  {
    Replica r(server_, "replica-0", false);
    ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
    const json pod = GpuPod(server_, "corrupted", 1, 1);
    ASSERT_EQ(Schedule(r, pod, {"h100-0"}).node, "h100-0");
    victim_uid = pod["metadata"]["uid"];
  }
  // Someone (or an old release) rewrites the record so it names a NIC the node lacks.
  json pod = *server_.Get(kPods, "corrupted");
  json record = json::parse(
      pod["metadata"]["annotations"][std::string(kube::kAllocationAnnotation)].get<std::string>());
  record["nics"][0]["name"] = "mlx5_99";
  pod["metadata"]["annotations"][std::string(kube::kAllocationAnnotation)] = record.dump();
  server_.Upsert(kPods, pod);

  Replica r(server_, "replica-1", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); })) << "one bad pod must not take the scheduler down";
  ASSERT_TRUE(r.store.FindPod(victim_uid).has_value());
  EXPECT_NE(r.store.FindPod(victim_uid)->hold.find("node has no NIC \"mlx5_99\""), std::string::npos)
      << r.store.FindPod(victim_uid)->hold;
  EXPECT_EQ(r.store.FindPod(victim_uid)->delta.exclusive_gpus.size(), 1u) << "the GPU it still names is held";
  EXPECT_TRUE(r.store.snapshot()->Find("h100-0")->held());
  const std::string metrics = r.Call("/metrics", "", "GET").second;
  EXPECT_NE(metrics.find("toposched_kube_held_allocations 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("toposched_kube_held_nodes 1"), std::string::npos);
  ASSERT_TRUE(WaitFor([&] {
    for (const json& e : server_.List("/api/v1/namespaces/default/events")) {
      if (e["reason"] == "AllocationUnreadable" && e["involvedObject"]["uid"] == victim_uid) return true;
    }
    return false;
  }));
  for (const json& e : server_.List("/api/v1/namespaces/default/events")) {
    if (e["reason"] != "AllocationUnreadable") continue;
    EXPECT_EQ(e["type"], "Warning");
    EXPECT_NE(e["message"].get<std::string>().find("node h100-0 takes no new device placements"),
              std::string::npos);
  }
  // The held node is filtered out with the reason; the other node takes the pod.
  const json next = GpuPod(server_, "next", 1, 1);
  auto [status, body] = r.Call("/scheduler/filter", testing::ExtenderArgs(next, {"h100-0", "h100-1"}));
  ASSERT_EQ(status, 200);
  const json filtered = json::parse(body);
  EXPECT_EQ(filtered["NodeNames"], json::array({"h100-1"}));
  // Unresolvable: preempting other pods cannot free a node whose devices are unknown.
  EXPECT_NE(filtered["FailedAndUnresolvableNodes"].value("h100-0", std::string()).find("cannot read back"),
            std::string::npos)
      << filtered.dump();
  EXPECT_EQ(Schedule(r, next, {"h100-0", "h100-1"}).node, "h100-1");
  // The pod is deleted: the hold ends and the node takes pods again.
  server_.Delete(kPods, "corrupted");
  ASSERT_TRUE(WaitFor([&] { return !r.store.snapshot()->Find("h100-0")->held(); }));
  EXPECT_NE(r.Call("/metrics", "", "GET").second.find("toposched_kube_held_allocations 0"),
            std::string::npos);
  EXPECT_EQ(Schedule(r, GpuPod(server_, "after", 1, 1), {"h100-0"}).node, "h100-0");
  ExpectNoDeviceHeldTwice(server_);
}

// Issue 13's aftermath: two readable records that claim one GPU (a double allocation made
// before the fix) hold the node instead of freeing anything.
TEST_F(KubeE2E, TwoRecordsOnOneDeviceHoldTheNode) {
  AddNode("h100-0", kOciH100);
  {
    Replica r(server_, "replica-0", false);
    ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
    ASSERT_EQ(Schedule(r, GpuPod(server_, "first", 1, 1), {"h100-0"}).node, "h100-0");
  }
  json copy = *server_.Get(kPods, "first");
  copy["metadata"]["name"] = "second";
  copy["metadata"]["uid"] = "uid-second";
  server_.Upsert(kPods, copy);
  Replica r(server_, "replica-1", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const std::string first_uid = (*server_.Get(kPods, "first"))["metadata"]["uid"];
  ASSERT_TRUE(r.store.FindPod(first_uid).has_value());
  ASSERT_TRUE(r.store.FindPod("uid-second").has_value());
  // Whichever was read first keeps the devices; the other is held, and so is the node.
  EXPECT_NE(r.store.FindPod(first_uid)->hold.empty(), r.store.FindPod("uid-second")->hold.empty());
  EXPECT_TRUE(r.store.snapshot()->Find("h100-0")->held());
  EXPECT_NE(Schedule(r, GpuPod(server_, "third", 1, 1), {"h100-0"}).error.find("no node fits"),
            std::string::npos);
}

// Issue 15 (9): pods another scheduler placed hold devices too. A default-scheduler pod bound to
// a managed node with 6 of its 8 GPUs and 4 RDMA NICs leaves 2 GPUs: toposched places no more
// until it is deleted; its devices are counted on the last GPUs and NICs in PCI order.
TEST_F(KubeE2E, PodsOfOtherSchedulersHoldTheDevicesTheyAskFor) {
  AddNode("a100-0", kAzureA100);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  testing::PodSpec spec;
  spec.name = "other";
  spec.gpus = 6;
  spec.rdma = 4;
  json other = testing::MakePod(spec);
  other["metadata"].erase("resourceVersion");
  other["spec"]["nodeName"] = "a100-0";
  other["spec"]["schedulerName"] = "default-scheduler";
  other = server_.Create(kPods, other);
  const std::string uid = other["metadata"]["uid"];
  ASSERT_TRUE(WaitFor([&] { return r.store.FindPod(uid).has_value(); }));
  const state::PodAllocation counted = *r.store.FindPod(uid);
  EXPECT_TRUE(counted.foreign);
  EXPECT_EQ(counted.delta.exclusive_gpus, (std::vector<int>{2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(counted.delta.nics, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_NE(r.Call("/metrics", "", "GET").second.find("toposched_kube_foreign_pods 1"), std::string::npos);
  EXPECT_NE(Schedule(r, GpuPod(server_, "four", 4, 4), {"a100-0"}).error.find("no node fits"),
            std::string::npos);
  EXPECT_EQ(Schedule(r, GpuPod(server_, "two", 2, 2), {"a100-0"}).node, "a100-0");
  EXPECT_NE(Schedule(r, GpuPod(server_, "one-more", 1, 0), {"a100-0"}).error.find("no node fits"),
            std::string::npos);
  // A restart counts it again, and it does not collide with what toposched bound.
  {
    Replica again(server_, "replica-1", false);
    ASSERT_TRUE(WaitFor([&] { return again.Ready(); }));
    ASSERT_TRUE(again.store.FindPod(uid).has_value());
    EXPECT_TRUE(again.store.FindPod(uid)->foreign);
    EXPECT_FALSE(again.store.snapshot()->Find("a100-0")->held());
  }
  server_.Delete(kPods, "other");
  ASSERT_TRUE(WaitFor([&] { return !r.store.FindPod(uid).has_value(); }));
  EXPECT_EQ(Schedule(r, GpuPod(server_, "four-after", 4, 4), {"a100-0"}).node, "a100-0");
  ExpectNoDeviceHeldTwice(server_);
}

// kube-scheduler's NodeResourcesFit counts every active pod bound to a node against the Node's
// allocatable CPU, with devices or not: the node's record follows, and a pod that finishes, is
// deleted, or is found gone only by a relist gives its request back.
TEST_F(KubeE2E, PodsCpuRequestsCountOnTheirNodeUntilTheyEnd) {
  AddNode("a100-0", kAzureA100);  // testing::MakeNode: allocatable cpu "220"
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  auto record = [&] { return *r.store.snapshot()->Find("a100-0"); };
  EXPECT_EQ(record().cpu_allocatable_milli, 220'000);
  auto create = [&](const std::string& name, const std::string& cpu, const std::string& node) {
    testing::PodSpec spec;
    spec.name = name;
    json pod = testing::MakePod(spec);
    pod["metadata"].erase("uid");
    pod["metadata"].erase("resourceVersion");
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu;
    if (!node.empty()) {
      pod["spec"]["nodeName"] = node;
      pod["status"]["phase"] = "Running";
    }
    return server_.Create(kPods, pod);
  };
  json web = create("web", "1500m", "a100-0");
  json batch = create("batch", "2", "a100-0");
  (void)create("waiting", "8", "");         // pending: asks nothing of any node yet
  (void)create("elsewhere", "8", "cpu-9");  // a node toposched does not manage
  ASSERT_TRUE(WaitFor([&] { return record().cpu_requested_milli == 3'500; }))  // 1500 + 2000
      << record().cpu_requested_milli;
  EXPECT_EQ(record().cpu_free_milli(), 216'500);
  EXPECT_EQ(r.store.snapshot()->briefs()[r.store.snapshot()->IndexOf("a100-0")].cpu_free_milli, 216'500);

  batch["status"]["phase"] = "Succeeded";
  server_.Upsert(kPods, batch);
  ASSERT_TRUE(WaitFor([&] { return record().cpu_requested_milli == 1'500; })) << record().cpu_requested_milli;
  server_.Delete(kPods, "web");
  ASSERT_TRUE(WaitFor([&] { return record().cpu_requested_milli == 0; })) << record().cpu_requested_milli;

  // Deleted while the watch is down and the history compacted past it: only the relist tells.
  (void)create("late", "750m", "a100-0");
  ASSERT_TRUE(WaitFor([&] { return record().cpu_requested_milli == 750; })) << record().cpu_requested_milli;
  server_.Stop();
  server_.Delete(kPods, "late");
  server_.Compact();
  server_.Start();
  EXPECT_TRUE(WaitFor([&] { return record().cpu_requested_milli == 0; })) << record().cpu_requested_milli;

  // The Node's allocatable alone changes (kubelet's reserved CPU): the record follows.
  json node = *server_.Get(kNodes, "a100-0");
  node["status"]["allocatable"]["cpu"] = "200500m";
  server_.Upsert(kNodes, node);
  EXPECT_TRUE(WaitFor([&] { return record().cpu_allocatable_milli == 200'500; }))
      << record().cpu_allocatable_milli;
}

// A Volcano event (allocate, deallocate) for `pod` on `node`, as Volcano's extender plugin sends it.
std::string VolcanoEvent(const json& pod, const std::string& node, int gpus = 2, int rdma = 2) {
  testing::PodSpec spec;
  spec.name = pod["metadata"]["name"];
  spec.uid = pod["metadata"]["uid"];
  spec.gpus = gpus;
  spec.rdma = rdma;
  json task = testing::MakeTask(spec, node);
  task["Pod"] = pod;
  return json{{"task", task}}.dump();
}

// Issue 15 (1): Volcano's allocate and deallocate are session events. A pod Volcano bound keeps
// its devices through a session that evicts it (deallocate) and then discards the eviction
// (allocate again); a pipelined task never bound is released, annotations and all.
TEST_F(KubeE2E, VolcanoSessionEventsNeverChangeABoundPodsDevices) {
  AddNode("a100-0", kAzureA100);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  auto event = [](const json& pod, const std::string& node) { return VolcanoEvent(pod, node); };
  const json running = GpuPod(server_, "running", 2, 2);
  const std::string uid = running["metadata"]["uid"];
  ASSERT_EQ(json::parse(r.Call("/volcano/allocate", event(running, "a100-0")).second)["errorMessage"], "");
  const state::PodAllocation before = *r.store.FindPod(uid);
  json bound = *server_.Get(kPods, "running");  // Volcano's Binding after the statement commits
  bound["spec"]["nodeName"] = "a100-0";
  bound["status"]["phase"] = "Running";
  server_.Upsert(kPods, bound);
  // A later session evicts it (deallocate) and discards the statement (allocate again).
  ASSERT_EQ(json::parse(r.Call("/volcano/deallocate", event(bound, "a100-0")).second)["errorMessage"], "");
  ASSERT_TRUE(r.store.FindPod(uid).has_value()) << "a running pod's devices are freed only when it is gone";
  EXPECT_EQ(r.store.FindPod(uid)->delta, before.delta);
  EXPECT_TRUE(
      (*server_.Get(kPods, "running"))["metadata"]["annotations"].contains("toposched.io/allocation"));
  // Meanwhile nobody else gets its GPUs.
  EXPECT_NE(
      json::parse(
          r.Call("/volcano/allocate", event(GpuPod(server_, "other", 8, 0), "a100-0")).second)["errorMessage"]
          .get<std::string>(),
      "");
  ASSERT_EQ(json::parse(r.Call("/volcano/allocate", event(bound, "a100-0")).second)["errorMessage"], "");
  EXPECT_EQ(r.store.FindPod(uid)->delta, before.delta);
  EXPECT_NE(r.Call("/metrics", "", "GET")
                .second.find("toposched_volcano_events_total{event=\"deallocate_kept\"} 1"),
            std::string::npos);
  // A pipelined task un-pipelined before any Binding: released, its annotations removed.
  const json pipelined = GpuPod(server_, "pipelined", 2, 2);
  ASSERT_EQ(json::parse(r.Call("/volcano/allocate", event(pipelined, "a100-0")).second)["errorMessage"], "");
  ASSERT_TRUE(r.store.FindPod(pipelined["metadata"]["uid"].get<std::string>()).has_value());
  ASSERT_EQ(json::parse(r.Call("/volcano/deallocate", event(pipelined, "a100-0")).second)["errorMessage"],
            "");
  EXPECT_FALSE(r.store.FindPod(pipelined["metadata"]["uid"].get<std::string>()).has_value());
  const json after = *server_.Get(kPods, "pipelined");
  EXPECT_FALSE(after["metadata"].contains("annotations") &&
               after["metadata"]["annotations"].contains("toposched.io/allocation"));
  ExpectNoDeviceHeldTwice(server_);
}

// Two allocates of one pod overlap (vc-scheduler killed mid-session while toposched wrote the
// first; the restarted one allocates the pod on another node): the second is refused while the
// first is written, or waits for it; either way, once it goes through, the pod is annotated for
// the second node and held only there (a bind design that wrote outside the node's lock once
// left the first node's annotation on a pod Volcano bound to the second: e2e
// TestVolcano/SchedulerRestart).
TEST_F(KubeE2E, OverlappingAllocatesOfOnePodLeaveTheLastOnesRecord) {
  AddNode("a100-0", kAzureA100);
  AddNode("a100-1", kAzureA100);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const json pod = GpuPod(server_, "restarted", 2, 2);
  const std::string uid = pod["metadata"]["uid"];
  // The first allocate's annotation patch is slow; the second arrives meanwhile.
  server_.InjectFault({.method = "PATCH",
                       .path_prefix = "/api/v1/namespaces/default/pods/restarted",
                       .times = 1,
                       .delay = milliseconds(600)});
  std::string first_error;
  std::jthread first([&] {
    first_error =
        json::parse(r.Call("/volcano/allocate", VolcanoEvent(pod, "a100-0")).second)["errorMessage"];
  });
  std::this_thread::sleep_for(milliseconds(150));
  json second = json::parse(r.Call("/volcano/allocate", VolcanoEvent(pod, "a100-1")).second);
  first.join();
  if (second["errorMessage"] != "") {
    // Refused while the first one's write was in flight (the pod was being allocated on
    // a100-0): the next session allocates it again, and then it moves.
    EXPECT_NE(second["errorMessage"].get<std::string>().find("already bound to node a100-0"),
              std::string::npos)
        << second.dump();
    second = json::parse(r.Call("/volcano/allocate", VolcanoEvent(pod, "a100-1")).second);
  }
  EXPECT_EQ(second["errorMessage"], "");
  ASSERT_TRUE(r.store.FindPod(uid).has_value());
  EXPECT_EQ(r.store.FindPod(uid)->node, "a100-1");
  const json ann = (*server_.Get(kPods, "restarted"))["metadata"]["annotations"];
  ASSERT_TRUE(ann.contains("toposched.io/allocation"))
      << ann.dump() << " (first allocate: " << first_error << ")";
  EXPECT_EQ(json::parse(ann["toposched.io/allocation"].get<std::string>())["node"], "a100-1")
      << "first allocate: " << first_error;
  ExpectNoDeviceHeldTwice(server_);
}

// Issue 15 (1): a tentative allocation nobody completes (Volcano pipelined a task, then neither
// bound nor deallocated it) is undone after unbound_allocation_ttl; a bound pod never is.
TEST_F(KubeE2E, AnAllocationNeverBoundIsUndoneAfterItsTtl) {
  AddNode("a100-0", kAzureA100);
  kube::KubeSourceOptions options;
  options.unbound_allocation_ttl = milliseconds(300);
  Replica r(server_, "replica-0", false, options);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const json stuck = GpuPod(server_, "stuck", 2, 2);
  const json bound = GpuPod(server_, "bound", 2, 2);
  auto allocate = [&](const json& pod) {
    return json::parse(r.Call("/volcano/allocate", VolcanoEvent(pod, "a100-0")).second)["errorMessage"];
  };
  ASSERT_EQ(allocate(stuck), "");
  ASSERT_EQ(allocate(bound), "");
  json b = *server_.Get(kPods, "bound");
  b["spec"]["nodeName"] = "a100-0";
  server_.Upsert(kPods, b);
  const std::string stuck_uid = stuck["metadata"]["uid"];
  ASSERT_TRUE(WaitFor([&] { return !r.store.FindPod(stuck_uid).has_value(); }, milliseconds(5'000)));
  const json after = *server_.Get(kPods, "stuck");
  EXPECT_FALSE(after["metadata"].contains("annotations") &&
               after["metadata"]["annotations"].contains("toposched.io/allocation"));
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_TRUE(r.store.FindPod(bound["metadata"]["uid"].get<std::string>()).has_value());
}

// Issue 16 (2): an NCCL topology carries no card memory; GPU Feature Discovery's
// nvidia.com/gpu.memory label gives it, and a shared (HAMi) pod is then placed.
TEST_F(KubeE2E, GpuFeatureDiscoveryMemoryMakesSharedPodsPlaceable) {
  AddNode("a100-0", kAzureA100);
  AddNode("a100-gfd", kAzureA100);
  // No HAMi registration here: the nodes vouch for a device plugin that enforces shares.
  for (const char* name : {"a100-0", "a100-gfd"}) {
    json node = *server_.Get(kNodes, name);
    node["metadata"]["labels"][std::string(kube::kSharesEnforcedLabel)] = "true";
    if (std::string(name) == "a100-gfd") node["metadata"]["labels"]["nvidia.com/gpu.memory"] = "81920";
    server_.Upsert(kNodes, node);
  }
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  ASSERT_TRUE(
      WaitFor([&] { return r.store.snapshot()->Find("a100-gfd")->topology->gpus[0].memory_mib == 81920; }));
  EXPECT_EQ(r.store.snapshot()->Find("a100-0")->topology->gpus[0].memory_mib, 0u);
  const json pod = GpuPod(server_, "small", 1, 0, {{"nvidia.com/gpumem", "8000"}});
  const Scheduled s = Schedule(r, pod, {"a100-gfd"});
  EXPECT_EQ(s.node, "a100-gfd") << s.error;
  // Without the label (and no PCI id in this NCCL file) the cards' memory stays unknown: each
  // takes one memory-asking vGPU alone, so eight fit and the ninth is refused with the reason.
  for (int i = 0; i < 8; ++i) {
    const Scheduled alone = Schedule(
        r, GpuPod(server_, "alone-" + std::to_string(i), 1, 0, {{"nvidia.com/gpumem", "8000"}}), {"a100-0"});
    EXPECT_EQ(alone.node, "a100-0") << i << ": " << alone.error;
  }
  const Scheduled ninth =
      Schedule(r, GpuPod(server_, "ninth", 1, 0, {{"nvidia.com/gpumem", "8000"}}), {"a100-0"});
  EXPECT_TRUE(ninth.node.empty());
  EXPECT_NE(ninth.error.find("unknown memory size and already shared"), std::string::npos) << ninth.error;
}

// Issue 42 (5): a share goes only where a device plugin enforces it. On a node with neither
// HAMi's registration nor the opt-in label the stock device plugin would hand a shared pod the
// whole card: the filter refuses the share there and says why, whole GPUs still land, and the
// label (or a registration) makes the same share placeable.
TEST_F(KubeE2E, ASharedPodGoesOnlyWhereADevicePluginEnforcesShares) {
  AddNode("a100-0", kAzureA100);
  json node = *server_.Get(kNodes, "a100-0");
  node["metadata"]["labels"]["nvidia.com/gpu.memory"] = "81920";
  server_.Upsert(kNodes, node);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  ASSERT_TRUE(
      WaitFor([&] { return r.store.snapshot()->Find("a100-0")->topology->gpus[0].memory_mib == 81920; }));
  EXPECT_FALSE(r.store.snapshot()->Find("a100-0")->topology->gpus[0].shares_unenforced.empty());
  const Scheduled refused =
      Schedule(r, GpuPod(server_, "share", 1, 0, {{"nvidia.com/gpumem", "8000"}}), {"a100-0"});
  EXPECT_TRUE(refused.node.empty());
  EXPECT_NE(refused.error.find("8 whole only (no device plugin enforces shares on this node"),
            std::string::npos)
      << refused.error;
  EXPECT_EQ(Schedule(r, GpuPod(server_, "whole", 2, 0), {"a100-0"}).node, "a100-0");
  node = *server_.Get(kNodes, "a100-0");
  node["metadata"]["labels"][std::string(kube::kSharesEnforcedLabel)] = "true";
  server_.Upsert(kNodes, node);
  ASSERT_TRUE(WaitFor(
      [&] { return r.store.snapshot()->Find("a100-0")->topology->gpus[0].shares_unenforced.empty(); }));
  const Scheduled placed =
      Schedule(r, GpuPod(server_, "share-2", 1, 0, {{"nvidia.com/gpumem", "8000"}}), {"a100-0"});
  EXPECT_EQ(placed.node, "a100-0") << placed.error;
}

// The rule's stand-ins give way to a real record: after a restart the informer lists the other
// scheduler's pod first ("a-" sorts first), counts it on GPUs 6 and 7, then reads toposched's
// record of GPU 7. The record wins, the other pod is counted again on 5 and 6, nothing is held.
TEST_F(KubeE2E, StandInsOfOtherSchedulersPodsGiveWayToARealRecord) {
  AddNode("a100-0", kAzureA100);
  const auto topology = LoadTopologyFile(testing::SharedTopology(kAzureA100).string());
  ASSERT_TRUE(topology.ok());
  testing::PodSpec other_spec;
  other_spec.name = "a-other";
  other_spec.uid = "uid-a-other";
  other_spec.gpus = 2;
  json other = testing::MakePod(other_spec);
  other["metadata"].erase("resourceVersion");
  other["spec"]["nodeName"] = "a100-0";
  server_.Create(kPods, other);
  testing::PodSpec ours_spec;
  ours_spec.name = "z-ours";
  ours_spec.uid = "uid-z-ours";
  ours_spec.gpus = 1;
  ours_spec.annotations = {{std::string(kube::kAllocationAnnotation),
                            json{{"version", 1},
                                 {"node", "a100-0"},
                                 {"gpus", {{{"index", 7}, {"pciBusId", topology->gpus[7].pci_bus_id}}}}}
                                .dump()}};
  json ours = testing::MakePod(ours_spec);
  ours["metadata"].erase("resourceVersion");
  ours["spec"]["nodeName"] = "a100-0";
  server_.Create(kPods, ours);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  ASSERT_TRUE(r.store.FindPod("uid-z-ours").has_value());
  EXPECT_TRUE(r.store.FindPod("uid-z-ours")->hold.empty()) << r.store.FindPod("uid-z-ours")->hold;
  EXPECT_EQ(r.store.FindPod("uid-z-ours")->delta.exclusive_gpus, std::vector<int>{7});
  ASSERT_TRUE(r.store.FindPod("uid-a-other").has_value());
  EXPECT_TRUE(r.store.FindPod("uid-a-other")->foreign);
  EXPECT_EQ(r.store.FindPod("uid-a-other")->delta.exclusive_gpus, (std::vector<int>{5, 6}));
  EXPECT_FALSE(r.store.snapshot()->Find("a100-0")->held());
}

TEST_F(KubeE2E, AnnotatedButUnboundPodIsHeldThenMovedWhenRescheduled) {
  AddNode("a100-0", kAzureA100);
  AddNode("a100-1", kAzureA100);
  json pod;
  {
    Replica r(server_, "replica-0", false);
    ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
    pod = GpuPod(server_, "orphan", 4, 4);
    ASSERT_TRUE(Schedule(r, pod, {"a100-0"}).error.empty());
  }
  // As if the replica died between writing the annotations and creating the Binding: the pod
  // carries the allocation but has no node.
  json unbound = *server_.Get(kPods, "orphan");
  unbound["spec"].erase("nodeName");
  server_.Upsert(kPods, unbound);
  Replica r(server_, "replica-1", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const std::string uid = pod["metadata"]["uid"];
  ASSERT_TRUE(r.store.FindPod(uid).has_value()) << "held: never double-allocate";
  EXPECT_EQ(r.store.FindPod(uid)->node, "a100-0");
  // kube-scheduler retries the pod and picks the other node: the old allocation moves.
  const json bind = {{"PodName", "orphan"}, {"PodNamespace", "default"}, {"PodUID", uid}, {"Node", "a100-1"}};
  auto [status, body] = r.Call("/scheduler/bind", bind.dump());
  EXPECT_EQ(status, 200);
  EXPECT_EQ(json::parse(body).value("Error", std::string()), "");
  EXPECT_EQ(r.store.FindPod(uid)->node, "a100-1");
  EXPECT_EQ((*server_.Get(kPods, "orphan"))["spec"]["nodeName"], "a100-1");
  std::string diff;
  EXPECT_TRUE(WaitFor([&] { return StoreMatchesApi(r, server_, &diff); })) << diff;
}

TEST_F(KubeE2E, OnlyTheLeaderBindsAndTheOtherTakesOverWithEveryAllocation) {
  AddNode("a100-0", kAzureA100);
  AddNode("h100-0", kNebiusH100);
  auto one = std::make_unique<Replica>(server_, "replica-1", true);
  ASSERT_TRUE(WaitFor([&] { return one->Ready(); }));
  Replica two(server_, "replica-2", true);
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(two.Ready()) << "the follower reports not ready";
  EXPECT_NE(two.Call("/readyz", "", "GET").second.find("not the leader"), std::string::npos);
  // The follower refuses to bind, in-band.
  const json refused = GpuPod(server_, "refused", 1, 1);
  const Scheduled r2 = Schedule(two, refused, {"a100-0", "h100-0"});
  EXPECT_NE(r2.error.find("not the leader"), std::string::npos) << r2.error;

  std::set<std::string> bound;
  for (int i = 0; i < 4; ++i) {
    const json pod = GpuPod(server_, "p" + std::to_string(i), 2, 2);
    ASSERT_TRUE(Schedule(*one, pod, {"a100-0", "h100-0"}).error.empty());
    bound.insert(pod["metadata"]["uid"]);
  }
  // The leader goes away (its process ends and gives the Lease up).
  one.reset();
  ASSERT_TRUE(WaitFor([&] { return two.Ready(); }, milliseconds(5'000)));
  for (const std::string& uid : bound) EXPECT_TRUE(two.store.FindPod(uid).has_value()) << uid;
  const json after = GpuPod(server_, "after", 4, 4);
  EXPECT_TRUE(Schedule(two, after, {"a100-0", "h100-0"}).error.empty());
  ExpectNoDeviceHeldTwice(server_);
}

// In a pod (POD_NAMESPACE/POD_NAME known): both replicas report ready once synced, the leader
// labels its own pod for the Service, a new leader takes a stale label off the old pod first,
// and a replica that stops takes its label off.
TEST_F(KubeE2E, LeaderLabelsItsPodAndAFollowerIsReadyButDoesNotBind) {
  AddNode("a100-0", kAzureA100);
  const std::string ns = "toposched-system";
  const std::string pods = "/api/v1/namespaces/" + ns + "/pods";
  for (const char* name : {"extender-1", "extender-2"}) {
    testing::PodSpec spec;
    spec.name = name;
    spec.ns = ns;
    json pod = testing::MakePod(spec);
    pod["metadata"].erase("uid");
    pod["metadata"].erase("resourceVersion");
    server_.Create(pods, pod);
  }
  auto label_of = [&](const std::string& name) {
    const std::optional<json> pod = server_.Get(pods, name);
    return pod ? pod->value("/metadata/labels/toposched.io~1leader"_json_pointer, std::string())
               : std::string("?");
  };
  auto options = [&](const std::string& name) {
    kube::KubeSourceOptions o;
    o.self_namespace = ns;
    o.self_name = name;
    return o;
  };
  auto one = std::make_unique<Replica>(server_, "extender-1", true, options("extender-1"));
  ASSERT_TRUE(WaitFor([&] { return label_of("extender-1") == "true"; }));
  Replica two(server_, "extender-2", true, options("extender-2"));
  ASSERT_TRUE(WaitFor([&] { return two.Ready(); })) << two.Call("/readyz", "", "GET").second;
  EXPECT_TRUE(one->Ready());
  EXPECT_EQ(label_of("extender-2"), "");
  // Ready, but not the leader: binds are refused in-band (the Service sends it none).
  const Scheduled refused = Schedule(two, GpuPod(server_, "refused", 1, 1), {"a100-0"});
  EXPECT_NE(refused.error.find("not the leader"), std::string::npos) << refused.error;
  EXPECT_TRUE(Schedule(*one, GpuPod(server_, "p0", 1, 1), {"a100-0"}).error.empty());

  // The leader steps down (its elector stops and gives the Lease up): it takes its label off
  // and the follower labels itself.
  one->elector_thread.request_stop();
  one->elector_thread.join();
  ASSERT_TRUE(WaitFor([&] { return label_of("extender-2") == "true"; }, milliseconds(5'000)));
  EXPECT_TRUE(WaitFor([&] { return label_of("extender-1").empty(); }));

  // A leader that crashed leaves its label behind: the next leader takes it off first.
  server_.Upsert(pods, [&] {
    json pod = *server_.Get(pods, "extender-1");
    pod["metadata"]["labels"]["toposched.io/leader"] = "true";
    return pod;
  }());
  two.Kill();
  EXPECT_EQ(label_of("extender-2"), "") << "a replica that stops takes its own label off";
  Replica three(server_, "extender-2b", true, options("extender-2"));  // a new process in pod extender-2
  ASSERT_TRUE(WaitFor([&] { return label_of("extender-2") == "true"; }, milliseconds(5'000)));
  EXPECT_TRUE(WaitFor([&] { return label_of("extender-1").empty(); })) << "the stale label stayed";
  const Scheduled p1 = Schedule(three, GpuPod(server_, "p1", 1, 1), {"a100-0"});
  EXPECT_TRUE(p1.error.empty()) << p1.error;
  ExpectNoDeviceHeldTwice(server_);
}

// network.hyperNodes: Volcano HyperNodes are watched and place the nodes in the tiers the pool
// plugins read; a change to them moves the positions without a restart.
TEST_F(KubeE2E, HyperNodesPlaceNodesInTheNetworkTiers) {
  AddNode("a100-0", kAzureA100);
  AddNode("h100-0", kNebiusH100);
  const std::string hypernodes = "/apis/topology.volcano.sh/v1alpha1/hypernodes";
  auto hypernode = [](const std::string& name, int tier, const json& members) {
    return json{{"apiVersion", "topology.volcano.sh/v1alpha1"},
                {"kind", "HyperNode"},
                {"metadata", {{"name", name}}},
                {"spec", {{"tier", tier}, {"members", members}}}};
  };
  auto node_member = [](const std::string& node) {
    return json{{"type", "Node"}, {"selector", {{"exactMatch", {{"name", node}}}}}};
  };
  server_.Create(hypernodes, hypernode("leaf-a", 1, json::array({node_member("a100-0")})));
  server_.Create(hypernodes, hypernode("leaf-b", 1, json::array({node_member("h100-0")})));
  server_.Create(
      hypernodes,
      hypernode(
          "spine-0", 2,
          json::array({json{{"type", "HyperNode"}, {"selector", {{"exactMatch", {{"name", "leaf-a"}}}}}},
                       json{{"type", "HyperNode"}, {"selector", {{"exactMatch", {{"name", "leaf-b"}}}}}}})));
  kube::KubeSourceOptions options;
  options.network.hyper_nodes = true;
  options.network.tiers = {{"toposched.io/leaf", pd::PathKind::kLeaf},
                           {"toposched.io/spine", pd::PathKind::kSpine}};
  Replica r(server_, "replica-0", false, options);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  ASSERT_TRUE(WaitFor([&] {
    const auto locations = r.store.node_locations();
    return locations != nullptr && locations->size() == 2;
  }));
  auto domains = [&](const std::string& node) { return r.store.node_locations()->at(node).domains; };
  EXPECT_EQ(domains("a100-0"), (std::vector<std::string>{"leaf-a", "spine-0"}));
  EXPECT_EQ(domains("h100-0"), (std::vector<std::string>{"leaf-b", "spine-0"}));

  // h100-0 moves under leaf-a: the watch event re-resolves every position.
  json leaf_a = *server_.Get(hypernodes, "leaf-a");
  leaf_a["spec"]["members"].push_back(node_member("h100-0"));
  server_.Upsert(hypernodes, leaf_a);
  server_.Delete(hypernodes, "leaf-b");
  ASSERT_TRUE(WaitFor([&] { return domains("h100-0")[0] == "leaf-a"; })) << domains("h100-0")[0];

  // The store-backed view the pool plugins get uses them.
  const auto view =
      state::MakeClusterView(r.store, r.store.snapshot(), options.network, "chat", r.store.node_locations());
  EXPECT_EQ(pd::PathBetween(options.network, view->Locate("a100-0"), view->Locate("h100-0")),
            pd::PathKind::kLeaf);
}

// HyperNodes that select nodes by label or by name pattern follow the nodes: a relabelled node
// moves, a new node that matches is placed, a deleted one leaves, with no HyperNode event.
TEST_F(KubeE2E, HyperNodesFollowNodeLabelsAndNewNodes) {
  AddNode("gpu-0", kNebiusH100);
  AddNode("gpu-1", kNebiusH100);
  auto set_rack = [&](const std::string& node, const std::string& rack) {
    json object = *server_.Get(kNodes, node);
    object["metadata"]["labels"]["example.com/rack"] = rack;
    server_.Upsert(kNodes, object);
  };
  set_rack("gpu-0", "r1");
  set_rack("gpu-1", "r1");
  const std::string hypernodes = "/apis/topology.volcano.sh/v1alpha1/hypernodes";
  auto rack = [](const std::string& name, const std::string& label) {
    return json{
        {"apiVersion", "topology.volcano.sh/v1alpha1"},
        {"kind", "HyperNode"},
        {"metadata", {{"name", name}}},
        {"spec",
         {{"tier", 1},
          {"members",
           json::array(
               {json{{"type", "Node"},
                     {"selector", {{"labelMatch", {{"matchLabels", {{"example.com/rack", label}}}}}}}}})}}}};
  };
  server_.Create(hypernodes, rack("leaf-r1", "r1"));
  server_.Create(hypernodes, rack("leaf-r2", "r2"));
  server_.Create(
      hypernodes,
      json{{"apiVersion", "topology.volcano.sh/v1alpha1"},
           {"kind", "HyperNode"},
           {"metadata", {{"name", "spine-gpu"}}},
           {"spec",
            {{"tier", 2},
             {"members",
              json::array({json{{"type", "Node"},
                                {"selector", {{"regexMatch", {{"pattern", "^gpu-[0-9]+$"}}}}}}})}}}});
  kube::KubeSourceOptions options;
  options.network.hyper_nodes = true;
  options.network.tiers = {{"toposched.io/leaf", pd::PathKind::kLeaf},
                           {"toposched.io/spine", pd::PathKind::kSpine}};
  Replica r(server_, "replica-0", false, options);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  auto domains = [&](const std::string& node) {
    const auto locations = r.store.node_locations();
    if (locations == nullptr) return std::vector<std::string>{};
    const auto it = locations->find(node);
    return it == locations->end() ? std::vector<std::string>{} : it->second.domains;
  };
  const std::vector<std::string> in_r1 = {"leaf-r1", "spine-gpu"}, in_r2 = {"leaf-r2", "spine-gpu"};
  ASSERT_TRUE(WaitFor([&] { return domains("gpu-0") == in_r1 && domains("gpu-1") == in_r1; }));

  set_rack("gpu-1", "r2");  // relabelled: moves to leaf-r2
  EXPECT_TRUE(WaitFor([&] { return domains("gpu-1") == in_r2; }))
      << ::testing::PrintToString(domains("gpu-1"));
  AddNode("gpu-2", kNebiusH100);  // a new node: the regex places it under the spine
  set_rack("gpu-2", "r2");
  EXPECT_TRUE(WaitFor([&] { return domains("gpu-2") == in_r2; }))
      << ::testing::PrintToString(domains("gpu-2"));
  server_.Delete(kNodes, "gpu-0");  // gone: no position left
  EXPECT_TRUE(WaitFor([&] { return domains("gpu-0").empty(); }))
      << ::testing::PrintToString(domains("gpu-0"));
  EXPECT_EQ(domains("gpu-1"), in_r2);
}

// A Prefill/Decode pool through the wire: a decode pod prefers the node in the leaf of its
// pool's prefill instance, the pool's pods are restored into the pool after a restart, and the
// prioritize answer is the same when nodes of one class sit in different leaves.
TEST_F(KubeE2E, PoolPodsScoreByWhereTheirPoolRunsAndRejoinItAfterARestart) {
  const std::map<std::string, std::string> leaf_of = {{"h100-0", "l1"}, {"h100-1", "l1"}, {"h100-2", "l2"}};
  for (const auto& [name, leaf] : leaf_of) {
    AddNode(name, kNebiusH100);
    json node = *server_.Get(kNodes, name);
    node["metadata"]["labels"]["toposched.io/leaf"] = leaf;
    node["metadata"]["labels"]["toposched.io/spine"] = "s1";
    server_.Upsert(kNodes, node);
  }
  auto pool_pod = [&](const std::string& name, const char* role) {
    testing::PodSpec spec;
    spec.name = name;
    spec.gpus = 2;
    spec.rdma = 2;
    spec.labels = {{"llm-d.ai/role", role}, {"toposched.io/pool", "chat"}};
    spec.annotations = {{"toposched.io/pd-ratio", "1:2"}, {"toposched.io/kv-ipc", " True"}};
    json pod = testing::MakePod(spec);
    pod["metadata"].erase("uid");
    pod["metadata"].erase("resourceVersion");
    return server_.Create(kPods, pod);
  };
  std::string prefill_uid;
  {
    Replica r(server_, "replica-0", false);
    ASSERT_TRUE(WaitFor([&] {
      return r.Ready() && r.store.snapshot()->Find("h100-2") != nullptr &&
             r.store.snapshot()->Find("h100-2")->labels.contains("toposched.io/leaf");
    }));
    const json prefill = pool_pod("prefill-0", "prefill");
    prefill_uid = prefill["metadata"]["uid"];
    const Scheduled p = Schedule(r, prefill, {"h100-0"});
    ASSERT_TRUE(p.error.empty()) << p.error;
    // The decode pod: h100-1 shares the prefill's leaf, h100-2 only the spine.
    const json decode = pool_pod("decode-0", "decode");
    auto [status, body] =
        r.Call("/scheduler/prioritize", testing::ExtenderArgs(decode, {"h100-1", "h100-2"}));
    ASSERT_EQ(status, 200) << body;
    std::map<std::string, int> score;
    for (const json& h : json::parse(body)) score[h["Host"]] = h["Score"].get<int>();
    EXPECT_GT(score.at("h100-1"), score.at("h100-2")) << body;
    const Scheduled d = Schedule(r, decode, {"h100-1", "h100-2"});
    ASSERT_TRUE(d.error.empty()) << d.error;
    EXPECT_EQ(d.node, "h100-1");
  }
  // The worst GPU->NIC class comes back from the annotation (written here as if the prefill had
  // been placed across the NUMA nodes; it was placed PIX).
  json prefill = *server_.Get(kPods, "prefill-0");
  json allocation =
      json::parse(prefill["metadata"]["annotations"]["toposched.io/allocation"].get<std::string>());
  EXPECT_EQ(allocation["links"]["worstGpuNic"], "PIX");
  allocation["links"]["worstGpuNic"] = "NODE";
  prefill["metadata"]["annotations"]["toposched.io/allocation"] = allocation.dump();
  server_.Upsert(kPods, prefill);
  Replica r(server_, "replica-1", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const std::optional<state::PodAllocation> restored = r.store.FindPod(prefill_uid);
  ASSERT_TRUE(restored.has_value());
  EXPECT_EQ(restored->pool, "chat");
  EXPECT_EQ(restored->role, PodRole::kPrefill);
  EXPECT_EQ(restored->worst_class, LinkClass::kNODE);
  EXPECT_TRUE(restored->kv_ipc);  // the pod's toposched.io/kv-ipc, for same-node IPC consent
  EXPECT_EQ(r.store.PoolPods("chat").size(), 2u);
}

TEST_F(KubeE2E, LeaderThatCannotRenewStopsBinding) {
  AddNode("a100-0", kAzureA100);
  Replica r(server_, "replica-1", true);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  // Every Lease write fails (the API server rejects them): past the renew deadline the
  // replica must stop changing state before anyone else could take over.
  server_.InjectFault(
      {.method = "PUT", .path_prefix = "/apis/coordination.k8s.io/", .times = 1000, .status = 500});
  EXPECT_TRUE(WaitFor([&] { return !r.Ready(); }, milliseconds(5'000)));
  const json pod = GpuPod(server_, "late", 1, 1);
  EXPECT_NE(Schedule(r, pod, {"a100-0"}).error.find("not the leader"), std::string::npos);
  server_.ClearFaults();
  EXPECT_TRUE(WaitFor([&] { return r.Ready(); }, milliseconds(5'000)));
}

// A hung API server (renewals never answer) must not keep a replica leading: each renewal
// times out, and the renew deadline passes before the lease duration.
TEST_F(KubeE2E, LeaderWhoseRenewalsHangStopsBinding) {
  AddNode("a100-0", kAzureA100);
  Replica r(server_, "replica-1", true);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const auto hung_at = std::chrono::steady_clock::now();
  server_.InjectFault({.method = "PUT",
                       .path_prefix = "/apis/coordination.k8s.io/",
                       .times = 1000,
                       .delay = milliseconds(3'000)});
  ASSERT_TRUE(WaitFor([&] { return !r.Ready(); }, milliseconds(5'000)));
  // Renew deadline 1 s + one timed-out request (250 ms) + a retry period: ~1.1 s here. Without
  // the per-request timeout the first hung renewal alone would hold it leading for 3 s.
  EXPECT_LT(std::chrono::steady_clock::now() - hung_at, milliseconds(2'900));
  server_.ClearFaults();
}

TEST_F(KubeE2E, StaleTopologyFailsClosedOrOpenAsConfigured) {
  for (const kube::StaleTopologyPolicy policy :
       {kube::StaleTopologyPolicy::kClosed, kube::StaleTopologyPolicy::kOpen}) {
    const bool closed = policy == kube::StaleTopologyPolicy::kClosed;
    SCOPED_TRACE(closed ? "closed" : "open");
    const std::string node = closed ? "stale-closed" : "stale-open";
    json n = testing::MakeNode(node);
    n["metadata"].erase("uid");
    server_.Create(kNodes, n);
    // The agent's last heartbeat was an hour ago.
    ASSERT_TRUE(Publish(node, kAzureA100, std::chrono::system_clock::now() - std::chrono::hours(1)).ok());
    kube::KubeSourceOptions options;
    options.stale_topology_age = std::chrono::minutes(15);
    options.stale_policy = policy;
    Replica r(server_, "replica-" + node, false, options);
    ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
    const json pod = GpuPod(server_, "on-" + node, 1, 1);
    const Scheduled s = Schedule(r, pod, {node});
    EXPECT_EQ(s.error.empty(), !closed) << s.error;
    if (closed) {
      // The agent reports again: the node is usable again.
      ASSERT_TRUE(Publish(node, kAzureA100).ok());
      EXPECT_TRUE(WaitFor([&] { return Schedule(r, pod, {node}).error.empty(); }));
    }
  }
}

TEST_F(KubeE2E, DeletedTopologyOrNodeTakesTheNodeOutOfPlacement) {
  AddNode("a100-0", kAzureA100);
  AddNode("a100-1", kAzureA100);
  Replica r(server_, "replica-0", false);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  // No NodeTopology: the node stays (labels, allocations) but gets no GPU pods.
  server_.Delete(kTopologies, "a100-0");
  ASSERT_TRUE(WaitFor([&] {
    const state::NodeRecord* rec = r.store.snapshot()->Find("a100-0");
    return rec != nullptr && rec->topology == nullptr;
  }));
  const json pod = GpuPod(server_, "p", 1, 1);
  EXPECT_FALSE(Schedule(r, pod, {"a100-0"}).error.empty());
  // The Node itself deleted: gone from the state.
  server_.Delete(kNodes, "a100-1");
  EXPECT_TRUE(WaitFor([&] { return r.store.snapshot()->Find("a100-1") == nullptr; }));
  // The agent publishes again: usable again.
  ASSERT_TRUE(Publish("a100-0", kAzureA100).ok());
  EXPECT_TRUE(WaitFor([&] { return Schedule(r, pod, {"a100-0"}).error.empty(); }));
}

// ---------------------------------------------------------------------------------------------
// RBAC: every request the agent and the extender made in a full run is granted by
// deploy/rbac.yaml to the role that runs it.

struct Grant {
  std::string group, resource, verb;
  auto operator<=>(const Grant&) const = default;
};

std::map<std::string, std::set<Grant>> RbacGrants() {
  const std::string text =
      testing::ReadFile(std::filesystem::path(TOPOSCHED_SOURCE_DIR) / "deploy/rbac.yaml");
  Result<std::vector<json>> docs = testing::YamlToJson(text);
  EXPECT_TRUE(docs.ok()) << docs.error().message();
  std::map<std::string, std::set<Grant>> grants;
  for (const json& doc : *docs) {
    if (doc.value("kind", "") != "ClusterRole" && doc.value("kind", "") != "Role") continue;
    for (const json& rule : doc["rules"]) {
      for (const json& g : rule["apiGroups"]) {
        for (const json& res : rule["resources"]) {
          for (const json& v : rule["verbs"]) grants[doc["metadata"]["name"]].insert({g, res, v});
        }
      }
    }
  }
  return grants;
}

TEST_F(KubeE2E, RbacGrantsEveryRequestTheComponentsMake) {
  const auto grants = RbacGrants();
  ASSERT_TRUE(grants.contains("toposched-agent"));
  ASSERT_TRUE(grants.contains("toposched-extender"));
  auto allowed_for_agent = [&](const Grant& g) { return grants.at("toposched-agent").contains(g); };
  auto allowed_for_extender = [&](const Grant& g) {
    return grants.at("toposched-extender").contains(g) ||
           (grants.contains("toposched-extender-leader") &&
            grants.at("toposched-extender-leader").contains(g));
  };

  // The agent: create, unchanged, heartbeat, changed hardware.
  json n = testing::MakeNode("gpu-0");
  n["metadata"].erase("uid");
  server_.Create(kNodes, n);
  server_.ClearRequests();
  const auto t0 = std::chrono::system_clock::now();
  ASSERT_TRUE(Publish("gpu-0", kAzureA100, t0).ok());
  ASSERT_TRUE(Publish("gpu-0", kAzureA100, t0 + std::chrono::minutes(6)).ok());
  ASSERT_TRUE(Publish("gpu-0", kNebiusH100, t0 + std::chrono::minutes(7)).ok());
  for (const testing::RequestRecord& rec : server_.requests()) {
    EXPECT_TRUE(allowed_for_agent({rec.group, rec.resource, rec.verb}))
        << "agent: " << rec.verb << " " << rec.group << "/" << rec.resource << " (" << rec.method << " "
        << rec.path << ") is not granted by deploy/rbac.yaml";
  }

  // The extender: elect, sync, bind (with HAMi's node lock), fail a Binding, see a pod Ready.
  // HAMi's device plugin registered the node (UUIDs), so a GPU bind takes the lock.
  json registered = *server_.Get(kNodes, "gpu-0");
  registered["metadata"]["annotations"][std::string(kube::kHamiNodeRegister)] =
      HamiRegistration("GPU-r-").dump();
  server_.Upsert(kNodes, registered);
  server_.ClearRequests();
  kube::KubeSourceOptions options;
  options.hami_node_lock = kube::HamiNodeLockMode::kOn;
  {
    Replica r(server_, "replica-0", true, options);
    ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
    const json pod = GpuPod(server_, "p", 2, 2);
    ASSERT_TRUE(Schedule(r, pod, {"gpu-0"}).error.empty());
    json unlocked = *server_.Get(kNodes, "gpu-0");
    unlocked["metadata"]["annotations"].erase("hami.io/mutex.lock");
    server_.Upsert(kNodes, unlocked);
    server_.InjectFault({.method = "POST",
                         .path_prefix = "/api/v1/namespaces/default/pods/q/binding",
                         .times = 50,
                         .status = 500});
    const json q = GpuPod(server_, "q", 1, 1);
    EXPECT_FALSE(Schedule(r, q, {"gpu-0"}).error.empty());
    server_.ClearFaults();
    // Volcano's allocate writes its annotations with a patch (Volcano binds later itself).
    json unlocked_again = *server_.Get(kNodes, "gpu-0");
    unlocked_again["metadata"]["annotations"].erase("hami.io/mutex.lock");
    server_.Upsert(kNodes, unlocked_again);
    const json v = GpuPod(server_, "v", 1, 1);
    EXPECT_EQ(json::parse(r.Call("/volcano/allocate", VolcanoEvent(v, "gpu-0", 1, 1)).second)["errorMessage"],
              "");
    json ready = *server_.Get(kPods, "p");
    ready["status"]["conditions"] = {{{"type", "Ready"}, {"status", "True"}}};
    server_.Upsert(kPods, ready);
    ASSERT_TRUE(WaitFor([&] { return !server_.List("/api/v1/namespaces/default/events").empty(); }));
  }
  std::set<Grant> used;
  for (const testing::RequestRecord& rec : server_.requests()) {
    if (rec.user_agent.find("toposched") == std::string::npos) continue;
    used.insert({rec.group, rec.resource, rec.verb});
    EXPECT_TRUE(allowed_for_extender({rec.group, rec.resource, rec.verb}))
        << "extender: " << rec.verb << " " << rec.group << "/" << rec.resource << " (" << rec.method << " "
        << rec.path << ") is not granted by deploy/rbac.yaml";
  }
  // And the core of what it needs was exercised (a test that saw nothing proves nothing).
  for (const Grant& g :
       {Grant{"", "pods", "watch"}, Grant{"", "pods", "patch"}, Grant{"", "pods/binding", "create"},
        Grant{"", "nodes", "update"}, Grant{"toposched.io", "nodetopologies", "watch"},
        Grant{"coordination.k8s.io", "leases", "update"}, Grant{"", "events", "create"}}) {
    EXPECT_TRUE(used.contains(g)) << g.verb << " " << g.group << "/" << g.resource << " never happened";
  }
}

// ---------------------------------------------------------------------------------------------
// Dynamic Resource Allocation (serve --dra).

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
constexpr char kClaims[] = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
constexpr char kClaimTemplates[] = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates";
constexpr char kDeviceClasses[] = "/apis/resource.k8s.io/v1/deviceclasses";

// A ResourceSlice of one node's pool as NVIDIA's GPU driver (gpu-<i>, type "gpu", the standard
// pciBusID) or DRANET (pci-<address>, dra.net/pciAddress, dra.net/rdma) publishes it.
json SliceObject(const std::string& node, const std::string& driver, const json& devices) {
  return {{"metadata", {{"name", node + "-" + driver}}},
          {"spec",
           {{"driver", driver},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"devices", devices}}}};
}
json GpuDevice(const std::string& name, const std::string& bus) {
  return {{"name", name},
          {"attributes",
           {{"type", {{"string", "gpu"}}}, {"resource.kubernetes.io/pciBusID", {{"string", bus}}}}}};
}
json NicDevice(const std::string& bus) {
  std::string name = "pci-" + bus;
  std::replace(name.begin(), name.end(), ':', '-');
  std::replace(name.begin(), name.end(), '.', '-');
  return {{"name", name},
          {"attributes", {{"dra.net/pciAddress", {{"string", bus}}}, {"dra.net/rdma", {{"bool", true}}}}}};
}
// A claim the DRA plugin allocated on `node`: each result (request, driver, device).
json AllocatedClaim(const std::string& name, const std::string& node,
                    const std::vector<std::array<std::string, 3>>& results) {
  json r = json::array();
  for (const auto& [request, driver, device] : results) {
    r.push_back({{"request", request}, {"driver", driver}, {"pool", node}, {"device", device}});
  }
  return {{"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec",
           {{"devices",
             {{"requests",
               json::array({{{"name", "gpus"},
                             {"exactly", {{"deviceClassName", "gpu.nvidia.com"}, {"count", 2}}}}})}}}}},
          {"status",
           {{"allocation",
             {{"devices", {{"results", r}}},
              {"nodeSelector",
               {{"nodeSelectorTerms",
                 json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                             {"operator", "In"},
                                                             {"values", json::array({node})}}})}}})}}}}}}}};
}

TEST_F(KubeE2E, DraClaimsHoldTheirDevicesAndClaimPodsAreRanked) {
  AddNode("a100-0", kAzureA100);
  server_.Create(
      kDeviceClasses,
      {{"metadata", {{"name", "gpu.nvidia.com"}}},
       {"spec",
        {{"selectors", json::array({{{"cel",
                                      {{"expression",
                                        "device.driver == 'gpu.nvidia.com' && "
                                        "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}}}})}}}});
  server_.Create(
      kDeviceClasses,
      {{"metadata", {{"name", "dranet"}}},
       {"spec",
        {{"selectors", json::array({{{"cel", {{"expression", "device.driver == \"dra.net\""}}}}})}}}});
  kube::KubeSourceOptions options;
  options.dra = true;
  auto r = std::make_unique<Replica>(server_, "replica-0", false, options);
  ASSERT_TRUE(WaitFor([&] { return r->Ready(); }));
  const std::shared_ptr<const NodeTopology> t = r->store.snapshot()->Find("a100-0")->topology;
  ASSERT_NE(t, nullptr);
  ASSERT_GE(t->gpus.size(), 8u);
  int rdma = -1;
  for (std::size_t n = 0; n < t->nics.size() && rdma < 0; ++n) {
    if (t->nics[n].rdma && !t->nics[n].pci_bus_id.empty()) rdma = static_cast<int>(n);
  }
  ASSERT_GE(rdma, 0);
  json gpus = json::array();
  for (std::size_t g = 0; g < t->gpus.size(); ++g) {
    gpus.push_back(GpuDevice("gpu-" + std::to_string(g), t->gpus[g].pci_bus_id));
  }
  gpus.push_back(GpuDevice("gpu-99", "0000:ff:1f.7"));  // a GPU the topology does not have
  server_.Create(kSlices, SliceObject("a100-0", "gpu.nvidia.com", gpus));
  server_.Create(kSlices,
                 SliceObject("a100-0", "dra.net", json::array({NicDevice(t->nics[rdma].pci_bus_id)})));
  const std::string nic_device = NicDevice(t->nics[rdma].pci_bus_id)["name"];

  // An allocated claim: two GPUs and the NIC, counted as taken.
  const json claim = server_.Create(kClaims, AllocatedClaim("train-0", "a100-0",
                                                            {{"gpus", "gpu.nvidia.com", "gpu-2"},
                                                             {"gpus", "gpu.nvidia.com", "gpu-5"},
                                                             {"nic", "dra.net", nic_device}}));
  const std::string claim_uid = "resourceclaim/" + claim["metadata"]["uid"].get<std::string>();
  const auto counted = [&] {
    const std::optional<state::PodAllocation> a = r->store.FindPod(claim_uid);
    return a && a->hold.empty() && a->delta.exclusive_gpus == std::vector<int>{2, 5} &&
           a->delta.nics == std::vector<int>{rdma};
  };
  ASSERT_TRUE(WaitFor([&] { return counted(); }));

  // A device-plugin pod never gets them: 8 GPUs do not fit, 6 do, on the other six.
  EXPECT_FALSE(Schedule(*r, GpuPod(server_, "eight", 8, 0), {"a100-0"}).error.empty());
  const json six = GpuPod(server_, "six", 6, 0);
  ASSERT_EQ(Schedule(*r, six, {"a100-0"}).node, "a100-0");
  const std::optional<state::PodAllocation> six_a =
      r->store.FindPod(six["metadata"]["uid"].get<std::string>());
  ASSERT_TRUE(six_a.has_value());
  for (const int g : six_a->delta.exclusive_gpus) EXPECT_TRUE(g != 2 && g != 5) << "GPU " << g;

  // A device toposched cannot map is reported, never guessed.
  server_.Create(kClaims, AllocatedClaim("odd", "a100-0", {{"gpus", "gpu.nvidia.com", "gpu-99"}}));
  ASSERT_TRUE(WaitFor([&] {
    return r->Call("/nodes", "", "GET").second.find("\"draUnmappedDevices\": 1") != std::string::npos;
  }));
  EXPECT_NE(r->Call("/metrics", "", "GET").second.find("toposched_dra_unmapped_devices 1"),
            std::string::npos);

  // A pod whose GPUs come from a claim template reaches prioritize-cpu and is ranked there.
  server_.Create(
      kClaimTemplates,
      {{"metadata", {{"name", "two-gpus"}, {"namespace", "default"}}},
       {"spec",
        {{"spec",
          {{"devices",
            {{"requests",
              json::array({{{"name", "gpus"},
                            {"exactly", {{"deviceClassName", "gpu.nvidia.com"}, {"count", 2}}}}})}}}}}}}});
  json dra_pod = testing::MakePod({.name = "dra-pod"});
  dra_pod["spec"]["resourceClaims"] =
      json::array({{{"name", "gpus"}, {"resourceClaimTemplateName", "two-gpus"}}});
  ASSERT_TRUE(WaitFor([&] {
    const auto [status, body] =
        r->Call("/scheduler/prioritize-cpu", testing::ExtenderArgs(dra_pod, {"a100-0"}));
    return status == 200 && body.find("a100-0") != std::string::npos;
  }));

  // A restarted extender counts the claims again before it is ready.
  r.reset();
  r = std::make_unique<Replica>(server_, "replica-1", false, options);
  ASSERT_TRUE(WaitFor([&] { return r->Ready(); }));
  EXPECT_TRUE(counted());

  // A deleted claim gives its devices back.
  ASSERT_TRUE(server_.Delete(kClaims, "train-0"));
  ASSERT_TRUE(WaitFor([&] { return !r->store.FindPod(claim_uid).has_value(); }));
}

// A claim read before its devices' slice is counted when the slice comes; a claim whose device a
// toposched pod already holds keeps the node out of new placements (two owners: fail closed).
TEST_F(KubeE2E, DraClaimsBeforeTheirSlicesAndOnHeldDevices) {
  AddNode("a100-0", kAzureA100);
  kube::KubeSourceOptions options;
  options.dra = true;
  Replica r(server_, "replica-0", false, options);
  ASSERT_TRUE(WaitFor([&] { return r.Ready(); }));
  const std::shared_ptr<const NodeTopology> t = r.store.snapshot()->Find("a100-0")->topology;
  ASSERT_NE(t, nullptr);

  const json claim =
      server_.Create(kClaims, AllocatedClaim("early", "a100-0", {{"gpus", "gpu.nvidia.com", "gpu-1"}}));
  const std::string uid = "resourceclaim/" + claim["metadata"]["uid"].get<std::string>();
  ASSERT_TRUE(WaitFor([&] {
    return r.Call("/metrics", "", "GET").second.find("toposched_dra_pending_claims 1") != std::string::npos;
  }));
  EXPECT_FALSE(r.store.FindPod(uid).has_value());
  json gpus = json::array();
  for (std::size_t g = 0; g < t->gpus.size(); ++g) {
    gpus.push_back(GpuDevice("gpu-" + std::to_string(g), t->gpus[g].pci_bus_id));
  }
  server_.Create(kSlices, SliceObject("a100-0", "gpu.nvidia.com", gpus));
  ASSERT_TRUE(WaitFor([&] {
    const std::optional<state::PodAllocation> a = r.store.FindPod(uid);
    return a && a->delta.exclusive_gpus == std::vector<int>{1};
  }));

  // A toposched pod takes the seven other GPUs; a second claim then names one of them.
  const json seven = GpuPod(server_, "seven", 7, 0);
  ASSERT_EQ(Schedule(r, seven, {"a100-0"}).node, "a100-0");
  const std::optional<state::PodAllocation> seven_a =
      r.store.FindPod(seven["metadata"]["uid"].get<std::string>());
  ASSERT_TRUE(seven_a.has_value());
  const int taken = seven_a->delta.exclusive_gpus.front();
  server_.Create(kClaims, AllocatedClaim("clash", "a100-0",
                                         {{"gpus", "gpu.nvidia.com", "gpu-" + std::to_string(taken)}}));
  ASSERT_TRUE(WaitFor([&] { return !r.store.snapshot()->Find("a100-0")->held_pods.empty(); }));
  // Held: no new device placement on the node, even for a pod that would fit its free devices.
  ASSERT_TRUE(server_.Delete(kClaims, "early"));
  EXPECT_FALSE(Schedule(r, GpuPod(server_, "one", 1, 0), {"a100-0"}).error.empty());
  // The claim gone, the hold goes with it.
  ASSERT_TRUE(server_.Delete(kClaims, "clash"));
  ASSERT_TRUE(WaitFor([&] { return r.store.snapshot()->Find("a100-0")->held_pods.empty(); }));
  EXPECT_EQ(Schedule(r, GpuPod(server_, "two", 1, 0), {"a100-0"}).node, "a100-0");
}

}  // namespace
}  // namespace toposched
