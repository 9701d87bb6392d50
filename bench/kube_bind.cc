// The Kubernetes-mode bind, measured against its floor (docs/benchmarks.md, "Kubernetes
// bind"). Side by side in one run, against the fake API server on loopback through the real
// cpprestsdk transport:
//   ours:  kube-scheduler's bind verb, in process: re-decide under the node's lock, then one
//          Binding that carries the pod's annotations (and the store's bookkeeping);
//   floor: the same API call made directly (a Binding with the same annotations) for another
//          pod: what any extender that binds and records its choice must pay.
// Both sides talk to the same server, so its cost (and loopback) is in both; the ratio is what
// the extender adds. Also: the extender's time to sync and be ready with N nodes and M pods.
//
// usage: toposched_kube_bind [--nodes N] [--pods M]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugins/registry.h"
#include "testing/fake_apiserver.h"
#include "testing/k8s_payloads.h"
#include "toposched/extender/service.h"
#include "toposched/framework/framework.h"
#include "toposched/kube/api.h"
#include "toposched/kube/objects.h"
#include "toposched/kube/source.h"
#include "toposched/kube/transport.h"
#include "toposched/metrics/metrics.h"
#include "toposched/state/cluster_state.h"
#include "toposched/topology/synthetic.h"

namespace {

using namespace toposched;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

struct Stats {
  double p50 = 0, p99 = 0;
};
Stats Summarize(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)]};
}

constexpr char kPods[] = "/api/v1/namespaces/bench/pods";

json NewPod(testing::FakeApiServer& server, const std::string& name, int gpus) {
  testing::PodSpec spec;
  spec.name = name;
  spec.ns = "bench";
  spec.gpus = gpus;
  spec.rdma = gpus;
  json pod = testing::MakePod(spec);
  pod["metadata"].erase("uid");
  return server.Create(kPods, pod);
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 200, pods = 400;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--nodes")
      nodes = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--pods")
      pods = std::max(1, std::atoi(argv[i + 1]));
  }
  testing::FakeApiServer server;
  server.Start();
  const NodeTopology hgx = GenerateSynthetic(SyntheticPreset("hgx-h100-8gpu").value()).value();
  const auto now = std::chrono::system_clock::now();
  for (int i = 0; i < nodes; ++i) {
    const std::string name = "gpu-" + std::to_string(i);
    json node = testing::MakeNode(name);
    node["metadata"].erase("uid");
    const json created = server.Create("/api/v1/nodes", node);
    server.Create(std::string(kube::kNodeTopologyCollection),
                  kube::NodeTopologyObject(hgx, name, created["metadata"]["uid"].get<std::string>(), 1, now));
  }
  // Running pods already holding devices: a quarter of the GPUs, so the sync restores them.
  for (int i = 0; i < nodes; ++i) {
    json pod = NewPod(server, "running-" + std::to_string(i), 2);
    state::PodAllocation a;
    a.uid = pod["metadata"]["uid"];
    a.pod_namespace = "bench";
    a.pod_name = pod["metadata"]["name"];
    a.node = "gpu-" + std::to_string(i);
    a.delta.exclusive_gpus = {0, 1};
    a.delta.nics = {0, 1};
    pod["metadata"]["annotations"][std::string(kube::kAllocationAnnotation)] =
        kube::EncodeAllocation(a, hgx, "toposched").allocation;
    pod["spec"]["nodeName"] = a.node;
    pod["status"]["phase"] = "Running";
    server.Upsert(kPods, pod);
  }

  kube::ClientConfig config;
  config.server = server.url();
  std::unique_ptr<kube::Transport> transport = kube::MakeRestTransport(config).value();
  kube::Api api(*transport);
  const framework::Registry registry = plugins::BuiltinRegistry();
  const framework::Framework fw =
      framework::Framework::Create(plugins::DefaultSchedulerConfig(), registry).value();
  metrics::Registry metrics;
  state::ClusterStore store(nullptr);
  kube::KubeSource source(api, store, metrics, {}, nullptr);
  store.SetPersistence(&source);
  extender::ExtenderService service(fw, store, metrics, {}, nullptr, &source);
  const auto sync_start = Clock::now();
  source.Start();
  if (!source.WaitUntilReady(std::chrono::seconds(60))) {
    std::fprintf(stderr, "not ready after 60 s\n");
    return 1;
  }
  const double sync_ms = Micros(Clock::now() - sync_start) / 1000;
  // The floor of a sync: the three bare LISTs of the same objects through the same transport.
  const auto list_start = Clock::now();
  std::size_t listed = 0;
  for (const std::string& path :
       {kube::CorePath("nodes"), std::string(kube::kNodeTopologyCollection), kube::CorePath("pods")}) {
    listed += api.List(path).value().items.size();
  }
  const double list_ms = Micros(Clock::now() - list_start) / 1000;
  std::printf(
      "sync: %d nodes, %d running pods: ready after %.1f ms (%zu allocations restored) | floor (bare "
      "LISTs of the same %zu objects) %.1f ms | ratio %.2fx\n",
      nodes, nodes, sync_ms, store.pod_count(), listed, list_ms, sync_ms / list_ms);

  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) names.push_back("gpu-" + std::to_string(i));
  std::vector<double> ours, floor;
  for (int i = 0; i < pods; ++i) {
    // ours: filter (untimed, it is measured in extender_load), then the timed bind.
    const json pod = NewPod(server, "p-" + std::to_string(i), 1);
    server::HttpResponse resp;
    const std::string filter =
        testing::ExtenderArgs(pod, {names[static_cast<std::size_t>(i) % names.size()]});
    service.Handle({"POST", "/scheduler/filter", "application/json", filter, "bench"}, resp);
    const json bind = {{"PodName", pod["metadata"]["name"]},
                       {"PodNamespace", "bench"},
                       {"PodUID", pod["metadata"]["uid"]},
                       {"Node", names[static_cast<std::size_t>(i) % names.size()]}};
    const std::string bind_body = bind.dump();
    auto t0 = Clock::now();
    service.Handle({"POST", "/scheduler/bind", "application/json", bind_body, "bench"}, resp);
    ours.push_back(Micros(Clock::now() - t0));
    if (resp.body.find("\"Error\":\"\"") == std::string::npos) {
      std::fprintf(stderr, "bind %d failed: %s\n", i, resp.body.c_str());
      return 1;
    }
    // floor: another pod's Binding with the same annotations, directly.
    const json other = NewPod(server, "f-" + std::to_string(i), 1);
    // Same values under other keys, so that the extender's informer does not read the floor
    // pods as claiming the same devices.
    json annotations = json::object();
    for (const auto& [key, value] : server.Get(kPods, pod["metadata"]["name"].get<std::string>())
                                        .value()["metadata"]["annotations"]
                                        .items()) {
      annotations["floor.bench/" + key.substr(key.find('/') + 1)] = value;
    }
    t0 = Clock::now();
    Status bound = api.CreateBinding("bench", other["metadata"]["name"], other["metadata"]["uid"],
                                     names[static_cast<std::size_t>(i) % names.size()], annotations);
    floor.push_back(Micros(Clock::now() - t0));
    if (!bound.ok()) {
      std::fprintf(stderr, "floor %d failed\n", i);
      return 1;
    }
  }
  const Stats o = Summarize(ours), f = Summarize(floor);
  std::printf(
      "bind (%d pods, %d nodes): ours p50 %.0f us p99 %.0f us | floor (one Binding with the annotations) p50 "
      "%.0f us "
      "p99 %.0f us | ratio p50 %.2fx\n",
      pods, nodes, o.p50, o.p99, f.p50, f.p99, o.p50 / f.p50);
  source.Stop();
  return 0;
}
