#include "fragmentation/fragmentation.h"

#include <gtest/gtest.h>

#include "testing/framework_testing.h"

namespace toposched::plugins::fragmentation {
namespace {

using framework::CycleState;
using toposched::testing::CycleWith;
using toposched::testing::Fits;
using toposched::testing::NodeBuilder;
using toposched::testing::PlacementOn;
using toposched::testing::PresetTopology;
using toposched::testing::RequestBuilder;

// hgx-h100-8gpu has 4 switch groups: {GPU0,1 NIC0,1} {GPU2,3 NIC2,3} {GPU4,5 NIC4,5} {GPU6,7 NIC6,7}.
TEST(FragmentationTest, ScoresGroupsBroken) {
  struct Case {
    std::string name;
    std::string preset;
    std::vector<int> busy_gpus, busy_nics;
    std::vector<int> gpus, nics;
    int score;
    std::string explanation;
  };
  const std::vector<Case> cases = {
      {"breaks one of four",
       "hgx-h100-8gpu",
       {},
       {},
       {0, 1},
       {0, 1},
       75,
       "breaks 1 of 4 intact switch groups (3 left, 4 on the node) -> 100 - round(100*1/4) = 75"},
      {"stays in a broken group",
       "hgx-h100-8gpu",
       {2},
       {},
       {3},
       {},
       100,
       "breaks 0 of 3 intact switch groups (3 left, 4 on the node) -> 100 - round(100*0/4) = 100"},
      {"a used NIC breaks its group too",
       "hgx-h100-8gpu",
       {},
       {7},
       {6},
       {},
       100,
       "breaks 0 of 3 intact switch groups (3 left, 4 on the node) -> 100 - round(100*0/4) = 100"},
      // The last intact group of a busy node costs what one group of a pristine node costs.
      {"breaks the last intact group",
       "hgx-h100-8gpu",
       {0, 2, 4},
       {},
       {6},
       {},
       75,
       "breaks 1 of 1 intact switch groups (0 left, 4 on the node) -> 100 - round(100*1/4) = 75"},
      {"a NIC alone breaks a group",
       "hgx-h100-8gpu",
       {},
       {},
       {},
       {5},
       75,
       "breaks 1 of 4 intact switch groups (3 left, 4 on the node) -> 100 - round(100*1/4) = 75"},
      {"spanning two groups",
       "hgx-h100-8gpu",
       {},
       {},
       {1, 2},
       {},
       50,
       "breaks 2 of 4 intact switch groups (2 left, 4 on the node) -> 100 - round(100*2/4) = 50"},
      {"the whole node",
       "hgx-h100-8gpu",
       {},
       {},
       {0, 1, 2, 3, 4, 5, 6, 7},
       {},
       0,
       "breaks 4 of 4 intact switch groups (0 left, 4 on the node) -> 100 - round(100*4/4) = 0"},
      {"inference box, two groups",
       "inference-4gpu",
       {},
       {},
       {0},
       {},
       50,
       "breaks 1 of 2 intact switch groups (1 left, 2 on the node) -> 100 - round(100*1/2) = 50"},
      {"flat VM",
       "cloud-vm-8gpu",
       {},
       {},
       {0},
       {0},
       100,
       "no PCIe switch groups on this node (flat or root-port topology): neutral -> 100"},
      {"root ports",
       "pcie-4gpu",
       {},
       {},
       {0, 1},
       {},
       100,
       "no PCIe switch groups on this node (flat or root-port topology): neutral -> 100"},
  };
  const Fragmentation plugin;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto& t = *PresetTopology(c.preset);
    CycleState state = CycleWith(RequestBuilder().Gpus(1).Build(), Fits(PlacementOn(t, c.gpus, c.nics)));
    const framework::NodeInfo node =
        NodeBuilder("n", c.preset).ExclusiveGpus(c.busy_gpus).UsedNics(c.busy_nics).Build();
    const framework::ScoreResult r = plugin.Score(state, node);
    EXPECT_EQ(r.score, c.score);
    EXPECT_EQ(r.explanation, c.explanation);
  }
}

TEST(FragmentationTest, SharedGpusBreakGroups) {
  const auto& t = *PresetTopology("hgx-h100-8gpu");
  const framework::NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").Shares(4, 1, 1000, 0).Build();
  const GroupCount c = CountIntactGroups(t, node.allocated, PlacementOn(t, {5}, {}));
  EXPECT_EQ(c.groups, 4);
  EXPECT_EQ(c.intact_before, 3) << "GPU4 carries a vGPU: its group is not intact";
  EXPECT_EQ(c.intact_after, 3) << "GPU5 is in that same group";
}

// With the engine: it picks the GPU that breaks nothing, and both count intact groups alike.
TEST(FragmentationWithEngineTest, EngineAgrees) {
  struct Case {
    std::string name;
    PlacementRequest request;
    std::vector<int> busy;
    int score;
  };
  const std::vector<Case> cases = {
      {"one GPU next to a busy one", RequestBuilder().Gpus(1).Build(), {2}, 100},            // GPU3
      {"two GPUs on a free node", RequestBuilder().Gpus(2).Nics(2).Build(), {}, 75},         // one group
      {"a vGPU next to a busy GPU", RequestBuilder().Shared(1, 1000, 0).Build(), {6}, 100},  // GPU7
  };
  const Fragmentation plugin;
  PlacementMemo memo;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CycleState state(c.request,
                     [&memo](const NodeTopology& t, std::string_view, const NodeAllocation& a,
                             const PlacementRequest& r, SharePacking) { return memo.Place(t, a, r); });
    const framework::NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").ExclusiveGpus(c.busy).Build();
    EXPECT_EQ(plugin.Score(state, node).score, c.score) << plugin.Score(state, node).explanation;
    const PlacementOutcome& o = state.Outcome(node);
    ASSERT_TRUE(o.ok()) << o.detail;
    EXPECT_EQ(CountIntactGroups(*node.topology, node.allocated, *o.placement).intact_after,
              -o.placement->cost.neg_intact_groups)
        << "one definition of an intact group";
  }
}

}  // namespace
}  // namespace toposched::plugins::fragmentation
