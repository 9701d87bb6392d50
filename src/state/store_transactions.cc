// ClusterStore's transactions (cluster_state.h): Restore, Bind, Release, ReleaseIfStill and Hold.
// Each claims the pod's UID, then changes one node's record under that node's lock and publishes
// it, so that a pod is never on two nodes and a node never gives a device twice.

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "store_impl.h"
#include "toposched/state/cluster_state.h"

namespace toposched::state {

Status ClusterStore::Restore(const PodAllocation& allocation) {
  if (allocation.uid.empty()) return Error("restore: pod UID is empty");
  const Impl::UidClaim claim(*impl_, allocation.uid);
  // A held pod whose record became readable: the hold gives way to the allocation it names, in
  // one step on its node (when that fails, the hold stays and nothing changes).
  const PodAllocation* replaced_hold = nullptr;
  if (claim.bound() && !claim.bound()->hold.empty()) {
    if (claim.bound()->node == allocation.node) {
      replaced_hold = &*claim.bound();
    } else {
      TOPOSCHED_ASSIGN_OR_RETURN(std::ignore, impl_->ReleaseClaimed(*claim.bound(), /*persist=*/false));
    }
  } else if (claim.bound()) {
    if (claim.bound()->node != allocation.node) {
      return Error(std::string(kConflictTag) + "pod " + allocation.uid + " is already bound to node " +
                       claim.bound()->node + ", not " + allocation.node,
                   ErrorCode::kConflict);
    }
    // The same devices: the source read back what a bind just wrote (the annotation carries
    // no worst class or container split, so compare the claim, not every field).
    if (claim.bound()->delta == allocation.delta) return Status::Ok();
    return Error("pod " + allocation.uid + " is already bound to node " + allocation.node +
                 " with a different allocation");
  }
  const auto node_lock = impl_->NodeLock(allocation.node, /*create=*/false);
  if (!node_lock) return Error("unknown node " + allocation.node);
  std::lock_guard lock(*node_lock);
  const auto snapshot = impl_->Current();
  const NodeRecord* record = snapshot->Find(allocation.node);
  if (record == nullptr) return Error("unknown node " + allocation.node);
  const NodeRecord base = replaced_hold != nullptr ? Impl::Without(*record, *replaced_hold) : *record;
  TOPOSCHED_ASSIGN_OR_RETURN(std::shared_ptr<NodeRecord> next, impl_->WithPod(base, allocation));
  impl_->Publish(allocation.node, std::move(next));
  impl_->IndexPod(allocation);
  return Status::Ok();
}

Result<BindResult> ClusterStore::Bind(std::string_view node, std::string_view pod_uid, const Decide& decide) {
  if (pod_uid.empty()) return Error("bind: pod UID is empty");
  if (!decide) return Error("bind: no decision function");
  const Impl::UidClaim claim(*impl_, pod_uid);
  if (claim.bound() && !claim.bound()->hold.empty()) {
    return Error("pod " + std::string(pod_uid) + " holds devices on node " + claim.bound()->node +
                 " by a record that cannot be read back (" + claim.bound()->hold +
                 "): fix or remove its allocation annotation, or delete the pod");
  }
  if (claim.bound()) {
    if (claim.bound()->node == node) return BindResult{BindKind::kAlreadyBound, *claim.bound()};
    return Error(std::string(kConflictTag) + "pod " + std::string(pod_uid) + " is already bound to node " +
                     claim.bound()->node,
                 ErrorCode::kConflict);
  }
  const auto node_lock = impl_->NodeLock(node, /*create=*/false);
  if (!node_lock) return Error("unknown node " + std::string(node));
  std::lock_guard lock(*node_lock);
  const auto snapshot = impl_->Current();
  const NodeRecord* record = snapshot->Find(node);
  if (record == nullptr) return Error("unknown node " + std::string(node));

  TOPOSCHED_ASSIGN_OR_RETURN(PodAllocation allocation, decide(*record));
  if (allocation.uid.empty()) allocation.uid = pod_uid;
  if (allocation.node.empty()) allocation.node = node;
  if (allocation.uid != pod_uid || allocation.node != node) {
    return Error("bind: the decision is for pod " + allocation.uid + " on node " + allocation.node +
                 ", not pod " + std::string(pod_uid) + " on node " + std::string(node));
  }
  allocation.topology_generation = record->topology_generation;

  TOPOSCHED_ASSIGN_OR_RETURN(std::shared_ptr<NodeRecord> next, impl_->WithPod(*record, allocation));
  if (impl_->persistence != nullptr) {
    if (Status s = impl_->persistence->RecordBind(allocation, *record); !s.ok()) {
      return s.error().WithContext("cannot persist the bind of pod " + allocation.uid);
    }
  }
  impl_->Publish(node, std::move(next));
  impl_->IndexPod(allocation);
  impl_->WarmPool(allocation.pool);
  return BindResult{BindKind::kBound, std::move(allocation)};
}

Result<std::optional<PodAllocation>> ClusterStore::Release(std::string_view pod_uid, bool persist) {
  const Impl::UidClaim claim(*impl_, pod_uid);
  if (!claim.bound()) return std::optional<PodAllocation>();
  if (persist && !claim.bound()->hold.empty()) {
    // Nothing but the pod's end (the source's report) proves a held pod's devices free.
    return Error("pod " + std::string(pod_uid) + " holds devices on node " + claim.bound()->node +
                 " by a record that cannot be read back (" + claim.bound()->hold +
                 "): it is released only when the pod is gone");
  }
  return impl_->ReleaseClaimed(*claim.bound(), persist);
}

Result<std::optional<PodAllocation>> ClusterStore::ReleaseIfStill(const PodAllocation& expected) {
  const Impl::UidClaim claim(*impl_, expected.uid);
  const std::optional<PodAllocation>& bound = claim.bound();
  if (!bound || bound->node != expected.node || !(bound->delta == expected.delta) || !bound->hold.empty()) {
    return std::optional<PodAllocation>();
  }
  return impl_->ReleaseClaimed(*bound, /*persist=*/true);
}

Status ClusterStore::Hold(PodAllocation allocation) {
  if (allocation.uid.empty()) return Error("hold: pod UID is empty");
  if (allocation.hold.empty()) return Error("hold: pod " + allocation.uid + ": no reason given");
  const Impl::UidClaim claim(*impl_, allocation.uid);
  const PodAllocation* previous = claim.bound() ? &*claim.bound() : nullptr;
  if (previous != nullptr && previous->node != allocation.node) {
    TOPOSCHED_ASSIGN_OR_RETURN(std::ignore, impl_->ReleaseClaimed(*previous, /*persist=*/false));
    previous = nullptr;
  }
  const auto node_lock = impl_->NodeLock(allocation.node, /*create=*/false);
  if (!node_lock) return Error("unknown node " + allocation.node);
  std::lock_guard lock(*node_lock);
  const auto snapshot = impl_->Current();
  const NodeRecord* record = snapshot->Find(allocation.node);
  if (record == nullptr) return Error("unknown node " + allocation.node);
  // What the pod held before (a readable allocation, an earlier hold) gives way, in one step.
  const NodeRecord base = previous != nullptr ? Impl::Without(*record, *previous) : *record;
  // The named devices that are free, whole; the others are someone's already. The node is held
  // either way, so nothing is placed on what could not be identified.
  framework::AllocationDelta held;
  const int gpus = base.topology ? static_cast<int>(base.topology->gpus.size()) : 0;
  const int nics = base.topology ? static_cast<int>(base.topology->nics.size()) : 0;
  std::set<int> seen_gpus, seen_nics;
  auto take_gpu = [&](int g) {
    if (g >= 0 && g < gpus && seen_gpus.insert(g).second && GpuFree(base.allocated, g)) {
      held.exclusive_gpus.push_back(g);
    }
  };
  for (int g : allocation.delta.exclusive_gpus) take_gpu(g);
  for (const auto& [g, usage] : allocation.delta.shares) take_gpu(g);
  for (int n : allocation.delta.nics) {
    if (n >= 0 && n < nics && seen_nics.insert(n).second && !NicUsed(base.allocated, n)) {
      held.nics.push_back(n);
    }
  }
  allocation.delta = std::move(held);
  if (previous != nullptr && *previous == allocation) return Status::Ok();  // held so already
  TOPOSCHED_ASSIGN_OR_RETURN(std::shared_ptr<NodeRecord> next, impl_->WithPod(base, allocation));
  auto& held_pods = next->held_pods;
  held_pods.insert(std::lower_bound(held_pods.begin(), held_pods.end(), allocation.uid), allocation.uid);
  impl_->Refresh(*next);
  impl_->Publish(allocation.node, std::move(next));
  impl_->IndexPod(allocation);
  return Status::Ok();
}

}  // namespace toposched::state
