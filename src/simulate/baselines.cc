// The baselines toposched is compared with. Each is the device choice of a real system reduced
// to its rule, plus the node choice of a scheduler that does not score devices: the first node
// in cluster order where the choice succeeds.

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "simulate_internal.h"
#include "toposched/framework/allocation.h"
#include "toposched/placement/device_rules.h"
#include "toposched/simulate/simulator.h"

namespace toposched::simulate {
namespace {

std::size_t Index(int i) {
  return static_cast<std::size_t>(i);
}

// Whether one more vGPU of the request fits on GPU `g`: the device rules every policy shares
// (HAMi's per-card checks: count, memory, cores, type and UUID filters; health; the
// unknown-memory rule). numa-bind is FirstSharedGpus' own.
bool ShareFits(const NodeTopology& t, const NodeAllocation& a, int g, const PlacementRequest& r,
               const EngineOptions& options) {
  const ShareVerdict v = JudgeSharedGpu(t, a, r, options.max_shares_per_gpu, g);
  return v == ShareVerdict::kFits || v == ShareVerdict::kNumaUnknown;
}

// Shared pods in every baseline: the first GPUs with capacity (all on one NUMA node when the
// pod asks for numa-bind: the first NUMA node that has enough).
std::optional<std::vector<int>> FirstSharedGpus(const NodeTopology& t, const NodeAllocation& a,
                                                const PlacementRequest& r, const EngineOptions& options) {
  const int want = r.shared.count;
  std::map<int, std::vector<int>> by_numa;  // NUMA node -> GPUs with capacity, ascending
  std::vector<int> all;
  for (int g = 0; g < static_cast<int>(t.gpus.size()); ++g) {
    if (!ShareFits(t, a, g, r, options)) continue;
    all.push_back(g);
    by_numa[t.gpus[Index(g)].numa].push_back(g);
  }
  if (!r.shared.numa_bind) {
    if (static_cast<int>(all.size()) < want) return std::nullopt;
    all.resize(Index(want));
    return all;
  }
  for (auto& [numa, gpus] : by_numa) {
    if (numa < 0 || static_cast<int>(gpus.size()) < want) continue;
    gpus.resize(Index(want));
    return gpus;
  }
  return std::nullopt;
}

// The lowest-index free whole GPUs of the request's vendor.
std::optional<std::vector<int>> FirstFreeGpus(const NodeTopology& t, const NodeAllocation& a,
                                              const PlacementRequest& r) {
  std::vector<int> out;
  for (int g = 0; g < static_cast<int>(t.gpus.size()) && static_cast<int>(out.size()) < r.gpus; ++g) {
    if (t.gpus[Index(g)].vendor == r.vendor && GpuFree(a, g)) out.push_back(g);
  }
  if (static_cast<int>(out.size()) < r.gpus) return std::nullopt;
  return out;
}

std::vector<int> FreeRdmaNics(const NodeTopology& t, const NodeAllocation& a) {
  std::vector<int> out;
  for (int n = 0; n < static_cast<int>(t.nics.size()); ++n) {
    if (t.nics[Index(n)].rdma && !NicUsed(a, n)) out.push_back(n);
  }
  return out;
}

std::optional<std::vector<int>> FirstFreeNics(const NodeTopology& t, const NodeAllocation& a, int want) {
  std::vector<int> free = FreeRdmaNics(t, a);
  if (static_cast<int>(free.size()) < want) return std::nullopt;
  free.resize(Index(want));
  return free;
}

}  // namespace

int RootComplexOf(const NodeTopology& topology, int pcie_parent, int numa) {
  if (pcie_parent < 0 || Index(pcie_parent) >= topology.pcie.size()) return numa >= 0 ? -2 - numa : -1;
  int p = pcie_parent;
  // pcie lists parents before children, so the walk ends; the bound guards a malformed tree.
  for (std::size_t steps = 0; steps <= topology.pcie.size(); ++steps) {
    const int up = topology.pcie[Index(p)].parent;
    if (up < 0 || Index(up) >= topology.pcie.size()) return p;
    p = up;
  }
  return p;
}

std::vector<GpuNicPair> PairNearest(const NodeTopology& t, const std::vector<int>& gpus,
                                    const std::vector<int>& nics) {
  std::vector<GpuNicPair> pairs;
  if (nics.empty()) return pairs;
  const std::size_t cap = (gpus.size() + nics.size() - 1) / nics.size();
  std::vector<std::size_t> load(nics.size(), 0);
  for (int g : gpus) {
    std::size_t best = nics.size();
    int best_rank = 0;
    for (std::size_t k = 0; k < nics.size(); ++k) {
      if (load[k] >= cap) continue;
      const int n = nics[k];
      const LinkClass cls = t.gpu_nic.at(g, n).cls;
      const int rank = LinkRank(cls, t.gpus[Index(g)].package, t.nics[Index(n)].package);
      if (best == nics.size() || rank < best_rank || (rank == best_rank && n < nics[best])) {
        best = k;
        best_rank = rank;
      }
    }
    ++load[best];
    pairs.push_back({g, nics[best], t.gpu_nic.at(g, nics[best]).cls});
  }
  return pairs;
}

int WorstPairRank(const NodeTopology& t, const std::vector<GpuNicPair>& pairs) {
  int worst = 0;
  for (const GpuNicPair& p : pairs) {
    worst = std::max(worst, LinkRank(p.cls, t.gpus[Index(p.gpu)].package, t.nics[Index(p.nic)].package));
  }
  return worst;
}

std::optional<Placement> FinishPlacement(const NodeTopology& t, const PlacementRequest& r,
                                         std::vector<int> gpus, std::vector<int> nics) {
  Placement p;
  std::sort(gpus.begin(), gpus.end());
  std::sort(nics.begin(), nics.end());
  p.pairs = PairNearest(t, gpus, nics);
  p.gpus = std::move(gpus);
  p.nics = std::move(nics);
  int worst = -1;
  for (const GpuNicPair& pair : p.pairs) {
    const int rank = LinkRank(pair.cls, t.gpus[Index(pair.gpu)].package, t.nics[Index(pair.nic)].package);
    p.class_sum += rank;
    if (rank > worst) {
      worst = rank;
      p.worst_class = pair.cls;
    }
  }
  p.cost.worst_gpu_nic = std::max(worst, 0);
  p.cost.sum_gpu_nic = p.class_sum;
  // A hard alignment bound is honoured by refusing the node: generous to the baselines, which
  // would otherwise place pods the bound forbids and look better on "placed" for it.
  if (r.max_gpu_nic_class && !p.pairs.empty() && p.worst_class > *r.max_gpu_nic_class) return std::nullopt;
  return p;
}

std::optional<Placement> ChooseFirstFit(const NodeTopology& t, const NodeAllocation& a,
                                        const PlacementRequest& r, const EngineOptions& options) {
  std::optional<std::vector<int>> gpus =
      r.IsShared() ? FirstSharedGpus(t, a, r, options) : FirstFreeGpus(t, a, r);
  if (!gpus) return std::nullopt;
  std::optional<std::vector<int>> nics = FirstFreeNics(t, a, r.rdma_nics);
  if (!nics) return std::nullopt;
  return FinishPlacement(t, r, std::move(*gpus), std::move(*nics));
}

std::optional<Placement> ChooseGpuOnly(const NodeTopology& t, const NodeAllocation& a,
                                       const PlacementRequest& r, PlacementMemo& memo,
                                       const EngineOptions& options) {
  if (r.IsShared()) return ChooseFirstFit(t, a, r, options);
  // The NICs must be free before the GPUs are ranked, as a device plugin would fail the pod.
  std::optional<std::vector<int>> nics = FirstFreeNics(t, a, r.rdma_nics);
  if (!nics) return std::nullopt;
  PlacementRequest gpus_only = r;
  gpus_only.rdma_nics = 0;
  gpus_only.max_gpu_nic_class.reset();
  const PlacementOutcome outcome = memo.Place(t, a, gpus_only, options);
  if (!outcome.ok()) return std::nullopt;
  return FinishPlacement(t, r, outcome.placement->gpus, std::move(*nics));
}

std::optional<Placement> ChooseRootComplex(const NodeTopology& t, const NodeAllocation& a,
                                           const PlacementRequest& r, const EngineOptions& options) {
  if (r.IsShared()) return ChooseFirstFit(t, a, r, options);
  struct Root {
    int id = 0;
    std::vector<int> gpus, nics;  // free, ascending
    int first_device = 0;         // for a stable order: the root's lowest device
    int Pairs() const { return static_cast<int>(std::min(gpus.size(), nics.size())); }
  };
  std::map<int, Root> by_id;
  auto root_of = [&](int id, int device) -> Root& {
    auto [it, inserted] = by_id.try_emplace(id);
    if (inserted) {
      it->second.id = id;
      it->second.first_device = device;
    }
    return it->second;
  };
  for (int g = 0; g < static_cast<int>(t.gpus.size()); ++g) {
    const Gpu& gpu = t.gpus[Index(g)];
    if (gpu.vendor != r.vendor || !GpuFree(a, g)) continue;
    root_of(RootComplexOf(t, gpu.parent, gpu.numa), g).gpus.push_back(g);
  }
  int free_gpus = 0;
  for (const auto& [id, root] : by_id) free_gpus += static_cast<int>(root.gpus.size());
  const std::vector<int> free_nics = FreeRdmaNics(t, a);
  if (free_gpus < r.gpus || static_cast<int>(free_nics.size()) < r.rdma_nics) return std::nullopt;
  for (int n : free_nics) {
    const Nic& nic = t.nics[Index(n)];
    root_of(RootComplexOf(t, nic.parent, nic.numa), 1000 + n).nics.push_back(n);
  }
  std::vector<Root> roots;
  for (auto& [id, root] : by_id) roots.push_back(std::move(root));

  // One root complex for everything when one can hold it: the one with the fewest free pairs
  // that still fits (Koordinator's scope walk prefers partly used scopes), lowest first.
  const Root* single = nullptr;
  for (const Root& root : roots) {
    if (static_cast<int>(root.gpus.size()) < r.gpus || static_cast<int>(root.nics.size()) < r.rdma_nics)
      continue;
    if (single == nullptr || root.Pairs() < single->Pairs() ||
        (root.Pairs() == single->Pairs() && root.first_device < single->first_device)) {
      single = &root;
    }
  }
  if (single != nullptr) {
    std::vector<int> gpus(single->gpus.begin(), single->gpus.begin() + r.gpus);
    std::vector<int> nics(single->nics.begin(), single->nics.begin() + r.rdma_nics);
    return FinishPlacement(t, r, std::move(gpus), std::move(nics));
  }

  // Across roots, as Koordinator's joint allocation does without a hard scope: GPUs from the
  // roots with the most free GPU+NIC pairs first (fewest roots touched), then NICs from the
  // roots those GPUs came from, then any free NIC.
  std::stable_sort(roots.begin(), roots.end(), [](const Root& x, const Root& y) {
    if (x.Pairs() != y.Pairs()) return x.Pairs() > y.Pairs();
    if (x.gpus.size() != y.gpus.size()) return x.gpus.size() > y.gpus.size();
    return x.first_device < y.first_device;
  });
  std::vector<int> gpus, nics;
  std::vector<const Root*> used;
  for (const Root& root : roots) {
    if (static_cast<int>(gpus.size()) == r.gpus) break;
    if (root.gpus.empty()) continue;
    used.push_back(&root);
    for (int g : root.gpus) {
      if (static_cast<int>(gpus.size()) == r.gpus) break;
      gpus.push_back(g);
    }
  }
  for (const Root* root : used) {
    for (int n : root->nics) {
      if (static_cast<int>(nics.size()) < r.rdma_nics) nics.push_back(n);
    }
  }
  for (int n : free_nics) {
    if (static_cast<int>(nics.size()) >= r.rdma_nics) break;
    if (std::find(nics.begin(), nics.end(), n) == nics.end()) nics.push_back(n);
  }
  return FinishPlacement(t, r, std::move(gpus), std::move(nics));
}

namespace {

// A baseline: its device choice on each node in cluster order; the first that succeeds wins.
class BaselinePolicy : public Policy {
 public:
  using Chooser = std::function<std::optional<Placement>(const NodeTopology&, const NodeAllocation&,
                                                         const PlacementRequest&)>;
  BaselinePolicy(std::string name, Chooser choose) : name_(std::move(name)), choose_(std::move(choose)) {}

  std::string_view Name() const override { return name_; }

  // Blind to the cluster beyond the node, as the systems they stand for are.
  Result<std::optional<Decision>> Schedule(
      const PlacementRequest& request, std::vector<VirtualNode>& nodes,
      std::shared_ptr<const framework::ClusterView> /*cluster*/) override {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      VirtualNode& node = nodes[i];
      if (node.topology == nullptr || !node.schedulable) continue;
      std::optional<Placement> p = choose_(*node.topology, node.allocated, request);
      if (!p) continue;
      const framework::AllocationDelta delta = framework::DeltaOf(*node.topology, request, *p);
      if (Status s = framework::ApplyDelta(*node.topology, delta, node.allocated); !s.ok()) {
        return s.error().WithContext(name_ + " on " + node.name);
      }
      return std::optional<Decision>(Decision{static_cast<int>(i), std::move(*p)});
    }
    return std::optional<Decision>();
  }

 private:
  std::string name_;
  Chooser choose_;
};

}  // namespace

std::unique_ptr<Policy> MakeBaselinePolicy(std::string_view name, const EngineOptions& options) {
  if (name == kPolicyFirstFit) {
    return std::make_unique<BaselinePolicy>(
        std::string(name), [options](const NodeTopology& t, const NodeAllocation& a,
                                     const PlacementRequest& r) { return ChooseFirstFit(t, a, r, options); });
  }
  if (name == kPolicyGpuOnly) {
    auto memo = std::make_shared<PlacementMemo>();
    return std::make_unique<BaselinePolicy>(
        std::string(name),
        [options, memo](const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r) {
          return ChooseGpuOnly(t, a, r, *memo, options);
        });
  }
  if (name == kPolicyRootComplex) {
    return std::make_unique<BaselinePolicy>(
        std::string(name),
        [options](const NodeTopology& t, const NodeAllocation& a, const PlacementRequest& r) {
          return ChooseRootComplex(t, a, r, options);
        });
  }
  return nullptr;
}

}  // namespace toposched::simulate
