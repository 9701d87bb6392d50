#include "toposched/framework/shape_window.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace toposched::framework {

ShapeWindow::ShapeWindow(std::size_t size, std::size_t refresh)
    : size_(std::max<std::size_t>(size, 1)), refresh_(std::max<std::size_t>(refresh, 1)) {}

bool ShapeWindow::AddLocked(std::string_view uid, const packing::Shape& shape) {
  if (uid.empty()) return false;
  std::string key(uid);
  if (uids_.contains(key)) return false;
  uids_.insert(key);
  pods_.emplace_back(std::move(key), shape);
  if (AsksDevice(shape)) ++device_pods_;
  if (pods_.size() > size_) {
    if (AsksDevice(pods_.front().second)) --device_pods_;
    uids_.erase(pods_.front().first);
    pods_.pop_front();
  }
  return true;
}

void ShapeWindow::Observe(std::string_view uid, const packing::Shape& shape) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!AddLocked(uid, shape)) return;
  if (++since_refresh_ >= refresh_ || pods_.size() <= refresh_) RecomputeLocked();
}

void ShapeWindow::ObserveAll(const std::vector<std::pair<std::string, packing::Shape>>& pods) {
  std::lock_guard<std::mutex> lock(mu_);
  bool added = false;
  const std::size_t n = pods.size(), taken = std::min(n, size_);
  for (std::size_t k = 0; k < taken; ++k) {
    const auto& [uid, shape] = pods[k * n / taken];
    added = AddLocked(uid, shape) || added;
  }
  if (added) RecomputeLocked();
}

void ShapeWindow::RecomputeLocked() {
  std::vector<packing::Shape> shapes;
  shapes.reserve(pods_.size());
  for (const auto& [uid, shape] : pods_) shapes.push_back(shape);
  packing::ShapeMix mix = packing::TypicalShapes(shapes, 0.95, packing::Coverage::kPodsAndGpuDemand);
  // An unchanged mix stays the same object: what is keyed by it (the extender's shared
  // verdicts, Evaluator::VerdictsFor) stays valid.
  if (mix_ == nullptr || !(*mix_ == mix)) mix_ = std::make_shared<const packing::ShapeMix>(std::move(mix));
  since_refresh_ = 0;
}

std::shared_ptr<const packing::ShapeMix> ShapeWindow::Mix() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mix_;
}

std::size_t ShapeWindow::pods() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pods_.size();
}

std::size_t ShapeWindow::device_pods() const {
  std::lock_guard<std::mutex> lock(mu_);
  return device_pods_;
}

bool ShapeWindow::AsksDevice(const packing::Shape& shape) {
  return shape.gpus > 0 || shape.milli > 0 || shape.nics > 0;
}

}  // namespace toposched::framework
