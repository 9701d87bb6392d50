// KubeSource's wiring: Impl's metrics, the informers and their handlers, the threads (Start,
// Stop), readiness and leadership (the new leader's resync, the leader label on our own pod), and
// the public entry points that are no other file's job. Impl is declared in kube_source_impl.h;
// the rest of it is in kube_nodes.cc, kube_pods.cc, kube_events.cc and kube_persistence.cc.
#include "toposched/kube/source.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_util.h"
#include "kube_source_impl.h"
#include "toposched/kube/informer.h"
#include "toposched/kube/objects.h"
#include "toposched/metrics/logging.h"

namespace toposched::kube {

namespace {

using metrics::LogLevel;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;
using detail::kVerb;

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

KubeSource::Impl::Impl(Api& a, state::ClusterStore& s, metrics::Registry& reg, KubeSourceOptions o,
                       LeaderElector* l)
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
      bindings(reg.AddCounter(
          "toposched_kube_bindings_total",
          "Bindings made by bind: created, failed (not made), unknown (whether it was made could not be read "
          "back: the devices stay held).",
          {"outcome"})),
      annotation_writes(reg.AddCounter("toposched_kube_annotation_writes_total",
                                       "Pod annotation writes: binding (written by the Binding that bound "
                                       "the pod), bind (a patch: Volcano's "
                                       "allocate), undo (removed after a release), error.",
                                       {"outcome"})),
      bind_to_ready(reg.AddHistogram(
          "toposched_bind_to_ready_seconds",
          "Time from toposched's bind of a pod to the pod's Ready condition (capacity counts from then).", {},
          {1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600})),
      held_pods_gauge(reg.AddGauge(
          "toposched_kube_held_allocations",
          "Pods whose allocation could not be read back (unknown device, fields that disagree, devices "
          "another pod holds): their nodes take no new device placements until each is deleted or fixed.")),
      held_nodes_gauge(reg.AddGauge("toposched_kube_held_nodes",
                                    "Nodes kept out of new device placements by a held allocation.")),
      foreign_gauge(reg.AddGauge("toposched_kube_foreign_pods",
                                 "Bound pods of other schedulers that hold GPUs or RDMA NICs on toposched's "
                                 "nodes, counted by rule.")),
      stale_gauge(reg.AddGauge("toposched_kube_stale_topologies",
                               "NodeTopology objects whose agent heartbeat is older than the stale age.")),
      informer_lists(reg.AddCounter("toposched_kube_informer_lists_total",
                                    "Successful (re)lists per informer since start.", {"resource"})),
      informer_gone(reg.AddCounter("toposched_kube_informer_gone_total",
                                   "410 Gone answers (each forces a relist) per informer.", {"resource"})),
      informer_errors(reg.AddCounter("toposched_kube_informer_errors_total",
                                     "Failed lists and watches (each followed by a backoff) per informer.",
                                     {"resource"})),
      informer_events(reg.AddCounter("toposched_kube_informer_events_total",
                                     "Watch events applied per informer.", {"resource"})),
      pod_events(reg.AddCounter(
          "toposched_pod_events_total",
          "Events written on pods, by reason and result: created, patched (a repeat: count raised), failed, "
          "rate_limited (the per-pod spam filter dropped an occurrence), skipped (the pod's devices were "
          "released before the event was written).",
          {"reason", "result"})),
      dra_unmapped_gauge(
          reg.AddGauge("toposched_dra_unmapped_devices",
                       "Devices allocated to DRA ResourceClaims that toposched cannot map onto "
                       "their node's topology by PCI address (not counted; see the log).")),
      dra_pending_gauge(reg.AddGauge("toposched_dra_pending_claims",
                                     "Allocated ResourceClaims whose devices' ResourceSlice or node topology "
                                     "toposched has not read yet (counted once they arrive).")) {
  // Series without labels exist (at 0) from the start, as Prometheus' own clients expose them:
  // rate(), increase() and alerts on them need a sample before the first change.
  restore_errors.With({});
  for (metrics::Family<metrics::Gauge>* g :
       {&leader_gauge, &synced_gauge, &held_pods_gauge, &held_nodes_gauge, &foreign_gauge, &stale_gauge,
        &dra_unmapped_gauge, &dra_pending_gauge}) {
    g->With({}).Set(0);
  }
}

bool KubeSource::Impl::Synced() const {
  const bool dra_synced = !options.dra || (slice_informer->synced() && claim_informer->synced() &&
                                           template_informer->synced() && class_informer->synced());
  return node_informer && node_informer->synced() && topology_informer->synced() && pod_informer->synced() &&
         pods_applied.load(std::memory_order_acquire) && dra_synced;
}

bool KubeSource::Impl::MayChangeState() const {
  if (!Synced()) return false;
  if (leader == nullptr) return true;
  return leader->leading() && leader_ready.load(std::memory_order_acquire);
}

// The new leader's quorum read of every pod, applied like a relist.
void KubeSource::Impl::Resync(std::stop_token stop) {
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
      metrics::Log(LogLevel::kInfo, {kVerb, "", ""},
                   "leader: state resynced from the API server, serving binds");
      PostHoldEvents();
      if (LabelsLeader()) LabelSelf(stop);
    }
  }
}

json KubeSource::Impl::LeaderLabelPatch(bool on) const {
  json patch;
  patch["metadata"]["labels"][options.leader_label] = on ? json("true") : json(nullptr);
  return patch;
}

// Takes the label off every other pod of our namespace, then puts it on ours; retried (1 s
// apart) while we lead and the API server refuses.
void KubeSource::Impl::LabelSelf(std::stop_token stop) {
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

Status KubeSource::Impl::LabelSelfOnce() {
  ListOptions list;
  list.label_selector = options.leader_label + "=true";
  TOPOSCHED_ASSIGN_OR_RETURN(ObjectList labelled_pods,
                             api.List(NamespacedPath(options.self_namespace, "pods"), list));
  for (const json& pod : labelled_pods.items) {
    const std::string name = StringAt(pod, "/metadata/name");
    if (name.empty() || name == options.self_name) continue;
    Result<json> patched =
        api.Patch(PodPath(options.self_namespace, name), PatchType::kMerge, LeaderLabelPatch(false));
    if (!patched.ok() && !IsNotFound(patched.error())) return patched.error();
    metrics::Log(LogLevel::kInfo, {kVerb, "", ""}, "leader: took the stale leader label off pod " + name);
  }
  TOPOSCHED_ASSIGN_OR_RETURN(std::ignore, api.Patch(PodPath(options.self_namespace, options.self_name),
                                                    PatchType::kMerge, LeaderLabelPatch(true)));
  return Status::Ok();
}

// Best effort: the next leader takes a stale label off anyway.
void KubeSource::Impl::UnlabelSelf() {
  if (!labelled.exchange(false)) return;
  Result<json> patched = api.Patch(PodPath(options.self_namespace, options.self_name), PatchType::kMerge,
                                   LeaderLabelPatch(false));
  if (!patched.ok()) {
    metrics::Log(
        LogLevel::kWarn, {kVerb, "", ""},
        "could not take the leader label off this pod (the next leader will): " + patched.error().message());
  }
}

void KubeSource::Impl::RefreshMetrics() {
  const std::pair<const char*, Informer*> informers[] = {{"nodes", node_informer.get()},
                                                         {"nodetopologies", topology_informer.get()},
                                                         {"pods", pod_informer.get()}};
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

InformerOptions KubeSource::Impl::InformerFor(std::string path, std::string name) const {
  InformerOptions o;
  o.collection_path = std::move(path);
  o.name = std::move(name);
  o.watch_timeout_seconds = options.watch_timeout_seconds;
  o.backoff_base = options.backoff_base;
  o.backoff_max = options.backoff_max;
  return o;
}

KubeSource::KubeSource(Api& api, state::ClusterStore& store, metrics::Registry& metrics,
                       KubeSourceOptions options, LeaderElector* leader)
    : impl_(std::make_unique<Impl>(api, store, metrics, std::move(options), leader)) {
  Impl& d = *impl_;
  using Objects = std::vector<json>&&;
  d.node_informer = std::make_unique<Informer>(
      api, d.InformerFor(CorePath("nodes"), "nodes"),
      InformerHandler{
          Guarded<Objects>("Node",
                           [&d](Objects o) { d.ReplaceNamed(d.nodes, std::move(o), &Impl::ApplyNode); }),
          Guarded<const json&>("Node", [&d](const json& o) { d.Locked(&Impl::ApplyNode, o); }),
          Guarded<const json&>("Node", [&d](const json& o) { d.ForgetNamed(d.nodes, o); })});
  d.topology_informer = std::make_unique<Informer>(
      api, d.InformerFor(std::string(kNodeTopologyCollection), "nodetopologies"),
      InformerHandler{
          Guarded<Objects>(
              "NodeTopology",
              [&d](Objects o) { d.ReplaceNamed(d.topologies, std::move(o), &Impl::ApplyTopology); }),
          Guarded<const json&>("NodeTopology", [&d](const json& o) { d.Locked(&Impl::ApplyTopology, o); }),
          Guarded<const json&>("NodeTopology", [&d](const json& o) { d.ForgetNamed(d.topologies, o); })});
  d.pod_informer = std::make_unique<Informer>(
      api, d.InformerFor(CorePath("pods"), "pods"),
      InformerHandler{Guarded<Objects>("Pod", [&d](Objects o) { d.ReplacePods(std::move(o)); }),
                      Guarded<const json&>("Pod", [&d](const json& o) { d.UpsertPod(o); }),
                      Guarded<const json&>("Pod", [&d](const json& o) { d.RemovePod(o); })});
  if (d.options.dra) {
    d.slice_informer = std::make_unique<Informer>(
        api, d.InformerFor(std::string(kResourceSliceCollection), "resourceslices"),
        InformerHandler{Guarded<Objects>("ResourceSlice", [&d](Objects o) { d.ReplaceSlices(std::move(o)); }),
                        Guarded<const json&>("ResourceSlice", [&d](const json& o) { d.ApplySlice(o); }),
                        Guarded<const json&>("ResourceSlice", [&d](const json& o) { d.RemoveSlice(o); })});
    d.claim_informer = std::make_unique<Informer>(
        api, d.InformerFor(std::string(kResourceClaimCollection), "resourceclaims"),
        InformerHandler{Guarded<Objects>("ResourceClaim", [&d](Objects o) { d.ReplaceClaims(std::move(o)); }),
                        Guarded<const json&>("ResourceClaim", [&d](const json& o) { d.ApplyClaim(o); }),
                        Guarded<const json&>("ResourceClaim", [&d](const json& o) { d.RemoveClaim(o); })});
    d.template_informer = std::make_unique<Informer>(
        api, d.InformerFor(std::string(kResourceClaimTemplateCollection), "resourceclaimtemplates"),
        InformerHandler{
            Guarded<Objects>("ResourceClaimTemplate",
                             [&d](Objects objects) {
                               {
                                 std::lock_guard lock(d.dra_mu);
                                 d.dra_templates.clear();
                               }
                               for (const json& o : objects) d.ApplyTemplate(o);
                             }),
            Guarded<const json&>("ResourceClaimTemplate", [&d](const json& o) { d.ApplyTemplate(o); }),
            Guarded<const json&>("ResourceClaimTemplate", [&d](const json& o) {
              std::lock_guard lock(d.dra_mu);
              d.dra_templates.erase(StringAt(o, "/metadata/namespace") + "/" + Impl::NameOf(o));
            })});
    d.class_informer = std::make_unique<Informer>(
        api, d.InformerFor(std::string(kDeviceClassCollection), "deviceclasses"),
        InformerHandler{Guarded<Objects>("DeviceClass",
                                         [&d](Objects objects) {
                                           {
                                             std::lock_guard lock(d.dra_mu);
                                             d.dra_classes.clear();
                                           }
                                           for (const json& o : objects) d.ApplyDeviceClass(o);
                                         }),
                        Guarded<const json&>("DeviceClass", [&d](const json& o) { d.ApplyDeviceClass(o); }),
                        Guarded<const json&>("DeviceClass", [&d](const json& o) {
                          std::lock_guard lock(d.dra_mu);
                          d.dra_classes.erase(Impl::NameOf(o));
                        })});
  }
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

KubeSource::~KubeSource() {
  Stop();
}

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
      if (d.options.dra) d.CountPendingClaims();  // a claim whose node's topology came since
    }
  });
  if (d.leader != nullptr) {
    d.threads.emplace_back([&d](std::stop_token stop) { d.Resync(stop); });
  }
  if (d.options.dra) {
    d.threads.emplace_back([&d](std::stop_token stop) { d.slice_informer->Run(stop); });
    d.threads.emplace_back([&d](std::stop_token stop) { d.template_informer->Run(stop); });
    d.threads.emplace_back([&d](std::stop_token stop) { d.class_informer->Run(stop); });
    d.threads.emplace_back([&d](std::stop_token stop) {
      // Claims after the nodes, their topologies and the slices, so that the first list finds
      // every device's node and topology (a claim that still does not is counted when they come).
      while (!stop.stop_requested()) {
        if (d.node_informer->WaitForSync(std::chrono::milliseconds(50)) &&
            d.topology_informer->WaitForSync(std::chrono::milliseconds(50)) &&
            d.slice_informer->WaitForSync(std::chrono::milliseconds(50))) {
          break;
        }
      }
      if (!stop.stop_requested()) d.claim_informer->Run(stop);
    });
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

void KubeSource::RefreshMetrics() {
  impl_->RefreshMetrics();
}

Result<std::string> KubeSource::LookupPod(std::string_view pod_namespace, std::string_view pod_name) {
  Result<json> pod = impl_->api.Get(PodPath(pod_namespace, pod_name));
  if (!pod.ok()) {
    if (IsNotFound(pod.error())) {
      return Error(
          std::string(extender::kPodNotFoundTag) + std::string(pod_namespace) + "/" + std::string(pod_name),
          ErrorCode::kNotFound);
    }
    return pod.error().WithContext("cannot read pod " + std::string(pod_namespace) + "/" +
                                   std::string(pod_name));
  }
  return pod->dump();
}

extender::DraDevices KubeSource::DraDevicesFor(const PlacementRequest& request) const {
  return impl_->DraDevicesFor(request);
}

std::map<std::string, int> KubeSource::UnmappedDraDevices() const {
  return impl_->UnmappedDraDevices();
}

std::set<std::string, std::less<>> KubeSource::StaleTopologies() const {
  std::lock_guard lock(impl_->stale_copy_mu);
  return impl_->stale_copy;
}

bool KubeSource::MayChangeState() const {
  return impl_->MayChangeState();
}

bool KubeSource::Ready(std::string* why) const {
  const Impl& d = *impl_;
  if (!d.Synced()) {
    if (why != nullptr) {
      *why = "not synced with the API server yet (nodes " +
             std::string(d.node_informer->synced() ? "ok" : "pending") + ", nodetopologies " +
             (d.topology_informer->synced() ? "ok" : "pending") + ", pods " +
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
  TOPOSCHED_ASSIGN_OR_RETURN(json pod, impl_->api.Get(PodPath(pod_namespace, pod_name)));
  const std::string uid = StringAt(pod, "/metadata/uid");
  if (uid != pod_uid) {
    return Error("pod " + std::string(pod_namespace) + "/" + std::string(pod_name) + " has UID " + uid +
                 ", not " + std::string(pod_uid));
  }
  return pod.dump();
}

}  // namespace toposched::kube
