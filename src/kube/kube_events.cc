// Core/v1 Events on pods: Ready-after-bind, held allocations, the extender's warnings and
// DevicesAllocated (queued, written by the periodic loop), and FailedScheduling summaries
// through the EventCorrelator. Written only by the replica that may change state.
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kube_source_impl.h"
#include "toposched/kube/event_correlator.h"
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

}  // namespace

// Queues an event for the periodic loop (no verb waits on the API server for it); each
// (pod, message) once.
void KubeSource::Impl::QueueEvent(PodEvent event) {
  if (event.pod_name.empty()) return;  // a Volcano task without a Pod: nothing to attach it to
  std::lock_guard lock(warn_mu);
  if (warned.size() > 10'000) warned.clear();
  if (!warned.insert(event.uid + '\n' + event.message).second) return;
  if (queued_events.size() >= 1'000) return;  // the API server is not keeping up: the log has it
  queued_events.push_back(std::move(event));
}

// "GPUs 0 (0000:07:00.0, GPU-…), 3 (…); RDMA NICs mlx5_0, mlx5_3; worst GPU->NIC link PIX":
// what a bind gave the pod, for its event. Empty when it holds no devices.
std::string KubeSource::Impl::DescribeDevices(const state::PodAllocation& a) const {
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
           (g.uuid.empty() ? "" : ", " + g.uuid) + (i >= a.delta.exclusive_gpus.size() ? ", shared" : "") +
           ")";
  }
  std::string nics;
  for (int n : a.delta.nics) {
    if (n < 0 || n >= static_cast<int>(t.nics.size())) continue;
    nics += (nics.empty() ? "" : ", ") + t.nics[static_cast<std::size_t>(n)].DisplayName();
  }
  if (!nics.empty()) out += (out.empty() ? "" : "; ") + std::string("RDMA NICs ") + nics;
  if (out.empty()) return {};
  if (!gpus.empty() && !a.delta.nics.empty())
    out += "; worst GPU->NIC link " + std::string(ToString(a.worst_class));
  return out;
}

void KubeSource::Impl::PostQueuedEvents() {
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
void KubeSource::Impl::PostCorrelatedEvents() {
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

json KubeSource::Impl::EventObject(const std::string& name, const std::string& ns,
                                   const std::string& pod_name, const std::string& uid,
                                   const std::string& reason, const std::string& message,
                                   const std::string& type, SystemClock::time_point first,
                                   SystemClock::time_point last, int count) const {
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
void KubeSource::Impl::PostHoldEvents() {
  if (!MayChangeState()) return;
  std::vector<PodEvent> events;
  {
    std::lock_guard lock(mu);
    for (auto& [uid, h] : held) {
      if (h.reported) continue;
      h.reported = true;
      events.push_back(
          {h.pod.pod_namespace, h.pod.pod_name, uid, h.node, "AllocationUnreadable",
           h.reason + ". Its devices stay held and node " + h.node +
               " takes no new device placements until this pod is deleted or the annotation fixed.",
           "Warning"});
    }
  }
  PostEvents(events);
}

// Core/v1 Events on pods (a Ready-after-bind, an allocation held), written by the leader only
// (two replicas would report each twice). Failures are logged, never retried: the metrics have
// the figures.
void KubeSource::Impl::PostEvents(const std::vector<PodEvent>& events) {
  if (events.empty() || !MayChangeState()) return;
  const auto now = SystemClock::now();
  for (const PodEvent& e : events) {
    const json event =
        EventObject(e.pod_name + "." + std::to_string(now.time_since_epoch().count()), e.pod_namespace,
                    e.pod_name, e.uid, e.reason, e.message, e.type, now, now, 1);
    Result<json> r = api.Create(EventCollection(e.pod_namespace), event);
    pod_events.With({e.reason, r.ok() ? "created" : "failed"}).Inc();
    if (!r.ok()) {
      metrics::Log(LogLevel::kWarn, {kVerb, PodLabel(e.pod_namespace, e.pod_name), e.node},
                   "cannot write the " + e.reason + " event: " + r.error().message());
    }
  }
}

void KubeSource::PodWarning(std::string_view pod_namespace, std::string_view pod_name,
                            std::string_view pod_uid, std::string_view reason, std::string_view message) {
  impl_->QueueEvent({std::string(pod_namespace), std::string(pod_name), std::string(pod_uid), "",
                     std::string(reason), std::string(message), "Warning"});
}

void KubeSource::PodUnschedulable(std::string_view pod_namespace, std::string_view pod_name,
                                  std::string_view pod_uid, std::string_view summary) {
  if (pod_name.empty())
    return;  // a pod without a name (a Volcano task without its Pod): nothing to attach to
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

void KubeSource::PodAllocated(const state::PodAllocation& allocation, std::string_view alignment,
                              bool volcano) {
  Impl& d = *impl_;
  {
    std::lock_guard lock(d.correlator_mu);
    d.correlator.DropUnwritten(allocation.uid);
  }
  if (!d.options.normal_events) return;
  // What the pod got, on the pod (kubectl describe), written by the periodic loop.
  std::string devices = d.DescribeDevices(allocation);
  if (devices.empty()) return;
  if (!alignment.empty() && devices.find("worst GPU->NIC link") != std::string::npos) {
    devices += " (" + std::string(alignment) + ")";
  }
  d.QueueEvent({allocation.pod_namespace, allocation.pod_name, allocation.uid, allocation.node,
                "DevicesAllocated",
                (volcano ? "Allocated on node " + allocation.node + " for Volcano's bind: "
                         : "Bound to node " + allocation.node + ": ") +
                    devices,
                "Normal"});
}

}  // namespace toposched::kube
