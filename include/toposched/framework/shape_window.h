#pragma once
// The typical pods a long-running scheduler packs for (ExpectedFragmentation, capacity first):
// the shapes of the last pods it was asked to place, one per pod UID, summarised as FGD's
// typical pods (packing::TypicalShapes, keeping the shapes that hold the GPU demand). The
// simulator knows its whole workload up front; the extender learns it from the pods it sees,
// those that ask CPU alone among them (FGD's typical pods include them).
//
// Thread-safe. Observe costs a hash lookup; the mix is recomputed every `refresh` new pods (and
// for each of the first `refresh`), so readers share one immutable mix between refreshes.

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "toposched/placement/packing.h"

namespace toposched::framework {

class ShapeWindow {
 public:
  static constexpr std::size_t kDefaultSize = 2000;
  static constexpr std::size_t kDefaultRefresh = 50;

  explicit ShapeWindow(std::size_t size = kDefaultSize, std::size_t refresh = kDefaultRefresh);

  // Records the shape of pod `uid` once (a pod asked about again adds nothing); the oldest pod
  // leaves the window when it is full. An empty UID is ignored (it could not be told apart).
  void Observe(std::string_view uid, const packing::Shape& shape);
  // Observe for each of `pods` in order, the mix recomputed once at the end (a window seeded
  // with the pods a cluster already runs). More pods than the window holds: an even sample of
  // them, not the last ones (a cluster's pods come by node).
  void ObserveAll(const std::vector<std::pair<std::string, packing::Shape>>& pods);
  // The current mix; null before the first pod.
  std::shared_ptr<const packing::ShapeMix> Mix() const;
  std::size_t pods() const;
  // The pods in the window that ask a GPU, a share or an RDMA NIC (the others ask CPU alone).
  std::size_t device_pods() const;

 private:
  void RecomputeLocked();
  bool AddLocked(std::string_view uid, const packing::Shape& shape);  // false: known or no UID
  static bool AsksDevice(const packing::Shape& shape);

  const std::size_t size_, refresh_;
  mutable std::mutex mu_;
  std::deque<std::pair<std::string, packing::Shape>> pods_;  // oldest first
  std::unordered_set<std::string> uids_;
  std::size_t since_refresh_ = 0;
  std::size_t device_pods_ = 0;
  std::shared_ptr<const packing::ShapeMix> mix_;
};

}  // namespace toposched::framework
