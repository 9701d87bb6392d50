// The evaluator's verdict cache: the keys a pod's verdict on a node is kept under (the node's
// class, the node itself for a pod naming GPU UUIDs, the class of its free CPU where that binds
// the packing score) and the verdict tables shared by the pods that ask the same under one
// typical-pod mix (VerdictsFor). evaluator.h states the caching rule these keys implement.

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "evaluator.h"

namespace toposched::extender {

std::shared_ptr<VerdictTable> Evaluator::VerdictsFor(const PlacementRequest& request,
                                                     const std::shared_ptr<const packing::ShapeMix>& mix,
                                                     bool packs_by_mix) {
  PlacementRequest key = request;
  // A pod that asks no device: its verdicts do not depend on its own CPU (ExpectedFragmentation,
  // the only plugin that reads it, finds nothing to strand where CPU counts as enough, and a
  // node whose CPU binds is keyed by its CpuClass, which is what the score reads), so such pods
  // share one table whatever they ask, rather than taking a slot per request from the GPU pods.
  if (PacksCpu(key)) key.cpu_milli = 0;
  key.pod_namespace.clear();
  key.pod_name.clear();
  key.pod_uid.clear();
  std::lock_guard lock(shared_mu_);
  ++shared_stamp_;
  for (SharedVerdicts& s : shared_) {
    if (s.mix == mix && s.packs_by_mix == packs_by_mix && s.request == key) {
      s.used = shared_stamp_;
      return s.table;
    }
  }
  SharedVerdicts fresh{std::move(key), mix, packs_by_mix,
                       std::make_shared<VerdictTable>(VerdictTable::kSharedMaxVerdicts), shared_stamp_};
  if (shared_.size() < kMaxShapes) {
    shared_.push_back(std::move(fresh));
    return shared_.back().table;
  }
  SharedVerdicts& oldest = *std::min_element(shared_.begin(), shared_.end(),
                                             [](const auto& a, const auto& b) { return a.used < b.used; });
  oldest = std::move(fresh);
  return oldest.table;
}

std::uint64_t Evaluator::VerdictKey(const PlacementRequest& r, const state::NodeRecord& record) {
  if (!r.NamesGpuUuids()) return record.class_key;
  return HashMix(record.class_key, std::hash<std::string_view>{}(record.name));
}

std::uint64_t Evaluator::CpuVerdictKey(std::uint64_t verdict_key, std::int64_t cpu_class) {
  constexpr std::uint64_t kCpuSalt = 0x43505521u;  // "CPU!": apart from every class key
  return Mix64(verdict_key ^ Mix64(static_cast<std::uint64_t>(cpu_class) ^ kCpuSalt));
}

std::vector<std::int64_t> Evaluator::CpuThresholds(const PlacementRequest& r, const packing::ShapeMix* mix) {
  std::vector<std::int64_t> out;
  if (mix != nullptr && !mix->shapes.empty()) {
    for (const packing::WeightedShape& w : mix->shapes) out.push_back(w.shape.cpu_milli);
  } else {
    out.push_back(r.cpu_milli);  // ExpectedFragmentation packs for the pod itself without a mix
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::int64_t Evaluator::CpuClass(const std::vector<std::int64_t>& thresholds, std::int64_t pod_cpu_milli,
                                 std::int64_t cpu_free_milli) {
  const auto fitting = [&](std::int64_t cpu) {
    return static_cast<std::int64_t>(std::upper_bound(thresholds.begin(), thresholds.end(), cpu) -
                                     thresholds.begin());
  };
  const auto n = static_cast<std::int64_t>(thresholds.size()) + 1;
  return fitting(cpu_free_milli) * n + fitting(std::max<std::int64_t>(0, cpu_free_milli - pod_cpu_milli));
}

std::int64_t Evaluator::CpuBound(const PlacementRequest& r, const packing::ShapeMix* mix) {
  std::int64_t largest = r.cpu_milli;
  if (mix != nullptr) {
    for (const packing::WeightedShape& w : mix->shapes) largest = std::max(largest, w.shape.cpu_milli);
  }
  return largest > 0 ? largest + r.cpu_milli : 0;
}

}  // namespace toposched::extender
