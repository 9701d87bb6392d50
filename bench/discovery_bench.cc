// Discovery cost per source, each beside its floor: hwloc's own XML import (what any hwloc
// user pays) and Boost.PropertyTree's parse of the same NCCL file. The ratio is the cost of
// our translation and link derivation. Inputs are read once, outside the timed loop.

#include <benchmark/benchmark.h>
#include <hwloc.h>

#include <algorithm>
#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "testing/shared_topologies.h"
#include "toposched/agent/discovery.h"
#include "toposched/topology/json_codec.h"
#include "toposched/topology/nccl_xml.h"

namespace {

using toposched::testing::ReadFile;

// Per-call latencies of one benchmark run, reported as p50/p99 counters (microseconds) beside
// Google Benchmark's mean time: one call is a few hundred microseconds, so the two clock reads
// per call cost well under 1%.
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

std::string Shared(const char* name) {
  return ReadFile(toposched::testing::SharedTopology(name));
}
std::string Example() {
  return ReadFile(std::string(TOPOSCHED_SOURCE_DIR) + "/examples/hgx-h100-8gpu.nccl.xml");
}

constexpr const char* kDgx2 = "hwloc__nvidia-dgx2h_16xV100_12xNVSwitch.hwloc2.xml";
constexpr const char* kCorona = "llnl__corona_supermicro-as4124gs_8xMI100_1xmlx5.hwloc2.xml";

// Floor: hwloc imports the XML with I/O kept, nothing else.
void BM_HwlocImportOnly(benchmark::State& state, const char* file) {
  const std::string xml = Shared(file);
  if (xml.empty()) {
    state.SkipWithError("shared topologies not found");
    return;
  }
  Latencies latencies(state);
  for (auto _ : state)
    latencies.Time([&] {
      hwloc_topology_t topo;
      hwloc_topology_init(&topo);
      hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
      hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
      hwloc_topology_set_xmlbuffer(topo, xml.c_str(), static_cast<int>(xml.size() + 1));
      benchmark::DoNotOptimize(hwloc_topology_load(topo));
      hwloc_topology_destroy(topo);
    });
}

// Ours: the same import plus translation to NodeTopology and the link matrices.
void BM_ParseHwlocXml(benchmark::State& state, const char* file) {
  const std::string xml = Shared(file);
  if (xml.empty()) {
    state.SkipWithError("shared topologies not found");
    return;
  }
  Latencies latencies(state);
  for (auto _ : state)
    latencies.Time([&] {
      auto t = toposched::ParseHwlocXml(xml);
      if (!t.ok()) state.SkipWithError(t.error().message().c_str());
      benchmark::DoNotOptimize(t);
    });
}

void BM_PropertyTreeParseOnly(benchmark::State& state) {
  const std::string xml = Example();
  Latencies latencies(state);
  for (auto _ : state)
    latencies.Time([&] {
      std::istringstream in(xml);
      boost::property_tree::ptree tree;
      boost::property_tree::read_xml(in, tree, boost::property_tree::xml_parser::no_comments);
      benchmark::DoNotOptimize(tree);
    });
}

void BM_ParseNcclXml(benchmark::State& state) {
  const std::string xml = Example();
  Latencies latencies(state);
  for (auto _ : state)
    latencies.Time([&] {
      auto t = toposched::ParseNcclXml(xml);
      if (!t.ok()) state.SkipWithError(t.error().message().c_str());
      benchmark::DoNotOptimize(t);
    });
}

void BM_EncodeJson(benchmark::State& state) {
  auto t = toposched::ParseNcclXml(Example());
  Latencies latencies(state);
  for (auto _ : state)
    latencies.Time([&] { benchmark::DoNotOptimize(toposched::EncodeTopologyJson(*t, -1)); });
}

void BM_DecodeJson(benchmark::State& state) {
  const std::string json = toposched::EncodeTopologyJson(*toposched::ParseNcclXml(Example()), -1);
  state.counters["bytes"] = static_cast<double>(json.size());
  Latencies latencies(state);
  for (auto _ : state) latencies.Time([&] { benchmark::DoNotOptimize(toposched::DecodeTopologyJson(json)); });
}

BENCHMARK_CAPTURE(BM_HwlocImportOnly, dgx2_16gpu, kDgx2)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ParseHwlocXml, dgx2_16gpu, kDgx2)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_HwlocImportOnly, corona_8gpu, kCorona)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ParseHwlocXml, corona_8gpu, kCorona)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PropertyTreeParseOnly)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ParseNcclXml)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EncodeJson)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeJson)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
