// The evaluator: a pod's verdict on one node (Evaluate: the framework's filter and scores, a pool
// pod's pool part added per position), the predicates that sort pods (Interested, IsPoolPod,
// PacksCpu) and the remnant counts the ranking reads. Its pod entries are in
// evaluator_entries.cc, its verdict keys and shared tables in evaluator_verdicts.cc, the pool
// keys in pool_index.cc (evaluator.h has the caching rule).

#include "evaluator.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "explain.h"
#include "verbs.h"

namespace toposched::extender {

bool Interested(const PlacementRequest& r) {
  return r.gpus > 0 || r.IsShared() || r.rdma_nics > 0;
}

bool IsPoolPod(const PlacementRequest& r) {
  return r.role != PodRole::kNone && !r.pool.empty();
}

bool PacksCpu(const PlacementRequest& r) {
  // A pod with DRA claims toposched cannot count is not a CPU-only pod: it gets the neutral score.
  return !Interested(r) && r.cpu_milli > 0 && r.resource_claims.empty();
}

Evaluator::Evaluator(const framework::Framework& framework, state::ClusterStore& store,
                     metrics::Registry& metrics, const ExtenderOptions& options, Clock clock,
                     BindHooks* hooks)
    : framework_(framework),
      store_(store),
      hooks_(hooks),
      clock_(clock ? std::move(clock) : Clock([] { return std::chrono::steady_clock::now(); })),
      pods_(options.reservation_ttl, options.max_cached_pods),
      rejections_(metrics.AddCounter("toposched_filter_rejections_total",
                                     "Nodes filtered out, by the reason (plugin and code).", {"reason"})),
      unknown_node_rejections_(&rejections_.With({"UnknownNode"})) {}

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
    framework::CountRemnantsOf(nodes[i]->topology.get(), nodes[i]->allocated, briefs[i].schedulable, vendor,
                               counts);
  }
  return counts;
}

framework::RemnantTie RemnantTieFor(Evaluator& evaluator, const PlacementRequest& request,
                                    const state::Snapshot& snap) {
  return framework::RemnantTie(evaluator.framework(), request, [&evaluator, &snap, vendor = request.vendor] {
    return evaluator.Remnants(snap, vendor);
  });
}

std::shared_ptr<const ClassVerdict> Evaluator::Evaluate(PodEntry& entry,
                                                        std::optional<framework::CycleState>& cycle,
                                                        const NodeQuery& query) {
  const state::NodeRecord& record = query.record;
  const std::int64_t cpu_free = query.cpu_free;
  PoolParts* const parts = query.parts;
  const bool pool_pod = IsPoolPod(entry.request);
  const bool pool_scores = pool_pod && query.want == Want::kScores;
  const std::uint64_t class_verdict_key = VerdictKey(entry.request, record);
  const std::uint64_t verdict_key =
      cpu_free >= 0 ? CpuVerdictKey(class_verdict_key,
                                    CpuClass(entry.cpu_thresholds, entry.request.cpu_milli, cpu_free))
                    : class_verdict_key;
  std::shared_ptr<const ClassVerdict> base = entry.FindVerdict(verdict_key);
  if (base != nullptr && !(pool_scores && base->passes())) return base;
  if (!cycle) {
    cycle.emplace(framework_.NewCycle(entry.request));
    cycle->set_explain(false);  // the verbs answer with numbers only
    cycle->SetShapeMix(entry.mix);
    // The window's mix describes the pods this replica saw last: until it holds
    // min_pods_to_pack_by_mix() of them it is not the workload (a new leader may hold a few
    // NIC-less pods and would let them take the GPU+NIC nodes a Prefill pod needs), and the blind
    // heuristics stay counted. After, they stand down as in the simulator (the framework's own
    // setting; docs/placement.md, "The window rule's threshold").
    if (!entry.packs_by_mix) cycle->set_packs_for_shape_mix(false);
    if (pool_scores) {
      std::shared_ptr<const std::map<std::string, pd::Location>> positions =
          query.positions != nullptr ? query.positions : store_.node_locations();
      const pd::NetworkConfig& network = framework_.config().network;
      cycle->SetCluster(
          query.members != nullptr
              ? state::MakeClusterView(query.snap, network, entry.request.pool, query.members, positions,
                                       query.pool_version)
              : state::MakeClusterView(store_, query.snap, network, entry.request.pool, positions));
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
      const framework::NodeScore score = framework_.RunScore(
          *cycle, info, pool_pod ? framework::ScoreSet::kNodeOnly : framework::ScoreSet::kAll);
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

}  // namespace toposched::extender
