// The extender service: routing, then one function per verb. See service.h for the contract and
// docs/extender.md for the routes and replies.

#include "toposched/extender/service.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cctype>
#include <exception>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "explain.h"
#include "pod_cache.h"
#include "toposched/extender/wire.h"
#include "toposched/framework/allocation.h"
#include "toposched/framework/shape_window.h"
#include "toposched/server/logging.h"

namespace toposched::extender {
namespace {

using framework::Code;
using server::HttpRequest;
using server::HttpResponse;
using server::LogLevel;

// Verbs, for routing, metrics and logs.
enum class Verb {
  kFilter, kPrioritize, kBind, kPreempt,
  kVPredicate, kVPrioritize, kVAllocate, kVDeallocate, kVPreemptable, kVReclaimable,
  kVSessionOpen, kVSessionClose,
  kHealthz, kReadyz, kMetrics, kExplain, kNodes,
};

constexpr std::string_view VerbName(Verb v) {
  switch (v) {
    case Verb::kFilter: return "filter";
    case Verb::kPrioritize: return "prioritize";
    case Verb::kBind: return "bind";
    case Verb::kPreempt: return "preempt";
    case Verb::kVPredicate: return "volcano/predicate";
    case Verb::kVPrioritize: return "volcano/prioritize";
    case Verb::kVAllocate: return "volcano/allocate";
    case Verb::kVDeallocate: return "volcano/deallocate";
    case Verb::kVPreemptable: return "volcano/preemptable";
    case Verb::kVReclaimable: return "volcano/reclaimable";
    case Verb::kVSessionOpen: return "volcano/onSessionOpen";
    case Verb::kVSessionClose: return "volcano/onSessionClose";
    case Verb::kHealthz: return "healthz";
    case Verb::kReadyz: return "readyz";
    case Verb::kMetrics: return "metrics";
    case Verb::kExplain: return "explain";
    case Verb::kNodes: return "nodes";
  }
  return "unknown";
}
constexpr int kVerbCount = static_cast<int>(Verb::kNodes) + 1;

bool IsVolcano(Verb v) { return v >= Verb::kVPredicate && v <= Verb::kVSessionClose; }
// Read-only routes (GET, HEAD); /explain takes a POSTed Pod too.
bool IsGet(Verb v) { return v >= Verb::kHealthz; }

// Volcano's vote values (pkg/scheduler/plugins/util/util.go) and predicate status codes
// (pkg/scheduler/api/types.go).
constexpr int kVoteAbstain = 0;
constexpr int kVotePermit = 1;
constexpr int kVolcanoError = 1;
constexpr int kVolcanoUnschedulable = 2;
constexpr int kVolcanoUnresolvable = 3;

// A pod needs toposched's devices at all: others pass every node and bind with nothing.
bool Interested(const PlacementRequest& r) { return r.gpus > 0 || r.IsShared() || r.rdma_nics > 0; }

std::string PodLabel(std::string_view ns, std::string_view name, std::string_view uid) {
  if (name.empty()) return std::string(uid);
  std::string s;
  s.reserve(ns.size() + name.size() + 1);
  s.append(ns).append("/").append(name);
  return s;
}

// A request from Volcano's Resreq when the task carries no Pod: whole GPUs and RDMA NICs from
// the scalar resources, which Volcano keeps in milli-units (1 GPU = 1000).
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

}  // namespace

state::StoreOptions StoreOptionsFor(const framework::SchedulerConfig& config) {
  state::StoreOptions options{.max_shares_per_gpu = config.engine.max_shares_per_gpu,
                              .class_labels = std::vector<std::string>{}};
  for (const pd::Tier& tier : config.network.tiers) options.tier_labels.push_back(tier.label);
  return options;
}

struct ExtenderService::Impl {
  Impl(const framework::Framework& fw, state::ClusterStore& st, server::Registry& reg, ExtenderOptions opts,
       Clock clk)
      : framework(fw),
        store(st),
        registry(reg),
        options(std::move(opts)),
        clock(clk ? std::move(clk) : Clock([] { return std::chrono::steady_clock::now(); })),
        pods(options.reservation_ttl, options.max_cached_pods),
        requests(reg.AddCounter("toposched_requests_total", "HTTP requests by verb and status code.",
                                {"verb", "code"})),
        latency(reg.AddHistogram("toposched_request_duration_seconds",
                                 "Time from a request's arrival to its reply, by verb.", {"verb"},
                                 server::LatencyBuckets())),
        rejections(reg.AddCounter("toposched_filter_rejections_total",
                                  "Nodes filtered out, by the reason (plugin and code).", {"reason"})),
        placements(reg.AddCounter("toposched_placements_total",
                                  "Pods bound with devices, by the worst GPU->NIC link class.",
                                  {"worst_class"})),
        reservations(reg.AddCounter(
            "toposched_reservations_total",
            "Binds by what became of the filter-time result: confirmed (same node state), changed "
            "(node changed, re-decided), refetched (no cached result: the pod was read from the API server), "
            "missing (no cached filter result for the pod).",
            {"outcome"})),
        binds(reg.AddCounter("toposched_binds_total",
                             "Bind and Volcano allocate outcomes: bound, already_bound, unfit, conflict, "
                             "no_reservation, not_leader, binding_failed, error.",
                             {"outcome"})),
        volcano_events(reg.AddCounter("toposched_volcano_events_total",
                                      "Volcano session events with an outcome of their own: deallocate_kept (a bound "
                                      "pod evicted in a session keeps its devices), deallocate_released (never bound).",
                                      {"event"})),
        volcano_missing_gauge(reg.AddGauge(
            "toposched_volcano_allocate_missing",
            "Whether Volcano passed tasks through predicate for a minute without one allocate call (1: Volcano "
            "before v1.13 ignores allocateFuncVerb, its binds leave no device record).")),
        state_nodes(reg.AddGauge("toposched_state_nodes", "Nodes in the cluster state.")),
        state_pods(reg.AddGauge("toposched_state_pods", "Pods holding an allocation in the cluster state.")),
        cached_pods_gauge(reg.AddGauge("toposched_cached_pods",
                                       "Pods with cached filter results awaiting bind (reservations).")),
        state_synced(reg.AddGauge("toposched_state_synced", "1 once the cluster state has loaded.")) {
    volcano_missing_gauge.With({}).Set(0);  // a sample from the start (alerts need one)
    // Series looked up on every request are resolved once here (With() takes a mutex).
    for (int v = 0; v < kVerbCount; ++v) {
      verb_latency[v] = &latency.With({VerbName(static_cast<Verb>(v))});
      ok_requests[v] = &requests.With({VerbName(static_cast<Verb>(v)), "200"});
    }
  }

  // ---- routing ----
  std::optional<Verb> Route(std::string_view path) const {
    if (path == "/healthz") return Verb::kHealthz;
    if (path == "/readyz") return Verb::kReadyz;
    if (path == "/metrics") return Verb::kMetrics;
    if (path == "/explain") return Verb::kExplain;
    if (path == "/nodes") return Verb::kNodes;
    auto under = [&](std::string_view prefix, std::string_view& rest) {
      if (!path.starts_with(prefix)) return false;
      rest = path.substr(prefix.size());
      return !rest.empty() && rest.front() == '/';
    };
    std::string_view rest;
    if (under(options.kube_prefix, rest)) {
      if (rest == "/filter") return Verb::kFilter;
      if (rest == "/prioritize") return Verb::kPrioritize;
      if (rest == "/bind") return Verb::kBind;
      if (rest == "/preempt") return Verb::kPreempt;
    }
    if (under(options.volcano_prefix, rest)) {
      if (rest == "/predicate") return Verb::kVPredicate;
      if (rest == "/prioritize") return Verb::kVPrioritize;
      if (rest == "/allocate") return Verb::kVAllocate;
      if (rest == "/deallocate") return Verb::kVDeallocate;
      if (rest == "/preemptable") return Verb::kVPreemptable;
      if (rest == "/reclaimable") return Verb::kVReclaimable;
      if (rest == "/onSessionOpen") return Verb::kVSessionOpen;
      if (rest == "/onSessionClose") return Verb::kVSessionClose;
    }
    return std::nullopt;
  }

  static std::string_view PathOf(std::string_view target) {
    const std::size_t q = target.find('?');
    return q == std::string_view::npos ? target : target.substr(0, q);
  }

  void Handle(const HttpRequest& req, HttpResponse& resp) {
    const auto start = std::chrono::steady_clock::now();
    const std::string_view path = PathOf(req.target);
    const std::optional<Verb> verb = Route(path);
    if (!verb) {
      resp.status = 404;
      resp.body.clear();
      resp.body.append("{\"Error\":");
      AppendJsonString(resp.body, "no such route: " + std::string(path));
      resp.body.append("}");
      requests.With({"unknown", "404"}).Inc();
      return;
    }
    const bool post_too = *verb == Verb::kExplain;
    const bool get = IsGet(*verb) && !(post_too && req.method == "POST");
    if ((get && req.method != "GET" && req.method != "HEAD") || (!get && req.method != "POST")) {
      resp.status = 405;
      resp.extra_header_name = "Allow";
      resp.extra_header_value = post_too ? "GET, HEAD, POST" : get ? "GET, HEAD" : "POST";
      resp.body = "{\"Error\":\"method not allowed\"}";
      requests.With({VerbName(*verb), "405"}).Inc();
      return;
    }
    if (!get && options.require_client_certificate && !req.client_verified) {
      // Any pod that reaches the Service could otherwise make toposched bind arbitrary pods.
      resp.status = 403;
      resp.body.clear();
      resp.body.append(IsVolcano(*verb) ? "{\"errorMessage\":" : "{\"Error\":");
      AppendJsonString(resp.body, "a client certificate signed by the extender's client CA is required");
      resp.body.append("}");
      requests.With({VerbName(*verb), "403"}).Inc();
      return;
    }
    if (!get && !req.content_type.empty() && !IsJsonContentType(req.content_type)) {
      resp.status = 415;
      resp.body.clear();
      resp.body.append(IsVolcano(*verb) ? "{\"errorMessage\":" : "{\"Error\":");
      AppendJsonString(resp.body, "unsupported Content-Type \"" + std::string(req.content_type) +
                                      "\": send application/json");
      resp.body.append("}");
      requests.With({VerbName(*verb), "415"}).Inc();
      return;
    }
    try {
      Dispatch(*verb, req, resp);
    } catch (const std::exception& e) {
      // The edge: nothing below should throw; a bug must not take the server down.
      server::Log(LogLevel::kError, {VerbName(*verb), "", ""}, std::string("internal error: ") + e.what());
      resp.status = 500;
      resp.content_type = "application/json";
      resp.body.clear();
      resp.body.append(IsVolcano(*verb) ? "{\"errorMessage\":" : "{\"Error\":");
      AppendJsonString(resp.body, std::string("internal error: ") + e.what());
      resp.body.append("}");
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    verb_latency[static_cast<int>(*verb)]->Observe(seconds);
    CountRequest(*verb, resp.status);
  }

  static bool IsJsonContentType(std::string_view ct) {
    const std::size_t semi = ct.find(';');
    std::string_view media = ct.substr(0, semi);
    while (!media.empty() && media.back() == ' ') media.remove_suffix(1);
    std::string lower(media);
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    return lower == "application/json" || (lower.size() > 5 && lower.ends_with("+json"));
  }

  void CountRequest(Verb verb, int status) {
    if (status == 200) {
      ok_requests[static_cast<int>(verb)]->Inc();
      return;
    }
    requests.With({VerbName(verb), std::to_string(status)}).Inc();
  }

  void Dispatch(Verb verb, const HttpRequest& req, HttpResponse& resp) {
    resp.status = 200;
    resp.content_type = "application/json";
    resp.body.clear();
    switch (verb) {
      case Verb::kHealthz:
        resp.content_type = "text/plain; charset=utf-8";
        resp.body = "ok\n";
        return;
      case Verb::kReadyz:
        resp.content_type = "text/plain; charset=utf-8";
        if (std::string why; hooks != nullptr ? hooks->Ready(&why) : store.synced()) {
          resp.body = "ready\n";
        } else {
          resp.status = 503;
          resp.body = (why.empty() ? std::string("cluster state not loaded yet") : why) + "\n";
        }
        return;
      case Verb::kMetrics:
        RefreshGauges();
        resp.content_type = "text/plain; version=0.0.4; charset=utf-8";
        resp.body = registry.Render();
        return;
      case Verb::kExplain: return Explain(req, resp);
      case Verb::kNodes: return Nodes(req, resp);
      case Verb::kFilter: return Filter(req.body, resp, false);
      case Verb::kPrioritize: return Filter(req.body, resp, true);
      case Verb::kBind: return Bind(req.body, resp);
      case Verb::kPreempt: return Preempt(req.body, resp);
      case Verb::kVPredicate: return VolcanoPredicate(req.body, resp);
      case Verb::kVPrioritize: return VolcanoPrioritize(req.body, resp);
      case Verb::kVAllocate: return VolcanoAllocate(req.body, resp);
      case Verb::kVDeallocate: return VolcanoDeallocate(req.body, resp);
      case Verb::kVPreemptable: return VolcanoEvict(req.body, resp, Verb::kVPreemptable);
      case Verb::kVReclaimable: return VolcanoEvict(req.body, resp, Verb::kVReclaimable);
      case Verb::kVSessionOpen: return VolcanoSession(req.body, resp, true);
      case Verb::kVSessionClose: return VolcanoSession(req.body, resp, false);
    }
  }

  // Volcano before v1.13 ignores extender.allocateFuncVerb: GPU tasks pass predicate here and are
  // bound by Volcano with no allocate, so no device is recorded. Predicates that pass with no
  // allocate for a minute say so (log once, gauge).
  void NoteVolcanoPass() {
    if (volcano_allocates.load(std::memory_order_relaxed) > 0) return;
    const std::int64_t now = std::max<std::int64_t>(clock().time_since_epoch().count(), 1);  // 0 = none yet
    std::int64_t first = 0;
    if (volcano_first_pass.compare_exchange_strong(first, now, std::memory_order_relaxed)) return;
    if (now - first < std::chrono::duration_cast<PodCache::TimePoint::duration>(std::chrono::minutes(1)).count()) return;
    if (volcano_allocate_missing.exchange(true)) return;
    volcano_missing_gauge.With({}).Set(1);
    server::Log(LogLevel::kWarn, {"volcano/predicate", "", ""},
                "Volcano passes GPU tasks through predicate but has not called allocate for a minute: Volcano "
                "before v1.13 ignores extender.allocateFuncVerb, and its binds then leave toposched no record of "
                "the devices (upgrade Volcano to v1.13 or newer; docs/install.md)");
  }

  void RefreshGauges() {
    if (scrape_hook) scrape_hook();
    if (volcano_allocates.load(std::memory_order_relaxed) > 0) volcano_missing_gauge.With({}).Set(0);
    const auto snap = store.snapshot();
    state_nodes.With({}).Set(static_cast<double>(snap->size()));
    state_pods.With({}).Set(static_cast<double>(store.pod_count()));
    cached_pods_gauge.With({}).Set(static_cast<double>(pods.size()));
    state_synced.With({}).Set(store.synced() ? 1.0 : 0.0);
  }

  // A body the reader rejected: 400, so the scheduler treats it as a transport error (it is a
  // protocol violation, not a scheduling answer), with the reason in the usual error key.
  void BadRequest(HttpResponse& resp, Verb verb, const Error& error) {
    resp.status = 400;
    resp.body.clear();
    resp.body.append(IsVolcano(verb) ? "{\"errorMessage\":" : "{\"Error\":");
    AppendJsonString(resp.body, error.message());
    resp.body.append("}");
    server::Log(LogLevel::kWarn, {VerbName(verb), "", ""}, "bad request: " + error.message());
  }

  static WireReader& Reader() {
    thread_local WireReader reader;
    return reader;
  }

  // Per-thread buffers of the filter/prioritize loop, kept between calls so that a 5,000-node
  // call allocates nothing in steady state. Only views into the current request live here.
  static constexpr std::size_t kLinearClasses = 24;
  struct Scratch {
    std::vector<std::pair<std::uint64_t, std::shared_ptr<const ClassVerdict>>> classes;
    std::unordered_map<std::uint64_t, const ClassVerdict*> many_classes;
    std::vector<NodeRef> passed;
    std::vector<NodeFailure> failed, unresolvable;
    std::vector<HostScore> scores;
    std::vector<const ClassVerdict*> verdicts;
  };
  static Scratch& ThreadScratch() {
    thread_local Scratch scratch;
    return scratch;
  }

  // ---- pods ----

  // The pod's cache entry: a hit for the same UID and resourceVersion, else parsed and stored.
  Result<std::shared_ptr<PodEntry>> EntryFor(const PodRef& pod) {
    const auto now = clock();
    if (auto hit = pods.Find(pod.uid, pod.resource_version, now)) return hit;
    if (pod.raw.empty()) return Error("the request carries no Pod");
    Result<PlacementRequest> parsed = ParsePodRequest(pod.raw, framework.config().request);
    if (!parsed.ok()) return parsed.error().WithContext("Pod " + PodLabel(pod.pod_namespace, pod.name, pod.uid));
    return Store(std::move(parsed).value(), pod.uid, pod.resource_version, now);
  }

  std::shared_ptr<PodEntry> Store(PlacementRequest request, std::string_view uid, std::string_view rv,
                                  PodCache::TimePoint now) {
    auto entry = std::make_shared<PodEntry>();
    entry->uid = std::string(uid.empty() ? std::string_view(request.pod_uid) : uid);
    entry->pod_namespace = request.pod_namespace;
    entry->pod_name = request.pod_name;
    entry->resource_version = std::string(rv);
    entry->interested = Interested(request);
    for (const std::string& warning : request.warnings) {
      server::Log(LogLevel::kWarn, {"request", PodLabel(request.pod_namespace, request.pod_name, entry->uid), ""},
                  warning);
      if (hooks != nullptr) hooks->PodWarning(request.pod_namespace, request.pod_name, entry->uid, "IgnoredLabel", warning);
    }
    // The pods this extender is asked about are the workload it packs for (capacity first):
    // each pod's cycles use the mix as it stood when the pod was first seen.
    if (entry->interested) {
      shapes.Observe(entry->uid, packing::ShapeOf(request, request.cpu_milli));
      entry->mix = shapes.Mix();
    }
    entry->request = std::move(request);
    return pods.Put(std::move(entry), now);
  }

  // A Volcano task's entry: from its Pod when it carries one, else from Resreq.
  Result<std::shared_ptr<PodEntry>> EntryFor(const VolcanoTaskView& task) {
    if (!task.pod.raw.empty()) {
      PodRef pod = task.pod;
      if (pod.uid.empty()) pod.uid = task.uid;
      return EntryFor(pod);
    }
    const auto now = clock();
    if (auto hit = pods.Find(task.uid, "", now)) return hit;
    return Store(RequestFromResreq(task, framework.config().request), task.uid, "", now);
  }

  // ---- one node class ----

  // A pod of a Prefill/Decode pool: its scores depend on where the pool's other pods run, which
  // no node's class key captures, so they are computed afresh on every call (its filter decision
  // is per class, as any pod's).
  static bool IsPoolPod(const PlacementRequest& r) { return r.role != PodRole::kNone && !r.pool.empty(); }

  // The key a pod's verdict on `record` is cached under: the node's class, or, for a pod that
  // names GPUs by UUID (which node classes leave out), the node itself.
  static std::uint64_t VerdictKey(const PlacementRequest& r, const state::NodeRecord& record) {
    if (!r.NamesGpuUuids()) return record.class_key;
    return (record.class_key ^ std::hash<std::string_view>{}(record.name)) * 1099511628211ull;
  }

  // `scores`: false when only the filter decision is wanted (the filter and Volcano predicate
  // verbs). Every pod's filter decision and node-only scores (ScorePlugin::ReadsCluster false)
  // depend on the node's class alone: they are computed once per class and cached on the pod
  // (for an ordinary pod that is its whole score). A pool pod's scores add the pool plugins'
  // part, which depends on where the node sits relative to the pool: computed on every scoring
  // call, per node (the caller groups nodes that must score alike), never cached.
  // `snap`: the call's snapshot (`record` is in it); the pool's pods and HyperNode positions as
  // the call fetched them, for the cluster view of a pool pod's scores (null: fetched here).
  std::shared_ptr<const ClassVerdict> Evaluate(
      PodEntry& entry, std::optional<framework::CycleState>& cycle, const state::NodeRecord& record, bool scores,
      const std::shared_ptr<const state::Snapshot>& snap, const std::vector<state::PodAllocation>* pool_pods = nullptr,
      std::shared_ptr<const std::map<std::string, pd::Location>> positions = nullptr) {
    const bool pool_pod = IsPoolPod(entry.request);
    const bool pool_scores = pool_pod && scores;
    const std::uint64_t verdict_key = VerdictKey(entry.request, record);
    std::shared_ptr<const ClassVerdict> base = entry.FindVerdict(verdict_key);
    if (base != nullptr && !(pool_scores && base->passes())) return base;
    if (!cycle) {
      cycle.emplace(framework.NewCycle(entry.request));
      cycle->set_explain(false);  // the verbs answer with numbers only
      cycle->SetShapeMix(entry.mix);
      if (pool_scores) {
        if (positions == nullptr) positions = store.node_locations();
        const pd::NetworkConfig& network = framework.config().network;
        cycle->SetCluster(pool_pods != nullptr
                              ? state::MakeClusterView(snap, network, entry.request.pool, *pool_pods, positions)
                              : state::MakeClusterView(store, snap, network, entry.request.pool, positions));
      }
    }
    const framework::NodeInfo info = NodeInfoOf(record);
    if (base == nullptr) {
      auto v = std::make_shared<ClassVerdict>();
      const framework::FilterResult filtered = framework.RunFilter(*cycle, info);
      v->code = filtered.code();
      if (filtered.ok()) {
        const framework::NodeScore score =
            framework.RunScore(*cycle, info, pool_pod ? framework::ScoreSet::kNodeOnly : framework::ScoreSet::kAll);
        v->score100 = score.total;
        v->capacity = score.capacity;
        v->score_weighted = score.weighted;
        v->score_weights = score.weights;
        const PlacementOutcome& outcome = cycle->Outcome(info);
        if (outcome.ok()) v->worst_class = outcome.placement->worst_class;
      } else {
        v->message = filtered.ToString();
        // The engine's outcome is the cycle's (DeviceFit computed it); not for a node refused for
        // its state, where no placement was tried.
        const bool placed = info.topology != nullptr && info.schedulable && !info.held;
        v->summary = RefusalSummary(entry.request, info, filtered, placed ? &cycle->Outcome(info) : nullptr);
        std::string reason = filtered.plugin().empty() ? std::string("unknown") : filtered.plugin();
        reason.append("/").append(framework::ToString(filtered.code()));
        v->rejections = &rejections.With({reason});
      }
      base = entry.StoreVerdict(verdict_key, std::move(v));
      if (!(pool_scores && base->passes())) return base;
    }
    // A pool pod on a node that passes: the class's node-only part plus this node's pool part.
    auto v = std::make_shared<ClassVerdict>(*base);
    const framework::NodeScore pool = framework.RunScore(*cycle, info, framework::ScoreSet::kClusterOnly);
    v->score_weighted += pool.weighted;
    v->score_weights += pool.weights;
    v->score100 = framework::WeightedTotal(v->score_weighted, v->score_weights);
    return v;
  }

  // ---- kube-scheduler filter and prioritize ----

  void Filter(std::string_view body, HttpResponse& resp, bool prioritize) {
    const Verb verb = prioritize ? Verb::kPrioritize : Verb::kFilter;
    Result<ExtenderArgsView> args = Reader().ReadExtenderArgs(body);
    if (!args.ok()) return BadRequest(resp, verb, args.error());
    const ExtenderArgsView& a = *args;
    const std::vector<NodeRef>& nodes = a.nodes;

    Result<std::shared_ptr<PodEntry>> entry = EntryFor(a.pod);
    if (!entry.ok()) {
      const std::string pod = PodLabel(a.pod.pod_namespace, a.pod.name, a.pod.uid);
      server::Log(LogLevel::kWarn, {VerbName(verb), pod, ""}, entry.error().message());
      if (prioritize) {
        // Prioritize has no error field; kube-scheduler ignores prioritize failures anyway.
        resp.status = 400;
        resp.body.append("{\"Error\":");
        AppendJsonString(resp.body, entry.error().message());
        resp.body.append("}");
      } else {
        WriteFilterResult(resp.body, a.nodes_given && !a.node_names_given, {}, {}, {}, entry.error().message());
      }
      return;
    }
    PodEntry& e = **entry;
    const bool nodes_mode = a.nodes_given && !a.node_names_given;
    if (!e.interested) {
      // Not ours (no GPUs or RDMA NICs): every node passes, every score is equal.
      if (prioritize) {
        std::vector<HostScore> scores;
        scores.reserve(nodes.size());
        for (const NodeRef& n : nodes) scores.push_back({n.name, 0});
        WriteHostPriorityList(resp.body, scores);
      } else {
        WriteFilterResult(resp.body, nodes_mode, nodes, {}, {}, "");
      }
      return;
    }

    const std::shared_ptr<const state::Snapshot> snap = store.snapshot();
    const std::span<const std::uint64_t> class_keys = snap->class_keys();
    std::optional<framework::CycleState> cycle;
    // The per-node loop is the hot path (thousands of names): a flat name index, the class key
    // from a contiguous array, and this call's verdicts in a short vector (a cluster has a few
    // node classes; a linear scan beats hashing at that size). The record itself is read only
    // for a class this pod has not seen.
    Scratch& scratch = ThreadScratch();
    auto& local = scratch.classes;
    auto& many = scratch.many_classes;  // used once a call sees more than kLinearClasses
    local.clear();
    many.clear();
    // Pool pods (Evaluate scores them afresh on every call): a node's verdict depends on its
    // class and on where it sits relative to the pool's pods; a node holding pods of the pool is
    // a class of its own (the same-node path, the spread term). Its position is HyperNodes'
    // where they place the node, else its tier labels, as the cluster view locates it; of each
    // tier's domain only whether a pod of the pool is in it counts (the pool plugins score by
    // the pool's pods per domain: paths to them, counts of them), so nodes in two domains
    // without pool pods share a result.
    // The filter verb wants pass/fail only: a pool pod is then filtered per class like any pod.
    const bool pool_scoring = IsPoolPod(e.request) && prioritize;
    std::unordered_set<std::string_view> pool_nodes;
    std::vector<state::PodAllocation> pool_pods;
    std::shared_ptr<const std::map<std::string, pd::Location>> positions;
    const pd::NetworkConfig& network = framework.config().network;
    const bool resolved = state::PositionsResolvedFor(*snap, network);
    // Tier t's domain of `record`, pointing into `positions` or the snapshot (both held here).
    const auto domain_at = [&](const state::NodeRecord& record, std::size_t t) -> std::string_view {
      if (positions != nullptr) {
        if (const auto it = positions->find(record.name); it != positions->end()) {
          return t < it->second.domains.size() ? std::string_view(it->second.domains[t]) : std::string_view();
        }
      }
      if (resolved) return record.position.domains[t];
      const auto label = record.labels.find(network.tiers[t].label);
      return label == record.labels.end() ? std::string_view() : std::string_view(label->second);
    };
    std::vector<std::unordered_set<std::string_view>> pool_domains(network.tiers.size());  // per tier
    if (pool_scoring) {
      pool_pods = store.PoolPods(e.request.pool);
      positions = store.node_locations();
      if (positions != nullptr && positions->empty()) positions = nullptr;
      for (const state::PodAllocation& p : pool_pods) {
        pool_nodes.insert(p.node);
        const state::NodeRecord* record = snap->Find(p.node);
        if (record == nullptr) continue;
        for (std::size_t t = 0; t < network.tiers.size(); ++t) {
          if (const std::string_view d = domain_at(*record, t); !d.empty()) pool_domains[t].insert(d);
        }
      }
    }
    const bool per_node = e.request.NamesGpuUuids();  // VerdictKey: every node on its own
    auto key_of = [&](std::size_t i) -> std::uint64_t {
      if (per_node) return (std::uint64_t{1} << 63) | i;
      if (!pool_scoring) return class_keys[i];
      const state::NodeRecord& record = *snap->nodes()[i];
      // No pod of the pool yet: the gang anchor may be one node (one without the anchor tier's
      // label), so every node is its own class for this first pod.
      if (pool_pods.empty() || pool_nodes.contains(record.name)) return (std::uint64_t{1} << 63) | i;
      std::uint64_t key = class_keys[i];
      for (std::size_t t = 0; t < network.tiers.size(); ++t) {
        std::string_view d = domain_at(record, t);
        if (!pool_domains[t].contains(d)) d = {};  // no pod of the pool there: like no domain
        key = (key ^ std::hash<std::string_view>{}(d)) * 1099511628211ull;
      }
      return key & ~(std::uint64_t{1} << 63);
    };
    auto verdict_at = [&](std::size_t i) -> const ClassVerdict* {
      const std::uint64_t key = key_of(i);
      if (local.size() <= kLinearClasses) {
        for (const auto& [k, v] : local) {
          if (k == key) return v.get();
        }
      } else if (auto it = many.find(key); it != many.end()) {
        return it->second;
      }
      local.emplace_back(key, Evaluate(e, cycle, *snap->nodes()[i], /*scores=*/prioritize, snap,
                                       pool_scoring ? &pool_pods : nullptr, positions));
      if (local.size() == kLinearClasses + 1) {
        for (const auto& [k, v] : local) many.emplace(k, v.get());
      } else if (local.size() > kLinearClasses + 1) {
        many.emplace(key, local.back().second.get());
      }
      return local.back().second.get();
    };

    const std::string pod = PodLabel(e.pod_namespace, e.pod_name, e.uid);
    resp.body.reserve(a.nodes.size() * 40 + 256);
    if (prioritize) {
      // Capacity first (framework::CapacityBand): the nodes whose capacity score is far below
      // the best fitting node's score 0, the others 1..10 by their totals.
      std::vector<HostScore>& scores = scratch.scores;
      std::vector<const ClassVerdict*>& verdicts = scratch.verdicts;
      scores.clear();
      verdicts.clear();
      framework::CapacityBand band(framework.CapacityBandWidth());
      for (const NodeRef& n : nodes) {
        const std::size_t i = snap->IndexOf(n.name);
        const ClassVerdict* v = i == state::Snapshot::npos ? nullptr : verdict_at(i);
        if (v != nullptr && !v->passes()) v = nullptr;
        if (v != nullptr) band.Offer(v->AsNodeScore());
        verdicts.push_back(v);
      }
      for (std::size_t k = 0; k < nodes.size(); ++k) {
        scores.push_back({nodes[k].name, verdicts[k] != nullptr ? band.ExtenderScore(verdicts[k]->AsNodeScore()) : 0});
      }
      WriteHostPriorityList(resp.body, scores);
      if (server::LogEnabled(LogLevel::kDebug)) {
        server::Log(LogLevel::kDebug, {"prioritize", pod, ""},
                    "scored " + std::to_string(nodes.size()) + " nodes in " + std::to_string(local.size()) +
                        " classes");
      }
      return;
    }

    std::vector<NodeRef>& passed = scratch.passed;
    std::vector<NodeFailure>& failed = scratch.failed;
    std::vector<NodeFailure>& unresolvable = scratch.unresolvable;
    passed.clear();
    failed.clear();
    unresolvable.clear();
    std::string error;
    for (const NodeRef& n : nodes) {
      const std::size_t i = snap->IndexOf(n.name);
      if (i == state::Snapshot::npos) {
        unresolvable.push_back({n.name, kUnknownNode});
        unknown_node_rejections->Inc();
        continue;
      }
      const ClassVerdict* v = verdict_at(i);
      if (v->passes()) {
        passed.push_back(n);
        continue;
      }
      if (v->rejections != nullptr) v->rejections->Inc();
      switch (v->code) {
        case Code::kUnschedulableAndUnresolvable: unresolvable.push_back({n.name, v->message}); break;
        case Code::kError: error = v->message; [[fallthrough]];
        default: failed.push_back({n.name, v->message}); break;
      }
    }
    if (!error.empty()) {
      // kube-scheduler's contract: a plugin error fails the whole call (the pod is retried).
      server::Log(LogLevel::kError, {"filter", pod, ""}, error);
      WriteFilterResult(resp.body, nodes_mode, {}, {}, {}, error);
      return;
    }
    WriteFilterResult(resp.body, nodes_mode, passed, failed, unresolvable, "");
    if (passed.empty() && !nodes.empty() && hooks != nullptr) {
      // No node fits: the pod's owner gets the reasons counted (a FailedScheduling event). Off the
      // hot path: only calls that leave no node pay for the second pass (verdicts are cached).
      const std::set<std::string, std::less<>> stale = hooks->StaleTopologies();
      std::vector<std::pair<std::string, std::size_t>> reasons;
      auto count = [&](std::string_view summary) {
        for (auto& [text, n] : reasons) {
          if (text == summary) return void(++n);
        }
        reasons.emplace_back(std::string(summary), 1);
      };
      for (const NodeRef& n : nodes) {
        const std::size_t i = snap->IndexOf(n.name);
        const ClassVerdict* v = i == state::Snapshot::npos ? nullptr : verdict_at(i);
        std::string_view summary = v == nullptr ? kSummaryNoTopology : std::string_view(v->summary);
        if (summary == kSummaryNoTopology && stale.contains(n.name)) summary = kSummaryStale;
        count(summary);
      }
      hooks->PodUnschedulable(e.pod_namespace, e.pod_name, e.uid, SummarizeRefusals(nodes.size(), 0, std::move(reasons)));
    }
    if (server::LogEnabled(LogLevel::kDebug)) {
      server::Log(LogLevel::kDebug, {"filter", pod, ""},
                  std::to_string(passed.size()) + " of " + std::to_string(nodes.size()) + " nodes fit (" +
                      std::to_string(local.size()) + " node classes evaluated)");
    }
  }

  // ---- bind (kube-scheduler bind and Volcano allocate) ----

  struct BindOutcome {
    std::string error;  // empty = bound
    std::string outcome;  // metric label
    std::string alignment;  // AlignmentNote of the placement bound (for the pod's event)
  };

  BindOutcome Commit(const std::shared_ptr<PodEntry>& entry, std::string_view node, std::string_view verb) {
    const std::string pod = PodLabel(entry->pod_namespace, entry->pod_name, entry->uid);
    bool confirmed = false;
    std::string alignment;
    auto decide = [&](const state::NodeRecord& record) -> Result<state::PodAllocation> {
      state::PodAllocation a;
      a.uid = entry->uid;
      a.pod_namespace = entry->pod_namespace;
      a.pod_name = entry->pod_name;
      a.node = record.name;
      a.topology_generation = record.topology_generation;
      a.container_devices = entry->request.container_devices;
      a.init_containers = entry->request.init_containers;
      a.role = entry->request.role;
      a.pool = entry->request.pool;
      a.kv_ipc = entry->request.kv_ipc;
      if (!entry->interested) return a;  // nothing of ours to allocate; the bind is recorded
      if (auto v = entry->FindVerdict(VerdictKey(entry->request, record)); v && v->passes()) confirmed = true;
      // Re-decide on the node as it is now, under its lock: the filter-time result may be stale.
      const framework::NodeInfo info = NodeInfoOf(record);
      framework::CycleState cycle = framework.NewCycle(entry->request);
      const framework::FilterResult filtered = framework.RunFilter(cycle, info);
      if (!filtered.ok()) return Error("unfit: pod no longer fits node " + record.name + ": " + filtered.ToString());
      const PlacementOutcome& outcome = cycle.Outcome(info);
      if (!outcome.ok()) return Error("unfit: " + outcome.detail);
      const Placement placement = *outcome.placement;
      framework::NodeInfo scratch = info;
      const framework::PluginStatus reserved = framework.RunReserve(cycle, scratch);
      if (!reserved.ok()) return Error("unfit: reserve on " + record.name + " refused: " + reserved.ToString());
      a.delta = framework::DeltaOf(*record.topology, entry->request, placement);
      a.worst_class = placement.worst_class;
      alignment = AlignmentNote(placement);
      return a;
    };
    Result<state::BindResult> bound = store.Bind(node, entry->uid, decide);
    if (!bound.ok()) {
      const std::string& msg = bound.error().message();
      std::string outcome = "error";
      if (msg.starts_with(state::kConflictTag)) outcome = "conflict";
      else if (msg.starts_with("unfit: ")) outcome = "unfit";
      server::Log(LogLevel::kWarn, {verb, pod, node}, "bind failed: " + msg);
      return {msg, outcome};
    }
    pods.Erase(entry->uid);  // the reservation is consumed
    if (bound->kind == state::BindKind::kAlreadyBound) {
      server::Log(LogLevel::kInfo, {verb, pod, node}, "already bound here (retried bind): nothing to do");
      return {"", "already_bound"};
    }
    if (entry->interested) {
      reservations.With({confirmed ? "confirmed" : "changed"}).Inc();
      placements.With({ToString(bound->allocation.worst_class)}).Inc();
    }
    if (server::LogEnabled(LogLevel::kInfo)) {
      const framework::AllocationDelta& d = bound->allocation.delta;
      std::string what = "bound: gpus [";
      const auto& gpus = d.exclusive_gpus;
      std::vector<int> shared;
      for (const auto& s : d.shares) shared.push_back(s.first);
      const std::vector<int>& list = gpus.empty() ? shared : gpus;
      for (std::size_t i = 0; i < list.size(); ++i) what += (i ? "," : "") + std::to_string(list[i]);
      what += "] nics [";
      for (std::size_t i = 0; i < d.nics.size(); ++i) what += (i ? "," : "") + std::to_string(d.nics[i]);
      what += "]";
      if (entry->interested) what += " worst " + std::string(ToString(bound->allocation.worst_class));
      if (!alignment.empty()) what += " (" + alignment + ")";
      server::Log(LogLevel::kInfo, {verb, pod, node}, what);
    }
    return {"", "bound", std::move(alignment)};
  }

  // Only the leader changes state; an in-band error makes the scheduler retry (by then the
  // Service routes it to the leader, the only ready replica).
  bool RefuseUnlessLeader(std::string& error) const {
    if (hooks == nullptr || hooks->MayChangeState()) return false;
    error = "this toposched replica is not the leader; retry against the leader";
    return true;
  }

  void Bind(std::string_view body, HttpResponse& resp) {
    Result<BindingArgs> args = Reader().ReadBindingArgs(body);
    if (!args.ok()) return BadRequest(resp, Verb::kBind, args.error());
    const BindingArgs& b = *args;
    if (std::string error; RefuseUnlessLeader(error)) {
      binds.With({"not_leader"}).Inc();
      WriteBindingResult(resp.body, error);
      return;
    }
    std::shared_ptr<PodEntry> entry = pods.Find(b.pod_uid, "", clock());
    if (auto existing = store.FindPod(b.pod_uid); existing && existing->node != b.node && hooks != nullptr &&
                                                  hooks->MayRebind(*existing)) {
      // An allocation whose Binding never happened (the extender died between the two, or
      // the scheduler gave up on that node): the pod is not running anywhere, so it moves.
      if (auto released = store.Release(b.pod_uid); !released.ok()) {
        binds.With({"error"}).Inc();
        WriteBindingResult(resp.body, released.error().message());
        return;
      }
      server::Log(LogLevel::kInfo, {"bind", PodLabel(b.pod_namespace, b.pod_name, b.pod_uid), existing->node},
                  "released an allocation whose Binding was never created; binding to " + std::string(b.node));
    }
    if (!entry) {
      // A retried bind of a pod bound before (the reply was lost) must still succeed.
      if (auto existing = store.FindPod(b.pod_uid)) {
        if (existing->node == b.node) {
          const std::string error = Complete(*existing);
          binds.With({error.empty() ? "already_bound" : "error"}).Inc();
          WriteBindingResult(resp.body, error);
          return;
        }
        binds.With({"conflict"}).Inc();
        WriteBindingResult(resp.body, std::string(state::kConflictTag) + "pod " + std::string(b.pod_uid) +
                                          " is already bound to node " + existing->node);
        return;
      }
      if (hooks != nullptr) {
        // The API server has the pod: read its request from there.
        Result<std::string> pod = hooks->FetchPod(b.pod_namespace, b.pod_name, b.pod_uid);
        if (pod.ok()) {
          Result<PlacementRequest> parsed = ParsePodRequest(*pod, framework.config().request);
          if (parsed.ok()) {
            reservations.With({"refetched"}).Inc();
            entry = Store(std::move(parsed).value(), b.pod_uid, "", clock());
          } else {
            binds.With({"error"}).Inc();
            WriteBindingResult(resp.body, parsed.error().message());
            return;
          }
        } else {
          server::Log(LogLevel::kWarn, {"bind", PodLabel(b.pod_namespace, b.pod_name, b.pod_uid), b.node},
                      "cannot read the pod: " + pod.error().message());
        }
      }
    }
    if (!entry) {
      reservations.With({"missing"}).Inc();
      binds.With({"no_reservation"}).Inc();
      const std::string msg = "no filter result cached for pod " + std::string(b.pod_namespace) + "/" +
                              std::string(b.pod_name) + " (uid " + std::string(b.pod_uid) +
                              "): it expired or the extender restarted; the scheduler will retry the pod";
      server::Log(LogLevel::kWarn, {"bind", PodLabel(b.pod_namespace, b.pod_name, b.pod_uid), b.node}, msg);
      WriteBindingResult(resp.body, msg);
      return;
    }
    BindOutcome out = Commit(entry, b.node, "bind");
    if (out.error.empty()) {
      if (auto bound = store.FindPod(b.pod_uid)) {
        if (std::string error = Complete(*bound); !error.empty()) {
          out = {std::move(error), "binding_failed", ""};
        } else if (out.outcome == "bound" && hooks != nullptr) {
          hooks->PodAllocated(*bound, out.alignment, /*volcano=*/false);
        }
      }
    }
    binds.With({out.outcome}).Inc();
    WriteBindingResult(resp.body, out.error);
  }

  // Creates the Binding through the hooks; on failure gives the devices back (persistence
  // undoes the annotations) and returns the error for the scheduler ("" = bound).
  std::string Complete(const state::PodAllocation& allocation) {
    if (hooks == nullptr) return "";
    Status s = hooks->CompleteBind(allocation);
    if (s.ok()) return "";
    const std::string pod = PodLabel(allocation.pod_namespace, allocation.pod_name, allocation.uid);
    std::string error = "cannot create the Binding: " + s.error().message();
    if (auto released = store.Release(allocation.uid); !released.ok()) {
      error += "; and releasing the allocation failed: " + released.error().message();
    }
    server::Log(LogLevel::kWarn, {"bind", pod, allocation.node}, error);
    return error;
  }

  // ---- kube-scheduler preempt ----

  void Preempt(std::string_view body, HttpResponse& resp) {
    Result<PreemptionArgsView> args = Reader().ReadPreemptionArgs(body);
    if (!args.ok()) return BadRequest(resp, Verb::kPreempt, args.error());
    Result<std::shared_ptr<PodEntry>> entry = EntryFor(args->pod);
    if (!entry.ok()) return BadRequest(resp, Verb::kPreempt, entry.error());
    const PodEntry& e = **entry;
    const auto snap = store.snapshot();
    std::vector<NodeVictimsOut> keep;
    keep.reserve(args->nodes.size());
    for (const NodeVictimsView& nv : args->nodes) {
      if (nv.uids.empty()) continue;  // kube-scheduler rejects nodes without victims
      if (!e.interested) {
        keep.push_back({nv.node, nv.uids, nv.num_pdb_violations});
        continue;
      }
      const state::NodeRecord* rec = snap->Find(nv.node);
      if (rec == nullptr) continue;
      // The node as it would be without the victims' devices.
      framework::NodeInfo info = NodeInfoOf(*rec);
      for (std::string_view uid : nv.uids) {
        std::optional<state::PodAllocation> victim = store.FindPod(uid);
        if (!victim || victim->node != rec->name) continue;
        framework::RevertDelta(victim->delta, framework::ShapeOf(info.allocated), info.allocated);
      }
      framework::CycleState cycle = framework.NewCycle(e.request);
      if (framework.RunFilter(cycle, info).ok()) keep.push_back({nv.node, nv.uids, nv.num_pdb_violations});
    }
    WritePreemptionResult(resp.body, keep);
  }

  // ---- Volcano ----

  void VolcanoPredicate(std::string_view body, HttpResponse& resp) {
    Result<VolcanoPredicateArgs> args = Reader().ReadVolcanoPredicate(body);
    if (!args.ok()) return BadRequest(resp, Verb::kVPredicate, args.error());
    Result<std::shared_ptr<PodEntry>> entry = EntryFor(args->task);
    if (!entry.ok()) {
      WriteVolcanoPredicateResult(resp.body, entry.error().message(), kVolcanoError);
      return;
    }
    PodEntry& e = **entry;
    if (!e.interested) {
      WriteVolcanoPredicateResult(resp.body, "", 0);
      return;
    }
    const auto snap = store.snapshot();
    const state::NodeRecord* rec = snap->Find(args->node_name);
    if (rec == nullptr) {
      unknown_node_rejections->Inc();
      WriteVolcanoPredicateResult(resp.body, kUnknownNode, kVolcanoUnresolvable);
      return;
    }
    std::optional<framework::CycleState> cycle;
    const auto v = Evaluate(e, cycle, *rec, /*scores=*/false, snap);
    if (v->passes()) {
      NoteVolcanoPass();
      WriteVolcanoPredicateResult(resp.body, "", 0);
      return;
    }
    if (v->rejections != nullptr) v->rejections->Inc();
    const int code = v->code == Code::kUnschedulableAndUnresolvable ? kVolcanoUnresolvable
                     : v->code == Code::kError                      ? kVolcanoError
                                                                    : kVolcanoUnschedulable;
    WriteVolcanoPredicateResult(resp.body, v->message, code);
  }

  void VolcanoPrioritize(std::string_view body, HttpResponse& resp) {
    Result<VolcanoPrioritizeArgs> args = Reader().ReadVolcanoPrioritize(body);
    if (!args.ok()) return BadRequest(resp, Verb::kVPrioritize, args.error());
    Result<std::shared_ptr<PodEntry>> entry = EntryFor(args->task);
    std::vector<VolcanoNodeScore> scores;
    scores.reserve(args->node_names.size());
    if (!entry.ok()) {
      // An error here leaves the task without a node this pass (Volcano's PrioritizeNodes):
      // score every node 0 instead and say why in the log.
      server::Log(LogLevel::kWarn, {"volcano/prioritize", args->task.uid, ""}, entry.error().message());
      for (std::string_view n : args->node_names) scores.push_back({n, 0});
      WriteVolcanoPrioritizeResult(resp.body, scores, "");
      return;
    }
    PodEntry& e = **entry;
    const auto snap = store.snapshot();
    std::optional<framework::CycleState> cycle;
    // Capacity first, as for kube-scheduler: nodes outside the band score 0, the others at least
    // one weight.
    std::vector<std::shared_ptr<const ClassVerdict>> verdicts;
    verdicts.reserve(args->node_names.size());
    framework::CapacityBand band(framework.CapacityBandWidth());
    for (std::string_view n : args->node_names) {
      std::shared_ptr<const ClassVerdict> v;
      if (e.interested) {
        if (const state::NodeRecord* rec = snap->Find(n)) {
          v = Evaluate(e, cycle, *rec, /*scores=*/true, snap);
          if (!v->passes()) v = nullptr;
        }
      }
      if (v != nullptr) band.Offer(v->AsNodeScore());
      verdicts.push_back(std::move(v));
    }
    for (std::size_t k = 0; k < args->node_names.size(); ++k) {
      double score = 0;
      if (const auto& v = verdicts[k]; v != nullptr && band.In(v->AsNodeScore())) {
        score = std::max(1, v->score100) * options.volcano_score_weight;
      }
      scores.push_back({args->node_names[k], score});
    }
    WriteVolcanoPrioritizeResult(resp.body, scores, "");
  }

  // Volcano's allocate and deallocate are session events, not binds (volcano-sh/volcano
  // pkg/scheduler/framework/statement.go): allocate comes when a statement allocates or pipelines
  // a task and when Discard un-evicts one; deallocate when a task is un-pipelined or allocated
  // back, and when a statement evicts a running one. So (docs/extender.md, "Volcano sessions"):
  //   allocate   a pod with no allocation: decided and made durable now (annotations, HAMi lock),
  //              before Volcano's Binding, which follows the statement's commit; a pod already
  //              allocated on that node (un-evicted, re-allocated in a later session): unchanged;
  //              allocated on another node but never bound there: moved.
  //   deallocate a pod the API server shows bound (running, evicted by a session): nothing
  //              changes, its devices are freed when the pod is gone; a pod never bound: released
  //              and its annotations removed. When that cannot be confirmed, nothing is freed.
  void VolcanoAllocate(std::string_view body, HttpResponse& resp) {
    Result<VolcanoEventArgs> args = Reader().ReadVolcanoEvent(body);
    if (!args.ok()) return BadRequest(resp, Verb::kVAllocate, args.error());
    const VolcanoTaskView& task = args->task;
    volcano_allocates.fetch_add(1, std::memory_order_relaxed);
    if (std::string error; RefuseUnlessLeader(error)) {
      binds.With({"not_leader"}).Inc();
      WriteVolcanoEventResult(resp.body, error);
      return;
    }
    if (task.node_name.empty()) {
      WriteVolcanoEventResult(resp.body, "task " + std::string(task.uid) + " has no NodeName to allocate on");
      return;
    }
    Result<std::shared_ptr<PodEntry>> entry = EntryFor(task);
    if (!entry.ok()) {
      binds.With({"error"}).Inc();
      WriteVolcanoEventResult(resp.body, entry.error().message());
      return;
    }
    if (auto existing = store.FindPod(task.uid); existing && existing->node != task.node_name &&
                                                 hooks != nullptr && hooks->MayRebind(*existing)) {
      // Allocated in an earlier session on another node, never bound there: it moves.
      if (auto released = store.Release(task.uid); !released.ok()) {
        binds.With({"error"}).Inc();
        WriteVolcanoEventResult(resp.body, released.error().message());
        return;
      }
    }
    const BindOutcome out = Commit(*entry, task.node_name, "volcano/allocate");
    if (out.error.empty() && out.outcome == "bound" && hooks != nullptr) {
      if (auto allocated = store.FindPod(task.uid)) hooks->PodAllocated(*allocated, out.alignment, /*volcano=*/true);
    }
    binds.With({out.outcome}).Inc();
    WriteVolcanoEventResult(resp.body, out.error);
  }

  void VolcanoDeallocate(std::string_view body, HttpResponse& resp) {
    Result<VolcanoEventArgs> args = Reader().ReadVolcanoEvent(body);
    if (!args.ok()) return BadRequest(resp, Verb::kVDeallocate, args.error());
    if (std::string error; RefuseUnlessLeader(error)) {
      WriteVolcanoEventResult(resp.body, error);
      return;
    }
    const std::string uid(args->task.uid);
    const std::optional<state::PodAllocation> existing = store.FindPod(uid);
    if (!existing) {
      WriteVolcanoEventResult(resp.body, "");
      return;
    }
    if (existing->foreign || !existing->hold.empty() || (hooks != nullptr && !hooks->MayRebind(*existing))) {
      // Running (a session evicts it; if the statement is discarded it keeps running), or not
      // provably unbound: its devices stay until the pod is gone.
      volcano_events.With({"deallocate_kept"}).Inc();
      server::Log(LogLevel::kInfo, {"volcano/deallocate", uid, existing->node},
                  "the pod is bound (or cannot be shown unbound): its devices stay until it is gone");
      WriteVolcanoEventResult(resp.body, "");
      return;
    }
    Result<std::optional<state::PodAllocation>> released = store.Release(uid);
    if (!released.ok()) {
      WriteVolcanoEventResult(resp.body, released.error().message());
      return;
    }
    if (released->has_value()) {
      volcano_events.With({"deallocate_released"}).Inc();
      server::Log(LogLevel::kInfo, {"volcano/deallocate", uid, (*released)->node}, "released (never bound)");
    }
    WriteVolcanoEventResult(resp.body, "");
  }

  void VolcanoEvict(std::string_view body, HttpResponse& resp, Verb verb) {
    Result<VolcanoEvictArgs> args = Reader().ReadVolcanoEvict(body);
    if (!args.ok()) return BadRequest(resp, verb, args.error());
    Result<std::shared_ptr<PodEntry>> entry = EntryFor(args->evictor);
    if (!entry.ok() || !(*entry)->interested) {
      // Not a device request (or unreadable): no opinion on whom to evict.
      WriteVolcanoEvictResult(resp.body, kVoteAbstain, {});
      return;
    }
    // Evicting a pod helps a device request only if it holds devices toposched tracks.
    std::vector<std::string_view> victims;
    for (const VolcanoTaskView& t : args->evictees) {
      const std::optional<state::PodAllocation> held = store.FindPod(t.uid);
      if (!held) continue;
      const framework::AllocationDelta& d = held->delta;
      if (!d.exclusive_gpus.empty() || !d.shares.empty() || !d.nics.empty()) victims.push_back(t.raw);
    }
    WriteVolcanoEvictResult(resp.body, victims.empty() ? kVoteAbstain : kVotePermit, victims);
  }

  void VolcanoSession(std::string_view body, HttpResponse& resp, bool open) {
    if (open) {
      Result<VolcanoSessionArgs> args = Reader().ReadVolcanoSession(body);
      if (!args.ok()) return BadRequest(resp, Verb::kVSessionOpen, args.error());
      if (server::LogEnabled(LogLevel::kDebug)) {
        server::Log(LogLevel::kDebug, {"volcano/onSessionOpen", "", ""},
                    "session: " + std::to_string(args->jobs) + " jobs, " + std::to_string(args->nodes) +
                        " nodes, " + std::to_string(args->queues) + " queues");
      }
    }
    resp.body = "{}";
  }

  // ---- explain and nodes (read-only, any replica) ----

  // A query's parameters, percent-decoded. Only `allowed` keys; each at most once.
  static Result<std::map<std::string, std::string>> ReadQuery(std::string_view target,
                                                              std::initializer_list<std::string_view> allowed) {
    std::map<std::string, std::string> out;
    const std::size_t q = target.find('?');
    if (q == std::string_view::npos) return out;
    std::string_view rest = target.substr(q + 1);
    auto decode = [](std::string_view in) -> std::optional<std::string> {
      std::string s;
      for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] == '+') {
          s += ' ';
        } else if (in[i] == '%') {
          if (i + 2 >= in.size() || !std::isxdigit(static_cast<unsigned char>(in[i + 1])) ||
              !std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
            return std::nullopt;
          }
          s += static_cast<char>(std::stoi(std::string(in.substr(i + 1, 2)), nullptr, 16));
          i += 2;
        } else {
          s += in[i];
        }
      }
      return s;
    };
    while (!rest.empty()) {
      const std::size_t amp = rest.find('&');
      const std::string_view pair = rest.substr(0, amp);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
      if (pair.empty()) continue;
      const std::size_t eq = pair.find('=');
      const std::optional<std::string> key = decode(pair.substr(0, eq));
      const std::optional<std::string> value = decode(eq == std::string_view::npos ? "" : pair.substr(eq + 1));
      if (!key || !value) return Error("bad percent-encoding in the query");
      if (std::find(allowed.begin(), allowed.end(), *key) == allowed.end()) {
        std::string known;
        for (std::string_view a : allowed) known += (known.empty() ? "" : ", ") + std::string(a);
        return Error("unknown query parameter \"" + *key + "\" (known: " + known + ")");
      }
      if (!out.emplace(*key, *value).second) return Error("query parameter \"" + *key + "\" given twice");
    }
    return out;
  }

  // A Kubernetes object name or namespace: DNS-1123 subdomain characters, at most 253.
  static bool ValidName(std::string_view s) {
    if (s.empty() || s.size() > 253) return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    });
  }

  static void PlainError(HttpResponse& resp, int status, const std::string& message) {
    resp.status = status;
    resp.content_type = "application/json";
    resp.body.clear();
    resp.body.append("{\"Error\":");
    AppendJsonString(resp.body, message);
    resp.body.append("}");
  }

  // Text (kubectl toposched) or JSON (the default).
  static Result<bool> WantsText(const std::map<std::string, std::string>& query) {
    const auto it = query.find("format");
    if (it == query.end() || it->second == "json") return false;
    if (it->second == "text") return true;
    return Error("format must be json or text, not \"" + it->second + "\"");
  }

  // GET /explain?pod=NS/NAME (looked up through the hooks: the API server) or POST /explain with
  // a Pod: where the pod would go now and why not elsewhere, every node of the current store.
  void Explain(const HttpRequest& req, HttpResponse& resp) {
    Result<std::map<std::string, std::string>> query = ReadQuery(req.target, {"pod", "format", "limit"});
    if (!query.ok()) return PlainError(resp, 400, query.error().message());
    Result<bool> text = WantsText(*query);
    if (!text.ok()) return PlainError(resp, 400, text.error().message());
    std::size_t limit = options.max_explain_nodes;
    if (auto it = query->find("limit"); it != query->end()) {
      const std::string& v = it->second;
      if (v.empty() || v.size() > 6 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
          std::stoul(v) == 0) {
        return PlainError(resp, 400, "limit must be a whole number from 1 to 999999, not \"" + v + "\"");
      }
      limit = std::stoul(v);
    }
    std::string pod_json;
    if (req.method == "POST") {
      if (query->contains("pod")) return PlainError(resp, 400, "POST the Pod or name it with ?pod=, not both");
      pod_json = std::string(req.body);
    } else {
      const auto it = query->find("pod");
      if (it == query->end()) return PlainError(resp, 400, "name the pod: ?pod=NAMESPACE/NAME (or POST the Pod JSON)");
      const std::string& ref = it->second;
      const std::size_t slash = ref.find('/');
      const std::string ns = slash == std::string::npos ? std::string() : ref.substr(0, slash);
      const std::string name = slash == std::string::npos ? ref : ref.substr(slash + 1);
      if (!ValidName(ns) || !ValidName(name) || ns.size() > 63) {
        return PlainError(resp, 400, "pod must be NAMESPACE/NAME (lower-case DNS names), not \"" + ref + "\"");
      }
      if (hooks == nullptr) {
        return PlainError(resp, 404, "this extender has no API server to look pods up in (it runs on a cluster "
                                     "directory): POST the Pod JSON to /explain instead");
      }
      Result<std::string> pod = hooks->LookupPod(ns, name);
      if (!pod.ok()) {
        const bool missing = pod.error().message().starts_with(kPodNotFoundTag);
        return PlainError(resp, missing ? 404 : 502, pod.error().message());
      }
      pod_json = std::move(pod).value();
    }
    Result<PlacementRequest> request = ParsePodRequest(pod_json, framework.config().request);
    if (!request.ok()) return PlainError(resp, 400, "cannot read the Pod: " + request.error().message());
    if (explaining.exchange(true)) {
      resp.extra_header_name = "Retry-After";
      resp.extra_header_value = "1";
      return PlainError(resp, 429, "another explain is running; retry in a second");
    }
    struct Done {
      std::atomic<bool>& flag;
      ~Done() { flag.store(false); }
    } done{explaining};
    ExplainInput in;
    in.framework = &framework;
    in.store = &store;
    in.snapshot = store.snapshot();
    in.pod_label = PodLabel(request->pod_namespace, request->pod_name, request->pod_uid);
    if (in.pod_label.empty()) in.pod_label = "(the posted pod)";
    if (!request->pod_uid.empty()) in.allocation = store.FindPod(request->pod_uid);
    if (hooks != nullptr) in.stale_nodes = hooks->StaleTopologies();
    in.limit = limit;
    in.request = std::move(request).value();
    const Explanation e = extender::Explain(in);
    if (*text) {
      resp.content_type = "text/plain; charset=utf-8";
      resp.body = ToText(e);
    } else {
      resp.body = ToJson(e);
    }
  }

  void Nodes(const HttpRequest& req, HttpResponse& resp) {
    Result<std::map<std::string, std::string>> query = ReadQuery(req.target, {"format"});
    if (!query.ok()) return PlainError(resp, 400, query.error().message());
    Result<bool> text = WantsText(*query);
    if (!text.ok()) return PlainError(resp, 400, text.error().message());
    const auto snap = store.snapshot();
    const std::set<std::string, std::less<>> stale =
        hooks != nullptr ? hooks->StaleTopologies() : std::set<std::string, std::less<>>{};
    if (*text) {
      resp.content_type = "text/plain; charset=utf-8";
      resp.body = NodesText(*snap, stale);
    } else {
      resp.body = NodesJson(*snap, stale);
    }
  }

  static constexpr std::string_view kUnknownNode =
      "toposched has no NodeTopology for this node (is the agent running there?)";

  const framework::Framework& framework;
  state::ClusterStore& store;
  BindHooks* hooks = nullptr;
  server::Registry& registry;
  const ExtenderOptions options;
  const Clock clock;
  PodCache pods;
  framework::ShapeWindow shapes;  // the pods asked about: the mix capacity first packs for
  server::Family<server::Counter>& requests;
  server::Family<server::Histogram>& latency;
  server::Family<server::Counter>& rejections;
  server::Family<server::Counter>& placements;
  server::Family<server::Counter>& reservations;
  server::Family<server::Counter>& binds;
  server::Family<server::Counter>& volcano_events;
  server::Family<server::Gauge>& volcano_missing_gauge;
  std::atomic<std::uint64_t> volcano_allocates{0};
  std::atomic<std::int64_t> volcano_first_pass{0};  // clock ticks of the first passing predicate
  std::atomic<bool> volcano_allocate_missing{false};
  server::Family<server::Gauge>& state_nodes;
  server::Family<server::Gauge>& state_pods;
  server::Family<server::Gauge>& cached_pods_gauge;
  server::Family<server::Gauge>& state_synced;
  server::Histogram* verb_latency[kVerbCount] = {};
  server::Counter* ok_requests[kVerbCount] = {};
  server::Counter* unknown_node_rejections = &rejections.With({"UnknownNode"});
  std::function<void()> scrape_hook;
  std::atomic<bool> explaining{false};  // one explain at a time (each walks every node)
};

ExtenderService::ExtenderService(const framework::Framework& framework, state::ClusterStore& store,
                                 server::Registry& metrics, ExtenderOptions options, Clock clock,
                                 BindHooks* hooks)
    : impl_(std::make_unique<Impl>(framework, store, metrics, std::move(options), std::move(clock))) {
  impl_->hooks = hooks;
}

ExtenderService::~ExtenderService() = default;

void ExtenderService::Handle(const server::HttpRequest& request, server::HttpResponse& response) {
  impl_->Handle(request, response);
}

std::size_t ExtenderService::BodyLimit(std::string_view target) const {
  const std::optional<Verb> verb = impl_->Route(Impl::PathOf(target));
  if (verb == Verb::kVSessionOpen) return impl_->options.max_session_body_bytes;
  if (verb == Verb::kExplain) return impl_->options.max_explain_body_bytes;
  return impl_->options.max_body_bytes;
}

void ExtenderService::SetScrapeHook(std::function<void()> hook) { impl_->scrape_hook = std::move(hook); }

std::size_t ExtenderService::cached_pods() const { return impl_->pods.size(); }

}  // namespace toposched::extender
