#pragma once
// The extender service: kube-scheduler's and Volcano's verbs on top of the framework and the
// cluster state. It is the HTTP server's Handler (server knows no scheduling; this knows no
// sockets). docs/extender.md has every route, the reply for each failure, and the metrics.
//
// Per call: one snapshot of the cluster state, one CycleState; no global lock held across a
// request. Nodes in the same scheduling state (equal class keys) are filtered and scored once
// per pod. What filter/prioritize computed for a pod is kept in the PodCache (pod UID,
// resourceVersion, per-class verdicts keyed by hardware fingerprint + allocation, TTL); bind reads the
// pod's request from it (kube-scheduler's bind carries no Pod) and re-decides under the node's
// lock in ClusterStore::Bind, so two concurrent binds never oversubscribe a device.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "toposched/extender/bind_hooks.h"
#include "toposched/framework/framework.h"
#include "toposched/metrics/metrics.h"
#include "toposched/placement/request.h"
#include "toposched/server/http_server.h"
#include "toposched/state/cluster_state.h"

namespace toposched::extender {

// The cluster store the service expects: HAMi's split count from the config, and node classes
// that hash no labels (no plugin's verdict reads a label except the pool plugins', whose pods
// the service keys by network position itself; hashing them made every real node a class of
// its own through kubernetes.io/hostname, and tier labels would split classes per leaf), and
// the network tiers' labels, so that each node's position is resolved once per change.
state::StoreOptions StoreOptionsFor(const framework::SchedulerConfig& config);

struct ExtenderOptions {
  // kube-scheduler verbs: POST {kube_prefix}/filter, /prioritize, /bind, /preempt. The
  // KubeSchedulerConfiguration's urlPrefix is http(s)://HOST:PORT{kube_prefix}.
  std::string kube_prefix = "/scheduler";
  // Volcano verbs: POST {volcano_prefix}/predicate, /prioritize, /allocate, /deallocate,
  // /preemptable, /reclaimable, /onSessionOpen, /onSessionClose.
  std::string volcano_prefix = "/volcano";
  // How long a pod's filter/prioritize results wait for its bind.
  std::chrono::milliseconds reservation_ttl{120'000};
  std::size_t max_cached_pods = 50'000;
  // Volcano sums extender scores unscaled with its other plugins (nodeorder's are 0..100 x
  // weight): the reply is the 0..100 total x this weight.
  double volcano_score_weight = 1.0;
  std::size_t max_body_bytes = 16u << 20;           // every verb but onSessionOpen
  std::size_t max_session_body_bytes = 512u << 20;  // Volcano's whole-cluster snapshot
  // Mutual TLS (serve --tls-client-ca): every verb (POST) needs a client certificate that chained
  // to the client CA (server::HttpRequest::client_verified); others get 403. /healthz, /readyz and
  // /metrics stay open to probes and scrapers. Volcano's extender client sends no certificate:
  // set this only where kube-scheduler is the caller.
  bool require_client_certificate = false;
  // GET/POST /explain (a pod against every node of the current store) and GET /nodes, on every
  // replica, read-only (docs/operations.md, "Explain"). GETs are open like /metrics (the
  // NetworkPolicy and, through the API server's service proxy, the caller's RBAC on
  // services/proxy decide who reaches them); a POSTed Pod needs the client certificate like the
  // verbs when require_client_certificate is set. One explain runs at a time (others get 429).
  std::size_t max_explain_body_bytes = 1u << 20;  // a posted Pod
  std::size_t max_explain_nodes = 500;            // nodes listed in detail by default (?limit=)
};

class PodCache;

class ExtenderService {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // `framework`, `store`, `metrics` and `hooks` (may be null) must outlive the service.
  // `clock` is for tests (TTL).
  ExtenderService(const framework::Framework& framework, state::ClusterStore& store,
                  metrics::Registry& metrics, ExtenderOptions options, Clock clock = nullptr,
                  BindHooks* hooks = nullptr);
  ~ExtenderService();
  ExtenderService(const ExtenderService&) = delete;
  ExtenderService& operator=(const ExtenderService&) = delete;

  // The HTTP entry point (server::Handler). Routes, then runs the verb; never throws.
  void Handle(const server::HttpRequest& request, server::HttpResponse& response);
  // The body limit for a target (server::BodyLimit).
  std::size_t BodyLimit(std::string_view target) const;
  // Whether a target's verb may wait on the API server apart from the others (kube-scheduler's
  // bind, /explain of a pod by name): the server runs those on its offload threads
  // (ServerOptions::offload), so that filter and prioritize are answered meanwhile. Volcano's
  // allocate and deallocate stay on the workers: its session sends them one at a time.
  bool WaitsOnApi(std::string_view target) const;

  // Called before /metrics renders, to refresh gauges owned elsewhere (e.g. server counters).
  void SetScrapeHook(std::function<void()> hook);

  // Pods with cached filter results now (tests, metrics).
  std::size_t cached_pods() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace toposched::extender
