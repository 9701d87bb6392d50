#include "toposched/topology/gpu_memory.h"
#include "toposched/kube/source.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "toposched/kube/event_correlator.h"
#include "toposched/kube/informer.h"
#include "json_util.h"
#include "toposched/kube/objects.h"
#include "toposched/kube/time.h"
#include "toposched/metrics/logging.h"

namespace toposched::kube {

namespace {

using nlohmann::json;
using metrics::LogLevel;
using SystemClock = std::chrono::system_clock;
using SteadyClock = std::chrono::steady_clock;

constexpr std::string_view kVerb = "kube";

std::string PodLabel(std::string_view ns, std::string_view name) {
  return std::string(ns) + "/" + std::string(name);
}

// Every annotation a bind writes, so that an undo removes exactly these.
constexpr std::string_view kBindAnnotations[] = {
    kAllocationAnnotation, kVisibleGpusAnnotation, kNcclIbHcaAnnotation, kBindTimeAnnotation,
    kHamiDevicesToAllocate, kHamiDevicesAllocated, kHamiAmdDevicesToAllocate, kHamiAmdDevicesAllocated,
    kHamiVgpuNode, kHamiVgpuTime, kHamiBindPhase, kHamiBindTime,
};

bool HasDevices(const framework::AllocationDelta& d) {
  return !d.exclusive_gpus.empty() || !d.shares.empty() || !d.nics.empty();
}

// What a node's NodeSpec is built from; an event that changes none of it changes nothing
// (kubelet rewrites Node status every few seconds).
struct NodeInputs {
  std::map<std::string, std::string> labels;
  bool unschedulable = false;
  std::string hami_register;
  std::string hami_amd_register;
  std::string topology_version;  // NodeTopology resourceVersion ("" = none)
  bool withdrawn = false;        // stale under the closed policy
  bool operator==(const NodeInputs&) const = default;
};

// The node an annotated pod's allocation is on: spec.nodeName once bound, else the node the
// allocation names (written before the Binding), else HAMi's vgpu-node.
std::string AllocationNode(const PodView& pod) {
  if (!pod.node_name.empty()) return pod.node_name;
  if (auto it = pod.annotations.find(std::string(kAllocationAnnotation)); it != pod.annotations.end()) {
    try {
      const json doc = json::parse(it->second);
      if (doc.is_object() && doc.contains("node") && doc["node"].is_string()) return doc["node"].get<std::string>();
    } catch (const json::exception&) {
    }
  }
  if (auto it = pod.annotations.find(std::string(kHamiVgpuNode)); it != pod.annotations.end()) return it->second;
  return "";
}

std::optional<SystemClock::time_point> BindTimeOf(const PodView& pod) {
  auto it = pod.annotations.find(std::string(kBindTimeAnnotation));
  if (it == pod.annotations.end()) return std::nullopt;
  Result<SystemClock::time_point> t = ParseTime(it->second);
  if (!t.ok()) return std::nullopt;
  return *t;
}

// An informer handler that logs instead of throwing: an exception must not end the informer's
// thread (every path below validates, so this is the last line, not the plan).
template <typename Arg, typename Fn>
std::function<void(Arg)> Guarded(std::string_view resource, Fn fn) {
  return [resource, fn = std::move(fn)](Arg arg) {
    try {
      fn(std::forward<Arg>(arg));
    } catch (const std::exception& e) {
      metrics::Log(LogLevel::kError, {kVerb, "", ""},
                  std::string(resource) + " event not applied (internal error): " + e.what());
    }
  };
}

}  // namespace

struct KubeSource::Impl {
  Impl(Api& a, state::ClusterStore& s, metrics::Registry& reg, KubeSourceOptions o, LeaderElector* l)
      : api(a),
        store(s),
        options(std::move(o)),
        leader(l),
        leader_gauge(reg.AddGauge("toposched_kube_leader", "1 while this replica holds the leader Lease.")),
        synced_gauge(reg.AddGauge("toposched_kube_synced",
                                  "1 once Nodes, NodeTopology objects and Pods have been listed and applied.")),
        restore_errors(reg.AddCounter(
            "toposched_kube_restore_errors_total",
            "Pod allocations read from the API server that the state could not take (device gone, over "
            "capacity: two pods claim one device, bad annotation).")),
        bindings(reg.AddCounter("toposched_kube_bindings_total",
                                "Bindings created by bind: created, failed.", {"outcome"})),
        annotation_writes(reg.AddCounter(
            "toposched_kube_annotation_writes_total",
            "Pod annotation writes: bind (allocation written), undo (removed after a failed Binding or a "
            "release), error.",
            {"outcome"})),
        bind_to_ready(reg.AddHistogram(
            "toposched_bind_to_ready_seconds",
            "Time from toposched's bind of a pod to the pod's Ready condition (capacity counts from then).",
            {}, {1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600})),
        held_pods_gauge(reg.AddGauge(
            "toposched_kube_held_allocations",
            "Pods whose allocation could not be read back (unknown device, fields that disagree, devices "
            "another pod holds): their nodes take no new device placements until each is deleted or fixed.")),
        held_nodes_gauge(reg.AddGauge("toposched_kube_held_nodes",
                                      "Nodes kept out of new device placements by a held allocation.")),
        foreign_gauge(reg.AddGauge(
            "toposched_kube_foreign_pods",
            "Bound pods of other schedulers that hold GPUs or RDMA NICs on toposched's nodes, counted by rule.")),
        stale_gauge(reg.AddGauge("toposched_kube_stale_topologies",
                                 "NodeTopology objects whose agent heartbeat is older than the stale age.")),
        informer_lists(reg.AddCounter("toposched_kube_informer_lists_total",
                                      "Successful (re)lists per informer since start.", {"resource"})),
        informer_gone(reg.AddCounter("toposched_kube_informer_gone_total",
                                     "410 Gone answers (each forces a relist) per informer.", {"resource"})),
        informer_errors(reg.AddCounter("toposched_kube_informer_errors_total",
                                       "Failed lists and watches (each followed by a backoff) per informer.",
                                       {"resource"})),
        informer_events(reg.AddCounter("toposched_kube_informer_events_total", "Watch events applied per informer.",
                                       {"resource"})),
        pod_events(reg.AddCounter(
            "toposched_pod_events_total",
            "Events written on pods, by reason and result: created, patched (a repeat: count raised), failed, "
            "rate_limited (the per-pod spam filter dropped an occurrence), skipped (the pod's devices were "
            "released before the event was written).",
            {"reason", "result"})) {
    // Series without labels exist (at 0) from the start, as Prometheus' own clients expose them:
    // rate(), increase() and alerts on them need a sample before the first change.
    restore_errors.With({});
    for (metrics::Family<metrics::Gauge>* g : {&leader_gauge, &synced_gauge, &held_pods_gauge, &held_nodes_gauge,
                                             &foreign_gauge, &stale_gauge}) {
      g->With({}).Set(0);
    }
  }

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
  std::unordered_map<std::string, PodState> pods;  // every pod the informer knows, by UID
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

  // Whether a bind of `allocation` takes HAMi's node lock (KubeSourceOptions::hami_node_lock):
  // only when it writes HAMi's device records, all of them for GPUs of the records' vendor,
  // which that vendor's HAMi device plugin then allocates and unlocks. HAMi's scheduler locks for
  // both vendors alike (pkg/device/amd/device.go @070101260b7a LockNode: hami.io/mutex.lock when
  // the pod asks amd.com/gpu), and HAMi's AMD device plugin finds the pod by the lock and
  // releases it once the pod's devices are allocated (Project-HAMi/amd-device-plugin
  // internal/pkg/utils/utils.go @138a0b0eb9a7 GetAllocatePodByNode, PodAllocationTrySuccess);
  // some of its versions refuse a CU slice without it (internal/pkg/plugin/plugin.go
  // @0121aa5d9262 validateNodeLockOwner).
  bool LocksFor(const state::PodAllocation& allocation, const NodeTopology& t, const AllocationAnnotations& a) const {
    if (options.hami_node_lock == HamiNodeLockMode::kOff || a.hami_devices.empty()) return false;
    auto of_vendor = [&](int g) {
      return g >= 0 && g < static_cast<int>(t.gpus.size()) &&
             t.gpus[static_cast<std::size_t>(g)].vendor == a.hami_vendor;
    };
    for (int g : allocation.delta.exclusive_gpus) {
      if (!of_vendor(g)) return false;
    }
    for (const auto& [g, usage] : allocation.delta.shares) {
      if (!of_vendor(g)) return false;
    }
    if (options.hami_node_lock == HamiNodeLockMode::kOn) return true;
    std::lock_guard lock(hami_mu);
    return (a.hami_vendor == GpuVendor::kAmd ? hami_amd_nodes : hami_nodes).contains(allocation.node);
  }

  // ---- binds made by this replica (guarded by bind_mu, never held across API calls) ----
  std::mutex bind_mu;
  struct LocalBind {
    SteadyClock::time_point at;
  };
  std::unordered_map<std::string, LocalBind> recent_binds;

  // ---- leadership ----
  std::atomic<bool> leader_ready{false};  // resynced since leadership was gained
  std::mutex leader_mu;
  std::condition_variable_any leader_cv;
  bool resync_requested = false;
  bool unlabel_requested = false;       // leadership lost: take our leader label off (under leader_mu)
  std::atomic<bool> labelled{false};    // our pod carries the leader label (as far as we know)

  // ---------------------------------------------------------------------------------------
  // Nodes and topologies.

  // Rebuilds `name`'s NodeSpec from what the informers know and upserts it (or removes the
  // node), unless nothing it depends on changed. mu held.
  void RefreshNode(const std::string& name) {
    const auto node_it = nodes.find(name);
    {
      std::lock_guard lock(hami_mu);
      if (node_it == nodes.end() || node_it->second.hami_register.empty()) {
        hami_nodes.erase(name);
      } else {
        hami_nodes.insert(name);
      }
      if (node_it == nodes.end() || node_it->second.hami_amd_register.empty()) {
        hami_amd_nodes.erase(name);
      } else {
        hami_amd_nodes.insert(name);
      }
    }
    if (node_it == nodes.end()) {
      applied_inputs.erase(name);
      if (store.snapshot()->Find(name) != nullptr) {
        store.RemoveNode(name);
        metrics::Log(LogLevel::kInfo, {kVerb, "", name}, "node removed from the state");
        NodeSetChanged();
      }
      return;
    }
    const NodeView& node = node_it->second;
    const auto topo_it = topologies.find(name);
    const bool withdrawn = stale.contains(name) && options.stale_policy == StaleTopologyPolicy::kClosed;
    NodeInputs inputs{node.labels, node.unschedulable, node.hami_register, node.hami_amd_register,
                      topo_it == topologies.end() ? std::string() : topo_it->second.resource_version, withdrawn};
    const auto applied = applied_inputs.find(name);
    if (applied != applied_inputs.end() && applied->second == inputs) return;
    const bool moved = applied == applied_inputs.end() || applied->second.labels != inputs.labels;

    state::NodeSpec spec;
    spec.name = name;
    spec.labels = node.labels;
    spec.schedulable = !node.unschedulable;
    if (topo_it != topologies.end() && topo_it->second.topology && !withdrawn) {
      spec.topology = topo_it->second.topology;
      if (!node.hami_register.empty()) {
        Result<std::vector<HamiRegisteredGpu>> registered = ParseHamiRegister(node.hami_register);
        if (registered.ok()) {
          auto copy = std::make_shared<NodeTopology>(*spec.topology);
          ApplyHamiRegister(*registered, *copy);
          spec.topology = std::move(copy);
        } else {
          metrics::Log(LogLevel::kWarn, {kVerb, "", name},
                      std::string(kHamiNodeRegister) + " ignored: " + registered.error().message());
        }
      }
      // HAMi's AMD device plugin hands out only the cards it registered, by the registered id:
      // AMD GPUs it does not name are unusable, and so are all when the registration cannot be
      // read (fail closed: a bind could write no record its device plugin accepts).
      if (!node.hami_amd_register.empty()) {
        auto copy = std::make_shared<NodeTopology>(*spec.topology);
        Result<std::vector<HamiRegisteredGpu>> registered = ParseHamiAmdRegister(node.hami_amd_register);
        if (registered.ok()) {
          ApplyHamiAmdRegister(*registered, *copy);
        } else {
          metrics::Log(LogLevel::kWarn, {kVerb, "", name},
                      "AMD GPUs held out of placement: " + registered.error().message());
          MarkAmdGpusUnregistered(
              *copy, "HAMi's AMD registration cannot be read (" + registered.error().message() + ")");
        }
        spec.topology = std::move(copy);
      }
      // NCCL files and hwloc exports without NVML carry no card memory; GPU Feature Discovery's
      // node label does (MiB, for every NVIDIA card of the node), so shared requests can be
      // placed there. Applied after HAMi's registration, whose per-card figure wins.
      if (const auto gfd = node.labels.find("nvidia.com/gpu.memory"); gfd != node.labels.end()) {
        const std::string& text = gfd->second;
        std::uint64_t mib = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), mib);
        const bool parsed = ec == std::errc() && end == text.data() + text.size() && mib > 0 && mib < (1u << 24);
        const bool known = std::all_of(spec.topology->gpus.begin(), spec.topology->gpus.end(), [](const Gpu& g) {
          return g.vendor != GpuVendor::kNvidia || (g.memory_mib > 0 && !IsMemoryEstimate(g));
        });
        if (parsed && !known) {
          auto copy = std::make_shared<NodeTopology>(*spec.topology);
          for (Gpu& g : copy->gpus) {
            if (g.vendor == GpuVendor::kNvidia && (g.memory_mib == 0 || IsMemoryEstimate(g))) g.memory_mib = mib;
          }
          spec.topology = std::move(copy);
        }
      }
    }
    applied_inputs[name] = std::move(inputs);
    if (batch != nullptr) {  // a relist: one snapshot for all nodes (FlushBatch)
      batch->push_back(std::move(spec));
      batch_moved = batch_moved || moved;
      return;
    }
    if (Status s = store.UpsertNode(std::move(spec)); !s.ok()) {
      metrics::Log(LogLevel::kWarn, {kVerb, "", name}, s.error().message());
    }
    if (moved) NodeSetChanged();
    RetryPending(name);
  }

  // A node came, went or changed labels: HyperNodes that select nodes by label or by name
  // pattern may now hold other nodes. mu held.
  void NodeSetChanged() {
    if (!options.network.hyper_nodes) return;
    std::lock_guard lock(hypernode_mu);
    if (hypernodes_listed) ResolveHyperNodes();
  }

  // During a relist RefreshNode collects specs here instead of publishing a snapshot per node
  // (n upserts would copy the node list n times: seconds at a few thousand nodes).
  std::vector<state::NodeSpec>* batch = nullptr;
  bool batch_moved = false;  // a node in the batch is new or has new labels

  void FlushBatch(std::vector<state::NodeSpec>& specs) {
    batch = nullptr;
    std::vector<std::string> names;
    for (const state::NodeSpec& spec : specs) names.push_back(spec.name);
    if (Status s = store.UpsertNodes(std::move(specs)); !s.ok()) {
      metrics::Log(LogLevel::kWarn, {kVerb, "", ""}, s.error().message());
    }
    if (std::exchange(batch_moved, false)) NodeSetChanged();
    for (const std::string& name : names) RetryPending(name);
  }

  void ApplyNode(const json& object) {
    Result<NodeView> node = ReadNode(object);
    if (!node.ok()) {
      metrics::Log(LogLevel::kWarn, {kVerb, "", ""}, "Node ignored: " + node.error().message());
      return;
    }
    const std::string name = node->name;
    nodes[name] = std::move(node).value();
    RefreshNode(name);
  }

  void ApplyTopology(const json& object) {
    Result<NodeTopologyView> topo = ReadNodeTopology(object);
    if (!topo.ok()) {
      // A bad object must not take the node's previous topology with it: keep what we had.
      metrics::Log(LogLevel::kWarn, {kVerb, "", StringAt(object, "/metadata/name")},
                  "NodeTopology ignored: " + topo.error().message());
      return;
    }
    const std::string name = topo->name;
    topologies[name] = std::move(topo).value();
    UpdateStale(name, SystemClock::now());
    RefreshNode(name);
  }

  // Re-evaluates whether `name`'s topology is stale. mu held. True when that changed.
  bool UpdateStale(const std::string& name, SystemClock::time_point now) {
    if (!topologies.contains(name)) {  // deleted: nothing left to be stale
      const bool was = stale.erase(name) > 0;
      stale_gauge.With({}).Set(static_cast<double>(stale.size()));
      if (was) {
        std::lock_guard lock(stale_copy_mu);
        stale_copy = stale;
      }
      return was;
    }
    bool is_stale = false;
    if (options.stale_topology_age.count() > 0) {
      if (auto it = topologies.find(name); it != topologies.end() && it->second.topology) {
        // No heartbeat at all counts as stale: an agent that never said when it last looked.
        is_stale = !it->second.heartbeat || now - *it->second.heartbeat > options.stale_topology_age;
      }
    }
    const bool was = stale.contains(name);
    if (is_stale == was) return false;
    struct Publish {  // the copy /nodes and /explain read without taking mu
      Impl& d;
      ~Publish() {
        std::lock_guard lock(d.stale_copy_mu);
        d.stale_copy = d.stale;
      }
    } publish{*this};
    if (is_stale) {
      stale.insert(name);
      metrics::Log(LogLevel::kWarn, {kVerb, "", name},
                  std::string("NodeTopology heartbeat older than the stale age: ") +
                      (options.stale_policy == StaleTopologyPolicy::kClosed
                           ? "no new GPU pods on this node until its agent reports again"
                           : "still placing on its last topology (stale policy open)"));
    } else {
      stale.erase(name);
      metrics::Log(LogLevel::kInfo, {kVerb, "", name}, "NodeTopology fresh again");
    }
    stale_gauge.With({}).Set(static_cast<double>(stale.size()));
    return true;
  }

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

  void CheckStale() {
    std::lock_guard lock(mu);
    const auto now = SystemClock::now();
    std::vector<std::string> changed;
    for (const auto& [name, topo] : topologies) {
      if (UpdateStale(name, now)) changed.push_back(name);
    }
    for (const std::string& name : changed) RefreshNode(name);
  }

  // ---------------------------------------------------------------------------------------
  // Pods.


  // Applies one pod's current state. mu held. Appends a Ready event to `events` when the pod
  // just became Ready after a bind whose time is known.
  void ApplyPod(const PodView& pod, std::vector<PodEvent>& events) {
    PodState& state = pods[pod.uid];
    const bool was_known = !state.pod_name.empty();
    const bool was_ready = state.ready;
    state.pod_namespace = pod.pod_namespace;
    state.pod_name = pod.pod_name;
    state.node_name = pod.node_name;
    state.ready = pod.ready;

    if (!pod.Active()) {
      pending.erase(pod.uid);
      ReleaseGone(pod.uid, "pod " + pod.phase);
      return;
    }
    if (pod.ready && was_known && !was_ready) {
      if (std::optional<SystemClock::time_point> bound = BindTimeOf(pod)) {
        const SystemClock::time_point ready_at = pod.ready_since.value_or(SystemClock::now());
        const double seconds = std::chrono::duration<double>(ready_at - *bound).count();
        if (seconds >= 0) {
          bind_to_ready.With({}).Observe(seconds);
          char text[32];
          std::snprintf(text, sizeof text, "%.1f", seconds);
          events.push_back({pod.pod_namespace, pod.pod_name, pod.uid, pod.node_name, "ReadyAfterBind",
                            "Ready " + std::string(text) + " s after toposched bound it to node " + pod.node_name});
        }
      }
    }
    RestorePod(pod);
  }

  // Puts an annotated pod's allocation into the store (no-op when it is there already). A record
  // that cannot be read back, or that claims devices another pod holds, is held instead
  // (ClusterStore::Hold): its devices are never taken as free.
  void RestorePod(const PodView& pod) {
    const auto ours_it = pod.annotations.find(std::string(kAllocationAnnotation));
    const auto hami_it = pod.annotations.find(std::string(kHamiDevicesAllocated));
    const auto hami_amd_it = pod.annotations.find(std::string(kHamiAmdDevicesAllocated));
    const bool ours = ours_it != pod.annotations.end();
    const bool hami = hami_it != pod.annotations.end();
    const bool hami_amd = hami_amd_it != pod.annotations.end();
    if (!ours && !hami && !hami_amd) {
      RestoreForeign(pod);
      return;
    }
    const std::string node = AllocationNode(pod);
    if (node.empty()) return;
    const auto was_held = held.find(pod.uid);
    if (std::optional<state::PodAllocation> existing = store.FindPod(pod.uid)) {
      if (existing->node == node && existing->hold.empty()) {
        pending.erase(pod.uid);
        return;
      }
      // Another replica (a new leader) bound it elsewhere after an undone bind: follow the pod.
      // A held pod on this node is read again below; Restore or Hold replaces its hold.
      if (existing->node != node) (void)store.Release(pod.uid, /*persist=*/false);
    }
    const auto snapshot = store.snapshot();
    const state::NodeRecord* record = snapshot->Find(node);
    if (record == nullptr || record->topology == nullptr) {
      pending[pod.uid] = pod;  // its node (or topology) is not known yet
      return;
    }
    pending.erase(pod.uid);
    Result<framework::AllocationDelta> delta = Error("");
    LinkClass worst_class = LinkClass::kPIX;  // HAMi's annotations carry no classes
    std::string annotation(kAllocationAnnotation);
    if (ours) {
      delta = DecodeAllocation(ours_it->second, *record->topology, &worst_class);
    } else {
      // HAMi's own records: NVIDIA's list, AMD's, or both (HAMi lets one pod ask both vendors).
      delta = framework::AllocationDelta{};
      const std::pair<GpuVendor, const std::string*> lists[] = {
          {GpuVendor::kNvidia, hami ? &hami_it->second : nullptr},
          {GpuVendor::kAmd, hami_amd ? &hami_amd_it->second : nullptr}};
      for (const auto& [vendor, text] : lists) {
        if (text == nullptr || !delta.ok()) continue;
        annotation = std::string(HamiDeviceKeysFor(vendor).allocated);
        Result<HamiPodDevices> devices = DecodeHamiDevices(*text);
        Result<framework::AllocationDelta> part = devices.ok()
                                                      ? DeltaFromHami(*devices, *record->topology, vendor)
                                                      : Result<framework::AllocationDelta>(devices.error());
        if (!part.ok()) {
          delta = part.error();
          continue;
        }
        for (int g : part->exclusive_gpus) delta->exclusive_gpus.push_back(g);
        for (const auto& share : part->shares) delta->shares.push_back(share);
      }
    }
    state::PodAllocation allocation;
    allocation.uid = pod.uid;
    allocation.pod_namespace = pod.pod_namespace;
    allocation.pod_name = pod.pod_name;
    allocation.node = node;
    allocation.worst_class = worst_class;
    allocation.topology_generation = record->topology_generation;
    if (!delta.ok()) {
      restore_errors.With({}).Inc();
      // Every device any record names, HAMi's lists of both vendors together (';'-joined: the
      // reader splits containers there).
      std::string hami_lists = hami ? hami_it->second : std::string();
      if (hami_amd) hami_lists += (hami_lists.empty() ? "" : ";") + hami_amd_it->second;
      allocation.delta =
          DevicesNamedBy(ours ? ours_it->second : std::string_view(), hami_lists, *record->topology);
      HoldPod(pod, std::move(allocation), annotation + " cannot be read back: " + delta.error().message());
      return;
    }
    allocation.delta = std::move(delta).value();
    if (const auto role = pod.labels.find(std::string(kRoleLabel)); role != pod.labels.end()) {
      allocation.role = ParseLlmdRole(role->second).value_or(PodRole::kNone);
    }
    if (const auto pool = pod.labels.find(options.pool_label); pool != pod.labels.end()) allocation.pool = pool->second;
    if (const auto ipc = pod.annotations.find(std::string(kKvIpcAnnotation)); ipc != pod.annotations.end()) {
      allocation.kv_ipc = AnnotationIsTrue(ipc->second);
    }
    Status restored = store.Restore(allocation);
    if (!restored.ok()) restored = RestoreAroundStandIns(allocation);
    if (Status s = restored; !s.ok()) {
      restore_errors.With({}).Inc();
      const std::optional<state::PodAllocation> bound = store.FindPod(pod.uid);
      if (bound && bound->hold.empty() && bound->node == node) {
        // Bound by this replica while the informer read the pod: the store's allocation is what
        // was decided and written; it stays.
        metrics::Log(LogLevel::kWarn, {kVerb, PodLabel(pod.pod_namespace, pod.pod_name), node},
                    "allocation annotation differs from the bound allocation, which stays: " + s.error().message());
        return;
      }
      HoldPod(pod, std::move(allocation), "its allocation cannot be restored: " + s.error().message());
      return;
    }
    if (was_held != held.end()) {
      metrics::Log(LogLevel::kInfo, {kVerb, PodLabel(pod.pod_namespace, pod.pod_name), node},
                  "allocation readable again: restored, node hold lifted for this pod");
      held.erase(was_held);
      UpdateHeldGauges();
    }
  }

  // A bound pod that another scheduler placed (no record of ours or HAMi's) holds the devices it
  // asked for; which ones the kubelet gave it is not known. Rule (docs/operations.md): it is
  // counted on the last free GPUs of its vendor and the last free RDMA NICs in PCI order, so
  // capacity is exact and aligned groups at the front stay whole; when the node does not have that
  // many free in toposched's state, the pod is held (the state is wrong somewhere). mu held.
  void RestoreForeign(const PodView& pod) {
    if (pod.node_name.empty()) return;
    int nvidia = 0, amd = 0, rdma = 0;
    for (const auto& [name, count] : pod.extended_resources) {
      const int n = static_cast<int>(std::min<std::int64_t>(count, 1 << 16));
      if (name == "nvidia.com/gpu") {
        nvidia += n;
      } else if (name == "amd.com/gpu") {
        amd += n;
      } else if (IsRdmaResource(name)) {
        rdma += n;
      }
    }
    if (nvidia + amd + rdma == 0) return;
    if (std::optional<state::PodAllocation> existing = store.FindPod(pod.uid)) {
      if (existing->node == pod.node_name) {
        pending.erase(pod.uid);
        return;
      }
      (void)store.Release(pod.uid, /*persist=*/false);
    }
    for (int attempt = 0; attempt < 3; ++attempt) {  // a bind may take a device in between
      const auto snapshot = store.snapshot();
      const state::NodeRecord* record = snapshot->Find(pod.node_name);
      if (record == nullptr || record->topology == nullptr) {
        pending[pod.uid] = pod;  // not a node toposched manages (yet)
        return;
      }
      pending.erase(pod.uid);
      const NodeTopology& t = *record->topology;
      state::PodAllocation allocation;
      allocation.uid = pod.uid;
      allocation.pod_namespace = pod.pod_namespace;
      allocation.pod_name = pod.pod_name;
      allocation.node = pod.node_name;
      allocation.foreign = true;
      allocation.topology_generation = record->topology_generation;
      int want_nvidia = nvidia, want_amd = amd, want_rdma = rdma;
      for (int g = static_cast<int>(t.gpus.size()) - 1; g >= 0; --g) {
        if (!GpuFree(record->allocated, g)) continue;
        int& want = t.gpus[static_cast<std::size_t>(g)].vendor == GpuVendor::kAmd ? want_amd : want_nvidia;
        if (want > 0) {
          --want;
          allocation.delta.exclusive_gpus.insert(allocation.delta.exclusive_gpus.begin(), g);
        }
      }
      for (int n = static_cast<int>(t.nics.size()) - 1; n >= 0 && want_rdma > 0; --n) {
        if (!t.nics[static_cast<std::size_t>(n)].rdma || NicUsed(record->allocated, n)) continue;
        --want_rdma;
        allocation.delta.nics.insert(allocation.delta.nics.begin(), n);
      }
      if (want_nvidia + want_amd + want_rdma > 0) {
        restore_errors.With({}).Inc();
        HoldPod(pod, std::move(allocation),
                "pod placed by another scheduler asks " + std::to_string(nvidia + amd) + " GPUs and " +
                    std::to_string(rdma) + " RDMA NICs, more than toposched's state has free on node " +
                    pod.node_name);
        return;
      }
      if (store.Restore(allocation).ok()) {
        foreign[pod.uid] = pod;
        foreign_gauge.With({}).Set(static_cast<double>(foreign.size()));
        metrics::Log(LogLevel::kInfo, {kVerb, PodLabel(pod.pod_namespace, pod.pod_name), pod.node_name},
                    "pod of another scheduler counted: " + std::to_string(nvidia + amd) + " GPUs, " +
                        std::to_string(rdma) + " RDMA NICs (which ones the kubelet chose is not known)");
        return;
      }
    }
    HoldPod(pod, state::PodAllocation{.uid = pod.uid, .pod_namespace = pod.pod_namespace,
                                      .pod_name = pod.pod_name, .node = pod.node_name},
            "pod placed by another scheduler could not be counted on node " + pod.node_name);
  }

  // A record of ours (or HAMi's) names devices that stand-ins of other schedulers' pods were
  // counted on (RestoreForeign picks them by rule, not knowing the real ones; after a restart
  // the informer may list such a pod first). The record is the truth: the node's stand-ins are
  // taken off, the record restored, and the pods counted again on what is left. mu held.
  Status RestoreAroundStandIns(const state::PodAllocation& allocation) {
    std::vector<PodView> moved;
    for (const auto& [uid, pod] : foreign) {
      if (pod.node_name == allocation.node) moved.push_back(pod);
    }
    if (moved.empty()) return Error("no stand-ins on node " + allocation.node);
    for (const PodView& pod : moved) (void)store.Release(pod.uid, /*persist=*/false);
    Status s = store.Restore(allocation);
    for (const PodView& pod : moved) RestoreForeign(pod);
    return s;
  }

  bool IsRdmaResource(const std::string& name) const {
    for (const std::string& r : options.rdma_resources) {
      const bool prefix = !r.empty() && r.back() == '/';
      if (prefix ? name.starts_with(r) : name == r) return true;
    }
    return false;
  }

  // Allocations whose pod has had no node for longer than unbound_allocation_ttl: tentative ones
  // nobody completed (a Volcano task never bound nor deallocated, a Binding that never came).
  // Released, annotations and all, once the API server confirms the pod has no node. The leader
  // only; held and counted (foreign) pods never.
  std::unordered_map<std::string, SteadyClock::time_point> unbound_since;  // under mu
  void ReleaseLongUnbound() {
    if (options.unbound_allocation_ttl.count() <= 0 || !MayChangeState()) return;
    const auto now = SteadyClock::now();
    std::vector<state::PodAllocation> expired;
    {
      std::lock_guard lock(mu);
      std::unordered_map<std::string, SteadyClock::time_point> still;
      const std::shared_ptr<const state::Snapshot> snapshot = store.snapshot();
      for (const auto& record : snapshot->nodes()) {
        for (const std::string& uid : record->pods) {
          const auto pod = pods.find(uid);
          if (pod == pods.end() || !pod->second.node_name.empty()) continue;
          const auto seen = unbound_since.find(uid);
          const SteadyClock::time_point since = seen == unbound_since.end() ? now : seen->second;
          still[uid] = since;
          if (now - since < options.unbound_allocation_ttl) continue;
          if (std::optional<state::PodAllocation> a = store.FindPod(uid); a && a->hold.empty() && !a->foreign) {
            expired.push_back(std::move(*a));
          }
        }
      }
      unbound_since = std::move(still);
    }
    for (const state::PodAllocation& a : expired) {
      Result<json> pod = api.Get(PodPath(a.pod_namespace, a.pod_name));
      if (!pod.ok() || StringAt(*pod, "/metadata/uid") != a.uid || !StringAt(*pod, "/spec/nodeName").empty()) continue;
      Result<std::optional<state::PodAllocation>> released = store.Release(a.uid);  // undoes the annotations
      if (!released.ok() || !released->has_value()) continue;
      metrics::Log(LogLevel::kInfo, {kVerb, PodLabel(a.pod_namespace, a.pod_name), a.node},
                  "released: allocated but never bound for " +
                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(options.unbound_allocation_ttl).count()) +
                      " s (a tentative allocation nobody completed)");
      std::lock_guard lock(mu);
      unbound_since.erase(a.uid);
    }
  }

  // Holds `allocation`'s named devices and its node (fail closed); logs once per reason. mu held.
  void HoldPod(const PodView& pod, state::PodAllocation allocation, const std::string& reason) {
    const std::string node = allocation.node;
    allocation.hold = reason;
    if (Status s = store.Hold(std::move(allocation)); !s.ok()) {
      // Only an unknown node refuses a hold: retried when the node comes (it holds nothing now).
      pending[pod.uid] = pod;
      metrics::Log(LogLevel::kWarn, {kVerb, PodLabel(pod.pod_namespace, pod.pod_name), node},
                  "allocation cannot be held yet: " + s.error().message());
      return;
    }
    HeldPod& h = held[pod.uid];
    const bool same = h.node == node && h.reason == reason;
    h.pod = pod;
    if (!same) {
      h.node = node;
      h.reason = reason;
      h.reported = false;
      metrics::Log(LogLevel::kWarn, {kVerb, PodLabel(pod.pod_namespace, pod.pod_name), node},
                  reason + "; its devices stay held and node " + node +
                      " takes no new device placements until the pod is deleted or the annotation fixed");
    }
    UpdateHeldGauges();
  }

  void UpdateHeldGauges() {
    std::set<std::string> nodes;
    for (const auto& [uid, h] : held) nodes.insert(h.node);
    held_pods_gauge.With({}).Set(static_cast<double>(held.size()));
    held_nodes_gauge.With({}).Set(static_cast<double>(nodes.size()));
  }

  // Queues an event for the periodic loop (no verb waits on the API server for it); each
  // (pod, message) once.
  void QueueEvent(PodEvent event) {
    if (event.pod_name.empty()) return;  // a Volcano task without a Pod: nothing to attach it to
    std::lock_guard lock(warn_mu);
    if (warned.size() > 10'000) warned.clear();
    if (!warned.insert(event.uid + '\n' + event.message).second) return;
    if (queued_events.size() >= 1'000) return;  // the API server is not keeping up: the log has it
    queued_events.push_back(std::move(event));
  }

  // "GPUs 0 (0000:07:00.0, GPU-…), 3 (…); RDMA NICs mlx5_0, mlx5_3; worst GPU->NIC link PIX":
  // what a bind gave the pod, for its event. Empty when it holds no devices.
  std::string DescribeDevices(const state::PodAllocation& a) const {
    const auto snapshot = store.snapshot();
    const state::NodeRecord* record = snapshot->Find(a.node);
    if (record == nullptr || record->topology == nullptr) return {};
    const NodeTopology& t = *record->topology;
    std::vector<int> gpus = a.delta.exclusive_gpus;
    for (const auto& [g, usage] : a.delta.shares) gpus.push_back(g);
    std::string out;
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      if (gpus[i] < 0 || gpus[i] >= static_cast<int>(t.gpus.size())) continue;
      const Gpu& g = t.gpus[static_cast<std::size_t>(gpus[i])];
      out += (out.empty() ? "GPUs " : ", ") + std::to_string(g.index) + " (" + g.pci_bus_id +
             (g.uuid.empty() ? "" : ", " + g.uuid) + (i >= a.delta.exclusive_gpus.size() ? ", shared" : "") + ")";
    }
    std::string nics;
    for (int n : a.delta.nics) {
      if (n < 0 || n >= static_cast<int>(t.nics.size())) continue;
      nics += (nics.empty() ? "" : ", ") + t.nics[static_cast<std::size_t>(n)].DisplayName();
    }
    if (!nics.empty()) out += (out.empty() ? "" : "; ") + std::string("RDMA NICs ") + nics;
    if (out.empty()) return {};
    if (!gpus.empty() && !a.delta.nics.empty()) out += "; worst GPU->NIC link " + std::string(ToString(a.worst_class));
    return out;
  }

  void PostQueuedEvents() {
    if (!MayChangeState()) return;
    std::vector<PodEvent> events;
    {
      std::lock_guard lock(warn_mu);
      events.swap(queued_events);
    }
    // A DevicesAllocated event whose allocation is gone by now (a Volcano statement discarded, a
    // pod deleted at once) would tell of devices the pod does not hold: not written.
    std::erase_if(events, [&](const PodEvent& e) {
      if (e.reason != "DevicesAllocated") return false;
      const std::optional<state::PodAllocation> a = store.FindPod(e.uid);
      if (a && a->node == e.node) return false;
      pod_events.With({e.reason, "skipped"}).Inc();
      return true;
    });
    PostEvents(events);
    PostCorrelatedEvents();
  }

  // The FailedScheduling summaries due (EventCorrelator): new ones created, repeats patched
  // (count, lastTimestamp, message), as client-go's recorder does.
  void PostCorrelatedEvents() {
    std::vector<EventCorrelator::Write> due;
    {
      std::lock_guard lock(correlator_mu);
      due = correlator.Due();
    }
    for (const EventCorrelator::Write& w : due) {
      Result<json> r = Error("");
      if (w.create) {
        json event = EventObject(w.name, w.pod_namespace, w.pod_name, w.pod_uid, w.reason, w.message, w.type,
                                 w.first, w.last, w.count);
        r = api.Create(EventCollection(w.pod_namespace), event);
      } else {
        r = api.Patch(EventCollection(w.pod_namespace) + "/" + w.name, PatchType::kMerge,
                      json{{"count", w.count}, {"lastTimestamp", FormatTime(w.last)}, {"message", w.message}});
      }
      pod_events.With({w.reason, r.ok() ? (w.create ? "created" : "patched") : "failed"}).Inc();
      if (!r.ok()) {
        metrics::Log(LogLevel::kWarn, {kVerb, PodLabel(w.pod_namespace, w.pod_name), ""},
                    "cannot write the " + w.reason + " event: " + r.error().message());
      }
      std::lock_guard lock(correlator_mu);
      correlator.Written(w, r.ok());
    }
  }

  json EventObject(const std::string& name, const std::string& ns, const std::string& pod_name,
                   const std::string& uid, const std::string& reason, const std::string& message,
                   const std::string& type, SystemClock::time_point first, SystemClock::time_point last,
                   int count) const {
    return {
        {"apiVersion", "v1"},
        {"kind", "Event"},
        {"metadata", {{"name", name}, {"namespace", ns}}},
        {"involvedObject",
         {{"apiVersion", "v1"}, {"kind", "Pod"}, {"namespace", ns}, {"name", pod_name}, {"uid", uid}}},
        {"reason", reason},
        {"message", message},
        {"type", type},
        {"source", {{"component", options.event_component}}},
        {"reportingComponent", "toposched.io/" + options.event_component},
        {"reportingInstance", options.identity},
        {"firstTimestamp", FormatTime(first)},
        {"lastTimestamp", FormatTime(last)},
        {"count", count},
    };
  }

  // A Warning event on each held pod not yet told, written by the replica that may change state
  // (the leader once resynced; two replicas would report it twice). Called outside mu.
  void PostHoldEvents() {
    if (!MayChangeState()) return;
    std::vector<PodEvent> events;
    {
      std::lock_guard lock(mu);
      for (auto& [uid, h] : held) {
        if (h.reported) continue;
        h.reported = true;
        events.push_back({h.pod.pod_namespace, h.pod.pod_name, uid, h.node, "AllocationUnreadable",
                          h.reason + ". Its devices stay held and node " + h.node +
                              " takes no new device placements until this pod is deleted or the annotation fixed.",
                          "Warning"});
      }
    }
    PostEvents(events);
  }

  void RetryPending(const std::string& node) {
    std::vector<PodView> retry;
    for (const auto& [uid, pod] : pending) {
      if (AllocationNode(pod) == node) retry.push_back(pod);
    }
    for (const auto& [uid, h] : held) {
      if (h.node == node) retry.push_back(h.pod);  // the node's topology may name its devices now
    }
    for (const PodView& pod : retry) RestorePod(pod);
  }

  // A pod that is gone or finished gives its devices back (nothing to undo in the API).
  void ReleaseGone(const std::string& uid, std::string_view why) {
    if (held.erase(uid) > 0) UpdateHeldGauges();
    if (foreign.erase(uid) > 0) foreign_gauge.With({}).Set(static_cast<double>(foreign.size()));
    Result<std::optional<state::PodAllocation>> released = store.Release(uid, /*persist=*/false);
    if (released.ok() && released->has_value()) {
      const state::PodAllocation& a = **released;
      metrics::Log(LogLevel::kInfo, {kVerb, PodLabel(a.pod_namespace, a.pod_name), a.node},
                  "released (" + std::string(why) + ")");
    }
    std::lock_guard lock(bind_mu);
    recent_binds.erase(uid);
  }

  // Every pod in the API server now (a list): pods we knew that are missing were deleted while
  // the watch was down. A pod this replica bound moments ago may be missing only because the
  // list was read before the bind; those are confirmed with a GET before they are released.
  void ReplacePods(std::vector<json>&& objects) {
    std::vector<PodEvent> events;
    std::vector<std::string> check;
    {
      std::lock_guard lock(mu);
      std::set<std::string> seen;
      for (const json& object : objects) {
        Result<PodView> pod = ReadPod(object);
        if (!pod.ok()) {
          metrics::Log(LogLevel::kWarn, {kVerb, "", ""}, "Pod ignored: " + pod.error().message());
          continue;
        }
        seen.insert(pod->uid);
        ApplyPod(*pod, events);
      }
      std::vector<std::string> gone;
      for (const auto& [uid, state] : pods) {
        if (!seen.contains(uid)) gone.push_back(uid);
      }
      // Allocations of pods no list has shown (bound by us, not yet seen by the watch).
      // Hold the snapshot: another informer may publish a new one while we iterate.
      const std::shared_ptr<const state::Snapshot> snapshot = store.snapshot();
      for (const auto& record : snapshot->nodes()) {
        for (const std::string& uid : record->pods) {
          if (!seen.contains(uid) && !pods.contains(uid)) gone.push_back(uid);
        }
      }
      for (const std::string& uid : gone) {
        pending.erase(uid);
        if (BoundRecently(uid)) {
          check.push_back(uid);
          continue;
        }
        pods.erase(uid);
        ReleaseGone(uid, "pod deleted");
      }
    }
    for (const std::string& uid : check) ConfirmGone(uid);
    pods_applied.store(true, std::memory_order_release);
    synced_gauge.With({}).Set(1);
    PostEvents(events);
    PostHoldEvents();
  }

  bool BoundRecently(const std::string& uid) {
    std::lock_guard lock(bind_mu);
    auto it = recent_binds.find(uid);
    return it != recent_binds.end() && SteadyClock::now() - it->second.at < std::chrono::minutes(2);
  }

  void ConfirmGone(const std::string& uid) {
    std::optional<state::PodAllocation> a = store.FindPod(uid);
    if (!a) return;
    Result<json> pod = api.Get(PodPath(a->pod_namespace, a->pod_name));
    const bool gone = (!pod.ok() && IsNotFound(pod.error())) ||
                      (pod.ok() && StringAt(*pod, "/metadata/uid") != uid);
    if (!gone) return;
    std::lock_guard lock(mu);
    pods.erase(uid);
    ReleaseGone(uid, "pod deleted");
  }

  void UpsertPod(const json& object) {
    std::vector<PodEvent> events;
    {
      std::lock_guard lock(mu);
      Result<PodView> pod = ReadPod(object);
      if (!pod.ok()) {
        metrics::Log(LogLevel::kWarn, {kVerb, "", ""}, "Pod ignored: " + pod.error().message());
        return;
      }
      ApplyPod(*pod, events);
    }
    PostEvents(events);
    PostHoldEvents();
  }

  void RemovePod(const json& object) {
    std::lock_guard lock(mu);
    const std::string uid = StringAt(object, "/metadata/uid");
    if (uid.empty()) return;
    pods.erase(uid);
    pending.erase(uid);
    ReleaseGone(uid, "pod deleted");
  }

  // Core/v1 Events on pods (a Ready-after-bind, an allocation held), written by the leader only
  // (two replicas would report each twice). Failures are logged, never retried: the metrics have
  // the figures.
  void PostEvents(const std::vector<PodEvent>& events) {
    if (events.empty() || !MayChangeState()) return;
    const auto now = SystemClock::now();
    for (const PodEvent& e : events) {
      const json event = EventObject(e.pod_name + "." + std::to_string(now.time_since_epoch().count()),
                                     e.pod_namespace, e.pod_name, e.uid, e.reason, e.message, e.type, now, now, 1);
      Result<json> r = api.Create(EventCollection(e.pod_namespace), event);
      pod_events.With({e.reason, r.ok() ? "created" : "failed"}).Inc();
      if (!r.ok()) {
        metrics::Log(LogLevel::kWarn, {kVerb, PodLabel(e.pod_namespace, e.pod_name), e.node},
                    "cannot write the " + e.reason + " event: " + r.error().message());
      }
    }
  }

  // ---------------------------------------------------------------------------------------
  // Readiness and leadership.

  bool Synced() const {
    return node_informer && node_informer->synced() && topology_informer->synced() && pod_informer->synced() &&
           pods_applied.load(std::memory_order_acquire);
  }

  bool MayChangeState() const {
    if (!Synced()) return false;
    if (leader == nullptr) return true;
    return leader->leading() && leader_ready.load(std::memory_order_acquire);
  }

  // The new leader's quorum read of every pod, applied like a relist.
  void Resync(std::stop_token stop) {
    while (!stop.stop_requested()) {
      {
        std::unique_lock lock(leader_mu);
        leader_cv.wait(lock, stop, [&] { return resync_requested || unlabel_requested; });
        if (stop.stop_requested()) return;
        if (unlabel_requested) {
          unlabel_requested = false;
          lock.unlock();
          UnlabelSelf();
          lock.lock();
        }
        if (!resync_requested) continue;
        resync_requested = false;
      }
      // Pods are applied only on top of known nodes: wait for the first sync.
      while (!stop.stop_requested() && !(node_informer->synced() && topology_informer->synced())) {
        std::unique_lock lock(leader_mu);
        leader_cv.wait_for(lock, stop, std::chrono::milliseconds(50), [] { return false; });
      }
      if (stop.stop_requested()) return;
      ListOptions list;
      list.resource_version = "";  // most recent: a quorum read, newer than any watch cache
      Result<ObjectList> all = api.List(CorePath("pods"), list);
      if (!all.ok()) {
        metrics::Log(LogLevel::kWarn, {kVerb, "", ""},
                    "leader resync failed, retrying: " + all.error().message());
        std::unique_lock lock(leader_mu);
        resync_requested = true;
        leader_cv.wait_for(lock, stop, std::chrono::seconds(1), [] { return false; });
        continue;
      }
      ReplacePods(std::move(all->items));
      if (leader == nullptr || leader->leading()) {
        leader_ready.store(true, std::memory_order_release);
        metrics::Log(LogLevel::kInfo, {kVerb, "", ""}, "leader: state resynced from the API server, serving binds");
        PostHoldEvents();
        if (LabelsLeader()) LabelSelf(stop);
      }
    }
  }

  // ---------------------------------------------------------------------------------------
  // The leader label on our own pod (KubeSourceOptions::self_name).

  bool LabelsLeader() const { return leader != nullptr && !options.self_name.empty(); }

  json LeaderLabelPatch(bool on) const {
    json patch;
    patch["metadata"]["labels"][options.leader_label] = on ? json("true") : json(nullptr);
    return patch;
  }

  // Takes the label off every other pod of our namespace, then puts it on ours; retried (1 s
  // apart) while we lead and the API server refuses.
  void LabelSelf(std::stop_token stop) {
    while (!stop.stop_requested() && leader->leading()) {
      Status s = LabelSelfOnce();
      if (s.ok()) {
        labelled.store(true, std::memory_order_release);
        metrics::Log(LogLevel::kInfo, {kVerb, "", ""},
                    "leader: labelled pod " + options.self_namespace + "/" + options.self_name + " " +
                        options.leader_label + "=true; the Service routes here");
        return;
      }
      metrics::Log(LogLevel::kWarn, {kVerb, "", ""}, "leader label not set, retrying: " + s.error().message());
      std::unique_lock lock(leader_mu);
      leader_cv.wait_for(lock, stop, std::chrono::seconds(1), [] { return false; });
    }
  }

  Status LabelSelfOnce() {
    ListOptions list;
    list.label_selector = options.leader_label + "=true";
    Result<ObjectList> labelled_pods = api.List(NamespacedPath(options.self_namespace, "pods"), list);
    if (!labelled_pods.ok()) return labelled_pods.error();
    for (const json& pod : labelled_pods->items) {
      const std::string name = StringAt(pod, "/metadata/name");
      if (name.empty() || name == options.self_name) continue;
      Result<json> patched = api.Patch(PodPath(options.self_namespace, name), PatchType::kMerge, LeaderLabelPatch(false));
      if (!patched.ok() && !IsNotFound(patched.error())) return patched.error();
      metrics::Log(LogLevel::kInfo, {kVerb, "", ""}, "leader: took the stale leader label off pod " + name);
    }
    Result<json> patched =
        api.Patch(PodPath(options.self_namespace, options.self_name), PatchType::kMerge, LeaderLabelPatch(true));
    if (!patched.ok()) return patched.error();
    return Status::Ok();
  }

  // Best effort: the next leader takes a stale label off anyway.
  void UnlabelSelf() {
    if (!labelled.exchange(false)) return;
    Result<json> patched =
        api.Patch(PodPath(options.self_namespace, options.self_name), PatchType::kMerge, LeaderLabelPatch(false));
    if (!patched.ok()) {
      metrics::Log(LogLevel::kWarn, {kVerb, "", ""},
                  "could not take the leader label off this pod (the next leader will): " + patched.error().message());
    }
  }

  // ---------------------------------------------------------------------------------------
  // HAMi node lock.

  // Why HAMi's node lock on `node`, held by another pod, can never be released, or "": its pod
  // no longer exists (HAMi's own LockNode takes such a lock over: pkg/util/nodelock @02fba77),
  // or it is bound to another node, so HAMi's device plugin on this node will never allocate
  // for it (a bind that took the lock and failed, its pod scheduled elsewhere since: a leader
  // killed mid-bind). A lock whose pod is still unbound may be another scheduler's bind in
  // flight: it is honoured until it expires.
  std::string DanglingLock(const std::string& node, const HamiNodeLock& held) {
    Result<json> pod = api.Get(PodPath(held.pod_namespace, held.pod_name));
    if (!pod.ok()) return IsNotFound(pod.error()) ? "no longer exists" : "";
    const std::string bound = StringAt(*pod, "/spec/nodeName");
    return !bound.empty() && bound != node ? "is bound to node " + bound : "";
  }

  Status LockNode(const std::string& node, const std::string& ns, const std::string& name) {
    Result<json> locked = api.Update(NodePath(node), [&](json& object) -> Result<bool> {
      json& annotations = object["metadata"]["annotations"];
      if (annotations.is_null()) annotations = json::object();
      if (annotations.contains(kHamiNodeLock) && annotations[std::string(kHamiNodeLock)].is_string()) {
        Result<HamiNodeLock> held = DecodeHamiNodeLock(annotations[std::string(kHamiNodeLock)].get<std::string>());
        if (held.ok() && !(held->pod_namespace == ns && held->pod_name == name) &&
            SystemClock::now() - held->time < kHamiNodeLockExpiry) {
          const std::string dangling = DanglingLock(node, *held);
          if (dangling.empty()) {
            return Error("node " + node + " is locked (" + std::string(kHamiNodeLock) + ") by pod " +
                         held->pod_namespace + "/" + held->pod_name + " since " + FormatTime(held->time) +
                         "; HAMi's device plugin releases it once that pod's devices are allocated");
          }
          metrics::Log(LogLevel::kWarn, {kVerb, PodLabel(ns, name), node},
                       "taking over HAMi's node lock of pod " + held->pod_namespace + "/" + held->pod_name +
                           ", which " + dangling + ": nothing would release it before it expires");
        }
      }
      annotations[std::string(kHamiNodeLock)] = EncodeHamiNodeLock({SystemClock::now(), ns, name});
      return true;
    });
    if (!locked.ok()) return locked.error();
    return Status::Ok();
  }

  void UnlockNode(const std::string& node, const std::string& ns, const std::string& name) {
    Result<json> r = api.Update(NodePath(node), [&](json& object) -> Result<bool> {
      json* annotations = object.contains("metadata") ? &object["metadata"]["annotations"] : nullptr;
      if (annotations == nullptr || !annotations->is_object() || !annotations->contains(kHamiNodeLock)) return false;
      Result<HamiNodeLock> held = DecodeHamiNodeLock((*annotations)[std::string(kHamiNodeLock)].get<std::string>());
      if (!held.ok() || held->pod_namespace != ns || held->pod_name != name) return false;  // not ours
      annotations->erase(std::string(kHamiNodeLock));
      return true;
    });
    if (!r.ok() && !IsNotFound(r.error())) {
      metrics::Log(LogLevel::kWarn, {kVerb, PodLabel(ns, name), node}, "cannot release the node lock: " + r.error().message());
    }
  }

  void RefreshMetrics() {
    const std::pair<const char*, Informer*> informers[] = {
        {"nodes", node_informer.get()}, {"nodetopologies", topology_informer.get()}, {"pods", pod_informer.get()}};
    for (const auto& [name, informer] : informers) {
      if (informer == nullptr) continue;
      const InformerCounters c = informer->counters();
      informer_lists.With({name}).Advance(c.lists);
      informer_gone.With({name}).Advance(c.gone);
      informer_errors.With({name}).Advance(c.errors);
      informer_events.With({name}).Advance(c.events);
    }
    leader_gauge.With({}).Set(leader == nullptr || leader->leading() ? 1.0 : 0.0);
    synced_gauge.With({}).Set(Synced() ? 1.0 : 0.0);
  }

  // HyperNodes or nodes changed: resolve every node's position again (labelMatch members read
  // the nodes' labels as the store has them now). A set that does not resolve (a cycle, a bad
  // regex) is logged and the previous positions stay; positions that come out the same are not
  // published again. hypernode_mu held.
  void ResolveHyperNodes() {
    json list = json::array();
    for (const auto& [name, object] : hypernodes) list.push_back(object);
    pd::NodeLabels labels;
    const std::shared_ptr<const state::Snapshot> snapshot = store.snapshot();
    for (const auto& record : snapshot->nodes()) labels[record->name] = record->labels;
    std::vector<std::string> warnings;
    Result<std::map<std::string, pd::Location>> resolved =
        pd::ResolveHyperNodes(options.network, list.dump(), labels, &warnings);
    for (const std::string& w : warnings) metrics::Log(LogLevel::kWarn, {"informer/hypernodes", "", ""}, w);
    if (!resolved.ok()) {
      metrics::Log(LogLevel::kWarn, {"informer/hypernodes", "", ""},
                  "HyperNodes not applied, node positions unchanged: " + resolved.error().message());
      return;
    }
    const std::size_t placed = resolved->size();
    if (const auto current = store.node_locations(); current != nullptr && *current == *resolved) return;
    store.SetNodeLocations(std::make_shared<const std::map<std::string, pd::Location>>(std::move(resolved).value()));
    metrics::Log(LogLevel::kInfo, {"informer/hypernodes", "", ""},
                std::to_string(hypernodes.size()) + " HyperNodes place " + std::to_string(placed) + " nodes");
  }

  static std::string NameOf(const json& object) { return StringAt(object, "/metadata/name"); }

  InformerOptions InformerFor(std::string path, std::string name) const {
    InformerOptions o;
    o.collection_path = std::move(path);
    o.name = std::move(name);
    o.watch_timeout_seconds = options.watch_timeout_seconds;
    o.backoff_base = options.backoff_base;
    o.backoff_max = options.backoff_max;
    return o;
  }
};

KubeSource::KubeSource(Api& api, state::ClusterStore& store, metrics::Registry& metrics, KubeSourceOptions options,
                       LeaderElector* leader)
    : impl_(std::make_unique<Impl>(api, store, metrics, std::move(options), leader)) {
  Impl& d = *impl_;
  using Objects = std::vector<json>&&;
  d.node_informer = std::make_unique<Informer>(
      api, d.InformerFor(CorePath("nodes"), "nodes"),
      InformerHandler{Guarded<Objects>("Node", [&d](Objects o) { d.ReplaceNamed(d.nodes, std::move(o), &Impl::ApplyNode); }),
                      Guarded<const json&>("Node", [&d](const json& o) { d.Locked(&Impl::ApplyNode, o); }),
                      Guarded<const json&>("Node", [&d](const json& o) { d.ForgetNamed(d.nodes, o); })});
  d.topology_informer = std::make_unique<Informer>(
      api, d.InformerFor(std::string(kNodeTopologyCollection), "nodetopologies"),
      InformerHandler{
          Guarded<Objects>("NodeTopology",
                           [&d](Objects o) { d.ReplaceNamed(d.topologies, std::move(o), &Impl::ApplyTopology); }),
          Guarded<const json&>("NodeTopology", [&d](const json& o) { d.Locked(&Impl::ApplyTopology, o); }),
          Guarded<const json&>("NodeTopology", [&d](const json& o) { d.ForgetNamed(d.topologies, o); })});
  d.pod_informer = std::make_unique<Informer>(
      api, d.InformerFor(CorePath("pods"), "pods"),
      InformerHandler{Guarded<Objects>("Pod", [&d](Objects o) { d.ReplacePods(std::move(o)); }),
                      Guarded<const json&>("Pod", [&d](const json& o) { d.UpsertPod(o); }),
                      Guarded<const json&>("Pod", [&d](const json& o) { d.RemovePod(o); })});
  if (d.options.network.hyper_nodes) {
    d.hypernode_informer = std::make_unique<Informer>(
        api, d.InformerFor(std::string(kHyperNodeCollection), "hypernodes"),
        InformerHandler{Guarded<Objects>("HyperNode",
                                         [&d](Objects objects) {
                                           std::lock_guard lock(d.hypernode_mu);
                                           d.hypernodes_listed = true;
                                           d.hypernodes.clear();
                                           for (json& o : objects) {
                                             std::string name = Impl::NameOf(o);  // before o is moved
                                             d.hypernodes[std::move(name)] = std::move(o);
                                           }
                                           d.ResolveHyperNodes();
                                         }),
                        Guarded<const json&>("HyperNode",
                                             [&d](const json& o) {
                                               std::lock_guard lock(d.hypernode_mu);
                                               d.hypernodes[Impl::NameOf(o)] = o;
                                               d.ResolveHyperNodes();
                                             }),
                        Guarded<const json&>("HyperNode", [&d](const json& o) {
                          std::lock_guard lock(d.hypernode_mu);
                          d.hypernodes.erase(Impl::NameOf(o));
                          d.ResolveHyperNodes();
                        })});
  }
}

KubeSource::~KubeSource() { Stop(); }

void KubeSource::Start() {
  Impl& d = *impl_;
  if (!d.threads.empty()) return;
  if (d.LabelsLeader()) {
    // A process restarted inside its pod finds the leader label it set before it died: take it
    // off before anything else (the resync thread does it first), it does not lead yet.
    d.labelled.store(true);
    std::lock_guard lock(d.leader_mu);
    d.unlabel_requested = true;
  }
  d.threads.emplace_back([&d](std::stop_token stop) { d.node_informer->Run(stop); });
  d.threads.emplace_back([&d](std::stop_token stop) { d.topology_informer->Run(stop); });
  d.threads.emplace_back([&d](std::stop_token stop) {
    // Pods after Nodes and NodeTopology objects, so that the first list finds every node.
    while (!stop.stop_requested()) {
      if (d.node_informer->WaitForSync(std::chrono::milliseconds(50)) &&
          d.topology_informer->WaitForSync(std::chrono::milliseconds(50))) {
        break;
      }
    }
    if (!stop.stop_requested()) d.pod_informer->Run(stop);
  });
  d.threads.emplace_back([&d](std::stop_token stop) {
    std::mutex m;
    std::condition_variable_any cv;
    while (!stop.stop_requested()) {
      std::unique_lock lock(m);
      cv.wait_for(lock, stop, d.options.stale_check_interval, [] { return false; });
      if (stop.stop_requested()) return;
      lock.unlock();
      d.CheckStale();
      d.PostHoldEvents();  // events a replica could not write before it synced or led
      d.PostQueuedEvents();
      d.ReleaseLongUnbound();
    }
  });
  if (d.leader != nullptr) {
    d.threads.emplace_back([&d](std::stop_token stop) { d.Resync(stop); });
  }
  if (d.hypernode_informer) {
    // After the nodes are known (labelMatch members read their labels); positions fall back to
    // the tier labels until then, so readiness does not wait for HyperNodes.
    d.threads.emplace_back([&d](std::stop_token stop) {
      while (!stop.stop_requested() && !d.node_informer->WaitForSync(std::chrono::milliseconds(50))) {
      }
      if (!stop.stop_requested()) d.hypernode_informer->Run(stop);
    });
  }
}

void KubeSource::Stop() {
  Impl& d = *impl_;
  for (std::jthread& t : d.threads) t.request_stop();
  d.leader_cv.notify_all();
  d.threads.clear();  // joins
  if (d.LabelsLeader()) d.UnlabelSelf();
}

bool KubeSource::WaitUntilReady(std::chrono::milliseconds timeout) const {
  const auto deadline = SteadyClock::now() + timeout;
  while (SteadyClock::now() < deadline) {
    if (std::string why; Ready(&why)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string why;
  return Ready(&why);
}

void KubeSource::OnLeadership(bool leading) {
  Impl& d = *impl_;
  d.leader_ready.store(false, std::memory_order_release);
  d.leader_gauge.With({}).Set(leading ? 1.0 : 0.0);
  metrics::Log(LogLevel::kInfo, {kVerb, "", ""},
              leading ? "became the leader: resyncing pods before serving binds"
                      : (d.LabelsLeader() ? "not the leader: binds are refused, the leader label comes off"
                                          : "not the leader: binds are refused, /readyz reports not ready"));
  if (!leading) {
    if (d.LabelsLeader()) {
      {
        std::lock_guard lock(d.leader_mu);
        d.unlabel_requested = true;
      }
      d.leader_cv.notify_all();
    }
    return;
  }
  {
    std::lock_guard lock(d.leader_mu);
    d.resync_requested = true;
  }
  d.leader_cv.notify_all();
}

void KubeSource::RefreshMetrics() { impl_->RefreshMetrics(); }

Status KubeSource::RecordBind(const state::PodAllocation& allocation, const state::NodeRecord& node) {
  Impl& d = *impl_;
  {
    std::lock_guard lock(d.bind_mu);
    d.recent_binds[allocation.uid] = {SteadyClock::now()};
  }
  // A pod without devices of ours carries no annotations; its bind is just the Binding.
  if (!HasDevices(allocation.delta) || node.topology == nullptr) return Status::Ok();
  const auto now = SystemClock::now();
  const AllocationAnnotations a = EncodeAllocation(allocation, *node.topology, d.options.policy_name);
  const std::string unix_seconds = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                                      now.time_since_epoch()).count());
  json annotations = {
      {std::string(kAllocationAnnotation), a.allocation},
      {std::string(kVisibleGpusAnnotation), a.visible_gpus},
      {std::string(kNcclIbHcaAnnotation), a.nccl_ib_hca},
      {std::string(kBindTimeAnnotation), FormatTime(now)},
  };
  if (!a.hami_devices.empty()) {
    const HamiDeviceKeys keys = HamiDeviceKeysFor(a.hami_vendor);
    annotations[std::string(keys.to_allocate)] = a.hami_devices;
    annotations[std::string(keys.allocated)] = a.hami_devices;
    annotations[std::string(kHamiVgpuNode)] = allocation.node;
    annotations[std::string(kHamiVgpuTime)] = unix_seconds;
    annotations[std::string(kHamiBindPhase)] = "allocating";
    annotations[std::string(kHamiBindTime)] = unix_seconds;
  }
  const bool lock = d.LocksFor(allocation, *node.topology, a);
  if (lock) {
    if (Status s = d.LockNode(allocation.node, allocation.pod_namespace, allocation.pod_name); !s.ok()) return s;
  }
  Result<json> patched = d.api.Patch(PodPath(allocation.pod_namespace, allocation.pod_name), PatchType::kMerge,
                                     json{{"metadata", {{"annotations", annotations}}}});
  if (!patched.ok()) {
    d.annotation_writes.With({"error"}).Inc();
    if (lock) d.UnlockNode(allocation.node, allocation.pod_namespace, allocation.pod_name);
    return patched.error().WithContext("cannot write the allocation annotations");
  }
  if (StringAt(*patched, "/metadata/uid") != allocation.uid) {
    // Same name, another pod (deleted and recreated meanwhile): take nothing of it.
    d.annotation_writes.With({"error"}).Inc();
    (void)d.api.Patch(PodPath(allocation.pod_namespace, allocation.pod_name), PatchType::kMerge,
                      json{{"metadata", {{"annotations", [&] {
                              json undo = json::object();
                              for (std::string_view k : kBindAnnotations) undo[std::string(k)] = nullptr;
                              return undo;
                            }()}}}});
    if (lock) d.UnlockNode(allocation.node, allocation.pod_namespace, allocation.pod_name);
    return Error("pod " + PodLabel(allocation.pod_namespace, allocation.pod_name) + " now has UID " +
                 StringAt(*patched, "/metadata/uid") + ", not " + allocation.uid);
  }
  d.annotation_writes.With({"bind"}).Inc();
  return Status::Ok();
}

Status KubeSource::RecordRelease(const state::PodAllocation& allocation) {
  Impl& d = *impl_;
  {
    std::lock_guard lock(d.bind_mu);
    d.recent_binds.erase(allocation.uid);
  }
  if (!HasDevices(allocation.delta)) return Status::Ok();
  json undo = json::object();
  for (std::string_view k : kBindAnnotations) undo[std::string(k)] = nullptr;
  Result<json> patched = d.api.Patch(PodPath(allocation.pod_namespace, allocation.pod_name), PatchType::kMerge,
                                     json{{"metadata", {{"annotations", undo}}}});
  if (!patched.ok() && !IsNotFound(patched.error())) {
    d.annotation_writes.With({"error"}).Inc();
    return patched.error().WithContext("cannot remove the allocation annotations");
  }
  d.annotation_writes.With({"undo"}).Inc();
  // Unlocking is idempotent and only removes a lock this pod holds: no need to know whether
  // the bind took one.
  if (d.options.hami_node_lock != HamiNodeLockMode::kOff) {
    d.UnlockNode(allocation.node, allocation.pod_namespace, allocation.pod_name);
  }
  return Status::Ok();
}

void KubeSource::PodWarning(std::string_view pod_namespace, std::string_view pod_name, std::string_view pod_uid,
                            std::string_view reason, std::string_view message) {
  impl_->QueueEvent({std::string(pod_namespace), std::string(pod_name), std::string(pod_uid), "", std::string(reason),
                     std::string(message), "Warning"});
}

void KubeSource::PodUnschedulable(std::string_view pod_namespace, std::string_view pod_name, std::string_view pod_uid,
                                  std::string_view summary) {
  if (pod_name.empty()) return;  // a pod without a name (a Volcano task without its Pod): nothing to attach to
  Impl& d = *impl_;
  bool kept = false;
  {
    std::lock_guard lock(d.correlator_mu);
    kept = d.correlator.Observe({std::string(pod_namespace), std::string(pod_name), std::string(pod_uid),
                                 "FailedScheduling", std::string(summary), "Warning"},
                                SystemClock::now());
  }
  if (!kept) d.pod_events.With({"FailedScheduling", "rate_limited"}).Inc();
}

void KubeSource::PodAllocated(const state::PodAllocation& allocation, std::string_view alignment, bool volcano) {
  Impl& d = *impl_;
  {
    std::lock_guard lock(d.correlator_mu);
    d.correlator.DropUnwritten(allocation.uid);
  }
  // What the pod got, on the pod (kubectl describe), written by the periodic loop.
  std::string devices = d.DescribeDevices(allocation);
  if (devices.empty()) return;
  if (!alignment.empty() && devices.find("worst GPU->NIC link") != std::string::npos) {
    devices += " (" + std::string(alignment) + ")";
  }
  d.QueueEvent({allocation.pod_namespace, allocation.pod_name, allocation.uid, allocation.node, "DevicesAllocated",
                (volcano ? "Allocated on node " + allocation.node + " for Volcano's bind: "
                         : "Bound to node " + allocation.node + ": ") +
                    devices,
                "Normal"});
}

Result<std::string> KubeSource::LookupPod(std::string_view pod_namespace, std::string_view pod_name) {
  Result<json> pod = impl_->api.Get(PodPath(pod_namespace, pod_name));
  if (!pod.ok()) {
    if (IsNotFound(pod.error())) {
      return Error(std::string(extender::kPodNotFoundTag) + std::string(pod_namespace) + "/" + std::string(pod_name),
                   ErrorCode::kNotFound);
    }
    return pod.error().WithContext("cannot read pod " + std::string(pod_namespace) + "/" + std::string(pod_name));
  }
  return pod->dump();
}

std::set<std::string, std::less<>> KubeSource::StaleTopologies() const {
  std::lock_guard lock(impl_->stale_copy_mu);
  return impl_->stale_copy;
}

bool KubeSource::MayChangeState() const { return impl_->MayChangeState(); }

bool KubeSource::Ready(std::string* why) const {
  const Impl& d = *impl_;
  if (!d.Synced()) {
    if (why != nullptr) {
      *why = "not synced with the API server yet (nodes " + std::string(d.node_informer->synced() ? "ok" : "pending") +
             ", nodetopologies " + (d.topology_informer->synced() ? "ok" : "pending") + ", pods " +
             (d.pods_applied.load() ? "ok" : "pending") + ")";
    }
    return false;
  }
  // With the leader label, followers are ready too: the Service routes by the label.
  if (d.LabelsLeader()) return true;
  if (d.leader != nullptr && !d.leader->leading()) {
    if (why != nullptr) *why = "not the leader (the Lease is held by " + d.leader->holder() + ")";
    return false;
  }
  if (d.leader != nullptr && !d.leader_ready.load(std::memory_order_acquire)) {
    if (why != nullptr) *why = "leader, resyncing pods from the API server";
    return false;
  }
  return true;
}

Result<std::string> KubeSource::FetchPod(std::string_view pod_namespace, std::string_view pod_name,
                                         std::string_view pod_uid) {
  Result<json> pod = impl_->api.Get(PodPath(pod_namespace, pod_name));
  if (!pod.ok()) return pod.error();
  const std::string uid = StringAt(*pod, "/metadata/uid");
  if (uid != pod_uid) {
    return Error("pod " + std::string(pod_namespace) + "/" + std::string(pod_name) + " has UID " + uid + ", not " +
                 std::string(pod_uid));
  }
  return pod->dump();
}

Status KubeSource::CompleteBind(const state::PodAllocation& allocation) {
  Impl& d = *impl_;
  Status s = d.api.CreateBinding(allocation.pod_namespace, allocation.pod_name, allocation.uid, allocation.node);
  d.bindings.With({s.ok() ? "created" : "failed"}).Inc();
  if (s.ok()) {
    {
      std::lock_guard lock(d.mu);
      if (auto it = d.pods.find(allocation.uid); it != d.pods.end()) it->second.node_name = allocation.node;
    }
  }
  return s;
}

bool KubeSource::MayRebind(const state::PodAllocation& previous) {
  Impl& d = *impl_;
  {
    std::lock_guard lock(d.mu);
    if (auto it = d.pods.find(previous.uid); it != d.pods.end() && !it->second.node_name.empty()) return false;
  }
  // Ask the API server: the informer may be behind, and a wrong "yes" would move a running pod.
  Result<json> pod = d.api.Get(PodPath(previous.pod_namespace, previous.pod_name));
  if (!pod.ok()) return false;
  return StringAt(*pod, "/metadata/uid") == previous.uid &&
         StringAt(*pod, "/spec/nodeName").empty();
}

}  // namespace toposched::kube
