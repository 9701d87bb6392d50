// The pod informer's side of KubeSource: pods applied to the store, allocations restored from
// the pods' annotations (ours, HAMi's) or counted for other schedulers' pods, unreadable ones
// held, deleted pods released, and allocations never bound released after their TTL.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_util.h"
#include "kube_source_impl.h"
#include "toposched/kube/objects.h"
#include "toposched/kube/time.h"
#include "toposched/metrics/logging.h"

namespace toposched::kube {

namespace {

using metrics::LogLevel;
using nlohmann::json;
using SystemClock = std::chrono::system_clock;
using detail::kVerb;
using detail::PodLabel;

// The node an annotated pod's allocation is on: spec.nodeName once bound, else the node the
// allocation names (written before the Binding), else HAMi's vgpu-node.
std::string AllocationNode(const PodView& pod) {
  if (!pod.node_name.empty()) return pod.node_name;
  if (auto it = pod.annotations.find(std::string(kAllocationAnnotation)); it != pod.annotations.end()) {
    try {
      const json doc = json::parse(it->second);
      if (doc.is_object() && doc.contains("node") && doc["node"].is_string())
        return doc["node"].get<std::string>();
    } catch (const json::exception&) {
    }
  }
  if (auto it = pod.annotations.find(std::string(kHamiVgpuNode)); it != pod.annotations.end())
    return it->second;
  if (auto it = pod.annotations.find(std::string(kVolcanoVgpuNode)); it != pod.annotations.end())
    return it->second;
  return "";
}

std::optional<SystemClock::time_point> BindTimeOf(const PodView& pod) {
  auto it = pod.annotations.find(std::string(kBindTimeAnnotation));
  if (it == pod.annotations.end()) return std::nullopt;
  Result<SystemClock::time_point> t = ParseTime(it->second);
  if (!t.ok()) return std::nullopt;
  return *t;
}

}  // namespace

// Applies one pod's current state. mu held. Appends a Ready event to `events` when the pod
// just became Ready after a bind whose time is known.
void KubeSource::Impl::ApplyPod(const PodView& pod, std::vector<PodEvent>& events) {
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
  // Every active pod bound to a node, with devices or not: kube-scheduler counts them all
  // against the node's allocatable CPU. Unbound ("" node): nothing.
  SetPodCpu(pod.uid, pod.node_name, pod.cpu_request_milli);
  if (pod.ready && was_known && !was_ready) {
    if (std::optional<SystemClock::time_point> bound = BindTimeOf(pod)) {
      const SystemClock::time_point ready_at = pod.ready_since.value_or(SystemClock::now());
      const double seconds = std::chrono::duration<double>(ready_at - *bound).count();
      if (seconds >= 0) {
        bind_to_ready.With({}).Observe(seconds);
        char text[32];
        std::snprintf(text, sizeof text, "%.1f", seconds);
        if (options.normal_events) {
          events.push_back(
              {pod.pod_namespace, pod.pod_name, pod.uid, pod.node_name, "ReadyAfterBind",
               "Ready " + std::string(text) + " s after toposched bound it to node " + pod.node_name});
        }
      }
    }
  }
  RestorePod(pod);
}

// Puts an annotated pod's allocation into the store (no-op when it is there already). A record
// that cannot be read back, or that claims devices another pod holds, is held instead
// (ClusterStore::Hold): its devices are never taken as free.
void KubeSource::Impl::RestorePod(const PodView& pod) {
  const auto ours_it = pod.annotations.find(std::string(kAllocationAnnotation));
  auto hami_it = pod.annotations.find(std::string(kHamiDevicesAllocated));
  const auto hami_amd_it = pod.annotations.find(std::string(kHamiAmdDevicesAllocated));
  // Volcano's own vGPU writes HAMi's NVIDIA format under its own key: read as HAMi's when
  // HAMi's is absent.
  auto volcano_it = pod.annotations.find(std::string(kVolcanoVgpuIds));
  const bool ours = ours_it != pod.annotations.end();
  const bool hami = hami_it != pod.annotations.end() || volcano_it != pod.annotations.end();
  if (hami_it == pod.annotations.end()) hami_it = volcano_it;
  const bool hami_amd = hami_amd_it != pod.annotations.end();
  if (!ours && !hami && !hami_amd) {
    RestoreForeign(pod);
    return;
  }
  const std::string node = AllocationNode(pod);
  if (node.empty()) return;
  const auto was_held = held.find(pod.uid);
  // A record only another scheduler writes (HAMi's, Volcano's vGPU) is read again on every
  // change: HAMi's scheduler writes its devices when it filters, and filters again (other
  // cards, same node) when its bind fails, e.g. on the node lock. Ours is read once: this
  // replica's binds are in the store before the informer sees them.
  std::optional<state::PodAllocation> replaced;
  if (std::optional<state::PodAllocation> existing = store.FindPod(pod.uid)) {
    if (existing->node == node && existing->hold.empty()) {
      pending.erase(pod.uid);
      if (ours) return;
      replaced = std::move(existing);
    } else if (existing->node != node) {
      // Another replica (a new leader) bound it elsewhere after an undone bind: follow the pod.
      // A held pod on this node is read again below; Restore or Hold replaces its hold.
      (void)store.Release(pod.uid, /*persist=*/false);
    }
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
      annotation = vendor == GpuVendor::kNvidia && hami_it == volcano_it
                       ? std::string(kVolcanoVgpuIds)
                       : std::string(HamiDeviceKeysFor(vendor).allocated);
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
  if (replaced) {
    if (replaced->delta == allocation.delta) return;
    metrics::Log(LogLevel::kInfo, {kVerb, PodLabel(pod.pod_namespace, pod.pod_name), node},
                 annotation + " changed: the pod's devices follow it");
    (void)store.Release(pod.uid, /*persist=*/false);
  }
  if (const auto role = pod.labels.find(std::string(kRoleLabel)); role != pod.labels.end()) {
    allocation.role = ParseLlmdRole(role->second).value_or(PodRole::kNone);
  }
  if (const auto pool = pod.labels.find(options.pool_label); pool != pod.labels.end())
    allocation.pool = pool->second;
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
      metrics::Log(
          LogLevel::kWarn, {kVerb, PodLabel(pod.pod_namespace, pod.pod_name), node},
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
void KubeSource::Impl::RestoreForeign(const PodView& pod) {
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
  state::PodAllocation unknown;
  unknown.uid = pod.uid;
  unknown.pod_namespace = pod.pod_namespace;
  unknown.pod_name = pod.pod_name;
  unknown.node = pod.node_name;
  HoldPod(pod, std::move(unknown),
          "pod placed by another scheduler could not be counted on node " + pod.node_name);
}

// A record of ours (or HAMi's) names devices that stand-ins of other schedulers' pods were
// counted on (RestoreForeign picks them by rule, not knowing the real ones; after a restart
// the informer may list such a pod first). The record is the truth: the node's stand-ins are
// taken off, the record restored, and the pods counted again on what is left. mu held.
Status KubeSource::Impl::RestoreAroundStandIns(const state::PodAllocation& allocation) {
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

bool KubeSource::Impl::IsRdmaResource(const std::string& name) const {
  for (const std::string& r : options.rdma_resources) {
    const bool prefix = !r.empty() && r.back() == '/';
    if (prefix ? name.starts_with(r) : name == r) return true;
  }
  return false;
}

void KubeSource::Impl::ReleaseLongUnbound() {
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
    if (!pod.ok() || StringAt(*pod, "/metadata/uid") != a.uid || !StringAt(*pod, "/spec/nodeName").empty())
      continue;
    Result<std::optional<state::PodAllocation>> released = store.Release(a.uid);  // undoes the annotations
    if (!released.ok() || !released->has_value()) continue;
    metrics::Log(
        LogLevel::kInfo, {kVerb, PodLabel(a.pod_namespace, a.pod_name), a.node},
        "released: allocated but never bound for " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::seconds>(options.unbound_allocation_ttl).count()) +
            " s (a tentative allocation nobody completed)");
    std::lock_guard lock(mu);
    unbound_since.erase(a.uid);
  }
}

// Holds `allocation`'s named devices and its node (fail closed); logs once per reason. mu held.
void KubeSource::Impl::HoldPod(const PodView& pod, state::PodAllocation allocation,
                               const std::string& reason) {
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

void KubeSource::Impl::UpdateHeldGauges() {
  std::set<std::string> held_on;
  for (const auto& [uid, h] : held) held_on.insert(h.node);
  held_pods_gauge.With({}).Set(static_cast<double>(held.size()));
  held_nodes_gauge.With({}).Set(static_cast<double>(held_on.size()));
}

void KubeSource::Impl::RetryPending(const std::string& node) {
  std::vector<PodView> retry;
  for (const auto& [uid, pod] : pending) {
    if (AllocationNode(pod) == node) retry.push_back(pod);
  }
  for (const auto& [uid, h] : held) {
    if (h.node == node) retry.push_back(h.pod);  // the node's topology may name its devices now
  }
  for (const PodView& pod : retry) RestorePod(pod);
}

void KubeSource::Impl::SetPodCpu(const std::string& uid, const std::string& node, std::int64_t milli) {
  if (cpu_batch != nullptr) {
    cpu_batch->push_back({uid, node, milli});
    return;
  }
  store.SetPodCpu(uid, node, milli);
}

// A pod that is gone or finished gives its devices and its CPU back (nothing to undo in the
// API). Every way a pod leaves comes here: a finished phase, a delete event, a relist without it.
void KubeSource::Impl::ReleaseGone(const std::string& uid, std::string_view why) {
  SetPodCpu(uid, "", 0);
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
  prepared.erase(uid);
}

// Every pod in the API server now (a list): pods we knew that are missing were deleted while
// the watch was down. A pod this replica bound moments ago may be missing only because the
// list was read before the bind; those are confirmed with a GET before they are released.
void KubeSource::Impl::ReplacePods(std::vector<json>&& objects) {
  std::vector<PodEvent> events;
  std::vector<std::string> check;
  {
    std::lock_guard lock(mu);
    // One snapshot for every pod's CPU rather than one per pod (a cluster's worth of pods, most
    // without devices, each copying the node list).
    std::vector<state::ClusterStore::PodCpu> cpu_updates;
    cpu_batch = &cpu_updates;
    struct Unbatch {
      std::vector<state::ClusterStore::PodCpu>*& batch;
      ~Unbatch() { batch = nullptr; }  // also when an apply throws; before mu is released
    } unbatch{cpu_batch};
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
        // A DRA claim's devices are the claim informer's to release, not the pod list's.
        if (detail::IsClaimUid(uid)) continue;
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
    store.SetPodCpus(cpu_updates);
  }
  for (const std::string& uid : check) ConfirmGone(uid);
  pods_applied.store(true, std::memory_order_release);
  synced_gauge.With({}).Set(1);
  PostEvents(events);
  PostHoldEvents();
}

bool KubeSource::Impl::BoundRecently(const std::string& uid) {
  std::lock_guard lock(bind_mu);
  auto it = recent_binds.find(uid);
  return it != recent_binds.end() && SteadyClock::now() - it->second.at < std::chrono::minutes(2);
}

void KubeSource::Impl::ConfirmGone(const std::string& uid) {
  std::optional<state::PodAllocation> a = store.FindPod(uid);
  if (!a) return;
  Result<json> pod = api.Get(PodPath(a->pod_namespace, a->pod_name));
  const bool gone =
      (!pod.ok() && IsNotFound(pod.error())) || (pod.ok() && StringAt(*pod, "/metadata/uid") != uid);
  if (!gone) return;
  std::lock_guard lock(mu);
  pods.erase(uid);
  ReleaseGone(uid, "pod deleted");
}

void KubeSource::Impl::UpsertPod(const json& object) {
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

void KubeSource::Impl::RemovePod(const json& object) {
  std::lock_guard lock(mu);
  const std::string uid = StringAt(object, "/metadata/uid");
  if (uid.empty()) return;
  pods.erase(uid);
  pending.erase(uid);
  ReleaseGone(uid, "pod deleted");
}

}  // namespace toposched::kube
