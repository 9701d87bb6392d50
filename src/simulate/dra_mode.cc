// `toposched simulate --dra`: DRA's first-fit allocator on every node, and the node chosen either
// by first fit in cluster order or by toposched's ranking (include/toposched/simulate/dra_mode.h).

#include "toposched/simulate/dra_mode.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <queue>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugins/registry.h"
#include "simulate_internal.h"
#include "toposched/framework/allocation.h"
#include "toposched/framework/framework.h"
#include "toposched/framework/ranking.h"
#include "toposched/placement/device_rules.h"
#include "toposched/placement/packing.h"
#include "toposched/placement/placement.h"
#include "toposched/placement/rare_class.h"

namespace toposched::simulate {
namespace {

std::size_t Index(int i) {
  return static_cast<std::size_t>(i);
}

// The allocator's depth-first search (allocateOne in allocator_stable.go). Within one request the
// devices are taken in increasing slice order: the stable allocator loops over every device at
// every depth, but with a constraint that only compares a set (all devices share one value), its
// first solution is the lexicographically first one, which this search finds without the
// permutations.
class FirstFitSearch {
 public:
  FirstFitSearch(const NodeTopology& t, const NodeAllocation& a, const DraClaim& claim)
      : claim_(claim), devices_(DraSliceDevices(t)), taken_(devices_.size(), 0) {
    free_.reserve(devices_.size());
    for (const DraDevice& d : devices_) {
      bool free = false;
      if (d.kind == DraDeviceKind::kGpu) {
        const Gpu& gpu = t.gpus[Index(d.index)];
        free = gpu.vendor == claim.vendor && gpu.unusable.empty() && GpuFree(a, d.index);
      } else {
        free = !NicUsed(a, d.index);
      }
      free_.push_back(free ? 1 : 0);
    }
    for (const DraMatchPcieRoot& c : claim.constraints) constraints_.push_back({&c, -1, 0});
    chosen_.assign(claim.requests.size(), -1);
  }

  std::optional<DraAllocation> Run() {
    // Every alternative needs at least its count of free devices of its kind; when even the
    // smallest cannot be met there is no solution, and the search would only prove it slowly.
    for (const DraRequest& r : claim_.requests) {
      bool any = false;
      for (const DraSubRequest& s : r.first_available) any = any || FreeOf(s.kind) >= s.count;
      if (!any) return std::nullopt;
    }
    if (!Request(0)) return std::nullopt;
    DraAllocation out;
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      if (!taken_[i]) continue;
      (devices_[i].kind == DraDeviceKind::kGpu ? out.gpus : out.nics).push_back(devices_[i].index);
    }
    std::sort(out.gpus.begin(), out.gpus.end());
    std::sort(out.nics.begin(), out.nics.end());
    out.chosen = chosen_;
    return out;
  }

 private:
  struct ConstraintState {
    const DraMatchPcieRoot* constraint;
    int root;   // the value the first device fixed
    int count;  // devices under the constraint so far
  };

  int FreeOf(DraDeviceKind kind) const {
    int n = 0;
    for (std::size_t i = 0; i < devices_.size(); ++i) n += devices_[i].kind == kind && free_[i] ? 1 : 0;
    return n;
  }

  static bool Names(const DraMatchPcieRoot& c, const std::string& request, const std::string& sub) {
    for (const std::string& name : c.requests) {
      if (name == request || name == request + "/" + sub) return true;
    }
    return false;
  }

  // The request's alternatives in order; the first that leads to a full solution is kept.
  bool Request(std::size_t r) {
    if (r == claim_.requests.size()) return true;
    const DraRequest& request = claim_.requests[r];
    for (std::size_t s = 0; s < request.first_available.size(); ++s) {
      chosen_[r] = static_cast<int>(s);
      if (Device(r, s, 0, 0)) return true;
    }
    chosen_[r] = -1;
    return false;
  }

  bool Device(std::size_t r, std::size_t s, int k, std::size_t from) {
    const DraRequest& request = claim_.requests[r];
    const DraSubRequest& sub = request.first_available[s];
    if (k == sub.count) return Request(r + 1);
    for (std::size_t i = from; i < devices_.size(); ++i) {
      const DraDevice& d = devices_[i];
      if (d.kind != sub.kind || !free_[i] || taken_[i]) continue;
      // matchAttribute: a device without the attribute fails every constraint naming its request.
      std::vector<ConstraintState*> applied;
      bool ok = true;
      for (ConstraintState& c : constraints_) {
        if (!Names(*c.constraint, request.name, sub.name)) continue;
        if (d.pcie_root < 0 || (c.count > 0 && c.root != d.pcie_root)) {
          ok = false;
          break;
        }
        applied.push_back(&c);
      }
      if (!ok) continue;
      for (ConstraintState* c : applied) {
        if (c->count++ == 0) c->root = d.pcie_root;
      }
      taken_[i] = 1;
      if (Device(r, s, k + 1, i + 1)) return true;
      taken_[i] = 0;
      for (ConstraintState* c : applied) --c->count;
    }
    return false;
  }

  const DraClaim& claim_;
  std::vector<DraDevice> devices_;
  std::vector<char> free_, taken_;
  std::vector<ConstraintState> constraints_;
  std::vector<int> chosen_;
};

// The placement the figures read: the allocator's devices, each GPU paired with its nearest NIC
// (what NCCL does with the NICs the pod sees). DRA knows nothing of toposched's alignment bound.
Placement PlacementOf(const NodeTopology& t, const PlacementRequest& request, const DraAllocation& a) {
  PlacementRequest unbounded = request;
  unbounded.max_gpu_nic_class.reset();
  return *FinishPlacement(t, unbounded, a.gpus, a.nics);
}

// Claims `a` on the node and returns the decision.
Result<Decision> Claim(std::vector<VirtualNode>& nodes, std::size_t i, const PlacementRequest& request,
                       const DraAllocation& a) {
  VirtualNode& node = nodes[i];
  Placement placement = PlacementOf(*node.topology, request, a);
  const framework::AllocationDelta delta = framework::DeltaOf(*node.topology, request, placement);
  if (Status s = framework::ApplyDelta(*node.topology, delta, node.allocated); !s.ok()) {
    return s.error().WithContext("DRA claim on " + node.name);
  }
  return Decision{static_cast<int>(i), std::move(placement)};
}

// A DRA policy also says which firstAvailable alternatives its claim got.
struct DraDecision {
  Decision decision;
  bool aligned = false;  // every request got its first alternative
};

class DraPolicy {
 public:
  virtual ~DraPolicy() = default;
  virtual Result<std::optional<DraDecision>> Schedule(
      const PlacementRequest& request, std::vector<VirtualNode>& nodes,
      std::shared_ptr<const framework::ClusterView> cluster) = 0;
};

bool AllFirst(const DraAllocation& a) {
  return std::all_of(a.chosen.begin(), a.chosen.end(), [](int c) { return c == 0; });
}

// kube-scheduler with DynamicResources and nothing else that tells nodes apart: the first node in
// cluster order whose slices satisfy the claim.
class DraFirstFitPolicy : public DraPolicy {
 public:
  Result<std::optional<DraDecision>> Schedule(const PlacementRequest& request,
                                              std::vector<VirtualNode>& nodes,
                                              std::shared_ptr<const framework::ClusterView>) override {
    const DraClaim claim = DraClaimFor(request);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const VirtualNode& node = nodes[i];
      if (node.topology == nullptr || !node.schedulable) continue;
      std::optional<DraAllocation> a = DraAllocate(*node.topology, node.allocated, claim);
      if (!a) continue;
      TOPOSCHED_ASSIGN_OR_RETURN(Decision d, Claim(nodes, i, request, *a));
      return std::optional<DraDecision>(DraDecision{std::move(d), AllFirst(*a)});
    }
    return std::optional<DraDecision>();
  }
};

// toposched as the extender kube-scheduler calls: its prioritize order of the nodes (the
// framework's filter and score and the ranking step, as src/simulate/toposched_policy.cc runs
// them), first of them where the allocator finds a solution; then the nodes toposched's filter
// refused (its prioritize scores them 0; DRA may still fit the claim there) in cluster order.
// The devices are the allocator's, never the engine's.
class DraToposchedPolicy : public DraPolicy {
 public:
  explicit DraToposchedPolicy(ToposchedRanking ranking) : ranking_(std::move(ranking)) {}

  Result<std::optional<DraDecision>> Schedule(
      const PlacementRequest& request, std::vector<VirtualNode>& nodes,
      std::shared_ptr<const framework::ClusterView> cluster) override {
    (void)ranking_.Rank(request, nodes, cluster, candidates_);
    filtered_.assign(nodes.size(), 0);
    order_.clear();
    for (const framework::RankedNode& c : candidates_) {
      filtered_[c.index] = 1;
      order_.push_back(c.index);
    }
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (!filtered_[i] && nodes[i].schedulable) order_.push_back(i);
    }
    const DraClaim claim = DraClaimFor(request);
    for (const std::size_t i : order_) {
      const VirtualNode& node = nodes[i];
      if (node.topology == nullptr) continue;
      std::optional<DraAllocation> a = DraAllocate(*node.topology, node.allocated, claim);
      if (!a) continue;
      TOPOSCHED_ASSIGN_OR_RETURN(Decision d, Claim(nodes, i, request, *a));
      return std::optional<DraDecision>(DraDecision{std::move(d), AllFirst(*a)});
    }
    return std::optional<DraDecision>();
  }

 private:
  ToposchedRanking ranking_;
  std::vector<framework::RankedNode> candidates_;
  std::vector<char> filtered_;
  std::vector<std::size_t> order_;
};

Result<std::unique_ptr<DraPolicy>> MakeDraPolicy(std::string_view name,
                                                 const framework::SchedulerConfig& config,
                                                 std::shared_ptr<const packing::ShapeMix> mix) {
  if (name == kPolicyDraFirstFit) return std::unique_ptr<DraPolicy>(std::make_unique<DraFirstFitPolicy>());
  if (name == kPolicyToposched) {
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(
        auto framework, framework::Framework::Create(config, plugins::BuiltinRegistry()), "toposched policy");
    return std::unique_ptr<DraPolicy>(
        std::make_unique<DraToposchedPolicy>(ToposchedRanking(std::move(framework), std::move(mix))));
  }
  return Error("unknown DRA policy \"" + std::string(name) + "\" (known: toposched, dra-first-fit)");
}

// Whether a pod can be a DRA claim here: whole GPUs (shared pods and pods without GPUs are not).
bool ClaimablePod(const PlacementRequest& r) {
  return !r.IsShared() && r.gpus > 0;
}

struct Running {
  int node = -1;
  framework::AllocationDelta delta;
};

Result<DraPolicyResult> RunDraPolicy(const std::string& name, const VirtualCluster& cluster,
                                     const Workload& workload, const framework::SchedulerConfig& config,
                                     std::shared_ptr<const packing::ShapeMix> mix,
                                     const DraOptions& options) {
  TOPOSCHED_ASSIGN_OR_RETURN(const std::unique_ptr<DraPolicy> policy, MakeDraPolicy(name, config, mix));
  DraPolicyResult out;
  out.policy = name;
  BestClassOracle best_rank(config.engine);
  std::vector<VirtualNode> nodes = cluster.nodes;
  std::vector<std::optional<Running>> running(workload.pods.size());
  using Departure = std::pair<double, std::size_t>;  // time, pod: ties in arrival order
  std::priority_queue<Departure, std::vector<Departure>, std::greater<>> departures;
  PdTracker tracker(nodes, config.network, workload.pods.size());
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t p = 0; p < workload.pods.size(); ++p) {
    const WorkloadPod& pod = workload.pods[p];
    if (options.progress) options.progress(name, p + 1, workload.pods.size());
    if (!ClaimablePod(pod.request)) continue;
    while (!departures.empty() && departures.top().first <= pod.arrival_s) {
      const std::size_t leaving = departures.top().second;
      departures.pop();
      std::optional<Running>& r = running[leaving];
      VirtualNode& node = nodes[Index(r->node)];
      framework::RevertDelta(r->delta, framework::ShapeOf(node.allocated), node.allocated);
      tracker.Departed(leaving, nodes, r->node);
      r.reset();
    }
    tracker.BeforeDecision(pod.request, nodes);
    Result<std::optional<DraDecision>> decided = policy->Schedule(pod.request, nodes, tracker.view());
    if (!decided.ok()) return decided.error().WithContext(name + ", pod " + pod.name);
    if (!decided->has_value()) {
      ++out.pending;
      tracker.Arrived(pod.request);
      continue;
    }
    const Decision& d = (*decided)->decision;
    const NodeTopology& t = *nodes[Index(d.node)].topology;
    ++out.placed;
    if (pod.request.rdma_nics > 0 && !d.placement.pairs.empty()) {
      ++out.nic_pods_placed;
      ++out.class_histogram[ClassBucket(WorstPairClass(t, d.placement.pairs))];
      const std::optional<int> best = best_rank.BestRank(t, pod.request);
      if (best && WorstPairRank(t, d.placement.pairs) <= *best) ++out.at_best_class;
      if ((*decided)->aligned) ++out.aligned_alternative;
    } else {
      ++out.class_histogram[kNoNicBucket];
    }
    running[p] = Running{d.node, framework::DeltaOf(t, pod.request, d.placement)};
    tracker.Placed(p, pod.request, nodes, d);
    tracker.Arrived(pod.request);
    if (pod.duration_s > 0) departures.push({pod.arrival_s + pod.duration_s, p});
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // No device given twice: the running pods' claims, applied to empty nodes, must all succeed
  // and add up to what the run left on every node.
  std::vector<NodeAllocation> rebuilt(nodes.size());
  for (const std::optional<Running>& r : running) {
    if (!r) continue;
    const VirtualNode& node = nodes[Index(r->node)];
    if (Status s = framework::ApplyDelta(*node.topology, r->delta, rebuilt[Index(r->node)]); !s.ok()) {
      return s.error().WithContext(name + ": device given twice on " + node.name);
    }
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const NodeTopology& t = *nodes[i].topology;
    for (int g = 0; g < static_cast<int>(t.gpus.size()); ++g) {
      if (GpuExclusive(nodes[i].allocated, g) != GpuExclusive(rebuilt[i], g)) {
        return Error(name + ": " + nodes[i].name + ": GPU" + std::to_string(g) +
                     " allocation differs from the running pods'");
      }
    }
    for (int n = 0; n < static_cast<int>(t.nics.size()); ++n) {
      if (NicUsed(nodes[i].allocated, n) != NicUsed(rebuilt[i], n)) {
        return Error(name + ": " + nodes[i].name + ": NIC " + t.nics[Index(n)].DisplayName() +
                     " allocation differs from the running pods'");
      }
    }
  }
  return out;
}

// Mean and standard error (sample standard deviation / sqrt(n); 0 for one sample).
struct MeanSe {
  double mean = 0, se = 0;
};
MeanSe MeanAndSe(const std::vector<double>& v) {
  MeanSe m;
  if (v.empty()) return m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  if (v.size() < 2) return m;
  double ss = 0;
  for (double x : v) ss += (x - m.mean) * (x - m.mean);
  m.se = std::sqrt(ss / static_cast<double>(v.size() - 1)) / std::sqrt(static_cast<double>(v.size()));
  return m;
}

std::string Fixed(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Every seed's figure `f` of the policy named `policy` (seeds without it are skipped).
std::vector<double> PerSeed(const DraResult& r, const std::string& policy,
                            const std::function<double(const DraPolicyResult&)>& f) {
  std::vector<double> out;
  for (const DraSeedResult& s : r.seeds) {
    for (const DraPolicyResult& p : s.policies) {
      if (p.policy == policy) out.push_back(f(p));
    }
  }
  return out;
}

std::vector<std::string> PoliciesOf(const DraResult& r) {
  std::vector<std::string> out;
  for (const DraSeedResult& s : r.seeds) {
    for (const DraPolicyResult& p : s.policies) {
      if (std::find(out.begin(), out.end(), p.policy) == out.end()) out.push_back(p.policy);
    }
  }
  return out;
}

// toposched's figure less first fit's, per seed that ran both.
std::vector<double> Differences(const DraResult& r, const std::function<double(const DraPolicyResult&)>& f) {
  std::vector<double> out;
  for (const DraSeedResult& s : r.seeds) {
    const DraPolicyResult* a = nullptr;
    const DraPolicyResult* b = nullptr;
    for (const DraPolicyResult& p : s.policies) {
      if (p.policy == kPolicyToposched) a = &p;
      if (p.policy == kPolicyDraFirstFit) b = &p;
    }
    if (a != nullptr && b != nullptr) out.push_back(f(*a) - f(*b));
  }
  return out;
}

}  // namespace

int DraPcieRootOf(const NodeTopology& t, int pcie_parent) {
  if (pcie_parent < 0 || Index(pcie_parent) >= t.pcie.size()) return -1;
  const int top = RootComplexOf(t, pcie_parent, -1);
  if (top < 0 || Index(top) >= t.pcie.size()) return -1;
  return t.pcie[Index(top)].kind == PcieKind::kHostBridge ? top : -1;
}

std::vector<DraDevice> DraSliceDevices(const NodeTopology& t) {
  std::vector<DraDevice> out;
  for (const Gpu& g : t.gpus) out.push_back({DraDeviceKind::kGpu, g.index, DraPcieRootOf(t, g.parent)});
  std::vector<int> nics;
  for (int n = 0; n < static_cast<int>(t.nics.size()); ++n) {
    if (t.nics[Index(n)].rdma) nics.push_back(n);
  }
  std::stable_sort(nics.begin(), nics.end(), [&t](int a, int b) {
    const Nic& x = t.nics[Index(a)];
    const Nic& y = t.nics[Index(b)];
    if (x.pci_bus_id.empty() != y.pci_bus_id.empty()) return y.pci_bus_id.empty();
    if (x.pci_bus_id != y.pci_bus_id) return x.pci_bus_id < y.pci_bus_id;
    return x.name < y.name;
  });
  for (int n : nics) out.push_back({DraDeviceKind::kNic, n, DraPcieRootOf(t, t.nics[Index(n)].parent)});
  return out;
}

DraClaim DraClaimFor(const PlacementRequest& request) {
  DraClaim claim;
  claim.vendor = request.vendor;
  if (request.rdma_nics <= 0) {
    claim.requests.push_back({"gpu", {{"", DraDeviceKind::kGpu, request.gpus}}});
    return claim;
  }
  claim.requests.push_back(
      {"gpu", {{"aligned", DraDeviceKind::kGpu, request.gpus}, {"any", DraDeviceKind::kGpu, request.gpus}}});
  claim.requests.push_back({"nic",
                            {{"aligned", DraDeviceKind::kNic, request.rdma_nics},
                             {"any", DraDeviceKind::kNic, request.rdma_nics}}});
  claim.constraints.push_back({{"gpu/aligned", "nic/aligned"}});
  return claim;
}

std::optional<DraAllocation> DraAllocate(const NodeTopology& topology, const NodeAllocation& allocated,
                                         const DraClaim& claim) {
  return FirstFitSearch(topology, allocated, claim).Run();
}

std::vector<std::string> DraPolicyNames() {
  return {std::string(kPolicyToposched), std::string(kPolicyDraFirstFit)};
}

Result<DraSeedResult> SimulateDra(const VirtualCluster& cluster, const Workload& workload, std::uint32_t seed,
                                  const DraOptions& options) {
  for (const VirtualNode& node : cluster.nodes) {
    if (node.topology == nullptr) return Error("node " + node.name + " has no topology");
  }
  for (std::size_t i = 1; i < workload.pods.size(); ++i) {
    if (workload.pods[i].arrival_s < workload.pods[i - 1].arrival_s) {
      return Error("workload: pod " + workload.pods[i].name + " arrives before the pod listed ahead of it");
    }
  }
  const framework::SchedulerConfig config = options.config ? *options.config : BuiltinDefaultConfig();
  // The typical shapes are those of the pods DRA mode runs: shared pods are not in its workload.
  Workload claimable;
  for (const WorkloadPod& pod : workload.pods) {
    if (ClaimablePod(pod.request)) claimable.pods.push_back(pod);
  }
  const auto mix = std::make_shared<const packing::ShapeMix>(WorkloadMix(claimable));
  DraSeedResult out;
  out.seed = seed;
  out.pods = static_cast<int>(workload.pods.size());
  out.left_out = static_cast<int>(workload.pods.size() - claimable.pods.size());
  for (const std::string& name : options.policies) {
    TOPOSCHED_ASSIGN_OR_RETURN(DraPolicyResult run,
                               RunDraPolicy(name, cluster, workload, config, mix, options));
    out.policies.push_back(std::move(run));
  }
  return out;
}

std::string FormatDraTable(const DraResult& r) {
  std::ostringstream o;
  const std::vector<std::string> policies = PoliciesOf(r);
  o << "cluster:  " << r.cluster_description << '\n';
  o << "workload: " << r.workload_description << '\n';
  if (!r.seeds.empty()) {
    o << "DRA mode: seeds";
    for (const DraSeedResult& s : r.seeds) o << ' ' << s.seed;
    o << "; " << r.seeds.front().left_out << " of " << r.seeds.front().pods
      << " pods (first seed) left out: shared-GPU pods are not whole-device claims\n";
  }
  o << "(simulated; devices are DRA's first fit in slice order on the node each policy chose; "
       "means over seeds)\n\n";
  auto pad = [](std::string s, std::size_t width, bool right) {
    while (s.size() < width) s = right ? " " + s : s + " ";
    return s;
  };
  constexpr std::size_t kLabel = 40, kCell = 16;
  o << pad("", kLabel, false);
  for (const std::string& p : policies) o << pad(p, kCell, true);
  o << '\n';
  auto row = [&](const std::string& label, const std::function<double(const DraPolicyResult&)>& f,
                 int decimals) {
    o << pad(label, kLabel, false);
    for (const std::string& p : policies)
      o << pad(Fixed(MeanAndSe(PerSeed(r, p, f)).mean, decimals), kCell, true);
    o << '\n';
  };
  row(
      "pods placed", [](const DraPolicyResult& p) { return p.placed; }, 1);
  row(
      "pods pending", [](const DraPolicyResult& p) { return p.pending; }, 1);
  row(
      "pods with NICs placed", [](const DraPolicyResult& p) { return p.nic_pods_placed; }, 1);
  o << "worst GPU->NIC class of placed pods\n";
  for (std::size_t b = 0; b < kClassBuckets.size(); ++b) {
    row(
        "  " + std::string(kClassBuckets[b]), [b](const DraPolicyResult& p) { return p.class_histogram[b]; },
        1);
  }
  row(
      "at the best class the node allowed", [](const DraPolicyResult& p) { return p.at_best_class; }, 1);
  o << pad("  share of placed pods with NICs", kLabel, false);
  for (const std::string& p : policies) {
    const double placed =
        MeanAndSe(PerSeed(r, p, [](const DraPolicyResult& x) { return x.nic_pods_placed; })).mean;
    const double best =
        MeanAndSe(PerSeed(r, p, [](const DraPolicyResult& x) { return x.at_best_class; })).mean;
    o << pad(placed > 0 ? Fixed(100 * best / placed) + "%" : "-", kCell, true);
  }
  o << '\n';
  row(
      "claims with both \"aligned\" alternatives",
      [](const DraPolicyResult& p) { return p.aligned_alternative; }, 1);
  row(
      "run time, s", [](const DraPolicyResult& p) { return p.seconds; }, 2);

  const std::vector<double> diff_best =
      Differences(r, [](const DraPolicyResult& p) { return p.at_best_class; });
  if (!diff_best.empty()) {
    auto line = [&](const std::string& label, const std::function<double(const DraPolicyResult&)>& f) {
      const MeanSe a = MeanAndSe(PerSeed(r, std::string(kPolicyToposched), f));
      const MeanSe b = MeanAndSe(PerSeed(r, std::string(kPolicyDraFirstFit), f));
      const MeanSe d = MeanAndSe(Differences(r, f));
      o << label << ": toposched " << Fixed(a.mean) << " +- " << Fixed(a.se) << ", DRA first fit "
        << Fixed(b.mean) << " +- " << Fixed(b.se) << "; difference " << Fixed(d.mean) << " +- " << Fixed(d.se)
        << " (mean +- standard error over " << diff_best.size() << " seeds)\n";
    };
    o << '\n';
    line("pods at the best class", [](const DraPolicyResult& p) { return p.at_best_class; });
    line("pods placed", [](const DraPolicyResult& p) { return p.placed; });
  }
  return o.str();
}

std::string FormatDraJson(const DraResult& r) {
  nlohmann::ordered_json j;
  j["mode"] = "dra";
  j["cluster"] = r.cluster_description;
  j["workload"] = r.workload_description;
  auto policy_json = [](const DraPolicyResult& p) {
    nlohmann::ordered_json classes;
    for (std::size_t b = 0; b < kClassBuckets.size(); ++b)
      classes[std::string(kClassBuckets[b])] = p.class_histogram[b];
    return nlohmann::ordered_json{{"policy", p.policy},
                                  {"placed", p.placed},
                                  {"pending", p.pending},
                                  {"nicPodsPlaced", p.nic_pods_placed},
                                  {"atBestClass", p.at_best_class},
                                  {"alignedAlternative", p.aligned_alternative},
                                  {"gpuNicClasses", classes},
                                  {"seconds", p.seconds}};
  };
  nlohmann::ordered_json seeds = nlohmann::ordered_json::array();
  for (const DraSeedResult& s : r.seeds) {
    nlohmann::ordered_json ps = nlohmann::ordered_json::array();
    for (const DraPolicyResult& p : s.policies) ps.push_back(policy_json(p));
    seeds.push_back({{"seed", s.seed}, {"pods", s.pods}, {"leftOut", s.left_out}, {"policies", ps}});
  }
  j["seeds"] = seeds;
  auto stat = [](const MeanSe& m) {
    return nlohmann::ordered_json{{"mean", m.mean}, {"standardError", m.se}};
  };
  nlohmann::ordered_json summary = nlohmann::ordered_json::array();
  for (const std::string& p : PoliciesOf(r)) {
    summary.push_back(
        {{"policy", p},
         {"placed", stat(MeanAndSe(PerSeed(r, p, [](const DraPolicyResult& x) { return x.placed; })))},
         {"atBestClass",
          stat(MeanAndSe(PerSeed(r, p, [](const DraPolicyResult& x) { return x.at_best_class; })))}});
  }
  j["summary"] = summary;
  const std::vector<double> diff = Differences(r, [](const DraPolicyResult& p) { return p.at_best_class; });
  if (!diff.empty()) {
    j["atBestClassToposchedMinusFirstFit"] = stat(MeanAndSe(diff));
    j["placedToposchedMinusFirstFit"] =
        stat(MeanAndSe(Differences(r, [](const DraPolicyResult& p) { return p.placed; })));
  }
  return j.dump(2) + "\n";
}

}  // namespace toposched::simulate
