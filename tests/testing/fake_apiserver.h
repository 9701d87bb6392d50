#pragma once
// A fake Kubernetes API server for tests (not shipped): the REST paths and semantics toposched
// uses, on a real socket (port 0), so the real cpprestsdk client is what talks to it.
//
// Resources (JSON objects kept as the API server would return them):
//   /api/v1/nodes                                    cluster-scoped
//   /api/v1/namespaces/{ns}/pods                     + /api/v1/pods (all namespaces, list/watch)
//   /api/v1/namespaces/{ns}/pods/{name}/binding      POST v1.Binding: sets spec.nodeName
//   /api/v1/namespaces/{ns}/events                   + /api/v1/events
//   /apis/coordination.k8s.io/v1/namespaces/{ns}/leases
//   /apis/toposched.io/v1alpha1/nodetopologies       cluster-scoped, /status subresource
// Semantics, as kube-apiserver has them:
//   - one global resourceVersion counter; every write bumps it and sets the object's
//     metadata.resourceVersion; create sets uid, creationTimestamp, generation 1;
//   - GET object (404 NotFound as a metav1.Status), LIST (labelSelector: k=v, k==v, k!=v, k,
//     !k, comma = and; fieldSelector: metadata.name, metadata.namespace, spec.nodeName,
//     status.phase with = / == / !=; limit + continue tokens; resourceVersion of the list);
//   - POST create: 409 AlreadyExists; PUT replace: 409 Conflict when metadata.resourceVersion is
//     set and stale, 404 when absent; PATCH application/merge-patch+json,
//     application/strategic-merge-patch+json (treated as a merge patch) and
//     application/json-patch+json (add, remove, replace, test; a failed test is 422);
//     DELETE (200 with the object). With a status subresource, writes to the object ignore
//     status and writes to /status change only status;
//   - pods/binding: 404 when the pod is gone, 409 when metadata.uid precondition mismatches or
//     the pod already has a nodeName ("pod X is already assigned to node Y"), else sets
//     spec.nodeName and emits MODIFIED;
//   - WATCH (?watch=true|1): chunked JSON lines {"type":"ADDED|MODIFIED|DELETED|BOOKMARK",
//     "object":{...}} from after resourceVersion (absent or "0": synthetic ADDED for every
//     current object first); a resourceVersion older than the kept history gives one
//     {"type":"ERROR","object":{Status, code 410, reason Expired}} event and the end of the
//     stream (as the real server does); allowWatchBookmarks=true sends a BOOKMARK every
//     bookmark_interval and before ending at timeoutSeconds; selectors filter events.
// Every error body is a metav1.Status {"kind":"Status","apiVersion":"v1","status":"Failure",
// "message","reason","code"}.
// Also as the real server has it: a write through HTTP that changes nothing (a no-op PUT or
// PATCH) neither bumps the resourceVersion nor emits an event; HTTP create resets a pod's status
// to {"phase":"Pending"} and drops a NodeTopology's status (the status subresource sets it);
// continue tokens list a consistent snapshot at the first page's resourceVersion; a watch whose
// selector stops (starts) matching a modified object gets DELETED (ADDED). Also served:
// /apis/events.k8s.io/v1/namespaces/{ns}/events, GET /version, /healthz, /readyz, /livez.
// Not modelled: graceful pod deletion (DELETE removes at once), admission, defaulting,
// server-side apply, deletecollection (405), watches on single objects.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace toposched::testing {

struct FakeApiServerOptions {
  std::size_t history_limit = 10'000;  // events kept for watches; older resourceVersions get 410
  std::chrono::milliseconds bookmark_interval{1'000};
  // TLS when both are set (PEM); plain HTTP otherwise.
  std::string tls_cert_pem, tls_key_pem;
  // When non-empty, every request must carry "Authorization: Bearer <token>" (401 otherwise).
  std::string required_token;
  // Request bodies over this get 413 (the connection is then closed).
  std::size_t max_body_bytes = 8u << 20;
};

// A fault for the next `times` requests that match: method ("" = any) and a path prefix ("" =
// any; the query string is not part of the match), optionally only watches. Faults are tried in
// the order injected, the first match applies; times < 0 = every match until ClearFaults. A
// fault applies before the token check (it models the network and the server, not the client).
struct Fault {
  std::string method;
  std::string path_prefix;
  bool watch_only = false;
  int times = 1;
  int status = 0;  // reply with this status and a metav1.Status body (0 = no reply change)
  std::chrono::milliseconds delay{0};  // wait before handling (slow server)
  bool drop = false;                   // close the connection without replying (after the delay)
  // For watches with status 0: serve the watch but close the connection after this many events
  // (-1 = do not), without the terminating chunk (a broken stream). Bookmarks do not count;
  // the synthetic ADDED events of a watch without resourceVersion do.
  int drop_watch_after_events = -1;
};

struct RequestRecord {
  std::string method, path, query;
  std::string verb;      // Kubernetes verb: get, list, watch, create, update, patch, delete
  std::string group;     // "" for core, "coordination.k8s.io", "toposched.io"
  std::string resource;  // "pods", "pods/binding", "nodes", "nodetopologies/status", ...
  int status = 0;        // what was answered (0 = dropped)
  std::string user_agent;
};

class FakeApiServer {
 public:
  explicit FakeApiServer(FakeApiServerOptions options = {});
  ~FakeApiServer();  // Stop()
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  // Listens on 127.0.0.1:`port` (0 = any free port; Start after Stop reuses the old port when
  // port is 0 and one was bound before, so clients reconnect to the same URL: a restart).
  void Start(int port = 0);
  // Closes the listener and every connection, open watches included (abruptly: no final
  // chunk). Keeps all objects and the resourceVersion counter.
  void Stop();
  int port() const;
  std::string url() const;  // "http://127.0.0.1:PORT" or https

  // Direct access for tests (not through HTTP, never faulted). Objects carry the apiVersion and
  // kind of their resource. `collection` is the path of the cluster-scoped or namespaced
  // collection, e.g. "/api/v1/nodes", "/api/v1/namespaces/ns/pods"; an all-namespaces
  // collection ("/api/v1/pods") takes the namespace from the object (Create, Upsert, List only).
  // Unlike HTTP they keep a given uid, creationTimestamp and status, and every Create, Upsert
  // and Delete emits an event. A bad collection or object throws std::invalid_argument; Create
  // of an existing object throws std::runtime_error.
  nlohmann::json Create(const std::string& collection, nlohmann::json object);  // sets metadata
  nlohmann::json Upsert(const std::string& collection, nlohmann::json object);  // create or replace
  std::optional<nlohmann::json> Get(const std::string& collection, const std::string& name) const;
  std::vector<nlohmann::json> List(const std::string& collection) const;  // one collection, by name
  bool Delete(const std::string& collection, const std::string& name);
  std::uint64_t resource_version() const;
  // Forgets the watch history: watches and continue tokens from before now get 410.
  void Compact();

  void InjectFault(Fault fault);
  void ClearFaults();
  // Ends every open watch now by closing its connection (no final chunk).
  void DropWatches();
  int open_watches() const;

  std::vector<RequestRecord> requests() const;
  void ClearRequests();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace toposched::testing
