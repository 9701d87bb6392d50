#pragma once
// PodCache: what filter/prioritize computed for a pod, kept until its bind (or a TTL) -- the
// extender's reservations. Keyed by pod UID; an entry for another resourceVersion of the same
// pod is replaced (the pod changed, its request may have). Verdicts are per node class
// (NodeRecord::class_key): nodes in one scheduling state share one filter+score result. The
// class key covers the node's hardware fingerprint (so its topology generation) and its
// allocation, so a verdict is never stale for its key; bind re-decides anyway.
// Thread-safe: the map under one mutex (short sections), each entry's verdicts under its own.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "toposched/framework/framework.h"
#include "toposched/framework/status.h"
#include "toposched/metrics/metrics.h"
#include "toposched/placement/packing.h"
#include "toposched/placement/request.h"
#include "toposched/topology/node_topology.h"

namespace toposched::extender {

// One node class's filter and score for one pod.
struct ClassVerdict {
  framework::Code code = framework::Code::kSuccess;
  std::string message;  // the failing plugin's status, as the reply's FailedNodes text
  std::string summary;  // RefusalSummary (explain.h): what a no-node summary counts nodes by
  int score100 = 0;     // framework total, 0..100 (0 when filtered out)
  int capacity = -1;    // the capacity plugin's score (NodeScore::capacity); -1: none
  // The sums behind score100 (NodeScore::weighted, weights). A pool pod's class verdict holds
  // its node-only part (ScoreSet::kNodeOnly), to which each node's cluster part is added.
  long long score_weighted = 0, score_weights = 0;
  std::optional<LinkClass> worst_class;  // the placement's worst GPU->NIC class, when it fits
  // A single vGPU whose card capacity packing chooses (CycleState::share_packing): what is left
  // on that card before it (packing::MilliLeft), for the reply's order among its best nodes
  // (framework::RemnantTie); -1 otherwise.
  int share_left = -1;
  metrics::Counter* rejections = nullptr;  // the filter-rejection series for this reason
  bool passes() const { return code == framework::Code::kSuccess || code == framework::Code::kSkip; }
  // framework::CapacityBand takes score100 and capacity as they are (Offer(total, capacity,
  // reserved)); whether a node is kept for a rarer shape (framework::RareClass) is the node's, not its
  // class's, so it is not here.
};

// The verdicts of one request by node class, shared by the pods that ask the same under the
// same typical-pod mix (Evaluator::VerdictsFor): no plugin's verdict on a node reads who the pod
// is, only what it asks (the pool plugins read the pod's UID in the per-node part, which is not
// kept here). So a Deployment's pods, arriving one after another, evaluate each node class once,
// not once per pod. A shared table is bounded, cleared when full (keys of node states long gone
// pile up); a pod's own (a pod that names GPU UUIDs, decided node by node) lives as long as the
// pod's entry and is not. Thread-safe.
class VerdictTable {
 public:
  static constexpr std::size_t kSharedMaxVerdicts = 4096;
  explicit VerdictTable(std::size_t max_verdicts = 0) : max_(max_verdicts) {}  // 0: unbounded
  std::shared_ptr<const ClassVerdict> Find(std::uint64_t class_key) const;
  // Keeps the first verdict stored for a class (concurrent callers may compute one twice).
  std::shared_ptr<const ClassVerdict> Store(std::uint64_t class_key, std::shared_ptr<const ClassVerdict> v);
  std::size_t size() const;

 private:
  const std::size_t max_;
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, std::shared_ptr<const ClassVerdict>> verdicts_;
};

struct PodEntry {
  std::string uid, pod_namespace, pod_name, resource_version;
  PlacementRequest request;
  bool interested = false;  // asks for GPUs or RDMA NICs; others pass every node untouched
  // Asks CPU and no device of ours: filter passes every node and bind allocates nothing, but
  // prioritize scores where its CPU strands the fewest GPUs (ExpectedFragmentation reads CPU),
  // as it scores any pod: the nodes FGD's protocol sends CPU-only tasks to (docs/placement.md,
  // "Pods that ask no device").
  bool packs_cpu = false;
  // The typical pods when this pod was first seen (framework::ShapeWindow), for its cycles.
  std::shared_ptr<const packing::ShapeMix> mix;
  // The window held Evaluator::min_pods_to_pack_by_mix() pods then: the mix is taken as the
  // workload, and the blind heuristics stand down where it asks no RDMA NIC
  // (CycleState::packs_for_shape_mix).
  bool packs_by_mix = false;
  // Evaluator::CpuThresholds of the request and `mix`, for the CPU class of a node whose CPU binds.
  std::vector<std::int64_t> cpu_thresholds;

  std::shared_ptr<const ClassVerdict> FindVerdict(std::uint64_t class_key) const;
  // Keeps the first verdict stored for a class (concurrent callers may compute one twice).
  std::shared_ptr<const ClassVerdict> StoreVerdict(std::uint64_t class_key,
                                                   std::shared_ptr<const ClassVerdict> v);
  std::size_t verdict_count() const;
  // The table the verdicts go to (one of its own until set: Evaluator::Store shares one among
  // the pods that ask the same).
  void set_verdicts(std::shared_ptr<VerdictTable> table) { verdicts_ = std::move(table); }
  const std::shared_ptr<VerdictTable>& verdicts() const { return verdicts_; }
  // The nodes this pod's last filter passed, as snapshot positions in the reply's order (null:
  // none yet). kube-scheduler's prioritize names exactly those nodes in that order (schedule_one.go
  // findNodesThatPassExtenders keeps the extender's NodeNames order), so prioritize uses them as
  // its lookup hints (Snapshot::IndexOf with a hint), each checked.
  std::shared_ptr<const std::vector<std::uint32_t>> passed_order() const;
  void set_passed_order(std::shared_ptr<const std::vector<std::uint32_t>> order);

 private:
  friend class PodCache;
  mutable std::mutex mu_;
  std::shared_ptr<VerdictTable> verdicts_ = std::make_shared<VerdictTable>();  // never null
  std::shared_ptr<const std::vector<std::uint32_t>> passed_order_;
  std::chrono::steady_clock::time_point expires_;
};

class PodCache {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  PodCache(std::chrono::milliseconds ttl, std::size_t capacity) : ttl_(ttl), capacity_(capacity) {}

  // The live entry for `uid` (any resourceVersion when `resource_version` is empty); null when
  // absent, expired or of another resourceVersion. A hit extends the entry's life.
  std::shared_ptr<PodEntry> Find(std::string_view uid, std::string_view resource_version, TimePoint now);
  // Inserts (replacing any entry of that UID). When full, expired entries go first, then the
  // ones closest to expiry. Entries without a UID are not cached (returned as is).
  std::shared_ptr<PodEntry> Put(std::shared_ptr<PodEntry> entry, TimePoint now);
  void Erase(std::string_view uid);
  std::size_t size() const;

 private:
  void EvictLocked(TimePoint now);
  std::chrono::milliseconds ttl_;
  std::size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<PodEntry>> entries_;
};

}  // namespace toposched::extender
