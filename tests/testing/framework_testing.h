#pragma once
// Builders and fakes for framework and plugin tests: nodes on synthetic topologies, requests,
// hand-built placements, and a fake placer that returns them instead of running the engine.

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "toposched/framework/cycle_state.h"
#include "toposched/framework/node_info.h"
#include "toposched/placement/placement.h"
#include "toposched/placement/request.h"
#include "toposched/topology/synthetic.h"

namespace toposched::testing {

// One shared topology per preset name (tests compare topologies by pointer, as CycleState does).
inline std::shared_ptr<const NodeTopology> PresetTopology(const std::string& preset) {
  static std::map<std::string, std::shared_ptr<const NodeTopology>> cache;
  auto it = cache.find(preset);
  if (it != cache.end()) return it->second;
  auto spec = SyntheticPreset(preset);
  if (!spec.ok()) return nullptr;
  auto topology = GenerateSynthetic(*spec);
  if (!topology.ok()) return nullptr;
  auto shared = std::make_shared<const NodeTopology>(std::move(*topology));
  cache.emplace(preset, shared);
  return shared;
}

class NodeBuilder {
 public:
  NodeBuilder(std::string name, const std::string& preset) {
    node_.name = std::move(name);
    node_.topology = PresetTopology(preset);
  }
  NodeBuilder& ExclusiveGpus(const std::vector<int>& gpus) {
    for (int g : gpus) {
      Grow(node_.allocated.gpu_exclusive, g, Gpus());
      node_.allocated.gpu_exclusive[static_cast<std::size_t>(g)] = true;
    }
    return *this;
  }
  NodeBuilder& UsedNics(const std::vector<int>& nics) {
    for (int n : nics) {
      Grow(node_.allocated.nic_used, n, Nics());
      node_.allocated.nic_used[static_cast<std::size_t>(n)] = true;
    }
    return *this;
  }
  NodeBuilder& Shares(int gpu, int shares, std::int64_t memory_mib, std::int64_t cores) {
    Grow(node_.allocated.gpu_shares, gpu, Gpus());
    node_.allocated.gpu_shares[static_cast<std::size_t>(gpu)] = GpuShareUsage{shares, memory_mib, cores};
    return *this;
  }
  NodeBuilder& NoTopology() {
    node_.topology = nullptr;
    return *this;
  }
  NodeBuilder& Cordoned() {
    node_.schedulable = false;
    return *this;
  }
  framework::NodeInfo Build() const { return node_; }

 private:
  std::size_t Gpus() const { return node_.topology ? node_.topology->gpus.size() : 0; }
  std::size_t Nics() const { return node_.topology ? node_.topology->nics.size() : 0; }
  // Sized like the topology's devices, as the extender's allocations are.
  template <typename T>
  static void Grow(std::vector<T>& v, int index, std::size_t devices) {
    v.resize(std::max({v.size(), devices, static_cast<std::size_t>(index) + 1}));
  }
  framework::NodeInfo node_;
};

class RequestBuilder {
 public:
  RequestBuilder() {
    r_.pod_namespace = "default";
    r_.pod_name = "pod";
    r_.pod_uid = "uid-1";
  }
  RequestBuilder& Gpus(int n) {
    r_.gpus = n;
    return *this;
  }
  RequestBuilder& Nics(int n) {
    r_.rdma_nics = n;
    return *this;
  }
  RequestBuilder& Shared(int count, std::int64_t memory_mib, std::int64_t cores) {
    r_.shared.count = count;
    r_.shared.memory_mib = memory_mib;
    r_.shared.cores = cores;
    return *this;
  }
  RequestBuilder& NodePolicy(PackPolicy p) {
    r_.node_policy = p;
    return *this;
  }
  PlacementRequest Build() const { return r_; }

 private:
  PlacementRequest r_;
};

// A placement of `gpus` and `nics` on `t`, each GPU served by NIC i*n/g (as evenly as the engine
// would), with classes from the topology. Cost fields stay zero: tests set the ones they read.
inline Placement PlacementOn(const NodeTopology& t, std::vector<int> gpus, std::vector<int> nics) {
  Placement p;
  p.gpus = std::move(gpus);
  p.nics = std::move(nics);
  const std::size_t g = p.gpus.size(), n = p.nics.size();
  for (std::size_t i = 0; n > 0 && i < g; ++i) {
    const int nic = p.nics[i * n / g];
    p.pairs.push_back(GpuNicPair{p.gpus[i], nic, t.gpu_nic.at(p.gpus[i], nic).cls});
  }
  return p;
}

inline PlacementOutcome Fits(Placement p) {
  return PlacementOutcome{std::move(p), FitFailure::kNone, ""};
}
inline PlacementOutcome Fails(FitFailure f, std::string detail) {
  return PlacementOutcome{std::nullopt, f, std::move(detail)};
}

// A placer returning a fixed outcome and counting its calls: the engine's stand-in.
struct FakePlacer {
  PlacementOutcome outcome;
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  framework::CycleState::Placer AsPlacer() const {
    return [outcome = outcome, calls = calls](const NodeTopology&, std::string_view, const NodeAllocation&,
                                              const PlacementRequest&, SharePacking) {
      ++*calls;
      return outcome;
    };
  }
};

inline framework::CycleState CycleWith(PlacementRequest request, PlacementOutcome outcome) {
  return framework::CycleState(std::move(request), FakePlacer{std::move(outcome)}.AsPlacer());
}

}  // namespace toposched::testing
