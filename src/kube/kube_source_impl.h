#pragma once
// KubeSource::Impl, private to toposched_kube: the informers' state, the metrics and the locks
// that the kube_*.cc files share. Its member functions are defined, by job, in kube_source.cc
// (wiring, readiness, leadership), kube_nodes.cc, kube_pods.cc, kube_events.cc and
// kube_persistence.cc; each declaration below names its file.

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_util.h"
#include "toposched/common/pod_label.h"
#include "toposched/kube/dra.h"
#include "toposched/kube/event_correlator.h"
#include "toposched/kube/informer.h"
#include "toposched/kube/objects.h"
#include "toposched/kube/source.h"

namespace toposched::kube {

namespace detail {

inline constexpr std::string_view kVerb = "kube";
// The store's uid for a DRA claim's devices: this prefix and the claim's UID (never a pod's).
inline constexpr std::string_view kClaimUidPrefix = "resourceclaim/";
inline bool IsClaimUid(std::string_view uid) {
  return uid.starts_with(kClaimUidPrefix);
}

using ::toposched::PodLabel;

// What a node's NodeSpec is built from; an event that changes none of it changes nothing
// (kubelet rewrites Node status every few seconds).
struct NodeInputs {
  std::map<std::string, std::string> labels;
  bool unschedulable = false;
  std::string hami_register;
  std::string hami_amd_register;
  std::string topology_version;             // NodeTopology resourceVersion ("" = none)
  bool withdrawn = false;                   // stale under the closed policy
  std::int64_t cpu_allocatable_milli = -1;  // NodeView::allocatable_cpu_milli
  bool operator==(const NodeInputs&) const = default;
};

}  // namespace detail

struct KubeSource::Impl {
  using json = nlohmann::json;
  using SystemClock = std::chrono::system_clock;
  using SteadyClock = std::chrono::steady_clock;
  using NodeInputs = detail::NodeInputs;

  // kube_source.cc: registers the metrics.
  Impl(Api& a, state::ClusterStore& s, metrics::Registry& reg, KubeSourceOptions o, LeaderElector* l);

  Api& api;
  state::ClusterStore& store;
  KubeSourceOptions options;
  LeaderElector* leader;

  metrics::Family<metrics::Gauge>& leader_gauge;
  metrics::Family<metrics::Gauge>& synced_gauge;
  metrics::Family<metrics::Counter>& restore_errors;
  metrics::Family<metrics::Counter>& bindings;
  metrics::Family<metrics::Counter>& annotation_writes;
  metrics::Family<metrics::Histogram>& bind_to_ready;
  metrics::Family<metrics::Gauge>& held_pods_gauge;
  metrics::Family<metrics::Gauge>& held_nodes_gauge;
  metrics::Family<metrics::Gauge>& foreign_gauge;
  metrics::Family<metrics::Gauge>& stale_gauge;
  metrics::Family<metrics::Counter>& informer_lists;
  metrics::Family<metrics::Counter>& informer_gone;
  metrics::Family<metrics::Counter>& informer_errors;
  metrics::Family<metrics::Counter>& informer_events;
  metrics::Family<metrics::Counter>& pod_events;
  metrics::Family<metrics::Gauge>& dra_unmapped_gauge;
  metrics::Family<metrics::Gauge>& dra_pending_gauge;

  std::unique_ptr<Informer> node_informer, topology_informer, pod_informer;
  std::unique_ptr<Informer> hypernode_informer;  // only with options.network.hyper_nodes
  // HyperNodes by name, and the resolution of node positions from them: the HyperNode
  // informer's events and node changes (labelMatch and regexMatch read the node set) both
  // resolve. Lock order: mu, then hypernode_mu, then the store's locks.
  std::mutex hypernode_mu;
  std::map<std::string, json> hypernodes;
  bool hypernodes_listed = false;  // the first list arrived (until then the tier labels decide)
  std::vector<std::jthread> threads;

  // ---- informer state, guarded by mu (informer handlers run one at a time under it) ----
  // Lock order: mu, then the store's locks. Persistence callbacks (under a store node lock)
  // never take mu.
  mutable std::mutex mu;
  std::map<std::string, NodeView, std::less<>> nodes;
  std::map<std::string, NodeTopologyView, std::less<>> topologies;
  std::map<std::string, NodeInputs, std::less<>> applied_inputs;
  std::set<std::string, std::less<>> stale;  // nodes whose topology heartbeat is too old
  // A copy of `stale` under its own small lock, for the extender's read-only views and a
  // filter's no-node summary, which must not wait on mu (held through whole relists).
  mutable std::mutex stale_copy_mu;
  std::set<std::string, std::less<>> stale_copy;
  struct PodState {
    std::string pod_namespace, pod_name, node_name;
    bool ready = false;
  };
  std::unordered_map<std::string, PodState> pods;       // every pod the informer knows, by UID
  std::map<std::string, PodView, std::less<>> pending;  // annotated pods whose node is not known yet
  // A core/v1 Event to write on a pod (PostEvents).
  struct PodEvent {
    std::string pod_namespace, pod_name, uid, node;
    std::string reason, message;
    std::string type = "Normal";
  };
  // Pods whose allocation could not be read back, held in the store (ClusterStore::Hold) until
  // they are deleted or their record becomes readable (retried when the pod or its node changes).
  struct HeldPod {
    PodView pod;
    std::string node, reason;
    bool reported = false;  // the AllocationUnreadable event was written
  };
  std::map<std::string, HeldPod, std::less<>> held;
  std::map<std::string, PodView, std::less<>> foreign;  // counted pods of other schedulers, by UID
  // Warning events the extender asked for (BindHooks::PodWarning), written by the periodic loop
  // so that no filter call waits on the API server; each (pod, message) once.
  std::mutex warn_mu;
  std::vector<PodEvent> queued_events;
  std::set<std::string> warned;  // uid + '\n' + message; cleared when it grows past 10,000
  // FailedScheduling summaries (BindHooks::PodUnschedulable): repeated on every retry of a
  // pending pod, so deduplicated, aggregated and rate-limited (event_correlator.h), written by
  // the periodic loop.
  std::mutex correlator_mu;
  EventCorrelator correlator;
  std::atomic<bool> pods_applied{false};

  // Nodes whose Node carries HAMi's NVIDIA or AMD registration annotation (that device plugin
  // runs there), for the node lock in binds (which run under a store node lock, so they cannot
  // take mu).
  mutable std::mutex hami_mu;
  std::set<std::string, std::less<>> hami_nodes, hami_amd_nodes;

  // kube_persistence.cc: whether a bind takes HAMi's node lock.
  bool LocksFor(const state::PodAllocation& allocation, const NodeTopology& t,
                const AllocationAnnotations& a) const;

  // ---- binds made by this replica (guarded by bind_mu, never held across API calls) ----
  std::mutex bind_mu;
  struct LocalBind {
    SteadyClock::time_point at;
  };
  std::unordered_map<std::string, LocalBind> recent_binds;
  // A bind's record, prepared by RecordBind under the store's node lock (no API call there) and
  // written by CompleteBind (in the Binding's own write), or by RecordBind itself for Volcano's allocate.
  // An entry still here when the allocation is released was never written: nothing to undo.
  struct PreparedBind {
    json annotations = json::object();  // empty: no devices of ours, the Binding carries nothing
    bool lock = false;                  // HAMi's node lock is taken before the write
  };
  std::unordered_map<std::string, PreparedBind> prepared;
  // One pod's API writes (its Binding, Volcano's patch, their undo) one at a time, each only
  // while the store still holds what it writes. kube-scheduler's binds write outside the node's
  // lock, so two writes of one pod (a bind retried elsewhere while the first Binding is in
  // flight, the undo of a release) could otherwise land out of order and leave the pod's record
  // naming the wrong node. Striped by UID; held across the write's round trip.
  std::array<std::mutex, 64> pod_write_mu;
  std::mutex& PodWriteMutex(std::string_view uid) {
    return pod_write_mu[std::hash<std::string_view>{}(uid) % pod_write_mu.size()];
  }
  // Whether the store still holds `a` for its pod (the same node and devices).
  bool StillCurrent(const state::PodAllocation& a) const {
    const std::optional<state::PodAllocation> now = store.FindPod(a.uid);
    return now && now->node == a.node && now->delta == a.delta;
  }
  // kube_persistence.cc: the record of `allocation` on a node with topology `t`, at `now`.
  PreparedBind Prepare(const state::PodAllocation& allocation, const NodeTopology& t,
                       std::chrono::system_clock::time_point now) const;
  // The prepared record of `allocation`, or (a retried bind after the entry was written or this
  // replica restarted) one prepared again from the node's current topology.
  Result<PreparedBind> PreparedFor(const state::PodAllocation& allocation);

  // ---- leadership ----
  std::atomic<bool> leader_ready{false};  // resynced since leadership was gained
  std::mutex leader_mu;
  std::condition_variable_any leader_cv;
  bool resync_requested = false;
  bool unlabel_requested = false;     // leadership lost: take our leader label off (under leader_mu)
  std::atomic<bool> labelled{false};  // our pod carries the leader label (as far as we know)

  // ---------------------------------------------------------------------------------------
  // Nodes and topologies (kube_nodes.cc; the relist templates stay here).

  void RefreshNode(const std::string& name);
  void NodeSetChanged();
  static void MarkUnenforcedShares(const NodeView& node, std::shared_ptr<const NodeTopology>& topology);

  // During a relist RefreshNode collects specs here instead of publishing a snapshot per node
  // (n upserts would copy the node list n times: seconds at a few thousand nodes).
  std::vector<state::NodeSpec>* batch = nullptr;
  bool batch_moved = false;  // a node in the batch is new or has new labels

  void FlushBatch(std::vector<state::NodeSpec>& specs);
  void ApplyNode(const json& object);
  void ApplyTopology(const json& object);
  bool UpdateStale(const std::string& name, SystemClock::time_point now);

  void Locked(void (Impl::*apply)(const json&), const json& object) {
    std::lock_guard lock(mu);
    (this->*apply)(object);
  }

  // A relist of Nodes or NodeTopology objects: apply each, then forget the names it lacks.
  template <typename Map>
  void ReplaceNamed(Map& known, std::vector<json>&& objects, void (Impl::*apply)(const json&)) {
    std::lock_guard lock(mu);
    std::set<std::string> seen;
    std::vector<state::NodeSpec> specs;
    batch = &specs;
    struct Unbatch {
      std::vector<state::NodeSpec>*& batch;
      ~Unbatch() { batch = nullptr; }  // also when an apply throws
    } unbatch{batch};
    for (const json& o : objects) {
      (this->*apply)(o);
      seen.insert(StringAt(o, "/metadata/name"));
    }
    FlushBatch(specs);
    std::vector<std::string> gone;
    for (const auto& [name, value] : known) {
      if (!seen.contains(name)) gone.push_back(name);
    }
    for (const std::string& name : gone) {
      known.erase(name);
      UpdateStale(name, SystemClock::now());
      RefreshNode(name);
    }
  }

  // A deleted Node or NodeTopology object.
  template <typename Map>
  void ForgetNamed(Map& known, const json& object) {
    std::lock_guard lock(mu);
    const std::string name = StringAt(object, "/metadata/name");
    if (auto it = known.find(name); it != known.end()) known.erase(it);
    UpdateStale(name, SystemClock::now());
    RefreshNode(name);
  }

  void CheckStale();

  // ---------------------------------------------------------------------------------------
  // Pods (kube_pods.cc).

  void ApplyPod(const PodView& pod, std::vector<PodEvent>& events);
  void RestorePod(const PodView& pod);
  void RestoreForeign(const PodView& pod);
  Status RestoreAroundStandIns(const state::PodAllocation& allocation);
  bool IsRdmaResource(const std::string& name) const;

  // Allocations whose pod has had no node for longer than unbound_allocation_ttl: tentative ones
  // nobody completed (a Volcano task never bound nor deallocated, a Binding that never came).
  // Released, annotations and all, once the API server confirms the pod has no node. The leader
  // only; held and counted (foreign) pods never.
  std::unordered_map<std::string, SteadyClock::time_point> unbound_since;  // under mu
  void ReleaseLongUnbound();

  // Every pod's CPU request counts on its node (ClusterStore::SetPodCpu): `node` "" when the
  // pod no longer asks any (finished, deleted, not bound). During a relist (ReplacePods) the
  // changes are collected in cpu_batch and published as one snapshot. mu held.
  std::vector<state::ClusterStore::PodCpu>* cpu_batch = nullptr;
  void SetPodCpu(const std::string& uid, const std::string& node, std::int64_t milli);

  void HoldPod(const PodView& pod, state::PodAllocation allocation, const std::string& reason);
  void UpdateHeldGauges();
  void RetryPending(const std::string& node);
  void ReleaseGone(const std::string& uid, std::string_view why);
  void ReplacePods(std::vector<json>&& objects);
  bool BoundRecently(const std::string& uid);
  void ConfirmGone(const std::string& uid);
  void UpsertPod(const json& object);
  void RemovePod(const json& object);

  // ---------------------------------------------------------------------------------------
  // Dynamic Resource Allocation (kube_dra.cc; options.dra). Lock order: mu, then dra_mu, then
  // the store's locks; DraDevicesFor (the verbs) takes dra_mu alone.

  std::unique_ptr<Informer> slice_informer, claim_informer, template_informer, class_informer;
  mutable std::mutex dra_mu;
  std::map<std::string, DraSlice, std::less<>> dra_slices;  // by name
  // (driver, pool, device) -> (slice name, device index), for the claims' allocation results.
  std::unordered_map<std::string, std::pair<std::string, std::size_t>> dra_devices;
  std::map<std::string, DraClaim, std::less<>> dra_claims;             // by namespace/name
  std::map<std::string, DraClaimTemplate, std::less<>> dra_templates;  // by namespace/name
  std::map<std::string, DeviceClassInfo> dra_classes;                  // by name
  std::map<std::string, std::string> dra_pending;  // claim UID -> key: a device's slice or node not known yet
  std::map<std::string, std::string> dra_unmapped;    // "node\ndevice: why" -> claim UID
  bool slices_listed = false, claims_listed = false;  // under dra_mu / mu
  mutable std::mutex dra_copy_mu;                     // UnmappedDraDevices' copy
  std::map<std::string, int> dra_unmapped_copy;

  void IndexSlice(const std::string& name, const DraSlice* slice);  // dra_mu held
  void ApplySlice(const json& object);
  void RemoveSlice(const json& object);
  void ReplaceSlices(std::vector<json>&& objects);
  void ApplyClaim(const json& object);
  void RemoveClaim(const json& object);
  void ReplaceClaims(std::vector<json>&& objects);
  void CountClaim(const DraClaim& claim);                           // mu and dra_mu held
  void UncountClaim(const std::string& uid, std::string_view why);  // mu and dra_mu held
  void CountPendingClaims();
  void RefreshDraGauges();  // dra_mu held
  void ApplyTemplate(const json& object);
  void ApplyDeviceClass(const json& object);
  extender::DraDevices DraDevicesFor(const PlacementRequest& request) const;
  std::map<std::string, int> UnmappedDraDevices() const;

  // ---------------------------------------------------------------------------------------
  // Events on pods (kube_events.cc).

  void QueueEvent(PodEvent event);
  std::string DescribeDevices(const state::PodAllocation& a) const;
  void PostQueuedEvents();
  void PostCorrelatedEvents();
  json EventObject(const std::string& name, const std::string& ns, const std::string& pod_name,
                   const std::string& uid, const std::string& reason, const std::string& message,
                   const std::string& type, SystemClock::time_point first, SystemClock::time_point last,
                   int count) const;
  void PostHoldEvents();
  void PostEvents(const std::vector<PodEvent>& events);

  // ---------------------------------------------------------------------------------------
  // Readiness and leadership (kube_source.cc).

  bool Synced() const;
  bool MayChangeState() const;
  void Resync(std::stop_token stop);

  // ---------------------------------------------------------------------------------------
  // The leader label on our own pod (KubeSourceOptions::self_name; kube_source.cc).

  bool LabelsLeader() const { return leader != nullptr && !options.self_name.empty(); }

  json LeaderLabelPatch(bool on) const;
  void LabelSelf(std::stop_token stop);
  Status LabelSelfOnce();
  void UnlabelSelf();

  // ---------------------------------------------------------------------------------------
  // HAMi node lock (kube_persistence.cc).

  std::string DanglingLock(const std::string& node, const HamiNodeLock& lock);
  Status LockNode(const std::string& node, const std::string& ns, const std::string& name);
  void UnlockNode(const std::string& node, const std::string& ns, const std::string& name);

  // kube_source.cc
  void RefreshMetrics();

  // kube_nodes.cc
  void ResolveHyperNodes();

  static std::string NameOf(const json& object) { return StringAt(object, "/metadata/name"); }

  // kube_source.cc
  InformerOptions InformerFor(std::string path, std::string name) const;
};

}  // namespace toposched::kube
