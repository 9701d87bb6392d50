#pragma once
// The transport-free core of the extender's verbs (private to the extender): a pod's cache
// entry (its request, parsed once per resourceVersion) and its verdict on each node. The
// adapters (kube_verbs.cc, volcano_verbs.cc) decode a request, ask the evaluator, and encode
// its answers; the binder (binder.h) reads the same entries at bind.
//
// The caching rule: a pod's filter decision and its node-only scores (ScorePlugin::ReadsCluster
// false) depend on the node's class alone (NodeRecord::class_key: hardware fingerprint,
// allocation, schedulability), so they are computed once per class and kept on the pod's entry
// (for an ordinary pod that is its whole score), in a table shared by the pods that ask the same
// under the same typical-pod mix (VerdictsFor: no such verdict reads who the pod is). A pod that
// names GPUs by UUID is decided node by node (classes leave UUIDs out), in a table of its own.
// A Prefill/Decode pool pod's scores add the pool plugins' part, which depends on where the node
// sits relative to the pool: computed on every scoring call, never cached; nodes that sit alike
// relative to the pool share one result per call (NodeVerdicts, node_verdicts.h, keyed by the
// pool keys of pool_index.h).
//
// The files: evaluator.cc (Evaluate, the pod predicates, remnant counts), evaluator_entries.cc
// (pod entries and the typical pods), evaluator_verdicts.cc (verdict keys and shared tables),
// pool_index.cc, node_verdicts.cc.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "pod_cache.h"
#include "pool_index.h"
#include "toposched/common/flat_hash_index.h"
#include "toposched/extender/service.h"
#include "toposched/framework/cluster_view.h"
#include "toposched/framework/framework.h"
#include "toposched/framework/ranking.h"
#include "toposched/framework/shape_window.h"
#include "toposched/metrics/metrics.h"
#include "toposched/state/cluster_state.h"
#include "toposched/wire/wire.h"

namespace toposched::extender {

// What a call wants of a verdict: the filter decision only (filter, Volcano predicate), or the
// scores too (prioritize).
enum class Want { kFilter, kScores };

// A pod needs toposched's devices at all: others pass every node and bind with nothing.
bool Interested(const PlacementRequest& r);
// A pod of a Prefill/Decode pool (its scores depend on where the pool runs).
bool IsPoolPod(const PlacementRequest& r);
// A pod that asks CPU and no device of ours, and no DRA claim: prioritize scores it
// (PodEntry::packs_cpu).
bool PacksCpu(const PlacementRequest& r);

using framework::CpuPodScore;
using framework::IdleGpuShare;

using framework::NodeOrderKey;

class Evaluator {
 public:
  using Clock = ExtenderService::Clock;

  // `framework`, `store`, `metrics` and `hooks` (may be null) must outlive the evaluator.
  Evaluator(const framework::Framework& framework, state::ClusterStore& store, metrics::Registry& metrics,
            const ExtenderOptions& options, Clock clock, BindHooks* hooks);

  // The pod's entry: a hit for the same UID and resourceVersion, else parsed and stored.
  Result<std::shared_ptr<PodEntry>> EntryFor(const PodRef& pod);
  // A Volcano task's entry: from its Pod when it carries one, else from its Resreq.
  Result<std::shared_ptr<PodEntry>> EntryFor(const VolcanoTaskView& task);
  // Sets the GPUs and RDMA NICs a pod's DRA claims ask (PlacementRequest::dra), when it asks
  // none through its resources and the source can count its claims.
  void ResolveDraClaims(PlacementRequest& request) const;
  // Stores an entry for a request read elsewhere (a bind's pod fetched from the API server).
  std::shared_ptr<PodEntry> Remember(PlacementRequest request, std::string_view uid,
                                     std::string_view resource_version);
  // The live entry for `uid` (any resourceVersion), or null.
  std::shared_ptr<PodEntry> Find(std::string_view uid);
  // The pod was bound: its reservation is consumed.
  void Forget(std::string_view uid);
  std::size_t cached_pods() const;

  // The key a pod's verdict on `record` is cached under: the node's class, or, for a pod that
  // names GPUs by UUID (which node classes leave out), the node itself.
  static std::uint64_t VerdictKey(const PlacementRequest& r, const state::NodeRecord& record);
  // The key of a verdict on a node whose free CPU binds the packing score (CpuBound): its
  // verdict key and the CPU's class (CpuClass), so such a verdict is kept per node state.
  static std::uint64_t CpuVerdictKey(std::uint64_t verdict_key, std::int64_t cpu_class);
  // What of a node's free CPU the packing score reads: which typical shapes (`mix`'s; the pod's
  // own without one) fit in it before the pod and after it (packing::Fits compares a shape's CPU
  // with the CPU left, nothing else reads it), as the counts of the shapes' distinct CPU requests
  // at or below each. Nodes of one class whose free CPU has one class score alike, exactly, so
  // the many nodes whose CPU binds share a few verdicts instead of taking one each. `thresholds`:
  // CpuThresholds(r, mix) (PodEntry::cpu_thresholds).
  static std::vector<std::int64_t> CpuThresholds(const PlacementRequest& r, const packing::ShapeMix* mix);
  static std::int64_t CpuClass(const std::vector<std::int64_t>& thresholds, std::int64_t pod_cpu_milli,
                               std::int64_t cpu_free_milli);
  // The free CPU below which a node's CPU changes the pod's packing score: the largest CPU of the
  // typical pods (and the pod's own) plus the pod's, for then a shape may not fit before or after
  // the pod. At or above it every shape fits either way, which is what a node whose CPU is unknown
  // counts, so nodes there share their class's verdict. 0: CPU never binds (no shape asks CPU).
  static std::int64_t CpuBound(const PlacementRequest& r, const packing::ShapeMix* mix);

  struct PoolParts;
  // One node to evaluate a pod on, and what the call already holds for it.
  struct NodeQuery {
    const state::NodeRecord& record;  // the node, in `snap`
    const std::shared_ptr<const state::Snapshot>& snap;
    Want want = Want::kFilter;
    // A pool pod's pool members and HyperNode positions as the call fetched them (null: fetched
    // here).
    std::shared_ptr<const std::vector<framework::PoolMember>> members = nullptr;
    std::shared_ptr<const std::map<std::string, pd::Location>> positions = nullptr;
    PoolParts* parts = nullptr;  // the call's pool parts by position (may be null)
    // The ClusterStore::PoolVersion `members` were read at (0: unknown), which lets the pool
    // plugins keep what they derive from them (framework::PoolToken).
    std::uint64_t pool_version = 0;
    // The node's free CPU where it binds (CpuBound; the verdict is then the node's own, under
    // CpuVerdictKey); -1: counted as enough (the class's verdict).
    std::int64_t cpu_free = -1;
  };
  // The pod's verdict on `query.record`. `cycle`: the call's cycle, created on first use.
  std::shared_ptr<const ClassVerdict> Evaluate(PodEntry& entry, std::optional<framework::CycleState>& cycle,
                                               const NodeQuery& query);

  // A pool pod's pool part (the pool plugins' weighted sum and weights) is a function of where
  // the node sits relative to the pool (NodeVerdicts' position key) and of its placement's worst
  // GPU->NIC class, the only things the pool plugins read of a node (plugins/README.md,
  // "Pool-aware plugins"): one call computes it once per (position, worst class), whatever the
  // node's class.
  struct PoolParts {
    std::uint64_t position = 0;  // the node's position key
    // (position, worst class) -> the pool plugins' weighted sum and weights
    FlatHashIndex<std::pair<long long, long long>> computed;
    // Where the call's (class, position) verdicts are made (null: each its own allocation): they
    // live as long as the call's NodeVerdicts, which is one per thread at a time.
    std::deque<ClassVerdict>* arena = nullptr;
  };

  // A name no NodeTopology exists for: counted, with the reason every reply gives.
  void CountUnknownNode() { unknown_node_rejections_->Inc(); }
  static constexpr std::string_view kUnknownNode =
      "toposched has no NodeTopology for this node (is the agent running there?)";

  // The verdict table for pods that ask `request` (its pod's identity aside) under `mix`: one
  // shared by all of them (VerdictTable), the last kMaxShapes requests kept.
  static constexpr std::size_t kMaxShapes = 32;
  std::shared_ptr<VerdictTable> VerdictsFor(const PlacementRequest& request,
                                            const std::shared_ptr<const packing::ShapeMix>& mix,
                                            bool packs_by_mix);

  // How many pods asking a device the window must hold before its mix is taken as the workload
  // (PodEntry::packs_by_mix), by default a fortieth of the window: a new leader's first few pods
  // are not the workload (NIC-less ones would take GPU+NIC nodes a Prefill pod needs), and a
  // small threshold packs for the mix soon after (the measured choice: docs/placement.md, "The
  // window rule's threshold"). Pods asking CPU alone do not count: they say nothing of the GPU
  // shapes. The configuration's `capacity.minTypicalPods` sets it (min_pods_to_pack_by_mix).
  static constexpr std::size_t kMinPodsToPackByMix = framework::kDefaultMinTypicalPods;
  static_assert(kMinPodsToPackByMix == framework::ShapeWindow::kDefaultSize / 40);
  static_assert(framework::kMaxMinTypicalPods == framework::ShapeWindow::kDefaultSize);
  std::size_t min_pods_to_pack_by_mix() const {
    return static_cast<std::size_t>(framework_.config().capacity.min_typical_pods);
  }

  const framework::Framework& framework() const { return framework_; }
  // The typical pods capacity packs for: `uid`'s own mix when the pod is cached (as it stood
  // when the pod was first seen, what its verbs use), else the window's current one.
  std::shared_ptr<const packing::ShapeMix> ShapeMixFor(std::string_view uid);
  // Whether `uid`'s cycles pack by the mix (PodEntry::packs_by_mix), else whether a pod seen now
  // would.
  bool PacksByMixFor(std::string_view uid);
  // A pod that asks CPU and no device (PodEntry::packs_cpu) scored among nodes with GPUs joins
  // the typical pods: FGD's include such pods, and without them the packing score misjudges
  // what a node's CPU is for (docs/placement.md, "Through the extender's own verbs", point 0,
  // "CPU-only pods are typical pods", has the trace replay's figures). One that
  // only CPU nodes could take (taints, selectors: kube-scheduler filtered the GPU nodes out)
  // is not part of the GPU nodes' workload and does not. Not seeded from the pods a cluster
  // runs (SeedShapes): the store cannot tell this scheduler's pods from DaemonSets'.
  void ObserveCpuPod(const PodEntry& e);
  state::ClusterStore& store() const { return store_; }
  // The schedulable nodes' partly used GPUs of `vendor` by what is left on them, as of `snap`
  // (packing::RemnantCounts): counted once per snapshot and vendor, the last one kept.
  std::shared_ptr<const packing::RemnantCounts> Remnants(const state::Snapshot& snap, GpuVendor vendor);
  // `pool`'s index for snapshots with `snap`'s positions, built when the pool or the positions
  // changed since the last one (null: `snap` has no position runs).
  std::shared_ptr<const PoolIndex> PoolIndexFor(std::string_view pool, const state::Snapshot& snap,
                                                std::size_t tiers);
  BindHooks* hooks() const { return hooks_; }
  PodCache::TimePoint now() const { return clock_(); }

 private:
  std::shared_ptr<PodEntry> Store(PlacementRequest request, std::string_view uid, std::string_view rv,
                                  PodCache::TimePoint now);

  std::mutex remnants_mu_;
  struct CountedRemnants {
    const state::Snapshot* snap = nullptr;  // with its version: a later snapshot may reuse the address
    std::uint64_t version = 0;
    GpuVendor vendor = GpuVendor::kNvidia;
    std::shared_ptr<const packing::RemnantCounts> counts;
  } remnants_;

  const framework::Framework& framework_;
  state::ClusterStore& store_;
  BindHooks* const hooks_;
  const Clock clock_;
  PodCache pods_;
  framework::ShapeWindow shapes_;  // the pods asked about: the mix capacity first packs for
  // The window starts from the pods the store holds once it is synced (SeedShapes): a restarted
  // extender or a new leader packs for the cluster's workload from its first pod.
  void SeedShapes();
  std::mutex seed_mu_;  // one seeding at a time
  std::atomic<bool> seeded_{false};
  metrics::Family<metrics::Counter>& rejections_;
  metrics::Counter* unknown_node_rejections_;
  struct SharedVerdicts {
    PlacementRequest request;  // the pod's namespace, name and UID cleared
    std::shared_ptr<const packing::ShapeMix>
        mix;  // compared by identity (ShapeWindow keeps an unchanged mix)
    bool packs_by_mix = false;
    std::shared_ptr<VerdictTable> table;
    std::uint64_t used = 0;  // the last lookup's stamp: the least recent goes first when full
  };
  std::mutex shared_mu_;  // guards shared_, shared_stamp_
  std::vector<SharedVerdicts> shared_;
  std::uint64_t shared_stamp_ = 0;
  std::mutex pool_mu_;  // guards pool_index_ (taken before the store's own locks)
  // Non-const: a patched version takes the last one's tables when only the map holds it.
  std::map<std::string, std::shared_ptr<PoolIndex>, std::less<>> pool_index_;
};

// The schedulable nodes' partly used GPUs of `vendor` by what is left on them.
packing::RemnantCounts CountRemnants(const state::Snapshot& snap, GpuVendor vendor);

// Rule 4 of the ranking (framework::RemnantTie) for `request` over `snap`: the cluster's
// remnants are the evaluator's, counted once per snapshot version (Evaluator::Remnants).
framework::RemnantTie RemnantTieFor(Evaluator& evaluator, const PlacementRequest& request,
                                    const state::Snapshot& snap);

// The key PreferOneOfTheBest orders a reply's best nodes by (framework::TieKey): verdict `v`'s
// capacity score and card (null: a node without a verdict), then `order_key`.
inline framework::TieKey TieKeyOf(const ClassVerdict* v, std::uint64_t order_key,
                                  framework::RemnantTie& remnants) {
  if (v == nullptr) return framework::TieKeyOf(-1, 0, order_key);
  return framework::TieKeyOf(v->capacity, remnants.Rank(v->share_left), order_key);
}

}  // namespace toposched::extender
