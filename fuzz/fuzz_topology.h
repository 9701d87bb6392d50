#pragma once
// The node the annotation targets decode against: the synthetic HGX H100 preset (8 GPUs, 8 RDMA
// NICs, 2 NUMA nodes) with a UUID per GPU, as a real agent publishes it.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "toposched/topology/node_topology.h"
#include "toposched/topology/synthetic.h"

namespace toposched::fuzz {

inline const NodeTopology& HgxTopology() {
  static const NodeTopology topology = [] {
    auto spec = SyntheticPreset("hgx-h100-8gpu");
    auto generated = spec.ok() ? GenerateSynthetic(*spec) : Result<NodeTopology>(spec.error());
    if (!generated.ok()) {
      std::fprintf(stderr, "fuzz: cannot build the HGX preset: %s\n", generated.error().message().c_str());
      std::abort();
    }
    NodeTopology t = std::move(generated).value();
    for (Gpu& g : t.gpus) g.uuid = "GPU-0000000" + std::to_string(g.index) + "-1111-2222-3333-444444444444";
    return t;
  }();
  return topology;
}

}  // namespace toposched::fuzz
