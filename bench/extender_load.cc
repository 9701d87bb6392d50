// Load benchmark of the extender (docs/benchmarks.md, "Extender"). Prints, side by side in one
// run on one machine:
//   1. in process: the filter and prioritize handlers vs the bare parse + serialize of the same
//      bodies (the floor: WireReader + the reply writer, no scheduling), 500 and 5,000 names;
//   2. over HTTP (loopback, keep-alive, our own client): filter+prioritize round trips against
//      the real server vs the same server running the floor handler;
//   3. Volcano predicate calls per second from concurrent keep-alive clients.
// Every pod is new (fresh UID): its filter parses the Pod, its prioritize hits the pod cache,
// as in production. The pods ask the same, as a Deployment's do, so a node class evaluated for
// one pod serves the next (Evaluator::VerdictsFor); with --new-shapes each pod asks something no
// pod asked before (its own toposched.io/prompt-tokens), and evaluates every class anew. The
// cluster is 5,000 synthetic nodes (90% HGX H100, 10% PCIe 4-GPU), a third of them partly
// allocated, so the filter sees several node classes.
//
// `--only rare`: a rare node class (docs/placement.md), the rule on and off, side by side.
// `--cpu-bound PCT`: every node has its allocatable CPU (220 cores HGX, 64 PCIe) and PCT % of
// them so little left (0.1-7.9 cores, each its own milli value) that it binds the packing score
// of the bench's 4-core pods (Evaluator::CpuBound: 4 cores + the typical pods' 4): those nodes
// are scored one by one. Without it nodes carry no CPU (the file source), as before.
// `--only cpu-pods`: prioritize-cpu for a pod that asks no device and for a GPU pod (CpuPods).
// `--only store`: one pod's CPU request set and taken back (ClusterStore::SetPodCpu, what each
// bound pod's event costs) beside a device bind and release, at 5,000 nodes.
//
// usage: toposched_extender_load [--iterations N] [--seconds S] [--clients C] [--only PART] [--every-label]
//                                [--shared-topologies] [--kube-order] [--churn] [--new-shapes]
//                                [--cpu-bound PCT]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugins/registry.h"
#include "testing/http_client.h"
#include "testing/k8s_payloads.h"
#include "toposched/extender/service.h"
#include "toposched/framework/allocation.h"
#include "toposched/server/http_server.h"
#include "toposched/state/cluster_state.h"
#include "toposched/topology/synthetic.h"
#include "toposched/wire/wire.h"

namespace {

using namespace toposched;
using Clock = std::chrono::steady_clock;
using testing::PodSpec;

struct Stats {
  double p50_us = 0, p99_us = 0, mean_us = 0;
};

Stats Summarize(std::vector<double> us) {
  Stats s;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  s.p50_us = us[us.size() / 2];
  s.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  double sum = 0;
  for (double v : us) sum += v;
  s.mean_us = sum / static_cast<double>(us.size());
  return s;
}

std::shared_ptr<const NodeTopology> Preset(const char* name) {
  return std::make_shared<const NodeTopology>(GenerateSynthetic(SyntheticPreset(name).value()).value());
}

// `uuids`: every node's topology its own, with its own GPU UUIDs, as the agent publishes them
// (NVML) and HAMi's registration names them; false: nodes of one type share one topology.
// `rare_class`: seven HGX nodes in eight have 4 RDMA NICs instead of 8 (one per switch), so
// only every eighth node can run an 8-GPU, 8-NIC pod: a rare node class (docs/placement.md).
int g_cpu_bound_pct = -1;  // --cpu-bound; -1: nodes carry no CPU

// --cpu-bound: is node i one of the PCT % whose free CPU binds, and its allocatable CPU.
bool CpuBinds(int i) {
  return (static_cast<std::uint64_t>(i) * 2654435761u >> 7) % 100 <
         static_cast<std::uint64_t>(g_cpu_bound_pct);
}
std::int64_t CpuAllocatable(int i) {
  return i % 10 == 9 ? 64'000 : 220'000;
}

void Populate(state::ClusterStore& store, int nodes, bool uuids, bool rare_class = false) {
  auto hgx = Preset("hgx-h100-8gpu");
  auto pcie = Preset("pcie-4gpu");
  std::shared_ptr<const NodeTopology> four_nics = hgx;
  if (rare_class) {
    SyntheticSpec spec = SyntheticPreset("hgx-h100-8gpu").value();
    spec.nics_per_switch = 1;
    four_nics = std::make_shared<const NodeTopology>(GenerateSynthetic(spec).value());
  }
  std::vector<state::NodeSpec> specs;
  for (int i = 0; i < nodes; ++i) {
    // As in a real cluster: every node carries its own kubernetes.io/hostname, and its network
    // position (16-node leaves, 256-node spines).
    const std::string name = "gpu-node-" + std::to_string(i);
    std::shared_ptr<const NodeTopology> topology = i % 10 == 9 ? pcie : i % 8 == 0 ? hgx : four_nics;
    if (uuids) {
      auto own = std::make_shared<NodeTopology>(*topology);
      for (std::size_t g = 0; g < own->gpus.size(); ++g) {
        char uuid[64];
        std::snprintf(uuid, sizeof uuid, "GPU-%08x-%04zx-4000-8000-000000000000", i, g);
        own->gpus[g].uuid = uuid;
      }
      topology = std::move(own);
    }
    specs.push_back({name,
                     std::move(topology),
                     {{"topology.kubernetes.io/zone", "zone-a"},
                      {"kubernetes.io/hostname", name},
                      {"toposched.io/leaf", "leaf-" + std::to_string(i / 16)},
                      {"toposched.io/spine", "spine-" + std::to_string(i / 256)}},
                     true,
                     g_cpu_bound_pct >= 0 ? CpuAllocatable(i) : -1});
  }
  (void)store.UpsertNodes(std::move(specs));
  if (g_cpu_bound_pct >= 0) {
    // Each node's other pods: a binding node keeps 0.1-7.9 cores, each its own milli value
    // (pods ask 250m, 1500m, ...: free CPU rarely repeats); the others keep half their CPU.
    std::vector<state::ClusterStore::PodCpu> cpu;
    for (int i = 0; i < nodes; ++i) {
      const std::int64_t left =
          CpuBinds(i) ? 100 + (static_cast<std::int64_t>(i) * 7919) % 7800 : CpuAllocatable(i) / 2;
      cpu.push_back({"cpu-" + std::to_string(i), "gpu-node-" + std::to_string(i), CpuAllocatable(i) - left});
    }
    store.SetPodCpus(cpu);
  }
  for (int i = 0; i < nodes; ++i) {
    const std::string name = "gpu-node-" + std::to_string(i);
    if (i % 3 != 0) continue;
    // A third of the nodes hold 1..4 whole GPUs: several node classes, as in a running cluster.
    const int k = 1 + (i / 3) % 4;
    (void)store.Bind(name, "pre-" + std::to_string(i),
                     [&](const state::NodeRecord& rec) -> Result<state::PodAllocation> {
                       state::PodAllocation a;
                       a.uid = "pre-" + std::to_string(i);
                       a.node = rec.name;
                       a.pod_namespace = "bench";
                       a.pod_name = a.uid;
                       for (int g = 0; g < k && g < static_cast<int>(rec.topology->gpus.size()); ++g)
                         a.delta.exclusive_gpus.push_back(g);
                       return a;
                     });
  }
  store.SetSynced(true);
}

// A Prefill/Decode pool "chat" of 64 prefill and 128 decode instances (2 GPUs + 2 NICs each, on
// GPUs 6 and 7), for the pool-pod measurement. `spread`: one every 23 nodes, in most leaves of
// the cluster (the worst case for sharing results); otherwise every other node of the first 24
// leaves, gathered as KvTransferCost gathers a pool.
std::vector<state::PodAllocation> AddPool(state::ClusterStore& store, bool spread) {
  std::vector<state::PodAllocation> pods;
  int placed = 0;
  for (int i = spread ? 5 : 0; placed < 192; i += spread ? 23 : 2) {
    if (i % 10 == 9) continue;  // the PCIe nodes have 4 GPUs
    const std::string name = "gpu-node-" + std::to_string(i % 5000);
    const std::string uid = "pool-" + std::to_string(placed);
    const PodRole role = placed < 64 ? PodRole::kPrefill : PodRole::kDecode;
    const auto bound =
        store.Bind(name, uid, [&](const state::NodeRecord& rec) -> Result<state::PodAllocation> {
          state::PodAllocation a;
          a.uid = uid;
          a.node = rec.name;
          a.pod_namespace = "llm";
          a.pod_name = uid;
          a.role = role;
          a.pool = "chat";
          a.delta.exclusive_gpus = {6, 7};
          a.delta.nics = {6, 7};
          return a;
        });
    if (bound.ok()) {
      pods.push_back(bound->allocation);
      ++placed;
    }
  }
  return pods;
}

std::vector<std::string> Names(int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back("gpu-node-" + std::to_string(i));
  return v;
}

// --kube-order: each call's names in the order the real kube-scheduler sends them, not one fixed
// order. Its node tree lists one zone's nodes in the order they were added (the informer's first
// LIST: by name); findNodesThatPassFilters starts where the last cycle stopped and its 16
// workers take chunks of about sqrt(n) nodes, appending each node that passes as they go
// (pkg/scheduler/schedule_one.go, util/parallelize), so the workers' runs interleave.
bool g_kube_order = false;

std::vector<std::string> KubeOrder(std::vector<std::string> names, std::uint64_t seed) {
  std::sort(names.begin(), names.end());
  std::mt19937_64 rng(seed);
  std::rotate(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(rng() % names.size()), names.end());
  const std::size_t n = names.size();
  std::size_t chunk = static_cast<std::size_t>(std::sqrt(static_cast<double>(n)));
  chunk = std::max<std::size_t>(1, std::min(chunk, n / 16 + 1));
  struct Worker {
    std::size_t at = 0, end = 0;
  };
  std::vector<Worker> workers;
  std::size_t next_chunk = 0;
  auto take = [&](Worker& w) {
    if (next_chunk >= n) return false;
    w.at = next_chunk;
    w.end = std::min(n, next_chunk + chunk);
    next_chunk = w.end;
    return true;
  };
  for (int i = 0; i < 16; ++i) {
    Worker w;
    if (take(w)) workers.push_back(w);
  }
  std::vector<std::string> out;
  out.reserve(n);
  while (!workers.empty()) {
    const std::size_t k = rng() % workers.size();
    Worker& w = workers[k];
    out.push_back(std::move(names[w.at++]));
    if (w.at == w.end && !take(w)) workers.erase(workers.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return out;
}

// pool: a decode pod of the pool "chat" (AddPool).
bool g_new_shapes = false;
std::string PodBody(int i, const std::vector<std::string>& names, bool pool = false) {
  PodSpec p{.name = "bench-" + std::to_string(i),
            .ns = "llm",
            .uid = "bench-uid-" + std::to_string(i),
            .gpus = 2,
            .rdma = 2};
  if (g_new_shapes) p.annotations = {{"toposched.io/prompt-tokens", std::to_string(1 + i % 9000000)}};
  if (pool) p.labels = {{"llm-d.ai/role", "decode"}, {"toposched.io/pool", "chat"}};
  return testing::ExtenderArgs(testing::MakePod(p),
                               g_kube_order ? KubeOrder(names, static_cast<std::uint64_t>(i)) : names);
}

// The floor: parse the body with the same reader and write a reply naming every node.
void FloorHandler(extender::WireReader& reader, std::string_view path, std::string_view body,
                  std::string& out) {
  auto args = reader.ReadExtenderArgs(body);
  out.clear();
  if (!args.ok()) return;
  if (path.ends_with("/prioritize")) {
    std::vector<extender::HostScore> scores;
    scores.reserve(args->nodes.size());
    for (const auto& n : args->nodes) scores.push_back({n.name, 5});
    extender::WriteHostPriorityList(out, scores);
  } else {
    extender::WriteFilterResult(out, false, args->nodes, {}, {}, "");
  }
}

// The store as `serve` makes it (node classes hash no labels). With `every_label`
// (--every-label), every label counts, the hostname too, as before 2026-12-03: every node is
// then a class of its own.
state::StoreOptions StoreFor(const framework::SchedulerConfig& config, bool every_label) {
  state::StoreOptions options = extender::StoreOptionsFor(config);
  if (every_label) options.class_labels.reset();
  return options;
}

struct World {
  enum class Pool { kNone, kGathered, kSpread };
  explicit World(bool every_label, bool uuids, Pool pool = Pool::kNone, bool rare_class = false,
                 framework::SchedulerConfig config = plugins::DefaultSchedulerConfig())
      : framework(framework::Framework::Create(std::move(config), plugins::BuiltinRegistry()).value()),
        store(nullptr, StoreFor(framework.config(), every_label)) {
    Populate(store, 5000, uuids, rare_class);
    if (pool != Pool::kNone) pool_pods = AddPool(store, pool == Pool::kSpread);
    service =
        std::make_unique<extender::ExtenderService>(framework, store, metrics, extender::ExtenderOptions{});
  }
  framework::Framework framework;
  state::ClusterStore store;
  metrics::Registry metrics;
  std::unique_ptr<extender::ExtenderService> service;
  std::vector<state::PodAllocation> pool_pods;
};

// --churn: between two timed calls one pool pod leaves and binds again where it was, as when
// kube-scheduler places a Deployment's pods one after another: every call then sees a new
// snapshot and a pool that changed since the last call (nothing keyed on either is reused),
// and the pool ends each step as it began, so the figures stay comparable.
bool g_churn = false;
void Churn(World& w, int step) {
  if (!g_churn || w.pool_pods.empty()) return;
  const state::PodAllocation& p = w.pool_pods[static_cast<std::size_t>(step) % w.pool_pods.size()];
  if (!w.store.Release(p.uid, false).ok()) std::exit(2);
  const auto bound = w.store.Bind(
      p.node, p.uid, [&](const state::NodeRecord&) -> Result<state::PodAllocation> { return p; });
  if (!bound.ok()) {
    std::fprintf(stderr, "bench: churn bind failed: %s\n", bound.error().message().c_str());
    std::exit(2);
  }
}

// `label` (optional) names the run in its line.
void InProcess(World& w, int names_count, int iterations, const char* pool = nullptr,
               const char* label = nullptr) {
  const std::vector<std::string> names = Names(names_count);
  std::vector<std::string> bodies;
  for (int i = 0; i < iterations; ++i)
    bodies.push_back(PodBody(names_count * 10000 + i, names, pool != nullptr));
  std::vector<double> ours_f, ours_p, floor_f, floor_p;
  extender::WireReader reader;
  std::string out;
  server::HttpResponse rs;  // reused, as the floor reuses `out`
  for (int i = 0; i < iterations; ++i) {
    server::HttpRequest rq{"POST", "/scheduler/filter", "application/json", bodies[i], "bench"};
    auto t0 = Clock::now();
    FloorHandler(reader, "/scheduler/filter", bodies[i], out);
    auto t1 = Clock::now();
    FloorHandler(reader, "/scheduler/prioritize", bodies[i], out);
    auto t2 = Clock::now();
    w.service->Handle(rq, rs);
    auto t3 = Clock::now();
    rq.target = "/scheduler/prioritize";
    w.service->Handle(rq, rs);
    auto t4 = Clock::now();
    if (rs.status != 200) {
      std::fprintf(stderr, "bench: prioritize failed: %s\n", rs.body.c_str());
      std::exit(1);
    }
    floor_f.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    floor_p.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    ours_f.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
    ours_p.push_back(std::chrono::duration<double, std::micro>(t4 - t3).count());
    Churn(w, i);
  }
  const Stats of = Summarize(ours_f), op = Summarize(ours_p), ff = Summarize(floor_f),
              fp = Summarize(floor_p);
  std::vector<double> ours_sum, floor_sum;
  for (int i = 0; i < iterations; ++i) {
    ours_sum.push_back(ours_f[i] + ours_p[i]);
    floor_sum.push_back(floor_f[i] + floor_p[i]);
  }
  const Stats os = Summarize(ours_sum), fs = Summarize(floor_sum);
  std::printf(
      "in-process%s%s%s%s%s %5d names (body %zu B): filter p50 %7.1f us p99 %7.1f | prioritize p50 %7.1f p99 "
      "%7.1f | "
      "floor filter p50 %6.1f prioritize p50 %6.1f | filter+prioritize p50 %7.1f vs floor %6.1f = %.2fx, "
      "p99 %7.1f vs %6.1f\n",
      pool ? ", pool pod, pool " : "", pool ? pool : "", pool && g_churn ? " (churn)" : "", label ? ", " : "",
      label ? label : "", names_count, bodies[0].size(), of.p50_us, of.p99_us, op.p50_us, op.p99_us,
      ff.p50_us, fp.p50_us, os.p50_us, fs.p50_us, os.p50_us / fs.p50_us, os.p99_us, fs.p99_us);
}

// --only cpu-pods: prioritize-cpu (the chart's second extenders entry, called for every pod):
// for a pod that asks no device (4 cores), scored node by node as prioritize scores a GPU pod,
// and for the bench's GPU pod, answered `[]`; beside the floor prioritize on the same bodies.
void CpuPods(World& w, int names_count, int iterations) {
  const std::vector<std::string> names = Names(names_count);
  extender::WireReader reader;
  std::string out;
  server::HttpResponse rs;
  std::vector<double> cpu_us, gpu_us, floor_us;
  for (int i = 0; i < iterations; ++i) {
    PodSpec cpu{.name = "web-" + std::to_string(i),
                .ns = "web",
                .uid = "web-uid-" + std::to_string(names_count * 10000 + i)};
    const std::string cpu_body = testing::ExtenderArgs(testing::MakePod(cpu), names);
    const std::string gpu_body = PodBody(names_count * 10000 + 7000000 + i, names);
    auto t0 = Clock::now();
    FloorHandler(reader, "/scheduler/prioritize", cpu_body, out);
    auto t1 = Clock::now();
    w.service->Handle(
        server::HttpRequest{"POST", "/scheduler/prioritize-cpu", "application/json", cpu_body, "bench"}, rs);
    auto t2 = Clock::now();
    if (rs.status != 200 || rs.body.size() < 3) {
      std::fprintf(stderr, "bench: prioritize-cpu failed: %s\n", rs.body.c_str());
      std::exit(1);
    }
    w.service->Handle(
        server::HttpRequest{"POST", "/scheduler/prioritize-cpu", "application/json", gpu_body, "bench"}, rs);
    auto t3 = Clock::now();
    if (rs.status != 200 || rs.body != "[]") {
      std::fprintf(stderr, "bench: prioritize-cpu of a GPU pod: %s\n", rs.body.c_str());
      std::exit(1);
    }
    floor_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    cpu_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    gpu_us.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
  }
  const Stats c = Summarize(cpu_us), g = Summarize(gpu_us), f = Summarize(floor_us);
  std::printf(
      "prioritize-cpu %5d names: CPU-only pod p50 %7.1f us p99 %7.1f (%.2fx the floor) | GPU pod ([]) p50 "
      "%7.1f "
      "p99 %7.1f | floor prioritize p50 %7.1f p99 %7.1f\n",
      names_count, c.p50_us, c.p99_us, c.p50_us / f.p50_us, g.p50_us, g.p99_us, f.p50_us, f.p99_us);
}

std::unique_ptr<server::HttpServer> StartServer(server::Handler handler) {
  server::ServerOptions so;
  so.address = "127.0.0.1";
  so.port = 0;
  so.threads = 2;
  return server::HttpServer::Start(so, std::move(handler)).value();
}

void OverHttp(World& w, int names_count, int iterations) {
  const std::vector<std::string> names = Names(names_count);
  std::vector<std::string> bodies;
  for (int i = 0; i < iterations; ++i) bodies.push_back(PodBody(names_count * 10000 + 5000000 + i, names));
  auto ours = StartServer(
      [&](const server::HttpRequest& rq, server::HttpResponse& rs) { w.service->Handle(rq, rs); });
  auto floor = StartServer([](const server::HttpRequest& rq, server::HttpResponse& rs) {
    thread_local extender::WireReader reader;
    FloorHandler(reader, rq.target, rq.body, rs.body);
  });
  testing::HttpClient co(ours->port()), cf(floor->port());
  std::vector<double> ours_us, floor_us;
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    auto a = cf.Post("/scheduler/filter", bodies[i]);
    auto b = cf.Post("/scheduler/prioritize", bodies[i]);
    auto t1 = Clock::now();
    auto c = co.Post("/scheduler/filter", bodies[i]);
    auto d = co.Post("/scheduler/prioritize", bodies[i]);
    auto t2 = Clock::now();
    if (!a || !b || !c || !d || c->status != 200 || d->status != 200) {
      std::fprintf(stderr, "bench: HTTP call failed\n");
      std::exit(1);
    }
    floor_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    ours_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  const Stats o = Summarize(ours_us), f = Summarize(floor_us);
  std::printf(
      "HTTP       %5d names: filter+prioritize round trips p50 %7.1f us p99 %7.1f | floor server p50 %7.1f "
      "p99 %7.1f | ratio p50 %.2fx p99 %.2fx\n",
      names_count, o.p50_us, o.p99_us, f.p50_us, f.p99_us, o.p50_us / f.p50_us, o.p99_us / f.p99_us);
  ours->Shutdown(std::chrono::milliseconds(1000));
  floor->Shutdown(std::chrono::milliseconds(1000));
  ours->Wait();
  floor->Wait();
}

void Predicate(World& w, double seconds, int clients) {
  auto srv = StartServer(
      [&](const server::HttpRequest& rq, server::HttpResponse& rs) { w.service->Handle(rq, rs); });
  std::atomic<bool> stop{false};
  std::atomic<long> calls{0};
  std::atomic<int> ready{0};
  std::vector<std::vector<double>> lat(static_cast<std::size_t>(clients));
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      testing::HttpClient c(srv->port());
      // A gang of 64 tasks, each asked about the nodes of a 200-node window, as Volcano's
      // predicate helper does; the task JSON carries the whole Pod. Bodies are built before
      // the clock starts, so the client spends its CPU on the wire only.
      std::vector<std::string> bodies;
      for (int i = 0; i < 512; ++i) {
        PodSpec p{.name = "task-" + std::to_string(i % 64),
                  .ns = "llm",
                  .uid = "vt-" + std::to_string(t) + "-" + std::to_string(i % 64),
                  .gpus = 1 + (i % 64) % 4,
                  .rdma = 1};
        bodies.push_back(nlohmann::json{
            {"task", testing::MakeTask(p)},
            {"node", testing::MakeVolcanoNode("gpu-node-" + std::to_string((i * 7 + t) % 200))}}
                             .dump());
      }
      ready.fetch_add(1);
      while (ready.load() < clients) std::this_thread::yield();
      for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const std::string& body = bodies[static_cast<std::size_t>(i) % bodies.size()];
        auto t0 = Clock::now();
        auto r = c.Post("/volcano/predicate", body);
        auto t1 = Clock::now();
        if (!r || r->status != 200) {
          std::fprintf(stderr, "bench: predicate failed\n");
          std::exit(1);
        }
        lat[static_cast<std::size_t>(t)].push_back(
            std::chrono::duration<double, std::micro>(t1 - t0).count());
        calls.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  while (ready.load() < clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : threads) th.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  const Stats s = Summarize(all);
  std::printf(
      "volcano predicate: %d keep-alive clients, %ld calls in %.1f s = %.0f calls/s, p50 %.1f us p99 %.1f us "
      "(body ~%zu B)\n",
      clients, calls.load(), elapsed, static_cast<double>(calls.load()) / elapsed, s.p50_us, s.p99_us,
      nlohmann::json{{"task", testing::MakeTask(PodSpec{.gpus = 1})},
                     {"node", testing::MakeVolcanoNode("gpu-node-0")}}
          .dump()
          .size());
  srv->Shutdown(std::chrono::milliseconds(1000));
  srv->Wait();
}

// --only store: what one bound pod's CPU request costs the store (a new snapshot with the node's
// record), beside a device bind and release of one GPU, on the same 5,000-node store.
void StoreCost(World& w, int iterations) {
  std::vector<double> cpu_set, cpu_unset, bind, release;
  for (int i = 0; i < iterations; ++i) {
    const std::string node = "gpu-node-" + std::to_string((i * 37) % 5000);
    const std::string uid = "store-bench-" + std::to_string(i);
    auto t0 = Clock::now();
    w.store.SetPodCpu(uid, node, 2'000);
    auto t1 = Clock::now();
    w.store.SetPodCpu(uid, node, 0);
    auto t2 = Clock::now();
    const auto bound =
        w.store.Bind(node, uid, [&](const state::NodeRecord& rec) -> Result<state::PodAllocation> {
          state::PodAllocation a;
          a.uid = uid;
          a.node = rec.name;
          a.pod_namespace = "bench";
          a.pod_name = uid;
          a.delta.exclusive_gpus = {static_cast<int>(rec.topology->gpus.size()) - 1};
          return a;
        });
    auto t3 = Clock::now();
    if (bound.ok() && !w.store.Release(uid, false).ok()) std::exit(2);
    auto t4 = Clock::now();
    cpu_set.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    cpu_unset.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    if (bound.ok()) {
      bind.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
      release.push_back(std::chrono::duration<double, std::micro>(t4 - t3).count());
    }
  }
  const Stats a = Summarize(cpu_set), b = Summarize(cpu_unset), c = Summarize(bind), d = Summarize(release);
  std::printf(
      "store      %5zu nodes: pod CPU set p50 %6.1f us p99 %6.1f | taken back p50 %6.1f p99 %6.1f | "
      "device bind p50 %6.1f p99 %6.1f | release p50 %6.1f p99 %6.1f (%zu binds)\n",
      w.store.snapshot()->size(), a.p50_us, a.p99_us, b.p50_us, b.p99_us, c.p50_us, c.p99_us, d.p50_us,
      d.p99_us, bind.size());
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 1000;
  double seconds = 5;
  int clients = 4;
  // "inprocess", "http", "predicate" or "pool" (or "pool-gathered", "pool-spread"): one part
  // (profiling)
  std::string only;
  bool every_label = false;
  bool uuids = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--every-label") {
      every_label = true;
      continue;
    }
    if (a == "--shared-topologies") {
      uuids = false;
      continue;
    }
    if (a == "--kube-order") {
      g_kube_order = true;
      continue;
    }
    if (a == "--churn") {
      g_churn = true;
      continue;
    }
    if (a == "--new-shapes") {
      g_new_shapes = true;
      continue;
    }
    if (i + 1 >= argc) break;
    if (a == "--iterations") iterations = std::atoi(argv[i + 1]);
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    if (a == "--clients") clients = std::atoi(argv[i + 1]);
    if (a == "--only") only = argv[i + 1];
    if (a == "--cpu-bound") g_cpu_bound_pct = std::clamp(std::atoi(argv[i + 1]), 0, 100);
    ++i;
  }
  World w(every_label, uuids);
  std::printf("cluster: %zu nodes, %zu pods pre-allocated; %u hardware threads; node classes hash %s; %s\n",
              w.store.snapshot()->size(), w.store.pod_count(), std::thread::hardware_concurrency(),
              every_label ? "every label (--every-label)" : "no labels (as serve)",
              uuids ? "each node its own topology with its GPU UUIDs"
                    : "one topology per node type (--shared-topologies)");
  if (g_kube_order) std::printf("names: each call in kube-scheduler's order (--kube-order)\n");
  if (g_new_shapes) std::printf("pods: each asks what no pod asked before (--new-shapes)\n");
  if (g_cpu_bound_pct >= 0) {
    int binding = 0;
    for (int i = 0; i < 5000; ++i) binding += CpuBinds(i) ? 1 : 0;
    std::printf(
        "CPU: nodes carry allocatable CPU; %d of 5000 (--cpu-bound %d) have 0.1-7.9 cores left, which binds "
        "a 4-core pod's packing score\n",
        binding, g_cpu_bound_pct);
  }
  if (only.empty() || only == "inprocess")
    for (int n : {500, 5000}) InProcess(w, n, iterations);
  if (only.empty() || only == "http")
    for (int n : {500, 5000}) OverHttp(w, n, iterations);
  if (only.empty() || only == "predicate") Predicate(w, seconds, clients);
  if (only.empty() || only == "store") StoreCost(w, iterations);
  if (only.empty() || only == "cpu-pods")
    for (int n : {500, 5000}) CpuPods(w, n, iterations);
  if (only == "rare") {
    // A rare node class (docs/placement.md, "A rare node class last"): one node in eight can run
    // an 8-GPU, 8-NIC pod, and the extender has seen 40 such pods (filter calls, not timed), so
    // each 2-GPU, 2-NIC pod's prioritize keeps those nodes for them. The same cluster and pods
    // with the rule off (capacity.rareClassLast: false) beside it.
    for (const bool rule : {true, false}) {
      framework::SchedulerConfig config = plugins::DefaultSchedulerConfig();
      config.capacity.rare_class_last = rule;
      World rare(every_label, uuids, World::Pool::kNone, true, config);
      const std::vector<std::string> names = Names(500);
      server::HttpResponse rs;
      for (int i = 0; i < 40; ++i) {
        PodSpec whole{.name = "whole-" + std::to_string(i),
                      .ns = "llm",
                      .uid = "whole-uid-" + std::to_string(i),
                      .gpus = 8,
                      .rdma = 8};
        const std::string body = testing::ExtenderArgs(testing::MakePod(whole), names);
        rare.service->Handle(
            server::HttpRequest{"POST", "/scheduler/filter", "application/json", body, "bench"}, rs);
      }
      InProcess(rare, 5000, iterations, nullptr,
                rule ? "rare node class, rule on" : "rare node class, rule off");
    }
  }
  if (only.empty() || only.starts_with("pool")) {
    // A decode pod of a 192-instance pool: scored node by node (nodes of one class and one
    // leaf, holding no pod of the pool, share a result), KvTransferCost and PdRatio on top.
    for (const auto& [pool, name] :
         {std::pair{World::Pool::kGathered, "gathered"}, {World::Pool::kSpread, "spread"}}) {
      if (only.starts_with("pool-") && only != std::string("pool-") + name) continue;
      World pooled(every_label, uuids, pool);
      for (int n : {500, 5000}) InProcess(pooled, n, std::max(1, iterations / 10), name);
    }
  }
  return 0;
}
