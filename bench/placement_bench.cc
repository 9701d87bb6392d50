// Placement cost: one cold PlaceOnNode per shape, the memoized call, the memo key's topology
// fingerprint, and a scheduling cycle that scores 5,000 nodes of 4 hardware types. Inputs and
// node states are built once, outside the timed loops.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "testing/shared_topologies.h"
#include "toposched/agent/discovery.h"
#include "toposched/placement/packing.h"
#include "toposched/placement/placement.h"
#include "toposched/topology/synthetic.h"

namespace {

using toposched::NodeAllocation;
using toposched::NodeTopology;
using toposched::PlacementRequest;

// Per-call latencies of one benchmark run, reported as p50/p99 counters (microseconds) beside
// Google Benchmark's mean time (the discovery benchmark's helper).
class Latencies {
 public:
  explicit Latencies(benchmark::State& state) : state_(state) { samples_.reserve(1 << 16); }
  ~Latencies() {
    if (samples_.empty()) return;
    std::sort(samples_.begin(), samples_.end());
    auto at = [&](double q) {
      return samples_[static_cast<std::size_t>(q * static_cast<double>(samples_.size() - 1))];
    };
    state_.counters["p50_us"] = at(0.50);
    state_.counters["p99_us"] = at(0.99);
  }
  template <typename F>
  void Time(F&& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    samples_.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }

 private:
  benchmark::State& state_;
  std::vector<double> samples_;
};

constexpr const char* kOci = "oci__bm.gpu.h100.8_kubernetes-variant.nccl.xml";  // 8 GPUs, 16 RDMA NICs

NodeTopology Preset(const char* name) {
  return *toposched::GenerateSynthetic(*toposched::SyntheticPreset(name));
}

// Empty when the shared exports are not there; the benchmark then reports an error.
NodeTopology Shared(const char* name) {
  auto t = toposched::LoadTopologyFile(toposched::testing::SharedTopology(name).string());
  return t.ok() ? *t : NodeTopology{};
}

NodeTopology Machine(const std::string& name) {
  return name == "oci" ? Shared(kOci) : Preset(name.c_str());
}

PlacementRequest Whole(int gpus, int nics) {
  PlacementRequest r;
  r.gpus = gpus;
  r.rdma_nics = nics;
  return r;
}

// One PlaceOnNode with nothing reused between calls: the engine keeps no state.
void BM_PlaceCold(benchmark::State& state, std::string machine, int gpus, int nics) {
  const NodeTopology t = Machine(machine);
  if (t.gpus.empty()) {
    state.SkipWithError("topology not found");
    return;
  }
  const PlacementRequest r = Whole(gpus, nics);
  Latencies latencies(state);
  for (auto _ : state)
    latencies.Time([&] {
      auto o = toposched::PlaceOnNode(t, {}, r);
      if (!o.ok()) state.SkipWithError(o.detail.c_str());
      benchmark::DoNotOptimize(o);
    });
}

// The same call through a warm memo: the key (topology fingerprint + state + shape) and a copy.
void BM_PlaceMemoized(benchmark::State& state, std::string machine, int gpus, int nics) {
  const NodeTopology t = Machine(machine);
  if (t.gpus.empty()) {
    state.SkipWithError("topology not found");
    return;
  }
  const PlacementRequest r = Whole(gpus, nics);
  toposched::PlacementMemo memo;
  memo.Place(t, {}, r);
  Latencies latencies(state);
  for (auto _ : state) latencies.Time([&] { benchmark::DoNotOptimize(memo.Place(t, {}, r)); });
}

// One vGPU (half a card) on an HGX H100 whose GPU0 and GPU1 carry vGPUs, cold, by HAMi's policy
// alone and with the typical pods (SharePacking: FGD's per-card rule, one fragmentation per card
// that fits), over a mix of 20 shapes as the trace's: the price of choosing the card that strands
// least.
void BM_PlaceShare(benchmark::State& state, bool packs) {
  const NodeTopology t = Preset("hgx-h100-8gpu");
  NodeAllocation a;
  a.gpu_shares.resize(2);
  a.gpu_shares[0] = {1, 36701, 4500};
  a.gpu_shares[1] = {1, 16311, 2000};
  PlacementRequest r;
  r.shared.count = 1;
  r.shared.cores = 5000;
  r.shared.memory_percent = 50;
  toposched::packing::ShapeMix mix;
  for (int k = 0; k < 20; ++k) {
    toposched::packing::Shape s;
    s.gpus = k < 12 ? 1 : 1 + k % 4;
    s.milli = k < 12 ? 50 + 80 * k : 1000;
    s.cpu_milli = 4000 + 1000 * k;
    mix.shapes.push_back({s, 1.0 / 20});
  }
  const toposched::SharePacking sp =
      packs ? toposched::SharePacking{&mix, toposched::packing::MixKey(mix)} : toposched::SharePacking{};
  Latencies latencies(state);
  for (auto _ : state)
    latencies.Time([&] {
      auto o = toposched::PlaceOnNode(t, a, r, {}, sp);
      if (!o.ok()) state.SkipWithError(o.detail.c_str());
      benchmark::DoNotOptimize(o);
    });
}

// What the memo pays per call to name the hardware type: a hash of the whole topology.
void BM_Fingerprint(benchmark::State& state, std::string machine) {
  const NodeTopology t = Machine(machine);
  if (t.gpus.empty()) {
    state.SkipWithError("topology not found");
    return;
  }
  Latencies latencies(state);
  for (auto _ : state) latencies.Time([&] { benchmark::DoNotOptimize(t.Fingerprint()); });
}

void Take(NodeAllocation& a, const toposched::Placement& p) {
  for (int g : p.gpus) {
    if (a.gpu_exclusive.size() <= static_cast<std::size_t>(g))
      a.gpu_exclusive.resize(static_cast<std::size_t>(g) + 1);
    a.gpu_exclusive[static_cast<std::size_t>(g)] = true;
  }
  for (int n : p.nics) {
    if (a.nic_used.size() <= static_cast<std::size_t>(n)) a.nic_used.resize(static_cast<std::size_t>(n) + 1);
    a.nic_used[static_cast<std::size_t>(n)] = true;
  }
}

struct Cluster {
  std::vector<NodeTopology> types;
  std::vector<int> type_of;           // per node
  std::vector<NodeAllocation> state;  // per node
  std::size_t distinct_states = 0;
};

// 5,000 nodes of 4 hardware types, each running 0-3 pods (1, 2, 4 or 8 GPUs with as many NICs)
// placed by the engine, as the scheduler would have placed them.
const Cluster& FiveThousandNodes() {
  static const Cluster cluster = [] {
    Cluster c;
    c.types = {Preset("hgx-h100-8gpu"), Preset("hgx-a100-8gpu"), Preset("cloud-vm-8gpu"), Shared(kOci)};
    if (c.types.back().gpus.empty()) c.types.pop_back();
    std::mt19937 rng(5000);
    toposched::PlacementMemo setup;
    std::set<std::pair<int, std::string>> states;
    for (int node = 0; node < 5000; ++node) {
      const int type = static_cast<int>(rng() % c.types.size());
      NodeAllocation a;
      const int pods = static_cast<int>(rng() % 4);
      for (int k = 0; k < pods; ++k) {
        const int gpus = std::array{1, 2, 4, 8}[rng() % 4];
        const auto o = setup.Place(c.types[static_cast<std::size_t>(type)], a, Whole(gpus, gpus));
        if (o.ok()) Take(a, *o.placement);
      }
      std::string key;
      for (bool b : a.gpu_exclusive) key += b ? 'x' : '-';
      key += '|';
      for (bool b : a.nic_used) key += b ? 'u' : '-';
      states.insert({type, key});
      c.type_of.push_back(type);
      c.state.push_back(std::move(a));
    }
    c.distinct_states = states.size();
    return c;
  }();
  return cluster;
}

// One scheduling cycle: the memo asked once per node for one 2 GPU + 2 NIC pod. fresh: a new
// memo per cycle (every distinct state computed once); warm: one memo across cycles.
void BM_Score5000Nodes(benchmark::State& state, bool fresh) {
  const Cluster& c = FiveThousandNodes();
  const PlacementRequest r = Whole(2, 2);
  toposched::PlacementMemo warm;
  std::size_t hits = 0, misses = 0;
  Latencies latencies(state);
  for (auto _ : state) {
    toposched::PlacementMemo cycle;
    toposched::PlacementMemo& memo = fresh ? cycle : warm;
    const std::size_t hits_before = memo.hits(), misses_before = memo.misses();
    for (std::size_t node = 0; node < c.state.size(); ++node) {
      latencies.Time([&] {
        benchmark::DoNotOptimize(
            memo.Place(c.types[static_cast<std::size_t>(c.type_of[node])], c.state[node], r));
      });
    }
    hits += memo.hits() - hits_before;
    misses += memo.misses() - misses_before;
  }
  state.counters["hardware_types"] = static_cast<double>(c.types.size());
  state.counters["distinct_states"] = static_cast<double>(c.distinct_states);
  state.counters["hit_rate"] =
      hits + misses == 0 ? 0 : static_cast<double>(hits) / static_cast<double>(hits + misses);
  state.counters["nodes_per_s"] =
      benchmark::Counter(static_cast<double>(c.state.size()) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_PlaceCold, hgx_h100_8gpu_8nic, std::string("hgx-h100-8gpu"), 8, 8)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlaceCold, hgx_h100_2gpu_2nic, std::string("hgx-h100-8gpu"), 2, 2)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlaceCold, oci_16nic_4gpu_4nic, std::string("oci"), 4, 4)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlaceCold, oci_16nic_8gpu_16nic, std::string("oci"), 8, 16)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlaceMemoized, hgx_h100_8gpu_8nic, std::string("hgx-h100-8gpu"), 8, 8)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlaceMemoized, hgx_h100_2gpu_2nic, std::string("hgx-h100-8gpu"), 2, 2)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlaceMemoized, oci_16nic_4gpu_4nic, std::string("oci"), 4, 4)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlaceShare, hgx_h100_policy_alone, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlaceShare, hgx_h100_typical_pods, true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Fingerprint, hgx_h100, std::string("hgx-h100-8gpu"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Fingerprint, oci_16nic, std::string("oci"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Score5000Nodes, fresh_memo, true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Score5000Nodes, warm_memo, false)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
