#pragma once
// Typed calls on the Kubernetes REST API over a Transport: get, list (paged), watch, create,
// replace with optimistic concurrency, patch, delete, pods/binding, and read-modify-write with
// 409 retry. Retries with exponential backoff and full jitter on transport errors, 429 and 5xx
// for calls that are safe to repeat (GET, LIST, PUT with a resourceVersion, PATCH, DELETE,
// Binding). Objects are nlohmann::json (cold path; the hot path never sees them). Only kube/
// code includes this header.

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "toposched/common/status.h"
#include "toposched/kube/time.h"
#include "toposched/kube/transport.h"

namespace toposched::kube {

// Errors from Api calls carry the API server's HTTP status (Error::http_status) and its meaning
// (Error::code: 404 kNotFound, 409 kConflict, 410 kGone, 5xx/429 kUnavailable); their message,
// for people, begins with the status and its reason, then the API server's Status message:
// "409 Conflict: Operation cannot be fulfilled on pods \"p\": the object has been modified"
// (method and path appended). Transport failures are kUnavailable, status 0, and begin with
// "transport: ". ApiCode: the status (0 for transport errors and anything else).
int ApiCode(const Error& error);
inline bool IsNotFound(const Error& e) {
  return e.code() == ErrorCode::kNotFound;
}
inline bool IsConflict(const Error& e) {
  return e.code() == ErrorCode::kConflict;
}
inline bool IsGone(const Error& e) {
  return e.code() == ErrorCode::kGone;
}

enum class PatchType : std::uint8_t {
  kMerge,           // application/merge-patch+json (RFC 7386): null deletes a key
  kJson,            // application/json-patch+json (RFC 6902): "test" ops make it conditional
  kStrategicMerge,  // application/strategic-merge-patch+json (built-in types only)
};

struct ApiOptions {
  std::chrono::milliseconds request_timeout{30'000};
  int max_attempts = 5;  // per retried call (1 = no retry)
  std::chrono::milliseconds backoff_base{200};
  std::chrono::milliseconds backoff_max{10'000};
  // A 429 or 5xx reply's Retry-After replaces the backoff before the next attempt, as in
  // client-go (API Priority and Fairness answers 429 with one), up to this long.
  std::chrono::milliseconds max_retry_after{10'000};
  // Sleeps between attempts; tests replace it. Default: std::this_thread::sleep_for.
  std::function<void(std::chrono::milliseconds)> sleep;
  std::uint64_t jitter_seed = 0;  // 0: from std::random_device
};

struct ListOptions {
  std::string label_selector, field_selector;
  int limit = 500;               // page size; 0 = unpaged
  std::string resource_version;  // "" = most recent (a quorum read); "0" = any (cache)
};

struct ObjectList {
  std::vector<nlohmann::json> items;
  std::string resource_version;  // the list's metadata.resourceVersion: where a watch starts
};

struct WatchOptions {
  std::string label_selector, field_selector;
  std::string resource_version;  // required: where the previous list or watch ended
  int timeout_seconds = 300;     // the server ends the watch after this (then we re-watch)
  bool allow_bookmarks = true;
  std::chrono::milliseconds idle_timeout{120'000};  // no byte at all for this long: reconnect
};

enum class WatchEventType : std::uint8_t { kAdded, kModified, kDeleted, kBookmark };

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  nlohmann::json object;  // for bookmarks only metadata.resourceVersion is meaningful
};

// Exponential backoff with full jitter: attempt n (0-based) waits uniform(0, min(max, base*2^n)).
class Backoff {
 public:
  Backoff(std::chrono::milliseconds base, std::chrono::milliseconds max, std::uint64_t seed = 0);
  std::chrono::milliseconds Next();  // and advances
  void Reset();

 private:
  std::chrono::milliseconds base_, max_;
  int attempt_ = 0;
  std::mt19937_64 rng_;
};

class Api {
 public:
  // `transport` must outlive the Api. Thread-safe (calls may run concurrently).
  explicit Api(Transport& transport, ApiOptions options = {});

  Result<nlohmann::json> Get(const std::string& path);
  Result<ObjectList> List(const std::string& collection_path, const ListOptions& options = {});
  // Watches from options.resource_version until the server ends the stream (Ok: re-watch from
  // the returned resourceVersion), `on_event` returns false, or `stop` is requested. Returns
  // the last resourceVersion seen (events and bookmarks). Errors: a watch the server answers
  // or ends with 410 Gone (IsGone: relist), other statuses, broken or idle connections.
  // Not retried here: the informer decides (re-watch, relist, back off).
  Result<std::string> Watch(const std::string& collection_path, const WatchOptions& options,
                            const std::function<bool(WatchEvent&&)>& on_event, std::stop_token stop);

  // Retried on transport errors, 429 and 5xx too: a retry whose first attempt did land gets
  // 409 AlreadyExists, returned as is (the caller knows whether the object is its own).
  Result<nlohmann::json> Create(const std::string& collection_path, const nlohmann::json& object);
  // PUT. The object's metadata.resourceVersion makes it conditional (409 when stale).
  Result<nlohmann::json> Replace(const std::string& path, const nlohmann::json& object);
  Result<nlohmann::json> Patch(const std::string& path, PatchType type, const nlohmann::json& patch);

  // Read-modify-write: GET `path`, call `mutate` on the object (true: changed, write it; false:
  // nothing to do, return it as read), PUT it with its resourceVersion; on 409 GET again and
  // repeat, up to options.max_attempts. An error from `mutate` is returned as is.
  Result<nlohmann::json> Update(const std::string& path,
                                const std::function<Result<bool>(nlohmann::json& object)>& mutate);

  // POST /api/v1/namespaces/{ns}/pods/{name}/binding with the pod's UID as a precondition
  // (a recreated pod of the same name is not bound by mistake). `annotations` (an object of
  // strings, or null) go in the Binding's metadata: the API server merges them into the pod's
  // annotations in the same update that sets spec.nodeName (k8s.io/kubernetes
  // pkg/registry/core/pod/storage/storage.go, BindingREST.setPodNodeAndMetadata), so the pod
  // is bound and annotated by one write or neither. A retried Binding that the API server
  // answers 409 because the pod is already on `node` counts as success.
  Status CreateBinding(const std::string& pod_namespace, const std::string& pod_name,
                       const std::string& pod_uid, const std::string& node,
                       const nlohmann::json& annotations = nullptr);

  const ApiOptions& options() const { return options_; }

 private:
  Result<Response> Send(const Request& request, bool retry);
  Transport& transport_;
  ApiOptions options_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
};

// Paths (names are escaped as URL path segments).
std::string CorePath(std::string_view resource);  // /api/v1/nodes
std::string NamespacedPath(std::string_view ns, std::string_view resource);
// Volcano's HyperNodes (cluster-scoped), watched when network.hyperNodes is on.
inline constexpr std::string_view kHyperNodeCollection =
    "/apis/topology.volcano.sh/v1alpha1/hypernodes";  // /api/v1/namespaces/ns/pods
std::string PodPath(std::string_view ns, std::string_view name);
std::string NodePath(std::string_view name);
inline constexpr std::string_view kNodeTopologyCollection = "/apis/toposched.io/v1alpha1/nodetopologies";
// Dynamic Resource Allocation, resource.k8s.io/v1 (Kubernetes 1.34+), every namespace.
inline constexpr std::string_view kResourceSliceCollection = "/apis/resource.k8s.io/v1/resourceslices";
inline constexpr std::string_view kResourceClaimCollection = "/apis/resource.k8s.io/v1/resourceclaims";
inline constexpr std::string_view kResourceClaimTemplateCollection =
    "/apis/resource.k8s.io/v1/resourceclaimtemplates";
inline constexpr std::string_view kDeviceClassCollection = "/apis/resource.k8s.io/v1/deviceclasses";
std::string NodeTopologyPath(std::string_view name);  // + "/status" for the status subresource
std::string LeasePath(std::string_view ns, std::string_view name);
std::string LeaseCollection(std::string_view ns);
std::string EventCollection(std::string_view ns);
std::string EscapeQueryValue(std::string_view value);

}  // namespace toposched::kube
