#include "rdma_affinity/rdma_affinity.h"

#include <gtest/gtest.h>

#include "testing/framework_testing.h"

namespace toposched::plugins::rdma_affinity {
namespace {

using toposched::testing::PresetTopology;

framework::CycleState Cycle(int rdma_nics) {
  PlacementRequest request;
  request.gpus = 1;
  request.rdma_nics = rdma_nics;
  return framework::CycleState(request, [](const NodeTopology&, std::string_view, const NodeAllocation&,
                                           const PlacementRequest&, SharePacking) {
    return PlacementOutcome{};  // the plugin never asks the engine
  });
}

framework::NodeInfo Node(const char* preset, int used_nics) {
  framework::NodeInfo node;
  node.name = preset;
  node.topology = PresetTopology(preset);
  node.allocated.nic_used.assign(node.topology->nics.size(), false);
  for (int n = 0; n < used_nics; ++n) node.allocated.nic_used[static_cast<std::size_t>(n)] = true;
  return node;
}

TEST(RdmaAffinityTest, NicLessPodsPreferNodesWhoseNicsAreGoneOrAbsent) {
  const RdmaAffinity plugin;
  struct Case {
    const char* name;
    int pod_nics;
    const char* preset;
    int used_nics;
    int score;
  };
  const Case cases[] = {
      {"pod with NICs: neutral", 2, "hgx-h100-8gpu", 0, 100},
      {"no RDMA NICs on the node", 0, "inference-4gpu", 0, 100},
      {"all 8 NICs free", 0, "hgx-h100-8gpu", 0, 0},              // round(100*0/8)
      {"6 of 8 used", 0, "hgx-h100-8gpu", 6, 75},                 // round(100*6/8)
      {"every NIC used", 0, "hgx-h100-8gpu", 8, 100},             // round(100*8/8)
      {"1 of 8 used rounds half up", 0, "cloud-vm-8gpu", 1, 13},  // round(12.5)
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    framework::CycleState state = Cycle(c.pod_nics);
    const framework::ScoreResult r = plugin.Score(state, Node(c.preset, c.used_nics));
    EXPECT_EQ(r.score, c.score) << r.explanation;
    EXPECT_FALSE(r.explanation.empty());
  }
}

}  // namespace
}  // namespace toposched::plugins::rdma_affinity
