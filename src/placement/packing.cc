#include "toposched/placement/packing.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <map>
#include <tuple>
#include <utility>

#include "toposched/common/hash.h"
#include "toposched/common/text.h"
#include "toposched/placement/device_rules.h"

namespace toposched::packing {
namespace {

std::size_t Idx(int i) {
  return static_cast<std::size_t>(i);
}

bool ModelAccepted(const NodeState& node, const Shape& shape) {
  if (shape.models.empty()) return true;
  return std::any_of(shape.models.begin(), shape.models.end(),
                     [&](const std::string& m) { return ContainsIgnoringCase(node.model, m); });
}

double IdleTotal(const NodeState& node) {
  double total = 0;
  for (int left : node.milli_left) total += left;
  return total;
}

// Whether enough GPUs have `shape.milli` left (FGD's CanNodeHostPodOnGpuMemory).
bool GpusFit(const NodeState& node, const Shape& shape) {
  int enough = 0;
  for (int left : node.milli_left) {
    if (left >= shape.milli && ++enough >= shape.gpus) return true;
  }
  return false;
}

}  // namespace

ShapeMix TypicalShapes(const std::vector<Shape>& pods, double coverage, Coverage by) {
  ShapeMix mix;
  if (pods.empty()) return mix;
  std::map<Shape, int> counts;
  for (const Shape& s : pods) ++counts[s];
  std::vector<std::pair<Shape, int>> sorted(counts.begin(), counts.end());
  coverage = std::clamp(coverage, 0.0, 1.0);
  // The shortest prefix of `sorted` (in the order `before` gives) whose `amount` reaches
  // `coverage` of the total; each shape in it marked kept.
  std::map<Shape, bool> kept;
  auto keep_prefix = [&](auto before, auto amount) {
    std::stable_sort(sorted.begin(), sorted.end(), before);
    double total = 0;
    for (const auto& entry : sorted) total += amount(entry);
    const double want = coverage * total;
    double sum = 0;
    bool any = false;
    for (const auto& entry : sorted) {
      if (sum >= want && any) break;
      kept[entry.first] = true;
      sum += amount(entry);
      any = true;
    }
  };
  auto pods_of = [](const std::pair<Shape, int>& e) { return static_cast<double>(e.second); };
  auto demand_of = [](const std::pair<Shape, int>& e) {
    return static_cast<double>(e.second) * e.first.gpus * e.first.milli;
  };
  if (by == Coverage::kPodsAndGpuDemand) {
    keep_prefix([&](const auto& a, const auto& b) { return demand_of(a) > demand_of(b); }, demand_of);
  }
  // Most frequent first; among equals (kPods) the larger shape by (CPU, milli, GPUs, models)
  // first, as the FGD simulator's SortTargetPodInDecreasingCount orders them (sort.Reverse of
  // TargetPodList.Less, pkg/type/resource.go); toposched's demand mix keeps the map's order
  // (smaller first). Sorted from the map's order again so that ties do not depend on the demand
  // pass.
  auto larger = [](const Shape& a, const Shape& b) {
    return std::tie(a.cpu_milli, a.milli, a.gpus, a.models, a.nics) >
           std::tie(b.cpu_milli, b.milli, b.gpus, b.models, b.nics);
  };
  sorted.assign(counts.begin(), counts.end());
  keep_prefix(
      [&](const auto& a, const auto& b) {
        if (a.second != b.second) return a.second > b.second;
        return by == Coverage::kPods && larger(a.first, b.first);
      },
      pods_of);
  double total = 0;
  for (const auto& [shape, count] : sorted) {
    if (!kept.count(shape)) continue;
    mix.shapes.push_back({shape, static_cast<double>(count)});
    total += count;
  }
  for (WeightedShape& w : mix.shapes) w.weight /= total;
  return mix;
}

Shape ShapeOf(const PlacementRequest& request, std::int64_t cpu_milli) {
  Shape s;
  s.cpu_milli = cpu_milli;
  s.nics = std::max(request.rdma_nics, 0);
  if (request.IsShared()) {
    s.gpus = request.shared.count;
    if (request.shared.cores > 0) {
      s.milli = static_cast<int>(
          std::clamp<std::int64_t>(request.shared.cores * kMilli / kFullGpuCores, 1, kMilli));
    } else if (request.shared.memory_mib == 0 && request.shared.memory_percent > 0) {
      s.milli = std::clamp(request.shared.memory_percent * kMilli / 100, 1, kMilli);
    } else {
      s.milli = kMilli;  // no compute limit: the vGPU may use the whole card's compute
    }
    s.models = request.shared.use_types;
  } else {
    s.gpus = request.gpus;
    s.milli = request.gpus > 0 ? kMilli : 0;
  }
  return s;
}

NodeState StateOf(const NodeTopology& topology, const NodeAllocation& allocated, GpuVendor vendor,
                  std::int64_t cpu_left) {
  NodeState n;
  n.cpu_left = cpu_left;
  for (int i = 0; i < static_cast<int>(topology.nics.size()); ++i)
    n.nics_left += RdmaNicFree(topology, allocated, i) ? 1 : 0;
  for (const Gpu& gpu : topology.gpus) {
    if (gpu.vendor != vendor) continue;
    if (n.model.empty()) n.model = gpu.model;
    const std::size_t i = Idx(gpu.index);
    const bool whole = i < allocated.gpu_exclusive.size() && allocated.gpu_exclusive[i];
    if (whole || !gpu.unusable.empty()) {
      n.milli_left.push_back(0);
      continue;
    }
    GpuShareUsage used;
    if (i < allocated.gpu_shares.size()) used = allocated.gpu_shares[i];
    if (used.shares == 0) {
      n.milli_left.push_back(kMilli);
      continue;
    }
    std::int64_t taken = std::clamp<std::int64_t>(used.cores, 0, kFullGpuCores) * kMilli / kFullGpuCores;
    const bool memory_known = gpu.memory_mib > 0 && used.memory_mib > 0;
    // Shares without a compute limit and without a known memory fraction may use the whole card.
    if (used.cores == 0 && !memory_known) taken = kMilli;
    if (memory_known) {
      const std::int64_t mem =
          std::min<std::int64_t>(used.memory_mib, static_cast<std::int64_t>(gpu.memory_mib));
      taken = std::max<std::int64_t>(taken, (mem * kMilli + static_cast<std::int64_t>(gpu.memory_mib) - 1) /
                                                static_cast<std::int64_t>(gpu.memory_mib));
    }
    n.milli_left.push_back(static_cast<int>(kMilli - std::clamp<std::int64_t>(taken, 0, kMilli)));
  }
  return n;
}

int MilliLeft(const NodeTopology& topology, const NodeAllocation& allocated, int gpu_index) {
  const auto gpu = std::find_if(topology.gpus.begin(), topology.gpus.end(),
                                [gpu_index](const Gpu& g) { return g.index == gpu_index; });
  if (gpu == topology.gpus.end()) return -1;
  // StateOf lists the vendor's GPUs in topology order.
  std::size_t position = 0;
  for (auto g = topology.gpus.begin(); g != gpu; ++g) position += g->vendor == gpu->vendor ? 1 : 0;
  const NodeState state = StateOf(topology, allocated, gpu->vendor);
  return position < state.milli_left.size() ? state.milli_left[position] : -1;
}

bool Fits(const NodeState& node, const Shape& shape) {
  if (node.cpu_left >= 0 && node.cpu_left < shape.cpu_milli) return false;
  if (node.nics_left < shape.nics) return false;
  if (shape.gpus == 0 || shape.milli == 0) return true;
  return ModelAccepted(node, shape) && GpusFit(node, shape);
}

double Fragmentation(const NodeState& node, const ShapeMix& mix, ForeignModels foreign) {
  const double idle = IdleTotal(node);
  if (idle <= 0) return 0;
  double frag = 0;
  for (const WeightedShape& w : mix.shapes) {
    const Shape& s = w.shape;
    if (foreign == ForeignModels::kNotCounted && s.gpus > 0 && s.milli > 0 && !ModelAccepted(node, s))
      continue;
    // A pod without GPU uses none of the idle GPU, whether it fits or not.
    if (s.gpus == 0 || s.milli == 0 || !Fits(node, s)) {
      frag += w.weight * idle;
      continue;
    }
    double stranded = 0;
    for (int left : node.milli_left) {
      if (left < s.milli) stranded += left;
    }
    frag += w.weight * stranded;
  }
  return frag;
}

NodeState After(const NodeState& node, const Shape& shape, const std::vector<int>& gpus) {
  NodeState out = node;
  if (out.cpu_left >= 0) out.cpu_left = std::max<std::int64_t>(0, out.cpu_left - shape.cpu_milli);
  out.nics_left = std::max(0, out.nics_left - shape.nics);
  const int take = shape.milli >= kMilli ? kMilli : shape.milli;
  for (int g : gpus) {
    if (g < 0 || Idx(g) >= out.milli_left.size()) continue;
    out.milli_left[Idx(g)] = std::max(0, out.milli_left[Idx(g)] - take);
  }
  return out;
}

std::uint64_t MixKey(const ShapeMix& mix) {
  Fnv1aHasher h;
  auto mix_in = [&h](std::uint64_t v) { h.U64(v); };
  for (const WeightedShape& w : mix.shapes) {
    mix_in(static_cast<std::uint64_t>(w.shape.gpus));
    mix_in(static_cast<std::uint64_t>(w.shape.milli));
    mix_in(static_cast<std::uint64_t>(w.shape.cpu_milli));
    mix_in(static_cast<std::uint64_t>(w.shape.nics));
    for (const std::string& m : w.shape.models) {
      for (const char c : m) mix_in(static_cast<unsigned char>(c));
      mix_in(0xff);  // ends one model's name
    }
    mix_in(w.shape.models.size());
    mix_in(std::bit_cast<std::uint64_t>(w.weight));
  }
  return h.value();
}

int BestShareGpu(const NodeState& node, const Shape& shape, const ShapeMix& mix) {
  int best = -1;
  double best_frag = 0;
  for (int g = 0; g < static_cast<int>(node.milli_left.size()); ++g) {
    const int left = node.milli_left[Idx(g)];
    if (left < shape.milli) continue;
    const double frag = Fragmentation(After(node, shape, {g}), mix);
    if (best < 0 || frag < best_frag - 1e-9 ||
        (frag <= best_frag + 1e-9 && left < node.milli_left[Idx(best)])) {
      best = g;
      best_frag = frag;
    }
  }
  return best;
}

void RemnantCounts::Add(int left) {
  if (left > 0 && left < kMilli) ++count_[Idx(left)];
}

void RemnantCounts::Add(const NodeState& node) {
  for (const int left : node.milli_left) Add(left);
}

void RemnantCounts::Add(const NodeTopology& topology, const NodeAllocation& allocated, GpuVendor vendor) {
  Add(StateOf(topology, allocated, vendor));
}

int RemnantCounts::Count(int left) const {
  return left > 0 && left < kMilli ? count_[Idx(left)] : 0;
}

long RemnantCounts::SumOfSquaresDelta(int left, int milli) const {
  long delta = 0;
  // (n - 1)^2 - n^2 for the gap the GPU leaves, (n + 1)^2 - n^2 for the one it joins.
  if (left > 0 && left < kMilli) delta += 1 - 2L * Count(left);
  const int after = left - std::max(milli, 0);
  if (after > 0 && after < kMilli) delta += 1 + 2L * Count(after);
  return delta;
}

}  // namespace toposched::packing
