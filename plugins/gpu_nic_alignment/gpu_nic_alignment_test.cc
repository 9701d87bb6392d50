#include "gpu_nic_alignment/gpu_nic_alignment.h"

#include <gtest/gtest.h>

#include "testing/framework_testing.h"
#include "toposched/framework/framework.h"

namespace toposched::plugins::gpu_nic_alignment {
namespace {

using framework::CycleState;
using toposched::testing::CycleWith;
using toposched::testing::Fails;
using toposched::testing::Fits;
using toposched::testing::NodeBuilder;
using toposched::testing::PlacementOn;
using toposched::testing::PresetTopology;
using toposched::testing::RequestBuilder;

TEST(GpuNicAlignmentTest, Formula) {
  struct Case {
    std::string name;
    int worst, sum, pairs, score;
  };
  const std::vector<Case> cases = {
      {"all PIX", 1, 8, 8, 100},           // 100 - 0 - 0
      {"one PXB among 8", 2, 9, 8, 83},    // m = 1.125: 100 - 17 - round(0.375) = 83
      {"all PXB", 2, 16, 8, 80},           // 100 - 17 - round(3) = 80
      {"PHB and PIX", 3, 4, 2, 63},        // m = 2: 100 - 34 - 3 = 63
      {"one NODE pair", 4, 4, 1, 40},      // 100 - 51 - 9 = 40
      {"one SYS(pkg) pair", 5, 5, 1, 20},  // 100 - 68 - 12 = 20
      {"SYS and NODE", 6, 10, 2, 3},       // m = 5: 100 - 85 - 12 = 3
      {"SYS and PIX", 6, 7, 2, 7},         // m = 3.5: 100 - 85 - round(7.5) = 7
      {"all SYS", 6, 48, 8, 0},            // 100 - 85 - 15 = 0
      {"no pairs", 0, 0, 0, 100},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(AlignmentScore(c.worst, c.sum, c.pairs), c.score);
  }
}

// The worst class orders nodes first: every score with worst rank r beats every score with r+1.
TEST(GpuNicAlignmentTest, WorstClassDominatesTheMean) {
  for (int pairs = 1; pairs <= 8; ++pairs) {
    for (int r = 1; r < 6; ++r) {
      // Lowest score at r: every pair at r. Highest at r+1: one pair at r+1, the rest PIX.
      const int lowest_at_r = AlignmentScore(r, r * pairs, pairs);
      const int highest_at_next = AlignmentScore(r + 1, (r + 1) + (pairs - 1), pairs);
      EXPECT_GT(lowest_at_r, highest_at_next) << "pairs " << pairs << " r " << r;
    }
  }
}

TEST(GpuNicAlignmentTest, ScoresTheCachedPlacement) {
  const auto& t = *PresetTopology("hgx-h100-8gpu");
  Placement pix = PlacementOn(t, {0, 1}, {0, 1});
  pix.cost.worst_gpu_nic = 1;
  pix.cost.sum_gpu_nic = 2;
  Placement node = PlacementOn(t, {6, 7}, {4, 5});
  node.cost.worst_gpu_nic = 4;
  node.cost.sum_gpu_nic = 8;
  node.best_possible_worst = 1;
  struct Case {
    std::string name;
    PlacementRequest request;
    PlacementOutcome outcome;
    int score;
    std::string explanation;
  };
  const std::vector<Case> cases = {
      {"all PIX", RequestBuilder().Gpus(2).Nics(2).Build(), Fits(pix), 100,
       "worst GPU->NIC PIX (rank 1), sum 2 over 2 pairs (mean 1.00) -> 100 - 17*0 - round(3*(1.00-1)) = 100"},
      // 100 - 17*3 - round(3*3) = 40; the node could do better were it empty.
      {"NODE on a busy node", RequestBuilder().Gpus(2).Nics(2).Build(), Fits(node), 40,
       "worst GPU->NIC NODE (rank 4), sum 8 over 2 pairs (mean 4.00) -> 100 - 17*3 - round(3*(4.00-1)) = 40; "
       "this node could give PIX if its devices were free"},
      {"no NICs asked", RequestBuilder().Gpus(2).Build(), Fits(PlacementOn(t, {0, 1}, {})), 100,
       "no RDMA NICs requested: neutral -> 100"},
      {"no placement", RequestBuilder().Gpus(2).Nics(2).Build(), Fails(FitFailure::kNotEnoughGpus, ""), 0,
       "no placement on this node -> 0"},
  };
  const GpuNicAlignment plugin;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CycleState state = CycleWith(c.request, c.outcome);
    const framework::ScoreResult r = plugin.Score(state, NodeBuilder("n", "hgx-h100-8gpu").Build());
    EXPECT_EQ(r.score, c.score);
    EXPECT_EQ(r.explanation, c.explanation);
  }
}

// With the engine: the presets' best 2 GPU + 2 NIC placements.
TEST(GpuNicAlignmentWithEngineTest, Presets) {
  struct Case {
    std::string preset;
    std::vector<int> busy_gpus, busy_nics;
    int score;
  };
  const std::vector<Case> cases = {
      {"hgx-h100-8gpu", {}, {}, 100},  // GPUs 0,1 with mlx5_0,1: PIX
      {"hgx-a100-8gpu", {}, {}, 80},   // two switch levels: PXB; 100 - 17 - 3
      {"cloud-vm-8gpu", {}, {}, 40},   // no PCIe tree: NODE; 100 - 51 - 9
      // Only GPUs 6,7 free, their NICs 6,7 used: NICs 4,5 on the other switch of socket 1, NODE.
      {"hgx-h100-8gpu", {0, 1, 2, 3, 4, 5}, {6, 7}, 40},
  };
  const GpuNicAlignment plugin;
  PlacementMemo memo;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.preset);
    CycleState state(RequestBuilder().Gpus(2).Nics(2).Build(),
                     [&memo](const NodeTopology& t, std::string_view, const NodeAllocation& a,
                             const PlacementRequest& r, SharePacking) { return memo.Place(t, a, r); });
    const framework::NodeInfo node =
        NodeBuilder("n", c.preset).ExclusiveGpus(c.busy_gpus).UsedNics(c.busy_nics).Build();
    const framework::ScoreResult r = plugin.Score(state, node);
    EXPECT_EQ(r.score, c.score) << r.explanation;
  }
}

}  // namespace
}  // namespace toposched::plugins::gpu_nic_alignment
