#include "toposched/placement/rare_class.h"

#include <algorithm>
#include <map>

namespace toposched::packing {

NodeHardware HardwareOf(const NodeTopology& topology) {
  NodeHardware h;
  for (const Gpu& g : topology.gpus) ++h.gpus[VendorIndex(g.vendor)];
  h.rdma_nics = topology.RdmaNicCount();
  return h;
}

bool HostsWhenEmpty(const NodeHardware& node, GpuVendor vendor, const Shape& shape) {
  return node.gpus[VendorIndex(vendor)] >= std::max(shape.gpus, shape.milli < kMilli ? 1 : 0) &&
         node.rdma_nics >= shape.nics;
}

HardwareCensus CensusOf(std::span<const NodeHardware> nodes) {
  std::map<NodeHardware, int> counts;
  for (const NodeHardware& n : nodes) ++counts[n];
  return {counts.begin(), counts.end()};
}

namespace {

int Hosts(const HardwareCensus& census, GpuVendor vendor, const Shape& shape) {
  int hosts = 0;
  for (const auto& [hardware, count] : census) {
    if (HostsWhenEmpty(hardware, vendor, shape)) hosts += count;
  }
  return hosts;
}

}  // namespace

std::optional<Shape> RareShape(const ShapeMix& mix, const Shape& pod, GpuVendor vendor,
                               const HardwareCensus& census) {
  if (pod.nics <= 0) return std::nullopt;
  const Shape* rare = nullptr;
  int rare_hosts = 0;
  for (const WeightedShape& w : mix.shapes) {
    const Shape& s = w.shape;
    if (s.nics <= 0) continue;
    const int hosts = Hosts(census, vendor, s);
    if (hosts == 0) continue;
    const bool rarer = rare == nullptr || hosts < rare_hosts ||
                       (hosts == rare_hosts && std::pair(s.gpus, s.nics) > std::pair(rare->gpus, rare->nics));
    if (rarer) {
      rare = &s;
      rare_hosts = hosts;
    }
  }
  if (rare == nullptr || rare_hosts >= Hosts(census, vendor, pod)) return std::nullopt;
  return *rare;
}

}  // namespace toposched::packing
