#pragma once
// What a bind means beyond the cluster state when an API server is the store: the interface the
// Kubernetes source (src/kube) implements for the extender. Kept apart from service.h so that
// its implementers depend on the cluster state alone, not on the HTTP server.

#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/placement/request.h"
#include "toposched/state/cluster_state.h"

namespace toposched::extender {

// The start of BindHooks::LookupPod's message for a pod that does not exist; its code is
// ErrorCode::kNotFound, which callers read (GET /explain answers 404).
inline constexpr std::string_view kPodNotFoundTag = "pod not found: ";

// BindHooks::CompleteBind's code for "the Binding may or may not have been made": the devices
// stay held (fail closed).
inline constexpr ErrorCode kBindOutcomeUnknown = ErrorCode::kUnavailable;

// While one is alive on a thread, Persistence::RecordBind on that thread makes the record
// durable itself, under the node's lock, before the bind returns: Volcano's allocate (its
// annotations, one merge patch, before Volcano's own Binding). A Volcano session sends allocate
// and deallocate one after another, and the node's lock keeps each write ahead of the events
// that follow it. Without one, the Kubernetes source only prepares the record and CompleteBind
// writes it in the Binding.
class RecordAtCommit {
 public:
  RecordAtCommit() { Active() = true; }
  ~RecordAtCommit() { Active() = false; }
  RecordAtCommit(const RecordAtCommit&) = delete;
  RecordAtCommit& operator=(const RecordAtCommit&) = delete;
  static bool& Active() {
    static thread_local bool active = false;
    return active;
  }
};

// What a bind means beyond the cluster state when an API server is the store (the kube
// source, src/kube/kube_source.cc). Without hooks (the file source) a bind is complete once
// persisted, every replica may change state, and readiness is "state loaded".
// What a pod's DRA ResourceClaims ask (BindHooks::DraDevicesFor): the GPUs and RDMA NICs of
// every request at its first firstAvailable option, and whether they must share a PCIe root.
struct DraDevices {
  bool known = false;  // false: `why` says what could not be read or counted
  int gpus = 0, nics = 0;
  bool same_pcie_root = false;
  std::string why;
};

class BindHooks {
 public:
  virtual ~BindHooks() = default;
  // Only the leader changes state (bind, Volcano allocate/deallocate); the others answer those
  // verbs with an in-band error (the scheduler retries, by then against the leader).
  virtual bool MayChangeState() const = 0;
  // /readyz: true when this replica should get traffic; otherwise `why` says what is missing.
  virtual bool Ready(std::string* why) const = 0;
  // The Pod (JSON) for a bind that has no cached filter result: the extender restarted, or
  // the reservation expired, between kube-scheduler's filter and its bind.
  virtual Result<std::string> FetchPod(std::string_view pod_namespace, std::string_view pod_name,
                                       std::string_view pod_uid) = 0;
  // After the store committed the allocation (Persistence::RecordBind prepared its record),
  // and also for a retried bind that finds the pod already allocated on the node: creates the
  // Binding, which carries the allocation's record (the Kubernetes source: its annotations, in
  // the Binding's own write), idempotent. On an error the service releases the allocation
  // (persistence undoes what it wrote) and answers the error, except for an error with code
  // kBindOutcomeUnknown: the Binding may have been made (the API server could not be asked
  // afterwards), so the devices stay held until the pod is seen bound, gone, or shown unbound.
  virtual Status CompleteBind(const state::PodAllocation& allocation) = 0;

  // A bind to another node than the one a pod's allocation is on: true when the old one was
  // never completed (the pod has no node yet), so the service may release it and bind anew.
  virtual bool MayRebind(const state::PodAllocation& previous) = 0;
  // Something in a pod's request was ignored (PlacementRequest::warnings): the source tells the
  // pod's owner (the Kubernetes source: a Warning event, once per pod and message). Must not
  // block: filter calls make it.
  virtual void PodWarning(std::string_view /*pod_namespace*/, std::string_view /*pod_name*/,
                          std::string_view /*pod_uid*/, std::string_view /*reason*/,
                          std::string_view /*message*/) {}
  // A filter call left the pod no node: `summary` counts the nodes by reason ("0/15 nodes fit:
  // 12 nodes: fewer than 4 free GPUs; 3 nodes: stale topology (...)"). The Kubernetes source
  // writes it as a FailedScheduling Warning event, deduplicated and rate-limited as client-go's
  // event correlator does. Called on every such call; must not block.
  virtual void PodUnschedulable(std::string_view /*pod_namespace*/, std::string_view /*pod_name*/,
                                std::string_view /*pod_uid*/, std::string_view /*summary*/) {}
  // A pod got its devices: after kube-scheduler's bind created the Binding, or after Volcano's
  // allocate recorded them (`volcano`: Volcano creates the Binding itself, later). `alignment`:
  // whether the worst GPU->NIC class is the best the node allows (explain.h AlignmentNote; empty
  // without GPU->NIC pairs). The Kubernetes source writes a DevicesAllocated event. Must not block.
  virtual void PodAllocated(const state::PodAllocation& /*allocation*/, std::string_view /*alignment*/,
                            bool /*volcano*/) {}
  // The Pod (JSON) named by namespace and name, for GET /explain?pod=NS/NAME. Read-only; may
  // wait on the API server (one GET). Without an API server there is nothing to look it up in.
  virtual Result<std::string> LookupPod(std::string_view /*pod_namespace*/, std::string_view /*pod_name*/) {
    return Error(
        "this extender has no API server to look pods up in (it runs on a cluster directory): POST the "
        "Pod JSON to /explain instead");
  }
  // The devices a pod's DRA claims ask (PlacementRequest::resource_claims). Must not block on
  // the API server: filter and prioritize calls make it.
  virtual DraDevices DraDevicesFor(const PlacementRequest& /*request*/) const {
    return {false, 0, 0, false, "this extender reads no ResourceClaims (serve --kube --dra)"};
  }
  // Allocated DRA devices toposched could not map onto a node's topology, by node (for /nodes).
  virtual std::map<std::string, int> UnmappedDraDevices() const { return {}; }
  // Nodes whose NodeTopology heartbeat is older than the stale age (for /nodes and /explain).
  virtual std::set<std::string, std::less<>> StaleTopologies() const { return {}; }
};

}  // namespace toposched::extender
