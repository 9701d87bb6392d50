// state::Persistence and the bind: a bind's allocation written to the pod's annotations (ours
// and HAMi's device records) and undone on release, HAMi's node lock around it, the Binding
// (CompleteBind), and whether a pod may be bound again (MayRebind).
#include <chrono>
#include <mutex>
#include <string>
#include <string_view>

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
using SteadyClock = std::chrono::steady_clock;
using detail::kVerb;
using detail::PodLabel;

// Every annotation a bind writes, so that an undo removes exactly these.
constexpr std::string_view kBindAnnotations[] = {
    kAllocationAnnotation,
    kVisibleGpusAnnotation,
    kNcclIbHcaAnnotation,
    kBindTimeAnnotation,
    kHamiDevicesToAllocate,
    kHamiDevicesAllocated,
    kHamiAmdDevicesToAllocate,
    kHamiAmdDevicesAllocated,
    kHamiVgpuNode,
    kHamiVgpuTime,
    kHamiBindPhase,
    kHamiBindTime,
};

// A merge patch that removes every annotation a bind writes.
json UndoBindAnnotations() {
  json undo = json::object();
  for (std::string_view k : kBindAnnotations) undo[std::string(k)] = nullptr;
  return json{{"metadata", {{"annotations", std::move(undo)}}}};
}

bool HasDevices(const framework::AllocationDelta& d) {
  return !d.exclusive_gpus.empty() || !d.shares.empty() || !d.nics.empty();
}

}  // namespace

// Whether a bind of `allocation` takes HAMi's node lock (KubeSourceOptions::hami_node_lock):
// only when it writes HAMi's device records, all of them for GPUs of the records' vendor,
// which that vendor's HAMi device plugin then allocates and unlocks. HAMi's scheduler locks for
// both vendors alike (pkg/device/amd/device.go @070101260b7a LockNode: hami.io/mutex.lock when
// the pod asks amd.com/gpu), and HAMi's AMD device plugin finds the pod by the lock and
// releases it once the pod's devices are allocated (Project-HAMi/amd-device-plugin
// internal/pkg/utils/utils.go @138a0b0eb9a7 GetAllocatePodByNode, PodAllocationTrySuccess);
// some of its versions refuse a CU slice without it (internal/pkg/plugin/plugin.go
// @0121aa5d9262 validateNodeLockOwner).
bool KubeSource::Impl::LocksFor(const state::PodAllocation& allocation, const NodeTopology& t,
                                const AllocationAnnotations& a) const {
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

// Why HAMi's node lock on `node`, held by another pod, can never be released, or "": its pod
// no longer exists (HAMi's own LockNode takes such a lock over: pkg/util/nodelock @02fba77),
// or it is bound to another node, so HAMi's device plugin on this node will never allocate
// for it (a bind that took the lock and failed, its pod scheduled elsewhere since: a leader
// killed mid-bind). A lock whose pod is still unbound may be another scheduler's bind in
// flight: it is honoured until it expires.
std::string KubeSource::Impl::DanglingLock(const std::string& node, const HamiNodeLock& lock) {
  Result<json> pod = api.Get(PodPath(lock.pod_namespace, lock.pod_name));
  if (!pod.ok()) return IsNotFound(pod.error()) ? "no longer exists" : "";
  const std::string bound = StringAt(*pod, "/spec/nodeName");
  return !bound.empty() && bound != node ? "is bound to node " + bound : "";
}

Status KubeSource::Impl::LockNode(const std::string& node, const std::string& ns, const std::string& name) {
  Result<json> locked = api.Update(NodePath(node), [&](json& object) -> Result<bool> {
    json& annotations = object["metadata"]["annotations"];
    if (annotations.is_null()) annotations = json::object();
    if (annotations.contains(kHamiNodeLock) && annotations[std::string(kHamiNodeLock)].is_string()) {
      Result<HamiNodeLock> other =
          DecodeHamiNodeLock(annotations[std::string(kHamiNodeLock)].get<std::string>());
      if (other.ok() && !(other->pod_namespace == ns && other->pod_name == name) &&
          SystemClock::now() - other->time < kHamiNodeLockExpiry) {
        const std::string dangling = DanglingLock(node, *other);
        if (dangling.empty()) {
          return Error("node " + node + " is locked (" + std::string(kHamiNodeLock) + ") by pod " +
                       other->pod_namespace + "/" + other->pod_name + " since " + FormatTime(other->time) +
                       "; HAMi's device plugin releases it once that pod's devices are allocated");
        }
        metrics::Log(LogLevel::kWarn, {kVerb, PodLabel(ns, name), node},
                     "taking over HAMi's node lock of pod " + other->pod_namespace + "/" + other->pod_name +
                         ", which " + dangling + ": nothing would release it before it expires");
      }
    }
    annotations[std::string(kHamiNodeLock)] = EncodeHamiNodeLock({SystemClock::now(), ns, name});
    return true;
  });
  if (!locked.ok()) return locked.error();
  return Status::Ok();
}

void KubeSource::Impl::UnlockNode(const std::string& node, const std::string& ns, const std::string& name) {
  Result<json> r = api.Update(NodePath(node), [&](json& object) -> Result<bool> {
    json* annotations = object.contains("metadata") ? &object["metadata"]["annotations"] : nullptr;
    if (annotations == nullptr || !annotations->is_object() || !annotations->contains(kHamiNodeLock))
      return false;
    Result<HamiNodeLock> ours =
        DecodeHamiNodeLock((*annotations)[std::string(kHamiNodeLock)].get<std::string>());
    if (!ours.ok() || ours->pod_namespace != ns || ours->pod_name != name) return false;  // not ours
    annotations->erase(std::string(kHamiNodeLock));
    return true;
  });
  if (!r.ok() && !IsNotFound(r.error())) {
    metrics::Log(LogLevel::kWarn, {kVerb, PodLabel(ns, name), node},
                 "cannot release the node lock: " + r.error().message());
  }
}

KubeSource::Impl::PreparedBind KubeSource::Impl::Prepare(const state::PodAllocation& allocation,
                                                         const NodeTopology& t,
                                                         SystemClock::time_point now) const {
  PreparedBind p;
  // A pod without devices of ours carries no annotations; its bind is just the Binding. Nor
  // does a pod counted for another scheduler or held for an unreadable record: its record (or
  // the lack of one) is the other scheduler's.
  if (!HasDevices(allocation.delta) || allocation.foreign || !allocation.hold.empty()) return p;
  const AllocationAnnotations a = EncodeAllocation(allocation, t, options.policy_name);
  const std::string unix_seconds =
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count());
  p.annotations = {
      {std::string(kAllocationAnnotation), a.allocation},
      {std::string(kVisibleGpusAnnotation), a.visible_gpus},
      {std::string(kNcclIbHcaAnnotation), a.nccl_ib_hca},
      {std::string(kBindTimeAnnotation), FormatTime(now)},
  };
  if (!a.hami_devices.empty()) {
    const HamiDeviceKeys keys = HamiDeviceKeysFor(a.hami_vendor);
    p.annotations[std::string(keys.to_allocate)] = a.hami_devices;
    p.annotations[std::string(keys.allocated)] = a.hami_devices;
    p.annotations[std::string(kHamiVgpuNode)] = allocation.node;
    p.annotations[std::string(kHamiVgpuTime)] = unix_seconds;
    p.annotations[std::string(kHamiBindPhase)] = "allocating";
    p.annotations[std::string(kHamiBindTime)] = unix_seconds;
  }
  p.lock = LocksFor(allocation, t, a);
  return p;
}

Result<KubeSource::Impl::PreparedBind> KubeSource::Impl::PreparedFor(const state::PodAllocation& allocation) {
  {
    std::lock_guard lock(bind_mu);
    if (auto it = prepared.find(allocation.uid); it != prepared.end()) return it->second;
  }
  if (!HasDevices(allocation.delta) || allocation.foreign || !allocation.hold.empty()) return PreparedBind{};
  const std::shared_ptr<const state::Snapshot> snapshot = store.snapshot();
  const state::NodeRecord* record = snapshot->Find(allocation.node);
  if (record == nullptr || record->topology == nullptr) {
    return Error("node " + allocation.node + " has no topology to name the allocated devices by");
  }
  return Prepare(allocation, *record->topology, SystemClock::now());
}

// Under the store's node lock. kube-scheduler's bind: nothing but memory; the record is
// written by CompleteBind, in the Binding, outside every lock, so binds to one node do not wait
// on each other's API round trips. Volcano's allocate (extender::RecordAtCommit): written here.
Status KubeSource::RecordBind(const state::PodAllocation& allocation, const state::NodeRecord& node) {
  Impl& d = *impl_;
  Impl::PreparedBind p;
  if (node.topology != nullptr) p = d.Prepare(allocation, *node.topology, SystemClock::now());
  {
    std::lock_guard lock(d.bind_mu);
    d.recent_binds[allocation.uid] = {SteadyClock::now()};
    if (!extender::RecordAtCommit::Active()) {
      d.prepared[allocation.uid] = std::move(p);
      return Status::Ok();
    }
    d.prepared.erase(allocation.uid);
  }
  // Volcano's allocate (extender::RecordAtCommit): the annotations now, under the node's lock,
  // as one merge patch (HAMi's node lock first where it applies); Volcano's Binding follows.
  if (p.annotations.empty()) return Status::Ok();
  std::lock_guard write(d.PodWriteMutex(allocation.uid));
  if (p.lock) {
    if (Status s = d.LockNode(allocation.node, allocation.pod_namespace, allocation.pod_name); !s.ok())
      return s;
  }
  Result<json> patched = d.api.Patch(PodPath(allocation.pod_namespace, allocation.pod_name),
                                     PatchType::kMerge, json{{"metadata", {{"annotations", p.annotations}}}});
  if (!patched.ok()) {
    d.annotation_writes.With({"error"}).Inc();
    if (p.lock) d.UnlockNode(allocation.node, allocation.pod_namespace, allocation.pod_name);
    return patched.error().WithContext("cannot write the allocation annotations");
  }
  if (StringAt(*patched, "/metadata/uid") != allocation.uid) {
    // Same name, another pod (deleted and recreated meanwhile): take nothing of it.
    d.annotation_writes.With({"error"}).Inc();
    (void)d.api.Patch(PodPath(allocation.pod_namespace, allocation.pod_name), PatchType::kMerge,
                      UndoBindAnnotations());
    if (p.lock) d.UnlockNode(allocation.node, allocation.pod_namespace, allocation.pod_name);
    return Error("pod " + PodLabel(allocation.pod_namespace, allocation.pod_name) + " now has UID " +
                 StringAt(*patched, "/metadata/uid") + ", not " + allocation.uid);
  }
  d.annotation_writes.With({"bind"}).Inc();
  return Status::Ok();
}

Status KubeSource::RecordRelease(const state::PodAllocation& allocation) {
  Impl& d = *impl_;
  // After any write of this pod still in flight, never before it.
  std::lock_guard write(d.PodWriteMutex(allocation.uid));
  bool written = true;
  {
    std::lock_guard lock(d.bind_mu);
    d.recent_binds.erase(allocation.uid);
    written = d.prepared.erase(allocation.uid) == 0;
  }
  if (!HasDevices(allocation.delta) || !written) return Status::Ok();
  Result<json> patched = d.api.Patch(PodPath(allocation.pod_namespace, allocation.pod_name),
                                     PatchType::kMerge, UndoBindAnnotations());
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

// kube-scheduler's bind: (HAMi's node lock, then) one Binding that carries the annotations, so
// the pod is bound and annotated in one write or neither.
Status KubeSource::CompleteBind(const state::PodAllocation& allocation) {
  Impl& d = *impl_;
  const std::string pod = PodLabel(allocation.pod_namespace, allocation.pod_name);
  std::lock_guard write(d.PodWriteMutex(allocation.uid));
  if (!d.StillCurrent(allocation)) {
    return Error("pod " + pod + "'s allocation on node " + allocation.node +
                     " was released or replaced while its Binding waited: not written",
                 ErrorCode::kConflict);
  }
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(Impl::PreparedBind prepared, d.PreparedFor(allocation),
                                 "cannot write pod " + pod + "'s allocation");
  if (prepared.lock) {
    if (Status s = d.LockNode(allocation.node, allocation.pod_namespace, allocation.pod_name); !s.ok())
      return s;
  }
  Status s = d.api.CreateBinding(allocation.pod_namespace, allocation.pod_name, allocation.uid,
                                 allocation.node, prepared.annotations);
  std::string_view outcome = "created";
  if (!s.ok() && (s.error().code() == ErrorCode::kUnavailable || s.error().code() == ErrorCode::kUnknown)) {
    // A transport error or a 5xx after the retries: the write may have happened (a 504, a reply
    // lost on the way back). The pod says which.
    Result<json> read = d.api.Get(PodPath(allocation.pod_namespace, allocation.pod_name));
    if (read.ok() && StringAt(*read, "/metadata/uid") == allocation.uid &&
        StringAt(*read, "/spec/nodeName") == allocation.node) {
      s = Status::Ok();
    } else if (read.ok() || IsNotFound(read.error())) {
      s = Error(s.error().message(), ErrorCode::kUnknown);  // not made: definite
    } else {
      outcome = "unknown";
      s = Error(s.error().message() + "; and whether it was made cannot be read back (" +
                    read.error().message() +
                    "): the devices stay held until the pod is seen bound, gone or unbound",
                extender::kBindOutcomeUnknown);
    }
  }
  if (s.ok()) {
    {
      std::lock_guard lock(d.bind_mu);
      d.prepared.erase(allocation.uid);
    }
    std::lock_guard lock(d.mu);
    if (auto it = d.pods.find(allocation.uid); it != d.pods.end()) it->second.node_name = allocation.node;
  } else if (outcome == "created") {
    outcome = "failed";
    // Not made: nothing of the record reached the pod (the entry stays, so the release that
    // follows has nothing to undo); the lock is ours to give back.
    if (prepared.lock) d.UnlockNode(allocation.node, allocation.pod_namespace, allocation.pod_name);
  } else {
    std::lock_guard lock(d.bind_mu);
    d.prepared.erase(allocation.uid);  // perhaps written: a later release undoes it
  }
  d.bindings.With({std::string(outcome)}).Inc();
  if (!prepared.annotations.empty()) d.annotation_writes.With({s.ok() ? "binding" : "error"}).Inc();
  return s;
}

bool KubeSource::MayRebind(const state::PodAllocation& previous) {
  Impl& d = *impl_;
  {
    std::lock_guard lock(d.mu);
    if (auto it = d.pods.find(previous.uid); it != d.pods.end() && !it->second.node_name.empty())
      return false;
  }
  // Ask the API server: the informer may be behind, and a wrong "yes" would move a running pod.
  Result<json> pod = d.api.Get(PodPath(previous.pod_namespace, previous.pod_name));
  if (!pod.ok()) return false;
  return StringAt(*pod, "/metadata/uid") == previous.uid && StringAt(*pod, "/spec/nodeName").empty();
}

}  // namespace toposched::kube
