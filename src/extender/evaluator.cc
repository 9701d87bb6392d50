// The evaluator: pod entries and per-class verdicts (evaluator.h has the caching rule).

#include "evaluator.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "explain.h"
#include "verbs.h"
#include "toposched/metrics/logging.h"

namespace toposched::extender {

using metrics::LogLevel;

bool Interested(const PlacementRequest& r) { return r.gpus > 0 || r.IsShared() || r.rdma_nics > 0; }

bool IsPoolPod(const PlacementRequest& r) { return r.role != PodRole::kNone && !r.pool.empty(); }

bool PacksCpu(const PlacementRequest& r) { return !Interested(r) && r.cpu_milli > 0; }

double IdleGpuShare(const packing::NodeHardware& hardware, const std::array<int, kGpuVendors>& free_by_vendor) {
  int total = 0, free = 0;
  for (std::size_t v = 0; v < hardware.gpus.size(); ++v) {
    total += hardware.gpus[v];
    free += free_by_vendor[v];
  }
  return total > 0 ? static_cast<double>(free) / total : 0.0;
}

int CpuPodScore(int band_score, double idle) {
  if (idle < 0) return framework::kMaxExtenderScore;
  if (band_score <= 0) return 0;
  const auto penalty = static_cast<int>(std::lround(idle * framework::kMaxExtenderScore / 2));
  return std::max(1, band_score - penalty);
}

PlacementRequest RequestFromResreq(const VolcanoTaskView& task, const RequestConfig& config) {
  PlacementRequest r;
  r.pod_uid = std::string(task.uid);
  r.pod_name = std::string(task.name);
  r.pod_namespace = std::string(task.task_namespace);
  auto units = [](double milli) { return static_cast<int>(std::llround(milli / 1000.0)); };
  for (const ScalarResource& s : task.resreq.scalars) {
    if (!(s.value > 0) || !std::isfinite(s.value)) continue;
    if (s.name == "nvidia.com/gpu") {
      r.gpus += units(s.value);
    } else if (s.name == "amd.com/gpu") {
      r.gpus += units(s.value);
      r.vendor = GpuVendor::kAmd;
    } else {
      for (const std::string& rdma : config.rdma_resources) {
        const bool prefix = !rdma.empty() && rdma.back() == '/';
        if (prefix ? s.name.starts_with(rdma) : s.name == rdma) {
          r.rdma_nics += units(s.value);
          break;
        }
      }
    }
  }
  return r;
}

Evaluator::Evaluator(const framework::Framework& framework, state::ClusterStore& store, metrics::Registry& metrics,
                     const ExtenderOptions& options, Clock clock, BindHooks* hooks)
    : framework_(framework),
      store_(store),
      hooks_(hooks),
      clock_(clock ? std::move(clock) : Clock([] { return std::chrono::steady_clock::now(); })),
      pods_(options.reservation_ttl, options.max_cached_pods),
      rejections_(metrics.AddCounter("toposched_filter_rejections_total",
                                     "Nodes filtered out, by the reason (plugin and code).", {"reason"})),
      unknown_node_rejections_(&rejections_.With({"UnknownNode"})) {}

Result<std::shared_ptr<PodEntry>> Evaluator::EntryFor(const PodRef& pod) {
  const auto now = clock_();
  if (auto hit = pods_.Find(pod.uid, pod.resource_version, now)) return hit;
  if (pod.raw.empty()) return Error("the request carries no Pod");
  Result<PlacementRequest> parsed = ParsePodRequest(pod.raw, framework_.config().request);
  if (!parsed.ok()) return parsed.error().WithContext("Pod " + PodLabel(pod.pod_namespace, pod.name, pod.uid));
  return Store(std::move(parsed).value(), pod.uid, pod.resource_version, now);
}

Result<std::shared_ptr<PodEntry>> Evaluator::EntryFor(const VolcanoTaskView& task) {
  if (!task.pod.raw.empty()) {
    PodRef pod = task.pod;
    if (pod.uid.empty()) pod.uid = task.uid;
    return EntryFor(pod);
  }
  const auto now = clock_();
  if (auto hit = pods_.Find(task.uid, "", now)) return hit;
  return Store(RequestFromResreq(task, framework_.config().request), task.uid, "", now);
}

std::shared_ptr<PodEntry> Evaluator::Remember(PlacementRequest request, std::string_view uid,
                                              std::string_view resource_version) {
  return Store(std::move(request), uid, resource_version, clock_());
}

std::shared_ptr<PodEntry> Evaluator::Find(std::string_view uid) { return pods_.Find(uid, "", clock_()); }

void Evaluator::Forget(std::string_view uid) { pods_.Erase(uid); }

std::size_t Evaluator::cached_pods() const { return pods_.size(); }

std::shared_ptr<PodEntry> Evaluator::Store(PlacementRequest request, std::string_view uid, std::string_view rv,
                                           PodCache::TimePoint now) {
  auto entry = std::make_shared<PodEntry>();
  entry->uid = std::string(uid.empty() ? std::string_view(request.pod_uid) : uid);
  entry->pod_namespace = request.pod_namespace;
  entry->pod_name = request.pod_name;
  entry->resource_version = std::string(rv);
  entry->interested = Interested(request);
  entry->packs_cpu = PacksCpu(request);
  for (const std::string& warning : request.warnings) {
    metrics::Log(LogLevel::kWarn, {"request", PodLabel(request.pod_namespace, request.pod_name, entry->uid), ""},
                warning);
    if (hooks_ != nullptr) hooks_->PodWarning(request.pod_namespace, request.pod_name, entry->uid, "IgnoredLabel", warning);
  }
  // The pods this extender is asked about are the workload it packs for (capacity first):
  // each pod's cycles use the mix as it stood when the pod was first seen. A pod that asks no
  // device joins the mix when a verb scores it among GPU nodes (ObserveCpuPod).
  if (entry->interested || entry->packs_cpu) {
    SeedShapes();
    if (entry->interested) shapes_.Observe(entry->uid, packing::ShapeOf(request, request.cpu_milli));
    entry->mix = shapes_.Mix();
    entry->packs_by_mix = shapes_.device_pods() >= min_pods_to_pack_by_mix();
    entry->cpu_thresholds = CpuThresholds(request, entry->mix.get());
  }
  entry->request = std::move(request);
  // Shared by the pods that ask the same; a pod that names GPU UUIDs is decided node by node
  // (VerdictKey) and keeps its own.
  if ((entry->interested || entry->packs_cpu) && !entry->request.NamesGpuUuids()) {
    entry->set_verdicts(VerdictsFor(entry->request, entry->mix, entry->packs_by_mix));
  }
  return pods_.Put(std::move(entry), now);
}

namespace {

// The shape of a bound pod's request (packing::ShapeOf, as the extender takes it), from the
// request its devices answer and its CPU (ClusterStore::PodCpuMilli): whole GPUs and RDMA NICs
// exactly; a share's cores and memory in MiB (one that asked a percentage of the card's memory
// reads as MiB, a whole GPU's worth without cores), without the GPU models it may have asked (an
// allocation does not record them). Nullopt for a pod that holds no GPU and no NIC.
std::optional<packing::Shape> ShapeOfBound(const framework::AllocationDelta& delta, std::int64_t cpu_milli) {
  PlacementRequest r;
  r.gpus = static_cast<int>(delta.exclusive_gpus.size());
  r.rdma_nics = static_cast<int>(delta.nics.size());
  if (r.gpus == 0 && !delta.shares.empty()) {
    r.shared.count = static_cast<int>(delta.shares.size());
    r.shared.cores = delta.shares.front().second.cores;
    r.shared.memory_mib = delta.shares.front().second.memory_mib;
  }
  if (r.gpus == 0 && !r.IsShared() && r.rdma_nics == 0) return std::nullopt;
  return packing::ShapeOf(r, cpu_milli);
}

}  // namespace

void Evaluator::SeedShapes() {
  if (seeded_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(seed_mu_);
  if (seeded_.load(std::memory_order_relaxed) || !store_.synced()) return;
  seeded_.store(true, std::memory_order_release);
  std::vector<std::pair<std::string, packing::Shape>> pods;
  const std::shared_ptr<const state::Snapshot> snap = store_.snapshot();
  for (const auto& record : snap->nodes()) {
    for (const std::string& uid : record->pods) {
      const std::optional<state::PodAllocation> pod = store_.FindPod(uid);
      // A held pod's devices are not known (ClusterStore::Hold): its shape is not either.
      if (!pod || !pod->hold.empty()) continue;
      if (const std::optional<packing::Shape> shape = ShapeOfBound(pod->delta, store_.PodCpuMilli(uid))) {
        pods.emplace_back(uid, *shape);
      }
    }
  }
  if (pods.empty()) return;
  shapes_.ObserveAll(pods);
  metrics::Log(LogLevel::kInfo, {"startup", "", ""},
               "typical pods seeded from " + std::to_string(pods.size()) + " pods the cluster runs");
}

std::shared_ptr<VerdictTable> Evaluator::VerdictsFor(const PlacementRequest& request,
                                                     const std::shared_ptr<const packing::ShapeMix>& mix,
                                                     bool packs_by_mix) {
  PlacementRequest key = request;
  // A pod that asks no device: its verdicts do not depend on its own CPU (ExpectedFragmentation,
  // the only plugin that reads it, finds nothing to strand where CPU counts as enough, and a
  // node whose CPU binds is keyed by its CpuClass, which is what the score reads), so such pods
  // share one table whatever they ask, rather than taking a slot per request from the GPU pods.
  if (PacksCpu(key)) key.cpu_milli = 0;
  key.pod_namespace.clear();
  key.pod_name.clear();
  key.pod_uid.clear();
  std::lock_guard lock(shared_mu_);
  ++shared_stamp_;
  for (SharedVerdicts& s : shared_) {
    if (s.mix == mix && s.packs_by_mix == packs_by_mix && s.request == key) {
      s.used = shared_stamp_;
      return s.table;
    }
  }
  SharedVerdicts fresh{std::move(key), mix, packs_by_mix,
                       std::make_shared<VerdictTable>(VerdictTable::kSharedMaxVerdicts), shared_stamp_};
  if (shared_.size() < kMaxShapes) {
    shared_.push_back(std::move(fresh));
    return shared_.back().table;
  }
  SharedVerdicts& oldest =
      *std::min_element(shared_.begin(), shared_.end(), [](const auto& a, const auto& b) { return a.used < b.used; });
  oldest = std::move(fresh);
  return oldest.table;
}

std::shared_ptr<const packing::ShapeMix> Evaluator::ShapeMixFor(std::string_view uid) {
  if (!uid.empty()) {
    if (const std::shared_ptr<PodEntry> entry = Find(uid); entry != nullptr && entry->mix != nullptr) return entry->mix;
  }
  return shapes_.Mix();
}

bool Evaluator::PacksByMixFor(std::string_view uid) {
  if (!uid.empty()) {
    if (const std::shared_ptr<PodEntry> entry = Find(uid); entry != nullptr && entry->mix != nullptr) {
      return entry->packs_by_mix;
    }
  }
  return shapes_.device_pods() >= min_pods_to_pack_by_mix();
}

std::shared_ptr<const packing::RemnantCounts> Evaluator::Remnants(const state::Snapshot& snap,
                                                                  GpuVendor vendor) {
  std::lock_guard lock(remnants_mu_);
  if (remnants_.counts != nullptr && remnants_.snap == &snap && remnants_.version == snap.version() &&
      remnants_.vendor == vendor) {
    return remnants_.counts;
  }
  auto counts = std::make_shared<const packing::RemnantCounts>(CountRemnants(snap, vendor));
  remnants_ = {&snap, snap.version(), vendor, counts};
  return counts;
}

packing::RemnantCounts CountRemnants(const state::Snapshot& snap, GpuVendor vendor) {
  packing::RemnantCounts counts;
  const auto briefs = snap.briefs();
  const auto nodes = snap.nodes();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    framework::CountRemnantsOf(nodes[i]->topology.get(), nodes[i]->allocated, briefs[i].schedulable, vendor, counts);
  }
  return counts;
}

framework::RemnantTie RemnantTieFor(Evaluator& evaluator, const PlacementRequest& request,
                                    const state::Snapshot& snap) {
  return framework::RemnantTie(evaluator.framework(), request,
                               [&evaluator, &snap, vendor = request.vendor] { return evaluator.Remnants(snap, vendor); });
}

void Evaluator::ObserveCpuPod(const PodEntry& e) {
  if (e.packs_cpu) shapes_.Observe(e.uid, packing::ShapeOf(e.request, e.request.cpu_milli));
}

std::uint64_t Evaluator::VerdictKey(const PlacementRequest& r, const state::NodeRecord& record) {
  if (!r.NamesGpuUuids()) return record.class_key;
  return HashMix(record.class_key, std::hash<std::string_view>{}(record.name));
}

std::uint64_t Evaluator::CpuVerdictKey(std::uint64_t verdict_key, std::int64_t cpu_class) {
  constexpr std::uint64_t kCpuSalt = 0x43505521u;  // "CPU!": apart from every class key
  return Mix64(verdict_key ^ Mix64(static_cast<std::uint64_t>(cpu_class) ^ kCpuSalt));
}

std::vector<std::int64_t> Evaluator::CpuThresholds(const PlacementRequest& r, const packing::ShapeMix* mix) {
  std::vector<std::int64_t> out;
  if (mix != nullptr && !mix->shapes.empty()) {
    for (const packing::WeightedShape& w : mix->shapes) out.push_back(w.shape.cpu_milli);
  } else {
    out.push_back(r.cpu_milli);  // ExpectedFragmentation packs for the pod itself without a mix
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::int64_t Evaluator::CpuClass(const std::vector<std::int64_t>& thresholds, std::int64_t pod_cpu_milli,
                                 std::int64_t cpu_free_milli) {
  const auto fitting = [&](std::int64_t cpu) {
    return static_cast<std::int64_t>(std::upper_bound(thresholds.begin(), thresholds.end(), cpu) - thresholds.begin());
  };
  const auto n = static_cast<std::int64_t>(thresholds.size()) + 1;
  return fitting(cpu_free_milli) * n + fitting(std::max<std::int64_t>(0, cpu_free_milli - pod_cpu_milli));
}

std::int64_t Evaluator::CpuBound(const PlacementRequest& r, const packing::ShapeMix* mix) {
  std::int64_t largest = r.cpu_milli;
  if (mix != nullptr) {
    for (const packing::WeightedShape& w : mix->shapes) largest = std::max(largest, w.shape.cpu_milli);
  }
  return largest > 0 ? largest + r.cpu_milli : 0;
}

std::shared_ptr<const ClassVerdict> Evaluator::Evaluate(
    PodEntry& entry, std::optional<framework::CycleState>& cycle, const state::NodeRecord& record, Want want,
    const std::shared_ptr<const state::Snapshot>& snap, std::shared_ptr<const std::vector<framework::PoolMember>> members,
    std::shared_ptr<const std::map<std::string, pd::Location>> positions, PoolParts* parts,
    std::uint64_t pool_version, std::int64_t cpu_free) {
  const bool pool_pod = IsPoolPod(entry.request);
  const bool pool_scores = pool_pod && want == Want::kScores;
  const std::uint64_t class_verdict_key = VerdictKey(entry.request, record);
  const std::uint64_t verdict_key =
      cpu_free >= 0
          ? CpuVerdictKey(class_verdict_key, CpuClass(entry.cpu_thresholds, entry.request.cpu_milli, cpu_free))
          : class_verdict_key;
  std::shared_ptr<const ClassVerdict> base = entry.FindVerdict(verdict_key);
  if (base != nullptr && !(pool_scores && base->passes())) return base;
  if (!cycle) {
    cycle.emplace(framework_.NewCycle(entry.request));
    cycle->set_explain(false);  // the verbs answer with numbers only
    cycle->SetShapeMix(entry.mix);
    // The window's mix describes the pods this replica saw last: until it holds
    // min_pods_to_pack_by_mix() of them it is not the workload (a new leader may hold a few
    // NIC-less pods and would let them take GPU+NIC nodes: e2e TestKubeScheduler left a Prefill
    // pod unplaceable so), and the blind heuristics stay counted. After, they stand down as in the
    // simulator (the framework's own setting).
    if (!entry.packs_by_mix) cycle->set_packs_for_shape_mix(false);
    if (pool_scores) {
      if (positions == nullptr) positions = store_.node_locations();
      const pd::NetworkConfig& network = framework_.config().network;
      cycle->SetCluster(members != nullptr
                            ? state::MakeClusterView(snap, network, entry.request.pool, std::move(members), positions,
                                                     pool_version)
                            : state::MakeClusterView(store_, snap, network, entry.request.pool, positions));
    }
  }
  // The node as the plugins see it, built when a plugin runs (a pool pod's pool part is mostly
  // found among the call's parts: no copy of the node's allocation then).
  std::optional<framework::NodeInfo> node_info;
  const auto node = [&]() -> const framework::NodeInfo& {
    if (!node_info) {
      node_info.emplace(NodeInfoOf(record));
      // The class's verdict counts CPU as enough; a node whose CPU binds is scored with its own.
      node_info->cpu_milli_free = cpu_free;
      // The nodes of one class share one engine outcome in this cycle, as they share the verdict
      // (the engine reads no CPU; a pool pod's pool part is scored node by node, its outcome is
      // the class's).
      node_info->outcome_key = class_verdict_key;
    }
    return *node_info;
  };
  if (base == nullptr) {
    const framework::NodeInfo& info = node();
    auto v = std::make_shared<ClassVerdict>();
    const framework::FilterResult filtered = framework_.RunFilter(*cycle, info);
    v->code = filtered.code();
    if (filtered.ok()) {
      const framework::NodeScore score =
          framework_.RunScore(*cycle, info, pool_pod ? framework::ScoreSet::kNodeOnly : framework::ScoreSet::kAll);
      v->score100 = score.total;
      v->capacity = score.capacity;
      v->score_weighted = score.weighted;
      v->score_weights = score.weights;
      const PlacementOutcome& outcome = cycle->Outcome(info);
      if (outcome.ok()) v->worst_class = outcome.placement->worst_class;
      if (outcome.ok()) v->share_left = framework::ShareLeft(*cycle, info, *outcome.placement);
    } else {
      v->message = filtered.ToString();
      // The engine's outcome is the cycle's (DeviceFit computed it); not for a node refused for
      // its state, where no placement was tried.
      const bool placed = info.topology != nullptr && info.schedulable && !info.held;
      v->summary = RefusalSummary(entry.request, info, filtered, placed ? &cycle->Outcome(info) : nullptr);
      std::string reason = filtered.plugin().empty() ? std::string("unknown") : filtered.plugin();
      reason.append("/").append(framework::ToString(filtered.code()));
      v->rejections = &rejections_.With({reason});
    }
    base = entry.StoreVerdict(verdict_key, std::move(v));
    if (!(pool_scores && base->passes())) return base;
  }
  // A pool pod on a node that passes: the class's node-only part plus this node's pool part.
  // In the call's arena when there is one: a non-owning pointer, no allocation per verdict.
  std::shared_ptr<ClassVerdict> v;
  if (parts != nullptr && parts->arena != nullptr) {
    v = std::shared_ptr<ClassVerdict>(std::shared_ptr<ClassVerdict>(), &parts->arena->emplace_back(*base));
  } else {
    v = std::make_shared<ClassVerdict>(*base);
  }
  const auto run = [&] {
    const framework::NodeScore score = framework_.RunScore(*cycle, node(), framework::ScoreSet::kClusterOnly);
    return std::pair<long long, long long>(score.weighted, score.weights);
  };
  std::pair<long long, long long> pool;
  if (parts == nullptr) {
    pool = run();
  } else {
    const std::uint64_t worst = base->worst_class ? static_cast<std::uint64_t>(*base->worst_class) + 1 : 0;
    const std::uint64_t key = Mix64(parts->position ^ worst);
    if (const auto* known = parts->computed.Find(key); known != nullptr) {
      pool = *known;
    } else {
      pool = run();
      parts->computed.Insert(key, pool);
    }
  }
  v->score_weighted += pool.first;
  v->score_weights += pool.second;
  v->score100 = framework::WeightedTotal(v->score_weighted, v->score_weights);
  return v;
}

namespace {

struct Buffers {
  std::vector<std::pair<std::uint64_t, std::shared_ptr<const ClassVerdict>>> classes;
  FlatHashIndex<const ClassVerdict*> many;
  std::deque<ClassVerdict> arena;  // Evaluator::PoolParts::arena
};
Buffers& ThreadBuffers() {
  thread_local Buffers buffers;
  return buffers;
}

}  // namespace

// Pool pods scored: a node's verdict depends on its class and on where it sits relative to the
// pool's pods. The pool plugins read, for a node, only which of the pool's pods stand on the
// node itself and in each of its tier domains (the paths to them, their counts per role), and
// nothing of which node or domain it is. So a node's key is its class plus the *content* of its
// node and of each of its domains: the multiset of pool pods there, hashed (two leaves that each
// hold one decode instance of one shape give their nodes one result). That is exact when the
// tiers nest as the pool's pods see them: the paths a node has to the pods of its tier t + 1
// domain follow from the contents when every pod of its tier t domain is in that same tier t + 1
// domain. A node where that does not hold (tiers that do not nest, a HyperNode tree with a leaf
// under two spines) is a key of its own. Its position is HyperNodes' where they place the node,
// else its tier labels, as the cluster view locates it. The filter wants pass/fail only: a pool
// pod is then filtered per class like any pod.
namespace {

constexpr std::uint64_t kOwnKey = std::uint64_t{1} << 63;  // NodeVerdicts' keys of one node alone

// One pool pod as the pool plugins see it (framework::PoolMember without uid and node).
std::uint64_t MemberHash(const framework::PoolMember& p) {
  const auto gpus = static_cast<std::uint64_t>(p.gpus);
  const auto nics = static_cast<std::uint64_t>(p.rdma_nics);
  return Mix64((static_cast<std::uint64_t>(p.role) + 1) | (gpus << 8) | (nics << 24) |
               (static_cast<std::uint64_t>(p.worst_class) << 40) | (static_cast<std::uint64_t>(p.kv_ipc) << 48));
}

// What BuildPoolTables found: the members counted, and whether the hashes told every name and
// domain apart.
struct PoolTables {
  int count = 0;
  bool usable = true;
};

// Adds `p`'s content to NodeVerdicts' by-hash tables (`sign` -1: subtracts it, for a pod that
// left; its node and domains are found as they were when it was added, the positions being the
// same). `keep` gives a view of a name that lives as long as the tables. False when two names
// or two domains share a hash.
bool ApplyMember(const framework::PoolMember& p, int sign, const state::Snapshot& snap, std::size_t tiers,
                 FlatHashIndex<std::pair<std::string_view, std::uint64_t>>& node,
                 std::vector<FlatHashIndex<PoolContent>>& domain,
                 const std::function<std::string_view(std::string_view)>& keep) {
  bool usable = true;
  const std::uint64_t h = sign > 0 ? MemberHash(p) : std::uint64_t{0} - MemberHash(p);  // mod 2^64
  const std::uint64_t name_hash = framework::PositionHash(p.node);
  if (auto* on = node.Find(name_hash); on != nullptr) {
    if (on->first != p.node) usable = false;
    on->second += h;
  } else {
    node.Insert(name_hash, {keep(p.node), h});
  }
  const std::size_t i = snap.IndexOf(p.node);
  if (i == state::Snapshot::npos) return usable;
  const std::span<const std::uint64_t> hashes = snap.position_hashes();
  const state::NodeRecord& record = *snap.nodes()[i];
  for (std::size_t t = 0; t < tiers; ++t) {
    const std::string_view d = record.position.domains[t];
    if (d.empty()) continue;
    const std::uint64_t parent = t + 1 < tiers ? hashes[i * tiers + t + 1] : 0;
    PoolContent* c = domain[t].Find(hashes[i * tiers + t]);
    if (c == nullptr) {
      domain[t].Insert(hashes[i * tiers + t], PoolContent{h, {}, parent, false, keep(d)});
      continue;
    }
    if (c->domain != d) usable = false;  // two domains, one hash
    c->hash += h;
    // A pod that leaves never clears `mixed`: a node keyed alone is exact, only slower.
    if (c->parent_hash != parent) c->mixed = true;
  }
  return usable;
}

// NodeVerdicts' by-hash tables of what `members` (all but `skip_uid`'s) hold on each node and
// in each tier's domain, from `snap`'s hashes (ApplyMember).
PoolTables BuildPoolTables(const std::vector<framework::PoolMember>& members, const state::Snapshot& snap,
                           std::size_t tiers, std::string_view skip_uid,
                           FlatHashIndex<std::pair<std::string_view, std::uint64_t>>& node,
                           std::vector<FlatHashIndex<PoolContent>>& domain,
                           const std::function<std::string_view(std::string_view)>& keep) {
  PoolTables out;
  node.clear();
  domain.resize(tiers);
  for (auto& d : domain) d.clear();
  for (const framework::PoolMember& p : members) {
    // The pod itself, when re-scored, is not one of the pool's pods to the plugins.
    if (!skip_uid.empty() && p.uid == skip_uid) continue;
    ++out.count;
    if (!ApplyMember(p, +1, snap, tiers, node, domain, keep)) out.usable = false;
  }
  return out;
}

// The members of `after` not in `before` (or different there) into `added`, and those of
// `before` not in `after` (or different) into `removed`; both lists sorted by UID
// (ClusterStore::VersionedPoolMembers). False when more than `limit` differ: a rebuild is then
// as cheap.
bool DiffMembers(const std::vector<framework::PoolMember>& before, const std::vector<framework::PoolMember>& after,
                 std::size_t limit, std::vector<const framework::PoolMember*>& added,
                 std::vector<const framework::PoolMember*>& removed) {
  std::size_t i = 0, j = 0;
  while (i < before.size() || j < after.size()) {
    if (added.size() + removed.size() > limit) return false;
    if (j == after.size() || (i < before.size() && before[i].uid < after[j].uid)) {
      removed.push_back(&before[i++]);
    } else if (i == before.size() || after[j].uid < before[i].uid) {
      added.push_back(&after[j++]);
    } else {
      if (!(before[i] == after[j])) {  // the same UID, placed or shaped otherwise
        removed.push_back(&before[i]);
        added.push_back(&after[j]);
      }
      ++i;
      ++j;
    }
  }
  return added.size() + removed.size() <= limit;
}

}  // namespace

std::shared_ptr<const PoolIndex> Evaluator::PoolIndexFor(std::string_view pool, const state::Snapshot& snap,
                                                         std::size_t tiers) {
  std::shared_ptr<const state::Snapshot::PositionRuns> runs = snap.shared_position_runs();
  if (runs == nullptr) return nullptr;
  std::lock_guard lock(pool_mu_);
  const auto it = pool_index_.find(pool);
  // The last index, when it was built for these positions: reused, or patched.
  PoolIndex* last =
      it != pool_index_.end() && it->second->runs == runs && it->second->tiers == tiers ? it->second.get() : nullptr;
  if (last != nullptr && last->version == store_.PoolVersion(pool)) return it->second;
  auto [version, members] = store_.VersionedPoolMembers(pool);
  auto index = std::make_shared<PoolIndex>();
  index->version = version;
  index->runs = std::move(runs);
  index->tiers = tiers;
  index->members = std::move(members);
  for (const framework::PoolMember& m : *index->members) index->uids.Insert(framework::PositionHash(m.uid), true);
  // A pool that changed by a few pods (a rollout binds its pods one by one): the last index's
  // tables less the pods that left, plus those that came.
  thread_local std::vector<const framework::PoolMember*> added, removed;
  added.clear();
  removed.clear();
  const bool patch = last != nullptr && last->usable &&
                     DiffMembers(*last->members, *index->members, index->members->size() / 4 + 1, added, removed);
  if (patch) index->names = last->names;  // appended to from here on, never changed
  const auto keep = [&names = *index->names](std::string_view d) { return std::string_view(names.emplace_back(d)); };
  if (patch) {
    // The map holds the only reference (other calls take theirs under pool_mu_, held here): the
    // tables move into the new version instead of being copied; the old index is dropped below.
    if (it->second.use_count() == 1) {
      index->node = std::move(last->node);
      index->domain = std::move(last->domain);
    } else {
      index->node = last->node;
      index->domain = last->domain;
    }
    index->count = last->count;
    index->patched = true;
    for (const framework::PoolMember* m : removed) {
      --index->count;
      if (!ApplyMember(*m, -1, snap, tiers, index->node, index->domain, keep)) index->usable = false;
    }
    for (const framework::PoolMember* m : added) {
      ++index->count;
      if (!ApplyMember(*m, +1, snap, tiers, index->node, index->domain, keep)) index->usable = false;
    }
  } else {
    const PoolTables built = BuildPoolTables(*index->members, snap, tiers, {}, index->node, index->domain, keep);
    index->count = built.count;
    index->usable = built.usable;
  }
  // An empty pool (all its pods gone) is not kept: a cluster that names pools per rollout would
  // otherwise keep one entry per pool it ever saw.
  if (index->members->empty()) pool_index_.erase(std::string(pool));
  else pool_index_.insert_or_assign(std::string(pool), index);
  return index;
}

NodeVerdicts::NodeVerdicts(Evaluator& evaluator, PodEntry& entry, std::shared_ptr<const state::Snapshot> snap,
                           Want want)
    : evaluator_(evaluator),
      entry_(entry),
      snap_(std::move(snap)),
      class_keys_(snap_->class_keys()),
      want_(want),
      local_(ThreadBuffers().classes),
      many_(ThreadBuffers().many),
      pool_scoring_(IsPoolPod(entry.request) && want == Want::kScores),
      per_node_(entry.request.NamesGpuUuids()),
      cpu_bound_(want == Want::kScores ? Evaluator::CpuBound(entry.request, entry.mix.get()) : 0) {
  local_.clear();  // before the arena its pointers may point into
  many_.clear();
  if (!pool_scoring_) return;
  ThreadBuffers().arena.clear();
  parts_.arena = &ThreadBuffers().arena;
  const pd::NetworkConfig& network = evaluator_.framework().config().network;
  const std::size_t tiers = network.tiers.size();
  positions_resolved_ = state::PositionsResolvedFor(*snap_, network);
  domain_content_.resize(tiers);
  positions_ = evaluator_.store().node_locations();
  if (positions_ != nullptr && positions_->empty()) positions_ = nullptr;
  const auto skip = [&](const framework::PoolMember& p) {
    // The pod itself, when re-scored, is not one of the pool's pods to the plugins.
    return !entry.request.pod_uid.empty() && p.uid == entry.request.pod_uid;
  };
  // By hash, from the snapshot's arrays, when the records' positions count; by string when
  // HyperNodes place nodes, or when two names or domains share a hash. By hash, the tables come
  // from the pool's index (built once per version of the pool and of the positions), unless
  // the scored pod is one of the pool's own: then from the thread's, without it.
  by_hash_ = positions_ == nullptr && positions_resolved_ && snap_->tier_labels().size() == tiers;
  if (by_hash_) {
    index_ = evaluator_.PoolIndexFor(entry.request.pool, *snap_, tiers);
    if (index_ != nullptr) {
      pool_members_ = index_->members;
      pool_version_ = index_->version;
    }
    const bool self = index_ != nullptr && !entry.request.pod_uid.empty() &&
                      index_->uids.Find(framework::PositionHash(entry.request.pod_uid)) != nullptr;
    if (index_ != nullptr && index_->usable && !self) {
      node_by_hash_ = &index_->node;
      domain_by_hash_ = &index_->domain;
      other_members_ = index_->count;
    } else if (index_ == nullptr || index_->usable) {
      if (pool_members_ == nullptr) {
        pool_members_ = std::make_shared<const std::vector<framework::PoolMember>>(
            evaluator_.store().PoolMembers(entry.request.pool));
      }
      HashTables& tables = ThreadTables();
      const PoolTables built = BuildPoolTables(*pool_members_, *snap_, tiers, entry.request.pod_uid, tables.node,
                                               tables.domain, [](std::string_view d) { return d; });
      by_hash_ = built.usable;
      other_members_ = built.count;
      node_by_hash_ = &tables.node;
      domain_by_hash_ = &tables.domain;
    } else {
      by_hash_ = false;
    }
    if (by_hash_) {
      // The nodes that hold pods of the pool, by index: KeyOf looks a node up in the pool's
      // table only when its bit is set (a few hundred nodes of thousands), not by every node's
      // name hash. A bit is set where the table has the node, so the two agree.
      if (pool_members_ != nullptr) {
        std::vector<std::uint64_t>& bits = ThreadPoolNodes();
        bits.assign((snap_->size() + 63) / 64, 0);
        for (const framework::PoolMember& m : *pool_members_) {
          const std::size_t at = snap_->IndexOf(m.node);
          if (at == state::Snapshot::npos || node_by_hash_->Find(snap_->briefs()[at].name_hash) == nullptr) continue;
          bits[at / 64] |= std::uint64_t{1} << (at % 64);
        }
        pool_nodes_ = bits.data();
      }
      // This call's generation for the run keys (KeyOf), and an array for every run.
      thread_local std::uint64_t generation = 0;
      generation_ = ++generation;
      const state::Snapshot::PositionRuns& runs = snap_->position_runs();
      if (runs.run_of.size() == snap_->size()) {
        run_of_ = &runs.run_of;
        std::vector<RunKey>& keys = ThreadRunKeys();
        if (keys.size() < runs.starts.size()) keys.resize(runs.starts.size());
        run_keys_ = keys.data();
      }
      return;
    }
    other_members_ = 0;
  }
  if (pool_members_ == nullptr) {
    pool_members_ = std::make_shared<const std::vector<framework::PoolMember>>(
        evaluator_.store().PoolMembers(entry.request.pool));
  }
  for (const framework::PoolMember& p : *pool_members_) {
    if (skip(p)) continue;
    const std::uint64_t h = MemberHash(p);
    ++other_members_;
    node_content_[p.node] += h;
    const state::NodeRecord* record = snap_->Find(p.node);
    for (std::size_t t = 0; t < tiers; ++t) {
      const std::string_view d = record != nullptr ? DomainAt(*record, t) : std::string_view();
      if (d.empty()) continue;
      const std::string_view parent = t + 1 < tiers ? DomainAt(*record, t + 1) : std::string_view();
      auto [it, inserted] = domain_content_[t].try_emplace(d, Content{0, parent, framework::PositionHash(parent), false, {}});
      it->second.hash += h;
      if (!inserted && it->second.parent != parent) it->second.mixed = true;
    }
  }
}

std::vector<std::uint64_t>& NodeVerdicts::ThreadPoolNodes() {
  thread_local std::vector<std::uint64_t> bits;
  return bits;
}

std::vector<NodeVerdicts::RunKey>& NodeVerdicts::ThreadRunKeys() {
  thread_local std::vector<RunKey> keys;
  return keys;
}

NodeVerdicts::HashTables& NodeVerdicts::ThreadTables() {
  thread_local HashTables tables;
  return tables;
}

// Tier t's domain of `record`, pointing into the positions or the snapshot (both held here).
std::string_view NodeVerdicts::DomainAt(const state::NodeRecord& record, std::size_t t) const {
  if (positions_ != nullptr) {
    if (const auto it = positions_->find(record.name); it != positions_->end()) {
      return t < it->second.domains.size() ? std::string_view(it->second.domains[t]) : std::string_view();
    }
  }
  if (positions_resolved_) return record.position.domains[t];
  const pd::NetworkConfig& network = evaluator_.framework().config().network;
  const auto label = record.labels.find(network.tiers[t].label);
  return label == record.labels.end() ? std::string_view() : std::string_view(label->second);
}

std::uint64_t NodeVerdicts::KeyOf(std::size_t i) {
  constexpr std::uint64_t kOwn = kOwnKey;
  if (per_node_) return kOwn | i;  // Evaluator::VerdictKey: every node on its own
  if (!pool_scoring_) return class_keys_[i];
  // No pod of the pool yet: the gang anchor may be one node (one without the anchor tier's
  // label), so every node is its own key for this first pod.
  if (other_members_ == 0) return kOwn | i;
  const std::size_t tiers = domain_content_.size();
  if (by_hash_) {
    // The snapshot's contiguous hashes, no record read (a 64-bit hash collision could at worst
    // mis-score a node, as class keys could).
    const std::uint64_t* hashes = snap_->position_hashes().data() + i * tiers;
    const std::pair<std::string_view, std::uint64_t>* on_node = nullptr;
    if (pool_nodes_ == nullptr || ((pool_nodes_[i / 64] >> (i % 64)) & 1) != 0) {
      on_node = node_by_hash_->Find(snap_->briefs()[i].name_hash);
    }
    RunKey* run = nullptr;
    if (on_node == nullptr && run_of_ != nullptr) {
      run = &run_keys_[(*run_of_)[i]];
      if (run->generation == generation_) {  // a node of equal domains came before, no pool pod on either
        if (run->own) return kOwn | i;
        parts_.position = run->position;
        return Mix64(run->position ^ class_keys_[i]) & ~kOwn;
      }
      run->generation = generation_;
      run->own = false;
    }
    std::uint64_t key = Mix64(on_node == nullptr ? 0 : on_node->second);
    for (std::size_t t = 0; t < tiers; ++t) {
      const Content* found = (*domain_by_hash_)[t].Find(hashes[t]);
      if (found != nullptr && (found->mixed || (t + 1 < tiers && found->parent_hash != hashes[t + 1]))) {
        if (run != nullptr) run->own = true;
        return kOwn | i;  // tiers do not nest here
      }
      key = Mix64(key ^ (found == nullptr ? 0 : found->hash) ^ (t + 1));
    }
    parts_.position = key;
    if (run != nullptr) run->position = key;
    return Mix64(key ^ class_keys_[i]) & ~kOwn;
  }
  const state::NodeRecord& record = *snap_->nodes()[i];
  std::uint64_t on_node = 0;
  if (const auto it = node_content_.find(record.name); it != node_content_.end()) {
    on_node = it->second;
  }
  std::uint64_t key = Mix64(on_node);  // the position key: what the node and its domains hold
  std::string_view d = tiers > 0 ? DomainAt(record, 0) : std::string_view();
  for (std::size_t t = 0; t < tiers; ++t) {
    const std::string_view up = t + 1 < tiers ? DomainAt(record, t + 1) : std::string_view();
    const Content* found = nullptr;
    if (!d.empty()) {
      if (const auto it = domain_content_[t].find(d); it != domain_content_[t].end()) found = &it->second;
    }
    if (found != nullptr && (found->mixed || found->parent != up)) return kOwn | i;  // tiers do not nest here
    key = Mix64(key ^ (found == nullptr ? 0 : found->hash) ^ (t + 1));
    d = up;
  }
  parts_.position = key;
  return Mix64(key ^ class_keys_[i]) & ~kOwn;
}

std::int64_t NodeVerdicts::CpuFreeIfBinding(std::size_t i) const {
  if (cpu_bound_ <= 0) return -1;
  const std::int64_t free = snap_->briefs()[i].cpu_free_milli;
  return free >= 0 && free < cpu_bound_ ? free : -1;
}

const ClassVerdict* NodeVerdicts::At(std::size_t i) {
  std::uint64_t key = KeyOf(i);
  // A node whose CPU binds the packing score has a verdict of its own. A key of one node alone
  // (a pod naming GPU UUIDs; a pool pod's kOwn keys) is that already; a class key may have any
  // bit set, so the mode tells them apart, not the bit.
  const bool own = per_node_ || (pool_scoring_ && (key & kOwnKey) != 0);
  if (const std::int64_t cpu = CpuFreeIfBinding(i); cpu >= 0 && !own) {
    key = Evaluator::CpuVerdictKey(key, Evaluator::CpuClass(entry_.cpu_thresholds, entry_.request.cpu_milli, cpu)) &
          ~kOwnKey;
  }
  auto& direct = direct_[(key ^ (key >> 29) ^ (key >> 47)) & (kDirect - 1)];
  if (direct.second != nullptr && direct.first == key) return direct.second;
  direct = {key, Lookup(key, i)};
  return direct.second;
}

const ClassVerdict* NodeVerdicts::Lookup(std::uint64_t key, std::size_t i) {
  if (local_.size() <= kLinearClasses) {
    for (const auto& [k, v] : local_) {
      if (k == key) return v.get();
    }
  } else if (const ClassVerdict* const* known = many_.Find(key); known != nullptr) {
    return *known;
  }
  local_.emplace_back(key, evaluator_.Evaluate(entry_, cycle_, *snap_->nodes()[i], want_, snap_,
                                               pool_scoring_ ? pool_members_ : nullptr, positions_,
                                               pool_scoring_ && (key & kOwnKey) == 0 ? &parts_ : nullptr,
                                               pool_version_, CpuFreeIfBinding(i)));
  if (local_.size() == kLinearClasses + 1) {
    for (const auto& [k, v] : local_) many_.Insert(k, v.get());
  } else if (local_.size() > kLinearClasses + 1) {
    many_.Insert(key, local_.back().second.get());
  }
  return local_.back().second.get();
}

}  // namespace toposched::extender
