#include "nvlink_affinity/nvlink_affinity.h"

#include <gtest/gtest.h>

#include "testing/framework_testing.h"

namespace toposched::plugins::nvlink_affinity {
namespace {

using framework::CycleState;
using toposched::testing::CycleWith;
using toposched::testing::Fails;
using toposched::testing::Fits;
using toposched::testing::NodeBuilder;
using toposched::testing::PlacementOn;
using toposched::testing::PresetTopology;
using toposched::testing::RequestBuilder;

TEST(NvlinkAffinityTest, Formula) {
  struct Case {
    std::string name;
    int worst, nv_pairs, pairs, score;
  };
  const std::vector<Case> cases = {
      {"all NV", 0, 28, 28, 100},
      {"one PIX pair", 1, 0, 1, 70},        // 70 - 0 + 0
      {"half NV, worst PIX", 1, 1, 2, 77},  // 70 + round(6.5) = 77
      {"half NV, worst PXB", 2, 3, 6, 63},  // 56 + round(6.5) = 63
      {"one SYS among NV", 6, 5, 6, 11},    // 0 + round(10.83) = 11
      {"all SYS", 6, 0, 6, 0},
      {"no pairs", 0, 0, 0, 100},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(NvlinkScore(c.worst, c.nv_pairs, c.pairs), c.score);
  }
}

TEST(NvlinkAffinityTest, WorstPairDominates) {
  for (int pairs = 1; pairs <= 28; ++pairs) {
    for (int r = 1; r < 6; ++r) {
      // Lowest at r: no NVLink at all. Highest at r+1: every pair but one NVLinked.
      EXPECT_GT(NvlinkScore(r, 0, pairs), NvlinkScore(r + 1, pairs - 1, pairs)) << pairs << " " << r;
    }
    EXPECT_LT(NvlinkScore(1, pairs - 1, pairs), 100) << "any PCIe pair scores below all-NVLink";
  }
}

TEST(NvlinkAffinityTest, ScoresTheCachedPlacement) {
  // pcie-4gpu: NVLink bridges join 0-1 and 2-3 (NV12); 0-2 crosses sockets (SYS, rank 6).
  const auto& t = *PresetTopology("pcie-4gpu");
  Placement bridged = PlacementOn(t, {0, 1}, {});
  bridged.cost.worst_gpu_gpu = 0;
  bridged.cost.neg_nvlinks = -12;
  Placement three = PlacementOn(t, {0, 1, 2}, {});
  three.cost.worst_gpu_gpu = 6;
  three.cost.neg_nvlinks = -12;
  struct Case {
    std::string name;
    PlacementOutcome outcome;
    int score;
    std::string explanation;
  };
  const std::vector<Case> cases = {
      {"bridged pair", Fits(bridged), 100, "1 of 1 GPU pairs on NVLink (12 links), worst pair NV -> 100"},
      // Pairs 0-1 NV, 0-2 SYS, 1-2 SYS: 70 - 14*5 + round(13/3) = 0 + 4 = 4.
      {"three across sockets", Fits(three), 4,
       "1 of 3 GPU pairs on NVLink (12 links), worst pair SYS (rank 6) -> 70 - 14*5 + round(13*1/3) = 4"},
      {"one GPU", Fits(PlacementOn(t, {3}, {})), 100, "1 GPU(s): no GPU pairs, neutral -> 100"},
      {"no placement", Fails(FitFailure::kNotEnoughGpus, ""), 0, "no placement on this node -> 0"},
  };
  const NvlinkAffinity plugin;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CycleState state = CycleWith(RequestBuilder().Gpus(2).Build(), c.outcome);
    const framework::ScoreResult r = plugin.Score(state, NodeBuilder("n", "pcie-4gpu").Build());
    EXPECT_EQ(r.score, c.score);
    EXPECT_EQ(r.explanation, c.explanation);
  }
}

TEST(NvlinkAffinityWithEngineTest, Presets) {
  struct Case {
    std::string preset;
    int gpus;
    std::vector<int> busy;
    int score;
  };
  const std::vector<Case> cases = {
      {"hgx-h100-8gpu", 8, {}, 100},  // NVSwitch: every pair NV18
      {"pcie-4gpu", 2, {}, 100},      // the engine takes a bridged pair
      {"pcie-4gpu", 2, {1, 3}, 0},    // only 0 and 2 free: SYS, no NVLink: 70 - 70 + 0
      {"inference-4gpu", 2, {}, 70},  // L40S, no NVLink: best pair shares a switch, PIX
  };
  const NvlinkAffinity plugin;
  PlacementMemo memo;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.preset + " " + std::to_string(c.gpus));
    CycleState state(RequestBuilder().Gpus(c.gpus).Build(),
                     [&memo](const NodeTopology& t, std::string_view, const NodeAllocation& a,
                             const PlacementRequest& r, SharePacking) { return memo.Place(t, a, r); });
    const framework::ScoreResult r =
        plugin.Score(state, NodeBuilder("n", c.preset).ExclusiveGpus(c.busy).Build());
    EXPECT_EQ(r.score, c.score) << r.explanation;
  }
}

}  // namespace
}  // namespace toposched::plugins::nvlink_affinity
