#pragma once
// The Kubernetes source of the extender's cluster state: informers on Nodes, NodeTopology
// objects and Pods fill the ClusterStore; a bind writes the allocation annotations on the pod
// (Persistence) and then creates the Binding (BindHooks); a Lease elects the one replica that
// changes state. The API server is the store: after a restart every allocation is rebuilt
// from the pods' annotations (ours, and HAMi's for pods HAMi placed) before /readyz says ready.
// docs/operations.md describes the behaviour seen from the cluster.

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "toposched/extender/bind_hooks.h"
#include "toposched/kube/api.h"
#include "toposched/kube/dra.h"
#include "toposched/kube/leader.h"
#include "toposched/metrics/metrics.h"
#include "toposched/pd/network.h"
#include "toposched/state/cluster_state.h"

namespace toposched::kube {

enum class StaleTopologyPolicy : std::uint8_t {
  kClosed,  // a node whose agent went silent gets no new GPU pods (its topology is withdrawn)
  kOpen,    // keep placing on the last topology published (logged and counted)
};

enum class HamiNodeLockMode : std::uint8_t { kAuto, kOn, kOff };

struct KubeSourceOptions {
  std::string policy_name = "toposched";  // written in toposched.io/allocation
  // The Prefill/Decode pool label (the scheduler config's request.poolLabel): restored pods
  // rejoin their pool.
  std::string pool_label = "toposched.io/pool";
  // The extended resources that count as RDMA NICs (the scheduler config's request.rdmaResources:
  // exact names, or prefixes ending in '/'): pods of other schedulers that ask for them hold NICs.
  std::vector<std::string> rdma_resources = {"rdma/"};
  // A NodeTopology whose heartbeat is older than this is stale (0 = never).
  std::chrono::seconds stale_topology_age{0};
  StaleTopologyPolicy stale_policy = StaleTopologyPolicy::kClosed;
  std::chrono::milliseconds stale_check_interval{15'000};
  // An allocation whose pod has had no node for this long (a Volcano task pipelined, then never
  // bound nor deallocated; a bind whose Binding never came) is released and its annotations
  // removed, once the API server confirms the pod still has no node (checked each
  // stale_check_interval by the leader). 0 = never.
  std::chrono::milliseconds unbound_allocation_ttl{300'000};
  // HAMi's node lock (hami.io/mutex.lock) around a bind, as HAMi's own scheduler takes it, so
  // HAMi's device plugin finds the pod through the lock owner. Taken only for binds that write
  // HAMi's device records (NVIDIA GPUs with UUIDs, or AMD GPUs HAMi's AMD device plugin
  // registered: what those device plugins serve), never for NIC-only pods or GPUs HAMi has no
  // record for, which nobody would unlock before it expires (5 minutes, holding up every later
  // bind on the node). kAuto: on nodes that carry the registration annotation of the records'
  // vendor (hami.io/node-nvidia-register, hami.io/node-amd-register: that device plugin runs
  // there); kOn: on every node; kOff: never (HAMi's AMD device plugin then refuses CU slices,
  // and some of its versions whole cards too: it checks the lock before it records CUs).
  HamiNodeLockMode hami_node_lock = HamiNodeLockMode::kAuto;
  // The Normal events on each pod it binds (DevicesAllocated after the bind, ReadyAfterBind when
  // it turns Ready): two API writes a pod beside the Binding. False: only Warning events
  // (FailedScheduling summaries, AllocationUnreadable, IgnoredLabel); the devices are in the
  // pod's annotations and the bind-to-Ready time in toposched_bind_to_ready_seconds either way.
  bool normal_events = true;
  // Informers (tests shorten these).
  int watch_timeout_seconds = 300;
  std::chrono::milliseconds backoff_base{250};
  std::chrono::milliseconds backoff_max{30'000};
  // Events for the bind -> Ready time are written by this component name.
  std::string event_component = "toposched-extender";
  std::string identity;  // reportingInstance of events (the replica's name)
  // This replica's own Pod (serve reads POD_NAMESPACE and POD_NAME, set by the downward API).
  // With leader election and a known pod, every synced replica reports ready and the leader
  // labels its own pod `leader_label: "true"` (removing the label from any other pod of the
  // namespace first); the Service selects that label, so only the leader gets requests and a
  // PodDisruptionBudget can count both replicas. Without a known pod, only the leader is ready.
  std::string self_namespace, self_name;
  std::string leader_label = "toposched.io/leader";
  // The scheduler config's network section. With hyper_nodes, Volcano HyperNode objects
  // (topology.volcano.sh/v1alpha1) are watched and place nodes in the tiers (the store's node
  // locations); until they load, or for nodes no HyperNode holds, the tier labels do.
  pd::NetworkConfig network;
  // Dynamic Resource Allocation (resource.k8s.io/v1, Kubernetes 1.34+): watch ResourceSlices,
  // ResourceClaims, ResourceClaimTemplates and DeviceClasses; count every allocated claim's
  // devices as taken and tell the extender what a pod's claims ask (docs/install.md, "DRA").
  // Readiness then waits for the slices and claims too.
  bool dra = false;
  DraDrivers dra_drivers;
};

class KubeSource : public state::Persistence, public extender::BindHooks {
 public:
  // `api`, `store`, `metrics` and `leader` (null: no election, this replica always leads) must
  // outlive the source. The store must use this source as its Persistence.
  KubeSource(Api& api, state::ClusterStore& store, metrics::Registry& metrics, KubeSourceOptions options,
             LeaderElector* leader = nullptr);
  ~KubeSource() override;  // Stop()

  // Starts the informers (Nodes and NodeTopology objects first; Pods once both have synced,
  // so every pod's allocation finds its node) and the stale-topology check. Non-blocking.
  void Start();
  void Stop();
  // Blocks until the state is ready (synced, and when elected, resynced as leader) or timeout.
  bool WaitUntilReady(std::chrono::milliseconds timeout) const;

  // To be called by the leader elector's on_change (serve wires it). Gaining leadership
  // re-reads every pod with a quorum LIST before this replica changes state, so allocations
  // the previous leader wrote just before it stopped are in the store first.
  void OnLeadership(bool leading);

  // Copies informer counters into the metrics (the /metrics scrape hook calls it).
  void RefreshMetrics();

  // state::Persistence
  Status RecordBind(const state::PodAllocation& allocation, const state::NodeRecord& node) override;
  Status RecordRelease(const state::PodAllocation& allocation) override;
  // extender::BindHooks
  bool MayChangeState() const override;
  bool Ready(std::string* why) const override;
  Result<std::string> FetchPod(std::string_view pod_namespace, std::string_view pod_name,
                               std::string_view pod_uid) override;
  Status CompleteBind(const state::PodAllocation& allocation) override;
  bool MayRebind(const state::PodAllocation& previous) override;
  void PodWarning(std::string_view pod_namespace, std::string_view pod_name, std::string_view pod_uid,
                  std::string_view reason, std::string_view message) override;
  void PodUnschedulable(std::string_view pod_namespace, std::string_view pod_name, std::string_view pod_uid,
                        std::string_view summary) override;
  void PodAllocated(const state::PodAllocation& allocation, std::string_view alignment,
                    bool volcano) override;
  Result<std::string> LookupPod(std::string_view pod_namespace, std::string_view pod_name) override;
  std::set<std::string, std::less<>> StaleTopologies() const override;
  extender::DraDevices DraDevicesFor(const PlacementRequest& request) const override;
  std::map<std::string, int> UnmappedDraDevices() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace toposched::kube
