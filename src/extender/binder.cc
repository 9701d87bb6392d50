// The binder: commit, rebind, Volcano's session events, leader gating (binder.h).

#include "binder.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "explain.h"
#include "toposched/framework/allocation.h"
#include "toposched/metrics/logging.h"
#include "verbs.h"

namespace toposched::extender {

using metrics::LogLevel;

Binder::Binder(Evaluator& evaluator, metrics::Registry& reg)
    : evaluator_(evaluator),
      store_(evaluator.store()),
      hooks_(evaluator.hooks()),
      placements_(reg.AddCounter("toposched_placements_total",
                                 "Pods bound with devices, by the worst GPU->NIC link class.",
                                 {"worst_class"})),
      reservations_(reg.AddCounter(
          "toposched_reservations_total",
          "Binds by what became of the filter-time result: confirmed (same node state), changed "
          "(node changed, re-decided), refetched (no cached result: the pod was read from the API server), "
          "missing (no cached filter result for the pod).",
          {"outcome"})),
      binds_(reg.AddCounter("toposched_binds_total",
                            "Bind and Volcano allocate outcomes: bound, already_bound, unfit, conflict, "
                            "no_reservation, not_leader, binding_failed, error.",
                            {"outcome"})),
      volcano_events_(reg.AddCounter(
          "toposched_volcano_events_total",
          "Volcano session events with an outcome of their own: deallocate_kept (a bound "
          "pod evicted in a session keeps its devices), deallocate_released (never bound), "
          "pipelined_waiting (a pipelined task: no devices until a later session allocates it; "
          "Volcano binds only allocated tasks).",
          {"event"})),
      volcano_missing_(reg.AddGauge(
          "toposched_volcano_allocate_missing",
          "Whether Volcano passed tasks through predicate for a minute without one allocate call (1: Volcano "
          "before v1.13 ignores allocateFuncVerb, its binds leave no device record).")) {
  volcano_missing_.With({}).Set(0);  // a sample from the start (alerts need one)
}

bool Binder::RefuseUnlessLeader(std::string& error) const {
  if (hooks_ == nullptr || hooks_->MayChangeState()) return false;
  error = "this toposched replica is not the leader; retry against the leader";
  return true;
}

Binder::Outcome Binder::Commit(const std::shared_ptr<PodEntry>& entry, std::string_view node,
                               std::string_view verb, bool pipelined) {
  const framework::Framework& framework = evaluator_.framework();
  const std::string pod = PodLabel(entry->pod_namespace, entry->pod_name, entry->uid);
  bool confirmed = false;
  std::string alignment;
  auto decide = [&](const state::NodeRecord& record) -> Result<state::PodAllocation> {
    state::PodAllocation a;
    a.uid = entry->uid;
    a.pod_namespace = entry->pod_namespace;
    a.pod_name = entry->pod_name;
    a.node = record.name;
    a.topology_generation = record.topology_generation;
    a.container_devices = entry->request.container_devices;
    a.init_containers = entry->request.init_containers;
    a.role = entry->request.role;
    a.pool = entry->request.pool;
    a.kv_ipc = entry->request.kv_ipc;
    if (!entry->interested) return a;  // nothing of ours to allocate; the bind is recorded
    if (auto v = entry->FindVerdict(Evaluator::VerdictKey(entry->request, record)); v && v->passes())
      confirmed = true;
    // Re-decide on the node as it is now, under its lock: the filter-time result may be stale.
    const framework::NodeInfo info = NodeInfoOf(record);
    framework::CycleState cycle = framework.NewCycle(entry->request);
    // The typical pods the verbs scored it for (Evaluator::Evaluate): a vGPU's card is chosen for
    // them where capacity packing owns the decision (CycleState::share_packing), here as there.
    cycle.SetShapeMix(entry->mix);
    if (!entry->packs_by_mix) cycle.set_packs_for_shape_mix(false);
    const framework::FilterResult filtered = framework.RunFilter(cycle, info);
    if (!filtered.ok()) {
      return Error("unfit: pod no longer fits node " + record.name + ": " + filtered.ToString(),
                   ErrorCode::kUnfit);
    }
    const PlacementOutcome& outcome = cycle.Outcome(info);
    if (!outcome.ok()) return Error("unfit: " + outcome.detail, ErrorCode::kUnfit);
    // The store applies the placement's delta under the node's lock (ClusterStore::Bind): no
    // Reserve on a copy that would be thrown away.
    const Placement placement = *outcome.placement;
    a.delta = framework::DeltaOf(*record.topology, entry->request, placement);
    a.worst_class = placement.worst_class;
    alignment = AlignmentNote(placement);
    return a;
  };
  Result<state::BindResult> bound = store_.Bind(node, entry->uid, decide);
  if (!bound.ok()) {
    const std::string& msg = bound.error().message();
    std::string metric = "error";
    if (bound.error().code() == ErrorCode::kConflict)
      metric = "conflict";
    else if (bound.error().code() == ErrorCode::kUnfit)
      metric = "unfit";
    if (!(pipelined && metric == "unfit"))
      metrics::Log(LogLevel::kWarn, {verb, pod, node}, "bind failed: " + msg);
    return {msg, metric, ""};
  }
  evaluator_.Forget(entry->uid);  // the reservation is consumed
  if (bound->kind == state::BindKind::kAlreadyBound) {
    metrics::Log(LogLevel::kInfo, {verb, pod, node}, "already bound here (retried bind): nothing to do");
    return {"", "already_bound", ""};
  }
  if (entry->interested) {
    reservations_.With({confirmed ? "confirmed" : "changed"}).Inc();
    placements_.With({ToString(bound->allocation.worst_class)}).Inc();
  }
  if (metrics::LogEnabled(LogLevel::kInfo)) {
    const framework::AllocationDelta& d = bound->allocation.delta;
    std::string what = "bound: gpus [";
    std::vector<int> shared;
    for (const auto& s : d.shares) shared.push_back(s.first);
    const std::vector<int>& list = d.exclusive_gpus.empty() ? shared : d.exclusive_gpus;
    for (std::size_t i = 0; i < list.size(); ++i) what += (i ? "," : "") + std::to_string(list[i]);
    what += "] nics [";
    for (std::size_t i = 0; i < d.nics.size(); ++i) what += (i ? "," : "") + std::to_string(d.nics[i]);
    what += "]";
    if (entry->interested) what += " worst " + std::string(ToString(bound->allocation.worst_class));
    if (!alignment.empty()) what += " (" + alignment + ")";
    metrics::Log(LogLevel::kInfo, {verb, pod, node}, what);
  }
  return {"", "bound", std::move(alignment)};
}

std::string Binder::Complete(const state::PodAllocation& allocation) {
  if (hooks_ == nullptr) return "";
  Status s = hooks_->CompleteBind(allocation);
  if (s.ok()) return "";
  const std::string pod = PodLabel(allocation.pod_namespace, allocation.pod_name, allocation.uid);
  std::string error = "cannot create the Binding: " + s.error().message();
  if (s.error().code() == kBindOutcomeUnknown) {
    // Perhaps bound: freeing the devices could give them to a second pod (fail closed).
    metrics::Log(LogLevel::kWarn, {"bind", pod, allocation.node}, error);
    return error;
  }
  // Only this bind's allocation: another bind of the pod may have replaced it meanwhile.
  if (auto released = store_.ReleaseIfStill(allocation); !released.ok()) {
    error += "; and releasing the allocation failed: " + released.error().message();
  }
  metrics::Log(LogLevel::kWarn, {"bind", pod, allocation.node}, error);
  return error;
}

std::string Binder::MoveIfNeverBound(std::string_view uid, std::string_view node, std::string_view verb) {
  const std::optional<state::PodAllocation> existing = store_.FindPod(uid);
  if (!existing || existing->node == node || hooks_ == nullptr || !hooks_->MayRebind(*existing)) return "";
  // An allocation whose Binding never happened (the extender died between the two, the
  // scheduler gave up on that node, a Volcano session allocated it and never bound it): the pod
  // is not running anywhere, so it moves.
  if (auto released = store_.Release(uid); !released.ok()) return released.error().message();
  metrics::Log(LogLevel::kInfo,
               {verb, PodLabel(existing->pod_namespace, existing->pod_name, uid), existing->node},
               "released an allocation that was never bound; allocating on " + std::string(node));
  return "";
}

std::string Binder::Bind(const BindingArgs& b) {
  if (std::string error; RefuseUnlessLeader(error)) {
    binds_.With({"not_leader"}).Inc();
    return error;
  }
  const std::string pod = PodLabel(b.pod_namespace, b.pod_name, b.pod_uid);
  std::shared_ptr<PodEntry> entry = evaluator_.Find(b.pod_uid);
  if (std::string error = MoveIfNeverBound(b.pod_uid, b.node, "bind"); !error.empty()) {
    binds_.With({"error"}).Inc();
    return error;
  }
  if (!entry) {
    // A retried bind of a pod bound before (the reply was lost) must still succeed.
    if (auto existing = store_.FindPod(b.pod_uid)) {
      if (existing->node == b.node) {
        std::string error = Complete(*existing);
        binds_.With({error.empty() ? "already_bound" : "error"}).Inc();
        return error;
      }
      binds_.With({"conflict"}).Inc();
      return std::string(state::kConflictTag) + "pod " + std::string(b.pod_uid) +
             " is already bound to node " + existing->node;
    }
    if (hooks_ != nullptr) {
      // The API server has the pod: read its request from there.
      Result<std::string> json = hooks_->FetchPod(b.pod_namespace, b.pod_name, b.pod_uid);
      if (json.ok()) {
        Result<PlacementRequest> parsed = ParsePodRequest(*json, evaluator_.framework().config().request);
        if (!parsed.ok()) {
          binds_.With({"error"}).Inc();
          return parsed.error().message();
        }
        reservations_.With({"refetched"}).Inc();
        entry = evaluator_.Remember(std::move(parsed).value(), b.pod_uid, "");
      } else {
        metrics::Log(LogLevel::kWarn, {"bind", pod, b.node},
                     "cannot read the pod: " + json.error().message());
      }
    }
  }
  if (!entry) {
    reservations_.With({"missing"}).Inc();
    binds_.With({"no_reservation"}).Inc();
    const std::string msg = "no filter result cached for pod " + std::string(b.pod_namespace) + "/" +
                            std::string(b.pod_name) + " (uid " + std::string(b.pod_uid) +
                            "): it expired or the extender restarted; the scheduler will retry the pod";
    metrics::Log(LogLevel::kWarn, {"bind", pod, b.node}, msg);
    return msg;
  }
  Outcome out = Commit(entry, b.node, "bind");
  if (out.error.empty()) {
    if (auto bound = store_.FindPod(b.pod_uid)) {
      if (std::string error = Complete(*bound); !error.empty()) {
        out = {std::move(error), "binding_failed", ""};
      } else if (out.metric == "bound" && hooks_ != nullptr) {
        hooks_->PodAllocated(*bound, out.alignment, /*volcano=*/false);
      }
    }
  }
  binds_.With({out.metric}).Inc();
  return out.error;
}

// Volcano's TaskStatus Pipelined (pkg/scheduler/api/types.go: Pending 1 << 0, Allocated 1 << 1,
// Pipelined 1 << 2).
constexpr int kVolcanoPipelined = 1 << 2;

std::string Binder::Allocate(const VolcanoTaskView& task) {
  volcano_allocates_.fetch_add(1, std::memory_order_relaxed);
  if (std::string error; RefuseUnlessLeader(error)) {
    binds_.With({"not_leader"}).Inc();
    return error;
  }
  if (task.node_name.empty()) return "task " + std::string(task.uid) + " has no NodeName to allocate on";
  Result<std::shared_ptr<PodEntry>> entry = evaluator_.EntryFor(task);
  if (!entry.ok()) {
    binds_.With({"error"}).Inc();
    return entry.error().message();
  }
  if (task.status == kVolcanoPipelined && !store_.FindPod(task.uid)) {
    // A pipelined task is not bound: Volcano binds it only once a later session allocates it
    // (Allocated), and a statement that pipelined it may be committed with no deallocate to
    // follow (its preempt action pipelining a gang task onto idle devices), which would leave
    // the devices with a pod never bound. So it gets none now, and no error: an error would fail
    // Volcano's Statement.Pipeline, and with it the eviction a preemption needs.
    volcano_events_.With({"pipelined_waiting"}).Inc();
    metrics::Log(LogLevel::kInfo,
                 {"volcano/allocate", PodLabel(task.task_namespace, task.name, task.uid), task.node_name},
                 "pipelined: devices are allocated when a later session allocates the task");
    return "";
  }
  if (std::string error = MoveIfNeverBound(task.uid, task.node_name, "volcano/allocate"); !error.empty()) {
    binds_.With({"error"}).Inc();
    return error;
  }
  Outcome out;
  {
    const RecordAtCommit record;  // the annotations before this allocate answers (bind_hooks.h)
    out = Commit(*entry, task.node_name, "volcano/allocate", task.status == kVolcanoPipelined);
  }
  if (!out.error.empty() && out.metric == "unfit" && task.status == kVolcanoPipelined) {
    // Pipelined (preempt or reclaim) onto devices that its victims still hold: no allocation
    // now; a later session allocates the task once they are gone. An error here would fail
    // Volcano's Statement.Pipeline and the statement would be discarded, the eviction undone
    // with it, so the preemption could never happen (framework/statement.go; seen with
    // vc-scheduler v1.13.3 in e2e TestVolcano/Preemption).
    volcano_events_.With({"pipelined_waiting"}).Inc();
    metrics::Log(LogLevel::kInfo,
                 {"volcano/allocate", PodLabel(task.task_namespace, task.name, task.uid), task.node_name},
                 "pipelined onto devices still held (" + out.error + "): allocated once they are free");
    return "";
  }
  if (out.error.empty() && out.metric == "bound" && hooks_ != nullptr) {
    if (auto allocated = store_.FindPod(task.uid))
      hooks_->PodAllocated(*allocated, out.alignment, /*volcano=*/true);
  }
  binds_.With({out.metric}).Inc();
  return out.error;
}

std::string Binder::Deallocate(std::string_view task_uid) {
  if (std::string error; RefuseUnlessLeader(error)) return error;
  const std::string uid(task_uid);
  const std::optional<state::PodAllocation> existing = store_.FindPod(uid);
  if (!existing) return "";
  if (existing->foreign || !existing->hold.empty() || (hooks_ != nullptr && !hooks_->MayRebind(*existing))) {
    // Running (a session evicts it; if the statement is discarded it keeps running), or not
    // provably unbound: its devices stay until the pod is gone.
    volcano_events_.With({"deallocate_kept"}).Inc();
    metrics::Log(LogLevel::kInfo, {"volcano/deallocate", uid, existing->node},
                 "the pod is bound (or cannot be shown unbound): its devices stay until it is gone");
    return "";
  }
  Result<std::optional<state::PodAllocation>> released = store_.Release(uid);
  if (!released.ok()) return released.error().message();
  if (released->has_value()) {
    volcano_events_.With({"deallocate_released"}).Inc();
    metrics::Log(LogLevel::kInfo, {"volcano/deallocate", uid, (*released)->node}, "released (never bound)");
  }
  return "";
}

void Binder::NoteVolcanoPass() {
  if (volcano_allocates_.load(std::memory_order_relaxed) > 0) return;
  const std::int64_t now =
      std::max<std::int64_t>(evaluator_.now().time_since_epoch().count(), 1);  // 0 = none yet
  std::int64_t first = 0;
  if (volcano_first_pass_.compare_exchange_strong(first, now, std::memory_order_relaxed)) return;
  if (now - first <
      std::chrono::duration_cast<PodCache::TimePoint::duration>(std::chrono::minutes(1)).count())
    return;
  if (volcano_allocate_missing_.exchange(true)) return;
  volcano_missing_.With({}).Set(1);
  metrics::Log(
      LogLevel::kWarn, {"volcano/predicate", "", ""},
      "Volcano passes GPU tasks through predicate but has not called allocate for a minute: Volcano "
      "before v1.13 ignores extender.allocateFuncVerb, and its binds then leave toposched no record of "
      "the devices (upgrade Volcano to v1.13 or newer; docs/install.md)");
}

void Binder::RefreshGauges() {
  if (volcano_allocates_.load(std::memory_order_relaxed) > 0) volcano_missing_.With({}).Set(0);
}

}  // namespace toposched::extender
