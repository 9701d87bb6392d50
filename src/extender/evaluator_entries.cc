// The evaluator's pod entries: a pod's request parsed once per resourceVersion and kept in the
// pod cache (EntryFor, Remember, Find, Forget) with what its verbs decide by, the typical pods it
// is scored for (the shape window, seeded from the pods the cluster runs) and its shared verdict
// table (evaluator_verdicts.cc). The binder reads the same entries at bind.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "evaluator.h"
#include "toposched/common/pod_label.h"
#include "toposched/common/status.h"
#include "toposched/metrics/logging.h"
#include "volcano_request.h"

namespace toposched::extender {

using metrics::LogLevel;

Result<std::shared_ptr<PodEntry>> Evaluator::EntryFor(const PodRef& pod) {
  const auto now = clock_();
  if (auto hit = pods_.Find(pod.uid, pod.resource_version, now)) return hit;
  if (pod.raw.empty()) return Error("the request carries no Pod");
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(PlacementRequest parsed,
                                 ParsePodRequest(pod.raw, framework_.config().request),
                                 "Pod " + PodLabel(pod.pod_namespace, pod.name, pod.uid));
  ResolveDraClaims(parsed);
  // A pod whose claims could not be counted yet (a template the informer has not delivered) is
  // read again on its next call rather than kept neutral for its resourceVersion.
  const bool unresolved = !parsed.resource_claims.empty() && !parsed.dra;
  return Store(std::move(parsed), pod.uid, unresolved ? std::string_view() : pod.resource_version, now);
}

// A pod whose GPUs and NICs come from DRA ResourceClaims asks them through its claims, not its
// resources: the source says how many (BindHooks::DraDevicesFor), and prioritize ranks the nodes
// for that many. DRA's own allocator chooses the devices on the node kube-scheduler binds it to.
void Evaluator::ResolveDraClaims(PlacementRequest& request) const {
  if (request.resource_claims.empty() || Interested(request) || hooks_ == nullptr) return;
  const DraDevices d = hooks_->DraDevicesFor(request);
  if (!d.known) {
    // Once per pod version (the entry is cached): the neutral score, and why.
    metrics::Log(LogLevel::kInfo, {"request", PodLabel(request.pod_namespace, request.pod_name), ""},
                 "resource claims not ranked (neutral score): " + d.why);
    return;
  }
  request.gpus = d.gpus;
  request.rdma_nics = d.nics;
  request.dra = true;
}

Result<std::shared_ptr<PodEntry>> Evaluator::EntryFor(const VolcanoTaskView& task) {
  if (!task.pod.raw.empty()) {
    PodRef pod = task.pod;
    if (pod.uid.empty()) pod.uid = task.uid;
    return EntryFor(pod);
  }
  const auto now = clock_();
  if (auto hit = pods_.Find(task.uid, "", now)) return hit;
  return Store(RequestFromResreq(task, framework_.config().request), task.uid, "", now);
}

std::shared_ptr<PodEntry> Evaluator::Remember(PlacementRequest request, std::string_view uid,
                                              std::string_view resource_version) {
  return Store(std::move(request), uid, resource_version, clock_());
}

std::shared_ptr<PodEntry> Evaluator::Find(std::string_view uid) {
  return pods_.Find(uid, "", clock_());
}

void Evaluator::Forget(std::string_view uid) {
  pods_.Erase(uid);
}

std::size_t Evaluator::cached_pods() const {
  return pods_.size();
}

std::shared_ptr<PodEntry> Evaluator::Store(PlacementRequest request, std::string_view uid,
                                           std::string_view rv, PodCache::TimePoint now) {
  auto entry = std::make_shared<PodEntry>();
  entry->uid = std::string(uid.empty() ? std::string_view(request.pod_uid) : uid);
  entry->pod_namespace = request.pod_namespace;
  entry->pod_name = request.pod_name;
  entry->resource_version = std::string(rv);
  entry->interested = Interested(request);
  entry->packs_cpu = PacksCpu(request);
  for (const std::string& warning : request.warnings) {
    metrics::Log(LogLevel::kWarn,
                 {"request", PodLabel(request.pod_namespace, request.pod_name, entry->uid), ""}, warning);
    if (hooks_ != nullptr)
      hooks_->PodWarning(request.pod_namespace, request.pod_name, entry->uid, "IgnoredLabel", warning);
  }
  // The pods this extender is asked about are the workload it packs for (capacity first):
  // each pod's cycles use the mix as it stood when the pod was first seen. A pod that asks no
  // device joins the mix when a verb scores it among GPU nodes (ObserveCpuPod).
  if (entry->interested || entry->packs_cpu) {
    SeedShapes();
    if (entry->interested) shapes_.Observe(entry->uid, packing::ShapeOf(request, request.cpu_milli));
    entry->mix = shapes_.Mix();
    entry->packs_by_mix = shapes_.device_pods() >= min_pods_to_pack_by_mix();
    entry->cpu_thresholds = CpuThresholds(request, entry->mix.get());
  }
  entry->request = std::move(request);
  // Shared by the pods that ask the same; a pod that names GPU UUIDs is decided node by node
  // (VerdictKey) and keeps its own.
  if ((entry->interested || entry->packs_cpu) && !entry->request.NamesGpuUuids()) {
    entry->set_verdicts(VerdictsFor(entry->request, entry->mix, entry->packs_by_mix));
  }
  return pods_.Put(std::move(entry), now);
}

namespace {

// The shape of a bound pod's request (packing::ShapeOf, as the extender takes it), from the
// request its devices answer and its CPU (ClusterStore::PodCpuMilli): whole GPUs and RDMA NICs
// exactly; a share's cores and memory in MiB (one that asked a percentage of the card's memory
// reads as MiB, a whole GPU's worth without cores), without the GPU models it may have asked (an
// allocation does not record them). Nullopt for a pod that holds no GPU and no NIC.
std::optional<packing::Shape> ShapeOfBound(const framework::AllocationDelta& delta, std::int64_t cpu_milli) {
  PlacementRequest r;
  r.gpus = static_cast<int>(delta.exclusive_gpus.size());
  r.rdma_nics = static_cast<int>(delta.nics.size());
  if (r.gpus == 0 && !delta.shares.empty()) {
    r.shared.count = static_cast<int>(delta.shares.size());
    r.shared.cores = delta.shares.front().second.cores;
    r.shared.memory_mib = delta.shares.front().second.memory_mib;
  }
  if (r.gpus == 0 && !r.IsShared() && r.rdma_nics == 0) return std::nullopt;
  return packing::ShapeOf(r, cpu_milli);
}

}  // namespace

void Evaluator::SeedShapes() {
  if (seeded_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(seed_mu_);
  if (seeded_.load(std::memory_order_relaxed) || !store_.synced()) return;
  seeded_.store(true, std::memory_order_release);
  std::vector<std::pair<std::string, packing::Shape>> pods;
  const std::shared_ptr<const state::Snapshot> snap = store_.snapshot();
  for (const auto& record : snap->nodes()) {
    for (const std::string& uid : record->pods) {
      const std::optional<state::PodAllocation> pod = store_.FindPod(uid);
      // A held pod's devices are not known (ClusterStore::Hold): its shape is not either.
      if (!pod || !pod->hold.empty()) continue;
      if (const std::optional<packing::Shape> shape = ShapeOfBound(pod->delta, store_.PodCpuMilli(uid))) {
        pods.emplace_back(uid, *shape);
      }
    }
  }
  if (pods.empty()) return;
  shapes_.ObserveAll(pods);
  metrics::Log(LogLevel::kInfo, {"startup", "", ""},
               "typical pods seeded from " + std::to_string(pods.size()) + " pods the cluster runs");
}

std::shared_ptr<const packing::ShapeMix> Evaluator::ShapeMixFor(std::string_view uid) {
  if (!uid.empty()) {
    if (const std::shared_ptr<PodEntry> entry = Find(uid); entry != nullptr && entry->mix != nullptr)
      return entry->mix;
  }
  return shapes_.Mix();
}

bool Evaluator::PacksByMixFor(std::string_view uid) {
  if (!uid.empty()) {
    if (const std::shared_ptr<PodEntry> entry = Find(uid); entry != nullptr && entry->mix != nullptr) {
      return entry->packs_by_mix;
    }
  }
  return shapes_.device_pods() >= min_pods_to_pack_by_mix();
}

void Evaluator::ObserveCpuPod(const PodEntry& e) {
  if (e.packs_cpu) shapes_.Observe(e.uid, packing::ShapeOf(e.request, e.request.cpu_milli));
}

}  // namespace toposched::extender
