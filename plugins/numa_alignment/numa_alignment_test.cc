#include "numa_alignment/numa_alignment.h"

#include <gtest/gtest.h>

#include "testing/framework_testing.h"

namespace toposched::plugins::numa_alignment {
namespace {

using framework::CycleState;
using toposched::testing::CycleWith;
using toposched::testing::Fits;
using toposched::testing::NodeBuilder;
using toposched::testing::PlacementOn;
using toposched::testing::PresetTopology;
using toposched::testing::RequestBuilder;

// hgx-h100-8gpu: GPUs 0-3 and NICs 0-3 on NUMA 0, GPUs 4-7 and NICs 4-7 on NUMA 1.
TEST(NumaAlignmentTest, ShareOnTheMajorityNumaNode) {
  const auto& t = *PresetTopology("hgx-h100-8gpu");
  struct Case {
    std::string name;
    Placement placement;
    int score;
    std::string explanation;
  };
  const std::vector<Case> cases = {
      {"one NUMA node", PlacementOn(t, {0, 1}, {0, 1}), 100,
       "4 of 4 devices (GPUs and NICs) on NUMA 0 -> round(100*4/4) = 100"},
      {"whole node", PlacementOn(t, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7}), 50,
       "8 of 16 devices (GPUs and NICs) on NUMA 0 -> round(100*8/16) = 50"},  // tie: lowest id
      {"NIC on the other socket", PlacementOn(t, {0, 1, 2}, {4}), 75,
       "3 of 4 devices (GPUs and NICs) on NUMA 0 -> round(100*3/4) = 75"},
      {"majority on NUMA 1", PlacementOn(t, {3, 4, 5}, {}), 67,
       "2 of 3 devices (GPUs and NICs) on NUMA 1 -> round(100*2/3) = 67"},
      {"nothing placed", Placement{}, 100, "no devices placed: neutral -> 100"},
  };
  const NumaAlignment plugin;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CycleState state = CycleWith(RequestBuilder().Gpus(2).Build(), Fits(c.placement));
    const framework::ScoreResult r = plugin.Score(state, NodeBuilder("n", "hgx-h100-8gpu").Build());
    EXPECT_EQ(r.score, c.score);
    EXPECT_EQ(r.explanation, c.explanation);
  }
}

TEST(NumaAlignmentTest, UnknownLocalityIsLeftOut) {
  NodeTopology t = *PresetTopology("hgx-h100-8gpu");
  t.gpus[0].numa = -1;
  t.gpus[5].numa = -1;
  framework::NodeInfo node;
  node.name = "n";
  node.topology = std::make_shared<const NodeTopology>(t);
  const NumaAlignment plugin;

  CycleState some = CycleWith(RequestBuilder().Gpus(3).Build(), Fits(PlacementOn(t, {0, 1, 4}, {})));
  const framework::ScoreResult r = plugin.Score(some, node);
  EXPECT_EQ(r.score, 50);  // GPU1 on NUMA 0, GPU4 on NUMA 1, GPU0 unknown: 1 of 2
  EXPECT_NE(r.explanation.find("1 of unknown locality not counted"), std::string::npos) << r.explanation;

  CycleState none = CycleWith(RequestBuilder().Gpus(2).Build(), Fits(PlacementOn(t, {0, 5}, {})));
  EXPECT_EQ(plugin.Score(none, node).score, 100);
  EXPECT_EQ(plugin.Score(none, node).explanation, "NUMA locality of the devices unknown: neutral -> 100");
}

TEST(NumaAlignmentWithEngineTest, AlignedPlacementsStayOnOneSocket) {
  const NumaAlignment plugin;
  PlacementMemo memo;
  CycleState state(RequestBuilder().Gpus(4).Nics(4).Build(),
                   [&memo](const NodeTopology& t, std::string_view, const NodeAllocation& a,
                           const PlacementRequest& r, SharePacking) { return memo.Place(t, a, r); });
  // 4 GPUs + 4 NICs fit in the two PIX switch groups of one socket.
  EXPECT_EQ(plugin.Score(state, NodeBuilder("n", "hgx-h100-8gpu").Build()).score, 100);
}

}  // namespace
}  // namespace toposched::plugins::numa_alignment
