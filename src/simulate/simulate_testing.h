#pragma once
// Helpers the simulator's tests share: synthetic presets, a node's taken devices, a whole-GPU
// request. Test-only.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "toposched/framework/allocation.h"
#include "toposched/placement/request.h"
#include "toposched/topology/synthetic.h"

namespace toposched::simulate::testing {

inline std::shared_ptr<const NodeTopology> Preset(const char* name) {
  auto spec = SyntheticPreset(name);
  EXPECT_TRUE(spec.ok());
  auto t = GenerateSynthetic(*spec);
  EXPECT_TRUE(t.ok());
  return std::make_shared<const NodeTopology>(std::move(t).value());
}

// An allocation with `gpus` exclusive and `nics` in use.
inline NodeAllocation Taken(const NodeTopology& t, const std::vector<int>& gpus,
                            const std::vector<int>& nics) {
  NodeAllocation a;
  a.gpu_exclusive.assign(t.gpus.size(), false);
  a.nic_used.assign(t.nics.size(), false);
  for (int g : gpus) a.gpu_exclusive[static_cast<std::size_t>(g)] = true;
  for (int n : nics) a.nic_used[static_cast<std::size_t>(n)] = true;
  return a;
}

inline PlacementRequest Whole(int gpus, int nics) {
  PlacementRequest r;
  r.pod_name = "p";
  r.gpus = gpus;
  r.rdma_nics = nics;
  return r;
}

}  // namespace toposched::simulate::testing
