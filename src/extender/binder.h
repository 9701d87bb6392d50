#pragma once
// The binder (private to the extender): what makes an allocation durable. kube-scheduler's bind
// and Volcano's allocate re-decide the pod's devices on the node as it is now, under the node's
// lock (ClusterStore::Bind), commit them, and, through the BindHooks, create the Binding (kube-
// scheduler) or leave it to Volcano; Volcano's deallocate releases only what was never bound.
// Only the leader changes state (BindHooks::MayChangeState); the others answer with an in-band
// error, which the scheduler retries.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "evaluator.h"
#include "toposched/extender/service.h"
#include "toposched/metrics/metrics.h"
#include "toposched/state/cluster_state.h"
#include "toposched/wire/wire.h"

namespace toposched::extender {

class Binder {
 public:
  // `evaluator` (its entries, store, hooks and clock) must outlive the binder.
  Binder(Evaluator& evaluator, metrics::Registry& metrics);

  // kube-scheduler's bind: the pod's devices on b.node, then its Binding. "" = bound.
  std::string Bind(const BindingArgs& b);
  // Volcano's allocate and deallocate are session events, not binds (volcano-sh/volcano
  // pkg/scheduler/framework/statement.go): allocate comes when a statement allocates or pipelines
  // a task and when Discard un-evicts one; deallocate when a task is un-pipelined or allocated
  // back, and when a statement evicts a running one. So (docs/extender.md, "Volcano sessions"):
  //   allocate   a pod with no allocation: decided and made durable now (annotations, HAMi lock),
  //              before Volcano's Binding, which follows the statement's commit; a pod already
  //              allocated on that node (un-evicted, re-allocated in a later session): unchanged;
  //              allocated on another node but never bound there: moved.
  //   deallocate a pod the API server shows bound (running, evicted by a session): nothing
  //              changes, its devices are freed when the pod is gone; a pod never bound: released
  //              and its annotations removed. When that cannot be confirmed, nothing is freed.
  // Each returns "" or the error for the reply.
  std::string Allocate(const VolcanoTaskView& task);
  std::string Deallocate(std::string_view uid);

  // Volcano before v1.13 ignores extender.allocateFuncVerb: GPU tasks pass predicate and are
  // bound by Volcano with no allocate, so no device is recorded. Predicates that pass with no
  // allocate for a minute say so (log once, gauge).
  void NoteVolcanoPass();
  // Before /metrics renders.
  void RefreshGauges();

 private:
  struct Outcome {
    std::string error;      // empty = bound
    std::string metric;     // toposched_binds_total's outcome
    std::string alignment;  // AlignmentNote of the placement bound (for the pod's event)
  };
  // `pipelined`: a Volcano task pipelined onto devices its victims may still hold, for which
  // "unfit" is expected and logged by the caller, not warned about here.
  Outcome Commit(const std::shared_ptr<PodEntry>& entry, std::string_view node, std::string_view verb,
                 bool pipelined = false);
  // Creates the Binding through the hooks; on failure gives the devices back (persistence
  // undoes the annotations) and returns the error for the scheduler ("" = bound).
  std::string Complete(const state::PodAllocation& allocation);
  // True (and `error` set) on a replica that is not the leader.
  bool RefuseUnlessLeader(std::string& error) const;
  // Releases `uid`'s allocation on another node than `node` when it was never bound there.
  // "" or the error.
  std::string MoveIfNeverBound(std::string_view uid, std::string_view node, std::string_view verb);

  Evaluator& evaluator_;
  state::ClusterStore& store_;
  BindHooks* const hooks_;
  metrics::Family<metrics::Counter>& placements_;
  metrics::Family<metrics::Counter>& reservations_;
  metrics::Family<metrics::Counter>& binds_;
  metrics::Family<metrics::Counter>& volcano_events_;
  metrics::Family<metrics::Gauge>& volcano_missing_;
  std::atomic<std::uint64_t> volcano_allocates_{0};
  std::atomic<std::int64_t> volcano_first_pass_{0};  // clock ticks of the first passing predicate
  std::atomic<bool> volcano_allocate_missing_{false};
};

}  // namespace toposched::extender
