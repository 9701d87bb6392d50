// The extender service: routing, the HTTP checks every verb shares, request metrics, and the
// read-only views (/explain, /nodes). The verbs themselves are the adapters' (adapters.h) over
// the evaluator and the binder. See service.h for the contract and docs/extender.md for the
// routes and replies.

#include "toposched/extender/service.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <exception>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "adapters.h"
#include "binder.h"
#include "evaluator.h"
#include "explain.h"
#include "toposched/common/text.h"
#include "toposched/metrics/logging.h"
#include "toposched/wire/wire.h"
#include "verbs.h"

namespace toposched::extender {
namespace {

using metrics::LogLevel;
using server::HttpRequest;
using server::HttpResponse;

bool IsJsonContentType(std::string_view ct) {
  const std::size_t semi = ct.find(';');
  std::string_view media = ct.substr(0, semi);
  while (!media.empty() && media.back() == ' ') media.remove_suffix(1);
  const std::string lower = AsciiLower(media);
  return lower == "application/json" || (lower.size() > 5 && lower.ends_with("+json"));
}

std::string_view PathOf(std::string_view target) {
  const std::size_t q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

}  // namespace

state::StoreOptions StoreOptionsFor(const framework::SchedulerConfig& config) {
  state::StoreOptions options{.max_shares_per_gpu = config.engine.max_shares_per_gpu,
                              .class_labels = std::vector<std::string>{}};
  for (const pd::Tier& tier : config.network.tiers) options.tier_labels.push_back(tier.label);
  return options;
}

struct ExtenderService::Impl {
  Impl(const framework::Framework& fw, state::ClusterStore& st, metrics::Registry& reg, ExtenderOptions opts,
       Clock clk, BindHooks* h)
      : store(st),
        hooks(h),
        registry(reg),
        options(std::move(opts)),
        evaluator(fw, st, reg, options, std::move(clk), h),
        binder(evaluator, reg),
        kube(evaluator, binder),
        volcano(evaluator, binder, options.volcano_score_weight),
        requests(reg.AddCounter("toposched_requests_total", "HTTP requests by verb and status code.",
                                {"verb", "code"})),
        latency(reg.AddHistogram("toposched_request_duration_seconds",
                                 "Time from a request's arrival to its reply, by verb.", {"verb"},
                                 metrics::LatencyBuckets())),
        state_nodes(reg.AddGauge("toposched_state_nodes", "Nodes in the cluster state.")),
        state_pods(reg.AddGauge("toposched_state_pods", "Pods holding an allocation in the cluster state.")),
        cached_pods_gauge(reg.AddGauge("toposched_cached_pods",
                                       "Pods with cached filter results awaiting bind (reservations).")),
        state_synced(reg.AddGauge("toposched_state_synced", "1 once the cluster state has loaded.")) {
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
      if (rest == "/prioritize-cpu") return Verb::kPrioritizeCpu;
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

  void Handle(const HttpRequest& req, HttpResponse& resp) {
    const auto start = std::chrono::steady_clock::now();
    const std::string_view path = PathOf(req.target);
    const std::optional<Verb> verb = Route(path);
    if (!verb) {
      WriteError(resp, Verb::kFilter, 404, "no such route: " + std::string(path));
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
      WriteError(resp, *verb, 403, "a client certificate signed by the extender's client CA is required");
      requests.With({VerbName(*verb), "403"}).Inc();
      return;
    }
    if (!get && !req.content_type.empty() && !IsJsonContentType(req.content_type)) {
      WriteError(resp, *verb, 415,
                 "unsupported Content-Type \"" + std::string(req.content_type) + "\": send application/json");
      requests.With({VerbName(*verb), "415"}).Inc();
      return;
    }
    try {
      Dispatch(*verb, req, resp);
    } catch (const std::exception& e) {
      // The edge: nothing below should throw; a bug must not take the server down.
      metrics::Log(LogLevel::kError, {VerbName(*verb), "", ""}, std::string("internal error: ") + e.what());
      WriteError(resp, *verb, 500, std::string("internal error: ") + e.what());
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    verb_latency[static_cast<int>(*verb)]->Observe(seconds);
    CountRequest(*verb, resp.status);
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
      case Verb::kExplain:
        return Explain(req, resp);
      case Verb::kNodes:
        return Nodes(req, resp);
      case Verb::kFilter:
        return kube.FilterOrPrioritize(req.body, resp, Want::kFilter);
      case Verb::kPrioritize:
        return kube.FilterOrPrioritize(req.body, resp, Want::kScores);
      case Verb::kBind:
        return kube.Bind(req.body, resp);
      case Verb::kPreempt:
        return kube.Preempt(req.body, resp);
      case Verb::kPrioritizeCpu:
        return kube.FilterOrPrioritize(req.body, resp, Want::kScores, true);
      case Verb::kVPredicate:
        return volcano.Predicate(req.body, resp);
      case Verb::kVPrioritize:
        return volcano.Prioritize(req.body, resp);
      case Verb::kVAllocate:
        return volcano.Allocate(req.body, resp);
      case Verb::kVDeallocate:
        return volcano.Deallocate(req.body, resp);
      case Verb::kVPreemptable:
        return volcano.Evictable(req.body, resp, verb);
      case Verb::kVReclaimable:
        return volcano.Evictable(req.body, resp, verb);
      case Verb::kVSessionOpen:
        return volcano.SessionOpen(req.body, resp);
      case Verb::kVSessionClose:
        return volcano.SessionClose(resp);
    }
  }

  void RefreshGauges() {
    if (scrape_hook) scrape_hook();
    binder.RefreshGauges();
    const auto snap = store.snapshot();
    state_nodes.With({}).Set(static_cast<double>(snap->size()));
    state_pods.With({}).Set(static_cast<double>(store.pod_count()));
    cached_pods_gauge.With({}).Set(static_cast<double>(evaluator.cached_pods()));
    state_synced.With({}).Set(store.synced() ? 1.0 : 0.0);
  }

  // ---- explain and nodes (read-only, any replica) ----

  // A query's parameters, percent-decoded. Only `allowed` keys; each at most once.
  static Result<std::map<std::string, std::string>> ReadQuery(
      std::string_view target, std::initializer_list<std::string_view> allowed) {
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
      const std::optional<std::string> value =
          decode(eq == std::string_view::npos ? "" : pair.substr(eq + 1));
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
      if (v.empty() || v.size() > 6 ||
          !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
          std::stoul(v) == 0) {
        return PlainError(resp, 400, "limit must be a whole number from 1 to 999999, not \"" + v + "\"");
      }
      limit = std::stoul(v);
    }
    std::string pod_json;
    if (req.method == "POST") {
      if (query->contains("pod"))
        return PlainError(resp, 400, "POST the Pod or name it with ?pod=, not both");
      pod_json = std::string(req.body);
    } else {
      const auto it = query->find("pod");
      if (it == query->end())
        return PlainError(resp, 400, "name the pod: ?pod=NAMESPACE/NAME (or POST the Pod JSON)");
      const std::string& ref = it->second;
      const std::size_t slash = ref.find('/');
      const std::string ns = slash == std::string::npos ? std::string() : ref.substr(0, slash);
      const std::string name = slash == std::string::npos ? ref : ref.substr(slash + 1);
      if (!ValidName(ns) || !ValidName(name) || ns.size() > 63) {
        return PlainError(resp, 400,
                          "pod must be NAMESPACE/NAME (lower-case DNS names), not \"" + ref + "\"");
      }
      if (hooks == nullptr) {
        return PlainError(resp, 404,
                          "this extender has no API server to look pods up in (it runs on a cluster "
                          "directory): POST the Pod JSON to /explain instead");
      }
      Result<std::string> pod = hooks->LookupPod(ns, name);
      if (!pod.ok()) {
        const bool missing = pod.error().code() == ErrorCode::kNotFound;
        return PlainError(resp, missing ? 404 : 502, pod.error().message());
      }
      pod_json = std::move(pod).value();
    }
    Result<PlacementRequest> request = ParsePodRequest(pod_json, evaluator.framework().config().request);
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
    in.framework = &evaluator.framework();
    in.store = &store;
    in.snapshot = store.snapshot();
    in.pod_label = PodLabel(request->pod_namespace, request->pod_name, request->pod_uid);
    if (in.pod_label.empty()) in.pod_label = "(the posted pod)";
    if (!request->pod_uid.empty()) in.allocation = store.FindPod(request->pod_uid);
    if (hooks != nullptr) in.stale_nodes = hooks->StaleTopologies();
    in.limit = limit;
    in.shape_mix = evaluator.ShapeMixFor(request->pod_uid);
    in.packs_by_mix = evaluator.PacksByMixFor(request->pod_uid);
    in.request = std::move(request).value();
    evaluator.ResolveDraClaims(in.request);  // a pod whose devices come from DRA claims
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
    const std::map<std::string, int> unmapped =
        hooks != nullptr ? hooks->UnmappedDraDevices() : std::map<std::string, int>{};
    if (*text) {
      resp.content_type = "text/plain; charset=utf-8";
      resp.body = NodesText(*snap, stale, unmapped);
    } else {
      resp.body = NodesJson(*snap, stale, unmapped);
    }
  }

  state::ClusterStore& store;
  BindHooks* const hooks;
  metrics::Registry& registry;
  const ExtenderOptions options;
  Evaluator evaluator;
  Binder binder;
  KubeVerbs kube;
  VolcanoVerbs volcano;
  metrics::Family<metrics::Counter>& requests;
  metrics::Family<metrics::Histogram>& latency;
  metrics::Family<metrics::Gauge>& state_nodes;
  metrics::Family<metrics::Gauge>& state_pods;
  metrics::Family<metrics::Gauge>& cached_pods_gauge;
  metrics::Family<metrics::Gauge>& state_synced;
  metrics::Histogram* verb_latency[kVerbCount] = {};
  metrics::Counter* ok_requests[kVerbCount] = {};
  std::function<void()> scrape_hook;
  std::atomic<bool> explaining{false};  // one explain at a time (each walks every node)
};

ExtenderService::ExtenderService(const framework::Framework& framework, state::ClusterStore& store,
                                 metrics::Registry& metrics, ExtenderOptions options, Clock clock,
                                 BindHooks* hooks)
    : impl_(std::make_unique<Impl>(framework, store, metrics, std::move(options), std::move(clock), hooks)) {}

ExtenderService::~ExtenderService() = default;

void ExtenderService::Handle(const server::HttpRequest& request, server::HttpResponse& response) {
  impl_->Handle(request, response);
}

std::size_t ExtenderService::BodyLimit(std::string_view target) const {
  const std::optional<Verb> verb = impl_->Route(PathOf(target));
  if (verb == Verb::kVSessionOpen) return impl_->options.max_session_body_bytes;
  if (verb == Verb::kExplain) return impl_->options.max_explain_body_bytes;
  return impl_->options.max_body_bytes;
}

bool ExtenderService::WaitsOnApi(std::string_view target) const {
  const std::optional<Verb> verb = impl_->Route(PathOf(target));
  return verb == Verb::kBind || verb == Verb::kExplain;
}

void ExtenderService::SetScrapeHook(std::function<void()> hook) {
  impl_->scrape_hook = std::move(hook);
}

std::size_t ExtenderService::cached_pods() const {
  return impl_->evaluator.cached_pods();
}

}  // namespace toposched::extender
