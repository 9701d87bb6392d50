// The operator's views of the extender: refusal summaries, explain, nodes. See explain.h.

#include "explain.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "evaluator.h"
#include "node_verdicts.h"
#include "rare_class_rule.h"
#include "toposched/framework/allocation.h"

namespace toposched::extender {
namespace {

using json = nlohmann::json;

// The agent's node label naming the hardware class (kube::kTopologyClassLabel; the extender does
// not depend on the Kubernetes layer).
constexpr std::string_view kTopologyClassLabel = "toposched.io/topology-class";

std::string Plural(int n, std::string_view noun) {
  return std::to_string(n) + " " + std::string(noun) + (n == 1 ? "" : "s");
}

std::string GpuNoun(const PlacementRequest& r) {
  return r.vendor == GpuVendor::kAmd ? "AMD GPU" : "GPU";
}

std::string DescribeRequest(const PlacementRequest& r) {
  std::vector<std::string> parts;
  if (r.gpus > 0) parts.push_back(Plural(r.gpus, GpuNoun(r)));
  if (r.IsShared()) {
    std::string s = Plural(r.shared.count, "vGPU");
    if (r.shared.memory_mib > 0) s += " of " + std::to_string(r.shared.memory_mib) + " MiB";
    if (r.shared.memory_percent > 0 && r.shared.memory_mib == 0) {
      s += " of " + std::to_string(r.shared.memory_percent) + "% memory";
    }
    parts.push_back(s);
  }
  if (r.rdma_nics > 0) parts.push_back(Plural(r.rdma_nics, "RDMA NIC"));
  if (r.max_gpu_nic_class) {
    parts.push_back("GPU->NIC at most " + std::string(ToString(*r.max_gpu_nic_class)));
  } else if (r.rdma_nics > 0 && (r.gpus > 0 || r.IsShared())) {
    parts.push_back("GPU->NIC alignment preferred");
  }
  if (r.role != PodRole::kNone) {
    parts.push_back(std::string(ToString(r.role)) + (r.pool.empty() ? "" : " of pool " + r.pool));
  }
  if (parts.empty()) return "no GPUs or RDMA NICs";
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  // DRA's allocator, not toposched, picks the devices on the node: the class shown per node is
  // the best its free devices allow.
  if (r.dra) out += " (from DRA resource claims; DRA chooses the devices on the node)";
  return out;
}

std::vector<std::string> GpuNames(const NodeTopology& t, const std::vector<int>& gpus) {
  std::vector<std::string> out;
  for (int g : gpus) {
    if (g < 0 || g >= static_cast<int>(t.gpus.size())) continue;
    out.push_back(std::to_string(t.gpus[static_cast<std::size_t>(g)].index) + " (" +
                  t.gpus[static_cast<std::size_t>(g)].pci_bus_id + ")");
  }
  return out;
}

std::vector<std::string> NicNames(const NodeTopology& t, const std::vector<int>& nics) {
  std::vector<std::string> out;
  for (int n : nics) {
    if (n >= 0 && n < static_cast<int>(t.nics.size()))
      out.push_back(t.nics[static_cast<std::size_t>(n)].DisplayName());
  }
  return out;
}

std::string Join(const std::vector<std::string>& v, std::string_view sep = ", ") {
  std::string out;
  for (const std::string& s : v) out.append(out.empty() ? "" : sep).append(s);
  return out;
}

// A node's devices as free/total counts (whole GPUs free of any pod, RDMA NICs no pod holds).
struct DeviceCounts {
  int gpus = 0, gpus_free = 0, gpus_shared = 0, gpus_unusable = 0, rdma = 0, rdma_free = 0;
};

DeviceCounts CountDevices(const state::NodeRecord& r) {
  DeviceCounts c;
  if (r.topology == nullptr) return c;
  const NodeTopology& t = *r.topology;
  c.gpus = static_cast<int>(t.gpus.size());
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    const int g = static_cast<int>(i);
    if (!t.gpus[i].unusable.empty()) ++c.gpus_unusable;
    if (GpuShares(r.allocated, g).shares > 0) ++c.gpus_shared;
  }
  c.rdma = t.RdmaNicCount();
  c.gpus_free = r.free_gpus;
  c.rdma_free = r.free_rdma_nics;
  return c;
}

}  // namespace

framework::NodeInfo NodeInfoOf(const state::NodeRecord& record) {
  framework::NodeInfo info;
  info.name = record.name;
  info.topology = record.topology;
  info.topology_fingerprint = record.fingerprint;
  info.allocated = record.allocated;
  // No labels: no plugin's verdict may read them (NodeInfo::labels), and a copy per class or
  // pool group evaluated costs time on the hot path.
  info.schedulable = record.schedulable;
  info.held = record.held();
  // The node's own free CPU (one node's answer: /explain, a bind, a preemption). The verbs'
  // shared class verdicts count CPU as enough unless it binds (Evaluator::Evaluate's cpu_free).
  info.cpu_milli_free = record.cpu_free_milli();
  return info;
}

std::string RefusalSummary(const PlacementRequest& r, const framework::NodeInfo& node,
                           const framework::FilterResult& filtered, const PlacementOutcome* outcome) {
  // DeviceFit checks these before any placement (plugins/device_fit): the node's state is the reason.
  if (node.topology == nullptr) return std::string(kSummaryNoTopology);
  if (!node.schedulable) return std::string(kSummaryCordoned);
  if (node.held) return std::string(kSummaryHeld);
  if (outcome != nullptr && !outcome->ok()) {
    switch (outcome->failure) {
      case FitFailure::kNotEnoughGpus:
        return "fewer than " + std::to_string(r.gpus) + " free " + GpuNoun(r) + "s";
      case FitFailure::kNotEnoughNics:
        return "fewer than " + std::to_string(r.rdma_nics) + " free RDMA NICs";
      case FitFailure::kAlignmentUnsatisfiable:
        return "no " + Plural(r.gpus > 0 ? r.gpus : r.shared.count, "free " + GpuNoun(r)) + " within " +
               std::string(ToString(r.max_gpu_nic_class.value_or(LinkClass::kSYS))) + " of free RDMA NICs (" +
               std::string(kAlignmentAnnotation) + ")";
      case FitFailure::kNotEnoughShareCapacity:
        return "no " + Plural(r.shared.count, GpuNoun(r)) + " with room for the vGPU request";
      case FitFailure::kRequestTooLarge:
        return "fewer GPUs or RDMA NICs in all than the pod asks";
      case FitFailure::kNone:
        break;
    }
  }
  if (!filtered.reason().empty()) return filtered.reason();
  return filtered.ToString();
}

std::string SummarizeRefusals(std::size_t total_nodes, std::size_t fitting_nodes,
                              std::vector<std::pair<std::string, std::size_t>> reasons,
                              std::size_t max_groups) {
  std::sort(reasons.begin(), reasons.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::string out = std::to_string(fitting_nodes) + "/" + std::to_string(total_nodes) + " nodes fit";
  std::size_t other = 0;
  for (std::size_t i = 0; i < reasons.size(); ++i) {
    if (i >= max_groups) {
      other += reasons[i].second;
      continue;
    }
    out += (i == 0 ? ": " : "; ") + std::to_string(reasons[i].second) +
           (reasons[i].second == 1 ? " node: " : " nodes: ") + reasons[i].first;
  }
  if (other > 0)
    out += "; " + std::to_string(other) + (other == 1 ? " node: " : " nodes: ") + "other reasons";
  return out;
}

std::string_view RankName(int rank) {
  switch (rank) {
    case 0:
      return "NV";
    case 1:
      return "PIX";
    case 2:
      return "PXB";
    case 3:
      return "PHB";
    case 4:
      return "NODE";
    case 5:
      return "SYS (same package)";
    default:
      return "SYS";
  }
}

std::string AlignmentNote(const Placement& p) {
  if (p.pairs.empty() || p.best_possible_worst <= 0) return {};
  if (p.cost.worst_gpu_nic <= p.best_possible_worst) return "the best this node allows";
  return "the node allows " + std::string(RankName(p.best_possible_worst)) + "; its free devices did not";
}

Explanation Explain(const ExplainInput& in) {
  Explanation e;
  e.pod = in.pod_label;
  e.request = DescribeRequest(in.request);
  e.interested = Interested(in.request);
  e.packs_cpu = PacksCpu(in.request);
  const bool scored = e.interested || e.packs_cpu;
  // As the verbs (NodeVerdicts): a node's own CPU only where it changes the packing score.
  const std::int64_t cpu_bound = Evaluator::CpuBound(in.request, in.shape_mix.get());
  const std::vector<std::int64_t> cpu_thresholds = Evaluator::CpuThresholds(in.request, in.shape_mix.get());
  e.bound = in.allocation;
  const state::Snapshot& snap = *in.snapshot;
  if (e.bound) {
    if (const state::NodeRecord* r = snap.Find(e.bound->node); r != nullptr && r->topology != nullptr) {
      std::vector<int> gpus = e.bound->delta.exclusive_gpus;
      for (const auto& [g, usage] : e.bound->delta.shares) gpus.push_back(g);
      const std::vector<std::string> g = GpuNames(*r->topology, gpus),
                                     n = NicNames(*r->topology, e.bound->delta.nics);
      if (!g.empty()) e.bound_devices = "GPUs " + Join(g);
      if (!n.empty())
        e.bound_devices += (e.bound_devices.empty() ? "" : "; ") + std::string("RDMA NICs ") + Join(n);
    }
  }
  const framework::Framework& fw = *in.framework;
  framework::CycleSetup setup{
      .mix = in.shape_mix, .packs_by_mix = in.packs_by_mix, .explain = true, .cluster = nullptr};
  if (in.request.role != PodRole::kNone && !in.request.pool.empty() && in.store != nullptr) {
    setup.cluster = state::MakeClusterView(*in.store, in.snapshot, fw.config().network, in.request.pool,
                                           in.store->node_locations());
  }
  framework::CycleState cycle = fw.NewCycle(in.request, setup);
  framework::CapacityBand band(fw.CapacityBandWidth());
  const framework::RareClass rare = RareClassFor(fw, in.request, in.shape_mix.get(), snap, in.store);
  std::string kept_for;
  if (rare.active()) {
    kept_for =
        std::to_string(rare.rare()->gpus) + " GPUs + " + std::to_string(rare.rare()->nics) + " RDMA NICs";
  }
  std::vector<NodeExplanation> all;
  all.reserve(snap.size());
  std::map<std::string, std::size_t> by_reason;
  // Nodes of one class (NodeRecord::class_key: hardware, allocation, schedulability) get one
  // filter and score, as the verbs cache them per class; only the node's own name and device
  // names differ. Not for a pool pod (its scores depend on where the node sits), a pod that names
  // GPU UUIDs (which classes leave out), or the bound pod's own node (its devices counted free).
  struct ClassResult {
    framework::FilterResult filtered;
    framework::NodeScore score;
    std::optional<Placement> placement;
    std::string summary;
  };
  std::unordered_map<std::uint64_t, ClassResult> by_class;
  const bool per_class =
      !(in.request.role != PodRole::kNone && !in.request.pool.empty()) && !in.request.NamesGpuUuids();
  for (const auto& record : snap.nodes()) {
    NodeExplanation n;
    n.name = record->name;
    framework::NodeInfo info = NodeInfoOf(*record);
    const bool own_node = e.bound && e.bound->node == record->name;
    if (own_node) framework::RevertDelta(e.bound->delta, framework::ShapeOf(info.allocated), info.allocated);
    ++e.total;
    if (!scored || (e.packs_cpu && info.topology == nullptr)) {
      n.fits = true;
      if (!scored) {
        n.explanation = "the pod asks no GPUs or RDMA NICs: toposched passes every node";
      } else {
        n.idle_gpus = -1;
        n.extender_score = CpuPodScore(0, -1);
        n.explanation = "no NodeTopology: toposched knows no GPUs here for the pod's CPU to strand -> " +
                        std::to_string(n.extender_score);
      }
      ++e.fitting;
      all.push_back(std::move(n));
      continue;
    }
    if (info.cpu_milli_free >= cpu_bound) info.cpu_milli_free = -1;  // counted as enough, as the verbs do
    const std::uint64_t key =
        info.cpu_milli_free >= 0
            ? Evaluator::CpuVerdictKey(
                  record->class_key,
                  Evaluator::CpuClass(cpu_thresholds, in.request.cpu_milli, info.cpu_milli_free))
            : record->class_key;
    if (e.packs_cpu) n.idle_gpus = IdleGpuShare(record->hardware, record->free_by_vendor);
    const bool cacheable = per_class && !own_node;
    ClassResult fresh;
    const ClassResult* result = nullptr;
    if (cacheable) {
      if (const auto it = by_class.find(key); it != by_class.end()) result = &it->second;
    }
    if (result == nullptr) {
      fresh.filtered = fw.RunFilter(cycle, info);
      if (!fresh.filtered.ok()) {
        const PlacementOutcome* outcome = nullptr;
        if (info.topology != nullptr && info.schedulable && !info.held) outcome = &cycle.Outcome(info);
        fresh.summary = RefusalSummary(in.request, info, fresh.filtered, outcome);
      } else {
        fresh.score = fw.RunScore(cycle, info);
        if (const PlacementOutcome& outcome = cycle.Outcome(info); outcome.ok())
          fresh.placement = *outcome.placement;
      }
      result = cacheable ? &(by_class[key] = std::move(fresh)) : &fresh;
    }
    const ClassResult& r = *result;
    if (!r.filtered.ok()) {
      n.code = r.filtered.code();
      n.plugin = r.filtered.plugin();
      n.reason = r.filtered.reason();
      n.summary = r.summary;
      if (info.topology == nullptr && in.stale_nodes.contains(record->name))
        n.summary = std::string(kSummaryStale);
      n.explanation = framework::ExplainNode(record->name, r.filtered, nullptr);
      ++by_reason[n.summary];
      all.push_back(std::move(n));
      continue;
    }
    n.fits = true;
    ++e.fitting;
    n.score100 = r.score.total;
    n.capacity = r.score.capacity;
    n.reserved = rare.active() && rare.Reserved(record->hardware, record->name);
    if (n.reserved) n.kept_for = kept_for;
    band.Offer(r.score.total, r.score.capacity, n.reserved);
    if (r.placement && info.topology != nullptr) {
      const Placement& p = *r.placement;
      if (!p.pairs.empty()) n.worst_class = p.worst_class;
      n.share_left = framework::ShareLeft(cycle, info, p);
      n.alignment = AlignmentNote(p);
      n.gpus = GpuNames(*info.topology, p.gpus);
      n.nics = NicNames(*info.topology, p.nics);
    }
    n.explanation = framework::ExplainNode(record->name, r.filtered, &r.score);
    all.push_back(std::move(n));
  }
  // The two fields the band reads (assigned: a designated initializer that leaves the others
  // out draws -Wmissing-field-initializers).
  const auto score_of = [](const NodeExplanation& n) {
    framework::NodeScore s;
    s.total = n.score100;
    s.capacity = n.capacity;
    s.reserved = n.reserved;
    return s;
  };
  for (NodeExplanation& n : all) {
    if (!n.fits || !scored || (n.idle_gpus && *n.idle_gpus < 0)) continue;
    const framework::NodeScore s = score_of(n);
    n.in_band = band.In(s);
    n.extender_score = band.ExtenderScore(s);
    if (n.idle_gpus) {
      n.extender_score = CpuPodScore(n.extender_score, *n.idle_gpus);
      char why[96];
      std::snprintf(why, sizeof why, "; %.0f %% of its GPUs idle -> extender score %d", 100 * *n.idle_gpus,
                    n.extender_score);
      n.explanation += why;
    }
  }
  // The reply's one node of the best (PreferOneOfTheBest): the others that share its score are
  // a step behind on the wire.
  framework::RemnantTie remnants(fw, in.request, [&snap, vendor = in.request.vendor] {
    return std::make_shared<const packing::RemnantCounts>(CountRemnants(snap, vendor));
  });
  const auto tie_key = [&](const NodeExplanation& n) {
    return framework::TieKeyOf(n.capacity, remnants.Rank(n.share_left), NodeOrderKey(n.name));
  };
  if (scored) {
    std::vector<int> before;
    before.reserve(all.size());
    for (const NodeExplanation& n : all) before.push_back(n.extender_score);
    const std::size_t kept = framework::PreferOneOfTheBest(
        std::span<NodeExplanation>(all), [&](std::size_t k) { return tie_key(all[k]); },
        [](NodeExplanation& n) -> int& { return n.extender_score; });
    for (std::size_t k = 0; k < all.size(); ++k) {
      if (all[k].extender_score != before[k]) {
        const framework::TieKey mine = tie_key(all[k]), best = tie_key(all[kept]);
        const char* why = mine.capacity_behind != best.capacity_behind ? "a lower capacity score"
                          : mine.remnants != best.remnants ? "its card evens out the cluster's remnants less"
                                                           : "stable node order";
        all[k].explanation += std::string("; ties the best node's score, one step behind it (") + why +
                              ") -> extender score " + std::to_string(all[k].extender_score);
      }
    }
  }
  // Listed in the ranking's order (framework::RankBestFirst), by the wire's score first (a pod
  // that asks no device is scored by its CPU on the wire), then the nodes that do not fit in the
  // stable order.
  std::vector<framework::RankedNode> ranked;
  for (std::size_t k = 0; k < all.size(); ++k) {
    if (!all[k].fits || !scored) continue;
    ranked.push_back(
        {score_of(all[k]), NodeOrderKey(all[k].name), all[k].share_left, k, all[k].idle_gpus.value_or(-1)});
  }
  framework::RankBestFirst(ranked, band, remnants, /*cpu_pod=*/e.packs_cpu);
  std::vector<std::size_t> place(all.size(), all.size());
  for (std::size_t r = 0; r < ranked.size(); ++r) place[ranked[r].index] = r;
  std::vector<std::size_t> order(all.size());
  for (std::size_t k = 0; k < all.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    const NodeExplanation &a = all[x], &b = all[y];
    if (a.fits != b.fits) return a.fits;
    if (a.fits && scored && a.extender_score != b.extender_score) return a.extender_score > b.extender_score;
    if (place[x] != place[y]) return place[x] < place[y];
    const std::uint64_t ka = NodeOrderKey(a.name), kb = NodeOrderKey(b.name);
    return ka != kb ? ka < kb : a.name < b.name;
  });
  std::vector<NodeExplanation> sorted;
  sorted.reserve(all.size());
  for (const std::size_t k : order) sorted.push_back(std::move(all[k]));
  all = std::move(sorted);
  if (!all.empty() && all.front().fits && scored) e.best = all.front().name;
  e.reasons.assign(by_reason.begin(), by_reason.end());
  e.summary = SummarizeRefusals(e.total, e.fitting, e.reasons);
  std::sort(e.reasons.begin(), e.reasons.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (all.size() > in.limit) {
    all.resize(in.limit);
    e.truncated = true;
  }
  e.nodes = std::move(all);
  return e;
}

std::string ToJson(const Explanation& e) {
  json out = {{"pod", e.pod},
              {"request", e.request},
              {"interested", e.interested},
              {"packsCpu", e.packs_cpu},
              {"nodesTotal", e.total},
              {"nodesFit", e.fitting},
              {"summary", e.summary},
              {"truncated", e.truncated}};
  out["best"] = e.best.empty() ? json(nullptr) : json(e.best);
  if (e.bound) {
    out["boundTo"] = {{"node", e.bound->node}, {"devices", e.bound_devices}};
    if (!e.bound->delta.nics.empty())
      out["boundTo"]["worstClass"] = std::string(ToString(e.bound->worst_class));
  } else {
    out["boundTo"] = nullptr;
  }
  json reasons = json::array();
  for (const auto& [reason, count] : e.reasons) reasons.push_back({{"reason", reason}, {"nodes", count}});
  out["reasons"] = std::move(reasons);
  json nodes = json::array();
  for (const NodeExplanation& n : e.nodes) {
    json j = {{"name", n.name}, {"fits", n.fits}, {"explanation", n.explanation}};
    if (n.fits) {
      j["score"] = n.score100;
      j["extenderScore"] = n.extender_score;
      if (n.capacity >= 0) j["capacity"] = {{"score", n.capacity}, {"inBand", n.in_band}};
      if (n.reserved) j["keptFor"] = n.kept_for;
      if (n.idle_gpus) j["idleGpuShare"] = *n.idle_gpus;
      j["worstClass"] = n.worst_class ? json(std::string(ToString(*n.worst_class))) : json(nullptr);
      if (!n.alignment.empty()) j["alignment"] = n.alignment;
      j["gpus"] = n.gpus;
      j["nics"] = n.nics;
    } else {
      j["code"] = std::string(framework::ToString(n.code));
      j["plugin"] = n.plugin;
      j["reason"] = n.reason;
      j["summary"] = n.summary;
    }
    nodes.push_back(std::move(j));
  }
  out["nodes"] = std::move(nodes);
  return out.dump(2) + "\n";
}

std::string ToText(const Explanation& e) {
  std::string out = "Pod " + e.pod + ": " + e.request + "\n";
  if (e.bound) {
    out += "Bound to " + e.bound->node + (e.bound_devices.empty() ? "" : ": " + e.bound_devices) + "\n";
  }
  out += e.summary + "\n";
  if (!e.best.empty()) out += "Best node now: " + e.best + "\n";
  out += "\n";
  for (const NodeExplanation& n : e.nodes) {
    if (n.fits) {
      out += n.name + "  fits  score " + std::to_string(n.score100) + " (extender " +
             std::to_string(n.extender_score) + "/10)";
      if (n.capacity >= 0) {
        out += "  capacity " + std::to_string(n.capacity) +
               (n.in_band || n.reserved ? "" : " (outside the capacity band: ranked last)");
      }
      if (n.reserved) out += "  kept for pods of " + n.kept_for + " (a rare node class: ranked last)";
      if (n.worst_class) out += "  worst GPU->NIC " + std::string(ToString(*n.worst_class));
      if (!n.alignment.empty()) out += " (" + n.alignment + ")";
      out += "\n";
      if (!n.gpus.empty()) out += "    GPUs " + Join(n.gpus) + "\n";
      if (!n.nics.empty()) out += "    RDMA NICs " + Join(n.nics) + "\n";
      out += "    " + n.explanation + "\n";
    } else {
      out += n.name + "  refused  " + n.summary + "\n    " + n.explanation + "\n";
    }
  }
  if (e.truncated) out += "(more nodes not listed: raise ?limit=)\n";
  return out;
}

namespace {

struct NodeRow {
  const state::NodeRecord* record;
  DeviceCounts devices;
  bool stale;
  std::string topology_class;
  std::string state;
};

std::vector<NodeRow> Rows(const state::Snapshot& snapshot, const std::set<std::string, std::less<>>& stale) {
  std::vector<NodeRow> rows;
  rows.reserve(snapshot.size());
  for (const auto& r : snapshot.nodes()) {
    NodeRow row{r.get(), CountDevices(*r), stale.contains(r->name), "", ""};
    if (auto it = r->labels.find(std::string(kTopologyClassLabel)); it != r->labels.end())
      row.topology_class = it->second;
    if (row.stale && r->topology == nullptr) {
      row.state = "stale";
    } else if (r->topology == nullptr) {
      row.state = "no-topology";
    } else if (r->held()) {
      row.state = "held";
    } else if (!r->schedulable) {
      row.state = "cordoned";
    } else {
      row.state = row.stale ? "stale (placing)" : "ok";
    }
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(),
            [](const NodeRow& a, const NodeRow& b) { return a.record->name < b.record->name; });
  return rows;
}

}  // namespace

std::string NodesJson(const state::Snapshot& snapshot, const std::set<std::string, std::less<>>& stale_nodes,
                      const std::map<std::string, int>& dra_unmapped) {
  json nodes = json::array();
  DeviceCounts total;
  for (const NodeRow& row : Rows(snapshot, stale_nodes)) {
    const state::NodeRecord& r = *row.record;
    const DeviceCounts& c = row.devices;
    total.gpus += c.gpus;
    total.gpus_free += c.gpus_free;
    total.rdma += c.rdma;
    total.rdma_free += c.rdma_free;
    nodes.push_back(
        {{"name", r.name},
         {"state", row.state},
         {"topology", r.topology != nullptr},
         {"stale", row.stale},
         {"schedulable", r.schedulable},
         {"heldPods", r.held_pods},
         {"class", row.topology_class},
         {"source", r.topology != nullptr ? std::string(ToString(r.topology->source)) : std::string()},
         {"topologyGeneration", r.topology_generation},
         {"gpus",
          {{"total", c.gpus},
           {"free", c.gpus_free},
           {"shared", c.gpus_shared},
           {"unusable", c.gpus_unusable},
           {"allocated", c.gpus - c.gpus_free - c.gpus_unusable}}},
         {"rdmaNics", {{"total", c.rdma}, {"free", c.rdma_free}, {"allocated", c.rdma - c.rdma_free}}},
         {"pods", r.pods.size()}});
    if (const auto u = dra_unmapped.find(r.name); u != dra_unmapped.end()) {
      nodes.back()["draUnmappedDevices"] = u->second;
    }
  }
  json out = {{"nodes", std::move(nodes)},
              {"total",
               {{"nodes", snapshot.size()},
                {"gpus", total.gpus},
                {"gpusFree", total.gpus_free},
                {"rdmaNics", total.rdma},
                {"rdmaNicsFree", total.rdma_free},
                {"staleTopologies", stale_nodes.size()}}}};
  return out.dump(2) + "\n";
}

std::string NodesText(const state::Snapshot& snapshot, const std::set<std::string, std::less<>>& stale_nodes,
                      const std::map<std::string, int>& dra_unmapped) {
  const std::vector<NodeRow> rows = Rows(snapshot, stale_nodes);
  std::size_t name_width = 4;
  for (const NodeRow& row : rows) name_width = std::max(name_width, row.record->name.size());
  std::string out;
  char line[512];
  auto cell = [](const std::string& s, std::size_t width) {
    return s + std::string(width + 2 - std::min(width, s.size()), ' ');
  };
  out +=
      cell("NODE", name_width) + cell("STATE", 15) + "GPUS(FREE/ALL)  SHARED  RDMA(FREE/ALL)  PODS  CLASS\n";
  for (const NodeRow& row : rows) {
    const DeviceCounts& c = row.devices;
    std::snprintf(line, sizeof line, "%-16s%-8d%-16s%-6zu",
                  (std::to_string(c.gpus_free) + "/" + std::to_string(c.gpus)).c_str(), c.gpus_shared,
                  (std::to_string(c.rdma_free) + "/" + std::to_string(c.rdma)).c_str(),
                  row.record->pods.size());
    out += cell(row.record->name, name_width) + cell(row.state, 15) + line + row.topology_class;
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  }
  if (!stale_nodes.empty()) out += std::to_string(stale_nodes.size()) + " stale topologies\n";
  for (const auto& [node, count] : dra_unmapped) {
    out += node + ": " + std::to_string(count) +
           " allocated DRA devices not mapped onto its topology (not counted; see the extender's log)\n";
  }
  return out;
}

}  // namespace toposched::extender
